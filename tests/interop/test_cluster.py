"""A real cluster: etcd and three broker processes on loopback, librdkafka producing acks=all.

Every test checks outcomes a user relies on: every acknowledged record is readable, in
order, with no gap, after a leader is killed (-9) or paused (SIGSTOP, a zombie that must
not acknowledge anything after it was fenced), and the replicas agree.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.net import BrokerConnection
from odradek.commands.cluster import LocalCluster
from odradek.records.codec import encode_batch
from tests.polling import wait_until

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


def _created(cluster, name) -> bool:
    try:
        _create(cluster, name)
        return True
    except KafkaException as exc:
        if exc.args[0].name() != "INVALID_REPLICATION_FACTOR":
            raise
        return False


def _describe(cluster, name):
    md = _admin(cluster).list_topics(name, timeout=10)
    return md.topics[name].partitions


def _wait(predicate, timeout=30.0, what="condition"):
    return wait_until(predicate, timeout, 0.2, what)


def _producer(cluster, **extra):
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    return Producer(conf)


def _group_conf(cluster, group):
    return {"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}


def _group_reads_all(cluster, group, topic, expected, timeout=60):
    """A KIP-848 group member that reads `expected` records of `topic` and commits them
    synchronously; returned open (the caller closes it)."""
    cons = Consumer(_group_conf(cluster, group))
    cons.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < expected and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    assert seen == expected
    cons.commit(asynchronous=False)
    return cons


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
    # A KIP-848 group: its coordinator is the leader of its __consumer_offsets partition,
    # whichever broker that is; commits land there and are read back.
    cons = _group_reads_all(cluster, "g3", "t3", 300)
    committed = cons.committed([TopicPartition("t3", p) for p in range(3)], timeout=30)
    assert [tp.offset for tp in committed] == [100, 100, 100]
    cons.close()


def test_acks_all_survives_kill_9_of_the_leader(cluster):
    _create(cluster, "kill", partitions=1)
    _wait(lambda: sorted(_describe(cluster, "kill")[0].isrs) == [1, 2, 3], what="full ISR")
    leader = _describe(cluster, "kill")[0].leader
    prod = _producer(cluster)
    acked: list[tuple[int, bytes]] = []
    failed = []

    def report(err, msg):
        (failed.append(err) if err is not None else acked.append((msg.offset(), msg.value())))

    # A consumer reads all along, through the kill: it must carry on at the new leader.
    streamed: list[tuple[int, bytes]] = []
    stop_reading = threading.Event()

    def read():
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "kill-reader", "enable.auto.commit": False,
                      "topic.metadata.refresh.interval.ms": 1000})
        try:
            c.assign([TopicPartition("kill", 0, 0)])
            while not stop_reading.is_set() and len(streamed) < 2000:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    streamed.append((m.offset(), m.value()))
        finally:
            c.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for i in range(1000):
        prod.produce("kill", value=b"v%06d" % i, on_delivery=report)
    _wait(lambda: prod.poll(0.05) >= 0 and len(acked) >= 300 and streamed, what="first acknowledgements")
    cluster.kill(leader)  # kill -9 while acks=all produces are in flight
    for i in range(1000, 2000):
        prod.produce("kill", value=b"v%06d" % i, on_delivery=report)
        prod.poll(0)
    assert prod.flush(60) == 0
    assert not failed and len(acked) == 2000
    new_leader = _wait(lambda: _describe(cluster, "kill")[0].leader not in (leader, -1)
                       and _describe(cluster, "kill")[0].leader, what="a new leader")
    assert new_leader != leader
    # Every acknowledged record is there, in order, no gap, no duplicate (idempotence).
    got = _consume_all(cluster, "kill", 1, len(acked))[0]
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got)))
    by_offset = dict(got)
    for offset, value in acked:
        assert by_offset.get(offset) == value
    values = [v for _, v in got]
    assert values == sorted(values) and len(set(values)) == len(values)
    reader.join(60)
    stop_reading.set()
    assert streamed == got  # the consumer that read through the fail-over saw exactly the log
    # The killed broker comes back as a follower, catches up and re-enters the ISR.
    cluster.start_broker(leader)
    _wait(lambda: sorted(_describe(cluster, "kill")[0].isrs) == [1, 2, 3], timeout=60, what="ISR re-entry")


class _Loop:
    """An asyncio loop in a thread, for a raw connection that outlives one call."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _replica_bytes(cluster, node, topic, partition) -> bytes:
    d = cluster.data_dir / f"broker-{node}" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_a_paused_leader_is_fenced_and_truncates_what_it_wrote_alone(cluster):
    _create(cluster, "zombie", partitions=1)
    _wait(lambda: sorted(_describe(cluster, "zombie")[0].isrs) == [1, 2, 3], what="full ISR")
    leader = _describe(cluster, "zombie")[0].leader
    # A connection to the leader opened before it is paused: the produce sent on it waits
    # in the socket until SIGCONT, when the zombie still believes it leads.
    loop = _Loop()
    conn = BrokerConnection("127.0.0.1", cluster.ports[leader], "zombie-test", 60.0)
    loop.run(conn.open(10))
    zombie_batch = encode_batch([(0, int(time.time() * 1000), None, b"written-by-the-zombie")])
    body = {"transactional_id": None, "acks": -1, "timeout": 20000,
            "topic_data": [{"name": "zombie", "partition_data": [{"index": 0, "records": zombie_batch}]}]}
    # A request in flight to the paused broker is abandoned after request.timeout.ms (30 s
    # by default) before librdkafka retries at the new leader: keep the test short.
    prod = _producer(cluster, **{"request.timeout.ms": 5000})
    acked: list[tuple[int, bytes]] = []
    prod_cb = lambda err, msg: acked.append((msg.offset(), msg.value())) if err is None else None  # noqa: E731
    for i in range(200):
        prod.produce("zombie", value=b"a%04d" % i, on_delivery=prod_cb)
    assert prod.flush(30) == 0
    cluster.signal(leader, signal.SIGSTOP)
    try:
        zombie_answer = loop.submit(conn.request(0, body, timeout=60))
        # The controller notices the lease expiring and moves leadership; production goes on.
        for i in range(200):
            prod.produce("zombie", value=b"b%04d" % i, on_delivery=prod_cb)
        prod.poll(0.5)
        _wait(lambda: _describe(cluster, "zombie")[0].leader not in (leader, -1), what="a new leader")
    finally:
        cluster.signal(leader, signal.SIGCONT)  # the zombie wakes up believing it leads
    assert prod.flush(60) == 0
    try:
        answer = zombie_answer.result(60)
        code = answer.responses[0].partition_responses[0].error_code
    except Exception as exc:  # the zombie may also drop the connection when it steps down
        code = exc
    finally:
        loop.loop.call_soon_threadsafe(conn.close)
        loop.run(asyncio.sleep(0.1))  # let the connection's reader task finish
        loop.close()
    print("the zombie answered", code)
    # The zombie never acknowledges an acks=all write it took after it was fenced.
    assert code != 0, "a fenced leader acknowledged an acks=all produce"
    # The zombie rejoins as a follower: the ISR is whole again and every acknowledged record is readable.
    _wait(lambda: sorted(_describe(cluster, "zombie")[0].isrs) == [1, 2, 3], timeout=60, what="zombie rejoins ISR")
    assert len(acked) == 400
    got = dict(_consume_all(cluster, "zombie", 1, 400)[0])
    for offset, value in acked:
        assert got[offset] == value
    assert b"written-by-the-zombie" not in b"".join(got.values())
    # The three replicas hold the same bytes: the zombie truncated what it wrote alone.
    cluster.stop()
    logs = {n: _replica_bytes(cluster, n, "zombie", 0) for n in (1, 2, 3)}
    assert logs[1] == logs[2] == logs[3]
    assert b"written-by-the-zombie" not in logs[leader]


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


def test_brokers_keep_serving_while_etcd_is_unavailable(cluster):
    _create(cluster, "noetcd", partitions=3)
    _wait(lambda: all(sorted(p.isrs) == [1, 2, 3] for p in _describe(cluster, "noetcd").values()), what="full ISR")
    prod = _producer(cluster)
    acked: list[tuple[int, int, bytes]] = []

    def report(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    # The idempotent producer gets its id first: producer ids come in blocks from the
    # metadata store (as Kafka's come from the controller), so InitProducerId needs etcd.
    prod.produce("noetcd", value=b"warm-up", partition=0, on_delivery=report)
    assert prod.flush(20) == 0
    cluster.etcd.pause()  # SIGSTOP: connections stay open, nothing answers
    try:
        t0 = time.monotonic()
        for i in range(300):
            prod.produce("noetcd", value=b"during-%04d" % i, partition=i % 3, on_delivery=report)
        assert prod.flush(20) == 0
        during = time.monotonic() - t0
        assert len(acked) == 301  # acks=all needs the followers, not etcd
        got = _consume_all(cluster, "noetcd", 3, 301, timeout=20)
        assert sum(len(v) for v in got.values()) == 301
        time.sleep(max(0.0, 4.0 - during))  # stay unavailable past the lease TTL
    finally:
        cluster.etcd.resume()
    # etcd is back. The leases it could not refresh expire as it resumes, so every broker
    # registers again (within a keepalive interval) and the controller re-elects leaders;
    # until every broker is back, RF=3 cannot be placed (INVALID_REPLICATION_FACTOR).
    _wait(lambda: _created(cluster, "after-etcd"), what="metadata changes work again")
    for i in range(300):
        prod.produce("noetcd", value=b"after-%04d" % i, partition=i % 3, on_delivery=report)
    assert prod.flush(60) == 0
    assert len(acked) == 601
    got = _consume_all(cluster, "noetcd", 3, 601)
    stored = {(p, o): v for p, rows in got.items() for o, v in rows}
    for p, o, v in acked:
        assert stored[(p, o)] == v
    _wait(lambda: all(sorted(p.isrs) == [1, 2, 3] for p in _describe(cluster, "noetcd").values()),
          timeout=60, what="full ISR after etcd returns")


def test_a_one_broker_etcd_cluster_behaves_like_the_single_broker(tmp_path):
    c = LocalCluster(tmp_path / "one", brokers=1, port=0, overrides=["offsets.topic.num.partitions=2"])
    c.start()
    try:
        _create(c, "solo", partitions=2, rf=1, min_isr=1)
        prod = _producer(c)
        for i in range(100):
            prod.produce("solo", value=b"%03d" % i, partition=i % 2)
        assert prod.flush(30) == 0
        _group_reads_all(c, "solo-g", "solo", 100).close()
        # A restart (SIGTERM) keeps topics, records and committed offsets, as the file store does.
        c.stop_broker(1)
        c.start_broker(1)
        again = Consumer(_group_conf(c, "solo-g"))
        committed = again.committed([TopicPartition("solo", 0), TopicPartition("solo", 1)], timeout=30)
        assert sorted(tp.offset for tp in committed) == [50, 50]
        again.close()
        got = _consume_all(c, "solo", 2, 100)
        assert [o for o, _ in got[0]] == list(range(50))
    finally:
        c.stop()
