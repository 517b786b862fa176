"""Producer state of one partition: idempotence and transactions (Kafka's ProducerStateManager, reduced).

Theory of operation: for every producer id that wrote to the partition we remember its
epoch, the last coordinator epoch of its transaction markers, and the last five batches
it appended (first/last sequence and the offsets they got). An incoming batch from an
idempotent producer (producer id >= 0) is then:

- a duplicate of one of those five: answered with the original offsets, not appended
  (this is what makes a retried produce exactly-once in the log);
- the next in sequence (last sequence + 1, wrapping at 2^31), or sequence 0 from a
  newer epoch: appended;
- anything else: OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch: INVALID_PRODUCER_EPOCH.

A producer id we hold no state for is accepted at any sequence (its state may have been
lost with a truncated or deleted segment, and Kafka since KIP-360 likewise lets such
producers continue).

Transactions (KIP-98, Kafka's ProducerStateEntry.currentTxnFirstOffset and
ProducerStateManager.ongoingTxns): a transactional data batch from a producer with no
open transaction opens one at its base offset (`ongoing`, in offset order, so the first
is the first unstable offset). A transaction marker (a control batch, records/control.py)
closes it: `end_transaction` returns the CompletedTxn (the aborted index wants the
aborts), sets the producer's epoch to the marker's (a newer epoch forgets the cached
batches, so the producer's next batch must start at sequence 0, as Kafka's
maybeUpdateProducerEpoch) and remembers the marker's coordinator epoch. Before a marker
is written as leader, `check_marker` refuses one from an older producer epoch
(INVALID_PRODUCER_EPOCH) or an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED:
a deposed transaction coordinator). A marker for a producer with no open transaction
closes nothing and yields no CompletedTxn (Kafka's appendEndTxnMarker emits one only for
a non-empty transaction). A completed transaction whose marker is not yet below the high
watermark still holds the first unstable offset (Kafka's unreplicatedTxns), so a
read_committed consumer never sees a transaction decided by a marker that a leader
change could still lose.

Snapshots (Kafka's producer snapshot file, version 1): `to_snapshot` / `from_snapshot`
give the state as bytes, laid out as Kafka's `<offset>.snapshot`:

    version int16 (1), crc uint32 (CRC32C of what follows), entry count int32, then per
    producer: producer id int64, epoch int16, last sequence int32, last offset int64,
    offset delta int32, timestamp int64, coordinator epoch int32,
    current txn first offset int64 (-1: none)

Only a producer's last batch is kept in a snapshot (as in Kafka): after a restart, a
retry of an older cached batch may not be recognised. When and where snapshots are
written and replayed from is the partition log's business (transactions.py).
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

import crc32c

from ..records.batch import TRANSACTIONAL_MASK, BatchHeader
from ..records.control import Marker

MAX_CACHED_BATCHES = 5  # Kafka's max.in.flight limit for idempotent producers
SEQ_WRAP = 1 << 31
NO_EPOCH = -1

SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_FROM = 6  # Kafka's ProducerEntriesOffset: the CRC covers everything after version and crc


@dataclass(slots=True)
class _Entry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))  # (first_seq, last_seq, base_offset)
    coordinator_epoch: int = -1  # of the last marker (Kafka's ProducerStateEntry.coordinatorEpoch)

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker (Kafka's CompletedTxn): its first offset in this
    partition, the marker's offset, and the LSO once it ended (for the aborted index)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int


class Duplicate(Exception):
    def __init__(self, base_offset: int) -> None:
        super().__init__(f"duplicate batch, originally at offset {base_offset}")
        self.base_offset = base_offset


class SequenceError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        # "out_of_order_sequence_number" | "invalid_producer_epoch" | "transaction_coordinator_fenced"
        self.code = code


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) % SEQ_WRAP


def is_transactional(h: BatchHeader) -> bool:
    return bool(h.attributes & TRANSACTIONAL_MASK)


class ProducerState:
    def __init__(self) -> None:
        self.producers: dict[int, _Entry] = {}
        # KIP-98: producer id -> first offset of its open transaction, in offset order.
        self.ongoing: dict[int, int] = {}
        # Ended transactions whose marker may be at or past the high watermark, in marker order.
        self.completed: deque[CompletedTxn] = deque()

    # --- checks (leader appends) ------------------------------------------------------

    def check(self, h: BatchHeader) -> None:
        """Raise Duplicate or SequenceError if `h` must not be appended as new data."""
        if h.producer_id < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return
        if h.base_sequence < 0:
            # A batch without a sequence (the group coordinator's TxnOffsetCommit write)
            # still has its epoch checked, as Kafka's ProducerAppendInfo does: a zombie's
            # TxnOffsetCommit retried after the coordinator aborted its transaction with
            # the epoch bumped must not land after that abort marker (found by the
            # simulator's EOS workload, seeds 8 and 425).
            if h.producer_epoch < entry.epoch:
                raise SequenceError("invalid_producer_epoch", f"epoch {h.producer_epoch} is older than {entry.epoch}")
            return
        if h.producer_epoch < entry.epoch:
            raise SequenceError("invalid_producer_epoch", f"epoch {h.producer_epoch} is older than {entry.epoch}")
        if h.producer_epoch > entry.epoch:
            if h.base_sequence != 0:
                raise SequenceError(
                    "out_of_order_sequence_number", f"new epoch {h.producer_epoch} must start at sequence 0"
                )
            return
        for first, last, base in entry.batches:
            if first == h.base_sequence and last == _last_seq(h):
                raise Duplicate(base)
        expected = (entry.last_seq + 1) % SEQ_WRAP
        if h.base_sequence != expected:
            raise SequenceError(
                "out_of_order_sequence_number",
                f"sequence {h.base_sequence} from producer {h.producer_id}, expected {expected}",
            )

    def check_marker(self, marker: Marker) -> None:
        """Raise SequenceError if a transaction marker must not be written (Kafka's
        ProducerAppendInfo.checkProducerEpoch and checkCoordinatorEpoch, legacy
        transaction version: a marker of the producer's current epoch is accepted)."""
        entry = self.producers.get(marker.producer_id)
        if entry is None:
            return
        if marker.producer_epoch < entry.epoch:
            raise SequenceError("invalid_producer_epoch", f"marker epoch {marker.producer_epoch} of producer "
                                f"{marker.producer_id} is older than {entry.epoch}")
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise SequenceError("transaction_coordinator_fenced", f"coordinator epoch {marker.coordinator_epoch} of "
                                f"the marker for producer {marker.producer_id} is older than "
                                f"{entry.coordinator_epoch}")

    # --- updates (every appended batch, leader or follower, and replay) -----------------

    def update(self, h: BatchHeader) -> None:
        """Record an appended data batch (its header carries the assigned base offset)."""
        if h.producer_id < 0:
            return
        transactional = is_transactional(h)
        if h.base_sequence < 0 and not transactional:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None or h.producer_epoch > entry.epoch:
            coordinator_epoch = entry.coordinator_epoch if entry is not None else -1
            entry = self.producers[h.producer_id] = _Entry(h.producer_epoch, coordinator_epoch=coordinator_epoch)
        if h.base_sequence >= 0:
            entry.batches.append((h.base_sequence, _last_seq(h), h.base_offset))
        if transactional and h.producer_id not in self.ongoing:
            self.ongoing[h.producer_id] = h.base_offset  # KIP-98: the producer's transaction starts here

    def end_transaction(self, marker: Marker, offset: int) -> CompletedTxn | None:
        """Apply a marker written at `offset`; the transaction it ended, if one was open."""
        pid = marker.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = _Entry(marker.producer_epoch)
        elif entry.epoch != marker.producer_epoch:
            # Kafka's maybeUpdateProducerEpoch: another epoch starts over at sequence 0.
            entry.epoch = marker.producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = marker.coordinator_epoch
        first = self.ongoing.pop(pid, None)
        if first is None:
            return None
        # Kafka's lastStableOffset(completedTxn): the next transaction still open, or past the marker.
        lso = next(iter(self.ongoing.values()), offset + 1)
        done = CompletedTxn(pid, first, offset, not marker.commit, min(lso, offset + 1))
        self.completed.append(done)
        return done

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction or of one whose marker is not yet below
        `high_watermark` (Kafka's ProducerStateManager.firstUnstableOffset), None if none."""
        while self.completed and self.completed[0].last_offset < high_watermark:
            self.completed.popleft()
        first = next(iter(self.ongoing.values()), None)
        for done in self.completed:
            if first is None or done.first_offset < first:
                first = done.first_offset
        return first

    # --- snapshots ----------------------------------------------------------------------

    def to_snapshot(self) -> bytes:
        """The state in Kafka's producer snapshot layout (module docstring)."""
        body = bytearray()
        count = 0
        for pid, entry in self.producers.items():
            if entry.batches:
                first_seq, last_seq, base = entry.batches[-1]
                delta = (last_seq - first_seq) % SEQ_WRAP
                last_offset = base + delta
            else:
                last_seq, last_offset, delta = -1, -1, 0
            body += _SNAPSHOT_ENTRY.pack(pid, entry.epoch, last_seq, last_offset, delta, -1, entry.coordinator_epoch,
                                         self.ongoing.get(pid, -1))
            count += 1
        rest = struct.pack(">i", count) + bytes(body)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(rest)) + rest

    @classmethod
    def from_snapshot(cls, data: bytes) -> ProducerState | None:
        """The state a snapshot holds, or None when it is torn, corrupt or of another version."""
        if len(data) < _SNAPSHOT_HEAD.size:
            return None
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION or crc32c.crc32c(data[_CRC_FROM:]) != crc or count < 0 \
                or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
            return None
        state = cls()
        opened = []
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, _ts, coordinator_epoch, txn_first = _SNAPSHOT_ENTRY.unpack_from(
                data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
            entry = state.producers[pid] = _Entry(epoch, coordinator_epoch=coordinator_epoch)
            if last_seq >= 0 and last_offset >= 0:
                entry.batches.append(((last_seq - delta) % SEQ_WRAP, last_seq, last_offset - delta))
            if txn_first >= 0:
                opened.append((txn_first, pid))
        for first, pid in sorted(opened):
            state.ongoing[pid] = first
        return state
