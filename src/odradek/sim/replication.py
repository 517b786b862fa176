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

Transactions (issue 19). The group coordinator writes a TxnOffsetCommit's records as a
transactional batch of the producer, and a transaction marker as a control batch
(broker/coordinator.py); the transaction coordinator's `__transaction_state` partitions are
replicated the same way. An `Entry` keeps what the broker's batch header keeps of that: the
producer id and epoch of a transactional record, or the marker (its key and value are then
None). `stored()` is what a load reads: the plain (key, value) pairs when the log holds no
transactional record or marker, else a `coordinator.records.StoredLog` in log order, as the
broker's `read_partition` splits a segment. `producers()` is the partition's producer
state (`log/producer_state.py`, the broker's own), which the leader asks before writing a
marker, as the broker's partition log does: a marker of an older producer epoch or an
older coordinator epoch is refused.
"""

from __future__ import annotations

from typing import NamedTuple

from odradek.coordinator import records as R
from odradek.coordinator.records import StoredLog, TransactionalPairs
from odradek.log.epochs import LeaderEpochCache
from odradek.log.producer_state import ProducerState
from odradek.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from odradek.records.control import Marker
from odradek.replication.follower import (
    OffsetOutOfRange,
    diverging_epoch,
    follower_high_watermark,
    truncation,
)

MAX_TRUNCATION_ROUNDS = 16  # each round cuts the follower's log back to an earlier epoch, or agrees


class Entry(NamedTuple):
    epoch: int  # the leader epoch it was appended at (RecordBatch partitionLeaderEpoch)
    key: bytes | None
    value: bytes | None
    producer_id: int = -1  # of a transactional batch's record (or of a marker)
    producer_epoch: int = -1
    marker: Marker | None = None  # a transaction marker (control batch): key and value are None


def _header(offset: int, entry: Entry) -> BatchHeader:
    """The batch header the broker's log would have for `entry`: what ProducerState reads."""
    attributes = TRANSACTIONAL_MASK | (CONTROL_MASK if entry.marker is not None else 0)
    return BatchHeader(0, offset, 0, entry.epoch, 2, 0, attributes, 0, 0, 0, entry.producer_id, entry.producer_epoch,
                       -1, 1)


class ReplicaLog:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.cache = LeaderEpochCache()  # no path: in memory only
        self.hw = 0  # the high watermark this broker knows: the first offset not known committed
        self._producers: ProducerState | None = None  # built on demand (transactions only)
        self._tracked = 0  # entries applied to it

    @property
    def end(self) -> int:
        """The log end offset (LEO): the offset the next record gets."""
        return len(self.entries)

    def pairs(self) -> list[tuple[bytes, bytes | None]]:
        """(key, value) of every record, oldest first: what a coordinator loads by replay."""
        return [(e.key, e.value) for e in self.entries]

    def stored(self) -> list | StoredLog:
        """What a coordinator loads: the pairs, or a StoredLog when the log holds
        transactional records or markers (broker/coordinator.py `read_partition`)."""
        if not any(e.producer_id >= 0 for e in self.entries):
            return self.pairs()
        out = StoredLog()
        run: list = []
        for e in self.entries:
            if e.producer_id < 0:
                run.append((e.key, e.value))
                continue
            if run:
                out.append(run)
                run = []
            if e.marker is not None:
                m = e.marker
                out.append(R.txn_marker(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch))
            else:
                out.append(TransactionalPairs(e.producer_id, e.producer_epoch, [(e.key, e.value)]))
        if run:
            out.append(run)
        return out

    def producers(self) -> ProducerState:
        """The partition's producer state as of its log end (rebuilt after a truncation)."""
        if self._producers is None:
            self._producers, self._tracked = ProducerState(), 0
        state = self._producers
        for offset in range(self._tracked, self.end):
            e = self.entries[offset]
            if e.marker is not None:
                state.end_transaction(e.marker, offset)
            elif e.producer_id >= 0:
                state.update(_header(offset, e))
        self._tracked = self.end
        return state

    def append_marker(self, epoch: int, marker: Marker) -> int:
        """Append a transaction marker at `epoch` as leader; the offset written. Raises
        SequenceError (nothing written) for a marker the producer state refuses."""
        self.producers().check_marker(marker)
        self.cache.assign(epoch, self.end)
        self.entries.append(Entry(epoch, None, None, marker.producer_id, marker.producer_epoch, marker))
        return self.end - 1

    def become_leader(self, epoch: int) -> None:
        # Kafka Partition.makeLeader: leaderLog.maybeAssignEpochStartOffset(epoch, logEndOffset).
        self.cache.assign(epoch, self.end)

    def append_as_leader(self, epoch: int, pairs: list[tuple[bytes, bytes | None]], producer_id: int = -1,
                         producer_epoch: int = -1) -> int:
        """Append at `epoch` (a producer's transactional batch when `producer_id` >= 0, checked
        first by the producer state as the broker's log checks it: SequenceError, nothing
        written); the last offset written."""
        if producer_id >= 0:
            self.producers().check(_header(self.end, Entry(epoch, None, None, producer_id, producer_epoch)))
        self.cache.assign(epoch, self.end)
        self.entries.extend(Entry(epoch, k, v, producer_id, producer_epoch) for k, v in pairs)
        return self.end - 1

    def truncate_to(self, offset: int) -> None:
        """Cut the log to end before `offset` (Kafka UnifiedLog.truncateTo). The epoch cache is
        cut even when the log is not: a broker elected leader that appended nothing before
        the next leader was elected holds an epoch with no records, which the new leader's
        history does not have (Kafka's comment: "Always truncate epoch cache ...")."""
        del self.entries[offset:]
        self.cache.truncate_from_end(min(offset, self.end))
        self.hw = min(self.hw, self.end)
        if self._tracked > self.end:
            self._producers = None  # rebuilt from the log (Kafka reloads producer state on truncation)

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
