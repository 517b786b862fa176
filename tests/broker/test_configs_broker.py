"""Dynamic broker configs at the handler level: AlterConfigs and IncrementalAlterConfigs on
BROKER resources ("" the cluster default, "1" this broker), Kafka's checks and errors,
DescribeConfigs sources and synonym order, and topics without overrides following."""

from __future__ import annotations

from tests.broker.conftest import InProcess
from tests.broker.test_configs import (
    APPEND,
    BROKER,
    DEFAULT,
    DELETE,
    DYNAMIC_BROKER,
    DYNAMIC_DEFAULT,
    DYNAMIC_TOPIC,
    INVALID_CONFIG,
    INVALID_REQUEST,
    SET,
    STATIC,
    SUBTRACT,
    TOPIC,
    alter,
    create,
    describe,
    incremental,
)

WEEK = str(7 * 86400000)


def synonyms(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_incremental_broker_configs_as_librdkafka_0081(inproc):
    assert incremental(inproc, [(BROKER, "1", [("background.threads", SET, "9"),
                                               ("log.cleanup.policy", APPEND, "compact")])]) == [(0, None)]
    assert inproc.broker.metadata.broker_configs["1"] == {"background.threads": "9",
                                                          "log.cleanup.policy": "delete,compact"}
    assert incremental(inproc, [(BROKER, "1", [("background.threads", DELETE, ""),
                                               ("log.cleanup.policy", SUBTRACT, "compact")])]) == [(0, None)]
    assert inproc.broker.metadata.broker_configs["1"] == {"log.cleanup.policy": "delete"}


def test_a_dynamic_default_changes_topics_without_overrides_and_their_live_logs(inproc):
    create(inproc, "plain")
    create(inproc, "own", {"retention.ms": "1000"})
    plain, own = inproc.broker.logs.get("plain", 0), inproc.broker.logs.get("own", 0)
    assert alter(inproc, [(BROKER, "", [("log.retention.ms", "5000"), ("compression.type", "gzip")])]) == [(0, None)]
    assert plain.config["retention.ms"] == 5000 and plain.config["compression.type"] == "gzip"
    assert own.config["retention.ms"] == 1000 and own.config["compression.type"] == "gzip"
    entry = describe(inproc, "plain")["retention.ms"]
    assert (entry.value, entry.config_source) == ("5000", DYNAMIC_DEFAULT)
    assert synonyms(entry) == [("log.retention.ms", "5000", DYNAMIC_DEFAULT), ("log.retention.ms", WEEK, DEFAULT)]
    # a topic created afterwards starts with the new default
    t = create(inproc, "later")
    assert {c.name: (c.value, c.config_source) for c in t.configs}["retention.ms"] == ("5000", DYNAMIC_DEFAULT)
    assert inproc.broker.logs.get("later", 0).config["retention.ms"] == 5000


def test_synonyms_in_kafkas_order(tmp_path):
    b = InProcess(tmp_path / "d", log_defaults={"log.retention.ms": 3000})
    try:
        create(b, "t", {"retention.ms": "1000"})
        alter(b, [(BROKER, "", [("log.retention.ms", "5000")])])
        alter(b, [(BROKER, "1", [("log.retention.ms", "4000")])])
        entry = describe(b, "t")["retention.ms"]
        assert (entry.value, entry.config_source) == ("1000", DYNAMIC_TOPIC)
        assert synonyms(entry) == [
            ("retention.ms", "1000", DYNAMIC_TOPIC),
            ("log.retention.ms", "4000", DYNAMIC_BROKER),
            ("log.retention.ms", "5000", DYNAMIC_DEFAULT),
            ("log.retention.ms", "3000", STATIC),
            ("log.retention.ms", WEEK, DEFAULT),
        ]
        alter(b, [(TOPIC, "t", [])])  # drop the topic override: the per-broker value wins
        assert b.broker.logs.get("t", 0).config["retention.ms"] == 4000
        alter(b, [(BROKER, "1", [])])  # then the cluster default
        assert b.broker.logs.get("t", 0).config["retention.ms"] == 5000
        alter(b, [(BROKER, "", [])])  # then the static value
        assert b.broker.logs.get("t", 0).config["retention.ms"] == 3000
        assert describe(b, "t")["retention.ms"].config_source == STATIC
    finally:
        b.close()


def test_describe_broker_resources(inproc):
    alter(inproc, [(BROKER, "", [("log.segment.bytes", "2000000"), ("my.custom.key", "x")])])
    alter(inproc, [(BROKER, "1", [("log.segment.bytes", "3000000"), ("sasl.kerberos.min.time.before.relogin", "58000")])])
    mine = describe(inproc, "1", rtype=BROKER)
    seg = mine["log.segment.bytes"]
    assert (seg.value, seg.config_source, seg.read_only, seg.config_type) == ("3000000", DYNAMIC_BROKER, False, 3)
    assert synonyms(seg) == [("log.segment.bytes", "3000000", DYNAMIC_BROKER),
                             ("log.segment.bytes", "2000000", DYNAMIC_DEFAULT),
                             ("log.segment.bytes", str(1 << 30), DEFAULT)]
    assert (mine["my.custom.key"].value, mine["my.custom.key"].config_source) == ("x", DYNAMIC_DEFAULT)
    relogin = mine["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.value, relogin.config_source, relogin.config_type) == ("58000", DYNAMIC_BROKER, 5)
    assert mine["node.id"].read_only and mine["node.id"].config_type == 3
    assert not mine["log.retention.ms"].read_only and mine["log.retention.ms"].config_source == DEFAULT
    assert mine["background.threads"].value == "10"
    assert mine["log.cleaner.min.cleanable.ratio"].config_type == 6
    # the cluster default resource: its dynamic configs only (ConfigHelper)
    default = describe(inproc, "", rtype=BROKER)
    assert set(default) == {"log.segment.bytes", "my.custom.key"}
    assert synonyms(default["log.segment.bytes"]) == [("log.segment.bytes", "2000000", DYNAMIC_DEFAULT)]


def test_read_only_and_per_broker_keys(inproc):
    assert alter(inproc, [(BROKER, "1", [("node.id", "3")])]) == [
        (INVALID_REQUEST, "Cannot update these configs dynamically: Set(node.id)")]
    assert alter(inproc, [(BROKER, "", [("group.consumer.session.timeout.ms", "50000"), ("log.retention.hours", "1")])]) \
        == [(INVALID_REQUEST, ("Cannot update these configs dynamically: "
                               "Set(group.consumer.session.timeout.ms, log.retention.hours)"))]
    assert alter(inproc, [(BROKER, "1", [("listeners", "PLAINTEXT://:1")])])[0][0] == INVALID_REQUEST
    assert alter(inproc, [(BROKER, "", [("sasl.kerberos.min.time.before.relogin", "58000")])]) == [
        (INVALID_REQUEST, ("Cannot update these configs at default cluster level, broker id must be specified: "
                           "Set(sasl.kerberos.min.time.before.relogin)"))]
    assert alter(inproc, [(BROKER, "1", [("ssl.keystore.location", "/k")])]) == [
        (INVALID_REQUEST, ("These security configs can be dynamically updated only per-listener using the listener "
                           "prefix: Set(ssl.keystore.location)"))]
    assert alter(inproc, [(BROKER, "1", [("listener.name.plaintext.ssl.keystore.location", "/k")])]) == [(0, None)]
    assert inproc.broker.metadata.broker_configs == {"1": {"listener.name.plaintext.ssl.keystore.location": "/k"}}


def test_broker_resource_names(inproc):
    assert alter(inproc, [(BROKER, "2", [("log.retention.ms", "1")])]) == [
        (INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")]
    assert incremental(inproc, [(BROKER, "one", [("log.retention.ms", SET, "1")])]) == [
        (INVALID_REQUEST, "Node id must be an integer, but it is: one")]


def test_broker_values_are_checked(inproc):
    assert alter(inproc, [(BROKER, "", [("log.retention.ms", "soon")])]) == [
        (INVALID_REQUEST, "Invalid value soon for configuration log.retention.ms: Not a number of type LONG")]
    assert alter(inproc, [(BROKER, "", [("log.cleanup.policy", "archive")])])[0][0] == INVALID_REQUEST
    assert alter(inproc, [(BROKER, "1", [("background.threads", "30")])]) == [
        (INVALID_REQUEST, ("Dynamic thread count update validation failed for background.threads=30, value should "
                           "not be greater than double the current value 10"))]
    assert alter(inproc, [(BROKER, "", [("log.cleaner.min.compaction.lag.ms", "10"),
                                        ("log.cleaner.max.compaction.lag.ms", "5")])]) == [
        (INVALID_REQUEST, "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)")]
    assert incremental(inproc, [(BROKER, "1", [("background.threads", APPEND, "1")])]) == [
        (INVALID_CONFIG, "Config value append is not allowed for config key: background.threads")]
    assert inproc.broker.metadata.broker_configs == {}


def test_legacy_alter_replaces_a_broker_resources_set(inproc):
    incremental(inproc, [(BROKER, "", [("log.retention.ms", SET, "5000"), ("log.segment.bytes", SET, "2000000")])])
    assert alter(inproc, [(BROKER, "", [("log.retention.bytes", "100")])]) == [(0, None)]
    assert inproc.broker.metadata.broker_configs[""] == {"log.retention.bytes": "100"}
    assert alter(inproc, [(BROKER, "", [])]) == [(0, None)]
    assert "" not in inproc.broker.metadata.broker_configs


def test_validate_only_broker_change(inproc):
    assert alter(inproc, [(BROKER, "", [("log.retention.ms", "5000")])], validate_only=True) == [(0, None)]
    assert inproc.broker.metadata.broker_configs == {}


def test_dynamic_broker_configs_survive_a_restart(tmp_path):
    b = InProcess(tmp_path / "d")
    create(b, "t")
    assert alter(b, [(BROKER, "", [("log.retention.ms", "5000")]), (BROKER, "1", [("log.segment.bytes", "2000000")])]) \
        == [(0, None), (0, None)]
    b.close()
    again = InProcess(tmp_path / "d")
    try:
        # No config request yet: Broker.__init__ attached the stored dynamic configs before
        # opening any log.
        config = again.broker.logs.get("t", 0).config
        assert (config["retention.ms"], config["segment.bytes"]) == (5000, 2000000)
        assert describe(again, "1", rtype=BROKER)["log.retention.ms"].config_source == DYNAMIC_DEFAULT
    finally:
        again.close()
