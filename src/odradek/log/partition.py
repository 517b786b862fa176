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
rolled first, as Kafka does) by age and by total size. The log start offset is the base
offset of the first segment.

Time is a parameter (`now_ms`) everywhere; nothing here reads the clock.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..records.batch import BatchHeader, patch_base_offset, set_log_append_time
from .producer_state import Duplicate, ProducerState
from .segment import RecoveryResult, Segment

CLEANED_SUFFIX = ".cleaned"


class OffsetOutOfRange(Exception):
    pass


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


def _segment_offsets(directory: Path) -> list[int]:
    out = []
    for p in directory.iterdir():
        if p.suffix == ".log" and p.stem.isdigit():
            out.append(int(p.stem))
    return sorted(out)


class PartitionLog:
    def __init__(self, directory: Path, config: dict[str, Any], now_ms: int, clean_shutdown: bool = True) -> None:
        self.directory = directory
        self.config = config
        self.listeners: list[Callable[[PartitionLog], None]] = []
        self.recovery: list[RecoveryResult] = []
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self.cleaner_state = None  # compaction's memo of the last pass (see compaction.compact_log)
        directory.mkdir(parents=True, exist_ok=True)
        # A compaction that died before its atomic rename leaves a .cleaned file: discard it.
        for stray in directory.glob(f"*{CLEANED_SUFFIX}"):
            stray.unlink()
        self.segments: list[Segment] = []
        offsets = _segment_offsets(directory)
        for i, base in enumerate(offsets):
            seg = Segment(directory, base, self.index_interval, now_ms)
            last = i == len(offsets) - 1
            # After a crash only the active segment can hold a torn write; every segment
            # still gets its indexes sanity-checked and rebuilt when they fail.
            result = seg.load(trust_indexes=clean_shutdown or not last)
            if result is not None:
                self.recovery.append(result)
            if seg.first_batch_timestamp is not None:
                seg.created_ms = min(max(seg.first_batch_timestamp, 0), now_ms)
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(Segment(directory, 0, self.index_interval, now_ms))
        self._bases = [s.base_offset for s in self.segments]
        self.producers = ProducerState()
        for h in self.active.headers():
            self.producers.update(h)

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
        return self.active.next_offset  # one replica: everything appended is committed

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- append --------------------------------------------------------------------

    def append(self, data: bytearray, headers: list[BatchHeader], now_ms: int) -> AppendInfo:
        """Append validated batches from one produce request, assigning offsets.

        Raises producer_state.SequenceError for an idempotent batch out of sequence. A
        retried duplicate (Kafka clients send one batch per partition per request) is
        answered with the offsets it got the first time and not appended again.
        """
        try:
            for h in headers:
                self.producers.check(h)
        except Duplicate as dup:
            first = headers[0]
            return AppendInfo(dup.base_offset, dup.base_offset + first.last_offset_delta, -1, self.log_start_offset)
        append_time = now_ms if self.config["message.timestamp.type"] == "LogAppendTime" else -1
        self._maybe_roll(len(data), append_time if append_time >= 0 else max(h.max_timestamp for h in headers), now_ms)
        base = next_offset = self.log_end_offset
        patched = []
        count = 0
        for h in headers:
            patch_base_offset(data, h, next_offset, 0)
            if append_time >= 0:
                set_log_append_time(data, h, append_time)
                h = dataclasses.replace(h, max_timestamp=append_time)
            patched.append(dataclasses.replace(h, base_offset=next_offset))
            next_offset += h.last_offset_delta + 1
            count += h.records_count
        self.active.append(data, patched)
        for h in patched:
            self.producers.update(h)
        self._unflushed_messages += count
        if self._unflushed_messages >= int(self.config["flush.messages"]):
            self.flush(now_ms)
        for listener in self.listeners:
            listener(self)
        return AppendInfo(base, next_offset - 1, append_time, self.log_start_offset)

    def _maybe_roll(self, incoming: int, incoming_max_ts: int, now_ms: int) -> None:
        seg = self.active
        if seg.size == 0:
            return
        # Kafka's LogSegment.timeWaitedForRoll: the incoming batch's timestamp minus the
        # segment's first batch timestamp (both the producer's clock), or wall time since
        # the segment was created when it has no timestamped batch.
        if seg.first_batch_timestamp is not None and seg.first_batch_timestamp >= 0:
            waited = incoming_max_ts - seg.first_batch_timestamp
        else:
            waited = now_ms - seg.created_ms
        if seg.size + incoming > int(self.config["segment.bytes"]) or waited >= int(self.config["segment.ms"]):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> Segment:
        old = self.active
        old.index.flush()
        old.time_index.flush()
        seg = Segment(self.directory, old.next_offset, self.index_interval, now_ms)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        return seg

    # --- read ----------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, min_one: bool = True) -> ReadResult:
        hw = self.high_watermark
        start = self.log_start_offset
        if offset < start or offset > hw:
            raise OffsetOutOfRange(f"offset {offset} not in [{start}, {hw}]")
        if offset == hw or max_bytes <= 0 and not min_one:
            return ReadResult(b"", hw, start)
        for seg in self.segments[self._segment_index(offset) :]:
            h = seg.find(offset)
            if h is None:
                continue  # offset past this segment's last batch (compaction gap): try the next
            size = min(max_bytes, seg.size - h.position)
            if min_one and size < h.size:
                size = h.size
            return ReadResult(seg.pread(h.position, max(size, 0)), hw, start)
        return ReadResult(b"", hw, start)

    def batch_bytes(self, seg: Segment, h: BatchHeader) -> bytes:
        return seg.pread(h.position, h.size)

    def find_by_timestamp(self, timestamp: int) -> tuple[Segment, BatchHeader] | None:
        """First batch (in offset order) holding a record with timestamp >= `timestamp`."""
        for seg in self.segments:
            h = seg.find_timestamp(timestamp)
            if h is not None:
                return seg, h
        return None

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
        self.active.flush()
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms

    def tick(self, now_ms: int) -> None:
        """Periodic work that depends on time: the `flush.ms` policy."""
        if self._unflushed_messages and now_ms - self._last_flush_ms >= int(self.config["flush.ms"]):
            self.flush(now_ms)

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention by time and by size (cleanup.policy includes delete). Returns segments deleted."""
        if "delete" not in self.config["cleanup.policy"]:
            return 0
        retention_ms = int(self.config["retention.ms"])
        retention_bytes = int(self.config["retention.bytes"])
        deleted = 0
        if retention_ms >= 0:
            active = self.active

            def expired(s: Segment) -> bool:
                if s.size == 0:  # emptied by compaction: nothing to keep, must not block the rest
                    return s is not active
                return now_ms - s.max_timestamp > retention_ms

            if active.size and all(expired(s) for s in self.segments):
                self.roll(now_ms)  # Kafka rolls an expired active segment so it can be deleted too
            while len(self.segments) > 1 and expired(self.segments[0]):
                self._delete_first()
                deleted += 1
        if retention_bytes >= 0:
            total = self.size_bytes
            while len(self.segments) > 1 and total - self.segments[0].size >= retention_bytes:
                total -= self.segments[0].size
                self._delete_first()
                deleted += 1
        return deleted

    def _delete_first(self) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        seg.delete()

    def replace_segment(self, seg: Segment, cleaned: Path) -> Segment:
        """Swap in a compacted copy of `seg` (written at `cleaned`) atomically."""
        i = self.segments.index(seg)
        seg.index.clear()  # drop indexes first: a crash after the rename then rebuilds them
        seg.time_index.clear()
        os.close(seg.fd)
        seg.fd = -1
        os.replace(cleaned, seg.path)
        new = Segment(self.directory, seg.base_offset, self.index_interval, seg.created_ms)
        new.recover()
        new.created_ms = seg.created_ms
        self.segments[i] = new
        return new

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def flush_all(self) -> None:
        for seg in self.segments:
            if seg.fd >= 0:
                seg.flush()

    def delete(self) -> None:
        for seg in self.segments:
            seg.delete()
        shutil.rmtree(self.directory, ignore_errors=True)
