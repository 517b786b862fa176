"""What every coordinator runtime shares: shard states, elections, and the write timeout.

Theory of operation (Kafka's CoordinatorRuntime, which runs the group coordinator and,
in Kafka 4, the share and transaction coordinators' kin on the same machinery): a
coordinator has one shard per partition of its log topic (`__consumer_offsets`,
`__transaction_state`), active only while this node leads that partition. A shard moves
through `SHARD_TRANSITIONS` keyed by (state, event); a request for a shard that is not
active is refused with the code Kafka's activeContextOrThrow gives (`_REFUSAL`), and one
that arrives while the node cannot be sure it still leads (its cluster lease may have
lapsed: `serving()` is False) with NOT_COORDINATOR.

Answers wait until the partition's committed offset reaches the records they describe.
`_stalled` remembers since when some have waited without the committed offset moving;
after `write_timeout_ms` they fail COORDINATOR_NOT_AVAILABLE (Kafka's write timeout,
offsets.commit.timeout.ms, as GroupCoordinatorService normalizes it).

`ShardElections` is a base class: the group runtime (coordinator/runtime.py) and the
transaction runtime (transactions/runtime.py) provide `shards` (partition -> a shard with
`last_written_offset` and `last_committed_offset`), `deferred` (partition ->
DeferredQueue), `serving`, `commit_on_write` and `write_timeout_ms`, and `_committed`: what
the runtime does when a partition's committed offset moves, before its answers are released.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from ..protocol.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
)
from .errors import CoordinatorUnavailable


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


class ShardEvent(enum.Enum):
    ELECT = "elect"  # this broker became the partition's leader (coordinator)
    LOADED = "loaded"
    LOAD_FAILED = "load-failed"
    RESIGN = "resign"  # it no longer is


# Kafka's CoordinatorRuntime.CoordinatorState moves, keyed by input (h11 style). An
# election of a shard already loading or loaded only raises its epoch (no entry needed:
# `begin_election` does not reload it); an input with no entry is a bug.
SHARD_TRANSITIONS: dict[tuple[ShardState | None, ShardEvent], ShardState] = {
    (None, ShardEvent.ELECT): ShardState.LOADING,
    (ShardState.CLOSED, ShardEvent.ELECT): ShardState.LOADING,
    (ShardState.FAILED, ShardEvent.ELECT): ShardState.LOADING,
    (ShardState.LOADING, ShardEvent.LOADED): ShardState.ACTIVE,
    (ShardState.LOADING, ShardEvent.LOAD_FAILED): ShardState.FAILED,
    (ShardState.ACTIVE, ShardEvent.LOAD_FAILED): ShardState.FAILED,  # a reload (the revert) failed
    (ShardState.LOADING, ShardEvent.RESIGN): ShardState.CLOSED,
    (ShardState.ACTIVE, ShardEvent.RESIGN): ShardState.CLOSED,
    (ShardState.FAILED, ShardEvent.RESIGN): ShardState.CLOSED,
    (None, ShardEvent.RESIGN): ShardState.CLOSED,
    (ShardState.CLOSED, ShardEvent.RESIGN): ShardState.CLOSED,
}

# Why a request for a shard in this state is refused (Kafka's activeContextOrThrow).
_REFUSAL = {None: NOT_COORDINATOR, ShardState.CLOSED: NOT_COORDINATOR, ShardState.FAILED: NOT_COORDINATOR,
            ShardState.LOADING: COORDINATOR_LOAD_IN_PROGRESS}


class ShardElections:
    log_topic = "__consumer_offsets"  # named in the errors a timed-out write gives
    shards: dict[int, Any]
    deferred: dict[int, Any]
    serving: Callable[[], bool]
    commit_on_write: bool | Callable[[int], bool]
    write_timeout_ms: int

    def __init__(self) -> None:
        self.states: dict[int, tuple[ShardState, int]] = {}  # partition -> (state, epoch)
        # partition -> since when (ms) answers have waited for its committed offset to move
        self._stalled: dict[int, int] = {}

    def state_of(self, partition: int) -> ShardState | None:
        entry = self.states.get(partition)
        return entry[0] if entry else None

    def epoch_of(self, partition: int) -> int:
        return self.states.get(partition, (None, -1))[1]

    def _move(self, partition: int, event: ShardEvent, epoch: int | None = None) -> ShardState:
        state, old_epoch = self.states.get(partition, (None, -1))
        new = SHARD_TRANSITIONS.get((state, event))
        assert new is not None, f"coordinator shard {partition}: no move for {event.value} in {state}"
        self.states[partition] = (new, old_epoch if epoch is None else epoch)
        return new

    def active_shard_at(self, partition: int, what: str = ""):
        """The shard of `partition`, or CoordinatorUnavailable saying why it cannot be served here."""
        shard = self.shards.get(partition)
        if shard is not None and not self.serving():
            raise CoordinatorUnavailable(NOT_COORDINATOR, f"partition {partition}{what}: this node "
                                                          "cannot be sure it still leads it")
        if shard is None:
            code = _REFUSAL[self.state_of(partition)]
            raise CoordinatorUnavailable(code, f"partition {partition}{what}: {code.name}")
        return shard

    def begin_election(self, partition: int, epoch: int) -> bool:
        """The first half of an election, for a driver that reads the log off its event
        loop: the shard is LOADING (its requests get COORDINATOR_LOAD_IN_PROGRESS, as
        Kafka's runtime answers while it loads) until `finish_election`. False when there
        is nothing to load: a stale epoch, or a shard already loading or loaded here (only
        its epoch moves)."""
        state, current = self.states.get(partition, (None, -1))
        if epoch < current or (epoch == current and state in (ShardState.LOADING, ShardState.ACTIVE)):
            return False
        if state in (ShardState.LOADING, ShardState.ACTIVE):
            self.states[partition] = (state, epoch)  # already ours: only the epoch moves
            return False
        self._move(partition, ShardEvent.ELECT, epoch)
        return True

    def _commits_on_write(self, partition: int) -> bool:
        c = self.commit_on_write
        return c if isinstance(c, bool) else c(partition)

    def complete_up_to(self, partition: int, committed_offset: int, now_ms: int | None = None) -> int:
        """The partition's log is committed up to `committed_offset` (single node: its end;
        cluster: the high watermark, which the driver reports with the time it moved): release
        the answers waiting for it. Returns how many. Progress restarts the write timeout."""
        shard = self.shards.get(partition)
        if shard is None:
            self._stalled.pop(partition, None)
            return 0
        self._committed(partition, shard, committed_offset)
        released = self.deferred[partition].complete_up_to(committed_offset)
        if shard.last_committed_offset >= shard.last_written_offset:
            self._stalled.pop(partition, None)
        elif now_ms is not None:
            self._stalled[partition] = now_ms
        return released

    def _committed(self, partition: int, shard, committed_offset: int) -> None:
        """What a runtime does first when its partition's committed offset moves."""
        raise NotImplementedError

    def fail_stalled_writes(self, now_ms: int) -> list[tuple[int, int]]:
        """Kafka's write timeout: REQUEST_TIMED_OUT, which GroupCoordinatorService answers
        as COORDINATOR_NOT_AVAILABLE, for every answer of a partition whose committed offset
        has not moved for `write_timeout_ms`. Runs whether or not the node is serving (a
        zombie's waiting answers time out too). Returns (partition, ms waited) of each that
        timed out, for the driver to report."""
        failed = []
        for partition, since in sorted(self._stalled.items()):
            shard = self.shards.get(partition)
            if shard is None or shard.last_committed_offset >= shard.last_written_offset:
                del self._stalled[partition]
            elif now_ms - since >= self.write_timeout_ms:
                del self._stalled[partition]
                self.fail_waiting(partition, CoordinatorUnavailable(
                    COORDINATOR_NOT_AVAILABLE, f"{self.log_topic}-{partition}: write not committed in time"))
                failed.append((partition, now_ms - since))
        return failed

    def fail_waiting(self, partition: int, error: BaseException) -> None:
        """Fail every answer waiting for `partition`'s records to commit (the driver's write
        timeout). The shard is not reverted: its records are in the log and may commit."""
        queue = self.deferred.get(partition)
        if queue is not None:
            queue.fail_all(error)
