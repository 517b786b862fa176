"""replication/leader.py: the high watermark, ISR shrink and expand with one change in flight
(KIP-497's maximal ISR), and acks=all outcomes, as Kafka's Partition decides them."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import (
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
)
from odradek.replication.leader import (
    ISR_TRANSITIONS,
    HighWatermark,
    IllegalTransition,
    IsrEvent,
    IsrState,
    LeaderPartition,
    ProposeIsr,
    UnknownReplica,
)

LAG = 1000


def leader(isr=(1, 2, 3), *, leo=10, hw=10, min_isr=1, now=0, eligible=None) -> LeaderPartition:
    return LeaderPartition(1, (1, 2, 3), isr, leader_epoch=4, partition_epoch=7, log_end_offset=leo,
                           high_watermark=hw, now_ms=now, min_isr=min_isr, max_lag_ms=LAG, eligible=eligible)


# ------------------------------------------------------------------ high watermark


def test_the_high_watermark_is_the_least_end_of_the_isr():
    p = leader()
    assert p.appended(15, now_ms=10) == []  # the followers' ends are unknown since it became leader
    assert p.follower_fetched(2, 15, 0, now_ms=20) == []  # 3 still unknown
    assert p.follower_fetched(3, 12, 0, now_ms=30) == [HighWatermark(12)]
    assert p.follower_fetched(3, 15, 0, now_ms=40) == [HighWatermark(15)]
    assert p.high_watermark == 15


def test_the_high_watermark_never_goes_back():
    p = leader(hw=10)
    p.appended(20, 0)
    p.follower_fetched(2, 20, 0, 1)
    assert p.follower_fetched(3, 5, 0, 2) == [] and p.high_watermark == 10


def test_a_leader_alone_in_the_isr_advances_on_its_own_appends():
    p = leader(isr=(1,), hw=10)
    assert p.appended(13, 5) == [HighWatermark(13)]


def test_a_caught_up_follower_outside_the_isr_holds_the_high_watermark_back():
    # Kafka maybeIncrementLeaderHW: otherwise a follower catching up to a leader alone in
    # the ISR would chase a moving high watermark and never join.
    p = leader(isr=(1,), hw=10)
    p.followers[3] = p.followers[3].fetched(10, 0, 10, 0)  # caught up at time 0, not in the ISR
    assert p.appended(20, now_ms=500) == [] and p.high_watermark == 10  # 3's end (10) holds it
    assert p.appended(21, now_ms=1501) == [HighWatermark(21)]  # 3 is no longer caught up


def test_an_ineligible_follower_outside_the_isr_does_not_hold_it_back():
    p = leader(isr=(1,), hw=10, eligible=(1, 2))
    p.followers[3] = p.followers[3].fetched(10, 0, 10, 0)
    assert p.appended(20, now_ms=500) == [HighWatermark(20)]
    p2 = leader(isr=(1,), hw=10, eligible=(1, 2))
    p2.followers[3] = p2.followers[3].fetched(10, 0, 10, 0)
    p2.brokers_changed((1, 2, 3), 0)
    assert p2.appended(20, now_ms=500) == []


def test_no_high_watermark_advance_under_min_isr():
    p = leader(isr=(1,), hw=10, min_isr=2)
    assert p.appended(20, 5) == [] and p.high_watermark == 10


# ------------------------------------------------------------------ expand


def test_a_follower_joins_once_it_has_the_high_watermark_and_the_epochs_start():
    p = leader(isr=(1, 2), leo=10, hw=8)  # this epoch starts at 10
    p.follower_fetched(2, 10, 0, 1)
    assert p.high_watermark == 10
    assert p.follower_fetched(3, 9, 0, 2) == []  # below both
    p.appended(30, 3)
    p.follower_fetched(2, 30, 0, 4)
    assert p.high_watermark == 30
    assert p.follower_fetched(3, 20, 0, 5) == []  # past the epoch start, not the high watermark
    effects = p.follower_fetched(3, 30, 0, 6)
    assert effects == [ProposeIsr(frozenset({1, 2, 3}), 4, 7)] and p.state is IsrState.PENDING_EXPAND
    assert p.isr == {1, 2}  # not until the store takes it
    assert p.isr_committed(8, 7) == [] and p.isr == {1, 2, 3} and p.partition_epoch == 8


def test_the_epoch_start_offset_keeps_a_follower_behind_it_out():
    # Kafka isFollowerInSync: a new leader's high watermark may lag its log end; a follower
    # at the high watermark but before this epoch's first offset lacks records this
    # leader may have acknowledged.
    p = leader(isr=(1, 2), leo=20, hw=12)
    assert p.follower_fetched(3, 15, 0, 1) == []
    assert p.follower_fetched(3, 20, 0, 2) == [ProposeIsr(frozenset({1, 2, 3}), 4, 7)]


def test_an_ineligible_follower_does_not_join():
    p = leader(isr=(1, 2), eligible=(1, 2))
    assert p.follower_fetched(3, 10, 0, 1) == []


def test_while_an_expansion_is_in_flight_the_high_watermark_counts_the_newcomer():
    p = leader(isr=(1,), leo=10, hw=10)
    assert p.follower_fetched(2, 10, 0, 1) == [ProposeIsr(frozenset({1, 2}), 4, 7)]
    p.appended(20, 2)
    assert p.high_watermark == 10  # 2 is in the maximal ISR: its end holds it
    p.isr_rejected()
    assert p.state is IsrState.COMMITTED and p.isr == {1} and p.proposed is None


# ------------------------------------------------------------------ shrink


def test_a_follower_that_stops_fetching_leaves_after_the_lag_time():
    p = leader(now=0)
    p.follower_fetched(2, 10, 0, 100)
    p.follower_fetched(3, 10, 0, 100)
    p.appended(20, 200)
    p.follower_fetched(2, 20, 0, 300)
    assert p.tick(1000) == []  # 3 was caught up at 100: 900 ms ago
    assert p.tick(1101) == [ProposeIsr(frozenset({1, 2}), 4, 7)] and p.state is IsrState.PENDING_SHRINK
    assert p.high_watermark == 10  # the committed (larger) ISR still counts while in flight
    assert p.tick(5000) == []  # one change at a time
    assert p.isr_committed(8, 1200) == [HighWatermark(20)]
    assert p.isr == {1, 2}


def test_a_rejected_shrink_goes_back_to_the_committed_isr():
    p = leader()
    p.follower_fetched(2, 10, 0, 1)
    p.tick(5000)
    p.isr_rejected()
    assert p.isr == {1, 2, 3} and p.state is IsrState.COMMITTED
    assert p.tick(5001)  # may propose again


def test_a_newer_state_for_this_epoch_replaces_a_change_in_flight():
    p = leader()
    p.tick(5000)
    assert p.replaced((1, 2, 3), 7, 5001) == []  # what it already knew
    assert p.state is IsrState.PENDING_SHRINK
    p.replaced((1,), 9, 5002)
    assert p.isr == {1} and p.partition_epoch == 9 and p.state is IsrState.COMMITTED and p.proposed is None


def test_only_the_table_moves_the_isr_state():
    p = leader()
    with pytest.raises(IllegalTransition):
        p.isr_committed(8, 0)  # nothing was proposed
    with pytest.raises(IllegalTransition):
        p.isr_rejected()
    assert all(new is IsrState.COMMITTED for (_, e), new in ISR_TRANSITIONS.items()
               if e in (IsrEvent.COMMITTED, IsrEvent.REJECTED, IsrEvent.REPLACED))


def test_a_fetch_from_a_non_replica_is_refused():
    with pytest.raises(UnknownReplica):
        leader().follower_fetched(9, 0, 0, 0)


# ------------------------------------------------------------------ produce


def test_acks_all_is_refused_before_the_append_under_min_isr():
    p = leader(isr=(1,), min_isr=2)
    assert p.append_error(-1) == NOT_ENOUGH_REPLICAS
    assert p.append_error(1) == NONE and p.append_error(0) == NONE
    assert leader(min_isr=2).append_error(-1) == NONE


def test_acks_all_completes_when_the_high_watermark_passes_the_batch():
    p = leader(min_isr=2)
    p.appended(15, 0)
    assert p.acks_all_result(15) is None
    p.follower_fetched(2, 15, 0, 1)
    p.follower_fetched(3, 15, 0, 1)
    assert p.acks_all_result(15) == NONE


def test_acks_all_after_the_isr_fell_below_min_isr_is_not_enough_replicas_after_append():
    p = leader(isr=(1, 2), min_isr=2)
    p.appended(15, 0)
    p.follower_fetched(2, 15, 0, 1)
    assert p.high_watermark == 15
    p.replaced((1,), 8, 2)
    assert p.acks_all_result(15) == NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_the_watch_showing_the_leaders_own_write_commits_it_and_the_late_answer_is_ignored():
    # etcd orders neither the watch nor the transaction's answer first.
    p = leader(isr=(1, 2, 3), now=0)
    p.follower_fetched(2, 10, 0, 1)
    p.tick(5000)  # propose {1, 2}
    assert p.replaced((1, 2), 8, 5001) == [] and p.isr == {1, 2} and p.state is IsrState.COMMITTED
    assert p.isr_committed(8, 5002, isr=(1, 2)) == [] and p.isr == {1, 2} and p.partition_epoch == 8


def test_an_answer_for_a_proposal_no_longer_in_flight_changes_nothing():
    p = leader(isr=(1, 2, 3), now=0)
    p.follower_fetched(2, 10, 0, 1)
    p.tick(5000)  # propose {1, 2}
    p.replaced((1,), 9, 5001)  # someone else's newer state voids it
    assert p.isr_committed(8, 5002, isr=(1, 2)) == [] and p.isr == {1}
    p.isr_rejected(isr=(1, 2))
    assert p.isr == {1} and p.state is IsrState.COMMITTED
    # a rejection of an old proposal does not cancel a newer one
    p.follower_fetched(2, 10, 0, 5003)  # 2 rejoins: propose {1, 2}
    assert p.state is IsrState.PENDING_EXPAND
    p.isr_rejected(isr=(1, 3))
    assert p.state is IsrState.PENDING_EXPAND and p.proposed == {1, 2}
