"""The log of one partition: an ordered list of segments in one directory.

Theory of operation: the last segment is the active one and takes every append. An
append assigns offsets (patching each batch's base offset in place), optionally stamps
LogAppendTime, rolls to a new segment first when the active one is full
(`segment.bytes`) or old (`segment.ms`), writes, and applies the flush policy
(`flush.messages`; `flush.ms` is applied by `tick`). With one replica the high watermark
is the log end offset. Reads locate the segment by base offset, the batch by the sparse
index plus a short header scan, and return stored bytes unchanged, up to `max_bytes`
(possibly ending in a partial batch, which Kafka clients expect) but always at least the
whole first batch (KIP-74).

Retention deletes whole segments (never the active one: an expired active segment is
rolled first, as Kafka does) by age and by total size.

The log start offset (Kafka's UnifiedLog.logStartOffset) is the first segment's base
offset, or more once DeleteRecords moved it (`increment_log_start_offset`): then reads
below it are out of range, and every segment wholly below it is deleted at once and by
each retention pass whatever the cleanup policy (Kafka's log-start-offset breach). The
moved start is kept by the log manager in `log-start-offset-checkpoint` and handed back
when the partition is opened again.

Durability bookkeeping, as Kafka's UnifiedLog/LogLoader: the *recovery point* is the
offset below which every byte was fsynced. A rolled segment is fsynced soon after the
roll (by the broker, off the event loop: `rolled_unflushed` / `mark_flushed`), the flush
policy and a clean shutdown fsync everything; each advances the recovery point, which
the log manager checkpoints. Opening a partition trusts the segments wholly below its
recovery point (their structure is checked, and damage takes the partition offline:
that data was acknowledged and flushed) and recovers the others: CRC-checked, truncated
at the first invalid batch, with every later segment removed, and the loss reported.

Reads check the CRC32C of every batch they return: a batch that fails it is never
served as if it were fine (CorruptBatch, CORRUPT_MESSAGE on the wire), and a response
stops before it when it is not the first.

Appends roll first when the active segment could not index the new offsets or
positions in 32 bits. A failed write or fsync is undone by the segment (StorageError);
nothing here moves either, so the next append lands where it should.

Replication (Kafka's UnifiedLog and LocalLog; see also epochs.py):

- `append(..., leader_epoch)` is Kafka's appendAsLeader: every batch is stamped with the
  leader's epoch, and the leader epoch cache (`epochs`) learns where a new epoch starts
  before the data is written, so the cache is never behind the log.
  `append_as_follower` takes batches fetched from the leader as they are: offsets and
  epochs kept byte for byte, no sequence checks (producer state is only updated), and
  the first offset must not fall below the log end (`OffsetMismatch`). It may lie past
  it: a compacted leader leaves gaps, and Kafka's follower accepts them.
- `truncate_to(offset)` cuts a divergent tail across segments (Kafka's truncateTo) and
  `truncate_fully_and_start_at(offset)` empties the log to restart it elsewhere (Kafka's
  truncateFullyAndStartAt); both bring the epoch cache, producer state, recovery point
  and high watermark down with the log.
- With `replicated` set, the high watermark is a stored value moved by
  `update_high_watermark` (Kafka's updateHighWatermark: the leader's ISR decides it,
  a follower copies the leader's), checkpointed by the log manager in
  `replication-offset-checkpoint` and handed back at open, clamped to what recovery
  kept. Listeners hear of every move (fetches parked for new committed data). Consumers
  read below it (`read(..., max_offset=hw)`); retention never deletes a segment holding
  data at or past it (Kafka's deletableSegments). Without `replicated` the high
  watermark is the log end, as before.
- The epoch cache's file (`leader-epoch-checkpoint`) is written only while the log is
  replicated. A single replica keeps the cache in memory: it is what opening the log
  derives from the batches' stamped epochs anyway (see epoch_reconcile.py), and the
  write and fsync would otherwise land in the first produce to every partition.
  Setting `replicated` writes the file as the cache stands.

Opening reconciles the cache with the log (Kafka's LogLoader): entries at or past the
log end go (a leader that never wrote in its epoch, or a tail recovery cut), entries
below the start are folded into it, and when the first or last batch disagrees with
the cache (file lost, or written by an older broker that kept none) the cache is
rebuilt from the batch headers, reading only segments where the epoch changes.

Transactions (KIP-98: last stable offset, aborted index, markers, producer snapshots
written at roll and replayed at open) are transactions.py, a mixin like truncation.py.

Time is a parameter (`now_ms`) everywhere; nothing here reads the clock.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import shutil
from collections.abc import Callable
from time import perf_counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records.batch import BatchError, BatchHeader, crc_of, patch_base_offset, set_log_append_time
from .epoch_reconcile import EpochReconciliation
from .epochs import LeaderEpochCache
from .errors import CorruptBatch, SegmentDamaged, StorageError, storage_error
from .files import FileCache
from .producer_state import Duplicate
from .segment import MAX_RELATIVE_OFFSET, RecoveryResult, Segment
from .transactions import Transactions, markers_of
from .truncation import Truncation

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"


class OffsetOutOfRange(Exception):
    pass


class OffsetMismatch(Exception):
    """A follower append that does not continue the log: its first offset is below the
    log end, or its batches overlap (Kafka's UnexpectedAppendOffsetException). Nothing
    was appended. A fetcher whose log is empty may answer it by restarting the log at
    `first_offset` (Kafka does, for a leader whose start is inside a batch)."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    records: int = 0  # data records in `data` (control batches not counted): the messages-out metric


def _segment_groups(headers: list[BatchHeader]) -> list[list[BatchHeader]]:
    """Consecutive batches whose offsets fit one segment's 32-bit relative index (a
    follower's batches may span more after compaction gaps): one group nearly always."""
    groups = [[headers[0]]]
    for h in headers[1:]:
        if h.last_offset - groups[-1][0].base_offset > MAX_RELATIVE_OFFSET:
            groups.append([h])
        else:
            groups[-1].append(h)
    return groups


def _segment_offsets(directory: Path) -> list[int]:
    out = []
    for p in directory.iterdir():
        if p.suffix == ".log" and p.stem.isdigit():
            out.append(int(p.stem))
    return sorted(out)


class PartitionLog(EpochReconciliation, Truncation, Transactions):
    # Told the seconds each flush took (the broker's log-flush metric, issue 21); None: not
    # timed. A flush by `flush.messages` is timed with the append that carries its fsync.
    flush_observer: Callable[[float], None] | None = None

    def __init__(self, directory: Path, config: dict[str, Any], now_ms: int, clean_shutdown: bool = True,
                 recovery_point: int | None = None, files: FileCache | None = None, log_start_offset: int = 0,
                 high_watermark: int | None = None) -> None:
        """Open (creating if need be) the log in `directory`.

        `recovery_point`: offset below which the data is known flushed; None means all
        of it (a clean shutdown), 0 recovers every segment. `clean_shutdown=False` with
        no recovery point is the same as 0. `log_start_offset`: the checkpointed start
        (DeleteRecords); the first segment's base offset wins when it is larger.
        `high_watermark`: the checkpointed one, used once the log is `replicated`,
        clamped to [log start, log end]; None (never checkpointed) is the log start, as
        Kafka's Partition.createLog reads a missing entry as 0. Raises SegmentDamaged
        when a flushed segment is broken (the caller takes the partition offline),
        StorageError on I/O failure.
        """
        self.directory = directory
        self.config = config
        self.files = files
        self.listeners: list[Callable[[PartitionLog], None]] = []
        self.recovery: list[RecoveryResult] = []
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self.cleaner_state = None  # compaction's memo of the last pass (see compaction.compact_log)
        self._reported_corrupt: set[tuple[int, int]] = set()
        self._log_start = max(log_start_offset, 0)  # as moved by DeleteRecords (see log_start_offset)
        if recovery_point is None and not clean_shutdown:
            recovery_point = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # A compaction that died before its atomic rename leaves a .cleaned file: discard it.
            for stray in directory.glob(f"*{CLEANED_SUFFIX}"):
                stray.unlink()
            offsets = _segment_offsets(directory)
        except OSError as exc:
            raise storage_error(f"cannot open {directory}", exc) from exc
        self.segments: list[Segment] = []
        self._replay_floor: int | None = None  # first segment not trusted as flushed (transactions.py)
        try:
            self._load(offsets, recovery_point, now_ms)
            if self.segments and self.segments[-1].next_offset < self._log_start:
                self._drop_below_start()
        except OSError as exc:
            self.close_files()
            raise storage_error(f"cannot open {directory}", exc) from exc
        except BaseException:
            self.close_files()
            raise
        if not self.segments:
            # Kafka's LogLoader: an empty log starts its first segment at the log start offset.
            self.segments.append(Segment(directory, self._log_start, self.index_interval, now_ms, files))
        self._bases = [s.base_offset for s in self.segments]
        # Everything loaded is flushed: trusted segments were, recovered ones were rewritten.
        self.recovery_point = self.log_end_offset
        self.rolled_unflushed: list[Segment] = []
        self._replicated = False
        self.epochs = LeaderEpochCache.load(directory)
        self._epoch_file = self.epochs.path
        # What the file says, so that turning replicated skips rewriting it unchanged.
        self._epochs_on_disk = self.epochs.entries() if self._epoch_file.exists() else None
        self.epochs.path = None  # in memory until the log is replicated (module docstring)
        try:
            self._load_transactions(self._replay_floor)
            self._reconcile_epochs()
        except BaseException:
            self.close_files()
            raise
        # Kafka's updateHighWatermark clamps to [logStartOffset, logEndOffset] too.
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self._hw = min(max(hw, self.log_start_offset), self.log_end_offset)

    def _load(self, offsets: list[int], recovery_point: int | None, now_ms: int) -> None:
        for i, base in enumerate(offsets):
            end = offsets[i + 1] if i + 1 < len(offsets) else None
            seg = Segment(self.directory, base, self.index_interval, now_ms, self.files)
            if recovery_point is None or (end is not None and end <= recovery_point):
                result = seg.load()  # wholly flushed: damage raises SegmentDamaged
            else:
                self._replay_floor = base if self._replay_floor is None else self._replay_floor
                result = self._load_or_recover(seg, recovery_point)
                if result is not None:
                    seg.fsync()  # what recovery kept is now flushed: the recovery point may pass it
            if self.segments and self.segments[-1].next_offset > base:
                raise SegmentDamaged(f"{seg.path}: starts at {base}, inside the previous segment "
                                     f"(which ends at {self.segments[-1].next_offset - 1})", base)
            if result is not None:
                self.recovery.append(result)
            if seg.first_batch_timestamp is not None:
                seg.created_ms = min(max(seg.first_batch_timestamp, 0), now_ms)
            self.segments.append(seg)
            if result is not None and result.truncated_bytes:
                self._drop_after_truncation(offsets[i + 1 :], result)
                return

    def _drop_below_start(self) -> None:
        """Kafka's LogLoader.deleteSegmentsIfLogStartGreaterThanLogEnd: the log ends below
        its checkpointed start (segment files removed by hand, or lost with an unclean
        stop), so nothing in it can be served; it restarts empty at the start."""
        log.warning("%s: the log ends at %d, below its log start offset %d: deleting every segment",
                    self.directory.name, self.segments[-1].next_offset, self._log_start)
        for seg in self.segments:
            seg.delete()
        self.segments.clear()

    @staticmethod
    def _load_or_recover(seg: Segment, recovery_point: int) -> RecoveryResult | None:
        """A segment that may hold data past the recovery point. If its indexes and tail
        say it ends at or before the point (a clean shutdown), it was flushed whole;
        otherwise CRC-check it from the recovery point and truncate what fails."""
        if seg.base_offset < recovery_point:
            try:
                result = seg.load()
                if seg.next_offset <= recovery_point:
                    return result
            except SegmentDamaged:
                pass  # the recovery below decides whether flushed data was hit
        return seg.recover(verify_from=recovery_point)

    def _drop_after_truncation(self, later: list[int], result: RecoveryResult) -> None:
        """Kafka's LogLoader: once a segment is truncated, every later one goes too."""
        dropped_end = result.first_dropped_offset + result.dropped_offsets
        for base in later:
            seg = Segment(self.directory, base, self.index_interval, 0, self.files)
            last = base - 1
            for h in seg._scan_headers():  # best effort: what the dropped segment claimed
                last = h.last_offset
            dropped_end = max(dropped_end, last + 1)
            result.whole_batches_dropped = result.whole_batches_dropped or seg.size > 0
            result.truncated_bytes += seg.size
            seg.delete()
        result.dropped_offsets = max(dropped_end - result.first_dropped_offset, 0)

    # --- configuration -------------------------------------------------------------

    @property
    def index_interval(self) -> int:
        return int(self.config["index.interval.bytes"])

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.config = config

    # --- offsets -------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def high_watermark(self) -> int:
        if not self._replicated:
            return self.active.next_offset  # one replica: everything appended is committed
        return self._hw

    @property
    def replicated(self) -> bool:
        """Whether other replicas decide the high watermark (see the module docstring)."""
        return self._replicated

    @replicated.setter
    def replicated(self, value: bool) -> None:
        value = bool(value)
        if value == self._replicated:
            return
        self._replicated = value
        if not value:
            self.epochs.path = None
            self._epochs_on_disk = None  # from now on the file may fall behind: write it next time
            self._hw = self.log_end_offset
            return
        # The stored high watermark is the checkpointed one (or the log end, if this log
        # took appends as a single replica meanwhile: those were committed).
        self.epochs.path = self._epoch_file
        if self.epochs.entries() == self._epochs_on_disk:
            return  # the file as opened still says it (a replicated log after a restart)
        try:
            # From now on every change is written first (epochs.py); write what the cache
            # holds now, which opening may have reconciled or rebuilt in memory.
            self.epochs._commit(self.epochs.entries(), force=True)
        except StorageError as exc:
            # The file keeps its last state, which opening reconciles; the next change
            # writes the cache whole.
            log.warning("%s: %s", self.directory.name, exc)

    def update_high_watermark(self, offset: int) -> bool:
        """Kafka's UnifiedLog.updateHighWatermark: set it, clamped to [log start, log end];
        True if it changed. Listeners hear of it (parked consumer fetches) when the log
        is replicated; a single replica's high watermark is its log end regardless."""
        hw = min(max(offset, self.log_start_offset), self.log_end_offset)
        if hw == self._hw:
            return False
        self._hw = hw
        if self._replicated:
            for listener in self.listeners:
                listener(self)
        return True

    @property
    def latest_epoch(self) -> int | None:
        """The leader epoch of the last epoch entry (Kafka's UnifiedLog.latestEpoch)."""
        return self.epochs.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ends), Kafka's
        UnifiedLog.endOffsetForEpoch; (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when the
        cache cannot say (see LeaderEpochCache.end_offset_for)."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    @property
    def log_start_offset(self) -> int:
        # Kafka's logStartOffset: retention deleting segments moves it to the next segment's
        # base (here: whatever segment is first), DeleteRecords moves it anywhere up to the
        # high watermark; it never goes back.
        first = self.segments[0].base_offset
        return max(self._log_start, first)

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (DeleteRecords); True if it moved.

        Kafka's UnifiedLog.maybeIncrementLogStartOffset: past the high watermark is
        OffsetOutOfRange, at or below the current start changes nothing. Segments wholly
        below the new start are deleted now rather than at the next retention pass, so
        the space comes back as soon as the client is told the records are gone. Kafka
        also raises its recovery point to the new start; odradek keeps it, which at worst
        checks a little more data after an unclean stop. Raises StorageError if deleting
        a segment fails (the start has moved by then).
        """
        hw = self.high_watermark
        if offset > hw:
            raise OffsetOutOfRange(f"Cannot increment the log start offset to {offset} of {self.directory.name} "
                                   f"since it is larger than the high watermark {hw}")
        if offset <= self.log_start_offset:
            return False
        self._log_start = offset
        log.info("%s: incremented the log start offset to %d due to client delete records request",
                 self.directory.name, offset)
        try:
            self._delete_breached_segments()
            self._log_start_moved()
        finally:
            for listener in self.listeners:  # parked fetches below the new start should hear of it
                listener(self)
        return True

    def _log_start_moved(self) -> None:
        # Kafka's maybeIncrementLogStartOffset: the epoch covering the new start now starts there.
        self.epochs.truncate_from_start(self.log_start_offset)

    def _delete_breached_segments(self) -> int:
        """Kafka's deleteLogStartOffsetBreachedSegments: a segment goes when the next one
        starts at or below the log start offset (so never the active one)."""
        deleted = 0
        start = self.log_start_offset
        while len(self.segments) > 1 and self.segments[1].base_offset <= start:
            self._delete_first()
            deleted += 1
        return deleted

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- append --------------------------------------------------------------------

    def append(self, data: bytearray, headers: list[BatchHeader], now_ms: int, leader_epoch: int = 0) -> AppendInfo:
        """Append validated batches from one produce request, assigning offsets and
        stamping `leader_epoch` (Kafka's appendAsLeader; a single broker's epoch is 0).

        Raises producer_state.SequenceError for an idempotent batch out of sequence. A
        retried duplicate (Kafka clients send one batch per partition per request) is
        answered with the offsets it got the first time and not appended again. Raises
        StorageError when the disk refuses the write; nothing was appended then (the
        epoch cache may have learnt that `leader_epoch` starts at the log end, which is
        true of the next append too, as in Kafka).
        """
        try:
            markers = self._check_batches(data, headers)  # sequences, and markers' epochs (transactions.py)
        except Duplicate as dup:
            first = headers[0]
            return AppendInfo(dup.base_offset, dup.base_offset + first.last_offset_delta, -1, self.log_start_offset)
        append_time = now_ms if self.config["message.timestamp.type"] == "LogAppendTime" else -1
        count = sum(h.last_offset_delta + 1 for h in headers)
        self._maybe_roll(len(data), self.log_end_offset + count - 1,
                         append_time if append_time >= 0 else max(h.max_timestamp for h in headers), now_ms)
        base = next_offset = self.log_end_offset
        patched = []
        records = 0
        for h in headers:
            patch_base_offset(data, h, next_offset, leader_epoch)
            if append_time >= 0:
                set_log_append_time(data, h, append_time)
                h = dataclasses.replace(h, max_timestamp=append_time)
            patched.append(dataclasses.replace(h, base_offset=next_offset))
            next_offset += h.last_offset_delta + 1
            records += h.records_count
        # Kafka's UnifiedLog.append assigns the epoch's start before writing: the cache may
        # be ahead of the log, never behind. A no-op (no I/O) unless the epoch is new.
        self.epochs.assign(leader_epoch, base)
        self._write(data, patched, records, now_ms, markers)
        return AppendInfo(base, next_offset - 1, append_time, self.log_start_offset)

    def _write(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], records: int,
               now_ms: int, markers: list | None = None) -> None:
        """Write batches at the log end (offsets set, roll done) under the flush policy."""
        markers = markers if markers is not None else markers_of(data, headers)  # before writing: may raise
        flush = self._unflushed_messages + records >= int(self.config["flush.messages"])
        if flush:
            started = perf_counter()
            self._flush_rolled()  # older segments first: a failure then leaves nothing appended
        self.active.append(data, headers, fsync=flush)  # all or nothing, the fsync included
        self._track_batches(headers, markers)
        self._unflushed_messages += records
        if flush:
            self._flushed(now_ms)
            if self.flush_observer is not None:
                self.flush_observer(perf_counter() - started)
        if not self._replicated:
            self._hw = self.active.next_offset  # kept up so that turning replicated keeps it
        for listener in self.listeners:
            listener(self)

    def append_as_follower(self, data: bytes | bytearray, headers: list[BatchHeader], now_ms: int) -> AppendInfo:
        """Append batches fetched from the leader as they are (Kafka's appendAsFollower).

        `headers` are those of `data` (positions relative to it), in order; bytes after
        the last one (a partial batch at the end of a fetch) are ignored, as Kafka trims
        them. Offsets and leader epochs are the leader's; the first offset must be at or
        past the log end (past it after the leader compacted batches away) and the
        batches must not overlap, else OffsetMismatch. Each batch is CRC-checked (Kafka's
        follower checks them too): BatchError("corrupt_message") otherwise. Nothing is
        appended when either is raised. No sequence checks: producer state only follows.
        The epoch cache learns each batch's epoch before it is written. Raises
        StorageError when the disk refuses; the batches of an earlier segment may then
        be appended already (the log stays whole: the fetcher goes on from its end).
        """
        leo = self.log_end_offset
        if not headers:
            return AppendInfo(leo, leo - 1, -1, self.log_start_offset)
        position = 0
        next_offset = leo
        for h in headers:
            if h.position != position or h.position + h.size > len(data):
                raise BatchError("corrupt_message", f"batch at position {h.position} does not follow the previous "
                                 f"one (expected {position}) or runs past the {len(data)} bytes fetched")
            if h.magic != 2 or h.last_offset_delta < 0:
                raise BatchError("corrupt_message", f"batch at offset {h.base_offset}: magic {h.magic}, "
                                 f"last offset delta {h.last_offset_delta}")
            if h.base_offset < next_offset:
                what = "the log end offset" if h is headers[0] else "the end of the previous batch"
                raise OffsetMismatch(f"{self.directory.name}: follower append at offset {h.base_offset} is below "
                                     f"{what} {next_offset}", headers[0].base_offset, leo)
            if crc_of(data, h) != h.crc:
                raise BatchError("corrupt_message", f"batch at offset {h.base_offset} fails its CRC32C check")
            position += h.size
            next_offset = h.next_offset
        view = memoryview(data)
        for group in _segment_groups(headers):
            start = group[0].position
            if start:
                group = [dataclasses.replace(h, position=h.position - start) for h in group]
            first, last = group[0], group[-1]
            length = last.position + last.size
            # Kafka's LocalLog.roll(expectedNextOffset): a new segment starts at the first
            # incoming offset when that is past the log end.
            self._maybe_roll(length, last.last_offset, max(h.max_timestamp for h in group), now_ms,
                             roll_base=first.base_offset)
            for h in group:
                self.epochs.assign(h.partition_leader_epoch, h.base_offset)  # before the write, as a leader
            self._write(view[start : start + length], group, sum(h.records_count for h in group), now_ms)
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset, -1, self.log_start_offset)

    @property
    def max_segment_ms(self) -> int:
        """Kafka's LogConfig.maxSegmentMs: a compacted log also rolls at max.compaction.lag.ms,
        or its active segment (never cleaned) would hold records past that lag forever."""
        segment_ms = int(self.config["segment.ms"])
        lag = int(self.config["max.compaction.lag.ms"])
        if "compact" in self.config["cleanup.policy"] and lag > 0:
            return min(lag, segment_ms)
        return segment_ms

    def _maybe_roll(self, incoming: int, last_offset: int, incoming_max_ts: int, now_ms: int,
                    roll_base: int | None = None) -> None:
        seg = self.active
        if seg.size == 0:
            if not seg.can_hold(last_offset, incoming):
                # A follower's first batch far past an empty segment's base (a compaction gap):
                # Kafka's shouldRoll rolls on the index range whatever the size.
                self.roll(now_ms, roll_base)
            return
        # Kafka's LogSegment.timeWaitedForRoll: the incoming batch's timestamp minus the
        # segment's first batch timestamp (both the producer's clock), or wall time since
        # the segment was created when it has no timestamped batch.
        if seg.first_batch_timestamp is not None and seg.first_batch_timestamp >= 0:
            waited = incoming_max_ts - seg.first_batch_timestamp
        else:
            waited = now_ms - seg.created_ms
        if (seg.size + incoming > int(self.config["segment.bytes"]) or waited >= self.max_segment_ms
                # Kafka's LogSegment.shouldRoll: the index holds offsets and positions in 32 bits.
                or not seg.can_hold(last_offset, incoming)):
            self.roll(now_ms, roll_base)

    def roll(self, now_ms: int, base_offset: int | None = None) -> Segment:
        """Start a new active segment at the log end, or at `base_offset` when that is past
        it (a follower's batch after a gap)."""
        old = self.active
        base = old.next_offset if base_offset is None else max(base_offset, old.next_offset)
        self._snapshot_at(base)  # Kafka takes a producer snapshot at every roll (transactions.py)
        seg = Segment(self.directory, base, self.index_interval, now_ms, self.files)
        old.seal_time_index()
        old.flush_indexes()
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        if old.size:
            self.rolled_unflushed.append(old)  # Kafka flushes a rolled segment asynchronously
        return seg

    def mark_flushed(self, seg: Segment) -> None:
        """A rolled segment was fsynced (by the broker's background flusher)."""
        if not self._txn_index_synced(seg):
            return
        if seg in self.rolled_unflushed:
            self.rolled_unflushed.remove(seg)
        # Everything below the oldest segment still unflushed (or the active one) is on disk.
        first_unflushed = min((s.base_offset for s in self.rolled_unflushed), default=self.active.base_offset)
        self.recovery_point = max(self.recovery_point, first_unflushed)

    # --- read ----------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, min_one: bool = True, max_offset: int | None = None) -> ReadResult:
        """Stored bytes from `offset`, CRC-checked (raises CorruptBatch, StorageError).

        `max_offset` (exclusive) bounds what is returned: a consumer passes the high
        watermark, a follower None (the log end). Only batches wholly below it are
        served: as Kafka reads up to the file position of the batch holding the bound,
        a batch straddling it waits (the high watermark is a batch boundary anyway, as
        every replica appends whole batches). An offset past the log end is out of
        range; one at or past the bound but not past the log end gets no data and no
        error (Kafka: a consumer ahead of the high watermark)."""
        hw = self.high_watermark
        start = self.log_start_offset
        leo = self.log_end_offset
        if offset < start or offset > leo:
            raise OffsetOutOfRange(f"offset {offset} not in [{start}, {leo}]")
        limit = leo if max_offset is None or max_offset > leo else max_offset
        if offset >= limit or max_bytes <= 0 and not min_one:
            return ReadResult(b"", hw, start, leo)
        for seg in self.segments[self._segment_index(offset) :]:
            try:
                h = seg.find(offset)
                if h is None:
                    continue  # offset past this segment's last batch (compaction gap): try the next
                if h.last_offset >= limit:
                    return ReadResult(b"", hw, start, leo)
                end = seg.size
                if limit < seg.next_offset:
                    bound = seg.find(limit)  # the first batch not to serve
                    if bound is not None:
                        end = bound.position
            except CorruptBatch as exc:
                raise self._corrupt(seg, offset, str(exc)) from None
            size = min(max_bytes, end - h.position)
            if min_one and size < h.size:
                size = h.size
            data = seg.pread(h.position, max(size, 0))
            try:
                good, records = seg.verify_crcs(data, h.position)
            except CorruptBatch as exc:
                raise self._corrupt(seg, exc.offset, str(exc)) from None
            return ReadResult(data if good == len(data) else data[:good], hw, start, leo, records)
        return ReadResult(b"", hw, start, leo)

    def _corrupt(self, seg: Segment, offset: int, message: str) -> CorruptBatch:
        key = (seg.base_offset, offset)
        if key not in self._reported_corrupt:  # once per batch, not once per fetch
            self._reported_corrupt.add(key)
            log.error("corrupt data in %s: %s; fetches at this offset get CORRUPT_MESSAGE", self.directory.name,
                      message)
        return CorruptBatch(message, offset)

    def batch_bytes(self, seg: Segment, h: BatchHeader) -> bytes:
        return seg.pread(h.position, h.size)

    def find_by_timestamp(self, timestamp: int) -> tuple[Segment, BatchHeader] | None:
        """First batch (in offset order) at or past the log start holding a record with
        timestamp >= `timestamp`."""
        return next(self.timestamp_candidates(timestamp), None)

    def timestamp_candidates(self, timestamp: int):
        """Every batch, in offset order, from the first whose max timestamp is >=
        `timestamp`, that holds offsets at or past the log start offset and a timestamp
        >= `timestamp`. The first holds the answer unless the records that qualify lie
        below the log start (Kafka's LogSegment.findOffsetByTimestamp skips records below
        its `startingOffset`); the caller then looks on."""
        start = self.log_start_offset
        for seg in self.segments:
            if seg.next_offset <= start or seg.max_timestamp < timestamp:
                continue
            for h in seg.batches_from_timestamp(timestamp):
                if h.last_offset >= start and h.max_timestamp >= timestamp:
                    yield seg, h

    def max_timestamp_batch(self) -> tuple[Segment, BatchHeader] | None:
        best: Segment | None = None
        for seg in self.segments:
            if seg.max_timestamp_position >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        h = best.batch_at(best.max_timestamp_position)
        return (best, h) if h is not None else None

    # --- maintenance ---------------------------------------------------------------

    def flush(self, now_ms: int) -> None:
        """fsync every segment holding data past the recovery point (raises StorageError)."""
        started = perf_counter()
        self._flush_rolled()
        self.active.flush()
        self._flushed(now_ms)
        if self.flush_observer is not None:
            self.flush_observer(perf_counter() - started)

    def _flush_rolled(self) -> None:
        while self.rolled_unflushed:
            self.rolled_unflushed[0].flush()
            self.rolled_unflushed.pop(0)

    def _flushed(self, now_ms: int) -> None:
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self.recovery_point = self.log_end_offset

    def tick(self, now_ms: int) -> None:
        """Periodic work that depends on time: the `flush.ms` policy."""
        if self._unflushed_messages and now_ms - self._last_flush_ms >= int(self.config["flush.ms"]):
            self.flush(now_ms)

    def delete_old_segments(self, now_ms: int) -> int:
        """Segments below the log start offset, whatever the policy, then retention by time
        and by size (cleanup.policy includes delete), as Kafka's UnifiedLog.deleteOldSegments.
        Returns segments deleted."""
        before = self.log_start_offset
        try:
            deleted = self._delete_breached_segments()
            if "delete" in self.config["cleanup.policy"]:
                deleted += self._delete_retained(now_ms)
        finally:
            if self.log_start_offset != before:
                self._log_start_moved()
        return deleted

    def _deletable(self) -> bool:
        """The first segment may go: it is not the active one, and (Kafka's
        deletableSegments) all of it is below the high watermark, so retention never
        deletes what followers have yet to copy or consumers to see."""
        return len(self.segments) > 1 and self.segments[1].base_offset <= self.high_watermark

    def _delete_retained(self, now_ms: int) -> int:
        deleted = 0
        retention_ms = int(self.config["retention.ms"])
        retention_bytes = int(self.config["retention.bytes"])
        if retention_ms >= 0:
            active = self.active

            def expired(s: Segment) -> bool:
                if s.size == 0:  # emptied by compaction: nothing to keep, must not block the rest
                    return s is not active
                return now_ms - s.max_timestamp > retention_ms

            if active.size and all(expired(s) for s in self.segments):
                self.roll(now_ms)  # Kafka rolls an expired active segment so it can be deleted too
            while self._deletable() and expired(self.segments[0]):
                self._delete_first()
                deleted += 1
        if retention_bytes >= 0:
            total = self.size_bytes
            while self._deletable() and total - self.segments[0].size >= retention_bytes:
                total -= self.segments[0].size
                self._delete_first()
                deleted += 1
        return deleted

    def _delete_first(self) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        if seg in self.rolled_unflushed:
            self.rolled_unflushed.remove(seg)
        seg.delete()

    def replace_segment(self, seg: Segment, cleaned: Path) -> Segment:
        """Swap in a compacted copy of `seg` (written at `cleaned`) atomically."""
        i = self.segments.index(seg)
        seg.index.clear()  # drop indexes first: a crash after the rename then rebuilds them
        seg.time_index.clear()
        seg.files.forget(seg)
        seg.close_descriptor()
        os.replace(cleaned, seg.path)
        new = Segment(self.directory, seg.base_offset, self.index_interval, seg.created_ms, self.files)
        new.txn_index = seg.txn_index  # compaction keeps every marker, so the aborted index stands
        new.recover()
        if seg in self.rolled_unflushed:
            self.rolled_unflushed[self.rolled_unflushed.index(seg)] = new
        new.created_ms = seg.created_ms
        self.segments[i] = new
        return new

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def close_files(self) -> None:
        """Drop every descriptor without writing anything (deleted, or its disk failed)."""
        for seg in self.segments:
            seg.files.forget(seg)
            seg.close_descriptor()

    def mark_flushed_all(self) -> None:
        """Everything was flushed by a filesystem-wide sync (LogManager.close)."""
        self.rolled_unflushed.clear()
        self._flushed(self._last_flush_ms)

    def flush_all(self) -> None:
        """fsync whatever is not yet flushed (a clean shutdown); raises StorageError."""
        self.flush(self._last_flush_ms)
        for seg in self.segments:
            seg.flush_indexes()

    def delete(self) -> None:
        for seg in self.segments:
            seg.delete()
        shutil.rmtree(self.directory, ignore_errors=True)
