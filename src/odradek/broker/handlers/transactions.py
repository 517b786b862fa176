"""AddPartitionsToTxn v0-3, AddOffsetsToTxn v0-4, EndTxn v0-4, WriteTxnMarkers v1-2,
DescribeTransactions v0, ListTransactions v0-1: the transaction coordinator's APIs (KIP-98)
and the marker write between brokers. InitProducerId is in producer_id.py.

Versions: the pre-KIP-890 flow librdkafka speaks (TRANSACTIONS.md). AddPartitionsToTxn v4+
is broker-to-broker verification (KIP-890) and EndTxn v5 returns a new epoch per
transaction (transaction.version 2): neither is advertised, nor is the `transaction.version`
feature. AddOffsetsToTxn/EndTxn v4 only allow TRANSACTION_ABORTABLE, which odradek never
sends. Fencing errors are PRODUCER_FENCED, and INVALID_PRODUCER_EPOCH to requests older than
KIP-588 (AddPartitionsToTxn/AddOffsetsToTxn/EndTxn below v2), as Kafka's KafkaApis does.

The coordinator's decisions are in transactions/coordinator.py; these handlers validate
what only the broker can (topics exist), submit, and shape the answer.
"""

from __future__ import annotations

import asyncio
import datetime

from ...cluster.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from ...coordinator.errors import error_code_for
from ...protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    NONE,
    OPERATION_NOT_ATTEMPTED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...records.control import Marker
from ...security.acl import OPEN, Operation
from ...transactions import coordinator as C
from ..coordinated import answer
from ..registry import api
from ..txn_coordinator import write_marker


def _submit(broker, tid: str, op):
    return broker.txn_coordinator.runtime.submit(tid, op, broker.clock())


@api(24, "AddPartitionsToTxn", 0, 3)
def add_partitions_to_txn(broker, request):
    b = request.body
    v = request.api_version
    tid = b.v3_and_below_transactional_id
    topics = [(t.name, list(t.partitions)) for t in b.v3_and_below_topics]

    def shape(codes: dict[tuple[str, int], object]) -> dict:
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": [
                {"partition_index": p, "partition_error_code": codes[(name, p)]} for p in parts]}
            for name, parts in topics]}

    wanted = [(name, p) for name, parts in topics for p in parts]
    access = broker.access(request)
    if not access.transactional_id(Operation.WRITE, tid):
        return shape({tp: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted})
    # Kafka: WRITE on each topic (internal topics never pass); one refused, none attempted.
    denied = {(n, p) for n, p in wanted if not access.topic(Operation.WRITE, n)
              or (access.enforced and n in (CONSUMER_OFFSETS, TRANSACTION_STATE))}
    if denied:
        return shape({tp: TOPIC_AUTHORIZATION_FAILED if tp in denied else OPERATION_NOT_ATTEMPTED for tp in wanted})
    unknown = set()
    for name, p in wanted:
        topic = broker.metadata.get(name)
        if topic is None or not 0 <= p < topic.partitions:
            unknown.add((name, p))
    if unknown:
        # Kafka: the unknown ones fail, the rest are not attempted; nothing is added.
        return shape({tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED for tp in wanted})
    op = lambda shard, now: C.add_partitions(shard, tid, b.v3_and_below_producer_id,  # noqa: E731
                                             b.v3_and_below_producer_epoch, wanted, now, old_version=v < 2)
    return answer(_submit(broker, tid, op), lambda code: shape({tp: code for tp in wanted}),
                  lambda code: shape({tp: code for tp in wanted}))


@api(25, "AddOffsetsToTxn", 0, 4)
def add_offsets_to_txn(broker, request):
    b = request.body
    access = broker.access(request)
    if not access.transactional_id(Operation.WRITE, b.transactional_id):
        return {"throttle_time": 0, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not access.group(Operation.READ, b.group_id):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    if not b.group_id:
        return {"throttle_time": 0, "error_code": INVALID_REQUEST}
    # The group's __consumer_offsets partition joins the transaction: its marker will make
    # the TxnOffsetCommit offsets visible (KIP-98 "AddOffsetCommitsToTxn").
    tp = (CONSUMER_OFFSETS, broker.coordinator.runtime.partition_for(b.group_id))
    op = lambda shard, now: C.add_partitions(shard, b.transactional_id, b.producer_id,  # noqa: E731
                                             b.producer_epoch, [tp], now, old_version=request.api_version < 2)
    return answer(_submit(broker, b.transactional_id, op), lambda code: {"throttle_time": 0, "error_code": code},
                  lambda code: {"throttle_time": 0, "error_code": code})


@api(26, "EndTxn", 0, 4)
async def end_txn(broker, request):
    b = request.body
    if not broker.access(request).transactional_id(Operation.WRITE, b.transactional_id):
        return {"throttle_time": 0, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    op = lambda shard, now: C.end_txn(shard, b.transactional_id, b.producer_id, b.producer_epoch,  # noqa: E731
                                      bool(b.committed), now, old_version=request.api_version < 2)
    result = answer(_submit(broker, b.transactional_id, op), lambda code: {"throttle_time": 0, "error_code": code},
                    lambda code: {"throttle_time": 0, "error_code": code})
    response = await result if asyncio.isfuture(result) else result
    if response["error_code"] == NONE:
        # The decision is committed; answer once its markers are written too (bounded), so
        # the producer's next transaction does not start while they are (txn_coordinator.py `wait_for_markers`).
        await broker.txn_coordinator.wait_for_markers(b.transactional_id)
    return response


@api(27, "WriteTxnMarkers", 1, 2)
async def write_txn_markers(broker, request):
    """A transaction coordinator asks this broker, the leader of the partitions, to write
    markers. Each partition is answered once its marker is committed."""
    access = broker.access(request)
    if not (access.cluster(Operation.ALTER) or access.cluster(Operation.CLUSTER_ACTION)):
        # Kafka: ALTER, else CLUSTER_ACTION on the cluster (a broker's principal); every partition refused.
        return {"markers": [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": CLUSTER_AUTHORIZATION_FAILED}
                                            for p in t.partition_indexes]} for t in m.topics]}
            for m in request.body.markers]}
    out = []
    for m in request.body.markers:
        marker = Marker(m.producer_id, m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch)
        tps = [(t.name, p) for t in m.topics for p in t.partition_indexes]
        codes = await asyncio.gather(*(write_marker(broker, tp, marker, 30_000) for tp in tps))
        by_tp = dict(zip(tps, codes))
        out.append({"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": by_tp[(t.name, p)]}
                                            for p in t.partition_indexes]} for t in m.topics]})
    return {"markers": out}


# Kafka answers -1 for a transaction that has not started; kio's datetime field cannot be
# None, so -1 ms is spelled as the instant it stands for.
_NO_START = datetime.datetime.fromtimestamp(-0.001, tz=datetime.timezone.utc)


def _start_time(ms: int):
    return _NO_START if ms < 0 else ms


def _describe_one(broker, tid: str, access=OPEN) -> dict:
    empty = {"transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
             "transaction_start_time": _NO_START, "producer_id": -1, "producer_epoch": -1, "topics": []}
    if not access.transactional_id(Operation.DESCRIBE, tid):
        return {**empty, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    try:
        shard = broker.txn_coordinator.runtime.active_shard(tid)
    except Exception as exc:  # noqa: BLE001 - CoordinatorUnavailable: not served here
        return {**empty, "error_code": error_code_for(exc)}
    txn = shard.txns.get(tid)
    if txn is None:
        from ...protocol.errors import TRANSACTIONAL_ID_NOT_FOUND

        return {**empty, "error_code": TRANSACTIONAL_ID_NOT_FOUND}
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(txn.partitions):
        if access.topic(Operation.DESCRIBE, t):  # Kafka leaves out topics the principal may not describe
            by_topic.setdefault(t, []).append(p)
    return {"error_code": NONE, "transactional_id": tid, "transaction_state": txn.state.wire_name,
            "transaction_timeout": txn.timeout_ms, "transaction_start_time": _start_time(txn.start_ms),
            "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}


@api(65, "DescribeTransactions", 0, 0)
def describe_transactions(broker, request):
    access = broker.access(request)
    return {"throttle_time": 0, "transaction_states": [_describe_one(broker, tid, access)
                                                       for tid in request.body.transactional_ids]}


@api(66, "ListTransactions", 0, 1)
def list_transactions(broker, request):
    b = request.body
    states = set(b.state_filters or ())
    pids = set(b.producer_id_filters or ())
    duration = request.field("duration_filter", -1)
    known = {s.wire_name for s in C.TxnState}
    now = broker.clock()
    access = broker.access(request)
    out = []
    for shard in broker.txn_coordinator.runtime.shards.values():
        for tid, txn in sorted(shard.txns.items()):
            if not access.transactional_id(Operation.DESCRIBE, tid):
                continue  # Kafka lists only what the principal may describe
            if states and txn.state.wire_name not in states:
                continue
            if pids and txn.producer_id not in pids:
                continue
            # KIP-994: only transactions running for longer than the filter.
            if duration is not None and duration >= 0 and (txn.start_ms < 0 or now - txn.start_ms < duration):
                continue
            out.append({"transactional_id": tid, "producer_id": txn.producer_id,
                        "transaction_state": txn.state.wire_name})
    return {"throttle_time": 0, "error_code": NONE, "unknown_state_filters": sorted(states - known),
            "transaction_states": out}
