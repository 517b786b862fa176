"""Tests for odradek.log.transactions: the last stable offset, aborted transactions and their
`.txnindex` files, marker checks, the follower path, truncation, producer snapshots and the
state after clean and unclean restarts. Real files in tmp_path; time is injected."""

from __future__ import annotations

import os
import uuid

import pytest

from odradek.cluster.metadata import Topic
from odradek.log import segment as segment_mod
from odradek.log import transactions as transactions_mod
from odradek.log.errors import StorageError
from odradek.log.manager import LogManager
from odradek.log.partition import PartitionLog
from odradek.log.producer_state import SequenceError
from odradek.log.transactions import snapshot_path
from odradek.log.txn_index import ENTRY, AbortedTxn, TxnIndex
from odradek.records.batch import BatchError, iter_headers, validate_batches
from odradek.records.codec import Record, encode_batch
from odradek.records.control import Marker, encode_marker
from tests.log.test_partition import config

T0 = 1_700_000_000_000
A, B, C = 101, 202, 303  # producer ids
TOPIC = Topic("t", uuid.uuid4(), 1)


@pytest.fixture
def logdir(tmp_path):
    return tmp_path / "txn-0"


def txn(plog: PartitionLog, pid: int, seq: int, count: int = 1, epoch: int = 0, key: bytes = b"k") -> int:
    """A transactional batch of `pid`; its base offset."""
    buf = bytearray(encode_batch([Record(i, T0, key, b"v%d" % (seq + i)) for i in range(count)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, is_transactional=True))
    return plog.append(buf, validate_batches(buf), T0).base_offset


def plain(plog: PartitionLog, count: int = 1) -> int:
    buf = bytearray(encode_batch([Record(i, T0, b"p", b"x") for i in range(count)]))
    return plog.append(buf, validate_batches(buf), T0).base_offset


def end(plog: PartitionLog, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    """Append a marker as leader (WriteTxnMarkers); its offset."""
    return plog.append_marker(Marker(pid, epoch, commit, coordinator_epoch), T0).base_offset


def all_aborted(plog: PartitionLog) -> list[AbortedTxn]:
    return plog.aborted_entries(plog.segments[0].base_offset, plog.log_end_offset + 1)


def state(plog: PartitionLog) -> tuple:
    """Everything transactions.py derives, for comparing two opens of one log."""
    producers = {pid: (e.epoch, e.coordinator_epoch, e.last_seq) for pid, e in plog.producers.producers.items()}
    return (plog.log_end_offset, plog.last_stable_offset, plog.first_unstable_offset, dict(plog.producers.ongoing),
            all_aborted(plog), producers)


def index_file(plog: PartitionLog, seg_index: int = -1) -> list[tuple]:
    data = plog.segments[seg_index].txn_index.path.read_bytes()
    return [ENTRY.unpack_from(data, i) for i in range(0, len(data), ENTRY.size)]


def copy_to(leader: PartitionLog, follower: PartitionLog) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, 1 << 20).data
        follower.append_as_follower(data, list(iter_headers(data)), T0)


# ----------------------------------------------------------------------------- the last stable offset


def test_an_open_transaction_holds_the_lso_at_its_first_offset(logdir):
    plog = PartitionLog(logdir, config(), T0)
    plain(plog, 2)
    assert plog.last_stable_offset == 2 and plog.first_unstable_offset is None
    first = txn(plog, A, 0)
    txn(plog, A, 1)
    plain(plog)  # other data after it does not move the LSO
    assert plog.log_end_offset == 5
    assert plog.first_unstable_offset == first == 2
    assert plog.last_stable_offset == 2
    plog.close()


def test_a_commit_marker_releases_the_lso_and_records_no_abort(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0, count=3)
    end(plog, A, commit=True)
    assert plog.last_stable_offset == plog.log_end_offset == 4
    assert plog.first_unstable_offset is None
    assert plog.aborted_transactions(0, 4) == []
    assert not plog.active.txn_index.path.exists()
    plog.close()


def test_an_abort_marker_releases_the_lso_and_writes_a_kafka_txnindex_entry(logdir):
    plog = PartitionLog(logdir, config(), T0)
    plain(plog)
    first = txn(plog, A, 0, count=2)
    txn(plog, A, 2)
    marker = end(plog, A, commit=False)
    assert (first, marker) == (1, 4)
    assert plog.last_stable_offset == 5
    assert plog.aborted_transactions(0, 5) == [(A, 1)]
    # Kafka's AbortedTxn: version 0, producer id, first offset, last offset (the marker), LSO then.
    assert index_file(plog) == [(0, A, 1, 4, 5)]
    assert plog.active.txn_index.path.name == f"{0:020d}.txnindex"
    plog.close()


def test_the_lso_is_the_first_of_several_open_transactions(logdir):
    plog = PartitionLog(logdir, config(), T0)
    a = txn(plog, A, 0)
    txn(plog, B, 0)
    txn(plog, A, 1)
    assert plog.last_stable_offset == a == 0
    b_marker = end(plog, B, commit=False)
    assert plog.last_stable_offset == 0  # A is still open
    # The entry's LSO is A's first offset: A was still open when B aborted.
    assert all_aborted(plog) == [AbortedTxn(B, 1, b_marker, 0)]
    end(plog, A, commit=True)
    assert plog.last_stable_offset == plog.log_end_offset
    txn(plog, B, 1)  # B's next transaction opens at its first batch
    assert plog.last_stable_offset == plog.log_end_offset - 1
    plog.close()


def test_the_lso_is_never_above_the_high_watermark(logdir):
    plog = PartitionLog(logdir, config(), T0)
    plog.replicated = True
    plain(plog, 3)
    assert plog.high_watermark == 0 and plog.last_stable_offset == 0
    plog.update_high_watermark(2)
    assert plog.last_stable_offset == 2
    plog.close()


def test_a_marker_above_the_high_watermark_still_holds_the_lso(logdir):
    # Kafka's unreplicatedTxns: a leader change could still lose the marker.
    plog = PartitionLog(logdir, config(), T0)
    plog.replicated = True
    txn(plog, A, 0, count=2)  # 0..1
    plain(plog, 3)  # 2..4
    marker = end(plog, A, commit=True)  # 5
    plog.update_high_watermark(4)
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(marker)
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(marker + 1)
    assert plog.last_stable_offset == marker + 1
    plog.close()


def test_the_first_unstable_offset_is_raised_to_the_log_start(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)
    plain(plog, 4)
    assert plog.increment_log_start_offset(3)
    assert plog.first_unstable_offset == 3 and plog.last_stable_offset == 3
    plog.close()


# ----------------------------------------------------------------------------- aborted transactions


def test_aborted_transactions_overlapping_the_fetched_range(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0, count=3)  # 0..2
    end(plog, A, commit=False)  # 3
    plain(plog)  # 4
    txn(plog, B, 0, count=3)  # 5..7
    end(plog, B, commit=False)  # 8
    txn(plog, C, 0)  # 9
    end(plog, C, commit=True)  # 10
    assert plog.aborted_transactions(0, 11) == [(A, 0), (B, 5)]
    assert plog.aborted_transactions(0, 5) == [(A, 0)]  # B starts at the bound
    assert plog.aborted_transactions(4, 11) == [(B, 5)]  # A's marker is below the fetch offset
    assert plog.aborted_transactions(3, 4) == [(A, 0)]  # the marker itself is in range
    assert plog.aborted_transactions(9, 11) == []
    plog.close()


def test_aborted_transactions_are_found_in_later_segments(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)  # 0
    plog.roll(T0)
    plain(plog)  # 1
    plog.roll(T0)
    marker = end(plog, A, commit=False)  # 2, in the third segment
    assert index_file(plog, 2) == [(0, A, 0, marker, marker + 1)]
    assert plog.aborted_transactions(0, 1) == [(A, 0)]
    plog.close()


def test_a_marker_without_an_open_transaction_records_nothing(logdir):
    # Kafka's appendEndTxnMarker emits a CompletedTxn only for a non-empty transaction.
    plog = PartitionLog(logdir, config(), T0)
    plain(plog)
    end(plog, A, commit=False)
    end(plog, B, commit=True)
    assert plog.last_stable_offset == plog.log_end_offset == 3
    assert all_aborted(plog) == []
    assert plog.producers.producers[A].epoch == 0
    plog.close()


# ----------------------------------------------------------------------------- marker checks


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)
    end(plog, A, commit=True, coordinator_epoch=5)
    txn(plog, A, 1)
    leo = plog.log_end_offset
    with pytest.raises(SequenceError) as exc:
        end(plog, A, commit=False, coordinator_epoch=4)
    assert exc.value.code == "transaction_coordinator_fenced"
    assert plog.log_end_offset == leo and plog.last_stable_offset == 2  # nothing written, still open
    end(plog, A, commit=True, coordinator_epoch=5)
    end(plog, A, commit=True, coordinator_epoch=6)
    assert plog.producers.producers[A].coordinator_epoch == 6
    assert plog.last_stable_offset == plog.log_end_offset
    plog.close()


def test_a_marker_from_an_older_producer_epoch_is_refused(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0, epoch=3)
    leo = plog.log_end_offset
    with pytest.raises(SequenceError) as exc:
        end(plog, A, commit=True, epoch=2)
    assert exc.value.code == "invalid_producer_epoch"
    assert plog.log_end_offset == leo and plog.last_stable_offset == 0
    end(plog, A, commit=True, epoch=3)  # the producer's own epoch is fine
    assert plog.last_stable_offset == plog.log_end_offset
    plog.close()


def test_a_marker_of_a_newer_epoch_fences_the_old_one_and_restarts_sequences(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0, count=3, epoch=0)
    end(plog, A, commit=False, epoch=1)  # the coordinator bumped the epoch to abort
    assert plog.producers.producers[A].epoch == 1
    with pytest.raises(SequenceError) as exc:
        txn(plog, A, 3, epoch=0)
    assert exc.value.code == "invalid_producer_epoch"
    with pytest.raises(SequenceError) as exc:
        txn(plog, A, 3, epoch=1)
    assert exc.value.code == "out_of_order_sequence_number"
    assert txn(plog, A, 0, epoch=1) == 4
    plog.close()


def test_a_malformed_control_batch_is_refused_before_anything_is_written(logdir):
    plog = PartitionLog(logdir, config(), T0)
    buf = bytearray(encode_batch([Record(0, T0, b"\x00", b"")], producer_id=A, producer_epoch=0,
                                 is_transactional=True, is_control=True))
    with pytest.raises(BatchError):
        plog.append(buf, validate_batches(buf), T0)
    assert plog.log_end_offset == 0
    plog.close()


# ----------------------------------------------------------------------------- every append path


def test_control_batches_appended_through_append_count_as_markers(logdir):
    # The group coordinator writes markers to __consumer_offsets through append().
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)
    buf = bytearray(encode_marker(Marker(A, 0, False, 0), T0))
    plog.append(buf, validate_batches(buf), T0)
    assert plog.last_stable_offset == 2 and plog.aborted_transactions(0, 2) == [(A, 0)]
    plog.close()


def test_transactional_batches_without_sequence_open_transactions(logdir):
    # The group coordinator's transactional offset commits carry no sequence (Kafka's COORDINATOR origin).
    plog = PartitionLog(logdir, config(), T0)
    buf = bytearray(encode_batch([Record(0, T0, b"k", b"v")], producer_id=A, producer_epoch=2, is_transactional=True))
    plog.append(buf, validate_batches(buf), T0)
    assert plog.last_stable_offset == 0
    end(plog, A, commit=True, epoch=2)
    assert plog.last_stable_offset == 2
    plog.close()


def test_a_follower_copy_has_the_leaders_transaction_state_and_index(tmp_path):
    leader = PartitionLog(tmp_path / "leader", config(segment_bytes=400), T0)
    follower = PartitionLog(tmp_path / "follower", config(segment_bytes=400), T0)
    txn(leader, A, 0, count=2)
    txn(leader, B, 0)
    plain(leader, 3)
    end(leader, B, commit=False, coordinator_epoch=2)
    txn(leader, C, 0)
    end(leader, C, commit=True, coordinator_epoch=1)
    txn(leader, A, 2)
    txn(leader, B, 1)
    end(leader, B, commit=False, coordinator_epoch=2)
    copy_to(leader, follower)
    assert len(leader.segments) > 1
    assert state(follower) == state(leader)
    assert [s.txn_index.entries() for s in follower.segments] == [s.txn_index.entries() for s in leader.segments]
    # Once leader, the follower fences the same stale coordinator.
    with pytest.raises(SequenceError):
        end(follower, B, commit=True, coordinator_epoch=1)
    leader.close()
    follower.close()


# ----------------------------------------------------------------------------- truncation


def test_truncating_below_an_abort_marker_reopens_the_transaction_and_removes_its_entry(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0, count=2)  # 0..1
    marker = end(plog, A, commit=False)  # 2
    assert index_file(plog) == [(0, A, 0, 2, 3)]
    plog.truncate_to(marker)
    assert plog.last_stable_offset == 0 and plog.producers.ongoing == {A: 0}
    assert all_aborted(plog) == [] and not plog.active.txn_index.path.exists()
    marker = end(plog, A, commit=True)  # the coordinator writes its marker again
    assert plog.last_stable_offset == marker + 1
    plog.truncate_to(0)
    assert plog.first_unstable_offset is None and plog.producers.ongoing == {}
    plog.close()


def test_truncating_into_an_older_segment_reloads_from_its_snapshot(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)  # 0, segment 0
    plain(plog)  # 1
    plog.roll(T0)
    txn(plog, B, 0)  # 2, segment 2
    end(plog, A, commit=False)  # 3
    plog.roll(T0)
    end(plog, B, commit=True)  # 4, segment 4
    assert sorted(p.name for p in logdir.glob("*.snapshot")) == [f"{2:020d}.snapshot", f"{4:020d}.snapshot"]
    plog.truncate_to(3)
    assert [s.base_offset for s in plog.segments] == [0, 2]
    assert sorted(p.name for p in logdir.glob("*.snapshot")) == [f"{2:020d}.snapshot"]
    assert plog.producers.ongoing == {A: 0, B: 2} and plog.last_stable_offset == 0
    assert all_aborted(plog) == []
    plog.close()
    again = PartitionLog(logdir, config(), T0)
    assert again.producers.ongoing == {A: 0, B: 2}
    again.close()


def test_truncate_fully_forgets_transactions_and_snapshots(logdir):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)
    plog.roll(T0)
    txn(plog, B, 0)
    end(plog, B, commit=False)
    plog.truncate_fully_and_start_at(2)  # the snapshot at 2 described the old log
    assert plog.producers.producers == {} and plog.first_unstable_offset is None
    assert list(logdir.glob("*.snapshot")) == [] and list(logdir.glob("*.txnindex")) == []
    plog.close()
    again = PartitionLog(logdir, config(), T0)
    assert again.producers.ongoing == {} and again.last_stable_offset == 2
    again.close()


# ----------------------------------------------------------------------------- restarts


def _busy_log(logdir) -> PartitionLog:
    """Transactions across rolled segments: A opens in the first segment and stays open,
    B aborts across segments, C commits, a fourth producer aborts within the active segment."""
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)  # 0
    txn(plog, B, 0, count=2)  # 1..2
    plain(plog)
    plog.roll(T0)
    txn(plog, B, 2)
    txn(plog, C, 0)
    end(plog, B, commit=False, coordinator_epoch=3)
    plog.roll(T0)
    end(plog, C, commit=True, coordinator_epoch=1)
    txn(plog, 404, 0)
    plain(plog, 2)
    end(plog, 404, commit=False, coordinator_epoch=7)
    txn(plog, A, 1)
    return plog


def test_clean_and_unclean_restarts_give_the_same_state(logdir):
    plog = _busy_log(logdir)
    before = state(plog)
    assert before[1] == 0 and before[3] == {A: 0}  # A, opened in the first segment, holds the LSO
    assert len(before[4]) == 2
    plog.close()
    for how in ("clean", "recovery point 0", "no snapshots", "no snapshots, recovery point 0"):
        if "no snapshots" in how:
            for p in logdir.glob("*.snapshot"):
                p.unlink()
        again = PartitionLog(logdir, config(), T0, recovery_point=0 if "0" in how else None)
        assert state(again) == before, how
        # The producers' next markers are judged the same way.
        with pytest.raises(SequenceError):
            end(again, B, commit=True, coordinator_epoch=2)
        again.close()


def test_unclean_restart_rebuilds_a_lost_or_stale_index(logdir):
    plog = _busy_log(logdir)
    before = state(plog)
    files = sorted(logdir.glob("*.txnindex"))
    contents = [p.read_bytes() for p in files]
    plog.close()
    files[0].unlink()  # lost with a crash
    files[1].write_bytes(contents[1] + contents[1][:ENTRY.size])  # an entry whose marker recovery cut
    again = PartitionLog(logdir, config(), T0, recovery_point=0)
    assert state(again) == before
    assert [p.read_bytes() for p in sorted(logdir.glob("*.txnindex"))] == contents
    again.close()


def test_opening_replays_only_from_the_latest_snapshot(logdir, monkeypatch):
    plog = _busy_log(logdir)
    plog.close()
    scanned = []
    real = segment_mod.Segment.headers
    monkeypatch.setattr(segment_mod.Segment, "headers", lambda seg: scanned.append(seg.base_offset) or real(seg))
    again = PartitionLog(logdir, config(), T0)
    active = again.active.base_offset
    assert scanned == [active]  # the active segment, as before transactions existed
    again.close()
    # Without snapshots the whole log is replayed once, and the active segment's snapshot
    # is written on the way, so the next open is short again.
    for p in logdir.glob("*.snapshot"):
        p.unlink()
    scanned.clear()
    PartitionLog(logdir, config(), T0).close()
    assert scanned == [0, 4, active]
    assert snapshot_path(logdir, active).exists()
    scanned.clear()
    PartitionLog(logdir, config(), T0).close()
    assert scanned == [active]


def test_a_corrupt_snapshot_is_ignored_for_an_older_one(logdir):
    plog = _busy_log(logdir)
    before = state(plog)
    plog.close()
    latest = max(logdir.glob("*.snapshot"))
    data = bytearray(latest.read_bytes())
    data[-1] ^= 0xFF
    latest.write_bytes(bytes(data))
    again = PartitionLog(logdir, config(), T0)
    assert state(again) == before
    again.close()


def test_a_snapshot_past_the_log_end_is_removed_when_opening(logdir):
    plog = _busy_log(logdir)
    before = state(plog)
    leo = plog.log_end_offset
    plog.close()
    # What a crash leaves when recovery cuts the log below a snapshot taken at a roll.
    snapshot_path(logdir, 0).write_bytes(b"")
    stale = snapshot_path(logdir, leo + 5)
    stale.write_bytes(snapshot_path(logdir, 4).read_bytes())
    again = PartitionLog(logdir, config(), T0)
    assert not stale.exists()
    assert state(again) == before
    again.close()


def test_retention_deletes_a_segment_with_its_snapshot_and_index(logdir):
    plog = PartitionLog(logdir, config(retention_ms=1000), T0)
    txn(plog, A, 0)
    end(plog, A, commit=False)
    plog.roll(T0)
    txn(plog, B, 0)
    plog.roll(T0)
    plain(plog)
    assert snapshot_path(logdir, 2).exists() and (logdir / f"{0:020d}.txnindex").exists()
    plog.config = config(retention_ms=1000, retention_bytes=1)
    plog.delete_old_segments(T0)
    assert plog.segments[0].base_offset == 3
    assert sorted(p.name for p in logdir.glob("*.snapshot")) == [f"{3:020d}.snapshot"]
    assert list(logdir.glob("*.txnindex")) == []
    # B's transaction started in a deleted segment: the LSO waits at the log start.
    assert plog.last_stable_offset == 3
    plog.close()
    again = PartitionLog(logdir, config(), T0)
    assert again.producers.ongoing == {B: 2} and again.last_stable_offset == 3
    again.close()


def test_the_recovery_point_waits_for_the_index_to_be_fsynced(logdir, monkeypatch):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)
    end(plog, A, commit=False)
    seg = plog.active
    plog.roll(T0)
    plain(plog)
    point = plog.recovery_point

    def refuse(self):
        raise StorageError("fsync failed")

    monkeypatch.setattr(TxnIndex, "sync", refuse)
    plog.mark_flushed(seg)
    assert plog.recovery_point == point and seg in plog.rolled_unflushed
    monkeypatch.undo()
    plog.mark_flushed(seg)
    assert plog.recovery_point == 2 and seg not in plog.rolled_unflushed
    plog.close()


def test_a_snapshot_that_cannot_be_written_costs_only_a_longer_replay(logdir, monkeypatch):
    plog = PartitionLog(logdir, config(), T0)
    txn(plog, A, 0)
    real_open = transactions_mod.os.open

    def no_snapshots(path, flags, *a):
        if str(path).endswith(".snapshot"):
            raise OSError(28, "No space left on device")
        return real_open(path, flags, *a)

    monkeypatch.setattr(transactions_mod.os, "open", no_snapshots)
    plog.roll(T0)  # logged, not raised
    monkeypatch.undo()
    txn(plog, B, 0)
    before = state(plog)
    assert list(logdir.glob("*.snapshot")) == []
    plog.close()
    again = PartitionLog(logdir, config(), T0)
    assert state(again) == before and again.producers.ongoing == {A: 0, B: 1}
    again.close()


def test_an_index_left_by_a_deleted_segment_is_removed_when_opening(logdir):
    plog = PartitionLog(logdir, config(), T0)
    plain(plog, 3)
    plog.close()
    orphan = logdir / f"{1:020d}.txnindex"  # a crash while deleting segment 1 left it
    orphan.write_bytes(AbortedTxn(A, 1, 1, 2).to_bytes())
    again = PartitionLog(logdir, config(), T0)
    assert not orphan.exists() and all_aborted(again) == []
    again.close()


# ----------------------------------------------------------------------------- kill -9, through the log manager


def _manager(data_dir):
    mgr = LogManager(data_dir, T0)
    mgr.open_all([TOPIC], lambda _t: config())
    return mgr


def _kill(mgr) -> None:
    """What kill -9 leaves: the data written, no flush, no checkpoint, no marker."""
    for plog in mgr.logs.values():
        plog.close_files()


def test_after_a_kill_the_state_is_what_was_written(tmp_path):
    mgr = _manager(tmp_path)
    plog = mgr.get("t", 0)
    txn(plog, A, 0)
    plog.roll(T0)
    txn(plog, B, 0)
    end(plog, B, commit=False)
    plog.roll(T0)
    txn(plog, C, 0)
    before = state(plog)
    _kill(mgr)
    again = _manager(tmp_path).get("t", 0)
    assert state(again) == before and again.producers.ongoing == {A: 0, C: 3}


def test_after_a_kill_that_tore_the_marker_the_transaction_is_open_again(tmp_path):
    mgr = _manager(tmp_path)
    plog = mgr.get("t", 0)
    txn(plog, A, 0, count=2)
    plog.roll(T0)
    plain(plog)
    marker = end(plog, A, commit=False)  # its index entry is written at once
    path, size = plog.active.path, plog.active.size
    assert all_aborted(plog) == [AbortedTxn(A, 0, marker, marker + 1)]
    _kill(mgr)
    os.truncate(path, size - 10)  # the marker's write was torn
    again = _manager(tmp_path).get("t", 0)
    assert again.log_end_offset == marker
    assert again.producers.ongoing == {A: 0} and again.last_stable_offset == 0
    assert all_aborted(again) == [] and not (tmp_path / "t-0" / f"{2:020d}.txnindex").exists()


def test_a_read_counts_its_data_records_and_not_its_markers(logdir):
    # The broker's messages-out metric comes from this count (issue 21), so a commit
    # marker, a control batch of one record, must not be in it.
    plog = PartitionLog(logdir, config(), T0)
    plain(plog, 3)
    txn(plog, A, 0, count=2)
    end(plog, A, commit=True)
    plain(plog, 1)
    result = plog.read(0, 1 << 20)
    assert [h.is_control for h in iter_headers(result.data)] == [False, False, True, False]
    assert result.records == 6
    assert plog.read(plog.log_end_offset, 1 << 20).records == 0
