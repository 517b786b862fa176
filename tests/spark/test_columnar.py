"""columnar.to_arrow against the record decoder: the same rows, for every shape of record."""

from __future__ import annotations

import random

import pytest

from odradek.records.codec import (
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    ZSTD,
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


def _expected(buf: bytes, start: int, end: int):
    rows = []
    for b in decode_batches(buf):
        if b.is_control:
            continue
        rows += [(r.offset, r.key, r.value, r.timestamp, b.timestamp_type) for r in b.records if start <= r.offset < end]
    return rows


def _got(batch):
    d = batch.to_pydict()
    stamps = [int(t.timestamp() * 1000) for t in d["timestamp"]]
    return list(zip(d["offset"], d["key"], d["value"], stamps, d["timestampType"]))


@pytest.mark.parametrize("codec", [NONE, GZIP, LZ4, ZSTD])
def test_rows_equal_the_record_decoder(codec):
    rng = random.Random(codec)
    buf = b""
    offset = 100
    for n in (1, 50, 300):  # several batches in one fetch, with an offset gap between them
        recs = [(offset + i * 2, TS + rng.randrange(-5000, 5000), None if i % 3 else b"k%d" % i, _value(rng, i))
                for i in range(n)]
        buf += encode_batch(recs, base_offset=offset, compression=codec)
        offset += 2 * n + 7
    for start, end in ((0, 10**9), (101, 500), (150, 151), (10**8, 10**9)):
        batch = to_arrow(buf, "t", 2, start, end, False)
        want = _expected(buf, start, end)
        if not want:
            assert batch is None
            continue
        assert _got(batch) == want
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
