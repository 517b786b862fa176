"""CreateTopics v2-v7, DeleteTopics v1-v6, CreatePartitions v0-v3."""

from __future__ import annotations

import uuid
from collections import Counter

from ...cluster.backend import MetadataUnavailable
from ...cluster.metadata import TopicCollision
from ...cluster.names import InvalidTopicName, collision_key, validate_topic_name
from ...cluster.placement import PlacementError
from ...config import validate_topic_config
from ...configdef import ConfigError
from ...log.errors import StorageError
from ...protocol.errors import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    NONE,
    POLICY_VIOLATION,
    REQUEST_TIMED_OUT,
    TOPIC_ALREADY_EXISTS,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation
from ..broker import MAX_PARTITIONS_PER_REQUEST, MAX_PARTITIONS_PER_TOPIC
from ..registry import api
from ..slices import TimeSlice
from .configs import topic_entries

ZERO_UUID = uuid.UUID(int=0)


class _Reject(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _check_create(broker, t) -> tuple[int, dict[str, str], list[tuple[int, ...]]]:
    """Validate one CreatableTopic; return (partitions, config overrides, replicas per
    partition) or raise _Reject. Replicas are placed here (Kafka's controller does it when
    it validates), rack-aware when the brokers name racks."""
    try:
        validate_topic_name(t.name)
    except InvalidTopicName as exc:
        raise _Reject(INVALID_TOPIC_EXCEPTION, str(exc)) from None
    if broker.metadata.get(t.name) is not None:
        raise _Reject(TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
    try:
        broker.metadata.check_create(t.name)
    except TopicCollision as exc:
        raise _Reject(INVALID_TOPIC_EXCEPTION, str(exc)) from None
    nodes = {b.node_id for b in broker.replicas.brokers()}
    replicas: list[tuple[int, ...]] = []
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise _Reject(INVALID_REQUEST, "both a replica assignment and a partition count or replication factor were given")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise _Reject(INVALID_REPLICA_ASSIGNMENT, "partitions in the assignment must be 0..N-1")
        for a in t.assignments:
            if not a.broker_ids or set(a.broker_ids) - nodes or len(set(a.broker_ids)) != len(a.broker_ids):
                raise _Reject(INVALID_REPLICA_ASSIGNMENT, f"replica assignment {list(a.broker_ids)} names unknown or repeated brokers")
        partitions = len(indexes)
        replicas = [tuple(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition_index)]
        if len({len(r) for r in replicas}) > 1:
            raise _Reject(INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas")
    else:
        partitions = broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        replication = broker.config.default_replication_factor if t.replication_factor == -1 else t.replication_factor
        if partitions <= 0:
            raise _Reject(INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if partitions > MAX_PARTITIONS_PER_TOPIC:
            raise _Reject(INVALID_PARTITIONS, f"odradek allows at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic")
        if replication <= 0:
            raise _Reject(INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if replication > len(nodes):
            raise _Reject(
                INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication} time(s): The target replication factor of "
                f"{replication} cannot be reached because only {len(nodes)} broker(s) are registered.",
            )
        try:
            replicas = broker.replicas.place([(t.name, partitions, {})], {}, {t.name: replication})[t.name]
        except PlacementError as exc:
            raise _Reject(INVALID_REPLICATION_FACTOR, str(exc)) from None
    # Kafka's ReplicationControlManager.computeConfigChanges, then LogConfig.validate on this
    # broker's defaults: every failure is INVALID_CONFIG with Kafka's message.
    nulls = [c.name for c in t.configs if c.value is None]
    if nulls:
        raise _Reject(INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))
    overrides = {c.name: c.value for c in t.configs}
    try:
        validate_topic_config(broker.config.topic_defaults(), overrides)
    except ConfigError as exc:
        raise _Reject(INVALID_CONFIG, str(exc)) from None
    return partitions, overrides, replicas


def _describe_configs(broker, overrides: dict[str, str]) -> list[dict]:
    """The CreateTopics response's configs: each key's effective value and source."""
    return [
        {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
        for e in topic_entries(broker, overrides)
    ]


EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."


def _requested_partitions(broker, t) -> int:
    """Kafka's ReplicationControlManager.validateTotalNumberOfPartitions, per topic."""
    if t.assignments:
        return len(t.assignments)
    if t.num_partitions == -1:
        return broker.config.num_partitions
    return max(t.num_partitions, 0)


@api(19, "CreateTopics", 2, 7)
async def create_topics(broker, request):
    body = request.body
    counts = Counter(t.name for t in body.topics)
    over_cap = sum(_requested_partitions(broker, t) for t in body.topics) > MAX_PARTITIONS_PER_REQUEST
    results = []
    creating: list[tuple[dict, tuple[str, int, dict[str, str]]]] = []
    assignments: dict[str, list[tuple[int, ...]]] = {}
    keys: dict[str, str] = {}
    described: dict[frozenset, list[dict]] = {}  # one description per distinct set of overrides
    access = broker.access(request)
    may_create_any = access.cluster(Operation.CREATE)  # Kafka: CREATE on the cluster, else on each topic
    turn = TimeSlice()  # 10,000 topics in one request: other clients get turns meanwhile
    for t in body.topics:
        await turn.tick()
        result = {"name": t.name, "topic_id": ZERO_UUID, "error_code": NONE, "error_message": None,
                  "num_partitions": -1, "replication_factor": -1, "configs": None}
        try:
            if over_cap:
                # Kafka rejects the whole request before looking at any topic.
                raise _Reject(POLICY_VIOLATION, EXCESSIVE_PARTITIONS)
            if counts[t.name] > 1:
                raise _Reject(INVALID_REQUEST, "Create topics request from client contains a duplicate topic")
            if not may_create_any and not access.topic(Operation.CREATE, t.name):
                raise _Reject(TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            partitions, overrides, replicas = _check_create(broker, t)
            key = collision_key(t.name)
            if key in keys:
                raise _Reject(INVALID_TOPIC_EXCEPTION, f"topic {t.name!r} collides with topic {keys[key]!r}")
            keys[key] = t.name
            key_of = frozenset(overrides.items())
            if key_of not in described:
                described[key_of] = _describe_configs(broker, overrides)
            if access.topic(Operation.DESCRIBE_CONFIGS, t.name):
                result.update(num_partitions=partitions, replication_factor=len(replicas[0]) if replicas else 1,
                              configs=described[key_of])
            else:  # Kafka: created, but its configs are not shown (KIP-525)
                result["topic_config_error_code"] = TOPIC_AUTHORIZATION_FAILED
            if not body.validate_only:
                creating.append((result, (t.name, partitions, overrides)))
                assignments[t.name] = replicas
        except _Reject as rej:
            result.update(error_code=rej.code, error_message=str(rej))
        results.append(result)
    if creating:
        created = await broker.create_topics_sliced([spec for _, spec in creating], assignments=assignments)
        for (result, _), outcome in zip(creating, created):
            if isinstance(outcome, StorageError):
                result.update(error_code=KAFKA_STORAGE_ERROR, error_message=str(outcome), num_partitions=-1,
                              replication_factor=-1, configs=None)
            elif isinstance(outcome, PlacementError):  # brokers left between validation and creation
                result.update(error_code=INVALID_REPLICATION_FACTOR, error_message=str(outcome), num_partitions=-1,
                              replication_factor=-1, configs=None)
            elif isinstance(outcome, MetadataUnavailable):  # etcd unreachable: Kafka's controller timeout
                result.update(error_code=REQUEST_TIMED_OUT, error_message=str(outcome), num_partitions=-1,
                              replication_factor=-1, configs=None)
            elif isinstance(outcome, Exception):  # raced with another request meanwhile
                result.update(error_code=TOPIC_ALREADY_EXISTS, error_message=str(outcome), num_partitions=-1,
                              replication_factor=-1, configs=None)
            else:
                result["topic_id"] = outcome.topic_id
    return {"throttle_time": 0, "topics": results}


@api(20, "DeleteTopics", 1, 6)
async def delete_topics(broker, request):
    body = request.body
    if request.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    responses = []
    access = broker.access(request)
    every = access.cluster(Operation.DELETE)  # Kafka: DELETE on the cluster, else DESCRIBE and DELETE on each
    for name, topic_id in wanted:
        if topic_id is not None and topic_id != ZERO_UUID and name is None:
            topic = broker.metadata.get_by_id(topic_id)
            missing = (UNKNOWN_TOPIC_ID, "unknown topic id")
            if topic is not None and not every and not access.topic(Operation.DELETE, topic.name):
                # The name is told only to who may describe it.
                told = topic.name if access.topic(Operation.DESCRIBE, topic.name) else None
                responses.append({"name": told, "topic_id": topic_id, "error_code": TOPIC_AUTHORIZATION_FAILED,
                                  "error_message": "Authorization failed."})
                continue
        elif name and not every and not (access.topic(Operation.DESCRIBE, name)
                                         and (access.topic(Operation.DELETE, name) or broker.metadata.get(name) is None)):
            # Not describable: refused whether or not it exists; describable: refused if it exists.
            responses.append({"name": name, "topic_id": ZERO_UUID, "error_code": TOPIC_AUTHORIZATION_FAILED,
                              "error_message": "Authorization failed."})
            continue
        else:
            topic = broker.metadata.get(name) if name else None
            missing = (UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if topic is None:
            responses.append({"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": missing[0], "error_message": missing[1]})
            continue
        if topic.is_internal:
            # The group coordinator lives in __consumer_offsets: odradek refuses to delete it
            # (Kafka's controller would, and every group would be lost with it; Kafka's own
            # kafka-topics tool refuses with this message).
            responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": INVALID_REQUEST,
                              "error_message": f"Topic {topic.name} is a kafka internal topic and is not allowed "
                                               f"to be marked for deletion."})
            continue
        try:
            await broker.delete_topic_async(topic)
        except StorageError as exc:
            responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": KAFKA_STORAGE_ERROR,
                              "error_message": str(exc)})
            continue
        responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": NONE, "error_message": None})
    return {"throttle_time": 0, "responses": responses}


@api(37, "CreatePartitions", 0, 3)
async def create_partitions(broker, request):
    body = request.body
    counts = Counter(t.name for t in body.topics)
    new_total = 0
    for t in body.topics:
        topic = broker.metadata.get(t.name)
        if topic is not None and counts[t.name] == 1:
            new_total += max(t.count - topic.partitions, 0)
    over_cap = new_total > MAX_PARTITIONS_PER_REQUEST
    results = []
    growing: dict[str, int] = {}
    explicit: dict[str, list[tuple[int, ...]]] = {}
    live = {b.node_id for b in broker.replicas.brokers()}
    access = broker.access(request)
    for t in body.topics:
        code, message = NONE, None
        topic = broker.metadata.get(t.name)
        if over_cap:
            code, message = POLICY_VIOLATION, EXCESSIVE_PARTITIONS
        elif counts[t.name] > 1:
            code, message = INVALID_REQUEST, "Duplicate topic in request."
        elif not access.topic(Operation.ALTER, t.name):  # Kafka: ALTER on the topic, after the duplicates
            code, message = TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
        elif topic is None:
            code, message = UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist."
        elif topic.is_internal:
            # Groups are placed by offsets.topic.num.partitions, and GroupCoordinator.ensure_topic
            # refuses to start when __consumer_offsets has any other count.
            code, message = INVALID_REQUEST, f"Topic {topic.name} is a kafka internal topic: odradek does not add partitions to it."
        elif t.count <= topic.partitions:
            code, message = INVALID_PARTITIONS, (
                f"Topic currently has {topic.partitions} partitions, which is higher than the requested {t.count}."
                if t.count < topic.partitions
                else f"Topic already has {topic.partitions} partitions."
            )
        elif t.count > MAX_PARTITIONS_PER_TOPIC:
            code, message = INVALID_PARTITIONS, f"odradek allows at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic"
        elif t.assignments is not None and (
            len(t.assignments) != t.count - topic.partitions
            or any(not a.broker_ids or set(a.broker_ids) - live or len(set(a.broker_ids)) != len(a.broker_ids)
                   for a in t.assignments)
        ):
            code, message = INVALID_REPLICA_ASSIGNMENT, "Invalid replica assignment for the new partitions."
        elif not body.validate_only:
            growing[t.name] = t.count
            if t.assignments is not None:
                explicit[t.name] = [tuple(a.broker_ids) for a in t.assignments]
        results.append({"name": t.name, "error_code": code, "error_message": message})
    if growing:
        try:
            await broker.add_partitions_async(growing, explicit)
        except (StorageError, PlacementError) as exc:
            for r in results:
                if r["name"] in growing:
                    code = INVALID_REPLICATION_FACTOR if isinstance(exc, PlacementError) else KAFKA_STORAGE_ERROR
                    r.update(error_code=code, error_message=str(exc))
    return {"throttle_time": 0, "results": results}
