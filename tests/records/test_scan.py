"""The native record walk and its pure-Python twin agree, and both agree with the codec."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import scan as S
from odradek.records.batch import HEADER_SIZE
from odradek.records.codec import Header, Record, decode_batches, encode_batch

NOW = 1_700_000_000_000


def test_the_native_scanner_is_built():
    # `pip install -e .` (make test) compiles it; the broker would fall back to the slow walk.
    assert S.NATIVE


def _payload(records, **kw) -> tuple[bytes, int]:
    batch = encode_batch(records, **kw)
    return batch[HEADER_SIZE:], len(records)


def _both(payload, count) -> S.ScanResult:
    py = S.scan_py(payload, count)
    native = S.scan(payload, count)
    assert native == py, (native, py)
    return native


def test_valid_records_report_timestamp_range_and_null_keys():
    records = [Record(i, NOW + (i * 7) % 5 - 2, None if i % 3 == 0 else b"k", b"v" * i,
                      (Header("h", b"x"), Header("e", None)) if i % 2 else ()) for i in range(10)]
    payload, count = _payload(records)
    result = _both(payload, count)
    base = min(r.timestamp for r in records)
    assert result.code == S.OK and result.index == 10
    assert (base + result.min_ts_delta, base + result.max_ts_delta) == (NOW - 2, NOW + 2)
    assert result.null_keys == 4


def _raw(length=None, attrs=b"\x00", ts=b"\x00", off=b"\x00", key=b"\x01", value=b"\x02v", headers=b"\x00"):
    body = attrs + ts + off + key + value + headers
    n = len(body) if length is None else length
    return bytes([(n << 1) if n >= 0 else ((-n << 1) - 1)]) + body


@pytest.mark.parametrize("payload,count,code,index", [
    (_raw(), 1, S.OK, 1),
    (_raw() + _raw(off=b"\x02"), 2, S.OK, 2),
    (_raw(off=b"\x02"), 1, S.OFFSET_DELTA, 0),              # delta 1 for the first record
    (_raw() + _raw(off=b"\x00"), 2, S.OFFSET_DELTA, 1),      # a repeated delta
    (_raw(length=-1), 1, S.BAD_LENGTH, 0),
    (_raw(length=60), 1, S.BAD_LENGTH, 0),                   # longer than the payload
    (_raw(length=0), 1, S.SIZE_MISMATCH, 0),
    (_raw(key=b"\x03"), 1, S.BAD_KEY_LENGTH, 0),             # key length -2
    (_raw(value=b"\x05"), 1, S.BAD_VALUE_LENGTH, 0),         # value length -3
    (_raw(value=b"\x10vv"), 1, S.SIZE_MISMATCH, 0),          # value of 8 bytes, 2 present
    (_raw(headers=b"\x01"), 1, S.BAD_HEADER_COUNT, 0),       # -1 headers
    (_raw(headers=b"\x02\x03"), 1, S.BAD_HEADER_KEY, 0),     # header key length -2
    (_raw(headers=b"\x02\x02h\x05"), 1, S.BAD_HEADER_VALUE, 0),
    (_raw(headers=b"\x02\x02h"), 1, S.TRUNCATED, 0),         # header value length missing
    (_raw(ts=b"\xff" * 10 + b"\x00"), 1, S.VARINT_TOO_LONG, 0),
    (_raw(off=b"\x80\x80\x80\x80\x80\x00"), 1, S.VARINT_TOO_LONG, 0),
    (_raw() + b"\x00", 1, S.TRAILING, 1),
    (_raw(), 2, S.TRUNCATED, 1),                             # the count promises a second record
    (_raw()[:-1], 1, S.BAD_LENGTH, 0),
    (_raw(length=len(_raw()) - 2) + b"\x00", 1, S.TRUNCATED, 0),  # the header count lies past the record
    (_raw(length=len(_raw())) + b"\x00", 1, S.SIZE_MISMATCH, 0),  # one unread byte inside the record
])
def test_structure_errors(payload, count, code, index):
    result = _both(payload, count)
    assert (result.code, result.index) == (code, index)


def test_empty_payload_with_zero_records():
    assert _both(b"", 0) == S.ScanResult(S.OK, 0, 0, 0, 0)


def test_large_varints_and_extreme_timestamps():
    payload, count = _payload([Record(0, -(2**62), b"k" * 300, b"v" * 70_000), Record(1, 2**62 - 1, None, None)])
    result = _both(payload, count)
    assert result.code == S.OK and result.max_ts_delta - result.min_ts_delta == 2**63 - 1


_records = st.lists(
    st.builds(lambda ts, k, v, h: (ts, k, v, h),
              st.integers(NOW - 10**6, NOW + 10**6), st.one_of(st.none(), st.binary(max_size=40)),
              st.one_of(st.none(), st.binary(max_size=200)),
              st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)),
    min_size=1, max_size=20)


@settings(max_examples=400, deadline=None)
@given(_records, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.one_of(st.none(), st.integers(0, 10_000)), st.integers(-2, 2))
def test_native_and_python_agree_on_mutated_payloads(rows, flips, cut, count_skew):
    records = [Record(i, ts, k, v, tuple(Header(a, b) for a, b in h)) for i, (ts, k, v, h) in enumerate(rows)]
    payload = bytearray(encode_batch(records)[HEADER_SIZE:])
    clean = not flips and cut is None and count_skew == 0
    for pos, value in flips:
        payload[pos % len(payload)] = value
    if cut is not None:
        payload = payload[: cut % (len(payload) + 1)]
    result = _both(bytes(payload), max(len(records) + count_skew, 0))
    if clean:
        assert result.code == S.OK and result.null_keys == sum(r.key is None for r in records)


def test_every_valid_batch_the_codec_writes_scans_clean():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 30)
        records = [Record(i, NOW + rng.randint(-5000, 5000), rng.choice([None, b"k" * rng.randint(0, 20)]),
                          rng.choice([None, bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 300)))]),
                          tuple(Header("h%d" % j, b"v") for j in range(rng.randint(0, 2)))) for i in range(n)]
        batch = encode_batch(records)
        (decoded,) = decode_batches(batch, verify_crc=True)
        result = _both(batch[HEADER_SIZE:], n)
        assert result.code == S.OK
        base = decoded.header.base_timestamp
        assert base + result.max_ts_delta == max(r.timestamp for r in decoded.records)
        assert base + result.min_ts_delta == min(r.timestamp for r in decoded.records)
