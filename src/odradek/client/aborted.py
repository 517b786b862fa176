"""read_committed: which fetched batches belong to aborted transactions (KIP-98), sans-I/O.

Theory of operation. A read_committed Fetch (isolation_level 1) returns the log only up to
the last stable offset, plus the aborted transactions that overlap what it returns: for
each, the producer id and the offset of its first record. The consumer, not the broker,
drops their records, walking the batches in offset order as Kafka's consumer does
(CompletedFetch.nextFetchedRecord):

- before looking at a batch of a producer, every aborted transaction that starts at or
  before the batch's last offset becomes "open" for its producer id;
- a control batch from that producer with an ABORT marker closes it (the producer's later
  batches are a new transaction);
- a transactional data batch of a producer with an open aborted transaction is dropped.

Control batches (markers) are never records for the application, in either isolation
level; they and the dropped batches still take offsets, so the position moves past them
(Java's nextFetchOffset), also when nothing else came back.

The state lives for one fetch response: the broker lists every aborted transaction that
overlaps the fetched range, including one that began before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from odradek.records.batch import BatchHeader
from odradek.records.control import ABORT, is_control, is_transactional


class AbortedTransactions:
    def __init__(self, aborted: Iterable[Any]) -> None:
        """`aborted`: (producer_id, first_offset) pairs, or the Fetch response's
        AbortedTransaction entries (with .producer_id and .first_offset)."""
        pairs = []
        for a in aborted:
            pid, first = (a.producer_id, a.first_offset) if hasattr(a, "producer_id") else a
            pairs.append((int(first), int(pid)))
        self._queue = sorted(pairs)
        self._next = 0
        self._open: set[int] = set()

    def skip(self, h: BatchHeader, marker_type: Callable[[], int | None]) -> bool:
        """Call for every batch in offset order. True when `h` is a data batch of an
        aborted transaction. `marker_type()` gives a control batch's type (ABORT, COMMIT;
        None for other control records); it is called only for control batches."""
        pid = h.producer_id
        if pid < 0:
            return False  # not from an idempotent or transactional producer
        last = h.base_offset + h.last_offset_delta
        q = self._queue
        while self._next < len(q) and q[self._next][0] <= last:
            self._open.add(q[self._next][1])
            self._next += 1
        if is_control(h):
            if marker_type() == ABORT:
                self._open.discard(pid)
            return False  # the caller never hands out control batches anyway
        return is_transactional(h) and pid in self._open


__all__ = ["AbortedTransactions"]
