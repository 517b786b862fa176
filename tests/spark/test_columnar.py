"""columnar.to_arrow against the record decoder: the same rows, for every shape of record."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records.codec import (
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    ZSTD,
    CodecError,
    decode_batches,
    encode_batch,
)
from odradek.spark.columnar import to_arrow

TS = 1_700_000_000_000


def _value(rng: random.Random, i: int) -> bytes | None:
    if i % 11 == 0:
        return None
    size = rng.choice([0, 3, 12, 13, 40, 100, 1000, 20000])
    return bytes(rng.getrandbits(8) for _ in range(min(size, 64))) * (size // 64 + 1)


def _expected(buf: bytes, start: int, end: int, headers: bool = False):
    rows = []
    for b in decode_batches(buf):
        if b.is_control:
            continue
        rows += [(r.offset, r.key, r.value, r.timestamp, b.timestamp_type)
                 + (([(h.key, h.value) for h in r.headers],) if headers else ())
                 for r in b.records if start <= r.offset < end]
    return rows


def _got(batch, headers: bool = False):
    d = batch.to_pydict()
    stamps = [int(t.timestamp() * 1000) for t in d["timestamp"]]
    cols = [d["offset"], d["key"], d["value"], stamps, d["timestampType"]]
    if headers:
        cols.append([[(h["key"], h["value"]) for h in hs] for hs in d["headers"]])
    return list(zip(*cols))


def _headers(rng: random.Random, i: int) -> list[tuple[str, bytes | None]]:
    return [(rng.choice(["", "h", "trace-id", "ключ"]) + str(j), None if j % 4 == 3 else _value(rng, j + 1) or b"")
            for j in range(i % 5)]


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("codec", [NONE, GZIP, LZ4, ZSTD])
def test_rows_equal_the_record_decoder(codec, headers):
    rng = random.Random(codec)
    buf = b""
    offset = 100
    for n in (1, 50, 300):  # several batches in one fetch, with an offset gap between them
        recs = [(offset + i * 2, TS + rng.randrange(-5000, 5000), None if i % 3 else b"k%d" % i, _value(rng, i),
                 _headers(rng, i)) for i in range(n)]
        buf += encode_batch(recs, base_offset=offset, compression=codec)
        offset += 2 * n + 7
    for start, end in ((0, 10**9), (101, 500), (150, 151), (10**8, 10**9)):
        batch = to_arrow(buf, "t", 2, start, end, headers)
        want = _expected(buf, start, end, headers)
        if not want:
            assert batch is None
            continue
        assert _got(batch, headers) == want
        assert set(batch.column("topic").to_pylist()) == {"t"} and set(batch.column("partition").to_pylist()) == {2}


def test_control_batches_are_skipped_and_log_append_time_applies():
    buf = (encode_batch([(0, TS, b"k", b"v")])
           + encode_batch([(1, TS, None, b"\x00\x00\x00\x00")], base_offset=1, is_control=True, is_transactional=True)
           + encode_batch([(2, TS, b"k", b"v2"), (3, TS + 9, None, None)], base_offset=2, timestamp_type=LOG_APPEND_TIME))
    got = _got(to_arrow(buf, "t", 0, 0, 100, False))
    assert [r[0] for r in got] == [0, 2, 3]
    assert got[1][3] == got[2][3] == TS + 9 and got[1][4] == 1  # LogAppendTime: the batch's max timestamp


def test_headers_mode_matches_and_carries_headers():
    buf = encode_batch([(0, TS, b"k", b"v", [("a", b"1"), ("b", None)]), (1, TS, None, b"w", [])])
    batch = to_arrow(buf, "t", 0, 0, 2, True)
    assert batch.column("headers").to_pylist() == [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], []]
    assert batch.column("value").to_pylist() == [b"v", b"w"]


def test_a_header_key_that_is_not_utf8_is_a_codec_error():
    good = encode_batch([(0, TS, b"k", b"v", [("a", b"1")])])
    bad = good.replace(b"\x02a\x021", b"\x02\xff\x021")  # key length 1, key 0xff, value "1"
    assert bad != good
    assert to_arrow(bad, "t", 0, 0, 1, False).column("value").to_pylist() == [b"v"]  # headers not read
    with pytest.raises(CodecError, match="UTF-8"):
        to_arrow(bad, "t", 0, 0, 1, True)


def _uncompressed(n: int) -> bytes:
    rng = random.Random(n)
    return encode_batch([(i, TS + i, None if i % 2 else b"key", _value(rng, i), _headers(rng, i)) for i in range(n)])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupt_payloads_raise_codec_error_or_decode_in_bounds(data):
    """The compiled scan trusts nothing: changed record bytes (the CRC is not checked on
    this path) give CodecError or valid rows no larger than the payload, never a crash or
    a read past the buffer."""
    buf = bytearray(_uncompressed(data.draw(st.integers(1, 12))))
    header_end = 61  # RecordBatch v2 header size: what follows is the records payload
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(header_end, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    headers = data.draw(st.booleans())
    try:
        batch = to_arrow(bytes(buf), "t", 0, 0, 10**9, headers)
    except CodecError:
        return
    if batch is not None:
        batch.validate(full=True)
        for v in batch.column("value").to_pylist() + batch.column("key").to_pylist():
            assert v is None or len(v) <= len(buf)


def test_a_record_count_larger_than_the_payload_is_a_codec_error():
    buf = bytearray(_uncompressed(3))
    buf[57:61] = (10**6).to_bytes(4, "big")  # recordsCount, the header's last field
    with pytest.raises(CodecError, match="declares 1000000 records"):
        to_arrow(bytes(buf), "t", 0, 0, 10**9, False)
