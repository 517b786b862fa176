"""Topic configs at the handler level: CreateTopics accepts every Kafka 4.x topic config,
DescribeConfigs reports Kafka's types, sources and synonyms, AlterConfigs replaces a
topic's overrides, IncrementalAlterConfigs edits them, and live logs follow."""

from __future__ import annotations

import pytest

from odradek.config import TOPIC_CONFIGS
from odradek.configdef import CONFIG_TYPE_IDS
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_TOPIC, INVALID_TOPIC = 40, 42, 3, 17


def call(inproc, key, version, body):
    _, resp = parse_response(key, version, inproc.handle(request_frame(key, version, body)))
    return resp


def create(inproc, name, configs=(), validate_only=False, version=7):
    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in dict(configs).items()]}],
            "timeout": 5000, "validate_only": validate_only}
    return call(inproc, 19, version, body).topics[0]


def describe(inproc, name, rtype=TOPIC, synonyms=True, keys=None, version=4):
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": synonyms, "include_documentation": True}
    result = call(inproc, 32, version, body).results[0]
    assert result.error_code == 0, result.error_message
    return {e.name: e for e in result.configs}


def alter(inproc, resources, validate_only=False, version=2):
    body = {"resources": [{"resource_type": t, "resource_name": n,
                           "configs": [{"name": k, "value": v} for k, v in configs]}
                          for t, n, configs in resources], "validate_only": validate_only}
    return [(int(r.error_code), r.error_message) for r in call(inproc, 33, version, body).responses]


def incremental(inproc, resources, validate_only=False, version=1):
    body = {"resources": [{"resource_type": t, "resource_name": n,
                           "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
                          for t, n, ops in resources], "validate_only": validate_only}
    return [(int(r.error_code), r.error_message) for r in call(inproc, 44, version, body).responses]


# ----------------------------------------------------------------------------- CreateTopics


EVERY_KAFKA_4_TOPIC_CONFIG = {
    "cleanup.policy": "compact,delete", "compression.type": "lz4", "compression.gzip.level": "5",
    "compression.lz4.level": "10", "compression.zstd.level": "-5", "delete.retention.ms": "900",
    "file.delete.delay.ms": "10000", "flush.messages": "100", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1", "index.interval.bytes": "2048",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "100", "max.message.bytes": "6000", "message.timestamp.after.max.ms": "1000",
    "message.timestamp.before.max.ms": "1000", "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0", "min.insync.replicas": "1",
    "preallocate": "true", "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false", "retention.bytes": "1048576", "retention.ms": "86400",
    "segment.bytes": "1048576", "segment.index.bytes": "4096", "segment.jitter.ms": "10", "segment.ms": "500",
    "unclean.leader.election.enable": "true",
}


def test_every_kafka_4_topic_config_is_known():
    assert set(EVERY_KAFKA_4_TOPIC_CONFIG) == set(TOPIC_CONFIGS)


def test_create_topics_accepts_every_kafka_4_topic_config(inproc):
    t = create(inproc, "all", EVERY_KAFKA_4_TOPIC_CONFIG)
    assert t.error_code == 0, t.error_message
    got = {c.name: (c.value, c.config_source) for c in t.configs}
    for key, value in EVERY_KAFKA_4_TOPIC_CONFIG.items():
        assert got[key] == (value, DYNAMIC_TOPIC), key
    assert inproc.broker.metadata.get("all").configs == EVERY_KAFKA_4_TOPIC_CONFIG


def test_create_topics_as_librdkafka_0077_and_0081_do(inproc):
    t = create(inproc, "compacted", {"cleanup.policy": "compact", "segment.ms": "500", "segment.bytes": "1048576",
                                     "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "86400",
                                     "file.delete.delay.ms": "10000", "max.compaction.lag.ms": "100"})
    assert t.error_code == 0, t.error_message
    t = create(inproc, "lz4", {"compression.type": "lz4", "delete.retention.ms": "900"})
    assert t.error_code == 0, t.error_message
    plog = inproc.broker.logs.get("lz4", 0)
    assert plog.config["compression.type"] == "lz4"  # what broker-side recompression reads


@pytest.mark.parametrize("key, value, message", [
    ("dummy.doesntexist", "x", "Unknown topic config name: dummy.doesntexist"),
    ("compression.type", "brotli", ("Invalid value brotli for configuration compression.type: String must be one "
                                    "of: uncompressed, zstd, lz4, snappy, gzip, producer")),
    ("min.cleanable.dirty.ratio", "1.5", ("Invalid value 1.5 for configuration min.cleanable.dirty.ratio: "
                                          "Value must be no more than 1")),
    ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ("compression.gzip.level", "0", ("Invalid value 0 for configuration compression.gzip.level: "
                                     "Value must be between 1 and 9 or equal to -1")),
    ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ("segment.bytes", "3000000000", ("Invalid value 3000000000 for configuration segment.bytes: "
                                     "Not a number of type INT")),
    ("cleanup.policy", "compact,archive", ("Invalid value archive for configuration cleanup.policy: "
                                           "String must be one of: compact, delete")),
    ("remote.storage.enable", "true", ("Tiered Storage functionality is disabled in the broker. "
                                       "Topic cannot be configured with remote log storage.")),
    ("leader.replication.throttled.replicas", "everything", None),
])
def test_create_topics_refuses_what_kafka_refuses(inproc, key, value, message):
    t = create(inproc, "bad", {key: value})
    assert t.error_code == INVALID_CONFIG
    if message is not None:
        assert t.error_message == message
    assert inproc.broker.metadata.get("bad") is None


def test_create_topics_checks_min_against_max_compaction_lag(inproc):
    t = create(inproc, "lags", {"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "999"})
    assert (t.error_code, t.error_message) == (
        INVALID_CONFIG, "conflict topic config setting min.compaction.lag.ms (1000) > max.compaction.lag.ms (999)")


def test_create_topics_null_config_value(inproc):
    body = {"topics": [{"name": "n", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": "retention.ms", "value": None}]}], "timeout": 5000, "validate_only": False}
    t = call(inproc, 19, 7, body).topics[0]
    assert (t.error_code, t.error_message) == (INVALID_CONFIG, "Null value not supported for topic configs: retention.ms")


# ----------------------------------------------------------------------------- DescribeConfigs


def test_describe_reports_kafka_config_types_for_every_key(inproc):
    create(inproc, "typed")
    entries = describe(inproc, "typed")
    assert set(entries) == set(TOPIC_CONFIGS)
    for key, setting in TOPIC_CONFIGS.items():
        assert entries[key].config_type == CONFIG_TYPE_IDS[setting.type], key
    assert entries["min.cleanable.dirty.ratio"].config_type == 6  # DOUBLE
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["max.compaction.lag.ms"].value == str((1 << 63) - 1)
    assert entries["preallocate"].config_type == 1 and entries["preallocate"].value == "false"
    assert entries["flush.messages"].config_type == 5  # LONG, not guessed from the value
    assert entries["leader.replication.throttled.replicas"].value == ""
    # no broker synonym: no synonyms, the ConfigDef default
    assert not entries["remote.storage.enable"].synonyms and entries["remote.storage.enable"].config_source == DEFAULT


def test_describe_shows_overrides_as_kafka_converts_them(inproc):
    create(inproc, "conv", {"cleanup.policy": "delete, compact", "min.cleanable.dirty.ratio": "1e-2"})
    entries = describe(inproc, "conv")
    assert entries["cleanup.policy"].value == "delete,compact"  # ConfigDef.convertToString keeps the order
    assert entries["min.cleanable.dirty.ratio"].value == "0.01"


def test_describe_empty_configuration_keys_means_every_key(inproc):
    create(inproc, "keys")
    assert len(describe(inproc, "keys", keys=[])) == len(TOPIC_CONFIGS)
    assert set(describe(inproc, "keys", keys=["retention.ms"])) == {"retention.ms"}


# ----------------------------------------------------------------------------- AlterConfigs


def test_alter_configs_replaces_the_whole_set_of_overrides(inproc):
    create(inproc, "t", {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert alter(inproc, [(TOPIC, "t", [("compression.type", "gzip"), ("flush.ms", "12345678")])]) == [(0, None)]
    assert inproc.broker.metadata.get("t").configs == {"compression.type": "gzip", "flush.ms": "12345678"}
    entries = describe(inproc, "t")
    assert (entries["compression.type"].value, entries["compression.type"].config_source) == ("gzip", DYNAMIC_TOPIC)
    # keys the request did not name reverted to their defaults
    assert (entries["retention.ms"].value, entries["retention.ms"].config_source) == (str(7 * 86400000), DEFAULT)
    assert entries["cleanup.policy"].value == "delete"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_every_version(inproc, version):
    create(inproc, "v")
    assert alter(inproc, [(TOPIC, "v", [("retention.ms", str(1000 + version))])], version=version) == [(0, None)]
    assert describe(inproc, "v")["retention.ms"].value == str(1000 + version)


def test_alter_configs_as_librdkafka_0081(inproc):
    """Valid topic, valid broker config, valid config of a topic that does not exist."""
    create(inproc, "exists")
    got = alter(inproc, [
        (TOPIC, "exists", [("compression.type", "gzip"), ("flush.ms", "12345678")]),
        (BROKER, "1", [("sasl.kerberos.min.time.before.relogin", "58000")]),
        (TOPIC, "missing", [("compression.type", "lz4"), ("max.compaction.lag.ms", "3600000")]),
    ])
    assert got == [(0, None), (0, None), (UNKNOWN_TOPIC, "The topic 'missing' does not exist.")]


def test_alter_configs_errors_per_resource(inproc):
    create(inproc, "a")
    create(inproc, "b")
    got = alter(inproc, [
        (TOPIC, "a", [("retention.ms", "nope")]),
        (TOPIC, "b", [("retention.ms", "5000")]),
        (TOPIC, "", [("retention.ms", "5000")]),
        (TOPIC, "bad/name", [("retention.ms", "5000")]),
        (TOPIC, "a", [("no.such.key", "1")]),  # a second resource named "a": both are refused
        (99, "x", []),
    ])
    assert got[0] == (INVALID_REQUEST, "Each resource must appear at most once.")
    assert got[1] == (0, None)
    assert got[2] == (INVALID_REQUEST, "Default topic resources are not allowed.")
    assert got[3][0] == INVALID_TOPIC
    assert got[4] == (INVALID_REQUEST, "Each resource must appear at most once.")
    assert got[5] == (INVALID_REQUEST, "Unknown resource type 99")
    assert inproc.broker.metadata.get("b").configs == {"retention.ms": "5000"}
    assert inproc.broker.metadata.get("a").configs == {}


def test_alter_configs_invalid_values_and_keys(inproc):
    create(inproc, "c")
    got = alter(inproc, [(TOPIC, "c", [("retention.ms", "soon")])])
    assert got == [(INVALID_CONFIG, "Invalid value soon for configuration retention.ms: Not a number of type LONG")]
    assert alter(inproc, [(TOPIC, "c", [("log.retention.ms", "1")])]) == [
        (INVALID_CONFIG, "Unknown topic config name: log.retention.ms")]
    assert alter(inproc, [(TOPIC, "c", [("retention.ms", "1"), ("retention.ms", "2")])]) == [
        (INVALID_REQUEST, "Error due to duplicate config keys")]
    assert alter(inproc, [(TOPIC, "c", [("retention.ms", None)])]) == [
        (INVALID_REQUEST, "Null value not supported for : retention.ms")]
    # an invalid config on a topic that does not exist: the config is checked first, as Kafka does
    assert alter(inproc, [(TOPIC, "nope", [("retention.ms", "x")])])[0][0] == INVALID_CONFIG
    assert inproc.broker.metadata.get("c").configs == {}


def test_alter_configs_validate_only_writes_nothing(inproc):
    create(inproc, "vo", {"retention.ms": "1000"})
    assert alter(inproc, [(TOPIC, "vo", [("retention.ms", "2000")])], validate_only=True) == [(0, None)]
    assert inproc.broker.metadata.get("vo").configs == {"retention.ms": "1000"}
    assert alter(inproc, [(TOPIC, "vo", [("retention.ms", "-5")])], validate_only=True)[0][0] == INVALID_CONFIG


def test_alter_configs_reconfigures_live_logs(inproc):
    create(inproc, "live")
    plog = inproc.broker.logs.get("live", 0)
    assert plog.config["cleanup.policy"] == "delete"
    alter(inproc, [(TOPIC, "live", [("cleanup.policy", "compact"), ("max.compaction.lag.ms", "100"),
                                    ("compression.type", "zstd")])])
    assert plog.config["cleanup.policy"] == "compact"
    assert plog.config["max.compaction.lag.ms"] == 100
    assert plog.config["compression.type"] == "zstd"


def test_altered_topic_configs_survive_a_restart(tmp_path):
    b = InProcess(tmp_path / "d")
    create(b, "kept", {"retention.ms": "1000"})
    assert alter(b, [(TOPIC, "kept", [("segment.ms", "60000")])]) == [(0, None)]
    b.close()
    again = InProcess(tmp_path / "d")
    try:
        assert again.broker.metadata.get("kept").configs == {"segment.ms": "60000"}
        assert again.broker.logs.get("kept", 0).config["segment.ms"] == 60000
        assert again.broker.logs.get("kept", 0).config["retention.ms"] == 7 * 86400000
    finally:
        again.close()


# ----------------------------------------------------------------------------- IncrementalAlterConfigs


def test_incremental_set_append_subtract_delete_as_librdkafka_0011(inproc):
    create(inproc, "inc")
    # APPEND to an unset LIST starts from its default ("delete"), as Kafka's controller does
    assert incremental(inproc, [(TOPIC, "inc", [("compression.type", SET, "lz4"),
                                                ("cleanup.policy", APPEND, "compact")])]) == [(0, None)]
    assert inproc.broker.metadata.get("inc").configs == {"compression.type": "lz4", "cleanup.policy": "delete,compact"}
    assert inproc.broker.logs.get("inc", 0).config["cleanup.policy"] == "delete,compact"
    assert incremental(inproc, [(TOPIC, "inc", [("compression.type", DELETE, "lz4"),
                                                ("cleanup.policy", SUBTRACT, "compact")])]) == [(0, None)]
    assert inproc.broker.metadata.get("inc").configs == {"cleanup.policy": "delete"}
    entries = describe(inproc, "inc")
    assert (entries["compression.type"].value, entries["compression.type"].config_source) == ("producer", DEFAULT)


def test_incremental_keeps_other_overrides(inproc):
    create(inproc, "keep", {"retention.ms": "1000"})
    assert incremental(inproc, [(TOPIC, "keep", [("segment.ms", SET, "5000")])]) == [(0, None)]
    assert inproc.broker.metadata.get("keep").configs == {"retention.ms": "1000", "segment.ms": "5000"}


def test_incremental_append_only_for_lists(inproc):
    create(inproc, "lists")
    assert incremental(inproc, [(TOPIC, "lists", [("compression.type", APPEND, "gzip")])]) == [
        (INVALID_CONFIG, "Can't APPEND to key compression.type because its type is not LIST.")]
    assert incremental(inproc, [(TOPIC, "lists", [("retention.ms", SUBTRACT, "1")])]) == [
        (INVALID_CONFIG, "Can't SUBTRACT to key retention.ms because its type is not LIST.")]
    assert incremental(inproc, [(TOPIC, "lists", [("leader.replication.throttled.replicas", APPEND, "0:1,1:1")])]) \
        == [(0, None)]
    assert inproc.broker.metadata.get("lists").configs == {"leader.replication.throttled.replicas": "0:1,1:1"}


def test_incremental_unknown_topic_and_validate_only(inproc):
    assert incremental(inproc, [(TOPIC, "ghost", [("compression.type", SET, "lz4"),
                                                  ("max.compaction.lag.ms", SET, "3600000")])]) == [
        (UNKNOWN_TOPIC, "The topic 'ghost' does not exist.")]
    create(inproc, "vo")
    assert incremental(inproc, [(TOPIC, "vo", [("retention.ms", SET, "10")])], validate_only=True) == [(0, None)]
    assert inproc.broker.metadata.get("vo").configs == {}


def test_incremental_delete_needs_no_value_other_ops_do(inproc):
    create(inproc, "nul", {"retention.ms": "10"})
    assert incremental(inproc, [(TOPIC, "nul", [("retention.ms", DELETE, None)])]) == [(0, None)]
    assert incremental(inproc, [(TOPIC, "nul", [("retention.ms", SET, None)])]) == [
        (INVALID_REQUEST, "Null value not supported for : retention.ms")]


def test_incremental_v0_and_group_resources_still_work(inproc):
    create(inproc, "v0")
    assert incremental(inproc, [(TOPIC, "v0", [("retention.ms", SET, "99")]),
                                (GROUP, "g", [("consumer.session.timeout.ms", SET, "50000")])], version=0) == [
        (0, None), (0, None)]
    assert inproc.broker.metadata.group_configs["g"] == {"consumer.session.timeout.ms": "50000"}
    assert incremental(inproc, [(GROUP, "g", [("consumer.session.timeout.ms", DELETE, "")])]) == [(0, None)]
    assert "g" not in inproc.broker.metadata.group_configs


def test_legacy_alter_configs_on_a_group_replaces_its_set(inproc):
    incremental(inproc, [(GROUP, "g2", [("consumer.session.timeout.ms", SET, "50000")])])
    assert alter(inproc, [(GROUP, "g2", [("consumer.heartbeat.interval.ms", "6000")])]) == [(0, None)]
    assert inproc.broker.metadata.group_configs["g2"] == {"consumer.heartbeat.interval.ms": "6000"}


def test_one_request_is_one_metadata_write(inproc, monkeypatch):
    create(inproc, "w1")
    create(inproc, "w2")
    writes = []
    real = inproc.broker.metadata.store._commit
    monkeypatch.setattr(inproc.broker.metadata.store, "_commit", lambda ops: (writes.append(ops), real(ops)))
    assert alter(inproc, [(TOPIC, "w1", [("retention.ms", "1")]), (TOPIC, "w2", [("retention.ms", "2")]),
                          (BROKER, "", [("log.retention.bytes", "100")])]) == [(0, None)] * 3
    assert len(writes) == 1 and len(writes[0]) == 3
