"""Unit tests of odradek.spark.offsets: offset specs, JSON form, rate limiting, range planning."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    Range,
    from_json,
    parse_offset_spec,
    ranges,
    rate_limit,
    to_json,
)

# ---------------------------------------------------------------- specs


def test_symbolic_specs():
    assert parse_offset_spec("earliest", "k") == OffsetSpec("earliest")
    assert parse_offset_spec(" Latest ", "k") == OffsetSpec("latest")
    assert (EARLIEST, LATEST) == (-2, -1)


def test_json_spec_keys_become_ints():
    spec = parse_offset_spec('{"a":{"0":5,"10":-2},"b":{"1":-1}}', "startingOffsets")
    assert spec == OffsetSpec("json", {"a": {0: 5, 10: EARLIEST}, "b": {1: LATEST}})


@pytest.mark.parametrize("bad", ['{"a":{"0":5}', '"earliest"', "3", "null", '{"a":5}', '{"a":{"p":1}}',
                                 '{"a":{"0":1.5e}}', '{"a":{"0":null}}'])
def test_malformed_json_spec(bad):
    with pytest.raises(ValueError) as info:
        parse_offset_spec(bad, "endingOffsets")
    assert "option endingOffsets must be earliest, latest or JSON" in str(info.value)


def test_out_of_range_values():
    with pytest.raises(ValueError, match="bad offset -3 for a-0"):
        parse_offset_spec('{"a":{"0":-3}}', "k")
    with pytest.raises(ValueError, match="bad offset 0 for a--1"):
        parse_offset_spec('{"a":{"-1":0}}', "k")
    # by timestamp: symbolic words and negative stamps are refused
    with pytest.raises(ValueError):
        parse_offset_spec("earliest", "k", by_timestamp=True)
    with pytest.raises(ValueError, match="bad offset -1"):
        parse_offset_spec('{"a":{"0":-1}}', "k", by_timestamp=True)
    assert parse_offset_spec('{"a":{"0":0}}', "k", by_timestamp=True) == OffsetSpec("timestamp", {"a": {0: 0}})


# ---------------------------------------------------------------- JSON form


def test_to_json_has_string_keys_and_round_trips():
    offsets = {"b": {10: 7, 2: 3}, "a": {0: 1}}
    raw = to_json(offsets)
    assert raw == {"a": {"0": 1}, "b": {"2": 3, "10": 7}}
    assert all(isinstance(p, str) for ps in raw.values() for p in ps)
    text = json.dumps(raw)
    assert text == '{"a": {"0": 1}, "b": {"2": 3, "10": 7}}'  # sorted: deterministic checkpoints
    back = from_json(json.loads(text))
    assert back == offsets
    assert all(isinstance(p, int) for ps in back.values() for p in ps)


def test_from_json_accepts_int_keys_too():
    assert from_json({"a": {0: "4", "1": 5}}) == {"a": {0: 4, 1: 5}}


# ---------------------------------------------------------------- rate_limit


def test_rate_limit_under_budget_returns_latest():
    start = {"t": {0: 0, 1: 5}}
    latest = {"t": {0: 3, 1: 9}}
    assert rate_limit(start, latest, 7) == latest
    assert rate_limit(start, latest, 100) == latest
    assert rate_limit(start, latest, 100) is not latest


def test_rate_limit_proportional():
    start = {"t": {0: 0, 1: 100}}
    latest = {"t": {0: 300, 1: 200}}  # backlogs 300 and 100
    assert rate_limit(start, latest, 40) == {"t": {0: 30, 1: 110}}


def test_rate_limit_remainder_goes_in_partition_order():
    start = {"t": {0: 0, 1: 0, 2: 0}}
    latest = {"t": {0: 10, 1: 10, 2: 10}}
    # 10 * 10 // 30 = 3 each, remainder 1 to the first (sorted) partition
    assert rate_limit(start, latest, 10) == {"t": {0: 4, 1: 3, 2: 3}}
    # budget 1: every share rounds to 0, the remainder still makes progress
    assert rate_limit(start, latest, 1) == {"t": {0: 1, 1: 0, 2: 0}}
    assert rate_limit(start, latest, 2) == {"t": {0: 1, 1: 1, 2: 0}}


def test_rate_limit_remainder_skips_partitions_without_room():
    start = {"a": {0: 0}, "b": {0: 0, 1: 0}}
    latest = {"a": {0: 1}, "b": {0: 0, 1: 9}}  # backlogs 1, 0, 9
    end = rate_limit(start, latest, 5)  # shares 0, 0, 4; remainder: a-0 has room
    assert end == {"a": {0: 1}, "b": {0: 0, 1: 4}}


def test_rate_limit_partition_unknown_to_start_reads_nothing():
    # a partition without a start has no backlog: it stays at latest (the reader fills new
    # partitions' starts before calling rate_limit)
    start = {"t": {0: 0}}
    latest = {"t": {0: 10, 1: 50}}
    assert rate_limit(start, latest, 4) == {"t": {0: 4, 1: 50}}


backlogs = st.dictionaries(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
                           st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(backlogs, st.integers(1, 3000))
def test_rate_limit_properties(parts, budget):
    start: dict = {}
    latest: dict = {}
    for (t, p), (s, n) in parts.items():
        start.setdefault(t, {})[p] = s
        latest.setdefault(t, {})[p] = s + n
    total = sum(n for _, n in parts.values())
    end = rate_limit(start, latest, budget)
    assert set(end) == set(latest) and all(set(end[t]) == set(latest[t]) for t in latest)
    taken = 0
    for t, ps in end.items():
        for p, e in ps.items():
            assert start[t][p] <= e <= latest[t][p]
            taken += e - start[t][p]
    assert taken == min(budget, total)  # the whole budget, never more, when there is enough backlog
    if total > budget:  # proportional: each share within 1 of its exact pro rata share
        for (t, p), (_, n) in parts.items():
            exact = budget * n / total
            assert abs((end[t][p] - start[t][p]) - exact) < 1 + 1e-9


# ---------------------------------------------------------------- ranges


def test_ranges_sorted_and_skip_empty():
    start = {"b": {1: 5, 0: 0}, "a": {0: 3}}
    end = {"b": {1: 5, 0: 4}, "a": {0: 8}, "c": {0: 9}}  # b-1 empty; c unknown to start
    assert ranges(start, end) == [Range("a", 0, 3, 8), Range("b", 0, 0, 4)]


def test_ranges_end_before_start_is_empty():
    assert ranges({"a": {0: 10}}, {"a": {0: 4}}) == []


def test_min_partitions_not_needed():
    start = {"a": {0: 0, 1: 0}}
    end = {"a": {0: 100, 1: 10}}
    assert ranges(start, end, 2) == ranges(start, end) == [Range("a", 0, 0, 100), Range("a", 1, 0, 10)]


def test_min_partitions_splits_one_partition_evenly():
    assert ranges({"a": {0: 0}}, {"a": {0: 100}}, 4) == [
        Range("a", 0, 0, 25), Range("a", 0, 25, 50), Range("a", 0, 50, 75), Range("a", 0, 75, 100)]


def test_min_partitions_splits_in_proportion():
    got = ranges({"a": {0: 0, 1: 0}}, {"a": {0: 10, 1: 30}}, 4)
    assert got == [Range("a", 0, 0, 10), Range("a", 1, 0, 10), Range("a", 1, 10, 20), Range("a", 1, 20, 30)]


def test_min_partitions_uneven_sizes():
    got = ranges({"a": {0: 0}}, {"a": {0: 10}}, 3)  # ceil(10/3) = 4
    assert got == [Range("a", 0, 0, 4), Range("a", 0, 4, 8), Range("a", 0, 8, 10)]
    assert ranges({"a": {0: 0}}, {"a": {0: 2}}, 5) == [Range("a", 0, 0, 1), Range("a", 0, 1, 2)]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(0, 6), st.tuples(st.integers(0, 500), st.integers(0, 500)), min_size=1,
                       max_size=6),
       st.one_of(st.none(), st.integers(1, 40)))
def test_ranges_cover_each_partition_exactly_once(parts, min_partitions):
    start = {"t": {p: s for p, (s, _) in parts.items()}}
    end = {"t": {p: s + n for p, (s, n) in parts.items()}}
    got = ranges(start, end, min_partitions)
    assert got == ranges(start, end, min_partitions)  # deterministic
    assert [(r.topic, r.partition) for r in got] == sorted((r.topic, r.partition) for r in got)
    for p, (s, n) in parts.items():
        pieces = [r for r in got if r.partition == p]
        covered = [o for r in pieces for o in range(r.start, r.end)]
        assert covered == list(range(s, s + n))  # contiguous, in order, no gaps, no overlap
        assert all(r.end > r.start for r in pieces)
    nonempty = sum(1 for _, n in parts.values() if n)
    if min_partitions is None or min_partitions <= nonempty:
        assert len(got) == nonempty
