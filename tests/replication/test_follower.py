"""replication/follower.py: the leader's DivergingEpoch answer and the follower's truncation
decision (Kafka Partition.readFromLocalLog, AbstractFetcherThread.getOffsetTruncationState)."""

from __future__ import annotations

import pytest

from odradek.log.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from odradek.replication.follower import (
    EpochEndOffset,
    OffsetOutOfRange,
    Truncation,
    diverging_epoch,
    follower_high_watermark,
    truncation,
)


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache()
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


# ------------------------------------------------------------------ the leader's answer

# The leader's history: epoch 1 at 0, epoch 3 at 50, epoch 5 at 80; log end 100.
LEADER = ((1, 0), (3, 50), (5, 80))


def test_a_follower_that_agrees_gets_records():
    c = cache(*LEADER)
    assert diverging_epoch(c, 100, 0, last_fetched_epoch=5, fetch_offset=90) is None
    assert diverging_epoch(c, 100, 0, last_fetched_epoch=3, fetch_offset=80) is None  # epoch 3 ended at 80
    assert diverging_epoch(c, 100, 0, last_fetched_epoch=UNDEFINED_EPOCH, fetch_offset=90) is None


def test_a_follower_past_the_end_of_its_epoch_on_the_leader_diverges():
    # It kept appending in epoch 3 (it was the old leader) past where epoch 3 ended here.
    assert diverging_epoch(cache(*LEADER), 100, 0, last_fetched_epoch=3, fetch_offset=85) == EpochEndOffset(3, 80)


def test_a_follower_in_an_epoch_the_leader_never_had_diverges_at_the_epoch_below():
    # Epoch 4 was a leader the new one never followed: the leader's largest epoch <= 4 is 3.
    assert diverging_epoch(cache(*LEADER), 100, 0, last_fetched_epoch=4, fetch_offset=82) == EpochEndOffset(3, 80)


def test_a_fetch_the_leader_cannot_place_is_out_of_range():
    with pytest.raises(OffsetOutOfRange):
        diverging_epoch(cache(*LEADER), 100, 0, last_fetched_epoch=9, fetch_offset=120)  # an epoch above all
    with pytest.raises(OffsetOutOfRange):
        diverging_epoch(cache(*LEADER), 100, 40, last_fetched_epoch=5, fetch_offset=30)  # below the log start
    with pytest.raises(OffsetOutOfRange):
        diverging_epoch(cache(), 100, 0, last_fetched_epoch=2, fetch_offset=10)  # no history at all


# ------------------------------------------------------------------ the follower's cut


def test_the_follower_cuts_to_the_leaders_end_of_the_common_epoch():
    # Follower: epoch 1 at 0, epoch 3 at 50 (its own appends as leader ran to 85).
    c = cache((1, 0), (3, 50))
    assert truncation(EpochEndOffset(3, 80), c, log_end_offset=85, fetch_offset=60) == Truncation(80, True)


def test_the_follower_keeps_its_log_when_it_ends_before_the_leaders_end():
    c = cache((1, 0), (3, 50))
    assert truncation(EpochEndOffset(3, 80), c, log_end_offset=70, fetch_offset=60) == Truncation(70, True)


def test_a_follower_that_never_had_the_leaders_epoch_cuts_to_its_own_epoch_below_and_asks_again():
    # The leader answered epoch 3 (ended at 80); this follower went from epoch 2 to 4.
    c = cache((1, 0), (2, 40), (4, 60))
    first = truncation(EpochEndOffset(3, 80), c, log_end_offset=90, fetch_offset=50)
    assert first == Truncation(60, False)  # epoch 2 ends here at 60 (where 4 starts)
    c.truncate_from_end(first.offset)
    # Next round: it now ends in epoch 2; say the leader's epoch 2 ended at 55.
    assert truncation(EpochEndOffset(2, 55), c, log_end_offset=60, fetch_offset=50) == Truncation(55, True)


def test_a_follower_without_epochs_trusts_the_leaders_offset():
    assert truncation(EpochEndOffset(3, 80), cache(), log_end_offset=85, fetch_offset=60) == Truncation(80, True)
    assert truncation(EpochEndOffset(3, 80), cache(), log_end_offset=70, fetch_offset=60) == Truncation(70, True)


def test_old_protocol_answers():
    c = cache((1, 0), (3, 50))
    # OffsetsForLeaderEpoch v0: an offset without an epoch
    assert truncation(EpochEndOffset(UNDEFINED_EPOCH, 75), c, 85, 60) == Truncation(75, True)
    # a leader without epoch history: back to the fetch offset (the high watermark)
    assert truncation(EpochEndOffset(3, UNDEFINED_EPOCH_OFFSET), c, 85, 60) == Truncation(60, True)


def test_a_follower_asks_for_the_first_epoch_the_leader_has_forgotten():
    # The leader's history starts at epoch 3 (older segments deleted); the follower is in
    # epoch 1. Kafka answers (requested epoch, start of the first epoch it has).
    leader = cache((3, 50), (5, 80))
    assert diverging_epoch(leader, 100, 50, last_fetched_epoch=1, fetch_offset=60) == EpochEndOffset(1, 50)
    follower = cache((1, 0))
    assert truncation(EpochEndOffset(1, 50), follower, 60, 40) == Truncation(50, True)


def test_a_followers_high_watermark_never_passes_its_log_end():
    assert follower_high_watermark(100, 80) == 80
    assert follower_high_watermark(70, 80) == 70
