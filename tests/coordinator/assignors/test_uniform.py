"""The uniform server-side assignor: outcomes only (coverage, balance, stickiness, racks)."""

from __future__ import annotations

import random
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.assignors import (
    ASSIGNORS,
    AssignmentSpec,
    AssignorError,
    MemberSpec,
    TopicSpec,
)
from odradek.coordinator.assignors.uniform import assign

T1, T2, T3, T4 = (UUID(int=k) for k in (11, 22, 33, 44))
GONE = UUID(int=999)


def topics(**sizes_by_name) -> dict[UUID, TopicSpec]:
    ids = {"t1": T1, "t2": T2, "t3": T3, "t4": T4}
    return {ids[n]: TopicSpec(ids[n], n, p) for n, p in sizes_by_name.items()}


def member(mid, subs, current=None, rack=None) -> MemberSpec:
    return MemberSpec(mid, None, rack, frozenset(subs), current or {})


def spec(members, tops) -> AssignmentSpec:
    return AssignmentSpec({m.member_id: m for m in members}, tops)


def loads(result) -> dict[str, int]:
    return {mid: sum(len(ps) for ps in a.values()) for mid, a in result.items()}


def owners(result) -> dict[tuple[UUID, int], str]:
    out = {}
    for mid, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{t}/{p} assigned twice"
                out[t, p] = mid
    return out


def check_valid(s: AssignmentSpec, result) -> None:
    """Every partition of every subscribed, existing topic exactly once, to a subscriber."""
    assert set(result) == set(s.members)
    own = owners(result)
    wanted = {t for m in s.members.values() for t in m.subscribed_topic_ids if t in s.topics}
    expected = {(t, p) for t in wanted for p in range(s.topics[t].partitions)}
    assert set(own) == expected
    for (t, _p), mid in own.items():
        assert t in s.members[mid].subscribed_topic_ids
    for a in result.values():
        assert all(isinstance(ps, frozenset) and ps for ps in a.values())


def moved(before, after) -> int:
    old, new = owners(before), owners(after)
    return sum(1 for tp, mid in old.items() if new.get(tp) != mid)


def with_current(s: AssignmentSpec, result, extra=()) -> AssignmentSpec:
    ms = [member(m.member_id, m.subscribed_topic_ids, result.get(m.member_id), m.rack_id) for m in s.members.values()]
    return spec(ms + list(extra), s.topics)


def has_improving_chain(s: AssignmentSpec, result) -> bool:
    """Independent check of balance optimality: is there a member u and a member v with
    load(u) >= load(v) + 2 such that partitions can be passed from u to v along members,
    each step giving a partition of a topic the next member subscribes to?"""
    load = loads(result)
    subs = {mid: m.subscribed_topic_ids for mid, m in s.members.items()}
    held = {mid: set(a) for mid, a in result.items()}
    for u in load:
        reach, todo = {u}, [u]
        while todo:
            x = todo.pop()
            for y, wants in subs.items():
                if y not in reach and held[x] & wants:
                    reach.add(y)
                    todo.append(y)
        if any(load[v] <= load[u] - 2 for v in reach):
            return True
    return False


# ----------------------------------------------------------------------------- basics


def test_registry_and_name():
    assert ASSIGNORS["uniform"].assign is assign
    assert ASSIGNORS["uniform"].NAME == "uniform"


def test_zero_members():
    assert assign(spec([], topics(t1=4))) == {}


def test_no_topics_and_no_subscriptions_get_empty():
    s = spec([member("a", []), member("b", [T1]), member("c", [GONE])], topics(t1=3))
    r = assign(s)
    assert r["a"] == {} and r["c"] == {}
    assert r["b"] == {T1: frozenset({0, 1, 2})}


def test_topic_nobody_subscribes_to_is_not_assigned():
    s = spec([member("a", [T1]), member("b", [T1])], topics(t1=4, t2=5))
    r = assign(s)
    check_valid(s, r)
    assert all(T2 not in a for a in r.values())


def test_zero_partition_topic():
    s = spec([member("a", [T1, T2]), member("b", [T1, T2])], topics(t1=0, t2=3))
    r = assign(s)
    check_valid(s, r)
    assert sorted(loads(r).values()) == [1, 2]


def test_unknown_topic_ids_in_subscriptions_are_ignored():
    # a's extra unknown id must not make the group heterogeneous or leak into the result
    s = spec([member("a", [T1, GONE]), member("b", [T1])], topics(t1=6))
    r = assign(s)
    check_valid(s, r)
    assert loads(r) == {"a": 3, "b": 3}
    assert all(set(a) == {T1} for a in r.values())


def test_current_naming_deleted_or_unsubscribed_partitions_is_ignored():
    cur = {T1: frozenset({0, 1, 7, -1}), GONE: frozenset({0}), T2: frozenset({0})}
    s = spec([member("a", [T1], cur), member("b", [T1])], topics(t1=4, t2=2))
    r = assign(s)
    check_valid(s, r)
    assert r["a"] == {T1: frozenset({0, 1})}  # kept what is still valid
    assert r["b"] == {T1: frozenset({2, 3})}


def test_duplicate_claims_in_current_first_member_keeps():
    s = spec([member("a", [T1], {T1: frozenset({0, 1})}), member("b", [T1], {T1: frozenset({1, 2})})],
             topics(t1=4))
    r = assign(s)
    check_valid(s, r)
    assert 0 in r["a"][T1] and 1 in r["a"][T1] and 2 in r["b"][T1]


def test_inconsistent_spec_is_rejected():
    bad = AssignmentSpec({"a": member("a", [T1])}, {T1: TopicSpec(T2, "t1", 3)})
    with pytest.raises(AssignorError):
        assign(bad)
    with pytest.raises(AssignorError):
        assign(AssignmentSpec({"x": member("a", [T1])}, topics(t1=3)))
    with pytest.raises(AssignorError):
        assign(AssignmentSpec({"a": member("a", [T1])}, {T1: TopicSpec(T1, "t1", 2, (frozenset(),))}))


def test_deterministic_whatever_the_member_order():
    ms = [member(f"m{i:02d}", [T1, T2] if i % 3 else [T1, T3]) for i in range(12)]
    tops = topics(t1=17, t2=9, t3=5)
    first = assign(spec(ms, tops))
    for seed in range(5):
        shuffled = ms[:]
        random.Random(seed).shuffle(shuffled)
        tops_shuffled = dict(sorted(tops.items(), key=lambda e: random.Random(seed).random()))
        assert assign(spec(shuffled, tops_shuffled)) == first


# ----------------------------------------------------------------------------- homogeneous


@pytest.mark.parametrize("n_members, sizes", [(1, (5,)), (3, (10,)), (4, (3, 3)), (7, (10, 1, 0, 12)), (10, (4,))])
def test_homogeneous_balance(n_members, sizes):
    tops = {UUID(int=k + 1): TopicSpec(UUID(int=k + 1), f"t{k}", n) for k, n in enumerate(sizes)}
    s = spec([member(f"m{i}", tops) for i in range(n_members)], tops)
    r = assign(s)
    check_valid(s, r)
    total = sum(sizes)
    assert set(loads(r).values()) <= {total // n_members, -(-total // n_members)}


def test_homogeneous_from_scratch_gives_contiguous_runs():
    s = spec([member(f"m{i}", [T1, T2]) for i in range(4)], topics(t1=6, t2=6))
    r = assign(s)
    assert r["m0"] == {T1: frozenset({0, 1, 2})}
    assert r["m1"] == {T1: frozenset({3, 4, 5})}
    assert r["m2"] == {T2: frozenset({0, 1, 2})}


def balanced_group(n=10, parts=(25, 25, 25, 25)):
    tops = {UUID(int=k + 1): TopicSpec(UUID(int=k + 1), f"t{k}", p) for k, p in enumerate(parts)}
    s = spec([member(f"m{i:02d}", tops) for i in range(n)], tops)
    return s, assign(s)


def test_join_moves_exactly_what_the_new_member_gets():
    s, before = balanced_group()
    s2 = with_current(s, before, [member("new", s.topics)])
    after = assign(s2)
    check_valid(s2, after)
    assert sorted(set(loads(after).values())) == [9, 10]
    assert moved(before, after) == loads(after)["new"] == 9
    for mid, a in before.items():  # old members only lose
        for t, ps in after[mid].items():
            assert ps <= a[t]


def test_leave_moves_only_the_leavers_partitions():
    s, before = balanced_group()
    left = {k: v for k, v in before.items() if k != "m03"}
    s2 = with_current(spec([m for m in s.members.values() if m.member_id != "m03"], s.topics), left)
    after = assign(s2)
    check_valid(s2, after)
    assert sorted(set(loads(after).values())) == [11, 12]
    assert moved(left, after) == 0
    for mid, a in left.items():  # the others keep everything they had
        for t, ps in a.items():
            assert ps <= after[mid][t]


def test_rerun_on_own_result_changes_nothing():
    s, before = balanced_group(7, (10, 13, 4))
    assert assign(with_current(s, before)) == before


def test_overloaded_member_keeps_up_to_its_quota():
    # a held everything; with 3 members it keeps 4 (q + 1 with an extra slot), b and c share the rest
    s = spec([member("a", [T1], {T1: frozenset(range(10))}), member("b", [T1]), member("c", [T1])], topics(t1=10))
    r = assign(s)
    check_valid(s, r)
    assert r["a"][T1] == frozenset(range(4))
    assert loads(r) == {"a": 4, "b": 3, "c": 3}


# ----------------------------------------------------------------------------- heterogeneous


def test_heterogeneous_three_members_two_topics():
    s = spec([member("A", [T1]), member("B", [T1, T2]), member("C", [T2])], topics(t1=4, t2=2))
    r = assign(s)
    check_valid(s, r)
    assert loads(r) == {"A": 2, "B": 2, "C": 2}


def test_heterogeneous_needs_a_chain_of_moves():
    # Loads 3/2/1: no single move helps (A can only give to B, which has 2). The optimum
    # 2/2/2 needs A -> B (t1) and B -> C (t2): exactly two partitions move.
    cur = {"A": {T1: frozenset({0, 1, 2})}, "B": {T1: frozenset({3}), T2: frozenset({0})}, "C": {T2: frozenset({1})}}
    s = spec([member("A", [T1], cur["A"]), member("B", [T1, T2], cur["B"]), member("C", [T2], cur["C"])],
             topics(t1=4, t2=2))
    r = assign(s)
    check_valid(s, r)
    assert loads(r) == {"A": 2, "B": 2, "C": 2}
    assert moved(cur, r) == 2


def test_heterogeneous_best_is_limited_by_subscriptions():
    s = spec([member("A", [T1]), member("B", [T1, T2])], topics(t1=2, t2=6))
    r = assign(s)
    check_valid(s, r)
    assert loads(r) == {"A": 2, "B": 6}  # A takes all it can
    s = spec([member("A", [T1]), member("B", [T2])], topics(t1=1, t2=9))
    assert loads(assign(s)) == {"A": 1, "B": 9}


def test_heterogeneous_members_with_fewer_options_are_served():
    # Greedy topic-by-topic would give the two-topic members as much of t1 as the others.
    ms = [member(f"a{i}", [T1]) for i in range(3)] + [member(f"b{i}", [T1, T2]) for i in range(3)]
    s = spec(ms, topics(t1=30, t2=30))
    r = assign(s)
    check_valid(s, r)
    assert set(loads(r).values()) == {10}
    assert all(set(r[f"a{i}"]) == {T1} for i in range(3))


def test_heterogeneous_join_moves_only_what_the_new_member_gets():
    ms = [member(f"m{i:02d}", [T1, T2] if i % 2 else [T2, T3]) for i in range(10)]
    s = spec(ms, topics(t1=30, t2=40, t3=30))
    before = assign(s)
    check_valid(s, before)
    assert set(loads(before).values()) == {10}
    s2 = with_current(s, before, [member("new", [T1, T2])])
    after = assign(s2)
    check_valid(s2, after)
    assert sorted(set(loads(after).values())) == [9, 10]
    assert moved(before, after) == loads(after)["new"]
    assert not has_improving_chain(s2, after)


def test_heterogeneous_rerun_on_own_result_changes_nothing():
    ms = [member(f"m{i}", [T1, T2][: 1 + i % 2] + ([T3] if i % 3 == 0 else [])) for i in range(7)]
    s = spec(ms, topics(t1=11, t2=7, t3=5))
    before = assign(s)
    assert assign(with_current(s, before)) == before


# ----------------------------------------------------------------------------- racks


def rack_topic(tid, name, racks_per_partition):
    return TopicSpec(tid, name, len(racks_per_partition), tuple(frozenset(r) for r in racks_per_partition))


def test_rack_preferred_when_balance_allows():
    t = rack_topic(T1, "t1", [["r1"] if p % 2 == 0 else ["r2"] for p in range(8)])
    ms = [member("a", [T1], rack="r1"), member("b", [T1], rack="r2"), member("c", [T1], rack="r1"),
          member("d", [T1], rack="r2")]
    s = spec(ms, {T1: t})
    r = assign(s)
    check_valid(s, r)
    assert set(loads(r).values()) == {2}
    for m in ms:
        for p in r[m.member_id][T1]:
            assert m.rack_id in t.partition_racks[p]


def test_balance_outranks_rack():
    t = rack_topic(T1, "t1", [["r1"]] * 6)
    s = spec([member("a", [T1], rack="r1"), member("b", [T1], rack="r2")], {T1: t})
    assert loads(assign(s)) == {"a": 3, "b": 3}


def test_rack_outranks_stickiness():
    t = rack_topic(T1, "t1", [["r1"], ["r2"], ["r1"], ["r2"]])
    cur_a, cur_b = {T1: frozenset({1, 3})}, {T1: frozenset({0, 2})}  # both on the wrong rack
    s = spec([member("a", [T1], cur_a, rack="r1"), member("b", [T1], cur_b, rack="r2")], {T1: t})
    r = assign(s)
    assert r == {"a": {T1: frozenset({0, 2})}, "b": {T1: frozenset({1, 3})}}


def test_racks_everywhere_or_nowhere_change_nothing():
    plain = spec([member(f"m{i}", [T1], rack=f"r{i % 2}") for i in range(3)], topics(t1=7))
    everywhere = spec(list(plain.members.values()), {T1: rack_topic(T1, "t1", [["r0", "r1"]] * 7)})
    unknown_rack_members = spec([member(f"m{i}", [T1]) for i in range(3)],
                                {T1: rack_topic(T1, "t1", [["r0"], ["r1"]] * 3 + [["r0"]])})
    assert assign(everywhere) == assign(plain)
    check_valid(unknown_rack_members, assign(unknown_rack_members))


def test_heterogeneous_rack_preferred_when_balance_allows():
    t1 = rack_topic(T1, "t1", [["r2"], ["r1"]])
    tops = {T1: t1, T2: TopicSpec(T2, "t2", 2), T3: TopicSpec(T3, "t3", 2)}
    s = spec([member("A", [T1, T2], rack="r1"), member("B", [T1, T3], rack="r2")], tops)
    r = assign(s)
    check_valid(s, r)
    assert loads(r) == {"A": 3, "B": 3}
    assert r["A"][T1] == frozenset({1}) and r["B"][T1] == frozenset({0})


# ----------------------------------------------------------------------------- properties

IDS = [T1, T2, T3, T4]


@st.composite
def groups(draw, homogeneous: bool):
    sizes = draw(st.lists(st.integers(0, 9), min_size=1, max_size=4))
    tops = {IDS[k]: TopicSpec(IDS[k], f"t{k}", n) for k, n in enumerate(sizes)}
    n = draw(st.integers(0, 7))
    everything = draw(st.sets(st.sampled_from(IDS + [GONE]), min_size=1))
    ms = []
    for i in range(n):
        subs = everything if homogeneous else draw(st.sets(st.sampled_from(IDS + [GONE])))
        cur = draw(st.dictionaries(st.sampled_from(IDS + [GONE]), st.frozensets(st.integers(-1, 10), min_size=1),
                                   max_size=3))
        rack = draw(st.sampled_from([None, "r1", "r2"]))
        ms.append(member(f"m{i}", subs, cur, rack))
    return spec(ms, tops)


@settings(max_examples=80, deadline=None)
@given(groups(homogeneous=True))
def test_property_homogeneous(s):
    r = assign(s)
    check_valid(s, r)
    got = [n for mid, n in loads(r).items() if set(s.members[mid].subscribed_topic_ids) & set(s.topics)]
    if got:
        assert max(got) - min(got) <= 1
    assert assign(with_current(s, r)) == r  # a balanced assignment is kept as it is


@settings(max_examples=100, deadline=None)
@given(groups(homogeneous=False))
def test_property_heterogeneous(s):
    r = assign(s)
    check_valid(s, r)
    assert not has_improving_chain(s, r)
    assert assign(with_current(s, r)) == r


@settings(max_examples=40, deadline=None)
@given(groups(homogeneous=False), st.data())
def test_property_with_racks(s, data):
    tops = {
        t: rack_topic(t, ts.name, [data.draw(st.sets(st.sampled_from(["r1", "r2", "r3"]))) for _ in range(ts.partitions)])
        for t, ts in s.topics.items()
    }
    s = AssignmentSpec(s.members, tops)
    r = assign(s)
    check_valid(s, r)
    assert not has_improving_chain(s, r)
