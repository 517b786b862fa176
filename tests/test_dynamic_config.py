"""Tests for odradek.dynamic_config: which broker keys are dynamic, Kafka's checks of a
BROKER resource's new config set, and effective values."""

from __future__ import annotations

import pytest

from odradek.config import BrokerConfig
from odradek.configdef import ConfigError
from odradek.dynamic_config import (
    IGNORED_DYNAMIC,
    effective_values,
    is_dynamic,
    is_list,
    list_default,
    per_broker_only,
    validate_broker_configs,
)


def check(props, per_broker=True, config=None):
    config = config or BrokerConfig()
    current = effective_values(config)
    proposed = effective_values(BrokerConfig(dynamic_configs={"1" if per_broker else "": dict(props)}))
    return validate_broker_configs(props, per_broker, current, proposed)


def test_dynamic_keys():
    for key in ("log.retention.ms", "message.max.bytes", "compression.type", "log.cleaner.min.cleanable.ratio",
                "background.threads", "sasl.kerberos.min.time.before.relogin", "my.own.key",
                "listener.name.external.ssl.keystore.location"):
        assert is_dynamic(key), key
    for key in ("node.id", "log.dirs", "log.retention.hours", "num.partitions", "group.consumer.session.timeout.ms",
                "listeners", "max.connections"):
        assert not is_dynamic(key), key
    assert per_broker_only("sasl.jaas.config") and per_broker_only("listener.name.x.ssl.key.password")
    assert not per_broker_only("listener.name.x.max.connections") and not per_broker_only("log.retention.ms")
    assert is_list("log.cleanup.policy") and not is_list("background.threads") and not is_list("custom")
    assert list_default("log.cleanup.policy") == "delete" and list_default("custom") == ""


def test_values_parsed_with_the_keys_types():
    assert check({"log.cleaner.min.cleanable.ratio": "0.1", "background.threads": "12", "custom": "anything"}) == {
        "log.cleaner.min.cleanable.ratio": 0.1, "background.threads": 12}
    with pytest.raises(ConfigError, match="log.cleaner.min.cleanable.ratio: Value must be no more than 1"):
        check({"log.cleaner.min.cleanable.ratio": "2"})


def test_thread_pools_at_most_halve_or_double():
    assert check({"num.io.threads": "4"}) == {"num.io.threads": 4}
    with pytest.raises(ConfigError, match="value should be at least half the current value 8"):
        check({"num.io.threads": "3"})
    with pytest.raises(ConfigError, match="num.io.threads: Value must be at least 1"):  # the validator first
        check({"num.io.threads": "0"})


def test_local_retention_within_retention():
    with pytest.raises(ConfigError, match="Value must not be more than log.retention.ms property value: 1000"):
        check({"log.retention.ms": "1000", "log.local.retention.ms": "2000"})
    with pytest.raises(ConfigError, match="Value must not be -1 as log.retention.bytes value is set as 10"):
        check({"log.retention.bytes": "10", "log.local.retention.bytes": "-1"})
    check({"log.retention.ms": "-1", "log.local.retention.ms": "2000"})  # unlimited retention: no bound


def test_effective_values_levels():
    c = BrokerConfig(extra={"background.threads": "4"}, log_defaults={"log.retention.ms": 9})
    assert effective_values(c)["background.threads"] == 4 and effective_values(c)["log.retention.ms"] == 9
    c.attach_dynamic({"": {"background.threads": "6"}, "1": {"log.retention.ms": "7"}})
    assert effective_values(c)["background.threads"] == 6 and effective_values(c)["log.retention.ms"] == 7
    assert effective_values(BrokerConfig())["num.io.threads"] == IGNORED_DYNAMIC["num.io.threads"].default
