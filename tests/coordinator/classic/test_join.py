"""JoinGroup (classic/join.py): member ids (KIP-394), validation, group size, and how a
known member's rejoin is answered in each state."""

from __future__ import annotations

import pytest

from odradek.coordinator.classic.model import ClassicState
from odradek.protocol.errors import (
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from tests.coordinator.classic.helpers import (
    DELAY,
    cfg,
    code,
    followers,
    form,
    join_dynamic,
    log_len,
    state,
)
from tests.coordinator.harness import Coord

S = ClassicState


# --- member ids (KIP-394) -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5, 9])
def test_a_dynamic_member_from_v4_is_told_member_id_required(version):
    c = Coord()
    box = c.join(version=version)
    assert code(box) == MEMBER_ID_REQUIRED
    mid = box[0]["member_id"]
    assert mid.startswith("client-")  # "<client id>-<id>"
    g = c.classic()
    assert g.pending_members == {mid}
    assert g.members == {} and g.is_(S.EMPTY)
    # Coming back with the id makes it a member (parked in the join phase).
    again = c.join(member=mid, version=version)
    assert again == []
    assert mid in g.members and g.pending_members == set()
    assert g.is_(S.PREPARING_REBALANCE)


def test_each_member_id_required_round_hands_out_a_fresh_id():
    c = Coord()
    a = c.join()[0]["member_id"]
    b = c.join()[0]["member_id"]
    assert a != b
    assert c.classic().pending_members == {a, b}


def test_a_pending_member_is_forgotten_after_its_session_timeout():
    c = Coord()
    mid = c.join(session=8_000)[0]["member_id"]
    c.advance(7_999)
    assert mid in c.classic().pending_members
    c.advance(1)
    assert c.classic().pending_members == set()
    late = c.join(member=mid, session=8_000)
    assert code(late) == UNKNOWN_MEMBER_ID
    assert c.classic().members == {}


def test_a_pending_member_that_comes_back_in_time_is_not_expired_later():
    c = Coord()
    mid = c.join(session=8_000)[0]["member_id"]
    c.advance(5_000)
    box = c.join(member=mid, session=8_000)
    c.advance(DELAY)
    assert code(box) == NONE
    c.advance(3_100)  # past the pending member's original deadline
    assert mid in c.classic().members


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_before_v4_a_dynamic_member_joins_at_once(version):
    c = Coord()
    box = c.join(version=version)
    assert box == []  # parked in the join phase, no MEMBER_ID_REQUIRED round
    g = c.classic()
    assert len(g.members) == 1 and g.pending_members == set()
    c.advance(DELAY)
    assert code(box) == NONE
    assert box[0]["member_id"] in g.members
    assert box[0]["leader"] == box[0]["member_id"]
    assert box[0]["generation_id"] == 1


def test_a_static_member_skips_member_id_required():
    c = Coord()
    box = c.join(instance_id="i-1", version=5)
    assert box == []
    g = c.classic()
    mid = g.static_members["i-1"]
    assert mid.startswith("i-1-")  # "<instance id>-<id>"
    assert g.pending_members == set()
    c.advance(DELAY)
    assert code(box) == NONE and box[0]["member_id"] == mid


# --- validation -------------------------------------------------------------------------------


def test_an_empty_group_id_is_invalid():
    c = Coord()
    box = c.join(group="")
    assert code(box) == INVALID_GROUP_ID


@pytest.mark.parametrize(("session", "expected"), [
    (5_999, INVALID_SESSION_TIMEOUT),
    (6_000, MEMBER_ID_REQUIRED),
    (60_000, MEMBER_ID_REQUIRED),
    (60_001, INVALID_SESSION_TIMEOUT),
])
def test_session_timeout_bounds(session, expected):
    c = Coord(config=cfg(classic_min_session_timeout_ms=6_000, classic_max_session_timeout_ms=60_000))
    assert code(c.join(session=session)) == expected
    if expected == INVALID_SESSION_TIMEOUT:
        assert c.classic() is None  # nothing was created


def test_the_session_timeout_is_checked_for_known_members_too():
    c = Coord()
    _mids, leader, _gen = form(c, 2)
    box = c.join(member=leader, session=1)
    assert code(box) == INVALID_SESSION_TIMEOUT
    assert state(c) == "Stable"


def test_another_protocol_type_is_inconsistent():
    c = Coord()
    form(c, 1)
    box = c.join(protocol_type="connect")
    assert code(box) == INCONSISTENT_GROUP_PROTOCOL
    assert c.classic().pending_members == set()


def test_a_member_without_a_common_protocol_is_inconsistent():
    c = Coord()
    form(c, 2, protocols=(("range", b"m"), ("rr", b"m")))
    assert code(c.join(protocols=(("sticky", b"m"),))) == INCONSISTENT_GROUP_PROTOCOL
    # one common protocol is enough
    assert code(c.join(protocols=(("sticky", b"m"), ("rr", b"m")))) == MEMBER_ID_REQUIRED


@pytest.mark.parametrize(("ptype", "protocols"), [("", (("range", b""),)), ("consumer", ())])
def test_a_new_group_needs_a_protocol_type_and_protocols(ptype, protocols):
    c = Coord()
    box = c.join(protocol_type=ptype, protocols=protocols)
    assert code(box) == INCONSISTENT_GROUP_PROTOCOL
    assert c.classic() is None


def test_an_empty_group_takes_any_protocol_type():
    c = Coord()
    mids, _leader, _gen = form(c, 1)
    c.leave("g", (mids[0],))
    assert state(c) == "Empty"
    _mid, box = join_dynamic(c, protocol_type="connect", protocols=(("v1", b""),))
    c.advance(DELAY)
    assert code(box) == NONE
    assert box[0]["protocol_type"] == "connect" and box[0]["protocol_name"] == "v1"


# --- unknown members ------------------------------------------------------------------------------


def test_a_member_id_for_a_group_that_does_not_exist_is_unknown():
    c = Coord()
    box = c.join(member="ghost")
    assert code(box) == UNKNOWN_MEMBER_ID
    assert c.classic() is None


def test_a_member_id_the_group_does_not_know_is_unknown():
    c = Coord()
    mids, _leader, _gen = form(c, 2)
    before = log_len(c)
    box = c.join(member="ghost")
    assert code(box) == UNKNOWN_MEMBER_ID
    assert state(c) == "Stable" and sorted(c.classic().members) == sorted(mids)
    assert log_len(c) == before


def test_a_former_member_rejoining_an_empty_group_is_unknown():
    c = Coord()
    mids, _leader, _gen = form(c, 1)
    c.leave("g", (mids[0],))
    assert code(c.join(member=mids[0])) == UNKNOWN_MEMBER_ID


# --- group size -----------------------------------------------------------------------------------


def test_a_full_stable_group_refuses_new_members():
    c = Coord(config=cfg(classic_max_size=2))
    mids, leader, _gen = form(c, 2)
    assert code(c.join()) == GROUP_MAX_SIZE_REACHED
    assert code(c.join(version=3)) == GROUP_MAX_SIZE_REACHED
    assert code(c.join(instance_id="i")) == GROUP_MAX_SIZE_REACHED
    g = c.classic()
    assert sorted(g.members) == sorted(mids) and g.pending_members == set()
    assert state(c) == "Stable"
    # members of the group are still welcome
    f = followers(mids, leader)[0]
    assert code(c.join(member=f)) == NONE


def test_a_preparing_group_counts_the_members_that_rejoined():
    c = Coord(config=cfg(classic_max_size=2))
    mids, _leader, _gen = form(c, 2)
    a, b = mids
    ba = c.join(member=a)  # one awaiting join
    bn = c.join(version=3)  # a newcomer takes the second place
    assert ba == [] and bn == []
    # Two awaiting joins: the group is full, for newcomers and for members that have
    # not rejoined yet (Kafka kicks out the last rejoining members).
    assert code(c.join()) == GROUP_MAX_SIZE_REACHED
    assert code(c.join(member=b)) == GROUP_MAX_SIZE_REACHED
    assert b not in c.classic().members
    # a member that already awaits its join is still accepted (its newer request wins)
    # and, b being gone, everyone has now joined: the join phase completes at once
    ba2 = c.join(member=a)
    assert code(ba) == UNKNOWN_MEMBER_ID
    assert code(ba2) == NONE and code(bn) == NONE
    assert state(c) == "CompletingRebalance"
    assert sorted(c.classic().members) == sorted([a, bn[0]["member_id"]])


def test_while_preparing_a_new_member_may_take_the_place_of_one_that_has_not_rejoined():
    c = Coord(config=cfg(classic_max_size=2))
    mids, _leader, _gen = form(c, 2)
    a = mids[0]
    ba = c.join(member=a)  # one awaiting join: room for one more
    new_id, bn = join_dynamic(c)
    assert bn == []
    c.advance(30_000)  # b never rejoins: removed at the deadline
    assert code(ba) == NONE and code(bn) == NONE
    assert sorted(c.classic().members) == sorted([a, new_id])


def test_an_existing_member_over_capacity_is_dropped():
    c = Coord()
    mids, _leader, _gen = form(c, 3)
    c.config = cfg(classic_max_size=2)  # the limit was lowered meanwhile
    c.restart()
    first, second, third = [c.join(member=m) for m in mids]
    assert first == [] and second == []  # two awaiting joins fill the group
    assert code(third) == GROUP_MAX_SIZE_REACHED
    assert mids[2] not in c.classic().members
    c.advance(30_000)
    assert code(first) == NONE and code(second) == NONE
    assert sorted(c.classic().members) == sorted(mids[:2])


def test_pending_members_do_not_get_past_the_size_limit():
    # A pending member (KIP-394) is not a member yet: it counts as a newcomer (Kafka's
    # acceptJoiningMember). Regression: pending ids used to be let into a full group.
    c = Coord(config=cfg(classic_max_size=1))
    a = c.join()[0]["member_id"]
    b = c.join()[0]["member_id"]  # both pending while the group is Empty
    ba = c.join(member=a)
    bb = c.join(member=b)
    assert ba == []
    assert code(bb) == GROUP_MAX_SIZE_REACHED
    assert list(c.classic().members) == [a]


# --- a known member rejoins -------------------------------------------------------------------------


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation():
    c = Coord()
    mids, leader, gen = form(c, 3)
    f = followers(mids, leader)[0]
    before = log_len(c)
    box = c.join(member=f)
    assert code(box) == NONE
    r = box[0]
    assert (r["generation_id"], r["leader"], r["member_id"], r["members"]) == (gen, leader, f, [])
    assert (r["protocol_type"], r["protocol_name"]) == ("consumer", "range")
    assert state(c) == "Stable" and c.classic().generation == gen
    assert all(c.cheartbeat(member=m, generation=gen) == NONE for m in mids)
    assert log_len(c) == before
    # and its sync gets its stored assignment back
    assert c.sync(member=f, generation=gen)[0]["assignment"] == b"a%d" % mids.index(f)


def test_a_leader_rejoining_a_stable_group_triggers_a_rebalance():
    c = Coord()
    mids, leader, gen = form(c, 2)
    f = followers(mids, leader)[0]
    box = c.join(member=leader)
    assert box == []
    assert state(c) == "PreparingRebalance"
    assert c.cheartbeat(member=f, generation=gen) == REBALANCE_IN_PROGRESS
    fb = c.join(member=f)
    assert code(box) == NONE and code(fb) == NONE
    assert box[0]["generation_id"] == gen + 1
    assert state(c) == "CompletingRebalance"


def test_a_follower_with_changed_metadata_triggers_a_rebalance():
    c = Coord()
    mids, leader, _gen = form(c, 2)
    f = followers(mids, leader)[0]
    fb = c.join(member=f, protocols=(("range", b"new"),))
    assert fb == [] and state(c) == "PreparingRebalance"
    lb = c.join(member=leader)
    assert code(lb) == NONE and code(fb) == NONE
    # the leader sees the new metadata
    meta = {m["member_id"]: m["metadata"] for m in lb[0]["members"]}
    assert meta == {leader: b"m", f: b"new"}


def test_a_follower_with_new_protocols_triggers_a_rebalance():
    c = Coord()
    mids, leader, _gen = form(c, 2)
    f = followers(mids, leader)[0]
    fb = c.join(member=f, protocols=(("range", b"m"), ("rr", b"m")))
    assert fb == [] and state(c) == "PreparingRebalance"


def test_a_rejoin_during_completing_rebalance_with_the_same_metadata_gets_the_join_response_again():
    c = Coord()
    mids, leader, gen = form(c, 3)
    boxes = {m: c.join(member=m) for m in mids}
    assert state(c) == "CompletingRebalance"
    f = followers(mids, leader)[0]
    again = c.join(member=f)
    assert again == boxes[f]  # exactly the same answer
    lead_again = c.join(member=leader)
    assert lead_again[0]["generation_id"] == gen + 1
    assert sorted(m["member_id"] for m in lead_again[0]["members"]) == sorted(mids)
    assert state(c) == "CompletingRebalance"


def test_a_rejoin_during_completing_rebalance_with_changed_metadata_starts_over():
    c = Coord()
    mids, leader, _gen = form(c, 2)
    for m in mids:
        c.join(member=m)
    f = followers(mids, leader)[0]
    assert state(c) == "CompletingRebalance"
    box = c.join(member=f, protocols=(("range", b"changed"),))
    assert box == [] and state(c) == "PreparingRebalance"


def test_a_second_join_from_a_parked_member_replaces_the_first():
    c = Coord()
    mids, leader, _gen = form(c, 2)
    first = c.join(member=leader)
    second = c.join(member=leader)
    assert code(first) == UNKNOWN_MEMBER_ID  # the older request is let go
    assert second == []
    c.join(member=mids[1])
    assert code(second) == NONE


def test_a_static_member_rejoining_with_a_stale_member_id_is_fenced():
    c = Coord()
    form(c, 2, static=("i0", "i1"))
    old = c.classic().static_members["i1"]
    c.join(instance_id="i1")  # a new incarnation takes over
    box = c.join(member=old, instance_id="i1")
    assert code(box) == FENCED_INSTANCE_ID


def test_a_known_member_id_with_an_unknown_instance_id_is_unknown():
    c = Coord()
    mids, leader, gen = form(c, 2)
    f = followers(mids, leader)[0]
    assert code(c.join(member=f, instance_id="ghost")) == UNKNOWN_MEMBER_ID
    assert code(c.sync(member=f, generation=gen, instance_id="ghost")) == UNKNOWN_MEMBER_ID
    assert state(c) == "Stable"
