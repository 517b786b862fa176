"""Coordinator settings: Kafka's defaults and key names, validation, per-group overrides."""

from __future__ import annotations

import pytest

from odradek.coordinator.config import (
    GROUP_CONFIG_KEYS,
    CoordinatorConfig,
    GroupConfigError,
)

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
KAFKA_ASSIGNORS = "org.apache.kafka.coordinator.group.assignor"


def test_defaults_match_kafka():
    c = CoordinatorConfig()
    assert c.session_timeout_ms == 45_000
    assert (c.min_session_timeout_ms, c.max_session_timeout_ms) == (45_000, 60_000)
    assert c.heartbeat_interval_ms == 5_000
    # Kafka's min is 5 s; odradek's is 250 ms, the floor of its reconciling interval
    # (consumer/interval.py, README "Heartbeat interval while reconciling").
    assert (c.min_heartbeat_interval_ms, c.max_heartbeat_interval_ms) == (250, 15_000)
    assert c.reconciling_heartbeat_interval_ms == 250
    assert c.offsets_topic_partitions == 50
    assert c.assignors == ("uniform", "range")  # the first is the default assignor
    assert c.offsets_retention_ms == 7 * 24 * 60 * 60 * 1000
    assert c.offsets_retention_check_interval_ms == 600_000
    assert c.offsets_topic_segment_bytes == 104_857_600
    assert c.max_size == 2**31 - 1
    c.validate()


def test_default_properties_use_kafka_keys_and_values():
    p = CoordinatorConfig().properties()
    assert p["offsets.topic.num.partitions"] == "50"
    assert p["group.consumer.session.timeout.ms"] == "45000"
    assert p["group.consumer.min.session.timeout.ms"] == "45000"
    assert p["group.consumer.max.session.timeout.ms"] == "60000"
    assert p["group.consumer.heartbeat.interval.ms"] == "5000"
    assert p["group.consumer.min.heartbeat.interval.ms"] == "250"  # Kafka: 5000 (see above)
    assert p["group.consumer.reconciling.heartbeat.interval.ms"] == "250"  # odradek's own key
    assert p["group.consumer.max.heartbeat.interval.ms"] == "15000"
    assert p["group.consumer.assignors"] == "uniform,range"
    assert p["offsets.retention.minutes"] == "10080"
    assert p["offsets.retention.check.interval.ms"] == "600000"


def test_from_properties_of_nothing_is_the_default():
    assert CoordinatorConfig.from_properties({}) == CoordinatorConfig()


def test_from_properties_parses_kafka_keys():
    c = CoordinatorConfig.from_properties({
        "offsets.topic.num.partitions": "3",
        "offsets.topic.segment.bytes": "1048576",
        "group.consumer.session.timeout.ms": "30000",
        "group.consumer.min.session.timeout.ms": "10000",
        "group.consumer.max.session.timeout.ms": "90000",
        "group.consumer.heartbeat.interval.ms": "3000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
        "group.consumer.max.heartbeat.interval.ms": "20000",
        "group.consumer.max.size": "10",
        "group.consumer.assignors": "range",
        "offsets.retention.minutes": "60",
        "offsets.retention.check.interval.ms": "1000",
        "log.dirs": "/tmp/ignored",  # not ours: ignored
    })
    assert c.offsets_topic_partitions == 3
    assert c.offsets_topic_segment_bytes == 1_048_576
    assert (c.session_timeout_ms, c.min_session_timeout_ms, c.max_session_timeout_ms) == (30_000, 10_000, 90_000)
    assert (c.heartbeat_interval_ms, c.min_heartbeat_interval_ms, c.max_heartbeat_interval_ms) == (3_000, 1_000, 20_000)
    assert c.max_size == 10
    assert c.assignors == ("range",)
    assert c.offsets_retention_ms == 3_600_000
    assert c.offsets_retention_check_interval_ms == 1_000


def test_properties_round_trip_through_from_properties():
    c = CoordinatorConfig.from_properties({"offsets.retention.minutes": "1440", "group.consumer.assignors": "range,uniform",
                                           "offsets.topic.num.partitions": "7"})
    assert CoordinatorConfig.from_properties(c.properties()) == c


@pytest.mark.parametrize("value, expected", [
    (f"{KAFKA_ASSIGNORS}.UniformAssignor,{KAFKA_ASSIGNORS}.RangeAssignor", ("uniform", "range")),
    ("org.apache.kafka.coordinator.group.assignor.RangeAssignor", ("range",)),
    (" range , uniform ", ("range", "uniform")),
    ("range,org.apache.kafka.coordinator.group.assignor.UniformAssignor", ("range", "uniform")),
])
def test_assignors_accept_short_and_full_kafka_class_names(value, expected):
    assert CoordinatorConfig.from_properties({"group.consumer.assignors": value}).assignors == expected


@pytest.mark.parametrize("value", ["sticky", "uniform,cooperative-sticky", "org.example.MyAssignor", "", " , "])
def test_unknown_or_missing_assignors_are_rejected(value):
    with pytest.raises(ValueError):
        CoordinatorConfig.from_properties({"group.consumer.assignors": value})


@pytest.mark.parametrize("props", [
    {"group.consumer.session.timeout.ms": "44999"},                       # below min
    {"group.consumer.session.timeout.ms": "60001"},                       # above max
    {"group.consumer.max.session.timeout.ms": "40000"},                   # max below the default session
    {"group.consumer.heartbeat.interval.ms": "249"},                      # below min (odradek's 250)
    {"group.consumer.min.heartbeat.interval.ms": "5000",
     "group.consumer.heartbeat.interval.ms": "4999"},                     # below Kafka's min
    {"group.consumer.reconciling.heartbeat.interval.ms": "-1"},
    {"group.consumer.heartbeat.interval.ms": "15001"},                    # above max
    {"group.consumer.min.heartbeat.interval.ms": "6000"},                 # default heartbeat now below min
    {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "5000"},  # hb == session
    {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "4000"},  # hb > session
    {"offsets.topic.num.partitions": "0"},
    {"group.consumer.max.size": "0"},
    {"group.consumer.session.timeout.ms": "forty-five seconds"},
])
def test_invalid_combinations_raise_value_error(props):
    with pytest.raises(ValueError):
        CoordinatorConfig.from_properties(props)


@pytest.mark.parametrize("props", [
    {"offsets.retention.minutes": "0"},
    {"offsets.retention.minutes": "-5"},
    {"offsets.retention.check.interval.ms": "0"},
    {"offsets.topic.segment.bytes": "0"},
    {"group.consumer.min.heartbeat.interval.ms": "0", "group.consumer.heartbeat.interval.ms": "0"},
])
def test_values_kafka_requires_to_be_at_least_1_are_rejected(props):
    with pytest.raises(ValueError):
        CoordinatorConfig.from_properties(props)


def test_validate_on_a_directly_built_config():
    with pytest.raises(ValueError):
        CoordinatorConfig(session_timeout_ms=30_000).validate()
    with pytest.raises(ValueError):
        CoordinatorConfig(min_session_timeout_ms=1_000, session_timeout_ms=5_000, heartbeat_interval_ms=5_000).validate()
    CoordinatorConfig(min_session_timeout_ms=1_000, session_timeout_ms=5_001, heartbeat_interval_ms=5_000).validate()


def test_session_and_heartbeat_bounds_are_inclusive():
    c = CoordinatorConfig.from_properties({"group.consumer.session.timeout.ms": "60000",
                                           "group.consumer.heartbeat.interval.ms": "15000"})
    assert (c.session_timeout_ms, c.heartbeat_interval_ms) == (60_000, 15_000)


# --- per-group overrides ---------------------------------------------------------------------


def test_group_config_keys_and_defaults():
    assert set(GROUP_CONFIG_KEYS) == {SESSION, HEARTBEAT}
    assert CoordinatorConfig().group_defaults() == {SESSION: 45_000, HEARTBEAT: 5_000}


@pytest.mark.parametrize("values", [
    {},
    {SESSION: "45000"},
    {SESSION: "60000"},
    {HEARTBEAT: "5000"},
    {HEARTBEAT: "15000"},
    {SESSION: "50000", HEARTBEAT: "10000"},
    {SESSION: " 50000 "},  # Kafka trims integer config values
])
def test_validate_group_config_accepts_in_range_overrides(values):
    assert CoordinatorConfig().validate_group_config(values) == {k: int(v) for k, v in values.items()}


@pytest.mark.parametrize("values", [
    {"session.timeout.ms": "45000"},
    {"group.consumer.session.timeout.ms": "45000"},  # broker key, not a group key
    {"consumer.max.size": "3"},
    {SESSION: "45000", "bogus": "1"},
])
def test_validate_group_config_rejects_unknown_keys(values):
    with pytest.raises(GroupConfigError, match="unknown"):
        CoordinatorConfig().validate_group_config(values)


@pytest.mark.parametrize("raw", ["", "abc", "45000.0", "4.5e4", "0x1f"])
def test_validate_group_config_rejects_non_integers(raw):
    with pytest.raises(GroupConfigError, match="integer"):
        CoordinatorConfig().validate_group_config({SESSION: raw})


def test_validate_group_config_rejects_python_only_integer_syntax():
    with pytest.raises(GroupConfigError):
        CoordinatorConfig().validate_group_config({SESSION: "45_000"})


@pytest.mark.parametrize("values", [
    {SESSION: "44999"}, {SESSION: "60001"}, {SESSION: "-1"},
    {HEARTBEAT: "249"}, {HEARTBEAT: "15001"}, {HEARTBEAT: "0"},
])
def test_validate_group_config_rejects_out_of_range(values):
    with pytest.raises(GroupConfigError, match="between"):
        CoordinatorConfig().validate_group_config(values)


def test_validate_group_config_bounds_follow_the_broker_config():
    c = CoordinatorConfig.from_properties({"group.consumer.min.session.timeout.ms": "6000",
                                           "group.consumer.max.heartbeat.interval.ms": "20000"})
    assert c.validate_group_config({SESSION: "6000", HEARTBEAT: "5500"}) == {SESSION: 6_000, HEARTBEAT: 5_500}
    with pytest.raises(GroupConfigError):
        c.validate_group_config({SESSION: "5999"})
    # Kafka's own min (5 s) restores Kafka's bounds on a group's heartbeat interval.
    kafka = CoordinatorConfig.from_properties({"group.consumer.min.heartbeat.interval.ms": "5000"})
    with pytest.raises(GroupConfigError, match="between"):
        kafka.validate_group_config({HEARTBEAT: "4999"})


@pytest.mark.parametrize("values", [
    {SESSION: "45000", HEARTBEAT: "45000"},
    {SESSION: "46000", HEARTBEAT: "47000"},
])
def test_validate_group_config_rejects_heartbeat_not_below_session(values):
    c = CoordinatorConfig(max_heartbeat_interval_ms=50_000)
    with pytest.raises(GroupConfigError, match="below"):
        c.validate_group_config(values)


def test_validate_group_config_checks_a_single_override_against_the_other_default():
    # heartbeat 15000 is in range and below the default session: fine; but with a broker whose
    # heartbeat max allows 50000, a heartbeat override above the default session is refused.
    assert CoordinatorConfig().validate_group_config({HEARTBEAT: "15000"}) == {HEARTBEAT: 15_000}
    c = CoordinatorConfig(max_heartbeat_interval_ms=50_000)
    with pytest.raises(GroupConfigError):
        c.validate_group_config({HEARTBEAT: "46000"})
    # and a session override below the broker's default heartbeat
    c = CoordinatorConfig(min_session_timeout_ms=1_000, heartbeat_interval_ms=5_000, session_timeout_ms=45_000)
    with pytest.raises(GroupConfigError):
        c.validate_group_config({SESSION: "5000"})
    assert c.validate_group_config({SESSION: "5001"}) == {SESSION: 5_001}


def test_group_config_error_is_a_value_error():
    assert issubclass(GroupConfigError, ValueError)


def test_classic_and_migration_keys_default_to_kafkas():
    cfg = CoordinatorConfig()
    assert (cfg.classic_min_session_timeout_ms, cfg.classic_max_session_timeout_ms) == (6_000, 1_800_000)
    assert cfg.initial_rebalance_delay_ms == 3_000 and cfg.classic_max_size == 2**31 - 1
    assert cfg.migration_policy == "bidirectional" and cfg.allows_upgrade() and cfg.allows_downgrade()
    props = cfg.properties()
    assert props["group.min.session.timeout.ms"] == "6000" and props["group.consumer.migration.policy"] == "bidirectional"


@pytest.mark.parametrize("policy,up,down", [
    ("BIDIRECTIONAL", True, True), ("upgrade", True, False), ("Downgrade", False, True), ("disabled", False, False)])
def test_migration_policy_is_case_insensitive(policy, up, down):
    cfg = CoordinatorConfig.from_properties({"group.consumer.migration.policy": policy})
    assert (cfg.allows_upgrade(), cfg.allows_downgrade()) == (up, down)


@pytest.mark.parametrize("props", [
    {"group.consumer.migration.policy": "sideways"},
    {"group.min.session.timeout.ms": "7000", "group.max.session.timeout.ms": "6000"},
    {"group.initial.rebalance.delay.ms": "-1"},
    {"group.max.size": "0"},
])
def test_bad_classic_settings_are_rejected(props):
    with pytest.raises(ValueError):
        CoordinatorConfig.from_properties(props)


def test_classic_keys_parse():
    cfg = CoordinatorConfig.from_properties({
        "group.min.session.timeout.ms": "1000", "group.max.session.timeout.ms": "9000",
        "group.initial.rebalance.delay.ms": "0", "group.classic.max.size": "5"})
    assert (cfg.classic_min_session_timeout_ms, cfg.classic_max_session_timeout_ms, cfg.initial_rebalance_delay_ms,
            cfg.classic_max_size) == (1000, 9000, 0, 5)


def test_regex_refresh_interval_is_configurable():
    from odradek.coordinator.config import CoordinatorConfig

    cfg = CoordinatorConfig.from_properties({"group.consumer.regex.refresh.interval.ms": "60000"})
    assert cfg.regex_refresh_interval_ms == 60000
    assert cfg.properties()["group.consumer.regex.refresh.interval.ms"] == "60000"
    assert CoordinatorConfig().regex_refresh_interval_ms == 10 * 60 * 1000
