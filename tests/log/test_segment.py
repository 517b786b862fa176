"""Tests for odradek.log.segment: append, find, find_timestamp, headers, load and recovery."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.log import segment as segment_mod
from odradek.log.index import IndexCorrupt  # noqa: F401  (documents what load() guards against)
from odradek.log.errors import CorruptBatch, SegmentDamaged, StorageError
from odradek.log.segment import RecoveryResult, Segment, segment_name
from odradek.records.batch import CRC_OFFSET, iter_headers
from odradek.records.codec import GZIP, Record, decode_batches, encode_batch

BASE = 100
T0 = 1_700_000_000_000


def make_batch(base_offset: int, count: int, ts: int, value_size: int = 20, compression: int = 0,
               ts_list: list[int] | None = None) -> bytes:
    records = [
        Record(base_offset + i, ts_list[i] if ts_list else ts + i, b"key-%d" % (base_offset + i),
               bytes([(base_offset + i) % 251]) * value_size)
        for i in range(count)
    ]
    return encode_batch(records, base_offset=base_offset, compression=compression)


def append(seg: Segment, raw: bytes) -> None:
    seg.append(raw, list(iter_headers(raw)))


def fill(seg: Segment, counts: list[int], ts: int = T0, value_size: int = 20) -> list[tuple[int, int, bytes]]:
    """Append one batch per count; return (base_offset, last_offset, bytes) per batch."""
    out = []
    off = seg.next_offset
    for i, n in enumerate(counts):
        raw = make_batch(off, n, ts + 10 * i, value_size)
        append(seg, raw)
        out.append((off, off + n - 1, raw))
        off += n
    return out


def new_segment(d, base=BASE, interval=4096, created=T0) -> Segment:
    return Segment(d, base, interval, created)


def reopen(seg: Segment, interval=None) -> Segment:
    seg.close()
    return Segment(seg.directory, seg.base_offset, interval or seg.index_interval_bytes, T0)


def read_file(seg: Segment) -> bytes:
    return seg.path.read_bytes()


# ----------------------------------------------------------------------------- basics


def test_segment_file_names(tmp_path):
    seg = new_segment(tmp_path, base=123)
    assert segment_name(123) == "00000000000000000123"
    assert seg.path.name == "00000000000000000123.log"
    assert seg.index.path.name == "00000000000000000123.index"
    assert seg.time_index.path.name == "00000000000000000123.timeindex"
    assert seg.path.exists()
    assert seg.size == 0 and seg.next_offset == 123
    seg.close()


def test_append_tracks_size_next_offset_and_bytes(tmp_path):
    seg = new_segment(tmp_path)
    batches = fill(seg, [3, 1, 5])
    assert seg.next_offset == BASE + 9
    assert seg.size == sum(len(b) for *_, b in batches)
    assert read_file(seg) == b"".join(b for *_, b in batches)
    assert seg.pread(0, seg.size) == read_file(seg)
    seg.close()


def test_append_multiple_batches_in_one_write(tmp_path):
    seg = new_segment(tmp_path)
    fill(seg, [2])
    a = make_batch(BASE + 2, 3, T0)
    b = make_batch(BASE + 5, 4, T0 + 1)
    data = a + b
    seg.append(data, list(iter_headers(data)))  # positions relative to `data`
    assert seg.next_offset == BASE + 9
    h = seg.find(BASE + 6)
    assert h.base_offset == BASE + 5
    assert seg.pread(h.position, h.size) == b
    seg.close()


def test_index_is_sparse_by_interval(tmp_path):
    raw = make_batch(0, 1, T0)
    seg = new_segment(tmp_path, interval=3 * len(raw))
    fill(seg, [1] * 20)
    # First batch is always indexed, then one entry per interval's worth of bytes.
    assert seg.index.keys[0] == BASE
    assert 5 <= len(seg.index) <= 8
    assert len(seg.index) < 20
    seg.close()
    (tmp_path / "dense").mkdir()
    dense = new_segment(tmp_path / "dense", interval=0)
    fill(dense, [1] * 20)
    assert len(dense.index) == 20
    dense.close()


@pytest.mark.parametrize("interval", [0, 200, 4096])
def test_find_every_offset_and_boundaries(tmp_path, interval):
    seg = new_segment(tmp_path, interval=interval)
    batches = fill(seg, [1, 4, 2, 7, 1, 3, 10, 1])
    for base, last, raw in batches:
        for off in range(base, last + 1):
            h = seg.find(off)
            assert h is not None
            assert (h.base_offset, h.last_offset) == (base, last)
            assert seg.pread(h.position, h.size) == raw
    # Below the segment's base: the first batch. At or past the end: nothing.
    assert seg.find(0).base_offset == BASE
    assert seg.find(seg.next_offset) is None
    assert seg.find(seg.next_offset + 100) is None
    seg.close()


def test_find_in_empty_segment(tmp_path):
    seg = new_segment(tmp_path)
    assert seg.find(BASE) is None
    assert seg.find_timestamp(0) is None
    assert list(seg.headers()) == []
    seg.close()


def test_find_timestamp(tmp_path):
    seg = new_segment(tmp_path, interval=0)
    # max timestamps per batch: 1000, 3000, 2000, 5000, 4000
    for i, ts in enumerate([1000, 3000, 2000, 5000, 4000]):
        append(seg, make_batch(BASE + i, 1, ts))
    assert seg.max_timestamp == 5000
    assert seg.find_timestamp(0).base_offset == BASE
    assert seg.find_timestamp(1000).base_offset == BASE
    assert seg.find_timestamp(1001).base_offset == BASE + 1
    assert seg.find_timestamp(2500).base_offset == BASE + 1
    assert seg.find_timestamp(3001).base_offset == BASE + 3
    assert seg.find_timestamp(5000).base_offset == BASE + 3
    assert seg.find_timestamp(5001) is None
    seg.close()


@settings(max_examples=40, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 10_000), min_size=1, max_size=40),
    interval=st.sampled_from([0, 150, 100_000]),
    probes=st.lists(st.integers(-5, 10_010), max_size=20),
)
def test_find_timestamp_matches_linear_scan(tmp_path_factory, stamps, interval, probes):
    seg = new_segment(tmp_path_factory.mktemp("ts"), interval=interval)
    for i, ts in enumerate(stamps):
        append(seg, make_batch(BASE + i, 1, ts))
    try:
        for reopened in (False, True):
            if reopened:  # the same answers from indexes loaded off disk
                seg = reopen(seg)
                assert seg.load() is None
            assert seg.max_timestamp == max(stamps)
            for probe in probes + stamps:
                expected = next((BASE + i for i, ts in enumerate(stamps) if ts >= probe), None)
                h = seg.find_timestamp(probe)
                assert (h.base_offset if h else None) == expected
    finally:
        seg.close()


def test_headers_lists_every_batch_with_file_positions(tmp_path):
    seg = new_segment(tmp_path)
    batches = fill(seg, [1, 3, 2, 1])
    hs = list(seg.headers())
    assert [(h.base_offset, h.last_offset) for h in hs] == [(b, l) for b, l, _ in batches]
    pos = 0
    for h, (_, _, raw) in zip(hs, batches):
        assert h.position == pos
        assert h.size == len(raw)
        pos += len(raw)
    seg.close()


# ----------------------------------------------------------------------------- large batches


def test_batches_larger_than_scan_chunk(tmp_path):
    big = (1 << 20) + 12345
    assert big > segment_mod._SCAN_CHUNK
    seg = new_segment(tmp_path, interval=4096)
    layout = [(2, 10), (1, big), (3, 10), (1, 2 * big), (1, 10), (1, 700_000), (1, 700_000)]
    expected = []
    off = BASE
    for i, (count, size) in enumerate(layout):
        raw = make_batch(off, count, T0 + i, value_size=size)
        append(seg, raw)
        expected.append((off, off + count - 1, raw))
        off += count
    hs = list(seg.headers())
    assert [(h.base_offset, h.last_offset, h.size) for h in hs] == [(b, l, len(r)) for b, l, r in expected]
    for b, l, raw in expected:
        h = seg.find(l)
        assert h.base_offset == b
        assert seg.pread(h.position, h.size) == raw
    # Recovery scans them too and keeps everything.
    result = seg.recover()
    assert result == RecoveryResult(0, len(layout))
    assert seg.next_offset == off
    seg.close()


def test_recovery_truncates_torn_large_batch(tmp_path):
    seg = new_segment(tmp_path)
    fill(seg, [2])
    keep = seg.size
    raw = make_batch(BASE + 2, 1, T0, value_size=(1 << 20) + 100)
    with open(seg.path, "ab") as f:
        f.write(raw[: len(raw) // 2])
    seg = reopen(seg)
    result = seg.recover()
    assert result.truncated_bytes == len(raw) // 2
    assert seg.size == keep and os.path.getsize(seg.path) == keep
    assert seg.next_offset == BASE + 2
    seg.close()


# ----------------------------------------------------------------------------- recovery


def _damage_cases(last: bytes):
    yield "garbage", lambda data: data + b"\xde\xad\xbe\xef" * 40, 160
    yield "half-batch", lambda data: data + last[: len(last) // 2], len(last) // 2
    yield "header-only", lambda data: data + last[:61], 61
    yield "tiny-tail", lambda data: data + b"\x00\x00", 2


@pytest.mark.parametrize("case", ["garbage", "half-batch", "header-only", "tiny-tail"])
def test_recovery_truncates_torn_tail(tmp_path, case):
    seg = new_segment(tmp_path, interval=100)
    batches = fill(seg, [3, 2, 4])
    good = read_file(seg)
    seg.flush()
    extra = make_batch(seg.next_offset, 2, T0 + 999)
    damage = dict((name, (fn, n)) for name, fn, n in _damage_cases(extra))
    fn, torn = damage[case]
    seg.close()
    seg.path.write_bytes(fn(good))
    seg = Segment(tmp_path, BASE, 100, T0)
    result = seg.recover()
    assert (result.truncated_bytes, result.batches) == (torn, 3)
    # What was dropped is reported: a torn tail loses no whole batch; the half batch
    # and the lone header still name the two offsets they held.
    assert not result.whole_batches_dropped and result.first_dropped_offset == BASE + 9
    assert result.dropped_offsets == (2 if case in ("half-batch", "header-only") else 0)
    assert read_file(seg) == good
    assert seg.size == len(good)
    assert seg.next_offset == BASE + 9
    assert seg.max_timestamp == max(h.max_timestamp for h in iter_headers(good))
    for base, last, raw in batches:
        h = seg.find(last)
        assert h.base_offset == base and seg.pread(h.position, h.size) == raw
    # Indexes were rebuilt and written.
    assert seg.index.path.exists() and seg.time_index.path.exists()
    assert len(seg.index.path.read_bytes()) == 8 * len(seg.index)
    # New appends land right after the last good batch.
    nxt = make_batch(BASE + 9, 1, T0 + 5000)
    append(seg, nxt)
    assert read_file(seg) == good + nxt
    assert seg.find(BASE + 9).position == len(good)
    seg.close()


@pytest.mark.parametrize("where", ["crc-field", "records"])
def test_recovery_drops_last_batch_with_bad_crc(tmp_path, where):
    seg = new_segment(tmp_path)
    batches = fill(seg, [3, 2, 4])
    seg.close()
    data = bytearray(seg.path.read_bytes())
    last_pos = len(data) - len(batches[-1][2])
    i = last_pos + CRC_OFFSET if where == "crc-field" else len(data) - 3
    data[i] ^= 0x55
    seg.path.write_bytes(bytes(data))
    seg = Segment(tmp_path, BASE, 4096, T0)
    result = seg.recover()
    assert (result.truncated_bytes, result.batches) == (len(batches[-1][2]), 2)
    # A whole batch (four offsets) was lost: corruption, not an interrupted write.
    assert result.whole_batches_dropped and result.dropped_offsets == 4 and "CRC" in result.reason
    assert seg.next_offset == batches[-1][0]
    assert read_file(seg) == batches[0][2] + batches[1][2]
    seg.close()


def test_recovery_stops_at_corrupt_middle_batch(tmp_path):
    seg = new_segment(tmp_path)
    batches = fill(seg, [1, 1, 1, 1])
    seg.close()
    data = bytearray(seg.path.read_bytes())
    data[len(batches[0][2]) + 70] ^= 0xFF  # inside the second batch's records
    seg.path.write_bytes(bytes(data))
    seg = Segment(tmp_path, BASE, 4096, T0)
    result = seg.recover()
    assert result.batches == 1
    assert seg.size == len(batches[0][2])
    assert seg.next_offset == BASE + 1
    seg.close()


def test_recovery_stops_at_non_increasing_offsets(tmp_path):
    seg = new_segment(tmp_path)
    fill(seg, [2])
    good = seg.size
    append(seg, make_batch(BASE, 1, T0))  # offset BASE again: not a valid continuation
    seg.close()
    seg = Segment(tmp_path, BASE, 4096, T0)
    result = seg.recover()
    assert result.batches == 1
    assert seg.size == good and seg.next_offset == BASE + 2
    seg.close()


def test_recovery_of_clean_segment_changes_nothing(tmp_path):
    seg = new_segment(tmp_path, interval=0)
    fill(seg, [3, 2, 4])
    before = read_file(seg)
    keys, values = list(seg.index.keys), list(seg.index.values)
    tkeys = list(seg.time_index.keys)
    assert seg.recover() == RecoveryResult(0, 3)
    assert read_file(seg) == before
    assert list(seg.index.keys) == keys and list(seg.index.values) == values
    assert list(seg.time_index.keys) == tkeys
    seg.close()


# ----------------------------------------------------------------------------- load


def test_load_trusting_flushed_indexes(tmp_path):
    seg = new_segment(tmp_path, interval=150)
    batches = fill(seg, [2, 1, 3, 1, 5, 2], value_size=40)
    expected = (seg.next_offset, seg.max_timestamp, seg.max_timestamp_position, seg.size)
    idx = (list(seg.index.keys), list(seg.index.values))
    seg = reopen(seg)
    assert seg.load() is None  # no recovery needed
    assert (seg.next_offset, seg.max_timestamp, seg.max_timestamp_position, seg.size) == expected
    assert (list(seg.index.keys), list(seg.index.values)) == idx
    assert seg.first_batch_timestamp == T0 + 1  # max timestamp of the first batch (2 records: T0, T0+1)
    for base, last, raw in batches:
        h = seg.find(base)
        assert h.base_offset == base and seg.pread(h.position, h.size) == raw
    seg.close()


def test_load_max_timestamp_not_in_last_batch(tmp_path):
    seg = new_segment(tmp_path, interval=0)
    for i, ts in enumerate([100, 900, 300, 200]):
        append(seg, make_batch(BASE + i, 1, ts))
    pos = seg.max_timestamp_position
    seg = reopen(seg)
    assert seg.load() is None
    assert seg.max_timestamp == 900
    assert seg.max_timestamp_position == pos
    assert seg.batch_at(pos).base_offset == BASE + 1
    seg.close()


def test_load_with_stale_but_sane_indexes_scans_the_tail(tmp_path):
    seg = new_segment(tmp_path, interval=0)
    fill(seg, [1, 1])
    seg.flush()
    # More batches arrive but the index files are not flushed again (simulated crash
    # after the page cache got the data but before the next index flush).
    fill(seg, [2, 3])
    expected_next, expected_max = seg.next_offset, seg.max_timestamp
    os.close(seg.fd)
    seg.fd = -1
    seg = Segment(tmp_path, BASE, 0, T0)
    assert seg.load() is None
    assert seg.next_offset == expected_next
    assert seg.max_timestamp == expected_max
    assert seg.find(expected_next - 1).last_offset == expected_next - 1
    seg.close()


@pytest.mark.parametrize("missing", ["index", "timeindex", "both"])
def test_load_with_missing_index_files_rebuilds(tmp_path, missing):
    seg = new_segment(tmp_path, interval=0)
    fill(seg, [2, 1, 3])
    expected = (seg.next_offset, seg.max_timestamp, list(seg.index.keys), list(seg.time_index.keys))
    seg = reopen(seg)
    if missing in ("index", "both"):
        seg.index.path.unlink()
    if missing in ("timeindex", "both"):
        seg.time_index.path.unlink()
    result = seg.load()
    assert result == RecoveryResult(0, 3)
    assert (seg.next_offset, seg.max_timestamp, list(seg.index.keys), list(seg.time_index.keys)) == expected
    assert seg.index.path.exists() and seg.time_index.path.exists()
    seg.close()


def _corrupt_index(seg: Segment, how: str) -> None:
    if how == "index-size":
        with open(seg.index.path, "ab") as f:
            f.write(b"\x01\x02\x03")
    elif how == "index-order":
        seg.index.path.write_bytes(struct.pack(">II", 5, 100) + struct.pack(">II", 1, 200))
    elif how == "index-past-end":
        seg.index.path.write_bytes(struct.pack(">II", 0, 0) + struct.pack(">II", 1, seg.size + 10))
    elif how == "timeindex-size":
        with open(seg.time_index.path, "ab") as f:
            f.write(b"\x00" * 5)
    elif how == "timeindex-order":
        seg.time_index.path.write_bytes(struct.pack(">qI", 500, 0) + struct.pack(">qI", 400, 1))
    elif how == "timeindex-past-end":
        seg.time_index.path.write_bytes(struct.pack(">qI", 500, 10_000))
    elif how == "index-mid-batch":
        # Last entry points inside a batch: the tail scan cannot end at the file size.
        seg.index.path.write_bytes(struct.pack(">II", 0, 0) + struct.pack(">II", 1, 7))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    ["index-size", "index-order", "index-past-end", "timeindex-size", "timeindex-order", "timeindex-past-end",
     "index-mid-batch"],
)
def test_load_with_corrupt_index_files_rebuilds(tmp_path, how):
    seg = new_segment(tmp_path, interval=0)
    batches = fill(seg, [2, 1, 3])
    expected = (seg.next_offset, seg.max_timestamp, seg.max_timestamp_position,
                list(seg.index.keys), list(seg.index.values), list(seg.time_index.keys))
    seg = reopen(seg)
    _corrupt_index(seg, how)
    result = seg.load()
    assert isinstance(result, RecoveryResult)
    assert result.truncated_bytes == 0 and result.batches == 3
    assert (seg.next_offset, seg.max_timestamp, seg.max_timestamp_position,
            list(seg.index.keys), list(seg.index.values), list(seg.time_index.keys)) == expected
    # Rebuilt files are sane again.
    fresh = Segment(tmp_path, BASE, 0, T0)
    fresh.index.load(seg.size)
    fresh.time_index.load(seg.next_offset)
    assert list(fresh.index.keys) == expected[3]
    fresh.close()
    for base, _, raw in batches:
        h = seg.find(base)
        assert seg.pread(h.position, h.size) == raw
    seg.close()


def test_load_of_a_flushed_segment_cut_short_is_damage_not_truncation(tmp_path):
    # A flushed segment with a torn end lost acknowledged data: loading says so and
    # changes nothing on disk (the partition goes offline); only recover() truncates.
    seg = new_segment(tmp_path)
    fill(seg, [2, 2])
    good = seg.size
    seg = reopen(seg)
    with open(seg.path, "ab") as f:
        f.write(make_batch(BASE + 4, 3, T0)[:80])
    seg.close()
    seg = Segment(tmp_path, BASE, 4096, T0)
    with pytest.raises(SegmentDamaged) as err:
        seg.load()
    assert err.value.offset == BASE + 4 and "cut short" in str(err.value)
    assert os.path.getsize(seg.path) == good + 80
    assert seg.recover().truncated_bytes == 80 and seg.size == good
    seg.close()


def test_load_of_a_segment_holding_an_unindexable_batch_is_damage(tmp_path):
    # RELIABILITY.md item 1: a stored batch whose offsets overflow the 32-bit relative
    # offsets of its segment's index.
    seg = new_segment(tmp_path)
    fill(seg, [2])
    seg = reopen(seg)
    big = bytearray(make_batch(BASE + 2, 1, T0))
    struct.pack_into(">i", big, 23, 2**31 - 2)  # last offset delta
    with open(seg.path, "ab") as f:
        f.write(big)
    seg.index.path.unlink()
    seg = Segment(tmp_path, BASE, 4096, T0)
    with pytest.raises(SegmentDamaged) as err:
        seg.load()
    assert "overflow" in str(err.value)
    seg.close()


def test_load_empty_segment(tmp_path):
    seg = new_segment(tmp_path)
    seg = reopen(seg)
    assert seg.load() is None
    assert seg.next_offset == BASE and seg.size == 0 and seg.max_timestamp == -1
    seg.close()


def test_truncate_to(tmp_path):
    seg = new_segment(tmp_path, interval=0)
    batches = fill(seg, [2, 3, 1, 4])
    seg.truncate_to(batches[1][0] + 1)  # inside the second batch: it goes too
    assert seg.next_offset == batches[1][0]
    assert read_file(seg) == batches[0][2]
    assert seg.find(batches[1][0]) is None
    assert list(seg.index.keys) == [BASE]
    seg.close()


def test_delete_removes_files(tmp_path):
    seg = new_segment(tmp_path)
    fill(seg, [1])
    seg.flush()
    seg.delete()
    assert not seg.path.exists()
    assert not seg.index.path.exists()
    assert not seg.time_index.path.exists()


def test_compressed_batches_are_stored_as_is(tmp_path):
    seg = new_segment(tmp_path)
    raw = make_batch(BASE, 50, T0, compression=GZIP)
    append(seg, raw)
    h = seg.find(BASE + 49)
    got = seg.pread(h.position, h.size)
    assert got == raw
    (batch,) = decode_batches(got, verify_crc=True)
    assert [r.offset for r in batch.records] == list(range(BASE, BASE + 50))
    seg.close()


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 900), min_size=1, max_size=25),
    chunk=st.integers(1, 700),
)
def test_headers_with_any_chunk_size_property(tmp_path_factory, sizes, chunk):
    """headers() reads in chunks; batches straddling or exceeding a chunk must all be listed."""
    seg = new_segment(tmp_path_factory.mktemp("chunk"))
    try:
        expected = []
        for i, size in enumerate(sizes):
            raw = make_batch(BASE + i, 1, T0 + i, value_size=size)
            append(seg, raw)
            expected.append((BASE + i, seg.size - len(raw), len(raw)))
        old = segment_mod._SCAN_CHUNK
        segment_mod._SCAN_CHUNK = chunk
        try:
            got = [(h.base_offset, h.position, h.size) for h in seg.headers()]
        finally:
            segment_mod._SCAN_CHUNK = old
        assert got == expected
    finally:
        seg.close()


# ----------------------------------------------------------------------------- failing disks


class _FullDisk:
    """os.write/os.fsync stand-ins for one descriptor: the disk fills after `room` bytes."""

    def __init__(self, monkeypatch, seg: Segment, room: int, code: int = errno.ENOSPC, fsync_fails: bool = False):
        self.room = room
        self.code = code
        real_write, real_fsync = os.write, os.fsync

        def write(fd, data):
            if fd != seg.fd:
                return real_write(fd, data)
            if self.room <= 0:
                raise OSError(self.code, os.strerror(self.code))
            n = real_write(fd, bytes(memoryview(data)[: self.room]))  # a partial write, as a filling disk gives
            self.room -= n
            return n

        def fsync(fd):
            if fd == seg.fd and fsync_fails:
                raise OSError(self.code, os.strerror(self.code))
            return real_fsync(fd)

        monkeypatch.setattr(segment_mod.os, "write", write)
        monkeypatch.setattr(segment_mod.os, "fsync", fsync)


@pytest.mark.parametrize("room", [0, 1, 60, 200])
def test_a_write_that_fills_the_disk_leaves_no_trace(tmp_path, monkeypatch, room):
    seg = new_segment(tmp_path, interval=0)
    fill(seg, [2, 3])
    before = (seg.size, seg.next_offset, list(seg.index.keys), read_file(seg))
    disk = _FullDisk(monkeypatch, seg, room)
    raw = make_batch(seg.next_offset, 4, T0, value_size=100)
    with pytest.raises(StorageError) as err:
        append(seg, raw)
    assert err.value.transient and err.value.undone and err.value.errno == errno.ENOSPC
    assert (seg.size, seg.next_offset, list(seg.index.keys), read_file(seg)) == before
    # Space comes back: the retried write lands at the right position.
    disk.room = 1 << 20
    append(seg, raw)
    assert read_file(seg) == before[3] + raw
    assert seg.find(before[1]).position == before[0]
    seg = reopen(seg)
    assert seg.load() is None and seg.next_offset == before[1] + 4
    seg.close()


def test_a_failed_fsync_undoes_the_write_too(tmp_path, monkeypatch):
    seg = new_segment(tmp_path)
    fill(seg, [2])
    size = seg.size
    _FullDisk(monkeypatch, seg, 1 << 20, code=errno.EIO, fsync_fails=True)
    raw = make_batch(seg.next_offset, 1, T0)
    with pytest.raises(StorageError) as err:
        seg.append(raw, list(iter_headers(raw)), fsync=True)
    assert not err.value.transient
    assert seg.size == size == os.path.getsize(seg.path)


def test_a_write_that_cannot_be_cut_back_says_so(tmp_path, monkeypatch):
    seg = new_segment(tmp_path)
    fill(seg, [2])
    _FullDisk(monkeypatch, seg, 10, code=errno.EIO)

    def no_truncate(fd, size):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(segment_mod.os, "ftruncate", no_truncate)
    with pytest.raises(StorageError) as err:
        append(seg, make_batch(seg.next_offset, 1, T0))
    assert err.value.undone is False


def test_can_hold_guards_the_32_bit_index():
    seg = Segment.__new__(Segment)
    seg.base_offset, seg.size = 1000, 100
    assert seg.can_hold(1000 + 2**31 - 1, 10)
    assert not seg.can_hold(1000 + 2**31, 10)  # relative offset would not fit
    assert not seg.can_hold(1001, 2**31)  # nor the position


def test_reads_check_crcs_and_a_broken_header_is_corruption_not_the_end(tmp_path):
    seg = new_segment(tmp_path, interval=1 << 20)  # one index entry: reads scan headers
    batches = fill(seg, [2, 2, 2])
    data = bytearray(read_file(seg))
    pos2 = len(batches[0][2]) + len(batches[1][2])
    data[pos2 - 5] ^= 0x10  # a record byte of the second batch
    seg.close()
    seg.path.write_bytes(bytes(data))
    seg = Segment(tmp_path, BASE, 1 << 20, T0)
    seg.load()
    whole = seg.pread(0, seg.size)
    assert seg.verify_crcs(whole, 0) == (len(batches[0][2]), 2)  # stops before the bad batch, 2 records
    with pytest.raises(CorruptBatch) as err:
        seg.verify_crcs(whole[len(batches[0][2]):], len(batches[0][2]))
    assert err.value.offset == BASE + 2
    # A header that does not parse in the middle of the file (its length field zeroed).
    data[len(batches[0][2]) + 8 : len(batches[0][2]) + 12] = b"\x00\x00\x00\x00"
    seg.close()
    seg.path.write_bytes(bytes(data))
    seg = Segment(tmp_path, BASE, 1 << 20, T0)
    seg.size = len(data)
    with pytest.raises(CorruptBatch):
        seg.find(BASE + 4)
    seg.close()


def test_small_segments_keep_their_indexes_in_memory_only(tmp_path, monkeypatch):
    # Creating two index files per partition made a clean shutdown with 20,000 small
    # partitions take 10-18 s; a short scan at the next load rebuilds them instead.
    monkeypatch.setattr(segment_mod, "INDEX_FILE_MIN_BYTES", 64 * 1024)
    seg = new_segment(tmp_path, interval=0)
    fill(seg, [2, 3])
    expected = (seg.next_offset, list(seg.index.keys), seg.max_timestamp)
    seg.close()
    assert not seg.index.path.exists() and not seg.time_index.path.exists()
    seg = Segment(tmp_path, BASE, 0, T0)
    assert seg.load() == RecoveryResult(0, 2)  # rebuilt by scanning
    assert (seg.next_offset, list(seg.index.keys), seg.max_timestamp) == expected
    fill(seg, [400], value_size=200)  # past the threshold: now worth files
    seg.close()
    assert seg.index.path.exists() and seg.time_index.path.exists()
    seg = Segment(tmp_path, BASE, 0, T0)
    assert seg.load() is None
    seg.close()


def test_the_time_index_grows_with_the_offset_index_not_with_every_batch(tmp_path):
    # Kafka's LogSegment.append: one time entry per index.interval.bytes. One per batch
    # (timestamps almost always grow) made the broker's memory climb 3 MB a minute.
    seg = new_segment(tmp_path, interval=4096)
    for i in range(500):
        append(seg, make_batch(BASE + i, 1, T0 + i))
    assert len(seg.time_index) <= len(seg.index) <= 500 * 100 // 4096 + 2
    for ts in (T0 - 1, T0, T0 + 1, T0 + 250, T0 + 499):
        assert seg.find_timestamp(ts).base_offset == BASE + max(ts - T0, 0)
    assert seg.find_timestamp(T0 + 500) is None
    seg.close()
