"""Interop: the pure-Python clients' transactions (KIP-98) against a real `odradek broker`
process -- kafka-python 3.0 (`KafkaProducer(transactional_id=...)`, TxnOffsetCommit v3 with
the consumer's group metadata) and aiokafka 0.14 (`AIOKafkaProducer(transactional_id=...)`,
`async with producer.transaction()`, `send_offsets_to_transaction(offsets, group_id)` with
the group id only).

Every test reads back what it wrote with a librdkafka consumer and with the writing
library's own consumer, both `read_committed` (only committed records, in order) and
`read_uncommitted` (the aborted records are in the log too: the aborts are real aborts,
not records that were never sent), and checks the offsets a transaction committed with a
consumer's committed(): visible only once the transaction commits, never after an abort.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as ATopicPartition
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]
TIMEOUT = 30.0
OFFSET_INVALID = -1001  # librdkafka: no committed offset


# --------------------------------------------------------------------------- helpers


def create(bootstrap: str, *topics: tuple[str, int]) -> None:
    adm = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures are done
    fs = adm.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics], operation_timeout=20)
    for f in fs.values():
        f.result(TIMEOUT)


def produce_plain(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(TIMEOUT) == 0


def confluent_read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                   settle: float = 1.0, wait: float = 20.0) -> dict[int, list[bytes]]:
    """Values per partition, in order, as a librdkafka consumer with `isolation` sees them:
    read until `expect` records arrived, then `settle` s more (nothing more may come)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 100})
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + wait
        settled_at = None
        while time.monotonic() < deadline:
            for m in c.consume(100, 0.1):
                if m.error() is None:
                    out[m.partition()].append(m.value())
            if sum(map(len, out.values())) >= expect:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
        return out
    finally:
        c.close()


def kafka_python_read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                      settle: float = 1.0, wait: float = 20.0) -> dict[int, list[bytes]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level=isolation, fetch_max_wait_ms=100, request_timeout_ms=15_000)
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + wait
        settled_at = None
        while time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=200).items():
                out[tp.partition].extend(r.value for r in records)
            if sum(map(len, out.values())) >= expect:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
        return out
    finally:
        c.close()


async def aiokafka_read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                        settle: float = 1.0, wait: float = 20.0) -> dict[int, list[bytes]]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         isolation_level=isolation, fetch_max_wait_ms=100, auto_offset_reset="earliest")
    await c.start()
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        tps = [ATopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        deadline = time.monotonic() + wait
        settled_at = None
        while time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=200)
            for tp, records in batch.items():
                out[tp.partition].extend(r.value for r in records)
            if sum(map(len, out.values())) >= expect:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
        return out
    finally:
        await c.stop()


def run(coro, timeout: float = 120.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


def confluent_committed(bootstrap: str, group: str, topic: str, partition: int, isolation: str,
                        timeout: float = 10.0) -> TopicPartition:
    """The group's committed offset through librdkafka's OffsetFetch; read_committed asks
    for stable offsets only (KIP-447 require_stable)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation,
                  "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, partition)], timeout=timeout)[0]
    finally:
        c.close()


async def aiokafka_committed(bootstrap: str, group: str, topic: str, partition: int):
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        return await c.committed(ATopicPartition(topic, partition))
    finally:
        await c.stop()


def by_partition(values: list[bytes], partitions: int) -> dict[int, list[bytes]]:
    """What test writers put where: value i went to partition i % partitions."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i, v in enumerate(values):
        out[i % partitions].append(v)
    return out


# --------------------------------------------------------------------------- kafka-python


COMMIT1 = [b"commit-%d" % i for i in range(10)]
ABORT1 = [b"abort-%d" % i for i in range(6)]
ABORT2 = [b"abort-again-%d" % i for i in range(4)]
LAST = [b"last-0", b"last-1"]


def expected_views(partitions: int = 2) -> tuple[dict, dict]:
    committed = {p: by_partition(COMMIT1, partitions)[p] + by_partition(LAST, partitions)[p] for p in range(partitions)}
    everything = {p: (by_partition(COMMIT1, partitions)[p] + by_partition(ABORT1, partitions)[p]
                      + by_partition(ABORT2, partitions)[p] + by_partition(LAST, partitions)[p])
                  for p in range(partitions)}
    return committed, everything


def test_kafka_python_commits_and_aborts_and_read_committed_sees_only_commits(broker, topic_name):
    create(broker.bootstrap, (topic_name, 2))
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{topic_name}", linger_ms=5,
                      request_timeout_ms=15_000, max_block_ms=30_000)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i, v in enumerate(COMMIT1):
            p.send(topic_name, value=v, partition=i % 2)
        p.commit_transaction()  # flushes what was sent first
        p.begin_transaction()
        for i, v in enumerate(ABORT1):
            p.send(topic_name, value=v, partition=i % 2)
        p.flush()  # in the log before the abort marker
        p.abort_transaction()
        p.begin_transaction()
        for i, v in enumerate(ABORT2):
            p.send(topic_name, value=v, partition=i % 2)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        for i, v in enumerate(LAST):
            p.send(topic_name, value=v, partition=i % 2)
        p.commit_transaction()
    finally:
        p.close(timeout=10)

    committed, everything = expected_views()
    n_committed, n_all = sum(map(len, committed.values())), sum(map(len, everything.values()))
    assert confluent_read(broker.bootstrap, topic_name, 2, "read_committed", n_committed) == committed
    assert kafka_python_read(broker.bootstrap, topic_name, 2, "read_committed", n_committed) == committed
    assert confluent_read(broker.bootstrap, topic_name, 2, "read_uncommitted", n_all) == everything
    assert kafka_python_read(broker.bootstrap, topic_name, 2, "read_uncommitted", n_all) == everything


def test_kafka_python_send_offsets_with_group_metadata_commit_only_with_the_transaction(broker, topic_name):
    """Consume-transform-produce with kafka-python: a group consumer (classic protocol)
    reads the input, the producer writes the output and sends the consumer's position
    with `consumer.group_metadata()` (member id, generation: TxnOffsetCommit v3). An
    aborted transaction leaves no committed offset; a committed one leaves the position."""
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    create(broker.bootstrap, (src, 2), (dst, 2))
    inputs = [b"in-%d" % i for i in range(20)]
    produce_plain(broker.bootstrap, src, inputs, partitions=2)
    group = f"kp-group-{topic_name}"
    consumer = KafkaConsumer(src, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             session_timeout_ms=10_000, heartbeat_interval_ms=1_000, request_timeout_ms=15_000)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kp-ctp-{topic_name}",
                             linger_ms=5, request_timeout_ms=15_000, max_block_ms=30_000)
    try:
        producer.init_transactions()

        def consume_all() -> list:
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(inputs) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    got.extend(records)
            assert len(got) == len(inputs), f"consumed {len(got)} of {len(inputs)}"
            return got

        def transform(records, commit: bool) -> dict:
            producer.begin_transaction()
            for r in records:
                producer.send(dst, value=b"out-" + r.value, partition=r.partition)
            ends = {}
            for r in records:
                ends[KTopicPartition(src, r.partition)] = OffsetAndMetadata(r.offset + 1, "", -1)
            producer.send_offsets_to_transaction(ends, consumer.group_metadata())
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
            return ends

        records = consume_all()
        transform(records, commit=False)
        tps = [KTopicPartition(src, p) for p in range(2)]
        # Aborted: nothing committed; the consumer goes back to where the group stands.
        assert [consumer.committed(tp) for tp in tps] == [None, None]
        for tp in tps:
            consumer.seek(tp, 0)
        records = consume_all()
        ends = transform(records, commit=True)
        assert {tp: consumer.committed(tp) for tp in tps} == {tp: ends[tp].offset for tp in tps} == \
            {KTopicPartition(src, 0): 10, KTopicPartition(src, 1): 10}
    finally:
        consumer.close()
        producer.close(timeout=10)
    assert confluent_committed(broker.bootstrap, group, src, 0, "read_committed").offset == 10
    want = {p: [b"out-" + v for v in by_partition(inputs, 2)[p]] for p in range(2)}
    assert confluent_read(broker.bootstrap, dst, 2, "read_committed", 20) == want
    assert sum(map(len, confluent_read(broker.bootstrap, dst, 2, "read_uncommitted", 40).values())) == 40


# --------------------------------------------------------------------------- aiokafka


class Boom(Exception):
    pass


def test_aiokafka_transactions_commit_and_abort_and_read_committed_sees_only_commits(broker, topic_name):
    create(broker.bootstrap, (topic_name, 2))

    async def write() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"aio-{topic_name}", linger_ms=5)
        await p.start()  # InitProducerId with the transactional id
        try:
            async with p.transaction():
                for i, v in enumerate(COMMIT1):
                    await p.send(topic_name, value=v, partition=i % 2)
            with pytest.raises(Boom):
                async with p.transaction():  # an exception in the block aborts
                    for i, v in enumerate(ABORT1):
                        await p.send_and_wait(topic_name, value=v, partition=i % 2)
                    raise Boom
            await p.begin_transaction()
            for i, v in enumerate(ABORT2):
                await p.send_and_wait(topic_name, value=v, partition=i % 2)
            await p.abort_transaction()
            async with p.transaction():
                for i, v in enumerate(LAST):
                    await p.send(topic_name, value=v, partition=i % 2)
        finally:
            await p.stop()

    run(write())
    committed, everything = expected_views()
    n_committed, n_all = sum(map(len, committed.values())), sum(map(len, everything.values()))
    assert confluent_read(broker.bootstrap, topic_name, 2, "read_committed", n_committed) == committed
    assert run(aiokafka_read(broker.bootstrap, topic_name, 2, "read_committed", n_committed)) == committed
    assert confluent_read(broker.bootstrap, topic_name, 2, "read_uncommitted", n_all) == everything
    assert run(aiokafka_read(broker.bootstrap, topic_name, 2, "read_uncommitted", n_all)) == everything


def test_aiokafka_send_offsets_to_transaction_commits_offsets_only_when_the_transaction_commits(broker, topic_name):
    """aiokafka sends the group id only (TxnOffsetCommit without member or generation: an
    unfenced commit). Offsets sent in a transaction are pending until its marker: not
    visible to OffsetFetch meanwhile (and OffsetFetch asking for stable offsets is told
    to come back, KIP-447), visible after the commit, dropped by an abort."""
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    create(broker.bootstrap, (src, 1), (dst, 1))
    produce_plain(broker.bootstrap, src, [b"in-%d" % i for i in range(10)])
    group = f"aio-group-{topic_name}"
    observed: dict[str, object] = {}

    async def scenario() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"aio-offsets-{topic_name}")
        await p.start()
        try:
            tp = ATopicPartition(src, 0)
            await p.begin_transaction()
            await p.send_and_wait(dst, value=b"aborted", partition=0)
            await p.send_offsets_to_transaction({tp: 4}, group)
            await p.abort_transaction()
            observed["after abort"] = await aiokafka_committed(broker.bootstrap, group, src, 0)

            await p.begin_transaction()
            await p.send_and_wait(dst, value=b"committed", partition=0)
            await p.send_offsets_to_transaction({tp: 7}, group)
            # Pending: OffsetFetch does not show it (the unstable-offset question is asked
            # from a thread: librdkafka blocks while it retries).
            observed["pending, read_uncommitted"] = await asyncio.to_thread(
                confluent_committed, broker.bootstrap, group, src, 0, "read_uncommitted")
            observed["pending, aiokafka"] = await aiokafka_committed(broker.bootstrap, group, src, 0)
            observed["pending, read_committed"] = await asyncio.to_thread(pending_stable, broker.bootstrap, group, src)
            await p.commit_transaction()
            observed["after commit"] = await aiokafka_committed(broker.bootstrap, group, src, 0)

            await p.begin_transaction()
            await p.send_offsets_to_transaction({tp: 9}, group)
            await p.abort_transaction()
            observed["after second abort"] = await aiokafka_committed(broker.bootstrap, group, src, 0)
        finally:
            await p.stop()

    run(scenario())
    print(observed)  # shown with -s
    assert observed["after abort"] is None, observed
    assert observed["pending, read_uncommitted"].offset == OFFSET_INVALID, observed
    assert observed["pending, aiokafka"] is None, observed
    # KIP-447: a stable answer (any offset, -1001 included) would let a new owner of the
    # partition start before the transaction that holds its offsets has ended.
    assert observed["pending, read_committed"] in ("_TIMED_OUT", "UNSTABLE_OFFSET_COMMIT"), \
        f"OffsetFetch(require_stable) answered while a transactional offset was pending: {observed}"
    assert observed["after commit"] == 7, observed
    assert observed["after second abort"] == 7, observed
    assert confluent_committed(broker.bootstrap, group, src, 0, "read_committed").offset == 7
    assert confluent_read(broker.bootstrap, dst, 1, "read_committed", 1) == {0: [b"committed"]}
    assert confluent_read(broker.bootstrap, dst, 1, "read_uncommitted", 2) == {0: [b"aborted", b"committed"]}


def pending_stable(bootstrap: str, group: str, topic: str) -> object:
    """OffsetFetch with require_stable (librdkafka's read_committed) while a transactional
    offset is pending: Kafka answers UNSTABLE_OFFSET_COMMIT, which librdkafka retries until
    its timeout. Returns what came back: an error name, or the offset if one was returned."""
    try:
        tp = confluent_committed(bootstrap, group, topic, 0, "read_committed", timeout=3.0)
    except KafkaException as exc:
        return exc.args[0].name()
    return tp.error.name() if tp.error is not None else tp.offset
