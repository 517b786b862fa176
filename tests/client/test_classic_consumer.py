"""The odradek consumer in classic groups (JoinGroup/SyncGroup), alone and mixed with librdkafka.

Each member records its rebalance callbacks in one `Journal` (tests/interop/classic_clients),
which flags any partition assigned while another member still holds it and any record
consumed from a partition the consumer does not hold. Members are polled round-robin by
the test's thread; the odradek members use the synchronous facade, whose listener runs
inside poll on this thread, as librdkafka's does.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import Consumer, RebalanceListener
from tests.interop.classic_clients import (
    BROKER_OPTS,
    HEARTBEAT_MS,
    MAX_POLL_MS,
    SESSION_MS,
    TIMEOUT,
    CKMember,
    Journal,
    partition_split,
    wait_until,
)

pytestmark = pytest.mark.interop


@pytest.fixture
def cbroker(broker_factory):
    return broker_factory("data", extra=BROKER_OPTS)


def make_topic(bootstrap: str, name: str, partitions: int, records: int = 0) -> set[tuple[str, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    if records:
        p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(records):
            p.produce(name, key=b"k%d" % i, value=b"v%d" % i)
        assert p.flush(TIMEOUT) == 0
    return {(name, i) for i in range(partitions)}


class OdMember:
    """An odradek classic-group consumer (sync facade) feeding the journal."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], journal: Journal, *,
                 strategy: str = "range", instance_id: str | None = None) -> None:
        member = self
        self.name, self.journal = name, journal
        self.records: list[tuple[str, int, int]] = []
        self.closed = False

        class Listener(RebalanceListener):
            def on_partitions_revoked(self, parts):
                member.consumer.commit({tp: member.consumer.position(tp) for tp in parts
                                        if tp in member.consumer.assignment()})
                member.journal.record(member.name, "revoke", [tuple(tp) for tp in parts])

            def on_partitions_assigned(self, parts):
                member.journal.record(member.name, "assign", [tuple(tp) for tp in parts])

            def on_partitions_lost(self, parts):
                member.journal.record(member.name, "lost", [tuple(tp) for tp in parts])

        self.consumer = Consumer(bootstrap, group_id=group, group_protocol="classic", client_id=f"od-{name}",
                                 partition_assignment_strategy=strategy, group_instance_id=instance_id,
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                 max_poll_interval_ms=MAX_POLL_MS, auto_offset_reset="earliest",
                                 enable_auto_commit=False, fetch_max_wait_ms=100)
        self.consumer.subscribe(topics, listener=Listener())

    def poll(self, timeout: float = 0.02) -> None:
        if self.closed:
            return
        for r in self.consumer.poll(timeout * 1000):
            self.journal.check_consumed(self.name, (r.topic, r.partition), r.offset)
            self.records.append((r.topic, r.partition, r.offset))

    def owned(self) -> set[tuple[str, int]]:
        return self.journal.held_by(self.name)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def settle(members, parts, timeout: float = TIMEOUT) -> None:
    """Poll everyone until their holdings split `parts` evenly, and stay so for a moment."""
    live = [m for m in members if not m.closed]

    def split() -> bool:
        for m in live:
            m.poll(0.01)
        return partition_split({m.name: m.owned() for m in live}, parts)

    wait_until(split, timeout, lambda: {m.name: sorted(m.owned()) for m in live})
    quiet_until = time.monotonic() + 0.5
    while time.monotonic() < quiet_until:
        for m in live:
            m.poll(0.01)
    assert partition_split({m.name: m.owned() for m in live}, parts)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_odradek_classic_group_rebalances_without_double_ownership(cbroker, topic_name, strategy):
    parts = make_topic(cbroker.bootstrap, topic_name, 6, records=300)
    journal = Journal()
    group = f"g-{topic_name}"
    members = [OdMember("a", cbroker.bootstrap, group, [topic_name], journal, strategy=strategy)]
    settle(members, parts)
    assert members[0].owned() == parts
    members.append(OdMember("b", cbroker.bootstrap, group, [topic_name], journal, strategy=strategy))
    settle(members, parts)
    members.append(OdMember("c", cbroker.bootstrap, group, [topic_name], journal, strategy=strategy))
    settle(members, parts)
    members[0].close()
    settle(members, parts)
    seen = {(t, p, o) for m in members for t, p, o in m.records}
    assert len(seen) == 300  # every record was consumed by someone
    if strategy == "cooperative-sticky":
        # KIP-429: the survivors never revoke what they keep, so "b" never revoked everything at once
        revokes_of_b = [e for e in journal.events if e[1] == "b" and e[2] == "revoke"]
        assert all(len(e[3]) < len(parts) for e in revokes_of_b)
    assert journal.violations == []
    for m in members:
        m.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_mixed_classic_group_odradek_and_librdkafka(cbroker, topic_name, strategy):
    parts = make_topic(cbroker.bootstrap, topic_name, 6, records=200)
    journal = Journal()
    group = f"g-{topic_name}"
    od = OdMember("od", cbroker.bootstrap, group, [topic_name], journal, strategy=strategy)
    ck = CKMember("ck", cbroker.bootstrap, group, [topic_name], journal,
                  **{"partition.assignment.strategy": strategy})
    members = [od, ck]
    settle(members, parts)
    assert od.owned() and ck.owned()
    ck.close()  # LeaveGroup after revoking: the odradek member takes everything over
    settle([od], parts)
    assert od.owned() == parts
    assert journal.violations == []
    od.close()


def test_classic_static_member_restart_keeps_partitions_without_rebalance(cbroker, topic_name):
    parts = make_topic(cbroker.bootstrap, topic_name, 4)
    journal = Journal()
    group = f"g-{topic_name}"
    a = OdMember("a", cbroker.bootstrap, group, [topic_name], journal, instance_id="static-a")
    b = OdMember("b", cbroker.bootstrap, group, [topic_name], journal, instance_id="static-b")
    settle([a, b], parts)
    held = a.owned()
    generation = a.consumer.member.generation
    a.close()  # KIP-345: a static member sends no LeaveGroup
    journal.forget("a")
    t0 = time.monotonic()
    a2 = OdMember("a2", cbroker.bootstrap, group, [topic_name], journal, instance_id="static-a")
    wait_until(lambda: (a2.poll(0.01), b.poll(0.01)) and a2.owned() == held, TIMEOUT, "a2 takes a's partitions")
    assert a2.consumer.member.generation == generation  # no rebalance: same generation
    assert journal.since(t0, "b") == []  # the other member saw nothing
    assert journal.violations == []
    a2.close()
    b.close()
