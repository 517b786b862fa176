"""cluster/placement.py: Kafka's AdminUtils.assignReplicasToBrokers, checked against the
expectations of Kafka's own AdminRackAwareTest and ReplicationUtils/AdminTest cases."""

from __future__ import annotations

import collections
import random

import pytest

from odradek.cluster.placement import PlacementError, _rack_alternated, assign_replicas


def test_brokers_are_listed_alternating_between_racks():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert _rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert _rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]


def test_kafkas_rack_aware_expectation():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign_replicas(7, 3, racks, fixed_start=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}


def test_kafkas_rack_unaware_expectation():
    brokers = dict.fromkeys(range(5))
    assert assign_replicas(10, 3, brokers, fixed_start=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@pytest.mark.parametrize("seed", range(20))
def test_with_racks_every_partition_spans_as_many_racks_as_it_can(seed):
    rng = random.Random(seed)
    racks = {b: f"r{rng.randrange(3)}" for b in range(rng.randint(3, 9))}
    rf = rng.randint(1, min(3, len(racks)))
    out = assign_replicas(12, rf, racks, rng=rng)
    distinct = len(set(racks.values()))
    for replicas in out.values():
        assert len(replicas) == rf == len(set(replicas))
        assert len({racks[b] for b in replicas}) == min(rf, distinct)


def test_leaders_and_replicas_spread_evenly_over_three_brokers_in_three_racks():
    out = assign_replicas(6, 3, {1: "a", 2: "b", 3: "c"}, rng=random.Random(4))
    leaders = collections.Counter(r[0] for r in out.values())
    assert set(leaders.values()) == {2}
    assert all(sorted(r) == [1, 2, 3] for r in out.values())


def test_new_partitions_continue_the_leaders_round():
    # Kafka's addPartitions passes the existing count as the start partition: the new
    # partitions' leaders go on round the brokers where the first ones left off.
    brokers = dict.fromkeys(range(5))
    whole = assign_replicas(10, 3, brokers, fixed_start=0)
    more = assign_replicas(4, 3, brokers, fixed_start=0, start_partition=6)
    assert list(more) == [6, 7, 8, 9] and [r[0] for r in more.values()] == [whole[p][0] for p in range(6, 10)]


def test_the_same_seed_places_the_same_way():
    racks = {1: "a", 2: "b", 3: "c", 4: "a"}
    assert assign_replicas(8, 2, racks, rng=random.Random(9)) == assign_replicas(8, 2, racks, rng=random.Random(9))


def test_impossible_requests_are_refused():
    with pytest.raises(PlacementError, match="larger than 0"):
        assign_replicas(1, 0, {1: None})
    with pytest.raises(PlacementError, match="larger than available brokers: 2"):
        assign_replicas(1, 3, {1: None, 2: None})
    with pytest.raises(PlacementError, match="rack information"):
        assign_replicas(1, 2, {1: "a", 2: None})
    assert assign_replicas(3, 1, {7: None}) == {0: [7], 1: [7], 2: [7]}
