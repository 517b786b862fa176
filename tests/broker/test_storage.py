"""The broker over a failing or damaged disk, in process: every failure becomes the error
Kafka gives, nothing acknowledged is lost, and the broker keeps serving."""

from __future__ import annotations

import errno
import logging
import os
import uuid

import pytest

from odradek.broker.broker import Broker
from odradek.config import BrokerConfig
from odradek.log import segment as segment_mod
from odradek.records.codec import Record, decode_batches, encode_batch
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)
T0 = 1_700_000_000_000


def produce(b: InProcess, topic: str, partition: int, n: int = 3, start: int = 0, version: int = 9):
    batch = encode_batch([Record(i, T0 + i, b"k%d" % (start + i), b"v%d" % (start + i)) for i in range(n)])
    frame = request_frame(0, version, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    _, resp = parse_response(0, version, b.handle(frame))
    return resp.responses[0].partition_responses[0]


def fetch(b: InProcess, topic: str, partition: int, offset: int, version: int = 12):
    frame = request_frame(1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": ZERO, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}]})
    _, resp = parse_response(1, version, b.handle(frame))
    return resp.responses[0].partitions[0]


def metadata(b: InProcess, topics: list[str], version: int = 12):
    frame = request_frame(3, version, {"topics": [{"name": t, "topic_id": None} for t in topics],
                                       "allow_auto_topic_creation": True,
                                       "include_topic_authorized_operations": False})
    _, resp = parse_response(3, version, b.handle(frame))
    return resp


def values(p) -> list[bytes]:
    return [r.value for batch in decode_batches(p.records, verify_crc=True) for r in batch.records]


@pytest.fixture
def full_disk(monkeypatch):
    """Segment writes fail with `errno` while `on` (a partial write first, as a filling disk gives)."""
    state = {"on": False, "errno": errno.ENOSPC}
    real = os.write

    def write(fd, data):
        if state["on"]:
            real(fd, bytes(memoryview(data)[: len(data) // 3]))
            raise OSError(state["errno"], os.strerror(state["errno"]))
        return real(fd, data)

    monkeypatch.setattr(segment_mod.os, "write", write)
    return state


def test_a_full_disk_gives_kafka_storage_error_and_writes_resume_after(tmp_path, full_disk):
    b = InProcess(tmp_path / "d")
    b.broker.create_topic("t", 2, {})
    assert produce(b, "t", 0, 3).error_code == 0
    full_disk["on"] = True
    for _ in range(3):
        r = produce(b, "t", 0, 2, start=100)
        assert int(r.error_code) == 56 and "undone" in r.error_message  # KAFKA_STORAGE_ERROR
    assert produce(b, "t", 1, 1).error_code == 56
    assert not b.broker.logs.health.offline  # a full disk is not a broken disk
    assert b.broker.internal_errors == 0
    full_disk["on"] = False
    r = produce(b, "t", 0, 2, start=3)
    assert r.error_code == 0 and r.base_offset == 3
    assert values(fetch(b, "t", 0, 0)) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    b.close()
    again = InProcess(tmp_path / "d")
    assert values(fetch(again, "t", 0, 0)) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    again.close()


def test_an_io_error_takes_the_log_directory_offline_and_the_broker_keeps_answering(tmp_path, full_disk, caplog):
    b = InProcess(tmp_path / "d")
    b.broker.create_topic("t", 1, {})
    assert produce(b, "t", 0).error_code == 0
    full_disk.update(on=True, errno=errno.EIO)
    with caplog.at_level(logging.ERROR):
        assert produce(b, "t", 0).error_code == 56
    assert b.broker.logs.health.offline and "is offline" in caplog.text
    full_disk["on"] = False
    # Offline for good: writes and reads answer KAFKA_STORAGE_ERROR, metadata shows no leader.
    assert produce(b, "t", 0).error_code == 56
    assert fetch(b, "t", 0, 0).error_code == 56
    part = metadata(b, ["t"]).topics[0].partitions[0]
    assert (int(part.error_code), part.leader_id, list(part.offline_replicas)) == (5, -1, [1])
    assert b.broker.internal_errors == 0
    b.close()


def test_emfile_when_opening_a_partition_fails_the_request_only(tmp_path, monkeypatch):
    b = InProcess(tmp_path / "d")
    b.broker.create_topic("t", 1, {})
    real_open = os.open
    calls = {"n": 0}

    def no_descriptors(path, *args, **kw):
        if str(path).endswith(".log") and "t-0" in str(path):
            calls["n"] += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kw)

    monkeypatch.setattr(segment_mod.os, "open", no_descriptors)
    assert produce(b, "t", 0).error_code == 56 and calls["n"] >= 1
    assert "t" in b.broker.metadata.topics and not b.broker.logs.health.offline
    monkeypatch.setattr(segment_mod.os, "open", real_open)
    assert produce(b, "t", 0).error_code == 0
    b.close()


def test_a_failed_metadata_write_creates_no_topic(tmp_path, monkeypatch):
    b = InProcess(tmp_path / "d")
    from odradek.cluster import metadata as metadata_mod

    real = metadata_mod.os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(metadata_mod.os, "fsync", full)
    frame = request_frame(19, 7, {"topics": [{"name": "x", "num_partitions": 3, "replication_factor": 1,
                                              "assignments": [], "configs": []}], "timeout": 5000,
                                  "validate_only": False})
    _, resp = parse_response(19, 7, b.handle(frame))
    assert int(resp.topics[0].error_code) == 56
    assert b.broker.metadata.get("x") is None
    assert metadata(b, ["y"]).topics[0].error_code != 0  # auto-create fails too, quietly
    monkeypatch.setattr(metadata_mod.os, "fsync", real)
    _, resp = parse_response(19, 7, b.handle(frame))
    assert resp.topics[0].error_code == 0
    b.close()
    again = Broker(BrokerConfig(data_dir=tmp_path / "d", listen_port=0))
    assert again.metadata.get("x").partitions == 3 and again.metadata.get("y") is None
    again.close()


def test_a_corrupt_stored_batch_is_corrupt_message_on_fetch_and_logged_once(tmp_path, caplog):
    b = InProcess(tmp_path / "d")
    b.broker.create_topic("t", 1, {})
    for i in range(3):
        assert produce(b, "t", 0, 2, start=2 * i).error_code == 0
    b.close()
    path = tmp_path / "d" / "t-0" / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    second = len(data) // 3
    data[second + second // 2 + 20] ^= 0x04  # a byte inside the second batch's records
    path.write_bytes(bytes(data))
    b = InProcess(tmp_path / "d")
    with caplog.at_level(logging.ERROR):
        first = fetch(b, "t", 0, 0)
        assert first.error_code == 0 and values(first) == [b"v0", b"v1"]  # stops before the bad batch
        for _ in range(3):
            assert int(fetch(b, "t", 0, 2).error_code) == 2  # CORRUPT_MESSAGE
        assert values(fetch(b, "t", 0, 4)) == [b"v4", b"v5"]
    assert caplog.text.count("fails its CRC32C check") == 1
    assert b.broker.internal_errors == 0
    b.close()


def test_one_metadata_request_creates_many_topics_with_a_write_per_slice(tmp_path, monkeypatch):
    b = InProcess(tmp_path / "d")
    from odradek.cluster import metadata as metadata_mod

    fsyncs = []
    real = metadata_mod.os.fsync
    monkeypatch.setattr(metadata_mod.os, "fsync", lambda fd: fsyncs.append(fd) or real(fd))
    names = [f"auto-{i}" for i in range(2000)]
    resp = metadata(b, names)
    assert [t.name for t in resp.topics] == names and all(t.error_code == 0 for t in resp.topics)
    assert len(fsyncs) == 2  # one per slice of CREATE_SLICE (1,000) topics, never one per topic
    assert not any((tmp_path / "d").glob("auto-*"))  # no partition touched the disk yet
    b.close()


def test_create_topics_caps_partitions_per_request_as_kafka_does(tmp_path):
    b = InProcess(tmp_path / "d")

    def create(specs):
        frame = request_frame(19, 7, {"topics": [{"name": n, "num_partitions": p, "replication_factor": 1,
                                                  "assignments": [], "configs": []} for n, p in specs],
                                      "timeout": 5000, "validate_only": False})
        return parse_response(19, 7, b.handle(frame))[1].topics

    over = create([("a", 6000), ("b", 4001)])
    assert [int(t.error_code) for t in over] == [44, 44]  # POLICY_VIOLATION for all, as Kafka
    assert over[0].error_message == "Excessively large number of partitions per request."
    assert b.broker.metadata.get("a") is None
    ok = create([("a", 6000), ("b", 4000)])
    assert [t.error_code for t in ok] == [0, 0]
    frame = request_frame(37, 3, {"topics": [{"name": "a", "count": 16_001, "assignments": None}],
                                  "timeout": 5000, "validate_only": False})
    (res,) = parse_response(37, 3, b.handle(frame))[1].results
    assert int(res.error_code) == 44
    b.close()
