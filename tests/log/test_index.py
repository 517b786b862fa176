"""Tests for odradek.log.index: sparse offset/time indexes, Kafka on-disk layout, sanity checks."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.log.index import IndexCorrupt, OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path, base=BASE) -> OffsetIndex:
    return OffsetIndex(tmp_path / f"{base:020d}.index", base)


def time_index(tmp_path, base=BASE) -> TimeIndex:
    return TimeIndex(tmp_path / f"{base:020d}.timeindex", base)


# ----------------------------------------------------------------------------- offset index


def test_offset_index_append_ignores_non_increasing_offsets(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.append(BASE + 10, 500)
    idx.append(BASE + 10, 900)  # same offset: ignored
    idx.append(BASE + 5, 1200)  # going backwards: ignored
    idx.append(BASE + 20, 1500)
    assert list(idx.keys) == [BASE, BASE + 10, BASE + 20]
    assert list(idx.values) == [0, 500, 1500]
    assert len(idx) == 3


def test_offset_index_lookup_is_floor_search(tmp_path):
    idx = offset_index(tmp_path)
    for off, pos in [(BASE, 0), (BASE + 10, 500), (BASE + 20, 1500)]:
        idx.append(off, pos)
    assert idx.lookup(BASE - 1) == 0  # before the first entry: scan from the start
    assert idx.lookup(BASE) == 0
    assert idx.lookup(BASE + 9) == 0
    assert idx.lookup(BASE + 10) == 500
    assert idx.lookup(BASE + 19) == 500
    assert idx.lookup(BASE + 20) == 1500
    assert idx.lookup(BASE + 10_000) == 1500


def test_empty_offset_index_lookup_is_zero(tmp_path):
    assert offset_index(tmp_path).lookup(BASE + 7) == 0


def test_offset_index_flush_writes_kafka_layout(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.append(BASE + 3, 4096)
    idx.append(BASE + 70_000, 123_456)
    idx.flush()
    data = idx.path.read_bytes()
    assert len(data) == 3 * 8
    # relative offset u32, position u32, big-endian
    assert data == struct.pack(">II", 0, 0) + struct.pack(">II", 3, 4096) + struct.pack(">II", 70_000, 123_456)


def test_offset_index_incremental_flush_appends_only_new_entries(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.flush()
    assert idx.path.read_bytes() == struct.pack(">II", 0, 0)
    idx.append(BASE + 2, 100)
    idx.append(BASE + 4, 200)
    idx.flush()
    idx.flush()  # nothing new: file unchanged
    assert idx.path.read_bytes() == b"".join(
        struct.pack(">II", r, p) for r, p in [(0, 0), (2, 100), (4, 200)]
    )


def test_empty_index_flush_creates_empty_file(tmp_path):
    idx = offset_index(tmp_path)
    idx.flush()
    assert idx.path.exists()
    assert idx.path.read_bytes() == b""


def test_offset_index_load_round_trip(tmp_path):
    idx = offset_index(tmp_path)
    entries = [(BASE, 0), (BASE + 5, 300), (BASE + 9, 777), (BASE + 100, 5000)]
    for off, pos in entries:
        idx.append(off, pos)
    idx.flush()
    loaded = offset_index(tmp_path)
    loaded.load(segment_size=6000)
    assert list(zip(loaded.keys, loaded.values)) == entries
    assert loaded.lookup(BASE + 50) == 777
    # A loaded index counts as persisted: a new entry is appended, not rewritten from scratch.
    loaded.append(BASE + 200, 5500)
    loaded.flush()
    assert len(loaded.path.read_bytes()) == 5 * 8
    again = offset_index(tmp_path)
    again.load(segment_size=6000)
    assert again.keys[-1] == BASE + 200 and again.values[-1] == 5500


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(0, 2**40),
    steps=st.lists(st.tuples(st.integers(1, 2**20), st.integers(1, 2**16)), max_size=60),
)
def test_offset_index_round_trip_property(tmp_path_factory, base, steps):
    d = tmp_path_factory.mktemp("oi")
    idx = OffsetIndex(d / "x.index", base)
    entries = []
    off, pos = base, 0
    for d_off, d_pos in steps:
        entries.append((off, pos))
        idx.append(off, pos)
        off += d_off
        pos += d_pos
    idx.flush()
    assert len(idx.path.read_bytes()) == 8 * len(entries)
    loaded = OffsetIndex(d / "x.index", base)
    loaded.load(segment_size=pos + 1)
    assert list(zip(loaded.keys, loaded.values)) == entries
    for k, v in entries:
        assert loaded.lookup(k) == v


def test_offset_index_load_rejects_partial_entry(tmp_path):
    idx = offset_index(tmp_path)
    idx.path.write_bytes(struct.pack(">II", 0, 0) + b"\x00" * 7)
    with pytest.raises(IndexCorrupt):
        idx.load(segment_size=1000)


@pytest.mark.parametrize(
    "entries",
    [
        [(5, 100), (3, 200)],  # offsets go backwards
        [(5, 100), (5, 200)],  # repeated offset
        [(5, 100), (6, 50)],  # positions go backwards
        [(5, 100), (6, 100)],  # repeated position
    ],
    ids=["offset-backwards", "offset-repeated", "position-backwards", "position-repeated"],
)
def test_offset_index_load_rejects_out_of_order(tmp_path, entries):
    idx = offset_index(tmp_path)
    idx.path.write_bytes(b"".join(struct.pack(">II", r, p) for r, p in entries))
    with pytest.raises(IndexCorrupt):
        idx.load(segment_size=10_000)


def test_offset_index_load_rejects_position_past_segment(tmp_path):
    idx = offset_index(tmp_path)
    idx.path.write_bytes(struct.pack(">II", 0, 0) + struct.pack(">II", 4, 1000))
    with pytest.raises(IndexCorrupt):
        idx.load(segment_size=1000)  # position == size: no batch can start there
    ok = offset_index(tmp_path)
    ok.load(segment_size=1001)
    assert list(ok.values) == [0, 1000]


def test_offset_index_truncate_to_position(tmp_path):
    idx = offset_index(tmp_path)
    for off, pos in [(BASE, 0), (BASE + 5, 300), (BASE + 9, 777)]:
        idx.append(off, pos)
    idx.flush()
    idx.truncate_to_position(300)  # drops the entry at 300 and after
    assert list(idx.keys) == [BASE]
    assert not idx.path.exists()  # rewritten on next flush
    idx.flush()
    assert idx.path.read_bytes() == struct.pack(">II", 0, 0)


def test_index_clear_removes_file(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.flush()
    idx.clear()
    assert len(idx) == 0
    assert not idx.path.exists()


# ----------------------------------------------------------------------------- time index


def test_time_index_append_keeps_only_increasing_timestamps(tmp_path):
    ti = time_index(tmp_path)
    ti.append(100, BASE)
    ti.append(100, BASE + 1)  # not larger: ignored
    ti.append(50, BASE + 2)  # smaller: ignored
    ti.append(200, BASE + 3)
    assert list(ti.keys) == [100, 200]
    assert list(ti.values) == [BASE, BASE + 3]


def test_time_index_lookup(tmp_path):
    ti = time_index(tmp_path)
    for ts, off in [(100, BASE), (200, BASE + 10), (300, BASE + 20)]:
        ti.append(ts, off)
    # No entry below the timestamp: scan from the segment's base offset.
    assert ti.lookup(0) == BASE
    assert ti.lookup(100) == BASE
    # Otherwise start at the last entry whose timestamp is below the target.
    assert ti.lookup(101) == BASE
    assert ti.lookup(200) == BASE
    assert ti.lookup(201) == BASE + 10
    assert ti.lookup(300) == BASE + 10
    assert ti.lookup(10**12) == BASE + 20


def test_empty_time_index_lookup_is_base_offset(tmp_path):
    assert time_index(tmp_path).lookup(12345) == BASE


def test_time_index_flush_writes_kafka_layout(tmp_path):
    ti = time_index(tmp_path)
    ti.append(1_700_000_000_000, BASE)
    ti.append(1_700_000_000_500, BASE + 42)
    ti.flush()
    data = ti.path.read_bytes()
    assert len(data) == 2 * 12
    assert data == struct.pack(">qI", 1_700_000_000_000, 0) + struct.pack(">qI", 1_700_000_000_500, 42)


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(0, 2**40),
    ts0=st.integers(-(2**40), 2**45),
    steps=st.lists(st.tuples(st.integers(1, 10**9), st.integers(1, 2**20)), max_size=60),
)
def test_time_index_round_trip_property(tmp_path_factory, base, ts0, steps):
    d = tmp_path_factory.mktemp("ti")
    ti = TimeIndex(d / "x.timeindex", base)
    entries = []
    ts, off = ts0, base
    for d_ts, d_off in steps:
        entries.append((ts, off))
        ti.append(ts, off)
        ts += d_ts
        off += d_off
    ti.flush()
    assert len(ti.path.read_bytes()) == 12 * len(entries)
    loaded = TimeIndex(d / "x.timeindex", base)
    loaded.load(next_offset=off)
    assert list(zip(loaded.keys, loaded.values)) == entries


def test_time_index_load_rejects_partial_entry(tmp_path):
    ti = time_index(tmp_path)
    ti.path.write_bytes(struct.pack(">qI", 5, 0) + b"\x00")
    with pytest.raises(IndexCorrupt):
        ti.load(next_offset=BASE + 10)


@pytest.mark.parametrize(
    "entries",
    [
        [(200, 0), (100, 5)],  # timestamps go backwards
        [(200, 0), (200, 5)],  # repeated timestamp
        [(200, 5), (300, 2)],  # offsets go backwards
    ],
    ids=["ts-backwards", "ts-repeated", "offset-backwards"],
)
def test_time_index_load_rejects_out_of_order(tmp_path, entries):
    ti = time_index(tmp_path)
    ti.path.write_bytes(b"".join(struct.pack(">qI", t, r) for t, r in entries))
    with pytest.raises(IndexCorrupt):
        ti.load(next_offset=BASE + 100)


def test_time_index_load_rejects_offset_past_segment(tmp_path):
    ti = time_index(tmp_path)
    ti.path.write_bytes(struct.pack(">qI", 100, 0) + struct.pack(">qI", 200, 10))
    with pytest.raises(IndexCorrupt):
        ti.load(next_offset=BASE + 10)  # offset BASE+10 is not in the segment
    ok = time_index(tmp_path)
    ok.load(next_offset=BASE + 11)
    assert list(ok.values) == [BASE, BASE + 10]


def test_time_index_truncate_to_offset(tmp_path):
    ti = time_index(tmp_path)
    for ts, off in [(100, BASE), (200, BASE + 10), (300, BASE + 20)]:
        ti.append(ts, off)
    ti.flush()
    ti.truncate_to_offset(BASE + 10)
    assert list(ti.keys) == [100] and list(ti.values) == [BASE]
    ti.flush()
    assert ti.path.read_bytes() == struct.pack(">qI", 100, 0)
