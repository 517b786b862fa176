"""The data partitions of the EOS workload: the input topics and the output topic, in memory.

Theory of operation (issue 19; KIP-98's partition-side rules, reduced to what exactly-once
needs): a `DataPartition` is one partition's records in offset order, and its producer
state, which is the broker's own `log/producer_state.ProducerState`: every append is
checked by it and recorded in it, as the broker's partition log does (`Transactions.
_check_batches` / `_track_batches`).

  * Input records are plain (no producer id): the input's producer appends them during
    the fault phase (`append_plain`), each one named by (topic, partition, offset).
  * A transactional produce (`produce`) carries the producer id, epoch and base sequence
    of its batch. ProducerState decides: an older epoch than the partition has seen is
    refused (INVALID_PRODUCER_EPOCH: a fenced zombie), a retried batch is a duplicate
    (answered with its first offsets, not appended again: idempotence), a gap in the
    sequence is OUT_OF_ORDER_SEQUENCE_NUMBER. The records stay pending, invisible to
    read_committed, until their producer's marker.
  * A transaction marker (`write_marker`, what WriteTxnMarkers does at a data partition)
    is refused when its producer epoch is older than the partition's, or its coordinator
    epoch older than the last marker's (TRANSACTION_COORDINATOR_FENCED: a deposed
    transaction coordinator); else COMMIT makes the producer's pending records visible
    and ABORT discards them. A marker for a producer with nothing open changes nothing.
  * `read_committed()` is what a read_committed consumer sees: plain records and records
    of committed transactions, below the last stable offset (the first offset of a
    transaction still open).

These partitions have one replica and never fail: faults reach them only through the
network (a member's produce and its answer travel over a link, with the network's delays,
losses and cuts). Markers come from the transaction coordinator brokers (sim/txn.py)
after an inter-broker delay. Observers (`observers`) hear of every transaction that ends
in a partition, with the records it decided: the exactly-once checker.
"""

from __future__ import annotations

from typing import NamedTuple

from odradek.log.producer_state import (
    CompletedTxn,
    Duplicate,
    ProducerState,
    SequenceError,
)
from odradek.protocol.errors import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TRANSACTION_COORDINATOR_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from odradek.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from odradek.records.control import Marker

_CODES = {"invalid_producer_epoch": INVALID_PRODUCER_EPOCH,
          "out_of_order_sequence_number": OUT_OF_ORDER_SEQUENCE_NUMBER,
          "transaction_coordinator_fenced": TRANSACTION_COORDINATOR_FENCED}


class DataEntry(NamedTuple):
    producer_id: int  # -1: a plain record
    producer_epoch: int
    value: str | None  # None for a marker
    marker: Marker | None = None


class Produce(NamedTuple):
    """One transactional batch for one partition (a Produce request's partition data)."""

    tp: tuple[str, int]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    values: tuple[str, ...]


def _header(base_offset: int, producer_id: int, epoch: int, base_sequence: int, count: int, *,
            control: bool = False) -> BatchHeader:
    attributes = TRANSACTIONAL_MASK | (CONTROL_MASK if control else 0)
    return BatchHeader(0, base_offset, 0, 0, 2, 0, attributes, count - 1, 0, 0, producer_id, epoch, base_sequence,
                       count)


class DataPartition:
    def __init__(self, topic: str, index: int) -> None:
        self.tp = (topic, index)
        self.entries: list[DataEntry] = []
        self.producers = ProducerState()

    @property
    def end(self) -> int:
        return len(self.entries)

    def append_plain(self, values: list[str]) -> None:
        self.entries.extend(DataEntry(-1, -1, v) for v in values)

    def produce(self, req: Produce) -> tuple[int, int]:
        """(error code, base offset) of a transactional batch (the leader's checks, then the append)."""
        h = _header(self.end, req.producer_id, req.producer_epoch, req.base_sequence, len(req.values))
        try:
            self.producers.check(h)
        except Duplicate as dup:
            return int(NONE), dup.base_offset
        except SequenceError as exc:
            return int(_CODES[exc.code]), -1
        base = self.end
        self.entries.extend(DataEntry(req.producer_id, req.producer_epoch, v) for v in req.values)
        self.producers.update(h)
        return int(NONE), base

    def write_marker(self, marker: Marker) -> tuple[int, CompletedTxn | None, list[str]]:
        """(error code, the transaction it ended or None, that transaction's records)."""
        try:
            self.producers.check_marker(marker)
        except SequenceError as exc:
            return int(_CODES[exc.code]), None, []
        offset = self.end
        self.entries.append(DataEntry(marker.producer_id, marker.producer_epoch, None, marker))
        done = self.producers.end_transaction(marker, offset)
        if done is None:
            return int(NONE), None, []
        values = [e.value for e in self.entries[done.first_offset:offset]
                  if e.producer_id == marker.producer_id and e.marker is None]
        return int(NONE), done, values

    def last_stable_offset(self) -> int:
        """KIP-98: the first offset of a transaction still open (the log end if none); the
        partition has one replica, so its high watermark is its end."""
        first = self.producers.first_unstable_offset(self.end)
        return self.end if first is None else first

    def open_transactions(self) -> list[int]:
        """Producer ids with a transaction open here."""
        return sorted(self.producers.ongoing)

    def read_committed(self) -> list[tuple[int, str]]:
        """(offset, value) of what a read_committed consumer reads: plain records and those
        of committed transactions, below the last stable offset, in offset order. Computed
        from the entries alone (not from the producer state), for the checkers."""
        pending: dict[int, list[tuple[int, str]]] = {}
        visible: list[tuple[int, str]] = []
        for offset, e in enumerate(self.entries):
            if e.marker is not None:
                mine = pending.pop(e.producer_id, [])
                if e.marker.commit:
                    visible.extend(mine)
            elif e.producer_id < 0:
                visible.append((offset, e.value))
            else:
                pending.setdefault(e.producer_id, []).append((offset, e.value))
        lso = min((recs[0][0] for recs in pending.values() if recs), default=self.end)
        return sorted(r for r in visible if r[0] < lso)


class SimData:
    """The data partitions, led by one broker that never fails (the network is its only fault).

    `topics(name)` says how many partitions a topic has now (None: no such topic), from the
    cluster's metadata, so a produce to a partition that does not exist is refused."""

    def __init__(self, partitions_of) -> None:
        self.partitions: dict[tuple[str, int], DataPartition] = {}
        self.partitions_of = partitions_of
        self.observers: list = []  # on_txn_end(tp, marker, completed, values)
        self.produced = 0
        self.markers = 0

    def partition(self, tp: tuple[str, int]) -> DataPartition:
        p = self.partitions.get(tp)
        if p is None:
            p = self.partitions[tp] = DataPartition(*tp)
        return p

    def exists(self, tp: tuple[str, int]) -> bool:
        count = self.partitions_of(tp[0])
        return count is not None and 0 <= tp[1] < count

    def produce(self, req: Produce) -> tuple[int, int]:
        if not self.exists(req.tp):
            return int(UNKNOWN_TOPIC_OR_PARTITION), -1
        self.produced += 1
        return self.partition(req.tp).produce(req)

    def write_marker(self, tp: tuple[str, int], marker: Marker) -> int:
        if not self.exists(tp):
            return int(UNKNOWN_TOPIC_OR_PARTITION)
        code, done, values = self.partition(tp).write_marker(marker)
        if code == int(NONE):
            self.markers += 1
            for o in self.observers:
                o.on_txn_end(tp, marker, done, values)
        return code
