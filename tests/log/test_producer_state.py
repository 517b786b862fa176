"""Tests for odradek.log.producer_state (idempotent producers) and its use by PartitionLog.append."""

from __future__ import annotations

import dataclasses

import pytest

from odradek.config import BrokerConfig
from odradek.log.partition import PartitionLog
from odradek.log.producer_state import MAX_CACHED_BATCHES, SEQ_WRAP, Duplicate, ProducerState, SequenceError
from odradek.records.batch import read_header, validate_batches
from odradek.records.codec import Record, decode_batches, encode_batch

T0 = 1_700_000_000_000
PID = 4242


def header(seq: int, count: int = 1, pid: int = PID, epoch: int = 0, base_offset: int = 0):
    raw = encode_batch([Record(i, T0, b"k", b"v") for i in range(count)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)
    return dataclasses.replace(read_header(raw), base_offset=base_offset)


def accept(state: ProducerState, h) -> None:
    state.check(h)
    state.update(h)


def test_non_idempotent_batches_always_accepted():
    state = ProducerState()
    for _ in range(3):
        accept(state, header(-1, pid=-1, epoch=-1))
    assert state.producers == {}


def test_unknown_producer_accepted_at_any_sequence():
    state = ProducerState()
    state.check(header(0))
    state.check(header(12345))
    other = ProducerState()
    accept(other, header(777, count=3, base_offset=10))
    other.check(header(780))  # and then it must continue in sequence
    with pytest.raises(SequenceError):
        other.check(header(779))


def test_in_sequence_batches_accepted():
    state = ProducerState()
    offset = 0
    seq = 0
    for count in (1, 5, 2, 10, 1):
        h = header(seq, count, base_offset=offset)
        accept(state, h)
        seq += count
        offset += count
    assert state.producers[PID].last_seq == seq - 1


def test_duplicate_of_recent_batches_detected_with_original_offset():
    state = ProducerState()
    spans = []
    seq = offset = 0
    for count in (2, 3, 1, 4, 2):
        accept(state, header(seq, count, base_offset=offset))
        spans.append((seq, count, offset))
        seq += count
        offset += count + 100  # offsets need not be dense (other producers interleave)
    for s, c, off in spans:
        with pytest.raises(Duplicate) as exc:
            state.check(header(s, c))
        assert exc.value.base_offset == off


def test_only_last_five_batches_are_remembered():
    assert MAX_CACHED_BATCHES == 5
    state = ProducerState()
    for i in range(6):
        accept(state, header(i, base_offset=i))
    # Batch 0 fell out of the cache: it is now out of order, not a duplicate.
    with pytest.raises(SequenceError) as exc:
        state.check(header(0))
    assert exc.value.code == "out_of_order_sequence_number"
    with pytest.raises(Duplicate) as dup:
        state.check(header(1))
    assert dup.value.base_offset == 1


def test_partial_overlap_is_not_a_duplicate():
    state = ProducerState()
    accept(state, header(0, count=3))
    with pytest.raises(SequenceError):
        state.check(header(0, count=2))  # same first sequence, different last
    with pytest.raises(SequenceError):
        state.check(header(1, count=2))


@pytest.mark.parametrize("seq", [2, 10, 4, 5 + 1])
def test_out_of_order_sequence_rejected(seq):
    state = ProducerState()
    accept(state, header(0, count=2))
    accept(state, header(2, count=3))  # last seq 4, next expected 5
    with pytest.raises(SequenceError) as exc:
        state.check(header(seq, count=1))
    assert exc.value.code == "out_of_order_sequence_number"
    state.check(header(5))


def test_older_epoch_rejected():
    state = ProducerState()
    accept(state, header(0, epoch=3))
    for seq in (0, 1):
        with pytest.raises(SequenceError) as exc:
            state.check(header(seq, epoch=2))
        assert exc.value.code == "invalid_producer_epoch"


def test_new_epoch_must_start_at_zero():
    state = ProducerState()
    accept(state, header(0, count=5, epoch=1))
    with pytest.raises(SequenceError) as exc:
        state.check(header(5, epoch=2))
    assert exc.value.code == "out_of_order_sequence_number"
    accept(state, header(0, count=2, epoch=2, base_offset=50))
    assert state.producers[PID].epoch == 2
    # The old epoch's batches are forgotten and the old epoch is now fenced.
    with pytest.raises(SequenceError) as exc:
        state.check(header(5, epoch=1))
    assert exc.value.code == "invalid_producer_epoch"
    with pytest.raises(Duplicate) as dup:
        state.check(header(0, count=2, epoch=2))
    assert dup.value.base_offset == 50
    state.check(header(2, epoch=2))


def test_sequence_wraps_at_2_pow_31():
    assert SEQ_WRAP == 2**31
    state = ProducerState()
    accept(state, header(SEQ_WRAP - 2, count=3, base_offset=0))  # sequences 2^31-2, 2^31-1, 0
    assert state.producers[PID].last_seq == 0
    with pytest.raises(Duplicate):
        state.check(header(SEQ_WRAP - 2, count=3))
    with pytest.raises(SequenceError):
        state.check(header(0))
    accept(state, header(1, count=1, base_offset=3))
    state.check(header(2))


def test_sequence_wrap_exactly_at_boundary():
    state = ProducerState()
    accept(state, header(SEQ_WRAP - 1, count=1))
    state.check(header(0))
    with pytest.raises(SequenceError):
        state.check(header(SEQ_WRAP - 1, count=2))  # same first sequence, different length
    accept(state, header(0, count=2))
    state.check(header(2))


def test_producers_are_independent():
    state = ProducerState()
    accept(state, header(0, count=3, pid=1))
    accept(state, header(0, count=1, pid=2))
    state.check(header(3, pid=1))
    state.check(header(1, pid=2))
    with pytest.raises(SequenceError):
        state.check(header(1, pid=1))


# ----------------------------------------------------------------------------- via PartitionLog


def _config() -> dict:
    return BrokerConfig().topic_defaults()


def produce(plog: PartitionLog, seq: int, count: int = 1, epoch: int = 0, pid: int = PID, now: int = T0):
    raw = encode_batch([Record(i, now, b"k%d" % i, b"v%d" % (seq + i)) for i in range(count)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    buf = bytearray(raw)
    return plog.append(buf, validate_batches(buf), now)


def test_duplicate_batch_returns_original_offsets_and_is_not_appended(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", _config(), T0)
    produce(plog, 0, count=1, pid=-1, epoch=-1)  # someone else's record at offset 0
    first = produce(plog, 0, count=3)
    assert (first.base_offset, first.last_offset) == (1, 3)
    produce(plog, 0, count=2, pid=99)  # another producer: offsets 4..5
    size, leo = plog.size_bytes, plog.log_end_offset
    retry = produce(plog, 0, count=3)
    assert (retry.base_offset, retry.last_offset) == (1, 3)
    assert plog.size_bytes == size and plog.log_end_offset == leo == 6
    records = [r for b in decode_batches(plog.read(0, 10**6).data) for r in b.records]
    assert len(records) == 6
    nxt = produce(plog, 3, count=1)
    assert nxt.base_offset == 6
    plog.close()


def test_out_of_sequence_batch_raises_and_is_not_appended(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", _config(), T0)
    produce(plog, 0, count=2)
    size = plog.size_bytes
    with pytest.raises(SequenceError) as exc:
        produce(plog, 5)
    assert exc.value.code == "out_of_order_sequence_number"
    assert plog.size_bytes == size and plog.log_end_offset == 2
    produce(plog, 0, epoch=1)  # a new epoch starts over at sequence 0
    size = plog.size_bytes
    with pytest.raises(SequenceError) as exc:
        produce(plog, 2, epoch=0)  # the fenced epoch
    assert exc.value.code == "invalid_producer_epoch"
    assert plog.size_bytes == size and plog.log_end_offset == 3
    plog.close()


def test_producer_state_rebuilt_on_reopen(tmp_path):
    d = tmp_path / "t-0"
    plog = PartitionLog(d, _config(), T0)
    produce(plog, 0, count=2)
    produce(plog, 2, count=2)
    plog.close()
    again = PartitionLog(d, _config(), T0)
    dup = produce(again, 2, count=2)
    assert (dup.base_offset, dup.last_offset) == (2, 3)
    assert again.log_end_offset == 4
    with pytest.raises(SequenceError):
        produce(again, 7)
    assert produce(again, 4).base_offset == 4
    again.close()
