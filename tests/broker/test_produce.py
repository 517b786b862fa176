"""Produce in process: the topic's compression.type decides how a batch is stored
(Kafka's LogValidator recompression), and the log start offset in the answers."""

from __future__ import annotations

import os
import uuid

import pytest

from odradek.records.batch import TIMESTAMP_TYPE_MASK, iter_headers
from odradek.records.codec import GZIP, LZ4, NONE, SNAPPY, ZSTD, Record, decode_batches, encode_batch
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)
T0 = 1_700_000_000_000
NAMES = {NONE: "uncompressed", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


def _records(n: int, start: int = 0, value: bytes = b"value") -> list[Record]:
    return [Record(i, T0 + i, b"k%d" % (start + i), value + b"%d" % (start + i)) for i in range(n)]


def produce_batch(b: InProcess, topic: str, batch: bytes, version: int = 9):
    frame = request_frame(0, version, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    _, resp = parse_response(0, version, b.handle(frame))
    return resp.responses[0].partition_responses[0]


def stored(b: InProcess, topic: str) -> bytes:
    plog = b.broker.logs.get(topic, 0)
    return b"".join(seg.pread(0, seg.size) for seg in plog.segments)


@pytest.fixture
def b(tmp_path):
    inproc = InProcess(tmp_path / "data")
    yield inproc
    assert inproc.broker.internal_errors == 0
    inproc.close()


@pytest.mark.parametrize("source", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_batches_are_stored_with_the_topics_codec(b, source, target):
    b.broker.create_topic("t", 1, {"compression.type": target})
    for start in (0, 30):
        r = produce_batch(b, "t", encode_batch(_records(30, start), compression=source, producer_id=7,
                                               producer_epoch=0, base_sequence=start))
        assert (int(r.error_code), r.base_offset) == (0, start)
    data = stored(b, "t")
    headers = list(iter_headers(data))
    assert [h.compression for h in headers] == [{v: k for k, v in NAMES.items()}[target]] * 2
    assert [(h.base_offset, h.producer_id, h.base_sequence) for h in headers] == [(0, 7, 0), (30, 7, 30)]
    got = [(r.offset, r.timestamp, r.key, r.value) for batch in decode_batches(data, verify_crc=True)
           for r in batch.records]
    assert got == [(r.offset + s, r.timestamp, r.key, r.value) for s in (0, 30) for r in _records(30, s)]


def test_producer_stores_the_batch_as_sent(b):
    b.broker.create_topic("t", 1, {})  # compression.type=producer, the default
    batch = encode_batch(_records(20), compression=SNAPPY)
    assert produce_batch(b, "t", batch).error_code == 0
    data = stored(b, "t")
    # Only the base offset and leader epoch (before the CRC) are patched; magic, CRC,
    # attributes and records are stored byte for byte.
    assert len(data) == len(batch) and data[16:] == batch[16:]


def test_recompression_keeps_log_append_time(b):
    b.broker.create_topic("t", 1, {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime"})
    assert produce_batch(b, "t", encode_batch(_records(5))).error_code == 0
    (batch,) = decode_batches(stored(b, "t"), verify_crc=True)
    assert batch.header.compression == ZSTD and batch.header.attributes & TIMESTAMP_TYPE_MASK
    assert {r.timestamp for r in batch.records} == {batch.header.max_timestamp}


def test_a_batch_too_large_once_decompressed_is_refused(b):
    # UnifiedLog.append checks max.message.bytes again after recompression.
    batch = encode_batch(_records(200, value=b"x" * 200), compression=ZSTD)
    b.broker.create_topic("t", 1, {"compression.type": "uncompressed", "max.message.bytes": str(len(batch) + 100)})
    r = produce_batch(b, "t", batch)
    assert int(r.error_code) == 10 and "recompression" in r.error_message  # MESSAGE_TOO_LARGE
    assert b.broker.logs.get("t", 0).log_end_offset == 0


def test_incompressible_data_is_recompressed_too(b):
    b.broker.create_topic("t", 1, {"compression.type": "lz4"})
    records = [Record(i, T0, None, os.urandom(500)) for i in range(10)]
    assert produce_batch(b, "t", encode_batch(records)).error_code == 0
    (batch,) = decode_batches(stored(b, "t"), verify_crc=True)
    assert batch.header.compression == LZ4 and [r.value for r in batch.records] == [r.value for r in records]
