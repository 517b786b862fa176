"""OffsetCommit v2-v10, OffsetFetch v1-v10, OffsetDelete v0.

Topic ids (OffsetCommit/OffsetFetch v10) are resolved to names here: offsets are keyed by
topic name in `__consumer_offsets`, as in Kafka. The fencing rules are in
`odradek.coordinator.offsets`. OffsetFetch v7+ passes require_stable on (KIP-447:
UNSTABLE_OFFSET_COMMIT for partitions a transaction may still move).
"""

from __future__ import annotations

from ...coordinator import offsets as O
from ...coordinator.errors import CoordinatorUnavailable
from ...protocol.errors import (
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import OPEN, Access, Operation
from ..coordinated import answer
from ..registry import api


@api(8, "OffsetCommit", 2, 10)
def offset_commit(broker, request):
    b = request.body
    v = request.api_version
    access = broker.access(request)
    group_denied = not access.group(Operation.READ, b.group_id)  # Kafka: READ on the group, then on each topic
    topics = []
    unknown = []  # (response topic fields, partition indexes, error code)
    for t in b.topics:
        topic = broker.metadata.get_by_id(t.topic_id) if v >= 10 else broker.metadata.get(t.name)
        if topic is not None and (group_denied or not access.topic(Operation.READ, topic.name)):
            # Nothing of it is written: a denied commit leaves the offsets as they were.
            unknown.append(({"name": topic.name, "topic_id": topic.topic_id}, [p.partition_index for p in t.partitions],
                            GROUP_AUTHORIZATION_FAILED if group_denied else TOPIC_AUTHORIZATION_FAILED))
            continue
        if topic is None and group_denied:
            ident = {"topic_id": t.topic_id, "name": ""} if v >= 10 else {"name": t.name, "topic_id": None}
            unknown.append((ident, [p.partition_index for p in t.partitions], GROUP_AUTHORIZATION_FAILED))
            continue
        if topic is None:
            ident = {"topic_id": t.topic_id, "name": ""} if v >= 10 else {"name": t.name, "topic_id": None}
            unknown.append((ident, [p.partition_index for p in t.partitions],
                            UNKNOWN_TOPIC_ID if v >= 10 else UNKNOWN_TOPIC_OR_PARTITION))
            continue
        # As Kafka: offsets only for partitions that exist.
        bad = [p.partition_index for p in t.partitions if not 0 <= p.partition_index < topic.partitions]
        if bad:
            unknown.append(({"name": topic.name, "topic_id": topic.topic_id}, bad, UNKNOWN_TOPIC_OR_PARTITION))
        parts = tuple(O.CommitPartition(p.partition_index, p.committed_offset,
                                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
                      for p in t.partitions if 0 <= p.partition_index < topic.partitions)
        if parts:
            topics.append((topic.name, topic.topic_id, parts))
    req = O.CommitRequest(b.group_id, b.member_id or "", b.generation_id_or_member_epoch,
                          request.field("group_instance_id"), tuple(topics), v)
    def every_partition(code) -> list[dict]:
        return [{"name": n, "topic_id": i, "partitions": [{"partition_index": p.partition, "error_code": code}
                                                          for p in ps]} for n, i, ps in topics]

    def shape(out: list[dict]) -> dict:
        for ident, indexes, code in unknown:
            out.append({**ident, "partitions": [{"partition_index": i, "error_code": code} for i in indexes]})
        return {"throttle_time": 0, "topics": out}

    if not b.group_id:
        return shape(every_partition(INVALID_REQUEST))
    if not topics and unknown:
        return shape([])  # every topic was refused already (authorization, unknown topics)
    deferred = broker.coordinator.runtime.submit(b.group_id, lambda shard, now: O.commit(shard, req, now),
                                                 broker.clock(), request.started)
    return answer(deferred, lambda code: shape(every_partition(code)), lambda response: shape(response["topics"]))


def _fetch_one(broker, group_id, topics, member_id=None, member_epoch=-1, by_id=False, require_stable=False,
               access: Access = OPEN):
    """`topics`: kio request topics (name or topic_id + partition_indexes) or None for all."""
    if not access.group(Operation.DESCRIBE, group_id):
        return {"group_id": group_id, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}
    try:
        shard = broker.coordinator.runtime.read(group_id)
    except CoordinatorUnavailable as exc:
        # Kafka answers the group's error (v8+: per group; earlier: the top-level code).
        return {"group_id": group_id, "error_code": exc.code, "topics": []}
    wanted = None
    id_of = {}
    missing = []
    if topics is not None:
        wanted = []
        for t in topics:
            if by_id:
                topic = broker.metadata.get_by_id(t.topic_id)
                if topic is None:
                    missing.append(t)
                    continue
                id_of[topic.name] = t.topic_id
                wanted.append((topic.name, list(t.partition_indexes)))
            else:
                wanted.append((t.name, list(t.partition_indexes)))
    denied = []
    if wanted is not None and access.enforced:
        denied = [(n, ps) for n, ps in wanted if not access.topic(Operation.DESCRIBE, n)]
        wanted = [(n, ps) for n, ps in wanted if access.topic(Operation.DESCRIBE, n)]
    result = O.fetch_group(shard, group_id, wanted, member_id, member_epoch, require_stable)
    if access.enforced:
        # Kafka: requested topics the principal may not describe get TOPIC_AUTHORIZATION_FAILED;
        # in an "all topics" fetch they are left out.
        result["topics"] = [t for t in result["topics"] if access.topic(Operation.DESCRIBE, t["name"])]
        for name, parts in denied:
            result["topics"].append({"name": name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": TOPIC_AUTHORIZATION_FAILED} for p in parts]})
    for t in result["topics"]:
        topic = broker.metadata.get(t["name"])
        t["topic_id"] = id_of.get(t["name"]) or (topic.topic_id if topic else None)
    if by_id:
        result["topics"] = [t for t in result["topics"] if t["topic_id"] is not None]
        for t in missing:
            result["topics"].append({"topic_id": t.topic_id, "name": "", "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": UNKNOWN_TOPIC_ID} for p in t.partition_indexes]})
    return result


@api(9, "OffsetFetch", 1, 10)
def offset_fetch(broker, request):
    b = request.body
    v = request.api_version
    stable = bool(request.field("require_stable", False))  # v7+
    access = broker.access(request)
    if v >= 8:
        groups = []
        for g in b.groups:
            member_id = getattr(g, "member_id", None)
            epoch = getattr(g, "member_epoch", -1)
            groups.append(_fetch_one(broker, g.group_id, g.topics, member_id, epoch, by_id=v >= 10,
                                     require_stable=stable, access=access))
        return {"throttle_time": 0, "groups": groups}
    one = _fetch_one(broker, b.group_id, b.topics, require_stable=stable, access=access)
    return {"throttle_time": 0, "error_code": one["error_code"], "topics": one["topics"]}


@api(47, "OffsetDelete", 0, 0)
def offset_delete(broker, request):
    b = request.body
    access = broker.access(request)
    if not access.group(Operation.DELETE, b.group_id):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}
    denied = [t for t in b.topics if not access.topic(Operation.READ, t.name)]
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in b.topics if t not in denied]

    def with_denied(result: dict) -> dict:
        result["topics"] = list(result.get("topics", [])) + [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]}
            for t in denied]
        return result

    deferred = broker.coordinator.runtime.submit(
        b.group_id, lambda shard, now: O.delete(shard, b.group_id, topics, now), broker.clock(), request.started)
    return answer(deferred, lambda code: {"throttle_time": 0, "error_code": code, "topics": []},
                  lambda result: with_denied({"throttle_time": 0, **result}))
