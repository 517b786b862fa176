"""kafka-consumer-groups.sh on odradek: list, describe, reset offsets, delete offsets and
groups, with Kafka's options and fixed-width output."""

from __future__ import annotations

import threading

import pytest

from odradek.client import Admin, NewTopic, Producer
from odradek.commands.kafka_scripts.consumer_groups import UsageError, duration
from tests.commands.conftest import kafka_table
from tests.polling import wait_until

pytestmark = pytest.mark.interop

GROUPS = "kafka-consumer-groups.sh"
OFFSET_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


def fill(bootstrap: str, topic: str, counts: list[int]) -> None:
    """A topic with counts[p] records in partition p."""
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, len(counts))])
    with Producer(bootstrap, linger_ms=0) as producer:
        for p, n in enumerate(counts):
            for i in range(n):
                producer.send(topic, f"{p}-{i}".encode(), partition=p)


def offsets(kafka, group: str) -> dict[int, tuple[str, str, str]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG)."""
    rows = kafka_table(kafka.ok(GROUPS, "--describe", "--group", group).stdout)
    return {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows}


def new_offsets(stdout: str) -> dict[int, int]:
    rows = kafka_table(stdout)
    assert rows and list(rows[0]) == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in rows}


def test_empty_group_list_describe_reset_delete(kafka, topic, tmp_path):
    group = f"g-{topic}"
    fill(kafka.bootstrap, topic, [10, 4])
    kafka.ok("kafka-console-consumer.sh", "--topic", topic, "--group", group, "--from-beginning", "--max-messages",
             "14", "--consumer-property", "group.protocol=consumer")

    assert group in kafka.ok(GROUPS, "--list").stdout.splitlines()
    listed = {r["GROUP"]: r for r in kafka_table(kafka.ok(GROUPS, "--list", "--type", "--state").stdout)}
    assert listed[group] == {"GROUP": group, "TYPE": "Consumer", "STATE": "Empty"}
    assert group in {r["GROUP"] for r in kafka_table(kafka.ok(GROUPS, "--list", "--state", "empty").stdout)}
    assert group not in {r["GROUP"] for r in kafka_table(kafka.ok(GROUPS, "--list", "--state", "Stable").stdout)}
    assert group not in {r["GROUP"] for r in kafka_table(kafka.ok(GROUPS, "--list", "--type", "classic").stdout)}

    r = kafka.ok(GROUPS, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in r.stderr
    rows = kafka_table(r.stdout)
    assert list(rows[0]) == OFFSET_COLUMNS
    assert {(r["GROUP"], r["TOPIC"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) for r in rows} == \
        {(group, topic, "-", "-", "-")}
    assert offsets(kafka, group) == {0: ("10", "10", "0"), 1: ("4", "4", "0")}
    assert kafka_table(kafka.ok(GROUPS, "--describe", "--group", group, "--members").stdout) == []
    state = kafka.ok(GROUPS, "--describe", "--group", group, "--state").stdout.splitlines()
    assert state[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    host, port = kafka.bootstrap.split(":")
    assert state[2].split()[0] == group and state[2].split()[1] == f"{host}:{port}"
    assert state[2].split()[-2:] == ["Empty", "0"]

    # Without --execute nothing changes (and Kafka's warning says so).
    r = kafka.ok(GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert "WARN: No action will be performed as the --execute option is missing." in r.stderr
    assert new_offsets(r.stdout) == {0: 0, 1: 0}
    assert offsets(kafka, group)[0] == ("10", "10", "0")

    def reset(*args: str) -> dict[int, int]:
        plan = new_offsets(kafka.ok(GROUPS, "--reset-offsets", "--group", group, *args, "--execute").stdout)
        assert {p: int(c) for p, (c, _, _) in offsets(kafka, group).items() if p in plan} == plan
        return plan

    assert reset("--topic", topic, "--to-earliest") == {0: 0, 1: 0}
    assert reset("--topic", f"{topic}:0", "--shift-by", "3") == {0: 3}
    assert reset("--topic", f"{topic}:0", "--shift-by", "-5") == {0: 0}  # clamped to the log start
    assert reset("--topic", topic, "--to-offset", "7") == {0: 7, 1: 4}  # clamped to the log end
    assert reset("--all-topics", "--to-latest") == {0: 10, 1: 4}
    assert reset("--topic", topic, "--to-datetime", "2000-01-01T00:00:00.000") == {0: 0, 1: 0}
    assert reset("--topic", topic, "--to-datetime", "2999-01-01T00:00:00.000+01:00") == {0: 10, 1: 4}
    assert reset("--topic", topic, "--by-duration", "P1D") == {0: 0, 1: 0}
    assert reset("--topic", f"{topic}:1", "--to-offset", "2") == {1: 2}
    assert reset("--all-topics", "--to-current") == {0: 0, 1: 2}

    # --export writes the plan as CSV, --from-file reads it back.
    r = kafka.ok(GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "3", "--dry-run",
                 "--export")
    assert r.stdout == f"{topic},0,3\n{topic},1,3\n\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(r.stdout)
    assert new_offsets(kafka.ok(GROUPS, "--reset-offsets", "--group", group, "--from-file", str(plan),
                                "--execute").stdout) == {0: 3, 1: 3}
    assert offsets(kafka, group) == {0: ("3", "10", "7"), 1: ("3", "4", "1")}

    r = kafka.ok(GROUPS, "--delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert r.stdout.splitlines()[0] == f"Request succeed for deleting offsets with topic {topic}:1 group {group}"
    assert kafka_table("\n".join(r.stdout.splitlines()[1:])) == [{"TOPIC": topic, "PARTITION": "1",
                                                                  "STATUS": "Successful"}]
    assert set(offsets(kafka, group)) == {0}

    r = kafka.ok(GROUPS, "--delete", "--group", group)
    assert r.stdout == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    r = kafka.fails(GROUPS, "--describe", "--group", group)
    assert r.stderr == f"\nError: Consumer group '{group}' does not exist.\n"
    r = kafka.fails(GROUPS, "--delete", "--group", group)
    assert "Error: Deletion of some consumer groups failed:" in r.stderr
    assert f"* Group '{group}' could not be deleted due to: GROUP_ID_NOT_FOUND" in r.stderr


class _Member:
    """An odradek consumer-protocol member polling in a thread until stopped."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from odradek.client import Consumer

        self.consumer = Consumer(bootstrap, group_id=group, client_id="groups-test-member")
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.consumer.poll(200)
        finally:
            self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_active_group(kafka, topic):
    group = f"g-{topic}"
    fill(kafka.bootstrap, topic, [3, 2])
    member = _Member(kafka.bootstrap, group, topic)
    try:
        def members():
            rows = kafka_table(kafka.ok(GROUPS, "--describe", "--group", group, "--members", "--verbose").stdout
                               .replace("), ", "),"))
            return rows if rows and rows[0]["#PARTITIONS"] == "2" else None

        rows = wait_until(members, timeout=45, interval=0.5, what="the member to own both partitions")
        assert list(rows[0]) == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert rows[0]["CLIENT-ID"] == "groups-test-member" and rows[0]["ASSIGNMENT"] == f"{topic}(0,1)"
        member_id = rows[0]["CONSUMER-ID"]

        owners = {r["PARTITION"]: r["CONSUMER-ID"] for r in
                  kafka_table(kafka.ok(GROUPS, "--describe", "--group", group, "--offsets").stdout)}
        assert owners == {"0": member_id, "1": member_id}
        state = wait_until(lambda: [line.split() for line in kafka.ok(GROUPS, "--describe", "--group", group,
                                                                      "--state").stdout.splitlines()[2:]
                                    if line.split()[-2:] == ["Stable", "1"]], timeout=45, interval=0.5)
        assert state[0][0] == group

        r = kafka.fails(GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is " \
               "Stable." in r.stderr
        kafka.fails(GROUPS, "--delete", "--group", group, error="NON_EMPTY_GROUP")
        r = kafka.fails(GROUPS, "--delete-offsets", "--group", group, "--topic", topic)
        assert "Error: Encounter some partition level error, see the follow-up details:" in r.stderr
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in r.stdout
    finally:
        member.close()


@pytest.mark.parametrize("args, error", [
    ([], "Command must include exactly one action"),
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--describe", "--group", "g", "--members", "--state"], "takes at most one of these options"),
    (["--describe", "--group", "g", "--state", "stable"], "Option [describe] does not take a value for [state]"),
    (["--list", "--members"], "Option(s) [members] are unavailable given other options"),
    (["--list", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
    (["--delete", "--group", "g", "--topic", "t"], "does not support topic-specific offset deletion"),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--execute", "--dry-run"],
     "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-offset", "0"],
     "can't be used with option"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--dry-run"],
     "One of the reset scopes should be defined: --all-topics, --topic."),
    (["--reset-offsets", "--group", "g", "--all-topics", "--dry-run"], "requires one of the following scenarios"),
    (["--list", "--state", "sleepy"], "Invalid state list 'sleepy'. Valid states are: PreparingRebalance"),
    (["--list", "--type", "eager"], "Invalid type list 'eager'. Valid types are: Consumer, Classic, Share"),
])
def test_usage_errors_exit_1(kafka, args, error):
    r = kafka.fails(GROUPS, *args, error=error)
    assert "usage: kafka-consumer-groups.sh" in r.stderr


def test_no_bootstrap_server(kafka):
    kafka.fails(GROUPS, "--list", bootstrap=False, error='Missing required argument "[bootstrap-server]"')


def test_duration():
    assert duration("PT1H30M").total_seconds() == 5400
    assert duration("P2DT3M").total_seconds() == 2 * 86400 + 180
    assert duration("PT0.5S").total_seconds() == 0.5
    assert duration("-PT10S").total_seconds() == -10
    for bad in ("P", "PT", "1H", "PT1X"):
        with pytest.raises(UsageError):
            duration(bad)


def test_offsets_of_a_deleted_topic(kafka, topic):
    group = f"g-{topic}"
    fill(kafka.bootstrap, topic, [2])
    kafka.ok("kafka-console-consumer.sh", "--topic", topic, "--group", group, "--from-beginning", "--max-messages",
             "2", "--consumer-property", "group.protocol=consumer")
    kafka.ok("kafka-topics.sh", "--delete", "--topic", topic)
    # The committed offset stays; the log end is unknown.
    assert offsets(kafka, group) == {0: ("2", "-", "-")}
