"""The range server-side assignor: outcomes only (ranges, quotas, co-partitioning, stickiness)."""

from __future__ import annotations

import random
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.assignors import (
    ASSIGNORS,
    AssignmentSpec,
    MemberSpec,
    TopicSpec,
)
from odradek.coordinator.assignors.range import assign

T1, T2, T3 = (UUID(int=k) for k in (11, 22, 33))
GONE = UUID(int=999)
IDS = [T1, T2, T3]


def topics(**sizes_by_name) -> dict[UUID, TopicSpec]:
    ids = {"t1": T1, "t2": T2, "t3": T3}
    return {ids[n]: TopicSpec(ids[n], n, p) for n, p in sizes_by_name.items()}


def member(mid, subs, current=None) -> MemberSpec:
    return MemberSpec(mid, None, None, frozenset(subs), current or {})


def spec(members, tops) -> AssignmentSpec:
    return AssignmentSpec({m.member_id: m for m in members}, tops)


def with_current(s: AssignmentSpec, result, extra=()) -> AssignmentSpec:
    ms = [member(m.member_id, m.subscribed_topic_ids, result.get(m.member_id)) for m in s.members.values()]
    return spec(ms + list(extra), s.topics)


def owners(result) -> dict[tuple[UUID, int], str]:
    out = {}
    for mid, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{t}/{p} assigned twice"
                out[t, p] = mid
    return out


def check_valid(s: AssignmentSpec, result) -> None:
    """Exactly once, subscribers only, and per topic every subscriber has floor or ceil."""
    assert set(result) == set(s.members)
    own = owners(result)
    wanted = {t for m in s.members.values() for t in m.subscribed_topic_ids if t in s.topics}
    assert set(own) == {(t, p) for t in wanted for p in range(s.topics[t].partitions)}
    for t in wanted:
        subs = [mid for mid, m in s.members.items() if t in m.subscribed_topic_ids]
        n = s.topics[t].partitions
        counts = [len(result[mid].get(t, ())) for mid in subs]
        assert set(counts) <= {n // len(subs), -(-n // len(subs))}
        assert sum(counts) == n
        for (tt, _p), mid in own.items():
            if tt == t:
                assert mid in subs
    for a in result.values():
        assert all(isinstance(ps, frozenset) and ps for ps in a.values())


def moved(before, after) -> int:
    old, new = owners(before), owners(after)
    return sum(1 for tp, mid in old.items() if new.get(tp) != mid)


def test_registry_and_name():
    assert ASSIGNORS["range"].assign is assign
    assert ASSIGNORS["range"].NAME == "range"


def test_zero_members_and_empty_subscriptions():
    assert assign(spec([], topics(t1=3))) == {}
    s = spec([member("a", []), member("b", [GONE]), member("c", [T1])], topics(t1=3))
    assert assign(s) == {"a": {}, "b": {}, "c": {T1: frozenset({0, 1, 2})}}


def test_classic_ranges_from_scratch():
    s = spec([member(m, [T1]) for m in ("c", "a", "b")], topics(t1=7))
    r = assign(s)
    # sorted by member id; the first 7 % 3 = 1 member gets ceil(7/3) = 3
    assert r == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4})}, "c": {T1: frozenset({5, 6})}}


def test_more_members_than_partitions():
    s = spec([member(f"m{i}", [T1]) for i in range(5)], topics(t1=2))
    r = assign(s)
    check_valid(s, r)
    assert r["m0"] == {T1: frozenset({0})} and r["m1"] == {T1: frozenset({1})}
    assert all(r[f"m{i}"] == {} for i in (2, 3, 4))


def test_co_partitioning_from_scratch():
    s = spec([member(f"m{i}", [T1, T2]) for i in range(3)], topics(t1=8, t2=8, t3=8))
    r = assign(s)
    check_valid(s, r)
    for a in r.values():
        assert a[T1] == a[T2]


def test_co_partitioning_survives_join_and_leave():
    s = spec([member(f"m{i}", [T1, T2]) for i in range(3)], topics(t1=8, t2=8))
    before = assign(s)
    joined = assign(with_current(s, before, [member("m9", [T1, T2])]))
    for a in joined.values():
        assert a.get(T1) == a.get(T2)
    left = {k: v for k, v in joined.items() if k != "m1"}
    s3 = with_current(spec([m for m in s.members.values() if m.member_id != "m1"] + [member("m9", [T1, T2])],
                           s.topics), left)
    after = assign(s3)
    check_valid(s3, after)
    for a in after.values():
        assert a.get(T1) == a.get(T2)


def test_heterogeneous_subscriptions():
    s = spec([member("a", [T1]), member("b", [T1, T2]), member("c", [T2])], topics(t1=3, t2=4))
    r = assign(s)
    check_valid(s, r)
    assert r == {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2}), T2: frozenset({0, 1})},
                 "c": {T2: frozenset({2, 3})}}


def test_join_is_sticky():
    s = spec([member(f"m{i}", [T1]) for i in range(10)], topics(t1=100))
    before = assign(s)
    s2 = with_current(s, before, [member("m99", [T1])])
    after = assign(s2)
    check_valid(s2, after)
    got = len(after["m99"][T1])
    assert got == 9  # 100 / 11: the first 1 member gets 10, the rest 9
    assert moved(before, after) == got
    for mid, a in before.items():
        assert after[mid][T1] <= a[T1]


def test_leave_is_sticky():
    s = spec([member(f"m{i}", [T1]) for i in range(10)], topics(t1=100))
    before = assign(s)
    rest = {k: v for k, v in before.items() if k != "m4"}
    s2 = with_current(spec([m for m in s.members.values() if m.member_id != "m4"], s.topics), rest)
    after = assign(s2)
    check_valid(s2, after)
    assert moved(rest, after) == 0
    for mid, a in rest.items():
        assert a[T1] <= after[mid][T1]


def test_extra_slots_go_first_to_members_that_hold_them():
    # 7 partitions over 3 members: one extra slot. 'c' already holds 3, so it keeps them;
    # 'a' (first by id) would have had it from scratch.
    cur = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}, "c": {T1: frozenset({4, 5, 6})}}
    s = spec([member(m, [T1], cur[m]) for m in cur], topics(t1=7))
    assert assign(s) == cur


def test_current_naming_deleted_or_unsubscribed_partitions_is_ignored():
    cur = {T1: frozenset({1, 5, 9}), GONE: frozenset({0}), T2: frozenset({0})}
    s = spec([member("a", [T1], cur), member("b", [T1])], topics(t1=4, t2=2))
    r = assign(s)
    check_valid(s, r)
    assert r["a"] == {T1: frozenset({1, 0})}


def test_rerun_on_own_result_changes_nothing():
    s = spec([member(f"m{i}", [T1, T2] if i % 2 else [T1]) for i in range(5)], topics(t1=13, t2=6))
    r = assign(s)
    assert assign(with_current(s, r)) == r


def test_deterministic_whatever_the_member_order():
    ms = [member(f"m{i:02d}", [T1, T2] if i % 3 else [T3]) for i in range(9)]
    tops = topics(t1=10, t2=10, t3=4)
    first = assign(spec(ms, tops))
    for seed in range(5):
        shuffled = ms[:]
        random.Random(seed).shuffle(shuffled)
        assert assign(spec(shuffled, tops)) == first


@st.composite
def groups(draw):
    sizes = draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))
    tops = {IDS[k]: TopicSpec(IDS[k], f"t{k}", n) for k, n in enumerate(sizes)}
    ms = []
    for i in range(draw(st.integers(0, 6))):
        subs = draw(st.sets(st.sampled_from(IDS + [GONE])))
        cur = draw(st.dictionaries(st.sampled_from(IDS + [GONE]), st.frozensets(st.integers(-1, 13), min_size=1),
                                   max_size=3))
        ms.append(member(f"m{i}", subs, cur))
    return spec(ms, tops)


@settings(max_examples=120, deadline=None)
@given(groups())
def test_property_invariants(s):
    r = assign(s)
    check_valid(s, r)
    assert assign(with_current(s, r)) == r
