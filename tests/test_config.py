"""Tests for odradek.config: properties parsing, Kafka broker keys, topic config resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.config import (
    DAY_MS,
    TOPIC_CONFIGS,
    BrokerConfig,
    apply_properties,
    load_config,
    parse_properties,
    resolve_topic_config,
)

# ----------------------------------------------------------------------------- parse_properties


def test_parse_properties_basic_and_comments():
    text = """
# a comment
! another comment
   # indented comment
log.dirs=/var/lib/kafka
num.partitions = 3
  listeners=PLAINTEXT://0.0.0.0:9092

empty.value=
"""
    assert parse_properties(text) == {
        "log.dirs": "/var/lib/kafka",
        "num.partitions": "3",
        "listeners": "PLAINTEXT://0.0.0.0:9092",
        "empty.value": "",
    }


def test_parse_properties_colon_separator_and_first_separator_wins():
    props = parse_properties("a: 1\nb:2\nc=x=y\nd:e=f\ng=h:i\n")
    assert props == {"a": "1", "b": "2", "c": "x=y", "d": "e=f", "g": "h:i"}


def test_parse_properties_continuation_lines():
    text = "listeners=PLAINTEXT://a:1,\\\n    PLAINTEXT://b:2,\\\n   PLAINTEXT://c:3\nnext=1\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2,PLAINTEXT://c:3",
        "next": "1",
    }


def test_parse_properties_comment_lines_do_not_continue():
    text = "# comment \\\na=1\n"
    assert parse_properties(text) == {"a": "1"}


def test_parse_properties_continuation_on_last_line():
    """java.util.Properties keeps a key whose value ends the file with a backslash."""
    assert parse_properties("a=1\nb=2\\") == {"a": "1", "b": "2"}


def test_parse_properties_later_key_wins():
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_parse_properties_key_without_value():
    assert parse_properties("flag\n") == {"flag": ""}


# ----------------------------------------------------------------------------- apply_properties


def apply(text: str) -> BrokerConfig:
    return apply_properties(BrokerConfig(), parse_properties(text))


def test_log_dirs_takes_first_directory():
    assert apply("log.dirs=/data/a, /data/b").data_dir == Path("/data/a")
    assert apply("log.dir=/single").data_dir == Path("/single")


def test_simple_broker_keys():
    c = apply(
        "node.id=7\nnum.partitions=12\nsocket.request.max.bytes=5000\n"
        "auto.create.topics.enable=false\ndefault.replication.factor=1\nbroker.rack=r1\n"
        "log.retention.check.interval.ms=1234\nlog.cleaner.backoff.ms=99\n"
    )
    assert c.node_id == 7
    assert c.num_partitions == 12
    assert c.socket_request_max_bytes == 5000
    assert c.auto_create_topics is False
    assert c.rack == "r1"
    assert c.retention_check_interval_ms == 1234
    assert c.cleaner_backoff_ms == 99
    assert apply("auto.create.topics.enable=true").auto_create_topics is True
    assert apply("broker.id=3").node_id == 3


def test_bad_broker_values_raise_value_error():
    with pytest.raises(ValueError):
        apply("num.partitions=many")
    with pytest.raises(ValueError):
        apply("auto.create.topics.enable=perhaps")
    with pytest.raises(ValueError):
        apply("listeners=PLAINTEXT://host-without-port")


def test_log_segment_and_retention_bytes_become_topic_defaults():
    c = apply("log.segment.bytes=1048576\nlog.retention.bytes=5000000\nlog.cleanup.policy=compact\n")
    d = c.topic_defaults()
    assert d["segment.bytes"] == 1048576
    assert d["retention.bytes"] == 5000000
    assert d["cleanup.policy"] == "compact"
    assert c.broker_configs()["log.segment.bytes"] == "1048576"


def test_retention_ms_hours_minutes_precedence():
    assert apply("log.retention.hours=2").topic_defaults()["retention.ms"] == 2 * 3_600_000
    assert apply("log.retention.minutes=3").topic_defaults()["retention.ms"] == 3 * 60_000
    assert apply("log.retention.ms=500").topic_defaults()["retention.ms"] == 500
    # minutes beat hours, ms beat both, whatever the order in the file
    assert apply("log.retention.minutes=3\nlog.retention.hours=2").topic_defaults()["retention.ms"] == 180_000
    assert apply("log.retention.hours=2\nlog.retention.minutes=3").topic_defaults()["retention.ms"] == 180_000
    assert apply("log.retention.ms=7\nlog.retention.hours=2").topic_defaults()["retention.ms"] == 7
    assert apply("log.retention.hours=2\nlog.retention.minutes=3\nlog.retention.ms=7").topic_defaults()[
        "retention.ms"
    ] == 7
    assert BrokerConfig().topic_defaults()["retention.ms"] == 7 * DAY_MS


def test_log_roll_hours():
    assert apply("log.roll.hours=1").topic_defaults()["segment.ms"] == 3_600_000
    assert apply("log.roll.hours=1\nlog.roll.ms=10").topic_defaults()["segment.ms"] == 10


def test_negative_retention_hours_means_unlimited():
    """Kafka's KafkaConfig.logRetentionTimeMillis turns any negative value into -1."""
    assert apply("log.retention.hours=-1").topic_defaults()["retention.ms"] == -1
    assert apply("log.retention.minutes=-1").topic_defaults()["retention.ms"] == -1


def test_aliases_not_kept_as_unknown_extras():
    c = apply("log.retention.hours=2\nsome.unknown.key=x\n")
    assert "log.retention.hours" not in c.extra
    assert c.extra == {"some.unknown.key": "x"}
    assert c.broker_configs()["some.unknown.key"] == "x"


@pytest.mark.parametrize(
    "value, host, port",
    [
        ("PLAINTEXT://127.0.0.1:9093", "127.0.0.1", 9093),
        ("PLAINTEXT://0.0.0.0:19092,SSL://0.0.0.0:19093", "0.0.0.0", 19092),
        ("broker.example.com:9000", "broker.example.com", 9000),
        ("PLAINTEXT://[::1]:9092", "::1", 9092),
        ("PLAINTEXT://:9092", "0.0.0.0", 9092),  # Kafka: empty host binds every interface
    ],
)
def test_listeners(value, host, port):
    c = apply(f"listeners={value}")
    assert (c.listen_host, c.listen_port) == (host, port)
    assert c.advertised == (host, port)  # defaults to the listener


def test_advertised_listeners():
    c = apply("listeners=PLAINTEXT://0.0.0.0:9092\nadvertised.listeners=PLAINTEXT://kafka.example:19092\n")
    assert (c.listen_host, c.listen_port) == ("0.0.0.0", 9092)
    assert c.advertised == ("kafka.example", 19092)
    b = c.broker_configs()
    assert b["listeners"] == "PLAINTEXT://0.0.0.0:9092"
    assert b["advertised.listeners"] == "PLAINTEXT://kafka.example:19092"


def test_load_config_file_then_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=4\nlog.dirs=/from/file\nlog.segment.bytes=2048\n")
    c = load_config(f, {"data_dir": Path("/from/flag"), "num_partitions": None})
    assert c.data_dir == Path("/from/flag")  # flags beat the file
    assert c.num_partitions == 4  # a None flag leaves the file's value
    assert c.topic_defaults()["segment.bytes"] == 2048
    assert load_config().num_partitions == 1


def test_broker_configs_reports_every_topic_default():
    b = BrokerConfig().broker_configs()
    for setting in TOPIC_CONFIGS.values():
        assert setting.broker_key is None or setting.broker_key in b
    assert b["log.retention.ms"] == str(7 * DAY_MS)
    assert b["auto.create.topics.enable"] == "true"


# ----------------------------------------------------------------------------- topic configs


def test_topic_defaults_cover_every_topic_key():
    d = BrokerConfig().topic_defaults()
    assert set(d) == set(TOPIC_CONFIGS)
    assert d["cleanup.policy"] == "delete"
    assert d["segment.bytes"] == 1 << 30
    assert d["message.timestamp.type"] == "CreateTime"


def test_resolve_topic_config_overrides_and_parses():
    defaults = BrokerConfig().topic_defaults()
    out = resolve_topic_config(
        defaults,
        {"retention.ms": "1000", "cleanup.policy": "delete, compact", "message.timestamp.type": "LogAppendTime"},
    )
    assert out["retention.ms"] == 1000
    assert out["cleanup.policy"] == "delete,compact"  # Kafka's LIST: order kept, blanks trimmed
    assert out["message.timestamp.type"] == "LogAppendTime"
    assert out["segment.bytes"] == defaults["segment.bytes"]
    assert defaults["retention.ms"] == 7 * DAY_MS  # the defaults are not mutated


def test_resolve_topic_config_uses_broker_defaults():
    defaults = apply("log.retention.ms=42\nlog.segment.bytes=4096").topic_defaults()
    out = resolve_topic_config(defaults, {"segment.bytes": "8192"})
    assert out["retention.ms"] == 42
    assert out["segment.bytes"] == 8192


def test_unknown_topic_config_key_raises_key_error():
    with pytest.raises(KeyError):
        resolve_topic_config(BrokerConfig().topic_defaults(), {"no.such.config": "1"})
    with pytest.raises(KeyError):
        resolve_topic_config(BrokerConfig().topic_defaults(), {"log.retention.ms": "1"})  # broker key


@pytest.mark.parametrize(
    "key, value",
    [
        ("retention.ms", "soon"),
        ("segment.bytes", "1.5"),
        ("segment.bytes", ""),
        ("cleanup.policy", "archive"),
        ("cleanup.policy", "compact,"),
        ("cleanup.policy", "compact,archive"),
        ("message.timestamp.type", "createtime"),
        ("compression.type", "GZIP"),
        ("compression.type", "brotli"),
        ("retention.ms", "1_000"),
        ("min.cleanable.dirty.ratio", "half"),
        ("preallocate", "1"),
    ],
)
def test_bad_topic_config_value_raises_value_error(key, value):
    with pytest.raises(ValueError):
        resolve_topic_config(BrokerConfig().topic_defaults(), {key: value})


@pytest.mark.parametrize(
    "key, value",
    [
        ("segment.bytes", "0"),  # Kafka: at least 14
        ("segment.bytes", "-1"),
        ("segment.ms", "0"),  # Kafka: at least 1
        ("retention.ms", "-2"),  # Kafka: at least -1
        ("delete.retention.ms", "-1"),  # Kafka: at least 0
        ("min.compaction.lag.ms", "-1"),  # Kafka: at least 0
        ("index.interval.bytes", "-1"),  # Kafka: at least 0
        ("max.message.bytes", "-1"),  # Kafka: at least 0
    ],
)
def test_out_of_range_topic_config_value_raises_value_error(key, value):
    """Kafka's LogConfig validators reject these with INVALID_CONFIG."""
    with pytest.raises(ValueError):
        resolve_topic_config(BrokerConfig().topic_defaults(), {key: value})


@pytest.mark.parametrize("codec", ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_compression_type_accepts_kafkas_names(codec):
    """Kafka's BrokerCompressionType names, kept as Kafka spells them (the produce path
    reads config["compression.type"] to recompress)."""
    out = resolve_topic_config(BrokerConfig().topic_defaults(), {"compression.type": codec})
    assert out["compression.type"] == codec


def test_an_empty_cleanup_policy_is_a_valid_list():
    """Kafka's ValidList accepts an empty list: neither delete nor compact (infinite retention)."""
    out = resolve_topic_config(BrokerConfig().topic_defaults(), {"cleanup.policy": ""})
    assert out["cleanup.policy"] == ""


def test_retention_minus_one_accepted():
    out = resolve_topic_config(BrokerConfig().topic_defaults(), {"retention.ms": "-1", "retention.bytes": "-1"})
    assert out["retention.ms"] == -1 and out["retention.bytes"] == -1


@pytest.mark.parametrize(
    "key, value, parsed",
    [
        ("min.cleanable.dirty.ratio", "0.01", 0.01),
        ("max.compaction.lag.ms", "100", 100),
        ("file.delete.delay.ms", "10000", 10000),
        ("preallocate", "TRUE", True),
        ("unclean.leader.election.enable", " false ", False),
        ("min.insync.replicas", "2", 2),
        ("compression.zstd.level", "-131072", -131072),
        ("compression.gzip.level", "-1", -1),
        ("segment.jitter.ms", "5", 5),
        ("local.retention.ms", "-2", -2),
    ],
)
def test_kafka_4_topic_configs_parse_to_typed_values(key, value, parsed):
    out = resolve_topic_config(BrokerConfig().topic_defaults(), {key: value})
    assert out[key] == parsed and type(out[key]) is type(parsed)


# ----------------------------------------------------------------------------- dynamic broker configs


def test_topic_defaults_follow_dynamic_then_static_then_default():
    c = apply("log.retention.ms=3000\n")
    dynamic = {}
    c.attach_dynamic(dynamic)
    assert c.topic_defaults()["retention.ms"] == 3000
    dynamic[""] = {"log.retention.ms": "5000", "compression.type": "zstd"}
    assert c.topic_defaults()["retention.ms"] == 5000  # the store is read live, not copied
    assert c.topic_defaults()["compression.type"] == "zstd"
    dynamic["1"] = {"log.retention.ms": "4000"}
    assert c.topic_defaults()["retention.ms"] == 4000
    dynamic["2"] = {"log.retention.ms": "1"}  # another broker's
    assert c.topic_defaults()["retention.ms"] == 4000
    dynamic["1"] = {"log.retention.ms": "garbage"}  # an unparsable stored value is skipped
    assert c.topic_defaults()["retention.ms"] == 5000


def test_log_default_synonyms_in_kafkas_order():
    c = apply("log.segment.bytes=3000\n")
    c.attach_dynamic({"": {"log.segment.bytes": "5000"}, "1": {"log.segment.bytes": "4000"}})
    assert c.log_default_synonyms(TOPIC_CONFIGS["segment.bytes"]) == [
        ("log.segment.bytes", 4000, 2), ("log.segment.bytes", 5000, 3), ("log.segment.bytes", 3000, 4),
        ("log.segment.bytes", 1 << 30, 5)]
    assert c.log_default_synonyms(TOPIC_CONFIGS["remote.storage.enable"]) == []


def test_coarser_aliases_of_new_keys():
    assert apply("log.roll.jitter.hours=2").topic_defaults()["segment.jitter.ms"] == 7_200_000
    assert apply("log.flush.scheduler.interval.ms=500").topic_defaults()["flush.ms"] == 500
    assert apply("log.flush.scheduler.interval.ms=500\nlog.flush.interval.ms=7").topic_defaults()["flush.ms"] == 7
    assert apply("log.cleaner.min.cleanable.ratio=0.25").topic_defaults()["min.cleanable.dirty.ratio"] == 0.25


def test_static_broker_keys_are_the_configured_ones():
    c = apply("num.partitions=3\nlog.retention.ms=10\n")
    keys = c.static_broker_keys()
    assert {"num.partitions", "log.retention.ms"} <= keys
    assert "auto.create.topics.enable" not in keys


def test_replica_selector_class_kafka_names_short_names_and_unloadable_ones():
    # KIP-392: unset is Kafka's default (the leader serves everyone).
    assert apply_properties(BrokerConfig(), {}).replica_selector_class is None
    rack = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    c = apply_properties(BrokerConfig(), {"replica.selector.class": rack})
    assert c.replica_selector_class == rack and c.broker_configs()["replica.selector.class"] == rack
    assert apply_properties(BrokerConfig(), {"replica.selector.class": "rack-aware"}).replica_selector_class == "rack-aware"
    with pytest.raises(ValueError, match="replica.selector.class"):  # Kafka will not start either
        apply_properties(BrokerConfig(), {"replica.selector.class": "com.example.Missing"})
