"""Cooperative time slices for handlers that loop over thousands of partitions.

A request may name 10,000 partitions (a Produce to many new partitions, a Metadata for
every topic). Handling it in one go holds the event loop and every other client for
as long; a handler that calls `await slice.tick()` per item gives the loop a turn each
`ms` milliseconds instead, and its own response is still the next one on its connection.
"""

from __future__ import annotations

import asyncio
import time


class TimeSlice:
    __slots__ = ("ms", "_deadline")

    def __init__(self, ms: float = 5.0) -> None:
        self.ms = ms
        self._deadline = time.perf_counter() + ms / 1000

    async def tick(self) -> None:
        if time.perf_counter() >= self._deadline:
            await asyncio.sleep(0)
            self._deadline = time.perf_counter() + self.ms / 1000
