"""Interop: confluent-kafka (librdkafka) consumer groups with `group.protocol=consumer` (KIP-848).

Real librdkafka consumers subscribe against a real `odradek broker` process on 127.0.0.1,
which runs with short heartbeat and session timeouts so that rebalances and session
expiries take seconds rather than minutes. Consumers that share a test are polled
round-robin from the test's thread: librdkafka runs rebalance callbacks inside poll(), so
every callback of every consumer is recorded, in order, by one thread (`Journal`), and
ownership of a partition is the interval from the assign callback to the revoke or lost
callback. librdkafka's background thread keeps heartbeating whether or not it is polled,
so a consumer that must die without leaving runs in a subprocess that is SIGKILLed.
"""

from __future__ import annotations

import itertools
import json
import math
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.interop

TIMEOUT = 30.0  # seconds, for any single admin call / flush
HEARTBEAT_INTERVAL_MS = 200
SESSION_TIMEOUT_MS = 3000
MIN_SESSION_TIMEOUT_MS = 1000
GROUP_OPTS = [
    "-o", f"group.consumer.heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}",
    "-o", "group.consumer.min.heartbeat.interval.ms=100",
    "-o", f"group.consumer.session.timeout.ms={SESSION_TIMEOUT_MS}",
    "-o", f"group.consumer.min.session.timeout.ms={MIN_SESSION_TIMEOUT_MS}",
]
POLL_S = 0.02  # per consumer per round-robin round: ten consumers make a round of at most 0.2 s


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def gbroker(broker_factory):
    """A broker of its own with fast group timeouts; its log must show no error afterwards."""
    b = broker_factory("data", extra=GROUP_OPTS)
    yield b
    assert_clean_log(b)


def assert_clean_log(b) -> None:
    log = b.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, f"broker logged errors:\n{log[-3000:]}"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(adm: AdminClient, name: str, partitions: int) -> None:
    fut = adm.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name]
    assert fut.result(TIMEOUT) is None


def admin_error(fut) -> KafkaError:
    """The KafkaError a failed admin future raises (fails the test if it succeeds)."""
    with pytest.raises(KafkaException) as info:
        fut.result(TIMEOUT)
    err = info.value.args[0]
    assert isinstance(err, KafkaError), err
    return err


def group_conf(bootstrap: str, group: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }
    conf.update(extra)
    return conf


def make_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all"})


def produce_keyed(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "k") -> dict:
    """`per_partition` records on each partition; returns {(partition, offset): key}."""
    producer = make_producer(bootstrap)
    reports: dict[tuple[int, int], bytes] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports[(msg.partition(), msg.offset())] = msg.key()

    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, key=f"{tag}-{p}-{i}".encode(), value=b"v", partition=p, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT) == 0
    assert not errors, errors[:3]
    assert len(reports) == partitions * per_partition
    return reports


def describe_group(adm: AdminClient, group: str):
    return adm.describe_consumer_groups([group], request_timeout=10)[group].result(TIMEOUT)


def described_assignment(desc) -> dict[str, set[tuple[str, int]]]:
    return {m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} for m in desc.members}


def tps(topic: str, partitions) -> set[tuple[str, int]]:
    return {(topic, p) for p in partitions}


class Journal:
    """Every rebalance callback of the consumers of one test, in the order they ran.

    All callbacks run on the test's thread (inside poll() or close()), so the order here is
    the real order. `owner` is who holds each partition right now; handing a partition to a
    consumer while another still holds it is a violation, as is consuming a record of a
    partition the consumer does not hold."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, str, list[tuple[str, int]]]] = []
        self.owner: dict[tuple[str, int], int] = {}
        self.violations: list[str] = []

    def record(self, idx: int, kind: str, parts: list[tuple[str, int]]) -> None:
        t = time.monotonic()
        self.events.append((t, idx, kind, sorted(parts)))
        for tp in parts:
            holder = self.owner.get(tp)
            if kind == "assign":
                if holder is not None:
                    self.violations.append(f"{t:.3f}: consumer {idx} assigned {tp} still held by consumer {holder}")
                self.owner[tp] = idx
            elif holder != idx:
                self.violations.append(f"{t:.3f}: consumer {idx} {kind} {tp} held by {holder}")
            else:
                del self.owner[tp]

    def since(self, t: float, idx: int | None = None) -> list:
        return [e for e in self.events if e[0] >= t and (idx is None or e[1] == idx)]

    def intervals(self) -> list[tuple[tuple[str, int], int, float, float]]:
        """(partition, consumer, from, to): from an assign callback to its revoke/lost callback."""
        opened: dict[tuple[int, tuple[str, int]], float] = {}
        out = []
        for t, idx, kind, parts in self.events:
            for tp in parts:
                if kind == "assign":
                    opened[(idx, tp)] = t
                elif (idx, tp) in opened:
                    out.append((tp, idx, opened.pop((idx, tp)), t))
        out += [(tp, idx, start, math.inf) for (idx, tp), start in opened.items()]
        return out

    def overlaps(self) -> list[str]:
        by_tp = defaultdict(list)
        for tp, idx, start, end in self.intervals():
            by_tp[tp].append((start, end, idx))
        bad = []
        for tp, spans in sorted(by_tp.items()):
            spans.sort()
            for (s1, e1, i1), (s2, e2, i2) in itertools.pairwise(spans):
                if s2 < e1:
                    bad.append(f"{tp}: consumer {i1} held it {s1:.3f}-{e1:.3f}, consumer {i2} from {s2:.3f}")
        return bad


class Member:
    """One in-process group consumer whose callbacks feed a Journal."""

    def __init__(self, idx: int, bootstrap: str, group: str, topics: list[str], journal: Journal,
                 commit_on_revoke: bool = False, **conf) -> None:
        self.idx = idx
        self.journal = journal
        self.owned: set[tuple[str, int]] = set()
        self.messages: list = []
        self.next_offset: dict[tuple[str, int], int] = {}
        self.errors: list[KafkaError] = []
        self.commit_on_revoke = commit_on_revoke
        self.closed = False
        self.consumer = Consumer(group_conf(bootstrap, group, error_cb=self.errors.append, **conf))
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _on_assign(self, _c, partitions) -> None:
        parts = [(tp.topic, tp.partition) for tp in partitions]
        self.journal.record(self.idx, "assign", parts)
        self.owned.update(parts)

    def _on_revoke(self, _c, partitions) -> None:
        parts = [(tp.topic, tp.partition) for tp in partitions]
        if self.commit_on_revoke:
            self.commit(parts)  # synchronously, before the revocation is acknowledged
        self.journal.record(self.idx, "revoke", parts)
        self.owned.difference_update(parts)

    def _on_lost(self, _c, partitions) -> None:
        parts = [(tp.topic, tp.partition) for tp in partitions]
        self.journal.record(self.idx, "lost", parts)
        self.owned.difference_update(parts)

    def commit(self, parts=None) -> list[TopicPartition]:
        """Commit (synchronously) the offset after the last record consumed of `parts` (default: all)."""
        parts = self.next_offset if parts is None else parts
        offsets = [TopicPartition(t, p, self.next_offset[(t, p)]) for (t, p) in sorted(parts) if (t, p) in self.next_offset]
        if not offsets:
            return []
        result = self.consumer.commit(offsets=offsets, asynchronous=False)
        failed = [tp for tp in result if tp.error is not None]
        assert not failed, f"consumer {self.idx}: commit failed for {failed}"
        return result

    def poll(self, timeout: float = POLL_S):
        m = self.consumer.poll(timeout)
        if m is None:
            return None
        if m.error() is not None:
            self.errors.append(m.error())
            return m
        tp = (m.topic(), m.partition())
        holder = self.journal.owner.get(tp)
        if holder != self.idx:
            self.journal.violations.append(
                f"consumer {self.idx} consumed {tp} offset {m.offset()} while it was held by consumer {holder}")
        self.messages.append(m)
        self.next_offset[tp] = m.offset() + 1
        return m

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()  # runs the revoke callback for whatever it holds, then leaves


def poll_until(members, cond, timeout: float, what, each_round=None) -> float:
    """Poll every member round-robin until cond() holds; returns the time it held."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            m.poll()
        if each_round is not None:
            each_round()
        if cond():
            return time.monotonic()
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {detail}")


def poll_for(members, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for m in members:
            m.poll()


def balanced(members, partitions: set) -> bool:
    """Each member holds floor or ceil of the partitions, disjointly, and together all of them."""
    n = len(members)
    lo, hi = len(partitions) // n, -(-len(partitions) // n)
    seen: set = set()
    for m in members:
        if not lo <= len(m.owned) <= hi or seen & m.owned:
            return False
        seen |= m.owned
    return seen == partitions


def broker_agrees(adm: AdminClient, group: str, members) -> bool:
    """The coordinator describes the group as Stable, with exactly these members holding
    exactly what their callbacks say they hold."""
    desc = describe_group(adm, group)
    if desc.state != ConsumerGroupState.STABLE or len(desc.members) != len(members):
        return False
    held = described_assignment(desc)
    return all(held.get(m.consumer.memberid()) == m.owned for m in members)


def ownership(members) -> str:
    return ", ".join(f"{m.idx}:{sorted(p for _, p in m.owned)}" for m in members)


def no_client_errors(members) -> None:
    for m in members:
        assert not m.errors, f"consumer {m.idx} saw errors: {m.errors[:5]}"


# ------------------------------------------------------------- 1. one consumer, every record


def test_single_consumer_gets_every_partition_and_record(gbroker, topic_name):
    adm = admin(gbroker.bootstrap)
    create_topic(adm, topic_name, 6)
    expected = produce_keyed(gbroker.bootstrap, topic_name, 6, 50)
    journal = Journal()
    m = Member(0, gbroker.bootstrap, f"g-{topic_name}", [topic_name], journal)
    try:
        poll_until([m], lambda: len(m.messages) >= len(expected), 30,
                   lambda: f"{len(expected)} records, got {len(m.messages)}; owns {sorted(m.owned)}")
        poll_for([m], 0.3)
        assert m.owned == tps(topic_name, range(6))
        assert [e[2:] for e in journal.events] == [("assign", sorted(tps(topic_name, range(6))))]
        got = {(x.partition(), x.offset()): x.key() for x in m.messages}
        assert len(got) == len(m.messages), "a record was delivered twice"
        assert got == expected
        assert not journal.violations, journal.violations
        no_client_errors([m])
    finally:
        m.close()
    assert [e[2] for e in journal.events] == ["assign", "revoke"]


# ------------------------------------------------- 2. ten consumers join, then leave, one by one

N_MEMBERS = 10
N_PARTITIONS = 12


# 15 s: -m slow; groups growing and shrinking one member at a time run by default elsewhere
# (the bounce tests of test_classic_groups.py, test_metrics' 1 -> 2 -> 1 group, the simulator).
@pytest.mark.slow
def test_ten_consumers_join_and_leave_one_by_one(gbroker, topic_name):
    """At every step, once the group is stable, the partitions are balanced and the broker's
    view equals the callbacks'; no partition is ever held by two consumers at once; every
    record is consumed by the consumer holding its partition, exactly once (consumers
    commit what they consumed, synchronously, in the revoke callback)."""
    started = time.monotonic()
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, N_PARTITIONS)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(N_PARTITIONS))
    journal = Journal()
    producer = make_producer(bootstrap)
    delivered: dict[tuple[int, int], bytes] = {}
    produce_errors = []
    counter = iter(range(10**6))

    def on_delivery(err, msg):
        if err is not None:
            produce_errors.append(err)
        else:
            delivered[(msg.partition(), msg.offset())] = msg.key()

    step_budget = [0]

    def produce_some():
        # a record per polling round, at most 30 per step: records arrive during rebalances
        if step_budget[0] > 0:
            step_budget[0] -= 1
            i = next(counter)
            producer.produce(topic_name, key=b"r%05d" % i, value=b"x", partition=i % N_PARTITIONS,
                             on_delivery=on_delivery)
        producer.poll(0)

    members: list[Member] = []
    everyone: list[Member] = []

    def consumed():
        return [(x.partition(), x.offset()) for m in everyone for x in m.messages]

    def settle(step: str):
        step_budget[0] = 30
        last_check = [0.0]

        def done():
            if not balanced(members, everything):
                return False
            if time.monotonic() - last_check[0] < 0.2:
                return False
            last_check[0] = time.monotonic()
            return broker_agrees(adm, group, members)

        poll_until(members, done, 20, lambda: f"{step}: balanced and stable; owned {ownership(members)}",
                   each_round=produce_some)
        while step_budget[0] > 0:
            produce_some()
        # and one more on every partition, so every consumer has something of its own to consume
        step_budget[0] = N_PARTITIONS
        while step_budget[0] > 0:
            produce_some()
        assert producer.flush(TIMEOUT) == 0
        # everything delivered so far is consumed before the next step
        poll_until(members, lambda: set(consumed()) >= set(delivered), 20,
                   lambda: f"{step}: {len(set(delivered) - set(consumed()))} records unconsumed")
        assert not journal.violations, journal.violations[:5]

    try:
        for i in range(N_MEMBERS):
            m = Member(i, bootstrap, group, [topic_name], journal, commit_on_revoke=True)
            members.append(m)
            everyone.append(m)
            settle(f"after consumer {i} joined")
            sizes = sorted(len(x.owned) for x in members)
            assert sizes[0] >= N_PARTITIONS // len(members) and sizes[-1] <= -(-N_PARTITIONS // len(members))
        while len(members) > 1:
            leaving = members.pop(0)
            leaving.close()
            assert not leaving.owned, f"consumer {leaving.idx} still holds {leaving.owned} after close"
            settle(f"after consumer {leaving.idx} left")
    finally:
        for m in members:
            m.close()
    last = everyone[-1]
    assert last.closed and not last.owned

    assert not produce_errors, produce_errors[:3]
    assert not journal.violations, journal.violations[:5]
    assert not journal.overlaps(), journal.overlaps()[:5]
    got = consumed()
    assert set(got) == set(delivered), "some record was never consumed"
    dupes = len(got) - len(set(got))
    assert dupes == 0, f"{dupes} records were consumed twice despite commit-on-revoke"
    assert len(delivered) == (30 + N_PARTITIONS) * (2 * N_MEMBERS - 1)
    assert all(m.messages for m in everyone), "a consumer never consumed anything"
    held = {(tp, idx) for tp, idx, _, _ in journal.intervals()}
    assert len(held) > 3 * N_PARTITIONS, f"partitions moved between consumers only {len(held)} times"
    no_client_errors(everyone)
    kinds = {e[2] for e in journal.events}
    assert "lost" not in kinds, "a consumer lost its partitions (fenced) though every step was orderly"
    desc = describe_group(adm, group)
    assert desc.state == ConsumerGroupState.EMPTY and not desc.members
    assert time.monotonic() - started < 60


# --------------------------------------------------------- 3. a consumer dies without leaving

CHILD = r"""
import json, logging, sys, time
from confluent_kafka import Consumer
conf = json.loads(sys.argv[1])
topics = json.loads(sys.argv[2])
def say(**kw):
    print(json.dumps(kw), flush=True)
def cb(kind):
    return lambda c, ps: say(event=kind, partitions=[[p.topic, p.partition] for p in ps])
class Heartbeats(logging.Handler):
    # librdkafka's debug log, served from poll(): report when each heartbeat response arrived
    def emit(self, record):
        if "ConsumerGroupHeartbeat response received" in record.getMessage():
            say(event="heartbeat", t=time.monotonic())
log = logging.getLogger("child")
log.setLevel(logging.DEBUG)
log.addHandler(Heartbeats())
log.propagate = False
conf.update({"error_cb": lambda e: say(event="error", code=e.code(), text=str(e)), "debug": "cgrp", "logger": log})
c = Consumer(conf)
c.subscribe(topics, on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
say(event="subscribed", member_id=c.memberid())
while True:
    m = c.poll(0.05)
    if m is not None and m.error() is not None:
        say(event="error", code=m.error().code(), text=str(m.error()))
"""


class ChildConsumer:
    """A group consumer in a subprocess (so it can be SIGKILLed), reporting its callbacks as JSON lines."""

    def __init__(self, conf: dict, topics: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(conf), json.dumps(topics)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue = queue.Queue()
        self.owned: set[tuple[str, int]] = set()
        self.events: list[dict] = []
        self.last_heartbeat: float | None = None  # time.monotonic() (system-wide) of the last response
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def drain(self) -> None:
        while True:
            try:
                ev = self.lines.get_nowait()
            except queue.Empty:
                return
            if ev["event"] == "heartbeat":
                self.last_heartbeat = ev["t"]
                continue
            self.events.append(ev)
            parts = {tuple(x) for x in ev.get("partitions", ())}
            if ev["event"] == "assign":
                self.owned |= parts
            elif ev["event"] in ("revoke", "lost"):
                self.owned -= parts

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.proc.wait(10)
        time.sleep(0.05)  # let the reader thread take what the child printed before it died
        self.drain()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.proc.stdout.close()


def kill_and_time_takeover(bootstrap: str, topic: str, group: str) -> tuple[float, float]:
    """A survivor (in-process) and a victim (subprocess) share a 6-partition topic 3/3; the
    victim is SIGKILLed. Returns the seconds from the kill, and from the victim's last
    heartbeat response, until the survivor holds all six partitions, after checking the
    survivor saw exactly one callback (the victim's three partitions) and then consumes
    records from all six."""
    adm = admin(bootstrap)
    everything = tps(topic, range(6))
    journal = Journal()
    survivor = Member(0, bootstrap, group, [topic], journal)
    child = ChildConsumer(group_conf(bootstrap, group), [topic])
    try:
        def both_hold_three():
            child.drain()
            return (len(survivor.owned) == 3 and len(child.owned) == 3
                    and survivor.owned | child.owned == everything)

        poll_until([survivor], both_hold_three, 30,
                   lambda: f"a 3/3 split; survivor {sorted(survivor.owned)}, child {sorted(child.owned)}; "
                           f"child said {child.events}")
        victim_parts = set(child.owned)
        poll_for([survivor], 0.3)  # the child's acknowledgement heartbeat: the group is stable now
        assert len(describe_group(adm, group).members) == 2

        child.kill()
        killed_at = child.killed_at
        assert child.last_heartbeat is not None and child.last_heartbeat <= killed_at
        events_before = len(journal.events)
        got_all = poll_until([survivor], lambda: survivor.owned == everything, SESSION_TIMEOUT_MS / 1000 + 10,
                             lambda: f"the survivor to get all partitions; holds {sorted(survivor.owned)}")
        new_events = journal.events[events_before:]
        assert [e[2:] for e in new_events] == [("assign", sorted(victim_parts))], new_events

        # the survivor consumes records of every partition, inherited ones included
        expected = produce_keyed(bootstrap, topic, 6, 3)
        poll_until([survivor], lambda: {(x.partition(), x.offset()) for x in survivor.messages} >= set(expected), 20,
                   "the survivor to consume every record")
        desc = describe_group(adm, group)
        assert [m.member_id for m in desc.members] == [survivor.consumer.memberid()]
        assert not journal.violations, journal.violations
        no_client_errors([survivor])
        return got_all - killed_at, got_all - child.last_heartbeat
    finally:
        child.close()
        survivor.close()


def test_killed_consumer_partitions_move_after_session_timeout(gbroker, topic_name):
    create_topic(admin(gbroker.bootstrap), topic_name, 6)
    since_kill, since_heartbeat = kill_and_time_takeover(gbroker.bootstrap, topic_name, f"g-{topic_name}")
    # The session runs from the victim's last heartbeat; then come the coordinator's 50 ms
    # timer tick and the survivor's next heartbeat (200 ms). 50 ms of slack below covers the
    # loopback round trip and the broker's millisecond clock.
    timing = f"takeover {since_heartbeat:.3f}s after the last heartbeat, {since_kill:.3f}s after the kill"
    session = SESSION_TIMEOUT_MS / 1000
    assert session - 0.05 <= since_heartbeat <= session + 1.0, timing


# ----------------------------------------------------------------------- 4. static membership


def test_static_member_restart_keeps_its_partitions(gbroker, topic_name):
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, 6)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(6))
    journal = Journal()
    a = Member(0, bootstrap, group, [topic_name], journal, **{"group.instance.id": "static-a"})
    b = Member(1, bootstrap, group, [topic_name], journal, **{"group.instance.id": "static-b"})
    b2 = intruder = None
    try:
        poll_until([a, b], lambda: balanced([a, b], everything) and broker_agrees(adm, group, [a, b]), 30,
                   lambda: f"a stable 3/3 split; {ownership([a, b])}")
        held_by_b = set(b.owned)
        held_by_a = set(a.owned)
        desc = describe_group(adm, group)
        assert {m.group_instance_id for m in desc.members} == {"static-a", "static-b"}
        b_member_id = b.consumer.memberid()

        t0 = time.monotonic()
        b.close()  # static leave (epoch -2): the coordinator keeps b's assignment for the session timeout
        closed_at = time.monotonic()
        desc = describe_group(adm, group)
        assert len(desc.members) == 2, "a static member that left must stay in the group until its session expires"
        assert b_member_id in {m.member_id for m in desc.members}

        b2 = Member(2, bootstrap, group, [topic_name], journal, **{"group.instance.id": "static-b"})
        got = poll_until([a, b2], lambda: b2.owned == held_by_b, SESSION_TIMEOUT_MS / 1000,
                         lambda: f"the restarted static member to get {sorted(held_by_b)}; {ownership([a, b2])}")
        assert got - closed_at < SESSION_TIMEOUT_MS / 1000
        # and it stays that way, past the session timeout of the old incarnation
        poll_until([a, b2], lambda: time.monotonic() > closed_at + SESSION_TIMEOUT_MS / 1000 + 0.5, 10, "time")
        assert b2.owned == held_by_b and a.owned == held_by_a
        assert journal.since(t0, a.idx) == [], f"the other static member saw callbacks: {journal.since(t0, a.idx)}"
        assert [e[2] for e in journal.since(t0, b2.idx)] == ["assign"]
        assert broker_agrees(adm, group, [a, b2])
        desc = describe_group(adm, group)
        assert {m.group_instance_id for m in desc.members} == {"static-a", "static-b"}

        # both consume and commit (KIP-1251: the new incarnation may commit what it inherited)
        produce_keyed(bootstrap, topic_name, 6, 2)
        poll_until([a, b2], lambda: all(m.next_offset.get(tp) == 2 for m in (a, b2) for tp in m.owned), 20,
                   "the records of every partition")
        assert len(a.commit(a.owned)) == len(b2.commit(b2.owned)) == 3
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p) for p in range(6)])
        listed = adm.list_consumer_group_offsets([req], request_timeout=10)[group].result(TIMEOUT)
        assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {p: 2 for p in range(6)}

        # A second live consumer with a taken instance id is refused with UNRELEASED_INSTANCE_ID,
        # which librdkafka raises as a fatal error on the new consumer.
        intruder = Member(3, bootstrap, group, [topic_name], journal, **{"group.instance.id": "static-a"})
        unreleased = KafkaError(KafkaError.UNRELEASED_INSTANCE_ID).str()

        def refused():
            return any(e.code() == KafkaError.UNRELEASED_INSTANCE_ID
                       or (e.code() == KafkaError._FATAL and unreleased in e.str()) for e in intruder.errors)

        poll_until([a, b2, intruder], refused, 10, lambda: f"UNRELEASED_INSTANCE_ID; intruder errors {intruder.errors}")
        assert not intruder.owned
        poll_for([a, b2, intruder], 0.5)
        assert a.owned == held_by_a and b2.owned == held_by_b
        assert journal.since(t0, a.idx) == []
        assert broker_agrees(adm, group, [a, b2])
        assert not journal.violations, journal.violations
        no_client_errors([a, b2])
    finally:
        for m in (intruder, b2, b, a):
            if m is not None:
                m.close()


def test_static_member_that_does_not_return_is_removed_after_session_timeout(gbroker, topic_name):
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, 6)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(6))
    journal = Journal()
    a = Member(0, bootstrap, group, [topic_name], journal, **{"group.instance.id": "static-a"})
    b = Member(1, bootstrap, group, [topic_name], journal, **{"group.instance.id": "static-b"})
    try:
        poll_until([a, b], lambda: balanced([a, b], everything) and broker_agrees(adm, group, [a, b]), 30,
                   lambda: f"a stable 3/3 split; {ownership([a, b])}")
        held_by_b = set(b.owned)
        leaving = time.monotonic()
        b.close()  # static leave: nobody takes b's partitions until its session timeout
        got = poll_until([a], lambda: a.owned == everything, SESSION_TIMEOUT_MS / 1000 + 5,
                         lambda: f"the remaining member to get everything; {ownership([a])}")
        elapsed = got - leaving
        session = SESSION_TIMEOUT_MS / 1000
        assert session - 0.05 <= elapsed <= session + 1.0, f"b's partitions moved {elapsed:.3f}s after it left"
        assert [e[2:] for e in journal.since(leaving, a.idx)] == [("assign", sorted(held_by_b))]
        desc = describe_group(adm, group)
        assert [m.group_instance_id for m in desc.members] == ["static-a"]
        assert not journal.violations, journal.violations
        no_client_errors([a, b])
    finally:
        b.close()
        a.close()


# ---------------------------------------------------------------------- 5. regex subscription


def test_regex_subscription_picks_up_new_matching_topics(gbroker, topic_name):
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    uniq = topic_name[-9:]
    matching = f"rx-{uniq}-a"
    others = [f"rx-{uniq}", f"rxx-{uniq}-b", f"other-rx-{uniq}-c"]  # none fully matches ^rx-<uniq>-.*
    group = f"g-{topic_name}"
    journal = Journal()
    m = Member(0, bootstrap, group, [f"^rx-{uniq}-.*"], journal, **{"topic.metadata.refresh.interval.ms": 1000})
    try:
        poll_until([m], lambda: len(describe_group(adm, group).members) == 1, 20, "the consumer to join")
        for name in others:
            create_topic(adm, name, 1)
        create_topic(adm, matching, 2)
        poll_until([m], lambda: m.owned == tps(matching, range(2)), 20,
                   lambda: f"the regex consumer to get {matching}; holds {sorted(m.owned)}")
        produce_keyed(bootstrap, matching, 2, 1)
        for name in others:
            produce_keyed(bootstrap, name, 1, 1)
        poll_until([m], lambda: len(m.messages) >= 2, 20, "the records of the matching topic")
        poll_for([m], 0.5)
        assert {(x.topic(), x.partition(), x.key()) for x in m.messages} == {
            (matching, 0, b"k-0-0"), (matching, 1, b"k-1-0")}
        assert m.owned == tps(matching, range(2))
        desc = describe_group(adm, group)
        assert described_assignment(desc) == {m.consumer.memberid(): tps(matching, range(2))}
        assert not journal.violations, journal.violations
        no_client_errors([m])
    finally:
        m.close()


def _resubscribe(m: Member, topics: list[str]) -> None:
    m.consumer.subscribe(topics, on_assign=m._on_assign, on_revoke=m._on_revoke, on_lost=m._on_lost)


def _assigns(journal: Journal, idx: int, since: float = 0.0) -> list[list[tuple[str, int]]]:
    return [parts for _, i, kind, parts in journal.since(since, idx) if kind == "assign"]


def test_literal_topics_are_assigned_before_the_regex_matches(gbroker, topic_name):
    """librdkafka 0045 do_test_resubscribe_with_regex under group.protocol=consumer: the
    broker resolves regexes asynchronously (Kafka 4.0), so a subscription to a regex comes
    in one assignment once resolved, and a subscription to a regex and a topic name is
    assigned the named topic's partitions first, the regex matches in a later assignment
    ("expected assignment of 2 partitions, got 10" when the regex is resolved in the join)."""
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    uniq = topic_name[-9:]
    topic1, topic2, topic_a = f"rx45-{uniq}-topic_regex1", f"rx45-{uniq}-topic_regex2", f"rx45-{uniq}-topic_a"
    create_topic(adm, topic1, 4)
    create_topic(adm, topic2, 4)
    create_topic(adm, topic_a, 2)
    regex = f"^.*rx45-{uniq}-topic_regex.*"
    matches = tps(topic1, range(4)) | tps(topic2, range(4))
    journal = Journal()
    m = Member(0, bootstrap, f"g-{topic_name}", [regex], journal)
    try:
        poll_until([m], lambda: m.owned == matches, 30, lambda: f"the regex matches; holds {sorted(m.owned)}")
        assert [p for p in _assigns(journal, 0) if p] == [sorted(matches)]  # both topics, one assignment
        m.consumer.unsubscribe()
        poll_until([m], lambda: not m.owned, 20, "the revocation after unsubscribing")

        since = time.monotonic()
        _resubscribe(m, [regex, topic_a])
        poll_until([m], lambda: m.owned == matches | tps(topic_a, range(2)), 30,
                   lambda: f"the regex matches and {topic_a}; holds {sorted(m.owned)}")
        nonempty = [p for p in _assigns(journal, 0, since) if p]
        assert nonempty == [sorted(tps(topic_a, range(2))), sorted(matches)], nonempty
        assert not journal.violations, journal.violations
        no_client_errors([m])
    finally:
        m.close()


# 10.5 s (a regex refresh waits out Kafka's 10 s minimum): -m slow; a regex consumer picking up
# new topics runs by default above (test_regex_subscription_picks_up_new_matching_topics), and
# the batching of back-to-back creations into one refresh in tests/coordinator.
@pytest.mark.slow
def test_regex_consumers_see_topics_created_back_to_back_in_one_assignment(gbroker, topic_name):
    """librdkafka 0113 n_wildcard under group.protocol=consumer: two consumers subscribe to a
    regex that matches nothing; two matching topics are created one after the other; the
    coordinator resolves regexes at most once per 10 s per group, so each consumer gets both
    topics' partitions in a single (non-empty) assignment, then loses the deleted one."""
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    uniq = topic_name[-9:]
    base = f"rx113-{uniq}"
    t1, t2 = f"{base}_1", f"{base}_2"
    group = f"g-{topic_name}"
    journal = Journal()
    conf = {"topic.metadata.refresh.interval.ms": 3000}
    c1 = Member(1, bootstrap, group, [f"^{base}_."], journal, **conf)
    c2 = Member(2, bootstrap, group, [f"^{base}_."], journal, **conf)
    members = [c1, c2]
    try:
        poll_until(members, lambda: len(describe_group(adm, group).members) == 2, 20, "both consumers to join")
        poll_for(members, 1.0)
        # "There are no matching topics, so the consumers should not join the group initially"
        assert not [e for e in journal.events if e[2] == "assign"], journal.events
        create_topic(adm, t1, 2)
        # librdkafka's test waits for each topic to show in its metadata; a second or so
        # passes, several heartbeats, and a broker that resolves the regex at each topic
        # change starts a round per topic.
        poll_for(members, 1.0)
        create_topic(adm, t2, 2)
        poll_until(members, lambda: all(len(m.owned) == 2 for m in members), 40,
                   lambda: f"two partitions each; {ownership(members)}")
        for m in members:
            nonempty = [p for p in _assigns(journal, m.idx) if p]
            assert len(nonempty) == 1, f"consumer {m.idx}: nonempty_assign_call_cnt {len(nonempty)}: {nonempty}"
        assert not [e for e in journal.events if e[2] in ("revoke", "lost")], journal.events
        assert c1.owned | c2.owned == tps(t1, range(2)) | tps(t2, range(2))
        no_client_errors(members)

        fut = adm.delete_topics([t1], operation_timeout=10)[t1]
        assert fut.result(TIMEOUT) is None
        poll_until(members, lambda: all(len(m.owned) == 1 for m in members), 30,
                   lambda: f"one partition each after deleting {t1}; {ownership(members)}")
        for m in members:
            kinds = [e[2] for e in journal.events if e[1] == m.idx]
            assert kinds.count("revoke") == 1 and kinds.count("lost") == 0, (m.idx, kinds)
        assert c1.owned | c2.owned == tps(t2, range(2))
        assert not journal.violations, journal.violations
        for m in members:  # a fetch or offset lookup racing the deletion may hear of it first
            assert all(e.code() == KafkaError.UNKNOWN_TOPIC_OR_PART for e in m.errors), m.errors[:5]
    finally:
        for m in members:
            m.close()


# ------------------------------------------------------------------ 6. CreatePartitions picked up


def test_added_partitions_are_assigned_and_consumed(gbroker, topic_name):
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, 2)
    group = f"g-{topic_name}"
    journal = Journal()
    m = Member(0, bootstrap, group, [topic_name], journal)
    try:
        produce_keyed(bootstrap, topic_name, 2, 2, tag="before")
        poll_until([m], lambda: len(m.messages) >= 4, 20, "the first records")
        assert m.owned == tps(topic_name, range(2))
        fut = adm.create_partitions([NewPartitions(topic_name, 4)], operation_timeout=10)[topic_name]
        assert fut.result(TIMEOUT) is None
        poll_until([m], lambda: m.owned == tps(topic_name, range(4)), 20,
                   lambda: f"the new partitions to be assigned; holds {sorted(m.owned)}")
        after = produce_keyed(bootstrap, topic_name, 4, 2, tag="after")
        poll_until([m], lambda: len(m.messages) >= 4 + 8, 20,
                   lambda: f"the records on the new partitions; got {len(m.messages)} of 12")
        poll_for([m], 0.3)
        got = {(x.partition(), x.offset()): x.key() for x in m.messages}
        assert len(got) == len(m.messages) == 12
        for where, key in after.items():
            assert got[where] == key
        assert [e[2] for e in journal.events] == ["assign", "assign"], journal.events
        assert journal.events[1][3] == sorted(tps(topic_name, [2, 3]))
        no_client_errors([m])
    finally:
        m.close()


# ------------------------------------------------- 7. committed offsets survive a broker restart


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_committed_offsets_survive_broker_restart(broker_factory, topic_name, how):
    """Commit exactly what was consumed, restart the broker (SIGTERM or SIGKILL right after
    the commit's response), and a new consumer of the group resumes at the next record of
    every partition: no gap, no duplicate."""
    b = broker_factory("data", extra=GROUP_OPTS)
    adm = admin(b.bootstrap)
    partitions = 3
    create_topic(adm, topic_name, partitions)
    expected = produce_keyed(b.bootstrap, topic_name, partitions, 10)
    group = f"g-{topic_name}"
    first = Member(0, b.bootstrap, group, [topic_name], Journal())
    second = None
    try:
        poll_until([first], lambda: len(first.messages) >= 13, 20, "13 records")
        committed = dict(first.next_offset)
        first.commit()  # synchronous: the response came back
        if how == "stop":
            assert b.stop() == 0
        else:
            b.kill()
        b.start()
        # the first consumer reconnects and leaves (it never committed anything else)
        first.close()

        adm = admin(b.bootstrap)
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p) for p in range(partitions)])
        listed = adm.list_consumer_group_offsets([req], request_timeout=10)[group].result(TIMEOUT)
        assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {
            p: committed.get((topic_name, p), -1001) for p in range(partitions)}

        second = Member(1, b.bootstrap, group, [topic_name], Journal())
        seen_first = {(x.partition(), x.offset()) for x in first.messages}
        remaining = len(expected) - len(seen_first)
        poll_until([second], lambda: len(second.messages) >= remaining, 30,
                   lambda: f"{remaining} records after the restart, got {len(second.messages)}")
        poll_for([second], 0.5)
        got = [(x.partition(), x.offset()) for x in second.messages]
        assert len(got) == remaining, f"{len(got) - remaining} records more than the {remaining} uncommitted"
        for p in range(partitions):
            start = committed.get((topic_name, p), 0)
            offsets = [o for (pp, o) in got if pp == p]
            assert offsets == list(range(start, 10)), f"partition {p}: resumed with {offsets[:3]}, committed {start}"
        assert seen_first.isdisjoint(got)
        assert {**{w: expected[w] for w in seen_first}, **{(x.partition(), x.offset()): x.key() for x in second.messages}} == expected
        no_client_errors([second])
        assert_clean_log(b)
    finally:
        first.close()
        if second is not None:
            second.close()


TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}  # what a broker restart shows clients


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_live_group_survives_broker_restart_without_rebalance(broker_factory, topic_name, how):
    """KIP-848 "Fail Over": the coordinator state is rebuilt from __consumer_offsets, so the
    members of a stable group carry on at their epochs: no callback, same assignment."""
    b = broker_factory("data", extra=GROUP_OPTS)
    adm = admin(b.bootstrap)
    create_topic(adm, topic_name, 4)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(4))
    journal = Journal()
    members = [Member(i, b.bootstrap, group, [topic_name], journal) for i in range(2)]
    try:
        poll_until(members, lambda: balanced(members, everything) and broker_agrees(adm, group, members), 30,
                   lambda: f"a stable 2/2 split; {ownership(members)}")
        before = {m.idx: set(m.owned) for m in members}
        restarted = time.monotonic()
        if how == "stop":
            assert b.stop() == 0
        else:
            b.kill()
        b.start()
        expected = produce_keyed(b.bootstrap, topic_name, 4, 3)
        poll_until(members, lambda: {(x.partition(), x.offset()) for m in members for x in m.messages} >= set(expected),
                   30, "the records produced after the restart")
        # past the session timeout of the restarted coordinator: nobody was expired either
        poll_for(members, SESSION_TIMEOUT_MS / 1000 + 0.5)
        assert journal.since(restarted) == [], journal.since(restarted)
        assert {m.idx: m.owned for m in members} == before
        assert broker_agrees(admin(b.bootstrap), group, members)
        assert not journal.violations, journal.violations
        for m in members:
            odd = [e for e in m.errors if e.code() not in TRANSIENT]
            assert not odd, f"consumer {m.idx}: {odd[:3]}"
        assert_clean_log(b)
    finally:
        for m in members:
            m.close()


# -------------------------------------------------------------------------- 8. group admin


def test_admin_list_describe_offsets_delete_groups(gbroker, topic_name):
    bootstrap = gbroker.bootstrap
    adm = admin(bootstrap)
    create_topic(adm, topic_name, 4)
    everything = tps(topic_name, range(4))
    group = f"g-{topic_name}"
    produce_keyed(bootstrap, topic_name, 4, 5)
    journal = Journal()
    members = [Member(i, bootstrap, group, [topic_name], journal, **{"client.id": f"cid-{i}"}) for i in range(2)]
    try:
        poll_until(members, lambda: balanced(members, everything) and broker_agrees(adm, group, members), 30,
                   lambda: f"a stable 2/2 split; {ownership(members)}")
        # every record consumed by the partition's current holder (a record may also have been
        # consumed by the first consumer before the second one joined: nobody had committed)
        poll_until(members, lambda: all(m.next_offset.get(tp) == 5 for m in members for tp in m.owned), 20,
                   "every record")
        for m in members:
            assert len(m.commit(m.owned)) == 2

        listed = adm.list_consumer_groups(request_timeout=10).result(TIMEOUT)
        assert not listed.errors, listed.errors
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1
        assert mine[0].type == ConsumerGroupType.CONSUMER
        assert mine[0].state == ConsumerGroupState.STABLE
        assert mine[0].is_simple_consumer_group is False
        filtered = adm.list_consumer_groups(request_timeout=10, types={ConsumerGroupType.CONSUMER},
                                            states={ConsumerGroupState.STABLE}).result(TIMEOUT)
        assert group in {g.group_id for g in filtered.valid}
        none = adm.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.EMPTY}).result(TIMEOUT)
        assert group not in {g.group_id for g in none.valid}

        desc = describe_group(adm, group)
        assert desc.group_id == group
        assert desc.type == ConsumerGroupType.CONSUMER
        assert desc.state == ConsumerGroupState.STABLE
        assert desc.partition_assignor == "uniform"
        assert desc.coordinator.port == gbroker.port
        by_id = {d.member_id: d for d in desc.members}
        assert set(by_id) == {m.consumer.memberid() for m in members}
        for m in members:
            d = by_id[m.consumer.memberid()]
            assert d.client_id == f"cid-{m.idx}"
            assert d.host == "/127.0.0.1"
            assert {(tp.topic, tp.partition) for tp in d.assignment.topic_partitions} == m.owned
            assert {(tp.topic, tp.partition) for tp in d.target_assignment.topic_partitions} == m.owned

        err = admin_error(adm.delete_consumer_groups([group], request_timeout=10)[group])
        assert err.code() == KafkaError.NON_EMPTY_GROUP

        for m in members:
            m.close()
        desc = describe_group(adm, group)
        assert desc.state == ConsumerGroupState.EMPTY and not desc.members
        listed = adm.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.EMPTY}).result(TIMEOUT)
        assert group in {g.group_id for g in listed.valid}

        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p) for p in range(4)])
        offsets = adm.list_consumer_group_offsets([req], request_timeout=10)[group].result(TIMEOUT)
        assert offsets.group_id == group
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {p: 5 for p in range(4)}
        everything_req = ConsumerGroupTopicPartitions(group)
        offsets = adm.list_consumer_group_offsets([everything_req], request_timeout=10)[group].result(TIMEOUT)
        assert {(tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions} == {
            (topic_name, p, 5) for p in range(4)}

        alter = ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0, 1), TopicPartition(topic_name, 3, 2)])
        altered = adm.alter_consumer_group_offsets([alter], request_timeout=10)[group].result(TIMEOUT)
        assert all(tp.error is None for tp in altered.topic_partitions), altered.topic_partitions
        offsets = adm.list_consumer_group_offsets([req], request_timeout=10)[group].result(TIMEOUT)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 1, 1: 5, 2: 5, 3: 2}

        # a consumer of the group resumes at the altered offsets
        reader = Member(5, bootstrap, group, [topic_name], Journal())
        try:
            poll_until([reader], lambda: len(reader.messages) >= 4 + 3, 20, "the records after the altered offsets")
            poll_for([reader], 0.3)
            assert sorted((x.partition(), x.offset()) for x in reader.messages) == [
                (0, 1), (0, 2), (0, 3), (0, 4), (3, 2), (3, 3), (3, 4)]
        finally:
            reader.close()

        assert adm.delete_consumer_groups([group], request_timeout=10)[group].result(TIMEOUT) is None
        listed = adm.list_consumer_groups(request_timeout=10).result(TIMEOUT)
        assert group not in {g.group_id for g in listed.valid}
        offsets = adm.list_consumer_group_offsets([req], request_timeout=10)[group].result(TIMEOUT)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {p: -1001 for p in range(4)}
        err = admin_error(adm.delete_consumer_groups([group], request_timeout=10)[group])
        assert err.code() == KafkaError.GROUP_ID_NOT_FOUND
        no_client_errors(members)
    finally:
        for m in members:
            m.close()


# ------------------------------------------------------------- 9. group configs (KIP-848)


def test_group_configs_alter_describe_and_bounds(gbroker, topic_name):
    adm = admin(gbroker.bootstrap)
    group = f"g-{topic_name}"

    def describe() -> dict:
        res = ConfigResource(ResourceType.GROUP, group)
        return adm.describe_configs([res], request_timeout=10)[res].result(TIMEOUT)

    before = describe()
    assert before["consumer.session.timeout.ms"].value == str(SESSION_TIMEOUT_MS)
    assert before["consumer.heartbeat.interval.ms"].value == str(HEARTBEAT_INTERVAL_MS)
    # (DEFAULT_CONFIG here; Kafka may say STATIC_BROKER_CONFIG for a broker-set default: not checked)
    assert before["consumer.session.timeout.ms"].source != ConfigSource.GROUP_CONFIG.value

    def alter(key: str, value: str | None, op=AlterConfigOpType.SET):
        res = ConfigResource(ResourceType.GROUP, group,
                             incremental_configs=[ConfigEntry(key, value, incremental_operation=op)])
        return adm.incremental_alter_configs([res], request_timeout=10)[res]

    assert alter("consumer.session.timeout.ms", "5000").result(TIMEOUT) is None
    after = describe()
    assert after["consumer.session.timeout.ms"].value == "5000"
    assert after["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert after["consumer.heartbeat.interval.ms"].value == str(HEARTBEAT_INTERVAL_MS)

    err = admin_error(alter("consumer.session.timeout.ms", str(MIN_SESSION_TIMEOUT_MS - 1)))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert describe()["consumer.session.timeout.ms"].value == "5000"

    assert alter("consumer.session.timeout.ms", None, AlterConfigOpType.DELETE).result(TIMEOUT) is None
    assert describe()["consumer.session.timeout.ms"].value == str(SESSION_TIMEOUT_MS)
    assert describe()["consumer.session.timeout.ms"].source != ConfigSource.GROUP_CONFIG.value

    # The override is what the coordinator uses: with a 1.5 s session timeout for this
    # group, a killed member's partitions move well before the broker's 3 s default.
    assert alter("consumer.session.timeout.ms", "1500").result(TIMEOUT) is None
    create_topic(adm, topic_name, 6)
    since_kill, since_heartbeat = kill_and_time_takeover(gbroker.bootstrap, topic_name, group)
    timing = f"takeover {since_heartbeat:.3f}s after the last heartbeat, {since_kill:.3f}s after the kill"
    assert 1.5 - 0.05 <= since_heartbeat <= 2.5, timing
