"""OffsetCommit into a classic group (offsets.py `_classic_check`, Kafka's ClassicGroup
validateOffsetCommit)."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import (
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from tests.coordinator.classic.helpers import followers, form, join_dynamic, state
from tests.coordinator.harness import Coord

P0 = ("foo", 0)


def test_a_member_commits_at_the_current_generation():
    c = Coord()
    mids, _leader, gen = form(c, 2)
    assert c.commit(member=mids[1], epoch=gen, offsets=(("foo", 0, 5), ("foo", 1, 6))) == {P0: NONE, ("foo", 1): NONE}
    assert c.fetch() == {P0: 5, ("foo", 1): 6}


@pytest.mark.parametrize("delta", [-1, 1])
def test_another_generation_is_illegal(delta):
    c = Coord()
    mids, _leader, gen = form(c, 2)
    assert c.commit(member=mids[0], epoch=gen + delta) == {P0: ILLEGAL_GENERATION}
    assert c.fetch() == {}


def test_an_unknown_member_cannot_commit():
    c = Coord()
    mids, _leader, gen = form(c, 2)
    assert c.commit(member="ghost", epoch=gen) == {P0: UNKNOWN_MEMBER_ID}
    c.leave("g", (mids[1],))
    assert c.commit(member=mids[1], epoch=gen) == {P0: UNKNOWN_MEMBER_ID}
    assert c.fetch() == {}


def test_a_fenced_static_member_cannot_commit():
    c = Coord()
    mids, _leader, gen = form(c, 2, static=("i0", "i1"))
    c.join(instance_id="i1")
    assert c.commit(member=mids[1], epoch=gen, instance_id="i1") == {P0: FENCED_INSTANCE_ID}
    assert c.fetch() == {}


def test_an_unknown_instance_id_is_unknown():
    # Kafka's validateMember: an instance id the group does not know is UNKNOWN_MEMBER_ID,
    # whatever the member id. Regression: the commit check used to accept it.
    c = Coord()
    mids, _leader, gen = form(c, 2)
    assert c.cheartbeat(member=mids[0], generation=gen, instance_id="ghost") == UNKNOWN_MEMBER_ID
    assert c.commit(member=mids[0], epoch=gen, instance_id="ghost") == {P0: UNKNOWN_MEMBER_ID}
    assert c.fetch() == {}


def test_commits_wait_for_the_assignment_during_completing_rebalance():
    c = Coord()
    mids, leader, gen = form(c, 2)
    for m in mids:
        c.join(member=m)
    assert state(c) == "CompletingRebalance"
    assert c.commit(member=mids[0], epoch=gen + 1) == {P0: REBALANCE_IN_PROGRESS}
    c.sync(member=leader, generation=gen + 1, assignments=())
    assert c.commit(member=mids[0], epoch=gen + 1) == {P0: NONE}


def test_a_member_may_commit_while_a_rebalance_is_being_prepared():
    c = Coord()
    mids, leader, gen = form(c, 2)
    c.join(member=leader)
    assert state(c) == "PreparingRebalance"
    f = followers(mids, leader)[0]
    assert c.commit(member=f, epoch=gen) == {P0: NONE}  # its generation is still current


def test_a_commit_without_membership_into_an_empty_group_is_accepted():
    c = Coord()
    mids, _leader, _gen = form(c, 1)
    c.leave("g", (mids[0],))
    assert state(c) == "Empty"
    assert c.commit(member="", epoch=-1) == {P0: NONE}
    assert c.commit(member="whoever", epoch=-1) == {P0: NONE}  # no generation: not a member's commit
    assert c.fetch() == {P0: 10}


def test_a_commit_with_a_generation_into_an_empty_group_is_unknown():
    c = Coord()
    mids, _leader, gen = form(c, 1)
    c.leave("g", (mids[0],))
    assert c.commit(member=mids[0], epoch=gen + 1) == {P0: UNKNOWN_MEMBER_ID}


@pytest.mark.parametrize("phase", ["Stable", "PreparingRebalance", "CompletingRebalance"])
def test_a_commit_without_membership_into_a_non_empty_group_is_refused(phase):
    c = Coord()
    mids, leader, _gen = form(c, 2)
    if phase != "Stable":
        c.join(member=leader)
    if phase == "CompletingRebalance":
        c.join(member=mids[1])
    assert state(c) == phase
    assert c.commit(member="", epoch=-1) == {P0: UNKNOWN_MEMBER_ID}
    assert c.fetch() == {}


def test_a_commit_into_a_group_being_formed():
    c = Coord()
    a, _box = join_dynamic(c)
    assert state(c) == "PreparingRebalance"
    assert c.commit(member="", epoch=-1) == {P0: UNKNOWN_MEMBER_ID}
    assert c.commit(member=a, epoch=0) == {P0: NONE}  # generation 0 is the group's until it forms
