"""Broker-side recompression (Kafka's LogValidator with a topic compression.type)."""

import dataclasses

import pytest

from odradek.records import recompress as R
from odradek.records.batch import BatchError, crc_of, read_header
from odradek.records.codec import GZIP, LZ4, NONE, SNAPPY, ZSTD, Header, Record, decode_batches, encode_batch
from odradek.records.validate import ProduceRules, validate_produce_records

NOW = 1_700_000_000_000
RULES = ProduceRules(api_version=10, max_message_bytes=1 << 20)
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
NAMES = {NONE: "uncompressed", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


def _records(n=40):
    # Timestamps out of order and a header, so nothing but the codec may change.
    return [Record(i, NOW + (7 * i) % 13, b"k%d" % i, b"value-%d" % i * 5, (Header("h", b"%d" % i),))
            for i in range(n)]


def _produced(codec, **kw):
    buf = bytearray(encode_batch(_records(), compression=codec, producer_id=42, producer_epoch=3,
                                 base_sequence=17, **kw))
    header, uncompressed = validate_produce_records(buf, RULES, NOW)
    return buf, header, uncompressed


def _fields(h):
    return dataclasses.replace(h, batch_length=0, crc=0, attributes=h.attributes & ~0x07)


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_every_codec_to_every_other_keeps_records_and_header_fields(source, target):
    buf, header, uncompressed = _produced(source, is_transactional=True)
    out, rebuilt = R.recompress(buf, header, uncompressed, NAMES[target], {}, RULES.max_message_bytes)
    if source == target:
        # Kafka's in-place assignment: the batch is stored as sent.
        assert out is buf and rebuilt is header
        return
    assert rebuilt == read_header(out, 0) and rebuilt.size == len(out)
    assert rebuilt.compression == target
    assert crc_of(out, rebuilt) == rebuilt.crc
    assert _fields(rebuilt) == _fields(header)  # producer id/epoch/sequence, timestamps, counts, flags
    (batch,) = decode_batches(bytes(out), verify_crc=True)
    assert batch.is_transactional
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in _records()]


@pytest.mark.parametrize("source", CODECS)
def test_producer_keeps_every_batch_as_sent(source):
    buf, header, uncompressed = _produced(source)
    assert R.recompress(buf, header, uncompressed, "producer", {}, 1 << 20) == (buf, header)
    assert R.target_codec("producer", source) == source


def test_a_batch_too_large_once_recompressed_is_message_too_large():
    buf, header, uncompressed = _produced(ZSTD)
    with pytest.raises(BatchError) as err:
        # UnifiedLog.append checks max.message.bytes again after a recompression.
        R.recompress(buf, header, uncompressed, "uncompressed", {}, header.size + 10)
    assert err.value.code == "message_too_large"


def test_levels_follow_kip_390_topic_configs():
    assert R.codec_level(GZIP, {}) == 6  # Deflater.DEFAULT_COMPRESSION
    assert R.codec_level(GZIP, {"compression.gzip.level": 1}) == 1
    assert R.codec_level(LZ4, {}) == 0  # Kafka's default 9 is lz4's fast compressor
    assert R.codec_level(LZ4, {"compression.lz4.level": 10}) == 10
    assert R.codec_level(LZ4, {"compression.lz4.level": 17}) == 12
    assert R.codec_level(ZSTD, {}) == 3
    assert R.codec_level(ZSTD, {"compression.zstd.level": 19}) == 19
    assert R.codec_level(SNAPPY, {}) is None


def test_the_level_reaches_the_compressor():
    records = [Record(i, NOW, None, b"abcdefgh" * 64 + b"%d" % i) for i in range(500)]
    buf = bytearray(encode_batch(records))
    header, uncompressed = validate_produce_records(buf, RULES, NOW)
    fast = R.recompress(buf, header, uncompressed, "gzip", {"compression.gzip.level": 1}, 1 << 20)[0]
    best = R.recompress(buf, header, uncompressed, "gzip", {"compression.gzip.level": 9}, 1 << 20)[0]
    assert len(fast) != len(best)
    assert decode_batches(bytes(fast))[0].records == decode_batches(bytes(best))[0].records
