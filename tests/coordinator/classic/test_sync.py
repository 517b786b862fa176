"""SyncGroup and Heartbeat (classic/sync.py): distributing the leader's assignment, the
checks in Kafka's order, and what a rebalance does to parked syncs."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import (
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from tests.coordinator.classic.helpers import (
    classic_records,
    code,
    followers,
    form,
    join_dynamic,
    log_len,
    state,
)
from tests.coordinator.harness import Coord


def completing(c: Coord, n: int = 3, **kw):
    """A group of n members that has just completed a join phase (CompletingRebalance):
    returns (member ids, leader, generation)."""
    mids, leader, gen = form(c, n, **kw)
    boxes = [c.join(member=m, protocols=(("range", b"v2"),)) for m in mids]
    assert all(code(b) == NONE for b in boxes)
    assert state(c) == "CompletingRebalance"
    return mids, leader, gen + 1


def test_the_leaders_assignment_goes_to_the_parked_followers():
    c = Coord()
    mids, leader, gen = completing(c)
    fs = followers(mids, leader)
    parked = {f: c.sync(member=f, generation=gen) for f in fs}
    assert all(box == [] for box in parked.values())
    assert state(c) == "CompletingRebalance"
    before = log_len(c)
    lb = c.sync(member=leader, generation=gen, assignments=[(m, m.encode()) for m in mids])
    assert code(lb) == NONE and lb[0]["assignment"] == leader.encode()
    for f, box in parked.items():
        assert code(box) == NONE
        assert box[0]["assignment"] == f.encode()
        assert (box[0]["protocol_type"], box[0]["protocol_name"]) == ("consumer", "range")
    assert state(c) == "Stable"
    # the completed rebalance is persisted, with the assignment
    assert log_len(c) == before + 1
    v = classic_records(c)[-1].value
    assert v["generation"] == gen and v["leader"] == leader
    assert {m["member_id"]: m["assignment"] for m in v["members"]} == {m: m.encode() for m in mids}
    assert {m["subscription"] for m in v["members"]} == {b"v2"}


def test_members_the_leader_left_out_get_an_empty_assignment():
    c = Coord()
    mids, leader, gen = completing(c)
    f1, f2 = followers(mids, leader)
    b1 = c.sync(member=f1, generation=gen)
    c.sync(member=leader, generation=gen, assignments=[(leader, b"L"), (f2, b"F2"), ("ghost", b"G")])
    assert code(b1) == NONE and b1[0]["assignment"] == b""
    g = c.classic()
    assert {m: g.members[m].assignment for m in mids} == {leader: b"L", f1: b"", f2: b"F2"}
    assert "ghost" not in g.members


def test_a_new_assignment_replaces_the_old_one():
    c = Coord()
    mids, leader, gen = form(c, 2)  # assignments a0, a1
    for m in mids:
        c.join(member=m, protocols=(("range", b"v2"),))
    c.sync(member=leader, generation=gen + 1, assignments=[(leader, b"only-me")])
    f = followers(mids, leader)[0]
    assert c.sync(member=f, generation=gen + 1)[0]["assignment"] == b""


def test_a_sync_in_a_stable_group_returns_the_stored_assignment():
    c = Coord()
    mids, leader, gen = completing(c)
    c.sync(member=leader, generation=gen, assignments=[(m, m.encode()) for m in mids])
    for f in followers(mids, leader):
        box = c.sync(member=f, generation=gen)  # after the leader: answered at once
        assert code(box) == NONE and box[0]["assignment"] == f.encode()
    # the leader syncing again does not reassign
    again = c.sync(member=leader, generation=gen, assignments=[(m, b"other") for m in mids])
    assert again[0]["assignment"] == leader.encode()
    assert c.classic().members[followers(mids, leader)[0]].assignment != b"other"


@pytest.mark.parametrize("delta", [-1, 1])
def test_another_generation_is_illegal(delta):
    c = Coord()
    mids, leader, gen = completing(c)
    f = followers(mids, leader)[0]
    box = c.sync(member=f, generation=gen + delta)
    assert code(box) == ILLEGAL_GENERATION
    assert c.cheartbeat(member=f, generation=gen + delta) == ILLEGAL_GENERATION
    lb = c.sync(member=leader, generation=gen + delta, assignments=[(m, b"x") for m in mids])
    assert code(lb) == ILLEGAL_GENERATION
    assert state(c) == "CompletingRebalance"  # the leader's bad sync assigned nothing


def test_unknown_members_and_groups():
    c = Coord()
    _mids, leader, gen = form(c, 2)
    assert code(c.sync(member="ghost", generation=gen)) == UNKNOWN_MEMBER_ID
    assert c.cheartbeat(member="ghost", generation=gen) == UNKNOWN_MEMBER_ID
    assert code(c.sync(group="nope", member=leader, generation=gen)) == UNKNOWN_MEMBER_ID
    assert c.cheartbeat(group="nope", member=leader, generation=gen) == UNKNOWN_MEMBER_ID


def test_an_unknown_member_is_reported_before_a_bad_generation():
    c = Coord()
    form(c, 2)
    assert code(c.sync(member="ghost", generation=99)) == UNKNOWN_MEMBER_ID


def test_sync_while_preparing_a_rebalance_is_told_to_rejoin():
    c = Coord()
    mids, leader, gen = form(c, 2)
    c.join(member=leader)  # the leader asks for a rebalance
    assert state(c) == "PreparingRebalance"
    f = followers(mids, leader)[0]
    assert code(c.sync(member=f, generation=gen)) == REBALANCE_IN_PROGRESS
    assert c.cheartbeat(member=f, generation=gen) == REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("trigger", ["changed metadata", "new member", "a member leaves"])
def test_followers_parked_in_sync_must_rejoin_when_a_rebalance_starts(trigger):
    c = Coord()
    mids, leader, gen = completing(c)
    f1, f2 = followers(mids, leader)
    b1 = c.sync(member=f1, generation=gen)
    assert b1 == []
    if trigger == "changed metadata":
        c.join(member=f2, protocols=(("range", b"v3"),))
    elif trigger == "new member":
        join_dynamic(c)
    else:
        c.leave("g", (f2,))
    assert state(c) == "PreparingRebalance"
    assert code(b1) == REBALANCE_IN_PROGRESS
    # nothing from the abandoned generation survives
    assert all(m.assignment == b"" for m in c.classic().members.values())
    # the leader's assignment for the dead generation is refused
    lb = c.sync(member=leader, generation=gen, assignments=[(m, b"x") for m in mids])
    assert code(lb) == REBALANCE_IN_PROGRESS


def test_protocol_type_and_name_must_match_when_given():
    c = Coord()
    mids, leader, gen = completing(c)
    f = followers(mids, leader)[0]
    assert code(c.sync(member=f, generation=gen, protocol_type="connect")) == INCONSISTENT_GROUP_PROTOCOL
    assert code(c.sync(member=f, generation=gen, protocol_name="rr")) == INCONSISTENT_GROUP_PROTOCOL
    box = c.sync(member=f, generation=gen, protocol_type="consumer", protocol_name="range")
    assert box == []  # consistent: parked for the leader


def test_a_second_sync_from_a_parked_member_replaces_the_first():
    c = Coord()
    mids, leader, gen = completing(c)
    f = followers(mids, leader)[0]
    first = c.sync(member=f, generation=gen)
    second = c.sync(member=f, generation=gen)
    assert code(first) == UNKNOWN_MEMBER_ID
    c.sync(member=leader, generation=gen, assignments=[(f, b"F")])
    assert code(second) == NONE and second[0]["assignment"] == b"F"


def test_heartbeats_during_completing_rebalance_and_stable_are_fine():
    c = Coord()
    mids, leader, gen = completing(c)
    assert all(c.cheartbeat(member=m, generation=gen) == NONE for m in mids)
    c.sync(member=leader, generation=gen, assignments=[])
    assert all(c.cheartbeat(member=m, generation=gen) == NONE for m in mids)
