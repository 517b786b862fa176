"""Interop: what librdkafka's own integration tests asserted and odradek once failed,
reproduced with confluent-kafka against a real broker process (the suite itself is not
run by CI; see CONFORMANCE.md)."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop

TIMEOUT = 30.0


def _topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    adm = AdminClient({"bootstrap.servers": bootstrap})
    assert adm.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT) is None
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        p.produce(name, value=b"v%d" % i, partition=0)
    assert p.flush(TIMEOUT) == 0


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_commit_after_assign_with_either_group_protocol(broker, topic_name, protocol):
    # 0026, 0030, 0099, 0130, 0140: a consumer-protocol consumer has a client-generated
    # member id from creation and commits with it and epoch -1 after assign(); this was
    # GROUP_ID_NOT_FOUND (and UNKNOWN_MEMBER_ID once the group held offsets).
    _topic(broker.bootstrap, topic_name)
    group = f"{topic_name}-{protocol}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": protocol,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        for offset in (3, 4):  # the second commit meets a group that already holds offsets
            out = c.commit(offsets=[TopicPartition(topic_name, 0, offset)], asynchronous=False)
            assert [(tp.partition, tp.offset, tp.error) for tp in out] == [(0, offset, None)]
        got = c.committed([TopicPartition(topic_name, 0)], timeout=TIMEOUT)
        assert [(tp.offset, tp.error) for tp in got] == [(4, None)]
    finally:
        c.close()


def test_describe_reports_authorized_operations(broker, topic_name):
    # 0081 describe_topics/describe_cluster: "Expected 8 authorized operations, got 0".
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    _topic(broker.bootstrap, topic_name)
    adm = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = adm.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True)[topic_name]
    ops = set(desc.result(TIMEOUT).authorized_operations)
    assert ops == {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    cluster = adm.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert len(cluster.authorized_operations) == 7


def test_keyless_records_to_a_compacted_topic_are_named_per_record(broker, topic_name):
    # 0011 produce_batch "test_message_single_partition_record_fail": 100 records in one
    # batch, every tenth keyless, to a compacted topic: librdkafka expects INVALID_RECORD for
    # the 10 that Kafka names in record_errors (KIP-467) and _INVALID_DIFFERENT_RECORD for
    # the 90 that failed only because their batch did.
    from confluent_kafka import KafkaError

    adm = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = adm.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})])[topic_name]
    assert fut.result(TIMEOUT) is None
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, "batch.num.messages": 1000,
                  "enable.idempotence": False, "retries": 0})
    codes: dict[int, int] = {}

    def report(i):
        return lambda err, msg: codes.__setitem__(i, err.code() if err else 0)

    for i in range(100):
        p.produce(topic_name, value=b"v%d" % i, key=None if i % 10 == 0 else b"k%d" % i, partition=0,
                  on_delivery=report(i))
    assert p.flush(TIMEOUT) == 0
    assert sorted(i for i, c in codes.items() if c == KafkaError.INVALID_RECORD) == list(range(0, 100, 10))
    assert sum(1 for c in codes.values() if c == KafkaError._INVALID_DIFFERENT_RECORD) == 90
