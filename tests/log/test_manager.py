"""Tests for odradek.log.manager.LogManager: opening, stale directories, clean-shutdown marker."""

from __future__ import annotations

import errno
import logging
import os
import uuid

import pytest

from odradek.cluster.metadata import Topic
from odradek.config import BrokerConfig
from odradek.log.checkpoint import LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, read_checkpoint
from odradek.log.errors import CorruptBatch, LogDirOffline, PartitionOffline, StorageError
from odradek.log.files import FileCache
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


def test_partitions_are_opened_on_first_use_with_their_metadata(data_dir):
    t = topic("orders", 3)
    other = topic("audit.log", 1)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t, other], cfg)
    # Registering topics touches no disk: 100,000 partitions start as fast as one.
    assert not any(data_dir.glob("orders-*"))
    for p in range(3):
        d = data_dir / f"orders-{p}"
        assert mgr.get("orders", p) is not None
        assert d.is_dir()
        meta = (d / PARTITION_METADATA).read_text()
        assert f"topic_id: {t.topic_id}" in meta
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
    mgr.get("gone", 0)
    produce(mgr.get("keep", 0))
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
    for p in range(3):
        mgr.get("t", p)
    mgr.close()
    assert (data_dir / "t-2").exists()
    again = LogManager(data_dir, T0)
    again.open_all([Topic("t", t.topic_id, 2)], cfg)
    assert not (data_dir / "t-2").exists()
    again.close()


def test_create_and_delete(data_dir):
    mgr = LogManager(data_dir, T0)
    mgr.open_all([], cfg)
    t = topic("new", 2)
    mgr.create(t)
    assert not any(data_dir.glob("new-*"))  # nothing on disk until used
    logs = [mgr.get("new", p) for p in range(2)]
    assert all((data_dir / f"new-{p}" / PARTITION_METADATA).exists() for p in range(2))
    produce(logs[0])
    # Adding partitions registers only the new ones.
    t.partitions = 4
    mgr.create(t, first_partition=2)
    assert [mgr.get("new", p).directory.name for p in (2, 3)] == ["new-2", "new-3"]
    assert mgr.get("new", 0).log_end_offset == 1
    mgr.delete(t)
    assert mgr.get("new", 0) is None
    # The directories are renamed at once (the name is free again) and removed a few at a time.
    assert not any(data_dir.glob("new-?"))
    assert mgr.pending_deletes == 4
    assert mgr.purge_deleted(budget=3) == 3 and mgr.purge_deleted() == 1
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


def _kill(mgr) -> None:
    """What kill -9 leaves: the data written, no flush, no checkpoint, no marker."""
    for plog in mgr.logs.values():
        plog.close_files()


def test_after_a_kill_unflushed_segments_are_recovered(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0), 2)
    produce(mgr.get("t", 0), 3)
    _kill(mgr)
    _corrupt_last_batch_crc(data_dir / "t-0" / f"{0:020d}.log")
    again = LogManager(data_dir, T0)
    assert again.clean_shutdown is False
    again.open_all([t], cfg)
    plog = again.get("t", 0)
    assert plog.recovery and plog.recovery[-1].truncated_bytes > 0
    assert plog.recovery[-1].dropped_offsets == 3 and plog.recovery[-1].whole_batches_dropped
    assert plog.log_end_offset == 2
    batches = decode_batches(plog.read(0, 10**6).data, verify_crc=True)
    assert [b.header.base_offset for b in batches] == [0]
    again.close()


def test_flushed_data_is_trusted_and_corruption_in_it_is_reported_on_read(data_dir):
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
    # A clean shutdown flushed everything (the recovery point is the log end): no scan.
    assert plog.recovery == []
    assert plog.log_end_offset == 5
    # The flipped batch is never served as if it were fine.
    assert len(decode_batches(plog.read(0, 10**6).data, verify_crc=True)) == 1
    with pytest.raises(CorruptBatch):
        plog.read(2, 10**6)
    again.close()


def test_even_a_clean_shutdown_does_not_skip_recovery_of_partitions_never_opened(data_dir):
    # Killed with unflushed data, restarted, stopped cleanly without touching the
    # partition: the next start must still recover it.
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0), 2)
    produce(mgr.get("t", 0), 3)
    _kill(mgr)
    _corrupt_last_batch_crc(data_dir / "t-0" / f"{0:020d}.log")
    quiet = LogManager(data_dir, T0)
    quiet.open_all([t], cfg)
    quiet.close()
    assert (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    again = LogManager(data_dir, T0)
    again.open_all([t], cfg)
    assert again.get("t", 0).log_end_offset == 2
    again.close()


def test_without_marker_torn_tail_truncated(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    plog = mgr.get("t", 0)
    produce(plog, 2)
    size = plog.size_bytes
    # Simulate a kill: no close(), so no marker; half a batch reached the file.
    _kill(mgr)
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


# ----------------------------------------------------------------------------- failures


def test_a_damaged_partition_goes_offline_and_the_others_serve(data_dir, caplog):
    t = topic("t", 2)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    for p in (0, 1):
        produce(mgr.get("t", p), 3)
    mgr.close()
    path = data_dir / "t-0" / f"{0:020d}.log"
    path.write_bytes(path.read_bytes()[:-10])  # a flushed segment cut short
    again = LogManager(data_dir, T0)
    again.open_all([t], cfg)
    with caplog.at_level(logging.ERROR):
        with pytest.raises(PartitionOffline):
            again.get("t", 0)
    assert "t-0 is offline" in caplog.text and "cut short" in caplog.text
    assert again.is_offline("t", 0) and not again.is_offline("t", 1)
    assert again.get("t", 1).log_end_offset == 3
    with pytest.raises(PartitionOffline):  # stays offline, without a new log line per request
        again.get("t", 0)
    assert caplog.text.count("t-0 is offline") == 1
    again.close()


def test_an_io_error_takes_the_directory_offline(data_dir):
    t = topic("t", 2)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0))
    mgr.report(StorageError("write failed", OSError(errno.EIO, "Input/output error")))
    assert mgr.health.offline
    with pytest.raises(LogDirOffline):
        mgr.get("t", 0)
    with pytest.raises(LogDirOffline):
        mgr.get("t", 1)
    assert mgr.is_offline("t", 1)
    mgr.close()
    assert not (data_dir / CLEAN_SHUTDOWN_FILE).exists()  # nothing is claimed about an offline directory


def test_thousands_of_partitions_within_a_small_descriptor_budget(data_dir):
    t = topic("many", 300)
    files = FileCache(16)
    mgr = LogManager(data_dir, T0, files)
    mgr.open_all([t], cfg)
    for round_ in range(2):
        for p in range(300):
            produce(mgr.get("many", p), 1)
            assert len(files) <= 16
    mgr.close()
    again = LogManager(data_dir, T0, FileCache(16))
    again.open_all([t], cfg)
    assert all(again.get("many", p).log_end_offset == 2 for p in range(300))
    again.close()


def test_recovery_points_are_checkpointed_in_kafkas_file(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0), 4)
    assert mgr.checkpoint() is True
    assert read_checkpoint(data_dir / RECOVERY_POINT_FILE) == {("t", 0): 0}  # nothing fsynced yet
    mgr.get("t", 0).flush(T0)
    assert mgr.checkpoint() is True and mgr.checkpoint() is False  # unchanged: not rewritten
    assert read_checkpoint(data_dir / RECOVERY_POINT_FILE) == {("t", 0): 4}
    mgr.close()


def test_leftover_directories_of_deleted_topics_are_removed(data_dir):
    leftover = data_dir / "gone-0.0123abcd-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([], cfg)
    assert mgr.pending_deletes == 1
    mgr.close()
    assert not leftover.exists()


def _is_segment(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith(".log")


def test_a_clean_shutdown_syncs_the_filesystem_once_not_every_segment(data_dir, monkeypatch):
    from odradek.log import manager as manager_mod
    from odradek.log import segment as segment_mod

    t = topic("t", 50)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    for p in range(50):
        produce(mgr.get("t", p))
    syncs, fsyncs = [], []
    real_sync = manager_mod.sync_filesystem
    monkeypatch.setattr(manager_mod, "sync_filesystem", lambda d: syncs.append(d) or real_sync(d))
    real = os.fsync
    monkeypatch.setattr(segment_mod.os, "fsync", lambda fd: _is_segment(fd) and fsyncs.append(fd) or real(fd))
    mgr.close()
    assert syncs == [data_dir] and fsyncs == []
    # ... and the recovery points say everything is flushed: nothing to recover next time.
    assert read_checkpoint(data_dir / RECOVERY_POINT_FILE) == {("t", p): 1 for p in range(50)}
    monkeypatch.undo()
    again = LogManager(data_dir, T0)
    again.open_all([t], cfg)
    assert all(again.get("t", p).log_end_offset == 1 and again.get("t", p).recovery == [] for p in range(50))
    again.close()


def test_without_syncfs_every_segment_is_fsynced_at_shutdown(data_dir, monkeypatch):
    from odradek.log import manager as manager_mod
    from odradek.log import segment as segment_mod

    t = topic("t", 5)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    for p in range(5):
        produce(mgr.get("t", p))
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(manager_mod, "sync_filesystem", lambda d: False)
    monkeypatch.setattr(segment_mod.os, "fsync", lambda fd: _is_segment(fd) and fsyncs.append(fd) or real(fd))
    mgr.close()
    assert len(fsyncs) == 5


# ----------------------------------------------------------------------------- log start offsets (DeleteRecords)


def test_moved_log_starts_are_checkpointed_and_survive_a_restart(data_dir):
    t = topic("t", 3)
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    for p in range(3):
        produce(mgr.get("t", p), 5)
    mgr.get("t", 1).increment_log_start_offset(3)
    seq, points = mgr.snapshot_log_starts()
    # Kafka's checkpointLogStartOffsetsInDir: only logs whose start is past their first segment.
    assert points == {("t", 1): 3}
    assert mgr.write_log_starts(seq, points) is True
    assert read_checkpoint(data_dir / LOG_START_OFFSET_FILE) == {("t", 1): 3}
    mgr.get("t", 2).increment_log_start_offset(5)
    mgr.close()  # a clean shutdown writes the newest too
    assert read_checkpoint(data_dir / LOG_START_OFFSET_FILE) == {("t", 1): 3, ("t", 2): 5}
    again = LogManager(data_dir, T0)
    again.open_all([t], cfg)
    assert [again.get("t", p).log_start_offset for p in range(3)] == [0, 3, 5]
    # Partitions never opened keep their entry when the file is written again.
    assert again.log_start_points() == {("t", 1): 3, ("t", 2): 5}
    again.close()
    third = LogManager(data_dir, T0)
    third.open_all([t], cfg)
    assert third.log_start_points() == {("t", 1): 3, ("t", 2): 5}
    third.close()


def test_an_older_log_start_snapshot_never_replaces_a_newer_file(data_dir):
    t = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], cfg)
    produce(mgr.get("t", 0), 5)
    mgr.get("t", 0).increment_log_start_offset(2)
    old = mgr.snapshot_log_starts()
    mgr.get("t", 0).increment_log_start_offset(4)
    new = mgr.snapshot_log_starts()
    assert mgr.write_log_starts(*new) is True
    assert mgr.write_log_starts(*old) is False  # its worker thread came second
    assert read_checkpoint(data_dir / LOG_START_OFFSET_FILE) == {("t", 0): 4}
    mgr.close()


def test_a_recreated_topic_never_inherits_a_deleted_ones_log_start(data_dir):
    old = topic("t")
    mgr = LogManager(data_dir, T0)
    mgr.open_all([old], cfg)
    produce(mgr.get("t", 0), 5)
    mgr.get("t", 0).increment_log_start_offset(4)
    mgr.checkpoint_log_starts()
    mgr.delete(old)
    # Written at once (Kafka's asyncDelete checkpoints too): a crash now cannot bring it back.
    assert read_checkpoint(data_dir / LOG_START_OFFSET_FILE) == {}
    new = topic("t")
    mgr.create(new)
    assert mgr.get("t", 0).log_start_offset == 0
    mgr.close()
