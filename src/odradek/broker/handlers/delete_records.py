"""DeleteRecords v0-v2 (v2 flexible): move partitions' log start offsets forward.

What Kafka does, per partition, and odradek with it:

- KafkaApis.handleDeleteRecordsRequest: a partition the metadata does not know is
  UNKNOWN_TOPIC_OR_PARTITION (low watermark -1).
- ReplicaManager.deleteRecordsOnLocalLog: internal topics (`__consumer_offsets`) are
  refused with INVALID_TOPIC_EXCEPTION, "Cannot delete records of internal topic"
  (Kafka 4 lets only its own share coordinator through); an offline partition or log
  directory is KAFKA_STORAGE_ERROR.
- Partition.deleteRecordsOnLeader: a topic whose cleanup.policy lacks `delete` is
  POLICY_VIOLATION; offset -1 (DeleteRecordsRequest.HIGH_WATERMARK) means the high
  watermark; any other negative offset is OFFSET_OUT_OF_RANGE.
- UnifiedLog.maybeIncrementLogStartOffset: past the high watermark is OFFSET_OUT_OF_RANGE;
  otherwise the log start offset becomes max(current, offset) and the response carries
  the low watermark, which with one replica is the log start offset itself (Kafka's
  lowWatermarkIfLeader is the smallest log start of the live replicas). Kafka then
  waits (DelayedDeleteRecords) until every replica's start reached the offset; with one
  replica that is at once, so `timeout_ms` is never needed.

Segments wholly below the new start are deleted at once (PartitionLog), and the new
starts are written to `log-start-offset-checkpoint` before the response goes out, so
records a client was told are deleted do not come back after a restart.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ...log.errors import StorageError
from ...log.partition import OffsetOutOfRange
from ...protocol.errors import (
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    NONE,
    OFFSET_OUT_OF_RANGE,
    POLICY_VIOLATION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation
from ..registry import api

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK = -1  # Kafka's DeleteRecordsResponse.INVALID_LOW_WATERMARK


def delete_partition(broker, topic, index: int, offset: int) -> tuple[ErrorCode, int, bool]:
    """(error code, low watermark, whether the start moved) for one partition."""
    if topic is None or not 0 <= index < topic.partitions:
        return UNKNOWN_TOPIC_OR_PARTITION, INVALID_LOW_WATERMARK, False
    if topic.is_internal:
        return INVALID_TOPIC_EXCEPTION, INVALID_LOW_WATERMARK, False
    try:
        plog = broker.logs.get(topic.name, index)
    except StorageError:  # offline partition or log directory
        return KAFKA_STORAGE_ERROR, INVALID_LOW_WATERMARK, False
    if plog is None:
        return UNKNOWN_TOPIC_OR_PARTITION, INVALID_LOW_WATERMARK, False
    if "delete" not in plog.config["cleanup.policy"]:
        return POLICY_VIOLATION, INVALID_LOW_WATERMARK, False
    target = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        return OFFSET_OUT_OF_RANGE, INVALID_LOW_WATERMARK, False
    try:
        moved = plog.increment_log_start_offset(target)
    except OffsetOutOfRange:
        return OFFSET_OUT_OF_RANGE, INVALID_LOW_WATERMARK, False
    except StorageError as exc:
        # Deleting a segment failed; the start had moved already, so reads honour it,
        # but the client is told to retry (the retry is a no-op that answers NONE).
        broker.storage_failed(exc)
        return KAFKA_STORAGE_ERROR, INVALID_LOW_WATERMARK, True
    return NONE, plog.log_start_offset, moved


async def persist_log_starts(broker) -> None:
    """Write `log-start-offset-checkpoint` off the event loop (see log/manager.py)."""
    logs = broker.logs
    if logs.health.offline:
        return
    seq, points = logs.snapshot_log_starts()
    try:
        await asyncio.to_thread(logs.write_log_starts, seq, points)
    except StorageError as exc:
        # As a failed periodic checkpoint: the in-memory start holds while the broker runs,
        # and the next write (another DeleteRecords, a clean shutdown) carries it.
        log.warning("%s; deleted records may be served again after a restart until it is written", exc)


@api(21, "DeleteRecords", 0, 2)
async def delete_records(broker, request):
    body = request.body
    await broker.open_partitions([(t.name, p.partition_index) for t in body.topics
                                  if broker.metadata.get(t.name) is not None for p in t.partitions])
    moved_any = False
    topics = []
    access = broker.access(request)
    for t in body.topics:
        topic = broker.metadata.get(t.name)
        parts = []
        allowed = access.topic(Operation.DELETE, t.name)  # Kafka: DELETE on the topic
        for p in t.partitions:
            if not allowed:
                parts.append({"partition_index": p.partition_index, "low_watermark": INVALID_LOW_WATERMARK,
                              "error_code": TOPIC_AUTHORIZATION_FAILED})
                continue
            code, low, moved = delete_partition(broker, topic, p.partition_index, p.offset)
            moved_any |= moved
            parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": code})
        topics.append({"name": t.name, "partitions": parts})
    if moved_any:
        await persist_log_starts(broker)
    return {"throttle_time": 0, "topics": topics}
