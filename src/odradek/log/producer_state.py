"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, reduced).

Theory of operation: for every producer id that wrote to the partition we remember its
epoch and the last five batches it appended (first/last sequence and the offsets they
got). An incoming batch from an idempotent producer (producer id >= 0) is then:

- a duplicate of one of those five: answered with the original offsets, not appended
  (this is what makes a retried produce exactly-once in the log);
- the next in sequence (last sequence + 1, wrapping at 2^31), or sequence 0 from a
  newer epoch: appended;
- anything else: OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch: INVALID_PRODUCER_EPOCH.

A producer id we hold no state for is accepted at any sequence (its state may have been
lost with a truncated or deleted segment, and Kafka since KIP-360 likewise lets such
producers continue). State is rebuilt at start-up from the active segment's batch
headers; no snapshot files are written (a difference from Kafka, noted in the docs).

When the log is truncated (a follower cutting a divergent tail, Kafka's
ProducerStateManager.truncateAndReload), `truncate` forgets the batches at or past the
new end. A producer left with some of its cached batches keeps them: its last sequence
is right, and only retries of batches older than the cache could go unrecognised. A
producer left with none is forgotten and handed back to the caller, which replays the
batch headers it can afford to read (PartitionLog: the active segment, as at start-up).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..records.batch import BatchHeader

MAX_CACHED_BATCHES = 5  # Kafka's max.in.flight limit for idempotent producers
SEQ_WRAP = 1 << 31


@dataclass(slots=True)
class _Entry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))  # (first_seq, last_seq, base_offset)

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class Duplicate(Exception):
    def __init__(self, base_offset: int) -> None:
        super().__init__(f"duplicate batch, originally at offset {base_offset}")
        self.base_offset = base_offset


class SequenceError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # "out_of_order_sequence_number" | "invalid_producer_epoch"


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) % SEQ_WRAP


class ProducerState:
    def __init__(self) -> None:
        self.producers: dict[int, _Entry] = {}

    def check(self, h: BatchHeader) -> None:
        """Raise Duplicate or SequenceError if `h` must not be appended as new data."""
        if h.producer_id < 0 or h.base_sequence < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None:
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

    def truncate(self, offset: int) -> set[int]:
        """Forget every batch appended at or past `offset`; return the ids of producers
        with no batch left (their state below `offset` is unknown here)."""
        emptied = set()
        for pid, entry in list(self.producers.items()):
            if not entry.batches or entry.batches[-1][2] < offset:
                continue  # base offsets only grow: nothing of this producer was cut
            kept = [b for b in entry.batches if b[2] < offset]
            if kept:
                entry.batches = deque(kept, maxlen=MAX_CACHED_BATCHES)
            else:
                # Its epoch may also have been bumped in the cut part: the entry goes whole.
                del self.producers[pid]
                emptied.add(pid)
        return emptied

    def update(self, h: BatchHeader) -> None:
        """Record an appended batch (its header carries the assigned base offset)."""
        if h.producer_id < 0 or h.base_sequence < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None or h.producer_epoch > entry.epoch:
            entry = self.producers[h.producer_id] = _Entry(h.producer_epoch)
        entry.batches.append((h.base_sequence, _last_seq(h), h.base_offset))
