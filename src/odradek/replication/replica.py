"""What a partition's leader knows of one follower (Kafka's `Replica` and `ReplicaState`).

Theory of operation: a follower tells its leader how far it got only by fetching: the
fetch offset of a follower's Fetch is its log end offset (LEO). The leader keeps, per
follower, an immutable `ReplicaState` replaced on every fetch, from which it decides
two things (leader.py): whether the follower counts for the high watermark, and whether
it is in sync (ISR shrink and expand).

"Caught up" is Kafka's definition (`ReplicaState.isCaughtUp`): the follower's LEO equals
the leader's, or within `replica.lag.time.max.ms` it fetched up to the leader's LEO as it
was at an earlier fetch. The second half is what lets a follower of a busy leader, which
is always one fetch behind, stay in sync: `last_caught_up_ms` moves to the time of the
previous fetch whenever this fetch reached the leader's LEO of that previous fetch
(`Replica.updateFetchStateOrThrow`).

Nothing here reads a clock: every time is passed in (milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

UNKNOWN_OFFSET = -1  # Kafka's UnknownOffsetMetadata: no fetch seen since this broker became leader
# "Never": Kafka uses 0, which its wall clock puts decades back; injected clocks start at 0.
NEVER = -(1 << 62)


@dataclass(frozen=True)
class ReplicaState:
    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = NEVER
    last_fetch_leader_end_offset: int = 0  # the leader's LEO when the follower last fetched
    last_fetch_ms: int = NEVER
    broker_epoch: int = -1  # Fetch v15+ ReplicaState.ReplicaEpoch; -1 when the follower sends none

    # Kafka Replica.updateFetchStateOrThrow
    def fetched(self, fetch_offset: int, log_start_offset: int, leader_end_offset: int, now_ms: int,
                broker_epoch: int = -1) -> ReplicaState:
        """The state after a Fetch from this follower at `fetch_offset` (its LEO), answered
        while the leader's LEO was `leader_end_offset`."""
        if fetch_offset >= leader_end_offset:
            caught_up = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end_offset:
            # It reached where the leader was at its previous fetch: caught up as of then.
            caught_up = max(self.last_caught_up_ms, self.last_fetch_ms)
        else:
            caught_up = self.last_caught_up_ms
        return replace(self, log_end_offset=fetch_offset, log_start_offset=log_start_offset,
                       last_caught_up_ms=caught_up, last_fetch_leader_end_offset=leader_end_offset,
                       last_fetch_ms=now_ms, broker_epoch=broker_epoch)

    # Kafka ReplicaState.isCaughtUp
    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_ms <= max_lag_ms

    # Kafka Replica.resetReplicaState
    def reset(self, leader_end_offset: int, now_ms: int, *, new_leader: bool, in_sync: bool) -> ReplicaState:
        """This broker became (or stays) the partition's leader. A new leader knows nothing of
        where its followers are (LEO unknown until they fetch); those in the ISR get a full
        lag window from now, the others none (Kafka: lastCaughtUpTime 0, long ago)."""
        if not new_leader:
            return self
        # Kafka: lastFetchLeaderLogEndOffset unknown, lastFetchTimeMs 0 (never).
        return ReplicaState(self.broker_id, last_caught_up_ms=now_ms if in_sync else NEVER,
                            last_fetch_leader_end_offset=UNKNOWN_OFFSET, last_fetch_ms=NEVER)
