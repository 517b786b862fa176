"""Interop: confluent-kafka (librdkafka) against a real `odradek broker` process.

Everything talks to 127.0.0.1 only. Consumers use manual assignment and never commit
(odradek has no group coordinator yet): a group.id is set because librdkafka insists,
but auto commit and offset store are off.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

pytestmark = pytest.mark.interop

TIMEOUT = 30.0  # seconds, for any single admin call / flush


# --------------------------------------------------------------------------- helpers


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(adm: AdminClient, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    fut = adm.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)[name]
    assert fut.result(TIMEOUT) is None


def admin_error(fut) -> KafkaError:
    """The KafkaError a failed admin future raises (fails the test if it succeeds)."""
    with pytest.raises(KafkaException) as info:
        fut.result(TIMEOUT)
    err = info.value.args[0]
    assert isinstance(err, KafkaError), err
    return err


def make_consumer(bootstrap: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "odradek-interop-unused",  # required by librdkafka, never used: no subscribe/commit
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 100,
        "check.crcs": True,  # verify every batch's CRC32C as served by the broker
    }
    conf.update(extra)
    return Consumer(conf)


def consume_exactly(consumer: Consumer, n: int, timeout: float = 60.0, max_polls: int = 100_000) -> list:
    """Consume until `n` messages arrived; then make sure nothing more shows up briefly."""
    out = []
    deadline = time.monotonic() + timeout
    polls = 0
    while len(out) < n:
        assert time.monotonic() < deadline, f"timed out after {timeout}s with {len(out)} of {n} messages consumed"
        assert polls < max_polls, f"gave up after {polls} polls with {len(out)} of {n} messages consumed"
        polls += 1
        for m in consumer.consume(num_messages=10_000, timeout=0.5):
            assert m.error() is None, f"consumer error: {m.error()}"
            out.append(m)
    extra = consumer.consume(num_messages=100, timeout=0.3)
    assert not [m for m in extra if m.error() is None], f"{len(extra)} messages beyond the {n} expected"
    return out


def flush_all(producer: Producer, timeout: float = TIMEOUT) -> None:
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} messages still undelivered after flush({timeout})"


def produce_with_backpressure(producer: Producer, deadline: float, **kwargs) -> None:
    """produce(), polling while librdkafka's local queue is full (bounded by `deadline`)."""
    for _ in range(100_000):
        try:
            producer.produce(**kwargs)
            return
        except BufferError:
            assert time.monotonic() < deadline, "local producer queue stayed full until the deadline"
            producer.poll(0.05)
    raise AssertionError("local producer queue stayed full for 100000 polls")


# ------------------------------------------------------------- produce / consume, all codecs

N_RECORDS = 100_000
N_PARTITIONS = 6


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_100k_every_field(broker, topic_name, codec):
    bootstrap = broker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, N_PARTITIONS)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 200_000,
        }
    )
    base_ts = int(time.time() * 1000) - 3_600_000  # an hour ago: well inside retention
    sent: dict[bytes, tuple] = {}  # key -> (value, timestamp, headers, explicit partition or None)
    reports: dict[bytes, tuple[int, int, tuple]] = {}  # key -> (partition, offset, timestamp)
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append((msg.key(), err))
        else:
            reports[msg.key()] = (msg.partition(), msg.offset(), msg.timestamp())

    deadline = time.monotonic() + 60
    for i in range(N_RECORDS):
        key = b"key-%06d" % i
        # varied, compressible-but-not-trivial values; a few empty ones
        value = b"" if i % 997 == 0 else (b"value-%d-" % i) * (1 + i % 5)
        ts = base_ts + i * 3  # strictly increasing per partition, distinct
        headers = [("idx", b"%d" % i)]
        if i % 3 == 0:
            headers.append(("nil", None))
        elif i % 3 == 1:
            headers.append(("codec", codec.encode()))
        partition = None if i % 7 == 0 else i % N_PARTITIONS  # every 7th goes through the partitioner
        sent[key] = (value, ts, headers, partition)
        kwargs = dict(topic=topic_name, key=key, value=value, timestamp=ts, headers=headers, on_delivery=on_delivery)
        if partition is not None:
            kwargs["partition"] = partition
        produce_with_backpressure(producer, deadline, **kwargs)
        if i % 5000 == 0:
            producer.poll(0)
    flush_all(producer, 60)

    assert not errors, f"{len(errors)} delivery failures, first: {errors[:3]}"
    assert len(reports) == N_RECORDS, f"{len(reports)} delivery reports for {N_RECORDS} records"

    by_partition: dict[int, list[int]] = {}
    for key, (partition, offset, ts) in reports.items():
        value, want_ts, headers, explicit = sent[key]
        if explicit is not None:
            assert partition == explicit, f"{key!r} went to partition {partition}, asked for {explicit}"
        assert 0 <= partition < N_PARTITIONS
        assert ts == (TIMESTAMP_CREATE_TIME, want_ts), f"delivery report timestamp for {key!r}: {ts}"
        by_partition.setdefault(partition, []).append(offset)
    assert sorted(by_partition) == list(range(N_PARTITIONS)), f"partitions used: {sorted(by_partition)}"
    for p, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: offsets are not 0..{len(offsets) - 1}"
    expected = {(p, o): key for key, (p, o, _) in reports.items()}

    consumer = make_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(N_PARTITIONS)])
        messages = consume_exactly(consumer, N_RECORDS)
        seen: set[tuple[int, int]] = set()
        last_offset = {p: -1 for p in range(N_PARTITIONS)}
        for m in messages:
            assert m.topic() == topic_name
            where = (m.partition(), m.offset())
            assert where not in seen, f"duplicate record at partition {where[0]} offset {where[1]}"
            seen.add(where)
            assert m.offset() == last_offset[m.partition()] + 1, (
                f"partition {m.partition()}: offset {m.offset()} after {last_offset[m.partition()]} (gap or reorder)"
            )
            last_offset[m.partition()] = m.offset()
            key = expected.get(where)
            assert key is not None, f"unexpected record at partition {where[0]} offset {where[1]}"
            value, ts, headers, _ = sent[key]
            assert m.key() == key
            assert (m.value() or b"") == value, f"value of {key!r}"
            assert m.timestamp() == (TIMESTAMP_CREATE_TIME, ts), f"timestamp of {key!r}: {m.timestamp()} != {ts}"
            assert m.headers() == headers, f"headers of {key!r}: {m.headers()} != {headers}"
        assert seen == set(expected), "consumed positions differ from the delivery reports"

        for p in range(N_PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10)
            assert (low, high) == (0, len(by_partition[p])), f"partition {p} watermarks {(low, high)}"

        # seek back into the middle of partition 0 and read from there
        mid = len(by_partition[0]) // 2
        consumer.seek(TopicPartition(topic_name, 0, mid))
        deadline = time.monotonic() + 20
        first = None
        for _ in range(1000):
            assert time.monotonic() < deadline, "no record after seek within 20s"
            batch = [m for m in consumer.consume(num_messages=100, timeout=0.5) if m.error() is None]
            batch = [m for m in batch if m.partition() == 0]
            if batch:
                first = batch[0]
                break
        assert first is not None, "no record from partition 0 after seek"
        assert first.offset() == mid
        assert first.key() == expected[(0, mid)]
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- admin


def test_admin_create_describe_configs_partitions_delete(broker, topic_name):
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 3, {"retention.ms": "3600000", "cleanup.policy": "compact"})

    md = adm.list_topics(topic_name, timeout=TIMEOUT)
    assert topic_name in md.topics
    tmd = md.topics[topic_name]
    assert tmd.error is None, tmd.error
    assert sorted(tmd.partitions) == [0, 1, 2]
    assert [b.id for b in md.brokers.values()] == [1]
    for pmd in tmd.partitions.values():
        assert pmd.leader == 1 and list(pmd.replicas) == [1] and list(pmd.isrs) == [1]

    def describe(name):
        return adm.describe_topics(TopicCollection([name]))[name].result(TIMEOUT)

    d1, d2 = describe(topic_name), describe(topic_name)
    assert d1.name == topic_name
    assert len(d1.partitions) == 3
    tid = d1.topic_id
    assert (tid.get_most_significant_bits(), tid.get_least_significant_bits()) != (0, 0), "zero topic id"
    assert str(d2.topic_id) == str(tid), "topic id changed between two describe calls"
    assert not d1.is_internal

    # topic configs: overrides are DYNAMIC_TOPIC_CONFIG, the rest defaults
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = adm.describe_configs([res])[res].result(TIMEOUT)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == str(1 << 30)
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # broker configs for broker "1"
    bres = ConfigResource(ResourceType.BROKER, "1")
    bconfigs = adm.describe_configs([bres])[bres].result(TIMEOUT)
    assert bconfigs["node.id"].value == "1"
    assert bconfigs["num.partitions"].value == "1"
    assert bconfigs["advertised.listeners"].value == f"PLAINTEXT://{broker.bootstrap}"

    cluster = adm.describe_cluster(request_timeout=10).result(TIMEOUT)
    assert cluster.cluster_id, "empty cluster id"
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", broker.port)]
    assert cluster.controller is not None and cluster.controller.id == 1
    assert adm.describe_cluster().result(TIMEOUT).cluster_id == cluster.cluster_id

    # partitions: increase works, decrease and "same" are INVALID_PARTITIONS
    assert adm.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(TIMEOUT) is None
    assert len(describe(topic_name).partitions) == 5
    err = admin_error(adm.create_partitions([NewPartitions(topic_name, 2)])[topic_name])
    assert err.code() == KafkaError.INVALID_PARTITIONS, err
    err = admin_error(adm.create_partitions([NewPartitions(topic_name, 5)])[topic_name])
    assert err.code() == KafkaError.INVALID_PARTITIONS, err
    assert str(describe(topic_name).topic_id) == str(tid), "topic id changed by CreatePartitions"

    # delete, then recreate: a fresh, different topic id
    assert adm.delete_topics([topic_name], operation_timeout=10)[topic_name].result(TIMEOUT) is None
    err = admin_error(adm.describe_topics(TopicCollection([topic_name]))[topic_name])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err
    create_topic(adm, topic_name, 2)
    d3 = describe(topic_name)
    assert len(d3.partitions) == 2
    assert str(d3.topic_id) != str(tid), "recreated topic kept the deleted topic's id"
    assert (d3.topic_id.get_most_significant_bits(), d3.topic_id.get_least_significant_bits()) != (0, 0)
    # the recreated topic has no overrides left over from its predecessor
    configs = adm.describe_configs([res])[res].result(TIMEOUT)
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert adm.delete_topics([topic_name])[topic_name].result(TIMEOUT) is None


def test_describe_configs_topic_entries_are_not_read_only(broker, topic_name):
    """Kafka reports every topic config entry with read_only=false, overridden or not
    (ConfigHelper.createTopicConfigEntry: `.setReadOnly(false)`), and odradek's own
    CreateTopics response says read_only=false for the same entries."""
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 1, {"retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = adm.describe_configs([res])[res].result(TIMEOUT)
    read_only = sorted(name for name, entry in configs.items() if entry.is_read_only)
    assert not read_only, f"topic configs reported read-only: {read_only}"


def test_admin_error_cases(broker, topic_name):
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 1)

    err = admin_error(adm.create_topics([NewTopic(topic_name, 1, 1)])[topic_name])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err

    long_name = "x" * 250
    for bad in ("bad/name", long_name, "..", "white space"):
        err = admin_error(adm.create_topics([NewTopic(bad, 1, 1)])[bad])
        assert err.code() == KafkaError.TOPIC_EXCEPTION, f"{bad[:20]!r}: {err}"  # INVALID_TOPIC_EXCEPTION (17)
    # 249 characters is the longest legal name
    ok_name = (topic_name + "-" + "y" * 249)[:249]
    create_topic(adm, ok_name, 1)
    assert adm.delete_topics([ok_name])[ok_name].result(TIMEOUT) is None

    # librdkafka does not validate num_partitions=0 client-side: this is the broker's answer
    zero = topic_name + "-zero"
    err = admin_error(adm.create_topics([NewTopic(zero, 0, 1)])[zero])
    assert err.code() == KafkaError.INVALID_PARTITIONS, err
    err = admin_error(adm.create_topics([NewTopic(zero, 0, 1)], validate_only=True)[zero])
    assert err.code() == KafkaError.INVALID_PARTITIONS, err

    rf3 = topic_name + "-rf3"
    err = admin_error(adm.create_topics([NewTopic(rf3, 1, 3)])[rf3])
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR, err

    unknown_cfg = topic_name + "-cfg"
    err = admin_error(adm.create_topics([NewTopic(unknown_cfg, 1, 1, config={"no.such.config": "1"})])[unknown_cfg])
    assert err.code() == KafkaError.INVALID_CONFIG, err

    # none of the failed creations left a topic behind
    md = adm.list_topics(timeout=TIMEOUT)
    for name in (zero, rf3, unknown_cfg, "bad/name", long_name):
        assert name not in md.topics, f"{name[:30]!r} exists after a failed create"

    # validate_only succeeds without creating anything
    vo = topic_name + "-vo"
    assert adm.create_topics([NewTopic(vo, 2, 1)], validate_only=True)[vo].result(TIMEOUT) is None
    assert vo not in adm.list_topics(timeout=TIMEOUT).topics

    missing = topic_name + "-missing"
    err = admin_error(adm.delete_topics([missing])[missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err
    err = admin_error(adm.create_partitions([NewPartitions(missing, 3)])[missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err
    res = ConfigResource(ResourceType.TOPIC, missing)
    err = admin_error(adm.describe_configs([res])[res])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err

    # one request, mixed outcomes: each topic gets its own result
    ok1, bad, dup = topic_name + "-m1", topic_name + "-m2", topic_name
    futures = adm.create_topics([NewTopic(ok1, 1, 1), NewTopic(bad, 0, 1), NewTopic(dup, 1, 1)])
    assert futures[ok1].result(TIMEOUT) is None
    assert admin_error(futures[bad]).code() == KafkaError.INVALID_PARTITIONS
    assert admin_error(futures[dup]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    futures = adm.delete_topics([ok1, bad])
    assert futures[ok1].result(TIMEOUT) is None
    assert admin_error(futures[bad]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    assert adm.delete_topics([topic_name])[topic_name].result(TIMEOUT) is None


# ------------------------------------------------------------------------ list offsets


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_list_offsets_watermarks_times_and_admin_specs(broker, topic_name, codec):
    """Exact ListOffsets answers for every spec, over several batches per partition (the
    broker decodes the batch holding the answer, so each codec is exercised)."""
    bootstrap = broker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, 2)
    base = int(time.time() * 1000) - 600_000
    # partition 0: 30 records, timestamps base + 1000*i, except offset 12 which carries the
    # partition's maximum timestamp (out of order), produced as three separate batches.
    ts0 = [base + 1000 * i for i in range(30)]
    ts0[12] = base + 100_000
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": codec})
    delivered = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), msg.timestamp()[1]))

    for chunk in (range(0, 10), range(10, 20), range(20, 30)):
        for i in chunk:
            producer.produce(topic_name, key=b"k%d" % i, value=b"compressible-%d-" % i * 20, partition=0,
                             timestamp=ts0[i], on_delivery=on_delivery)
        flush_all(producer)
    # partition 1 stays empty
    assert sorted(delivered) == [(0, i, ts0[i]) for i in range(30)]

    consumer = make_consumer(bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 30)
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=10) == (0, 0)

        def for_time(partition, ts):
            [tp] = consumer.offsets_for_times([TopicPartition(topic_name, partition, ts)], timeout=10)
            assert tp.error is None, tp.error
            return tp.offset

        assert for_time(0, 0) == 0  # before everything -> first record
        assert for_time(0, base) == 0
        assert for_time(0, base + 1) == 1
        assert for_time(0, base + 5000) == 5
        assert for_time(0, base + 9500) == 10  # crosses into the second batch
        # offset 12's big timestamp is the first record >= base+13000 in offset order
        assert for_time(0, base + 13_000) == 12
        assert for_time(0, base + 29_000) == 12
        assert for_time(0, base + 100_000) == 12
        assert for_time(0, base + 100_001) == -1  # past every timestamp: no offset (OFFSET_END)
        assert for_time(1, base) == -1  # empty partition

        specs = {
            "earliest": (OffsetSpec.earliest(), 0),
            "latest": (OffsetSpec.latest(), 30),
            "max_timestamp": (OffsetSpec.max_timestamp(), 12),
            "for_timestamp(base+5000)": (OffsetSpec.for_timestamp(base + 5000), 5),
            "for_timestamp(base+20500)": (OffsetSpec.for_timestamp(base + 20_500), 12),
            "for_timestamp(past end)": (OffsetSpec.for_timestamp(base + 200_000), -1),
        }
        for label, (spec, want) in specs.items():
            tp = TopicPartition(topic_name, 0)
            info = adm.list_offsets({tp: spec}, request_timeout=10)[tp].result(TIMEOUT)
            assert info.offset == want, f"list_offsets {label}: offset {info.offset}, expected {want}"
            if label == "max_timestamp":
                assert info.timestamp == base + 100_000, f"max_timestamp answer has timestamp {info.timestamp}"
            if label == "for_timestamp(base+5000)":
                assert info.timestamp == base + 5000, info.timestamp
        # empty partition
        tp1 = TopicPartition(topic_name, 1)
        for label, spec, want in (("earliest", OffsetSpec.earliest(), 0), ("latest", OffsetSpec.latest(), 0),
                                  ("max_timestamp", OffsetSpec.max_timestamp(), -1)):
            info = adm.list_offsets({tp1: spec})[tp1].result(TIMEOUT)
            assert info.offset == want, f"empty partition, {label}: offset {info.offset}, expected {want}"
    finally:
        consumer.close()


# --------------------------------------------------------------------- idempotence


def test_idempotent_producer_exactly_once(broker, topic_name):
    bootstrap = broker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, 3)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 500,  # many batches, five in flight per partition
            "max.in.flight.requests.per.connection": 5,
        }
    )
    n = 20_000
    reports: dict[bytes, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports[msg.key()] = (msg.partition(), msg.offset())

    deadline = time.monotonic() + 60
    for i in range(n):
        produce_with_backpressure(producer, deadline, topic=topic_name, key=b"k%05d" % i, value=b"v%d" % i,
                                  partition=i % 3, on_delivery=on_delivery)
        if i % 2000 == 0:
            producer.poll(0)
    flush_all(producer, 60)
    assert not errors, errors[:3]
    assert len(reports) == n
    assert len(set(reports.values())) == n, "two records got the same (partition, offset)"

    consumer = make_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(3)])
        messages = consume_exactly(consumer, n)
        got = {}
        for m in messages:
            assert m.key() not in got, f"{m.key()!r} consumed twice"
            got[m.key()] = (m.partition(), m.offset())
            assert m.value() == b"v%d" % int(m.key()[1:])
        assert got == reports
        for p in range(3):
            offsets = sorted(o for (pp, o) in got.values() if pp == p)
            assert offsets == list(range(len(offsets))), f"partition {p} offsets not contiguous"
            assert len(offsets) == n // 3 + (1 if p < n % 3 else 0)
    finally:
        consumer.close()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_idempotent_producer_exactly_once_across_broker_restart(broker_factory, topic_name, how):
    """The broker is restarted (clean stop, or SIGKILL) while an idempotent producer is
    streaming: librdkafka resends whatever was queued or in flight with the same producer
    id, so the broker's producer state (rebuilt from the log at start-up) must continue the
    sequence numbers and de-duplicate any batch it already had: every acknowledged record
    is in the log exactly once, at the offset its delivery report named."""
    b = broker_factory("restart")
    adm = admin(b.bootstrap)
    create_topic(adm, topic_name, 2)

    producer = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 1,
            "batch.num.messages": 100,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        }
    )
    n = 40_000
    reports: dict[bytes, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports[msg.key()] = (msg.partition(), msg.offset())

    restart_errors: list[BaseException] = []

    def restart():
        try:
            if how == "sigterm":
                assert b.stop() == 0, "broker did not stop cleanly"
            else:
                b.kill()
            b.start()
        except BaseException as exc:  # reported by the main thread
            restart_errors.append(exc)

    restarter = threading.Thread(target=restart, daemon=True)
    deadline = time.monotonic() + 90
    for i in range(n):
        produce_with_backpressure(producer, deadline, topic=topic_name, key=b"k%05d" % i, value=b"v%d" % i,
                                  partition=i % 2, on_delivery=on_delivery)
        if i % 400 == 0:
            producer.poll(0.02)  # pace the stream over ~2s so requests are in flight at the restart
        if i == n // 3:
            restarter.start()
    restarter.join(30)
    assert not restarter.is_alive(), "broker restart hung"
    assert not restart_errors, restart_errors
    flush_all(producer, 80)
    assert not errors, errors[:3]
    assert len(reports) == n
    assert len(set(reports.values())) == n, "two records got the same (partition, offset)"

    consumer = make_consumer(b.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(2)])
        messages = consume_exactly(consumer, n)
        got = {}
        for m in messages:
            assert m.key() not in got, f"{m.key()!r} is in the log twice (offsets {got[m.key()]} and {m.offset()})"
            got[m.key()] = (m.partition(), m.offset())
        assert got == reports
        for p in range(2):
            offsets = sorted(o for (pp, o) in got.values() if pp == p)
            assert offsets == list(range(len(offsets))), f"partition {p} offsets not contiguous"
    finally:
        consumer.close()


# ------------------------------------------------------------- abrupt disconnect mid-produce


def _request_header(api_key: int, version: int, correlation_id: int) -> bytes:
    client_id = b"rude-client"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def _abrupt_payload(i: int) -> bytes:
    """Bytes a misbehaving client sends before vanishing, by kind (i % 5)."""
    kind = i % 5
    if kind in (0, 1):  # the first part of a Produce v9 request that claims 4000 bytes
        body = _request_header(0, 9, i) + b"\x00" + b"\x00" * 1500
        return struct.pack(">i", 4000) + body
    if kind == 2:  # half of the 4-byte size prefix
        return b"\x00\x00"
    if kind == 3:  # a whole ApiVersions v0 request; the client leaves before the answer
        payload = _request_header(18, 0, i)
        return struct.pack(">i", len(payload)) + payload
    # a whole Produce v9 frame whose body is garbage: the broker cannot parse it
    payload = _request_header(0, 9, i) + b"\x00" + b"\xff" * 64
    return struct.pack(">i", len(payload)) + payload


def test_abrupt_disconnects_mid_produce_do_not_disturb_others(broker_factory, topic_name):
    b = broker_factory("abrupt")
    adm = admin(b.bootstrap)
    create_topic(adm, topic_name, 2)
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2})
    delivered: list[tuple[int, int]] = []
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))

    aborted = [0]
    problems: list[str] = []
    n_disconnects = 60

    def vandal():
        for i in range(n_disconnects):
            try:
                s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
                if i % 2:
                    # RST instead of FIN on close
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.sendall(_abrupt_payload(i))
                s.close()
                aborted[0] += 1
            except OSError as exc:  # the broker must keep accepting connections
                problems.append(repr(exc))
            time.sleep(0.01)

    t = threading.Thread(target=vandal, daemon=True)
    t.start()
    # keep producing (paced) for as long as the disconnects go on, and at least 3000 records
    n = 0
    deadline = time.monotonic() + 30
    for _ in range(10_000):
        if not t.is_alive() and n >= 3000:
            break
        assert time.monotonic() < deadline, "producing alongside the disconnecting client took over 30s"
        for _ in range(20):
            producer.produce(topic_name, key=b"%d" % n, value=b"x" * 100, partition=n % 2, on_delivery=on_delivery)
            n += 1
        producer.poll(0.01)
    flush_all(producer)
    t.join(10)
    assert not t.is_alive(), "the disconnecting client thread did not finish"
    assert not problems, f"connecting to the broker failed: {problems[:3]}"
    assert aborted[0] == n_disconnects
    assert not errors, errors[:3]
    assert sorted(delivered) == sorted((i % 2, i // 2) for i in range(n))
    assert b.alive(), "broker died"

    # and a new client still works afterwards
    consumer = make_consumer(b.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(2)])
        messages = consume_exactly(consumer, n)
        assert sorted((m.partition(), m.offset()) for m in messages) == sorted(delivered)
    finally:
        consumer.close()
    log = b.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, f"broker logged errors:\n{log[-3000:]}"


# ------------------------------------------------------------- restart persistence


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_keeps_topic_ids_records_and_offset_lookups(broker_factory, topic_name, how):
    """Acknowledged records, topic ids, the cluster id and every ListOffsets answer are
    the same after a restart (clean, or SIGKILL: acknowledged data is in the page cache)."""
    b = broker_factory("persist")
    adm = admin(b.bootstrap)
    create_topic(adm, topic_name, 3, {"segment.bytes": "4000"})  # several segments per partition
    base = int(time.time() * 1000) - 900_000
    n = 3000
    ts = {i: base + 7 * i for i in range(n)}
    # partition 0's max timestamp, out of order (1500 % 3 == 0); 35 minutes ahead of the
    # broker's clock, inside Kafka 4's message.timestamp.after.max.ms (one hour)
    ts[1500] = base + 3_000_000
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2,
                         "batch.num.messages": 50, "compression.type": "zstd"})
    reports = {}

    def on_delivery(err, msg):
        assert err is None, err
        reports[msg.key()] = (msg.partition(), msg.offset())

    for i in range(n):
        producer.produce(topic_name, key=b"%d" % i, value=b"v" * (i % 40), partition=i % 3, timestamp=ts[i],
                         on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    flush_all(producer)
    assert len(reports) == n

    def snapshot():
        a = admin(b.bootstrap)
        d = a.describe_topics(TopicCollection([topic_name]))[topic_name].result(TIMEOUT)
        cluster = a.describe_cluster().result(TIMEOUT).cluster_id
        tps = [TopicPartition(topic_name, p) for p in range(3)]
        answers = {}
        queries = [("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest()),
                   ("max", OffsetSpec.max_timestamp())]
        for q in (0, 1, 700, 7000, 10_493, 20_000, 3_000_000):
            queries.append((f"ts{q}", OffsetSpec.for_timestamp(base + q)))
        for label, spec in queries:
            for tp in tps:
                info = a.list_offsets({tp: spec})[tp].result(TIMEOUT)
                answers[(label, tp.partition)] = (info.offset, info.timestamp)
        return str(d.topic_id), cluster, answers

    before = snapshot()
    # spot-check the answers against what was produced
    answers = before[2]
    assert answers[("latest", 0)][0] == 1000 and answers[("earliest", 0)][0] == 0
    assert answers[("max", 0)] == (500, base + 3_000_000), answers[("max", 0)]
    assert answers[("ts700", 1)][0] == 33  # partition 1 holds i = 1, 4, 7...: first ts >= base+700 is i=100
    assert answers[("ts20000", 0)][0] == 500  # only the out-of-order record qualifies
    assert answers[("ts3000000", 1)][0] == -1

    if how == "sigterm":
        assert b.stop() == 0
    else:
        b.kill()
    b.start()
    after = snapshot()
    assert after[0] == before[0], "topic id changed across the restart"
    assert after[1] == before[1], "cluster id changed across the restart"
    diff = {k: (v, after[2].get(k)) for k, v in before[2].items() if after[2].get(k) != v}
    assert not diff, f"ListOffsets answers changed across the restart: {diff}"

    consumer = make_consumer(b.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(3)])
        got = {m.key(): (m.partition(), m.offset()) for m in consume_exactly(consumer, n)}
        assert got == reports
    finally:
        consumer.close()


# ------------------------------------------------------- broker-side produce/fetch behaviour


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_produce_errors_reach_the_client(broker, topic_name, codec):
    """Broker-side rejections come back per batch: topic max.message.bytes, the broker's
    message.max.bytes, and keyless records on a compacted topic (the broker has to look
    inside the possibly compressed batch for that one; a keyed tombstone is fine)."""
    adm = admin(broker.bootstrap)
    small = topic_name + "-small"
    compact = topic_name + "-compact"
    create_topic(adm, small, 1, {"max.message.bytes": "2000"})
    create_topic(adm, compact, 1, {"cleanup.policy": "compact"})
    # librdkafka's own size check is raised so that the broker's limits are what trips
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.max.bytes": 5_000_000, "retries": 0, "compression.type": codec})
    results: dict[str, object] = {}

    def on_delivery(label):
        def cb(err, msg):
            results[label] = err.code() if err is not None else msg.offset()
        return cb

    producer.produce(small, value=b"x" * 500, on_delivery=on_delivery("small-ok"))
    flush_all(producer)
    producer.produce(small, value=os.urandom(5000), on_delivery=on_delivery("small-too-big"))  # incompressible
    flush_all(producer)
    producer.produce(topic_name, value=os.urandom(2_000_000), on_delivery=on_delivery("over-broker-limit"))
    flush_all(producer)
    producer.produce(compact, key=b"k", value=b"keyed", on_delivery=on_delivery("compact-keyed"))
    flush_all(producer)
    producer.produce(compact, value=b"no key", on_delivery=on_delivery("compact-keyless"))
    flush_all(producer)
    producer.produce(compact, key=b"k2", value=b"keyed again", on_delivery=on_delivery("compact-keyed-2"))
    flush_all(producer)
    producer.produce(compact, key=b"k", value=None, on_delivery=on_delivery("compact-tombstone"))
    flush_all(producer)
    assert results == {
        "small-ok": 0,
        "small-too-big": KafkaError.MSG_SIZE_TOO_LARGE,
        "over-broker-limit": KafkaError.MSG_SIZE_TOO_LARGE,
        "compact-keyed": 0,
        "compact-keyless": KafkaError.INVALID_RECORD,
        "compact-keyed-2": 1,
        "compact-tombstone": 2,
    }, results


def test_null_empty_and_binary_fields(broker, topic_name):
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    many_headers = [(f"h{j}", bytes([j]) * j) for j in range(60)]
    cases = [
        (None, None, None),  # no key, no value (not a tombstone on a delete-policy topic)
        (b"", b"", None),  # empty, not null
        (b"\x00\xff" * 100, bytes(range(256)), [("bin", bytes(range(256)))]),
        (b"k", None, [("nil", None), ("empty", b""), ("nil", None)]),  # repeated header key kept in order
        ("ключ".encode(), "значение ✓".encode(), [("ünïcödé-key", "välue".encode())]),
        (b"many", b"headers", many_headers),
        (b"big", os.urandom(200_000), None),
    ]
    for key, value, headers in cases:
        producer.produce(topic_name, key=key, value=value, headers=headers, partition=0)
    flush_all(producer)
    consumer = make_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got = consume_exactly(consumer, len(cases))
        for m, (key, value, headers) in zip(got, cases):
            assert m.key() == key, m.offset()
            assert m.value() == value, m.offset()
            assert m.headers() == headers, (m.offset(), m.headers())
    finally:
        consumer.close()


def test_large_records_fetch_past_max_partition_fetch_bytes(broker, topic_name):
    """KIP-74: a record batch larger than the fetch limits is still returned whole."""
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    values = [bytes([65 + i]) * (900_000 + i) for i in range(3)] + [b"small"]
    for v in values:
        producer.produce(topic_name, value=v, partition=0)
        flush_all(producer)
    consumer = make_consumer(broker.bootstrap, **{"max.partition.fetch.bytes": 1000, "fetch.max.bytes": 1000,
                                                  "message.max.bytes": 1000})
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got = consume_exactly(consumer, len(values))
        assert [m.offset() for m in got] == [0, 1, 2, 3]
        assert [m.value() for m in got] == values
    finally:
        consumer.close()


def test_fetch_many_topics_with_small_byte_budgets(broker, topic_name):
    """One consumer, three topics with different record sizes, fetch.max.bytes and
    max.partition.fetch.bytes far below the data: every record arrives once, in order."""
    adm = admin(broker.bootstrap)
    topics = [f"{topic_name}-{j}" for j in range(3)]
    for t in topics:
        create_topic(adm, t, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 100})
    n = 2000
    for j, t in enumerate(topics):
        for i in range(n):
            producer.produce(t, key=b"%d" % i, value=bytes([97 + j]) * (50 * (j + 1)), partition=i % 2)
        flush_all(producer)
    consumer = make_consumer(broker.bootstrap, **{"fetch.max.bytes": 60_000, "message.max.bytes": 60_000,
                                                  "max.partition.fetch.bytes": 15_000})
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(2)])
        got: dict[tuple[str, int], list[int]] = {}
        for m in consume_exactly(consumer, 3 * n):
            got.setdefault((m.topic(), m.partition()), []).append(m.offset())
            j = topics.index(m.topic())
            assert m.value() == bytes([97 + j]) * (50 * (j + 1))
            assert int(m.key()) % 2 == m.partition()
        assert got == {(t, p): list(range(n // 2)) for t in topics for p in range(2)}
    finally:
        consumer.close()


def test_fetch_long_poll_and_offset_out_of_range(broker, topic_name):
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(5):
        producer.produce(topic_name, key=b"%d" % i, value=b"x", partition=0)
    flush_all(producer)

    # a consumer parked at the end with a 10 s fetch wait sees a new record at once
    waiting = make_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 10_000, "fetch.min.bytes": 1})
    try:
        waiting.assign([TopicPartition(topic_name, 0, 5)])
        assert not [m for m in waiting.consume(num_messages=10, timeout=1.0) if m.error() is None]
        t0 = time.monotonic()
        producer.produce(topic_name, key=b"late", value=b"x", partition=0)
        flush_all(producer)
        got = []
        for _ in range(150):  # at most ~15 s
            got = [m for m in waiting.consume(num_messages=10, timeout=0.1) if m.error() is None]
            if got or time.monotonic() - t0 > 15:
                break
        latency = time.monotonic() - t0
        assert got and got[0].key() == b"late" and got[0].offset() == 5
        assert latency < 3.0, f"record reached a long-polling consumer after {latency:.1f}s (fetch wait 10s)"
    finally:
        waiting.close()

    # fetch.min.bytes that is never reached: the broker answers after fetch.wait.max.ms
    patient = make_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 300, "fetch.min.bytes": 10_000_000})
    try:
        patient.assign([TopicPartition(topic_name, 0, 0)])
        got = consume_exactly(patient, 6, timeout=20)
        assert [m.offset() for m in got] == list(range(6))
    finally:
        patient.close()

    # OFFSET_OUT_OF_RANGE: auto.offset.reset=earliest restarts at 0, =error reports it
    resetting = make_consumer(broker.bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        resetting.assign([TopicPartition(topic_name, 0, 1000)])
        assert [m.offset() for m in consume_exactly(resetting, 6, timeout=20)] == list(range(6))
    finally:
        resetting.close()
    strict = make_consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        strict.assign([TopicPartition(topic_name, 0, 1000)])
        deadline = time.monotonic() + 20
        error = None
        for _ in range(100):
            if error is not None:
                break
            assert time.monotonic() < deadline, "no offset-out-of-range error within 20s"
            for m in strict.consume(num_messages=10, timeout=0.5):
                assert m.error() is not None, f"got a record at offset {m.offset()} from an out-of-range position"
                error = m.error()
        assert error is not None, "no offset-out-of-range error after 100 polls"
        assert error.code() == KafkaError._AUTO_OFFSET_RESET, error
        assert "Offset out of range" in error.str(), error
    finally:
        strict.close()


def test_log_append_time_topic(broker, topic_name):
    adm = admin(broker.bootstrap)
    create_topic(adm, topic_name, 1, {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": "lz4"})
    reports = []

    def on_delivery(err, msg):
        assert err is None, err
        reports.append((msg.offset(), msg.timestamp()))

    before = int(time.time() * 1000)
    for i in range(50):
        producer.produce(topic_name, key=b"%d" % i, value=b"v", partition=0, timestamp=1_000_000 + i,
                         on_delivery=on_delivery)
    flush_all(producer)
    after = int(time.time() * 1000)
    assert sorted(o for o, _ in reports) == list(range(50))
    for offset, (ts_type, ts) in reports:
        assert ts_type == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, (offset, ts_type)
        assert before - 1000 <= ts <= after + 1000, f"append time {ts} not in [{before}, {after}]"
    consumer = make_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got = consume_exactly(consumer, 50)
        by_offset = dict(reports)
        for m in got:
            assert m.timestamp() == by_offset[m.offset()], f"offset {m.offset()}: {m.timestamp()}"
        # the producer's timestamps (1970) are ignored by lookups too
        [tp] = consumer.offsets_for_times([TopicPartition(topic_name, 0, 1_000_010)], timeout=10)
        assert tp.offset == 0
        [tp] = consumer.offsets_for_times([TopicPartition(topic_name, 0, after + 60_000)], timeout=10)
        assert tp.offset == -1
    finally:
        consumer.close()
