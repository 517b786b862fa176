"""Reconciliation of one member towards its target assignment: a pure function.

Theory of operation (KIP-848 "Member Epoch - Reconciliation of the group"): a member
moves towards its target in three phases. (1) Partitions it holds that are no longer in
its target are revoked: it stays at its epoch in UNREVOKED_PARTITIONS and is told to keep
only current ∩ target, until a heartbeat's owned partitions no longer include any of them.
(2) It then moves to the target epoch. (3) Partitions of its target that another member
still holds are withheld (UNRELEASED_PARTITIONS) and handed over on a later heartbeat,
once their owner has released them. A revocation and an assignment never travel together.

KIP-1251 assignment epochs: a partition the member keeps keeps the epoch it was first
assigned at; a newly assigned partition gets the epoch the member moves to; partitions
pending revocation keep theirs.

`owned` is the member's own report of what it holds (None when the heartbeat did not
say: then nothing is assumed revoked). `owner_of(topic, partition)` names the member
that currently holds a partition, or None when it is free.

Each reconciliation state has its rule (Kafka's CurrentAssignmentBuilder.build switch):
STABLE moves on when the target epoch did; UNREVOKED_PARTITIONS waits for the revocation;
UNRELEASED_PARTITIONS retries the withheld partitions. Any other state (UNKNOWN: a record
written by a newer coordinator) has no rule: the member is fenced (FENCED_MEMBER_EPOCH),
so it abandons its partitions and rejoins, and once it reports owning nothing it starts
over at the target epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from ...protocol.errors import FENCED_MEMBER_EPOCH
from ..errors import CoordinatorError
from .model import ConsumerMember, MemberState, Partitions, TargetPartitions


def _owns_any(owned: Mapping[uuid.UUID, frozenset[int] | set[int]] | None, revoking: Partitions) -> bool:
    if owned is None:
        return True  # the member did not report: assume it still holds them
    for t, ps in revoking.items():
        mine = owned.get(t)
        if mine and any(p in mine for p in ps):
            return True
    return False


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: TargetPartitions,
    owned: Mapping[uuid.UUID, frozenset[int] | set[int]] | None,
    owner_of: Callable[[uuid.UUID, int], str | None],
) -> ConsumerMember:
    """The member's next current assignment (the same object when nothing changes).

    Raises CoordinatorError(FENCED_MEMBER_EPOCH) for a member in a state with no rule."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, target_epoch, target, owned, owner_of)
        return member  # at the target epoch: nothing to do
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # still revoking: no progress until it acknowledges
        return _next(member, target_epoch, target, owned, owner_of)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, target_epoch, target, owned, owner_of)
    # Kafka's CurrentAssignmentBuilder, case UNKNOWN: "the best option is to fence the member
    # to force it to rejoin the group without any partitions and to reconcile it again from
    # scratch". A member that reports owning nothing has done so.
    if owned is None or any(owned.values()):
        raise CoordinatorError(FENCED_MEMBER_EPOCH, f"The consumer group member is in an unknown state ({state!r}). "
                               "The member must abandon all its partitions and rejoin.")
    return _next(member, target_epoch, target, owned, owner_of)


def _next(member, target_epoch, target, owned, owner_of) -> ConsumerMember:
    me = member.member_id
    assigned: Partitions = {}
    revoking: Partitions = {}
    adding: dict[uuid.UUID, list[int]] = {}
    unreleased = False
    for t in set(member.assigned) | set(target):
        current = member.assigned.get(t, {})
        want = target.get(t, frozenset())
        keep = {p: e for p, e in current.items() if p in want}
        if keep:
            assigned[t] = keep
        gone = {p: e for p, e in current.items() if p not in want}
        if gone:
            revoking[t] = gone
        for p in want:
            if p in current:
                continue
            holder = owner_of(t, p)
            if holder is None or holder == me:
                adding.setdefault(t, []).append(p)
            else:
                unreleased = True

    if revoking and _owns_any(owned, revoking):
        # Revoke first and stay at the current epoch (KIP-848: "revoke, then assign").
        return member.with_(
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assigned,
            pending_revocation=revoking,
        )
    for t, ps in adding.items():
        row = dict(assigned.get(t, {}))
        for p in ps:
            row[p] = target_epoch  # KIP-1251: newly assigned at the target epoch
        assigned[t] = row
    new_state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    if (
        new_state is member.state
        and member.member_epoch == target_epoch
        and not member.pending_revocation
        and assigned == member.assigned
    ):
        return member
    return member.with_(
        state=new_state,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch if member.member_epoch != target_epoch else member.previous_member_epoch,
        assigned=assigned,
        pending_revocation={},
    )
