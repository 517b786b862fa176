"""The group model: derived state kept incrementally must equal the definition."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.coordinator.consumer.model import (
    GROUP_TRANSITIONS,
    ConsumerGroup,
    ConsumerMember,
    GroupCondition,
    GroupState,
    IllegalTransition,
    MemberState,
)

T = uuid.UUID(int=1)


def brute_state(g: ConsumerGroup) -> GroupState:
    # KIP-848 "Consumer Group States", straight from the definition.
    if not g.members:
        return GroupState.EMPTY
    if g.group_epoch > g.target_epoch:
        return GroupState.ASSIGNING
    if any(m.member_epoch != g.target_epoch or m.state is not MemberState.STABLE for m in g.members.values()):
        return GroupState.RECONCILING
    return GroupState.STABLE


@pytest.mark.parametrize("seed", range(20))
def test_incremental_state_matches_definition(seed):
    rng = random.Random(seed)
    g = ConsumerGroup("g")
    for _ in range(400):
        op = rng.random()
        mid = f"m{rng.randrange(8)}"
        if op < 0.5:
            g.put_member(ConsumerMember(mid, member_epoch=rng.randrange(4), state=rng.choice(list(MemberState)),
                                        assigned={T: {rng.randrange(6): 1}}))
        elif op < 0.7:
            g.remove_member(mid)
        elif op < 0.85:
            g.set_target_epoch(rng.randrange(4))
        else:
            g.group_epoch = rng.randrange(5)
        g.refresh_state()
        assert g.state is brute_state(g)


# --- the state table, keyed by (state, condition) -------------------------------------------------


def group_with(condition: GroupCondition) -> ConsumerGroup:
    """A group whose replayed records leave it in `condition`."""
    g = ConsumerGroup("g")
    if condition is GroupCondition.DELETED:
        g.dead = True
    elif condition is not GroupCondition.NO_MEMBERS:
        epoch = {GroupCondition.EPOCH_AHEAD: 1, GroupCondition.UNRECONCILED: 0, GroupCondition.RECONCILED: 1}
        g.put_member(ConsumerMember("m", member_epoch=epoch[condition], state=MemberState.STABLE))
        g.set_target_epoch(1)
        g.group_epoch = 2 if condition is GroupCondition.EPOCH_AHEAD else 1
    assert g.condition() is condition
    return g


@pytest.mark.parametrize(("src", "condition"), sorted(GROUP_TRANSITIONS, key=lambda k: (k[0].value, k[1].value)))
def test_every_entry_goes_where_the_table_says(src, condition):
    g = group_with(condition)
    g._state = src
    g.refresh_state()
    assert g.state is GROUP_TRANSITIONS[(src, condition)]


@pytest.mark.parametrize(("src", "condition"), [(s, c) for s in GroupState for c in GroupCondition
                                                if (s, c) not in GROUP_TRANSITIONS])
def test_a_condition_with_no_entry_raises_illegal_transition(src, condition):
    g = group_with(condition)
    g._state = src
    with pytest.raises(IllegalTransition, match="no transition from"):
        g.refresh_state()
    assert g.state is src  # nothing changed


def test_the_table_is_kip_848s_states():
    # A live group goes where its condition says; only an empty group is deleted; Dead is terminal.
    live = (GroupState.EMPTY, GroupState.ASSIGNING, GroupState.RECONCILING, GroupState.STABLE)
    expected = {GroupCondition.NO_MEMBERS: GroupState.EMPTY, GroupCondition.EPOCH_AHEAD: GroupState.ASSIGNING,
                GroupCondition.UNRECONCILED: GroupState.RECONCILING, GroupCondition.RECONCILED: GroupState.STABLE}
    for state in live:
        for condition, new in expected.items():
            assert GROUP_TRANSITIONS[(state, condition)] is new
    assert {(s, c) for s, c in GROUP_TRANSITIONS if c is GroupCondition.DELETED} == {
        (GroupState.EMPTY, GroupCondition.DELETED)}
    assert GROUP_TRANSITIONS[(GroupState.EMPTY, GroupCondition.DELETED)] is GroupState.DEAD
    assert not any(s is GroupState.DEAD for s, _c in GROUP_TRANSITIONS)
