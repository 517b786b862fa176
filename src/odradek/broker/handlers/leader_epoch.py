"""OffsetsForLeaderEpoch v2-v4 (API 23; kio has no schema for v0-v1, which only pre-2.1 clients send): where a leader epoch ends in the leader's log.

Followers use it (before Fetch v12's DivergingEpoch) and clients use it (KIP-320) to find
out whether the log they read diverged after a leader change. Kafka's
Partition.lastOffsetForLeaderEpoch: only the leader answers (NOT_LEADER_OR_FOLLOWER
elsewhere), after the `current_leader_epoch` check (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH); the answer is the largest epoch <= the one asked and the offset
where it ends (the start of the next epoch, or the log end for the latest one), or
UNDEFINED (-1, -1) when no such epoch is known. A consumer's answer (replica id -1, the
v3+ field; older versions are followers') never passes the high watermark (KIP-392:
consumers never see beyond committed data).
"""

from __future__ import annotations

from ...log.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from ...log.errors import StorageError
from ...protocol.errors import (
    KAFKA_STORAGE_ERROR,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation
from ..registry import api
from ..replica_manager import NotServable

CONSUMER = -1
FOLLOWER_BEFORE_V3 = -2  # Kafka: requests before v3 have no replica id and come from followers


def _answer(broker, topic, p, replica_id) -> dict:
    out = {"partition": p.partition, "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
    if topic is None or p.partition >= topic.partitions:
        return {**out, "error_code": UNKNOWN_TOPIC_OR_PARTITION}
    tp = (topic.name, p.partition)
    try:
        broker.replicas.leader_for_serving(tp, int(getattr(p, "current_leader_epoch", -1)))
        plog = broker.logs.get(*tp)
    except NotServable as exc:
        return {**out, "error_code": exc.code}
    except StorageError as exc:
        broker.storage_failed(exc)
        return {**out, "error_code": KAFKA_STORAGE_ERROR}
    if plog is None:
        return {**out, "error_code": UNKNOWN_TOPIC_OR_PARTITION}
    epoch, end = plog.epochs.end_offset_for(p.leader_epoch, plog.log_end_offset)
    if replica_id == CONSUMER and end != UNDEFINED_EPOCH_OFFSET:
        end = min(end, plog.high_watermark)
    return {**out, "error_code": NONE, "leader_epoch": epoch, "end_offset": end}


@api(23, "OffsetForLeaderEpoch", 2, 4)
async def offset_for_leader_epoch(broker, request):
    replica_id = int(request.field("replica_id", FOLLOWER_BEFORE_V3))
    topics = []
    access = broker.access(request)
    # Kafka: CLUSTER_ACTION (a follower) allows every topic; otherwise (a consumer, KIP-320)
    # DESCRIBE on each.
    every = access.cluster(Operation.CLUSTER_ACTION)
    for t in request.body.topics:
        if not every and not access.topic(Operation.DESCRIBE, t.topic):
            topics.append({"topic": t.topic, "partitions": [
                {"partition": p.partition, "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET,
                 "error_code": TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]})
            continue
        topic = broker.metadata.get(t.topic)
        topics.append({"topic": t.topic, "partitions": [_answer(broker, topic, p, replica_id) for p in t.partitions]})
    return {"throttle_time": 0, "topics": topics}
