"""Interop: a topic's compression.type with confluent-kafka (librdkafka's 0011/0077):
the broker recompresses what the producer sent, and a real consumer reads every record."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.records.batch import iter_headers  # noqa: E402
from odradek.records.codec import GZIP, LZ4, NONE, ZSTD  # noqa: E402

pytestmark = pytest.mark.interop

TIMEOUT = 30.0
N = 2000


def _stored_codecs(data_dir, topic: str) -> set[int]:
    codecs = set()
    for path in sorted((data_dir / f"{topic}-0").glob("*.log")):
        codecs |= {h.compression for h in iter_headers(path.read_bytes())}
    return codecs


@pytest.mark.parametrize(("topic_codec", "producer_codec", "stored"), [
    ("lz4", "none", LZ4),
    ("zstd", "gzip", ZSTD),
    ("uncompressed", "snappy", NONE),
    ("gzip", "lz4", GZIP),
])
def test_the_broker_stores_the_topics_codec_and_consumers_read_everything(broker, topic_name, topic_codec,
                                                                          producer_codec, stored):
    adm = AdminClient({"bootstrap.servers": broker.bootstrap})
    new = NewTopic(topic_name, 1, 1, config={"compression.type": topic_codec})
    assert adm.create_topics([new])[topic_name].result(TIMEOUT) is None
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": producer_codec, "linger.ms": 5})
    for i in range(N):
        p.produce(topic_name, key=b"k%d" % i, value=b"value %d " % i * 8, partition=0, headers=[("h", b"%d" % i)])
    assert p.flush(TIMEOUT) == 0
    assert _stored_codecs(broker.data_dir, topic_name) == {stored}

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "check.crcs": True})
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got = []
        for _ in range(400):
            if len(got) >= N:
                break
            for m in c.consume(num_messages=500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.key(), m.value(), m.headers()))
    finally:
        c.close()
    assert got == [(i, b"k%d" % i, b"value %d " % i * 8, [("h", b"%d" % i)]) for i in range(N)]
