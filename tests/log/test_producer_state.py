"""Tests for odradek.log.producer_state (idempotent producers, transactions, snapshots) and its use by
PartitionLog.append."""

from __future__ import annotations

import dataclasses
import struct

import crc32c
import pytest

from odradek.config import BrokerConfig
from odradek.log.partition import PartitionLog
from odradek.log.producer_state import (
    MAX_CACHED_BATCHES,
    SEQ_WRAP,
    CompletedTxn,
    Duplicate,
    ProducerState,
    SequenceError,
)
from odradek.records.batch import read_header, validate_batches
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.records.control import Marker

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


# ----------------------------------------------------------------------------- transactions (KIP-98)


def txn_header(seq: int, base_offset: int, pid: int = PID, epoch: int = 0, count: int = 1):
    raw = encode_batch([Record(i, T0, b"k", b"v") for i in range(count)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)
    return dataclasses.replace(read_header(raw), base_offset=base_offset)


def test_a_transactional_batch_opens_a_transaction_at_its_offset_once():
    state = ProducerState()
    state.update(txn_header(0, 10))
    state.update(txn_header(1, 12))
    state.update(txn_header(0, 11, pid=7))
    assert state.ongoing == {PID: 10, 7: 11}
    assert state.first_unstable_offset(high_watermark=100) == 10
    state.update(header(0, pid=9, base_offset=13))  # not transactional: opens nothing
    assert 9 not in state.ongoing


def test_a_marker_ends_the_transaction_with_the_lso_of_that_moment():
    state = ProducerState()
    state.update(txn_header(0, 10))
    state.update(txn_header(0, 11, pid=7))
    done = state.end_transaction(Marker(PID, 0, False, 0), 12)
    assert done == CompletedTxn(PID, 10, 12, True, 11)  # 7's transaction was still open
    assert state.ongoing == {7: 11}
    done = state.end_transaction(Marker(7, 0, True, 0), 13)
    assert done == CompletedTxn(7, 11, 13, False, 14)
    assert state.end_transaction(Marker(7, 0, True, 0), 14) is None  # nothing open


def test_an_ended_transaction_holds_the_first_unstable_offset_until_the_high_watermark_passes_its_marker():
    state = ProducerState()
    state.update(txn_header(0, 10))
    state.end_transaction(Marker(PID, 0, True, 0), 12)
    assert state.first_unstable_offset(high_watermark=12) == 10
    assert state.first_unstable_offset(high_watermark=13) is None
    assert not state.completed


def test_marker_checks_epochs():
    state = ProducerState()
    state.check_marker(Marker(PID, 0, True, 0))  # unknown producer: nothing to check against
    state.update(txn_header(0, 0, epoch=2))
    state.end_transaction(Marker(PID, 2, True, 5), 1)
    with pytest.raises(SequenceError) as exc:
        state.check_marker(Marker(PID, 1, True, 5))
    assert exc.value.code == "invalid_producer_epoch"
    with pytest.raises(SequenceError) as exc:
        state.check_marker(Marker(PID, 2, True, 4))
    assert exc.value.code == "transaction_coordinator_fenced"
    state.check_marker(Marker(PID, 2, False, 5))
    state.check_marker(Marker(PID, 3, False, 6))


def test_a_marker_of_the_same_epoch_keeps_the_sequence_a_newer_one_restarts_it():
    state = ProducerState()
    accept(state, txn_header(0, 0, count=3))
    state.end_transaction(Marker(PID, 0, True, 0), 3)
    state.check(txn_header(3, 0))  # the producer goes on in sequence
    with pytest.raises(SequenceError):
        state.check(txn_header(0, 0))
    state.end_transaction(Marker(PID, 1, False, 0), 4)
    assert state.producers[PID].epoch == 1
    with pytest.raises(SequenceError) as exc:
        state.check(txn_header(3, 0, epoch=1))
    assert exc.value.code == "out_of_order_sequence_number"
    state.check(txn_header(0, 0, epoch=1))


def test_snapshot_round_trip_in_kafkas_layout():
    state = ProducerState()
    accept(state, header(5, count=3, base_offset=20))
    accept(state, header(8, count=2, base_offset=30))
    state.update(txn_header(0, 40, pid=7, epoch=3))
    state.end_transaction(Marker(8, 2, True, 9), 41)  # a producer known only by its marker
    state.update(txn_header(0, 42, pid=6))
    data = state.to_snapshot()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 4, 10 + 4 * 46)
    assert crc == crc32c.crc32c(data[6:])
    again = ProducerState.from_snapshot(data)
    assert again.ongoing == {7: 40, 6: 42} and list(again.ongoing) == [7, 6]  # offset order
    assert list(again.producers[PID].batches) == [(8, 9, 30)]  # the last batch only, as Kafka
    assert (again.producers[7].epoch, again.producers[8].epoch, again.producers[8].coordinator_epoch) == (3, 2, 9)
    with pytest.raises(Duplicate):
        again.check(header(8, count=2))
    again.check(header(10))
    again.check(header(0, pid=8, epoch=2))  # its epoch is known: sequence 0 only
    with pytest.raises(SequenceError):
        again.check(header(1, pid=8, epoch=2))


@pytest.mark.parametrize("damage", ["torn", "crc", "version"])
def test_a_damaged_snapshot_is_refused(damage):
    state = ProducerState()
    accept(state, header(0))
    data = bytearray(state.to_snapshot())
    if damage == "torn":
        data = data[:-3]
    elif damage == "crc":
        data[-1] ^= 1
    else:
        data[1] = 7
    assert ProducerState.from_snapshot(bytes(data)) is None


def test_a_batch_without_a_sequence_still_has_its_epoch_checked():
    """Kafka's ProducerAppendInfo: the group coordinator's TxnOffsetCommit batches carry the
    producer id and epoch but no sequence; once a marker bumped the epoch (the coordinator
    aborted the transaction), a zombie's retried TxnOffsetCommit is refused."""
    state = ProducerState()
    accept(state, header(-1, epoch=0))  # no sequence: accepted, the producer is known at epoch 0
    state.end_transaction(Marker(PID, 1, False, 0), offset=5)
    with pytest.raises(SequenceError) as e:
        state.check(header(-1, epoch=0))
    assert e.value.code == "invalid_producer_epoch"
    state.check(header(-1, epoch=1))  # the current epoch is fine
