"""Interop: KIP-848 online migration of a librdkafka group between the classic protocol
(JoinGroup/SyncGroup) and the consumer protocol (ConsumerGroupHeartbeat), against a real
`odradek broker` process on 127.0.0.1 (see src/odradek/coordinator/migration.py).

A rolling upgrade replaces the classic consumers of a running group one at a time by
`group.protocol=consumer` consumers, and a rolling downgrade replaces those by classic
consumers again, while records are produced. The consumers are polled round-robin from the
test's thread and their rebalance callbacks feed one `Journal` (test_consumer_groups.py), so
"no partition held by two consumers at once" is checked at every callback; every consumer
commits what it consumed in its revoke callback, so a new holder resumes where the old one
stopped and a lost record would show.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import pytest

# (confluent_kafka's names too, through that module, which skips when confluent_kafka is missing)
from .test_consumer_groups import (
    TIMEOUT,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    Journal,
    KafkaError,
    Member,
    TopicPartition,
    admin,
    assert_clean_log,
    balanced,
    broker_agrees,
    create_topic,
    describe_group,
    described_assignment,
    make_producer,
    ownership,
    poll_for,
    poll_until,
    tps,
)

pytestmark = pytest.mark.interop

SESSION_TIMEOUT_MS = 6000
CLASSIC_HEARTBEAT_MS = 500
MIGRATION_OPTS = [
    "-o", "group.initial.rebalance.delay.ms=0",
    "-o", "group.consumer.heartbeat.interval.ms=500",
    "-o", "group.consumer.min.heartbeat.interval.ms=100",
    "-o", f"group.consumer.session.timeout.ms={SESSION_TIMEOUT_MS}",
    "-o", "group.consumer.min.session.timeout.ms=1000",
]
PARTITIONS = 6
CLASSIC, CONSUMER = ConsumerGroupType.CLASSIC, ConsumerGroupType.CONSUMER


def classic_conf(strategy: str) -> dict:
    # The rebalance timeout of a classic member is max.poll.interval.ms: kept short so that a
    # member the coordinator waits for in vain fails the test in seconds, not in 5 minutes.
    return {"group.protocol": "classic", "partition.assignment.strategy": strategy,
            "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": CLASSIC_HEARTBEAT_MS,
            "max.poll.interval.ms": 15000}


def listed_type(adm, group: str):
    """The group's type as ListGroups reports it (None if it is not listed)."""
    listed = adm.list_consumer_groups(request_timeout=10).result(TIMEOUT)
    assert not listed.errors, listed.errors
    mine = [g for g in listed.valid if g.group_id == group]
    return mine[0].type if mine else None


class Feed:
    """Records produced in the background of the polling loop: one per round while the budget lasts."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = make_producer(bootstrap)
        self.delivered: set[tuple[int, int]] = set()
        self.errors: list = []
        self.budget = 0
        self.count = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered.add((msg.partition(), msg.offset()))

    def produce(self) -> None:
        i = self.count
        self.count += 1
        self.producer.produce(self.topic, key=b"r%05d" % i, value=b"x", partition=i % PARTITIONS,
                              on_delivery=self._on_delivery)

    def tick(self) -> None:
        if self.budget > 0:
            self.budget -= 1
            self.produce()
        self.producer.poll(0)

    def flush(self) -> None:
        while self.budget > 0:
            self.tick()
        for _ in range(PARTITIONS):  # one more on every partition: every holder has something to consume
            self.produce()
        assert self.producer.flush(TIMEOUT) == 0


class Rollout:
    """A group whose members come and go, with the checks made after every step."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.adm = admin(bootstrap)
        self.everything = tps(topic, range(PARTITIONS))
        self.journal = Journal()
        self.feed = Feed(bootstrap, topic)
        self.live: list[Member] = []
        self.everyone: list[Member] = []
        self.protocol: dict[int, str] = {}
        self.closing: dict[int, float] = {}  # consumer -> when its close() began
        self.steps: list[tuple[str, float]] = []

    def start(self, idx: int, protocol: str, strategy: str | None = None) -> Member:
        conf = classic_conf(strategy) if protocol == "classic" else {}
        m = Member(idx, self.bootstrap, self.group, [self.topic], self.journal, commit_on_revoke=True, **conf)
        self.protocol[idx] = protocol
        self.live.append(m)
        self.everyone.append(m)
        return m

    def stop(self, m: Member) -> None:
        self.closing[m.idx] = time.monotonic()
        self.live.remove(m)
        m.close()  # revokes (and commits) what it holds, then leaves
        assert not m.owned, f"consumer {m.idx} still holds {sorted(m.owned)} after close"

    def close_all(self) -> None:
        for m in list(self.live):
            self.stop(m)

    def consumed(self) -> set[tuple[int, int]]:
        return {(x.partition(), x.offset()) for m in self.everyone for x in m.messages}

    def settle(self, step: str, group_type) -> None:
        """Records are produced while the group rebalances; then the live members must split the
        partitions evenly, the coordinator must describe the group as `group_type`, Stable, with
        the assignment the callbacks show, ListGroups must agree on the type, and every record
        delivered so far must be consumed, each live member consuming some of them."""
        started = time.monotonic()
        counts = {m.idx: len(m.messages) for m in self.live}
        self.feed.budget = 20
        last = [0.0]
        seen = {}

        def done() -> bool:
            if not balanced(self.live, self.everything) or time.monotonic() - last[0] < 0.25:
                return False
            last[0] = time.monotonic()
            desc = describe_group(self.adm, self.group)
            seen["type"], seen["state"] = desc.type, desc.state
            return desc.type == group_type and broker_agrees(self.adm, self.group, self.live)

        poll_until(self.live, done, 30,
                   lambda: f"{step}: a balanced, Stable {group_type} group; owned {ownership(self.live)}, "
                           f"last described {seen}", each_round=self.feed.tick)
        assert listed_type(self.adm, self.group) == group_type, step
        self.feed.flush()
        poll_until(self.live, lambda: self.consumed() >= self.feed.delivered, 20,
                   lambda: f"{step}: {len(self.feed.delivered - self.consumed())} records unconsumed; "
                           f"owned {ownership(self.live)}")
        assert not self.journal.violations, (step, self.journal.violations[:5])
        idle = [m.idx for m in self.live if len(m.messages) == counts.get(m.idx, 0)]
        assert not idle, f"{step}: consumers {idle} consumed nothing"
        self.steps.append((step, time.monotonic() - started))

    def holding_gaps(self, protocol: str = "classic") -> list[str]:
        """Times a `protocol` consumer held nothing between its first assignment and its close."""
        held: dict[int, int] = defaultdict(int)
        assigned_once: set[int] = set()
        gaps = []
        for t, idx, kind, parts in self.journal.events:
            if self.protocol[idx] != protocol or t >= self.closing.get(idx, float("inf")):
                continue
            held[idx] += len(parts) if kind == "assign" else -len(parts)
            if kind == "assign":
                assigned_once.add(idx)
            elif idx in assigned_once and held[idx] == 0:
                gaps.append(f"{t:.3f}: consumer {idx} {kind} its last partitions {parts}")
        return gaps

    def committed(self) -> dict[int, int]:
        req = ConsumerGroupTopicPartitions(self.group, [TopicPartition(self.topic, p) for p in range(PARTITIONS)])
        got = self.adm.list_consumer_group_offsets([req], request_timeout=10)[self.group].result(TIMEOUT)
        return {tp.partition: tp.offset for tp in got.topic_partitions}


def discard(members) -> None:
    """Cleanup after a failure: close without committing, so the original error is what shows."""
    for m in members:
        if m is not None and not m.closed:
            m.commit_on_revoke = False
            with contextlib.suppress(Exception):  # the test is failing already
                m.close()


@pytest.fixture
def mbroker(broker_factory):
    b = broker_factory("data", extra=MIGRATION_OPTS)
    yield b
    assert_clean_log(b)


def upgrade_during_classic_rebalance(r: Rollout, classic: list[Member]) -> Member:
    """Eager classic members only: the first consumer-protocol member arrives while the classic
    group is rebalancing, with one member's JoinGroup parked in the coordinator (it waits for
    the other member, which cannot rejoin before poll() serves its eager revoke callback)."""
    leaving, parked, slow = classic
    r.stop(leaving)
    poll_until([parked], lambda: not parked.owned, 5, "the classic member to revoke everything and rejoin")
    poll_for([parked], 0.3)  # its JoinGroup is in the coordinator, waiting for `slow`
    desc = describe_group(r.adm, r.group)
    assert (desc.type, desc.state) == (CLASSIC, ConsumerGroupState.PREPARING_REBALANCING)
    assert slow.owned, "the slow member revoked although it was not polled"
    newcomer = r.start(3, "consumer")
    # the conversion answers the parked JoinGroup REBALANCE_IN_PROGRESS, which librdkafka
    # reports to the application before rejoining (into the consumer group, now)
    poll_until([parked, newcomer], lambda: parked.errors, 5, "the parked JoinGroup to be answered")
    assert [e.code() for e in parked.errors] == [KafkaError.REBALANCE_IN_PROGRESS], parked.errors
    parked.errors.clear()
    desc = describe_group(r.adm, r.group)
    assert desc.type == CONSUMER
    held = described_assignment(desc)
    assert set(held) == {parked.consumer.memberid(), slow.consumer.memberid(), newcomer.consumer.memberid()}
    # the conversion kept the slow member's classic assignment; nobody else may take it yet
    assert held[slow.consumer.memberid()] == slow.owned and not slow.owned & newcomer.owned
    return newcomer


def rolling_upgrade_and_downgrade(bootstrap: str, topic: str, strategy: str, park: bool = False) -> Rollout:
    adm = admin(bootstrap)
    create_topic(adm, topic, PARTITIONS)
    r = Rollout(bootstrap, topic, f"g-{topic}")
    try:
        classic = [r.start(i, "classic", strategy) for i in range(3)]
        r.settle("classic group", CLASSIC)
        desc = describe_group(adm, r.group)
        assert desc.partition_assignor == strategy

        upgraded = []
        for i in range(3):
            if i == 0 and park:
                upgraded.append(upgrade_during_classic_rebalance(r, classic))
            else:
                r.stop(classic[i])
                upgraded.append(r.start(3 + i, "consumer"))
            r.settle(f"upgrade step {i}", CONSUMER)
            desc = describe_group(adm, r.group)
            assert desc.partition_assignor == "uniform"  # the coordinator assigns now

        for i in range(3):
            r.stop(upgraded[i])
            if i == 2:
                # the last consumer-protocol member left: the coordinator converts the group at once
                t = poll_until(r.live, lambda: listed_type(adm, r.group) == CLASSIC, 5,
                               lambda: f"ListGroups to show a classic group; it says {listed_type(adm, r.group)}")
                assert t - r.closing[upgraded[i].idx] < 5
            r.start(6 + i, "classic", strategy)
            r.settle(f"downgrade step {i}", CONSUMER if i < 2 else CLASSIC)
        desc = describe_group(adm, r.group)
        assert desc.partition_assignor == strategy
        r.close_all()
    finally:
        discard(r.live)

    assert not r.feed.errors, r.feed.errors[:3]
    assert not r.journal.violations, r.journal.violations[:5]
    assert not r.journal.overlaps(), r.journal.overlaps()[:5]
    lost = [e for e in r.journal.events if e[2] == "lost"]
    assert not lost, f"partitions lost (a member fenced) in an orderly rollout: {lost[:3]}"
    missing = r.feed.delivered - r.consumed()
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    assert r.consumed() <= r.feed.delivered
    # and none twice: a new holder resumed exactly where the previous one committed in its revoke callback
    duplicates = sum(len(m.messages) for m in r.everyone) - len(r.consumed())
    assert duplicates == 0, f"{duplicates} records consumed twice"
    # every consumer committed what it consumed when its partitions went: the group's offsets are the log ends
    ends = defaultdict(int)
    for p, o in r.feed.delivered:
        ends[p] = max(ends[p], o + 1)
    assert r.committed() == dict(ends)
    for m in r.everyone:
        assert not [e for e in m.errors if e.code() != KafkaError._PARTITION_EOF], (m.idx, m.errors[:5])
    desc = describe_group(adm, r.group)
    assert desc.type == CLASSIC and desc.state == ConsumerGroupState.EMPTY and not desc.members
    return r


def test_rolling_upgrade_and_downgrade_cooperative(mbroker, topic_name):
    """cooperative-sticky classic consumers -> consumer protocol -> back to classic."""
    started = time.monotonic()
    r = rolling_upgrade_and_downgrade(mbroker.bootstrap, topic_name, "cooperative-sticky")
    # cooperative classic members give up only what moves: once assigned, each held
    # partitions until it closed, through both conversions
    gaps = r.holding_gaps("classic")
    assert not gaps, gaps
    print(f"steps {[(s, round(d, 2)) for s, d in r.steps]}, records {len(r.feed.delivered)}, "
          f"{time.monotonic() - started:.1f}s")


def test_rolling_upgrade_and_downgrade_eager(mbroker, topic_name):
    """range (eager) classic consumers -> consumer protocol -> back to classic: eager members
    revoke everything at every rebalance, but get partitions back and consume at every step.
    The upgrade starts in the middle of a classic rebalance (see upgrade_during_classic_rebalance)."""
    started = time.monotonic()
    r = rolling_upgrade_and_downgrade(mbroker.bootstrap, topic_name, "range", park=True)
    print(f"steps {[(s, round(d, 2)) for s, d in r.steps]}, records {len(r.feed.delivered)}, "
          f"{time.monotonic() - started:.1f}s")


def test_consumer_protocol_member_refused_when_migration_disabled(broker_factory, topic_name):
    """group.consumer.migration.policy=disabled: a consumer-protocol consumer joining a live
    classic group gets GROUP_ID_NOT_FOUND, which librdkafka treats as fatal (poll() returns
    one _FATAL error naming it; the consumer is unusable), and the classic members notice
    nothing. Once the classic group is empty, a consumer-protocol consumer simply replaces it."""
    b = broker_factory("data", extra=[*MIGRATION_OPTS, "-o", "group.consumer.migration.policy=disabled"])
    adm = admin(b.bootstrap)
    create_topic(adm, topic_name, PARTITIONS)
    r = Rollout(b.bootstrap, topic_name, f"g-{topic_name}")
    intruder = successor = None
    try:
        members = [r.start(i, "classic", "cooperative-sticky") for i in range(2)]
        r.settle("classic group", CLASSIC)
        before = {m.idx: set(m.owned) for m in members}
        t0 = time.monotonic()
        intruder = Member(8, b.bootstrap, r.group, [topic_name], r.journal)
        poll_until([*members, intruder], lambda: intruder.errors, 10, "the consumer-protocol consumer to be refused")
        poll_for([*members, intruder], 2.0)  # it stays refused: no retry, no second error
        assert len(intruder.errors) == 1, intruder.errors
        err = intruder.errors[0]
        assert err.code() == KafkaError._FATAL, err
        assert "ConsumerGroupHeartbeat fatal error" in err.str(), err
        # "Broker: The group id does not exist"
        assert KafkaError(KafkaError.GROUP_ID_NOT_FOUND).str() in err.str(), err
        assert not intruder.owned and intruder.consumer.assignment() == []
        # the classic members noticed nothing and carry on
        assert r.journal.since(t0) == [], r.journal.since(t0)
        assert {m.idx: m.owned for m in members} == before
        desc = describe_group(adm, r.group)
        assert (desc.type, desc.state) == (CLASSIC, ConsumerGroupState.STABLE)
        assert {m.member_id for m in desc.members} == {m.consumer.memberid() for m in members}
        r.settle("classic group after the refusal", CLASSIC)
        assert r.journal.since(t0) == [] and {m.idx: m.owned for m in members} == before
        for m in members:
            assert not m.errors, (m.idx, m.errors[:5])
        intruder.close()

        # an empty classic group is replaced whatever the policy; the successor resumes at the
        # offsets the classic members committed when they left
        r.close_all()
        assert listed_type(adm, r.group) == CLASSIC
        committed = r.committed()
        assert sum(committed.values()) == len(r.feed.delivered)
        successor = r.start(9, "consumer")
        r.settle("a consumer group replacing the empty classic group", CONSUMER)
        assert not successor.errors, successor.errors
        again = [(x.partition(), x.offset()) for x in successor.messages if x.offset() < committed[x.partition()]]
        assert not again, f"the successor consumed records the classic members had committed: {again[:5]}"
    finally:
        discard([intruder, successor, *r.live])
    missing = r.feed.delivered - r.consumed()
    assert not missing, sorted(missing)[:5]
    assert_clean_log(b)
