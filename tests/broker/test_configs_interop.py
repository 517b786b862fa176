"""confluent-kafka's AdminClient (librdkafka) against a broker process: CreateTopics with
Kafka 4 topic configs, AlterConfigs, IncrementalAlterConfigs on topics and brokers, and
DescribeConfigs showing the new values with their sources (librdkafka tests 0011, 0077,
0081 do the same)."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.wire import RawClient

pytestmark = pytest.mark.interop
TIMEOUT = 15


def describe(adm, restype, name) -> dict:
    res = ConfigResource(restype, name)
    return adm.describe_configs([res], request_timeout=10)[res].result(TIMEOUT)


def incremental(adm, restype, name, ops) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=getattr(AlterConfigOpType, op)) for k, op, v in ops]
    res = ConfigResource(restype, name, incremental_configs=entries)
    adm.incremental_alter_configs([res], request_timeout=10)[res].result(TIMEOUT)


def test_admin_client_creates_alters_and_describes_topic_configs(broker_factory):
    b = broker_factory("cfg")
    adm = AdminClient({"bootstrap.servers": b.bootstrap})
    configs = {"cleanup.policy": "compact", "compression.type": "lz4", "min.cleanable.dirty.ratio": "0.01",
               "file.delete.delay.ms": "10000", "max.compaction.lag.ms": "100", "segment.ms": "500",
               "delete.retention.ms": "86400"}
    adm.create_topics([NewTopic("t", 1, 1, config=configs)], request_timeout=10)["t"].result(TIMEOUT)
    entries = describe(adm, ResourceType.TOPIC, "t")
    for key, value in configs.items():
        assert entries[key].value == value, key
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, key
    assert entries["preallocate"].value == "false" and entries["preallocate"].is_default

    # AlterConfigs: the given set replaces every override
    res = ConfigResource(ResourceType.TOPIC, "t", set_config={"compression.type": "gzip", "flush.ms": "12345678"})
    adm.alter_configs([res], request_timeout=10)[res].result(TIMEOUT)
    entries = describe(adm, ResourceType.TOPIC, "t")
    assert (entries["compression.type"].value, entries["compression.type"].source) == (
        "gzip", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert entries["flush.ms"].value == "12345678"
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == (
        "delete", ConfigSource.DEFAULT_CONFIG.value)

    # IncrementalAlterConfigs: SET and APPEND, then DELETE and SUBTRACT (librdkafka 0011/0081)
    incremental(adm, ResourceType.TOPIC, "t", [("compression.type", "SET", "lz4"), ("cleanup.policy", "APPEND", "compact")])
    entries = describe(adm, ResourceType.TOPIC, "t")
    assert entries["compression.type"].value == "lz4"
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["flush.ms"].value == "12345678"  # untouched
    incremental(adm, ResourceType.TOPIC, "t", [("compression.type", "DELETE", "lz4"),
                                              ("cleanup.policy", "SUBTRACT", "compact")])
    entries = describe(adm, ResourceType.TOPIC, "t")
    assert (entries["compression.type"].value, entries["compression.type"].source) == (
        "producer", ConfigSource.DEFAULT_CONFIG.value)
    assert entries["cleanup.policy"].value == "delete"

    # a topic that does not exist
    res = ConfigResource(ResourceType.TOPIC, "missing", set_config={"compression.type": "lz4"})
    with pytest.raises(confluent_kafka.KafkaException) as e:
        adm.alter_configs([res], request_timeout=10)[res].result(TIMEOUT)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_client_dynamic_broker_configs(broker_factory):
    b = broker_factory("dyn")
    adm = AdminClient({"bootstrap.servers": b.bootstrap})
    adm.create_topics([NewTopic("plain", 1, 1)], request_timeout=10)["plain"].result(TIMEOUT)

    # librdkafka 0081: per-broker SET + APPEND, then DELETE + SUBTRACT
    incremental(adm, ResourceType.BROKER, "1", [("background.threads", "SET", "9"),
                                                ("log.cleanup.policy", "APPEND", "compact")])
    entries = describe(adm, ResourceType.BROKER, "1")
    assert (entries["background.threads"].value, entries["background.threads"].source) == (
        "9", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert describe(adm, ResourceType.TOPIC, "plain")["cleanup.policy"].value == "delete,compact"
    incremental(adm, ResourceType.BROKER, "1", [("background.threads", "DELETE", ""),
                                                ("log.cleanup.policy", "SUBTRACT", "compact")])
    assert describe(adm, ResourceType.BROKER, "1")["background.threads"].value == "10"

    # a cluster-wide default (resource name "", which AdminClient refuses to send) changes
    # topics without an override
    raw = RawClient(b.bootstrap)
    resp = raw.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
        {"name": "log.retention.ms", "config_operation": 0, "value": "3600000"}]}], "validate_only": False})
    assert resp.responses[0].error_code == 0, resp.responses[0].error_message
    raw.close()
    entry = describe(adm, ResourceType.TOPIC, "plain")["retention.ms"]
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # read-only broker configs are refused
    res = ConfigResource(ResourceType.BROKER, "1", set_config={"node.id": "5"})
    with pytest.raises(confluent_kafka.KafkaException) as e:
        adm.alter_configs([res], request_timeout=10)[res].result(TIMEOUT)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST

    # kept across a restart
    assert b.stop() == 0
    b.start()
    adm = AdminClient({"bootstrap.servers": b.bootstrap})
    entry = describe(adm, ResourceType.TOPIC, "plain")["retention.ms"]
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
