"""The group coordinator's entry points: one per request kind, dispatching on the group's type.

Theory of operation (Kafka's GroupMetadataManager: classicGroupJoin picks
classicGroupJoinToConsumerGroup or classicGroupJoinToClassicGroup, consumerGroupHeartbeat
converts a classic group first, consumerGroupFenceMember may convert a consumer group
back; KIP-848 "Online Migration"). A group id names at most one group in a shard, either
a consumer group or a classic group. Every request that reaches a group comes through
here, and this module is the only one that looks at which kind it is and picks the
handler:

  request                   consumer group                 classic group (or none)
  ------------------------  -----------------------------  ------------------------------
  ConsumerGroupHeartbeat    consumer/heartbeat.py          migration.upgrade, then the
                                                           heartbeat again (now consumer)
  JoinGroup                 migration.join (if it has      classic/join.py (an empty
                            members)                       consumer group is replaced)
  SyncGroup, Heartbeat      migration.sync / .classic_     classic/sync.py
                            heartbeat
  LeaveGroup                migration.leave                classic/leave.py
  a member is removed       migration.downgrade when it    -
  (timeout, leave -1)       converts the group, else
                            consumer expire_member

The handlers of classic/ and consumer/ handle their own kind of group only and never
import migration.py; migration.py uses only their public functions. Removing a member
is where the kinds meet (Kafka's consumerGroupFenceMember may convert the group), and a
removal is usually started by a timer armed long before: so the timers are armed with
the removal to run. The consumer handlers and migration take `fence_member` as their
`fence` argument and their timers call it when they fire; a coordinator taking a group
over re-arms its members' timers with `arm_member_timers`. Nothing below this module
needs to know that it exists, and no timer needs to know a group's kind.

ConsumerGroupHeartbeat's request checks (KIP-848 "Request Validation") run here, once,
before the group's kind is looked at, as Kafka validates before it looks the group up;
the classic requests' checks (group id, session timeout) run in whichever handler gets
them, in Kafka's order. Results are what the handlers return: records and a response,
or `Then` (an upgrade is written as its own batch, then the heartbeat runs again through
`consumer_group_heartbeat`, against the consumer group it became).
"""

from __future__ import annotations

from . import migration
from .classic import join as classic_join
from .classic import leave as classic_leave
from .classic import sync as classic_sync
from .classic.join import JoinRequest
from .classic.leave import LeaveIdentity
from .classic.model import Reply
from .classic.sync import ClassicHeartbeat, SyncRequest
from .consumer import heartbeat as consumer
from .consumer.heartbeat import HeartbeatRequest
from .consumer.model import ConsumerGroup, ConsumerMember
from .errors import CoordinatorError
from .shard import Result, Shard, Then

__all__ = [
    "arm_member_timers",
    "consumer_group_heartbeat",
    "fence_member",
    "heartbeat",
    "join_group",
    "leave_group",
    "sync_group",
]


def _consumer_group(shard: Shard, group_id: str) -> ConsumerGroup | None:
    # A consumer group's id is never empty (ConsumerGroupHeartbeat refuses it), so a classic
    # request with an empty id always reaches the classic handler, which answers INVALID_GROUP_ID.
    return shard.consumer_groups.get(group_id) if group_id else None


# --- the expiry path ------------------------------------------------------------------------------


def fence_member(shard: Shard, group_id: str, member_id: str, now_ms: int) -> Result:
    """Remove a member of a consumer group (its session or rebalance timeout ran out, a
    classic member missed its join or sync deadline, or it left with -1): Kafka's
    consumerGroupFenceMember. When it is the last consumer-protocol member and the others
    are classic members, the group becomes a classic group instead (KIP-848 "Online
    Migration" downgrade). A `consumer.heartbeat.Fence`."""
    group = shard.consumer_groups.get(group_id)
    if group is None or member_id not in group.members:
        return Result([], None)  # gone already (a timer that outlived its member or group)
    if migration.downgrade_applies(shard, group, member_id):
        return migration.downgrade(shard, group, member_id, now_ms)
    return consumer.expire_member(shard, group_id, member_id, now_ms)


def arm_member_timers(shard: Shard, group_id: str, member: ConsumerMember, now_ms: int) -> None:
    """A consumer-group member's session and rebalance timers, running `fence_member`
    (for a coordinator that takes a group over: KIP-848 "Fail Over")."""
    consumer.arm_timers(shard, group_id, member, now_ms, fence_member)


# --- ConsumerGroupHeartbeat ------------------------------------------------------------------------


def consumer_group_heartbeat(shard: Shard, req: HeartbeatRequest, now_ms: int) -> Result:
    try:
        consumer.validate(shard, req)  # KIP-848 "Request Validation", whatever the group
        if req.group_id in shard.classic_groups:
            # KIP-848 "Online Migration": the classic group converts first (its own write),
            # then this heartbeat runs again, against the consumer group it became.
            return Result(migration.upgrade(shard, req, now_ms, fence_member),
                          Then(lambda s, now: consumer_group_heartbeat(s, req, now)))
        return consumer.handle(shard, req, now_ms, fence_member)
    except CoordinatorError as exc:
        return consumer.error_result(exc)


# --- the classic protocol ----------------------------------------------------------------------------


def join_group(shard: Shard, req: JoinRequest, reply: Reply, now_ms: int) -> Result:
    """JoinGroup: answered through `reply`, now or when the join phase completes."""
    group = _consumer_group(shard, req.group_id)
    if group is not None and group.members:
        # Kafka's classicGroupJoinToConsumerGroup: a classic member joins a consumer group.
        return migration.join(shard, group, req, reply, now_ms, fence_member)
    # classicGroupJoinToClassicGroup (an empty consumer group is replaced by the classic one).
    return classic_join.join(shard, req, reply, now_ms)


def sync_group(shard: Shard, req: SyncRequest, reply: Reply, now_ms: int) -> Result:
    group = _consumer_group(shard, req.group_id)
    if group is not None:
        return migration.sync(shard, group, req, reply, now_ms, fence_member)
    return classic_sync.sync(shard, req, reply, now_ms)


def heartbeat(shard: Shard, req: ClassicHeartbeat, now_ms: int) -> Result:
    """The classic Heartbeat API."""
    group = _consumer_group(shard, req.group_id)
    if group is not None:
        return migration.classic_heartbeat(shard, group, req, now_ms, fence_member)
    return classic_sync.heartbeat(shard, req, now_ms)


def leave_group(shard: Shard, group_id: str, identities: tuple[LeaveIdentity, ...], now_ms: int) -> Result:
    group = _consumer_group(shard, group_id)
    if group is not None:
        return migration.leave(shard, group, identities, now_ms)
    return classic_leave.leave(shard, group_id, identities, now_ms)
