"""kafka-configs.sh on odradek: describe and alter topic, broker and group configs with
Kafka's options and output.

Group configs and every --describe work against today's broker. Altering topic and
broker configs needs IncrementalAlterConfigs for TOPIC and BROKER resources on the
broker side; those tests assert what Kafka does.
"""

from __future__ import annotations

import argparse

import pytest

from odradek.commands.kafka_scripts import configs
from odradek.commands.kafka_scripts.common import ToolError

pytestmark = pytest.mark.interop

CONFIGS = "kafka-configs.sh"
TOPICS = "kafka-topics.sh"


def described(kafka, *args: str) -> tuple[str, dict[str, str]]:
    """(the header line, config name -> its `value sensitive=... synonyms={...}` text)."""
    lines = kafka.ok(CONFIGS, "--describe", *args).stdout.splitlines()
    entries = {}
    for line in lines[1:]:
        assert line.startswith("  "), lines
        name, _, rest = line[2:].partition("=")
        entries[name] = rest
    return lines[0], entries


def test_group_configs(kafka, topic):
    group = f"g-{topic}"
    assert described(kafka, "--entity-type", "groups", "--entity-name", group) == \
        (f"Dynamic configs for group {group} are:", {})
    r = kafka.ok(CONFIGS, "--alter", "--entity-type", "groups", "--entity-name", group, "--add-config",
                 "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")
    assert r.stdout == f"Completed updating config for group {group}.\n"
    header, entries = described(kafka, "--group", group)
    assert header == f"Dynamic configs for group {group} are:"
    assert list(entries) == ["consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"]  # sorted by name
    assert entries["consumer.session.timeout.ms"].startswith(
        "50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000, ")
    assert "DEFAULT_CONFIG:group.consumer.session.timeout.ms=" in entries["consumer.session.timeout.ms"]

    kafka.ok(CONFIGS, "--alter", "--group", group, "--delete-config", "consumer.heartbeat.interval.ms")
    assert list(described(kafka, "--group", group)[1]) == ["consumer.session.timeout.ms"]
    header, entries = described(kafka, "--group", group, "--all")
    assert header == f"All configs for group {group} are:"
    assert entries["consumer.heartbeat.interval.ms"].split()[0].isdigit()
    assert "DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=" in entries["consumer.heartbeat.interval.ms"]

    # Kafka checks that what is to be deleted is set; the broker checks names and values.
    r = kafka.fails(CONFIGS, "--alter", "--group", group, "--delete-config", "consumer.heartbeat.interval.ms")
    assert r.stderr == "Invalid config(s): consumer.heartbeat.interval.ms\n"
    r = kafka.fails(CONFIGS, "--alter", "--group", group, "--add-config", "no.such.config=1")
    assert r.stderr.startswith("Error while executing config command with args '--bootstrap-server ")
    assert "INVALID_CONFIG: " in r.stderr


def test_topic_configs_describe(kafka, topic):
    kafka.ok(TOPICS, "--create", "--topic", topic, "--config", "retention.ms=60000")
    header, entries = described(kafka, "--entity-type", "topics", "--entity-name", topic)
    assert header == f"Dynamic configs for topic {topic} are:"
    assert list(entries) == ["retention.ms"]
    assert entries["retention.ms"].startswith(
        "60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000, DEFAULT_CONFIG:log.retention.ms=")
    header, entries = described(kafka, "--topic", topic, "--all")
    assert header == f"All configs for topic {topic} are:"
    assert list(entries) == sorted(entries) and {"retention.ms", "cleanup.policy"} <= set(entries)
    assert entries["cleanup.policy"] == "delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}"
    # Without a name: every topic, internal ones included.
    assert f"Dynamic configs for topic {topic} are:" in kafka.ok(CONFIGS, "--describe", "--entity-type",
                                                                 "topics").stdout.splitlines()
    r = kafka.fails(CONFIGS, "--describe", "--topic", f"missing-{topic}")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr


def test_topic_configs_alter(kafka, topic):
    """Needs the broker's IncrementalAlterConfigs for TOPIC resources."""
    kafka.ok(TOPICS, "--create", "--topic", topic, "--config", "retention.ms=60000")
    r = kafka.ok(CONFIGS, "--alter", "--topic", topic, "--add-config",
                 "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert r.stdout == f"Completed updating config for topic {topic}.\n"
    entries = described(kafka, "--topic", topic)[1]
    assert entries["cleanup.policy"].startswith("compact,delete sensitive=false ")
    assert entries["retention.ms"].startswith("1000 sensitive=false ")
    kafka.ok(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config", "retention.ms")
    assert list(described(kafka, "--topic", topic)[1]) == ["cleanup.policy"]
    # kafka-topics.sh --describe shows the new overrides
    first = kafka.ok(TOPICS, "--describe", "--topic", topic).stdout.splitlines()[0]
    assert first.endswith("\tConfigs: cleanup.policy=compact,delete")


def test_broker_configs_describe(kafka_path, broker_factory):
    from tests.commands.conftest import Kafka

    b = broker_factory("configs", ["--node-id", "3"])
    kafka = Kafka(kafka_path, b.bootstrap)
    header, entries = described(kafka, "--broker", "3", "--all")
    assert header == "All configs for broker 3 are:"
    assert entries["broker.id"].startswith("3 sensitive=false synonyms={STATIC_BROKER_CONFIG:broker.id=3")
    assert described(kafka, "--entity-type", "brokers", "--entity-default") == \
        ("Default configs for brokers in the cluster are:", {})
    # Without a name: each broker, then the cluster default.
    assert kafka.ok(CONFIGS, "--describe", "--entity-type", "brokers").stdout == \
        "Dynamic configs for broker 3 are:\nDefault configs for brokers in the cluster are:\n"


def test_broker_configs_alter(kafka_path, broker_factory):
    """Needs the broker's IncrementalAlterConfigs for BROKER resources (dynamic broker configs)."""
    from tests.commands.conftest import Kafka

    b = broker_factory("configs-alter", ["--node-id", "3"])
    kafka = Kafka(kafka_path, b.bootstrap)
    r = kafka.ok(CONFIGS, "--alter", "--broker", "3", "--add-config", "log.retention.ms=3600000")
    assert r.stdout == "Completed updating config for broker 3.\n"
    entries = described(kafka, "--broker", "3")[1]
    assert entries["log.retention.ms"].startswith(
        "3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000")
    r = kafka.ok(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                 "log.retention.ms=7200000")
    assert r.stdout == "Completed updating default config for brokers in the cluster.\n"
    entries = described(kafka, "--entity-type", "brokers", "--entity-default")[1]
    assert entries["log.retention.ms"].startswith(
        "7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000")
    kafka.ok(CONFIGS, "--alter", "--broker", "3", "--delete-config", "log.retention.ms")
    assert described(kafka, "--broker", "3")[1] == {}


@pytest.mark.parametrize("args, error", [
    ([], "Command must include exactly one action: --describe, --alter"),
    (["--describe", "--alter", "--topic", "t"], "Command must include exactly one action"),
    (["--describe", "--topic", "t", "--add-config", "a=b"],
     'Option "[describe]" can\'t be used with option "[add-config]"'),
    (["--describe"], "At least one entity type must be specified"),
    (["--describe", "--entity-type", "widgets"], "Invalid entity type widgets, the entity type must be one of"),
    (["--describe", "--entity-type", "users"], "odradek has no users configs"),
    (["--describe", "--entity-type", "topics", "--entity-type", "groups"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--describe", "--topic", "t", "--entity-name", "x"], "should not be used in conjunction with specific"),
    (["--alter", "--entity-type", "topics", "--add-config", "a=b"],
     "An entity name must be specified with --alter of topics"),
    (["--alter", "--topic", "t"], "At least one of --add-config, --add-config-file, or --delete-config must be"),
    (["--alter", "--topic", "t", "--add-config", "a"], 'all configs to be added must be in the format "key=val"'),
    (["--alter", "--topic", "t", "--add-config", "a b=c"], "Invalid character found for config key: a b"),
    (["--describe", "--broker", "one"], "must be a valid integer broker id, but it is: one"),
    (["--describe", "--entity-type", "topics", "--entity-default"],
     "--entity-default must not be specified with --describe of topics"),
])
def test_errors_exit_1(kafka, args, error):
    kafka.fails(CONFIGS, *args, error=error)


def test_no_bootstrap_server(kafka):
    kafka.fails(CONFIGS, "--describe", "--topic", "t", bootstrap=False,
                error="One of the required --bootstrap-server, --boostrap-controller, or --zookeeper arguments")


def test_add_config_parsing(tmp_path):
    def parse(add: str | None, file_text: str | None = None) -> dict[str, str]:
        path = None
        if file_text is not None:
            path = tmp_path / "add.properties"
            path.write_text(file_text)
        return configs._configs_to_add(argparse.Namespace(add_config=add, add_config_file=path and str(path)))

    # Square brackets group a value with commas (ConfigCommand.parseConfigsToBeAdded).
    assert parse("k1=v1,k2=[a,b,c],k3 = v3") == {"k1": "v1", "k2": "a,b,c", "k3": "v3"}
    assert parse("ssl.endpoint.identification.algorithm=") == {"ssl.endpoint.identification.algorithm": ""}
    assert parse(None, "a=1\nb: 2\n") == {"a": "1", "b": "2"}
    with pytest.raises(ToolError):
        parse("k1=v1=v2")
