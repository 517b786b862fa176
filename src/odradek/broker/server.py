"""The asyncio side: accept connections, move bytes, run periodic log maintenance.

Each connection is a BufferedProtocol plus one task that takes its frames in order and
awaits the broker's answer to each before handling the next, so responses go out in
request order (Kafka likewise handles one request per connection at a time); different
connections are served concurrently. A client's framing error, parse error or
unsupported api closes only its own connection.

Every decision about connections (admit or refuse, how many bytes to read, when to
pause reading, when to close an idle or stalled connection) is made by the pure policy
in connections.py; this module only drives it: it sizes each read with the buffer it
hands the transport, pauses and resumes reading, runs the expiry timer and closes.
Between two pipelined frames the task yields to the event loop, so a connection with
thousands of requests buffered cannot keep the others waiting; a connection whose
responses are not being read is muted (not read, its frames not handled) until its
transport drains. A response for a peer that has gone away is dropped quietly.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import logging
import signal
import socket
import time
import weakref

from ..protocol.framing import CLOSED, NEED_DATA, RemoteProtocolError
from . import maintenance
from ..security.authentication import Authenticator, SaslConfig, Session, sasl_config
from ..security.interbroker import client_security
from ..security.tls import peer_principal, server_context
from .broker import Broker
from .connections import READ_SIZE, UNSENT_HIGH, ConnectionState, ConnectionTable, Limits
from .errors import CloseConnection

log = logging.getLogger(__name__)

__all__ = ["READ_SIZE", "BrokerServer", "run_broker"]


def _handshake_failed(stats, listener: str) -> None:
    stats.auth_failed[(listener, "SSL")] += 1


class _Connection(asyncio.BufferedProtocol):
    """The transport side of one connection; its state lives in a ConnectionState."""

    def __init__(self, server: BrokerServer, listener=None) -> None:
        self.server = server
        self.listener = listener
        self.session: Session | None = None
        self.transport: asyncio.Transport | None = None
        self.state: ConnectionState | None = None
        self.task: asyncio.Task | None = None
        self.peer = None
        self.client_host = ""
        self._reading = True
        self._waiter: asyncio.Future | None = None
        self.handshake: weakref.finalize | None = None  # TLS listeners with metrics: see BrokerServer._accepted

    # --- transport callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.handshake is not None and self.handshake.detach() is not None:
            stats = self.server.broker.stats
            if not self.listener.sasl:  # SASL_SSL: the SASL exchange is the authentication counted
                stats.auth_succeeded[(self.listener.name, "SSL")] += 1
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        host = self.peer[0] if self.peer else ""
        server = self.server
        now = time.monotonic()
        state, refusal = server.table.admit(host, now)
        stats = server.broker.stats
        if stats is not None:
            if state is None:
                stats.connections_refused += 1
            else:
                stats.connections_created[self.listener.name if self.listener else "PLAINTEXT"] += 1
        if state is None:
            # Kafka closes a connection over max.connections.per.ip at once; over
            # max.connections it stops accepting, which asyncio cannot do: close it too.
            held = server.table.refusals.ready(now)
            if held is not None:
                more = f" ({held} more refused since the last message)" if held else ""
                log.info("refusing connection from %s: %s%s", self.peer, refusal, more)
            transport.close()
            return
        state.owner = self
        self.state = state
        self.client_host = f"/{host}" if self.peer else ""
        self.session = self.server.session_for(self.listener, transport)
        # Responses queued beyond UNSENT_HIGH mute the connection (pause_writing below).
        transport.set_write_buffer_limits(high=UNSENT_HIGH)
        server._conns.add(self)
        self.task = asyncio.get_running_loop().create_task(self._process())

    def get_buffer(self, sizehint: int) -> memoryview:
        # The buffer's length is the policy's read allowance: the transport never reads
        # more than the memory pool lets this connection hold. Reading is paused whenever
        # the allowance is 0, so the 1-byte floor is only a guard (an empty buffer is a
        # fatal error for the transport).
        n = self.state.read_allowance() if self.state is not None else 0
        return self.server._scratch[: max(n, 1)]

    def buffer_updated(self, nbytes: int) -> None:
        state = self.state
        if state is None or state.closed:
            return
        state.received(self.server._scratch[:nbytes], time.monotonic())
        self._sync_reading()
        self.server._apply_pool()  # this read may have used the last of the pool's room
        self._wake()

    def eof_received(self) -> bool:
        if self.state is not None:
            self.state.received(b"", time.monotonic())
            self._sync_reading()
            self._wake()
        return True  # keep the transport open to write the answers still due

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._conns.discard(self)
        if self.state is not None:
            stats = self.server.broker.stats
            if stats is not None:
                stats.connections_closed[self.listener.name if self.listener else "PLAINTEXT"] += 1
            self.state.close()
            # Break the state <-> connection cycle so the buffers go back to the allocator
            # now, not at the next full collection (a closed 50 MB partial frame stayed
            # resident until then).
            self.state.owner = None
            self.server._apply_pool()
        self._wake()

    def pause_writing(self) -> None:
        if self.state is not None:
            self.state.set_write_blocked(True)
            self._sync_reading()

    def resume_writing(self) -> None:
        if self.state is not None:
            self.state.set_write_blocked(False)
            self._sync_reading()
            self.server._apply_pool()  # unmuted into a full pool: blocked for memory
        self._wake()

    # --- driving the policy ---------------------------------------------------------

    def _sync_reading(self) -> None:
        state, transport = self.state, self.transport
        if state is None or transport is None or transport.is_closing():
            return
        want = state.wants_read()
        if want != self._reading:
            if want:
                transport.resume_reading()
            else:
                transport.pause_reading()
            self._reading = want
            state.set_reading(want, time.monotonic())

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if self.state.closed or transport.is_closing():
            return  # the peer has gone: nobody to answer
        try:
            transport.write(data)
        except (RuntimeError, OSError) as exc:
            # uvloop raises RuntimeError("unable to perform operation on <TCPTransport
            # closed=True>") when the peer's close has not been reported yet.
            log.debug("dropping response to %s: %s", self.peer, exc)
            self.abort()
            return
        self.state.wrote(time.monotonic())

    def abort(self) -> None:
        """Close at once, discarding unsent responses (they have no reader)."""
        if self.transport is not None:
            self.transport.abort()

    def expire(self) -> None:
        """Close for a policy reason: gracefully (as Kafka closes an idle connection)
        unless responses are stuck unsent, which close() would wait for forever."""
        transport = self.transport
        try:
            stuck = transport.get_write_buffer_size() > 0
        except RuntimeError:
            stuck = True
        if stuck:
            transport.abort()
        elif not transport.is_closing():
            transport.close()

    async def _process(self) -> None:
        state, broker, pool = self.state, self.server.broker, self.server.table.pool
        clock = time.monotonic
        try:
            while not state.closed:
                frame = state.next_frame()
                if frame is NEED_DATA:
                    if not self._reading:
                        self._sync_reading()
                    await self._wait()
                    continue
                if frame is CLOSED:
                    return
                if not self._reading:
                    self._sync_reading()  # the backlog shrank: reading may resume
                if pool._changed:
                    self.server._apply_pool()
                try:
                    response = await broker.handle_frame(frame, self.client_host, self.session)
                finally:
                    state.frame_done(clock())
                    if pool._changed:
                        self.server._apply_pool()
                if response is not None:
                    self._write(response)
                # Muted: the client is not reading its responses. Handle nothing more
                # (and read nothing, see pause_writing) until the transport drains.
                while state.write_blocked and not state.closed:
                    await self._wait()
                if state.has_frames:
                    # One request per connection per turn, as Kafka's request queue
                    # interleaves connections: without this a client with thousands of
                    # frames buffered holds the loop until all are answered (3.9 s
                    # measured with 20 such clients). Costs a loop iteration per frame
                    # only when frames are pipelined, where it is cheap next to a request.
                    await asyncio.sleep(0)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            if exc.response is not None:
                if exc.delay_s:
                    await asyncio.sleep(exc.delay_s)
                self._write(exc.response)
        except RemoteProtocolError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug of ours: this connection only
            log.exception("connection from %s failed", self.peer)
        finally:
            if not self.transport.is_closing():
                self.transport.close()


class BrokerServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.server: asyncio.AbstractServer | None = None
        self.servers: list[asyncio.AbstractServer] = []  # one per listener, the inter-broker one first
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self._sasl: dict[str, SaslConfig] = {}  # SASL listeners' settings
        self._conns: set[_Connection] = set()
        self._maintenance: list[asyncio.Task] = []
        self.port: int | None = None
        self.table: ConnectionTable | None = None
        # One read buffer for every connection: a read is copied into the connection's
        # FrameReader in the callback that follows it, before any other read happens.
        self._scratch = memoryview(bytearray(READ_SIZE))
        self.metrics = None  # observability/exporter.MetricsServer, when metrics.listener is set
        self.console = None  # observability/console.Console, when console.enable
        broker.requests_in_flight = self.requests_in_flight

    @property
    def connections(self) -> set[asyncio.Task]:
        return {c.task for c in self._conns if c.task is not None}

    def requests_in_flight(self) -> int:
        """Requests being handled now, one per connection at most (the connection state's
        own flag, set from next_frame to frame_done): read when /metrics is scraped rather
        than counted on every request."""
        return sum(1 for c in self._conns if c.state is not None and c.state.in_flight)

    def _accepted(self, listener) -> _Connection:
        conn = _Connection(self, listener)
        stats = self.broker.stats
        if listener.tls and stats is not None:
            # asyncio hands a TLS connection to its protocol (connection_made) only once the
            # handshake is done; one that fails never reaches it, and the protocol object is
            # dropped. Kafka counts a failed SSL handshake in failed-authentication-total, so
            # a protocol freed without having been made is one (counted when it is freed).
            conn.handshake = weakref.finalize(conn, _handshake_failed, stats, listener.name)
        return conn

    async def start(self) -> None:
        cfg = self.broker.config
        limits = Limits.from_config(cfg, _resolve_overrides(cfg.max_connections_per_ip_overrides))
        self.table = ConnectionTable(limits)
        loop = asyncio.get_running_loop()
        props = {**cfg.extra, **cfg.listener_props}
        for listener in cfg.effective_listeners():
            # Settings are checked before anything listens: a bad keystore or JAAS entry
            # stops the broker at start-up, as Kafka's does.
            context = server_context(props, listener) if listener.tls else None
            if listener.sasl:
                self._sasl[listener.name] = sasl_config(props, listener, self.broker.scram_credential)
            server = await loop.create_server(lambda lst=listener: self._accepted(lst), listener.host,
                                              listener.port, ssl=context)
            listener.port = self.ports[listener.name] = server.sockets[0].getsockname()[1]
            self.servers.append(server)
        self.server = self.servers[0]
        self.port = self.ports[cfg.effective_listeners()[0].name]
        cfg.listen_port = self.port
        if not self.broker.metadata.single_node:
            # Other brokers are reached on their inter-broker listener with its security.
            self.broker.inter_broker_security = client_security(props, cfg.effective_listeners()[0])
        # Join the cluster now that the port is known (the registration carries it).
        await self.broker.start()
        await self._start_http()
        self._maintenance = [
            # Kafka's isr-expiration task: every replica.lag.time.max.ms / 2.
            asyncio.create_task(self._every(cfg.replica_lag_time_max_ms / 2000, self.broker.replicas.tick)),
            asyncio.create_task(self._every(1.0, self.broker.tick)),
            # Coordinator timers (session/rebalance timeouts) are checked every 50 ms: they
            # are milliseconds-precise in Kafka and cheap to poll here.
            asyncio.create_task(self._every(0.05, self.broker.coordinator_tick)),
            # Storage upkeep (maintenance.py): fsync rolled segments off the loop, checkpoint
            # recovery points, remove deleted topics' directories, retention in slices.
            asyncio.create_task(maintenance.retention(self.broker, cfg.retention_check_interval_ms)),
            asyncio.create_task(maintenance.flush_rolled(self.broker)),
            asyncio.create_task(maintenance.checkpoint(self.broker)),
            asyncio.create_task(maintenance.checkpoint_high_watermarks(self.broker)),
            asyncio.create_task(maintenance.purge_deleted(self.broker)),
            asyncio.create_task(maintenance.compaction(self.broker)),
            # Kafka SocketServer: connections.max.idle.ms; odradek: request.timeout.ms.
            asyncio.create_task(self._every(limits.check_interval(), self._expire)),
        ]

    async def _start_http(self) -> None:
        """/metrics (observability/exporter.py) and the console (observability/console.py)."""
        cfg = self.broker.config
        if cfg.metrics_listener and self.broker.stats is not None:
            from ..observability.exporter import MetricsServer

            metrics = MetricsServer(self.broker, cfg.metrics_listener)
            if metrics.start(asyncio.get_running_loop()):
                self.metrics = metrics
                host = cfg.metrics_listener.rpartition(":")[0]
                print(f"odradek metrics on http://{host}:{metrics.port}/metrics", flush=True)
        if cfg.console_enable and cfg.console_listener:
            from ..observability.console import start_console

            self.console = await start_console(cfg.console_listener, self.broker)
            if self.console is not None:
                print(f"odradek console on {self.console.url}", flush=True)

    def session_for(self, listener, transport) -> Session:
        """A new connection's session: on SASL listeners authentication starts; on SSL
        ones the principal is the client certificate's subject (security/tls.py)."""
        if listener is None or listener.protocol == "PLAINTEXT":
            return Session(listener.name if listener else "PLAINTEXT")
        if listener.sasl:
            return Session(listener.name, Authenticator(self._sasl[listener.name]))
        return Session(listener.name, Authenticator(None, peer_principal(transport.get_extra_info("ssl_object"))))

    async def _every(self, seconds: float, fn) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def _apply_pool(self) -> None:
        """Pause the connections the memory pool has just blocked, resume those it has
        granted memory to."""
        for state in self.table.pool.take_changed():
            if state.owner is not None:
                state.owner._sync_reading()

    def _expire(self) -> None:
        table = self.table
        now = time.monotonic()
        for state in table:
            conn = state.owner
            if conn is not None and conn.transport is not None:
                try:
                    unsent = conn.transport.get_write_buffer_size()
                except RuntimeError:  # uvloop: a transport being torn down
                    continue
                state.note_unsent(unsent, now)
        for state, reason in table.expired(now):
            conn = state.owner
            if reason.startswith("idle"):
                log.debug("closing connection from %s: %s", conn.peer, reason)
            else:
                held = table.timeouts.ready(now)
                if held is not None:
                    more = f" ({held} more since the last message)" if held else ""
                    log.info("closing connection from %s: %s%s", conn.peer, reason, more)
            conn.expire()
            # Release its memory now rather than when the transport reports the loss.
            state.close()
        self._apply_pool()

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        tasks = list(self.connections)
        for t in tasks + self._maintenance:
            t.cancel()
        await asyncio.gather(*tasks, *self._maintenance, return_exceptions=True)
        for conn in list(self._conns):
            conn.abort()
        for server in self.servers:
            await server.wait_closed()
        if self.console is not None:
            await self.console.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        await self.broker.stop()


def _resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """max.connections.per.ip.overrides keyed by address: Kafka resolves host names in
    the setting (InetAddress.getByName) once, at start-up; so does odradek."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            ipaddress.ip_address(host)
            out[host] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); entry ignored", host, exc)
            continue
        for info in infos:
            out.setdefault(info[4][0], count)
    return out


async def run_broker(broker: Broker, ready: asyncio.Event | None = None) -> None:
    server = BrokerServer(broker)
    await server.start()
    # What start-up loaded lives as long as the process: keep it out of the collector's
    # full passes (see maintenance.freeze_long_lived).
    gc.freeze()
    freezer = asyncio.create_task(maintenance.freeze_long_lived(broker))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, port = broker.config.listen_host, server.port
    log.info("odradek broker %d listening on %s:%d, data in %s", broker.config.node_id, host, port, broker.config.data_dir)
    for listener in broker.config.effective_listeners()[1:]:
        log.info("listener %s (%s) on %s:%d", listener.name, listener.protocol, listener.host, listener.port)
        print(f"odradek listener {listener.name} ({listener.protocol}) on {listener.host}:{listener.port}", flush=True)
    print(f"odradek broker listening on {host}:{port}", flush=True)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("shutting down: flushing logs")
    freezer.cancel()
    await server.stop()
    print("odradek broker stopped cleanly", flush=True)
