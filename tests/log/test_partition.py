"""Tests for odradek.log.partition.PartitionLog: offsets, reads, rolling, retention, reopen,
LogAppendTime, flush policy and timestamp lookups. Time is always injected."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.config import BrokerConfig
from odradek.log import segment as segment_mod
from odradek.log.errors import CorruptBatch, SegmentDamaged, StorageError
from odradek.log.partition import AppendInfo, OffsetOutOfRange, PartitionLog
from odradek.records.batch import iter_headers, validate_batches
from odradek.records.codec import LOG_APPEND_TIME, LZ4, Record, decode_batches, encode_batch

T0 = 1_700_000_000_000
HOUR = 3_600_000


def config(**overrides) -> dict:
    c = BrokerConfig().topic_defaults()
    for k, v in overrides.items():
        c[k.replace("_", ".")] = v
    return c


def records(count: int, ts: int, value_size: int = 16, key_prefix: bytes = b"k") -> list[Record]:
    return [Record(i, ts, key_prefix + b"%d" % i, b"v" * value_size) for i in range(count)]


def produce(plog: PartitionLog, now: int, count: int = 1, ts: int | None = None, value_size: int = 16,
            compression: int = 0, **kw) -> tuple[AppendInfo, bytes]:
    """Append one client batch; return the AppendInfo and the bytes as stored (offset-patched)."""
    raw = encode_batch(records(count, now if ts is None else ts, value_size), compression=compression, **kw)
    buf = bytearray(raw)
    info = plog.append(buf, validate_batches(buf), now)
    return info, bytes(buf)


def batch_size(count: int = 1, value_size: int = 16) -> int:
    return len(encode_batch(records(count, T0, value_size)))


def all_batches(plog: PartitionLog) -> list:
    out = []
    for seg in plog.segments:
        out.extend(decode_batches(seg.pread(0, seg.size), verify_crc=True))
    return out


@pytest.fixture
def logdir(tmp_path):
    return tmp_path / "topic-0"


# ----------------------------------------------------------------------------- offsets


def test_new_log_is_empty(logdir):
    plog = PartitionLog(logdir, config(), T0)
    assert plog.log_start_offset == 0
    assert plog.log_end_offset == plog.high_watermark == 0
    assert len(plog.segments) == 1
    assert plog.read(0, 1000).data == b""
    plog.close()


def test_offsets_contiguous_across_appends(logdir):
    plog = PartitionLog(logdir, config(), T0)
    expected = 0
    for i, n in enumerate([1, 5, 3, 1, 10, 2, 7] * 5):
        info, stored = produce(plog, T0 + i, count=n)
        assert (info.base_offset, info.last_offset) == (expected, expected + n - 1)
        assert info.log_append_time == -1
        assert info.log_start_offset == 0
        (batch,) = decode_batches(stored, verify_crc=True)
        assert [r.offset for r in batch.records] == list(range(expected, expected + n))
        expected += n
    assert plog.log_end_offset == plog.high_watermark == expected
    offsets = [r.offset for b in all_batches(plog) for r in b.records]
    assert offsets == list(range(expected))
    plog.close()


def test_append_multiple_batches_in_one_call(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, count=2)
    a = encode_batch(records(3, T0))
    b = encode_batch(records(4, T0))
    buf = bytearray(a + b)
    info = plog.append(buf, validate_batches(buf), T0)
    assert (info.base_offset, info.last_offset) == (2, 8)
    hs = list(iter_headers(bytes(buf)))
    assert [(h.base_offset, h.last_offset) for h in hs] == [(2, 4), (5, 8)]
    assert plog.log_end_offset == 9
    plog.close()


# ----------------------------------------------------------------------------- read


def test_read_returns_stored_bytes_from_the_containing_batch(logdir):
    plog = PartitionLog(logdir, config(index_interval_bytes=100), T0)
    stored = []
    for i, n in enumerate([3, 1, 4, 1, 5, 9, 2, 6]):
        info, raw = produce(plog, T0 + i, count=n)
        stored.append((info.base_offset, info.last_offset, raw))
    everything = b"".join(r for *_, r in stored)
    for idx, (base, last, raw) in enumerate(stored):
        rest = b"".join(r for *_, r in stored[idx:])
        for off in range(base, last + 1):
            res = plog.read(off, 10_000_000)
            assert res.data == rest  # whole batches, unchanged, from the containing batch on
            assert res.high_watermark == plog.log_end_offset
            assert res.log_start_offset == 0
            one = plog.read(off, len(raw))
            assert one.data == raw
    assert plog.read(0, 10**9).data == everything
    plog.close()


def test_read_respects_max_bytes_with_partial_trailing_batch(logdir):
    plog = PartitionLog(logdir, config(), T0)
    _, a = produce(plog, T0, count=2)
    _, b = produce(plog, T0, count=2)
    _, c = produce(plog, T0, count=2)
    res = plog.read(0, len(a) + 10)
    assert res.data == a + b[:10]
    res = plog.read(0, len(a) + len(b))
    assert res.data == a + b
    res = plog.read(2, len(b) + len(c) - 1)
    assert res.data == b + c[:-1]
    plog.close()


def test_read_always_returns_whole_first_batch(logdir):
    """KIP-74: the first batch is returned whole even when bigger than max_bytes."""
    plog = PartitionLog(logdir, config(), T0)
    _, a = produce(plog, T0, count=5, value_size=500)
    produce(plog, T0, count=1)
    for max_bytes in (0, 1, 61, len(a) - 1):
        assert plog.read(3, max_bytes).data == a
    plog.close()


def test_read_without_min_one_and_zero_max_bytes_is_empty(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, count=5)
    assert plog.read(0, 0, min_one=False).data == b""
    plog.close()


def test_read_out_of_range(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, count=3)
    with pytest.raises(OffsetOutOfRange):
        plog.read(4, 1000)  # above the high watermark
    with pytest.raises(OffsetOutOfRange):
        plog.read(-1, 1000)
    at_hw = plog.read(3, 1000)  # exactly at the high watermark: empty, not an error
    assert at_hw.data == b"" and at_hw.high_watermark == 3
    plog.close()


def test_read_below_log_start_after_retention(logdir):
    size = batch_size(2)
    plog = PartitionLog(logdir, config(segment_bytes=size, retention_bytes=size), T0)
    for i in range(4):
        produce(plog, T0 + i, count=2)
    assert plog.delete_old_segments(T0 + 10) > 0
    start = plog.log_start_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRange):
        plog.read(start - 1, 1000)
    res = plog.read(start, 1000)
    assert decode_batches(res.data)[0].header.base_offset == start
    assert res.log_start_offset == start
    plog.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(1, 20), min_size=1, max_size=25),
    value_size=st.integers(0, 300),
    segment_bytes=st.integers(200, 5000),
    interval=st.sampled_from([0, 64, 1000, 4096]),
)
def test_every_offset_reads_back_property(tmp_path_factory, counts, value_size, segment_bytes, interval):
    d = tmp_path_factory.mktemp("p") / "t-0"
    plog = PartitionLog(d, config(segment_bytes=segment_bytes, index_interval_bytes=interval), T0)
    try:
        spans = []
        for i, n in enumerate(counts):
            info, raw = produce(plog, T0 + i, count=n, value_size=value_size)
            spans.append((info.base_offset, info.last_offset, raw))
        assert plog.log_end_offset == sum(counts)
        for base, last, raw in spans:
            for off in range(base, last + 1):
                data = plog.read(off, 1).data
                assert data == raw
        # Segments tile the offset space without gaps.
        for prev, nxt in zip(plog.segments, plog.segments[1:]):
            assert prev.next_offset == nxt.base_offset
    finally:
        plog.close()


# ----------------------------------------------------------------------------- rolling


def test_roll_by_size(logdir):
    size = batch_size(2)
    plog = PartitionLog(logdir, config(segment_bytes=3 * size), T0)
    for i in range(10):
        produce(plog, T0 + i, count=2)
    assert [s.base_offset for s in plog.segments] == [0, 6, 12, 18]
    assert all(s.size <= 3 * size for s in plog.segments)
    assert sorted(p.name for p in logdir.glob("*.log")) == [f"{b:020d}.log" for b in (0, 6, 12, 18)]
    # A rolled segment's indexes are on disk.
    assert (logdir / f"{0:020d}.index").exists() and (logdir / f"{0:020d}.timeindex").exists()
    assert plog.log_end_offset == 20
    plog.close()


def test_batch_bigger_than_segment_bytes_gets_its_own_segment(logdir):
    plog = PartitionLog(logdir, config(segment_bytes=200), T0)
    produce(plog, T0, count=1)
    info, raw = produce(plog, T0, count=1, value_size=1000)
    assert len(raw) > 200
    assert [s.base_offset for s in plog.segments] == [0, 1]
    assert plog.read(1, 10).data == raw
    produce(plog, T0, count=1)
    assert [s.base_offset for s in plog.segments] == [0, 1, 2]
    plog.close()


def test_roll_by_time(logdir):
    plog = PartitionLog(logdir, config(segment_ms=1000), T0)
    produce(plog, T0)
    produce(plog, T0 + 500)
    produce(plog, T0 + 999)
    assert len(plog.segments) == 1
    produce(plog, T0 + 1500)
    assert [s.base_offset for s in plog.segments] == [0, 3]
    produce(plog, T0 + 2000)
    assert len(plog.segments) == 2
    produce(plog, T0 + 2600)
    assert [s.base_offset for s in plog.segments] == [0, 3, 5]
    plog.close()


def test_compacted_log_rolls_at_max_compaction_lag(logdir):
    """Kafka's LogConfig.maxSegmentMs: min(segment.ms, max.compaction.lag.ms) for a compacted
    log, so records in the (never cleaned) active segment do not outlive the lag."""
    cfg = {**config(segment_ms=1_000_000), "cleanup.policy": "compact", "max.compaction.lag.ms": 1000}
    plog = PartitionLog(logdir, cfg, T0)
    produce(plog, T0)
    produce(plog, T0 + 1500)
    assert [s.base_offset for s in plog.segments] == [0, 1]
    plog.close()
    # The same lag on a delete-only log does not roll it.
    other = logdir.parent / "other"
    other.mkdir()
    plog = PartitionLog(other, {**cfg, "cleanup.policy": "delete"}, T0)
    produce(plog, T0)
    produce(plog, T0 + 1500)
    assert len(plog.segments) == 1
    plog.close()


def test_roll_by_time_counts_from_the_first_batch_not_segment_creation(logdir):
    """Kafka measures segment age from the first batch's timestamp (rollingBasedTimestamp):
    a segment created long before its first append must not roll on the next append."""
    plog = PartitionLog(logdir, config(segment_ms=1000), T0)
    produce(plog, T0 + 10_000)  # first data, 10 s after the (empty) segment was created
    produce(plog, T0 + 10_001)  # 1 ms later: the segment's data is 1 ms old
    assert len(plog.segments) == 1
    plog.close()


def test_empty_active_segment_never_rolls(logdir):
    plog = PartitionLog(logdir, config(segment_ms=1), T0)
    produce(plog, T0 + 10**6)
    assert len(plog.segments) == 1
    plog.close()


def test_roll_by_time_after_reopen_uses_first_batch_timestamp(logdir):
    plog = PartitionLog(logdir, config(segment_ms=1000), T0)
    produce(plog, T0)
    plog.close()
    plog = PartitionLog(logdir, config(segment_ms=1000), T0 + 5000)
    produce(plog, T0 + 5000)
    assert [s.base_offset for s in plog.segments] == [0, 1]
    plog.close()


# ----------------------------------------------------------------------------- retention


def test_retention_by_time_deletes_oldest_segments(logdir):
    plog = PartitionLog(logdir, config(retention_ms=10 * HOUR), T0)
    for i in range(4):  # four segments, one batch each, an hour apart
        produce(plog, T0 + i * HOUR, count=2)
        if i < 3:
            plog.roll(T0 + i * HOUR)
    files_before = {p.name for p in logdir.iterdir()}
    assert [s.base_offset for s in plog.segments] == [0, 2, 4, 6]
    assert plog.delete_old_segments(T0 + 10 * HOUR) == 0  # exactly at the limit: kept
    assert plog.delete_old_segments(T0 + 11 * HOUR + 1) == 2  # segments with max ts T0, T0+1h
    assert [s.base_offset for s in plog.segments] == [4, 6]
    assert plog.log_start_offset == 4
    gone = files_before - {p.name for p in logdir.iterdir()}
    assert f"{0:020d}.log" in gone and f"{2:020d}.log" in gone
    assert not (logdir / f"{0:020d}.index").exists()
    assert plog.read(4, 10**6).data != b""
    with pytest.raises(OffsetOutOfRange):
        plog.read(3, 100)
    info, _ = produce(plog, T0 + 11 * HOUR + 2)
    assert info.base_offset == 8 and info.log_start_offset == 4
    plog.close()


def test_retention_by_time_never_deletes_active_segment_with_live_data(logdir):
    plog = PartitionLog(logdir, config(retention_ms=HOUR), T0)
    produce(plog, T0)
    plog.roll(T0)
    produce(plog, T0 + 10 * HOUR)
    assert plog.delete_old_segments(T0 + 10 * HOUR + 1) == 1
    assert len(plog.segments) == 1
    assert plog.log_start_offset == 1 and plog.log_end_offset == 2
    plog.close()


def test_expired_active_segment_is_rolled_then_deleted(logdir):
    plog = PartitionLog(logdir, config(retention_ms=HOUR), T0)
    produce(plog, T0, count=3)
    assert plog.delete_old_segments(T0 + HOUR) == 0
    assert plog.delete_old_segments(T0 + HOUR + 1) == 1
    assert len(plog.segments) == 1
    assert plog.active.size == 0 and plog.active.base_offset == 3
    assert plog.log_start_offset == plog.log_end_offset == 3
    assert not (logdir / f"{0:020d}.log").exists()
    assert plog.read(3, 100).data == b""
    with pytest.raises(OffsetOutOfRange):
        plog.read(0, 100)
    plog.close()
    again = PartitionLog(logdir, config(retention_ms=HOUR), T0 + HOUR + 2)
    assert again.log_start_offset == again.log_end_offset == 3
    info, _ = produce(again, T0 + HOUR + 2)
    assert info.base_offset == 3
    again.close()


def test_retention_with_every_segment_expired_empties_the_log_in_one_pass(logdir):
    """Kafka rolls the active segment when every segment breaches retention.ms and deletes
    them all in the same pass; expired data must not survive until the next check."""
    plog = PartitionLog(logdir, config(retention_ms=HOUR), T0)
    produce(plog, T0, count=2)
    plog.roll(T0)
    produce(plog, T0 + 1, count=2)
    plog.delete_old_segments(T0 + 2 * HOUR)
    assert plog.log_start_offset == plog.log_end_offset == 4
    assert sum(s.size for s in plog.segments) == 0
    plog.close()


def test_retention_by_bytes(logdir):
    size = batch_size(2)
    plog = PartitionLog(logdir, config(segment_bytes=2 * size, retention_bytes=3 * size), T0)
    for i in range(7):
        produce(plog, T0 + i, count=2)
    # segments of 2, 2, 2, 1 batches
    assert [s.base_offset for s in plog.segments] == [0, 4, 8, 12]
    assert plog.size_bytes == 7 * size
    deleted = plog.delete_old_segments(T0 + 100)
    # Delete whole oldest segments while what remains is still >= retention.bytes.
    assert deleted == 2
    assert [s.base_offset for s in plog.segments] == [8, 12]
    assert plog.size_bytes == 3 * size
    assert plog.log_start_offset == 8
    assert plog.delete_old_segments(T0 + 100) == 0
    plog.close()


def test_retention_by_bytes_never_deletes_active_segment(logdir):
    size = batch_size(2)
    plog = PartitionLog(logdir, config(segment_bytes=2 * size, retention_bytes=0), T0)
    for i in range(5):
        produce(plog, T0 + i, count=2)
    plog.delete_old_segments(T0 + 100)
    assert len(plog.segments) == 1
    assert plog.active.size == size
    assert plog.log_start_offset == 8 and plog.log_end_offset == 10
    plog.close()


def test_no_retention_when_disabled_or_compact(logdir, tmp_path):
    plog = PartitionLog(logdir, config(retention_ms=-1, retention_bytes=-1), T0)
    produce(plog, T0)
    plog.roll(T0)
    produce(plog, T0)
    assert plog.delete_old_segments(T0 + 10**12) == 0
    assert len(plog.segments) == 2
    plog.close()
    compact = PartitionLog(tmp_path / "c-0", config(cleanup_policy="compact", retention_ms=1, retention_bytes=0), T0)
    produce(compact, T0)
    compact.roll(T0)
    produce(compact, T0)
    assert compact.delete_old_segments(T0 + 10**9) == 0
    assert len(compact.segments) == 2
    compact.close()


def test_retention_applies_to_compact_delete_policy(logdir):
    plog = PartitionLog(logdir, config(cleanup_policy="compact,delete", retention_ms=HOUR), T0)
    produce(plog, T0)
    plog.roll(T0)
    produce(plog, T0 + 5 * HOUR)
    assert plog.delete_old_segments(T0 + 5 * HOUR) == 1
    assert plog.log_start_offset == 1
    plog.close()


# ----------------------------------------------------------------------------- reopen


def _snapshot(plog: PartitionLog):
    return (
        plog.log_start_offset,
        plog.log_end_offset,
        [(s.base_offset, s.next_offset, s.size, s.max_timestamp) for s in plog.segments],
        plog.read(plog.log_start_offset, 10**9).data if plog.log_end_offset > plog.log_start_offset else b"",
        [plog.read(o, 1).data for o in range(plog.log_start_offset, plog.log_end_offset)],
    )


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_gives_same_offsets_and_bytes(logdir, clean):
    size = batch_size(3)
    cfg = config(segment_bytes=4 * size, index_interval_bytes=150)
    plog = PartitionLog(logdir, cfg, T0)
    for i in range(11):
        produce(plog, T0 + i * 7, count=3)
    before = _snapshot(plog)
    if clean:
        plog.flush_all()
        plog.close()
    else:
        # No flush, no close: just drop the descriptors as a killed process would.
        for s in plog.segments:
            os.close(s.fd)
            s.fd = -1
    again = PartitionLog(logdir, cfg, T0 + 10**6, clean_shutdown=clean)
    assert _snapshot(again) == before
    assert all(r.truncated_bytes == 0 for r in again.recovery)
    info, _ = produce(again, T0 + 10**6)
    assert info.base_offset == before[1]
    again.close()


def test_unclean_reopen_truncates_torn_active_segment(logdir):
    cfg = config()
    plog = PartitionLog(logdir, cfg, T0)
    for i in range(3):
        produce(plog, T0 + i, count=2)
    good = plog.active.size
    plog.close()
    active = logdir / f"{0:020d}.log"
    torn = encode_batch(records(4, T0))[:100]
    with open(active, "ab") as f:
        f.write(torn)
    again = PartitionLog(logdir, cfg, T0, clean_shutdown=False)
    assert [r.truncated_bytes for r in again.recovery] == [100]
    assert again.log_end_offset == 6
    assert active.stat().st_size == good
    info, _ = produce(again, T0 + 5)
    assert info.base_offset == 6
    assert decode_batches(again.read(6, 1000).data, verify_crc=True)[0].header.base_offset == 6
    again.close()


def test_unclean_reopen_drops_active_batch_with_bad_crc(logdir):
    cfg = config()
    plog = PartitionLog(logdir, cfg, T0)
    produce(plog, T0, count=2)
    _, last = produce(plog, T0, count=3)
    plog.close()
    active = logdir / f"{0:020d}.log"
    data = bytearray(active.read_bytes())
    data[-1] ^= 0x01
    active.write_bytes(bytes(data))
    again = PartitionLog(logdir, cfg, T0, clean_shutdown=False)
    assert again.log_end_offset == 2
    assert again.recovery[-1].truncated_bytes == len(last)
    again.close()


def test_reopen_empty_rolled_active_segment(logdir):
    cfg = config()
    plog = PartitionLog(logdir, cfg, T0)
    produce(plog, T0, count=4)
    plog.roll(T0)
    plog.close()
    again = PartitionLog(logdir, cfg, T0)
    assert [s.base_offset for s in again.segments] == [0, 4]
    assert again.log_end_offset == 4
    info, _ = produce(again, T0)
    assert info.base_offset == 4
    again.close()


def test_reopen_after_retention_keeps_log_start(logdir):
    cfg = config(retention_ms=HOUR)
    plog = PartitionLog(logdir, cfg, T0)
    produce(plog, T0, count=2)
    plog.roll(T0)
    produce(plog, T0 + 5 * HOUR, count=2)
    plog.delete_old_segments(T0 + 5 * HOUR)
    plog.close()
    again = PartitionLog(logdir, cfg, T0 + 5 * HOUR)
    assert again.log_start_offset == 2 and again.log_end_offset == 4
    with pytest.raises(OffsetOutOfRange):
        again.read(1, 100)
    again.close()


# ----------------------------------------------------------------------------- LogAppendTime


def test_log_append_time_stamps_max_timestamp_and_keeps_crc_valid(logdir):
    plog = PartitionLog(logdir, config(message_timestamp_type="LogAppendTime"), T0)
    now = T0 + 12_345
    info, stored = produce(plog, now, count=3, ts=T0 - 10**6)
    assert info.log_append_time == now
    data = plog.read(0, 10**6).data
    assert data == stored
    (batch,) = decode_batches(data, verify_crc=True)
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert batch.header.max_timestamp == now
    assert [r.timestamp for r in batch.records] == [now] * 3
    assert plog.active.max_timestamp == now
    # Compressed batches too (the broker never touches the compressed payload).
    info, _ = produce(plog, now + 1, count=4, compression=LZ4, ts=5)
    (batch,) = decode_batches(plog.read(3, 10**6).data, verify_crc=True)
    assert [r.timestamp for r in batch.records] == [now + 1] * 4
    # find_by_timestamp sees append times, not the producer's CreateTime.
    seg, h = plog.find_by_timestamp(now + 1)
    assert h.base_offset == 3
    plog.close()


def test_create_time_keeps_producer_timestamps(logdir):
    plog = PartitionLog(logdir, config(), T0)
    _, stored = produce(plog, T0 + 999, count=2, ts=T0 - 5)
    (batch,) = decode_batches(plog.read(0, 10**6).data, verify_crc=True)
    assert batch.timestamp_type == 0
    assert [r.timestamp for r in batch.records] == [T0 - 5] * 2
    plog.close()


# ----------------------------------------------------------------------------- flush policy


def test_flush_messages_policy_calls_fsync(logdir, monkeypatch):
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real_fsync(fd))
    plog = PartitionLog(logdir, config(flush_messages=5), T0)
    produce(plog, T0, count=2)
    produce(plog, T0, count=2)
    assert calls == []
    produce(plog, T0, count=1)  # 5 unflushed messages
    assert calls == [plog.active.fd]
    produce(plog, T0, count=4)
    assert len(calls) == 1
    produce(plog, T0, count=7)
    assert len(calls) == 2
    plog.close()


def test_default_flush_policy_never_fsyncs(logdir, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    plog = PartitionLog(logdir, config(), T0)
    for i in range(50):
        produce(plog, T0 + i, count=3)
    plog.tick(T0 + 10**9)
    assert calls == []
    plog.close()


def test_flush_ms_policy_applied_by_tick(logdir, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    plog = PartitionLog(logdir, config(flush_ms=1000), T0)
    produce(plog, T0 + 100)
    plog.tick(T0 + 999)
    assert calls == []
    plog.tick(T0 + 1000)
    assert len(calls) == 1
    plog.tick(T0 + 5000)  # nothing unflushed
    assert len(calls) == 1
    plog.close()


# ----------------------------------------------------------------------------- timestamps


def test_find_by_timestamp_across_segments(logdir):
    plog = PartitionLog(logdir, config(), T0)
    # segment 0: ts 100, 300; segment 1: ts 200, 500; segment 2: ts 400
    produce(plog, T0, ts=100)
    produce(plog, T0, ts=300)
    plog.roll(T0)
    produce(plog, T0, ts=200)
    produce(plog, T0, ts=500)
    plog.roll(T0)
    produce(plog, T0, ts=400)
    cases = {0: 0, 100: 0, 101: 1, 300: 1, 301: 3, 450: 3, 500: 3}
    for ts, off in cases.items():
        seg, h = plog.find_by_timestamp(ts)
        assert h.base_offset == off, ts
        assert seg.base_offset <= off < seg.next_offset
    assert plog.find_by_timestamp(501) is None
    plog.close()


def test_max_timestamp_batch(logdir):
    plog = PartitionLog(logdir, config(), T0)
    assert plog.max_timestamp_batch() is None
    produce(plog, T0, ts=100)
    produce(plog, T0, ts=900)
    plog.roll(T0)
    produce(plog, T0, ts=500)
    seg, h = plog.max_timestamp_batch()
    assert (seg.base_offset, h.base_offset, h.max_timestamp) == (0, 1, 900)
    produce(plog, T0, ts=901)
    seg, h = plog.max_timestamp_batch()
    assert (seg.base_offset, h.base_offset) == (2, 3)
    plog.close()
    again = PartitionLog(logdir, config(), T0)
    seg, h = again.max_timestamp_batch()
    assert (seg.base_offset, h.base_offset, h.max_timestamp) == (2, 3, 901)
    again.close()


def test_listeners_called_on_append(logdir):
    plog = PartitionLog(logdir, config(), T0)
    seen = []
    plog.listeners.append(lambda p: seen.append(p.log_end_offset))
    produce(plog, T0, count=2)
    produce(plog, T0, count=3)
    assert seen == [2, 5]
    plog.close()


def test_delete_removes_directory(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0)
    plog.delete()
    assert not logdir.exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(1, 8), min_size=1, max_size=15),
    tail=st.binary(max_size=200),
    segment_bytes=st.integers(150, 3000),
)
def test_unclean_reopen_with_random_tail_property(tmp_path_factory, counts, tail, segment_bytes):
    d = tmp_path_factory.mktemp("u") / "t-0"
    cfg = config(segment_bytes=segment_bytes, index_interval_bytes=100)
    plog = PartitionLog(d, cfg, T0)
    stored = []
    for i, n in enumerate(counts):
        info, raw = produce(plog, T0 + i, count=n)
        stored.append((info.base_offset, raw))
    active = plog.active.path
    plog.close()
    with open(active, "ab") as f:
        f.write(tail)
    again = PartitionLog(d, cfg, T0, clean_shutdown=False)
    try:
        assert again.log_end_offset == sum(counts)
        assert sum(r.truncated_bytes for r in again.recovery) == len(tail)
        for base, raw in stored:
            assert again.read(base, 1).data == raw
        info, _ = produce(again, T0 + 100)
        assert info.base_offset == sum(counts)
    finally:
        again.close()


# ----------------------------------------------------------------------------- 32-bit index range


def test_the_log_rolls_before_offsets_leave_the_segments_index_range(logdir, monkeypatch):
    monkeypatch.setattr(segment_mod, "MAX_RELATIVE_OFFSET", 10)
    plog = PartitionLog(logdir, config(), T0)
    for _ in range(5):
        produce(plog, T0, count=4)
    assert [s.base_offset for s in plog.segments] == [0, 8, 16]
    assert all(s.next_offset - 1 - s.base_offset <= 10 for s in plog.segments)
    plog.close()
    again = PartitionLog(logdir, config(), T0)  # and every segment loads again
    assert again.log_end_offset == 20
    again.close()


def test_the_log_rolls_before_positions_leave_the_index_range(logdir, monkeypatch):
    monkeypatch.setattr(segment_mod, "MAX_POSITION", 2 * batch_size(3) + 10)
    plog = PartitionLog(logdir, config(), T0)
    for _ in range(4):
        produce(plog, T0, count=3)
    assert len(plog.segments) == 2 and all(s.size <= segment_mod.MAX_POSITION for s in plog.segments)
    plog.close()


# ----------------------------------------------------------------------------- failed writes


def _fail_writes(monkeypatch, code=errno.ENOSPC, fsync=False):
    state = {"on": True}
    real_write, real_fsync = os.write, os.fsync

    def write(fd, data):
        if state["on"] and not fsync:
            real_write(fd, bytes(memoryview(data)[: len(data) // 2]))
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    def do_fsync(fd):
        if state["on"] and fsync:
            raise OSError(code, os.strerror(code))
        return real_fsync(fd)

    monkeypatch.setattr(segment_mod.os, "write", write)
    monkeypatch.setattr(segment_mod.os, "fsync", do_fsync)
    return state


@pytest.mark.parametrize("fsync", [False, True], ids=["write", "fsync"])
def test_a_refused_append_changes_nothing_and_the_next_lands_right(logdir, monkeypatch, fsync):
    cfg = config(flush_messages=1) if fsync else config()
    plog = PartitionLog(logdir, cfg, T0)
    produce(plog, T0, count=3, producer_id=7, producer_epoch=0, base_sequence=0)
    before = (plog.log_end_offset, plog.size_bytes, [s.size for s in plog.segments])
    state = _fail_writes(monkeypatch, fsync=fsync)
    with pytest.raises(StorageError):
        produce(plog, T0, count=2, producer_id=7, producer_epoch=0, base_sequence=3)
    assert (plog.log_end_offset, plog.size_bytes, [s.size for s in plog.segments]) == before
    state["on"] = False
    # The producer retries the same sequence: accepted as new, not a duplicate.
    info, _ = produce(plog, T0, count=2, producer_id=7, producer_epoch=0, base_sequence=3)
    assert info.base_offset == 3
    assert [b.header.base_offset for b in all_batches(plog)] == [0, 3]
    plog.close()
    again = PartitionLog(logdir, cfg, T0, recovery_point=0)
    assert again.log_end_offset == 5 and all(r.truncated_bytes == 0 for r in again.recovery)
    again.close()


# ----------------------------------------------------------------------------- recovery point


def test_rolled_segments_are_flushed_later_and_advance_the_recovery_point(logdir):
    plog = PartitionLog(logdir, config(segment_bytes=batch_size(2) * 2), T0)
    for _ in range(5):
        produce(plog, T0, count=2)
    assert plog.recovery_point == 0
    assert [s.base_offset for s in plog.rolled_unflushed] == [0, 4]
    plog.mark_flushed(plog.rolled_unflushed[1])  # out of order: the older one is still unflushed
    assert plog.recovery_point == 0
    plog.mark_flushed(plog.rolled_unflushed[0])
    assert plog.recovery_point == 8 and plog.rolled_unflushed == []
    plog.flush(T0)
    assert plog.recovery_point == 10
    plog.close()


def test_an_unclean_start_recovers_from_the_recovery_point_only(logdir):
    plog = PartitionLog(logdir, config(segment_bytes=batch_size(2) * 2), T0)
    for _ in range(6):
        produce(plog, T0, count=2)
    bases = [s.base_offset for s in plog.segments]
    assert bases == [0, 4, 8]
    plog.close_files()
    # Flip a record byte in the first (flushed) segment and in the second (unflushed).
    for base in (0, 4):
        path = logdir / f"{base:020d}.log"
        data = bytearray(path.read_bytes())
        data[-3] ^= 0x01
        path.write_bytes(bytes(data))
    again = PartitionLog(logdir, config(segment_bytes=batch_size(2) * 2), T0, recovery_point=4)
    # Segment 0 is trusted (its corruption is found by reads); segment 4 is recovered:
    # truncated at its bad last batch, and segment 8 after it removed.
    assert [s.base_offset for s in again.segments] == [0, 4]
    (result,) = [r for r in again.recovery if r.truncated_bytes]
    assert result.first_dropped_offset == 6 and result.dropped_offsets == 6 and result.whole_batches_dropped
    assert again.log_end_offset == 6
    with pytest.raises(CorruptBatch):
        again.read(2, 1 << 20)
    assert len(decode_batches(again.read(0, 1 << 20).data, verify_crc=True)) == 1
    again.close()


def test_a_flushed_segment_cut_short_takes_the_partition_offline(logdir):
    plog = PartitionLog(logdir, config(segment_bytes=batch_size(2) * 2), T0)
    for _ in range(4):
        produce(plog, T0, count=2)
    plog.close()
    path = logdir / f"{0:020d}.log"
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(SegmentDamaged) as err:
        PartitionLog(logdir, config(segment_bytes=batch_size(2) * 2), T0)
    assert err.value.offset == 2


def test_reads_stop_before_a_corrupt_batch(logdir):
    plog = PartitionLog(logdir, config(), T0)
    stored = [produce(plog, T0, count=2)[1] for _ in range(3)]
    plog.close_files()
    path = logdir / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    data[len(stored[0]) + len(stored[1]) - 2] ^= 0x01  # inside the second batch
    path.write_bytes(bytes(data))
    plog = PartitionLog(logdir, config(), T0)
    assert plog.read(0, 1 << 20).data == stored[0]  # the good prefix only
    with pytest.raises(CorruptBatch) as err:
        plog.read(2, 1 << 20)
    assert err.value.offset == 2
    assert plog.read(4, 1 << 20).data == stored[2]
    plog.close()


# ----------------------------------------------------------------------------- log start offset (DeleteRecords)


def _batches_of_two(plog: PartitionLog, n: int) -> None:
    """`n` batches of two records, one segment each (segment.bytes holds one batch)."""
    for i in range(n):
        produce(plog, T0 + i, count=2)


def test_moving_the_log_start_hides_what_is_below_it(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, count=5)
    seen = []
    plog.listeners.append(lambda p: seen.append(p.log_start_offset))
    assert plog.increment_log_start_offset(3) is True
    assert plog.log_start_offset == 3 and seen == [3]
    with pytest.raises(OffsetOutOfRange):
        plog.read(2, 1000)
    res = plog.read(3, 1000)
    assert res.log_start_offset == 3
    # The batch holding offset 3 starts below it and is served whole, as Kafka does.
    assert [r.offset for r in decode_batches(res.data)[0].records] == [0, 1, 2, 3, 4]
    # Kafka's maybeIncrementLogStartOffset: never backwards; up to the high watermark, not past it.
    assert plog.increment_log_start_offset(2) is False and plog.log_start_offset == 3
    with pytest.raises(OffsetOutOfRange):
        plog.increment_log_start_offset(6)
    assert plog.increment_log_start_offset(5) is True
    assert plog.read(5, 1000).data == b"" and plog.log_start_offset == plog.high_watermark == 5
    info, _ = produce(plog, T0, count=1)
    assert (info.base_offset, info.log_start_offset) == (5, 5)
    plog.close()


def test_segments_wholly_below_the_new_start_are_deleted_at_once(logdir):
    plog = PartitionLog(logdir, config(segment_bytes=batch_size(2)), T0)
    _batches_of_two(plog, 4)  # segments at 0, 2, 4, 6 (the last active)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4, 6]
    plog.increment_log_start_offset(5)
    # Kafka's log-start-offset breach: a segment goes when the next starts at or below the start.
    assert [s.base_offset for s in plog.segments] == [4, 6]
    assert sorted(p.name for p in logdir.glob("*.log")) == ["00000000000000000004.log", "00000000000000000006.log"]
    assert plog.log_start_offset == 5
    plog.increment_log_start_offset(8)  # everything: the active segment stays
    assert [s.base_offset for s in plog.segments] == [6]
    assert plog.log_start_offset == plog.log_end_offset == 8
    plog.close()


def test_retention_deletes_breached_segments_whatever_the_policy(logdir):
    plog = PartitionLog(logdir, config(segment_bytes=batch_size(2), cleanup_policy="compact"), T0)
    _batches_of_two(plog, 3)
    plog._log_start = 4  # as if moved while a segment could not be deleted
    assert plog.delete_old_segments(T0) == 2
    assert [s.base_offset for s in plog.segments] == [4]
    plog.close()


def test_retention_moves_the_start_past_a_smaller_moved_one(logdir):
    size = batch_size(2)
    plog = PartitionLog(logdir, config(segment_bytes=size, retention_bytes=size), T0)
    _batches_of_two(plog, 4)
    plog.increment_log_start_offset(1)
    assert plog.delete_old_segments(T0 + 10) == 3
    assert plog.log_start_offset == 6  # the first segment's base now wins
    plog.close()


def test_a_checkpointed_start_is_honoured_when_the_log_reopens(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, count=5)
    plog.increment_log_start_offset(3)
    plog.close()
    again = PartitionLog(logdir, config(), T0, log_start_offset=3)
    assert again.log_start_offset == 3 and again.log_end_offset == 5
    with pytest.raises(OffsetOutOfRange):
        again.read(2, 1000)
    again.close()
    # Without it the segments say where the log starts (Kafka: max(checkpoint, first base)).
    assert PartitionLog(logdir, config(), T0).log_start_offset == 0


def test_a_log_ending_below_its_checkpointed_start_restarts_empty_there(logdir, tmp_path):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, count=3)
    plog.close()
    # Kafka's LogLoader.deleteSegmentsIfLogStartGreaterThanLogEnd.
    again = PartitionLog(logdir, config(), T0, log_start_offset=10)
    assert [s.base_offset for s in again.segments] == [10]
    assert [p.name for p in logdir.glob("*.log")] == ["00000000000000000010.log"]
    assert again.log_start_offset == again.log_end_offset == 10
    info, _ = produce(again, T0, count=1)
    assert info.base_offset == 10
    again.close()
    fresh = PartitionLog(tmp_path / "fresh-0", config(), T0, log_start_offset=7)
    assert fresh.segments[0].base_offset == fresh.log_end_offset == 7
    fresh.close()


def test_timestamp_lookups_skip_records_below_the_start(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, T0, ts=500)  # offset 0
    produce(plog, T0, ts=100)  # offset 1
    produce(plog, T0, ts=600)  # offset 2
    plog.increment_log_start_offset(1)
    assert [h.base_offset for _, h in plog.timestamp_candidates(400)] == [2]
    assert [h.base_offset for _, h in plog.timestamp_candidates(50)] == [1, 2]
    assert plog.find_by_timestamp(601) is None
    plog.close()
