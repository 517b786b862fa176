"""The transaction coordinator's APIs through a real Broker (in process): InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn with the markers it writes,
DescribeTransactions/ListTransactions, restart, and the coordinator's timeout."""

from __future__ import annotations

import pytest

from odradek.cluster.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from odradek.protocol.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    TRANSACTIONAL_ID_NOT_FOUND,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from odradek.records.batch import iter_headers
from odradek.records.codec import encode_batch
from odradek.records.control import decode_marker, is_control
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame


@pytest.fixture
def b(tmp_path):
    ip = InProcess(tmp_path / "data", extra={"transaction.state.log.num.partitions": "3"})
    ip.broker.create_topic("t", 2, {})
    yield ip
    ip.close()


def call(b: InProcess, key: int, version: int, body: dict):
    _, resp = parse_response(key, version, b.handle(request_frame(key, version, body)))
    return resp


def find(b, tid):
    return call(b, 10, 3, {"key": tid, "key_type": 1})


def init(b, tid, version=4, pid=-1, epoch=-1, timeout=60_000):
    return call(b, 22, version, {"transactional_id": tid, "transaction_timeout": timeout, "producer_id": pid,
                                 "producer_epoch": epoch})


def add(b, tid, pid, epoch, parts, version=3):
    by_topic = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    resp = call(b, 24, version, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                 "v3_and_below_producer_epoch": epoch,
                                 "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, r.partition_index): r.partition_error_code for t in resp.results_by_topic_v3_and_below
            for r in t.results_by_partition}


def end(b, tid, pid, epoch, commit, version=3):
    return call(b, 26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": commit}).error_code


def produce_txn(b, topic, partition, pid, epoch, seq, values):
    batch = encode_batch([(i, 1000, None, v) for i, v in enumerate(values)], producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq, is_transactional=True)
    resp = call(b, 0, 9, {"transactional_id": "x", "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0].error_code


def markers(b, topic, partition):
    plog = b.broker.logs.get(topic, partition)
    out = []
    for seg in plog.segments:
        data = seg.pread(0, seg.size)
        for h in iter_headers(data):
            if is_control(h):
                out.append(decode_marker(data[h.position:h.position + h.size]))
    return out


def test_find_coordinator_for_a_transactional_id_creates_the_topic(b):
    resp = find(b, "tx")
    assert resp.error_code == NONE and resp.node_id == b.broker.config.node_id
    assert b.broker.metadata.get(TRANSACTION_STATE).partitions == 3


def test_commit_writes_markers_and_completes(b):
    r = init(b, "tx")
    assert r.error_code == NONE and r.producer_epoch == 0
    pid = r.producer_id
    assert add(b, "tx", pid, 0, [("t", 0), ("t", 1)]) == {("t", 0): NONE, ("t", 1): NONE}
    assert produce_txn(b, "t", 0, pid, 0, 0, [b"a", b"b"]) == NONE
    assert b.broker.logs.get("t", 0).last_stable_offset == 0  # held by the open transaction
    assert end(b, "tx", pid, 0, True) == NONE
    b.loop.run_until_complete(_settle(b))
    assert [(m.producer_id, m.commit) for m in markers(b, "t", 0)] == [(pid, True)]
    assert [(m.producer_id, m.commit) for m in markers(b, "t", 1)] == [(pid, True)]
    assert b.broker.logs.get("t", 0).last_stable_offset == 3
    [desc] = call(b, 65, 0, {"transactional_ids": ["tx"]}).transaction_states
    assert desc.transaction_state == "CompleteCommit" and desc.producer_id == pid
    assert {(t.topic, tuple(t.partitions)) for t in desc.topics} == set()
    # An unknown id is answered with start time -1, as Kafka does, which kio's reader refuses to parse.
    from odradek.broker.handlers.transactions import _describe_one

    assert _describe_one(b.broker, "nobody")["error_code"] == TRANSACTIONAL_ID_NOT_FOUND
    listed = call(b, 66, 1, {"state_filters": ["CompleteCommit"], "producer_id_filters": [], "duration_filter": -1})
    assert [t.transactional_id for t in listed.transaction_states] == ["tx"]


async def _settle(b, rounds=50):
    import asyncio

    for _ in range(rounds):
        await asyncio.sleep(0.01)


def test_abort_marks_the_data_aborted(b):
    pid = init(b, "tx").producer_id
    add(b, "tx", pid, 0, [("t", 0)])
    produce_txn(b, "t", 0, pid, 0, 0, [b"x"])
    assert end(b, "tx", pid, 0, False) == NONE
    b.loop.run_until_complete(_settle(b))
    assert [m.commit for m in markers(b, "t", 0)] == [False]
    assert b.broker.logs.get("t", 0).aborted_transactions(0, 10) == [(pid, 0)]


def test_fencing_errors_by_version(b):
    pid = init(b, "tx").producer_id
    assert init(b, "tx").producer_epoch == 1
    assert add(b, "tx", pid, 0, [("t", 0)], version=3) == {("t", 0): PRODUCER_FENCED}
    assert add(b, "tx", pid, 0, [("t", 0)], version=1) == {("t", 0): INVALID_PRODUCER_EPOCH}
    assert end(b, "tx", pid, 0, True, version=1) == INVALID_PRODUCER_EPOCH
    assert end(b, "tx", pid, 1, True) == INVALID_TXN_STATE
    assert init(b, "tx", version=4, pid=pid, epoch=0).error_code == PRODUCER_FENCED  # KIP-360, stale epoch
    assert init(b, "tx", version=3, pid=pid, epoch=0).error_code == INVALID_PRODUCER_EPOCH


def test_unknown_partitions_fail_and_the_rest_are_not_attempted(b):
    pid = init(b, "tx").producer_id
    assert add(b, "tx", pid, 0, [("t", 0), ("t", 9), ("nope", 0)]) == {
        ("t", 0): OPERATION_NOT_ATTEMPTED, ("t", 9): UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}


def test_add_offsets_adds_the_groups_offsets_partition(b):
    pid = init(b, "tx").producer_id
    resp = call(b, 25, 3, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0, "group_id": "g"})
    assert resp.error_code == NONE
    shard = b.broker.txn_coordinator.runtime.active_shard("tx")
    assert shard.txns["tx"].partitions == {(CONSUMER_OFFSETS, b.broker.coordinator.runtime.partition_for("g"))}
    # Ending writes the marker to __consumer_offsets too, through the group coordinator.
    assert end(b, "tx", pid, 0, True) == NONE
    b.loop.run_until_complete(_settle(b))
    assert shard.txns["tx"].state.wire_name == "CompleteCommit"


def test_init_during_an_open_transaction_aborts_it(b):
    pid = init(b, "tx").producer_id
    add(b, "tx", pid, 0, [("t", 0)])
    produce_txn(b, "t", 0, pid, 0, 0, [b"zombie"])
    first = init(b, "tx")
    assert first.error_code == CONCURRENT_TRANSACTIONS
    b.loop.run_until_complete(_settle(b))
    again = init(b, "tx")
    assert again.error_code == NONE and again.producer_epoch == 2
    [m] = markers(b, "t", 0)
    assert not m.commit and m.producer_epoch == 1
    # The zombie's next batch at its old epoch is refused by the partition.
    assert produce_txn(b, "t", 0, pid, 0, 1, [b"late"]) == INVALID_PRODUCER_EPOCH


def test_state_survives_a_restart(tmp_path):
    ip = InProcess(tmp_path / "data", extra={"transaction.state.log.num.partitions": "3"})
    ip.broker.create_topic("t", 1, {})
    pid = init(ip, "tx").producer_id
    add(ip, "tx", pid, 0, [("t", 0)])
    ip.close()
    ip = InProcess(tmp_path / "data", extra={"transaction.state.log.num.partitions": "3"})
    try:
        shard = ip.broker.txn_coordinator.runtime.active_shard("tx")
        assert shard.txns["tx"].state.wire_name == "Ongoing" and shard.txns["tx"].partitions == {("t", 0)}
        assert end(ip, "tx", pid, 0, False) == NONE
        ip.loop.run_until_complete(_settle(ip))
    finally:
        ip.close()


def test_the_coordinator_aborts_a_timed_out_transaction(b):
    pid = init(b, "tx", timeout=1000).producer_id
    add(b, "tx", pid, 0, [("t", 0)])
    produce_txn(b, "t", 0, pid, 0, 0, [b"slow"])
    async def tick_then_settle():
        b.broker.coordinator_tick(b.broker.clock() + 1001)  # markers are sent by tasks on the loop
        await _settle(b)

    b.loop.run_until_complete(tick_then_settle())
    [m] = markers(b, "t", 0)
    assert not m.commit and m.producer_epoch == 1
    assert end(b, "tx", pid, 0, True) == PRODUCER_FENCED


def test_end_txn_answers_once_its_markers_are_written(b):
    """So that a producer starting its next transaction at once is not told
    CONCURRENT_TRANSACTIONS (and made to back off) while they are being written."""
    pid = init(b, "tx").producer_id
    add(b, "tx", pid, 0, [("t", 0), ("t", 1)])
    produce_txn(b, "t", 0, pid, 0, 0, [b"a"])
    assert end(b, "tx", pid, 0, True) == NONE
    # No settling: the answer itself came after the markers and the completion.
    assert [m.commit for m in markers(b, "t", 0)] == [True] and [m.commit for m in markers(b, "t", 1)] == [True]
    assert b.broker.txn_coordinator.runtime.active_shard("tx").txns["tx"].state.wire_name == "CompleteCommit"
    assert add(b, "tx", pid, 0, [("t", 0)]) == {("t", 0): NONE}
