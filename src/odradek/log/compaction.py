"""Log compaction (`cleanup.policy=compact`): keep the latest record per key.

Theory of operation (Kafka's LogCleaner, simplified to one pass per call):
1. Build the key -> last offset map over the whole log, active segment included, so a
   record is dropped whenever a later record with the same key exists anywhere.
2. Rewrite each closed (non-active) segment old enough for `min.compaction.lag.ms`:
   keep a record if it is the latest for its key; drop a tombstone (null value) once its
   segment is older than `delete.retention.ms` (the delete horizon), so consumers that
   are behind still see the deletion for that long. A batch whose records all survive
   is copied byte for byte; a batch that lost records is re-encoded with its original
   base offset, last offset delta (so offsets never shift), codec, timestamps and
   producer fields; a batch that lost every record is dropped.
3. The new segment file is written beside the old one and swapped in with an atomic
   rename (PartitionLog.replace_segment); a crash before the rename leaves a stray
   `.cleaned` file that the next start deletes.

Differences from Kafka, noted for the docs: segments are not merged after cleaning,
and the tombstone horizon is the segment's largest timestamp rather than the time the
segment was first cleaned.
"""

from __future__ import annotations

import os

from ..records.batch import iter_headers
from ..records.codec import decode_batches, encode_batch
from .partition import CLEANED_SUFFIX, PartitionLog


def _key_map(plog: PartitionLog) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in plog.segments:
        data = seg.pread(0, seg.size)
        for batch in decode_batches(data):
            if batch.is_control:
                continue
            for r in batch.records:
                if r.key is not None:
                    latest[r.key] = r.offset
    return latest


def compact_log(plog: PartitionLog, now_ms: int) -> int:
    """One cleaning pass. Returns the number of records removed.

    A pass is skipped when nothing could have changed since the previous one: the same
    segments, no new records, and no tombstone or compaction lag due to expire yet.
    """
    if len(plog.segments) < 2:
        return 0
    lag = int(plog.config["min.compaction.lag.ms"])
    retention = int(plog.config["delete.retention.ms"])
    fingerprint = (tuple(s.base_offset for s in plog.segments), plog.log_end_offset, lag, retention)
    previous = plog.cleaner_state
    if previous is not None and previous[0] == fingerprint and now_ms < previous[1]:
        return 0
    horizon = now_ms - retention
    latest = _key_map(plog)
    removed = 0
    for seg in list(plog.segments[:-1]):
        if seg.size == 0 or now_ms - seg.max_timestamp < lag:
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
            for chunk in out:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        plog.replace_segment(seg, cleaned)
        removed += seg_removed
    # Next time something can change without new data: a tombstone or a lagging segment
    # crossing its horizon. Until then, an unchanged log need not be decoded again.
    closed = [s for s in plog.segments[:-1] if s.size]
    wake = min(
        [s.max_timestamp + retention + 1 for s in closed if s.max_timestamp + retention >= now_ms]
        + [s.max_timestamp + lag for s in closed if now_ms - s.max_timestamp < lag]  # cleanable at >= lag
        + [1 << 62]
    )
    plog.cleaner_state = (fingerprint, wake)  # cleaning keeps every base offset and the log end
    return removed
