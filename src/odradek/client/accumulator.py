"""Producer batching, sans-I/O: records in, ready batches out (KafkaProducer's RecordAccumulator).

Theory of operation: `append` adds a record to the open batch of its partition,
opening a new one when it would exceed `batch_size` (a record larger than that gets a
batch of its own). A partition is *ready* when its oldest batch is full, has waited
`linger_ms`, or a flush is under way, and it has no batch in flight. That last rule
is what keeps retries from reordering: at most one batch per partition is on the
wire, and a batch that failed retriably goes back to the head of its queue
(`reenqueue`), ahead of everything appended after it. The driver owns time (every
method takes `now` in ms) and the delivery handles (opaque to this module).

For the statistics (client/stats.py) a batch knows the key+value bytes of its records
(`payload`, librdkafka's message size) from its size, which `append` keeps anyway, and the
batch in flight per partition is kept: queue gauges are sums over batches when asked for,
with no counter kept per record.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .cluster import TopicPartition

# Bytes a record costs beyond key and value in the v2 format (length, attributes,
# deltas, key/value lengths, header count): an estimate, used only for batch sizing.
RECORD_OVERHEAD = 12


@dataclass(slots=True)
class ProducerBatch:
    tp: TopicPartition
    created_ms: float
    records: list[tuple] = field(default_factory=list)  # (offset delta, timestamp, key, value, headers)
    handles: list[Any] = field(default_factory=list)
    size: int = 0
    attempts: int = 0
    encoded: bytes | None = None  # kept so a retry resends the same bytes
    full: bool = False
    retry_at: float = 0.0  # ms: a retried batch waits out its backoff
    base_sequence: int = -1  # idempotent producer: fixed at first encoding, kept by retries and splits
    header_bytes: int = 0  # the part of `size` that is record headers

    @property
    def payload(self) -> int:
        """Key + value bytes of the records (statistics: msg_size, msgq_bytes): `size` less the
        overheads `append` added, derived rather than counted on the per-record path."""
        return self.size - RECORD_OVERHEAD * len(self.records) - self.header_bytes


def _header_size(headers: tuple) -> int:
    return sum(len(k) + (len(v) if v else 0) + 4 for k, v in headers)


class Accumulator:
    def __init__(self, batch_size: int = 1_000_000, linger_ms: float = 5.0) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: dict[TopicPartition, ProducerBatch] = {}
        self.flushing = False
        self.records = 0  # appended and not yet completed (delivered or failed)

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
               headers: tuple, handle: Any, now: float) -> bool:
        """Add a record; True when this made a batch full (the sender should wake)."""
        size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            hsize = _header_size(headers)
            size += hsize
        q = self._queues.get(tp)
        if q is None:
            q = self._queues[tp] = deque()
        batch = q[-1] if q else None
        became_full = False
        if batch is None or batch.full or batch.encoded is not None or (
                batch.records and batch.size + size > self.batch_size):
            if batch is not None and not batch.full:
                batch.full = became_full = True
            batch = ProducerBatch(tp, now)
            q.append(batch)
        batch.records.append((len(batch.records), timestamp, key, value, headers))
        batch.handles.append(handle)
        batch.size += size
        if headers:
            batch.header_bytes += hsize
        self.records += 1
        if batch.size >= self.batch_size:
            batch.full = became_full = True
        return became_full

    def ready(self, now: float) -> tuple[list[TopicPartition], float | None]:
        """Partitions with a sendable batch, and the earliest time (ms) another may become ready."""
        out = []
        wake: float | None = None
        for tp, q in self._queues.items():
            if not q or tp in self._in_flight:
                continue
            head = q[0]
            if head.attempts and head.retry_at > now:
                wake = head.retry_at if wake is None else min(wake, head.retry_at)
                continue
            due = head.created_ms + self.linger_ms
            if head.full or len(q) > 1 or head.attempts or self.flushing or due <= now:
                out.append(tp)
            elif wake is None or due < wake:
                wake = due
        return out, wake

    def drain(self, tp: TopicPartition) -> ProducerBatch:
        batch = self._queues[tp].popleft()
        batch.full = True
        self._in_flight[tp] = batch
        return batch

    def complete(self, batch: ProducerBatch) -> None:
        """The batch is done (delivered or failed for good)."""
        self._in_flight.pop(batch.tp, None)
        self.records -= len(batch.records)
        q = self._queues.get(batch.tp)
        if q is not None and not q:
            del self._queues[batch.tp]

    def reenqueue(self, batch: ProducerBatch, retry_at: float = 0.0, *, failed: bool = True) -> None:
        """A retriable failure (or, with `failed=False`, a batch that did not fit in its
        request): the batch goes back to the head of its partition's queue."""
        self._in_flight.pop(batch.tp, None)
        if failed:
            batch.attempts += 1
            batch.retry_at = retry_at
        self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        return list(self._queues.get(tp, ()))

    def split(self, batch: ProducerBatch) -> None:
        """Too large for the broker: put the batch back as two halves, in order, at the head
        (Java's producer splits a batch answered MESSAGE_TOO_LARGE the same way)."""
        self._in_flight.pop(batch.tp, None)
        half = len(batch.records) // 2
        q = self._queues.setdefault(batch.tp, deque())
        for lo, hi in ((half, len(batch.records)), (0, half)):  # appendleft: second half first
            part = ProducerBatch(batch.tp, batch.created_ms, full=True, attempts=batch.attempts,
                                 base_sequence=batch.base_sequence + lo if batch.base_sequence >= 0 else -1)
            part.records = [(i, *r[1:]) for i, r in enumerate(batch.records[lo:hi])]
            part.handles = batch.handles[lo:hi]
            for _, _, key, value, headers in part.records:
                hsize = _header_size(headers) if headers else 0
                part.size += RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0) + hsize
                part.header_bytes += hsize
            q.appendleft(part)

    def expire(self, older_than_ms: float) -> list[ProducerBatch]:
        """Remove and return queued (not in-flight) batches created before the cut-off."""
        out = []
        for tp, q in self._queues.items():
            if tp in self._in_flight:
                continue
            while q and q[0].created_ms < older_than_ms:
                b = q.popleft()
                self.records -= len(b.records)
                out.append(b)
        return out

    def abort_all(self) -> list[ProducerBatch]:
        out = [b for q in self._queues.values() for b in q]
        self._queues.clear()
        self.records -= sum(len(b.records) for b in out)
        return out

    def queued_partitions(self) -> int:
        return sum(1 for q in self._queues.values() if q)

    def gauges(self) -> tuple[int, dict[TopicPartition, tuple[int, int, int]]]:
        """(key+value bytes of every record not yet completed, tp -> (records queued, their
        key+value bytes, records in flight)): the producer's queue statistics."""
        total = 0
        out: dict[TopicPartition, tuple[int, int, int]] = {}
        for tp, q in self._queues.items():
            n = size = 0
            for b in q:
                n += len(b.records)
                size += b.payload
            total += size
            out[tp] = (n, size, 0)
        for tp, b in self._in_flight.items():
            n, size, _ = out.get(tp, (0, 0, 0))
            out[tp] = (n, size, len(b.records))
            total += b.payload
        return total, out
