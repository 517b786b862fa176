"""Metadata v0-v13: brokers, topics with stable ids, lookup by name or by topic id."""

from __future__ import annotations

import uuid

from ...cluster.names import InvalidTopicName, validate_topic_name
from ..errors import INVALID_TOPIC_EXCEPTION, NONE, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION
from ..registry import api

NO_OPS = -(2**31)  # "authorized operations not requested"
ZERO_UUID = uuid.UUID(int=0)


def broker_entries(broker) -> list[dict]:
    host, port = broker.config.advertised
    return [{"node_id": broker.config.node_id, "host": host, "port": port, "rack": broker.config.rack}]


def topic_entry(broker, topic) -> dict:
    node = broker.config.node_id
    return {
        "error_code": NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": [
            {
                "error_code": NONE,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for p in range(topic.partitions)
        ],
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


@api(3, "Metadata", 0, 13)
def metadata(broker, request):
    v = request.api_version
    requested = request.body.topics
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    all_topics = requested is None or (v == 0 and not requested)
    allow_create = request.field("allow_auto_topic_creation", True)
    topics = []
    if all_topics:
        topics = [topic_entry(broker, t) for t in broker.metadata.topics.values()]
    else:
        for req in requested:
            name = getattr(req, "name", None)
            topic_id = getattr(req, "topic_id", None)
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                # v12+ lookup by topic id (librdkafka resolves ids in KIP-848 assignments this way)
                t = broker.metadata.get_by_id(topic_id)
                topics.append(topic_entry(broker, t) if t else _error_entry(None, topic_id, UNKNOWN_TOPIC_ID))
                continue
            try:
                validate_topic_name(name)
            except InvalidTopicName:
                topics.append(_error_entry(name, None, INVALID_TOPIC_EXCEPTION))
                continue
            t = broker.metadata.get(name)
            if t is None and allow_create:
                t = broker.auto_create(name)
            topics.append(topic_entry(broker, t) if t else _error_entry(name, None, UNKNOWN_TOPIC_OR_PARTITION))
    return {
        "throttle_time": 0,
        "brokers": broker_entries(broker),
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": broker.config.node_id,
        "topics": topics,
        "cluster_authorized_operations": NO_OPS,
        "error_code": NONE,
    }
