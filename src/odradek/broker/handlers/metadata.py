"""Metadata v0-v13: brokers, topics with stable ids, lookup by name or by topic id."""

from __future__ import annotations

import asyncio
import uuid

from ...cluster.names import InvalidTopicName, validate_topic_name
from ...protocol.errors import (
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation, ResourceType
from ...security.operations import NOT_REQUESTED as NO_OPS
from ...security.operations import SUPPORTED, cluster_operations, to_bitfield
from ..registry import api

ZERO_UUID = uuid.UUID(int=0)


def listener_of(request) -> str | None:
    """The listener a request came in on (None in-process: every broker's default address)."""
    return request.session.listener if request.session is not None else None


def broker_entries(broker, request=None) -> list[dict]:
    """Every live broker with its rack (librdkafka needs them all for KIP-392 and leaders),
    at its address on the listener the request came in on."""
    listener = listener_of(request) if request is not None else None
    return [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in broker.replicas.brokers(listener)]


def _partition_entry(node: int, p: int, offline: bool, state=None, live=()) -> dict:
    if state is not None:
        # A cluster's partition (Kafka's MetadataCache): the leader only if it is alive;
        # replicas whose broker is not registered, or whose log is offline here, are offline.
        down = [r for r in state.replicas if r not in live or (r == node and offline)]
        leader = state.leader if state.leader in live and state.leader not in down else -1
        return {"error_code": NONE if leader >= 0 else LEADER_NOT_AVAILABLE, "partition_index": p,
                "leader_id": leader, "leader_epoch": state.leader_epoch, "replica_nodes": list(state.replicas),
                "isr_nodes": list(state.isr), "offline_replicas": down}
    if offline:
        # The only replica's log is offline: no leader (as Kafka's metadata shows a
        # partition whose replicas are all in failed log directories).
        return {"error_code": LEADER_NOT_AVAILABLE, "partition_index": p, "leader_id": -1, "leader_epoch": 0,
                "replica_nodes": [node], "isr_nodes": [], "offline_replicas": [node]}
    return {"error_code": NONE, "partition_index": p, "leader_id": node, "leader_epoch": 0,
            "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}


def topic_entry(broker, topic) -> dict:
    node = broker.config.node_id
    is_offline = broker.logs.is_offline
    image = broker.replicas.image
    live = image.brokers.keys() | {node}
    return {
        "error_code": NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": [_partition_entry(node, p, is_offline(topic.name, p) is not None, image.partition(topic.name, p),
                                        live) for p in range(topic.partitions)],
        "topic_authorized_operations": NO_OPS,
    }


def _error_entry(name, topic_id, code) -> dict:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": NO_OPS,
    }


# Topics and partitions described between yields to the event loop: a Metadata request
# naming (or auto-creating) 10,000 topics, or describing 100,000 partitions, must not
# hold every other client up (hardening issue, item 4).
SLICE = 2000


@api(3, "Metadata", 0, 13)
async def metadata(broker, request):
    v = request.api_version
    requested = request.body.topics
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    all_topics = requested is None or (v == 0 and not requested)
    allow_create = request.field("allow_auto_topic_creation", True)
    access = broker.access(request)
    topics = []
    if not all_topics and 10 <= v <= 11 and any(
            r.name is None or (r.topic_id or ZERO_UUID) != ZERO_UUID for r in requested):
        # KafkaApis.handleTopicMetadataRequest: v10-11 carry topic ids but a broker may not
        # use them, nor take a null name (InvalidRequestException); MetadataRequest's
        # getErrorResponse answers every requested topic with the error, a null name as "".
        topics = [_error_entry(r.name or "", r.topic_id, INVALID_REQUEST) for r in requested]
    elif all_topics:
        described = 0
        for t in list(broker.metadata.topics.values()):
            if access.enforced and not access.topic(Operation.DESCRIBE, t.name):
                continue  # Kafka: all-topics Metadata leaves out what the principal may not describe
            topics.append(topic_entry(broker, t))
            described += t.partitions
            if described >= SLICE:  # a topic of 10,000 partitions is a slice of its own
                described = 0
                await asyncio.sleep(0)
    else:
        if allow_create:
            # One metadata write per slice of unknown names, not one per topic.
            unknown = [getattr(r, "name", None) for r in requested]
            # Kafka: only describable names are created, with CREATE on the cluster or the topic.
            may_create = access.cluster(Operation.CREATE)
            await broker.auto_create_many_async(
                [n for n in unknown if n is not None and broker.metadata.get(n) is None
                 and access.topic(Operation.DESCRIBE, n) and (may_create or access.topic(Operation.CREATE, n))])
        described = 0
        for req in requested:
            if described >= SLICE:
                described = 0
                await asyncio.sleep(0)
            described += 1
            name = getattr(req, "name", None)
            topic_id = getattr(req, "topic_id", None)
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                # v12+ lookup by topic id (librdkafka resolves ids in KIP-848 assignments this way)
                t = broker.metadata.get_by_id(topic_id)
                if t is not None and not access.topic(Operation.DESCRIBE, t.name):
                    topics.append(_error_entry(None, topic_id, TOPIC_AUTHORIZATION_FAILED))  # the name is not told
                    continue
                topics.append(topic_entry(broker, t) if t else _error_entry(None, topic_id, UNKNOWN_TOPIC_ID))
                continue
            try:
                validate_topic_name(name)
            except InvalidTopicName:
                topics.append(_error_entry(name, None, INVALID_TOPIC_EXCEPTION))
                continue
            if not access.topic(Operation.DESCRIBE, name):
                # Checked before existence, as Kafka does: whether it exists is not told either.
                topics.append(_error_entry(name, None, TOPIC_AUTHORIZATION_FAILED))
                continue
            t = broker.metadata.get(name)
            topics.append(topic_entry(broker, t) if t else _error_entry(name, None, UNKNOWN_TOPIC_OR_PARTITION))
            described += t.partitions if t else 0
    if request.field("include_topic_authorized_operations", False):
        # Kafka sets it on every topic described without error (KafkaApis.handleTopicMetadataRequest).
        for t in topics:
            if t["error_code"] != TOPIC_AUTHORIZATION_FAILED and t["name"]:
                t["topic_authorized_operations"] = to_bitfield(
                    access.operations(ResourceType.TOPIC, t["name"], SUPPORTED["topic"]))
    return {
        "throttle_time": 0,
        "brokers": broker_entries(broker, request),
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": broker.replicas.controller(),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations(
            access, bool(request.field("include_cluster_authorized_operations", False))),
        "error_code": NONE,
    }
