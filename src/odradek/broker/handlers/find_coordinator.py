"""FindCoordinator v0-v6 (batched keys from v4, KIP-699).

The coordinator of a group is the leader of its `__consumer_offsets` partition (Kafka's
GroupCoordinator.partitionFor): on a single broker, this node; in a cluster, whichever
broker leads it now, or COORDINATOR_NOT_AVAILABLE while it has no leader, or while this
broker's cluster lease may have expired (its view may be stale; it would name itself, and
then refuse the group with NOT_COORDINATOR, broker/coordinator.py). The coordinator of a
transactional id is likewise the leader of its `__transaction_state` partition (Kafka's
TransactionStateManager.partitionFor), a topic created by the first such lookup.
"""

from __future__ import annotations

import logging

from ...cluster.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from ...protocol.errors import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    NONE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from ...security.acl import Operation
from ..registry import api
from .metadata import listener_of

GROUP_KEY, TRANSACTION_KEY = 0, 1
log = logging.getLogger(__name__)


def _lookup(broker, key: str, key_type: int, listener: str | None = None) -> dict:
    me = broker.me()
    me = me.on(listener) or me
    host, port = me.host, me.port
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": INVALID_REQUEST,
                "error_message": f"unknown key type {key_type}"}
    if not key:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": INVALID_REQUEST,
                "error_message": "group id is empty" if key_type == GROUP_KEY else "transactional id is empty"}
    coordinator = broker.coordinator if key_type == GROUP_KEY else broker.txn_coordinator
    topic = CONSUMER_OFFSETS if key_type == GROUP_KEY else TRANSACTION_STATE
    state = None
    if coordinator is not None:
        state = broker.replicas.state(topic, coordinator.runtime.partition_for(key))
    if broker.metadata.get(topic) is None and not broker.metadata.single_node:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                "error_message": f"{topic} is not created yet"}
    if not broker.metadata.lease_current():
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                "error_message": "this broker's view of the cluster may be stale; ask another broker"}
    if state is None or state.leader == broker.config.node_id:
        return {"key": key, "node_id": broker.config.node_id, "host": host, "port": port, "error_code": NONE,
                "error_message": None}
    leader = broker.replicas.image.brokers.get(state.leader)
    leader = leader.on(listener) if leader is not None else None
    if leader is None:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                "error_message": f"the {topic} partition of {key!r} has no leader"}
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
    if key_type == TRANSACTION_KEY and broker.txn_coordinator is not None \
            and broker.metadata.get(TRANSACTION_STATE) is None:
        try:
            await broker.txn_coordinator.ensure_topic()
        except Exception as exc:  # noqa: BLE001 - the lookups answer COORDINATOR_NOT_AVAILABLE
            log.warning("could not create %s: %s", TRANSACTION_STATE, exc)
    access = broker.access(request)

    def lookup(key: str) -> dict:
        # Kafka: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional id
        # (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
        if key_type == GROUP_KEY and not access.group(Operation.DESCRIBE, key):
            return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": GROUP_AUTHORIZATION_FAILED,
                    "error_message": None}
        if key_type == TRANSACTION_KEY and not access.transactional_id(Operation.DESCRIBE, key):
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "error_message": None}
        return _lookup(broker, key, key_type, listener_of(request))

    if request.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [lookup(k) for k in body.coordinator_keys]}
    one = lookup(body.key)
    return {"throttle_time": 0, **{k: v for k, v in one.items() if k != "key"}}
