"""Delayed fetches waiting for data (Kafka's "purgatory"), without busy-waiting.

A fetch that cannot be answered yet parks a future under each partition it reads;
an append to one of those partitions (or a topic change) completes the futures, and
the fetch re-reads. The wait also ends at the fetch's deadline.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = defaultdict(set)

    async def wait(self, keys: list[tuple[str, int]], timeout_s: float) -> bool:
        """Wait until one of `keys` is notified or the timeout passes. True if notified."""
        if timeout_s <= 0:
            return False
        fut = asyncio.get_running_loop().create_future()
        for k in keys:
            self._waiters[k].add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for k in keys:
                s = self._waiters.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[k]

    def notify(self, key: tuple[str, int]) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def notify_topic(self, topic: str) -> None:
        for key in [k for k in self._waiters if k[0] == topic]:
            self.notify(key)

    @property
    def parked(self) -> int:
        return len({f for s in self._waiters.values() for f in s})
