"""SyncGroup and Heartbeat for classic groups (consumer-0.9-rewrite-design "SyncGroup", "Heartbeat").

Theory of operation: after the join phase, every member sends SyncGroup; the leader's
carries the assignment. Followers that arrive first are parked; the leader's sync
persists the group (GroupMetadata record, the point from which a restarted coordinator
resumes), makes it Stable and answers everyone parked. Later syncs in Stable get their
stored assignment at once. Heartbeats keep the session alive and tell members of a
rebalance (REBALANCE_IN_PROGRESS) so they rejoin.

Checks, in Kafka's order: unknown group or member -> UNKNOWN_MEMBER_ID; a static member
whose instance id now maps to another member -> FENCED_INSTANCE_ID; another generation
-> ILLEGAL_GENERATION; (SyncGroup v5+) another protocol type or name ->
INCONSISTENT_GROUP_PROTOCOL.

These handle classic groups only: a SyncGroup or Heartbeat for a consumer group (a classic
member of it, KIP-848 "Online Migration") goes to migration.py; coordinator/dispatch.py
picks which.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.errors import (
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from .. import records as R
from ..errors import CoordinatorError
from ..members import known_member
from ..shard import Result, Shard
from .model import ClassicEvent, ClassicGroup, ClassicMember, ClassicState, Reply
from .rebalance import schedule_heartbeat, sync_error

S = ClassicState


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation: int
    instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


def check_member(group: ClassicGroup | None, member_id: str, instance_id: str | None) -> ClassicMember:
    if group is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
    return known_member(group, member_id, instance_id)


def check_generation(generation: int, expected: int) -> None:
    if generation != expected:
        raise CoordinatorError(ILLEGAL_GENERATION, f"Generation {generation} is not the current {expected}.")


def _sync_ok(group: ClassicGroup, assignment: bytes) -> dict:
    return {"error_code": NONE, "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
            "assignment": assignment}


def sync(shard: Shard, req: SyncRequest, reply: Reply, now_ms: int) -> Result:
    if not req.group_id:  # Kafka checks the id before looking the group up
        shard.respond(reply, sync_error(INVALID_GROUP_ID))
        return Result([], None)
    group = shard.classic_groups.get(req.group_id)
    try:
        member = check_member(group, req.member_id, req.instance_id)
        check_generation(req.generation, group.generation)
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
                req.protocol_name is not None and req.protocol_name != group.protocol_name):
            raise CoordinatorError(INCONSISTENT_GROUP_PROTOCOL, "The protocol type or name does not match the group's.")
        if group.is_(S.PREPARING_REBALANCE):
            raise CoordinatorError(REBALANCE_IN_PROGRESS, "The group is rebalancing: rejoin.")
    except CoordinatorError as exc:
        shard.respond(reply, sync_error(exc.code))
        return Result([], None)
    schedule_heartbeat(shard, group, member, now_ms)
    group.pending_sync.discard(member.member_id)
    if group.is_(S.STABLE):
        shard.respond(reply, _sync_ok(group, member.assignment))
        return Result([], None)
    # CompletingRebalance
    if member.sync_reply is not None and member.sync_reply is not reply:
        shard.respond(member.sync_reply, sync_error(UNKNOWN_MEMBER_ID))
    member.sync_reply = reply
    if member.member_id != group.leader_id:
        return Result([], None)
    given = dict(req.assignments)
    for m in group.members.values():
        m.assignment = given.get(m.member_id, b"")  # members the leader left out get nothing
    group.transition(ClassicEvent.ASSIGNED, now_ms)
    for m in group.members.values():
        if m.sync_reply is not None:
            shard.respond(m.sync_reply, _sync_ok(group, m.assignment))
            m.sync_reply = None
    return Result([R.classic_group(group)], None)


@dataclass(frozen=True, slots=True)
class ClassicHeartbeat:
    group_id: str
    member_id: str
    generation: int
    instance_id: str | None = None


def heartbeat(shard: Shard, req: ClassicHeartbeat, now_ms: int) -> Result:
    if not req.group_id:
        return Result([], {"error_code": INVALID_GROUP_ID})
    group = shard.classic_groups.get(req.group_id)
    try:
        member = check_member(group, req.member_id, req.instance_id)
        check_generation(req.generation, group.generation)
    except CoordinatorError as exc:
        return Result([], {"error_code": exc.code})
    schedule_heartbeat(shard, group, member, now_ms)
    if group.is_(S.PREPARING_REBALANCE):
        return Result([], {"error_code": REBALANCE_IN_PROGRESS})
    return Result([], {"error_code": NONE})
