"""ListOffsets v1-v10: earliest, latest, max timestamp, and offset by timestamp.

Earliest is the log start offset (moved by DeleteRecords or retention), as Kafka's
UnifiedLog.fetchOffsetByTimestamp answers EARLIEST_TIMESTAMP."""

from __future__ import annotations

from ...log.errors import CorruptBatch, StorageError
from ...protocol.errors import (
    CORRUPT_MESSAGE,
    KAFKA_STORAGE_ERROR,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...records.codec import CodecError, decode_batches
from ..registry import api

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734
EARLIEST_LOCAL = -4  # KIP-405; without tiered storage the local log is the whole log
LATEST_TIERED = -5  # KIP-1005; nothing is tiered here


def _records(plog, seg, h):
    return decode_batches(plog.batch_bytes(seg, h))[0].records


def lookup(plog, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query; (-1, -1) when there is none."""
    if timestamp == LATEST:
        return -1, plog.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_batch()
        if found is None:
            return -1, -1
        seg, h = found
        # The batch header knows the max timestamp, not which record has it: decode this one batch.
        for r in _records(plog, seg, h):
            if r.timestamp == h.max_timestamp:
                return r.timestamp, r.offset
        return h.max_timestamp, h.last_offset
    if timestamp < 0:
        return -1, -1
    # Kafka's UnifiedLog.fetchOffsetByTimestamp searches from the log start offset
    # (LogSegment.findOffsetByTimestamp's startingOffset): records DeleteRecords removed
    # are never an answer. The first candidate batch holds the answer unless its
    # qualifying records all lie below the start.
    start = plog.log_start_offset
    for seg, h in plog.timestamp_candidates(timestamp):
        for r in _records(plog, seg, h):
            if r.timestamp >= timestamp and r.offset >= start:
                return r.timestamp, r.offset
    return -1, -1


@api(2, "ListOffsets", 1, 10)
async def list_offsets(broker, request):
    await broker.open_partitions([(t.name, p.partition_index) for t in request.body.topics
                                  for p in t.partitions if broker.metadata.get(t.name) is not None])
    topics = []
    for t in request.body.topics:
        topic = broker.metadata.get(t.name)
        parts = []
        for p in t.partitions:
            error = {"partition_index": p.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                plog = broker.logs.get(t.name, p.partition_index) if topic else None
                if plog is None:
                    parts.append({**error, "error_code": UNKNOWN_TOPIC_OR_PARTITION})
                    continue
                ts, offset = lookup(plog, p.timestamp)
            except (CorruptBatch, CodecError):
                parts.append({**error, "error_code": CORRUPT_MESSAGE})
                continue
            except StorageError as exc:
                broker.storage_failed(exc)
                parts.append({**error, "error_code": KAFKA_STORAGE_ERROR})
                continue
            parts.append(
                {"partition_index": p.partition_index, "error_code": NONE, "timestamp": ts, "offset": offset,
                 "leader_epoch": 0}
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
