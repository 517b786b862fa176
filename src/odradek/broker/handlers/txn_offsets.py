"""TxnOffsetCommit v0-v4: a transactional producer's consumed offsets, sent to the group coordinator.

The producer finds the coordinator of the group (FindCoordinator with the group id, key
type 0), not the transaction coordinator: the request runs on the group's shard of
`__consumer_offsets` (`GroupCoordinator.partition_for(group_id)`), whose records stay
pending until the transaction coordinator writes this producer's marker there
(`GroupCoordinator.complete_transaction`). The fencing rules are in
`odradek.coordinator.txn_offsets`.

As Kafka's KafkaApis.handleTxnOffsetCommitRequest: a topic or partition that does not
exist is answered UNKNOWN_TOPIC_OR_PARTITION and the rest go to the coordinator; an
empty group id is INVALID_GROUP_ID (GroupCoordinatorService); a coordinator error
answers every partition sent to it, and v0-v1 get COORDINATOR_NOT_AVAILABLE instead of
COORDINATOR_LOAD_IN_PROGRESS (clients before KAFKA-7296 did not retry it).
"""

from __future__ import annotations

from ...coordinator import offsets as O
from ...coordinator import txn_offsets as T
from ...protocol.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_GROUP_ID,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation
from ..coordinated import answer
from ..registry import api


@api(28, "TxnOffsetCommit", 0, 4)
def txn_offset_commit(broker, request):
    b = request.body
    v = request.api_version
    topics = []
    unknown = []  # (topic name, partition indexes, error code)
    access = broker.access(request)
    # Kafka: WRITE on the transactional id, READ on the group, then READ on each topic.
    refused = TRANSACTIONAL_ID_AUTHORIZATION_FAILED if not access.transactional_id(
        Operation.WRITE, b.transactional_id) else GROUP_AUTHORIZATION_FAILED if not access.group(
        Operation.READ, b.group_id) else None
    for t in b.topics:
        code = refused or (None if access.topic(Operation.READ, t.name) else TOPIC_AUTHORIZATION_FAILED)
        if code is not None:
            unknown.append((t.name, [p.partition_index for p in t.partitions], code))
            continue
        topic = broker.metadata.get(t.name)
        if topic is None:
            unknown.append((t.name, [p.partition_index for p in t.partitions], UNKNOWN_TOPIC_OR_PARTITION))
            continue
        bad = [p.partition_index for p in t.partitions if not 0 <= p.partition_index < topic.partitions]
        if bad:
            unknown.append((t.name, bad, UNKNOWN_TOPIC_OR_PARTITION))
        parts = tuple(O.CommitPartition(p.partition_index, p.committed_offset,
                                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
                      for p in t.partitions if 0 <= p.partition_index < topic.partitions)
        if parts:
            topics.append((topic.name, topic.topic_id, parts))

    def shape(out: list[dict]) -> dict:
        for name, indexes, code in unknown:
            out.append({"name": name, "partitions": [{"partition_index": i, "error_code": code} for i in indexes]})
        if v < 2:
            for t in out:
                for p in t["partitions"]:
                    if p["error_code"] == COORDINATOR_LOAD_IN_PROGRESS:
                        p["error_code"] = COORDINATOR_NOT_AVAILABLE
        return {"throttle_time": 0, "topics": out}

    def every_partition(code) -> list[dict]:
        return [{"name": n, "partitions": [{"partition_index": p.partition, "error_code": code} for p in ps]}
                for n, _i, ps in topics]

    if not topics:
        return shape([])
    if not b.group_id:
        return shape(every_partition(INVALID_GROUP_ID))
    req = T.TxnCommitRequest(
        transactional_id=b.transactional_id, group_id=b.group_id, producer_id=b.producer_id,
        producer_epoch=b.producer_epoch, generation_id=request.field("generation_id", -1),
        member_id=request.field("member_id", "") or "", instance_id=request.field("group_instance_id"),
        topics=tuple(topics), version=v)
    deferred = broker.coordinator.runtime.submit(
        b.group_id, lambda shard, now: T.commit_transactional(shard, req, now), broker.clock(), request.started)
    return answer(deferred, lambda code: shape(every_partition(code)), lambda response: shape(response["topics"]))
