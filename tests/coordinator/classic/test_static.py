"""Static membership (KIP-345, classic/join.py `_replace_static`): a known group.instance.id
joining without a member id replaces its previous incarnation, which is fenced; in a
Stable group whose selected protocol does not change this needs no rebalance."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import FENCED_INSTANCE_ID, NONE, REBALANCE_IN_PROGRESS
from tests.coordinator.classic.helpers import (
    classic_records,
    code,
    followers,
    form,
    log_len,
    state,
)
from tests.coordinator.harness import FOO, Coord

BOTH = (("range", b"m"), ("rr", b"m"))


def stable_static(c: Coord, n: int = 3, **kw):
    """A Stable group whose members are all static (instances i0..i<n-1>)."""
    return form(c, n, static=tuple(f"i{k}" for k in range(n)), **kw)


def instance(c: Coord, mid: str) -> str:
    return c.classic().members[mid].instance_id


def test_a_restarted_static_follower_keeps_its_assignment_without_a_rebalance():
    c = Coord()
    mids, leader, gen = stable_static(c)
    old = followers(mids, leader)[0]
    inst = instance(c, old)
    n = len(classic_records(c))
    box = c.join(instance_id=inst)
    assert code(box) == NONE
    r = box[0]
    new = r["member_id"]
    assert new != old and new.startswith(f"{inst}-")
    assert (r["generation_id"], r["leader"], r["members"], r["skip_assignment"]) == (gen, leader, [], False)
    g = c.classic()
    assert state(c) == "Stable" and g.generation == gen
    assert g.static_members[inst] == new and old not in g.members
    assert g.members[new].assignment == b"a%d" % mids.index(old)
    # everybody else carries on
    for m in mids:
        if m != old:
            assert c.cheartbeat(member=m, generation=gen, instance_id=instance(c, m)) == NONE
    assert c.cheartbeat(member=new, generation=gen, instance_id=inst) == NONE
    sb = c.sync(member=new, generation=gen, instance_id=inst)
    assert code(sb) == NONE and sb[0]["assignment"] == b"a%d" % mids.index(old)
    # the new member id is persisted at once
    records = classic_records(c)[n:]
    assert len(records) == 1
    v = records[0].value
    assert v["generation"] == gen
    assert {m["member_id"] for m in v["members"]} == (set(mids) - {old}) | {new}


def test_the_old_incarnation_is_fenced():
    c = Coord()
    mids, leader, gen = stable_static(c)
    old = followers(mids, leader)[0]
    inst = instance(c, old)
    c.join(instance_id=inst)
    assert c.cheartbeat(member=old, generation=gen, instance_id=inst) == FENCED_INSTANCE_ID
    assert code(c.sync(member=old, generation=gen, instance_id=inst)) == FENCED_INSTANCE_ID
    assert c.commit(member=old, epoch=gen, instance_id=inst) == {("foo", 0): FENCED_INSTANCE_ID}
    assert code(c.join(member=old, instance_id=inst)) == FENCED_INSTANCE_ID
    assert state(c) == "Stable"


def test_the_new_incarnation_may_commit():
    c = Coord()
    mids, _leader, gen = stable_static(c)
    inst = instance(c, mids[1])
    new = c.join(instance_id=inst)[0]["member_id"]
    assert c.commit(member=new, epoch=gen, instance_id=inst) == {("foo", 0): NONE}
    assert c.fetch() == {("foo", 0): 10}


def test_a_change_of_the_selected_protocol_forces_a_rebalance():
    c = Coord()
    mids, leader, gen = stable_static(c, 2, protocols=BOTH)
    assert c.classic().protocol_name == "range"
    old = followers(mids, leader)[0]
    inst = instance(c, old)
    before = log_len(c)
    box = c.join(instance_id=inst, protocols=(("rr", b"m"),))  # only rr: the group must switch
    assert box == []
    assert state(c) == "PreparingRebalance"
    assert log_len(c) == before
    assert c.cheartbeat(member=leader, generation=gen, instance_id=instance(c, leader)) == REBALANCE_IN_PROGRESS
    lb = c.join(member=leader, instance_id=instance(c, leader), protocols=BOTH)
    assert code(lb) == NONE and code(box) == NONE
    assert lb[0]["protocol_name"] == "rr" and lb[0]["generation_id"] == gen + 1


def test_a_new_preference_that_does_not_change_the_selection_needs_no_rebalance():
    c = Coord()
    mids, leader, gen = stable_static(c, 3, protocols=BOTH)
    inst = instance(c, followers(mids, leader)[0])
    box = c.join(instance_id=inst, protocols=(("rr", b"m"), ("range", b"m")))  # 2 votes to 1: still range
    assert code(box) == NONE and box[0]["generation_id"] == gen
    assert state(c) == "Stable"


@pytest.mark.parametrize("version", [1, 5, 8])
def test_a_replaced_leader_before_v9_is_told_the_previous_leader(version):
    c = Coord()
    _mids, leader, gen = stable_static(c)
    inst = instance(c, leader)
    box = c.join(instance_id=inst, version=version)
    assert code(box) == NONE
    r = box[0]
    new = r["member_id"]
    # the client compares its id with the leader id: it is a follower
    assert r["leader"] == leader != new
    assert r["members"] == [] and r["skip_assignment"] is False
    assert c.classic().leader_id == new  # but the group knows who leads now
    sb = c.sync(member=new, generation=gen, instance_id=inst)
    assert code(sb) == NONE and sb[0]["assignment"] == b"a0"
    assert state(c) == "Stable" and c.classic().generation == gen


def test_a_replaced_leader_at_v9_is_told_to_skip_the_assignment():
    c = Coord()
    mids, leader, gen = stable_static(c)
    inst = instance(c, leader)
    box = c.join(instance_id=inst, version=9)
    assert code(box) == NONE
    r = box[0]
    new = r["member_id"]
    assert r["leader"] == new and r["skip_assignment"] is True
    listed = {m["member_id"]: (m["group_instance_id"], m["metadata"]) for m in r["members"]}
    assert listed == {m if m != leader else new: (instance(c, m if m != leader else new), b"m") for m in mids}
    # its sync (with or without an assignment) changes nothing
    sb = c.sync(member=new, generation=gen, instance_id=inst, assignments=[(m, b"zzz") for m in listed])
    assert code(sb) == NONE and sb[0]["assignment"] == b"a0"
    assert {m: g.assignment for m, g in c.classic().members.items()} == {
        (m if m != leader else new): b"a%d" % k for k, m in enumerate(mids)}
    assert state(c) == "Stable" and c.classic().generation == gen


def test_a_replacement_during_completing_rebalance_starts_over():
    c = Coord()
    mids, leader, gen = stable_static(c)
    for m in mids:
        c.join(member=m, instance_id=instance(c, m), protocols=(("range", b"v2"),))
    assert state(c) == "CompletingRebalance"
    f1, f2 = followers(mids, leader)
    i1 = instance(c, f1)
    b1 = c.sync(member=f1, generation=gen + 1, instance_id=i1)
    b2 = c.sync(member=f2, generation=gen + 1, instance_id=instance(c, f2))
    box = c.join(instance_id=i1)  # f1's process restarted
    assert code(b1) == FENCED_INSTANCE_ID  # the old incarnation's parked sync
    assert code(b2) == REBALANCE_IN_PROGRESS  # everybody else rejoins
    assert box == [] and state(c) == "PreparingRebalance"


def test_a_replacement_during_preparing_rebalance_fences_the_parked_join():
    c = Coord()
    mids, leader, _gen = stable_static(c, 2)
    f = followers(mids, leader)[0]
    inst = instance(c, f)
    old_join = c.join(member=f, instance_id=inst, protocols=(("range", b"v2"),))
    assert old_join == [] and state(c) == "PreparingRebalance"
    new_join = c.join(instance_id=inst)
    assert code(old_join) == FENCED_INSTANCE_ID
    assert new_join == []
    lb = c.join(member=leader, instance_id=instance(c, leader))
    assert code(lb) == NONE and code(new_join) == NONE
    new = new_join[0]["member_id"]
    assert sorted(m["member_id"] for m in lb[0]["members"]) == sorted([leader, new])


def test_a_static_member_can_commit_with_its_instance_and_id():
    c = Coord()
    mids, _leader, gen = stable_static(c, 2)
    assert c.commit(member=mids[1], epoch=gen, instance_id="i1") == {("foo", 0): NONE}


def _proto(owned):
    from odradek.coordinator.consumer_protocol import encode_subscription

    return (("cooperative-sticky", encode_subscription(["foo"], {"foo": owned}, version=1)),)


def _assignment(*parts):
    from odradek.coordinator.consumer_protocol import encode_assignment

    return encode_assignment({"foo": list(parts)})


def test_a_replaced_member_that_owed_a_cooperative_rebalance_triggers_it():
    """KIP-429: the old incarnation had been assigned less than it owned and would have
    revoked and rejoined; the new one keeps the assignment and never will, so the partition
    it gave up would stay with nobody. The replacement rebalances instead."""
    c = Coord()  # foo has 3 partitions
    mids, _, _ = stable_static(c, 2, protocols=_proto([0, 1]), assign={0: _assignment(0), 1: _assignment(2)})
    box = c.join(instance_id=instance(c, mids[0]), protocols=_proto([]))  # the old one owned foo-1 still
    assert box == [] and state(c) == "PreparingRebalance"


def test_a_replaced_member_whose_group_lost_track_of_new_partitions_triggers_a_rebalance():
    """Partitions added while the (static) leader was away: nobody watched, and a KIP-814
    leader only watches from its rejoin on."""
    c = Coord()
    _mids, leader, _ = stable_static(c, 2, protocols=_proto([]), assign={0: _assignment(0, 1), 1: _assignment(2)})
    c.set_topics([("foo", FOO, 4)])
    box = c.join(instance_id=instance(c, leader), protocols=_proto([]), version=9)
    assert box == [] and state(c) == "PreparingRebalance"


def test_a_replaced_member_with_an_assignment_that_is_still_whole_keeps_it():
    c = Coord()
    mids, _, _ = stable_static(c, 2, protocols=_proto([0, 1]), assign={0: _assignment(0, 1), 1: _assignment(2)})
    assert code(c.join(instance_id=instance(c, mids[0]), protocols=_proto([]))) == NONE
    assert state(c) == "Stable"


def test_a_reloaded_group_whose_assignment_misses_partitions_rebalances():
    """Only completed rebalances are stored; a group reloaded with assignments that leave a
    subscribed partition with nobody resumes rebalancing (a fail-over must not freeze it)."""
    c = Coord()
    stable_static(c, 2, protocols=_proto([]), assign={0: _assignment(0, 1), 1: _assignment(2)})
    c.restart()
    assert state(c) == "Stable"  # complete: nothing to do
    c.set_topics([("foo", FOO, 4)])
    c.restart()
    assert state(c) == "PreparingRebalance"
