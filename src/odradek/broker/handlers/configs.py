"""DescribeConfigs v1-v4 for topics (2), brokers (4) and groups (32, KIP-848).

Entries follow Kafka's ConfigHelper: each value comes with its ConfigSource and, when
asked for, its synonyms in precedence order: the topic override (DYNAMIC_TOPIC_CONFIG),
then the broker synonym as this broker's dynamic config (DYNAMIC_BROKER_CONFIG), the
cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), the static configuration
(STATIC_BROKER_CONFIG) and the built-in default (DEFAULT_CONFIG); the entry's source is
its first synonym's. config_type is the key's ConfigDef type (v3+), never a guess from
the value, for every key odradek knows.

Group configs (KIP-848 "Dynamic Group Configuration") are `consumer.session.timeout.ms`
and `consumer.heartbeat.interval.ms` as Kafka names them; the seed's draft names with a
`group.` prefix are accepted as synonyms. They are stored with the cluster metadata, so
they exist before a group does and survive its deletion.

AlterConfigs and IncrementalAlterConfigs live in alter_configs.py.
"""

from __future__ import annotations

from typing import Any

from ...config import (
    CLUSTER_DEFAULT,
    DEFAULT_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIGS,
)
from ...configdef import (
    BOOLEAN,
    CONFIG_TYPE_IDS,
    INT,
    LIST,
    LONG,
    PASSWORD,
    STRING,
    ConfigError,
)
from ...coordinator.config import GROUP_CONFIG_KEYS
from ...dynamic_config import IGNORED_DYNAMIC, is_dynamic, key_def
from ...log_config import BY_BROKER_KEY
from ...protocol.errors import (
    AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...security.acl import Operation, config_resource_allowed
from ..registry import api

TOPIC = 2
BROKER = 4
GROUP = 32  # Kafka's ConfigResource.Type.GROUP (the KIP-848 draft said 16, which shipped as CLIENT_METRICS)

DYNAMIC_GROUP_CONFIG = 8  # ConfigSource.GROUP_CONFIG

# ConfigDef types of the broker keys that are neither topic-default synonyms nor in
# dynamic_config's tables (KafkaConfig's definitions).
_BROKER_TYPES = {
    "node.id": INT, "broker.id": INT, "broker.rack": STRING, "listeners": STRING, "advertised.listeners": STRING,
    "log.dirs": STRING, "log.dir": STRING, "num.partitions": INT, "default.replication.factor": INT,
    "auto.create.topics.enable": BOOLEAN, "socket.request.max.bytes": INT, "log.retention.check.interval.ms": LONG,
    "max.connections": INT, "max.connections.per.ip": INT, "max.connections.per.ip.overrides": STRING,
    "connections.max.idle.ms": LONG, "request.timeout.ms": INT, "queued.max.request.bytes": LONG,
    "log.max.open.files": INT, "offsets.topic.num.partitions": INT, "offsets.topic.segment.bytes": INT,
    "offsets.retention.minutes": INT, "offsets.retention.check.interval.ms": LONG,
    "group.consumer.session.timeout.ms": INT, "group.consumer.min.session.timeout.ms": INT,
    "group.consumer.max.session.timeout.ms": INT, "group.consumer.heartbeat.interval.ms": INT,
    "group.consumer.min.heartbeat.interval.ms": INT, "group.consumer.max.heartbeat.interval.ms": INT,
    "group.consumer.reconciling.heartbeat.interval.ms": INT, "group.consumer.max.size": INT,
    "group.consumer.assignors": LIST, "group.min.session.timeout.ms": INT,
    "group.max.session.timeout.ms": INT, "group.max.size": INT, "group.initial.rebalance.delay.ms": INT,
    "group.consumer.migration.policy": STRING,
}


def _synonym(name: str, value: str | None, source: int) -> dict:
    return {"name": name, "value": value, "source": source}


def _entry(name, value, source, synonyms, include_synonyms, doc, read_only, config_type,
           sensitive=False) -> dict:
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": config_type,
        "documentation": doc,
    }


# --- topics ------------------------------------------------------------------------------


def topic_entries(broker, overrides: dict[str, str], include_synonyms: bool = False,
                  include_docs: bool = False) -> list[dict]:
    """Every topic config with its effective value, source and synonyms (Kafka's
    ConfigHelper.createTopicConfigEntry), for a topic with `overrides`."""
    config = broker.config
    out = []
    for key, setting in TOPIC_CONFIGS.items():
        synonyms = []
        if key in overrides:
            try:
                shown = setting.to_string(setting.parse(overrides[key]))
            except ConfigError:
                shown = overrides[key]
            synonyms.append(_synonym(key, shown, DYNAMIC_TOPIC_CONFIG))
        for name, value, source in config.log_default_synonyms(setting):
            synonyms.append(_synonym(name, setting.to_string(value), source))
        if synonyms:
            value, source = synonyms[0]["value"], synonyms[0]["source"]
        else:
            value, source = setting.to_string(setting.default), DEFAULT_CONFIG
        # Kafka reports every topic config as alterable (ConfigHelper.createTopicConfigEntry).
        out.append(_entry(key, value, source, synonyms, include_synonyms, setting.doc if include_docs else None,
                          False, setting.config_type))
    return out


# --- brokers -------------------------------------------------------------------------------


def _type_of(key: str) -> int:
    d = key_def(key)
    if d is not None:
        return d.config_type
    if key in _BROKER_TYPES:
        return CONFIG_TYPE_IDS[_BROKER_TYPES[key]]
    return CONFIG_TYPE_IDS[None]  # Kafka: UNKNOWN for a key KafkaConfig does not define


def _broker_synonyms(broker, key: str, static: dict[str, str], statics: set[str],
                     defaults: dict[str, str]) -> list[dict]:
    """Kafka's ConfigHelper.configSynonyms for one broker key."""
    config = broker.config
    setting = BY_BROKER_KEY.get(key)
    if setting is not None:
        return [_synonym(n, setting.to_string(v), s) for n, v, s in config.log_default_synonyms(setting)]
    out = []
    for values, source in config.dynamic_levels():
        if key in values:
            d = key_def(key)
            shown = values[key]
            if d is not None:
                try:
                    shown = d.to_string(d.parse(shown))
                except ConfigError:
                    pass
            out.append(_synonym(key, shown, source))
    if key in statics:
        out.append(_synonym(key, static[key], STATIC_BROKER_CONFIG))
    if key in defaults:
        out.append(_synonym(key, defaults[key], DEFAULT_CONFIG))
    return out


def _broker_configs(broker, per_broker: bool, include_synonyms: bool, include_docs: bool) -> list[dict]:
    config = broker.config
    coordinator = broker.coordinator.config.properties()
    static = {**coordinator, **config.broker_configs()}
    statics = config.static_broker_keys() | {k for k in coordinator if k in config.extra}
    defaults = {k: d.to_string(d.default) for k, d in IGNORED_DYNAMIC.items() if d.default is not None}
    defaults.update({k: v for k, v in type(config)().broker_configs().items()})
    defaults.update({k: v for k, v in type(broker.coordinator.config)().properties().items()})
    if per_broker:
        keys = set(static) | set(defaults) | set(config.dynamic_broker()) | set(config.dynamic_default())
    else:  # Kafka describes the default resource by its dynamic configs alone
        keys = set(config.dynamic_default())
    out = []
    for key in sorted(keys):
        synonyms = _broker_synonyms(broker, key, static, statics, defaults)
        if not per_broker:
            synonyms = [s for s in synonyms if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG]
        if not synonyms:
            continue
        d = key_def(key)
        out.append(_entry(key, synonyms[0]["value"], synonyms[0]["source"], synonyms, include_synonyms, None,
                          not is_dynamic(key), _type_of(key),
                          sensitive=d is not None and d.type == PASSWORD))
    return out


def broker_resource_error(broker, name: str) -> str | None:
    """Why a BROKER resource name is not this broker or the cluster default (Kafka's
    ConfigHelper / ConfigAdminManager.validateResourceNameIsCurrentNodeId)."""
    if name == CLUSTER_DEFAULT:
        return None
    try:
        node = int(name)
    except ValueError:
        return f"Node id must be an integer, but it is: {name}"
    if node != broker.config.node_id:
        return f"Unexpected broker id, expected {broker.config.node_id}, but received {name}"
    return None


# --- groups --------------------------------------------------------------------------------

_GROUP_DOCS = {
    "consumer.session.timeout.ms": "The timeout to detect client failures when using the consumer group protocol.",
    "consumer.heartbeat.interval.ms": "The heartbeat interval given to the members.",
}


def _group_configs(broker, group_id, include_synonyms, include_docs) -> list[dict]:
    stored = broker.metadata.group_configs.get(group_id, {})
    defaults = broker.coordinator.config.group_defaults()
    out = []
    for key in GROUP_CONFIG_KEYS:
        broker_key = "group." + key
        synonyms = []
        if key in stored:
            synonyms.append(_synonym(key, stored[key], DYNAMIC_GROUP_CONFIG))
        # A default the broker's configuration sets explicitly is a static broker config, as in Kafka.
        default_source = STATIC_BROKER_CONFIG if broker_key in broker.config.extra else DEFAULT_CONFIG
        synonyms.append(_synonym(broker_key, str(defaults[key]), default_source))
        value, source = (stored[key], DYNAMIC_GROUP_CONFIG) if key in stored else (str(defaults[key]), default_source)
        out.append(_entry(key, value, source, synonyms, include_synonyms, _GROUP_DOCS[key] if include_docs else None,
                          False, CONFIG_TYPE_IDS[INT]))
    return out


# --- the request -----------------------------------------------------------------------------


def _describe_one(broker, r, include_synonyms: bool, include_docs: bool) -> tuple[int, str | None, list[Any]]:
    if r.resource_type == TOPIC:
        topic = broker.metadata.get(r.resource_name)
        if topic is None:
            return UNKNOWN_TOPIC_OR_PARTITION, f"Topic {r.resource_name} does not exist", []
        return NONE, None, topic_entries(broker, topic.configs, include_synonyms, include_docs)
    if r.resource_type == BROKER:
        problem = broker_resource_error(broker, r.resource_name)
        if problem is not None:
            return INVALID_REQUEST, problem, []
        per_broker = r.resource_name != CLUSTER_DEFAULT
        return NONE, None, _broker_configs(broker, per_broker, include_synonyms, include_docs)
    if r.resource_type == GROUP:
        return NONE, None, _group_configs(broker, r.resource_name, include_synonyms, include_docs)
    return INVALID_REQUEST, f"Unsupported resource type {r.resource_type}", []


@api(32, "DescribeConfigs", 1, 4)
def describe_configs(broker, request):
    body = request.body
    include_synonyms = bool(body.include_synonyms)
    include_docs = bool(request.field("include_documentation", False))
    results = []
    access = broker.access(request)
    for r in body.resources:
        allowed, kind = config_resource_allowed(access, r.resource_type, r.resource_name, Operation.DESCRIBE_CONFIGS)
        if not allowed:  # checked before existence, as Kafka's ConfigHelper does
            results.append({"error_code": AUTHORIZATION_FAILED[kind], "error_message": "Authorization failed.",
                            "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []})
            continue
        error, message, configs = _describe_one(broker, r, include_synonyms, include_docs)
        if r.configuration_keys:  # null or empty: every key (ConfigHelper.createResponseConfig)
            keys = set(r.configuration_keys)
            configs = [c for c in configs if c["name"] in keys]
        results.append(
            {"error_code": error, "error_message": message, "resource_type": r.resource_type,
             "resource_name": r.resource_name, "configs": configs}
        )
    return {"throttle_time": 0, "results": results}
