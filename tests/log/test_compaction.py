"""Tests for odradek.log.compaction: keep the latest record per key, tombstones, lag,
byte-for-byte copies, re-encoding with the original codec, reads across gaps, reopen, and
transactions (aborted records dropped, nothing cleaned at or past the last stable offset)."""

from __future__ import annotations

import pytest

from odradek.config import BrokerConfig
from odradek.log.compaction import cleanable, compact_log
from odradek.log.partition import CLEANED_SUFFIX, PartitionLog
from odradek.records.batch import iter_headers, validate_batches
from odradek.records.codec import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Record,
    decode_batches,
    encode_batch,
)
from odradek.records.control import Marker

T0 = 1_700_000_000_000
DAY = 24 * 3_600_000
LATER = T0 + 10 * DAY  # far past every default horizon


def config(**overrides) -> dict:
    c = BrokerConfig().topic_defaults()
    c["cleanup.policy"] = "compact"
    for k, v in overrides.items():
        c[k.replace("_", ".")] = v
    return c


def produce(plog: PartitionLog, kvs: list[tuple[bytes | None, bytes | None]], now: int = T0,
            ts: int | None = None, compression: int = NONE, **kw) -> tuple[int, bytes]:
    """Append one batch of (key, value) records; return its base offset and stored bytes."""
    recs = [Record(i, now if ts is None else ts, k, v) for i, (k, v) in enumerate(kvs)]
    buf = bytearray(encode_batch(recs, compression=compression, **kw))
    info = plog.append(buf, validate_batches(buf), now)
    return info.base_offset, bytes(buf)


def records_of(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for seg in plog.segments:
        for b in decode_batches(seg.pread(0, seg.size), verify_crc=True):
            out.extend((r.offset, r.key, r.value) for r in b.records)
    return out


def batches_of(plog: PartitionLog) -> list:
    out = []
    for seg in plog.segments:
        out.extend(decode_batches(seg.pread(0, seg.size), verify_crc=True))
    return out


def segment_bytes(plog: PartitionLog) -> list[bytes]:
    return [s.pread(0, s.size) for s in plog.segments]


@pytest.fixture
def logdir(tmp_path):
    return tmp_path / "compacted-0"


# ----------------------------------------------------------------------------- basics


def test_latest_value_per_key_kept_offsets_preserved(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")])  # 0..2
    produce(plog, [(b"a", b"a2"), (b"d", b"d1")])  # 3..4
    plog.roll(T0)
    produce(plog, [(b"b", b"b2"), (b"a", b"a3")])  # 5..6
    plog.roll(T0)
    produce(plog, [(b"e", b"e1")])  # 7, active
    removed = compact_log(plog, LATER)
    assert removed == 3  # a1, b1, a2
    assert records_of(plog) == [
        (2, b"c", b"c1"),
        (4, b"d", b"d1"),
        (5, b"b", b"b2"),
        (6, b"a", b"a3"),
        (7, b"e", b"e1"),
    ]
    # Offsets never shift: the log end offset and segment bases are unchanged.
    assert plog.log_end_offset == 8
    assert [s.base_offset for s in plog.segments] == [0, 5, 7]
    info_base, _ = produce(plog, [(b"f", b"f1")], now=LATER)
    assert info_base == 8
    plog.close()


def test_later_record_in_active_segment_supersedes_closed_ones(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"old"), (b"x", b"x")])
    plog.roll(T0)
    produce(plog, [(b"k", b"new")])  # in the active segment
    assert compact_log(plog, LATER) == 1
    assert records_of(plog) == [(1, b"x", b"x"), (2, b"k", b"new")]
    plog.close()


def test_active_segment_untouched(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"z", b"0")])
    plog.roll(T0)
    produce(plog, [(b"k", b"1"), (b"k", b"2")])
    produce(plog, [(b"k", b"3")])
    active_before = plog.active.pread(0, plog.active.size)
    assert compact_log(plog, LATER) == 0
    assert plog.active.pread(0, plog.active.size) == active_before
    assert [o for o, *_ in records_of(plog)] == [0, 1, 2, 3]
    plog.close()


def test_single_segment_log_is_left_alone(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"1")])
    produce(plog, [(b"k", b"2")])
    assert compact_log(plog, LATER) == 0
    assert len(records_of(plog)) == 2
    plog.close()


def test_compaction_is_idempotent(logdir):
    plog = PartitionLog(logdir, config(), T0)
    for i in range(5):
        produce(plog, [(b"k%d" % (i % 2), b"v%d" % i)])
        plog.roll(T0)
    produce(plog, [(b"other", b"x")])
    assert compact_log(plog, LATER) == 3
    after = segment_bytes(plog)
    assert compact_log(plog, LATER) == 0
    assert segment_bytes(plog) == after
    plog.close()


# ----------------------------------------------------------------------------- tombstones


def test_tombstones_kept_until_delete_retention_passes(logdir):
    drm = 60_000
    plog = PartitionLog(logdir, config(delete_retention_ms=drm, min_cleanable_dirty_ratio=0.0), T0)
    produce(plog, [(b"k", b"v"), (b"j", b"w")], now=T0)
    produce(plog, [(b"k", None)], now=T0 + 10)  # tombstone, segment max ts = T0 + 10
    plog.roll(T0 + 10)
    produce(plog, [(b"z", b"z")], now=T0 + 20)
    # Inside the horizon: the old value goes, the tombstone stays.
    assert compact_log(plog, T0 + 10 + drm) == 1
    assert records_of(plog) == [(1, b"j", b"w"), (2, b"k", None), (3, b"z", b"z")]
    # Past the horizon, but nothing dirty: like Kafka's cleaner, no pass for the tombstone alone.
    assert compact_log(plog, T0 + 10 + drm + 1) == 0
    # The next pass (new data, closed) takes it.
    plog.roll(T0 + 20)
    produce(plog, [(b"y", b"y")], now=T0 + 30)
    assert compact_log(plog, T0 + 10 + drm + 1) == 1
    assert records_of(plog) == [(1, b"j", b"w"), (3, b"z", b"z"), (4, b"y", b"y")]
    plog.close()


def test_tombstone_in_active_segment_is_not_removed(logdir):
    plog = PartitionLog(logdir, config(delete_retention_ms=0), T0)
    produce(plog, [(b"k", b"v")])
    plog.roll(T0)
    produce(plog, [(b"k", None)])
    assert compact_log(plog, LATER) == 1
    assert records_of(plog) == [(1, b"k", None)]
    plog.close()


def test_superseded_tombstone_removed_regardless_of_horizon(logdir):
    plog = PartitionLog(logdir, config(delete_retention_ms=10 * DAY), T0)
    produce(plog, [(b"k", None)])
    produce(plog, [(b"k", b"back")])
    plog.roll(T0)
    produce(plog, [(b"x", b"x")])
    assert compact_log(plog, T0 + 1) == 1
    assert records_of(plog) == [(1, b"k", b"back"), (2, b"x", b"x")]
    plog.close()


# ----------------------------------------------------------------------------- lag


def test_min_compaction_lag_respected(logdir):
    lag = 5_000
    plog = PartitionLog(logdir, config(min_compaction_lag_ms=lag), T0)
    produce(plog, [(b"k", b"1")], now=T0)
    plog.roll(T0)
    produce(plog, [(b"k", b"2")], now=T0 + 4_000)  # segment 1, max ts T0 + 4000
    plog.roll(T0 + 4_000)
    produce(plog, [(b"k", b"3")], now=T0 + 4_500)  # active
    before = segment_bytes(plog)
    # At T0 + 4999 no segment has aged past the lag.
    assert compact_log(plog, T0 + lag - 1) == 0
    assert segment_bytes(plog) == before
    # At T0 + 5000 segment 0 is old enough, segment 1 is not.
    assert compact_log(plog, T0 + lag) == 1
    assert [o for o, *_ in records_of(plog)] == [1, 2]
    # Later both are.
    assert compact_log(plog, T0 + 4_000 + lag) == 1
    assert records_of(plog) == [(2, b"k", b"3")]
    plog.close()


def test_lowering_min_compaction_lag_takes_effect_on_next_pass(logdir):
    plog = PartitionLog(logdir, config(min_compaction_lag_ms=DAY), T0)
    produce(plog, [(b"k", b"1")])
    plog.roll(T0)
    produce(plog, [(b"k", b"2")])
    assert compact_log(plog, T0 + 1000) == 0  # too young under a one-day lag
    plog.reconfigure(config(min_compaction_lag_ms=0))
    assert compact_log(plog, T0 + 1001) == 1
    assert records_of(plog) == [(1, b"k", b"2")]
    plog.close()


def test_lowering_delete_retention_takes_effect_on_next_pass(logdir):
    plog = PartitionLog(logdir, config(delete_retention_ms=DAY, min_cleanable_dirty_ratio=0.0), T0)
    produce(plog, [(b"k", None)])
    plog.roll(T0)
    produce(plog, [(b"x", b"x")])
    assert compact_log(plog, T0 + 1000) == 0  # tombstone inside its one-day horizon
    plog.reconfigure(config(delete_retention_ms=0, min_cleanable_dirty_ratio=0.0))
    plog.roll(T0)  # the next pass comes with the next dirty segment
    produce(plog, [(b"y", b"y")])
    assert compact_log(plog, T0 + 1001) == 1
    assert records_of(plog) == [(1, b"x", b"x"), (2, b"y", b"y")]
    plog.close()


def test_new_data_is_compacted_once_its_segment_is_closed(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"1")])
    plog.roll(T0)
    produce(plog, [(b"j", b"1")])
    assert compact_log(plog, T0 + 10) == 0  # the first pass cleans segment 0: nothing to drop
    produce(plog, [(b"k", b"2")])  # supersedes offset 0, but in the active segment
    assert compact_log(plog, T0 + 11) == 0  # the active segment is never dirty-cleanable
    plog.roll(T0 + 11)
    produce(plog, [(b"x", b"1")])
    assert compact_log(plog, T0 + 12) == 1
    assert [o for o, *_ in records_of(plog)] == [1, 2, 3]
    plog.close()


# ----------------------------------------------------------------------------- when a pass runs


def _cleaned_once_then_a_little_dirty(plog: PartitionLog) -> None:
    """Ten distinct keys cleaned once, then one small closed segment superseding one of them:
    the dirty part is far below half the log."""
    for i in range(10):
        produce(plog, [(b"k%d" % i, b"v" * 50)], ts=T0)
    plog.roll(T0)
    produce(plog, [(b"tail", b"t")], ts=T0 + 5)
    assert compact_log(plog, T0 + 1) == 0  # the first pass: nothing superseded
    produce(plog, [(b"k0", b"new")], ts=T0 + 5)
    plog.roll(T0 + 5)
    produce(plog, [(b"active", b"a")], ts=T0 + 5)


def test_min_cleanable_dirty_ratio_decides_when_a_pass_runs(logdir):
    """Kafka's LogCleanerManager cleans a log only when dirty bytes / (clean + dirty) is
    above min.cleanable.dirty.ratio."""
    plog = PartitionLog(logdir, config(), T0)  # the default ratio, 0.5
    _cleaned_once_then_a_little_dirty(plog)
    todo = cleanable(plog, T0 + 10)
    assert 0 < todo.ratio < 0.5
    assert compact_log(plog, T0 + 10) == 0
    assert (0, b"k0", b"v" * 50) in records_of(plog)
    plog.reconfigure(config(min_cleanable_dirty_ratio=0.01))
    assert compact_log(plog, T0 + 10) == 1
    assert (0, b"k0", b"v" * 50) not in records_of(plog)
    assert compact_log(plog, T0 + 10) == 0  # cleaned: nothing dirty left
    plog.close()


def test_max_compaction_lag_forces_a_pass_below_the_ratio(logdir):
    """KIP-354: a dirty segment whose first batch is older than max.compaction.lag.ms is
    cleaned whatever the dirty ratio."""
    plog = PartitionLog(logdir, config(), T0)
    _cleaned_once_then_a_little_dirty(plog)
    plog.reconfigure(config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=1000))
    assert compact_log(plog, T0 + 5 + 1000) == 0  # the dirty segment's first batch (T0 + 5) is not yet due
    assert cleanable(plog, T0 + 5 + 1001).compaction_delay_ms == 1
    assert compact_log(plog, T0 + 5 + 1001) == 1
    assert (0, b"k0", b"v" * 50) not in records_of(plog)
    plog.close()


def test_max_compaction_lag_needs_something_cleanable(logdir):
    """A segment past max.compaction.lag.ms but younger than min.compaction.lag.ms is not
    cleanable: nothing runs (LogCleanerManager: needCompactionNow && cleanableBytes > 0)."""
    plog = PartitionLog(logdir, config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=1000,
                                       min_compaction_lag_ms=1000), T0)
    # Within max.compaction.lag.ms of each other, or the log rolls between them
    # (LogConfig.maxSegmentMs).
    produce(plog, [(b"k", b"1")], ts=T0 + 4100)
    produce(plog, [(b"k", b"2")], ts=T0 + 5000)
    plog.roll(T0 + 5000)
    produce(plog, [(b"x", b"x")], ts=T0 + 5000)
    todo = cleanable(plog, T0 + 5500)
    assert todo.compaction_delay_ms > 0 and todo.cleanable_bytes == 0
    assert compact_log(plog, T0 + 5500) == 0
    assert compact_log(plog, T0 + 6001) == 1  # the segment has aged past the minimum lag
    plog.close()


def test_a_reopened_log_is_dirty_from_its_start(logdir):
    """No cleaner checkpoint: after a restart the whole log is dirty once (as Kafka with none)."""
    plog = PartitionLog(logdir, config(), T0)
    _cleaned_once_then_a_little_dirty(plog)
    assert compact_log(plog, T0 + 10) == 0
    plog.close()
    plog = PartitionLog(logdir, config(), T0)
    assert cleanable(plog, T0 + 10).ratio == 1.0
    assert compact_log(plog, T0 + 10) == 1
    plog.close()


# ----------------------------------------------------------------------------- batches


def test_batches_with_all_records_retained_are_copied_byte_for_byte(logdir):
    plog = PartitionLog(logdir, config(), T0)
    _, keep1 = produce(plog, [(b"a", b"1"), (b"b", b"2")], producer_id=7, producer_epoch=0, base_sequence=0)
    _, mixed = produce(plog, [(b"c", b"3"), (b"d", b"4")])
    _, keep2 = produce(plog, [(b"e", b"5")], compression=GZIP)
    plog.roll(T0)
    produce(plog, [(b"c", b"33")])
    assert compact_log(plog, LATER) == 1
    seg0 = plog.segments[0].pread(0, plog.segments[0].size)
    assert seg0.startswith(keep1)
    assert seg0.endswith(keep2)
    assert len(seg0) < len(keep1) + len(mixed) + len(keep2)
    plog.close()


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_partially_retained_batch_re_encoded_with_same_codec(logdir, codec):
    plog = PartitionLog(logdir, config(), T0)
    kvs = [(b"k%d" % i, b"value-%d" % i * 20) for i in range(10)]
    produce(plog, [(b"head", b"h")])  # offset 0, so the batch below has base offset 1
    base, original = produce(
        plog, kvs, compression=codec, ts=T0 - 100, producer_id=42, producer_epoch=3, base_sequence=0,
    )
    plog.roll(T0)
    # Supersede every even key, including the batch's first and last... the last is k9 (odd):
    produce(plog, [(b"k%d" % i, b"new") for i in range(0, 10, 2)] + [(b"k9", b"new")])
    assert compact_log(plog, LATER) == 6
    (h_orig,) = list(iter_headers(original))
    data = plog.segments[0].pread(0, plog.segments[0].size)
    batches = decode_batches(data, verify_crc=True)
    assert len(batches) == 2
    b = batches[1]
    h = b.header
    assert h.compression == codec
    assert h.base_offset == base == 1
    assert h.last_offset_delta == h_orig.last_offset_delta == 9  # offsets never shift
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 0)
    assert h.records_count == 4
    assert [(r.offset, r.key, r.value) for r in b.records] == [
        (base + i, b"k%d" % i, b"value-%d" % i * 20) for i in (1, 3, 5, 7)
    ]
    assert all(r.timestamp == T0 - 100 for r in b.records)
    # The segment still reads back through the partition API.
    res = plog.read(base + 2, 10**6)
    assert decode_batches(res.data, verify_crc=True)[0].header.base_offset == base
    plog.close()


def test_batch_losing_every_record_is_dropped(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"a", b"1"), (b"b", b"1")])  # 0..1
    produce(plog, [(b"c", b"1")])  # 2
    plog.roll(T0)
    produce(plog, [(b"a", b"2"), (b"b", b"2")])  # 3..4
    assert compact_log(plog, LATER) == 2
    assert [b.header.base_offset for b in batches_of(plog)] == [2, 3]
    plog.close()


def test_keyless_records_in_compacted_log_are_removed(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(None, b"no key"), (b"k", b"v")])
    plog.roll(T0)
    produce(plog, [(b"x", b"y")])
    assert compact_log(plog, LATER) == 1
    assert records_of(plog) == [(1, b"k", b"v"), (2, b"x", b"y")]
    plog.close()


def test_control_batches_are_kept(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"1")])
    control = encode_batch([Record(0, T0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                           is_transactional=True, producer_id=9, producer_epoch=0)
    buf = bytearray(control)
    plog.append(buf, validate_batches(buf), T0)
    stored_control = bytes(buf)
    plog.roll(T0)
    produce(plog, [(b"k", b"2")])
    assert compact_log(plog, LATER) == 1
    seg0 = plog.segments[0].pread(0, plog.segments[0].size)
    assert seg0 == stored_control
    plog.close()


# ----------------------------------------------------------------------------- reads and reopen


def test_read_across_compaction_gaps(logdir):
    plog = PartitionLog(logdir, config(index_interval_bytes=0), T0)
    produce(plog, [(b"a", b"1"), (b"b", b"1")])  # 0..1 -> dropped entirely
    produce(plog, [(b"c", b"1")])  # 2 -> kept
    produce(plog, [(b"d", b"1"), (b"a", b"x")])  # 3..4 -> 4 superseded, 3 kept (partial batch)
    produce(plog, [(b"e", b"1")])  # 5 -> dropped, last batch of the segment
    plog.roll(T0)
    produce(plog, [(b"a", b"2"), (b"b", b"2"), (b"e", b"2")])  # 6..8
    produce(plog, [(b"f", b"1")])  # 9
    plog.roll(T0)
    produce(plog, [(b"g", b"1")])  # 10, active
    assert compact_log(plog, LATER) == 4  # offsets 0, 1, 4, 5
    expected_first_batch = {0: 2, 1: 2, 2: 2, 3: 3, 4: 3, 5: 6, 6: 6, 7: 6, 8: 6, 9: 9, 10: 10}
    for off, batch_base in expected_first_batch.items():
        res = plog.read(off, 10**6)
        first = decode_batches(res.data, verify_crc=True)[0]
        assert first.header.base_offset == batch_base, off
        assert first.header.last_offset >= off  # the batch covers the offset asked for
    assert plog.read(11, 100).data == b""
    plog.close()


def test_read_in_a_segment_left_empty_by_compaction(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"a", b"1")])
    produce(plog, [(b"b", b"1")])
    plog.roll(T0)
    produce(plog, [(b"a", b"2"), (b"b", b"2")])
    plog.roll(T0)
    produce(plog, [(b"c", b"1")])
    assert compact_log(plog, LATER) == 2
    assert plog.segments[0].size == 0
    assert plog.log_start_offset == 0
    res = plog.read(0, 10**6)
    assert decode_batches(res.data)[0].header.base_offset == 2
    plog.close()


@pytest.mark.parametrize("clean", [True, False])
def test_log_reopens_correctly_after_compaction(logdir, clean):
    cfg = config(index_interval_bytes=50)
    plog = PartitionLog(logdir, cfg, T0)
    for i in range(30):
        produce(plog, [(b"k%d" % (i % 7), b"v%d" % i), (b"u%d" % i, b"x")])
        if i % 6 == 5:
            plog.roll(T0)
    assert compact_log(plog, LATER) > 0
    before_records = records_of(plog)
    before_reads = {o: plog.read(o, 10**6).data for o in range(plog.log_end_offset)}
    before_segments = [(s.base_offset, s.next_offset, s.size) for s in plog.segments]
    plog.close()
    again = PartitionLog(logdir, cfg, LATER, clean_shutdown=clean)
    assert [(s.base_offset, s.next_offset, s.size) for s in again.segments] == before_segments
    assert records_of(again) == before_records
    assert {o: again.read(o, 10**6).data for o in range(again.log_end_offset)} == before_reads
    assert all(r.truncated_bytes == 0 for r in again.recovery)
    assert not list(logdir.glob(f"*{CLEANED_SUFFIX}"))
    again.close()


def test_stray_cleaned_file_removed_at_open(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"v")])
    plog.close()
    stray = logdir / f"{0:020d}.log{CLEANED_SUFFIX}"
    stray.write_bytes(b"half-written compaction output")
    again = PartitionLog(logdir, config(), T0)
    assert not stray.exists()
    assert records_of(again) == [(0, b"k", b"v")]
    again.close()


def test_compaction_rebuilds_indexes_on_disk(logdir):
    plog = PartitionLog(logdir, config(index_interval_bytes=0), T0)
    for i in range(10):
        produce(plog, [(b"k%d" % (i % 3), b"v%d" % i)])
    plog.roll(T0)
    produce(plog, [(b"x", b"x")])
    compact_log(plog, LATER)
    seg = plog.segments[0]
    hs = list(iter_headers(seg.pread(0, seg.size)))
    assert [h.base_offset for h in hs] == [7, 8, 9]
    assert list(seg.index.keys) == [7, 8, 9]
    assert list(seg.index.values) == [h.position for h in hs]
    assert seg.index.path.read_bytes() == b"".join(
        (h.base_offset).to_bytes(4, "big") + h.position.to_bytes(4, "big") for h in hs
    )
    plog.close()


def test_empty_compacted_segment_does_not_block_time_retention(logdir):
    """With cleanup.policy=compact,delete, a segment compaction emptied must not stop
    retention.ms from deleting the expired segments behind it."""
    hour = 3_600_000
    plog = PartitionLog(logdir, config(cleanup_policy="compact,delete", retention_ms=hour), T0)
    produce(plog, [(b"a", b"1")], now=T0)
    plog.roll(T0)
    produce(plog, [(b"a", b"2"), (b"b", b"1")], now=T0 + 1)
    plog.roll(T0 + 1)
    produce(plog, [(b"c", b"1")], now=T0 + 10 * hour)
    assert compact_log(plog, T0 + 10 * hour) == 1
    assert plog.segments[0].size == 0
    plog.delete_old_segments(T0 + 10 * hour)
    # Both older segments hold only data past retention.ms: the log starts at offset 3.
    assert plog.log_start_offset == 3
    plog.close()


# ----------------------------------------------------------------------------- transactions (KIP-98)


def _end(plog: PartitionLog, pid: int, commit: bool) -> int:
    return plog.append_marker(Marker(pid, 0, commit, 0), T0).base_offset


def test_aborted_records_are_dropped_and_never_replace_committed_ones(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"committed")])  # 0
    produce(plog, [(b"k", b"aborted"), (b"j", b"aborted")], producer_id=7, producer_epoch=0, base_sequence=0,
            is_transactional=True)  # 1..2
    marker = _end(plog, 7, commit=False)  # 3
    plog.roll(T0)
    produce(plog, [(b"x", b"1")])  # active
    assert compact_log(plog, LATER) == 2
    assert [r for r in records_of(plog) if r[0] != marker] == [(0, b"k", b"committed"), (4, b"x", b"1")]
    # The marker stays (and so does the aborted index entry it backs).
    assert [b.header.base_offset for b in batches_of(plog) if b.is_control] == [marker]
    assert plog.aborted_transactions(0, 5) == [(7, 1)]
    plog.close()


def test_records_of_an_open_transaction_never_replace_committed_ones(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"k", b"committed")])  # 0
    plog.roll(T0)
    produce(plog, [(b"k", b"undecided")], producer_id=7, producer_epoch=0, base_sequence=0,
            is_transactional=True)  # 1, may still abort
    plog.roll(T0)
    produce(plog, [(b"x", b"1")])
    compact_log(plog, LATER)
    assert (0, b"k", b"committed") in records_of(plog)
    plog.close()


def test_nothing_at_or_past_the_last_stable_offset_is_cleaned(logdir):
    plog = PartitionLog(logdir, config(), T0)
    produce(plog, [(b"a", b"1")])  # 0
    plog.roll(T0)
    produce(plog, [(b"t", b"1")], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)  # 1
    produce(plog, [(b"a", b"2")])  # 2
    plog.roll(T0)
    produce(plog, [(b"a", b"3")])  # 3
    plog.roll(T0)
    produce(plog, [(b"z", b"1")])  # 4, active
    assert plog.last_stable_offset == 1
    assert cleanable(plog, LATER).uncleanable == 1  # the segment holding the LSO
    held = segment_bytes(plog)[1:]
    assert compact_log(plog, LATER) == 1  # a=1 only: a=2 and a=3 are past the LSO's segment base
    assert segment_bytes(plog)[1:] == held
    _end(plog, 7, commit=True)
    assert cleanable(plog, LATER).uncleanable == plog.active.base_offset
    compact_log(plog, LATER)
    assert [(k, v) for o, k, v in records_of(plog) if o < 5] == [(b"t", b"1"), (b"a", b"3"), (b"z", b"1")]
    plog.close()
