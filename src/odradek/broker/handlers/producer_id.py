"""InitProducerId v0-v5: idempotent producers, and transactional ones through the transaction coordinator.

Without a transactional id (kafka-python 3.0 and the Java client enable idempotence by
default once the broker looks new enough): a fresh producer id at epoch 0, or, KIP-360,
the named producer's epoch bumped.

With one (KIP-98): the transaction coordinator of that id decides
(transactions/coordinator.py `init_producer_id`). A producer id is allocated here first
when the id is new or its epoch is exhausted, since allocating may wait for the cluster
metadata store and the coordinator's handlers never wait. PRODUCER_FENCED is spelled
INVALID_PRODUCER_EPOCH below v4 (KIP-588), as Kafka's KafkaApis does.
"""

from __future__ import annotations

from ...cluster.names import TRANSACTION_STATE
from ...protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    NONE,
    PRODUCER_FENCED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from ...security.acl import Operation, ResourceType
from ...transactions import coordinator as C
from ...transactions.model import MAX_EPOCH
from ..coordinated import answer
from ..registry import api


def _response(code, pid: int = -1, epoch: int = -1) -> dict:
    return {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


@api(22, "InitProducerId", 0, 5)
async def init_producer_id(broker, request):
    body = request.body
    pid = request.field("producer_id", -1)
    epoch = request.field("producer_epoch", -1)
    tid = body.transactional_id
    access = broker.access(request)
    if tid is None:
        # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
        if not (access.cluster(Operation.IDEMPOTENT_WRITE) or access.any_of_type(Operation.WRITE, ResourceType.TOPIC)):
            return _response(CLUSTER_AUTHORIZATION_FAILED)
        if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
            return _response(NONE, pid, epoch + 1)
        return _response(NONE, await broker.metadata.allocate_producer_id(), 0)
    if not access.transactional_id(Operation.WRITE, tid):
        return _response(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator = broker.txn_coordinator
    if broker.metadata.get(TRANSACTION_STATE) is None:
        await coordinator.ensure_topic()  # Kafka creates it on first use too
        if broker.metadata.get(TRANSACTION_STATE) is None:
            return _response(COORDINATOR_NOT_AVAILABLE)
    runtime = coordinator.runtime
    shard = runtime.shards.get(runtime.partition_for(tid))
    new_pid = None
    if shard is not None:
        txn = shard.txns.get(tid)
        if txn is None or txn.producer_epoch >= MAX_EPOCH - 1:
            new_pid = await broker.metadata.allocate_producer_id()
    timeout = int(body.transaction_timeout.total_seconds() * 1000) if hasattr(body.transaction_timeout, "total_seconds") \
        else int(body.transaction_timeout)
    old = request.api_version < 4

    def op(s, now):
        return C.init_producer_id(s, tid, timeout, pid, epoch, new_pid, now)

    def shape(resp: dict) -> dict:
        code = resp["error_code"]
        if old and code == PRODUCER_FENCED:
            code = INVALID_PRODUCER_EPOCH
        return _response(code, resp["producer_id"], resp["producer_epoch"])

    result = answer(runtime.submit(tid, op, broker.clock()), lambda code: _response(code), shape)
    return await result if hasattr(result, "__await__") else result
