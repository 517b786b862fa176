"""A small synchronous facade over the asyncio client, for scripts and the CLI.

Theory of operation: one daemon thread per process runs an event loop; each facade
method submits the matching coroutine to it and waits. Producer.send is the hot path,
so it does not pay a thread hop per record: records go into a queue that a task on the
loop drains, and each returns a light `DeliveryFuture`. Rebalance callbacks must
run on the caller's thread, inside `poll`/`close` as Java runs them, and may call back
into the consumer (commit, seek): the async consumer's listener is a proxy that hands
each callback to the thread blocked in poll and waits for it to finish there, so the
loop is free to serve the callback's own requests.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from typing import Any, Self

from .admin import AsyncAdmin
from .consumer import AsyncConsumer, RebalanceListener
from .producer import AsyncProducer, RecordMetadata, _bytes

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="odradek-client", daemon=True).start()
        return _loop


def run(coro, timeout: float | None = None) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, loop()).result(timeout)


async def _construct(cls, *args, **kwargs):
    return cls(*args, **kwargs)


class Producer:
    def __init__(self, bootstrap_servers, **config) -> None:
        self._p: AsyncProducer = run(_construct(AsyncProducer, bootstrap_servers, **config))
        run(self._p.start())
        self._queue: deque = deque()
        self._draining = False
        self._qlock = threading.Lock()

    def send(self, topic: str, value=None, key=None, *, partition: int | None = None,
             timestamp_ms: int | None = None, headers=None) -> DeliveryFuture:
        """Queue a record; the future resolves to RecordMetadata."""
        fut = DeliveryFuture()
        while len(self._queue) >= self._p.max_buffered_records:
            time.sleep(0.0005)  # back-pressure, like Java's send blocking on buffer.memory
        with self._qlock:
            self._queue.append((topic, value, key, partition, timestamp_ms, headers, fut))
            if self._draining:
                return fut
            self._draining = True
        loop().call_soon_threadsafe(self._start_drain)
        return fut

    def _start_drain(self) -> None:
        asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        p = self._p
        counts = p.client.cluster.partition_count
        while True:
            with self._qlock:
                if not self._queue:
                    self._draining = False
                    return
                items = list(self._queue)
                self._queue.clear()
            for topic, value, key, partition, timestamp_ms, headers, fut in items:
                try:
                    n = counts(topic)
                    if n is None or p.acc.records >= p.max_buffered_records:
                        n = await p.room_for(topic)  # the slow path: metadata or back-pressure
                    p.append(topic, value, key, partition, timestamp_ms, headers, fut, n)
                except Exception as exc:  # noqa: BLE001 - handed to the caller's future
                    fut.set_exception(exc)

    def _drained(self) -> None:
        """Wait until every record `send` queued is handed to the async producer."""
        while True:
            with self._qlock:
                idle = not self._queue and not self._draining
            if idle:
                return
            run(asyncio.sleep(0.001))

    def flush(self, timeout: float | None = None) -> None:
        self._drained()
        run(self._p.flush(timeout))

    def metrics(self) -> dict:
        """AsyncProducer.metrics(), taken on the client's loop (where the counters move),
        with the records `send` queued here and not yet handed over counted in msg_cnt/msg_size."""
        async def take() -> dict:
            m = self._p.metrics()
            with self._qlock:
                waiting = [(k, v) for _t, v, k, *_rest in self._queue]
            m["msg_cnt"] += len(waiting)
            m["msg_size"] += sum(len(_bytes(k) or b"") + len(_bytes(v) or b"") for k, v in waiting)
            return m
        return run(take())

    # --- transactions (KIP-98): records sent before a commit or abort belong to it ---

    def init_transactions(self, timeout: float | None = None) -> None:
        run(self._p.init_transactions(timeout))

    def begin_transaction(self) -> None:
        self._drained()
        run(_sync(self._p.begin_transaction))

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout: float | None = None) -> None:
        run(self._p.send_offsets_to_transaction(offsets, group_metadata, timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._drained()
        run(self._p.commit_transaction(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._drained()
        run(self._p.abort_transaction(timeout))

    def close(self, timeout: float | None = 30.0) -> None:
        self.flush(timeout)
        run(self._p.close(timeout))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_waiters = threading.Lock()


class DeliveryFuture:
    """What the synchronous Producer.send returns: a future far lighter than
    concurrent.futures.Future (no Condition per record). The loop thread completes it;
    a waiting thread gets an Event only when it actually has to wait."""

    __slots__ = ("_callbacks", "_done", "_event", "_exc", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result = self._exc = self._event = self._callbacks = None

    def set_result(self, result) -> None:
        self._result = result
        self._finish()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._finish()

    def _finish(self) -> None:
        self._done = True  # before looking for a waiter: see result()
        with _waiters:
            event, callbacks = self._event, self._callbacks
        if event is not None:
            event.set()
        for fn in callbacks or ():
            fn(self)

    def done(self) -> bool:
        return self._done

    def _wait(self, timeout: float | None) -> None:
        if self._done:
            return
        with _waiters:
            if not self._done and self._event is None:
                self._event = threading.Event()
            event = self._event
        if event is not None and not event.wait(timeout):
            raise TimeoutError("record not delivered yet")

    def result(self, timeout: float | None = None):
        self._wait(timeout)
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._exc

    def add_done_callback(self, fn) -> None:
        """`fn(future)` runs when the record is delivered (on the client's loop thread)."""
        with _waiters:
            if not self._done:
                self._callbacks = [*(self._callbacks or ()), fn]
                return
        fn(self)


class _CallerThreadListener(RebalanceListener):
    """Runs the user's (synchronous) listener on the thread blocked in a facade call."""

    def __init__(self, owner: Consumer, listener: RebalanceListener) -> None:
        self.owner, self.listener = owner, listener

    async def _hand_over(self, name: str, partitions) -> None:
        done = asyncio.get_running_loop().create_future()
        self.owner._callbacks.put((getattr(self.listener, name), partitions, done))
        await done

    async def on_partitions_revoked(self, partitions):
        await self._hand_over("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions):
        await self._hand_over("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions):
        await self._hand_over("on_partitions_lost", partitions)


class Consumer:
    def __init__(self, bootstrap_servers, **config) -> None:
        self._c: AsyncConsumer = run(_construct(AsyncConsumer, bootstrap_servers, **config))
        run(self._c.start())
        self._callbacks: queue.Queue = queue.Queue()

    def _call(self, coro, timeout: float | None = None):
        """Run `coro` on the loop, serving listener callbacks on this thread meanwhile."""
        fut = asyncio.run_coroutine_threadsafe(coro, loop())
        # The call's completion also lands in the queue, so this thread sleeps until there
        # is a callback to run or the result is in: no polling delay.
        fut.add_done_callback(lambda _f: self._callbacks.put(None))
        while True:
            item = self._callbacks.get()
            if item is None:
                if fut.done():
                    return fut.result()
                continue  # a stale wake-up from an earlier call
            fn, partitions, done = item
            try:
                fn(partitions)
            except Exception as exc:  # noqa: BLE001 - reported through the awaiting coroutine
                loop().call_soon_threadsafe(_settle, done, exc)
            else:
                loop().call_soon_threadsafe(_settle, done, None)

    def subscribe(self, topics=None, *, pattern: str | None = None, listener: RebalanceListener | None = None):
        proxy = _CallerThreadListener(self, listener or RebalanceListener())

        async def go():
            self._c.subscribe(topics, pattern=pattern, listener=proxy)
        run(go())

    def assign(self, partitions) -> None:
        run(_sync(self._c.assign, partitions))

    def assignment(self):
        return self._c.assignment()

    def poll(self, timeout_ms: float = 0, max_records: int | None = None):
        return self._call(self._c.poll(timeout_ms, max_records))

    def seek(self, tp, offset: int) -> None:
        run(_sync(self._c.seek, tp, offset))

    def seek_to_beginning(self, tps=None) -> None:
        run(_sync(self._c.seek_to_beginning, tps))

    def seek_to_end(self, tps=None) -> None:
        run(_sync(self._c.seek_to_end, tps))

    def position(self, tp) -> int:
        return self._call(self._c.position(tp))

    def pause(self, tps) -> None:
        run(_sync(self._c.pause, tps))

    def resume(self, tps) -> None:
        run(_sync(self._c.resume, tps))

    def paused(self):
        return self._c.paused()

    def commit(self, offsets=None) -> None:
        self._call(self._c.commit(offsets))

    def group_metadata(self):
        """What `Producer.send_offsets_to_transaction` needs to fence this member's commits (KIP-447)."""
        return self._c.group_metadata()

    def committed(self, tps):
        return self._call(self._c.committed(tps))

    def end_offsets(self, tps):
        return self._call(self._c.end_offsets(tps))

    def beginning_offsets(self, tps):
        return self._call(self._c.beginning_offsets(tps))

    def offsets_for_times(self, timestamps):
        return self._call(self._c.offsets_for_times(timestamps))

    def unsubscribe(self) -> None:
        self._call(self._c.unsubscribe())

    def close(self, timeout: float = 30.0) -> None:
        self._call(self._c.close(timeout))

    def metrics(self) -> dict:
        """AsyncConsumer.metrics(), taken on the client's loop (where the counters move)."""
        return run(_sync(self._c.metrics))

    @property
    def member(self):
        return self._c.member

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _settle(fut: asyncio.Future, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


async def _sync(fn, *args):
    return fn(*args)


class Admin:
    """Every AsyncAdmin coroutine method, called synchronously."""

    def __init__(self, bootstrap_servers, **config) -> None:
        self._a: AsyncAdmin = run(_construct(AsyncAdmin, bootstrap_servers, **config))
        run(self._a.start())

    def __getattr__(self, name: str):
        attr = getattr(self._a, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr
        return lambda *a, **kw: run(attr(*a, **kw))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Admin", "Consumer", "DeliveryFuture", "Producer", "RecordMetadata", "loop", "run"]
