"""JoinGroup for classic groups (consumer-0.9-rewrite-design "JoinGroup", KIP-345, KIP-394).

Theory of operation, in the order `join` checks (Kafka's GroupMetadataManager.classicGroupJoin):
  1. the group id must be set (INVALID_GROUP_ID) and the session timeout within
     `group.min.session.timeout.ms`..`group.max.session.timeout.ms` (INVALID_SESSION_TIMEOUT);
  2. a member id that the group does not know, for a group that does not exist, is
     UNKNOWN_MEMBER_ID; the protocol type and names must match what the group speaks
     (INCONSISTENT_GROUP_PROTOCOL); a new member of a full group is GROUP_MAX_SIZE_REACHED;
  3. a member without an id gets one: from v4 a dynamic member is told MEMBER_ID_REQUIRED
     with its id and must join again with it (KIP-394); a static member (group.instance.id)
     joins at once, and if its instance is known it replaces the previous incarnation,
     which is fenced (FENCED_INSTANCE_ID). In a Stable group whose selected protocol
     does not change, that replacement keeps the assignment and causes no rebalance
     (KIP-345 "Rebalance-free restart");
  4. a known member's join is parked until the join phase completes, except a follower
     whose metadata did not change in a Stable or CompletingRebalance group, which gets
     the current generation at once.

This is Kafka's classicGroupJoinToClassicGroup: it creates the classic group, replacing an
empty consumer group of the same id. A JoinGroup for a consumer group with members is
classicGroupJoinToConsumerGroup (migration.py); coordinator/dispatch.py picks which.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.errors import (
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    UNKNOWN_MEMBER_ID,
)
from .. import records as R
from ..consumer_protocol import decode_assignment, decode_subscription
from ..errors import CoordinatorError
from ..records import RecordError
from ..shard import Result, Shard
from .model import ClassicGroup, ClassicMember, ClassicState, Reply
from .rebalance import (
    error_join,
    join_response,
    maybe_complete_join,
    maybe_prepare_rebalance,
    member_list,
    prepare_rebalance,
    schedule_heartbeat,
    sync_error,
)
from .sync import check_member

S = ClassicState


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    reason: str | None = None
    version: int = 5


def validate(shard: Shard, req: JoinRequest) -> None:
    if not req.group_id:
        raise CoordinatorError(INVALID_GROUP_ID, "The group id must not be empty.")
    lo, hi = shard.config.classic_min_session_timeout_ms, shard.config.classic_max_session_timeout_ms
    if not lo <= req.session_timeout_ms <= hi:
        raise CoordinatorError(INVALID_SESSION_TIMEOUT, f"The session timeout {req.session_timeout_ms} ms is not "
                               f"within group.min.session.timeout.ms={lo} and group.max.session.timeout.ms={hi}.")


def join(shard: Shard, req: JoinRequest, reply: Reply, now_ms: int) -> Result:
    """Answer through `reply`, now or when the join phase completes; returns the records."""
    records: list[R.CoordinatorRecord] = []
    try:
        validate(shard, req)
        consumer = shard.consumer_groups.get(req.group_id)
        if consumer is not None:
            # A consumer group with members takes the join itself (dispatch.py, migration.py).
            assert not consumer.members, f"JoinGroup for consumer group {req.group_id} reached the classic handler"
            records = _consumer_group_tombstones(consumer)  # an idle consumer group is simply replaced
        group = shard.classic_groups.get(req.group_id)
        new_group = group is None
        if new_group:
            if req.member_id:
                raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
            group = ClassicGroup(req.group_id, now_ms)
        if not group.supports(req.protocol_type, [n for n, _ in req.protocols]):
            raise CoordinatorError(INCONSISTENT_GROUP_PROTOCOL, "The member's protocol type or protocols are not "
                                   "compatible with the group's.")
        if not _accepts(shard, group, req.member_id):
            if group.remove(req.member_id) is not None:  # Kafka drops it, without a rebalance
                shard.timer.cancel(("classic-session", group.group_id, req.member_id))
            raise CoordinatorError(GROUP_MAX_SIZE_REACHED, f"The group has reached its maximum size of "
                                   f"{shard.config.classic_max_size} members.")
        if new_group:
            shard.classic_groups[req.group_id] = group
        if not req.member_id:
            records += _join_unknown(shard, group, req, reply, now_ms)
        else:
            records += _join_known(shard, group, req, reply, now_ms)
        if new_group and not records:
            # Kafka persists a new group at once, as an empty group (its members are
            # written when the first rebalance completes).
            records.append(R.classic_group(ClassicGroup(group.group_id, now_ms)))
        return Result(records, None)
    except CoordinatorError as exc:
        shard.respond(reply, error_join(exc.code, req.member_id))
        return Result([], None)


def _consumer_group_tombstones(group) -> list[R.CoordinatorRecord]:
    gid = group.group_id
    return [*(R.target_member_tombstone(gid, m) for m in sorted(group.target)), R.target_epoch_tombstone(gid),
            R.partition_metadata_tombstone(gid), R.group_tombstone(gid)]


def _accepts(shard: Shard, group: ClassicGroup, member_id: str) -> bool:
    limit = shard.config.classic_max_size
    if group.is_(S.EMPTY, S.DEAD):
        return True
    if group.is_(S.PREPARING_REBALANCE):
        m = group.members.get(member_id)
        return (m is not None and m.join_reply is not None) or group.awaiting_join() < limit
    # A pending member (KIP-394) is not a member yet: it counts as a newcomer, as in Kafka.
    return member_id in group.members or len(group.members) < limit


def _new_member(req: JoinRequest, member_id: str, reply: Reply | None) -> ClassicMember:
    return ClassicMember(
        member_id=member_id, instance_id=req.instance_id, client_id=req.client_id, client_host=req.client_host,
        rebalance_timeout_ms=req.rebalance_timeout_ms, session_timeout_ms=req.session_timeout_ms,
        protocol_type=req.protocol_type, protocols=req.protocols, join_reply=reply,
    )


def _join_unknown(shard: Shard, group: ClassicGroup, req: JoinRequest, reply: Reply, now_ms: int) -> list[R.CoordinatorRecord]:
    # Kafka's member ids: "<client id or instance id>-<uuid>".
    new_id = f"{req.instance_id or req.client_id}-{shard.new_member_id()}"
    if req.instance_id:
        old = group.member_by_instance(req.instance_id)
        if old is not None:
            return _replace_static(shard, group, old, new_id, req, reply, now_ms)
        return _add_and_rebalance(shard, group, req, new_id, reply, now_ms)
    if req.version >= 4:
        # KIP-394: the member must come back with this id; until then it is pending, and
        # it is forgotten if it does not within its session timeout.
        group.pending_members.add(new_id)
        gid = group.group_id
        shard.timer.schedule(("classic-pending", gid, new_id), now_ms + req.session_timeout_ms,
                             lambda s, now: _pending_expired(s, gid, new_id, now))
        shard.respond(reply, error_join(MEMBER_ID_REQUIRED, new_id))
        return []
    return _add_and_rebalance(shard, group, req, new_id, reply, now_ms)


def _pending_expired(shard: Shard, gid: str, member_id: str, now_ms: int) -> Result:
    group = shard.classic_groups.get(gid)
    if group is None or member_id not in group.pending_members:
        return Result([], None)
    group.pending_members.discard(member_id)
    return Result(maybe_complete_join(shard, group, now_ms), None)


def _add_and_rebalance(shard: Shard, group: ClassicGroup, req: JoinRequest, member_id: str, reply: Reply,
                       now_ms: int) -> list[R.CoordinatorRecord]:
    member = _new_member(req, member_id, reply)
    if group.is_(S.PREPARING_REBALANCE) and group.initial_delay:
        group.new_member_added = True
    group.add(member)
    schedule_heartbeat(shard, group, member, now_ms)
    if group.is_(S.PREPARING_REBALANCE):
        return maybe_complete_join(shard, group, now_ms)
    return maybe_prepare_rebalance(shard, group, now_ms)


def _update_and_rebalance(shard: Shard, group: ClassicGroup, member: ClassicMember, req: JoinRequest, reply: Reply,
                          now_ms: int) -> list[R.CoordinatorRecord]:
    group.set_protocols(member, req.protocols)
    member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.session_timeout_ms = req.session_timeout_ms
    member.client_id, member.client_host = req.client_id, req.client_host
    if member.join_reply is not None and member.join_reply is not reply:
        # A second JoinGroup from the same member: the newer one is answered.
        shard.respond(member.join_reply, error_join(UNKNOWN_MEMBER_ID, member.member_id))
    group.park_join(member, reply)
    if group.is_(S.PREPARING_REBALANCE):
        return maybe_complete_join(shard, group, now_ms)
    return prepare_rebalance(shard, group, now_ms)


def _join_known(shard: Shard, group: ClassicGroup, req: JoinRequest, reply: Reply, now_ms: int) -> list[R.CoordinatorRecord]:
    mid = req.member_id
    if mid in group.pending_members:
        group.pending_members.discard(mid)
        shard.timer.cancel(("classic-pending", group.group_id, mid))
        return _add_and_rebalance(shard, group, req, mid, reply, now_ms)
    member = check_member(group, mid, req.instance_id)
    schedule_heartbeat(shard, group, member, now_ms)
    if group.is_(S.PREPARING_REBALANCE):
        return _update_and_rebalance(shard, group, member, req, reply, now_ms)
    unchanged = member.protocols == req.protocols
    if group.is_(S.COMPLETING_REBALANCE) and unchanged:
        # The member lost its JoinGroup response: send it again.
        is_leader = mid == group.leader_id
        shard.respond(reply, join_response(group, mid, members=member_list(group) if is_leader else []))
        return []
    if group.is_(S.STABLE) and unchanged and mid != group.leader_id:
        # A follower with nothing new: the current generation, no rebalance.
        shard.respond(reply, join_response(group, mid))
        return []
    # A leader rejoining a Stable group asks for a rebalance; so does changed metadata.
    return _update_and_rebalance(shard, group, member, req, reply, now_ms)


CONSUMER_PROTOCOL = "consumer"


def leaves_partitions_unowned(shard: Shard, group: ClassicGroup) -> bool:
    """Do the group's stored assignments (consumer protocol) miss a partition of a topic its
    members subscribe to? Only the leader watches partition counts, and only the members of
    a rebalance under way know what they still own, so a group that resumes from its stored
    assignments (a static replacement, a coordinator fail-over) can be left with partitions
    nobody will ever be given without a rebalance (simulator, seeds 2537 and 4783)."""
    if group.protocol_type != CONSUMER_PROTOCOL or not group.members:
        return False
    topics: set[str] = set()
    held: set[tuple[str, int]] = set()
    try:
        for m in group.members.values():
            topics.update(decode_subscription(m.metadata(group.protocol_name) or b"").topics)
            if m.assignment:
                held.update((t, p) for t, ps in decode_assignment(m.assignment).items() for p in ps)
    except RecordError:
        return False
    return any((t, p) not in held for t in topics if t in shard.image.topics
               for p in range(shard.image.topics[t].partitions))


def _assignment_outdated(shard: Shard, group: ClassicGroup, old: ClassicMember) -> bool:
    """Would keeping the stored assignment for a static replacement leave partitions with
    nobody? Either the old incarnation was between the two rounds of a cooperative rebalance
    (KIP-429: its assignment lacks partitions its last JoinGroup owned; it would have revoked
    them and rejoined, and that rejoin lets the leader hand them on; seed 756), or the stored
    assignments miss partitions (added while the leader was away). Kafka keeps the
    assignment in both cases."""
    if group.protocol_type != CONSUMER_PROTOCOL or not old.assignment:
        return False
    try:
        owned = decode_subscription(old.metadata(group.protocol_name) or b"").owned
        assigned = decode_assignment(old.assignment)
    except RecordError:
        return False
    if any(set(ps) - set(assigned.get(t, ())) for t, ps in owned.items()):
        return True
    return leaves_partitions_unowned(shard, group)


def _replace_static(shard: Shard, group: ClassicGroup, old: ClassicMember, new_id: str, req: JoinRequest,
                    reply: Reply, now_ms: int) -> list[R.CoordinatorRecord]:
    """KIP-345: a known group.instance.id joins with no member id: the new incarnation takes
    the old one's place (and assignment); the old one is fenced."""
    gid = group.group_id
    previous_leader = group.leader_id
    was_leader = previous_leader == old.member_id
    old_protocol = group.protocol_name
    group.remove(old.member_id)
    shard.timer.cancel(("classic-session", gid, old.member_id))
    for parked in (old.join_reply, old.sync_reply):
        if parked is not None:
            shard.respond(parked, error_join(FENCED_INSTANCE_ID, old.member_id) if parked is old.join_reply
                          else sync_error(FENCED_INSTANCE_ID))
    member = _new_member(req, new_id, None)
    member.assignment = old.assignment
    group.add(member)
    if was_leader:
        group.leader_id = new_id
    group.pending_sync.discard(old.member_id)
    schedule_heartbeat(shard, group, member, now_ms)
    if group.is_(S.STABLE):
        if group.select_protocol() == old_protocol and not _assignment_outdated(shard, group, old):
            # Nothing the assignment depends on changed: persist the new member id and hand
            # back the current generation. Older clients are told the previous leader id so
            # that they sync as followers and get their stored assignment; from v9 a leader
            # is told to skip the assignment (KIP-814).
            if was_leader and req.version >= 9:
                shard.respond(reply, join_response(group, new_id, leader=new_id, members=member_list(group),
                                                   skip_assignment=True))
            else:
                shard.respond(reply, join_response(group, new_id, leader=previous_leader or ""))
            return [R.classic_group(group)]
        group.park_join(member, reply)
        return prepare_rebalance(shard, group, now_ms)
    group.park_join(member, reply)
    if group.is_(S.COMPLETING_REBALANCE):
        # The leader may be assigning to the old member id: start over.
        return prepare_rebalance(shard, group, now_ms)
    return maybe_complete_join(shard, group, now_ms)
