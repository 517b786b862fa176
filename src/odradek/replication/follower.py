"""The truncation protocol: where a follower's log stops agreeing with its leader's.

Theory of operation (KIP-101, KIP-279, KIP-595's DivergingEpoch in Fetch v12+). After a
leader change a follower may hold records the new leader never had: the old leader's
last appends, acknowledged by nobody, or a follower's copy of them. Truncating to the
high watermark (the pre-KIP-101 rule) can lose acknowledged records or keep divergent
ones, so both sides compare leader epoch histories (log/epochs.py) instead:

  * The follower's Fetch names the epoch of its last record (`LastFetchedEpoch`) with its
    fetch offset (its LEO). The leader looks that epoch up in its own cache
    (`diverging_epoch`, Kafka Partition.readFromLocalLog): when it knows the epoch only
    up to an earlier offset, or knows only an older epoch, it answers no records and a
    `DivergingEpoch{epoch, end_offset}`: where its history of that epoch ends.
  * The follower truncates (`truncation`, Kafka AbstractFetcherThread
    .getOffsetTruncationState): to the smaller of the leader's end offset and its own end
    for that epoch, when it knows the epoch; when it does not, to the end of its own
    largest epoch below it, and asks again (the truncation is not complete). The same
    decision serves OffsetsForLeaderEpoch (API 23) answers on older paths.
  * A follower's high watermark is the leader's, capped by its own LEO
    (`follower_high_watermark`).

These are pure functions over a `LeaderEpochCache` and offsets; the replica fetcher
(broker) sends, truncates the log and the cache, and fetches again.
"""

from __future__ import annotations

from typing import NamedTuple

from ..log.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


class EpochEndOffset(NamedTuple):
    """Fetch v12+ DivergingEpoch; OffsetsForLeaderEpoch's (leader_epoch, end_offset)."""

    epoch: int
    end_offset: int


class Truncation(NamedTuple):
    offset: int  # truncate the log to end here (exclusive)
    complete: bool  # False: ask the leader again with the epoch the log now ends in


class OffsetOutOfRange(Exception):
    """The leader cannot place the follower's fetch (Kafka: OFFSET_OUT_OF_RANGE)."""


# Kafka Partition.readFromLocalLog, the lastFetchedEpoch check
def diverging_epoch(cache: LeaderEpochCache, log_end_offset: int, log_start_offset: int,
                    last_fetched_epoch: int, fetch_offset: int) -> EpochEndOffset | None:
    """On the leader: None when the follower's log agrees with ours up to `fetch_offset`;
    else where our history of its last epoch ends. Raises OffsetOutOfRange when that
    cannot be told (an epoch we never had and none below it), or the fetch is below our
    log start."""
    if last_fetched_epoch < 0:
        return None  # an old follower without epochs: it truncates by OffsetsForLeaderEpoch
    epoch, end = cache.end_offset_for(last_fetched_epoch, log_end_offset)
    if epoch == UNDEFINED_EPOCH or end == UNDEFINED_EPOCH_OFFSET:
        raise OffsetOutOfRange(f"cannot find the end of epoch {last_fetched_epoch}")
    if fetch_offset < log_start_offset:
        raise OffsetOutOfRange(f"fetch offset {fetch_offset} below the log start {log_start_offset}")
    if epoch < last_fetched_epoch or end < fetch_offset:
        return EpochEndOffset(epoch, end)
    return None


# Kafka AbstractFetcherThread.getOffsetTruncationState
def truncation(leader: EpochEndOffset, cache: LeaderEpochCache, log_end_offset: int,
               fetch_offset: int) -> Truncation:
    """On the follower, given the leader's answer for an epoch: where to cut our log.
    `fetch_offset` is where the follower would fetch from now (its high watermark at
    first), the fallback when the leader knows no epochs."""
    if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncation(fetch_offset, True)  # the leader has no epoch history to compare
    if leader.epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader.end_offset, log_end_offset), True)  # OffsetsForLeaderEpoch v0
    epoch, end = cache.end_offset_for(leader.epoch, log_end_offset)
    if end == UNDEFINED_EPOCH_OFFSET:
        # We kept no epochs then (a new replica, or one that lost its cache): the leader
        # answered an epoch below what we asked, so its end offset is safe to keep.
        return Truncation(min(leader.end_offset, log_end_offset), True)
    if epoch != leader.epoch:
        # We never had the leader's epoch: cut to the end of our largest epoch below it
        # and compare again from there.
        return Truncation(min(end, log_end_offset), False)
    return Truncation(min(end, leader.end_offset, log_end_offset), True)


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int) -> int:
    """Kafka: the follower's high watermark is the leader's, never past its own log end."""
    return min(leader_high_watermark, log_end_offset)
