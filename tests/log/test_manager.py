"""Tests for odradek.log.manager.LogManager: opening, stale directories, clean-shutdown marker."""

from __future__ import annotations

import os
import uuid

import pytest

from odradek.cluster.metadata import Topic
from odradek.config import BrokerConfig
from odradek.log.manager import CLEAN_SHUTDOWN_FILE, PARTITION_METADATA, LogManager, partition_dir
from odradek.records.batch import validate_batches
from odradek.records.codec import Record, decode_batches, encode_batch

T0 = 1_700_000_000_000


def cfg(_topic=None, **overrides) -> dict:
    c = BrokerConfig().topic_defaults()
    for k, v in overrides.items():
        c[k.replace("_", ".")] = v
    return c


def topic(name: str, partitions: int = 1, tid: uuid.UUID | None = None) -> Topic:
    return Topic(name, tid or uuid.uuid4(), partitions)


def produce(plog, count: int = 1, now: int = T0) -> None:
    buf = bytearray(encode_batch([Record(i, now, b"k%d" % i, b"v") for i in range(count)]))
    plog.append(buf, validate_batches(buf), now)


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return d


def test_partition_dir_layout(data_dir):
    assert partition_dir(data_dir, "orders", 3) == data_dir / "orders-3"


def test_open_all_creates_partitions_with_metadata(data_dir):
    t = topic("orders", 3)
    other = topic("audit.log", 1)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t, other], cfg)
    for p in range(3):
        d = data_dir / f"orders-{p}"
        assert d.is_dir()
        meta = (d / PARTITION_METADATA).read_text()
        assert f"topic_id: {t.topic_id}" in meta
        assert mgr.get("orders", p) is not None
        assert mgr.get("orders", p).directory == d
    assert mgr.get("audit.log", 0) is not None
    assert mgr.get("orders", 3) is None
    assert mgr.get("nope", 0) is None
    mgr.close()


def test_open_all_passes_each_topic_its_config(data_dir):
    a, b = topic("a"), topic("b")
    seen = []

    def config_for(t: Topic) -> dict:
        seen.append(t.name)
        return cfg(segment_bytes=1000 if t.name == "a" else 2000)

    mgr = LogManager(data_dir, T0)
    mgr.open_all([a, b], config_for)
    assert mgr.get("a", 0).config["segment.bytes"] == 1000
    assert mgr.get("b", 0).config["segment.bytes"] == 2000
    assert sorted(set(seen)) == ["a", "b"]
    mgr.close()


def test_data_survives_restart(data_dir):
    t = topic("orders", 2)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("orders", 0), 3)
    produce(mgr.get("orders", 1), 5)
    before = mgr.get("orders", 1).read(0, 10**6).data
    mgr.close()
    again = LogManager(data_dir, T0 + 1)
    again.open_all([t], cfg)
    assert again.get("orders", 0).log_end_offset == 3
    assert again.get("orders", 1).log_end_offset == 5
    assert again.get("orders", 1).read(0, 10**6).data == before
    again.close()


def test_directory_of_an_earlier_topic_with_the_same_name_is_removed(data_dir):
    old = topic("orders", 1)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([old], cfg)
    produce(mgr.get("orders", 0), 4)
    mgr.close()
    new = topic("orders", 1)  # deleted and recreated: a fresh topic id
    assert new.topic_id != old.topic_id
    again = LogManager(data_dir, T0)
    again.open_all([new], cfg)
    plog = again.get("orders", 0)
    assert plog.log_end_offset == 0
    assert plog.size_bytes == 0
    assert f"topic_id: {new.topic_id}" in (data_dir / "orders-0" / PARTITION_METADATA).read_text()
    again.close()


def test_same_topic_id_keeps_data(data_dir):
    t = topic("orders")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("orders", 0), 4)
    mgr.close()
    again = LogManager(data_dir, T0)
    again.open_all([Topic("orders", t.topic_id, 1)], cfg)
    assert again.get("orders", 0).log_end_offset == 4
    again.close()


def test_directories_of_deleted_topics_removed(data_dir):
    keep, gone = topic("keep"), topic("gone", 2)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([keep, gone], cfg)
    produce(mgr.get("gone", 1))
    mgr.close()
    stranger = data_dir / "not-a-partition"
    stranger.mkdir()
    (stranger / "file").write_text("x")
    (data_dir / "__cluster_metadata.json").write_text("{}")
    again = LogManager(data_dir, T0)
    again.open_all([keep], cfg)
    assert not (data_dir / "gone-0").exists()
    assert not (data_dir / "gone-1").exists()
    assert (data_dir / "keep-0").exists()
    # Only directories that carry partition.metadata are ours to delete.
    assert (stranger / "file").read_text() == "x"
    assert (data_dir / "__cluster_metadata.json").exists()
    again.close()


def test_partition_dir_beyond_current_partition_count_removed(data_dir):
    t = topic("t", 3)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    mgr.close()
    again = LogManager(data_dir, T0)
    again.open_all([Topic("t", t.topic_id, 2)], cfg)
    assert not (data_dir / "t-2").exists()
    again.close()


def test_create_and_delete(data_dir):
    mgr = LogManager(data_dir, T0)
    mgr.open_all([], cfg)
    t = topic("new", 2)
    logs = mgr.create(t, cfg())
    assert len(logs) == 2
    assert all((data_dir / f"new-{p}" / PARTITION_METADATA).exists() for p in range(2))
    produce(logs[0])
    # Adding partitions opens only the new ones.
    t.partitions = 4
    more = mgr.create(t, cfg(), first_partition=2)
    assert [p.directory.name for p in more] == ["new-2", "new-3"]
    assert mgr.get("new", 0).log_end_offset == 1
    mgr.delete(t)
    assert mgr.get("new", 0) is None
    assert not any(data_dir.glob("new-*"))
    mgr.close()


def test_reconfigure_and_retention(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    plog = mgr.get("t", 0)
    produce(plog, 2, now=T0)
    plog.roll(T0)
    produce(plog, 2, now=T0 + 10)
    assert mgr.retention(T0 + 1000) == 0  # default retention: a week
    mgr.reconfigure(t, cfg(retention_ms=100))
    assert plog.config["retention.ms"] == 100
    assert mgr.retention(T0 + 1000) >= 1
    assert plog.log_start_offset > 0
    mgr.close()


# ----------------------------------------------------------------------------- clean shutdown


def test_close_writes_marker_and_next_manager_consumes_it(data_dir):
    mgr = LogManager(data_dir, T0)
    assert mgr.clean_shutdown is False
    mgr.open_all([topic("t")], cfg)
    mgr.close()
    marker = data_dir / CLEAN_SHUTDOWN_FILE
    assert marker.exists()
    again = LogManager(data_dir, T0)
    assert again.clean_shutdown is True
    assert not marker.exists()  # consumed: a crash from now on is an unclean shutdown
    third = LogManager(data_dir, T0)
    assert third.clean_shutdown is False


def _corrupt_last_batch_crc(path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40  # inside the last batch's records: CRC no longer matches
    path.write_bytes(bytes(data))


def test_without_marker_active_segment_is_recovered(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0), 2)
    produce(mgr.get("t", 0), 3)
    mgr.close()
    (data_dir / CLEAN_SHUTDOWN_FILE).unlink()  # as if the broker had been killed
    _corrupt_last_batch_crc(data_dir / "t-0" / f"{0:020d}.log")
    again = LogManager(data_dir, T0)
    again.open_all([t], cfg)
    plog = again.get("t", 0)
    assert plog.recovery and plog.recovery[-1].truncated_bytes > 0
    assert plog.log_end_offset == 2
    batches = decode_batches(plog.read(0, 10**6).data, verify_crc=True)
    assert [b.header.base_offset for b in batches] == [0]
    again.close()


def test_with_marker_active_segment_is_trusted(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0), 2)
    produce(mgr.get("t", 0), 3)
    mgr.close()
    _corrupt_last_batch_crc(data_dir / "t-0" / f"{0:020d}.log")
    again = LogManager(data_dir, T0)
    again.open_all([t], cfg)
    plog = again.get("t", 0)
    # A clean shutdown flushed every index, so no CRC scan runs at start-up.
    assert plog.recovery == []
    assert plog.log_end_offset == 5
    again.close()


def test_without_marker_torn_tail_truncated(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    plog = mgr.get("t", 0)
    produce(plog, 2)
    size = plog.size_bytes
    # Simulate a kill: no close(), so no marker; half a batch reached the file.
    for s in plog.segments:
        os.close(s.fd)
        s.fd = -1
    with open(data_dir / "t-0" / f"{0:020d}.log", "ab") as f:
        f.write(encode_batch([Record(0, T0, b"k", b"v" * 100)])[:90])
    again = LogManager(data_dir, T0)
    assert again.clean_shutdown is False
    again.open_all([t], cfg)
    plog = again.get("t", 0)
    assert plog.size_bytes == size
    assert plog.log_end_offset == 2
    assert [r.truncated_bytes for r in plog.recovery] == [90]
    again.close()
