"""FindCoordinator v0-v6 (batched keys from v4, KIP-699).

The coordinator of a group is the leader of its `__consumer_offsets` partition (Kafka's
GroupCoordinator.partitionFor): on a single broker, this node; in a cluster, whichever
broker leads it now, or COORDINATOR_NOT_AVAILABLE while it has no leader, or while this
broker's cluster lease may have expired (its view may be stale; it would name itself, and
then refuse the group with NOT_COORDINATOR, broker/coordinator.py). Transactions are not
implemented: transaction keys get TRANSACTIONAL_ID_AUTHORIZATION_FAILED (non-retriable) as
InitProducerId does.
"""

from __future__ import annotations

import logging

from ...cluster.names import CONSUMER_OFFSETS
from ...protocol.errors import (
    COORDINATOR_NOT_AVAILABLE,
    INVALID_REQUEST,
    NONE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from ..registry import api

GROUP_KEY, TRANSACTION_KEY = 0, 1
log = logging.getLogger(__name__)


def _lookup(broker, key: str, key_type: int) -> dict:
    host, port = broker.config.advertised
    if key_type == TRANSACTION_KEY:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "error_message": "odradek does not implement transactions"}
    if key_type != GROUP_KEY:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": INVALID_REQUEST,
                "error_message": f"unknown key type {key_type}"}
    if not key:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": INVALID_REQUEST,
                "error_message": "group id is empty"}
    coordinator = broker.coordinator
    state = None
    if coordinator is not None:
        state = broker.replicas.state(CONSUMER_OFFSETS, coordinator.runtime.partition_for(key))
    if broker.metadata.get(CONSUMER_OFFSETS) is None and not broker.metadata.single_node:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                "error_message": f"{CONSUMER_OFFSETS} is not created yet"}
    if not broker.metadata.lease_current():
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                "error_message": "this broker's view of the cluster may be stale; ask another broker"}
    if state is None or state.leader == broker.config.node_id:
        return {"key": key, "node_id": broker.config.node_id, "host": host, "port": port, "error_code": NONE,
                "error_message": None}
    leader = broker.replicas.image.brokers.get(state.leader)
    if leader is None:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                "error_message": "the group's __consumer_offsets partition has no leader"}
    return {"key": key, "node_id": leader.node_id, "host": leader.host, "port": leader.port, "error_code": NONE,
            "error_message": None}


@api(10, "FindCoordinator", 0, 6)
async def find_coordinator(broker, request):
    body = request.body
    key_type = int(request.field("key_type", GROUP_KEY))
    if key_type == GROUP_KEY and broker.coordinator is not None and broker.metadata.get(CONSUMER_OFFSETS) is None:
        # Kafka creates the offsets topic on the first FindCoordinator for a group, at
        # offsets.topic.replication.factor capped at the brokers registered now.
        try:
            await broker.coordinator.ensure_topic()
        except Exception as exc:  # noqa: BLE001 - the lookups answer COORDINATOR_NOT_AVAILABLE
            log.warning("could not create %s: %s", CONSUMER_OFFSETS, exc)
    if request.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [_lookup(broker, k, key_type) for k in body.coordinator_keys]}
    one = _lookup(broker, body.key, key_type)
    return {"throttle_time": 0, **{k: v for k, v in one.items() if k != "key"}}
