"""Transaction coordinator handlers: one shard of `__transaction_state`, and the requests it serves.

Theory of operation (KIP-98; Kafka's TransactionCoordinator and TransactionStateManager):
a `TxnShard` holds the metadata of the transactional ids that hash to its partition, and
`replay(record)` is the only way it changes (DESIGN principle 2). A handler reads the
shard and returns `Result(records, response, markers)`; the runtime writes the records,
replays them, and answers once they are committed. `markers` asks the driver to write
transaction markers to the listed partitions once the records are committed (the second
phase), after which it runs `complete` to write CompleteCommit/CompleteAbort.

Requests and the answers Kafka gives (pre-KIP-890 flow, which librdkafka speaks):
  * InitProducerId: a new id gets a producer id at epoch 0; a known one in a completed
    state gets its epoch bumped (a new producer id once the epoch is exhausted), fencing
    older instances. An ongoing transaction is aborted with the bumped epoch (Kafka's
    PrepareEpochFence) and the caller is told CONCURRENT_TRANSACTIONS to retry; a
    prepared one, CONCURRENT_TRANSACTIONS until its markers are written. KIP-360: a
    caller naming its producer id and epoch must name the current ones (or the one
    before a bump it missed), else PRODUCER_FENCED.
  * AddPartitionsToTxn / AddOffsetsToTxn: the producer id and epoch must be current
    (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED); in a prepared state
    CONCURRENT_TRANSACTIONS; otherwise the transaction is Ongoing with the partitions
    added (nothing written when none is new).
  * EndTxn: Ongoing -> PrepareCommit/PrepareAbort, answered once that is committed; a
    retry of a decided end gets NONE (or CONCURRENT_TRANSACTIONS while markers are being
    written), a conflicting one INVALID_TXN_STATE.
  * A transaction Ongoing for longer than its timeout is aborted by the coordinator with
    the epoch bumped (Kafka's abortTimedOutTransactions), so the late producer is fenced.
  * Transactional ids left in a completed state for `transactional.id.expiration.ms` are
    removed (a tombstone).
Fencing errors are PRODUCER_FENCED, spelled INVALID_PRODUCER_EPOCH to clients older than
KIP-588 (the handlers in broker/ map it per version).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..coordinator.timer import Timer
from ..protocol.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
)
from .model import COMPLETED, MAX_EPOCH, PREPARED, TopicPartition, TxnMetadata, TxnState, can_move


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms (7 days)
    expiration_check_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    replication_factor: int = 3  # transaction.state.log.replication.factor
    min_isr: int = 2  # transaction.state.log.min.isr
    segment_bytes: int = 104_857_600  # transaction.state.log.segment.bytes

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> TxnConfig:
        keys = {
            "num_partitions": "transaction.state.log.num.partitions",
            "max_timeout_ms": "transaction.max.timeout.ms",
            "id_expiration_ms": "transactional.id.expiration.ms",
            "expiration_check_ms": "transaction.remove.expired.transaction.cleanup.interval.ms",
            "replication_factor": "transaction.state.log.replication.factor",
            "min_isr": "transaction.state.log.min.isr",
            "segment_bytes": "transaction.state.log.segment.bytes",
        }
        return cls(**{name: int(props[key]) for name, key in keys.items() if key in props})


class TxnRecord(NamedTuple):
    transactional_id: str
    txn: TxnMetadata | None  # None: tombstone (the id expired)


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Write a marker for (producer id, epoch) to every partition, then complete `transactional_id`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


class Result(NamedTuple):
    records: list[TxnRecord]
    response: Any
    markers: MarkerJob | None = None


@dataclass
class TxnShard:
    partition: int
    config: TxnConfig
    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    timer: Timer = field(default_factory=Timer)
    loading: bool = False
    last_written_offset: int = -1
    last_committed_offset: int = -1

    def replay(self, record: TxnRecord) -> None:
        tid, txn = record
        old = self.txns.get(tid)
        if txn is None:
            self.txns.pop(tid, None)
            self.timer.cancel(("timeout", tid))
            return
        if not self.loading and (old is None or old.state is not txn.state):
            # A live write follows the table; loading may start anywhere in a compacted history.
            assert can_move(old.state if old else None, txn.state), (
                f"{tid}: {old.state.name if old else None} -> {txn.state.name}")
        self.txns[tid] = txn

    def snapshot(self) -> dict[str, TxnMetadata]:
        return dict(self.txns)


def fenced(version_before_kip588: bool) -> Any:
    # KIP-588: clients older than the versions that know PRODUCER_FENCED get INVALID_PRODUCER_EPOCH.
    return INVALID_PRODUCER_EPOCH if version_before_kip588 else PRODUCER_FENCED


def _id_response(code, pid: int = -1, epoch: int = -1) -> dict:
    return {"error_code": code, "producer_id": pid, "producer_epoch": epoch}


def _bumped(txn: TxnMetadata, new_pid: int | None) -> tuple[int, int] | None:
    """(producer id, epoch) after a bump; a new id at epoch 0 once the epoch is exhausted
    (KIP-360), or None when one is needed and the caller had none to give."""
    if txn.producer_epoch < MAX_EPOCH - 1:
        return txn.producer_id, txn.producer_epoch + 1
    return None if new_pid is None else (new_pid, 0)


def init_producer_id(shard: TxnShard, tid: str, timeout_ms: int, expected_pid: int, expected_epoch: int,
                     new_pid: int | None, now_ms: int) -> Result:
    """InitProducerId with a transactional id. `new_pid` is a producer id the driver
    allocated in case one is needed (a new id, or an exhausted epoch)."""
    if not 0 < timeout_ms <= shard.config.max_timeout_ms:
        return Result([], _id_response(INVALID_TRANSACTION_TIMEOUT))
    txn = shard.txns.get(tid)
    if txn is None:
        if new_pid is None:
            return Result([], _id_response(CONCURRENT_TRANSACTIONS))  # the driver retries with one
        new = TxnMetadata(tid, new_pid, 0, timeout_ms, TxnState.EMPTY, frozenset(), now_ms, -1)
        return Result([TxnRecord(tid, new)], _id_response(NONE, new_pid, 0))
    if expected_pid >= 0 and not (expected_pid == txn.producer_id and expected_epoch == txn.producer_epoch):
        # KIP-360: only the current instance may bump its own epoch.
        return Result([], _id_response(PRODUCER_FENCED))
    if txn.state in PREPARED:
        return Result([], _id_response(CONCURRENT_TRANSACTIONS))  # markers still being written
    if txn.state is TxnState.ONGOING:
        # Kafka's prepareFenceProducerEpoch: abort the open transaction with the epoch
        # bumped (fencing the old instance at every partition), then let the caller retry.
        return _abort_with_bumped_epoch(txn, now_ms, _id_response(CONCURRENT_TRANSACTIONS))
    if txn.state is TxnState.DEAD:
        return Result([], _id_response(CONCURRENT_TRANSACTIONS))
    bumped = _bumped(txn, new_pid)
    if bumped is None:
        return Result([], _id_response(CONCURRENT_TRANSACTIONS))
    pid, epoch = bumped
    new = txn.moved(TxnState.EMPTY, now_ms, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                    partitions=frozenset(), start_ms=-1)
    return Result([TxnRecord(tid, new)], _id_response(NONE, pid, epoch))


def _abort_with_bumped_epoch(txn: TxnMetadata, now_ms: int, response: Any) -> Result:
    if txn.producer_epoch >= MAX_EPOCH - 1:
        # Kafka aborts an exhausted epoch without bumping it; the next InitProducerId
        # gives the id a new producer id.
        epoch = txn.producer_epoch
    else:
        epoch = txn.producer_epoch + 1
    fence = txn.moved(TxnState.PREPARE_EPOCH_FENCE, now_ms)
    prepared = fence.moved(TxnState.PREPARE_ABORT, now_ms, producer_epoch=epoch)
    job = MarkerJob(txn.transactional_id, txn.producer_id, epoch, False, txn.partitions)
    return Result([TxnRecord(txn.transactional_id, prepared)], response, job)


def _check_producer(txn: TxnMetadata | None, pid: int, epoch: int, old_version: bool):
    if txn is None or txn.producer_id != pid:
        return INVALID_PRODUCER_ID_MAPPING
    if txn.producer_epoch != epoch:
        return fenced(old_version)
    return None


def add_partitions(shard: TxnShard, tid: str, pid: int, epoch: int, partitions: list[TopicPartition],
                   now_ms: int, old_version: bool = False) -> Result:
    """AddPartitionsToTxn / AddOffsetsToTxn: the response is one error code for all the
    partitions (the handler spreads it per partition)."""
    txn = shard.txns.get(tid)
    error = _check_producer(txn, pid, epoch, old_version)
    if error is not None:
        return Result([], error)
    if txn.state in PREPARED or txn.state is TxnState.DEAD:
        return Result([], CONCURRENT_TRANSACTIONS)
    wanted = frozenset(partitions)
    if txn.state is TxnState.ONGOING and wanted <= txn.partitions:
        return Result([], NONE)  # already in the transaction: nothing to write
    start = now_ms if txn.state in COMPLETED else txn.start_ms
    new = txn.moved(TxnState.ONGOING, now_ms, partitions=txn.partitions | wanted, start_ms=start)
    return Result([TxnRecord(tid, new)], NONE)


def end_txn(shard: TxnShard, tid: str, pid: int, epoch: int, commit: bool, now_ms: int,
            old_version: bool = False) -> Result:
    txn = shard.txns.get(tid)
    error = _check_producer(txn, pid, epoch, old_version)
    if error is not None:
        return Result([], error)
    state = txn.state
    if state is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        new = txn.moved(target, now_ms)
        return Result([TxnRecord(tid, new)], NONE, MarkerJob(tid, pid, epoch, commit, txn.partitions))
    decided_commit = state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    if state in PREPARED:
        # A retry while the markers are written waits; the opposite decision is refused.
        return Result([], CONCURRENT_TRANSACTIONS if decided_commit == commit else INVALID_TXN_STATE)
    if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and decided_commit == commit:
        return Result([], NONE)  # a retry of an end that completed
    return Result([], INVALID_TXN_STATE)


def complete(shard: TxnShard, job: MarkerJob, now_ms: int) -> Result:
    """Every marker of `job` is written: PrepareX -> CompleteX, partitions cleared."""
    txn = shard.txns.get(job.transactional_id)
    prepared = TxnState.PREPARE_COMMIT if job.commit else TxnState.PREPARE_ABORT
    if txn is None or txn.state is not prepared or txn.producer_id != job.producer_id \
            or txn.producer_epoch != job.producer_epoch:
        return Result([], None)  # completed by another path meanwhile (a reload resent the same markers)
    done = TxnState.COMPLETE_COMMIT if job.commit else TxnState.COMPLETE_ABORT
    new = txn.moved(done, now_ms, partitions=frozenset())  # the start stays, as Kafka's describe shows it
    return Result([TxnRecord(job.transactional_id, new)], None)


def abort_timed_out(shard: TxnShard, tid: str, now_ms: int) -> Result:
    """Kafka's abortTimedOutTransactions: an ongoing transaction past its timeout is
    aborted with the epoch bumped, so the producer that went quiet is fenced."""
    txn = shard.txns.get(tid)
    if txn is None or txn.state is not TxnState.ONGOING or txn.deadline_ms is None or txn.deadline_ms > now_ms:
        return Result([], None)
    return _abort_with_bumped_epoch(txn, now_ms, None)


def expire_ids(shard: TxnShard, now_ms: int) -> Result:
    """Tombstones for ids idle in a completed state for `transactional.id.expiration.ms`."""
    horizon = now_ms - shard.config.id_expiration_ms
    records = [TxnRecord(tid, None) for tid, txn in sorted(shard.txns.items())
               if txn.state in COMPLETED and txn.last_update_ms <= horizon]
    return Result(records, None)


def pending_markers(shard: TxnShard) -> list[MarkerJob]:
    """The markers a newly loaded shard must (re)send: every prepared transaction's
    (Kafka's TransactionStateManager loads them into the marker channel)."""
    return [MarkerJob(tid, t.producer_id, t.producer_epoch, t.state is TxnState.PREPARE_COMMIT, t.partitions)
            for tid, t in sorted(shard.txns.items()) if t.state in PREPARED]


Handler = Callable[[TxnShard, int], Result]
