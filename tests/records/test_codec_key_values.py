"""Tests for odradek.records.codec.key_values, the group coordinator's loader of
`__consumer_offsets`: it must accept and refuse exactly what the per-batch, per-record
walk it replaced did (`walk_key_values` below, that walk kept as the oracle), and read
the same keys and values as the full decoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import codec
from odradek.records.batch import CONTROL_MASK, CRC_OFFSET
from odradek.records.codec import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CodecError,
    Header,
    Record,
    encode_batch,
)

from .test_codec import (
    MALFORMED,
    NOW,
    SEEDS,
    batches_st,
    framed,
    raw_record,
    sample_records,
    wrap,
    zigzag,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


def walk_key_values(buf, verify_crc=False):
    """The loader as it was: `_batches` for the batches, then a walk over each one's records."""
    out = []
    for pos, header, payload in codec._batches(buf, verify_crc):
        if header.attributes & CONTROL_MASK:
            continue
        p = 0
        try:
            for _ in range(header.records_count):
                length, p = codec._read_varint(payload, p)
                stop = p + length
                p += 1
                while payload[p] & 0x80:
                    p += 1
                p += 1
                while payload[p] & 0x80:
                    p += 1
                p += 1
                size, p = codec._read_varint(payload, p)
                key = None if size < 0 else payload[p : p + size]
                p += max(size, 0)
                size, p = codec._read_varint(payload, p)
                out.append((key, None if size < 0 else payload[p : p + size]))
                p = stop
        except IndexError as exc:
            raise CodecError(str(exc)) from exc
        if p != len(payload):
            raise CodecError("records end early or late")
    return out


def same_as_walk(data) -> None:
    for verify in (False, True):
        try:
            expected = walk_key_values(data, verify)
        except CodecError:
            with pytest.raises(CodecError):
                codec.key_values(data, verify)
            continue
        assert codec.key_values(data, verify) == expected


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_batches_as_before(data):
    same_as_walk(data)
    same_as_walk(data + SEEDS[0])  # a bad batch stops the scan wherever it is
    same_as_walk(SEEDS[0] + data)


@pytest.mark.parametrize("compression", CODECS)
def test_multi_byte_varints_everywhere(compression):
    """Record lengths of 1, 2 and 3 bytes, keys over 63 bytes, timestamp deltas over 63 and
    offset deltas over 63 (more than 64 records), headers skipped."""
    records = sample_records(70)
    records.append(Record(200, NOW - 5, b"k" * 64, None, (Header("h", b"x"),)))
    data = encode_batch(records, compression=compression)
    expected = [(r.key, r.value) for r in records]
    assert codec.key_values(data, verify_crc=True) == expected
    same_as_walk(data)


def test_hand_built_records_with_long_deltas_and_headers():
    payload = (raw_record(ts_delta=-70, offset_delta=0, key=b"a")
               + raw_record(ts_delta=10**12, offset_delta=300, key=b"b" * 100, value=None)
               + raw_record(offset_delta=301, key=None, value=b"c", headers=[(b"h", None), (b"i", b"x" * 70)]))
    data = wrap(payload, 3, last_offset_delta=301)
    assert codec.key_values(data, verify_crc=True) == [(b"a", b"v"), (b"b" * 100, None), (None, b"c")]
    same_as_walk(data)


def test_control_batches_are_skipped_after_their_checks():
    control = encode_batch([Record(0, 0, b"\x00\x00\x00\x00", b"\x00" * 6)], is_control=True)
    data = SEEDS[0] + control + SEEDS[1]
    assert len(codec.key_values(data, verify_crc=True)) == 2 * 7
    bad = bytearray(control)
    bad[-1] ^= 1
    with pytest.raises(CodecError, match="CRC32C"):  # a control batch's CRC is still checked
        codec.key_values(bytes(bad), verify_crc=True)
    assert codec.key_values(bytes(bad)) == []


def test_every_flipped_byte_fails_the_crc_check():
    data = encode_batch(sample_records(4))
    for i in range(CRC_OFFSET, len(data)):
        corrupt = bytearray(data)
        corrupt[i] ^= 0x01
        with pytest.raises(CodecError):
            codec.key_values(bytes(corrupt), verify_crc=True)


def test_buffers_of_every_type_and_a_trailing_partial_batch():
    data = b"".join(SEEDS)
    expected = walk_key_values(data, True)
    for buf in (data, bytearray(data), memoryview(data)):
        assert codec.key_values(buf, verify_crc=True) == expected
    for cut in range(len(SEEDS[0]) - 1, len(SEEDS[0]) + 15):
        same_as_walk(data[:cut])


@settings(max_examples=200, deadline=None)
@given(batch=batches_st(), compression=st.sampled_from(CODECS))
def test_reads_what_decode_batches_reads(batch, compression):
    base_offset, records = batch
    data = encode_batch(records, base_offset=base_offset, compression=compression)
    assert codec.key_values(data, verify_crc=True) == [(r.key, r.value) for r in records]


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(-2, 5))
def test_fuzz_same_verdict_as_the_walk(data, count):
    same_as_walk(data)
    same_as_walk(wrap(data, count))
    same_as_walk(b"\x00" * 8 + struct.pack(">i", len(data) + 49) + b"\x00" * 4 + b"\x02" + b"\x00" * 44 + data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4))
def test_fuzz_mutated_batches(seed, flips):
    """Mutations past the header (CRC checked or not): the same pairs or the same refusal."""
    data = bytearray(seed)
    for at, byte in flips:
        data[61 + at % (len(data) - 61)] = byte
    same_as_walk(bytes(data))
    same_as_walk(wrap(bytes(data[61:]), struct.unpack_from(">i", seed, 57)[0]))  # valid CRC, bad records


def test_records_of_a_huge_count_overrun():
    with pytest.raises(CodecError):
        codec.key_values(wrap(framed(b"\x00\x00\x00" + zigzag(1) + b"k" + zigzag(1) + b"v\x00"), 2**31 - 1))
