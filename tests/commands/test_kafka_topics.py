"""kafka-topics.sh on odradek: Kafka's options, output and exit status, as librdkafka's
test suite and users' scripts drive it."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

pytestmark = pytest.mark.interop

TOPICS = "kafka-topics.sh"


def describe(kafka, *args: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(topic lines, partition lines) of --describe, each as a dict of its `Key: value` fields."""
    r = kafka.ok(TOPICS, "--describe", *args)
    topics, partitions = [], []
    for line in r.stdout.splitlines():
        fields = dict(f.split(": ", 1) if ": " in f else (f.rstrip(":"), "") for f in line.strip("\t").split("\t"))
        (partitions if line.startswith("\t") else topics).append(fields)
    return topics, partitions


def test_create_list_describe_alter_delete(kafka, topic):
    r = kafka.ok(TOPICS, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1",
                 "--config", "retention.ms=60000", "--config", "cleanup.policy = compact")
    assert r.stdout == f"Created topic {topic}.\n"
    r = kafka.fails(TOPICS, "--create", "--topic", topic, "--partitions", "2")
    assert r.stderr == f"Error while executing topic command : Topic '{topic}' already exists.\n"
    assert kafka.ok(TOPICS, "--create", "--topic", topic, "--if-not-exists").stdout == ""

    assert topic in kafka.ok(TOPICS, "--list").stdout.splitlines()
    assert kafka.ok(TOPICS, "--list", "--topic", topic).stdout == f"{topic}\n"
    assert all(not t.startswith("__") for t in kafka.ok(TOPICS, "--list", "--exclude-internal").stdout.split())

    topics, partitions = describe(kafka, "--topic", topic)
    assert len(topics) == 1
    t = topics[0]
    assert (t["Topic"], t["PartitionCount"], t["ReplicationFactor"]) == (topic, "2", "1")
    assert len(t["TopicId"]) == 22  # Kafka's Uuid.toString()
    assert sorted(t["Configs"].split(",")) == ["cleanup.policy=compact", "retention.ms=60000"]
    assert [p["Partition"] for p in partitions] == ["0", "1"]
    for p in partitions:
        assert p["Topic"] == topic and p["Leader"].isdigit() and p["Replicas"] == p["Isr"] == p["Leader"]
        assert p["Elr"] == p["LastKnownElr"] == "N/A"

    # --alter grows the topic and prints nothing; shrinking is the broker's error.
    assert kafka.ok(TOPICS, "--alter", "--topic", topic, "--partitions", "4").stdout == ""
    assert describe(kafka, "--topic", topic)[0][0]["PartitionCount"] == "4"
    r = kafka.fails(TOPICS, "--alter", "--topic", topic, "--partitions", "3")
    assert r.stderr.startswith("Error while executing topic command : ")

    missing = f"missing-{topic}"
    for action in (["--alter", "--partitions", "2"], ["--delete"], ["--describe"]):
        r = kafka.fails(TOPICS, *action, "--topic", missing)
        assert r.stderr == f"Error while executing topic command : Topic '{missing}' does not exist as expected\n"
        assert kafka.ok(TOPICS, *action, "--topic", missing, "--if-exists").stdout == ""

    assert kafka.ok(TOPICS, "--delete", "--topic", topic).stdout == ""
    assert topic not in kafka.ok(TOPICS, "--list").stdout.splitlines()
    kafka.fails(TOPICS, "--delete", "--topic", topic, error="does not exist as expected")


def test_topic_is_a_regex_except_for_create(kafka, topic):
    names = [f"{topic}-a", f"{topic}-b", f"{topic}-c"]
    for name in names:
        kafka.ok(TOPICS, "--create", "--topic", name, "--partitions", "1")
    prefix = re.escape(topic)
    assert kafka.ok(TOPICS, "--list", "--topic", f"{prefix}-.*").stdout.split() == names
    # Kafka's TopicFilter: ',' means '|', and a name must match as a whole.
    assert kafka.ok(TOPICS, "--list", "--topic", f"{prefix}-a,{prefix}-c").stdout.split() == [names[0], names[2]]
    assert kafka.ok(TOPICS, "--list", "--topic", prefix).stdout == "\n"
    topics, partitions = describe(kafka, "--topic", f"{prefix}-[ab]")
    assert [t["Topic"] for t in topics] == names[:2] and len(partitions) == 2
    kafka.ok(TOPICS, "--alter", "--topic", f"{prefix}-[bc]", "--partitions", "2")
    assert [t["PartitionCount"] for t in describe(kafka, "--topic", f"{prefix}-.*")[0]] == ["1", "2", "2"]
    kafka.ok(TOPICS, "--delete", "--topic", f"{prefix}-.*")
    assert kafka.ok(TOPICS, "--list", "--topic", f"{prefix}-.*").stdout == "\n"


def test_librdkafka_command_lines(kafka_path, broker, topic):
    """The command lines librdkafka's tests/test.c hands to system(), with no PATH."""

    def system(args: str) -> None:
        cmd = f"{kafka_path}/bin/kafka-topics.sh --bootstrap-server {broker.bootstrap} {args}"
        r = subprocess.run(["/bin/sh", "-c", cmd], env={}, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, (cmd, r.stdout, r.stderr)

    # test_create_topic_sh, 0052-msg_timestamps, 0045-subscribe_update, test_delete_topic_sh
    system(f'--create --topic "{topic}" --replication-factor 1 --partitions 1 '
           "--config message.timestamp.type=LogAppendTime")
    system(f"--alter --topic {topic} --partitions 4")
    system(f'--delete --topic "{topic}" ')


def test_describe_filters_and_topic_id(kafka, topic):
    plain, tuned = f"{topic}-plain", f"{topic}-tuned"
    kafka.ok(TOPICS, "--create", "--topic", plain, "--partitions", "2")
    kafka.ok(TOPICS, "--create", "--topic", tuned, "--partitions", "1", "--config", "retention.ms=1000")
    pattern = f"{re.escape(topic)}-.*"
    topics, partitions = describe(kafka, "--topic", pattern, "--topics-with-overrides")
    assert [t["Topic"] for t in topics] == [tuned] and partitions == []
    # One broker: every partition is fully replicated, with one replica in sync (min.insync.replicas=1).
    assert describe(kafka, "--topic", pattern, "--under-replicated-partitions") == ([], [])
    assert describe(kafka, "--topic", pattern, "--unavailable-partitions") == ([], [])
    topics, partitions = describe(kafka, "--topic", pattern, "--at-min-isr-partitions")
    assert topics == [] and len(partitions) == 3

    topic_id = describe(kafka, "--topic", plain)[0][0]["TopicId"]
    topics, partitions = describe(kafka, "--topic-id", topic_id)
    assert [t["Topic"] for t in topics] == [plain] and len(partitions) == 2
    kafka.fails(TOPICS, "--describe", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ", error="does not exist as expected")


def test_replica_assignment(kafka, topic):
    kafka.ok(TOPICS, "--create", "--topic", topic, "--partitions", "1")
    node = describe(kafka, "--topic", topic)[1][0]["Leader"]
    placed = f"{topic}-placed"
    kafka.ok(TOPICS, "--create", "--topic", placed, "--replica-assignment", f"{node},{node}")
    assert describe(kafka, "--topic", placed)[0][0]["PartitionCount"] == "2"
    kafka.ok(TOPICS, "--alter", "--topic", placed, "--partitions", "3", "--replica-assignment",
             f"{node},{node},{node}")
    assert [p["Replicas"] for p in describe(kafka, "--topic", placed)[1]] == [node] * 3
    kafka.fails(TOPICS, "--create", "--topic", f"{placed}-2", "--replica-assignment", f"{node}:{node}",
                error="Partition replica lists may not contain duplicate entries")


def test_command_config(kafka, topic, tmp_path):
    props = tmp_path / "admin.properties"
    props.write_text("# Java properties\nclient.id=from-command-config\nrequest.timeout.ms: 20000\n"
                     "buffer.memory=1\n")
    r = kafka.ok(TOPICS, "--command-config", str(props), "--create", "--topic", topic)
    assert r.stdout == f"Created topic {topic}.\n"
    assert "ignoring admin properties odradek's client does not support: buffer.memory" in r.stderr
    # Security properties reach the client; SASL without credentials is refused before connecting.
    props.write_text("security.protocol=SASL_SSL\n")
    kafka.fails(TOPICS, "--command-config", str(props), "--list", error="needs sasl.username and sasl.password")
    kafka.fails(TOPICS, "--command-config", str(props) + ".missing", "--list", error="could not read it")


@pytest.mark.parametrize("args, error", [
    ([], "Command must include exactly one action"),
    (["--list", "--describe"], "Command must include exactly one action"),
    (["--create"], 'Missing required argument "[topic]"'),
    (["--alter", "--topic", "t"], 'Missing required argument "[partitions]"'),
    (["--alter", "--topic", "t", "--partitions", "2", "--config", "a=b"], "the kafka-configs tool can be used"),
    (["--list", "--partitions", "3"], 'Option "[partitions]" can\'t be used with option "[list]"'),
    (["--alter", "--topic", "t", "--partitions", "2", "--replication-factor", "1"],
     'Option "[replication-factor]" can\'t be used with option "[alter]"'),
    (["--delete", "--topic", "t", "--if-not-exists"], 'Option "[if-not-exists]" can\'t be used with option "[delete]"'),
    (["--create", "--topic", "t", "--partitions", "1", "--replica-assignment", "1"],
     'Option "[replica-assignment]" can\'t be used with option "[partitions]"'),
    (["--describe", "--under-replicated-partitions", "--topics-with-overrides"], "can't be used with option"),
    (["--list", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--create", "--topic", "t", "--partitions", "x"], "invalid int value"),
])
def test_usage_errors_exit_1(kafka, args, error):
    r = kafka.fails(TOPICS, *args, error=error)
    assert "usage: kafka-topics.sh" in r.stderr


def test_errors_in_values_exit_1(kafka):
    kafka.fails(TOPICS, "--list", bootstrap=False, error="--bootstrap-server must be specified")
    kafka.fails(TOPICS, "--create", "--topic", "t", "--config", "retention.ms", error='all configs to be added must '
                'be in the format "key=val"')
    kafka.fails(TOPICS, "--create", "--topic", "t", "--partitions", "0", error="The partitions must be greater than 0")
    kafka.fails(TOPICS, "--create", "--topic", "t", "--replication-factor", "0",
                error="The replication factor must be between 1 and 32767 inclusive")
    kafka.fails(TOPICS, "--list", "--topic", "(", error="is an invalid regex")
    r = kafka.fails(TOPICS, "--create", "--topic", "a.b_c", "--partitions", "0")
    assert r.stdout.startswith("WARNING: Due to limitations in metric names, topics with a period ('.') or "
                               "underscore ('_') could collide.")
    r = kafka.ok(TOPICS, "--version", bootstrap=False)
    assert r.stdout.startswith("4.0.0 (odradek ")
    assert os.environ.get("PATH")  # the scripts ran without it; the test process keeps its own
