"""replication/replica.py: Kafka's Replica.updateFetchStateOrThrow and ReplicaState.isCaughtUp."""

from __future__ import annotations

from odradek.replication.replica import NEVER, UNKNOWN_OFFSET, ReplicaState

LAG = 1000


def test_a_fetch_at_the_leaders_end_is_caught_up_now():
    r = ReplicaState(2).fetched(100, 0, leader_end_offset=100, now_ms=5000)
    assert (r.log_end_offset, r.last_caught_up_ms, r.last_fetch_leader_end_offset, r.last_fetch_ms) == (100, 5000, 100, 5000)
    assert r.is_caught_up(100, now_ms=999_999, max_lag_ms=LAG)  # equal ends: caught up however old


def test_reaching_the_leaders_end_of_the_previous_fetch_is_caught_up_as_of_then():
    # A busy leader: the follower is always one fetch behind, yet stays in sync.
    r = ReplicaState(2).fetched(90, 0, leader_end_offset=100, now_ms=1000)
    assert r.last_caught_up_ms == NEVER
    r = r.fetched(100, 0, leader_end_offset=120, now_ms=1400)
    assert r.last_caught_up_ms == 1000  # the time of the fetch whose leader end it reached
    assert r.is_caught_up(120, now_ms=2000, max_lag_ms=LAG)
    assert not r.is_caught_up(120, now_ms=2001, max_lag_ms=LAG)


def test_falling_further_behind_keeps_the_old_caught_up_time():
    r = ReplicaState(2).fetched(100, 0, leader_end_offset=100, now_ms=1000)
    r = r.fetched(100, 0, leader_end_offset=150, now_ms=1500)  # reached the previous leader end (100)
    assert r.last_caught_up_ms == 1000
    r = r.fetched(120, 0, leader_end_offset=200, now_ms=1900)  # did not reach 150
    assert r.last_caught_up_ms == 1000 and r.log_end_offset == 120
    assert not r.is_caught_up(200, now_ms=2001, max_lag_ms=LAG)


def test_the_caught_up_time_never_goes_back():
    r = ReplicaState(2, last_caught_up_ms=5000).fetched(10, 0, leader_end_offset=10, now_ms=4000)
    assert r.last_caught_up_ms == 5000


def test_a_new_leader_knows_nothing_of_its_followers_ends():
    r = ReplicaState(2, log_end_offset=80, last_caught_up_ms=100)
    in_sync = r.reset(90, now_ms=7000, new_leader=True, in_sync=True)
    assert in_sync.log_end_offset == UNKNOWN_OFFSET and in_sync.last_caught_up_ms == 7000
    assert in_sync.last_fetch_leader_end_offset == UNKNOWN_OFFSET and in_sync.last_fetch_ms == NEVER
    out = r.reset(90, now_ms=7000, new_leader=True, in_sync=False)
    assert out.last_caught_up_ms == NEVER and not out.is_caught_up(90, 7000, LAG)
    assert r.reset(90, now_ms=7000, new_leader=False, in_sync=True) is r
