"""Fetch and ListOffsets with transactions (KIP-98), driven in-process: read_committed reads stop at
the last stable offset and name the aborted transactions, read_uncommitted reads to the high
watermark, ListOffsets latest answers the LSO for read_committed, and a parked read_committed
fetch wakes when a marker moves the LSO."""

from __future__ import annotations

import asyncio
import uuid

from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.records.control import Marker
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)
PID = 4000
UNCOMMITTED, COMMITTED = 0, 1


def produce(inproc, topic: str, values: list[bytes], pid: int = -1, seq: int = -1, transactional: bool = False):
    # The broker's clock stamps the markers: records of the same age keep one segment.
    now = inproc.broker.clock()
    batch = encode_batch([Record(i, now, b"k", v) for i, v in enumerate(values)], producer_id=pid,
                         producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, is_transactional=transactional)
    frame = request_frame(0, 9, {"transactional_id": "tx" if transactional else None, "acks": -1, "timeout": 5000,
                                 "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    _, resp = parse_response(0, 9, inproc.handle(frame))
    p = resp.responses[0].partition_responses[0]
    assert int(p.error_code) == 0, p
    return p.base_offset


def marker(inproc, topic: str, pid: int, commit: bool, coordinator_epoch: int = 0) -> int:
    """What WriteTxnMarkers does on the partition's leader."""
    plog = inproc.broker.logs.get(topic, 0)
    info = plog.append_marker(Marker(pid, 0, commit, coordinator_epoch), inproc.broker.clock())
    inproc.broker.replicas.appended((topic, 0), plog)
    return info.base_offset


def fetch_frame(topic: str, offset: int, isolation: int, version: int = 12, max_wait: int = 0):
    return request_frame(1, version, {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": ZERO, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}]})


def fetch(inproc, topic: str, offset: int, isolation: int, version: int = 12):
    _, body = parse_response(1, version, inproc.handle(fetch_frame(topic, offset, isolation, version)))
    return body.responses[0].partitions[0]


def offsets(p) -> list[int]:
    return [r.offset for b in decode_batches(p.records or b"") for r in b.records]


def aborted(p) -> list[tuple[int, int]] | None:
    if p.aborted_transactions is None:
        return None
    return [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]


def latest(inproc, topic: str, isolation: int, timestamp: int = -1, version: int = 7) -> int:
    frame = request_frame(2, version, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp,
                                        "max_num_offsets": 1}]}]})
    _, resp = parse_response(2, version, inproc.handle(frame))
    p = resp.topics[0].partitions[0]
    assert int(p.error_code) == 0
    return p.offset


def test_read_committed_stops_at_the_lso_of_an_open_transaction(inproc):
    inproc.broker.create_topic("tx", 1, {})
    produce(inproc, "tx", [b"before"])  # 0
    produce(inproc, "tx", [b"t1", b"t2"], pid=PID, seq=0, transactional=True)  # 1..2, open
    produce(inproc, "tx", [b"after"])  # 3
    committed = fetch(inproc, "tx", 0, COMMITTED)
    assert offsets(committed) == [0]
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 1)
    assert aborted(committed) == []
    uncommitted = fetch(inproc, "tx", 0, UNCOMMITTED)
    assert offsets(uncommitted) == [0, 1, 2, 3]
    assert uncommitted.last_stable_offset == 1  # the real LSO whatever the isolation level
    assert aborted(uncommitted) is None
    # Past the LSO a read_committed consumer gets nothing (and no error) until the marker.
    assert offsets(fetch(inproc, "tx", 1, COMMITTED)) == []
    assert latest(inproc, "tx", COMMITTED) == 1 and latest(inproc, "tx", UNCOMMITTED) == 4
    marker(inproc, "tx", PID, commit=True)  # 4
    committed = fetch(inproc, "tx", 1, COMMITTED)
    assert offsets(committed) == [1, 2, 3, 4]  # 4: the marker, a control record the consumer skips
    assert committed.last_stable_offset == 5 and aborted(committed) == []
    assert latest(inproc, "tx", COMMITTED) == 5


def test_read_committed_names_the_aborted_transactions_it_returns(inproc):
    inproc.broker.create_topic("ab", 1, {})
    produce(inproc, "ab", [b"a1", b"a2"], pid=PID, seq=0, transactional=True)  # 0..1
    produce(inproc, "ab", [b"x"])  # 2
    marker(inproc, "ab", PID, commit=False)  # 3
    produce(inproc, "ab", [b"b1"], pid=PID + 1, seq=0, transactional=True)  # 4
    marker(inproc, "ab", PID + 1, commit=True)  # 5
    p = fetch(inproc, "ab", 0, COMMITTED)
    assert offsets(p) == [0, 1, 2, 3, 4, 5]  # the consumer drops what the list names
    assert aborted(p) == [(PID, 0)]
    assert p.last_stable_offset == 6
    assert aborted(fetch(inproc, "ab", 4, COMMITTED)) == []  # the abort's marker is before this range
    assert aborted(fetch(inproc, "ab", 0, UNCOMMITTED)) is None


def test_list_offsets_by_timestamp_answers_only_below_the_lso_for_read_committed(inproc):
    inproc.broker.create_topic("ts", 1, {})
    produce(inproc, "ts", [b"t"], pid=PID, seq=0, transactional=True)  # 0
    assert latest(inproc, "ts", UNCOMMITTED, timestamp=0) == 0
    assert latest(inproc, "ts", COMMITTED, timestamp=0) == -1  # Kafka's lastFetchableOffset filter
    marker(inproc, "ts", PID, commit=True)
    assert latest(inproc, "ts", COMMITTED, timestamp=0) == 0


def test_a_parked_read_committed_fetch_wakes_when_the_marker_moves_the_lso(inproc):
    inproc.broker.create_topic("lp", 1, {})
    produce(inproc, "lp", [b"t"], pid=PID, seq=0, transactional=True)  # 0, open

    async def scenario():
        task = asyncio.ensure_future(inproc.broker.handle_frame(fetch_frame("lp", 0, COMMITTED, max_wait=10_000)[4:]))
        await asyncio.sleep(0.2)
        assert not task.done(), "read_committed answered data past the LSO"
        marker(inproc, "lp", PID, commit=True)
        return await asyncio.wait_for(task, 5)

    _, body = parse_response(1, 12, inproc.loop.run_until_complete(scenario()))
    p = body.responses[0].partitions[0]
    assert offsets(p) == [0, 1] and p.last_stable_offset == 2


def test_fetch_v4_carries_the_lso_and_aborted_transactions(inproc):
    inproc.broker.create_topic("v4", 1, {})
    produce(inproc, "v4", [b"a"], pid=PID, seq=0, transactional=True)
    marker(inproc, "v4", PID, commit=False)
    frame = request_frame(1, 4, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                 "isolation_level": COMMITTED, "topics": [{"topic": "v4", "partitions": [{
                                     "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    _, body = parse_response(1, 4, inproc.handle(frame))
    p = body.responses[0].partitions[0]
    assert p.last_stable_offset == 2 and aborted(p) == [(PID, 0)]
