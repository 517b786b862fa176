"""The client commands (`odradek topics|produce|consume|groups`) as a user runs them: real
subprocesses against the session broker, output parsed as a script would parse it."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import threading

import pytest

from tests.conftest import ODRADEK, ROOT
from tests.polling import wait_until

pytestmark = pytest.mark.interop


def cli(broker, *args: str, input: str | None = None, env_bootstrap: bool = False,
        timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}  # wide enough that rich never wraps a table
    env.pop("ODRADEK_BOOTSTRAP", None)
    cmd = [*ODRADEK, *args]
    if env_bootstrap:
        env["ODRADEK_BOOTSTRAP"] = broker.bootstrap
    else:
        cmd += ["--bootstrap-server", broker.bootstrap]
    return subprocess.run(cmd, check=False, input=input, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def ok(broker, *args: str, **kw) -> subprocess.CompletedProcess:
    r = cli(broker, *args, **kw)
    assert r.returncode == 0, f"{args}: rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def fails(broker, *args: str, rc: int = 1, error: str | None = None, **kw) -> subprocess.CompletedProcess:
    r = cli(broker, *args, **kw)
    assert r.returncode == rc, f"{args}: rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    if error is not None:
        assert f"odradek: error: {error}" in r.stderr, r.stderr
    return r


def table(stdout: str) -> list[dict[str, str]]:
    """Rows of a space-separated table (cells never contain spaces; empty ones are '-')."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    rows = [line.split() for line in lines[1:]]
    assert all(len(r) == len(header) for r in rows), stdout
    return [dict(zip(header, r)) for r in rows]


def describe(broker, group: str, *flags: str) -> list[dict[str, str]]:
    return table(ok(broker, "groups", "describe", group, *flags).stdout)


def offsets(broker, group: str) -> dict[int, tuple[str, str, str]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG)."""
    return {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"])
            for r in describe(broker, group, "--offsets") if r["PARTITION"] != "-"}


wait_for = functools.partial(wait_until, timeout=45.0, interval=0.5)


# ---------------------------------------------------------------------- topics


def test_topic_create_list_describe_add_partitions_delete(broker, topic_name):
    r = ok(broker, "topics", "create", topic_name, "--partitions", "2", "--replication-factor", "1",
           "--config", "retention.ms=60000")
    assert r.stdout == f"Created topic {topic_name}.\n"
    fails(broker, "topics", "create", topic_name, error="TOPIC_ALREADY_EXISTS")
    ok(broker, "topics", "create", topic_name, "--if-not-exists")

    listed = ok(broker, "topics", "list", env_bootstrap=True).stdout.splitlines()  # ODRADEK_BOOTSTRAP honoured
    assert topic_name in listed

    rows = table(ok(broker, "topics", "describe", topic_name).stdout)
    assert [(r["TOPIC"], r["PARTITION"]) for r in rows] == [(topic_name, "0"), (topic_name, "1")]
    topic_id = rows[0]["TOPIC-ID"]
    assert len(topic_id) == 22 and all(r["TOPIC-ID"] == topic_id for r in rows)  # Kafka's base64 Uuid
    for r in rows:
        assert r["LEADER"].isdigit() and r["REPLICAS"] == r["ISR"] == r["LEADER"]

    r = ok(broker, "topics", "add-partitions", topic_name, "--partitions", "4")
    assert r.stdout == f"Topic {topic_name} now has 4 partitions.\n"
    rows = table(ok(broker, "topics", "describe", topic_name).stdout)
    assert [r["PARTITION"] for r in rows] == ["0", "1", "2", "3"]
    assert {r["TOPIC-ID"] for r in rows} == {topic_id}
    fails(broker, "topics", "add-partitions", topic_name, "--partitions", "3", error="INVALID_PARTITIONS")

    # describe with no names covers every topic
    everything = table(ok(broker, "topics", "describe").stdout)
    assert sum(r["TOPIC"] == topic_name for r in everything) == 4

    r = ok(broker, "topics", "delete", topic_name)
    assert r.stdout == f"Deleted topic {topic_name}.\n"
    assert topic_name not in ok(broker, "topics", "list").stdout.splitlines()
    fails(broker, "topics", "delete", topic_name, error="UNKNOWN_TOPIC_OR_PARTITION")
    ok(broker, "topics", "delete", topic_name, "--if-exists")


# ---------------------------------------------------------------------- produce / consume


def test_produce_keyed_lines_and_consume_them_back(broker, topic_name):
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    lines = "k1:v1\nk2:v2:with-colon\n:empty-key\nk4:\n"
    r = ok(broker, "produce", topic_name, "--key-separator", ":", "--partition", "0", input=lines)
    assert r.stdout == ""
    assert r.stderr.strip().splitlines()[-1] == f"odradek: produced 4 record(s) to {topic_name}, 0 error(s)"

    r = ok(broker, "consume", topic_name, "--from-beginning", "--max-messages", "4", "--print-key",
           "--key-separator", "=")
    assert r.stdout == "k1=v1\nk2=v2:with-colon\n=empty-key\nk4=\n"
    assert "Processed a total of 4 messages" in r.stderr

    # Without --key-separator a line is the value and the key is null.
    ok(broker, "produce", topic_name, "--partition", "0", input="plain\r\n")
    r = ok(broker, "consume", topic_name, "--partition", "0", "--offset", "4", "--max-messages", "1", "--print-key")
    assert r.stdout == "null\tplain\n"

    # Compression, acks and linger on the other partition; offsets and partitions printed.
    ok(broker, "produce", topic_name, "--partition", "1", "--compression", "gzip", "--acks", "1", "--linger-ms", "0",
       input="p1a\np1b\n")
    r = ok(broker, "consume", topic_name, "--partition", "1", "--offset", "earliest", "--max-messages", "2",
           "--print-partition", "--print-offset")
    assert r.stdout == "Partition:1\tOffset:0\tp1a\nPartition:1\tOffset:1\tp1b\n"
    r = ok(broker, "consume", topic_name, "--partition", "1", "--offset", "1", "--timeout-ms", "1500")
    assert r.stdout == "p1b\n"

    # No group: every partition, read until idle.
    r = ok(broker, "consume", topic_name, "--from-beginning", "--timeout-ms", "1500")
    assert sorted(r.stdout.splitlines()) == sorted(["v1", "v2:with-colon", "empty-key", "", "plain", "p1a", "p1b"])
    assert "Processed a total of 7 messages" in r.stderr
    # ... and without --from-beginning it starts at the end.
    r = ok(broker, "consume", topic_name, "--timeout-ms", "500")
    assert r.stdout == "" and "Processed a total of 0 messages" in r.stderr

    # A line without the separator is a failed record: the rest is sent, the exit status says so.
    r = fails(broker, "produce", topic_name, "--key-separator", ":", input="a:1\nno-separator\n")
    assert "odradek: error: line 2: no key separator ':'" in r.stderr
    assert f"produced 1 record(s) to {topic_name}, 1 error(s)" in r.stderr


# ---------------------------------------------------------------------- groups: offsets and lag


def test_group_offsets_and_lag(broker, topic_name):
    group = f"g-{topic_name}"
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    ok(broker, "produce", topic_name, "--partition", "0", input="a\nb\nc\nd\n")
    ok(broker, "produce", topic_name, "--partition", "1", input="e\nf\n")

    r = ok(broker, "consume", topic_name, "--group", group, "--from-beginning", "--max-messages", "6")
    assert sorted(r.stdout.split()) == ["a", "b", "c", "d", "e", "f"]

    r = ok(broker, "groups", "describe", group)  # --offsets is the default view
    assert f"Consumer group '{group}' has no active members." in r.stderr
    rows = table(r.stdout)
    assert list(rows[0]) == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                             "HOST", "CLIENT-ID"]
    assert {(r["GROUP"], r["TOPIC"], r["CONSUMER-ID"]) for r in rows} == {(group, topic_name, "-")}
    assert offsets(broker, group) == {0: ("4", "4", "0"), 1: ("2", "2", "0")}

    ok(broker, "produce", topic_name, "--partition", "1", input="g\nh\ni\n")
    assert offsets(broker, group) == {0: ("4", "4", "0"), 1: ("2", "5", "3")}

    # The group resumes from its committed offsets and commits what it printed.
    r = ok(broker, "consume", topic_name, "--group", group, "--max-messages", "3")
    assert r.stdout == "g\nh\ni\n"
    assert offsets(broker, group) == {0: ("4", "4", "0"), 1: ("5", "5", "0")}

    # --max-messages stops exactly there: the committed position is what was printed.
    ok(broker, "produce", topic_name, "--partition", "0", input="j\nk\nl\n")
    assert ok(broker, "consume", topic_name, "--group", group, "--max-messages", "1").stdout == "j\n"
    assert offsets(broker, group)[0] == ("5", "7", "2")

    state = describe(broker, group, "--state")
    assert state == [{"GROUP": group, "TYPE": "consumer", "STATE": "Empty", "ASSIGNOR": state[0]["ASSIGNOR"],
                      "EPOCH": state[0]["EPOCH"], "ASSIGNMENT-EPOCH": state[0]["ASSIGNMENT-EPOCH"], "#MEMBERS": "0"}]
    assert state[0]["EPOCH"].isdigit()


# ---------------------------------------------------------------------- groups: members


class _PollingConsumer:
    """An odradek consumer-protocol member polling in a thread until stopped."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from odradek.client import Consumer

        self.consumer = Consumer(bootstrap, group_id=group, client_id="cli-test-member")
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.consumer.poll(200)
        except BaseException as exc:  # noqa: BLE001 - re-raised by close() on the test's thread
            self.error = exc
        finally:
            self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.error is not None:
            raise self.error


def _members(broker, group: str) -> list[dict[str, str]]:
    r = cli(broker, "groups", "describe", group, "--members")
    return table(r.stdout) if r.returncode == 0 and r.stdout.strip() else []


def test_consumer_group_members_with_current_and_target_assignment(broker, topic_name):
    group = f"g-{topic_name}"
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    member = _PollingConsumer(broker.bootstrap, group, topic_name)
    env = {**os.environ, "COLUMNS": "200"}
    console = subprocess.Popen([*ODRADEK, "consume", topic_name, "--group", group, "--bootstrap-server",
                                broker.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=ROOT)
    try:
        seen: list = []

        def settled(n: int):
            rows = _members(broker, group)
            seen[:] = rows
            done = len(rows) == n and all(r["ASSIGNMENT"] == r["TARGET-ASSIGNMENT"] != "-" for r in rows)
            return rows if done else None

        rows = wait_for(lambda: settled(2), what=lambda: seen)
        assert list(rows[0]) == ["GROUP", "MEMBER-ID", "INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                 "ASSIGNMENT", "TARGET-ASSIGNMENT", "MEMBER-EPOCH"]
        assert sorted(r["CLIENT-ID"] for r in rows) == ["cli-test-member", "odradek-console-consumer"]
        assert sorted(r["ASSIGNMENT"] for r in rows) == [f"{topic_name}(0)", f"{topic_name}(1)"]
        for r in rows:
            assert r["#PARTITIONS"] == "1" and r["INSTANCE-ID"] == "-" and r["HOST"].endswith("127.0.0.1")
            assert int(r["MEMBER-EPOCH"]) > 0
        members = {r["MEMBER-ID"] for r in rows}

        state = wait_for(lambda: [s for s in describe(broker, group, "--state") if s["STATE"] == "Stable"])
        assert state[0]["TYPE"] == "consumer" and state[0]["#MEMBERS"] == "2" and state[0]["ASSIGNOR"] != "-"
        assert int(state[0]["EPOCH"]) >= 2 and state[0]["ASSIGNMENT-EPOCH"] == state[0]["EPOCH"]

        # The offsets view names each partition's owner.
        owners = {r["PARTITION"]: r["CONSUMER-ID"] for r in describe(broker, group, "--offsets")}
        assert set(owners) == {"0", "1"} and set(owners.values()) == members

        # An active group: no offset reset, no deletion.
        fails(broker, "groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", error="NON_EMPTY_GROUP")
        fails(broker, "groups", "delete", group, error="NON_EMPTY_GROUP")

        # SIGTERM stops the console consumer cleanly: it leaves, and the other member takes over.
        console.send_signal(signal.SIGTERM)
        _, err = console.communicate(timeout=30)
        assert console.returncode == 0, err
        assert "Processed a total of 0 messages" in err and "Traceback" not in err
        rows = wait_for(lambda: settled(1), what=lambda: seen)
        assert rows[0]["CLIENT-ID"] == "cli-test-member" and rows[0]["#PARTITIONS"] == "2"
        assert rows[0]["ASSIGNMENT"] == f"{topic_name}(0,1)"
    finally:
        if console.poll() is None:
            console.kill()
            console.communicate()
        member.close()

    listed = table(ok(broker, "groups", "list", "--type", "consumer").stdout)
    assert [g["TYPE"] for g in listed if g["GROUP"] == group] == ["consumer"]


def test_classic_group_from_librdkafka(broker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    group = f"g-{topic_name}"
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest"})  # group.protocol: classic (default)
    try:
        consumer.subscribe([topic_name])

        def assigned():
            consumer.poll(0.2)
            return len(consumer.assignment()) == 2

        wait_for(assigned, interval=0)
        stable = wait_for(lambda: [g for g in table(ok(broker, "groups", "list", "--type", "classic").stdout)
                                   if g["GROUP"] == group and g["STATE"] == "Stable"])
        assert stable == [{"GROUP": group, "TYPE": "classic", "STATE": "Stable", "PROTOCOL-TYPE": "consumer"}]
        assert group not in {g["GROUP"] for g in table(ok(broker, "groups", "list", "--type", "consumer").stdout)}
        assert group in {g["GROUP"] for g in table(ok(broker, "groups", "list", "--state", "stable,empty").stdout)}

        rows = describe(broker, group, "--members")
        assert list(rows[0]) == ["GROUP", "MEMBER-ID", "INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert len(rows) == 1
        assert rows[0]["CLIENT-ID"] == "rdkafka" and rows[0]["#PARTITIONS"] == "2"
        assert rows[0]["ASSIGNMENT"] == f"{topic_name}(0,1)"

        state = describe(broker, group, "--state")
        assert state == [{"GROUP": group, "TYPE": "classic", "STATE": "Stable", "ASSIGNOR": "range", "EPOCH": "-",
                          "ASSIGNMENT-EPOCH": "-", "#MEMBERS": "1"}]
        fails(broker, "groups", "describe", group, "--type", "consumer", error="GROUP_ID_NOT_FOUND")
        assert describe(broker, group, "--state", "--type", "classic")[0]["TYPE"] == "classic"
    finally:
        consumer.close()


def test_remove_static_member(broker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    group = f"g-{topic_name}"
    ok(broker, "topics", "create", topic_name, "--partitions", "1")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                         "group.instance.id": "static-1"})
    try:
        consumer.subscribe([topic_name])

        def assigned():
            consumer.poll(0.2)
            return bool(consumer.assignment())

        wait_for(assigned, interval=0)
        rows = wait_for(lambda: describe(broker, group, "--members"))
        assert [r["INSTANCE-ID"] for r in rows] == ["static-1"]
        r = ok(broker, "groups", "remove-members", group, "--instance-id", "static-1")
        assert r.stdout == f"Removed 1 member(s) from group {group}: static-1.\n"
        assert describe(broker, group, "--members") == []
        fails(broker, "groups", "remove-members", group, "--instance-id", "static-1", error="UNKNOWN_MEMBER_ID")
    finally:
        consumer.close()


def test_consume_with_classic_group_protocol(broker, topic_name):
    group = f"g-{topic_name}"
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    ok(broker, "produce", topic_name, "--key-separator", ":", input="a:1\nb:2\nc:3\n")
    r = ok(broker, "consume", topic_name, "--group", group, "--group-protocol", "classic", "--from-beginning",
           "--max-messages", "3")
    assert sorted(r.stdout.split()) == ["1", "2", "3"]
    assert describe(broker, group, "--state")[0]["TYPE"] == "classic"
    assert sum(int(c) for c, _, _ in offsets(broker, group).values()) == 3


# ---------------------------------------------------------------------- groups: reset, delete


def test_reset_offsets_dry_run_then_execute(broker, topic_name):
    group = f"g-{topic_name}"
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    ok(broker, "produce", topic_name, "--partition", "0", input="".join(f"{i}\n" for i in range(10)))
    ok(broker, "produce", topic_name, "--partition", "1", input="".join(f"{i}\n" for i in range(4)))
    ok(broker, "consume", topic_name, "--group", group, "--from-beginning", "--max-messages", "14")
    assert offsets(broker, group) == {0: ("10", "10", "0"), 1: ("4", "4", "0")}

    def plan(*args: str) -> dict[int, tuple[str, str]]:
        r = ok(broker, "groups", "reset-offsets", group, *args)
        assert ("dry run" in r.stderr) == ("--execute" not in args)
        rows = table(r.stdout)
        assert list(rows[0]) == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
        return {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["NEW-OFFSET"]) for r in rows}

    def current() -> dict[int, str]:
        return {p: c for p, (c, _, _) in offsets(broker, group).items()}

    # dry run: the plan is printed, nothing changes
    assert plan("--topic", topic_name, "--to-earliest") == {0: ("10", "0"), 1: ("4", "0")}
    assert current() == {0: "10", 1: "4"}
    # --execute applies it
    assert plan("--topic", topic_name, "--to-earliest", "--execute") == {0: ("10", "0"), 1: ("4", "0")}
    assert offsets(broker, group) == {0: ("0", "10", "10"), 1: ("0", "4", "4")}

    assert plan("--topic", f"{topic_name}:0", "--shift-by", "3", "--execute") == {0: ("0", "3")}
    assert plan("--topic", f"{topic_name}:0", "--shift-by", "-5", "--execute") == {0: ("3", "0")}  # clamped
    assert plan("--topic", topic_name, "--to-offset", "7", "--execute") == {0: ("0", "7"), 1: ("0", "4")}  # clamped
    assert plan("--all-topics", "--to-latest", "--execute") == {0: ("7", "10"), 1: ("4", "4")}
    assert plan("--topic", topic_name, "--to-datetime", "2000-01-01T00:00:00Z", "--execute") == \
        {0: ("10", "0"), 1: ("4", "0")}
    assert plan("--topic", f"{topic_name}:0,1", "--to-datetime", "2999-01-01T00:00:00", "--execute") == \
        {0: ("0", "10"), 1: ("0", "4")}
    assert current() == {0: "10", 1: "4"}

    # After a reset the group reads from the new offsets.
    plan("--topic", f"{topic_name}:1", "--to-offset", "2", "--execute")
    assert ok(broker, "consume", topic_name, "--group", group, "--max-messages", "2").stdout == "2\n3\n"

    fails(broker, "groups", "reset-offsets", group, "--topic", topic_name, rc=2)  # no --to-*
    fails(broker, "groups", "reset-offsets", group, "--to-earliest", rc=2)  # no --topic/--all-topics
    fails(broker, "groups", "reset-offsets", group, "--topic", f"{topic_name}:9", "--to-earliest",
          error="UNKNOWN_TOPIC_OR_PARTITION")

    r = ok(broker, "groups", "delete-offsets", group, "--topic", f"{topic_name}:1")
    assert table(r.stdout) == [{"TOPIC": topic_name, "PARTITION": "1", "STATUS": "Successful"}]
    assert set(offsets(broker, group)) == {0}

    assert ok(broker, "groups", "delete", group).stdout == f"Deleted group {group}.\n"
    fails(broker, "groups", "describe", group, error="GROUP_ID_NOT_FOUND")
    assert group not in {g["GROUP"] for g in table(ok(broker, "groups", "list").stdout)}


# ---------------------------------------------------------------------- errors


def test_errors_exit_1_with_the_kafka_error_name(broker, topic_name):
    missing = f"missing-{topic_name}"
    r = fails(broker, "topics", "describe", missing, error="UNKNOWN_TOPIC_OR_PARTITION")
    assert r.stderr.startswith("odradek: error: UNKNOWN_TOPIC_OR_PARTITION:") and r.stdout == ""
    fails(broker, "produce", missing, input="x\n", error="UNKNOWN_TOPIC_OR_PARTITION")
    fails(broker, "consume", missing, "--timeout-ms", "100", error="UNKNOWN_TOPIC_OR_PARTITION")
    fails(broker, "topics", "delete", missing, error="UNKNOWN_TOPIC_OR_PARTITION")
    fails(broker, "groups", "describe", f"g-{missing}", error="GROUP_ID_NOT_FOUND")
    fails(broker, "groups", "delete", f"g-{missing}", error="GROUP_ID_NOT_FOUND")
    ok(broker, "topics", "create", topic_name, "--partitions", "1")
    fails(broker, "produce", topic_name, "--partition", "1", input="x\n", error="UNKNOWN_TOPIC_OR_PARTITION")
    fails(broker, "consume", topic_name, "--partition", "3", error="UNKNOWN_TOPIC_OR_PARTITION")


@pytest.mark.parametrize("args", [
    ["topics"],
    ["topics", "frobnicate"],
    ["topics", "create"],
    ["topics", "create", "t", "--partitions", "0"],
    ["topics", "create", "t", "--config", "no-equals-sign"],
    ["topics", "add-partitions", "t"],
    ["produce", "t", "--acks", "2"],
    ["produce", "t", "--compression", "brotli"],
    ["consume", "t", "--offset", "5"],
    ["consume", "t", "--partition", "0", "--offset", "soon"],
    ["consume", "t", "--max-messages", "0"],
    ["consume", "t", "--group-protocol", "eager"],
    ["groups", "describe"],
    ["groups", "describe", "g", "--members", "--state"],
    ["groups", "list", "--type", "share"],
    ["groups", "reset-offsets", "g", "--topic", "t:x", "--to-earliest"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
    ["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"],
    ["groups", "delete-offsets", "g"],
])
def test_bad_arguments_exit_2(broker, args):
    r = cli(broker, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "usage:" in r.stderr and "Traceback" not in r.stderr


def test_bad_bootstrap_server_exits_2():
    r = subprocess.run([*ODRADEK, "topics", "list", "--bootstrap-server", "no-port"], check=False,
                       capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr


def test_unreachable_broker_exits_1_without_traceback():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([*ODRADEK, "topics", "list", "--bootstrap-server", f"127.0.0.1:{port}"], check=False,
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("odradek: error: NETWORK_EXCEPTION: cannot connect to 127.0.0.1:")
