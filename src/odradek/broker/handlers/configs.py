"""DescribeConfigs v1-v4 for topics (2), this broker (4) and groups (32, KIP-848);
IncrementalAlterConfigs v0-v1 for groups.

Group configs (KIP-848 "Dynamic Group Configuration") are `consumer.session.timeout.ms`
and `consumer.heartbeat.interval.ms` as Kafka names them; the seed's draft names with a
`group.` prefix are accepted as synonyms. They are stored with the cluster metadata, so
they exist before a group does and survive its deletion.
"""

from __future__ import annotations

from ...config import TOPIC_CONFIGS
from ...coordinator.config import GROUP_CONFIG_KEYS, GroupConfigError
from ..errors import INVALID_CONFIG, INVALID_REQUEST, NONE, UNKNOWN_TOPIC_OR_PARTITION
from ..registry import api

TOPIC = 2
BROKER = 4
GROUP = 32  # Kafka's ConfigResource.Type.GROUP (the KIP-848 draft said 16, which shipped as CLIENT_METRICS)

# ConfigSource enum (DescribeConfigsResponse)
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_GROUP_CONFIG = 8

# ConfigType enum (v3+)
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7

_TYPES = {
    "cleanup.policy": LIST, "message.timestamp.type": STRING, "compression.type": STRING,
    "index.interval.bytes": INT, "max.message.bytes": INT, "segment.bytes": INT,
}


def _type_of(key: str, value: str) -> int:
    if key in _TYPES:
        return _TYPES[key]
    if value in ("true", "false"):
        return BOOLEAN
    try:
        int(value)
        return LONG
    except ValueError:
        return STRING


def _entry(name, value, source, synonyms, include_synonyms, doc, read_only) -> dict:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": _type_of(name, value or ""),
        "documentation": doc,
    }


def _topic_configs(broker, topic, include_synonyms, include_docs) -> list[dict]:
    defaults = broker.config.topic_defaults()
    explicit = broker.config.log_defaults
    out = []
    for key, setting in TOPIC_CONFIGS.items():
        synonyms = []
        if key in topic.configs:
            synonyms.append({"name": key, "value": topic.configs[key], "source": DYNAMIC_TOPIC_CONFIG})
        if setting.broker_key in explicit:
            synonyms.append({"name": setting.broker_key, "value": str(explicit[setting.broker_key]), "source": STATIC_BROKER_CONFIG})
        synonyms.append({"name": setting.broker_key, "value": str(setting.default), "source": DEFAULT_CONFIG})
        if key in topic.configs:
            value, source = topic.configs[key], DYNAMIC_TOPIC_CONFIG
        else:
            value = str(defaults[key])
            source = STATIC_BROKER_CONFIG if setting.broker_key in explicit else DEFAULT_CONFIG
        # Kafka reports every topic config as alterable (ConfigHelper.createTopicConfigEntry).
        out.append(_entry(key, value, source, synonyms, include_synonyms, setting.doc if include_docs else None, False))
    return out


def _broker_configs(broker, include_synonyms, include_docs) -> list[dict]:
    out = []
    values = {**broker.coordinator.config.properties(), **broker.config.broker_configs()}
    for key, value in sorted(values.items()):
        synonyms = [{"name": key, "value": value, "source": STATIC_BROKER_CONFIG}]
        # Static broker configs: odradek has no dynamic broker configs yet.
        out.append(_entry(key, value, STATIC_BROKER_CONFIG, synonyms, include_synonyms, None, True))
    return out


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
            synonyms.append({"name": key, "value": stored[key], "source": DYNAMIC_GROUP_CONFIG})
        # A default the broker's configuration sets explicitly is a static broker config, as in Kafka.
        default_source = STATIC_BROKER_CONFIG if broker_key in broker.config.extra else DEFAULT_CONFIG
        synonyms.append({"name": broker_key, "value": str(defaults[key]), "source": default_source})
        value, source = (stored[key], DYNAMIC_GROUP_CONFIG) if key in stored else (str(defaults[key]), default_source)
        out.append(_entry(key, value, source, synonyms, include_synonyms, _GROUP_DOCS[key] if include_docs else None,
                          False))
    return out


@api(32, "DescribeConfigs", 1, 4)
def describe_configs(broker, request):
    body = request.body
    include_synonyms = bool(body.include_synonyms)
    include_docs = bool(request.field("include_documentation", False))
    results = []
    for r in body.resources:
        error, message, configs = NONE, None, []
        if r.resource_type == TOPIC:
            topic = broker.metadata.get(r.resource_name)
            if topic is None:
                error, message = UNKNOWN_TOPIC_OR_PARTITION, f"Topic {r.resource_name} does not exist"
            else:
                configs = _topic_configs(broker, topic, include_synonyms, include_docs)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(broker.config.node_id)):
                error, message = INVALID_REQUEST, f"Unexpected broker id, expected {broker.config.node_id} or empty string"
            else:
                configs = _broker_configs(broker, include_synonyms, include_docs)
        elif r.resource_type == GROUP:
            configs = _group_configs(broker, r.resource_name, include_synonyms, include_docs)
        else:
            error, message = INVALID_REQUEST, f"Unsupported resource type {r.resource_type}"
        if r.configuration_keys is not None:
            keys = set(r.configuration_keys)
            configs = [c for c in configs if c["name"] in keys]
        results.append(
            {"error_code": error, "error_message": message, "resource_type": r.resource_type,
             "resource_name": r.resource_name, "configs": configs}
        )
    return {"throttle_time": 0, "results": results}


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _alter_group(broker, group_id: str, ops, validate_only: bool) -> tuple[int, str | None]:
    if not group_id:
        return INVALID_REQUEST, "group id is empty"
    values = dict(broker.metadata.group_configs.get(group_id, {}))
    for op in ops:
        key = op.name[len("group."):] if op.name.startswith("group.consumer.") else op.name
        if key not in GROUP_CONFIG_KEYS:
            return INVALID_CONFIG, f"Unknown group config name: {op.name}"
        if op.config_operation == SET:
            if op.value is None:
                return INVALID_CONFIG, f"{op.name} needs a value"
            values[key] = op.value
        elif op.config_operation == DELETE:
            values.pop(key, None)
        else:
            return INVALID_CONFIG, f"{op.name} is not a list: APPEND/SUBTRACT do not apply"
    try:
        checked = broker.coordinator.config.validate_group_config(values)
    except GroupConfigError as exc:
        return INVALID_CONFIG, str(exc)
    if not validate_only:
        broker.metadata.set_group_config(group_id, {k: str(v) for k, v in checked.items()})
    return NONE, None


@api(44, "IncrementalAlterConfigs", 0, 1)
def incremental_alter_configs(broker, request):
    b = request.body
    responses = []
    for r in b.resources:
        if r.resource_type == GROUP:
            code, message = _alter_group(broker, r.resource_name, r.configs, bool(b.validate_only))
        else:
            code, message = INVALID_REQUEST, f"odradek alters only GROUP (32) configs, not resource type {r.resource_type}"
        responses.append({"error_code": code, "error_message": message, "resource_type": r.resource_type,
                          "resource_name": r.resource_name})
    return {"throttle_time": 0, "responses": responses}
