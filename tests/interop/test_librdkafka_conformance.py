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
