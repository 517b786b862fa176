"""The group model: derived state kept incrementally must equal the definition."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.coordinator.consumer.model import (
    ConsumerGroup,
    ConsumerMember,
    GroupState,
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
