"""Interop: confluent-kafka's AdminClient.delete_records against a real broker process
(librdkafka's 0081 admin test), with the moved log start seen by consumers and kept
across restarts, graceful and not."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

pytestmark = pytest.mark.interop

TIMEOUT = 30.0
TOPIC = "deleted-records"


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def _delete(adm: AdminClient, offset: int, partition: int = 0):
    (fut,) = adm.delete_records([TopicPartition(TOPIC, partition, offset)], operation_timeout=10).values()
    return fut.result(TIMEOUT).low_watermark


def _delete_error(adm: AdminClient, offset: int) -> KafkaError:
    (fut,) = adm.delete_records([TopicPartition(TOPIC, 0, offset)], operation_timeout=10).values()
    with pytest.raises(KafkaException) as info:
        fut.result(TIMEOUT)
    return info.value.args[0]


def _earliest(adm: AdminClient) -> int:
    tp = TopicPartition(TOPIC, 0)
    return adm.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=10)[tp].result(TIMEOUT).offset


def _consume_from_beginning(bootstrap: str, expected: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "check.crcs": True})
    try:
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=TIMEOUT)
        offsets: list[int] = []
        for _ in range(200):
            if len(offsets) >= expected:
                break
            for m in c.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                offsets.append(m.offset())
        return [low, high, *offsets]
    finally:
        c.close()


def test_delete_records_moves_the_low_watermark_and_survives_restarts(broker_factory):
    b = broker_factory()
    adm = _admin(b.bootstrap)
    assert adm.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT) is None
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(TOPIC, value=b"v%d" % i, partition=0)
        p.flush(TIMEOUT)  # one batch each: the log start falls on batch boundaries and inside none
    for i in range(3):
        p.produce(TOPIC, value=b"w%d" % i, partition=1)
    assert p.flush(TIMEOUT) == 0

    assert _delete(adm, 4) == 4
    assert _earliest(adm) == 4
    # A consumer starting from the beginning starts at the new log start.
    low, high, *offsets = _consume_from_beginning(b.bootstrap, 6)
    assert (low, high, offsets) == (4, 10, [4, 5, 6, 7, 8, 9])
    # Past the high watermark: OFFSET_OUT_OF_RANGE, nothing moves.
    assert _delete_error(adm, 11).code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert _delete(adm, 2) == 4  # below the start: the start stays
    assert _delete(adm, OFFSET_END, partition=1) == 3  # -1: everything up to the high watermark

    # A graceful restart keeps the starts...
    assert b.stop() == 0
    b.start()
    adm = _admin(b.bootstrap)
    assert _earliest(adm) == 4
    tp1 = TopicPartition(TOPIC, 1)
    assert adm.list_offsets({tp1: OffsetSpec.earliest()}, request_timeout=10)[tp1].result(TIMEOUT).offset == 3
    assert _delete(adm, 7) == 7
    # ... and so does a kill: the start was written before the answer.
    b.kill()
    b.start()
    adm = _admin(b.bootstrap)
    assert _earliest(adm) == 7
    low, high, *offsets = _consume_from_beginning(b.bootstrap, 3)
    assert (low, high, offsets) == (7, 10, [7, 8, 9])
    assert b.stop() == 0


def test_librdkafka_0081_delete_records_scenario(broker, topic_name):
    # 0081-admin.c do_test_DeleteRecords: three topics of three partitions, 100 messages
    # each; wipe topic 0, wipe partition 0 and half of partition 2 of topic 1, and two
    # out-of-range requests on topic 2 (an unset offset, -1001, and one past the end).
    topics = [f"{topic_name}-{i}" for i in range(3)]
    adm = _admin(broker.bootstrap)
    for fut in adm.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        assert fut.result(TIMEOUT) is None
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for t in topics:
        for partition in range(3):
            for i in range(100):
                p.produce(t, value=b"%d" % i, partition=partition)
    assert p.flush(TIMEOUT) == 0
    requests = [TopicPartition(topics[0], i, OFFSET_END) for i in range(3)] + [
        TopicPartition(topics[1], 0, OFFSET_END), TopicPartition(topics[1], 2, 50),
        TopicPartition(topics[2], 0), TopicPartition(topics[2], 1, 101)]
    results = {}
    for tp, fut in adm.delete_records(requests, operation_timeout=10).items():
        try:
            results[(tp.topic, tp.partition)] = fut.result(TIMEOUT).low_watermark
        except KafkaException as exc:
            results[(tp.topic, tp.partition)] = exc.args[0].code()
    assert results == {(topics[0], 0): 100, (topics[0], 1): 100, (topics[0], 2): 100, (topics[1], 0): 100,
                       (topics[1], 2): 50, (topics[2], 0): KafkaError.OFFSET_OUT_OF_RANGE,
                       (topics[2], 1): KafkaError.OFFSET_OUT_OF_RANGE}
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        marks = {(t, i): c.get_watermark_offsets(TopicPartition(t, i), timeout=TIMEOUT)
                 for t in topics for i in range(3)}
    finally:
        c.close()
    expected_low = {k: v for k, v in results.items() if v in (50, 100)}
    assert marks == {k: (expected_low.get(k, 0), 100) for k in marks}
