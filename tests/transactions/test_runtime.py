"""The transaction runtime: write-then-replay, answers and markers only once committed, loads, timers."""

import pytest

from odradek.coordinator.errors import CoordinatorUnavailable
from odradek.protocol.errors import COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NONE, NOT_COORDINATOR
from odradek.transactions import coordinator as C
from odradek.transactions import records as R
from odradek.transactions.model import TxnState
from odradek.transactions.runtime import TxnRuntime

T0 = 1_000_000


class Log:
    """An in-memory __transaction_state: partition -> [(key, value)]."""

    def __init__(self):
        self.parts: dict[int, list] = {}

    def write(self, partition, records, _now):
        rows = self.parts.setdefault(partition, [])
        rows += [R.encode(r.transactional_id, r.txn) for r in records]
        return len(rows) - 1

    def read(self, partition):
        return list(self.parts.get(partition, []))


def runtime(commit_on_write=True, serving=lambda: True, config=None, log=None):
    log = log or Log()
    sent = []
    rt = TxnRuntime(config or C.TxnConfig(num_partitions=1), log.write, lambda p, e, job: sent.append((p, e, job)),
                    reader=log.read, commit_on_write=commit_on_write, serving=serving)
    return rt, log, sent


def elect(rt, log, epoch=0, now=T0, hw=None):
    assert rt.begin_election(0, epoch)
    end = len(log.read(0))
    assert rt.finish_election(0, epoch, lambda: log.read(0), now, end, hw)


def init(rt, tid="tx", pid=7, now=T0):
    return rt.submit(tid, lambda s, n: C.init_producer_id(s, tid, 60_000, -1, -1, pid, n), now)


def test_requests_are_refused_until_the_shard_is_loaded():
    rt, log, _ = runtime()
    with pytest.raises(CoordinatorUnavailable) as e:
        init(rt).result()
    assert e.value.code == NOT_COORDINATOR
    rt.begin_election(0, 0)
    with pytest.raises(CoordinatorUnavailable) as e:
        init(rt).result()
    assert e.value.code == COORDINATOR_LOAD_IN_PROGRESS


def test_commit_sends_markers_once_committed_then_completes():
    rt, log, sent = runtime(commit_on_write=False)
    elect(rt, log)
    answer = init(rt)
    assert not answer.done  # waits for the high watermark
    rt.complete_up_to(0, 0)
    assert answer.result()["error_code"] == NONE
    rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0)
    rt.complete_up_to(0, 1)
    end = rt.submit("tx", lambda s, n: C.end_txn(s, "tx", 7, 0, True, n), T0)
    assert not end.done and sent == []  # no marker for a decision that is not committed
    rt.complete_up_to(0, 2)
    assert end.result() == NONE
    [(partition, epoch, job)] = sent
    assert (partition, epoch, job.commit, job.partitions) == (0, 0, True, frozenset({("t", 0)}))
    done = rt.complete_markers(0, job, T0)
    rt.complete_up_to(0, 3)
    assert done.done and rt.shards[0].txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert R.decode(*log.read(0)[-1])[1].state is TxnState.COMPLETE_COMMIT


def test_a_new_leader_resends_prepared_markers_once_its_load_is_committed():
    rt, log, sent = runtime()
    elect(rt, log)
    init(rt).result()
    rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0).result()
    rt.submit("tx", lambda s, n: C.end_txn(s, "tx", 7, 0, False, n), T0).result()
    assert len(sent) == 1
    # Another broker takes over the partition from the same log, its last record not yet committed.
    rt2, _, sent2 = runtime(commit_on_write=False, log=log)
    assert rt2.begin_election(0, 1)
    rt2.finish_election(0, 1, lambda: log.read(0), T0, len(log.read(0)), len(log.read(0)) - 1)
    assert sent2 == []
    rt2.complete_up_to(0, len(log.read(0)) - 1)
    [(_, epoch, job)] = sent2
    assert epoch == 1 and not job.commit and job.producer_epoch == 0


def test_resignation_fails_waiting_answers_not_coordinator():
    rt, log, sent = runtime(commit_on_write=False)
    elect(rt, log)
    answer = init(rt)
    rt.on_resignation(0, 0)
    with pytest.raises(CoordinatorUnavailable) as e:
        answer.result()
    assert e.value.code == NOT_COORDINATOR


def test_not_serving_answers_nothing_and_runs_no_timer():
    serving = [True]
    rt, log, sent = runtime(serving=lambda: serving[0])
    elect(rt, log)
    init(rt).result()
    rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0).result()
    serving[0] = False
    with pytest.raises(CoordinatorUnavailable):
        init(rt).result()
    assert rt.tick(T0 + 120_000) == 0 and rt.shards[0].txns["tx"].state is TxnState.ONGOING
    serving[0] = True
    assert rt.tick(T0 + 120_000) >= 1
    assert rt.shards[0].txns["tx"].state is TxnState.PREPARE_ABORT and sent[-1][2].producer_epoch == 1


def test_timeout_timer_is_armed_by_a_load_too():
    rt, log, sent = runtime()
    elect(rt, log)
    init(rt).result()
    rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0).result()
    rt2, _, sent2 = runtime(log=log)
    elect(rt2, log, epoch=1)
    assert rt2.next_deadline() == T0 + 60_000
    rt2.tick(T0 + 60_000)
    assert rt2.shards[0].txns["tx"].state is TxnState.PREPARE_ABORT and len(sent2) == 1


def test_stalled_writes_fail_coordinator_not_available():
    rt, log, _ = runtime(commit_on_write=False)
    elect(rt, log)
    answer = init(rt, now=T0)
    assert rt.fail_stalled_writes(T0 + 4_999) == []
    assert rt.fail_stalled_writes(T0 + 5_000) == [(0, 5_000)]
    with pytest.raises(CoordinatorUnavailable) as e:
        answer.result()
    assert e.value.code == COORDINATOR_NOT_AVAILABLE


def test_a_failed_write_leaves_nothing_and_the_shard_serves_again():
    rt, log, _ = runtime()
    elect(rt, log)
    init(rt).result()

    def broken(*_a):
        raise CoordinatorUnavailable(NOT_COORDINATOR, "disk")

    good = rt.writer
    rt.writer = broken
    answer = rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0)
    with pytest.raises(CoordinatorUnavailable):
        answer.result()
    rt.writer = good
    assert rt.shards[0].txns["tx"].state is TxnState.EMPTY  # rebuilt from the log
    assert rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0).result() == NONE


def test_a_decision_committed_after_the_write_timeout_still_gets_its_markers():
    """The EndTxn answer times out (the client retries), but the PrepareCommit record
    commits later: its markers must still go out, or the transaction stays prepared and
    every later request of its id gets CONCURRENT_TRANSACTIONS (simulator seeds 458, 750)."""
    rt, log, sent = runtime(commit_on_write=False)
    elect(rt, log)
    init(rt)
    rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0)
    rt.complete_up_to(0, 1, T0)
    end = rt.submit("tx", lambda s, n: C.end_txn(s, "tx", 7, 0, True, n), T0)
    assert rt.fail_stalled_writes(T0 + rt.write_timeout_ms) and end.error is not None
    assert sent == []
    rt.complete_up_to(0, 2, T0 + 6_000)
    assert [job.transactional_id for _, _, job in sent] == ["tx"]


def test_waiting_markers_are_dropped_on_resignation():
    rt, log, sent = runtime(commit_on_write=False)
    elect(rt, log)
    init(rt)
    rt.submit("tx", lambda s, n: C.add_partitions(s, "tx", 7, 0, [("t", 0)], n), T0)
    rt.submit("tx", lambda s, n: C.end_txn(s, "tx", 7, 0, True, n), T0)
    rt.on_resignation(0, 0)
    rt.complete_up_to(0, 10, T0)
    assert sent == []  # the next coordinator re-sends them when it loads
