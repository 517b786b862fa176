"""A partition's leader: its followers, the high watermark, the ISR (Kafka's `Partition`).

Theory of operation. One `LeaderPartition` exists per partition this broker leads, for
one leader epoch; a new epoch (or leading again after following) is a new object. It is
sans-I/O, as the coordinator is: the broker (the driver) reports what happened -- its own
appends, each follower Fetch, a periodic tick, the outcome of an ISR write, the live
brokers -- and gets back effects to carry out:

  * `HighWatermark(offset)`: the high watermark advanced; complete the acks=all produces
    it covers, wake consumers' fetches, tell followers in their next fetch response.
  * `ProposeIsr(isr, leader_epoch, partition_epoch)`: write this ISR to the metadata store
    as a compare-and-set on `partition_epoch` (KIP-497's AlterPartition carries the same
    three). The driver answers `isr_committed` with the new partition epoch, or
    `isr_rejected` when the store refused it (a newer state exists: this leader may be
    fenced, and the store's watch brings what replaced it).

The rules are Kafka's (core/src/main/scala/kafka/cluster/Partition.scala):

  * High watermark (`maybeIncrementLeaderHW`): the least LEO of the leader and of every
    follower that is in the "maximal" ISR, or caught up and eligible to join it; it only
    moves forward, and not at all while the committed ISR is smaller than
    `min.insync.replicas` (Kafka 3.7+). A follower whose LEO is unknown since this broker
    became leader holds it back until it fetches.
  * Maximal ISR (KIP-497): while an ISR change is in flight the high watermark counts the
    larger of the two sets -- the proposed one for an expansion, the committed one for a
    shrink -- so a change the store refuses never lets the high watermark pass a replica
    that still counts. At most one change is in flight (`ISR_TRANSITIONS`).
  * Expand (`maybeExpandIsr`/`isFollowerInSync`): a follower outside the ISR, eligible
    (a registered broker), whose LEO reached both the high watermark and the start
    offset of this leader epoch -- so it holds everything this leader may have
    acknowledged.
  * Shrink (`maybeShrinkIsr`, run every `replica.lag.time.max.ms / 2`): ISR followers not
    caught up (replica.py) for `replica.lag.time.max.ms` leave it.
  * Produce with acks=all (`appendRecordsToLeader`, `checkEnoughReplicasReachOffset`):
    refused with NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than
    `min.insync.replicas`; complete once the high watermark reaches the batch's end, with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile.

Time is passed in (`now_ms`); nothing here reads a clock, sends or writes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import NamedTuple

from ..protocol.errors import (
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
)
from ..transitions import IllegalTransition
from .replica import ReplicaState


class HighWatermark(NamedTuple):
    offset: int


class ProposeIsr(NamedTuple):
    isr: frozenset[int]
    leader_epoch: int
    partition_epoch: int  # the version the write compares against


Effect = HighWatermark | ProposeIsr


class IsrState(enum.Enum):
    COMMITTED = "committed"
    PENDING_EXPAND = "pending-expand"
    PENDING_SHRINK = "pending-shrink"


class IsrEvent(enum.Enum):
    PROPOSE_EXPAND = "propose-expand"
    PROPOSE_SHRINK = "propose-shrink"
    COMMITTED = "committed"  # the store took the proposal
    REJECTED = "rejected"  # the store refused it (stale partition epoch)
    REPLACED = "replaced"  # the store's watch brought a newer state for this leader epoch


ISR_TRANSITIONS: dict[tuple[IsrState, IsrEvent], IsrState] = {
    (IsrState.COMMITTED, IsrEvent.PROPOSE_EXPAND): IsrState.PENDING_EXPAND,
    (IsrState.COMMITTED, IsrEvent.PROPOSE_SHRINK): IsrState.PENDING_SHRINK,
    (IsrState.PENDING_EXPAND, IsrEvent.COMMITTED): IsrState.COMMITTED,
    (IsrState.PENDING_SHRINK, IsrEvent.COMMITTED): IsrState.COMMITTED,
    (IsrState.PENDING_EXPAND, IsrEvent.REJECTED): IsrState.COMMITTED,
    (IsrState.PENDING_SHRINK, IsrEvent.REJECTED): IsrState.COMMITTED,
    (IsrState.COMMITTED, IsrEvent.REPLACED): IsrState.COMMITTED,
    (IsrState.PENDING_EXPAND, IsrEvent.REPLACED): IsrState.COMMITTED,
    (IsrState.PENDING_SHRINK, IsrEvent.REPLACED): IsrState.COMMITTED,
}


class UnknownReplica(KeyError):
    """A Fetch from a broker that is not a replica of the partition (Kafka answers
    NOT_LEADER_OR_FOLLOWER; the driver maps it)."""


class LeaderPartition:
    """The leader's side of one partition for one leader epoch. See the module docstring."""

    def __init__(self, broker_id: int, replicas: Iterable[int], isr: Iterable[int], *, leader_epoch: int,
                 partition_epoch: int, log_end_offset: int, high_watermark: int, now_ms: int,
                 min_isr: int = 1, max_lag_ms: int = 30_000, eligible: Iterable[int] | None = None) -> None:
        self.broker_id = broker_id
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        # Kafka Partition.makeLeader: the first offset this epoch writes. A follower joins
        # the ISR only once it has everything before it (isFollowerInSync).
        self.epoch_start_offset = log_end_offset
        self.min_isr = min_isr
        self.max_lag_ms = max_lag_ms
        self.eligible = frozenset(self.replicas if eligible is None else eligible)
        self.state = IsrState.COMMITTED
        self.proposed: frozenset[int] | None = None
        self.followers = {
            b: ReplicaState(b).reset(log_end_offset, now_ms, new_leader=True, in_sync=b in self.isr)
            for b in self.replicas if b != broker_id
        }

    # ------------------------------------------------------------------ views

    @property
    def maximal_isr(self) -> frozenset[int]:
        """KIP-497: the ISR the high watermark must respect while a change is in flight."""
        return self.isr | self.proposed if self.proposed is not None else self.isr

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.min_isr

    def _move(self, event: IsrEvent) -> None:
        new = ISR_TRANSITIONS.get((self.state, event))
        if new is None:
            raise IllegalTransition(f"ISR: no move for {event.value} in {self.state.value}")
        self.state = new

    # ------------------------------------------------------------------ inputs

    def appended(self, log_end_offset: int, now_ms: int) -> list[Effect]:
        """This broker appended to the partition's log (as leader): its LEO is now `log_end_offset`."""
        self.log_end_offset = log_end_offset
        return self._maybe_increment_hw(now_ms)

    # Kafka Partition.updateFollowerFetchState. Not for a fetch answered with a DivergingEpoch
    # (Kafka skips the update then); and the high watermark the response carries is the one
    # read before this call.
    def follower_fetched(self, broker_id: int, fetch_offset: int, log_start_offset: int, now_ms: int,
                         broker_epoch: int = -1) -> list[Effect]:
        """A Fetch from follower `broker_id` at `fetch_offset` (its LEO), read against this
        leader's log as it is now."""
        before = self.followers.get(broker_id)
        if before is None:
            raise UnknownReplica(broker_id)
        after = before.fetched(fetch_offset, log_start_offset, self.log_end_offset, now_ms, broker_epoch)
        self.followers[broker_id] = after
        effects = self._maybe_expand(after)
        if after.log_end_offset != before.log_end_offset:
            effects += self._maybe_increment_hw(now_ms)
        return effects

    # Kafka Partition.maybeShrinkIsr
    def tick(self, now_ms: int) -> list[Effect]:
        """The periodic check (every `max_lag_ms / 2`): ISR followers that fell behind leave."""
        if self.state is not IsrState.COMMITTED:
            return []
        out = self.out_of_sync(now_ms)
        if not out:
            return []
        self.proposed = self.isr - out
        self._move(IsrEvent.PROPOSE_SHRINK)
        return [ProposeIsr(self.proposed, self.leader_epoch, self.partition_epoch)]

    def isr_committed(self, partition_epoch: int, now_ms: int, isr: Iterable[int] | None = None) -> list[Effect]:
        """The store took the proposed ISR (`isr`, when the driver says which); the partition's
        state now has `partition_epoch`. An answer for a proposal no longer in flight (the
        watch already brought it, or something newer) changes nothing, as Kafka ignores an
        AlterPartition response for a pending state it no longer has."""
        if isr is not None and self._stale(isr):
            return []
        self._move(IsrEvent.COMMITTED)
        self.isr, self.proposed = self.proposed, None
        self.partition_epoch = max(self.partition_epoch, partition_epoch)
        return self._maybe_increment_hw(now_ms)

    def isr_rejected(self, isr: Iterable[int] | None = None) -> None:
        """The store refused the proposal (its partition epoch moved on): back to the committed
        ISR. Kafka does the same on INVALID_UPDATE_VERSION and waits for the new state."""
        if isr is not None and self._stale(isr):
            return
        self._move(IsrEvent.REJECTED)
        self.proposed = None

    def _stale(self, isr: Iterable[int]) -> bool:
        return self.proposed is None or frozenset(isr) != self.proposed

    def replaced(self, isr: Iterable[int], partition_epoch: int, now_ms: int) -> list[Effect]:
        """The store's watch shows a newer state for this same leader epoch: this leader's own
        proposal (etcd does not order the watch and the transaction's answer: whichever
        comes first commits it), or another writer's (the controller removed a dead broker
        from the ISR), which voids any change in flight. A new leader epoch is not this:
        the driver makes a new LeaderPartition, or a follower."""
        if partition_epoch <= self.partition_epoch:
            return []  # what this leader already knows
        isr = frozenset(isr)
        if self.proposed is not None and isr == self.proposed:
            return self.isr_committed(partition_epoch, now_ms)
        self._move(IsrEvent.REPLACED)
        self.isr, self.proposed, self.partition_epoch = isr, None, partition_epoch
        return self._maybe_increment_hw(now_ms)

    def brokers_changed(self, eligible: Iterable[int], now_ms: int) -> list[Effect]:
        """The registered brokers changed: only they may join the ISR or hold the high
        watermark back without being in it (Kafka isReplicaIsrEligible)."""
        self.eligible = frozenset(eligible)
        return self._maybe_increment_hw(now_ms)

    # ------------------------------------------------------------------ produce

    def append_error(self, acks: int) -> int:
        """Kafka appendRecordsToLeader: acks=all is refused before the append when the ISR
        is below min.insync.replicas."""
        return NOT_ENOUGH_REPLICAS if acks == -1 and self.under_min_isr else NONE

    # Kafka Partition.checkEnoughReplicasReachOffset
    def acks_all_result(self, required_offset: int) -> int | None:
        """For an acks=all produce whose batch ends before `required_offset`: None while it
        must wait, else its error code."""
        if self.high_watermark < required_offset:
            return None
        return NOT_ENOUGH_REPLICAS_AFTER_APPEND if self.under_min_isr else NONE

    # ------------------------------------------------------------------ rules

    def out_of_sync(self, now_ms: int) -> frozenset[int]:
        """ISR followers not caught up within max_lag_ms (Kafka getOutOfSyncReplicas)."""
        return frozenset(b for b in self.isr if b != self.broker_id
                         and not self.followers[b].is_caught_up(self.log_end_offset, now_ms, self.max_lag_ms))

    def _in_sync(self, r: ReplicaState) -> bool:
        # Kafka isFollowerInSync
        return r.log_end_offset >= self.high_watermark and r.log_end_offset >= self.epoch_start_offset

    def _maybe_expand(self, r: ReplicaState) -> list[Effect]:
        if self.state is not IsrState.COMMITTED or r.broker_id in self.isr:
            return []
        if r.broker_id not in self.eligible or not self._in_sync(r):
            return []
        self.proposed = self.isr | {r.broker_id}
        self._move(IsrEvent.PROPOSE_EXPAND)
        return [ProposeIsr(self.proposed, self.leader_epoch, self.partition_epoch)]

    def _maybe_increment_hw(self, now_ms: int) -> list[Effect]:
        if self.under_min_isr:
            return []  # Kafka 3.7+: "Not increasing HWM because partition is under min ISR"
        leo = self.log_end_offset
        hw = leo
        maximal = self.maximal_isr
        for b, r in self.followers.items():
            if r.log_end_offset < hw and (
                    b in maximal or (r.is_caught_up(leo, now_ms, self.max_lag_ms) and b in self.eligible)):
                hw = r.log_end_offset
        if hw <= self.high_watermark:
            return []
        self.high_watermark = hw
        return [HighWatermark(hw)]
