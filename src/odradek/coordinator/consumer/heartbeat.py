"""ConsumerGroupHeartbeat: join, heartbeat, reconcile, leave (KIP-848).

Theory of operation, in the order `heartbeat` runs (KIP-848 "Request Handling"):
  1. validate the request (INVALID_REQUEST rules, KIP-848 "Request Validation");
  2. epochs -1/-2 leave (dynamic leave bumps the group epoch; static leave keeps the
     assignment for the session timeout and bumps nothing);
  3. find or create the group and the member: epoch 0 joins (a static member may take
     over its instance's assignment if the previous incarnation left with -2, else
     UNRELEASED_INSTANCE_ID); other epochs must name a known member (UNKNOWN_MEMBER_ID)
     at the right epoch (FENCED_MEMBER_EPOCH), the previous epoch being accepted when the
     owned partitions are a subset of the assignment (the lost-response case);
  4. fold the request's changed fields into the member; a change of what the assignment
     depends on bumps the group epoch, except a regex nobody has resolved yet, which
     schedules its resolution instead (regex.py: the heartbeat uses resolved regexes only);
  5. if the group epoch is ahead of the target epoch, compute a new target assignment;
  6. reconcile the member (reconcile.py) and persist its new current assignment;
  7. answer with the epoch, the heartbeat interval, and the assignment when the member's
     assignment changed or the request was a full one.
Nothing is mutated here: the records are returned and the runtime replays them.
Timers (session, rebalance) are armed on the shard's injected timer.

This handles consumer groups only. A heartbeat for a classic group (KIP-848 "Online
Migration": the group converts first) goes to migration.py; coordinator/dispatch.py picks
which. For the same reason this module does not decide what removing a member means: a
member whose session or rebalance timeout runs out, or that leaves with -1, is handed to
the `fence` function the caller passes (dispatch.fence_member: it may convert the group
to a classic one, KIP-848 "Online Migration" downgrade), and the timers armed here call
that same function when they fire. `expire_member` is the consumer-only removal, the
default for callers that never see a classic member.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...protocol.errors import (
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
)
from .. import records as R
from ..errors import CoordinatorError
from ..members import known_member
from ..shard import Result, Shard, answering
from .assignment import (
    InvalidRegex,
    compile_regex,
    compute_target,
    partition_metadata_record,
    subscribed_topics,
    target_records,
)
from .interval import interval_ms
from .model import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from .reconcile import reconcile
from .regex import dropped_regexes, maybe_schedule_refresh, regex_update

# (shard, group id, member id, now) -> the records removing that member (Kafka's
# consumerGroupFenceMember): the operation a member's timers run, and what a leave does.
Fence = Callable[[Shard, str, str, int], Result]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: dict[uuid.UUID, frozenset[int]] | None = None  # TopicPartitions; None: unchanged
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    # KIP-848 "Online Migration": set when a classic member's JoinGroup is translated into
    # this request; None for consumer-protocol heartbeats (which make a member consumer-protocol).
    classic: ClassicMeta | None = None
    # KIP-848 "Required ACL" as Kafka 4 enforces it (KAFKA-18813): a regex resolves only to
    # topics the member whose heartbeat triggers the refresh may DESCRIBE. The broker gives
    # the predicate of the request's principal; None (no authorizer) sees every topic.
    can_describe: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def is_full(self) -> bool:
        # Kafka's rule: epoch 0, or every field a full request must carry is present.
        return self.member_epoch == 0 or (
            self.rebalance_timeout_ms != -1
            and (self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None)
            and self.owned is not None
        )


def error_result(exc: CoordinatorError) -> Result:
    """The ConsumerGroupHeartbeat answer to a refused request."""
    return Result([], {"error_code": exc.code, "error_message": exc.message, "member_id": None, "member_epoch": 0,
                       "heartbeat_interval": 0})


def validate(shard: Shard, req: HeartbeatRequest) -> None:
    """KIP-848 "Request Validation" (and v1's client-generated member ids, KIP-1082)."""
    def bad(msg: str):
        raise CoordinatorError(INVALID_REQUEST, msg)

    if not req.group_id:
        bad("GroupId can't be empty.")
    if (req.version >= 1 or req.member_epoch != 0) and not req.member_id:
        bad("MemberId can't be empty.")
    if req.version >= 1 and len(req.member_id) > 36:
        bad("MemberId must be at most 36 characters.")
    if req.instance_id is not None and not req.instance_id:
        bad("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id:
        bad("RackId can't be empty.")
    if req.member_epoch < STATIC_LEAVE_EPOCH or (req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None):
        bad(f"MemberEpoch is invalid: {req.member_epoch}.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms <= 0:
            bad("RebalanceTimeoutMs must be provided in first request.")
        if req.owned:
            bad("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and not req.subscribed_topic_regex:
            bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    if req.subscribed_topic_regex:
        try:
            compile_regex(req.subscribed_topic_regex)
        except InvalidRegex as exc:
            raise CoordinatorError(INVALID_REGULAR_EXPRESSION, str(exc)) from None
    if req.server_assignor is not None and req.server_assignor not in shard.config.assignors:
        raise CoordinatorError(UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                               f"Supported assignors: {', '.join(shard.config.assignors)}.")


def heartbeat(shard: Shard, req: HeartbeatRequest, now_ms: int, fence: Fence | None = None) -> Result:
    """ConsumerGroupHeartbeat for a group that is not a classic one (dispatch.py checks)."""
    try:
        validate(shard, req)
        return handle(shard, req, now_ms, fence or expire_member)
    except CoordinatorError as exc:
        return error_result(exc)


def handle(shard: Shard, req: HeartbeatRequest, now_ms: int, fence: Fence) -> Result:
    """A validated heartbeat: leave (-1, -2) or join/heartbeat. Raises CoordinatorError."""
    # A classic group of this id converts first (dispatch.py, migration.upgrade).
    assert req.group_id not in shard.classic_groups, f"classic group {req.group_id} reached the consumer handler"
    if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        return leave(shard, req, now_ms, fence)
    return member_heartbeat(shard, req, now_ms, fence)


def _find_member(shard: Shard, group: ConsumerGroup | None, req: HeartbeatRequest) -> tuple[ConsumerMember | None, ConsumerMember | None]:
    """(the member this request speaks for or None if it joins new, a static predecessor it replaces)."""
    if req.instance_id is not None:
        static = group.member_by_instance(req.instance_id) if group else None
        if req.member_epoch == 0:
            if static is None or static.member_id == req.member_id:
                existing = group.members.get(req.member_id) if group else None
                return existing, None
            if static.member_epoch != STATIC_LEAVE_EPOCH and req.classic is None:
                # (A classic static member replaces its predecessor outright, as KIP-345 has it.)
                # KIP-848 "Static Membership": the previous incarnation has not left.
                raise CoordinatorError(UNRELEASED_INSTANCE_ID, f"Static member {static.member_id} with instance id "
                                       f"{req.instance_id} is present in the consumer group.")
            return None, static
        return known_member(group, req.member_id, req.instance_id), None
    member = group.members.get(req.member_id) if group else None
    if member is None and req.member_epoch != 0:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
    return member, None


def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
    """KIP-848 "Fencing", and the lost-response case of "Request Handling" step 3."""
    received = req.member_epoch
    if received == 0:
        return
    if received > member.member_epoch:
        raise CoordinatorError(FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch ({received}) "
                               f"than the one known by the group coordinator ({member.member_epoch}).")
    if received < member.member_epoch and (received != member.previous_member_epoch or not _subset(req.owned, member)):
        raise CoordinatorError(FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch ({received}) "
                               f"than the one known by the group coordinator ({member.member_epoch}).")


def _subset(owned, member: ConsumerMember) -> bool:
    if owned is None:
        return False
    for t, ps in owned.items():
        mine = member.assigned.get(t)
        if ps and (mine is None or any(p not in mine for p in ps)):
            return False
    return True


def _steady(shard: Shard, group: ConsumerGroup, req: HeartbeatRequest, now_ms: int, fence: Fence) -> Result | None:
    """The common case, answered without building anything: a converged member whose
    heartbeat changes nothing (KIP-848 partial heartbeat). None: take the general path."""
    m = group.members.get(req.member_id)
    if (
        m is None
        or req.member_epoch != m.member_epoch
        or m.state is not MemberState.STABLE
        or m.member_epoch != group.target_epoch
        or group.group_epoch != group.target_epoch
        or req.client_id != m.client_id
        or req.client_host != m.client_host
        or (req.instance_id is not None and req.instance_id != m.instance_id)
        or (req.rack_id is not None and req.rack_id != m.rack_id)
        or req.rebalance_timeout_ms not in (-1, m.rebalance_timeout_ms)
        or (req.subscribed_topic_regex is not None and (req.subscribed_topic_regex or None) != m.subscribed_topic_regex)
        or (req.server_assignor is not None and req.server_assignor != m.server_assignor)
        or (req.subscribed_topic_names is not None
            and tuple(sorted(set(req.subscribed_topic_names))) != m.subscribed_topic_names)
    ):
        return None
    gid = req.group_id
    if m.classic is not None:
        return None  # a consumer-protocol heartbeat from a classic member converts it: general path
    shard.timer.schedule(("session", gid, m.member_id), now_ms + shard.session_timeout_ms(gid),
                         fence_op(fence, gid, m.member_id))
    if group.regex_counts:
        maybe_schedule_refresh(shard, group, now_ms, can_describe=req.can_describe)  # Kafka checks on every heartbeat
    assignment = None
    if req.is_full:
        assignment = {"topic_partitions": [
            {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(m.assigned.items()) if ps
        ]}
    return Result([], {"error_code": NONE, "error_message": None, "member_id": m.member_id,
                       "member_epoch": m.member_epoch, "heartbeat_interval": shard.heartbeat_interval_ms(gid),
                       "assignment": assignment})


def fence_op(fence: Fence, gid: str, mid: str) -> Callable[[Shard, int], Result]:
    """A timer operation removing the member (its session, or a deadline it missed, ran out)."""
    return lambda s, now: fence(s, gid, mid, now)


def _retarget(shard: Shard, group: ConsumerGroup, members, topics, epoch: int, old_target,
              inherited=None) -> tuple[dict, list[R.CoordinatorRecord]]:
    """The next target assignment at `epoch`, and the records installing it."""
    new = compute_target(group, members, topics, shard.image, shard.config.assignors[0], inherited)
    return new, target_records(group.group_id, old_target, new, epoch)


def member_heartbeat(shard: Shard, req: HeartbeatRequest, now_ms: int, fence: Fence) -> Result:
    """Join (epoch 0) or heartbeat (KIP-848 "Request Handling" steps 3-7), also for a classic
    member's translated JoinGroup (migration.py). Raises CoordinatorError."""
    group = shard.consumer_groups.get(req.group_id)
    if group is not None and req.member_epoch > 0:
        fast = _steady(shard, group, req, now_ms, fence)
        if fast is not None:
            return fast
    if group is None and req.member_epoch != 0:
        raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
    member, predecessor = _find_member(shard, group, req)
    if group is None:
        group = ConsumerGroup(req.group_id)
    joining = member is None
    if joining and predecessor is None and len(group.members) >= shard.config.max_size:
        raise CoordinatorError(GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of "
                               f"{shard.config.max_size} members.")
    if member is not None:
        _check_epoch(member, req)

    # v0: the coordinator names joining members; v1 (KIP-1082): the client does.
    member_id = req.member_id or shard.new_member_id()
    records: list[R.CoordinatorRecord] = []
    gid = req.group_id

    if predecessor is not None:
        # KIP-848 "Static Membership": the new incarnation takes over the old one's
        # assignment; KIP-1251 "Handling of static members": its epochs were reset to 0.
        base = predecessor.with_(member_id=member_id, member_epoch=0, previous_member_epoch=-1)
        records += _removal_records(gid, predecessor.member_id)
    elif member is None:
        base = ConsumerMember(member_id)
    else:
        base = member

    updated = base.with_(
        instance_id=req.instance_id if req.instance_id is not None else base.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else base.rack_id,
        client_id=req.client_id,
        client_host=req.client_host,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else base.rebalance_timeout_ms,
        subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names))) if req.subscribed_topic_names is not None
        else base.subscribed_topic_names,
        subscribed_topic_regex=(req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
        else base.subscribed_topic_regex,
        server_assignor=req.server_assignor if req.server_assignor is not None else base.server_assignor,
        classic=req.classic,
    )

    members = dict(group.members)
    if predecessor is not None:
        members.pop(predecessor.member_id, None)
    members[member_id] = updated

    group_epoch = group.group_epoch
    topics = group.subscribed_topics
    metadata_changed = joining or predecessor is not None or _metadata_differs(base, updated)
    if metadata_changed:
        records.append(R.member_metadata(gid, updated))
    old_rx, new_rx = base.subscribed_topic_regex, updated.subscribed_topic_regex
    rx_records, new_regex = regex_update(group, old_rx, new_rx)
    records += rx_records
    if _bumps(group, base, updated, joining and predecessor is None):
        new_topics = subscribed_topics(members.values(), shard.image, group.resolved_regexes)
        if new_topics != topics:
            records.append(partition_metadata_record(gid, new_topics))
            topics = new_topics
        group_epoch += 1
        records.append(R.group_epoch(gid, group_epoch))

    target_epoch = group.target_epoch
    target = group.target
    if group_epoch > target_epoch:
        inherited = {member_id: predecessor.member_id} if predecessor else None
        old_target = dict(group.target)
        if predecessor is not None:
            old_target[member_id] = old_target.pop(predecessor.member_id, {})
        target, more = _retarget(shard, group, members, topics, group_epoch, old_target, inherited)
        records += more
        target_epoch = group_epoch
    elif predecessor is not None:
        inherited_target = group.target.get(predecessor.member_id, {})
        records.append(R.target_member(gid, member_id, inherited_target))
        target = {**group.target, member_id: inherited_target}

    old_owner = predecessor.member_id if predecessor else None

    def owner_of(t, p):
        o = group.owners.get((t, p))
        return member_id if o is not None and o == old_owner else o

    reconciled = reconcile(updated, target_epoch, target.get(member_id, {}), req.owned, owner_of)
    if joining or predecessor is not None or reconciled is not updated:
        records.append(R.current_assignment(gid, reconciled))

    counts = group.regex_counts
    if old_rx != new_rx:
        counts = dict(counts)
        for rx, delta in ((old_rx, -1), (new_rx, 1)):
            if rx:
                counts[rx] = counts.get(rx, 0) + delta
        counts = {rx: n for rx, n in counts.items() if n > 0}
    maybe_schedule_refresh(shard, group, now_ms, counts, new_regex, req.can_describe)
    arm_timers(shard, gid, reconciled, now_ms, fence)
    if predecessor is not None:
        shard.timer.cancel(("session", gid, predecessor.member_id))
        shard.timer.cancel(("rebalance", gid, predecessor.member_id))

    response: dict[str, Any] = {
        "error_code": NONE, "error_message": None, "member_id": member_id,
        "member_epoch": reconciled.member_epoch,
        # odradek's adaptive interval: short while the member reconciles (consumer/interval.py)
        "heartbeat_interval": interval_ms(shard.config, shard.heartbeat_interval_ms(gid), reconciled, target_epoch),
        "assignment": None,
    }
    if req.is_full or reconciled.assigned != base.assigned or member is None:
        response["assignment"] = {"topic_partitions": [
            {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(reconciled.assigned.items()) if ps
        ]}
    return Result(records, response)


def _bumps(group: ConsumerGroup, base: ConsumerMember, updated: ConsumerMember, joins: bool) -> bool:
    """Whether this request changes the assignment input (KIP-848 "Group Epoch"). A new
    member always bumps. A regex that is not resolved yet adds no topic, so changing to it
    bumps nothing: the member keeps its target until the resolution bumps the epoch, as in
    Kafka (maybeUpdateRegularExpressions bumps only for an already resolved regex)."""
    if joins:
        return True
    old, new = base.subscription_key(), updated.subscription_key()
    if old == new:
        return False
    regex = updated.subscribed_topic_regex
    only_regex = (base.with_(subscribed_topic_regex=regex).subscription_key() == new)
    return not (only_regex and regex and regex not in group.resolved_regexes)


def _metadata_differs(a: ConsumerMember, b: ConsumerMember) -> bool:
    return (a.instance_id, a.rack_id, a.client_id, a.client_host, a.subscribed_topic_names, a.subscribed_topic_regex,
            a.server_assignor, a.rebalance_timeout_ms, a.classic) != (
        b.instance_id, b.rack_id, b.client_id, b.client_host, b.subscribed_topic_names, b.subscribed_topic_regex,
        b.server_assignor, b.rebalance_timeout_ms, b.classic)


def _removal_records(gid: str, member_id: str) -> list[R.CoordinatorRecord]:
    # Order matters for replay: assignment first, metadata last (the member disappears then).
    return [R.current_assignment_tombstone(gid, member_id), R.target_member_tombstone(gid, member_id),
            R.member_tombstone(gid, member_id)]


def session_timeout_ms(shard: Shard, gid: str, member: ConsumerMember) -> int:
    # A classic member keeps the session timeout it joined with (KIP-848 "Online Migration").
    return member.classic.session_timeout_ms if member.classic is not None else shard.session_timeout_ms(gid)


def schedule_session(shard: Shard, gid: str, member: ConsumerMember, now_ms: int, fence: Fence) -> None:
    shard.timer.schedule(("session", gid, member.member_id), now_ms + session_timeout_ms(shard, gid, member),
                         fence_op(fence, gid, member.member_id))


def arm_timers(shard: Shard, gid: str, member: ConsumerMember, now_ms: int, fence: Fence | None = None) -> None:
    """The member's session timer, and its rebalance timer while it must revoke; both run
    `fence` when they fire (`expire_member` when none is given)."""
    fence = fence or expire_member
    mid = member.member_id
    schedule_session(shard, gid, member, now_ms, fence)
    key = ("rebalance", gid, mid)
    # A classic member revokes by rejoining: it has join and sync timers instead (migration.py).
    if member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch != STATIC_LEAVE_EPOCH \
            and member.classic is None:
        # KIP-848: the member has the rebalance timeout to revoke, from when it was asked.
        # A static member that left (-2) revokes nothing: only its session runs.
        if key not in shard.timer:
            epoch = member.member_epoch
            shard.timer.schedule(key, now_ms + max(member.rebalance_timeout_ms, 0),
                                 lambda s, now: _rebalance_timeout(s, gid, mid, epoch, now, fence))
    else:
        shard.timer.cancel(key)


def _rebalance_timeout(shard: Shard, gid: str, mid: str, epoch: int, now_ms: int, fence: Fence) -> Result:
    group = shard.consumer_groups.get(gid)
    member = group.members.get(mid) if group else None
    if member is None or member.state is not MemberState.UNREVOKED_PARTITIONS or member.member_epoch != epoch:
        return Result([], None)
    return fence(shard, gid, mid, now_ms)


def cancel_member_timers(shard: Shard, gid: str, mid: str) -> None:
    for kind in ("session", "rebalance", "classic-join", "classic-sync"):
        shard.timer.cancel((kind, gid, mid))


def expire_member(shard: Shard, gid: str, mid: str, now_ms: int) -> Result:
    """Remove a member from its consumer group: it left (-1), or the coordinator gave up on
    it (session or rebalance timeout, a static member that did not come back). A `Fence`;
    dispatch.fence_member calls it when the group stays a consumer group."""
    group = shard.consumer_groups.get(gid)
    if group is None or mid not in group.members:
        return Result([], None)
    cancel_member_timers(shard, gid, mid)
    return Result(remove_member_records(shard, group, mid), None)


def remove_member_records(shard: Shard, group: ConsumerGroup, *mids: str) -> list[R.CoordinatorRecord]:
    """Remove members, bump the group epoch and install the next target (KIP-848 "Member Failure")."""
    gid = group.group_id
    records = [r for mid in mids for r in _removal_records(gid, mid)]
    records += dropped_regexes(group, (group.members[mid] for mid in mids if mid in group.members))
    members = {k: v for k, v in group.members.items() if k not in mids}
    topics = subscribed_topics(members.values(), shard.image, group.resolved_regexes)
    if topics != group.subscribed_topics:
        records.append(partition_metadata_record(gid, topics))
    epoch = group.group_epoch + 1
    records.append(R.group_epoch(gid, epoch))
    old_target = {k: v for k, v in group.target.items() if k not in mids}
    records += _retarget(shard, group, members, topics, epoch, old_target)[1]
    return records


def leave(shard: Shard, req: HeartbeatRequest, now_ms: int, fence: Fence) -> Result:
    gid = req.group_id
    group = shard.consumer_groups.get(gid)
    if group is None:
        raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
    member = known_member(group, req.member_id, req.instance_id)
    response = {"error_code": NONE, "error_message": None, "member_id": req.member_id,
                "member_epoch": req.member_epoch, "heartbeat_interval": 0, "assignment": None}
    if req.member_epoch == STATIC_LEAVE_EPOCH:
        # KIP-848 "Static Membership": keep the assignment for the session timeout, no epoch
        # bump; KIP-1251: the assignment epochs drop to 0 so the next incarnation may commit.
        if member.member_epoch == STATIC_LEAVE_EPOCH:
            return Result([], response)
        left = member.with_(
            member_epoch=STATIC_LEAVE_EPOCH,
            previous_member_epoch=member.member_epoch,
            assigned={t: dict.fromkeys(ps, 0) for t, ps in member.assigned.items()},
            pending_revocation={t: dict.fromkeys(ps, 0) for t, ps in member.pending_revocation.items()},
        )
        arm_timers(shard, gid, left, now_ms, fence)  # the session runs on; no revocation is awaited
        return Result([R.current_assignment(gid, left)], response)
    return answering(fence(shard, gid, member.member_id, now_ms), response)


def refresh_metadata(shard: Shard, group: ConsumerGroup) -> list[R.CoordinatorRecord]:
    """Bump the epoch when the subscribed topics changed (created, deleted, recreated, grown):
    the names members subscribe to, and the topics their regexes last resolved to (a regex
    learns of a new topic only through its own refresh, regex.py)."""
    topics = subscribed_topics(group.members.values(), shard.image, group.resolved_regexes)
    if topics == group.subscribed_topics:
        return []
    gid = group.group_id
    if not group.members:
        return [partition_metadata_record(gid, topics)]
    epoch = group.group_epoch + 1
    records = [partition_metadata_record(gid, topics), R.group_epoch(gid, epoch)]
    return records + _retarget(shard, group, group.members, topics, epoch, group.target)[1]


def assign_if_needed(shard: Shard, group: ConsumerGroup) -> list[R.CoordinatorRecord]:
    """After a load: a group whose epoch is ahead of its target gets its target now (KIP-848 "Fail Over")."""
    if group.group_epoch <= group.target_epoch or not group.members:
        return []
    return _retarget(shard, group, group.members, group.subscribed_topics, group.group_epoch, group.target)[1]
