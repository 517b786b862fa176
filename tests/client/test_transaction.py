"""The transactional producer's core (`odradek.client.transaction`), no I/O: the state
table, what each coordinator answer means, the request bodies (KIP-98, KIP-360, KIP-447)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.cluster import TopicPartition
from odradek.client.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
)
from odradek.client.offsets import OffsetAndMetadata
from odradek.client.transaction import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TRANSITIONS,
    TXN_OFFSET_COMMIT,
    Act,
    GroupMetadata,
    Input,
    State,
    TransactionCore,
    as_offsets,
    classify,
    transition,
)

S, I = State, Input
A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def init_answer(code=ErrorCode.none, pid=7, epoch=3):
    return NS(error_code=code, producer_id=pid, producer_epoch=epoch)


def ready(version: int = 4) -> TransactionCore:
    core = TransactionCore("tx", 30000)
    core.start_init()
    assert core.on_init(init_answer(), version).act is Act.DONE
    assert core.state is S.READY
    return core


def in_txn(version: int = 4) -> TransactionCore:
    core = ready(version)
    core.begin()
    return core


def add_answer(errors: dict[TopicPartition, ErrorCode]):
    by_topic: dict[str, list] = {}
    for tp, code in errors.items():
        by_topic.setdefault(tp.topic, []).append(NS(partition_index=tp.partition, partition_error_code=code))
    return NS(results_by_topic_v3_and_below=[NS(name=t, results_by_partition=ps) for t, ps in by_topic.items()])


# ---------------------------------------------------------------- the table


# Every allowed transition, written out: a change to the table must change this test.
EXPECTED = {
    (S.UNINITIALIZED, I.INIT): S.INITIALIZING,
    (S.INITIALIZING, I.INIT): S.INITIALIZING,
    (S.INITIALIZING, I.INITIALIZED): S.READY,
    (S.READY, I.BEGIN): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, I.COMMIT): S.COMMITTING,
    (S.COMMITTING, I.COMMIT): S.COMMITTING,
    (S.COMMITTING, I.COMPLETED): S.READY,
    (S.IN_TRANSACTION, I.ABORT): S.ABORTING,
    (S.ABORTABLE_ERROR, I.ABORT): S.ABORTING,
    (S.ABORTING, I.ABORT): S.ABORTING,
    (S.ABORTING, I.COMPLETED): S.READY,
    (S.ABORTING, I.BUMP): S.INITIALIZING,
    (S.IN_TRANSACTION, I.ABORTABLE): S.ABORTABLE_ERROR,
    (S.COMMITTING, I.ABORTABLE): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, I.ABORTABLE): S.ABORTABLE_ERROR,
    (S.ABORTING, I.ABORTABLE): S.ABORTING,
    **{(s, I.FATAL): S.FATAL_ERROR for s in State},
}


def test_the_table_is_exactly_the_expected_transitions():
    assert TRANSITIONS == EXPECTED


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("event", list(Input))
def test_every_pair_without_an_entry_is_an_illegal_state(state, event):
    if (state, event) in EXPECTED:
        assert transition(state, event) is EXPECTED[(state, event)]
    else:
        with pytest.raises(IllegalStateError, match=state.value):
            transition(state, event)


def test_fatal_error_is_never_left():
    assert [e for (s, e) in TRANSITIONS if s is S.FATAL_ERROR] == [I.FATAL]


def test_happy_path_through_the_core():
    core = ready()
    assert (core.producer_id, core.producer_epoch) == (7, 3)
    core.begin()
    core.start_commit()
    assert core.state is S.COMMITTING
    core.fire(I.COMPLETED)
    core.begin()
    core.start_abort()
    core.fire(I.COMPLETED)
    assert core.state is S.READY


def test_application_calls_in_the_wrong_state_raise_illegal_state():
    core = TransactionCore("tx")
    with pytest.raises(IllegalStateError):
        core.begin()  # before init_transactions
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        core.check_send()
    core = ready()
    with pytest.raises(IllegalStateError):
        core.start_commit()  # no transaction
    with pytest.raises(IllegalStateError):
        core.start_abort()
    with pytest.raises(IllegalStateError):
        core.start_init()  # init_transactions twice
    core.begin()
    with pytest.raises(IllegalStateError):
        core.begin()
    core.check_send()  # allowed now
    core.start_commit()
    with pytest.raises(IllegalStateError):
        core.check_send()  # no sends while committing (Java failIfNotReadyForSend)


def test_abortable_error_is_raised_until_aborted_and_the_first_one_is_kept():
    core = in_txn()
    first = TransactionAbortableError(ErrorCode.topic_authorization_failed, "first")
    core.abortable(first)
    core.abortable(TransactionAbortableError(ErrorCode.unknown_server_error, "second"))
    assert core.state is S.ABORTABLE_ERROR and core.error is first
    for call in (core.check_send, core.start_commit, core.begin, core.check_offsets):
        with pytest.raises(TransactionAbortableError) as info:
            call()
        assert info.value is first
    core.start_abort()
    assert core.state is S.ABORTING
    core.fire(I.COMPLETED)
    assert core.state is S.READY and core.error is None
    core.begin()  # the producer goes on


def test_abortable_error_while_aborting_is_ignored():
    core = in_txn()
    core.start_abort()
    core.abortable(TransactionAbortableError(ErrorCode.unknown_server_error))
    assert core.state is S.ABORTING and core.error is None


def test_abortable_error_outside_a_transaction_changes_nothing():
    core = ready()
    core.abortable(TransactionAbortableError(ErrorCode.unknown_server_error))
    assert core.state is S.READY


def test_fatal_error_makes_every_call_raise_it():
    core = in_txn()
    err = TransactionFatalError(ErrorCode.producer_fenced, "fenced")
    core.fatal(err)
    assert core.state is S.FATAL_ERROR
    for call in (core.check_send, core.start_commit, core.start_abort, core.begin, core.start_init):
        with pytest.raises(TransactionFatalError) as info:
            call()
        assert info.value is err


def test_commit_may_be_called_again_after_a_timeout():
    core = in_txn()
    core.start_commit()
    core.start_commit()  # the first call timed out; this one resumes
    assert core.state is S.COMMITTING


# ---------------------------------------------------------------- what answers mean


@pytest.mark.parametrize("api", [INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN])
def test_transaction_coordinator_answers(api):
    assert classify(api, ErrorCode.none) is Act.DONE
    assert classify(api, ErrorCode.concurrent_transactions) is Act.RETRY
    assert classify(api, ErrorCode.coordinator_load_in_progress) is Act.RETRY
    assert classify(api, ErrorCode.not_coordinator) is Act.REFIND
    assert classify(api, ErrorCode.coordinator_not_available) is Act.REFIND
    for code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch,
                 ErrorCode.transactional_id_authorization_failed):
        assert classify(api, code) is Act.FATAL, code


def test_per_api_answers():
    assert classify(ADD_PARTITIONS_TO_TXN, ErrorCode.topic_authorization_failed) is Act.ABORTABLE
    assert classify(ADD_PARTITIONS_TO_TXN, ErrorCode.unknown_topic_or_partition) is Act.RETRY
    assert classify(ADD_PARTITIONS_TO_TXN, ErrorCode.unknown_producer_id) is Act.BUMP
    assert classify(ADD_PARTITIONS_TO_TXN, ErrorCode.kafka_storage_error) is Act.ABORTABLE  # unexpected
    assert classify(ADD_OFFSETS_TO_TXN, ErrorCode.group_authorization_failed) is Act.ABORTABLE
    assert classify(END_TXN, ErrorCode.kafka_storage_error) is Act.FATAL  # unexpected
    assert classify(TXN_OFFSET_COMMIT, ErrorCode.illegal_generation) is Act.ABORTABLE
    assert classify(TXN_OFFSET_COMMIT, ErrorCode.unknown_member_id) is Act.ABORTABLE
    assert classify(TXN_OFFSET_COMMIT, ErrorCode.fenced_instance_id) is Act.ABORTABLE
    assert classify(TXN_OFFSET_COMMIT, ErrorCode.not_coordinator) is Act.REFIND
    assert classify(TXN_OFFSET_COMMIT, ErrorCode.producer_fenced) is Act.FATAL


def test_init_producer_id_concurrent_transactions_is_a_retry_and_fenced_is_fatal():
    core = TransactionCore("tx")
    core.start_init()
    step = core.on_init(init_answer(ErrorCode.concurrent_transactions), 4)
    assert step.act is Act.RETRY and step.error is None and core.state is S.INITIALIZING
    step = core.on_init(init_answer(ErrorCode.producer_fenced), 4)
    assert step.act is Act.FATAL and isinstance(step.error, TransactionFatalError)
    assert step.error.code == ErrorCode.producer_fenced and core.state is S.FATAL_ERROR


def test_init_transactional_id_authorization_failed_is_fatal():
    # What odradek's broker answers until it serves transactions.
    core = TransactionCore("tx")
    core.start_init()
    step = core.on_init(init_answer(ErrorCode.transactional_id_authorization_failed), 4)
    assert step.act is Act.FATAL and core.state is S.FATAL_ERROR
    assert step.error.code == ErrorCode.transactional_id_authorization_failed


def test_add_partitions_success_puts_every_pending_partition_in_the_transaction():
    core = in_txn()
    assert core.add_partition(A) and core.add_partition(B)
    assert not core.add_partition(A)  # once per transaction
    assert not core.may_send(A)
    assert core.take_new() == [A, B]
    assert not core.add_partition(A)  # pending
    assert core.on_add_partitions(add_answer({A: ErrorCode.none, B: ErrorCode.none})).act is Act.DONE
    assert core.may_send(A) and core.may_send(B) and not core.adding
    assert not core.add_partition(B)


def test_add_partitions_concurrent_transactions_retries_after_20ms_keeping_the_partitions():
    core = in_txn()
    core.add_partition(A)
    core.take_new()
    core.added += 1
    step = core.on_add_partitions(add_answer({A: ErrorCode.concurrent_transactions}))
    assert step.act is Act.RETRY and step.backoff_ms == 20 and step.error is None
    assert core.state is S.IN_TRANSACTION and core.adding and not core.may_send(A)
    assert core.added == 0  # refused: nothing was added
    core.add_partition(B)
    assert core.take_new() == [A, B]  # the retry carries what arrived meanwhile


def test_add_partitions_topic_authorization_failed_fails_the_transaction():
    core = in_txn()
    core.add_partition(A)
    core.add_partition(B)
    core.take_new()
    step = core.on_add_partitions(add_answer({A: ErrorCode.topic_authorization_failed,
                                              B: ErrorCode.operation_not_attempted}))
    assert step.act is Act.ABORTABLE
    assert isinstance(step.error, TransactionAbortableError) and step.error.code == ErrorCode.topic_authorization_failed
    assert core.state is S.ABORTABLE_ERROR and not core.may_send(A) and not core.may_send(B)


def test_add_partitions_fenced_is_fatal():
    core = in_txn()
    core.add_partition(A)
    core.take_new()
    step = core.on_add_partitions(add_answer({A: ErrorCode.producer_fenced}))
    assert step.act is Act.FATAL and core.state is S.FATAL_ERROR


@pytest.mark.parametrize("version,expected", [(3, S.ABORTABLE_ERROR), (2, S.FATAL_ERROR)])
def test_unknown_producer_id_is_abortable_with_a_bump_only_where_the_coordinator_can_bump(version, expected):
    # KIP-360: InitProducerId v3+ can bump the epoch; without it there is no way forward.
    core = in_txn(version)
    step = core.on_add_offsets(NS(error_code=ErrorCode.unknown_producer_id), "g")
    assert core.state is expected
    assert core.bump_required is (expected is S.ABORTABLE_ERROR)
    assert step.error is not None


def test_init_body_sends_the_current_id_and_epoch_when_reinitialising_kip_360():
    core = TransactionCore("tx", 12345)
    assert core.init_body(4) == {"transactional_id": "tx", "transaction_timeout": 12345,
                                 "producer_id": -1, "producer_epoch": -1}
    core.start_init()
    core.on_init(init_answer(pid=9, epoch=2), 4)
    assert core.init_body(3)["producer_id"] == 9 and core.init_body(3)["producer_epoch"] == 2
    assert core.init_body(2)["producer_id"] == -1  # before v3 the fields do not exist


def test_bump_after_abort_goes_through_initializing():
    core = in_txn()
    core.batch_failed(KafkaTimeoutError("delivery timeout"), sequence_gap=True)
    assert core.state is S.ABORTABLE_ERROR and core.bump_required
    core.start_abort()
    core.fire(I.BUMP)
    assert core.state is S.INITIALIZING
    core.on_init(init_answer(pid=7, epoch=4), 4)
    assert core.state is S.READY and not core.bump_required and core.producer_epoch == 4


def test_batch_failures():
    core = in_txn()
    core.batch_failed(TransactionAbortedError(), sequence_gap=False)
    assert core.state is S.ABORTABLE_ERROR  # any record failing fails the transaction
    core = in_txn()
    core.batch_failed(TransactionAbortableError(ErrorCode.unknown_server_error), sequence_gap=False)
    assert core.state is S.IN_TRANSACTION  # an echo of the transaction's own failure
    core = in_txn()
    from odradek.client.errors import KafkaError
    core.batch_failed(KafkaError(ErrorCode.producer_fenced), sequence_gap=False)
    assert core.state is S.FATAL_ERROR and core.error.code == ErrorCode.producer_fenced
    core = in_txn(version=2)
    core.batch_failed(KafkaTimeoutError("gone"), sequence_gap=True)
    assert core.state is S.FATAL_ERROR  # a sequence gap and no epoch bump: unusable


def test_end_txn_answers():
    core = in_txn()
    core.start_commit()
    assert core.on_end(NS(error_code=ErrorCode.concurrent_transactions), True).act is Act.RETRY
    step = core.on_end(NS(error_code=ErrorCode.invalid_producer_epoch), True)
    assert step.act is Act.FATAL and step.error.code == ErrorCode.invalid_producer_epoch


def test_txn_offset_commit_retries_only_what_failed():
    core = in_txn()
    pending = as_offsets({A: 5, B: OffsetAndMetadata(9, "m", 2)})
    loading = ErrorCode.coordinator_load_in_progress
    resp = NS(topics=[NS(name="t", partitions=[NS(partition_index=0, error_code=ErrorCode.none),
                                               NS(partition_index=1, error_code=loading)])])
    assert core.on_txn_offset_commit(resp, pending, "g").act is Act.RETRY
    assert list(pending) == [B]
    resp = NS(topics=[NS(name="t", partitions=[NS(partition_index=1, error_code=ErrorCode.illegal_generation)])])
    step = core.on_txn_offset_commit(resp, pending, "g")
    assert step.act is Act.ABORTABLE and core.state is S.ABORTABLE_ERROR


def test_txn_offset_commit_body_carries_the_group_metadata():
    core = in_txn()
    body = core.txn_offset_commit_body(as_offsets({B: OffsetAndMetadata(9, "m", 2), A: 5}),
                                       GroupMetadata("g", 12, "member-1", "static-1"))
    assert body["group_id"] == "g" and body["generation_id"] == 12
    assert body["member_id"] == "member-1" and body["group_instance_id"] == "static-1"
    assert (body["producer_id"], body["producer_epoch"], body["transactional_id"]) == (7, 3, "tx")
    assert body["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""},
        {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": 2, "committed_metadata": "m"}]}]


def test_add_partitions_body_groups_by_topic():
    core = in_txn()
    body = core.add_partitions_body([TopicPartition("u", 3), B, A])
    assert body == {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 7,
                    "v3_and_below_producer_epoch": 3,
                    "v3_and_below_topics": [{"name": "t", "partitions": [0, 1]}, {"name": "u", "partitions": [3]}]}


def test_an_empty_transactional_id_is_refused():
    with pytest.raises(ValueError):
        TransactionCore("")
