"""read_committed on the consumer (KIP-98): aborted transactions dropped
(`odradek.client.aborted`, `fetcher.Positions.on_partition`), control batches skipped in both
isolation levels, positions moved past both, and the isolation level on the wire (Fetch and
ListOffsets) against a scripted fake broker."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import AsyncConsumer, TopicPartition
from odradek.client.aborted import AbortedTransactions
from odradek.client.fetcher import Positions
from odradek.records.batch import read_header
from odradek.records.codec import encode_batch
from odradek.records.control import ABORT, COMMIT, Marker, encode_marker

from .fakes import FakeBroker, list_offsets_reply

A = TopicPartition("t", 0)
TS = 1_700_000_000_000


def data(first: int, n: int, *, pid: int = -1, txn: bool = False) -> bytes:
    """Records first..first+n-1 with values b"v<offset>", from producer `pid`."""
    return encode_batch([(o, TS + o, None, b"v%d" % o) for o in range(first, first + n)], base_offset=first,
                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                        is_transactional=txn)


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return encode_marker(Marker(pid, 0, commit, 0), TS, base_offset=offset)


def consumed(aborted, *chunks, fetch_offset: int = 0, at: int = 0, take: int = 100):
    p = Positions()
    p.set([A])
    p.seek(A, at)
    p.on_partition(A, fetch_offset, b"".join(chunks), 100, aborted)
    recs = p.take(take)
    return [r.offset for r in recs], p.parts[A].position


# ---------------------------------------------------------------- the filter alone


def test_filter_follows_kafkas_fetcher():
    f = AbortedTransactions([(5, 10)])  # producer 5 aborted a transaction starting at offset 10
    h = lambda chunk: read_header(chunk)  # noqa: E731
    assert not f.skip(h(data(0, 10, pid=5, txn=True)), lambda: None)  # before the aborted one began
    assert f.skip(h(data(10, 3, pid=5, txn=True)), lambda: None)
    assert not f.skip(h(data(13, 2, pid=6, txn=True)), lambda: None)  # another producer
    assert not f.skip(h(data(15, 2)), lambda: None)  # not transactional
    assert not f.skip(h(marker(17, 5, False)), lambda: ABORT)  # its ABORT marker ends it
    assert not f.skip(h(data(18, 2, pid=5, txn=True)), lambda: None)  # the next transaction counts


def test_filter_takes_kio_entries_and_calls_the_marker_reader_only_for_control_batches():
    f = AbortedTransactions([NS(producer_id=5, first_offset=0)])
    called = []
    assert f.skip(read_header(data(0, 2, pid=5, txn=True)), lambda: called.append(1))
    assert called == []
    f.skip(read_header(marker(2, 5, True)), lambda: called.append(1) or COMMIT)
    assert called == [1]


# ---------------------------------------------------------------- positions


def test_aborted_records_are_dropped_and_committed_ones_kept():
    chunks = [data(0, 3, pid=5, txn=True), marker(3, 5, commit=False),  # aborted: 0..2, marker 3
              data(4, 2, pid=5, txn=True), marker(6, 5, commit=True),  # committed: 4, 5, marker 6
              data(7, 2)]  # plain records
    got, position = consumed([(5, 0)], *chunks)
    assert got == [4, 5, 7, 8]
    assert position == 9


def test_read_uncommitted_sees_aborted_records_but_never_markers():
    chunks = [data(0, 3, pid=5, txn=True), marker(3, 5, commit=False), data(4, 2, pid=5, txn=True),
              marker(6, 5, commit=True)]
    got, position = consumed(None, *chunks)
    assert got == [0, 1, 2, 4, 5]
    assert position == 7


def test_interleaved_producers():
    chunks = [data(0, 2, pid=5, txn=True), data(2, 2, pid=6, txn=True), data(4, 1, pid=5, txn=True),
              marker(5, 6, commit=True), marker(6, 5, commit=False), data(7, 1, pid=5, txn=True),
              marker(8, 5, commit=True)]
    got, position = consumed([(5, 0)], *chunks)
    assert got == [2, 3, 7]  # producer 5's first transaction aborted, its second committed
    assert position == 9


def test_an_aborted_transaction_that_began_before_the_fetch_offset():
    chunks = [data(10, 2, pid=5, txn=True), marker(12, 5, commit=False), data(13, 1)]
    got, position = consumed([(5, 4)], *chunks, fetch_offset=10, at=10)
    assert got == [13] and position == 14


def test_a_fetch_of_only_markers_and_aborted_records_moves_the_position():
    # Java's consumer: nextFetchOffset moves past control and aborted batches even when no
    # record is returned, so the consumer does not fetch the same offsets forever.
    got, position = consumed([(5, 3)], marker(2, 9, commit=True), data(3, 2, pid=5, txn=True),
                             marker(5, 5, commit=False), fetch_offset=2, at=2)
    assert got == [] and position == 6


def test_aborted_list_without_read_committed_has_no_effect():
    # Only read_committed passes the list; an empty list means "nothing aborted".
    got, _ = consumed([], data(0, 2, pid=5, txn=True), marker(2, 5, commit=False))
    assert got == [0, 1]


# ---------------------------------------------------------------- on the wire


def fetch_with_aborted(chunks: bytes, aborted: list[tuple[int, int]], hw: int, lso: int):
    def handler(fake, req):
        responses = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                first = int(p.fetch_offset) == 0
                parts.append({"partition_index": p.partition, "error_code": ErrorCode.none, "high_watermark": hw,
                              "last_stable_offset": lso, "log_start_offset": 0,
                              "aborted_transactions": [{"producer_id": pid, "first_offset": off}
                                                       for pid, off in aborted] if first else None,
                              "preferred_read_replica": -1, "records": chunks if first else None})
            responses.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}
    return handler


@pytest.mark.parametrize("level,wire,expected", [
    (None, 1, [4, 5]),  # the default is read_committed, as librdkafka's
    ("read_committed", 1, [4, 5]),
    ("read_uncommitted", 0, [0, 1, 2, 4, 5]),
])
def test_consumer_isolation_level_on_fetch_and_list_offsets(level, wire, expected):
    chunks = b"".join([data(0, 3, pid=5, txn=True), marker(3, 5, commit=False), data(4, 2, pid=5, txn=True),
                       marker(6, 5, commit=True)])
    # The broker would only list aborted transactions for read_committed; listing them
    # either way shows the client ignores them for read_uncommitted.
    fetch = fetch_with_aborted(chunks, [(5, 0)], hw=7, lso=7)

    async def main():
        async with FakeBroker({1: fetch, 2: lambda f, r: list_offsets_reply(r, lambda t, p, ts: (ErrorCode.none, 0))},
                              topics={"t": 1}) as fake:
            kw = {} if level is None else {"isolation_level": level}
            async with AsyncConsumer(fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10, **kw) as c:
                c.assign([A])
                got: list[int] = []
                for _ in range(50):
                    got += [r.offset for r in await c.poll(100)]
                    if (await c.position(A)) >= 7:
                        break
                assert got == expected
                assert await c.position(A) == 7
                await c.end_offsets([A])
            assert {int(r.body.isolation_level) for r in fake.of(1)} == {wire}
            assert {int(r.body.isolation_level) for r in fake.of(2)} == {wire}
    asyncio.run(asyncio.wait_for(main(), 30))


def test_unknown_isolation_level_is_refused():
    with pytest.raises(ValueError, match="isolation_level"):
        AsyncConsumer("127.0.0.1:1", isolation_level="read_dirty")
