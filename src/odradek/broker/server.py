"""The asyncio side: accept connections, move bytes, run periodic log maintenance.

Each connection has one task that reads, splits frames with the sans-I/O FrameReader
and awaits the broker's answer to each request before handling the next, so responses
go out in request order (Kafka likewise mutes a connection while one request is in
flight); different connections are served concurrently. A client's framing error, parse
error or unsupported api closes only its own connection.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from ..protocol.framing import CLOSED, NEED_DATA, FrameReader, RemoteProtocolError
from .broker import Broker
from .errors import CloseConnection

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024


class BrokerServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[asyncio.Task] = set()
        self._maintenance: list[asyncio.Task] = []
        self.port: int | None = None

    async def start(self) -> None:
        cfg = self.broker.config
        self.server = await asyncio.start_server(self._serve, cfg.listen_host, cfg.listen_port, limit=READ_SIZE)
        self.port = self.server.sockets[0].getsockname()[1]
        if cfg.listen_port == 0:
            cfg.listen_port = self.port
        self._maintenance = [
            asyncio.create_task(self._every(1.0, self.broker.tick)),
            # Coordinator timers (session/rebalance timeouts) are checked every 50 ms: they
            # are milliseconds-precise in Kafka and cheap to poll here.
            asyncio.create_task(self._every(0.05, self.broker.coordinator_tick)),
            asyncio.create_task(self._every(cfg.retention_check_interval_ms / 1000, self.broker.retention)),
            asyncio.create_task(self._every(cfg.cleaner_backoff_ms / 1000, self.broker.compact)),
        ]

    async def _every(self, seconds: float, fn) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.connections.add(task)
        framer = FrameReader(self.broker.config.socket_request_max_bytes)
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if peer else ""
        try:
            while True:
                data = await reader.read(READ_SIZE)
                framer.receive_data(data)
                while True:
                    frame = framer.next_frame()
                    if frame is NEED_DATA:
                        break
                    if frame is CLOSED:
                        return
                    response = await self.broker.handle_frame(frame, client_host)
                    if response is not None:
                        writer.write(response)
                await writer.drain()
        except (RemoteProtocolError, CloseConnection) as exc:
            log.info("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.connections.discard(task)
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self.connections) + self._maintenance:
            t.cancel()
        await asyncio.gather(*self.connections, *self._maintenance, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()
        self.broker.close()


async def run_broker(broker: Broker, ready: asyncio.Event | None = None) -> None:
    server = BrokerServer(broker)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, port = broker.config.listen_host, server.port
    log.info("odradek broker %d listening on %s:%d, data in %s", broker.config.node_id, host, port, broker.config.data_dir)
    print(f"odradek broker listening on {host}:{port}", flush=True)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("shutting down: flushing logs")
    await server.stop()
    print("odradek broker stopped cleanly", flush=True)
