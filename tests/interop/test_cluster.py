"""A real cluster: etcd and three broker processes on loopback, librdkafka producing acks=all.

Every test checks outcomes a user relies on: every acknowledged record is readable, in
order, with no gap, after a leader is killed (-9) or paused (SIGSTOP, a zombie that must
not acknowledge anything after it was fenced), and the replicas agree.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.commands.cluster import LocalCluster

pytestmark = pytest.mark.timeout(240)

SESSION_MS = 3000  # broker.session.timeout.ms: the etcd lease; a dead broker is noticed within it


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "cluster", brokers=3, racks=["a", "b", "c"], port=0,
                     overrides=[f"broker.session.timeout.ms={SESSION_MS}", "replica.lag.time.max.ms=4000",
                                "offsets.topic.num.partitions=3"])
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _create(cluster, name, partitions=1, rf=3, min_isr=2):
    admin = _admin(cluster)  # keep it alive until the answer comes
    fs = admin.create_topics([NewTopic(name, partitions, rf, config={"min.insync.replicas": str(min_isr)})])
    fs[name].result(30)


def _describe(cluster, name):
    md = _admin(cluster).list_topics(name, timeout=10)
    return md.topics[name].partitions


def _wait(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _producer(cluster, **extra):
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    return Producer(conf)


def _consume_all(cluster, topic, partitions, expected, timeout=60):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while sum(len(v) for v in out.values()) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out[m.partition()].append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def test_three_brokers_place_replicas_across_racks_and_replicate(cluster):
    _create(cluster, "t3", partitions=3)
    md = _admin(cluster).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    parts = md.topics["t3"].partitions
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3]  # RF 3 on three racks: one replica per rack
    # Leadership spreads: three partitions, three different preferred leaders.
    assert len({p.leader for p in parts.values()}) == 3
    _wait(lambda: all(sorted(p.isrs) == [1, 2, 3] for p in _describe(cluster, "t3").values()), what="full ISR")
    prod = _producer(cluster)
    acked = []
    for i in range(300):
        prod.produce("t3", value=b"%d" % i, partition=i % 3,
                     on_delivery=lambda err, msg: acked.append(msg) if err is None else None)
    assert prod.flush(30) == 0
    assert len(acked) == 300
    got = _consume_all(cluster, "t3", 3, 300)
    for p in range(3):
        assert [o for o, _ in got[p]] == list(range(100))


def test_acks_all_survives_kill_9_of_the_leader(cluster):
    _create(cluster, "kill", partitions=1)
    _wait(lambda: sorted(_describe(cluster, "kill")[0].isrs) == [1, 2, 3], what="full ISR")
    leader = _describe(cluster, "kill")[0].leader
    prod = _producer(cluster)
    acked: list[tuple[int, bytes]] = []
    failed = []

    def report(err, msg):
        (failed.append(err) if err is not None else acked.append((msg.offset(), msg.value())))

    n = 0
    killed_at = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (killed_at is None or len(acked) < 2000):
        prod.produce("kill", value=b"v%06d" % n, on_delivery=report)
        n += 1
        prod.poll(0)
        if n % 200 == 0:
            prod.flush(0.05)
        if killed_at is None and len(acked) >= 500:
            cluster.kill(leader)  # kill -9 in the middle of a stream of acks=all produces
            killed_at = time.monotonic()
    assert prod.flush(60) == 0
    assert killed_at is not None and not failed
    new_leader = _describe(cluster, "kill")[0].leader
    assert new_leader not in (leader, -1)
    # Every acknowledged record is there, in order, no gap, no duplicate (idempotence).
    got = _consume_all(cluster, "kill", 1, len(acked))[0]
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got)))
    by_offset = dict(got)
    for offset, value in acked:
        assert by_offset.get(offset) == value
    values = [v for _, v in got]
    assert values == sorted(values) and len(set(values)) == len(values)
    # The killed broker comes back as a follower, catches up and re-enters the ISR.
    cluster.start_broker(leader)
    _wait(lambda: sorted(_describe(cluster, "kill")[0].isrs) == [1, 2, 3], timeout=60, what="ISR re-entry")


def test_a_paused_leader_is_fenced_and_truncates_what_it_wrote_alone(cluster):
    _create(cluster, "zombie", partitions=1)
    _wait(lambda: sorted(_describe(cluster, "zombie")[0].isrs) == [1, 2, 3], what="full ISR")
    leader = _describe(cluster, "zombie")[0].leader
    prod = _producer(cluster)
    acked: list[tuple[int, bytes]] = []
    prod_cb = lambda err, msg: acked.append((msg.offset(), msg.value())) if err is None else None  # noqa: E731
    for i in range(200):
        prod.produce("zombie", value=b"a%04d" % i, on_delivery=prod_cb)
    assert prod.flush(30) == 0
    cluster.signal(leader, signal.SIGSTOP)
    try:
        # The controller notices the lease expiring and moves leadership; production goes on.
        for i in range(200):
            prod.produce("zombie", value=b"b%04d" % i, on_delivery=prod_cb)
        assert prod.flush(60) == 0
        assert _describe(cluster, "zombie")[0].leader != leader
    finally:
        cluster.signal(leader, signal.SIGCONT)
    # The zombie rejoins as a follower: the ISR is whole again and every acknowledged record is readable.
    _wait(lambda: sorted(_describe(cluster, "zombie")[0].isrs) == [1, 2, 3], timeout=60, what="zombie rejoins ISR")
    assert len(acked) == 400
    got = dict(_consume_all(cluster, "zombie", 1, 400)[0])
    for offset, value in acked:
        assert got[offset] == value


def test_not_enough_replicas_when_only_one_broker_is_left(cluster):
    _create(cluster, "nr", partitions=1, min_isr=2)
    _wait(lambda: sorted(_describe(cluster, "nr")[0].isrs) == [1, 2, 3], what="full ISR")
    leader = _describe(cluster, "nr")[0].leader
    for other in [n for n in (1, 2, 3) if n != leader]:
        cluster.kill(other)
    _wait(lambda: _describe(cluster, "nr")[0].isrs == [leader], timeout=30, what="ISR shrinks to the leader")
    prod = _producer(cluster, **{"message.timeout.ms": 5000, "enable.idempotence": False, "retries": 0})
    errors = []
    prod.produce("nr", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    prod.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].name() == "NOT_ENOUGH_REPLICAS"
