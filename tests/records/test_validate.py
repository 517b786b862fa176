"""Produce validation: every check Kafka's broker makes, in its order, with its error."""

import struct

import crc32c
import cramjam
import pytest

from odradek.records.batch import HEADER_SIZE, read_header
from odradek.records.codec import GZIP, LZ4, NONE, SNAPPY, ZSTD, Record, compress, decode_batches, encode_batch
from odradek.records.validate import MAX_DECOMPRESSED, ProduceRules, validate_produce

NOW = 1_700_000_000_000
RULES = ProduceRules(api_version=10, max_message_bytes=1 << 20)
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


def _batch(n=3, **kw) -> bytearray:
    return bytearray(encode_batch([Record(i, NOW + i, b"k%d" % i, b"v%d" % i) for i in range(n)], **kw))


def _recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


def _reject(buf, rules=RULES, now=NOW):
    with pytest.raises(Exception) as err:
        validate_produce(bytearray(buf), rules, now)
    return err.value.code, str(err.value), err.value.record_errors


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_of_every_codec_pass_unchanged(codec):
    buf = _batch(50, compression=codec, producer_id=3, producer_epoch=0, base_sequence=0)
    before = bytes(buf)
    header = validate_produce(buf, RULES, NOW)
    assert bytes(buf) == before and header == read_header(before, 0)


# --- ProduceRequest.validateRecords --------------------------------------------------------------


def test_no_batch_at_all():
    assert _reject(b"")[0] == "invalid_record"
    assert _reject(b"\x00" * 11)[0] == "invalid_record"


def test_magic_zero_and_one_are_invalid_record_and_other_magics_corrupt():
    for magic, code in ((0, "invalid_record"), (1, "invalid_record"), (3, "corrupt_message"), (0x78, "corrupt_message")):
        buf = _batch()
        buf[16] = magic
        assert _reject(buf)[0] == code, magic


def test_only_one_batch_per_partition():
    code, message, _ = _reject(_batch() + _batch())
    assert code == "invalid_record" and "exactly one record batch" in message


def test_zstd_needs_produce_v7():
    rules = ProduceRules(api_version=6, max_message_bytes=1 << 20)
    assert _reject(_batch(compression=ZSTD), rules)[0] == "unsupported_compression_type"
    validate_produce(_batch(compression=ZSTD), ProduceRules(api_version=7, max_message_bytes=1 << 20), NOW)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_compression_ids_are_rejected_even_with_a_valid_crc(codec_id):
    buf = _batch()
    struct.pack_into(">h", buf, 21, codec_id)
    code, message, _ = _reject(_recrc(buf))
    assert code == "invalid_record" and f"compression type id {codec_id}" in message


# --- UnifiedLog.analyzeAndValidateRecords --------------------------------------------------------


def test_base_offset_size_and_crc():
    buf = _batch()
    struct.pack_into(">q", buf, 0, 5)
    assert _reject(buf)[0] == "invalid_record"
    big = _batch(10)
    assert _reject(big, ProduceRules(api_version=10, max_message_bytes=len(big) - 1))[0] == "message_too_large"
    flipped = _batch()
    flipped[-1] ^= 1
    assert _reject(flipped)[0] == "corrupt_message"


@pytest.mark.parametrize("cut", [HEADER_SIZE - 1, 20, 13, 15])
def test_truncated_headers_are_corrupt(cut):
    assert _reject(_batch()[:cut])[0] == "corrupt_message"


def test_batch_longer_than_the_partition_data_is_corrupt():
    assert _reject(_batch()[:-1])[0] == "corrupt_message"


# --- LogValidator.validateBatch ------------------------------------------------------------------


def _header_edit(fmt, pos, value, buf=None):
    buf = _batch() if buf is None else buf
    struct.pack_into(fmt, buf, pos, value)
    return _recrc(buf)


@pytest.mark.parametrize("edit,text", [
    (lambda: _header_edit(">i", 57, 2), "Inconsistent batch offset range"),            # count 2, deltas say 3
    (lambda: _header_edit(">i", 23, -1), "invalid offset range"),                      # last offset delta -1
    (lambda: _header_edit(">i", 57, 0, _header_edit(">i", 23, -1)), "invalid offset range"),
    (lambda: _header_edit(">i", 57, -5, _header_edit(">i", 23, -6)), "invalid offset range"),
    (lambda: _header_edit(">h", 21, 0x20), "control records"),
    (lambda: _header_edit(">h", 21, 0x40), "reserved"),                                # delete-horizon bit
    (lambda: _header_edit(">h", 21, 0x80), "reserved"),
    (lambda: _header_edit(">h", 21, -0x8000), "reserved"),
    (lambda: _header_edit(">q", 43, 7), "Invalid sequence number"),                    # producer id, no sequence
])
def test_batch_header_consistency(edit, text):
    code, message, _ = _reject(edit())
    assert code == "invalid_record" and text in message


def test_the_audits_offset_overflow_batch_is_rejected():
    # RELIABILITY.md item 1: recordsCount 2^31-1, lastOffsetDelta 2^31-2, valid CRC.
    buf = _header_edit(">i", 57, 2**31 - 1, _header_edit(">i", 23, 2**31 - 2))
    code, message, _ = _reject(buf)
    assert code == "invalid_record" and "cannot fit" in message


# --- the records --------------------------------------------------------------------------------


def test_random_record_bytes_with_a_recomputed_crc_are_rejected():
    buf = _batch(3)
    buf[HEADER_SIZE:] = bytes(range(200, 200 + len(buf) - HEADER_SIZE))
    assert _reject(_recrc(buf))[0] == "invalid_record"


def test_offset_deltas_must_run_from_zero():
    swapped = encode_batch([Record(1, NOW, b"a", b"a"), Record(0, NOW, b"b", b"b")])  # deltas 1, 0
    code, message, _ = _reject(swapped)
    assert code == "invalid_record" and "offset delta" in message


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_garbage_is_rejected(codec):
    buf = _batch(5, compression=codec)
    buf[HEADER_SIZE:] = b"\x00not a compressed stream" * 3
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    code, _, _ = _reject(_recrc(buf))
    assert code == "invalid_record"


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_payload_with_bad_records_is_rejected(codec):
    plain = bytes(encode_batch([Record(0, NOW, b"k", b"v")])[HEADER_SIZE:])
    bad = plain[:-1]  # the record's header count is missing
    buf = bytearray(encode_batch([Record(0, NOW, b"k", b"v")]))
    buf[HEADER_SIZE:] = compress(codec, bad)
    struct.pack_into(">h", buf, 21, codec)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    code, message, _ = _reject(_recrc(buf))
    assert code == "invalid_record" and "record" in message.lower()


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD, SNAPPY])
def test_a_decompression_bomb_is_bounded(codec):
    blob = compress(codec, bytes(MAX_DECOMPRESSED + 1024))
    assert len(blob) < 4 << 20
    buf = bytearray(encode_batch([Record(0, NOW, b"k", b"v")]))
    buf[HEADER_SIZE:] = blob
    struct.pack_into(">h", buf, 21, codec)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    code, message, _ = _reject(_recrc(buf), ProduceRules(api_version=10, max_message_bytes=8 << 20))
    assert code == "invalid_record" and "exceed" in message


def test_raw_snappy_as_librdkafka_writes_it():
    payload = encode_batch([Record(i, NOW, b"k", b"v" * 100) for i in range(20)])[HEADER_SIZE:]
    buf = bytearray(encode_batch([Record(0, NOW, b"k", b"v")]))
    buf[HEADER_SIZE:] = bytes(cramjam.snappy.compress_raw(payload))
    struct.pack_into(">h", buf, 21, SNAPPY)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 23, 19)
    struct.pack_into(">i", buf, 57, 20)
    header = validate_produce(_recrc(buf), RULES, NOW)
    assert header.records_count == 20


def test_key_length_below_minus_one_is_rejected():
    buf = _batch(1)
    # record: length, attributes, ts delta, offset delta, key length (zigzag -1 would be 0x01)
    assert buf[HEADER_SIZE + 4] == 4  # key length 2 ("k0")
    buf[HEADER_SIZE + 4] = 0x03  # -2
    assert _reject(_recrc(buf))[0] == "invalid_record"


# --- record-level errors (RecordValidationException) ---------------------------------------------


def test_compacted_topic_lists_each_keyless_record():
    records = [Record(i, NOW, None if i in (1, 3) else b"k", b"v") for i in range(5)]
    rules = ProduceRules(api_version=10, max_message_bytes=1 << 20, compacted=True)
    for codec in CODECS:
        code, message, errors = _reject(encode_batch(records, compression=codec), rules)
        assert code == "invalid_record" and "2 record errors" in message
        assert [e.batch_index for e in errors] == [1, 3]
        assert all("without key" in e.message for e in errors)
    validate_produce(_batch(), rules, NOW)


def test_timestamps_outside_the_kip937_window():
    rules = ProduceRules(api_version=10, max_message_bytes=1 << 20, timestamp_before_max_ms=1000,
                         timestamp_after_max_ms=500)
    records = [Record(0, NOW - 1001, b"k", b"v"), Record(1, NOW, b"k", b"v"), Record(2, NOW + 501, b"k", b"v")]
    code, _, errors = _reject(encode_batch(records), rules)
    assert code == "invalid_timestamp" and [e.batch_index for e in errors] == [0, 2]
    edge = [Record(0, NOW - 1000, b"k", b"v"), Record(1, NOW + 500, b"k", b"v")]
    validate_produce(bytearray(encode_batch(edge)), rules, NOW)
    # Kafka 4 defaults: one hour ahead at most, any age
    assert _reject(encode_batch([Record(0, NOW + 3_600_001, b"k", b"v")]),
                   ProduceRules(api_version=10, max_message_bytes=1 << 20, timestamp_after_max_ms=3_600_000))[0] \
        == "invalid_timestamp"
    # a LogAppendTime topic ignores the producer's timestamps; so do batches without any
    validate_produce(bytearray(encode_batch(records)),
                     ProduceRules(api_version=10, max_message_bytes=1 << 20, log_append_time=True,
                                  timestamp_before_max_ms=1000, timestamp_after_max_ms=500), NOW)
    validate_produce(bytearray(encode_batch([Record(0, -1, b"k", b"v")])), rules, NOW)


def test_header_max_timestamp_is_set_from_the_records_as_kafka_does():
    buf = _batch(3)
    struct.pack_into(">q", buf, 35, NOW + 10_000)  # the client claims a later max timestamp
    header = validate_produce(_recrc(buf), RULES, NOW)
    assert header.max_timestamp == NOW + 2
    (decoded,) = decode_batches(buf, verify_crc=True)
    assert decoded.header.max_timestamp == NOW + 2
