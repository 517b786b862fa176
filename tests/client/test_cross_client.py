"""Interop: the odradek client and librdkafka (confluent_kafka, and kcat) read each other's records.

For every codec: records produced by the odradek producer are read exactly (partition,
offset, key, value, headers, timestamp) by a librdkafka consumer and by `kcat -C`; records
produced by librdkafka with `compression.type=<codec>` and by `kcat -P -z <codec>` are read
exactly by the odradek consumer. The batches on the broker are checked to really carry the
codec. Finally, keyed records from the odradek producer land on the same partitions as
librdkafka's with `partitioner=murmur2_random` (the Java-compatible one).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from odradek.client import AsyncProducer

from .test_producer import CODECS, TIMEOUT, arun, consume_all, create_topic, raw_batches

pytestmark = pytest.mark.interop

KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat not found on PATH (apt-get install kcat)")
PARTITIONS = 3
N = 300


def kcat(*args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}"
    return proc.stdout


def sample(codec: str, base_ts: int) -> list[tuple]:
    """(partition, key, value, headers, timestamp) records: null and empty keys and values,
    repeated and null-valued headers, timestamps not in send order. Text only, without the
    characters kcat's output format uses as separators (| , = newline)."""
    out = []
    for i in range(N):
        key = None if i % 25 == 0 else b"" if i % 25 == 1 else b"key-%d" % i
        val = None if i % 31 == 0 else b"" if i % 17 == 0 else (f"value {i} " + codec * (i % 9)).encode()
        headers = [] if i % 4 == 0 else [("n", b"%d" % i), ("dup", b"a"), ("dup", b"b")] if i % 4 == 1 \
            else [("nul", None), ("empty", b"")] if i % 4 == 2 else [("ü", "✓".encode())]
        out.append((i % PARTITIONS, key, val, headers, base_ts + (i * 7919) % 1000))
    return out


def ck_consume_all(bootstrap: str, topic: str, n: int) -> list:
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                           "enable.auto.offset.store": False, "fetch.wait.max.ms": 100, "check.crcs": True})
    try:
        consumer.assign([CKTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < n:
            assert time.monotonic() < deadline, f"{len(out)} of {n} messages after {TIMEOUT}s"
            for m in consumer.consume(num_messages=1000, timeout=0.2):
                assert m.error() is None, m.error()
                out.append(m)
        assert not consumer.consume(num_messages=10, timeout=0.3)
        assert len(out) == n
        return out
    finally:
        consumer.close()


async def check_codec_on_broker(bootstrap: str, topic: str, codec: str, n: int, *, allowed=None,
                                mostly=None) -> None:
    """All `n` records are on the broker, in batches compressed with `codec` (or one of
    `allowed`; with `mostly`, more than half of the records are in batches of that codec)."""
    total = in_mostly = 0
    for p in range(PARTITIONS):
        batches = await raw_batches(bootstrap, topic, p)
        assert {b.compression for b in batches} <= (allowed or {CODECS[codec]}), [b.compression for b in batches]
        total += sum(len(b.records) for b in batches)
        in_mostly += sum(len(b.records) for b in batches if b.compression == mostly)
    assert total == n
    if mostly is not None:
        assert in_mostly > n // 2, (in_mostly, n)


# --------------------------------------------------------------------------- odradek -> librdkafka, kcat


@pytest.mark.parametrize("codec", list(CODECS))
def test_odradek_produces_librdkafka_and_kcat_read(broker, topic_name, codec):
    records = sample(codec, int(time.time() * 1000) - 60_000)

    async def produce():
        await create_topic(broker.bootstrap, topic_name, PARTITIONS)
        async with AsyncProducer(broker.bootstrap, compression_type=codec, linger_ms=20) as p:
            futs = [await p.send(topic_name, v, k, partition=part, headers=h, timestamp_ms=ts)
                    for part, k, v, h, ts in records]
            metas = await asyncio.gather(*futs)
        await check_codec_on_broker(broker.bootstrap, topic_name, codec, N)
        return metas

    metas = arun(produce())
    expected = {(m.partition, m.offset): r for m, r in zip(metas, records)}
    assert len(expected) == N

    # librdkafka
    for m in ck_consume_all(broker.bootstrap, topic_name, N):
        _, key, val, headers, ts = expected[(m.partition(), m.offset())]
        assert (m.key(), m.value()) == (key, val)
        assert (m.headers() or []) == headers
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, ts)

    # kcat (%K/%S: lengths, -1 for null; %h: headers as n=v CSV, NULL for a null value)
    if KCAT is None:
        pytest.skip("kcat not found on PATH")
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q", "-o", "beginning",
               "-f", "%p|%o|%T|%K|%k|%S|%s|%h\n")
    rows = out.decode().split("\n")
    assert rows.pop() == ""
    assert len(rows) == N
    seen = set()
    for row in rows:
        p, o, ts, klen, k, vlen, v, h = row.split("|")
        _, key, val, headers, stamp = expected[(int(p), int(o))]
        seen.add((int(p), int(o)))
        assert int(ts) == stamp
        assert int(klen) == (-1 if key is None else len(key)) and k.encode() == (key or b"")
        assert int(vlen) == (-1 if val is None else len(val)) and v.encode() == (val or b"")
        assert h == ",".join(f"{hk}={'NULL' if hv is None else hv.decode()}" for hk, hv in headers)
    assert len(seen) == N


# --------------------------------------------------------------------------- librdkafka, kcat -> odradek


@pytest.mark.parametrize("codec", list(CODECS))
def test_librdkafka_produces_odradek_reads(broker, topic_name, codec):
    records = sample(codec, int(time.time() * 1000) - 60_000)
    arun(create_topic(broker.bootstrap, topic_name, PARTITIONS))
    producer = CKProducer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20,
                           "acks": "all"})
    delivered: dict[int, tuple[int, int]] = {}
    errors = []

    def report(i):
        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                delivered[i] = (msg.partition(), msg.offset())
        return on_delivery

    for i, (part, key, val, headers, ts) in enumerate(records):
        producer.produce(topic_name, value=val, key=key, partition=part, timestamp=ts, headers=headers,
                         on_delivery=report(i))
    assert producer.flush(TIMEOUT) == 0
    assert errors == [] and len(delivered) == N

    async def check():
        # librdkafka sends a batch uncompressed when compressing it would make it larger
        # (rd_kafka_msgset_writer_compress): a small batch, as a loaded machine's linger
        # can cut, may arrive as codec 0. Most batches must still carry the codec.
        await check_codec_on_broker(broker.bootstrap, topic_name, codec, N, allowed={CODECS[codec], 0},
                                    mostly=CODECS[codec])
        return await consume_all(broker.bootstrap, topic_name, PARTITIONS, N)

    got = {(r.partition, r.offset): r for r in arun(check())}
    for i, (part, key, val, headers, ts) in enumerate(records):
        r = got[delivered[i]]
        assert r.partition == part
        assert (r.key, r.value, r.headers) == (key, val, tuple(headers))
        assert (r.timestamp, r.timestamp_type) == (ts, 0)


@needs_kcat
@pytest.mark.parametrize("codec", list(CODECS))
def test_kcat_produces_odradek_reads(broker, topic_name, codec):
    arun(create_topic(broker.bootstrap, topic_name, PARTITIONS))
    lines = [(f"key-{i}", f"value {i} " + codec * (i % 9)) for i in range(N - 1)] + [("", "empty key")]
    stdin = "".join(f"{k}|{v}\n" for k, v in lines).encode()
    before = int(time.time() * 1000)
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, "-K", "|", "-z", codec, "-H", "codec=" + codec,
         "-H", "nullhdr", "-X", "linger.ms=20", stdin=stdin)
    after = int(time.time() * 1000)

    async def check():
        # kcat's librdkafka (2.0.2 in Debian) compresses gzip, snappy and lz4 only if the broker
        # accepts Produce v0 (rdkafka_msgset_writer.c: "Broker does not support compression
        # type"), which odradek, like Kafka 4 (KIP-896), does not: it sends those uncompressed.
        # zstd needs Produce v7, so that batch is compressed. librdkafka 2.16 (confluent_kafka,
        # test_librdkafka_produces_odradek_reads) compresses with all five.
        allowed = {CODECS[codec]} if codec in ("none", "zstd") else {CODECS[codec], CODECS["none"]}
        await check_codec_on_broker(broker.bootstrap, topic_name, codec, N, allowed=allowed)
        return await consume_all(broker.bootstrap, topic_name, PARTITIONS, N)

    records = arun(check())
    assert {r.key.decode(): r.value.decode() for r in records} == dict(lines)
    per: dict[int, list[int]] = {}
    for r in records:
        assert r.headers == (("codec", codec.encode()), ("nullhdr", None))
        assert before - 1000 <= r.timestamp <= after + 1000 and r.timestamp_type == 0
        per.setdefault(r.partition, []).append(int(r.key.decode().split("-")[1]) if r.key else N)
    for part, order in per.items():  # stdin order is kept within each partition
        assert order == sorted(order), f"partition {part}"


# --------------------------------------------------------------------------- key partitioning


def test_keyed_partitions_match_librdkafka_murmur2_random(broker, topic_name):
    partitions = 7
    keys = [f"user-{i}".encode() for i in range(250)] + [b"k" * n for n in range(1, 21)] + \
        [b"\x00", b"\xff\xfe\xfd", "ключ".encode(), bytes(range(256)), b""]
    assert len(set(keys)) == len(keys)
    arun(create_topic(broker.bootstrap, topic_name, partitions))

    async def ours():
        async with AsyncProducer(broker.bootstrap, linger_ms=10) as p:
            metas = await asyncio.gather(*[await p.send(topic_name, b"odradek", k) for k in keys])
        return {k: m.partition for k, m in zip(keys, metas)}

    odradek_parts = arun(ours())
    theirs: dict[bytes, int] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            theirs[msg.key()] = msg.partition()

    producer = CKProducer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random", "linger.ms": 10})
    for k in keys:
        producer.produce(topic_name, value=b"librdkafka", key=k, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT) == 0
    assert errors == [] and len(theirs) == len(keys)
    assert {k: (odradek_parts[k], theirs[k]) for k in keys if odradek_parts[k] != theirs[k]} == {}
    assert len(set(odradek_parts.values())) == partitions

    # and on the broker: each key's records, from both producers, share one partition
    records = arun(consume_all(broker.bootstrap, topic_name, partitions, 2 * len(keys)))
    where: dict[bytes, set[int]] = {}
    for r in records:
        where.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for ps in where.values())
