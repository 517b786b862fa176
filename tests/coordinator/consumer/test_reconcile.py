"""The pure reconciliation step (KIP-848 "Member Epoch - Reconciliation of the group")."""

from __future__ import annotations

import uuid

import pytest

from odradek.coordinator.consumer.model import ConsumerMember, MemberState
from odradek.coordinator.consumer.reconcile import reconcile
from odradek.coordinator.errors import CoordinatorError
from odradek.protocol.errors import FENCED_MEMBER_EPOCH

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
FREE = lambda t, p: None


def member(epoch=3, assigned=None, pending=None, state=MemberState.STABLE, prev=2):
    return ConsumerMember("m", member_epoch=epoch, previous_member_epoch=prev, state=state,
                          assigned=assigned or {}, pending_revocation=pending or {})


def test_stable_at_target_is_unchanged():
    m = member(assigned={T: {0: 1}})
    assert reconcile(m, 3, {T: frozenset({0})}, None, FREE) is m


def test_revoke_first_and_stay_at_epoch():
    m = member(assigned={T: {0: 1, 1: 2}})
    out = reconcile(m, 4, {T: frozenset({0, 5})}, None, FREE)
    # Nothing new is handed out while a revocation is pending.
    assert out.state is MemberState.UNREVOKED_PARTITIONS and out.member_epoch == 3
    assert out.assigned == {T: {0: 1}} and out.pending_revocation == {T: {1: 2}}


def test_unrevoked_waits_until_owned_no_longer_has_them():
    m = member(assigned={T: {0: 1}}, pending={T: {1: 2}}, state=MemberState.UNREVOKED_PARTITIONS)
    assert reconcile(m, 4, {T: frozenset({0, 5})}, {T: frozenset({0, 1})}, FREE) is m
    assert reconcile(m, 4, {T: frozenset({0, 5})}, None, FREE) is m
    out = reconcile(m, 4, {T: frozenset({0, 5})}, {T: frozenset({0})}, FREE)
    assert out.state is MemberState.STABLE and out.member_epoch == 4 and out.previous_member_epoch == 3
    assert out.assigned == {T: {0: 1, 5: 4}} and out.pending_revocation == {}  # KIP-1251 epochs


def test_revocation_skipped_when_member_reports_it_already_let_go():
    m = member(assigned={T: {0: 1, 1: 1}})
    out = reconcile(m, 4, {T: frozenset({0})}, {T: frozenset({0})}, FREE)
    assert out.state is MemberState.STABLE and out.member_epoch == 4 and out.assigned == {T: {0: 1}}


def test_partitions_held_by_others_are_withheld():
    m = member(assigned={T: {0: 1}})
    held = {(T, 1): "other"}
    out = reconcile(m, 4, {T: frozenset({0, 1}), U: frozenset({0})}, None, lambda t, p: held.get((t, p)))
    assert out.state is MemberState.UNRELEASED_PARTITIONS and out.member_epoch == 4
    assert out.assigned == {T: {0: 1}, U: {0: 4}}
    # Once released, the next step hands it over.
    out2 = reconcile(out, 4, {T: frozenset({0, 1}), U: frozenset({0})}, None, FREE)
    assert out2.state is MemberState.STABLE and out2.assigned == {T: {0: 1, 1: 4}, U: {0: 4}}


def test_partition_held_by_self_counts_as_free():
    m = member(epoch=0, prev=-1)
    out = reconcile(m, 2, {T: frozenset({0})}, {}, lambda t, p: "m")
    assert out.assigned == {T: {0: 2}} and out.state is MemberState.STABLE


def test_never_revoke_and_assign_in_one_step():
    import random

    rng = random.Random(7)
    for _ in range(500):
        cur = {p: rng.randint(0, 3) for p in rng.sample(range(8), rng.randint(0, 5))}
        target = frozenset(rng.sample(range(8), rng.randint(0, 5)))
        m = member(assigned={T: cur} if cur else {})
        out = reconcile(m, 4, {T: target} if target else {}, None, FREE)
        before = set(cur)
        after = set(out.assigned.get(T, {}))
        assert not (after - before and before - after - set(out.pending_revocation.get(T, {})))
        if out.state is MemberState.UNREVOKED_PARTITIONS:
            assert after <= before and out.member_epoch == 3
        else:
            assert after == set(target) and out.member_epoch == 4


# --- a state with no rule (Kafka's CurrentAssignmentBuilder, case UNKNOWN) -------------------------


@pytest.mark.parametrize("owned", [None, {T: frozenset({0})}, {U: frozenset({3})}])
def test_a_member_in_an_unknown_state_is_fenced(owned):
    # UNKNOWN: a record written by a newer coordinator. Whatever the epochs, the member must
    # abandon its partitions and rejoin; not reporting what it owns (None) counts as owning.
    for epoch, target_epoch in ((3, 3), (3, 4)):
        m = member(epoch=epoch, assigned={T: {0: 1}}, state=MemberState.UNKNOWN)
        with pytest.raises(CoordinatorError) as info:
            reconcile(m, target_epoch, {T: frozenset({0})}, owned, FREE)
        assert info.value.code == FENCED_MEMBER_EPOCH and "unknown state" in info.value.message


def test_a_member_in_an_unknown_state_that_owns_nothing_starts_over_at_the_target_epoch():
    m = member(epoch=3, assigned={T: {0: 1}}, pending={T: {1: 1}}, state=MemberState.UNKNOWN)
    out = reconcile(m, 5, {T: frozenset({0, 2})}, {}, FREE)
    assert out.state is MemberState.STABLE and out.member_epoch == 5 and out.previous_member_epoch == 3
    assert out.assigned == {T: {0: 1, 2: 5}} and out.pending_revocation == {}
    held = {(T, 2): "other"}
    out = reconcile(m, 5, {T: frozenset({0, 2})}, {T: frozenset()}, lambda t, p: held.get((t, p)))
    assert out.state is MemberState.UNRELEASED_PARTITIONS and out.assigned == {T: {0: 1}}


def test_every_known_state_has_a_rule():
    # STABLE, UNREVOKED_PARTITIONS and UNRELEASED_PARTITIONS never fence, whatever is owned.
    for state in (MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS, MemberState.UNRELEASED_PARTITIONS):
        m = member(assigned={T: {0: 1}}, pending={T: {1: 1}} if state is MemberState.UNREVOKED_PARTITIONS else None,
                   state=state)
        for owned in (None, {}, {T: frozenset({0, 1})}):
            assert isinstance(reconcile(m, 4, {T: frozenset({0})}, owned, FREE), ConsumerMember)
