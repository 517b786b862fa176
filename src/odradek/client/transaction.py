"""The transactional producer's core, sans-I/O: states, error handling, requests (KIP-98, KIP-360, KIP-447).

Theory of operation. A transactional producer owns one transactional id. `init_transactions`
finds the id's transaction coordinator (FindCoordinator key_type 1) and asks it for a
producer id and epoch (InitProducerId with the id and the transaction timeout); the
coordinator bumps the epoch, which fences any older producer with the same id (KIP-98
"zombie fencing") and aborts whatever transaction it left open. Then, per transaction:
`begin_transaction` (local only); before the first batch to a partition is sent, the
partition is added to the transaction (AddPartitionsToTxn, v0-3: the pre-KIP-890 flow that
librdkafka speaks); batches carry the transactional bit, the producer id and epoch and
their sequence numbers; `send_offsets_to_transaction` adds the consumer group
(AddOffsetsToTxn) and then commits the offsets through the group coordinator
(TxnOffsetCommit, which holds them back until the transaction commits); `commit_transaction`
flushes every batch and sends EndTxn(commit), `abort_transaction` drops what is still
queued, waits for what is in flight and sends EndTxn(abort). A transaction to which
nothing was added ends without EndTxn (the coordinator knows nothing of it), as in Java
and librdkafka.

This module is the part without I/O: the state machine, which partitions are in the
transaction, the request bodies, and what each answer means. `transacting` is its asyncio
driver, `producer` the sender that asks it whether a partition may be sent to.

States and transitions are a table (DESIGN principle 3; Java's TransactionManager.State,
librdkafka's rd_kafka_txn_state_transition_is_valid): an application call with no entry
for the current state raises IllegalStateError, except that in the two error states the
stored error is raised instead, since that is what the application needs to see.

    UNINITIALIZED --INIT--> INITIALIZING --INITIALIZED--> READY --BEGIN--> IN_TRANSACTION
    IN_TRANSACTION --COMMIT--> COMMITTING --COMPLETED--> READY
    IN_TRANSACTION | ABORTABLE_ERROR --ABORT--> ABORTING --COMPLETED--> READY
    ABORTING --BUMP--> INITIALIZING   (KIP-360: a new epoch after a transaction that lost records)
    IN_TRANSACTION | COMMITTING --ABORTABLE--> ABORTABLE_ERROR;  any --FATAL--> FATAL_ERROR

Errors are data too: `ERRORS[api]` maps each error code an answer can carry to an `Act`
(retry, find the coordinator again, fail the transaction, fail the producer), after the
handlers of Java's TransactionManager and librdkafka's rdkafka_txnmgr.c. The first error
that fails a transaction is the one kept (librdkafka: later abortable errors are ignored).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from .cluster import TopicPartition
from .errors import (
    IllegalStateError,
    KafkaError,
    TransactionAbortableError,
    TransactionFatalError,
)
from .offsets import OffsetAndMetadata

log = logging.getLogger(__name__)

# API keys this module speaks besides those in `versions.Api` (see transacting.TXN_VERSIONS).
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
FIND_COORDINATOR = 10

TRANSACTION_KEY_TYPE = 1  # FindCoordinator key_type: 0 group, 1 transaction

# Java's ADD_PARTITIONS_RETRY_BACKOFF_MS and librdkafka's 20 ms: CONCURRENT_TRANSACTIONS on
# AddPartitionsToTxn usually means the previous transaction's markers are still being
# written, which takes milliseconds, not a full retry.backoff.
CONCURRENT_TRANSACTIONS_BACKOFF_MS = 20


class State(Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "Committing"
    ABORTING = "Aborting"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


class Input(Enum):
    INIT = "init_transactions"
    INITIALIZED = "producer id assigned"
    BEGIN = "begin_transaction"
    COMMIT = "commit_transaction"
    ABORT = "abort_transaction"
    COMPLETED = "transaction ended"
    BUMP = "epoch bump"
    ABORTABLE = "abortable error"
    FATAL = "fatal error"


S, I = State, Input

TRANSITIONS: dict[tuple[State, Input], State] = {
    (S.UNINITIALIZED, I.INIT): S.INITIALIZING,
    # An init_transactions() that timed out may be called again and resumes (Java caches
    # the pending result, librdkafka resumes the call); KIP-360: it then sends the
    # producer id and epoch it has.
    (S.INITIALIZING, I.INIT): S.INITIALIZING,
    (S.INITIALIZING, I.INITIALIZED): S.READY,
    (S.READY, I.BEGIN): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, I.COMMIT): S.COMMITTING,
    (S.COMMITTING, I.COMMIT): S.COMMITTING,  # a commit that timed out, called again
    (S.COMMITTING, I.COMPLETED): S.READY,
    (S.IN_TRANSACTION, I.ABORT): S.ABORTING,
    (S.ABORTABLE_ERROR, I.ABORT): S.ABORTING,
    (S.ABORTING, I.ABORT): S.ABORTING,  # an abort that timed out, called again
    (S.ABORTING, I.COMPLETED): S.READY,
    # KIP-360: after aborting a transaction whose records' fate is unknown (sequence
    # numbers may have a gap), InitProducerId with the current id and epoch bumps the epoch,
    # which resets every sequence, instead of making the producer unusable.
    (S.ABORTING, I.BUMP): S.INITIALIZING,
    (S.IN_TRANSACTION, I.ABORTABLE): S.ABORTABLE_ERROR,
    (S.COMMITTING, I.ABORTABLE): S.ABORTABLE_ERROR,
    # Already failed or being aborted: the first error stays the one reported (librdkafka
    # ignores later abortable errors; Java skips the transition while aborting).
    (S.ABORTABLE_ERROR, I.ABORTABLE): S.ABORTABLE_ERROR,
    (S.ABORTING, I.ABORTABLE): S.ABORTING,
    # Any state can become fatal; FATAL_ERROR is left only by closing the producer.
    **{(s, I.FATAL): S.FATAL_ERROR for s in State},
}


def transition(state: State, event: Input) -> State:
    """The state after `event`; IllegalStateError when the table has no entry."""
    nxt = TRANSITIONS.get((state, event))
    if nxt is None:
        raise IllegalStateError(f"{event.value} is not allowed in transaction state {state.value}")
    return nxt


# ---------------------------------------------------------------- what answers mean


class Act(Enum):
    DONE = "done"
    RETRY = "retry"  # same coordinator, after a backoff
    REFIND = "refind"  # the coordinator moved or is unreachable: FindCoordinator again, then retry
    ABORTABLE = "abortable"  # the transaction fails; abort_transaction() recovers
    BUMP = "abortable, bump"  # abortable, and the epoch must be bumped after the abort (KIP-360)
    FATAL = "fatal"
    NOT_ATTEMPTED = "not attempted"  # AddPartitionsToTxn: skipped because another partition failed


# Shared by every request to the transaction coordinator (Java: the InitProducerId,
# AddPartitions, AddOffsets and EndTxn handlers agree on these).
_TXN_COORDINATOR = {
    ErrorCode.coordinator_not_available: Act.REFIND,
    ErrorCode.not_coordinator: Act.REFIND,
    ErrorCode.coordinator_load_in_progress: Act.RETRY,
    ErrorCode.concurrent_transactions: Act.RETRY,
    # An old coordinator still answers INVALID_PRODUCER_EPOCH where a new one says
    # PRODUCER_FENCED; both mean a newer producer owns the transactional id.
    ErrorCode.producer_fenced: Act.FATAL,
    ErrorCode.invalid_producer_epoch: Act.FATAL,
    ErrorCode.transactional_id_authorization_failed: Act.FATAL,
    ErrorCode.cluster_authorization_failed: Act.FATAL,
    ErrorCode.invalid_txn_state: Act.FATAL,
}
# KIP-360: the coordinator lost (or never had) this producer id: abortable, then a new
# epoch, where the coordinator can bump (InitProducerId v3+); fatal where it cannot.
_LOST_PRODUCER = {
    ErrorCode.unknown_producer_id: Act.BUMP,
    ErrorCode.invalid_producer_id_mapping: Act.BUMP,
}

# api key -> (code -> act, act for any other error)
ERRORS: dict[int, tuple[dict[ErrorCode, Act], Act]] = {
    FIND_COORDINATOR: ({
        ErrorCode.coordinator_not_available: Act.RETRY,
        ErrorCode.coordinator_load_in_progress: Act.RETRY,
        ErrorCode.not_coordinator: Act.RETRY,
        ErrorCode.transactional_id_authorization_failed: Act.FATAL,
        ErrorCode.group_authorization_failed: Act.ABORTABLE,
    }, Act.FATAL),
    INIT_PRODUCER_ID: (dict(_TXN_COORDINATOR), Act.FATAL),
    ADD_PARTITIONS_TO_TXN: ({
        **_TXN_COORDINATOR, **_LOST_PRODUCER,
        ErrorCode.unknown_topic_or_partition: Act.RETRY,  # metadata not yet everywhere
        ErrorCode.topic_authorization_failed: Act.ABORTABLE,
        ErrorCode.operation_not_attempted: Act.NOT_ATTEMPTED,
    }, Act.ABORTABLE),  # Java: an unexpected partition error fails the transaction
    ADD_OFFSETS_TO_TXN: ({
        **_TXN_COORDINATOR, **_LOST_PRODUCER,
        ErrorCode.group_authorization_failed: Act.ABORTABLE,
    }, Act.FATAL),
    END_TXN: ({**_TXN_COORDINATOR, **_LOST_PRODUCER}, Act.FATAL),
    # To the group coordinator: its moves are the group's (FindCoordinator key_type 0).
    TXN_OFFSET_COMMIT: ({
        ErrorCode.coordinator_not_available: Act.REFIND,
        ErrorCode.not_coordinator: Act.REFIND,
        ErrorCode.request_timed_out: Act.REFIND,
        ErrorCode.coordinator_load_in_progress: Act.RETRY,
        ErrorCode.unknown_topic_or_partition: Act.RETRY,
        ErrorCode.concurrent_transactions: Act.RETRY,  # librdkafka retries it too
        ErrorCode.group_authorization_failed: Act.ABORTABLE,
        ErrorCode.topic_authorization_failed: Act.ABORTABLE,
        # The consumer's group metadata is stale (it was fenced or rebalanced): Java's
        # CommitFailedException, abortable; the offsets must not be committed.
        ErrorCode.unknown_member_id: Act.ABORTABLE,
        ErrorCode.illegal_generation: Act.ABORTABLE,
        ErrorCode.fenced_instance_id: Act.ABORTABLE,
        ErrorCode.transactional_id_authorization_failed: Act.FATAL,
        ErrorCode.invalid_producer_epoch: Act.FATAL,
        ErrorCode.producer_fenced: Act.FATAL,
        ErrorCode.unsupported_for_message_format: Act.FATAL,
    }, Act.FATAL),
}


def classify(api: int, code: ErrorCode | int) -> Act:
    if not code:
        return Act.DONE
    table, default = ERRORS[api]
    return table.get(ErrorCode(int(code)), default)


class Step(NamedTuple):
    """What the driver does with an answer."""

    act: Act  # DONE, RETRY, REFIND, or one of the failing acts (the error is then in `error`)
    backoff_ms: float | None = None  # None: the client's retry backoff
    error: KafkaError | None = None  # raised to the caller when the act fails the call


DONE = Step(Act.DONE)


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """What a consumer hands `send_offsets_to_transaction` so that the group coordinator can
    fence a zombie (KIP-447): Java's ConsumerGroupMetadata, confluent-kafka's
    consumer_group_metadata(). For a KIP-848 consumer `generation_id` is the member epoch."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# ---------------------------------------------------------------- the core


class TransactionCore:
    """The state of one transactional producer, changed only by the inputs below."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60000) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.state = State.UNINITIALIZED
        self.error: KafkaError | None = None  # what put it in ABORTABLE_ERROR or FATAL_ERROR
        self.producer_id = -1
        self.producer_epoch = -1
        self.can_bump = False  # the coordinator serves InitProducerId v3+ (KIP-360)
        self.bump_required = False
        self.partitions: set[TopicPartition] = set()  # in the transaction: batches may go
        self.pending: set[TopicPartition] = set()  # in an AddPartitionsToTxn not yet answered
        self.new: set[TopicPartition] = set()  # to be added before their first batch goes
        # Requests that may have added something to the transaction (librdkafka's
        # txn_req_cnt): counted when sent, uncounted when refused. EndTxn is sent only when
        # this is positive, since the coordinator refuses to end a transaction it never saw.
        self.added = 0

    # ------------------------------------------------------------ transitions

    def fire(self, event: Input, error: KafkaError | None = None) -> State:
        before = self.state
        self.state = transition(before, event)
        if event in (I.ABORTABLE, I.FATAL) and error is not None:
            if event is I.FATAL or before is S.IN_TRANSACTION or before is S.COMMITTING:
                self.error = error
        elif self.state not in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            self.error = None
        if before is not self.state:
            log.debug("transactional id %s: %s -> %s (%s)", self.transactional_id, before.value, self.state.value,
                      event.value)
        return self.state

    def _guard(self, event: Input) -> None:
        """Before an application call: in an error state the stored error is what to raise
        (abort is the way out of ABORTABLE_ERROR, nothing out of FATAL_ERROR)."""
        if self.state is S.FATAL_ERROR and self.error is not None:
            raise self.error
        if self.state is S.ABORTABLE_ERROR and event is not I.ABORT and self.error is not None:
            raise self.error
        transition(self.state, event)  # raises IllegalStateError when not allowed

    def start_init(self) -> None:
        self._guard(I.INIT)
        self.fire(I.INIT)

    def begin(self) -> None:
        self._guard(I.BEGIN)
        self.fire(I.BEGIN)

    def start_commit(self) -> None:
        self._guard(I.COMMIT)
        self.fire(I.COMMIT)

    def start_abort(self) -> None:
        self._guard(I.ABORT)
        self.fire(I.ABORT)
        self.new.clear()  # nothing more is added to a transaction being aborted

    def check_send(self) -> None:
        """send() is allowed only inside a transaction (Java failIfNotReadyForSend)."""
        if self.state is S.IN_TRANSACTION:
            return
        if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) and self.error is not None:
            raise self.error
        raise IllegalStateError(f"send() needs begin_transaction() first (transaction state {self.state.value})")

    def check_offsets(self) -> None:
        if self.state is not S.IN_TRANSACTION:
            self.check_send()

    def abortable(self, error: KafkaError) -> None:
        """Fail the transaction (if there is one to fail: an error arriving when none is
        open, e.g. a late answer, changes nothing)."""
        if (self.state, I.ABORTABLE) in TRANSITIONS:
            self.fire(I.ABORTABLE, error)
        else:
            log.debug("transactional id %s: %s in state %s ignored", self.transactional_id, error, self.state.value)

    def fatal(self, error: KafkaError) -> None:
        self.fire(I.FATAL, error)

    def fail(self, act: Act, code: ErrorCode | int, what: str) -> KafkaError:
        """Apply a failing act for an error `code`; returns the error to raise."""
        code = ErrorCode(int(code))
        if act is Act.BUMP and not self.can_bump:
            act = Act.FATAL  # Java abortableErrorIfPossible: no epoch bump, no way forward
        if act is Act.FATAL:
            err: KafkaError = TransactionFatalError(code, f"transactional id {self.transactional_id}: {what}")
            self.fatal(err)
            return self.error or err
        err = TransactionAbortableError(code, f"transactional id {self.transactional_id}: {what}")
        if act is Act.BUMP:
            self.bump_required = True
        self.abortable(err)
        return self.error if self.state is S.ABORTABLE_ERROR and self.error is not None else err

    def batch_failed(self, error: KafkaError, *, sequence_gap: bool) -> None:
        """A record batch failed for good during the transaction (Java
        maybeTransitionToErrorState). `sequence_gap`: its records may or may not be in the
        log, so the partition's sequence numbers cannot continue without a new epoch."""
        if isinstance(error, (TransactionAbortableError, TransactionFatalError)):
            return  # it failed because the transaction had already failed
        if error.code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch,
                          ErrorCode.transactional_id_authorization_failed, ErrorCode.cluster_authorization_failed):
            self.fatal(TransactionFatalError(error.code, f"transactional id {self.transactional_id}: "
                                             f"a batch failed: {error}"))
            return
        if sequence_gap:
            if not self.can_bump:
                self.fatal(TransactionFatalError(error.code, "a batch's fate is unknown and the coordinator cannot "
                                                 f"bump the epoch (KIP-360): {error}"))
                return
            self.bump_required = True
        self.abortable(TransactionAbortableError(error.code, f"a batch failed: {error}"))

    # ------------------------------------------------------------ partitions

    def add_partition(self, tp: TopicPartition) -> bool:
        """A record for `tp` was appended; True when `tp` must now be added to the transaction."""
        if tp in self.partitions or tp in self.pending or tp in self.new:
            return False
        self.new.add(tp)
        return True

    def may_send(self, tp: TopicPartition) -> bool:
        """A batch for `tp` may go: the partition is in the transaction (Java
        isSendToPartitionAllowed). In an error state nothing more is sent."""
        return tp in self.partitions and self.state in (S.IN_TRANSACTION, S.COMMITTING, S.ABORTING)

    @property
    def adding(self) -> bool:
        """Partitions wait to be added, and the transaction is still going."""
        return bool(self.new or self.pending) and self.state in (S.IN_TRANSACTION, S.COMMITTING)

    def take_new(self) -> list[TopicPartition]:
        """The partitions for the next AddPartitionsToTxn: every new one, with any whose
        earlier request is being retried (Java sends pending and new together)."""
        self.pending |= self.new
        self.new.clear()
        return sorted(self.pending)

    def end_reset(self) -> None:
        """A transaction ended (committed, aborted, or never started)."""
        self.partitions.clear()
        self.pending.clear()
        self.new.clear()
        self.added = 0

    # ------------------------------------------------------------ bodies

    def init_body(self, version: int) -> dict:
        # KIP-360 (InitProducerId v3+): re-initialising with the id and epoch we have lets
        # the coordinator bump the epoch instead of fencing us as an unknown producer.
        keep = version >= 3 and self.producer_id >= 0
        return {"transactional_id": self.transactional_id, "transaction_timeout": self.timeout_ms,
                "producer_id": self.producer_id if keep else -1,
                "producer_epoch": self.producer_epoch if keep else -1}

    def add_partitions_body(self, tps: Iterable[TopicPartition]) -> dict:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return {"v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def add_offsets_body(self, group_id: str) -> dict:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "group_id": group_id}

    def end_body(self, commit: bool) -> dict:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "committed": commit}

    def txn_offset_commit_body(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                               group: GroupMetadata) -> dict:
        by_topic: dict[str, list[dict]] = {}
        for tp, om in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
        # v3 (KIP-447) carries the consumer's identity so the group coordinator can fence a
        # zombie that lost its partitions; v0-2 carry the group id only.
        return {"transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    # ------------------------------------------------------------ answers

    def _failing(self, api: int, act: Act, code, what: str) -> Step:
        if act in (Act.RETRY, Act.REFIND):
            backoff = CONCURRENT_TRANSACTIONS_BACKOFF_MS if (
                api == ADD_PARTITIONS_TO_TXN and code == ErrorCode.concurrent_transactions) else None
            return Step(act, backoff)
        return Step(act, None, self.fail(act, code, what))

    def on_find_coordinator(self, code: ErrorCode | int, what: str) -> Step:
        act = classify(FIND_COORDINATOR, code)
        return DONE if act is Act.DONE else self._failing(FIND_COORDINATOR, act, code, f"FindCoordinator({what})")

    def on_init(self, resp: Any, version: int) -> Step:
        act = classify(INIT_PRODUCER_ID, resp.error_code)
        if act is not Act.DONE:
            return self._failing(INIT_PRODUCER_ID, act, resp.error_code, "InitProducerId")
        self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)
        self.can_bump = version >= 3
        self.bump_required = False
        self.end_reset()
        self.fire(I.INITIALIZED)
        return DONE

    def on_add_partitions(self, resp: Any) -> Step:
        """Kafka adds all of a request's partitions or none: any error means none was added."""
        errors: dict[TopicPartition, ErrorCode] = {}
        for t in resp.results_by_topic_v3_and_below:
            for p in t.results_by_partition:
                errors[TopicPartition(t.name, int(p.partition_index))] = ErrorCode(int(p.partition_error_code))
        failed = {tp: code for tp, code in errors.items() if code != ErrorCode.none}
        if not failed:
            self.partitions |= self.pending
            self.pending.clear()
            return DONE
        self.added -= 1
        abortable: list[str] = []
        for tp, code in sorted(failed.items()):
            act = classify(ADD_PARTITIONS_TO_TXN, code)
            if act in (Act.RETRY, Act.REFIND, Act.FATAL, Act.BUMP):
                return self._failing(ADD_PARTITIONS_TO_TXN, act, code, f"AddPartitionsToTxn {tp}")
            if act is Act.ABORTABLE:
                abortable.append(f"{tp}: {code.name.upper()}")
        causes = [code for code in failed.values() if code != ErrorCode.operation_not_attempted]
        self.pending.clear()
        return self._failing(ADD_PARTITIONS_TO_TXN, Act.ABORTABLE,
                             causes[0] if causes else ErrorCode.operation_not_attempted,
                             "AddPartitionsToTxn failed: " + ", ".join(abortable or ["not attempted"]))

    def on_add_offsets(self, resp: Any, group_id: str) -> Step:
        act = classify(ADD_OFFSETS_TO_TXN, resp.error_code)
        if act is Act.DONE:
            return DONE
        self.added -= 1
        return self._failing(ADD_OFFSETS_TO_TXN, act, resp.error_code, f"AddOffsetsToTxn({group_id})")

    def on_end(self, resp: Any, commit: bool) -> Step:
        act = classify(END_TXN, resp.error_code)
        if act is Act.DONE:
            self.end_reset()
            return DONE
        return self._failing(END_TXN, act, resp.error_code, f"EndTxn({'commit' if commit else 'abort'})")

    def on_txn_offset_commit(self, resp: Any, pending: dict[TopicPartition, OffsetAndMetadata],
                             group_id: str) -> Step:
        """Partitions answered without error leave `pending`; the rest are retried (Java
        TxnOffsetCommitHandler) unless an error fails the call."""
        retry: Step | None = None
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                act = classify(TXN_OFFSET_COMMIT, p.error_code)
                if act is Act.DONE:
                    pending.pop(tp, None)
                elif act in (Act.RETRY, Act.REFIND):
                    if retry is None or act is Act.REFIND:
                        retry = Step(act)
                else:
                    return self._failing(TXN_OFFSET_COMMIT, act, p.error_code,
                                         f"TxnOffsetCommit({group_id}) {tp}")
        if not pending:
            return DONE
        return retry or Step(Act.RETRY)


def as_offsets(offsets: Mapping) -> dict[TopicPartition, OffsetAndMetadata]:
    """tp -> offset (int or OffsetAndMetadata) as TopicPartition -> OffsetAndMetadata."""
    out = {}
    for tp, o in offsets.items():
        out[TopicPartition(*tp)] = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
    return out


__all__ = ["ERRORS", "TRANSITIONS", "Act", "GroupMetadata", "Input", "State", "Step", "TransactionCore", "as_offsets",
           "classify", "transition"]
