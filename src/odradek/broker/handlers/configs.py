"""DescribeConfigs v1-v4 for topics (resource type 2) and this broker (type 4)."""

from __future__ import annotations

from ...config import TOPIC_CONFIGS
from ..errors import INVALID_REQUEST, NONE, UNKNOWN_TOPIC_OR_PARTITION
from ..registry import api

TOPIC = 2
BROKER = 4

# ConfigSource enum (DescribeConfigsResponse)
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

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
    for key, value in broker.config.broker_configs().items():
        synonyms = [{"name": key, "value": value, "source": STATIC_BROKER_CONFIG}]
        # Static broker configs: odradek has no dynamic broker configs yet.
        out.append(_entry(key, value, STATIC_BROKER_CONFIG, synonyms, include_synonyms, None, True))
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
