"""Responses that wait for their records to be committed (Kafka's DeferredEvent queue).

Theory of operation (Kafka's `CoordinatorRuntime`: "the response is completed when the
records are committed"): a coordinator operation writes its records, replays them, and
its answer is held back until the partition's committed offset reaches the last offset
written so far: the operation's own records, or, for an operation that wrote nothing, the
records written before it (its answer may describe them). `DeferredQueue` keeps those
answers in offset order; `complete_up_to(offset)` releases every answer waiting for an
offset at or below it, `fail_all(error)` fails the rest (the shard resigned or reverted).

On a single node the committed offset is the log end after each write, so every answer
is released before the operation returns. In a cluster it is the high watermark.

`Deferred` is the caller's handle on one answer: done or not, a response or an error,
and callbacks for when it settles. It is sans-I/O: the broker wraps it in an asyncio
future, the simulator and tests read it directly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any


class Deferred:
    __slots__ = ("_callbacks", "done", "error", "response")

    def __init__(self) -> None:
        self.done = False
        self.response: Any = None
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[Deferred], None]] = []

    def complete(self, response: Any) -> None:
        if not self.done:
            self.done, self.response = True, response
            self._settled()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done, self.error = True, error
            self._settled()

    def _settled(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def add_done_callback(self, fn: Callable[[Deferred], None]) -> None:
        if self.done:
            fn(self)
        else:
            self._callbacks.append(fn)

    def result(self) -> Any:
        """The response; raises the error it failed with, or RuntimeError if it is still waiting."""
        if not self.done:
            raise RuntimeError("the response waits for its records to be committed")
        if self.error is not None:
            raise self.error
        return self.response


class DeferredQueue:
    """Answers keyed by the offset they wait for, released in offset order."""

    def __init__(self) -> None:
        self._queue: deque[tuple[int, Callable[[], None], Callable[[BaseException], None]]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, offset: int, on_commit: Callable[[], None], on_fail: Callable[[BaseException], None]) -> None:
        # Offsets only grow within a shard's leadership: a write's last offset is above
        # every earlier one, and a failed write adds nothing.
        assert not self._queue or self._queue[-1][0] <= offset, "deferred answers out of offset order"
        self._queue.append((offset, on_commit, on_fail))

    def complete_up_to(self, offset: int) -> int:
        released = 0
        while self._queue and self._queue[0][0] <= offset:
            self._queue.popleft()[1]()
            released += 1
        return released

    def fail_all(self, error: BaseException) -> None:
        queue, self._queue = self._queue, deque()
        for _offset, _on_commit, on_fail in queue:
            on_fail(error)
