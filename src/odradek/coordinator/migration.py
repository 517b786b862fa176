"""Online migration between classic and consumer groups (KIP-848 "Supporting Online Consumer
Group Upgrade", "Online Migration"), and classic members inside a consumer group.

Theory of operation:
  * Upgrade. A ConsumerGroupHeartbeat joining (epoch 0) a classic group: an Empty classic
    group is simply replaced; a non-empty one whose protocol type is "consumer" becomes a
    consumer group when `group.consumer.migration.policy` allows upgrades and it fits
    `group.consumer.max.size`. The group epoch and every member epoch become the classic
    generation, each member's assignment (decoded from its ConsumerProtocolAssignment) is
    both its current and its target assignment, and its subscription comes from its
    metadata for the selected protocol. Parked JoinGroup/SyncGroup requests get
    REBALANCE_IN_PROGRESS. Otherwise the heartbeat gets GROUP_ID_NOT_FOUND, as in Kafka.
    The conversion is written as its own batch, then the heartbeat runs on the consumer
    group (Kafka writes both in one batch; a heartbeat that then fails leaves the group
    converted, which it would be at the next join anyway).
  * Classic members of a consumer group are driven by the consumer protocol's machinery.
    JoinGroup is translated into a full heartbeat (topics and owned partitions from the
    subscription) and answered with generation = the member epoch after reconciliation
    and no leader, so every classic member is a follower and the coordinator assigns.
    SyncGroup returns the member's current assignment, which excludes partitions it must
    revoke (KIP-848: revocation before assignment): a cooperative client revokes them and
    rejoins, an eager one revoked everything before rejoining. Heartbeat answers
    REBALANCE_IN_PROGRESS while the member is behind the group epoch, must revoke, or
    has partitions released to it, so it rejoins; the member then has its rebalance
    timeout to rejoin and to sync, or it is fenced.
  * Downgrade. When the last consumer-protocol member leaves (-1) or is fenced and the
    others are classic members, the policy allows downgrades and they fit
    `group.max.size`, the group becomes a Stable classic group at generation = group
    epoch with each member's target assignment, and a rebalance starts so the classic
    members rejoin under the classic protocol. When instead a classic static member takes
    the place of the last consumer-protocol member (same group.instance.id, as in a
    rolling downgrade of static members), the group becomes classic with no rebalance:
    the newcomer syncs at generation = its epoch and gets its predecessor's assignment.
    Both downgrades are records first: the consumer group's tombstones and the classic
    group's record, whose replay makes the classic group (shard.py); its heartbeat timers
    and the rebalance follow as a `Then`. Kafka's convertToClassicGroup puts the group in
    place itself and writes one batch; here the rebalance is a second step, which writes
    nothing (prepareRebalance writes only when the join completes). The replayed group
    holds each member's selected protocol only, as a group loaded after a restart does in
    Kafka and here; Kafka's converted group keeps all until the members rejoin.

Who calls what: coordinator/dispatch.py looks at the group's type and sends here a
ConsumerGroupHeartbeat for a classic group (`upgrade`), the classic requests of a
consumer group's classic members (`join`, `sync`, `classic_heartbeat`, `leave`), and the
removal of a member whose removal converts the group (`downgrade_applies`, `downgrade`).
This module imports only the public handlers of classic/ and consumer/, and they never
import it. The timers it arms (a classic member's join and sync deadlines, a converted
member's session) run the `fence` function dispatch passes in, so that a member expiring
later may still downgrade the group.
"""

from __future__ import annotations

from ..protocol.errors import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
)
from . import records as R
from .classic.join import JoinRequest, validate
from .classic.leave import LeaveIdentity
from .classic.model import ClassicGroup, ClassicMember, ClassicState, Reply
from .classic.rebalance import (
    error_join,
    prepare_rebalance,
    schedule_heartbeat,
    sync_error,
)
from .classic.sync import ClassicHeartbeat, SyncRequest, check_generation
from .consumer.assignment import partition_metadata_record, subscribed_topics
from .consumer.heartbeat import (
    Fence,
    HeartbeatRequest,
    arm_timers,
    cancel_member_timers,
    fence_op,
    member_heartbeat,
    remove_member_records,
    schedule_session,
)
from .consumer.model import ClassicMeta, ConsumerGroup, ConsumerMember, MemberState
from .consumer.regex import dropped_regexes
from .consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    metadata_version,
)
from .errors import CoordinatorError
from .members import known_member
from .records import RecordError
from .shard import Result, Shard, Then

CONSUMER = "consumer"


class UpgradeRefused(Exception):
    """A non-empty classic group that cannot become a consumer group right now (its
    members' assignments are not settled, or their metadata cannot be read). The
    heartbeat gets GROUP_ID_NOT_FOUND, as in Kafka, and may try again later."""


# --- upgrade: classic -> consumer --------------------------------------------------------------


def upgrade(shard: Shard, req: HeartbeatRequest, now_ms: int, fence: Fence) -> list[R.CoordinatorRecord]:
    """The records converting the classic group of `req` into a consumer group, for a
    ConsumerGroupHeartbeat (already validated) joining it; raises CoordinatorError when it
    may not. The caller runs the heartbeat once they are written (dispatch.py)."""
    gid = req.group_id
    classic = shard.classic_groups[gid]
    if req.member_epoch != 0:
        raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Group {gid} is a classic group.")
    if classic.is_(ClassicState.EMPTY) and not classic.members:
        records = [R.classic_group_tombstone(gid)]  # an idle classic group is simply replaced
    else:
        cfg = shard.config
        if not cfg.allows_upgrade() or classic.protocol_type != CONSUMER or len(classic.members) > cfg.max_size:
            raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Classic group {gid} cannot be upgraded to a consumer group "
                                   f"(migration policy {cfg.migration_policy}, protocol type {classic.protocol_type!r}, "
                                   f"{len(classic.members)} members).")
        if req.instance_id is not None and req.instance_id in classic.static_members:
            # The heartbeat that follows the conversion would refuse this member (its
            # instance's classic incarnation has not left); refuse before converting, so the
            # group is not converted by a join that then fails and left with the classic
            # target, which covers nothing a rebalance under way would have assigned
            # (simulator, seed 673). Kafka converts and joins in one atomic operation.
            raise CoordinatorError(UNRELEASED_INSTANCE_ID, f"Static member {classic.static_members[req.instance_id]} "
                                   f"with instance id {req.instance_id} is present in the classic group.")
        try:
            records = _conversion_records(shard, classic, now_ms, fence)
        except UpgradeRefused as exc:
            raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Classic group {gid} cannot be upgraded: {exc}") from None
    return records


def _names_to_ids(shard: Shard, parts: dict[str, frozenset[int]]) -> dict:
    out = {}
    for name, ps in parts.items():
        meta = shard.image.topics.get(name)
        if meta is not None and ps:
            out[meta.topic_id] = frozenset(p for p in ps if p < meta.partitions)
    return out


def _ids_to_names(shard: Shard, parts) -> dict[str, list[int]]:
    out = {}
    for t, ps in parts.items():
        meta = shard.image.by_id(t)
        if meta is not None and ps:
            out[meta.name] = sorted(ps)
    return out


def _converted_member(shard: Shard, classic: ClassicGroup, m: ClassicMember) -> ConsumerMember:
    """The consumer-group member a classic member becomes (Kafka's fromClassicGroup), or
    UpgradeRefused while what it holds is not settled."""
    gen = classic.generation
    meta = m.metadata(classic.protocol_name) if classic.protocol_name else (m.protocols[0][1] if m.protocols else None)
    try:
        sub = decode_subscription(meta or b"")
        if not m.assignment:
            # Between generations (a rebalance reset the assignments, or the first one has
            # not completed) nobody knows what a cooperative member still holds: converting
            # would risk handing its partitions to someone else. Kafka refuses the upgrade
            # too (GROUP_ID_NOT_FOUND).
            raise UpgradeRefused(f"member {m.member_id} has no assignment yet (the group is between "
                                 "generations); retry once its rebalance completes")
        assigned = _names_to_ids(shard, decode_assignment(m.assignment))
    except RecordError as exc:  # Kafka: a SchemaException refuses the upgrade (GROUP_ID_NOT_FOUND)
        raise UpgradeRefused(str(exc)) from None
    owned = _names_to_ids(shard, sub.owned)
    if any(ps - assigned.get(t, frozenset()) for t, ps in owned.items()):
        # KIP-429: a cooperative member revokes what its new assignment lacks after the
        # SyncGroup, then rejoins; until then it still consumes those partitions. The
        # conversion takes the assignment as what a member holds, so the consumer group
        # would hand them on at once (the simulator caught a second owner committing
        # behind the first, seed 13). Kafka's fromClassicGroup has the same gap.
        raise UpgradeRefused(f"member {m.member_id} is still revoking partitions (a cooperative rebalance is "
                             "under way); retry once it completes")
    return ConsumerMember(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=sub.rack_id, client_id=m.client_id,
        client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(sub.topics))),
        rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=gen, previous_member_epoch=gen,
        state=MemberState.STABLE, assigned={t: dict.fromkeys(ps, gen) for t, ps in assigned.items() if ps},
        classic=ClassicMeta(m.session_timeout_ms, m.protocols),
    )


def _conversion_records(shard: Shard, classic: ClassicGroup, now_ms: int, fence: Fence) -> list[R.CoordinatorRecord]:
    gid = classic.group_id
    gen = classic.generation
    members = [_converted_member(shard, classic, m) for m in classic.members.values()]
    # Parked classic requests: their members rejoin through the consumer group.
    for m in classic.members.values():
        if m.join_reply is not None:
            shard.respond(m.join_reply, error_join(REBALANCE_IN_PROGRESS, m.member_id))
        if m.sync_reply is not None:
            shard.respond(m.sync_reply, sync_error(REBALANCE_IN_PROGRESS))
        shard.timer.cancel(("classic-session", gid, m.member_id))
    for key in (("classic-join", gid), ("classic-sync", gid)):
        shard.timer.cancel(key)
    records = [R.classic_group_tombstone(gid)]
    records += [R.member_metadata(gid, m) for m in members]
    records.append(partition_metadata_record(gid, subscribed_topics(members, shard.image)))
    records.append(R.group_epoch(gid, gen))
    records += [R.target_member(gid, m.member_id, {t: ps.keys() for t, ps in m.assigned.items()}) for m in members]
    records.append(R.target_epoch(gid, gen))
    records += [R.current_assignment(gid, m) for m in members]
    for m in members:
        arm_timers(shard, gid, m, now_ms, fence)
    return records


# --- classic members of a consumer group ----------------------------------------------------------


def _join_error(shard: Shard, reply: Reply, code: int, member_id: str = "") -> Result:
    shard.respond(reply, error_join(code, member_id))
    return Result([], None)


def join(shard: Shard, group: ConsumerGroup, req: JoinRequest, reply: Reply, now_ms: int, fence: Fence) -> Result:
    """JoinGroup for a consumer group with members (Kafka's classicGroupJoinToConsumerGroup)."""
    gid = group.group_id
    try:
        validate(shard, req)  # the same request checks as a classic group's JoinGroup
    except CoordinatorError as exc:
        return _join_error(shard, reply, exc.code, req.member_id)
    if req.protocol_type != CONSUMER or not req.protocols or not _supports(group, req):
        return _join_error(shard, reply, INCONSISTENT_GROUP_PROTOCOL, req.member_id)
    mid = req.member_id
    if not mid:
        mid = shard.new_member_id()
        if req.instance_id is None and req.version >= 4:
            group.pending_classic.add(mid)  # KIP-394: the id it must come back with
            return _join_error(shard, reply, MEMBER_ID_REQUIRED, mid)
    elif req.instance_id is not None:
        static = group.member_by_instance(req.instance_id)
        if static is None:
            return _join_error(shard, reply, UNKNOWN_MEMBER_ID, mid)
        if static.member_id != mid:
            return _join_error(shard, reply, FENCED_INSTANCE_ID, mid)
    elif mid in group.pending_classic:
        group.pending_classic.discard(mid)
    elif mid not in group.members or group.members[mid].classic is None:
        # A dynamic member's id must be one we handed out (MEMBER_ID_REQUIRED) or name a
        # classic member still in the group, as a classic group requires. An expired member
        # must not come back under its old id: it still believes it owns its old
        # partitions, and the client drops them (onPartitionsLost, no commit) only on
        # UNKNOWN_MEMBER_ID. Accepted, it revoked them after its new SyncGroup and its
        # revocation commit, at an epoch KIP-1251 accepts for partitions a member does not
        # hold, overwrote the current owner's offsets (simulator, seed 22). Kafka's
        # classicGroupJoinToConsumerGroup creates the member instead; see SIMULATION.md.
        return _join_error(shard, reply, UNKNOWN_MEMBER_ID, mid)
    try:
        sub = decode_subscription(req.protocols[0][1])
    except RecordError as exc:
        shard.respond(reply, {**error_join(INCONSISTENT_GROUP_PROTOCOL, mid), "error_message": str(exc)})
        return Result([], None)
    existing = group.members.get(mid)
    hreq = HeartbeatRequest(
        group_id=gid, member_id=mid, member_epoch=existing.member_epoch if existing and existing.member_epoch > 0 else 0,
        instance_id=req.instance_id, rack_id=sub.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=sub.topics, subscribed_topic_regex="", owned=_names_to_ids(shard, sub.owned),
        client_id=req.client_id, client_host=req.client_host, classic=ClassicMeta(req.session_timeout_ms, req.protocols),
    )
    try:
        result = member_heartbeat(shard, hreq, now_ms, fence)
    except CoordinatorError as exc:
        return _join_error(shard, reply, exc.code, mid)
    shard.timer.cancel(("classic-join", gid, mid))
    shard.timer.schedule(("classic-sync", gid, mid), now_ms + req.rebalance_timeout_ms,
                         fence_op(fence, gid, mid))  # did not sync within its rebalance timeout
    shard.respond(reply, {
        "error_code": NONE, "generation_id": result.response["member_epoch"], "protocol_type": CONSUMER,
        "protocol_name": req.protocols[0][0], "leader": "", "skip_assignment": False, "member_id": mid, "members": [],
    })
    if req.instance_id is not None and not req.member_id:
        # It may have replaced the last consumer-protocol member: then the group downgrades.
        return Result(result.records, Then(lambda s, now: _downgrade_if_all_classic(s, gid, now)))
    return Result(result.records, None)


def _supports(group: ConsumerGroup, req: JoinRequest) -> bool:
    names = {n for n, _ in req.protocols}
    classic = [m for m in group.members.values() if m.classic is not None and m.member_id != req.member_id]
    if not classic:
        return True
    common = set.intersection(*({n for n, _ in m.classic.protocols} for m in classic))
    return bool(names & common)


def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
    member = known_member(group, member_id, instance_id)
    if member.classic is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a classic member of group {group.group_id}.")
    return member


def _rebalance_needed(shard: Shard, group: ConsumerGroup, member: ConsumerMember, now_ms: int, fence: Fence) -> bool:
    needed = (
        member.member_epoch < group.group_epoch
        or member.state is MemberState.UNREVOKED_PARTITIONS
        or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member))
    )
    key = ("classic-join", group.group_id, member.member_id)
    if needed and key not in shard.timer:
        gid, mid = group.group_id, member.member_id
        # it must rejoin within its rebalance timeout, or it is fenced
        shard.timer.schedule(key, now_ms + max(member.rebalance_timeout_ms, 0), fence_op(fence, gid, mid))
    return needed


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """True while some partition of its target is still held by another member."""
    for t, ps in group.target.get(member.member_id, {}).items():
        mine = member.assigned.get(t, {})
        for p in ps:
            if p not in mine and group.owners.get((t, p)) not in (None, member.member_id):
                return True
    return False


def sync(shard: Shard, group: ConsumerGroup, req: SyncRequest, reply: Reply, now_ms: int, fence: Fence) -> Result:
    try:
        member = _classic_member(group, req.member_id, req.instance_id)
        check_generation(req.generation, member.member_epoch)
        if (req.protocol_type is not None and req.protocol_type != CONSUMER) or (
                req.protocol_name is not None and req.protocol_name != member.classic.protocols[0][0]):
            raise CoordinatorError(INCONSISTENT_GROUP_PROTOCOL, "The protocol type or name does not match the member's.")
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            _rebalance_needed(shard, group, member, now_ms, fence)
            raise CoordinatorError(REBALANCE_IN_PROGRESS, "The group epoch moved: rejoin.")
    except CoordinatorError as exc:
        shard.respond(reply, sync_error(exc.code))
        return Result([], None)
    gid = group.group_id
    shard.timer.cancel(("classic-sync", gid, member.member_id))
    schedule_session(shard, gid, member, now_ms, fence)
    names = _ids_to_names(shard, member.assigned)
    version = metadata_version(member.classic.protocols[0][1] if member.classic.protocols else None)
    shard.respond(reply, {"error_code": NONE, "protocol_type": req.protocol_type, "protocol_name": req.protocol_name,
                          "assignment": encode_assignment(names, version)})
    return Result([], None)


def classic_heartbeat(shard: Shard, group: ConsumerGroup, req: ClassicHeartbeat, now_ms: int,
                      fence: Fence) -> Result:
    try:
        member = _classic_member(group, req.member_id, req.instance_id)
        check_generation(req.generation, member.member_epoch)
    except CoordinatorError as exc:
        return Result([], {"error_code": exc.code})
    schedule_session(shard, group.group_id, member, now_ms, fence)
    if _rebalance_needed(shard, group, member, now_ms, fence):
        return Result([], {"error_code": REBALANCE_IN_PROGRESS})
    return Result([], {"error_code": NONE})


def leave(shard: Shard, group: ConsumerGroup, identities: tuple[LeaveIdentity, ...], now_ms: int) -> Result:
    rows, leaving = [], []
    for ident in identities:
        code = NONE
        try:
            if ident.instance_id is not None and not ident.member_id:
                member = group.member_by_instance(ident.instance_id)  # admin removal of a static member
                if member is None or member.classic is None:
                    raise CoordinatorError(UNKNOWN_MEMBER_ID)
            else:
                member = _classic_member(group, ident.member_id, ident.instance_id)
            leaving.append(member.member_id)
        except CoordinatorError as exc:
            code = exc.code
        rows.append({"member_id": ident.member_id, "group_instance_id": ident.instance_id, "error_code": code})
    records = []
    if leaving:
        for mid in leaving:
            cancel_member_timers(shard, group.group_id, mid)
        records = remove_member_records(shard, group, *leaving)
    return Result(records, {"error_code": NONE, "members": rows})


# --- downgrade: consumer -> classic --------------------------------------------------------------


def downgrade_applies(shard: Shard, group: ConsumerGroup, leaving_mid: str) -> bool:
    """Does removing `leaving_mid` convert the group to a classic one? Yes when it is the
    last consumer-protocol member, the others are classic members, and the policy and
    `group.max.size` allow it (Kafka's validateOnlineDowngradeWithFencedMembers)."""
    leaving = group.members.get(leaving_mid)
    others = [m for m in group.members.values() if m.member_id != leaving_mid]
    if leaving is None or leaving.classic is not None or not others or any(m.classic is None for m in others):
        return False
    return shard.config.allows_downgrade() and len(others) <= shard.config.classic_max_size


def downgrade(shard: Shard, group: ConsumerGroup, leaving_mid: str, now_ms: int) -> Result:
    """Remove `leaving_mid` by converting the group to a classic group of the others, which
    rebalances (`downgrade_applies` said so)."""
    gid = group.group_id
    cancel_member_timers(shard, gid, leaving_mid)
    others = [m for m in group.members.values() if m.member_id != leaving_mid]
    # The group's regex resolutions go first, while it still exists (Kafka's
    # createGroupTombstoneRecords includes them).
    records = dropped_regexes(group, group.members.values()) + _to_classic(shard, group, others, now_ms)
    # The classic members learn of the new generation by REBALANCE_IN_PROGRESS and rejoin.
    return Result(records, Then(lambda s, now: _start_classic(s, gid, now, rebalance=True)))


def _downgrade_if_all_classic(shard: Shard, gid: str, now_ms: int) -> Result:
    """A classic static member took the place of the last consumer-protocol member (KIP-345
    replacement during a rolling downgrade): the group becomes classic, with no rebalance."""
    group = shard.consumer_groups.get(gid)
    if group is None or not group.members or any(m.classic is None for m in group.members.values()):
        return Result([], None)
    if not shard.config.allows_downgrade() or len(group.members) > shard.config.classic_max_size:
        return Result([], None)
    records = _to_classic(shard, group, list(group.members.values()), now_ms)
    return Result(records, Then(lambda s, now: _start_classic(s, gid, now, rebalance=False)))


def _to_classic(shard: Shard, group: ConsumerGroup, others: list[ConsumerMember], now_ms: int) -> list[R.CoordinatorRecord]:
    """The records replacing the consumer group by a Stable classic group made of `others`.
    Nothing changes until they are replayed: the consumer group's tombstones remove it and
    the classic group's record creates the classic one (Shard._replay_classic)."""
    gid = group.group_id
    records = [R.current_assignment_tombstone(gid, mid) for mid in group.members]
    records += [R.target_member_tombstone(gid, mid) for mid in group.target]
    records.append(R.target_epoch_tombstone(gid))
    records += [R.member_tombstone(gid, mid) for mid in group.members]
    records += [R.partition_metadata_tombstone(gid), R.group_tombstone(gid)]
    # The record is written as Kafka's ClassicGroup.fromConsumerGroup builds the group:
    # Stable at the group epoch, the protocol all members support, each member's target
    # assignment encoded for the version of the subscription it sent. This group object
    # only builds the record; the shard's group is the one replay makes of it.
    classic = ClassicGroup(gid, now_ms, state=ClassicState.STABLE)
    classic.generation = group.group_epoch
    classic.protocol_type = CONSUMER
    for m in others:
        classic.add(ClassicMember(
            member_id=m.member_id, instance_id=m.instance_id, client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms, session_timeout_ms=m.classic.session_timeout_ms,
            protocol_type=CONSUMER, protocols=m.classic.protocols,
        ))
    classic.protocol_name = classic.select_protocol()
    for m in others:
        cm = classic.members[m.member_id]
        cm.assignment = encode_assignment(_ids_to_names(shard, group.target.get(m.member_id, {})),
                                          metadata_version(cm.metadata(classic.protocol_name)))
    records.append(R.classic_group(classic))
    for mid in group.members:
        cancel_member_timers(shard, gid, mid)
    return records


def _start_classic(shard: Shard, gid: str, now_ms: int, rebalance: bool) -> Result:
    """After the conversion's records are replayed: the classic group's heartbeat timers,
    and for a downgrade its rebalance (Kafka's convertToClassicGroup, then prepareRebalance)."""
    classic = shard.classic_groups[gid]
    for cm in classic.members.values():
        schedule_heartbeat(shard, classic, cm, now_ms)
    return Result(prepare_rebalance(shard, classic, now_ms) if rebalance else [], None)
