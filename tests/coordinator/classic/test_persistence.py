"""What a classic group persists (the GroupMetadata record, type 2) and what a restarted
coordinator makes of it (shard replay while loading, runtime._on_loaded), deletion and
offset expiry."""

from __future__ import annotations

import pytest

from odradek.coordinator import records as R
from odradek.protocol.errors import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    NON_EMPTY_GROUP,
    NONE,
)
from tests.coordinator.classic.helpers import (
    DELAY,
    cfg,
    classic_records,
    code,
    followers,
    form,
    join_dynamic,
    run_delete,
    state,
)
from tests.coordinator.harness import Coord


def test_a_restart_after_a_completed_rebalance_gives_the_same_group():
    c = Coord()
    mids, leader, gen = form(c, 3, static=("s0",), session=20_000, rebalance=40_000)
    before = c.snapshot()
    assert before[0]["classic_groups"]["g"]["state"] == "Stable"
    c.restart()
    assert c.snapshot() == before
    g = c.classic()
    assert g.leader_id == leader and g.protocol_name == "range" and g.generation == gen
    # the members carry on where they were
    for k, m in enumerate(mids):
        inst = "s0" if k == 0 else None
        assert c.cheartbeat(member=m, generation=gen, instance_id=inst) == NONE
        assert c.sync(member=m, generation=gen, instance_id=inst)[0]["assignment"] == b"a%d" % k
    f = followers(mids, leader)[-1]
    assert code(c.join(member=f)) == NONE  # its only protocol, as persisted: unchanged
    assert state(c) == "Stable"


def test_the_record_is_the_group_as_of_its_last_completed_rebalance():
    c = Coord()
    mids, _leader, _gen = form(c, 2)
    assert classic_records(c)[-1] == R.classic_group(c.classic())  # encoded and decoded unchanged
    n = len(classic_records(c))
    # a rebalance that has not completed writes nothing
    for m in mids:
        c.join(member=m, protocols=(("range", b"v2"),))
    assert state(c) == "CompletingRebalance" and len(classic_records(c)) == n


def test_records_written_by_a_running_coordinator_are_not_replayed_into_it():
    c = Coord()
    a, _box = join_dynamic(c)
    g = c.classic()
    c.advance(DELAY)
    c.sync(member=a, generation=1, assignments=[(a, b"x")])
    assert c.classic() is g  # the live group was mutated, not rebuilt from the record
    assert g.members[a].protocols == (("range", b"m"),)


def test_a_restart_in_the_middle_of_a_rebalance_resumes_from_the_last_completed_one():
    c = Coord()
    mids, leader, gen = form(c, 2)
    stable = c.snapshot()
    boxes = [c.join(member=m, protocols=(("range", b"v2"),)) for m in mids]
    assert state(c) == "CompletingRebalance" and boxes[1][0]["generation_id"] == gen + 1
    c.restart()
    assert c.snapshot() == stable
    # members of the generation that never completed are told to rejoin
    assert code(c.sync(member=leader, generation=gen + 1, assignments=[])) == ILLEGAL_GENERATION
    assert c.cheartbeat(member=leader, generation=gen + 1) == ILLEGAL_GENERATION


def test_static_member_ids_survive_a_restart():
    c = Coord()
    mids, _leader, gen = form(c, 2, static=("s0", "s1"))
    new = c.join(instance_id="s1")[0]["member_id"]  # a replacement, persisted at once
    before = c.snapshot()
    c.restart()
    assert c.snapshot() == before
    g = c.classic()
    assert g.static_members == {"s0": mids[0], "s1": new}
    assert c.cheartbeat(member=mids[1], generation=gen, instance_id="s1") == FENCED_INSTANCE_ID  # still fenced
    # and a restarted instance is replaced without a rebalance after the restart too
    box = c.join(instance_id="s0")
    assert code(box) == NONE and box[0]["generation_id"] == gen
    assert state(c) == "Stable"


def test_a_restarted_coordinator_expires_members_that_never_heartbeat_again():
    c = Coord()
    mids, _leader, gen = form(c, 3, session=12_000)
    a = mids[0]
    c.advance(5_000)  # the sessions were running before the restart...
    c.restart()
    c.advance(11_000)  # ...but a restart starts them over
    assert sorted(c.classic().members) == sorted(mids)
    assert c.cheartbeat(member=a, generation=gen) == NONE
    c.advance(1_000)
    assert sorted(c.classic().members) == [a]
    assert state(c) == "PreparingRebalance"
    box = c.join(member=a, session=12_000)
    assert code(box) == NONE and box[0]["generation_id"] == gen + 1


def test_a_restarted_coordinator_with_nobody_coming_back_ends_up_empty():
    c = Coord()
    _mids, _leader, gen = form(c, 2)
    c.restart()
    c.advance(10_000)
    assert state(c) == "Empty" and c.classic().generation == gen + 1
    assert classic_records(c)[-1].value["members"] == []


def test_an_empty_group_replays():
    c = Coord()
    mids, _leader, gen = form(c, 2)
    c.leave("g", (mids[0],), (mids[1],))
    assert state(c) == "Empty"
    before = c.snapshot()
    c.restart()
    assert c.snapshot() == before
    g = c.classic()
    assert g.generation == gen + 1 and g.members == {} and g.protocol_type == "consumer"
    # the generations go on from there
    _a, box = join_dynamic(c)
    c.advance(DELAY)
    assert code(box) == NONE and box[0]["generation_id"] == gen + 2


def test_deleting_an_empty_group():
    c = Coord()
    mids, _leader, gen = form(c, 1)
    assert c.commit(member=mids[0], epoch=gen) == {("foo", 0): NONE}
    assert run_delete(c) == NON_EMPTY_GROUP
    c.leave("g", (mids[0],))
    assert run_delete(c) == NONE
    assert c.classic() is None and c.fetch() == {}
    assert classic_records(c)[-1].value is None  # a tombstone
    assert run_delete(c) == GROUP_ID_NOT_FOUND
    c.restart()
    assert c.classic() is None
    assert c.snapshot()[0] == {"consumer_groups": {}, "classic_groups": {}, "offsets": {}}
    # the id is free again: a new group starts from generation 0
    _a, box = join_dynamic(c)
    c.advance(DELAY)
    assert box[0]["generation_id"] == 1


@pytest.mark.parametrize("phase", ["PreparingRebalance", "CompletingRebalance", "Stable"])
def test_a_group_with_members_cannot_be_deleted(phase):
    c = Coord()
    mids, leader, _gen = form(c, 2)
    if phase != "Stable":
        c.join(member=leader)
    if phase == "CompletingRebalance":
        c.join(member=mids[1])
    assert state(c) == phase
    assert run_delete(c) == NON_EMPTY_GROUP
    assert state(c) == phase


def test_offset_expiry_deletes_an_empty_group_without_offsets():
    c = Coord(config=cfg(offsets_retention_check_interval_ms=60_000))
    mids, _leader, _gen = form(c, 1)
    c.leave("g", (mids[0],))
    assert state(c) == "Empty"
    c.advance(60_000)
    assert c.classic() is None
    assert classic_records(c)[-1].value is None
    c.restart()
    assert c.classic() is None


def test_offset_expiry_keeps_a_group_with_members_then_deletes_it_once_empty():
    c = Coord(config=cfg(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=10_000))
    mids, _leader, gen = form(c, 1, session=60_000)
    c.commit(member=mids[0], epoch=gen)
    for _ in range(20):  # 200 s: past the retention, but the group has a member
        c.advance(10_000)
        assert c.cheartbeat(member=mids[0], generation=gen) == NONE
    assert c.fetch() == {("foo", 0): 10} and state(c) == "Stable"
    c.leave("g", (mids[0],))
    assert state(c) == "Empty"
    for _ in range(11):  # a retention period after it emptied (and after the commit)
        c.advance(10_000)
    assert c.classic() is None and c.fetch() == {}
    c.restart()
    assert c.classic() is None and c.fetch() == {}


def test_offset_expiry_leaves_a_group_being_formed_alone():
    c = Coord(config=cfg(offsets_retention_check_interval_ms=1_000, initial_rebalance_delay_ms=5_000))
    c.join()  # a pending member in an Empty group
    c.advance(1_000)
    assert c.classic() is not None
    join_dynamic(c)  # PreparingRebalance, in the initial delay
    c.advance(1_000)
    assert state(c) == "PreparingRebalance"


@pytest.mark.parametrize("first", [{"version": 3}, {"instance_id": "s0"}], ids=["v3-dynamic", "static"])
def test_a_restart_during_the_first_join_phase_loads_an_empty_group(first):
    # The record of a new group is an empty group (Kafka's newEmptyGroupMetadataRecord), not
    # the members of a join phase that has not completed. Regression: a restart here used to
    # load a Stable generation-0 group with no protocol that refused every new member.
    c = Coord()
    assert c.join(**first) == []  # joins at once: parked in the initial delay
    c.restart()
    g = c.classic()
    assert g is not None and state(c) == "Empty"
    assert g.generation == 0 and g.members == {}
    _a, box = join_dynamic(c)  # the group can form again
    c.advance(DELAY)
    assert code(box) == NONE
