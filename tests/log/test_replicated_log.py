"""Tests for the replicable partition log: leader epochs stamped by appends, follower
appends, truncation (to an offset, fully), the stored high watermark and its checkpoint,
reads bounded by the high watermark. Real files in tmp_path; time is injected."""

from __future__ import annotations

import errno
import logging
import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.cluster.metadata import Topic
from odradek.log.checkpoint import HIGH_WATERMARK_FILE, read_checkpoint
from odradek.log.epochs import (
    LEADER_EPOCH_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
)
from odradek.log.errors import StorageError
from odradek.log.manager import LogManager
from odradek.log.partition import OffsetMismatch, OffsetOutOfRange, PartitionLog
from odradek.records.batch import (
    BatchError,
    iter_headers,
    read_header,
    validate_batches,
)
from odradek.records.codec import Record, encode_batch
from tests.log.test_partition import config

T0 = 1_700_000_000_000
PID = 777


def client_batch(count: int = 1, ts: int = T0, value_size: int = 16, **kw) -> bytearray:
    return bytearray(encode_batch([Record(i, ts, b"k%d" % i, b"v" * value_size) for i in range(count)], **kw))


def produce(plog: PartitionLog, epoch: int | None = None, count: int = 1, now: int = T0, **kw):
    buf = client_batch(count, now, **kw)
    if epoch is None:
        return plog.append(buf, validate_batches(buf), now)
    return plog.append(buf, validate_batches(buf), now, epoch)


def produce_seq(plog: PartitionLog, seq: int, count: int = 1, epoch: int = 0, producer_epoch: int = 0):
    return produce(plog, epoch, count, producer_id=PID, producer_epoch=producer_epoch, base_sequence=seq)


def stored(plog: PartitionLog) -> bytes:
    return b"".join(seg.pread(0, seg.size) for seg in plog.segments)


def stored_headers(plog: PartitionLog) -> list:
    return list(iter_headers(stored(plog)))


def copy_to(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20, now: int = T0) -> int:
    """Replicate what the follower lacks, fetch by fetch, as a replica fetcher would."""
    fetches = 0
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, max_bytes).data
        follower.append_as_follower(data, list(iter_headers(data)), now)
        fetches += 1
    return fetches


def epochs_from_batches(plog: PartitionLog) -> list[EpochEntry]:
    """What the cache should hold: where each stamped epoch first appears."""
    out: list[EpochEntry] = []
    start = plog.log_start_offset
    for h in stored_headers(plog):
        if h.last_offset < start or h.partition_leader_epoch < 0:
            continue
        if not out or out[-1].epoch != h.partition_leader_epoch:
            out.append(EpochEntry(h.partition_leader_epoch, max(h.base_offset, start)))
    return out


def epoch_file(plog: PartitionLog) -> str | None:
    path = plog.directory / LEADER_EPOCH_FILE
    return path.read_text() if path.exists() else None


def open_log(path, replicated: bool = True, **kw) -> PartitionLog:
    cfg = kw.pop("cfg", None) or config()
    plog = PartitionLog(path, cfg, T0, **kw)
    plog.replicated = replicated
    return plog


@pytest.fixture
def logdir(tmp_path):
    return tmp_path / "topic-0"




# ----------------------------------------------------------------------------- leader appends


def test_leader_append_stamps_its_epoch_and_fills_the_cache_and_its_file(logdir):
    plog = open_log(logdir)
    produce(plog, 3, count=2)
    produce(plog, 3, count=1)
    info = produce(plog, 5, count=4)
    assert info.base_offset == 3
    assert [(h.base_offset, h.partition_leader_epoch) for h in stored_headers(plog)] == [(0, 3), (2, 3), (3, 5)]
    # What a consumer gets carries the epoch too (KIP-320 checks it).
    assert read_header(plog.read(3, 1000).data).partition_leader_epoch == 5
    assert plog.epochs.entries() == [(3, 0), (5, 3)]
    assert plog.latest_epoch == 5
    assert epoch_file(plog) == "0\n2\n3 0\n5 3\n"
    assert plog.end_offset_for_epoch(3) == (3, 3)
    assert plog.end_offset_for_epoch(4) == (3, 3)
    assert plog.end_offset_for_epoch(5) == (5, 7)
    assert plog.end_offset_for_epoch(6) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    plog.close()
    again = open_log(logdir)
    assert again.epochs.entries() == [(3, 0), (5, 3)]
    again.close()


def test_the_epoch_file_is_written_only_when_an_epoch_starts(logdir, epoch_file_writes):
    plog = open_log(logdir)
    assert len(epoch_file_writes) == 1  # turning replicated writes the cache as it stands
    for _ in range(50):
        produce(plog, 2)
    assert len(epoch_file_writes) == 2
    produce(plog, 4)
    assert len(epoch_file_writes) == 3
    plog.close()
    again = open_log(logdir)  # a restart: the file already says what the cache holds
    assert len(epoch_file_writes) == 3 and again.epochs.entries() == [(2, 0), (4, 50)]
    again.replicated = False
    produce(again, 4)
    again.replicated = True  # it may have fallen behind meanwhile: written again
    assert len(epoch_file_writes) == 4
    again.close()


def test_single_node_appends_are_unchanged_and_write_no_epoch_file(logdir, epoch_file_writes):
    plog = PartitionLog(logdir, config(), T0)
    assert not plog.replicated
    infos = [produce(plog, count=n) for n in (1, 3, 2)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(0, 0), (1, 3), (4, 5)]
    assert plog.high_watermark == plog.log_end_offset == 6
    assert {h.partition_leader_epoch for h in stored_headers(plog)} == {0}
    assert plog.epochs.entries() == [(0, 0)]  # in memory: answers OffsetsForLeaderEpoch
    assert epoch_file_writes == [] and epoch_file(plog) is None
    plog.close()
    again = PartitionLog(logdir, config(), T0)
    assert again.epochs.entries() == [(0, 0)]  # derived from the batches when opened
    assert epoch_file_writes == []
    # Turning replicated (a partition reassigned to several replicas) writes it, and keeps
    # the high watermark where a single replica had it.
    produce(again)
    again.replicated = True
    assert epoch_file(again) == "0\n1\n0 0\n"
    assert again.high_watermark == again.log_end_offset == 7
    again.close()


# ----------------------------------------------------------------------------- follower appends


def _leader_with_history(path, **cfg) -> PartitionLog:
    leader = open_log(path, cfg=config(**cfg))
    seq = 0
    for i, epoch in enumerate([1, 1, 1, 2, 2, 4, 4, 4, 4, 7, 7, 7]):
        if i % 3 == 0:
            produce(leader, epoch, count=2)
        else:
            produce_seq(leader, seq, count=3, epoch=epoch)
            seq += 3
    return leader


def test_follower_copy_is_byte_for_byte_with_the_same_epochs_and_producer_state(tmp_path):
    leader = _leader_with_history(tmp_path / "leader-0", segment_bytes=600)
    follower = open_log(tmp_path / "follower-0", cfg=config(segment_bytes=600))
    assert copy_to(leader, follower, max_bytes=200) > 3
    assert stored(follower) == stored(leader)
    assert follower.log_end_offset == leader.log_end_offset
    assert len(follower.segments) > 1
    assert follower.epochs.entries() == leader.epochs.entries() == epochs_from_batches(leader)
    assert epoch_file(follower) == epoch_file(leader)
    assert follower.producers.producers[PID].last_seq == leader.producers.producers[PID].last_seq
    assert follower.high_watermark == 0  # a follower's high watermark is the leader's to give
    # Once leader, the next batch of the producer is in sequence on the follower too.
    info = produce_seq(follower, leader.producers.producers[PID].last_seq + 1, epoch=8)
    assert info.base_offset == leader.log_end_offset
    follower.close()
    again = open_log(tmp_path / "follower-0", cfg=config(segment_bytes=600))
    assert stored(again)[: len(stored(leader))] == stored(leader)
    assert again.epochs.entries() == epochs_from_batches(again)
    again.close()
    leader.close()


def test_follower_append_notifies_listeners_and_returns_the_offsets(tmp_path):
    leader = _leader_with_history(tmp_path / "leader-0")
    follower = open_log(tmp_path / "follower-0")
    seen = []
    follower.listeners.append(lambda plog: seen.append(plog.log_end_offset))
    data = leader.read(0, 1 << 20).data
    info = follower.append_as_follower(data, list(iter_headers(data)), T0)
    assert (info.base_offset, info.last_offset, info.log_append_time) == (0, leader.log_end_offset - 1, -1)
    assert seen == [leader.log_end_offset]
    assert follower.append_as_follower(b"", [], T0).base_offset == leader.log_end_offset  # nothing fetched


def test_follower_refuses_offsets_below_its_log_end_and_overlaps(tmp_path):
    leader = _leader_with_history(tmp_path / "leader-0")
    follower = open_log(tmp_path / "follower-0")
    copy_to(leader, follower)
    before = stored(follower)
    again = leader.read(0, 1 << 20).data  # the follower has all of it already
    with pytest.raises(OffsetMismatch) as exc:
        follower.append_as_follower(again, list(iter_headers(again)), T0)
    assert (exc.value.first_offset, exc.value.log_end_offset) == (0, leader.log_end_offset)
    # Two batches claiming the same offsets.
    leo = follower.log_end_offset
    one = encode_batch([Record(leo, T0, b"k", b"v")], base_offset=leo, partition_leader_epoch=7)
    with pytest.raises(OffsetMismatch):
        follower.append_as_follower(one + one, list(iter_headers(one + one)), T0)
    assert stored(follower) == before and follower.log_end_offset == leo


def test_follower_accepts_a_gap_left_by_compaction_on_the_leader(logdir):
    follower = open_log(logdir)
    first = encode_batch([Record(0, T0, b"a", b"1"), Record(1, T0, b"b", b"1")], partition_leader_epoch=1)
    # Offsets 2..9 were compacted away on the leader: its next batch starts at 10.
    later = encode_batch([Record(10, T0, b"a", b"2"), Record(12, T0, b"c", b"2")], base_offset=10,
                         partition_leader_epoch=2, last_offset_delta=3)
    data = first + later
    info = follower.append_as_follower(data, list(iter_headers(data)), T0)
    assert (info.base_offset, info.last_offset) == (0, 13)
    assert follower.log_end_offset == 14
    assert follower.epochs.entries() == [(1, 0), (2, 10)]
    assert follower.read(5, 1000).data == later  # the gap reads as the next batch
    follower.close()
    again = open_log(logdir)
    assert again.log_end_offset == 14 and stored(again) == data
    again.close()


def test_follower_refuses_a_corrupt_batch_and_ignores_a_partial_one(logdir):
    follower = open_log(logdir)
    good = encode_batch([Record(0, T0, b"k", b"v")], partition_leader_epoch=1)
    bad = bytearray(encode_batch([Record(1, T0, b"k", b"v")], base_offset=1, partition_leader_epoch=1))
    bad[-1] ^= 1
    data = good + bytes(bad)
    with pytest.raises(BatchError):
        follower.append_as_follower(data, list(iter_headers(data)), T0)
    assert follower.log_end_offset == 0 and follower.epochs.entries() == []
    partial = good + encode_batch([Record(1, T0, b"k", b"v")], base_offset=1)[:30]
    follower.append_as_follower(partial, list(iter_headers(partial)), T0)
    assert stored(follower) == good and follower.log_end_offset == 1


def test_follower_rolls_at_the_first_offset_past_a_gap(logdir):
    follower = open_log(logdir, cfg=config(segment_bytes=100))
    a = encode_batch([Record(0, T0, b"k", b"v" * 80)], partition_leader_epoch=1)
    b = encode_batch([Record(50, T0, b"k", b"v" * 80)], base_offset=50, partition_leader_epoch=1)
    follower.append_as_follower(a, list(iter_headers(a)), T0)
    follower.append_as_follower(b, list(iter_headers(b)), T0)
    assert [s.base_offset for s in follower.segments] == [0, 50]  # Kafka: roll(expectedNextOffset)


# ----------------------------------------------------------------------------- truncation


def _multi_segment_log(path, batches: int = 20) -> tuple[PartitionLog, list]:
    plog = open_log(path, cfg=config(segment_bytes=400, index_interval_bytes=1))
    infos = [produce(plog, 1 + i // 5, count=2, now=T0 + i) for i in range(batches)]
    return plog, infos


def test_truncate_to_in_a_middle_segment_then_append_continues_and_reopen_agrees(logdir):
    plog, infos = _multi_segment_log(logdir)
    assert len(plog.segments) >= 4
    plog.update_high_watermark(plog.log_end_offset)
    cut = infos[7].base_offset  # a batch boundary in the middle of the log
    i = plog._segment_index(cut)
    assert 0 < i < len(plog.segments) - 1
    kept_bytes = stored(plog)[: sum(h.size for h in stored_headers(plog) if h.base_offset < cut)]
    assert plog.truncate_to(cut) is True
    assert plog.log_end_offset == cut and len(plog.segments) == i + 1
    assert plog.high_watermark == cut and plog.recovery_point <= cut
    assert stored(plog) == kept_bytes
    assert sorted(p.name for p in logdir.glob("*.log")) == [f"{s.base_offset:020d}.log" for s in plog.segments]
    assert plog.epochs.entries() == epochs_from_batches(plog)
    for seg in plog.segments:  # the indexes were cut with the data
        assert all(v < seg.next_offset for v in seg.time_index.values)
        assert all(v < max(seg.size, 1) for v in seg.index.values)
    assert plog.active.max_timestamp == T0 + 6
    with pytest.raises(OffsetOutOfRange):
        plog.read(cut + 1, 1000)
    info = produce(plog, 9, count=3, now=T0 + 100)
    assert (info.base_offset, info.last_offset) == (cut, cut + 2)
    assert plog.epochs.entries()[-1] == (9, cut)
    assert plog.read(cut, 1000, max_offset=None).data == stored(plog)[len(kept_bytes):]
    assert plog.active.max_timestamp == T0 + 100
    want = (stored(plog), plog.log_end_offset, plog.epochs.entries())
    plog.close()
    again = open_log(logdir, cfg=config(segment_bytes=400, index_interval_bytes=1))
    assert (stored(again), again.log_end_offset, again.epochs.entries()) == want
    assert again.find_by_timestamp(T0 + 100)[1].base_offset == cut
    again.close()


def test_truncate_inside_a_batch_removes_the_whole_batch_and_says_so(logdir, caplog):
    plog = open_log(logdir)
    produce(plog, 1, count=3)
    produce(plog, 1, count=3)
    with caplog.at_level(logging.WARNING):
        assert plog.truncate_to(4) is True
    assert plog.log_end_offset == 3
    assert "inside the batch 3..5" in caplog.text


def test_truncate_past_the_end_is_a_no_op_but_drops_an_epoch_with_no_data(logdir):
    plog = open_log(logdir)
    produce(plog, 1, count=2)
    plog.epochs.assign(2, plog.log_end_offset)  # became leader, never appended
    assert plog.truncate_to(5) is False
    assert plog.truncate_to(2) is False
    assert plog.log_end_offset == 2 and plog.epochs.entries() == [(1, 0)]


def test_truncate_rebuilds_producer_state(logdir):
    plog = open_log(logdir)
    offsets = [produce_seq(plog, seq, count=2).base_offset for seq in range(0, 12, 2)]  # six batches
    plog.truncate_to(offsets[4])  # the batches with sequences 8.. are gone
    # A retry of the last kept batch is still a duplicate, answered with its offset...
    assert produce_seq(plog, 6, count=2).base_offset == offsets[3]
    assert plog.log_end_offset == offsets[4]
    # ...and the first cut batch is new again: appended, not taken for a duplicate.
    info = produce_seq(plog, 8, count=2)
    assert info.base_offset == offsets[4] and plog.log_end_offset == offsets[4] + 2
    with pytest.raises(Exception) as exc:
        produce_seq(plog, 14, count=2)
    assert getattr(exc.value, "code", None) == "out_of_order_sequence_number"


def test_truncate_of_all_cached_batches_looks_the_producer_up_in_the_active_segment(logdir):
    plog = open_log(logdir)
    for seq in range(0, 20, 2):  # ten batches: the cache holds the last five
        produce_seq(plog, seq, count=2)
    plog.truncate_to(6)  # sequences 0..5 are left, none of them in the cache any more
    assert produce_seq(plog, 4, count=2).base_offset == 4  # a duplicate, found by the rescan
    assert produce_seq(plog, 6, count=2).base_offset == 6 and plog.log_end_offset == 8


def test_truncate_to_below_the_first_segment_restarts_the_log(logdir):
    plog, _ = _multi_segment_log(logdir)
    plog.update_high_watermark(plog.log_end_offset)
    plog.increment_log_start_offset(plog.segments[2].base_offset)
    assert plog.log_start_offset > 5
    plog.truncate_to(3)
    assert (plog.log_start_offset, plog.log_end_offset) == (3, 3)


def test_truncate_fully_and_start_at(logdir):
    plog, _ = _multi_segment_log(logdir)
    plog.update_high_watermark(10)
    plog.truncate_fully_and_start_at(1000)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark, plog.recovery_point) == (1000,) * 4
    assert plog.epochs.entries() == [] and epoch_file(plog) == "0\n0\n"
    assert plog.producers.producers == {}
    assert [s.base_offset for s in plog.segments] == [1000]
    assert sorted(p.name for p in logdir.glob("*.log")) == [f"{1000:020d}.log"]
    assert plog.read(1000, 100).data == b""
    with pytest.raises(OffsetOutOfRange):
        plog.read(999, 100)
    info = produce(plog, 12)
    assert info.base_offset == 1000 and plog.epochs.entries() == [(12, 1000)]
    plog.close()
    again = open_log(logdir)
    assert (again.log_start_offset, again.log_end_offset) == (1000, 1001)
    assert again.epochs.entries() == [(12, 1000)]
    again.close()


def test_truncate_fully_at_the_same_base_offset_keeps_one_segment(logdir):
    plog = open_log(logdir)
    produce(plog, 1, count=3)
    plog.truncate_fully_and_start_at(0)
    assert (plog.log_start_offset, plog.log_end_offset, len(plog.segments)) == (0, 0, 1)
    assert produce(plog, 2).base_offset == 0


def test_epoch_cache_is_truncated_with_the_log_and_survives_reopen(logdir):
    plog, infos = _multi_segment_log(logdir)
    assert [e.epoch for e in plog.epochs.entries()] == [1, 2, 3, 4]
    cut = infos[8].base_offset  # inside epoch 2
    plog.truncate_to(cut)
    assert plog.epochs.entries() == [(1, 0), (2, infos[5].base_offset)]
    assert epoch_file(plog) == f"0\n2\n1 0\n2 {infos[5].base_offset}\n"
    assert plog.end_offset_for_epoch(2) == (2, cut)
    assert plog.end_offset_for_epoch(1) == (1, infos[5].base_offset)
    assert plog.end_offset_for_epoch(3) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)  # above the latest
    plog.close()
    again = open_log(logdir, cfg=config(segment_bytes=400))
    assert again.epochs.entries() == [(1, 0), (2, infos[5].base_offset)]
    again.close()


def test_a_failed_cut_leaves_a_whole_usable_log(logdir, monkeypatch):
    plog, infos = _multi_segment_log(logdir)
    cut = infos[7].base_offset

    def failing(fd, length):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "ftruncate", failing)
    with pytest.raises(StorageError):
        plog.truncate_to(cut)
    monkeypatch.undo()
    # Later segments went, the one holding the cut did not: the log ends at its end.
    assert plog.log_end_offset == plog.active.next_offset > cut
    assert plog._bases == [s.base_offset for s in plog.segments]
    assert plog.epochs.entries() == epochs_from_batches(plog)
    leo = plog.log_end_offset
    assert produce(plog, 6).base_offset == leo
    plog.truncate_to(cut)
    assert plog.log_end_offset == cut


def test_single_node_truncation_removes_a_stale_epoch_file(logdir):
    plog, infos = _multi_segment_log(logdir)
    plog.replicated = False
    produce(plog, 6)
    plog.truncate_to(infos[8].base_offset)
    assert epoch_file(plog) is None  # it no longer matched the cache; opening rebuilds it
    want = plog.epochs.entries()
    plog.close()
    again = PartitionLog(logdir, config(segment_bytes=400), T0)
    assert again.epochs.entries() == want
    again.close()


# ----------------------------------------------------------------------------- epochs at open


def test_a_lost_epoch_file_is_rebuilt_from_the_batches(logdir):
    plog, _ = _multi_segment_log(logdir, batches=40)
    want = plog.epochs.entries()
    assert len(want) == 8
    plog.close()
    (logdir / LEADER_EPOCH_FILE).unlink()
    again = open_log(logdir, cfg=config(segment_bytes=400))
    assert again.epochs.entries() == want
    assert epoch_file(again) == f"0\n{len(want)}\n" + "".join(f"{e} {o}\n" for e, o in want)
    again.close()
    # The same with the log start (DeleteRecords) past the first batch of a segment whose
    # epoch goes on into the next: that segment is not read through, its epoch starts there.
    (logdir / LEADER_EPOCH_FILE).unlink()
    heads = [(s.base_offset, s.batch_at(0).partition_leader_epoch) for s in again.segments]
    start, epoch = next(h for h, n in zip(heads, heads[1:]) if h[1] == n[1] and h[1] > want[0].epoch)
    again = open_log(logdir, cfg=config(segment_bytes=400), log_start_offset=start + 3)
    assert again.epochs.entries() == [(epoch, start + 3), *[e for e in want if e.epoch > epoch]]
    again.close()


def test_opening_drops_epochs_past_the_log_end_and_below_its_start(logdir):
    plog, infos = _multi_segment_log(logdir)
    plog.epochs.assign(9, plog.log_end_offset)  # assigned, then the broker stopped
    plog.close()
    again = open_log(logdir, log_start_offset=infos[2].base_offset + 1)
    assert again.epochs.entries()[0] == (1, infos[2].base_offset + 1)
    assert again.latest_epoch == 4
    again.close()


def test_retention_and_delete_records_move_the_first_epoch(logdir):
    plog, infos = _multi_segment_log(logdir)
    plog.update_high_watermark(plog.log_end_offset)
    plog.increment_log_start_offset(infos[6].base_offset + 1)  # inside epoch 2
    assert plog.epochs.entries() == [(2, infos[6].base_offset + 1), (3, infos[10].base_offset),
                                     (4, infos[15].base_offset)]
    plog.reconfigure(config(segment_bytes=400, retention_bytes=0))
    assert plog.delete_old_segments(T0) > 0
    assert plog.log_start_offset == plog.active.base_offset > infos[15].base_offset
    assert plog.epochs.entries() == [(4, plog.log_start_offset)] == epochs_from_batches(plog)


# ----------------------------------------------------------------------------- high watermark


def test_high_watermark_is_stored_clamped_and_announced(logdir):
    plog = open_log(logdir)
    seen = []
    plog.listeners.append(lambda p: seen.append(p.high_watermark))
    produce(plog, 1, count=5)
    assert plog.high_watermark == 0 and seen == [0]  # appending alone commits nothing
    assert plog.update_high_watermark(3) is True
    assert plog.update_high_watermark(3) is False
    assert plog.update_high_watermark(99) is True and plog.high_watermark == 5
    assert plog.update_high_watermark(-4) is True and plog.high_watermark == 0
    assert seen == [0, 3, 5, 0]
    single = PartitionLog(logdir.with_name("single-0"), config(), T0)
    produce(single, count=2)
    assert single.high_watermark == 2  # one replica: the log end


def test_retention_keeps_segments_at_or_past_the_high_watermark(logdir):
    plog, _ = _multi_segment_log(logdir)
    plog.reconfigure(config(segment_bytes=400, retention_bytes=0))
    assert plog.delete_old_segments(T0) == 0  # nothing committed: nothing deleted
    plog.reconfigure(config(segment_bytes=400, retention_ms=1))
    assert plog.delete_old_segments(T0 + 10**9) == 0
    plog.reconfigure(config(segment_bytes=400, retention_bytes=0))
    plog.update_high_watermark(plog.segments[2].base_offset)
    assert plog.delete_old_segments(T0) == 2
    assert plog.log_start_offset == plog.segments[0].base_offset <= plog.high_watermark


def _manager(data_dir, t: Topic) -> LogManager:
    mgr = LogManager(data_dir, T0)
    mgr.open_all([t], lambda _t: config())
    return mgr


def test_high_watermarks_are_checkpointed_and_read_back(tmp_path):
    t = Topic("t", uuid.uuid4(), 2)
    mgr = _manager(tmp_path, t)
    rep, single = mgr.get("t", 0), mgr.get("t", 1)
    rep.replicated = True
    for _ in range(3):
        produce(rep, 1, count=2)
        produce(single, count=1)
    rep.update_high_watermark(4)
    mgr.checkpoint()
    assert (tmp_path / HIGH_WATERMARK_FILE).read_text() == "0\n2\nt 0 4\nt 1 3\n"
    assert read_checkpoint(tmp_path / HIGH_WATERMARK_FILE) == {("t", 0): 4, ("t", 1): 3}
    rep.update_high_watermark(5)
    mgr.close()
    again = _manager(tmp_path, t)
    plog = again.get("t", 0)
    plog.replicated = True
    assert plog.high_watermark == 5 and plog.log_end_offset == 6
    assert again.high_watermark_points() == {("t", 0): 5, ("t", 1): 3}
    again.close()


def test_high_watermark_is_never_above_the_log_end_after_recovery(tmp_path):
    t = Topic("t", uuid.uuid4(), 1)
    mgr = _manager(tmp_path, t)
    plog = mgr.get("t", 0)
    plog.replicated = True
    produce(plog, 1, count=2)
    produce(plog, 1, count=3)
    plog.update_high_watermark(5)
    mgr.checkpoint()
    for p in mgr.logs.values():  # kill -9: no flush, no checkpoint, no marker
        p.close_files()
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0x40  # the last batch fails its CRC: recovery cuts it
    seg.write_bytes(bytes(data))
    again = _manager(tmp_path, t)
    plog = again.get("t", 0)
    plog.replicated = True
    assert plog.log_end_offset == 2 and plog.high_watermark == 2
    again.close()


def test_a_partition_missing_from_the_checkpoint_starts_at_its_log_start(logdir):
    plog = open_log(logdir)
    produce(plog, 1, count=4)
    plog.close()
    again = open_log(logdir)  # no high_watermark given
    assert again.high_watermark == 0
    assert open_log(logdir.with_name("x-0"), high_watermark=10).high_watermark == 0


# ----------------------------------------------------------------------------- bounded reads


def test_reads_bounded_by_the_high_watermark(logdir):
    plog = open_log(logdir)
    for _ in range(4):
        produce(plog, 1, count=2)  # batches 0-1, 2-3, 4-5, 6-7
    plog.update_high_watermark(4)
    everything = plog.read(0, 1 << 20).data
    committed = plog.read(0, 1 << 20, max_offset=plog.high_watermark)
    assert [h.base_offset for h in iter_headers(committed.data)] == [0, 2]
    assert committed.data == everything[: len(committed.data)]
    assert (committed.high_watermark, committed.log_start_offset, committed.log_end_offset) == (4, 0, 8)
    assert plog.read(2, 1 << 20, max_offset=4).data == everything[len(committed.data) // 2 : len(committed.data)]
    # At or past the high watermark, up to the log end: nothing, no error.
    for offset in (4, 5, 8):
        assert plog.read(offset, 1 << 20, max_offset=4).data == b""
    with pytest.raises(OffsetOutOfRange):
        plog.read(9, 1 << 20, max_offset=4)
    # A follower reads to the log end.
    assert [h.base_offset for h in iter_headers(plog.read(4, 1 << 20).data)] == [4, 6]
    # A bound inside a batch: the batch waits (Kafka reads up to the position of the batch
    # holding the bound), and max_bytes still cuts at a partial batch before it.
    assert [h.base_offset for h in iter_headers(plog.read(0, 1 << 20, max_offset=3).data)] == [0]
    assert plog.read(2, 1 << 20, max_offset=3).data == b""
    size = len(everything) // 4
    assert len(plog.read(0, size + 10, max_offset=4).data) == size + 10
    assert len(plog.read(0, 5, max_offset=4).data) == size  # KIP-74: the first batch whole


def test_bounded_reads_across_segments(logdir):
    plog, infos = _multi_segment_log(logdir)
    bound = infos[9].base_offset
    plog.update_high_watermark(bound)
    offset, got = 0, []
    while True:
        data = plog.read(offset, 1 << 20, max_offset=plog.high_watermark).data
        if not data:
            break
        hs = list(iter_headers(data))
        got += [h.base_offset for h in hs]
        offset = hs[-1].next_offset
    assert got == [i.base_offset for i in infos[:9]]


# ----------------------------------------------------------------------------- property


@st.composite
def histories(draw):
    kinds = ["append", "append", "append", "new_epoch", "copy", "truncate_leader", "truncate_follower"]
    return [(draw(st.sampled_from(kinds)), draw(st.integers(1, 4)), draw(st.floats(0, 1)))
            for _ in range(draw(st.integers(1, 25)))]


def _check_epochs(plog: PartitionLog) -> None:
    leo = plog.log_end_offset
    batches = [h for h in stored_headers(plog) if h.last_offset >= plog.log_start_offset]
    assert plog.epochs.entries() == epochs_from_batches(plog)
    for h in batches:
        e = h.partition_leader_epoch
        # Where the cache says the batch's epoch ends: at the first batch of a later epoch,
        # or the log end.
        later = [b.base_offset for b in batches if b.partition_leader_epoch > e]
        assert plog.epochs.end_offset_for(e, leo) == (e, later[0] if later else leo)
        assert plog.epochs.epoch_for_offset(h.base_offset) == e


def _reconcile(leader: PartitionLog, follower: PartitionLog) -> None:
    """The follower's truncation (KIP-101/279): to where its latest epoch ends on the leader,
    or, when the leader knows only an earlier epoch, to where that one ends on both."""
    while (fe := follower.latest_epoch) is not None:
        le, end = leader.end_offset_for_epoch(fe)
        if le == UNDEFINED_EPOCH:
            follower.truncate_fully_and_start_at(leader.log_start_offset)
            return
        if le != fe:
            end = min(end, follower.end_offset_for_epoch(le)[1])
        if end >= follower.log_end_offset:
            return
        follower.truncate_to(end)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=histories())
def test_epoch_cache_always_matches_the_stamped_epochs(tmp_path_factory, ops):
    """Leader appends (epochs never decrease; a leader that truncated comes back at a
    higher epoch, as it must have lost leadership to be truncated), follower copies after
    Kafka's truncation protocol, and truncations of either, at batch boundaries: both
    caches always say, for every stamped epoch, where it starts and ends."""
    base = tmp_path_factory.mktemp("prop")
    cfg = config(segment_bytes=300, index_interval_bytes=1)
    leader = open_log(base / "leader-0", cfg=cfg)
    follower = open_log(base / "follower-0", cfg=cfg)
    epoch = 0
    for kind, n, where in ops:
        if kind == "new_epoch":
            epoch += n
        elif kind == "append":
            produce(leader, epoch, count=n)
        elif kind == "copy":
            _reconcile(leader, follower)
            copy_to(leader, follower, max_bytes=40 * n)
            assert stored(follower) == stored(leader)
        else:
            plog = leader if kind == "truncate_leader" else follower
            offsets = [h.base_offset for h in stored_headers(plog)] + [plog.log_end_offset]
            plog.truncate_to(offsets[int(where * (len(offsets) - 1))])
            if plog is leader:
                epoch += 1
        _check_epochs(leader)
        _check_epochs(follower)
    want = (leader.epochs.entries(), follower.epochs.entries())
    leader.close()
    follower.close()
    assert (open_log(base / "leader-0", cfg=cfg).epochs.entries(),
            open_log(base / "follower-0", cfg=cfg).epochs.entries()) == want
