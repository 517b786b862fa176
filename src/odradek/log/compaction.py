"""Log compaction (`cleanup.policy=compact`): keep the latest record per key.

When a log is cleaned (Kafka's LogCleanerManager.grabFilthiestCompactedLog):
- Its dirty part starts at the first dirty offset (where the previous pass stopped, the
  log start after a restart, as Kafka without a cleaner checkpoint) and ends at the first
  uncleanable offset: the active segment, the segment holding the last stable offset
  (KIP-98: Kafka's cleanableOffsets never cleans at or past it, so an open transaction,
  which may yet abort, is never compacted), or the first segment holding a record
  younger than `min.compaction.lag.ms`, whichever comes first.
- It is cleaned when the dirty bytes are more than `min.cleanable.dirty.ratio` of the
  log below the uncleanable offset, or, whatever the ratio, when some dirty segment's
  first batch is older than `max.compaction.lag.ms` (KIP-354) and there is something
  to clean. Otherwise a pass costs only a walk over the segment sizes.

A pass (Kafka's LogCleaner, simplified to one pass per call):
1. Build the key -> last offset map over the whole log, active segment included, so a
   record is dropped whenever a later record with the same key exists anywhere. Records
   of aborted transactions and of transactions still open are left out of the map
   (Kafka's buildOffsetMap skips aborted ones and stops at the LSO): an aborted value
   must never replace a committed one.
2. Rewrite each segment below the uncleanable offset: keep a record if it is the latest
   for its key; drop a tombstone (null value) once its segment is older than
   `delete.retention.ms` (the delete horizon), so consumers that are behind still see
   the deletion for that long. A batch whose records all survive is copied byte for
   byte; a batch that lost records is re-encoded with its original base offset, last
   offset delta (so offsets never shift), codec, timestamps and producer fields; a batch
   that lost every record is dropped. A batch of an aborted transaction (the partition's
   aborted index says which) is dropped whole. Control batches (transaction markers)
   are always kept: Kafka removes a marker once delete.retention.ms has passed and its
   transaction's data is gone; keeping them costs a few bytes per transaction and keeps
   the aborted index of every segment true.
3. The new segment file is written beside the old one and swapped in with an atomic
   rename (PartitionLog.replace_segment); a crash before the rename leaves a stray
   `.cleaned` file that the next start deletes.
4. The first dirty offset moves to the uncleanable offset: the next pass waits for new
   dirty segments, as Kafka's does (a tombstone past its horizon goes with the next pass).

Differences from Kafka, noted for the docs: segments are not merged after cleaning, the
key map spans the whole log rather than the dirty part, the first dirty offset is not
checkpointed, and the tombstone horizon is the segment's largest timestamp rather than
the time the segment was first cleaned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..records.batch import TRANSACTIONAL_MASK, BatchHeader, iter_headers
from ..records.codec import decode_batches, encode_batch
from .partition import CLEANED_SUFFIX, PartitionLog


class _TxnFilter:
    """Which transactional batches do not count: aborted (an entry of the aborted index
    covers the batch's producer and offset) or still undecided (its producer's open
    transaction started at or before it)."""

    def __init__(self, plog: PartitionLog) -> None:
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for e in plog.aborted_entries(plog.segments[0].base_offset, plog.log_end_offset):
            self.aborted.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
        self.open = dict(plog.producers.ongoing)

    def aborted_batch(self, h: BatchHeader) -> bool:
        if not h.attributes & TRANSACTIONAL_MASK or h.is_control:
            return False
        return any(first <= h.base_offset <= last for first, last in self.aborted.get(h.producer_id, ()))

    def skipped(self, h: BatchHeader) -> bool:
        if not h.attributes & TRANSACTIONAL_MASK:
            return False
        first_open = self.open.get(h.producer_id)
        return (first_open is not None and h.base_offset >= first_open) or self.aborted_batch(h)


def _key_map(plog: PartitionLog, txns: _TxnFilter) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in plog.segments:
        data = seg.pread(0, seg.size)
        for batch in decode_batches(data):
            if batch.is_control or txns.skipped(batch.header):
                continue
            for r in batch.records:
                if r.key is not None:
                    latest[r.key] = r.offset
    return latest


@dataclass(frozen=True)
class Cleanable:
    """Kafka's LogToClean: where the dirty part of a log lies and how dirty it is."""

    first_dirty: int
    uncleanable: int  # first offset that may not be cleaned now (a segment base)
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int  # > 0: a dirty segment is that far past max.compaction.lag.ms

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def due(self, min_ratio: float) -> bool:
        # LogCleanerManager.grabFilthiestCompactedLog's filter.
        if self.clean_bytes + self.cleanable_bytes == 0:
            return False
        return (self.compaction_delay_ms > 0 and self.cleanable_bytes > 0) or self.ratio > min_ratio


def cleanable(plog: PartitionLog, now_ms: int) -> Cleanable:
    """Kafka's cleanableOffsets, maxCompactionDelay and LogToClean for this log now."""
    segments = plog.segments
    start, end = plog.log_start_offset, plog.log_end_offset
    first_dirty = plog.cleaner_state if isinstance(plog.cleaner_state, int) else start
    if not start <= first_dirty <= end:  # truncated or emptied below it: start over
        first_dirty = start
    # first_dirty is a segment base (where a pass stopped, or the log start); its segment
    # and the closed ones after it are the dirty part.
    floor = max((s.base_offset for s in segments if s.base_offset <= first_dirty), default=start)
    closed = segments[:-1]
    dirty = [s for s in closed if s.base_offset >= floor]
    uncleanable = plog.active.base_offset
    # KIP-98: nothing at or past the last stable offset; segments are cleaned whole, so the
    # segment holding it is not cleaned either.
    lso = plog.last_stable_offset
    uncleanable = min(uncleanable, max((s.base_offset for s in segments if s.base_offset <= lso), default=start))
    lag = max(int(plog.config["min.compaction.lag.ms"]), 0)
    if lag > 0:
        young = next((s for s in dirty if s.max_timestamp > now_ms - lag), None)
        if young is not None:
            uncleanable = min(uncleanable, young.base_offset)
    uncleanable = max(uncleanable, floor)
    clean_bytes = sum(s.size for s in segments if s.base_offset < floor)
    cleanable_bytes = sum(s.size for s in dirty if s.base_offset < uncleanable)
    max_lag = max(int(plog.config["max.compaction.lag.ms"]), 0)
    firsts = [t for s in dirty if (t := s.first_batch_timestamp) is not None and t > 0]
    clean_until = now_ms - max_lag
    delay = clean_until - min(firsts) if firsts and min(firsts) < clean_until else 0
    return Cleanable(floor, uncleanable, clean_bytes, cleanable_bytes, delay)


def compact_log(plog: PartitionLog, now_ms: int) -> int:
    """Clean the log if Kafka's cleaner would pick it now. Returns the number of records removed."""
    if len(plog.segments) < 2:
        return 0
    todo = cleanable(plog, now_ms)
    if not todo.due(float(plog.config["min.cleanable.dirty.ratio"])):
        return 0
    retention = int(plog.config["delete.retention.ms"])
    horizon = now_ms - retention
    txns = _TxnFilter(plog)
    latest = _key_map(plog, txns)
    removed = 0
    for seg in [s for s in plog.segments[:-1] if s.base_offset < todo.uncleanable]:
        if seg.size == 0:
            continue
        drop_tombstones = seg.max_timestamp < horizon
        data = seg.pread(0, seg.size)
        out: list[bytes] = []
        seg_removed = 0
        for h in iter_headers(data):
            raw = data[h.position : h.position + h.size]
            if h.is_control:
                out.append(raw)
                continue
            if txns.aborted_batch(h):
                seg_removed += h.records_count  # Kafka's cleaner drops aborted data (read_committed skips it)
                continue
            batch = decode_batches(raw)[0]
            keep = [
                r
                for r in batch.records
                if r.key is not None
                and latest.get(r.key) == r.offset
                and not (r.value is None and drop_tombstones)
            ]
            seg_removed += len(batch.records) - len(keep)
            if len(keep) == len(batch.records):
                out.append(raw)
            elif keep:
                out.append(
                    encode_batch(
                        keep,
                        base_offset=h.base_offset,
                        compression=h.compression,
                        timestamp_type=batch.timestamp_type,
                        producer_id=h.producer_id,
                        producer_epoch=h.producer_epoch,
                        base_sequence=h.base_sequence,
                        partition_leader_epoch=h.partition_leader_epoch,
                        is_transactional=batch.is_transactional,
                        last_offset_delta=h.last_offset_delta,
                    )
                )
        if not seg_removed:
            continue
        cleaned = seg.path.with_name(seg.path.name + CLEANED_SUFFIX)
        with open(cleaned, "wb") as f:
            f.writelines(out)
            f.flush()
            os.fsync(f.fileno())
        plog.replace_segment(seg, cleaned)
        removed += seg_removed
    # Kafka's cleaner checkpoint: the next pass starts where this one stopped.
    plog.cleaner_state = todo.uncleanable
    return removed
