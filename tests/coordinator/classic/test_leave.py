"""LeaveGroup (classic/leave.py): dynamic members by id, static members by instance id
(KIP-345 admin removal), batches with a code per identity, pending members."""

from __future__ import annotations

from odradek.protocol.errors import (
    FENCED_INSTANCE_ID,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from tests.coordinator.classic.helpers import (
    DELAY,
    code,
    followers,
    form,
    join_dynamic,
    log_len,
    state,
    tick,
)
from tests.coordinator.harness import Coord


def rows(resp) -> list[tuple]:
    assert int(resp["error_code"]) == NONE
    return [(r["member_id"], r["group_instance_id"], int(r["error_code"])) for r in resp["members"]]


def test_a_dynamic_member_leaves_and_the_rest_rebalance():
    c = Coord()
    mids, leader, gen = form(c, 3)
    f = followers(mids, leader)[0]
    assert rows(c.leave("g", (f,))) == [(f, None, NONE)]
    g = c.classic()
    assert f not in g.members
    assert state(c) == "PreparingRebalance"
    assert c.cheartbeat(member=f, generation=gen) == UNKNOWN_MEMBER_ID
    assert c.cheartbeat(member=leader, generation=gen) == REBALANCE_IN_PROGRESS
    boxes = [c.join(member=m) for m in mids if m != f]
    assert all(code(b) == NONE for b in boxes)
    assert boxes[0][0]["generation_id"] == gen + 1


def test_when_the_leader_leaves_another_member_leads():
    c = Coord()
    mids, leader, _gen = form(c, 2)
    f = followers(mids, leader)[0]
    c.leave("g", (leader,))
    assert c.classic().leader_id == f
    box = c.join(member=f)
    assert code(box) == NONE and box[0]["leader"] == f


def test_leaving_while_parked_in_join_answers_the_join():
    c = Coord()
    mids, leader, _gen = form(c, 3)
    f1, f2 = followers(mids, leader)
    lb = c.join(member=leader)
    fb = c.join(member=f1)
    assert lb == [] and fb == []  # waiting for f2
    c.leave("g", (leader,))
    assert code(lb) == UNKNOWN_MEMBER_ID
    assert fb == [] and state(c) == "PreparingRebalance"
    c.leave("g", (f2,))  # now everyone left has rejoined
    assert code(fb) == NONE and fb[0]["leader"] == f1
    assert state(c) == "CompletingRebalance"


def test_a_batch_answers_each_identity_and_rebalances_once():
    c = Coord()
    mids, _leader, gen = form(c, 5, static=("s0", "s1", "s2"))
    s0, _s1, s2, d3, d4 = mids
    before = log_len(c)
    resp = c.leave(
        "g",
        (d3,),                  # a dynamic member
        ("ghost",),             # nobody
        ("", "s1"),             # admin removal of a static member
        ("wrong-id", "s2"),     # the instance belongs to another member id
        ("", "nobody"),         # an unknown instance
        (s0, "s0"),             # a static member with its own id
    )
    assert rows(resp) == [
        (d3, None, NONE),
        ("ghost", None, UNKNOWN_MEMBER_ID),
        ("", "s1", NONE),
        ("wrong-id", "s2", FENCED_INSTANCE_ID),
        ("", "nobody", UNKNOWN_MEMBER_ID),
        (s0, "s0", NONE),
    ]
    g = c.classic()
    assert sorted(g.members) == sorted([s2, d4])
    assert g.static_members == {"s2": s2}
    assert state(c) == "PreparingRebalance"
    assert log_len(c) == before  # the rebalance is not persisted
    b2, b4 = c.join(member=s2, instance_id="s2"), c.join(member=d4)
    assert code(b2) == NONE and code(b4) == NONE  # one join phase for the whole batch
    assert b2[0]["generation_id"] == gen + 1


def test_admin_removal_of_a_static_member_by_instance_id():
    c = Coord()
    mids, _leader, gen = form(c, 2, static=("s0", "s1"))
    s1 = mids[1]
    assert rows(c.leave("g", ("", "s1"))) == [("", "s1", NONE)]
    g = c.classic()
    assert s1 not in g.members and "s1" not in g.static_members
    assert state(c) == "PreparingRebalance"
    assert c.cheartbeat(member=s1, generation=gen, instance_id="s1") == UNKNOWN_MEMBER_ID
    # the instance may come back as a new member
    box = c.join(instance_id="s1")
    assert box == [] and g.static_members["s1"] != s1


def test_a_mismatching_member_id_is_fenced_and_stays():
    c = Coord()
    mids, _leader, _gen = form(c, 2, static=("s0", "s1"))
    before = log_len(c)
    assert rows(c.leave("g", (mids[0], "s1"))) == [(mids[0], "s1", FENCED_INSTANCE_ID)]
    assert sorted(c.classic().members) == sorted(mids)
    assert state(c) == "Stable"
    assert log_len(c) == before


def test_nothing_valid_in_a_batch_means_no_rebalance():
    c = Coord()
    form(c, 2)
    assert rows(c.leave("g", ("ghost",), ("", "nobody"))) == [
        ("ghost", None, UNKNOWN_MEMBER_ID), ("", "nobody", UNKNOWN_MEMBER_ID)]
    assert state(c) == "Stable"


def test_leaving_a_group_that_does_not_exist():
    c = Coord()
    assert rows(c.leave("nope", ("a",), ("", "i"))) == [("a", None, UNKNOWN_MEMBER_ID), ("", "i", UNKNOWN_MEMBER_ID)]
    assert c.classic("nope") is None


def test_a_pending_member_leaves():
    c = Coord()
    form(c, 1)
    p = c.join()[0]["member_id"]
    assert c.classic().pending_members == {p}
    assert rows(c.leave("g", (p,))) == [(p, None, NONE)]
    assert c.classic().pending_members == set()
    assert state(c) == "Stable"  # a pending member was never part of a generation
    assert code(c.join(member=p)) == UNKNOWN_MEMBER_ID


def test_a_pending_member_leaving_lets_a_waiting_join_phase_complete():
    c = Coord()
    mids, _leader, _gen = form(c, 2)
    p = c.join()[0]["member_id"]
    boxes = [c.join(member=m) for m in mids]
    assert boxes == [[], []]  # everyone rejoined, but p is expected
    c.leave("g", (p,))
    assert all(code(b) == NONE for b in boxes)
    assert sorted(m["member_id"] for b in boxes for m in b[0]["members"]) == sorted(mids)


def test_a_pending_member_that_expires_lets_a_waiting_join_phase_complete():
    c = Coord()
    mids, _leader, _gen = form(c, 2, session=60_000)
    p = c.join(session=6_000)[0]["member_id"]
    boxes = [c.join(member=m, session=60_000) for m in mids]
    c.advance(5_999)
    assert boxes == [[], []]
    c.advance(1)
    assert all(code(b) == NONE for b in boxes)
    assert p not in c.classic().members


def test_a_new_member_that_leaves_before_the_delay_ends():
    c = Coord()
    a, ba = join_dynamic(c)
    b, bb = join_dynamic(c)
    c.leave("g", (b,))
    assert code(bb) == UNKNOWN_MEMBER_ID
    tick(c, 2 * DELAY - 100)  # b's arrival extended the delay once
    assert ba == []
    tick(c, 100)
    assert code(ba) == NONE
    assert [m["member_id"] for m in ba[0]["members"]] == [a]
