"""The classic rebalance: prepare, wait for members, complete the join phase, time out.

Theory of operation (consumer-0.9-rewrite-design "Rebalance", Kafka's GroupCoordinator):
  * `prepare_rebalance` moves the group to PreparingRebalance and arms the join-phase
    deadline: the largest member rebalance timeout, or for a group that was Empty the
    initial rebalance delay (`group.initial.rebalance.delay.ms`), extended by the same
    delay whenever a new member arrived meanwhile, up to the rebalance timeout, so a group
    whose consumers start together forms in one generation instead of one per consumer;
  * the join phase completes early once every member has rejoined (not during the
    initial delay), or at the deadline: dynamic members that did not rejoin are removed,
    static members stay (KIP-345), the generation is bumped, a leader and a protocol
    chosen and every parked JoinGroup answered (the leader gets all members' metadata);
  * members that do not SyncGroup within the rebalance timeout after that are removed,
    and so are members whose session expires (a member parked in JoinGroup or SyncGroup
    is alive: it cannot heartbeat while it waits).
Everything here mutates the group directly (see model.py); records are returned only for
what Kafka persists: the group when it empties.
"""

from __future__ import annotations

from ...protocol.errors import NONE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID
from .. import records as R
from ..shard import Result, Shard
from .model import ClassicEvent, ClassicGroup, ClassicMember, ClassicState

S = ClassicState
E = ClassicEvent


def join_response(group: ClassicGroup, member_id: str, *, leader: str | None = None,
                  members: list | None = None, skip_assignment: bool = False) -> dict:
    """A successful JoinGroup answer at the group's current generation (errors: `error_join`)."""
    return {
        "error_code": NONE, "generation_id": group.generation, "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name, "leader": group.leader_id if leader is None else leader,
        "skip_assignment": skip_assignment, "member_id": member_id, "members": members or [],
    }


def error_join(code: int, member_id: str = "") -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "skip_assignment": False, "member_id": member_id, "members": []}


def member_list(group: ClassicGroup) -> list[dict]:
    return [{"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata(group.protocol_name) or b""}
            for m in group.members.values()]


def _join_key(gid: str) -> tuple:
    return ("classic-join", gid)


def schedule_heartbeat(shard: Shard, group: ClassicGroup, member: ClassicMember, now_ms: int) -> None:
    gid, mid = group.group_id, member.member_id
    shard.timer.schedule(("classic-session", gid, mid), now_ms + member.session_timeout_ms,
                         lambda s, now: _session_expired(s, gid, mid, now))


def _session_expired(shard: Shard, gid: str, mid: str, now_ms: int) -> Result:
    group = shard.classic_groups.get(gid)
    member = group.members.get(mid) if group else None
    if member is None:
        return Result([], None)
    if member.join_reply is not None or member.sync_reply is not None:
        schedule_heartbeat(shard, group, member, now_ms)  # parked in JoinGroup/SyncGroup: alive
        return Result([], None)
    return Result(remove_members(shard, group, [mid], now_ms), None)


def remove_members(shard: Shard, group: ClassicGroup, member_ids, now_ms: int) -> list[R.CoordinatorRecord]:
    """Members leave or are expired: answer their parked requests and rebalance the rest."""
    removed = False
    for mid in member_ids:
        member = group.remove(mid)
        if member is None:
            continue
        removed = True
        shard.timer.cancel(("classic-session", group.group_id, mid))
        if member.join_reply is not None:
            shard.respond(member.join_reply, error_join(UNKNOWN_MEMBER_ID, mid))
        if member.sync_reply is not None:
            shard.respond(member.sync_reply, sync_error(UNKNOWN_MEMBER_ID))
    if not removed:
        return []
    if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
        return prepare_rebalance(shard, group, now_ms)
    if group.is_(S.PREPARING_REBALANCE):
        return maybe_complete_join(shard, group, now_ms)
    return []


def sync_error(code: int) -> dict:
    return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}


def prepare_rebalance(shard: Shard, group: ClassicGroup, now_ms: int) -> list[R.CoordinatorRecord]:
    gid = group.group_id
    if group.is_(S.COMPLETING_REBALANCE):
        # The assignment the leader is computing is for a generation that will not be:
        # members waiting in SyncGroup must rejoin.
        for m in group.members.values():
            m.assignment = b""
            if m.sync_reply is not None:
                shard.respond(m.sync_reply, sync_error(REBALANCE_IN_PROGRESS))
                m.sync_reply = None
    shard.timer.cancel(("classic-sync", gid))
    timeout = group.rebalance_timeout_ms()
    delay = shard.config.initial_rebalance_delay_ms
    initial = group.is_(S.EMPTY) and delay > 0
    group.transition(E.REBALANCE, now_ms)
    group.initial_delay = initial
    if initial:
        first = min(delay, timeout)
        shard.timer.schedule(_join_key(gid), now_ms + first,
                             lambda s, now: _initial_delay_expired(s, gid, first, max(timeout - delay, 0), now))
        return []
    shard.timer.schedule(_join_key(gid), now_ms + timeout, lambda s, now: _join_deadline(s, gid, now))
    return maybe_complete_join(shard, group, now_ms)


def maybe_prepare_rebalance(shard: Shard, group: ClassicGroup, now_ms: int) -> list[R.CoordinatorRecord]:
    if group.is_(S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
        return prepare_rebalance(shard, group, now_ms)
    return []


def _initial_delay_expired(shard: Shard, gid: str, delay: int, remaining: int, now_ms: int) -> Result:
    group = shard.classic_groups.get(gid)
    if group is None or not group.is_(S.PREPARING_REBALANCE):
        return Result([], None)
    if group.new_member_added and remaining > 0:
        group.new_member_added = False
        step = min(delay, remaining)
        shard.timer.schedule(_join_key(gid), now_ms + step,
                             lambda s, now: _initial_delay_expired(s, gid, delay, max(remaining - delay, 0), now))
        return Result([], None)
    return Result(complete_join(shard, group, now_ms), None)


def _join_deadline(shard: Shard, gid: str, now_ms: int) -> Result:
    group = shard.classic_groups.get(gid)
    if group is None or not group.is_(S.PREPARING_REBALANCE):
        return Result([], None)
    return Result(complete_join(shard, group, now_ms), None)


def maybe_complete_join(shard: Shard, group: ClassicGroup, now_ms: int) -> list[R.CoordinatorRecord]:
    if group.is_(S.PREPARING_REBALANCE) and not group.initial_delay and group.all_joined():
        return complete_join(shard, group, now_ms)
    return []


def complete_join(shard: Shard, group: ClassicGroup, now_ms: int) -> list[R.CoordinatorRecord]:
    gid = group.group_id
    shard.timer.cancel(_join_key(gid))
    # Dynamic members that did not rejoin are gone; static members keep their place
    # (KIP-345) until their session times out.
    for mid, m in list(group.members.items()):
        if m.join_reply is None and not m.instance_id:
            group.remove(mid)
            shard.timer.cancel(("classic-session", gid, mid))
    joined = [m for m in group.members.values() if m.join_reply is not None]
    if group.members and not joined:
        # Only static members that have not come back: wait another rebalance timeout
        # for them (their sessions will remove them if they never do).
        shard.timer.schedule(_join_key(gid), now_ms + group.rebalance_timeout_ms(), lambda s, now: _join_deadline(s, gid, now))
        return []
    group.initial_delay = False
    group.new_member_added = False
    group.generation += 1
    if not group.members:
        group.protocol_name = None
        group.leader_id = None
        group.transition(E.JOIN_EMPTIED, now_ms)
        return [R.classic_group(group)]
    if group.leader_id is None or group.members[group.leader_id].join_reply is None:
        group.leader_id = joined[0].member_id
    group.protocol_name = group.select_protocol()
    group.transition(E.JOIN_COMPLETED, now_ms)
    everyone = member_list(group)
    for m in joined:
        is_leader = m.member_id == group.leader_id
        shard.respond(m.join_reply, join_response(group, m.member_id, members=everyone if is_leader else []))
        group.unpark_join(m)
        schedule_heartbeat(shard, group, m, now_ms)
    group.pending_sync = set(group.members)
    generation = group.generation
    shard.timer.schedule(("classic-sync", gid), now_ms + group.rebalance_timeout_ms(),
                         lambda s, now: _sync_expired(s, gid, generation, now))
    return []


def _sync_expired(shard: Shard, gid: str, generation: int, now_ms: int) -> Result:
    """Members that never sent SyncGroup for this generation are removed (Kafka's pending-sync timeout)."""
    group = shard.classic_groups.get(gid)
    if group is None or group.generation != generation or not group.is_(S.COMPLETING_REBALANCE, S.STABLE):
        return Result([], None)
    late = sorted(group.pending_sync)
    group.pending_sync = set()
    return Result(remove_members(shard, group, late, now_ms), None)
