"""AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1 for topics (2), brokers (4) and
groups (32).

Theory of operation: each resource of a request becomes the complete new set of configs
of that resource, checked as Kafka checks it, then all accepted resources are written
with one cluster-metadata journal entry and take effect on the live partition logs.

- AlterConfigs (the legacy API) replaces the whole set: a key it does not name reverts
  to its default (ConfigurationControlManager.legacyAlterConfigResource deletes them).
- IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT to the stored set;
  APPEND/SUBTRACT only for LIST keys, starting from the key's ConfigDef default when
  the resource does not set it (ConfigurationControlManager.incrementalAlterConfigResource
  for topics, ConfigAdminManager.prepareIncrementalConfigs for brokers).
- Before anything else, as Kafka's ConfigAdminManager.preprocess: a resource named twice
  is INVALID_REQUEST for both, so is a key named twice in one resource, or a null value
  (but for DELETE).
- TOPIC: the name must be a valid topic name, the set must pass LogConfig.validate on
  this broker's defaults (INVALID_CONFIG), then the topic must exist
  (UNKNOWN_TOPIC_OR_PARTITION), in the order of ConfigurationControlManager.validateAlterConfig.
- BROKER: "" is the cluster-wide default, the node id this broker; any other name is
  INVALID_REQUEST. The set must pass DynamicBrokerConfig's checks (dynamic_config.py);
  a failure is INVALID_REQUEST, as Kafka answers (KAFKA-13609). A change of a topic
  default (log.retention.ms, log.cleanup.policy, compression.type, ...) reconfigures the
  live logs of every topic that does not override it.
- validate_only checks everything and writes nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from ...cluster.names import InvalidTopicName, validate_topic_name
from ...config import CLUSTER_DEFAULT, TOPIC_CONFIGS, validate_topic_config
from ...configdef import LIST, ConfigError, list_items
from ...coordinator.config import GROUP_CONFIG_KEYS, GroupConfigError
from ...dynamic_config import (
    effective_values,
    is_list,
    list_default,
    validate_broker_configs,
)
from ...log.errors import StorageError
from ...protocol.errors import (
    AUTHORIZATION_FAILED,
    INVALID_CONFIG,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation, config_resource_allowed
from ..registry import api
from .configs import BROKER, GROUP, TOPIC, broker_resource_error

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


class Rejected(Exception):
    def __init__(self, code, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Changes:
    """The new complete config sets of the accepted resources of one request."""

    topics: dict[str, dict[str, str]] = field(default_factory=dict)
    brokers: dict[str, dict[str, str]] = field(default_factory=dict)
    groups: dict[str, dict[str, str]] = field(default_factory=dict)


# --- applying ---------------------------------------------------------------


def reconfigure_open_logs(broker, names=None) -> None:
    """Give the open logs of `names` (default: every topic with an open log) their
    current effective config (Kafka's DynamicLogConfig.updateLogsConfig)."""
    opened = {topic for topic, _ in list(broker.logs.logs)}
    for name in opened if names is None else opened & set(names):
        topic = broker.metadata.get(name)
        if topic is not None:
            broker.logs.reconfigure(topic, broker.topic_config(topic))


async def apply(broker, changes: Changes) -> None:
    """Persist `changes` with one journal write, then reconfigure the live logs.
    Raises StorageError with nothing changed."""
    if not (changes.topics or changes.brokers or changes.groups):
        return
    try:
        await broker.metadata.set_configs(topics=changes.topics, brokers=changes.brokers, groups=changes.groups)
    except StorageError as exc:
        broker.storage_failed(exc)
        raise
    reconfigure_open_logs(broker, None if changes.brokers else changes.topics)


# --- checking one resource ------------------------------------------------------------------


def _check_topic(broker, name: str, overrides: dict[str, str]) -> None:
    if not name:
        raise Rejected(INVALID_REQUEST, "Default topic resources are not allowed.")
    try:
        validate_topic_name(name)
    except InvalidTopicName as exc:
        raise Rejected(INVALID_TOPIC_EXCEPTION, str(exc)) from None
    try:
        validate_topic_config(broker.config.topic_defaults(), overrides)
    except ConfigError as exc:
        raise Rejected(INVALID_CONFIG, str(exc)) from None
    if broker.metadata.get(name) is None:
        raise Rejected(UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")


def _check_broker(broker, name: str, props: dict[str, str]) -> None:
    config = broker.config
    proposed = replace(config, dynamic_configs={**config.dynamic_configs, name: props})
    try:
        validate_broker_configs(props, name != CLUSTER_DEFAULT, effective_values(config), effective_values(proposed))
        validate_topic_config(proposed.topic_defaults(), {})  # the defaults must make a valid topic config
    except ConfigError as exc:
        raise Rejected(INVALID_REQUEST, str(exc)) from None


def _check_group(broker, group_id: str, values: dict[str, str]) -> dict[str, str]:
    if not group_id:
        raise Rejected(INVALID_REQUEST, "Default group resources are not allowed.")
    unknown = [k for k in values if k not in GROUP_CONFIG_KEYS]
    if unknown:
        raise Rejected(INVALID_CONFIG, f"Unknown group config name: {unknown[0]}")
    try:
        checked = broker.coordinator.config.validate_group_config(values)
    except GroupConfigError as exc:
        raise Rejected(INVALID_CONFIG, str(exc)) from None
    return {k: str(v) for k, v in checked.items()}


def _group_key(name: str) -> str:
    # The KIP-848 draft's names (group.consumer.*) for the shipped ones (consumer.*).
    return name[len("group."):] if name.startswith("group.consumer.") else name


def _preprocess(broker, resources, null_ok) -> dict[int, Rejected]:
    """ConfigAdminManager.preprocess: duplicate resources, duplicate keys, null values."""
    rejected: dict[int, Rejected] = {}
    seen = Counter((r.resource_type, r.resource_name) for r in resources)
    for i, r in enumerate(resources):
        if seen[(r.resource_type, r.resource_name)] > 1:
            rejected[i] = Rejected(INVALID_REQUEST, "Each resource must appear at most once.")
            continue
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            rejected[i] = Rejected(INVALID_REQUEST, "Error due to duplicate config keys")
            continue
        nulls = [c.name for c in r.configs if c.value is None and not null_ok(c)]
        if nulls:
            rejected[i] = Rejected(INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
        elif r.resource_type not in (TOPIC, BROKER, GROUP):
            rejected[i] = Rejected(INVALID_REQUEST, f"Unknown resource type {r.resource_type}")
        elif r.resource_type == BROKER and (problem := broker_resource_error(broker, r.resource_name)):
            rejected[i] = Rejected(INVALID_REQUEST, problem)
    return rejected


async def _run(broker, request, new_set) -> dict:
    """Shared by both APIs: `new_set(resource) -> complete new config set` (raises Rejected)."""
    body = request.body
    resources = list(body.resources)
    incremental = request.api_key == 44
    rejected = _preprocess(broker, resources, lambda c: incremental and c.config_operation == DELETE)
    changes = Changes()
    accepted: list[int] = []
    access = broker.access(request)
    for i, r in enumerate(resources):
        if i in rejected:
            continue
        allowed, kind = config_resource_allowed(access, r.resource_type, r.resource_name, Operation.ALTER_CONFIGS)
        if not allowed:
            rejected[i] = Rejected(AUTHORIZATION_FAILED[kind], "Authorization failed.")
            continue
        try:
            values = new_set(r)
            if r.resource_type == TOPIC:
                _check_topic(broker, r.resource_name, values)
                changes.topics[r.resource_name] = values
            elif r.resource_type == BROKER:
                _check_broker(broker, r.resource_name, values)
                changes.brokers[r.resource_name] = values
            else:
                changes.groups[r.resource_name] = _check_group(broker, r.resource_name, values)
            accepted.append(i)
        except Rejected as exc:
            rejected[i] = exc
    if not body.validate_only:
        try:
            await apply(broker, changes)
        except StorageError as exc:
            for i in accepted:
                rejected[i] = Rejected(KAFKA_STORAGE_ERROR, str(exc))
    out = []
    for i, r in enumerate(resources):
        err = rejected.get(i)
        out.append({"error_code": err.code if err else NONE, "error_message": err.message if err else None,
                    "resource_type": r.resource_type, "resource_name": r.resource_name})
    return {"throttle_time": 0, "responses": out}


# --- the two APIs ------------------------------------------------------------------------------


@api(33, "AlterConfigs", 0, 2)
async def alter_configs(broker, request):
    def new_set(r) -> dict[str, str]:
        if r.resource_type == GROUP:
            return {_group_key(c.name): c.value for c in r.configs}
        return {c.name: c.value for c in r.configs}

    return await _run(broker, request, new_set)


def _stored(broker, r) -> dict[str, str]:
    if r.resource_type == TOPIC:
        topic = broker.metadata.get(r.resource_name)
        return dict(topic.configs) if topic is not None else {}
    if r.resource_type == BROKER:
        return dict(broker.metadata.broker_configs.get(r.resource_name, {}))
    return dict(broker.metadata.group_configs.get(r.resource_name, {}))


def _topic_list_op(values: dict[str, str], name: str, op: int, value: str) -> None:
    # ConfigurationControlManager.incrementalAlterConfigResource
    setting = TOPIC_CONFIGS.get(name)
    if setting is None or setting.type != LIST:
        raise Rejected(INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST.")
    current = values.get(name, setting.to_string(setting.default))
    parts = list_items(current)
    for item in _java_split(value):
        if op == APPEND and item not in parts:
            parts.append(item)
        elif op == SUBTRACT and item in parts:
            parts.remove(item)
    values[name] = ",".join(parts)


def _broker_list_op(values: dict[str, str], name: str, op: int, value: str) -> None:
    # ConfigAdminManager.prepareIncrementalConfigs
    if not is_list(name):
        verb = "append" if op == APPEND else "subtract"
        raise Rejected(INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
    current = values.get(name, list_default(name))
    if op == APPEND:
        old = list_items(current)
        values[name] = ",".join(old + [v for v in _java_split(value) if v not in old])
    else:
        old = _java_split(current)
        for item in _java_split(value):
            if item in old:
                old.remove(item)
        values[name] = ",".join(old)


def _java_split(s: str) -> list[str]:
    """String.split(","): trailing empty strings removed."""
    parts = s.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@api(44, "IncrementalAlterConfigs", 0, 1)
async def incremental_alter_configs(broker, request):
    def new_set(r) -> dict[str, str]:
        values = _stored(broker, r)
        for c in r.configs:
            name = _group_key(c.name) if r.resource_type == GROUP else c.name
            if c.config_operation == SET:
                values[name] = c.value
            elif c.config_operation == DELETE:
                values.pop(name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                if r.resource_type == TOPIC:
                    _topic_list_op(values, name, c.config_operation, c.value)
                elif r.resource_type == BROKER:
                    _broker_list_op(values, name, c.config_operation, c.value)
                else:
                    raise Rejected(INVALID_CONFIG, f"{c.name} is not a list: APPEND/SUBTRACT do not apply")
            else:
                raise Rejected(INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
        return values

    return await _run(broker, request, new_set)
