"""What the transaction coordinator knows of one transactional id (Kafka's TransactionMetadata).

Theory of operation (KIP-98 "Transaction Coordinator"): a transactional id maps to one
producer id and its current epoch; InitProducerId bumps the epoch, which fences every
older instance of the producer. A transaction moves Empty -> Ongoing (partitions added)
-> PrepareCommit | PrepareAbort (the decision, written to `__transaction_state` before any
marker) -> CompleteCommit | CompleteAbort (every marker written) -> Ongoing again with the
next transaction. PrepareEpochFence is Kafka's in-memory state of a transaction being
aborted because a newer producer instance called InitProducerId; it is never written (the
record says PrepareAbort with the bumped epoch). Dead is a transactional id that expired
(`transactional.id.expiration.ms`); it is written as a tombstone.

The allowed moves are `VALID_PREVIOUS` (Kafka's TransactionState.validPreviousStates),
keyed by the new state; replaying a record that makes a move outside the table is a
corrupt log, and a handler that asks for one is a bug (an assertion).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

MAX_EPOCH = 32767  # Short.MaxValue: an epoch that would pass it gets a new producer id (KIP-360)


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        """The name DescribeTransactions/ListTransactions report (Kafka's TransactionState.stateName)."""
        return _WIRE_NAMES[self]


_WIRE_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

# Kafka's TransactionState.validPreviousStates: new state -> the states it may follow.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def can_move(old: TxnState | None, new: TxnState) -> bool:
    """Whether `old` -> `new` is allowed; a transactional id seen for the first time may
    start Empty (InitProducerId) only."""
    if old is None:
        return new is TxnState.EMPTY
    return old in VALID_PREVIOUS[new]


TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1  # when the transaction became Ongoing (-1 when none is)

    def moved(self, state: TxnState, now_ms: int, **changes) -> TxnMetadata:
        assert can_move(self.state, state), f"{self.transactional_id}: no move {self.state.name} -> {state.name}"
        return replace(self, state=state, last_update_ms=now_ms, **changes)

    @property
    def deadline_ms(self) -> int | None:
        """When an ongoing transaction times out (the coordinator aborts it)."""
        return self.start_ms + self.timeout_ms if self.state is TxnState.ONGOING else None
