"""The transaction coordinator's handlers, pure: records written and answers given."""

from odradek.protocol.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
)
from odradek.transactions import coordinator as C
from odradek.transactions.model import MAX_EPOCH, TxnState, can_move

T0 = 1_000_000


def shard():
    return C.TxnShard(0, C.TxnConfig())


def apply(s, result):
    for r in result.records:
        s.replay(r)
    return result


def ready(s, tid="tx", pid=7, now=T0):
    r = apply(s, C.init_producer_id(s, tid, 60_000, -1, -1, pid, now))
    assert r.response == {"error_code": NONE, "producer_id": pid, "producer_epoch": 0}
    return r


def test_new_id_gets_producer_id_at_epoch_zero_and_is_written_empty():
    s = shard()
    r = ready(s)
    [rec] = r.records
    assert rec.txn.state is TxnState.EMPTY and rec.txn.producer_id == 7 and rec.txn.timeout_ms == 60_000


def test_new_id_without_an_allocated_producer_id_asks_for_a_retry():
    s = shard()
    r = C.init_producer_id(s, "tx", 60_000, -1, -1, None, T0)
    assert r.records == [] and r.response["error_code"] == CONCURRENT_TRANSACTIONS


def test_timeout_above_the_maximum_is_refused():
    s = shard()
    r = C.init_producer_id(s, "tx", 900_001, -1, -1, 7, T0)
    assert r.response["error_code"] == INVALID_TRANSACTION_TIMEOUT and not r.records


def test_reinit_bumps_the_epoch_and_fences_the_old_instance():
    s = shard()
    ready(s)
    r = apply(s, C.init_producer_id(s, "tx", 60_000, -1, -1, None, T0 + 1))
    assert r.response == {"error_code": NONE, "producer_id": 7, "producer_epoch": 1}
    old = C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0 + 2)
    assert old.response == PRODUCER_FENCED and not old.records
    assert C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0 + 2, old_version=True).response == INVALID_PRODUCER_EPOCH


def test_exhausted_epoch_gets_a_new_producer_id():
    s = shard()
    ready(s)
    txn = s.txns["tx"]
    s.txns["tx"] = txn.moved(TxnState.EMPTY, T0, producer_epoch=MAX_EPOCH - 1)
    assert C.init_producer_id(s, "tx", 60_000, -1, -1, None, T0).response["error_code"] == CONCURRENT_TRANSACTIONS
    r = C.init_producer_id(s, "tx", 60_000, -1, -1, 99, T0)
    assert r.response == {"error_code": NONE, "producer_id": 99, "producer_epoch": 0}


def test_kip360_reinit_must_name_the_current_producer():
    s = shard()
    ready(s)
    assert C.init_producer_id(s, "tx", 60_000, 7, 3, None, T0).response["error_code"] == PRODUCER_FENCED
    assert C.init_producer_id(s, "tx", 60_000, 7, 0, None, T0).response["producer_epoch"] == 1


def test_unknown_producer_mapping():
    s = shard()
    assert C.add_partitions(s, "nobody", 1, 0, [("t", 0)], T0).response == INVALID_PRODUCER_ID_MAPPING
    ready(s)
    assert C.add_partitions(s, "tx", 8, 0, [("t", 0)], T0).response == INVALID_PRODUCER_ID_MAPPING


def test_commit_flow_writes_prepare_then_complete_and_asks_for_markers():
    s = shard()
    ready(s)
    r = apply(s, C.add_partitions(s, "tx", 7, 0, [("t", 0), ("t", 1)], T0 + 1))
    assert r.response == NONE and s.txns["tx"].state is TxnState.ONGOING and s.txns["tx"].start_ms == T0 + 1
    again = C.add_partitions(s, "tx", 7, 0, [("t", 1)], T0 + 2)
    assert again.records == [] and again.response == NONE  # already in: nothing written
    r = apply(s, C.add_partitions(s, "tx", 7, 0, [("u", 0)], T0 + 3))
    assert s.txns["tx"].partitions == {("t", 0), ("t", 1), ("u", 0)} and s.txns["tx"].start_ms == T0 + 1
    end = apply(s, C.end_txn(s, "tx", 7, 0, True, T0 + 4))
    assert end.response == NONE and s.txns["tx"].state is TxnState.PREPARE_COMMIT
    assert end.markers == C.MarkerJob("tx", 7, 0, True, frozenset({("t", 0), ("t", 1), ("u", 0)}))
    # While the markers are written: the same end waits, the opposite is refused, adding waits.
    assert C.end_txn(s, "tx", 7, 0, True, T0 + 5).response == CONCURRENT_TRANSACTIONS
    assert C.end_txn(s, "tx", 7, 0, False, T0 + 5).response == INVALID_TXN_STATE
    assert C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0 + 5).response == CONCURRENT_TRANSACTIONS
    assert C.init_producer_id(s, "tx", 60_000, -1, -1, None, T0 + 5).response["error_code"] == CONCURRENT_TRANSACTIONS
    apply(s, C.complete(s, end.markers, T0 + 6))
    assert s.txns["tx"].state is TxnState.COMPLETE_COMMIT and s.txns["tx"].partitions == frozenset()
    assert C.end_txn(s, "tx", 7, 0, True, T0 + 7).response == NONE  # a retry of what completed
    assert C.end_txn(s, "tx", 7, 0, False, T0 + 7).response == INVALID_TXN_STATE
    # The next transaction starts from CompleteCommit.
    apply(s, C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0 + 8))
    assert s.txns["tx"].state is TxnState.ONGOING and s.txns["tx"].start_ms == T0 + 8


def test_end_without_a_transaction_is_invalid():
    s = shard()
    ready(s)
    assert C.end_txn(s, "tx", 7, 0, True, T0).response == INVALID_TXN_STATE


def test_complete_of_a_stale_job_writes_nothing():
    s = shard()
    ready(s)
    apply(s, C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0))
    end = apply(s, C.end_txn(s, "tx", 7, 0, False, T0))
    apply(s, C.complete(s, end.markers, T0))
    assert C.complete(s, end.markers, T0).records == []


def test_init_during_an_ongoing_transaction_aborts_it_with_a_bumped_epoch():
    s = shard()
    ready(s)
    apply(s, C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0))
    r = apply(s, C.init_producer_id(s, "tx", 60_000, -1, -1, None, T0 + 1))
    assert r.response["error_code"] == CONCURRENT_TRANSACTIONS
    [rec] = r.records
    assert rec.txn.state is TxnState.PREPARE_ABORT and rec.txn.producer_epoch == 1
    assert r.markers == C.MarkerJob("tx", 7, 1, False, frozenset({("t", 0)}))
    # The old instance is fenced from now on.
    assert C.end_txn(s, "tx", 7, 0, True, T0 + 2).response == PRODUCER_FENCED
    apply(s, C.complete(s, r.markers, T0 + 3))
    r = apply(s, C.init_producer_id(s, "tx", 60_000, -1, -1, None, T0 + 4))
    assert r.response == {"error_code": NONE, "producer_id": 7, "producer_epoch": 2}


def test_timed_out_transaction_is_aborted_with_the_epoch_bumped():
    s = shard()
    ready(s)
    apply(s, C.add_partitions(s, "tx", 7, 0, [("t", 0)], T0))
    assert C.abort_timed_out(s, "tx", T0 + 59_999).records == []
    r = apply(s, C.abort_timed_out(s, "tx", T0 + 60_000))
    assert s.txns["tx"].state is TxnState.PREPARE_ABORT and s.txns["tx"].producer_epoch == 1
    assert r.markers.producer_epoch == 1 and not r.markers.commit
    assert C.end_txn(s, "tx", 7, 0, True, T0 + 60_001).response == PRODUCER_FENCED


def test_idle_ids_expire_and_ongoing_ones_do_not():
    s = C.TxnShard(0, C.TxnConfig(id_expiration_ms=1000))
    ready(s, "idle", 1)
    ready(s, "busy", 2)
    apply(s, C.add_partitions(s, "busy", 2, 0, [("t", 0)], T0))
    r = apply(s, C.expire_ids(s, T0 + 1000))
    assert [rec.transactional_id for rec in r.records] == ["idle"] and r.records[0].txn is None
    assert set(s.txns) == {"busy"}


def test_pending_markers_of_a_loaded_shard():
    s = shard()
    ready(s, "a", 1)
    ready(s, "b", 2)
    apply(s, C.add_partitions(s, "a", 1, 0, [("t", 0)], T0))
    apply(s, C.end_txn(s, "a", 1, 0, True, T0))
    assert C.pending_markers(s) == [C.MarkerJob("a", 1, 0, True, frozenset({("t", 0)}))]


def test_transition_table():
    assert can_move(None, TxnState.EMPTY) and not can_move(None, TxnState.ONGOING)
    assert can_move(TxnState.ONGOING, TxnState.PREPARE_COMMIT)
    assert not can_move(TxnState.EMPTY, TxnState.PREPARE_COMMIT)
    assert not can_move(TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT)
    assert can_move(TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT)
    assert not can_move(TxnState.PREPARE_ABORT, TxnState.ONGOING)


def test_replay_refuses_a_move_outside_the_table():
    import pytest

    s = shard()
    ready(s)
    bad = s.txns["tx"].__class__(**{**{f: getattr(s.txns["tx"], f) for f in s.txns["tx"].__dataclass_fields__},
                                    "state": TxnState.COMPLETE_COMMIT})
    with pytest.raises(AssertionError):
        s.replay(C.TxnRecord("tx", bad))
