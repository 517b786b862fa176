"""A real etcd for the cluster tests, and helpers to drive EtcdBackends against it.

No mocks: each test gets its own etcd process (EtcdProcess) in its tmp_path. A missing
etcd binary fails the test with the package to install (`make test` installs it); it is
never a skip, so a green run always means the etcd backend was exercised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.cluster.etcd_process import EtcdNotFound, EtcdProcess, find_etcd
from odradek.cluster.etcd_store import EtcdBackend
from odradek.cluster.image import BrokerInfo

T = TypeVar("T")


def etcd_server(tmp_path: Path, **kwargs: Any) -> Iterator[EtcdProcess]:
    """A started EtcdProcess under tmp_path, stopped afterwards."""
    try:
        find_etcd()
    except EtcdNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    proc = EtcdProcess(tmp_path / "etcd", **kwargs).start()
    try:
        yield proc
    finally:
        proc.stop()


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    """Run one test body on a fresh loop, bounded in time."""
    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro
    return asyncio.run(bounded())


async def eventually(check: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
    """Poll `check` until it returns something truthy (returned) or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {check}")
        await asyncio.sleep(interval)


def broker_info(node_id: int, rack: str | None = None) -> BrokerInfo:
    port = 9090 + node_id
    return BrokerInfo(node_id, "127.0.0.1", port, rack,
                      endpoints=(("PLAINTEXT", "127.0.0.1", port), ("SASL_SSL", "localhost", port + 100)))


def make_backend(etcd: EtcdProcess, node_id: int, **kwargs: Any) -> EtcdBackend:
    kwargs.setdefault("request_timeout_ms", 2000)
    return EtcdBackend([etcd.endpoint], node_id, **kwargs)


async def started(etcd: EtcdProcess, node_id: int, rack: str | None = None, **kwargs: Any) -> EtcdBackend:
    backend = make_backend(etcd, node_id, **kwargs)
    await backend.start(broker_info(node_id, rack))
    return backend


async def close_all(*backends: EtcdBackend) -> None:
    await asyncio.gather(*(b.close() for b in backends))


async def controller_of(*backends: EtcdBackend, timeout: float = 5.0) -> EtcdBackend:
    """The backend that holds the controller key, once every backend's mirror agrees."""
    def agreed() -> EtcdBackend | None:
        ids = {b.image().controller for b in backends}
        winners = [b for b in backends if b.is_controller]
        return winners[0] if len(ids) == 1 and len(winners) == 1 else None
    return await eventually(agreed, timeout)
