"""Interop: confluent-kafka (librdkafka) transactional producers and read_committed consumers
against a real `odradek broker` process (KIP-98): commit and abort visibility, zombie
fencing, and the coordinator aborting a transaction that outlived its timeout."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop
TIMEOUT = 30.0


def create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None,
             wait: float = 15.0) -> list[bytes]:
    """Every record of `topic` a consumer with `isolation` sees, reading until the end
    offsets (of that isolation level) are reached, or `expect` records, or `wait` s."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        c.assign(tps)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1] for p in range(partitions)}
        got: list[bytes] = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
            if expect is not None and len(got) >= expect:
                break
            pos = c.position(tps)
            if expect is None and all(tp.offset >= ends[tp.partition] for tp in pos if tp.offset >= 0) \
                    and all(tp.offset >= 0 for tp in pos):
                break
        return got
    finally:
        c.close()


def producer(bootstrap: str, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(TIMEOUT)
    return p


def test_committed_records_are_visible_to_read_committed_and_aborted_ones_are_not(broker, topic_name):
    create(broker.bootstrap, topic_name)
    p = producer(broker.bootstrap, f"tx-{topic_name}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic_name, value=b"commit-%d" % i, partition=i % 2)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic_name, value=b"abort-%d" % i, partition=i % 2)
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic_name, value=b"last", partition=0)
    p.commit_transaction(TIMEOUT)

    committed = read_all(broker.bootstrap, topic_name, 2, "read_committed", expect=11)
    assert sorted(committed) == sorted([b"commit-%d" % i for i in range(10)] + [b"last"])
    everything = read_all(broker.bootstrap, topic_name, 2, "read_uncommitted", expect=17)
    assert sorted(everything) == sorted([b"commit-%d" % i for i in range(10)] + [b"abort-%d" % i for i in range(6)]
                                        + [b"last"])


def test_an_open_transaction_holds_read_committed_consumers_back(broker, topic_name):
    create(broker.bootstrap, topic_name, 1)
    p = producer(broker.bootstrap, f"tx-{topic_name}")
    p.begin_transaction()
    p.produce(topic_name, value=b"open", partition=0)
    p.flush(TIMEOUT)
    # The last stable offset stays at the transaction's first offset; read_uncommitted sees it.
    assert read_all(broker.bootstrap, topic_name, 1, "read_committed", wait=2.0) == []
    assert read_all(broker.bootstrap, topic_name, 1, "read_uncommitted", expect=1) == [b"open"]
    p.commit_transaction(TIMEOUT)
    assert read_all(broker.bootstrap, topic_name, 1, "read_committed", expect=1) == [b"open"]


def test_a_zombie_producer_with_the_same_transactional_id_is_fenced(broker, topic_name):
    create(broker.bootstrap, topic_name, 1)
    tid = f"tx-{topic_name}"
    zombie = producer(broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic_name, value=b"zombie", partition=0)
    zombie.flush(TIMEOUT)
    fresh = producer(broker.bootstrap, tid)  # bumps the epoch, aborting the zombie's transaction
    fresh.begin_transaction()
    fresh.produce(topic_name, value=b"fresh", partition=0)
    fresh.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as e:
        zombie.produce(topic_name, value=b"zombie-2", partition=0)
        zombie.commit_transaction(TIMEOUT)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()
    assert read_all(broker.bootstrap, topic_name, 1, "read_committed", expect=1) == [b"fresh"]


def test_the_coordinator_aborts_a_transaction_past_its_timeout(broker, topic_name):
    create(broker.bootstrap, topic_name, 1)
    p = producer(broker.bootstrap, f"tx-{topic_name}", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic_name, value=b"late", partition=0)
    p.flush(TIMEOUT)
    time.sleep(3.5)
    with pytest.raises(KafkaException):
        p.commit_transaction(TIMEOUT)
    # The abort marker ended it: read_committed moves on past it, and never sees it.
    assert read_all(broker.bootstrap, topic_name, 1, "read_committed", wait=3.0) == []
    again = producer(broker.bootstrap, f"tx-{topic_name}")
    again.begin_transaction()
    again.produce(topic_name, value=b"after", partition=0)
    again.commit_transaction(TIMEOUT)
    assert read_all(broker.bootstrap, topic_name, 1, "read_committed", expect=1) == [b"after"]
