"""Interop: kafka-python (pure-Python client) against a real `odradek broker` process.

Consumers have no group id (manual assignment, nothing committed). kafka-python 3.0
enables idempotence by default, so the default producer exercises InitProducerId and
sequence numbers too.
"""

from __future__ import annotations

import time

import pytest

kafka = pytest.importorskip("kafka")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic  # noqa: E402
from kafka.errors import (  # noqa: E402
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.interop

N = 20_000
PARTITIONS = 3


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def make_consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        request_timeout_ms=15_000,
    )


def consume(consumer: KafkaConsumer, n: int, timeout: float = 60.0, max_polls: int = 10_000) -> list:
    """Poll until `n` records arrived, then check that nothing more follows."""
    out = []
    deadline = time.monotonic() + timeout
    for _ in range(max_polls):
        if len(out) >= n:
            break
        assert time.monotonic() < deadline, f"timed out after {timeout}s with {len(out)} of {n} records"
        for records in consumer.poll(timeout_ms=500, max_records=5000).values():
            out.extend(records)
    else:
        raise AssertionError(f"gave up after {max_polls} polls with {len(out)} of {n} records")
    extra = [r for recs in consumer.poll(timeout_ms=300).values() for r in recs]
    assert not extra, f"{len(extra)} records beyond the {n} expected, first {extra[0]}"
    return out


def produce_and_verify(bootstrap: str, topic: str, producer: KafkaProducer, n: int = N) -> None:
    """Send n records (explicit partitions, plus every 5th through the key partitioner),
    then read them all back with manual assignment and compare every field."""
    base_ts = int(time.time() * 1000) - 60_000
    sent = {}
    futures = []
    for i in range(n):
        key = b"k-%05d" % i
        value = (b"value-%d;" % i) * (1 + i % 4)
        headers = [("idx", b"%d" % i)] if i % 2 else [("idx", b"%d" % i), ("empty", b"")]
        partition = None if i % 5 == 0 else i % PARTITIONS
        ts = base_ts + i
        sent[key] = (value, headers, ts, partition)
        futures.append((key, producer.send(topic, key=key, value=value, headers=headers, partition=partition,
                                           timestamp_ms=ts)))
    producer.flush(timeout=60)
    where = {}
    for key, fut in futures:
        md = fut.get(timeout=30)
        value, headers, ts, partition = sent[key]
        if partition is not None:
            assert md.partition == partition
        assert md.timestamp == ts, f"{key!r}: metadata timestamp {md.timestamp} != {ts}"
        where[(md.partition, md.offset)] = key
    assert len(where) == n, "two records were acknowledged at the same (partition, offset)"
    for p in range(PARTITIONS):
        offsets = sorted(o for (pp, o) in where if pp == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: acknowledged offsets not 0..n-1"

    consumer = make_consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records = consume(consumer, n)
        seen = set()
        for r in records:
            pos = (r.partition, r.offset)
            assert pos not in seen, f"duplicate at {pos}"
            seen.add(pos)
            key = where.get(pos)
            assert key is not None, f"unexpected record at {pos}"
            value, headers, ts, _ = sent[key]
            assert r.topic == topic
            assert r.key == key
            assert r.value == value, f"value of {key!r}"
            assert list(r.headers) == headers, f"headers of {key!r}: {r.headers}"
            assert (r.timestamp_type, r.timestamp) == (0, ts), f"timestamp of {key!r}"
        assert seen == set(where)
        ends = consumer.end_offsets(tps)
        for tp in tps:
            assert ends[tp] == sum(1 for (p, _) in where if p == tp.partition)
    finally:
        consumer.close()


def test_produce_consume_default_idempotent_producer(broker, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        assert producer.config["enable_idempotence"], "kafka-python 3 should default to idempotence"
        produce_and_verify(broker.bootstrap, topic_name, producer)
    finally:
        producer.close(timeout=10)


_CODEC_MODULES = {"gzip": None, "lz4": "lz4.frame", "snappy": "snappy", "zstd": "zstandard"}


@pytest.mark.parametrize("codec", list(_CODEC_MODULES))
def test_produce_consume_compressed(broker, admin, topic_name, codec):
    if _CODEC_MODULES[codec]:
        pytest.importorskip(_CODEC_MODULES[codec], reason=f"kafka-python needs {_CODEC_MODULES[codec]} for {codec}")
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20,
                             batch_size=256 * 1024)
    try:
        produce_and_verify(broker.bootstrap, topic_name, producer)
    finally:
        producer.close(timeout=10)


def test_acks_variants_and_seek(broker, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    tp = TopicPartition(topic_name, 0)
    offsets = []
    for acks in (1, "all"):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=acks, enable_idempotence=False)
        try:
            for i in range(10):
                offsets.append(producer.send(topic_name, key=b"%s" % str(acks).encode(), value=b"%d" % i,
                                             partition=0).get(timeout=30).offset)
        finally:
            producer.close(timeout=10)
    assert offsets == list(range(20))
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=0, enable_idempotence=False)
    try:
        for i in range(10):
            # acks=0: no offset comes back (kafka-python 3.0.12 reports 0 rather than -1 here)
            producer.send(topic_name, key=b"0", value=b"%d" % i, partition=0).get(timeout=30)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)

    consumer = make_consumer(broker.bootstrap)
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + 20
        for _ in range(200):  # acks=0 records are not confirmed: wait for the log end to reach 30
            if consumer.end_offsets([tp])[tp] == 30:
                break
            assert time.monotonic() < deadline, "acks=0 records did not all arrive within 20s"
            time.sleep(0.1)
        assert consumer.end_offsets([tp])[tp] == 30
        consumer.seek(tp, 15)
        records = consume(consumer, 15)
        assert [r.offset for r in records] == list(range(15, 30))
        assert [(r.key, r.value) for r in records] == (
            [(b"all", b"%d" % i) for i in range(5, 10)] + [(b"0", b"%d" % i) for i in range(10)]
        )
        consumer.seek(tp, 29)
        assert [r.offset for r in consume(consumer, 1)] == [29]
    finally:
        consumer.close()


def test_offsets_end_beginning_for_times(broker, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    base = int(time.time() * 1000) - 300_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for i in range(20):  # one request per record: 20 batches
            producer.send(topic_name, key=b"%d" % i, value=b"v", partition=0, timestamp_ms=base + 100 * i).get(30)
    finally:
        producer.close(timeout=10)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    consumer = make_consumer(broker.bootstrap)
    try:
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 20, tp1: 0}
        answers = consumer.offsets_for_times({tp0: base + 550, tp1: base})
        assert answers[tp1] is None, "an empty partition has no offset for any timestamp"
        assert (answers[tp0].offset, answers[tp0].timestamp) == (6, base + 600)
        assert consumer.offsets_for_times({tp0: base})[tp0].offset == 0
        assert consumer.offsets_for_times({tp0: 0})[tp0].offset == 0
        assert consumer.offsets_for_times({tp0: base + 1900})[tp0].offset == 19
        assert consumer.offsets_for_times({tp0: base + 1901})[tp0] is None
    finally:
        consumer.close()


def test_admin_create_describe_partitions_delete_and_errors(broker, admin, topic_name):
    result = admin.create_topics([NewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "7200000"})])
    [created] = result["topics"]
    assert created["error_code"] == 0 and created["num_partitions"] == 2
    assert created["configs"]["retention.ms"]["value"] == "7200000"
    assert created["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert created["configs"]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    topic_id = created["topic_id"]
    assert topic_id and topic_id != "00000000-0000-0000-0000-000000000000"

    [described] = admin.describe_topics([topic_name])
    assert described["error_code"] == 0
    assert str(described["topic_id"]) == str(topic_id)
    assert [p["partition_index"] for p in described["partitions"]] == [0, 1]
    assert all(p["leader_id"] == 1 and p["replica_nodes"] == [1] for p in described["partitions"])
    assert topic_name in admin.list_topics()

    cluster = admin.describe_cluster()
    assert cluster["cluster_id"] and cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", broker.port)]

    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
    modified = configs["topic"][topic_name]
    assert set(modified) == {"retention.ms"}, f"only the override is 'modified': {sorted(modified)}"
    assert modified["retention.ms"]["value"] == "7200000"
    full = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)], include_synonyms=True,
                                  config_filter="ALL")["topic"][topic_name]
    assert full["retention.ms"]["config_type"] == "LONG"
    assert full["retention.ms"]["synonyms"] == [
        {"name": "retention.ms", "value": "7200000", "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "log.retention.ms", "value": "604800000", "source": "DEFAULT_CONFIG"},
    ]
    assert full["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert full["cleanup.policy"]["config_type"] == "LIST"
    brokers = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="ALL")
    broker_configs = brokers["broker"]["1"]
    assert broker_configs["broker.id"]["value"] == "1"
    assert broker_configs["log.retention.ms"]["value"] == "604800000"
    assert broker_configs["advertised.listeners"]["value"] == f"PLAINTEXT://{broker.bootstrap}"

    validated = admin.create_topics([NewTopic(topic_name + "-vo", 3, 1)], validate_only=True)["topics"][0]
    assert (validated["error_code"], validated["num_partitions"]) == (0, 3)
    assert topic_name + "-vo" not in admin.list_topics(), "validate_only created the topic"

    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic_name, 1, 1)])
    for bad in ("bad/name", "z" * 250):
        with pytest.raises(InvalidTopicError):
            admin.create_topics([NewTopic(bad, 1, 1)])
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics([NewTopic(topic_name + "-zero", 0, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic(topic_name + "-rf3", 1, 3)])
    assert not {topic_name + "-zero", topic_name + "-rf3", "bad/name"} & set(admin.list_topics())

    admin.create_partitions({topic_name: NewPartitions(4)})
    [described] = admin.describe_topics([topic_name])
    assert len(described["partitions"]) == 4
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic_name: NewPartitions(3)})

    result = admin.delete_topics([topic_name])
    assert [(r["name"], r["error_code"]) for r in result["topics"]] == [(topic_name, 0)]
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic_name])
    assert topic_name not in admin.list_topics()

    recreated = admin.create_topics([NewTopic(topic_name, 1, 1)])["topics"][0]
    assert recreated["topic_id"] != topic_id, "a recreated topic must get a new topic id"
    admin.delete_topics([topic_name])
