"""The classic rebalance (classic/rebalance.py): the initial delay, completing the join phase,
the rebalance and session timeouts, the pending-sync timeout, and emptying."""

from __future__ import annotations

from odradek.protocol.errors import NONE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID
from tests.coordinator.classic.helpers import (
    DELAY,
    cfg,
    classic_records,
    code,
    followers,
    form,
    join_dynamic,
    log_len,
    state,
)
from tests.coordinator.harness import Coord

# --- the initial rebalance delay ----------------------------------------------------------------


def test_a_new_group_waits_out_the_initial_delay():
    c = Coord(config=cfg(initial_rebalance_delay_ms=3_000))
    _a, box = join_dynamic(c, rebalance=30_000)
    c.advance(2_999)
    assert box == [] and state(c) == "PreparingRebalance"
    c.advance(1)
    assert code(box) == NONE
    assert box[0]["generation_id"] == 1 and state(c) == "CompletingRebalance"


def test_all_members_joined_does_not_end_the_initial_delay_early():
    c = Coord(config=cfg(initial_rebalance_delay_ms=3_000))
    _a, ba = join_dynamic(c)
    _b, bb = join_dynamic(c)
    g = c.classic()
    assert g.all_joined()  # every member has joined...
    c.advance(2_999)
    assert ba == [] and bb == []  # ...but the delay still runs


def test_a_new_member_during_the_delay_extends_it():
    c = Coord(config=cfg(initial_rebalance_delay_ms=3_000))
    a, ba = join_dynamic(c, rebalance=30_000)
    c.advance(2_000)
    b, bb = join_dynamic(c, rebalance=30_000)
    c.advance(1_000)  # the first delay ends: a member arrived, wait one more delay
    assert ba == [] and bb == []
    c.advance(2_999)
    assert ba == [] and bb == []
    c.advance(1)
    assert code(ba) == NONE and code(bb) == NONE
    assert ba[0]["generation_id"] == bb[0]["generation_id"] == 1  # one generation for both
    assert sorted(m["member_id"] for m in (ba[0]["members"] or bb[0]["members"])) == sorted([a, b])


def test_a_rejoin_of_a_known_member_does_not_extend_the_delay():
    c = Coord(config=cfg(initial_rebalance_delay_ms=3_000))
    a, ba = join_dynamic(c)
    c.advance(1_000)
    ba2 = c.join(member=a)  # the same member again: nobody new
    assert code(ba) == UNKNOWN_MEMBER_ID
    c.advance(2_000)
    assert code(ba2) == NONE


def test_the_extensions_stop_at_the_rebalance_timeout():
    c = Coord(config=cfg(initial_rebalance_delay_ms=3_000))
    t0 = c.now
    boxes = [join_dynamic(c, rebalance=5_000, session=60_000)[1]]
    while not boxes[0]:
        c.advance(1_000)
        if not boxes[0]:
            boxes.append(join_dynamic(c, rebalance=5_000, session=60_000)[1])  # a newcomer every second
    assert c.now - t0 == 5_000  # capped at the rebalance timeout, although members kept coming
    assert all(code(b) == NONE for b in boxes)
    assert {b[0]["generation_id"] for b in boxes} == {1}
    assert len(c.classic().members) == len(boxes) == 5


def test_a_delay_longer_than_the_rebalance_timeout_is_capped():
    c = Coord(config=cfg(initial_rebalance_delay_ms=10_000))
    _a, box = join_dynamic(c, rebalance=4_000)
    c.advance(3_999)
    assert box == []
    c.advance(1)
    assert code(box) == NONE


def test_without_an_initial_delay_the_first_member_completes_at_once():
    c = Coord(config=cfg(initial_rebalance_delay_ms=0))
    _a, box = join_dynamic(c)
    assert code(box) == NONE and box[0]["generation_id"] == 1


def test_a_group_that_emptied_waits_out_the_initial_delay_again():
    c = Coord()
    mids, _leader, gen = form(c, 1)
    c.leave("g", (mids[0],))
    assert state(c) == "Empty"
    _b, bb = join_dynamic(c)
    c.advance(DELAY - 1)
    assert bb == []
    c.advance(1)
    assert code(bb) == NONE and bb[0]["generation_id"] == gen + 2  # +1 for emptying


# --- completing the join phase ------------------------------------------------------------------


def test_the_join_phase_completes_as_soon_as_every_member_rejoined():
    c = Coord()
    mids, leader, gen = form(c, 3)
    boxes = [c.join(member=mids[0]), c.join(member=mids[1])]
    assert boxes == [[], []]  # waiting for the third
    boxes.append(c.join(member=mids[2]))
    assert all(code(b) == NONE for b in boxes)  # no clock moved: the last rejoin completed it
    assert {b[0]["generation_id"] for b in boxes} == {gen + 1}
    assert {b[0]["leader"] for b in boxes} == {leader}  # the leader rejoined: it stays leader
    lead = next(b[0] for b in boxes if b[0]["member_id"] == leader)
    assert sorted(m["member_id"] for m in lead["members"]) == sorted(mids)
    assert all(b[0]["members"] == [] for b in boxes if b[0]["member_id"] != leader)


def test_dynamic_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout_static_ones_stay():
    c = Coord()
    mids, _leader, gen = form(c, 3, static=("s0",), session=60_000, rebalance=20_000)
    s0, d1, d2 = mids
    box = c.join(member=d2, protocols=(("range", b"new"),), session=60_000, rebalance=20_000)
    assert state(c) == "PreparingRebalance"
    c.advance(19_999)
    assert box == []
    c.advance(1)
    assert code(box) == NONE
    g = c.classic()
    assert sorted(g.members) == sorted([s0, d2])  # d1 removed, s0 kept
    assert g.generation == gen + 1 and state(c) == "CompletingRebalance"
    # s0 was the leader but did not rejoin: leadership passed to a member that did
    assert box[0]["leader"] == d2 == g.leader_id
    assert sorted(m["member_id"] for m in box[0]["members"]) == sorted([s0, d2])
    assert c.cheartbeat(member=d1, generation=gen) == UNKNOWN_MEMBER_ID


def test_a_group_of_static_members_that_did_not_rejoin_waits_for_them():
    c = Coord()
    mids, _leader, gen = form(c, 2, static=("s0",), session=60_000, rebalance=20_000)
    s0, d = mids
    c.join(member=d, protocols=(("range", b"new"),), session=60_000, rebalance=20_000)
    c.leave("g", (d,))  # only s0 is left, and it has not rejoined
    c.advance(20_000)
    assert state(c) == "PreparingRebalance" and list(c.classic().members) == [s0]
    assert c.classic().generation == gen
    c.advance(5_000)
    box = c.join(member=s0, session=60_000, rebalance=20_000)  # it comes back: done at once
    assert code(box) == NONE and box[0]["generation_id"] == gen + 1


def test_static_members_that_never_rejoin_are_removed_by_their_session():
    c = Coord()
    mids, _leader, gen = form(c, 2, static=("s0",), session=30_000, rebalance=20_000)
    d = mids[1]
    c.join(member=d, protocols=(("range", b"new"),), session=30_000, rebalance=20_000)
    c.leave("g", (d,))
    for _ in range(3):
        c.advance(10_000)
    assert state(c) == "Empty" and c.classic().members == {}
    assert c.classic().generation == gen + 1


# --- session expiry --------------------------------------------------------------------------------


def test_a_member_whose_session_expires_is_removed_and_the_rest_rebalance():
    c = Coord()
    mids, _leader, gen = form(c, 3)  # session 10 s
    a, b, d = mids
    c.advance(5_000)
    assert c.cheartbeat(member=a, generation=gen) == NONE
    assert c.cheartbeat(member=b, generation=gen) == NONE
    c.advance(4_999)
    assert state(c) == "Stable"
    c.advance(1)  # d's session (10 s) is over; a's and b's run 5 s more
    g = c.classic()
    assert d not in g.members
    assert state(c) == "PreparingRebalance"
    assert c.cheartbeat(member=a, generation=gen) == REBALANCE_IN_PROGRESS
    assert c.cheartbeat(member=d, generation=gen) == UNKNOWN_MEMBER_ID
    ba, bb = c.join(member=a), c.join(member=b)
    assert code(ba) == NONE and code(bb) == NONE
    assert sorted(m["member_id"] for m in ba[0]["members"]) == sorted([a, b])


def test_heartbeats_keep_a_session_alive():
    c = Coord()
    mids, _leader, gen = form(c, 2)
    for _ in range(10):
        c.advance(9_000)
        assert all(c.cheartbeat(member=m, generation=gen) == NONE for m in mids)
    assert state(c) == "Stable" and sorted(c.classic().members) == sorted(mids)


def test_a_member_parked_in_join_group_is_not_expired():
    c = Coord()
    mids, _leader, gen = form(c, 2, session=6_000, rebalance=60_000)
    a, b = mids
    bb = c.join(member=b, protocols=(("range", b"x"),), session=6_000, rebalance=60_000)
    for _ in range(8):  # 40 s, far past b's session; a heartbeats but does not rejoin
        c.advance(5_000)
        assert c.cheartbeat(member=a, generation=gen) == REBALANCE_IN_PROGRESS
    assert b in c.classic().members and bb == []
    assert state(c) == "PreparingRebalance"
    ba = c.join(member=a, session=6_000, rebalance=60_000)
    assert code(ba) == NONE and code(bb) == NONE


def test_a_member_parked_in_sync_group_is_not_expired():
    c = Coord()
    mids, leader, gen = form(c, 2, session=6_000, rebalance=60_000)
    for m in mids:
        c.join(member=m, session=6_000, rebalance=60_000)
    f = followers(mids, leader)[0]
    fs = c.sync(member=f, generation=gen + 1)
    for _ in range(8):  # the leader keeps its session but takes 40 s to assign
        c.advance(5_000)
        assert c.cheartbeat(member=leader, generation=gen + 1) == NONE
    assert fs == [] and f in c.classic().members
    c.sync(member=leader, generation=gen + 1, assignments=((f, b"F"),))
    assert code(fs) == NONE and fs[0]["assignment"] == b"F"


def test_a_member_that_did_not_heartbeat_after_its_join_response_expires():
    c = Coord()
    mids, leader, gen = form(c, 2, session=6_000, rebalance=60_000)
    for m in mids:
        c.join(member=m, session=6_000, rebalance=60_000)
    c.sync(member=leader, generation=gen + 1)
    f = followers(mids, leader)[0]
    c.advance(5_000)
    c.cheartbeat(member=leader, generation=gen + 1)
    c.advance(1_000)  # f: answered at +0, no sync, no heartbeat for 6 s
    assert f not in c.classic().members
    assert state(c) == "PreparingRebalance"


# --- the pending-sync timeout -----------------------------------------------------------------


def test_members_that_never_sync_are_removed_at_the_rebalance_timeout():
    c = Coord()
    mids, leader, gen = form(c, 3, session=60_000, rebalance=20_000)
    for m in mids:
        c.join(member=m, session=60_000, rebalance=20_000)
    lazy = followers(mids, leader)[1]
    busy = next(m for m in mids if m not in (leader, lazy))
    c.sync(member=busy, generation=gen + 1)
    c.sync(member=leader, generation=gen + 1, assignments=((m, b"x") for m in mids))
    assert state(c) == "Stable"
    c.advance(10_000)
    assert all(c.cheartbeat(member=m, generation=gen + 1) == NONE for m in mids)  # lazy heartbeats...
    c.advance(10_000)
    g = c.classic()
    assert lazy not in g.members  # ...but never synced
    assert sorted(g.members) == sorted([leader, busy])
    assert state(c) == "PreparingRebalance"


def test_a_leader_that_never_syncs_is_removed_and_parked_followers_told_to_rejoin():
    c = Coord()
    mids, leader, gen = form(c, 2, session=60_000, rebalance=20_000)
    for m in mids:
        c.join(member=m, session=60_000, rebalance=20_000)
    f = followers(mids, leader)[0]
    fs = c.sync(member=f, generation=gen + 1)
    c.advance(20_000)
    assert code(fs) == REBALANCE_IN_PROGRESS
    assert list(c.classic().members) == [f]
    assert state(c) == "PreparingRebalance"


def test_the_sync_timeout_of_an_old_generation_does_nothing():
    c = Coord()
    mids, _leader, gen = form(c, 2, session=60_000, rebalance=20_000)
    for m in mids:
        c.join(member=m, session=60_000, rebalance=20_000)  # generation gen+1: nobody syncs
    c.advance(10_000)
    for m in mids:  # a new rebalance starts (changed metadata) and completes
        c.join(member=m, protocols=(("range", b"v2"),), session=60_000, rebalance=20_000)
    for m in mids:
        c.sync(member=m, generation=gen + 2, assignments=((x, b"x") for x in mids))
    c.advance(10_000)  # gen+1's deadline
    assert state(c) == "Stable" and sorted(c.classic().members) == sorted(mids)


# --- emptying -------------------------------------------------------------------------------------


def test_the_group_becomes_empty_when_the_last_member_leaves():
    c = Coord()
    mids, _leader, gen = form(c, 2)
    n = len(classic_records(c))
    c.leave("g", (mids[0],))
    assert state(c) == "PreparingRebalance"
    assert len(classic_records(c)) == n  # a rebalance is not persisted
    c.leave("g", (mids[1],))
    g = c.classic()
    assert state(c) == "Empty"
    assert g.generation == gen + 1
    assert g.leader_id is None and g.protocol_name is None and g.members == {}
    records = classic_records(c)[n:]
    assert len(records) == 1
    v = records[0].value
    assert (v["generation"], v["members"], v["leader"], v["protocol"]) == (gen + 1, [], None, None)
    assert v["protocol_type"] == "consumer"


def test_the_group_becomes_empty_when_the_last_session_expires():
    c = Coord()
    _mids, _leader, gen = form(c, 2)
    before = log_len(c)
    c.advance(10_000)
    assert state(c) == "Empty" and c.classic().generation == gen + 1
    assert log_len(c) == before + 1


def test_a_stable_group_does_not_write_anything_while_it_stays_stable():
    c = Coord()
    mids, _leader, gen = form(c, 2)
    before = log_len(c)
    for _ in range(3):
        c.advance(5_000)
        for m in mids:
            c.cheartbeat(member=m, generation=gen)
            c.sync(member=m, generation=gen)
    assert log_len(c) == before
