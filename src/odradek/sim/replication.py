"""One broker's replica of a `__consumer_offsets` partition in the simulation, and a follower's fetch.

Theory of operation (Kafka's Log and ReplicaFetcherThread, reduced to what the coordinator
needs): a `ReplicaLog` is the records of one partition on one broker, each with the leader
epoch it was appended at, the leader epoch cache (log/epochs.py, in memory) and the
broker's high watermark. The leader appends at its epoch (`append_as_leader`); when it
becomes leader it starts its epoch at its log end in the cache, as Kafka's makeLeader
does, so a later follower can tell where that epoch began.

A follower copies its leader with `follow`, one call per Fetch and its answer (the
simulator puts the network's delay before it). It first settles where the two logs
diverge, with the real truncation protocol of `replication/follower.py` (KIP-101,
KIP-279, the DivergingEpoch of Fetch v12+): the leader compares the follower's last
epoch and log end with its own epoch history and the follower truncates to what the
leader says, again until they agree. So records a deposed leader appended at its old
epoch, which no follower copied, are cut from its log once it follows the new leader,
and a follower that copied more of the old leader than the new leader did loses the
extra too. Then it copies everything past its log end, and takes the leader's high
watermark, capped by its own log end (`follower_high_watermark`).

The leader's side of the fetch (the follower's LEO, the ISR, the high watermark) is the
broker's own `replication.leader.LeaderPartition`, driven by sim/cluster.py.
"""

from __future__ import annotations

from typing import NamedTuple

from odradek.log.epochs import LeaderEpochCache
from odradek.replication.follower import (
    OffsetOutOfRange,
    diverging_epoch,
    follower_high_watermark,
    truncation,
)

MAX_TRUNCATION_ROUNDS = 16  # each round cuts the follower's log back to an earlier epoch, or agrees


class Entry(NamedTuple):
    epoch: int  # the leader epoch it was appended at (RecordBatch partitionLeaderEpoch)
    key: bytes
    value: bytes | None


class ReplicaLog:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.cache = LeaderEpochCache()  # no path: in memory only
        self.hw = 0  # the high watermark this broker knows: the first offset not known committed

    @property
    def end(self) -> int:
        """The log end offset (LEO): the offset the next record gets."""
        return len(self.entries)

    def pairs(self) -> list[tuple[bytes, bytes | None]]:
        """(key, value) of every record, oldest first: what a coordinator loads by replay."""
        return [(e.key, e.value) for e in self.entries]

    def become_leader(self, epoch: int) -> None:
        # Kafka Partition.makeLeader: leaderLog.maybeAssignEpochStartOffset(epoch, logEndOffset).
        self.cache.assign(epoch, self.end)

    def append_as_leader(self, epoch: int, pairs: list[tuple[bytes, bytes | None]]) -> int:
        """Append at `epoch`; the last offset written."""
        self.cache.assign(epoch, self.end)
        self.entries.extend(Entry(epoch, k, v) for k, v in pairs)
        return self.end - 1

    def truncate_to(self, offset: int) -> None:
        """Cut the log to end before `offset` (Kafka UnifiedLog.truncateTo). The epoch cache is
        cut even when the log is not: a broker elected leader that appended nothing before
        the next leader was elected holds an epoch with no records, which the new leader's
        history does not have (Kafka's comment: "Always truncate epoch cache ...")."""
        del self.entries[offset:]
        self.cache.truncate_from_end(min(offset, self.end))
        self.hw = min(self.hw, self.end)

    def _append_as_follower(self, entries: list[Entry]) -> None:
        for e in entries:
            self.cache.assign(e.epoch, self.end)  # a no-op within an epoch already started
            self.entries.append(e)


class Fetched(NamedTuple):
    truncated: int  # records the follower cut from its log end
    copied: int  # records it copied


def follow(follower: ReplicaLog, leader: ReplicaLog, leader_hw: int) -> Fetched:
    """One Fetch of `follower` from `leader` (whose high watermark was `leader_hw` when it
    answered): truncate where the logs diverge, then copy the rest and the high watermark."""
    before = follower.end
    lowest = before
    for _ in range(MAX_TRUNCATION_ROUNDS):
        last_epoch = follower.cache.latest_epoch()
        try:
            diverging = diverging_epoch(leader.cache, leader.end, 0, -1 if last_epoch is None else last_epoch,
                                        follower.end)
        except OffsetOutOfRange:
            follower.truncate_to(0)  # nothing to agree on: start over from the leader's log start
            lowest = 0
            continue
        if diverging is None:
            break
        cut = truncation(diverging, follower.cache, follower.end, follower.hw)
        follower.truncate_to(cut.offset)
        lowest = min(lowest, follower.end)
    else:
        raise AssertionError(f"follower and leader logs did not agree after {MAX_TRUNCATION_ROUNDS} rounds")
    new = leader.entries[follower.end:]
    follower._append_as_follower(new)
    follower.hw = follower_high_watermark(leader_hw, follower.end)
    return Fetched(before - lowest, len(new))
