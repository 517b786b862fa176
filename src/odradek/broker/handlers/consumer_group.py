"""ConsumerGroupHeartbeat v0-v1 and ConsumerGroupDescribe v0-v1 (KIP-848).

These translate between kio entities and the coordinator's plain request values; all
protocol decisions are in `odradek.coordinator.consumer`.
"""

from __future__ import annotations

from ...coordinator import dispatch
from ...coordinator.consumer.heartbeat import HeartbeatRequest
from ...coordinator.errors import CoordinatorUnavailable
from ...coordinator.groups import describe_consumer_group, unavailable_consumer_group
from ...protocol.errors import (
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
)
from ...security.acl import Operation
from ..coordinated import answer
from ..registry import api
from .groups import with_group_operations


def _ms(v) -> int:
    return v if isinstance(v, int) else int(v.total_seconds() * 1000)


@api(68, "ConsumerGroupHeartbeat", 0, 1)
def consumer_group_heartbeat(broker, request):
    b = request.body
    access = broker.access(request)
    # KIP-848 "Required ACL": READ on the group; then (Kafka 4, KAFKA-18813) DESCRIBE on
    # every subscribed topic name, all or nothing.
    denied = None
    if not access.group(Operation.READ, b.group_id):
        denied = GROUP_AUTHORIZATION_FAILED
    elif b.subscribed_topic_names and not all(access.topic(Operation.DESCRIBE, t) for t in b.subscribed_topic_names):
        denied = TOPIC_AUTHORIZATION_FAILED
    if denied is not None:
        return {"throttle_time": 0, "error_code": denied, "error_message": None, "member_id": None,
                "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
    owned = None
    if b.topic_partitions is not None:
        owned = {}
        for tp in b.topic_partitions:
            owned.setdefault(tp.topic_id, set()).update(tp.partitions)
        owned = {t: frozenset(ps) for t, ps in owned.items()}
    req = HeartbeatRequest(
        group_id=b.group_id, member_id=b.member_id, member_epoch=b.member_epoch, instance_id=b.instance_id,
        rack_id=b.rack_id, rebalance_timeout_ms=_ms(b.rebalance_timeout),
        subscribed_topic_names=tuple(b.subscribed_topic_names) if b.subscribed_topic_names is not None else None,
        subscribed_topic_regex=request.field("subscribed_topic_regex"), server_assignor=b.server_assignor,
        owned=owned, client_id=request.client_id or "", client_host=request.client_host, version=request.api_version,
        can_describe=(lambda t: access.topic(Operation.DESCRIBE, t)) if access.enforced else None,
    )
    deferred = broker.coordinator.runtime.submit(
        b.group_id, lambda shard, now: dispatch.consumer_group_heartbeat(shard, req, now), broker.clock(),
        request.started)
    return answer(deferred, lambda code: {"throttle_time": 0, "error_code": code, "error_message": None,
                                          "member_id": None, "member_epoch": 0, "heartbeat_interval": 0},
                  lambda response: {"throttle_time": 0, **response})


@api(69, "ConsumerGroupDescribe", 0, 1)
def consumer_group_describe(broker, request):
    runtime = broker.coordinator.runtime
    ops = bool(request.field("include_authorized_operations", False))
    access = broker.access(request)
    groups = []
    for gid in request.body.group_ids:
        if not access.group(Operation.DESCRIBE, gid):  # Kafka checks DESCRIBE (the KIP says Read, which implies it)
            groups.append(unavailable_consumer_group(gid, GROUP_AUTHORIZATION_FAILED))
            continue
        try:
            shard = runtime.read(gid)
        except CoordinatorUnavailable as exc:
            groups.append(unavailable_consumer_group(gid, exc.code))
            continue
        if not gid:
            groups.append({**describe_consumer_group(shard, gid), "error_code": INVALID_REQUEST,
                           "error_message": "group id is empty"})
            continue
        described = describe_consumer_group(shard, gid)
        if access.enforced and not all(access.topic(Operation.DESCRIBE, t) for t in _assigned_topics(described)):
            # Kafka 4 (KAFKA-18813): a group with a topic the principal may not describe is not shown.
            described = {**unavailable_consumer_group(gid, TOPIC_AUTHORIZATION_FAILED), "error_message":
                         "The group has described topic(s) that the client is not authorized to describe."}
        groups.append(with_group_operations(described, ops, access))
    return {"throttle_time": 0, "groups": groups}


def _assigned_topics(described: dict) -> set[str]:
    return {row["topic_name"] for m in described["members"] for key in ("assignment", "target_assignment")
            for row in m[key]["topic_partitions"] if row["topic_name"]}
