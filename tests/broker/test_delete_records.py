"""DeleteRecords (API 21) in process: Kafka's per-partition answers, and what Fetch,
ListOffsets and Produce say about the moved log start offset afterwards."""

from __future__ import annotations

import errno
import uuid

import pytest

from odradek.log.checkpoint import LOG_START_OFFSET_FILE, read_checkpoint
from odradek.log.errors import StorageError
from odradek.records.codec import Record, encode_batch
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)
T0 = 1_700_000_000_000
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN = 0, 1, 3
INVALID_TOPIC, POLICY_VIOLATION, STORAGE = 17, 44, 56


def delete(b: InProcess, offsets: dict[str, list[tuple[int, int]]], version: int = 2):
    frame = request_frame(21, version, {"timeout": 5000, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "offset": o} for p, o in parts]}
        for t, parts in offsets.items()]})
    _, resp = parse_response(21, version, b.handle(frame))
    return {(t.name, p.partition_index): (int(p.error_code), p.low_watermark) for t in resp.topics
            for p in t.partitions}


def produce(b: InProcess, topic: str, n: int, partition: int = 0, version: int = 9):
    batch = encode_batch([Record(i, T0 + i, b"k%d" % i, b"v%d" % i) for i in range(n)])
    frame = request_frame(0, version, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    _, resp = parse_response(0, version, b.handle(frame))
    return resp.responses[0].partition_responses[0]


def fetch(b: InProcess, topic: str, offset: int, version: int = 12):
    frame = request_frame(1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": ZERO, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}]})
    _, resp = parse_response(1, version, b.handle(frame))
    return resp.responses[0].partitions[0]


def list_offset(b: InProcess, topic: str, timestamp: int, version: int = 7):
    frame = request_frame(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp,
                                        "max_num_offsets": 1}]}]})
    _, resp = parse_response(2, version, b.handle(frame))
    p = resp.topics[0].partitions[0]
    return int(p.error_code), p.offset


@pytest.fixture
def b(tmp_path):
    inproc = InProcess(tmp_path / "data")
    yield inproc
    assert inproc.broker.internal_errors == 0
    inproc.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_log_start_moves_and_every_api_honours_it(b, version):
    b.broker.create_topic("t", 1, {})
    assert produce(b, "t", 10).error_code == 0
    assert delete(b, {"t": [(0, 4)]}, version) == {("t", 0): (NONE, 4)}
    out = fetch(b, "t", 3)
    assert (int(out.error_code), out.log_start_offset, out.high_watermark) == (OFFSET_OUT_OF_RANGE, 4, 10)
    out = fetch(b, "t", 4)
    assert int(out.error_code) == 0 and out.log_start_offset == 4 and out.records
    assert list_offset(b, "t", -2) == (NONE, 4)  # EARLIEST
    assert list_offset(b, "t", -4) == (NONE, 4)  # EARLIEST_LOCAL: no tiered storage
    assert list_offset(b, "t", T0) == (NONE, 4)  # by timestamp: never a deleted record
    assert list_offset(b, "t", T0 + 6) == (NONE, 6)
    assert produce(b, "t", 1).log_start_offset == 4


def test_offsets_kafka_refuses_or_clamps(b):
    b.broker.create_topic("t", 1, {})
    produce(b, "t", 5)
    # Partition.deleteRecordsOnLeader / maybeIncrementLogStartOffset.
    assert delete(b, {"t": [(0, 6)]}) == {("t", 0): (OFFSET_OUT_OF_RANGE, -1)}  # past the high watermark
    assert delete(b, {"t": [(0, -2)]}) == {("t", 0): (OFFSET_OUT_OF_RANGE, -1)}
    assert delete(b, {"t": [(0, 3)]}) == {("t", 0): (NONE, 3)}
    assert delete(b, {"t": [(0, 1)]}) == {("t", 0): (NONE, 3)}  # below the start: nothing moves back
    assert delete(b, {"t": [(0, -1)]}) == {("t", 0): (NONE, 5)}  # -1 is the high watermark
    assert list_offset(b, "t", -2) == (NONE, 5)


def test_unknown_internal_compacted_and_offline_partitions(b):
    b.broker.create_topic("t", 2, {})
    b.broker.create_topic("kv", 1, {"cleanup.policy": "compact"})
    b.broker.create_topic("both", 1, {"cleanup.policy": "compact,delete"})
    produce(b, "both", 2)
    b.broker.logs.offline[("t", 1)] = "damaged for the test"
    got = delete(b, {"t": [(0, 0), (1, 0), (2, 0)], "nope": [(0, 0)], "__consumer_offsets": [(0, 0)],
                     "kv": [(0, 0)], "both": [(0, 1)]})
    assert got == {
        ("t", 0): (NONE, 0),
        ("t", 1): (STORAGE, -1),  # KafkaStorageException
        ("t", 2): (UNKNOWN, -1),
        ("nope", 0): (UNKNOWN, -1),
        ("__consumer_offsets", 0): (INVALID_TOPIC, -1),  # "Cannot delete records of internal topic"
        ("kv", 0): (POLICY_VIOLATION, -1),  # cleanup.policy without delete
        ("both", 0): (NONE, 1),
    }


def test_a_failed_log_directory_answers_storage_errors(b):
    b.broker.create_topic("t", 1, {})
    produce(b, "t", 3)
    b.broker.storage_failed(StorageError("the disk failed", OSError(errno.EIO, "I/O error")))
    assert b.broker.logs.health.offline
    assert delete(b, {"t": [(0, 1)]}) == {("t", 0): (STORAGE, -1)}


def test_the_new_start_is_on_disk_before_the_answer_and_survives_restarts(tmp_path):
    b = InProcess(tmp_path / "data")
    b.broker.create_topic("t", 1, {})
    produce(b, "t", 8)
    assert delete(b, {"t": [(0, 5)]}) == {("t", 0): (NONE, 5)}
    # Written before the response, not only at a clean shutdown.
    assert read_checkpoint(tmp_path / "data" / LOG_START_OFFSET_FILE) == {("t", 0): 5}
    b.close()
    again = InProcess(tmp_path / "data")
    assert list_offset(again, "t", -2) == (NONE, 5)
    assert int(fetch(again, "t", 4).error_code) == OFFSET_OUT_OF_RANGE
    assert [r.offset for r in _records(fetch(again, "t", 5))][-3:] == [5, 6, 7]
    again.close()


def test_segments_below_the_start_are_deleted(b):
    b.broker.create_topic("t", 1, {"segment.bytes": "100"})
    for _ in range(4):
        produce(b, "t", 2)
    plog = b.broker.logs.get("t", 0)
    assert len(plog.segments) == 4
    assert delete(b, {"t": [(0, 5)]}) == {("t", 0): (NONE, 5)}
    assert [s.base_offset for s in plog.segments] == [4, 6]


def test_a_parked_fetch_below_the_new_start_is_answered_at_once(b):
    import asyncio

    b.broker.create_topic("t", 1, {})
    produce(b, "t", 3)
    frame = request_frame(1, 12, {
        "replica_id": -1, "max_wait": 10_000, "min_bytes": 1 << 20, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "t", "topic_id": ZERO, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 1, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}]})
    delete_frame = request_frame(21, 2, {"timeout": 5000, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "offset": 2}]}]})

    async def scenario():
        parked = asyncio.ensure_future(b.broker.handle_frame(frame[4:]))
        await asyncio.sleep(0.2)
        assert not parked.done()
        await b.broker.handle_frame(delete_frame[4:])
        return await asyncio.wait_for(parked, 2)

    _, resp = parse_response(1, 12, b.loop.run_until_complete(scenario()))
    p = resp.responses[0].partitions[0]
    assert (int(p.error_code), p.log_start_offset) == (OFFSET_OUT_OF_RANGE, 2)


def _records(p):
    from odradek.records.codec import decode_batches

    return [r for batch in decode_batches(p.records, verify_crc=True) for r in batch.records]
