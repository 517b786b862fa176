"""ListOffsets v1-v10: earliest, latest, max timestamp, and offset by timestamp.

Earliest is the log start offset (moved by DeleteRecords or retention), as Kafka's
UnifiedLog.fetchOffsetByTimestamp answers EARLIEST_TIMESTAMP; latest is the high
watermark, or with isolation_level 1 (READ_COMMITTED, v2+) the last stable offset
(KIP-98). As in Kafka's Partition.fetchOffsetForTimestamp, a timestamp lookup (and the
max timestamp) answers only an offset below that same bound, none otherwise. In a
cluster only the leader answers (Kafka's Partition.fetchOffsetForTimestamp
with fetchOnlyFromLeader), after the `current_leader_epoch` check (v4+), and a new leader
whose high watermark has not yet reached the start of its epoch answers
OFFSET_NOT_AVAILABLE (KIP-207): until then it cannot tell what is committed."""

from __future__ import annotations

from ...log.errors import CorruptBatch, StorageError
from ...protocol.errors import (
    CORRUPT_MESSAGE,
    KAFKA_STORAGE_ERROR,
    NONE,
    OFFSET_NOT_AVAILABLE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...records.codec import CodecError, decode_batches
from ...security.acl import Operation
from ..registry import api
from ..replica_manager import NotServable

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734
EARLIEST_LOCAL = -4  # KIP-405; without tiered storage the local log is the whole log
LATEST_TIERED = -5  # KIP-1005; nothing is tiered here
READ_COMMITTED = 1  # isolation_level (v2+)


def _records(plog, seg, h):
    return decode_batches(plog.batch_bytes(seg, h))[0].records


def lookup(plog, timestamp: int, isolation_level: int = 0) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query; (-1, -1) when there is none."""
    # Kafka's lastFetchableOffset: what a consumer of this isolation level may read.
    bound = plog.last_stable_offset if isolation_level == READ_COMMITTED else plog.high_watermark
    if timestamp == LATEST:
        return -1, bound
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1
    ts, offset = _search(plog, timestamp)
    return (ts, offset) if offset < bound else (-1, -1)


def _search(plog, timestamp: int) -> tuple[int, int]:
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


def _epoch_of(broker, plog, tp, offset: int, timestamp: int) -> int:
    """The leader epoch of the answer (KIP-320): the current epoch for the log end,
    else the epoch of the batch holding `offset`."""
    if timestamp == LATEST or offset < 0:
        return broker.replicas.leader_epoch(tp)
    epoch = plog.epochs.epoch_for_offset(offset)
    return broker.replicas.leader_epoch(tp) if epoch is None else epoch


@api(2, "ListOffsets", 1, 10)
async def list_offsets(broker, request):
    await broker.open_partitions([(t.name, p.partition_index) for t in request.body.topics
                                  for p in t.partitions if broker.metadata.get(t.name) is not None])
    topics = []
    access = broker.access(request)
    for t in request.body.topics:
        topic = broker.metadata.get(t.name)
        parts = []
        if not access.topic(Operation.DESCRIBE, t.name):  # Kafka: DESCRIBE on the topic (replica_id aside)
            topics.append({"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1,
                 "error_code": TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]})
            continue
        for p in t.partitions:
            error = {"partition_index": p.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
            tp = (t.name, p.partition_index)
            try:
                if topic is not None and p.partition_index < topic.partitions:
                    leader = broker.replicas.leader_for_serving(tp, int(getattr(p, "current_leader_epoch", -1)))
                    if leader is not None and leader.high_watermark < leader.epoch_start_offset:
                        parts.append({**error, "error_code": OFFSET_NOT_AVAILABLE})
                        continue
                plog = broker.logs.get(t.name, p.partition_index) if topic else None
                if plog is None:
                    parts.append({**error, "error_code": UNKNOWN_TOPIC_OR_PARTITION})
                    continue
                ts, offset = lookup(plog, p.timestamp, int(getattr(request.body, "isolation_level", 0)))
            except NotServable as exc:
                parts.append({**error, "error_code": exc.code})
                continue
            except (CorruptBatch, CodecError):
                parts.append({**error, "error_code": CORRUPT_MESSAGE})
                continue
            except StorageError as exc:
                broker.storage_failed(exc)
                parts.append({**error, "error_code": KAFKA_STORAGE_ERROR})
                continue
            parts.append(
                {"partition_index": p.partition_index, "error_code": NONE, "timestamp": ts, "offset": offset,
                 "leader_epoch": _epoch_of(broker, plog, tp, offset, p.timestamp)}
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
