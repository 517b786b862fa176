"""Tests for odradek.records.codec: round trips, Kafka semantics, malformed input, and
cross-checks against the bytes real clients produce and accept (kafka-python,
aiokafka's C and pure-Python record code, and librdkafka through its built-in
mock broker)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
import socket
import struct
import time

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import codec
from odradek.records.batch import (
    HEADER_STRUCT,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    BatchError,
    set_log_append_time,
    validate_batches,
)
from odradek.records.codec import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CodecError,
    DecodedBatch,
    Header,
    Record,
    decode_batches,
    encode_batch,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
CODEC_IDS = ["none", "gzip", "snappy", "lz4", "zstd"]
NOW = 1_700_000_000_123  # ms; odd on purpose so millisecond precision is visible

# kafka-python's protocol module uses deprecated importlib.resources calls on import
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated. Use files:DeprecationWarning")

SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- helpers


def zigzag(v: int) -> bytes:
    """Independent oracle for Kafka's signed varints (not the codec's table)."""
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def raw_record(*, offset_delta=0, ts_delta=0, key=None, value=b"v", headers=(), length_adjust=0) -> bytes:
    """One record hand-assembled from the spec, for crafting malformed batches."""
    body = b"\x00" + zigzag(ts_delta) + zigzag(offset_delta)
    for blob in (key, value):
        body += zigzag(-1) if blob is None else zigzag(len(blob)) + blob
    body += zigzag(len(headers))
    for hk, hv in headers:
        body += zigzag(len(hk)) + hk + (zigzag(-1) if hv is None else zigzag(len(hv)) + hv)
    return zigzag(len(body) + length_adjust) + body


def framed(body: bytes) -> bytes:
    """A record from raw body bytes (attributes onward), length-prefixed."""
    return zigzag(len(body)) + body


def wrap(payload: bytes, count: int, *, attributes: int = 0, base_timestamp: int = NOW,
         max_timestamp: int = NOW, last_offset_delta: int | None = None) -> bytes:
    """A batch header with a correct length and CRC around arbitrary record bytes."""
    out = bytearray(HEADER_SIZE) + payload
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    HEADER_STRUCT.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, attributes, lod, base_timestamp,
                      max_timestamp, -1, -1, -1, count)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def sample_records(n: int = 20, base: int = 0) -> list[Record]:
    """Varied records: null keys/values, headers, non-monotonic timestamps, big fields."""
    records = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else (b"value-%d " % i) * (1 + i % 13)
        headers = ()
        if i % 3 == 1:
            headers = (Header("trace-id", b"%08x" % i), Header("ключ-\U0001f600", None), Header("", b""))
        ts = NOW + (i * 37 if i % 4 else -i)  # some records older than the first
        records.append(Record(base + i, ts, key, value, headers))
    # multi-byte varints everywhere: 3-byte value length, long key, large ts delta
    records.append(Record(base + n, NOW + 86_400_000, b"k" * 200, b"\xff" * 20_000, (Header("h", b"x" * 9000),)))
    return records


def as_pairs(headers) -> list[tuple[str, bytes | None]]:
    return [(h.key, h.value) for h in headers]


# ---------------------------------------------------------------------------- strategies

headers_st = st.lists(st.builds(Header, st.text(max_size=12), st.none() | st.binary(max_size=24)),
                      max_size=4).map(tuple)
blob_st = st.one_of(
    st.none(),
    st.binary(max_size=300),
    # occasionally big enough for 3-byte length varints
    st.builds(lambda n, b: bytes([b]) * n, st.integers(8_192, 20_000), st.integers(0, 255)),
)


@st.composite
def batches_st(draw, max_records: int = 25):
    """(base_offset, records): strictly increasing offsets with gaps, any timestamp order."""
    n = draw(st.integers(1, max_records))
    first = draw(st.integers(0, 2**40))
    gaps = draw(st.lists(st.integers(1, 3) | st.integers(4, 100_000), min_size=n - 1, max_size=n - 1))
    offsets = list(itertools.accumulate(gaps, initial=first))
    base_offset = first - draw(st.integers(0, 5))
    t0 = draw(st.integers(-1, 2**45))
    timestamps = draw(st.lists(st.integers(max(-1, t0 - 10**7), t0 + 10**10), min_size=n, max_size=n))
    records = [
        Record(off, ts, draw(blob_st), draw(blob_st), draw(headers_st))
        for off, ts in zip(offsets, timestamps)
    ]
    return base_offset, records


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
@SLOW_OK
@given(batch=batches_st())
def test_round_trip(compression, batch):
    base_offset, records = batch
    data = encode_batch(records, base_offset=base_offset, compression=compression)
    (decoded,) = decode_batches(data, verify_crc=True)
    assert decoded.records == records
    h = decoded.header
    assert decoded.compression == compression
    assert (h.base_offset, h.records_count, h.magic) == (base_offset, len(records), 2)
    assert h.last_offset_delta == records[-1].offset - base_offset
    assert h.base_timestamp == min(r.timestamp for r in records)
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert h.size == len(data)
    assert (decoded.timestamp_type, decoded.is_control, decoded.is_transactional) == (0, False, False)


@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
def test_round_trip_sample(compression):
    records = sample_records()
    (decoded,) = decode_batches(encode_batch(records, compression=compression), verify_crc=True)
    assert decoded.records == records
    assert decoded.compression == compression


def test_decoded_records_are_genuine_frozen_records():
    (decoded,) = decode_batches(encode_batch(sample_records(3)))
    record = decoded.records[1]
    assert type(record) is Record
    assert record == Record(record.offset, record.timestamp, record.key, record.value, record.headers)
    assert hash(record) == hash(dataclasses.replace(record))
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.offset = 5  # type: ignore[misc]
    assert dataclasses.asdict(record)["offset"] == 1
    header = record.headers[0]
    assert type(header) is Header and header == Header("trace-id", b"00000001")
    assert hash(header) == hash(Header("trace-id", b"00000001"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.value = b""  # type: ignore[misc]


def test_tuple_input_matches_record_input():
    records = sample_records(8)
    from_records = encode_batch(records)
    five = [(r.offset, r.timestamp, r.key, r.value, as_pairs(r.headers)) for r in records]
    assert encode_batch(five) == from_records
    plain = [dataclasses.replace(r, headers=()) for r in records]
    four = [(r.offset, r.timestamp, r.key, r.value) for r in plain]
    assert encode_batch(four) == encode_batch(plain)
    with pytest.raises(ValueError):
        encode_batch([four[0], five[1]])


def test_empty_values_are_not_null():
    records = [Record(0, NOW, b"", b""), Record(1, NOW, None, None), Record(2, NOW, b"", None, (Header("k", b""),))]
    (decoded,) = decode_batches(encode_batch(records))
    assert decoded.records == records


def test_extreme_header_fields_and_timestamps():
    records = [Record(2**62, -(2**62), b"a", b"b"), Record(2**62 + 2**31 - 1, 2**62 - 1, None, b"c")]
    data = encode_batch(records, base_offset=2**62, producer_id=2**63 - 1, producer_epoch=32767,
                        base_sequence=2**31 - 1, partition_leader_epoch=2**31 - 1)
    (decoded,) = decode_batches(data, verify_crc=True)
    assert decoded.records == records
    h = decoded.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (
        2**63 - 1, 32767, 2**31 - 1, 2**31 - 1)
    assert h.last_offset_delta == 2**31 - 1


# ---------------------------------------------------------------------------- offsets and timestamps


def test_offset_gaps_survive_and_last_offset_delta_override():
    records = [Record(100, NOW, b"a", b"1"), Record(104, NOW + 1, b"b", b"2"), Record(150, NOW + 2, b"c", b"3")]
    (decoded,) = decode_batches(encode_batch(records, base_offset=100))
    assert [r.offset for r in decoded.records] == [100, 104, 150]
    assert decoded.header.last_offset_delta == 50
    assert decoded.header.next_offset == 151
    # compaction keeps the batch's original last offset even if that record is gone
    (compacted,) = decode_batches(encode_batch(records[:2], base_offset=100, last_offset_delta=50), verify_crc=True)
    assert [r.offset for r in compacted.records] == [100, 104]
    assert compacted.header.last_offset_delta == 50
    assert compacted.header.records_count == 2


def test_default_last_offset_delta_is_largest_not_last():
    records = [Record(5, NOW, None, b"x"), Record(3, NOW, None, b"y")]
    (decoded,) = decode_batches(encode_batch(records, base_offset=3))
    assert decoded.header.last_offset_delta == 2
    assert [r.offset for r in decoded.records] == [5, 3]


def test_empty_batch_keeps_offsets_for_compaction():
    data = encode_batch([], base_offset=40, last_offset_delta=9, producer_id=7, producer_epoch=1, base_sequence=3)
    (decoded,) = decode_batches(data, verify_crc=True)
    assert decoded.records == []
    h = decoded.header
    assert (h.records_count, h.next_offset, h.base_timestamp, h.max_timestamp) == (0, 50, -1, -1)
    with pytest.raises(ValueError):
        encode_batch([])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_offset": 10},  # record offset 0 precedes the base offset
        {"last_offset_delta": 0},  # smaller than the largest delta (1)
        {"compression": 5},
        {"timestamp_type": 2},
        {"producer_epoch": 2**15},  # does not fit the int16 field
    ],
)
def test_encode_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        encode_batch([Record(0, NOW, None, b"a"), Record(1, NOW, None, b"b")], **kwargs)


def test_encode_rejects_offset_delta_beyond_int32():
    with pytest.raises(ValueError):
        encode_batch([Record(0, NOW, None, b"a"), Record(2**31, NOW, None, b"b")])


def test_millisecond_timestamps_and_negative_deltas():
    records = [Record(0, NOW, None, b"a"), Record(1, NOW - 1, None, b"b"), Record(2, NOW + 1, None, b"c")]
    (decoded,) = decode_batches(encode_batch(records))
    assert [r.timestamp for r in decoded.records] == [NOW, NOW - 1, NOW + 1]
    assert (decoded.header.base_timestamp, decoded.header.max_timestamp) == (NOW - 1, NOW + 1)
    # a batch whose base timestamp is its first record (as Java writes) has negative deltas
    payload = raw_record(offset_delta=0, ts_delta=0) + raw_record(offset_delta=1, ts_delta=-5)
    (decoded,) = decode_batches(wrap(payload, 2, base_timestamp=NOW), verify_crc=True)
    assert [r.timestamp for r in decoded.records] == [NOW, NOW - 5]


@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
def test_log_append_time_reports_max_timestamp_for_every_record(compression):
    records = [Record(i, NOW + i * 10, None, b"v") for i in range(5)]
    (decoded,) = decode_batches(encode_batch(records, compression=compression, timestamp_type=1))
    assert decoded.timestamp_type == 1
    assert [r.timestamp for r in decoded.records] == [NOW + 40] * 5


def test_broker_stamped_log_append_time():
    """batch.set_log_append_time flips the flag and max timestamp; readers must honour it."""
    buf = bytearray(encode_batch([Record(i, NOW + i, b"k", b"v") for i in range(3)], compression=LZ4))
    (header,) = validate_batches(buf)
    set_log_append_time(buf, header, NOW + 999)
    (decoded,) = decode_batches(buf, verify_crc=True)
    assert decoded.timestamp_type == 1
    assert [r.timestamp for r in decoded.records] == [NOW + 999] * 3


def test_flags_and_producer_fields():
    data = encode_batch([Record(0, NOW, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                        is_transactional=True, producer_id=42, producer_epoch=3, base_sequence=-1)
    (decoded,) = decode_batches(data, verify_crc=True)
    assert decoded.is_control and decoded.is_transactional
    assert decoded.header.is_control
    assert (decoded.header.producer_id, decoded.header.producer_epoch) == (42, 3)
    assert decoded.records[0].key == b"\x00\x00\x00\x01"  # control records are left raw


# ---------------------------------------------------------------------------- buffers


def test_back_to_back_batches_and_trailing_partial_batch():
    batches = [
        encode_batch(sample_records(5), compression=NONE),
        encode_batch(sample_records(4, base=10), base_offset=10, compression=ZSTD),
        encode_batch(sample_records(3, base=20), base_offset=20, compression=SNAPPY),
    ]
    whole = b"".join(batches)
    decoded = decode_batches(whole, verify_crc=True)
    assert [d.header.base_offset for d in decoded] == [0, 10, 20]
    assert [d.header.position for d in decoded] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    two = len(batches[0]) + len(batches[1])
    for cut in range(two, len(whole)):  # every possible truncation of the last batch
        assert [d.header.base_offset for d in decode_batches(whole[:cut], verify_crc=True)] == [0, 10]
    for cut in (0, 1, 11, 12, 60, 61, len(batches[0]) - 1):
        assert decode_batches(whole[:cut]) == []
    assert decode_batches(memoryview(whole)) == decoded
    assert decode_batches(bytearray(whole)) == decoded


def test_validate_batches_accepts_encoded_produce_payloads():
    payload = b"".join(
        encode_batch([Record(i, NOW + i, b"k%d" % i, b"v" * i) for i in range(n)], compression=c,
                     producer_id=9, producer_epoch=0, base_sequence=100)
        for n, c in zip((1, 7, 300, 2, 3), CODECS)
    )
    headers = validate_batches(payload)
    assert [(h.records_count, h.last_offset_delta, h.compression) for h in headers] == [
        (1, 0, 0), (7, 6, 1), (300, 299, 2), (2, 1, 3), (3, 2, 4)]
    assert [d.header for d in decode_batches(payload, verify_crc=True)] == headers
    # a gapped (compacted) batch is not a valid produce payload
    with pytest.raises(BatchError) as err:
        validate_batches(encode_batch([Record(0, NOW, None, b"a"), Record(5, NOW, None, b"b")]))
    assert err.value.code == "invalid_record"


# ---------------------------------------------------------------------------- codec wire details


def test_varint_encoding_matches_spec():
    for v in (0, -1, 1, 63, -64, 64, -65, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)):
        assert codec._zigzag(v) == zigzag(v)
        assert codec._read_varint(zigzag(v) + b"\x00", 0) == (v, len(zigzag(v)))
    assert zigzag(-1) == b"\x01" and zigzag(64) == b"\x80\x01"
    with pytest.raises(CodecError):
        codec._read_varint(b"\xff" * 11, 0)


def test_snappy_is_xerial_framed_in_32k_blocks():
    data = bytes(range(256)) * 1000  # 256,000 bytes -> 8 blocks
    framed = codec.compress(SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    pos, blocks = 16, []
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768] * 7 + [256_000 - 7 * 32768]
    assert b"".join(blocks) == data
    assert codec.decompress(SNAPPY, framed) == data


def test_snappy_decode_accepts_raw_and_xerial_variants():
    data = b"hello snappy " * 500
    raw = bytes(cramjam.snappy.compress_raw(data))  # what librdkafka writes
    assert codec.decompress(SNAPPY, raw) == data
    block = bytes(cramjam.snappy.compress_raw(data))
    little_endian = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert codec.decompress(SNAPPY, little_endian) == data  # redpanda's header
    assert codec.decompress(SNAPPY, codec.compress(SNAPPY, data) + codec.compress(SNAPPY, b"!")) == data + b"!"
    assert codec.decompress(SNAPPY, codec.compress(SNAPPY, b"")) == b""
    records = sample_records(6)
    payload = encode_batch(records)[HEADER_SIZE:]
    raw_batch = wrap(bytes(cramjam.snappy.compress_raw(payload)), len(records), attributes=SNAPPY,
                     base_timestamp=min(r.timestamp for r in records))
    (decoded,) = decode_batches(raw_batch, verify_crc=True)
    assert decoded.records == records


def test_lz4_frame_has_independent_blocks():
    frame = codec.compress(LZ4, b"0123456789" * 30_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic (little-endian 0x184D2204)
    flg = frame[4]
    assert flg >> 6 == 1  # frame format version 01
    assert flg & 0x20  # block independence: Kafka's Java reader decompresses blocks separately
    assert not flg & 0x04  # no content checksum
    assert codec.decompress(LZ4, frame) == b"0123456789" * 30_000
    linked = bytes(cramjam.lz4.compress(b"abc" * 50_000))  # other producers' frames still decode
    assert codec.decompress(LZ4, linked) == b"abc" * 50_000


def test_zstd_without_content_size_and_concatenated_frames():
    data = b"zstd streaming " * 10_000
    streamer = cramjam.zstd.Compressor(3)
    streamer.compress(data)
    frame = bytes(streamer.finish())
    assert not frame[4] & 0xC0 and not frame[4] & 0x20  # no frame content size field
    assert codec.decompress(ZSTD, frame) == data
    assert codec.decompress(ZSTD, frame + codec.compress(ZSTD, b"tail")) == data + b"tail"


def test_gzip_multi_member():
    assert codec.decompress(GZIP, codec.compress(GZIP, b"one ") + codec.compress(GZIP, b"two")) == b"one two"


# ---------------------------------------------------------------------------- malformed input


def test_crc_verification_catches_every_flipped_byte():
    data = encode_batch(sample_records(4), compression=NONE)
    assert decode_batches(data, verify_crc=True)
    for i in range(CRC_OFFSET, len(data)):  # the stored CRC and everything it covers
        corrupt = bytearray(data)
        corrupt[i] ^= 0x01
        with pytest.raises(CodecError):
            decode_batches(corrupt, verify_crc=True)
    epoch_changed = bytearray(data)
    epoch_changed[12:16] = b"\x00\x00\x00\x07"  # partition leader epoch is outside the CRC
    assert decode_batches(epoch_changed, verify_crc=True)[0].header.partition_leader_epoch == 7


MALFORMED = {
    "bad varint": wrap(b"\xff" * 12, 1),
    "varint runs off the end": wrap(b"\x80\x80", 1),
    "record length too short": wrap(raw_record(length_adjust=-1), 1),
    "record length too long": wrap(raw_record(length_adjust=+1) + b"\x00", 1),
    "key overruns": wrap(raw_record(key=b"abc")[:-6], 1),
    "value overruns payload": wrap(raw_record(value=b"abcdef")[:-3], 1),
    "key length -2": wrap(framed(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-2) + zigzag(1) + b"v" + zigzag(0)), 1),
    "negative header count": wrap(raw_record()[:-1] + b"\x01", 1),
    "invalid utf-8 header key": wrap(raw_record(headers=[(b"\xff\xfe", b"v")]), 1),
    "negative header key length": wrap(
        framed(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(1) + b"v" + zigzag(1) + zigzag(-1) + zigzag(-1)), 1),
    "more records than bytes": wrap(raw_record(), 2),
    "trailing bytes after records": wrap(raw_record() + b"\x00", 1),
    "negative record count": wrap(b"", -1),
    "unknown compression codec": wrap(raw_record(), 1, attributes=5),
    "corrupt gzip": wrap(b"\x1f\x8b garbage", 1, attributes=GZIP),
    "corrupt snappy": wrap(b"\x7f\x01\x02", 1, attributes=SNAPPY),
    "truncated xerial block": wrap(codec.compress(SNAPPY, raw_record())[:-2], 1, attributes=SNAPPY),
    "corrupt lz4": wrap(b"\x04\x22\x4d\x18\x00", 1, attributes=LZ4),
    "corrupt zstd": wrap(b"\x28\xb5\x2f\xfd\xff\xff", 1, attributes=ZSTD),
    "magic 1": b"\x00" * 8 + struct.pack(">i", 60) + b"\x00" * 4 + b"\x01" + b"\x00" * 55,
    "batch length below header size": b"\x00" * 8 + struct.pack(">i", 20) + b"\x00" * 20,
}


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_batches_raise_codec_error(data):
    with pytest.raises(CodecError):
        decode_batches(data)
    assert issubclass(CodecError, ValueError)


def test_oracle_records_are_well_formed():
    """The hand-built records used for MALFORMED decode fine when left intact."""
    payload = raw_record(key=b"k", headers=[(b"h", None), (b"\xc3\xa9", b"x")]) + raw_record(offset_delta=1)
    (decoded,) = decode_batches(wrap(payload, 2), verify_crc=True)
    assert decoded.records == [
        Record(0, NOW, b"k", b"v", (Header("h", None), Header("é", b"x"))),
        Record(1, NOW, None, b"v"),
    ]


def _decodes_or_codec_error(data: bytes) -> None:
    for verify in (False, True):
        try:
            result = decode_batches(data, verify_crc=verify)
        except CodecError:
            continue
        assert all(isinstance(b, DecodedBatch) for b in result)


SEEDS = [
    encode_batch(sample_records(6), compression=c) for c in CODECS
] + [encode_batch(sample_records(2)) + encode_batch(sample_records(3, base=7), base_offset=7, compression=LZ4)]


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    _decodes_or_codec_error(data)
    _decodes_or_codec_error(wrap(data, 3))
    _decodes_or_codec_error(b"\x00" * 8 + struct.pack(">i", len(data) + 49) + b"\x00" * 4 + b"\x02" + b"\x00" * 44 + data)


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=200), count=st.integers(-3, 40), attributes=st.integers(0, 2**15 - 1))
def test_fuzz_record_region_behind_valid_header(payload, count, attributes):
    """Random record bytes behind a header that passes every CRC and length check."""
    _decodes_or_codec_error(wrap(payload, count, attributes=attributes))


@pytest.mark.timeout(120)
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_valid_batches(data):
    buf = bytearray(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        i = data.draw(st.integers(0, len(buf) - 1)) if buf else 0
        if op == "flip" and buf:
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set" and buf:
            buf[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and buf:
            del buf[i : i + data.draw(st.integers(1, 8))]
        elif op == "truncate":
            del buf[i:]
    _decodes_or_codec_error(bytes(buf))
    # the same damage behind a repaired length and CRC reaches the record parser
    if len(buf) > HEADER_SIZE:
        fixed = bytearray(buf)
        struct.pack_into(">i", fixed, 8, len(fixed) - 12)
        fixed[16] = 2
        struct.pack_into(">I", fixed, CRC_OFFSET, crc32c.crc32c(bytes(fixed[ATTRIBUTES_OFFSET:])))
        _decodes_or_codec_error(bytes(fixed))


# ---------------------------------------------------------------------------- kafka-python / aiokafka


# What kafka-python needs for each codec; it does not use cramjam.
KAFKA_PYTHON_CODEC_MODULES = {SNAPPY: "snappy", LZ4: "lz4.frame", ZSTD: "zstandard"}


def kafka_python_classes(compression):
    if compression in KAFKA_PYTHON_CODEC_MODULES:
        module = KAFKA_PYTHON_CODEC_MODULES[compression]
        pytest.importorskip(module, reason=f"kafka-python needs the '{module}' module for "
                                           f"{CODEC_IDS[compression]}; it is not installed")
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

    return DefaultRecordBatchBuilder, DefaultRecordBatch, MemoryRecords


def aiokafka_classes(kind):
    from aiokafka.record import default_records as dr
    from aiokafka.record.memory_records import MemoryRecords

    if kind == "c":
        if dr.DefaultRecordBatch is dr._DefaultRecordBatchPy:
            pytest.skip("aiokafka's C extension is not available")
        return dr.DefaultRecordBatchBuilder, dr.DefaultRecordBatch, MemoryRecords
    return dr._DefaultRecordBatchBuilderPy, dr._DefaultRecordBatchPy, MemoryRecords


def client_classes(client, compression):
    if client == "kafka-python":
        return kafka_python_classes(compression)
    return aiokafka_classes("c" if client == "aiokafka-c" else "py")


CLIENTS = ["kafka-python", "aiokafka-c", "aiokafka-py"]


def build_with_client(builder_cls, records, compression, **producer):
    builder = builder_cls(2, compression, producer.get("is_transactional", False), producer.get("producer_id", -1),
                          producer.get("producer_epoch", -1), producer.get("base_sequence", -1), 10**8)
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, as_pairs(r.headers)) is not None
    return bytes(builder.build())


def client_view(record):
    return (record.offset, record.timestamp, record.key, record.value, [tuple(h) for h in record.headers])


def our_view(record):
    return (record.offset, record.timestamp, record.key, record.value, as_pairs(record.headers))


@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("client", CLIENTS)
def test_decode_client_built_batches(client, compression):
    builder_cls, _, _ = client_classes(client, compression)
    records = sample_records(30)
    data = build_with_client(builder_cls, records, compression, is_transactional=True, producer_id=77,
                             producer_epoch=2, base_sequence=1000)
    (decoded,) = decode_batches(data, verify_crc=True)
    assert decoded.compression == compression  # compressible data: the client did compress
    assert decoded.records == records
    h = decoded.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence, decoded.is_transactional) == (77, 2, 1000, True)
    assert h.base_timestamp == records[0].timestamp  # clients use the first record, deltas go negative
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert validate_batches(data) == [h]


@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_reads_our_batches(client, compression):
    _, batch_cls, memory_records_cls = client_classes(client, compression)
    first = sample_records(30)
    second = [Record(100 + i, NOW + i, b"k", b"gap" * i) for i in range(0, 40, 3)]  # offset gaps
    data = encode_batch(first, compression=compression) + encode_batch(
        second, base_offset=100, compression=compression, last_offset_delta=60, producer_id=5, producer_epoch=1,
        base_sequence=9, is_transactional=True)

    batch = batch_cls(data[: decode_batches(data)[0].header.size])
    assert batch.validate_crc()
    assert batch.compression_type == compression
    assert [client_view(r) for r in batch] == [our_view(r) for r in first]

    records = memory_records_cls(data)
    got = []
    while records.has_next():
        b = records.next_batch()
        assert b.validate_crc()
        got.append((b.base_offset, b.next_offset, [client_view(r) for r in b]))
    assert got == [(0, len(first), [our_view(r) for r in first]), (100, 161, [our_view(r) for r in second])]


@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_log_append_time(client):
    _, batch_cls, _ = client_classes(client, NONE)
    batch = batch_cls(encode_batch([Record(i, NOW + i, None, b"v") for i in range(4)], timestamp_type=1))
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [NOW + 3] * 4


@pytest.mark.parametrize("compression", [NONE, GZIP, SNAPPY, LZ4, ZSTD], ids=CODEC_IDS)
@SLOW_OK
@given(batch=batches_st(max_records=10))
def test_aiokafka_agrees_on_random_batches(compression, batch):
    builder_cls, batch_cls, _ = aiokafka_classes("c")
    _, records = batch
    records = [dataclasses.replace(r, offset=i) for i, r in enumerate(records)]  # clients write deltas 0..n-1
    theirs = batch_cls(encode_batch(records, compression=compression))
    assert theirs.validate_crc()
    assert [client_view(r) for r in theirs] == [our_view(r) for r in records]
    built = build_with_client(builder_cls, records, compression)
    (ours,) = decode_batches(built, verify_crc=True)
    assert [our_view(r) for r in ours.records] == [client_view(r) for r in batch_cls(built)]
    if all(r.timestamp >= 0 for r in records):  # aiokafka's builder takes -1 to mean "no timestamp yet"
        assert ours.records == records


# ---------------------------------------------------------------------------- librdkafka (mock broker)


class _MockBroker:
    """librdkafka's in-process mock cluster, spoken to directly over loopback TCP.

    A confluent_kafka client with `test.mock.num.brokers` starts the cluster and logs
    its address. Batches produced by librdkafka are fetched back byte for byte with a
    hand-rolled Fetch v4; ours are appended with a hand-rolled Produce v3 and read
    back by a librdkafka consumer with check.crcs=true.
    """

    def __init__(self, confluent_kafka):
        self.ck = confluent_kafka
        self.address = None
        self.logger = logging.getLogger("odradek.tests.librdkafka")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        broker = self

        class Grab(logging.Handler):
            def emit(self, record):
                match = re.search(r"replaced with (\S+)", record.getMessage())
                if match:
                    broker.address = match.group(1)

        self.logger.addHandler(Grab())
        self.owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "logger": self.logger})
        deadline = time.monotonic() + 10
        while self.address is None and time.monotonic() < deadline:
            self.owner.poll(0.05)
        self._correlation = itertools.count(1)

    def client_config(self, **extra):
        return {"bootstrap.servers": self.address, "logger": self.logger, **extra}

    def _call(self, api_key: int, version: int, body: bytes) -> bytes:
        correlation = next(self._correlation)
        client_id = b"odradek-test"
        request = struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id + body
        host, port = self.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            (size,) = struct.unpack(">i", self._read(sock, 4))
            response = self._read(sock, size)
        assert struct.unpack_from(">i", response)[0] == correlation
        return response[4:]

    @staticmethod
    def _read(sock, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("mock broker closed the connection")
            buf += chunk
        return buf

    @staticmethod
    def _string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    def fetch(self, topic: str, offset: int) -> bytes:
        body = (struct.pack(">iiiib", -1, 100, 1, 64 << 20, 0) + struct.pack(">i", 1) + self._string(topic)
                + struct.pack(">iiqi", 1, 0, offset, 64 << 20))
        r = self._call(1, 4, body)
        pos = 4 + 4 + 2 + len(topic) + 4  # throttle, topic count, topic name, partition count
        _partition, error, _hw, _lso, aborted = struct.unpack_from(">ihqqi", r, pos)
        assert error == 0, f"fetch error {error}"
        pos += 26 + max(aborted, 0) * 16
        (size,) = struct.unpack_from(">i", r, pos)
        return r[pos + 4 : pos + 4 + size]

    def produce(self, topic: str, records: bytes) -> int:
        body = (struct.pack(">hhi", -1, -1, 10_000) + struct.pack(">i", 1) + self._string(topic)
                + struct.pack(">iii", 1, 0, len(records)) + records)
        r = self._call(0, 3, body)
        pos = 4 + 2 + len(topic) + 4
        _partition, error, base_offset = struct.unpack_from(">ihq", r, pos)
        assert error == 0, f"produce error {error}"
        return base_offset

    def consume(self, topic: str, offset: int, n: int) -> list:
        consumer = self.ck.Consumer(self.client_config(**{
            "group.id": "odradek-codec-test", "enable.auto.commit": False, "check.crcs": True}))
        try:
            consumer.assign([self.ck.TopicPartition(topic, 0, offset)])
            messages = []
            deadline = time.monotonic() + 20
            while len(messages) < n and time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                messages.append(message)
            return messages
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def mock_broker():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    broker = _MockBroker(confluent_kafka)
    if broker.address is None:
        pytest.skip("this librdkafka build did not start a mock cluster")
    yield broker
    broker.owner.flush(5)


@pytest.mark.interop
@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
def test_decode_librdkafka_produced_batches(mock_broker, compression):
    topic = f"from-librdkafka-{CODEC_IDS[compression]}"
    producer = mock_broker.ck.Producer(mock_broker.client_config(**{
        "compression.type": CODEC_IDS[compression], "linger.ms": 50, "enable.idempotence": True}))
    records = sample_records(40)
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, partition=0, timestamp=r.timestamp,
                         headers=as_pairs(r.headers) or None)
    assert producer.flush(10) == 0
    raw = mock_broker.fetch(topic, 0)
    batches = decode_batches(raw, verify_crc=True)
    assert batches and all(b.compression == compression for b in batches)
    assert all(b.header.producer_id >= 0 for b in batches)  # idempotent producer state survives
    assert [r for b in batches for r in b.records] == records
    for b in batches:
        assert b.header.next_offset == b.records[-1].offset + 1


@pytest.mark.interop
@pytest.mark.parametrize("compression", CODECS, ids=CODEC_IDS)
def test_librdkafka_consumes_our_batches(mock_broker, compression):
    ck = mock_broker.ck
    topic = f"to-librdkafka-{CODEC_IDS[compression]}"
    creator = ck.Producer(mock_broker.client_config())
    creator.produce(topic, b"creates the topic", partition=0)
    assert creator.flush(10) == 0
    create_time = sample_records(25)
    log_append = [Record(i, NOW + i, b"lat", b"x" * 100) for i in range(5)]
    first = mock_broker.produce(topic, encode_batch(create_time, compression=compression))
    second = mock_broker.produce(topic, encode_batch(log_append, compression=compression, timestamp_type=1))
    assert (first, second) == (1, 1 + len(create_time))

    messages = mock_broker.consume(topic, first, len(create_time) + len(log_append))
    got = [(m.offset(), m.timestamp(), m.key(), m.value(), m.headers() or []) for m in messages]
    expected = [(first + r.offset, (ck.TIMESTAMP_CREATE_TIME, r.timestamp), r.key, r.value, as_pairs(r.headers))
                for r in create_time]
    expected += [(second + r.offset, (ck.TIMESTAMP_LOG_APPEND_TIME, NOW + 4), r.key, r.value, [])
                 for r in log_append]
    assert got == expected


def test_key_values_reads_what_decode_batches_reads():
    """key_values (the coordinator's loader) sees the same keys and values as the full
    decoder, across codecs, null keys/values and headers, and skips control batches."""
    buf = b""
    base = 0
    for i, comp in enumerate([NONE, GZIP, SNAPPY, ZSTD]):
        recs = [Record(base + j, 1_700_000_000_000 + j, None if j == 1 else f"k{i}{j}".encode() * (j * 40),
                       None if j == 2 else b"v" * (j * 100), (codec.Header("h", b"x"),) if j == 3 else ())
                for j in range(5)]
        buf += codec.encode_batch(recs, base_offset=base, compression=comp)
        base += 5
    buf += codec.encode_batch([Record(base, 0, b"\x00\x00\x00\x00", b"\x00" * 6)], base_offset=base, is_control=True)
    expected = [(r.key, r.value) for b in codec.decode_batches(buf) if not b.is_control for r in b.records]
    assert len(expected) == 20
    assert codec.key_values(buf) == expected
    assert codec.key_values(buf[:-3]) == expected  # a trailing partial batch is skipped
