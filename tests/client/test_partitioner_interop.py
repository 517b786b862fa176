"""Interop: our key partitioner against librdkafka's ``murmur2_random`` on a real broker.

librdkafka does not expose its partitioner, so the test asks it indirectly: produce
distinct keys to a fresh topic and read the partition of each delivery report.
"""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.partitioner import key_partition

pytestmark = pytest.mark.interop

TIMEOUT = 30.0  # seconds, for any single admin call / flush
KEYS = 300


def keys() -> list[bytes]:
    # Distinct keys of every length mod 4 (so all tail cases), plus non-ASCII bytes.
    out = [f"key-{i}".encode() for i in range(KEYS - 44)]
    out += [b"k" * n for n in range(1, 41)]
    out += [b"\x00", b"\xff\xfe\xfd", "ключ".encode(), bytes(range(256))]
    assert len(set(out)) == KEYS
    return out


@pytest.mark.parametrize("partitions", [1, 7, 13])
def test_key_partition_matches_librdkafka_murmur2_random(broker, topic_name, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})
    fut = admin.create_topics([NewTopic(topic_name, partitions, 1)], operation_timeout=10)[topic_name]
    assert fut.result(TIMEOUT) is None

    delivered: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.key()] = msg.partition()

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "partitioner": "murmur2_random",  # librdkafka's Java-compatible partitioner
            "linger.ms": 5,
        }
    )
    for key in keys():
        producer.produce(topic_name, key=key, value=b"v", on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []
    assert len(delivered) == KEYS

    mismatched = {k: (p, key_partition(k, partitions)) for k, p in delivered.items() if key_partition(k, partitions) != p}
    assert mismatched == {}
    if partitions > 1:
        assert len(set(delivered.values())) == partitions  # the keys really spread out
