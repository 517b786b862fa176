"""Interop: aiokafka (asyncio client) against a real `odradek broker` process.

pytest-asyncio is not installed: each test drives its coroutine with asyncio.run and
bounds it with asyncio.wait_for. Consumers have no group id (manual assignment).
"""

from __future__ import annotations

import asyncio
import time

import pytest

aiokafka = pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop

PARTITIONS = 3


def run(coro, timeout: float = 90.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


def make_consumer(bootstrap: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        request_timeout_ms=15_000,
    )


async def consume(consumer: AIOKafkaConsumer, n: int, timeout: float = 60.0, max_polls: int = 10_000) -> list:
    out = []
    deadline = time.monotonic() + timeout
    for _ in range(max_polls):
        if len(out) >= n:
            break
        assert time.monotonic() < deadline, f"timed out after {timeout}s with {len(out)} of {n} records"
        for records in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
            out.extend(records)
    else:
        raise AssertionError(f"gave up after {max_polls} polls with {len(out)} of {n} records")
    extra = [r for recs in (await consumer.getmany(timeout_ms=300)).values() for r in recs]
    assert not extra, f"{len(extra)} records beyond the {n} expected, first {extra[0]}"
    return out


async def wait_for_end_offset(bootstrap: str, tp: TopicPartition, end: int, timeout: float = 10.0) -> None:
    consumer = make_consumer(bootstrap)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while (got := (await consumer.end_offsets([tp]))[tp]) < end:
            assert time.monotonic() < deadline, f"end offset of {tp} stayed {got} < {end}"
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()


async def produce_consume(bootstrap: str, topic: str, n: int, **producer_args) -> None:
    await create_topic(bootstrap, topic, PARTITIONS)
    base_ts = int(time.time() * 1000) - 60_000
    sent = {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, **producer_args)
    await producer.start()
    try:
        futures = []
        for i in range(n):
            key = b"key-%05d" % i
            value = (b"v%d," % i) * (1 + i % 3)
            headers = [("idx", b"%d" % i)] + ([("empty", b"")] if i % 2 else [])
            partition = None if i % 4 == 0 else i % PARTITIONS
            sent[key] = (value, headers, base_ts + i, partition)
            futures.append((key, await producer.send(topic, value=value, key=key, partition=partition,
                                                     timestamp_ms=base_ts + i, headers=headers)))
        await producer.flush()
        where = {}
        for key, fut in futures:
            md = await fut
            if sent[key][3] is not None:
                assert md.partition == sent[key][3]
            # (md.timestamp is not checked: aiokafka 0.14.0's MessageBatch.done gives every
            # record of a CreateTime batch the first record's timestamp; a client bug.
            # The timestamps read back below are checked exactly.)
            assert md.timestamp_type == 0
            where[(md.partition, md.offset)] = key
    finally:
        await producer.stop()
    assert len(where) == n, "two records were acknowledged at the same (partition, offset)"
    for p in range(PARTITIONS):
        offsets = sorted(o for (pp, o) in where if pp == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: acknowledged offsets not 0..n-1"

    consumer = make_consumer(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = set()
        for r in await consume(consumer, n):
            pos = (r.partition, r.offset)
            assert pos not in seen, f"duplicate at {pos}"
            seen.add(pos)
            key = where.get(pos)
            assert key is not None, f"unexpected record at {pos}"
            value, headers, ts, _ = sent[key]
            assert r.key == key and r.value == value, f"record at {pos}"
            assert list(r.headers) == headers, f"headers at {pos}: {r.headers}"
            assert (r.timestamp_type, r.timestamp) == (0, ts)
        assert seen == set(where)
        ends = await consumer.end_offsets(tps)
        assert {tp.partition: o for tp, o in ends.items()} == {
            p: sum(1 for (pp, _) in where if pp == p) for p in range(PARTITIONS)
        }
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_every_field(broker, topic_name, codec):
    run(produce_consume(broker.bootstrap, topic_name, 20_000, compression_type=codec))


def test_idempotent_producer(broker, topic_name):
    run(produce_consume(broker.bootstrap, topic_name, 20_000, enable_idempotence=True))


def test_send_and_wait_acks_0_1_all_and_offsets(broker, topic_name):
    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        tp = TopicPartition(topic_name, 0)
        base = int(time.time() * 1000) - 120_000
        i = 0
        offsets = {}
        for acks in (0, 1, "all"):
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks=acks)
            await producer.start()
            try:
                for _ in range(10):
                    md = await producer.send_and_wait(topic_name, key=b"%d" % i, value=str(acks).encode(),
                                                      partition=0, timestamp_ms=base + 10 * i,
                                                      headers=[("acks", str(acks).encode())])
                    if acks == 0:
                        assert md is None, "acks=0 has no record metadata"
                    else:
                        offsets[i] = md.offset
                    i += 1
            finally:
                await producer.stop()
            if acks == 0:
                # acks=0 acknowledges nothing, and aiokafka 0.14's stop() returns before its
                # acks=0 batches reach the socket (measured: they land ~100 ms later), so the
                # next producer's records could otherwise be appended between them.
                await wait_for_end_offset(broker.bootstrap, tp, 10)
        assert offsets == {j: j for j in range(10, 30)}

        consumer = make_consumer(broker.bootstrap)
        await consumer.start()
        try:
            consumer.assign([tp])
            assert await consumer.end_offsets([tp]) == {tp: 30}
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            await consumer.seek_to_beginning(tp)
            records = await consume(consumer, 30)
            assert [(r.offset, r.key, r.value, list(r.headers)) for r in records] == [
                (j, b"%d" % j, a, [("acks", a)]) for j, a in
                [(j, b"0") for j in range(10)] + [(j, b"1") for j in range(10, 20)]
                + [(j, b"all") for j in range(20, 30)]
            ]
            consumer.seek(tp, 25)
            assert [r.offset for r in await consume(consumer, 5)] == [25, 26, 27, 28, 29]

            found = await consumer.offsets_for_times({tp: base + 10 * 17 - 5})
            assert (found[tp].offset, found[tp].timestamp) == (17, base + 170)
            assert (await consumer.offsets_for_times({tp: base}))[tp].offset == 0
            assert (await consumer.offsets_for_times({tp: base + 290}))[tp].offset == 29
            assert (await consumer.offsets_for_times({tp: base + 291}))[tp] is None
        finally:
            await consumer.stop()

    run(main())


def test_three_clients_write_concurrently_and_read_the_same_log(broker, topic_name):
    """kafka-python (gzip, in a thread), confluent-kafka (zstd, in a thread) and aiokafka
    (lz4, on the event loop) produce into one topic at the same time; then each client
    reads the whole topic and all three see exactly the same records at the same offsets."""
    kafka = pytest.importorskip("kafka")
    ck = pytest.importorskip("confluent_kafka")
    import threading

    n = 3000
    base_ts = int(time.time() * 1000) - 30_000
    errors: list = []
    acked: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()

    def record(client: str, i: int):
        key = f"{client}-{i}".encode()
        return key, key + b"-value" * (i % 5), base_ts + i, [("client", client.encode())]

    def kafka_python_writer():
        try:
            producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=5)
            futures = []
            for i in range(n):
                key, value, ts, headers = record("kp", i)
                futures.append((key, producer.send(topic_name, key=key, value=value, partition=i % PARTITIONS,
                                                   timestamp_ms=ts, headers=headers)))
            producer.flush(timeout=60)
            for key, fut in futures:
                md = fut.get(timeout=30)
                with lock:
                    acked[key] = (md.partition, md.offset)
            producer.close(timeout=10)
        except BaseException as exc:
            errors.append(("kafka-python", exc))

    def confluent_writer():
        try:
            producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd",
                                    "linger.ms": 5, "acks": "all"})

            def cb(err, msg):
                if err is not None:
                    errors.append(("confluent", err))
                else:
                    with lock:
                        acked[msg.key()] = (msg.partition(), msg.offset())

            for i in range(n):
                key, value, ts, headers = record("ck", i)
                producer.produce(topic_name, key=key, value=value, partition=i % PARTITIONS, timestamp=ts,
                                 headers=headers, on_delivery=cb)
                if i % 500 == 0:
                    producer.poll(0)
            remaining = producer.flush(60)
            if remaining:
                errors.append(("confluent", f"{remaining} undelivered"))
        except BaseException as exc:
            errors.append(("confluent", exc))

    async def aiokafka_writer():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4", linger_ms=5)
        await producer.start()
        try:
            futures = []
            for i in range(n):
                key, value, ts, headers = record("ai", i)
                futures.append((key, await producer.send(topic_name, key=key, value=value, partition=i % PARTITIONS,
                                                         timestamp_ms=ts, headers=headers)))
            for key, fut in futures:
                md = await fut
                acked[key] = (md.partition, md.offset)
        finally:
            await producer.stop()

    async def read_with_aiokafka():
        consumer = make_consumer(broker.bootstrap)
        await consumer.start()
        try:
            tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            return {(r.partition, r.offset): (r.key, r.value, r.timestamp, list(r.headers))
                    for r in await consume(consumer, 3 * n)}
        finally:
            await consumer.stop()

    async def main():
        await create_topic(broker.bootstrap, topic_name, PARTITIONS)
        threads = [threading.Thread(target=kafka_python_writer, daemon=True),
                   threading.Thread(target=confluent_writer, daemon=True)]
        for t in threads:
            t.start()
        await aiokafka_writer()
        for t in threads:
            await asyncio.to_thread(t.join, 90)
            assert not t.is_alive(), "a producer thread did not finish within 90s"
        assert not errors, errors[:3]
        return await read_with_aiokafka()

    by_aiokafka = run(main(), timeout=150)
    assert len(acked) == 3 * n
    assert len(set(acked.values())) == 3 * n, "two records were acknowledged at the same (partition, offset)"
    assert {pos: v[0] for pos, v in by_aiokafka.items()} == {pos: key for key, pos in acked.items()}
    for client in ("kp", "ck", "ai"):
        for i in range(n):
            key, value, ts, headers = record(client, i)
            assert by_aiokafka[acked[key]] == (key, value, ts, headers), f"{key!r} as read by aiokafka"

    # kafka-python's view
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                                   fetch_max_wait_ms=100)
    try:
        tps = [kafka.TopicPartition(topic_name, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        by_kafka_python = {}
        deadline = time.monotonic() + 60
        for _ in range(10_000):
            if len(by_kafka_python) >= 3 * n:
                break
            assert time.monotonic() < deadline, f"kafka-python read {len(by_kafka_python)} of {3 * n} in 60s"
            for recs in consumer.poll(timeout_ms=500).values():
                for r in recs:
                    by_kafka_python[(r.partition, r.offset)] = (r.key, r.value, r.timestamp, list(r.headers))
    finally:
        consumer.close()
    assert by_kafka_python == by_aiokafka

    # confluent-kafka's view
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                            "enable.auto.offset.store": False, "check.crcs": True})
    try:
        consumer.assign([ck.TopicPartition(topic_name, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        by_confluent = {}
        deadline = time.monotonic() + 60
        for _ in range(10_000):
            if len(by_confluent) >= 3 * n:
                break
            assert time.monotonic() < deadline, f"confluent-kafka read {len(by_confluent)} of {3 * n} in 60s"
            for m in consumer.consume(num_messages=5000, timeout=0.5):
                assert m.error() is None, m.error()
                by_confluent[(m.partition(), m.offset())] = (m.key(), m.value(), m.timestamp()[1], m.headers())
    finally:
        consumer.close()
    assert by_confluent == by_aiokafka
