"""KIP-848 online migration: classic -> consumer (upgrade), classic members driven inside a
consumer group, consumer -> classic (downgrade), and the migration policy."""

from __future__ import annotations

import pytest

from odradek.coordinator.classic.model import ClassicState
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer.model import GroupState, MemberState
from odradek.coordinator.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)

from .harness import FOO, Coord

NONE, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND = 0, 22, 27, 25, 69
INCONSISTENT_GROUP_PROTOCOL, FENCED_INSTANCE_ID = 23, 82


def _coord(**cfg) -> Coord:
    return Coord(topics=(("foo", FOO, 4),), config=CoordinatorConfig(
        offsets_topic_partitions=1, initial_rebalance_delay_ms=0, **cfg))


def _sub(owned=None) -> tuple:
    return (("range", encode_subscription(["foo"], {"foo": owned or []}, version=1)),)


def _classic_pair(c: Coord, version: int = 3):
    """Two classic members, Stable, foo-0,1 with A and foo-2,3 with B (the leader's range assignment)."""
    ja = c.join(protocols=_sub(), version=version, client_id="a")
    a = ja[0]["member_id"]
    jb = c.join(protocols=_sub(), version=version, client_id="b")
    assert not jb  # parked until A rejoins
    (b,) = set(c.classic().members) - {a}
    # A's rejoin (the new member B started a rebalance) completes the join phase.
    ja = c.join(member=a, protocols=_sub(), version=version, client_id="a")
    assert ja and jb and ja[0]["generation_id"] == jb[0]["generation_id"] == 2
    gen = 2
    sb = c.sync(member=b, generation=gen)
    sa = c.sync(member=a, generation=gen, assignments=(
        (a, encode_assignment({"foo": [0, 1]})), (b, encode_assignment({"foo": [2, 3]}))))
    assert decode_assignment(sa[0]["assignment"]) == {"foo": frozenset({0, 1})}
    assert decode_assignment(sb[0]["assignment"]) == {"foo": frozenset({2, 3})}
    assert c.classic().state is ClassicState.STABLE
    return a, b, gen


def _owned(c: Coord, mid: str) -> dict:
    m = c.group().members[mid]
    return {t: sorted(ps) for t, ps in m.assigned.items()}


def _rejoin_and_sync(c: Coord, mid: str, owned: list[int], version: int = 3):
    j = c.join(member=mid, protocols=_sub(owned), version=version)
    assert j and j[0]["error_code"] == NONE, j
    s = c.sync(member=mid, generation=j[0]["generation_id"])
    assert s and s[0]["error_code"] == NONE, s
    return j[0]["generation_id"], sorted(decode_assignment(s[0]["assignment"]).get("foo", ()))


def test_upgrade_keeps_generation_as_epochs_and_assignments():
    c = _coord()
    a, b, gen = _classic_pair(c)
    resp = c.hb(member="C", epoch=0, topics=("foo",))
    assert resp["error_code"] == NONE
    group = c.group()
    assert c.classic() is None and group is not None
    assert {m: group.members[m].member_epoch for m in (a, b)} == {a: gen, b: gen}
    assert _owned(c, a) == {FOO: [0, 1]} and _owned(c, b) == {FOO: [2, 3]}
    assert group.members[a].classic is not None and group.members["C"].classic is None
    assert group.group_epoch == gen + 1  # C's subscription bumped it once more
    # C waits: nothing is free until a classic member revokes.
    assert resp["assignment"]["topic_partitions"] == []
    assert group.members["C"].state is MemberState.UNRELEASED_PARTITIONS


def test_classic_members_revoke_before_the_new_member_gets_partitions():
    c = _coord()
    a, b, gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    # The classic members are told to rejoin.
    assert c.cheartbeat(member=a, generation=gen) == REBALANCE_IN_PROGRESS
    # The member whose target is smaller than what it owns must revoke first.
    owned = {a: [0, 1], b: [2, 3]}
    a = next(m for m in (a, b) if not set(owned[m]) <= set(c.group().target[m].get(FOO, ())))
    # It rejoins owning its partitions: the sync hands back only what it keeps.
    gen_a, kept = _rejoin_and_sync(c, a, owned[a])
    assert gen_a == gen  # still revoking: the epoch does not move
    target_a = sorted(c.group().target[a].get(FOO, ()))
    assert kept == [p for p in owned[a] if p in target_a] and len(kept) < 2
    assert c.group().members[a].state is MemberState.UNREVOKED_PARTITIONS
    # Until A revokes, no partition it owned is given to C.
    c_parts = c.member_hb("g", "C")["assignment"]
    given = set(c_parts["topic_partitions"][0]["partitions"]) if c_parts and c_parts["topic_partitions"] else set()
    assert not given & set(owned[a])
    # A revoked (cooperative): it rejoins owning what it kept and moves to the new epoch.
    assert c.cheartbeat(member=a, generation=gen_a) == REBALANCE_IN_PROGRESS
    gen_a2, kept2 = _rejoin_and_sync(c, a, kept)
    assert gen_a2 == c.group().group_epoch and kept2 == kept
    # Now C can take the partition A released.
    resp = c.member_hb("g", "C")
    assert set(resp["assignment"]["topic_partitions"][0]["partitions"]) & (set(owned[a]) - set(kept))
    # Every partition has exactly one owner throughout.
    owners = c.group().owners
    assert len(owners) == len(set(owners))


def test_classic_member_commits_with_generation_equal_to_member_epoch():
    c = _coord()
    a, _b, gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    assert c.commit(member=a, epoch=gen, version=7) == {("foo", 0): NONE}
    assert c.commit(member=a, epoch=gen - 1, version=7) == {("foo", 0): ILLEGAL_GENERATION}


def test_classic_sync_and_heartbeat_errors_in_a_consumer_group():
    c = _coord()
    a, _b, gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    assert c.cheartbeat(member=a, generation=gen + 5) == ILLEGAL_GENERATION
    assert c.cheartbeat(member="nobody", generation=gen) == UNKNOWN_MEMBER_ID
    assert c.cheartbeat(member="C", generation=1) == UNKNOWN_MEMBER_ID  # a consumer-protocol member
    # The epoch moved: a sync without rejoining is told to rejoin.
    assert c.sync(member=a, generation=gen)[0]["error_code"] == REBALANCE_IN_PROGRESS
    # Another protocol type cannot join the consumer group.
    j = c.join(member="", protocols=(("x", b""),), protocol_type="connect", version=3)
    assert j[0]["error_code"] == INCONSISTENT_GROUP_PROTOCOL


def test_classic_member_that_never_rejoins_is_fenced_after_its_rebalance_timeout():
    c = _coord()
    a, _b, gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    assert c.cheartbeat(member=a, generation=gen) == REBALANCE_IN_PROGRESS
    c.advance(9_000)  # heartbeats keep the session (10 s) alive...
    assert c.cheartbeat(member=a, generation=gen) == REBALANCE_IN_PROGRESS
    c.advance(25_000)  # ...but the 30 s rebalance timeout to rejoin ran out
    assert a not in c.group().members
    # Coming back under its old id it is refused, so the client drops what it still
    # believes it owns (onPartitionsLost) instead of revoking and committing it.
    j = c.join(member=a, protocols=_sub(owned=[0, 1]), version=5)
    assert j[0]["error_code"] == UNKNOWN_MEMBER_ID
    assert a not in c.group().members


def test_a_classic_join_to_a_consumer_group_needs_an_id_it_was_given():
    c = _coord()
    c.hb(member="C", epoch=0, topics=("foo",))
    assert c.join(member="made-up", protocols=_sub(), version=5)[0]["error_code"] == UNKNOWN_MEMBER_ID
    assert c.join(member="C", protocols=_sub(), version=5)[0]["error_code"] == UNKNOWN_MEMBER_ID  # not classic
    mid = c.join(protocols=_sub(), version=5)[0]["member_id"]  # MEMBER_ID_REQUIRED hands one out
    assert c.join(member=mid, protocols=_sub(), version=5)[0]["error_code"] == NONE
    assert c.group().members[mid].classic is not None


def test_new_classic_member_joins_a_consumer_group():
    c = _coord()
    c.hb(member="C", epoch=0, topics=("foo",))
    j = c.join(protocols=_sub(), version=5)
    assert j[0]["error_code"] == 79  # MEMBER_ID_REQUIRED from v4
    mid = j[0]["member_id"]
    j = c.join(member=mid, protocols=_sub(), version=5)
    assert j[0]["error_code"] == NONE and j[0]["leader"] == "" and j[0]["protocol_name"] == "range"
    assert c.group().members[mid].classic.session_timeout_ms == 10_000
    # C holds everything: the classic member waits for C to release partitions.
    assert c.sync(member=mid, generation=j[0]["generation_id"])[0]["error_code"] == NONE
    for _ in range(3):
        c.member_hb("g", "C")  # C revokes what the classic member's target takes from it
    assert c.cheartbeat(member=mid, generation=j[0]["generation_id"]) == REBALANCE_IN_PROGRESS
    g2, parts = _rejoin_and_sync(c, mid, [])
    assert parts and g2 == c.group().group_epoch


def test_downgrade_when_the_last_consumer_member_leaves():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    epoch = c.group().group_epoch
    c.hb(member="C", epoch=-1)
    assert c.group() is None
    g = c.classic()
    assert g is not None and g.generation == epoch and set(g.members) == {a, b}
    # A rebalance follows so the classic members rejoin under the classic protocol.
    assert g.state is ClassicState.PREPARING_REBALANCE
    assert c.cheartbeat(member=a, generation=epoch) == REBALANCE_IN_PROGRESS
    ja = c.join(member=a, protocols=_sub([0, 1]), version=3)
    jb = c.join(member=b, protocols=_sub([2, 3]), version=3)
    assert ja[0]["generation_id"] == jb[0]["generation_id"] == epoch + 1
    leader = ja[0]["leader"]
    c.sync(member=leader, generation=epoch + 1, assignments=(
        (a, encode_assignment({"foo": [0, 1]})), (b, encode_assignment({"foo": [2, 3]}))))
    assert c.classic().state is ClassicState.STABLE
    # The records replay into the same state.
    snap = c.snapshot()
    c.restart()
    assert c.snapshot() == snap


def test_downgrade_persists_and_replays():
    c = _coord()
    _a, _b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    c.hb(member="C", epoch=-1)
    before = c.classic().snapshot()
    c.restart()
    after = c.classic().snapshot()
    # The downgrade record is the group as it was converted (Stable, target assignments);
    # those miss the partitions C had, so the reloaded group resumes the rebalance the
    # downgrade started rather than leave them with nobody (simulator, seed 4783).
    assert after["generation"] == before["generation"] and set(after["members"]) == set(before["members"])
    assert before["state"] == after["state"] == ClassicState.PREPARING_REBALANCE.value


@pytest.mark.parametrize("policy,upgrades,downgrades", [
    ("bidirectional", True, True), ("upgrade", True, False), ("downgrade", False, True), ("disabled", False, False)])
def test_migration_policy(policy, upgrades, downgrades):
    c = _coord(migration_policy=policy)
    a, b, _gen = _classic_pair(c)
    resp = c.hb(member="C", epoch=0, topics=("foo",))
    if not upgrades:
        assert resp["error_code"] == GROUP_ID_NOT_FOUND and c.classic() is not None
        return
    assert resp["error_code"] == NONE
    c.hb(member="C", epoch=-1)
    assert (c.classic() is not None) is downgrades
    if not downgrades:
        assert c.group().state is not GroupState.DEAD and set(c.group().members) == {a, b}


def test_empty_groups_change_protocol_whatever_the_policy():
    c = _coord(migration_policy="disabled")
    c.hb(member="C", epoch=0, topics=("foo",))
    c.hb(member="C", epoch=-1)
    j = c.join(protocols=_sub(), version=3)
    assert j[0]["error_code"] == NONE and c.group() is None and c.classic() is not None
    c.leave("g", (j[0]["member_id"],))
    assert c.classic().state is ClassicState.EMPTY
    assert c.hb(member="D", epoch=0, topics=("foo",))["error_code"] == NONE
    assert c.classic() is None and c.group() is not None


def test_upgrade_is_refused_for_other_protocol_types_and_nonzero_epochs():
    c = _coord()
    j = c.join(protocols=(("x", b""),), protocol_type="connect", version=3)
    assert j[0]["error_code"] == NONE
    assert c.hb(member="C", epoch=0, topics=("foo",))["error_code"] == GROUP_ID_NOT_FOUND
    assert c.hb(member="C", epoch=3, topics=("foo",))["error_code"] == GROUP_ID_NOT_FOUND


def test_static_classic_member_replaces_itself_inside_a_consumer_group():
    c = _coord()
    c.hb(member="C", epoch=0, topics=("foo",))
    j = c.join(protocols=_sub(), version=5, instance_id="i1")
    old = j[0]["member_id"]
    j2 = c.join(protocols=_sub(), version=5, instance_id="i1")
    new = j2[0]["member_id"]
    assert j2[0]["error_code"] == NONE and new != old
    assert old not in c.group().members and c.group().static_members["i1"] == new
    assert c.cheartbeat(member=old, generation=j[0]["generation_id"], instance_id="i1") == FENCED_INSTANCE_ID


def test_no_upgrade_between_generations():
    # After a rebalance reset the assignments, what a cooperative member still holds is
    # unknown: converting could hand it to someone else. Kafka refuses too.
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.join(member=a, protocols=_sub([0, 1]), version=3)
    c.join(member=b, protocols=_sub([2, 3]), version=3)  # CompletingRebalance, nobody synced yet
    c.join(member=b, protocols=_sub([2]), version=3)  # changed metadata: a new rebalance resets the assignments
    assert c.classic().state is ClassicState.PREPARING_REBALANCE
    assert c.hb(member="C", epoch=0, topics=("foo",))["error_code"] == GROUP_ID_NOT_FOUND
    assert c.classic() is not None and c.group() is None


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_without_rebalance():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",), instance_id="ic")
    for _ in range(4):  # everyone converges: the classic members rejoin and revoke, C takes its share
        for mid in (a, b):
            if c.cheartbeat(member=mid, generation=c.group().members[mid].member_epoch) == REBALANCE_IN_PROGRESS:
                _rejoin_and_sync(c, mid, sorted(_owned(c, mid).get(FOO, [])))
        c.member_hb("g", "C")
    assert c.group().state is GroupState.STABLE
    held = sorted(_owned(c, "C")[FOO])
    epoch = c.group().group_epoch
    c.hb(member="C", epoch=-2, instance_id="ic")  # static leave: C keeps its assignment
    j = c.join(protocols=_sub(), version=5, instance_id="ic")  # the classic incarnation of C
    assert j[0]["error_code"] == NONE
    new = j[0]["member_id"]
    g = c.classic()
    assert c.group() is None and g is not None and g.state is ClassicState.STABLE
    assert g.generation == epoch == j[0]["generation_id"] and set(g.members) == {a, b, new}
    # No rebalance: it syncs straight away and gets what C held; the others heartbeat on.
    s = c.sync(member=new, generation=epoch, instance_id="ic")
    assert sorted(decode_assignment(s[0]["assignment"])["foo"]) == held
    assert c.cheartbeat(member=a, generation=epoch) == NONE
    snap = c.snapshot()
    c.restart()
    assert c.snapshot() == snap


def test_no_upgrade_while_a_cooperative_member_is_still_revoking():
    c = _coord()
    a, b, gen = _classic_pair(c)
    # A rejoins with new metadata (it owns foo-0,1): a rebalance; B rejoins too.
    ja = c.join(member=a, protocols=_sub([0, 1]), version=3)
    jb = c.join(member=b, protocols=_sub([2, 3]), version=3)
    assert ja and jb and ja[0]["generation_id"] == jb[0]["generation_id"] == gen + 1
    leader, follower = (a, b) if ja[0]["leader"] == a else (b, a)
    c.sync(member=follower, generation=gen + 1)
    # The cooperative leader moves foo-1 in two steps: A keeps foo-0 now and revokes foo-1.
    c.sync(member=leader, generation=gen + 1, assignments=(
        (a, encode_assignment({"foo": [0]})), (b, encode_assignment({"foo": [2, 3]}))))
    assert c.classic().state is ClassicState.STABLE
    r = c.hb(member="C", epoch=0, topics=("foo",))
    assert r["error_code"] == GROUP_ID_NOT_FOUND and "still revoking" in r["error_message"]
    assert c.classic() is not None and c.group() is None


def test_a_static_consumer_member_whose_classic_incarnation_is_still_there_does_not_convert_the_group():
    c = _coord()
    j = c.join(protocols=_sub(), version=5, instance_id="i1")
    assert j[0]["error_code"] == NONE
    c.sync(member=j[0]["member_id"], generation=j[0]["generation_id"], assignments=(
        (j[0]["member_id"], encode_assignment({"foo": [0, 1, 2, 3]})),))
    r = c.hb(member="C", epoch=0, topics=("foo",), instance_id="i1")
    assert r["error_code"] == 111  # UNRELEASED_INSTANCE_ID, as the consumer group would answer
    assert c.group() is None and c.classic() is not None  # not converted by a join that failed
