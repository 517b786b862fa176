"""Consumer positions and fetch results (`odradek.client.fetcher.Positions`), sans-I/O."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.cluster import TopicPartition
from odradek.client.errors import KafkaError
from odradek.client.fetcher import Positions
from odradek.records.codec import LOG_APPEND_TIME, encode_batch

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
TS = 1_700_000_000_000


def batch(first: int, n: int, *, base: int | None = None, **kw) -> bytes:
    """Records first..first+n-1 with values b"v<offset>"."""
    base = first if base is None else base
    return encode_batch([(o, TS + o, b"k%d" % o, b"v%d" % o) for o in range(first, first + n)], base_offset=base, **kw)


def control(offset: int) -> bytes:
    # A transaction marker: a control batch with one record (key = version + type).
    return encode_batch([(offset, TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], base_offset=offset,
                        is_control=True, is_transactional=True, producer_id=7, producer_epoch=0)


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def positions(*tps, at: int | None = 0) -> Positions:
    p = Positions()
    p.set(tps or [A])
    if at is not None:
        for tp in tps or [A]:
            p.seek(tp, at)
    return p


def test_take_hands_out_records_and_advances_the_position():
    p = positions()
    p.on_partition(A, 0, batch(0, 5), high_watermark=5)
    recs = p.take(100)
    assert offsets(recs) == [0, 1, 2, 3, 4]
    assert [r.value for r in recs] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    r = recs[0]
    assert (r.topic, r.partition, r.key, r.timestamp, r.timestamp_type, r.headers) == ("t", 0, b"k0", TS, 0, ())
    assert p.parts[A].position == 5 and p.parts[A].high_watermark == 5
    assert p.take(100) == []


def test_position_advances_only_as_records_are_taken():
    p = positions()
    p.on_partition(A, 0, batch(0, 3), 3)
    assert p.parts[A].position == 0  # buffered, not yet handed out
    p.take(1)
    assert p.parts[A].position == 1


def test_max_records_splits_a_chunk():
    p = positions()
    p.on_partition(A, 0, batch(0, 4) + batch(4, 3), 7)
    assert offsets(p.take(3)) == [0, 1, 2]
    assert p.parts[A].position == 3
    assert offsets(p.take(3)) == [3, 4, 5]
    assert p.parts[A].position == 6
    assert offsets(p.take(3)) == [6]
    assert p.parts[A].position == 7
    assert not p.buffer


def test_take_spans_partitions_up_to_max_records():
    p = positions(A, B)
    p.on_partition(A, 0, batch(0, 3), 3)
    p.on_partition(B, 0, batch(0, 3), 3)
    recs = p.take(4)
    assert [(r.partition, r.offset) for r in recs] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert (p.parts[A].position, p.parts[B].position) == (3, 1)


def test_records_below_the_fetch_offset_inside_a_batch_are_skipped():
    # The broker returns whole batches: fetching from 3 returns the batch 0..5.
    p = positions(at=3)
    p.on_partition(A, 3, batch(0, 6), 6)
    assert offsets(p.take(100)) == [3, 4, 5]
    assert p.parts[A].position == 6


def test_batches_entirely_below_the_fetch_offset_are_skipped():
    p = positions(at=5)
    p.on_partition(A, 5, batch(0, 5) + batch(5, 2), 7)
    assert offsets(p.take(100)) == [5, 6]


def test_control_batches_are_skipped_but_the_position_advances():
    p = positions()
    p.on_partition(A, 0, batch(0, 2) + control(2) + batch(3, 2) + control(5), 6)
    recs = p.take(100)
    assert offsets(recs) == [0, 1, 3, 4]
    assert p.parts[A].position == 6  # past the trailing marker


def test_a_chunk_of_only_control_records_still_advances_the_position():
    p = positions(at=2)
    p.on_partition(A, 2, control(2), 3)
    assert p.take(100) == []
    assert p.parts[A].position == 3


def test_offset_gaps_from_compaction_advance_past_the_batch_end():
    # Compaction can leave a batch whose last offset delta is beyond its last record.
    data = encode_batch([(0, TS, None, b"a"), (2, TS, None, b"c")], base_offset=0, last_offset_delta=4)
    p = positions()
    p.on_partition(A, 0, data, 10)
    assert offsets(p.take(100)) == [0, 2]
    assert p.parts[A].position == 5


def test_log_append_time_and_leader_epoch_are_reported():
    p = positions()
    p.on_partition(A, 0, batch(0, 1, timestamp_type=LOG_APPEND_TIME, partition_leader_epoch=4), 1)
    (r,) = p.take(1)
    assert r.timestamp_type == 1 and r.leader_epoch == 4


def test_headers_are_passed_through():
    data = encode_batch([(0, TS, None, b"v", (("h1", b"x"), ("h2", None)))])
    p = positions()
    p.on_partition(A, 0, data, 1)
    assert p.take(1)[0].headers == (("h1", b"x"), ("h2", None))


def test_stale_chunk_dropped_after_seek():
    p = positions()
    p.on_partition(A, 0, batch(0, 5), 5)
    p.seek(A, 2)
    assert p.take(100) == []
    assert p.parts[A].position == 2
    assert not p.buffer


def test_stale_chunk_dropped_after_seek_mid_chunk():
    p = positions()
    p.on_partition(A, 0, batch(0, 5), 5)
    assert offsets(p.take(2)) == [0, 1]
    p.seek(A, 0)  # rewind: the rest of the chunk was fetched from 2, not 0
    assert p.take(100) == []
    assert p.parts[A].position == 0


def test_stale_chunk_dropped_after_pause():
    p = positions(A, B)
    p.on_partition(A, 0, batch(0, 3), 3)
    p.on_partition(B, 0, batch(0, 3), 3)
    p.parts[A].paused = True
    assert [(r.partition, r.offset) for r in p.take(100)] == [(1, 0), (1, 1), (1, 2)]
    p.parts[A].paused = False
    assert p.take(100) == []  # dropped, to be fetched again from the same position
    assert p.parts[A].position == 0
    assert A in p.fetchable()


def test_stale_chunk_dropped_after_remove():
    p = positions(A, B)
    p.on_partition(A, 0, batch(0, 3), 3)
    p.remove([A])
    assert p.take(100) == []
    assert A not in p.parts


def test_fetch_result_for_an_old_position_is_discarded():
    p = positions()
    p.seek(A, 10)
    p.on_partition(A, 0, batch(0, 3), 3)  # fetched from 0 before the seek to 10
    assert not p.buffer and p.take(100) == []


def test_fetch_result_for_an_unassigned_partition_is_discarded():
    p = positions(A)
    p.on_partition(B, 0, batch(0, 3), 3)
    assert not p.buffer


def test_empty_fetch_updates_the_high_watermark_only():
    p = positions()
    p.on_partition(A, 0, b"", 42)
    p.on_partition(A, 0, None, 43)
    assert not p.buffer and p.parts[A].high_watermark == 43 and p.parts[A].position == 0


def test_corrupt_records_raise_a_non_retriable_kafka_error():
    p = positions()
    good = bytearray(batch(0, 3))
    good[16] = 1  # magic byte: only v2 batches exist here
    with pytest.raises(KafkaError) as info:
        p.on_partition(A, 0, bytes(good), 3)
    assert info.value.code == ErrorCode.corrupt_message and not info.value.retriable


def test_trailing_partial_batch_is_ignored():
    # A fetch response is cut at max bytes: the last batch may be incomplete.
    p = positions()
    p.on_partition(A, 0, batch(0, 2) + batch(2, 3)[:-7], 5)
    assert offsets(p.take(100)) == [0, 1]
    assert p.parts[A].position == 2  # the cut batch is fetched again from here


def test_fetchable_and_plan():
    p = positions(A, B)
    p.set([A, B, TopicPartition("u", 0)])
    p.seek(B, 7)
    p.parts[B].leader_epoch = 3
    assert p.needing_position() == [TopicPartition("u", 0)]
    p.on_partition(A, 0, batch(0, 1), 1)  # one chunk buffered: A is fetched ahead, after it
    assert p.fetchable() == [A, B]
    assert p.plan({A: 2, B: 2}) == {2: [(A, 1, -1), (B, 7, 3)]}
    p.on_partition(A, 1, batch(1, 1), 2)  # a second chunk: A waits until the first is consumed
    assert p.fetchable() == [B]
    assert p.plan({B: 2}) == {2: [(B, 7, 3)]}
    assert p.plan({}) == {}  # unknown leader: nothing planned
    p.on_partition(A, 0, batch(0, 1), 1)  # a stale answer (not from where A's next fetch starts): dropped
    assert offsets(p.take(100)) == [0, 1]
    p.parts[B].paused = True
    assert p.fetchable() == [A]  # drained: fetched from its position again; B paused
    assert p.plan({A: 2, B: 2}) == {2: [(A, 2, -1)]}


def test_set_keeps_positions_of_retained_partitions():
    p = positions(A, B, at=5)
    p.set([B, TopicPartition("u", 0)])
    assert A not in p.parts
    assert p.parts[B].position == 5
    assert p.parts[TopicPartition("u", 0)].position is None


def test_seek_of_unassigned_partition_raises():
    p = positions(A)
    with pytest.raises(KeyError):
        p.seek(B, 0)


def test_drop_buffered():
    p = positions(A, B)
    p.on_partition(A, 0, batch(0, 1), 1)
    p.on_partition(B, 0, batch(0, 1), 1)
    p.drop_buffered([A])
    assert [c.tp for c in p.buffer] == [B]
    p.drop_buffered()
    assert not p.buffer


def test_a_batch_failing_its_crc_is_corrupt_message_unless_check_crcs_is_off():
    # The Java consumer's check.crcs (default true): bytes that changed on the way or on
    # the broker's disk are never handed out as records.
    flipped = bytearray(batch(0, 3))
    flipped[-2] ^= 0x01
    p = positions()
    with pytest.raises(KafkaError) as err:
        p.on_partition(A, 0, bytes(flipped), 3)
    assert err.value.code == ErrorCode.corrupt_message and not err.value.retriable
    unchecked = Positions(check_crcs=False)
    unchecked.set([A])
    unchecked.seek(A, 0)
    unchecked.on_partition(A, 0, bytes(flipped), 3)
    assert len(unchecked.take(10)) == 3
