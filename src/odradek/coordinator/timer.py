"""An injected timer for the coordinator (Kafka's CoordinatorTimer; trio's MockClock idea).

Handlers schedule work by key (`session/<group>/<member>`, ...); scheduling the same key
again replaces the deadline. Nothing here reads a clock: `due(now_ms)` hands back the
operations whose deadline has passed, in deadline order, and the runtime runs each
through the same write-then-replay path as a request. Tests and the simulator drive
`now_ms` themselves.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class Timer:
    """Keyed deadlines. Pushing back a deadline (every heartbeat does) costs a dict write:
    the heap keeps one entry per key, re-queued when it surfaces early."""

    def __init__(self) -> None:
        self._ops: dict[Any, list] = {}  # key -> [deadline, op, seq of its heap entry, deadline it is queued at]
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()

    def schedule(self, key: Any, deadline_ms: int, op: Callable) -> None:
        entry = self._ops.get(key)
        if entry is not None and entry[3] <= deadline_ms:  # its heap entry surfaces no later: no push
            entry[0] = deadline_ms
            entry[1] = op
            return
        seq = next(self._seq)
        self._ops[key] = [deadline_ms, op, seq, deadline_ms]
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, key: Any) -> None:
        self._ops.pop(key, None)

    def cancel_all(self) -> None:
        """Forget every timer (the shard resigned or is being reloaded; the load re-arms them)."""
        self._ops.clear()
        self._heap.clear()

    def deadline(self, key: Any) -> int | None:
        entry = self._ops.get(key)
        return entry[0] if entry else None

    def __contains__(self, key: Any) -> bool:
        return key in self._ops

    def __len__(self) -> int:
        return len(self._ops)

    def next_deadline(self) -> int | None:
        self._settle()
        return self._heap[0][0] if self._heap else None

    def _settle(self) -> None:
        """Drop cancelled heap entries and re-queue postponed ones until the top is real."""
        heap = self._heap
        while heap:
            queued, seq, key = heap[0]
            entry = self._ops.get(key)
            if entry is None or entry[2] != seq:
                heapq.heappop(heap)
            elif entry[0] > queued:
                heapq.heappop(heap)
                entry[2] = next(self._seq)
                entry[3] = entry[0]
                heapq.heappush(heap, (entry[0], entry[2], key))
            else:
                return

    def due(self, now_ms: int) -> list[tuple[Any, Callable]]:
        out = []
        heap = self._heap
        while True:
            self._settle()
            if not heap or heap[0][0] > now_ms:
                return out
            _, _, key = heapq.heappop(heap)
            _, op, _, _ = self._ops.pop(key)
            out.append((key, op))
