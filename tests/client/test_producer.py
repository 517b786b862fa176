"""The odradek producer (`AsyncProducer` and the sync `Producer`) against a real broker process.

Every test produces with odradek and checks the outcome from the other side: records are
read back with the odradek consumer, and where batch boundaries or the codec matter, the
raw RecordBatches are fetched and decoded (`raw_batches`). Retries are provoked by a tiny
asyncio TCP proxy (`DroppingProxy`) that the broker advertises as its own address, so every
connection the producer opens goes through it; it cuts chosen Produce requests (half of
the request is forwarded) or swallows their responses (the request is appended, the answer
never arrives), both of which the producer must survive without loss or reordering, and,
being idempotent by default with acks=all, without duplicates.

The helpers at the top are shared with the other client test modules.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from odradek.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    KafkaError,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.net import Client
from odradek.client.partitioner import key_partition
from odradek.client.versions import Api
from odradek.records.codec import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    DecodedBatch,
    decode_batches,
)

TIMEOUT = 30.0  # seconds: bound for any single test coroutine's wait
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


# --------------------------------------------------------------------------- shared helpers


def arun(coro, timeout: float = 90.0):
    """Run a test coroutine on a fresh event loop, bounded."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    async with AsyncAdmin(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1, dict(configs or {}))])


async def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, *,
                      timeout: float = TIMEOUT, settle_ms: int = 300) -> list[ConsumerRecord]:
    """Every record of `topic` from the beginning (manual assignment, odradek consumer):
    exactly `expected` of them, nothing more within `settle_ms`."""
    consumer = AsyncConsumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout
        for _ in range(10_000):
            if len(out) >= expected:
                break
            assert time.monotonic() < deadline, f"{len(out)} of {expected} records after {timeout}s"
            out += await consumer.poll(200)
        assert len(out) == expected, f"{len(out)} records consumed, {expected} expected"
        extra = await consumer.poll(settle_ms)
        assert extra == [], f"{len(extra)} records beyond the {expected} expected"
        return out
    finally:
        await consumer.close()


def by_partition(records: list[ConsumerRecord]) -> dict[int, list[ConsumerRecord]]:
    out: dict[int, list[ConsumerRecord]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


async def raw_batches(bootstrap: str, topic: str, partition: int, offset: int = 0) -> list[DecodedBatch]:
    """The RecordBatches of a partition exactly as the broker serves them (one big Fetch)."""
    client = Client(bootstrap)
    try:
        await client.refresh_metadata([topic])
        node = await client.leader_for(TopicPartition(topic, partition))
        body = {"cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 64 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                     "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 64 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        resp = await client.send(node, Api.FETCH, body)
        [t] = resp.responses
        [p] = t.partitions
        assert p.error_code == 0, p.error_code
        return decode_batches(p.records, verify_crc=True) if p.records else []
    finally:
        await client.close()


def count_produce_requests(producer: AsyncProducer) -> list[dict]:
    """Record the body of every Produce request the producer sends from now on."""
    calls: list[dict] = []
    original = producer.client.send

    async def send(node, api, body, **kw):
        if api == Api.PRODUCE:
            calls.append(body)
        return await original(node, api, body, **kw)

    producer.client.send = send
    return calls


def check_in_order(seqs: list[int], n: int) -> int:
    """`seqs` are send sequence numbers in log order for one partition. Every one of 0..n-1
    must appear, first occurrences in order; a duplicate is only allowed as a retried batch,
    i.e. a consecutive run that repeats records just written and ends right before the next
    new one. Returns the number of duplicates."""
    nxt = 0  # next new record expected
    dups = 0
    run: int | None = None  # inside a duplicate run: the next duplicate expected
    for i, s in enumerate(seqs):
        if run is not None and s == run:
            dups += 1
            run += 1
            if run == nxt:
                run = None  # the resent batch is complete
            continue
        assert run is None, f"position {i}: duplicate run broken off at {run} by {s} (reordered)"
        if s == nxt:
            nxt += 1
        elif s < nxt:
            dups += 1
            run = s + 1
            if run == nxt:
                run = None
        else:
            raise AssertionError(f"position {i}: record {s} written before record {nxt} (lost or reordered)")
    assert run is None, f"log ends inside a duplicate run at {run}"
    assert nxt == n, f"only records 0..{nxt - 1} of {n} were written"
    return dups


def test_check_in_order_detects_loss_reordering_and_allows_resends():
    # the checker used by the retry tests must be able to fail
    assert check_in_order([0, 1, 2, 3], 4) == 0
    assert check_in_order([0, 1, 2, 1, 2, 3], 4) == 2  # batch [1, 2] written twice
    with pytest.raises(AssertionError, match="lost or reordered"):
        check_in_order([0, 2, 1, 3], 4)
    with pytest.raises(AssertionError, match="only records"):
        check_in_order([0, 1, 2], 4)
    with pytest.raises(AssertionError, match="reordered"):
        check_in_order([0, 1, 2, 1, 3, 2], 4)
    with pytest.raises(AssertionError, match="duplicate run"):
        check_in_order([0, 1, 2, 0, 1], 3)


# --------------------------------------------------------------------------- acks


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker, topic_name, acks):
    n = 60

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        async with AsyncProducer(broker.bootstrap, acks=acks, linger_ms=2) as p:
            requests = count_produce_requests(p)
            futs = [await p.send(topic_name, b"v%03d" % i, b"k%03d" % i) for i in range(n)]
            await p.flush(TIMEOUT)
            metas = [f.result() for f in futs]
        assert requests and all(r["acks"] == {0: 0, 1: 1, "all": -1}[acks] for r in requests)
        assert all(m.topic == topic_name and m.partition == 0 for m in metas)
        if acks == 0:
            assert [m.offset for m in metas] == [-1] * n  # nothing is answered
        else:
            assert [m.offset for m in metas] == list(range(n))
        records = await consume_all(broker.bootstrap, topic_name, 1, n)
        assert [(r.offset, r.key, r.value) for r in records] == [(i, b"k%03d" % i, b"v%03d" % i) for i in range(n)]
        # acks=all is idempotent by default: batches carry a producer id and sequence numbers
        headers = [bt.header for bt in await raw_batches(broker.bootstrap, topic_name, 0)]
        if acks == "all":
            assert all(h.producer_id >= 0 for h in headers)
            assert [h.base_sequence for h in headers] == [h.base_offset for h in headers]
        else:
            assert {(h.producer_id, h.base_sequence) for h in headers} == {(-1, -1)}

    arun(main())


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize("codec", list(CODECS))
def test_compression_round_trip(broker, topic_name, codec):
    n = 400
    sent = [(f"key-{i}".encode() if i % 10 else None,
             (f"value {i} " + codec * (i % 13)).encode() if i % 17 else b"",
             [("i", str(i).encode()), ("codec", codec.encode())] if i % 3 else [])
            for i in range(n)]

    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        async with AsyncProducer(broker.bootstrap, compression_type=codec, linger_ms=50) as p:
            futs = [await p.send(topic_name, v, k, partition=i % 2, headers=h) for i, (k, v, h) in enumerate(sent)]
            await p.flush(TIMEOUT)
        metas = [f.result() for f in futs]
        records = await consume_all(broker.bootstrap, topic_name, 2, n)
        got = {(r.partition, r.offset): r for r in records}
        for (k, v, h), m in zip(sent, metas):
            r = got[(m.partition, m.offset)]
            assert (r.key, r.value, r.headers) == (k, v, tuple(h))
        # the records really went over the wire with this codec
        for partition in range(2):
            batches = await raw_batches(broker.bootstrap, topic_name, partition)
            assert batches and {b.compression for b in batches} == {CODECS[codec]}
            assert sum(len(b.records) for b in batches) == n // 2

    arun(main())


# --------------------------------------------------------------------------- headers, timestamps


def test_headers_and_millisecond_timestamps_survive(broker, topic_name):
    # odd milliseconds, an hour back: well inside the 7-day retention (the broker deletes
    # segments whose newest timestamp is older than that)
    base = (int(time.time() * 1000) - 3_600_000) // 1000 * 1000 + 123
    headers = [
        [],
        [("a", b"1")],
        [("dup", b"x"), ("dup", b"y"), ("dup", None)],  # repeated keys, a null value, order kept
        [("empty", b""), ("bin", bytes(range(256))), ("ünï", "cödé ✓")],  # str values are encoded as UTF-8
    ]
    stamps = [base, base + 1, base + 999, base - 86_400_001]  # non-monotonic within one batch

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        async with AsyncProducer(broker.bootstrap, linger_ms=20) as p:
            futs = [await p.send(topic_name, b"v%d" % i, partition=0, headers=h, timestamp_ms=ts)
                    for i, (h, ts) in enumerate(zip(headers, stamps))]
            before = int(time.time() * 1000)
            default = await p.send(topic_name, b"now", partition=0)  # no timestamp: the current time
            await p.flush(TIMEOUT)
            after = int(time.time() * 1000)
        metas = [f.result() for f in futs]
        assert [m.timestamp for m in metas] == stamps
        assert before <= default.result().timestamp <= after
        records = await consume_all(broker.bootstrap, topic_name, 1, len(headers) + 1)
        assert [r.timestamp for r in records[:-1]] == stamps
        assert {r.timestamp_type for r in records} == {0}  # CreateTime
        assert records[-1].timestamp == default.result().timestamp
        expected = [tuple((k, v.encode() if isinstance(v, str) else v) for k, v in h) for h in headers]
        assert [r.headers for r in records[:-1]] == expected
        assert records[-1].headers == ()

    arun(main())


# --------------------------------------------------------------------------- offsets


def test_delivery_futures_give_consecutive_offsets_per_partition(broker, topic_name):
    n = 600

    async def main():
        await create_topic(broker.bootstrap, topic_name, 3)
        async with AsyncProducer(broker.bootstrap, linger_ms=5, batch_size=2000) as p:
            futs = [await p.send(topic_name, b"%d" % i, partition=(i * 7) % 3) for i in range(n)]
            metas = await asyncio.gather(*futs)
        per: dict[int, list[RecordMetadata]] = {}
        for i, m in enumerate(metas):
            assert m.partition == (i * 7) % 3
            per.setdefault(m.partition, []).append(m)
        assert sorted(per) == [0, 1, 2]
        for partition, ms in per.items():
            assert [m.offset for m in ms] == list(range(len(ms))), f"partition {partition}"
        records = await consume_all(broker.bootstrap, topic_name, 3, n)
        got = {(r.partition, r.offset): int(r.value) for r in records}
        assert got == {(m.partition, m.offset): i for i, m in enumerate(metas)}

    arun(main())


# --------------------------------------------------------------------------- retries through a dropping proxy


class DroppingProxy:
    """Loopback TCP proxy in front of one broker that breaks chosen Produce requests.

    Produce requests are counted across all connections (1-based). For each number in
    `drop_at`: mode "request" forwards only the first half of that request's frame and then
    aborts both sides (the broker never appends it); mode "response" forwards the request
    and aborts both sides when its response comes back, instead of delivering it (the broker
    appended it; the producer cannot know)."""

    def __init__(self, sock: socket.socket, upstream_port: int, drop_at: set[int], mode: str) -> None:
        assert mode in ("request", "response")
        self.sock = sock
        self.upstream_port = upstream_port
        self.drop_at = drop_at
        self.mode = mode
        self.produce_requests = 0
        self.dropped = 0
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> DroppingProxy:
        self.server = await asyncio.start_server(self._handle, sock=self.sock)
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    @staticmethod
    async def _frames(reader: asyncio.StreamReader):
        buf = bytearray()
        while True:
            data = await reader.read(1 << 16)
            if not data:
                return
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + size:
                    break
                frame = bytes(buf[: 4 + size])
                del buf[: 4 + size]
                yield frame

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        doomed: set[int] = set()  # correlation ids whose responses must not arrive

        def abort() -> None:
            cwriter.transport.abort()
            uwriter.transport.abort()

        async def client_to_broker() -> None:
            async for frame in self._frames(creader):
                api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
                if api_key == Api.PRODUCE:
                    self.produce_requests += 1
                    if self.produce_requests in self.drop_at:
                        if self.mode == "request":
                            uwriter.write(frame[: len(frame) // 2])
                            await uwriter.drain()
                            self.dropped += 1
                            abort()
                            return
                        doomed.add(correlation_id)
                uwriter.write(frame)
                await uwriter.drain()

        async def broker_to_client() -> None:
            async for frame in self._frames(ureader):
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                if correlation_id in doomed:
                    self.dropped += 1
                    abort()
                    return
                cwriter.write(frame)
                await cwriter.drain()

        tasks = [asyncio.ensure_future(client_to_broker()), asyncio.ensure_future(broker_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            abort()


@pytest.fixture
def proxied_broker(broker_factory):
    """(broker, listening socket): a broker of its own that advertises the socket's address,
    so that every client connection, not just the bootstrap one, goes through the proxy."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    b = broker_factory("proxied", extra=["--advertise", f"127.0.0.1:{port}"])
    yield b, sock
    sock.close()


@pytest.mark.parametrize(("mode", "idempotent"), [("request", True), ("response", True), ("request", False),
                                                  ("response", False)])
def test_retries_keep_partition_order_through_dropped_connections(proxied_broker, topic_name, mode, idempotent,
                                                                 record_property):
    b, sock = proxied_broker
    partitions, per_partition = 3, 400
    n = partitions * per_partition
    drop_at = {3, 6}

    async def main():
        proxy = await DroppingProxy(sock, b.port, drop_at, mode).start()
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"
        try:
            await create_topic(bootstrap, topic_name, partitions)
            async with AsyncProducer(bootstrap, acks="all", linger_ms=5, batch_size=1500,
                                     retry_backoff_ms=20, enable_idempotence=idempotent) as p:
                assert (p.producer_id >= 0) == idempotent
                futs = []
                for i in range(n):
                    futs.append(await p.send(topic_name, b"%d|" % i + b"p" * 30, partition=i % partitions))
                    if i % 100 == 99:
                        await asyncio.sleep(0.005)  # let batches go out while more are appended
                await p.flush(TIMEOUT)
            metas = [f.result() for f in futs]  # every record delivered: none failed
            assert proxy.produce_requests >= 15  # ~30 records a batch: many requests, some retried
            assert proxy.dropped == len(drop_at), f"proxy dropped {proxy.dropped} of {len(drop_at)}"
            assert proxy.connections > 2  # the producer reconnected after each drop
            # read the whole log back (through the proxy: the broker advertises it); with
            # duplicates the record count is not known in advance
            dups = 0
            for partition in range(partitions):
                log = [r for bt in await raw_batches(bootstrap, topic_name, partition) for r in bt.records]
                assert [r.offset for r in log] == list(range(len(log)))
                values = [int(r.value.split(b"|")[0]) for r in log]
                assert all(v % partitions == partition for v in values)
                seqs = [(v - partition) // partitions for v in values]
                dups += check_in_order(seqs, per_partition)
                # each future names the offset where its record finally landed, in send order
                offsets = [m.offset for i, m in enumerate(metas) if i % partitions == partition]
                assert offsets == sorted(set(offsets)), f"partition {partition}: futures' offsets not increasing"
                assert [values[o] for o in offsets] == list(range(partition, n, partitions))
        finally:
            await proxy.close()
        record_property("duplicates", dups)
        print(f"\nDUPLICATES mode={mode} idempotent={idempotent}: {dups}")
        if idempotent:
            assert dups == 0  # the broker recognises a resent batch by its sequence number
        # Without idempotence, duplicates are allowed (at-least-once): a request cut in half is
        # never appended, but requests on the same connection that the broker already
        # appended lose their responses too and are sent again.

    arun(main())


# --------------------------------------------------------------------------- batching


def test_linger_collects_many_records_into_one_batch(broker, topic_name):
    n = 100

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        async with AsyncProducer(broker.bootstrap, linger_ms=300) as p:
            requests = count_produce_requests(p)
            futs = [await p.send(topic_name, b"v%d" % i, partition=0) for i in range(n)]
            await asyncio.sleep(0.05)
            assert not any(f.done() for f in futs)  # still lingering
            metas = await asyncio.gather(*futs)
        assert [m.offset for m in metas] == list(range(n))
        assert len(requests) == 1
        batches = await raw_batches(broker.bootstrap, topic_name, 0)
        assert [(bt.header.base_offset, len(bt.records)) for bt in batches] == [(0, n)]

        # without linger, each awaited record is a request and a batch of its own
        async with AsyncProducer(broker.bootstrap, linger_ms=0) as p:
            requests = count_produce_requests(p)
            for i in range(10):
                await (await p.send(topic_name, b"w%d" % i, partition=0))
        assert len(requests) == 10
        batches = await raw_batches(broker.bootstrap, topic_name, 0)
        assert [len(bt.records) for bt in batches] == [n] + [1] * 10

    arun(main())


def test_batch_size_splits_batches_and_full_batches_do_not_linger(broker, topic_name):
    n, value = 60, b"x" * 100
    batch_size = 1024

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        async with AsyncProducer(broker.bootstrap, linger_ms=20_000, batch_size=batch_size) as p:
            futs = [await p.send(topic_name, value + b"%02d" % i, b"k%02d" % i, partition=0) for i in range(n)]
            # a full batch goes out at once, long before the 20 s linger
            first = await asyncio.wait_for(futs[0], 10)
            assert first.offset == 0
            assert not futs[-1].done()  # the last, partial batch is still lingering
            t0 = time.monotonic()
            await p.flush(TIMEOUT)
            assert time.monotonic() - t0 < 10
            metas = [f.result() for f in futs]
        assert [m.offset for m in metas] == list(range(n))
        batches = await raw_batches(broker.bootstrap, topic_name, 0)
        sizes = [len(bt.records) for bt in batches]
        assert len(batches) > 1 and sum(sizes) == n
        assert len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0], sizes
        for bt in batches:
            payload = sum(len(r.key) + len(r.value) for r in bt.records)
            assert payload <= batch_size
        assert [r.value for bt in batches for r in bt.records] == [value + b"%02d" % i for i in range(n)]

    arun(main())


# --------------------------------------------------------------------------- flush and close


def test_flush_waits_for_everything(broker, topic_name):
    n = 300

    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        async with AsyncProducer(broker.bootstrap, linger_ms=20_000) as p:
            futs = [await p.send(topic_name, b"%d" % i, partition=i % 2) for i in range(n)]
            await asyncio.sleep(0.1)
            assert not any(f.done() for f in futs)
            t0 = time.monotonic()
            await p.flush(TIMEOUT)
            assert time.monotonic() - t0 < 10  # flush does not wait out linger.ms
            assert all(f.done() and f.exception() is None for f in futs)
            await p.flush(1)  # nothing queued: returns at once
        records = await consume_all(broker.bootstrap, topic_name, 2, n)
        assert sorted(int(r.value) for r in records) == list(range(n))

    arun(main())


def test_close_flushes_and_refuses_new_records(broker, topic_name):
    n = 50

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        p = await AsyncProducer(broker.bootstrap, linger_ms=20_000).start()
        futs = [await p.send(topic_name, b"%d" % i) for i in range(n)]
        await p.close()
        assert [f.result().offset for f in futs] == list(range(n))
        with pytest.raises(KafkaError):
            await p.send(topic_name, b"late")
        await p.close()  # idempotent
        records = await consume_all(broker.bootstrap, topic_name, 1, n)
        assert [int(r.value) for r in records] == list(range(n))

    arun(main())


# --------------------------------------------------------------------------- errors


def test_unknown_topic_or_partition(broker, topic_name):
    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        async with AsyncProducer(broker.bootstrap) as p:
            with pytest.raises(KafkaError) as info:
                await p.send(topic_name + "-missing", b"x")
            assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
            with pytest.raises(KafkaError) as info:
                await p.send(topic_name, b"x", partition=2)
            assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
            # the producer is still usable, and the failed sends left nothing behind
            assert (await p.send_and_wait(topic_name, b"ok", partition=1)).offset == 0
        async with AsyncAdmin(broker.bootstrap) as admin:
            topics = await admin.list_topics()
        assert topic_name in topics and topic_name + "-missing" not in topics  # not auto-created

    arun(main())


@pytest.fixture
def small_broker(broker_factory):
    """A broker whose message.max.bytes is 4 KiB."""
    return broker_factory("small", extra=["-o", "message.max.bytes=4096"])


def test_too_large_record_fails_without_blocking_others(small_broker, topic_name):
    bootstrap = small_broker.bootstrap

    async def main():
        await create_topic(bootstrap, topic_name, 2)
        # batch_size below the big record's size: it gets a batch of its own (and the records
        # after it a new one), so only it exceeds the broker's limit
        async with AsyncProducer(bootstrap, linger_ms=5, batch_size=2000) as p:
            before = [await p.send(topic_name, b"before-%d" % i, partition=0) for i in range(3)]
            big = await p.send(topic_name, b"x" * 10_000, partition=0)
            after = [await p.send(topic_name, b"after-%d" % i, partition=0) for i in range(3)]
            other = await p.send(topic_name, b"other", partition=1)
            await p.flush(TIMEOUT)
            with pytest.raises(KafkaError) as info:
                big.result()
            assert info.value.name == "MESSAGE_TOO_LARGE"
            assert not info.value.retriable
            ok = [f.result() for f in before + after]
            assert [m.offset for m in ok] == list(range(6))
            assert other.result().offset == 0
            # and the producer keeps working
            assert (await p.send_and_wait(topic_name, b"later", partition=0)).offset == 6
        records = await consume_all(bootstrap, topic_name, 2, 8)
        assert [r.value for r in by_partition(records)[0]] == \
            [b"before-0", b"before-1", b"before-2", b"after-0", b"after-1", b"after-2", b"later"]

    arun(main())


def test_too_large_record_does_not_fail_records_batched_with_it(small_broker, topic_name):
    # Regression: a MESSAGE_TOO_LARGE answer used to fail every record batched with the
    # oversized one; like Java's producer, the batch is split and the rest delivered.
    bootstrap = small_broker.bootstrap

    async def main():
        await create_topic(bootstrap, topic_name, 1)
        async with AsyncProducer(bootstrap, linger_ms=50) as p:
            small = [await p.send(topic_name, b"s%d" % i) for i in range(2)]
            big = await p.send(topic_name, b"x" * 10_000)
            small += [await p.send(topic_name, b"s%d" % i) for i in range(2, 4)]
            await p.flush(TIMEOUT)
        with pytest.raises(KafkaError, match="MESSAGE_TOO_LARGE"):
            big.result()
        assert [f.exception() for f in small] == [None] * 4, [str(f.exception()) for f in small]
        assert [f.result().offset for f in small] == [0, 1, 2, 3]

    arun(main())


# --------------------------------------------------------------------------- partitioning


def test_keyed_records_land_on_key_partition(broker, topic_name):
    partitions = 5
    keys = [f"user-{i}".encode() for i in range(200)] + [b"", b"\x00\xff", "ключ".encode()]

    async def main():
        await create_topic(broker.bootstrap, topic_name, partitions)
        async with AsyncProducer(broker.bootstrap, linger_ms=5) as p:
            metas = await asyncio.gather(*[await p.send(topic_name, b"v", k) for k in keys])
            again = await asyncio.gather(*[await p.send(topic_name, b"again", k) for k in keys[:20]])
            # null keys: sticky (KIP-480), so a short burst shares one partition
            unkeyed = await asyncio.gather(*[await p.send(topic_name, b"nokey") for _ in range(20)])
        assert [m.partition for m in metas] == [key_partition(k, partitions) for k in keys]
        assert [m.partition for m in again] == [m.partition for m in metas[:20]]
        assert len({m.partition for m in metas}) == partitions
        assert len({m.partition for m in unkeyed}) == 1
        records = await consume_all(broker.bootstrap, topic_name, partitions, len(keys) + 40)
        for r in records:
            if r.key is not None:
                assert r.partition == key_partition(r.key, partitions)

    arun(main())


# --------------------------------------------------------------------------- sync facade


def test_sync_producer(broker, topic_name):
    base = int(time.time() * 1000) - 60_000
    arun(create_topic(broker.bootstrap, topic_name, 2))
    with Producer(broker.bootstrap, linger_ms=5, compression_type="gzip") as p:
        futs = [p.send(topic_name, f"v{i}", f"k{i}", headers={"h": "x"}, timestamp_ms=base + i)
                for i in range(100)]
        missing = p.send(topic_name + "-missing", b"x")
        p.flush(TIMEOUT)
        metas = [f.result(TIMEOUT) for f in futs]
        with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            missing.result(TIMEOUT)
        late = p.send(topic_name, b"last", partition=0)
    # close (leaving the with block) flushed the last record
    assert late.result(0).offset >= 0
    assert [m.timestamp for m in metas] == [base + i for i in range(100)]
    assert all(m.partition == key_partition(f"k{i}".encode(), 2) for i, m in enumerate(metas))
    records = arun(consume_all(broker.bootstrap, topic_name, 2, 101))
    got = {(r.partition, r.offset): r for r in records}
    for i, m in enumerate(metas):
        r = got[(m.partition, m.offset)]
        assert (r.key, r.value, r.headers, r.timestamp) == (f"k{i}".encode(), f"v{i}".encode(), (("h", b"x"),),
                                                           base + i)


def test_log_append_time_topic_reports_the_broker_time(broker, topic_name):
    """A LogAppendTime topic answers Produce with the append time (a datetime in kio):
    delivery must report it rather than fail inside the sender."""
    from odradek.client import AsyncAdmin, NewTopic

    async def main():
        async with AsyncAdmin(broker.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 1, configs={"message.timestamp.type": "LogAppendTime"})])
        async with AsyncProducer(broker.bootstrap) as p:
            before = int(time.time() * 1000)
            meta = await asyncio.wait_for(await p.send(topic_name, b"v", timestamp_ms=1000), 10)
            after = int(time.time() * 1000)
        assert meta.offset == 0
        assert before - 1000 <= meta.timestamp <= after + 1000  # the broker's clock, not the 1000 we sent

    asyncio.run(main())
