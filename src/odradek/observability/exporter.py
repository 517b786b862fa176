"""/metrics over HTTP: prometheus-client's own server, in a thread, scraping on the loop.

prometheus-client serves the text format (and OpenMetrics when asked) from a daemon
thread (`start_http_server`). The broker's state lives on its event loop, which nothing
else may read while it runs, so the registry's collector hands each scrape to the loop
(`run_coroutine_threadsafe`) and waits for the families it builds there; a scrape costs
the loop one callback, never a lock on the request path. The process collectors (CPU,
memory, open files, GC) read /proc and run in the server's thread.

`metrics.listener` is HOST:PORT (default 127.0.0.1:9404; port 0 takes any free port;
empty turns metrics off). A port already taken is logged and the broker serves Kafka
without metrics rather than not at all.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry
from prometheus_client.registry import Collector

from .collector import BrokerCollector

log = logging.getLogger(__name__)
SCRAPE_TIMEOUT_S = 10.0


class _OnLoop(Collector):
    """Runs another collector on the event loop and returns what it yielded."""

    def __init__(self, inner: Collector, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = inner
        self.loop = loop

    def collect(self):
        async def gather():
            return list(self.inner.collect())

        return asyncio.run_coroutine_threadsafe(gather(), self.loop).result(SCRAPE_TIMEOUT_S)


def registry_for(broker, loop: asyncio.AbstractEventLoop | None = None) -> CollectorRegistry:
    """A registry with the broker's collector (on `loop` when given, else called in place)
    and the process collectors."""
    registry = CollectorRegistry(auto_describe=False)
    inner = BrokerCollector(broker)
    registry.register(_OnLoop(inner, loop) if loop is not None else inner)
    for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(_Shared(c))
    return registry


class _Shared(Collector):
    # The default collectors are registered in prometheus-client's global REGISTRY; a
    # wrapper lets several registries (several brokers in one test process) share them.
    def __init__(self, inner) -> None:
        self.inner = inner

    def collect(self):
        return self.inner.collect()


class MetricsServer:
    def __init__(self, broker, listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self.httpd = None
        self.port: int | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        from prometheus_client import start_http_server

        host, _, port = self.listener.rpartition(":")
        try:
            self.httpd, _thread = start_http_server(int(port), host.strip("[]"), registry_for(self.broker, loop))
        except OSError as exc:
            log.warning("metrics.listener %s: %s; serving without /metrics", self.listener, exc)
            return False
        self.port = self.httpd.server_port
        return True

    async def stop(self) -> None:
        httpd, self.httpd = self.httpd, None
        if httpd is not None:
            await asyncio.to_thread(httpd.shutdown)  # waits for serve_forever's next poll
            httpd.server_close()
