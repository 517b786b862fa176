"""The asyncio driver for connections: bootstrap, per-broker connections, metadata,
coordinator lookup, version negotiation, timeouts and retries.

Theory of operation: `BrokerConnection` pairs a socket with a `WireConnection`; one
reader task resolves each request's future in order. A request that times out, or
a connection that breaks, fails every request in flight on that connection and
closes it (responses are ordered, so a connection with a lost response is
unusable); the next request to that broker opens a new one. `Client` owns one
connection per broker (keyed by node id; bootstrap addresses until the first
Metadata names them), the `ClusterView`, and coordinator lookups. `Client.call`
retries retriable failures with exponential backoff until `retries` or the
caller's deadline run out, refreshing metadata or rediscovering the coordinator when
the error says the target moved.

Statistics (`stats`, issue 21): each connection counts into the `stats.BrokerStats` of
its connection key, which outlives reconnections: requests and bytes out per write,
responses per answer, bytes in per read, round-trip times from a send-time queue that
mirrors the wire's queue of outstanding requests (answers come in order), and state
changes. A handful of integer additions per request, none per record.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from .cluster import ClusterView, TopicPartition
from .errors import (
    COORDINATOR_MOVED,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedApiError,
)
from .security import ClientSecurity
from .stats import BrokerStats, ClientStats
from .versions import Api, negotiate
from .wire import WireConnection

log = logging.getLogger(__name__)

Body = dict | Callable[[int], dict]
PLAINTEXT = ClientSecurity()


def parse_bootstrap(servers: str | list[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers")
    return out


class BrokerConnection:
    """One TCP connection to one broker, with negotiated API versions."""

    def __init__(self, host: str, port: int, client_id: str, request_timeout: float,
                 security: ClientSecurity | None = None, stats: BrokerStats | None = None) -> None:
        self.host, self.port = host, port
        # The broker's own connections (replica fetcher, markers) count into a private entry.
        self.stats = stats if stats is not None else BrokerStats(f"{host}:{port}", -1, f"{host}:{port}")
        self._sent_at: deque[float] = deque()  # send time of each request awaiting an answer, in order
        self.security = security or PLAINTEXT
        self.reauth_at: float | None = None  # KIP-368: replace the connection from then on
        self.wire = WireConnection(client_id)
        self.request_timeout = request_timeout
        self.versions: dict[int, int | UnsupportedApiError] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiters: dict[int, asyncio.Future] = {}
        self._task: asyncio.Task | None = None
        self.closed = False
        self.error: Exception | None = None

    async def open(self, timeout: float) -> None:
        st = self.stats
        st.connects += 1
        st.set_state("CONNECT", time.monotonic())
        try:
            self._reader, self._writer = await asyncio.wait_for(self._connect(), timeout)
        except (TimeoutError, OSError) as exc:
            self.closed = True
            st.set_state("DOWN", time.monotonic())
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        self._connected()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            st.set_state("APIVERSION_QUERY", time.monotonic())
            await self._negotiate()
            if self.security.sasl:
                st.set_state("AUTH_HANDSHAKE", time.monotonic())
                await self._authenticate()
        except BaseException as exc:
            self.close(exc if isinstance(exc, KafkaError) else None)  # do not leak the socket
            raise
        if not self.closed:
            st.set_state("UP", time.monotonic())

    def _connected(self) -> None:
        st = self.stats
        st.wire = self.wire
        st.last_tx = st.last_rx = 0.0  # librdkafka's txidle/rxidle are per connection

    async def _negotiate(self) -> None:
        # KIP-511: ask with v3; a broker that does not know v3 answers with v0's layout
        # and error UNSUPPORTED_VERSION plus its ranges, then we ask again with v0.
        resp = None
        for version in (3, 0):
            try:
                resp = await self._send(Api.API_VERSIONS, version, {
                    "client_software_name": "odradek", "client_software_version": "0.1.0"})
            except KafkaConnectionError:
                if version == 0:
                    raise
                await self._reopen()
                continue
            if resp.error_code == ErrorCode.none:
                break
            if resp.error_code != ErrorCode.unsupported_version or version == 0:
                raise KafkaError(resp.error_code, f"ApiVersions from {self.host}:{self.port}")
        self.versions = negotiate({int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys})

    def _connect(self):
        s = self.security
        if not s.tls:
            return asyncio.open_connection(self.host, self.port)
        return asyncio.open_connection(self.host, self.port, ssl=s.ssl_context, server_hostname=self.host)

    async def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done (client/security.py)."""
        mechanism = self.security.mechanism
        resp = await self._send(Api.SASL_HANDSHAKE, self.version(Api.SASL_HANDSHAKE), {"mechanism": mechanism})
        if resp.error_code != ErrorCode.none:
            raise KafkaError(resp.error_code, f"{self.host}:{self.port} does not offer SASL/{mechanism} "
                                              f"(it offers {', '.join(resp.mechanisms)})")
        exchange = self.security.exchange()
        token: bytes | None = exchange.first()
        lifetime = 0.0
        while token is not None:
            resp = await self._send(Api.SASL_AUTHENTICATE, self.version(Api.SASL_AUTHENTICATE), {"auth_bytes": token})
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, resp.error_message or f"SASL/{mechanism} authentication failed")
            session = getattr(resp, "session_lifetime", None)
            lifetime = session.total_seconds() if session is not None else 0.0
            token = exchange.step(bytes(resp.auth_bytes))
        self.reauth_at = time.monotonic() + 0.9 * lifetime if lifetime > 0 else None

    @property
    def expiring(self) -> bool:
        """KIP-368: the session is near its end; a fresh connection authenticates again."""
        return self.reauth_at is not None and time.monotonic() >= self.reauth_at

    async def _reopen(self) -> None:
        self.close(None)
        self.closed = False
        self.wire = WireConnection(self.wire.client_id)
        self._sent_at.clear()
        self.stats.connects += 1
        self.stats.set_state("CONNECT", time.monotonic())
        self._reader, self._writer = await self._connect()
        self._connected()
        self.stats.set_state("APIVERSION_QUERY", time.monotonic())
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    def version(self, api: int) -> int:
        v = self.versions[api]
        if isinstance(v, UnsupportedApiError):
            raise v
        return v

    async def request(self, api: int, body: Body, *, timeout: float | None = None, expect_response: bool = True):
        version = self.version(api)
        return await self._send(api, version, body(version) if callable(body) else body,
                                timeout=timeout, expect_response=expect_response)

    async def _send(self, api: int, version: int, body: dict, *, timeout: float | None = None,
                    expect_response: bool = True):
        if self.closed:
            raise KafkaConnectionError(f"connection to {self.host}:{self.port} is closed")
        correlation_id, data = self.wire.request(api, version, body, expect_response=expect_response)
        now = time.monotonic()
        fut = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._waiters[correlation_id] = fut
            self._sent_at.append(now)
        st = self.stats
        st.tx += 1
        st.txbytes += len(data)
        st.last_tx = now
        req = st.req
        req[api] = req.get(api, 0) + 1
        self._writer.write(data)
        if self._writer.transport.get_write_buffer_size() > 1 << 20:
            try:
                await self._writer.drain()
            except OSError:
                st.txerrs += 1
                raise
        if fut is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout or self.request_timeout)
        except TimeoutError:
            exc = KafkaTimeoutError(f"no response from {self.host}:{self.port} to api {api} v{version} "
                                    f"in {timeout or self.request_timeout:.1f}s")
            st.req_timeouts += 1
            self.close(exc)
            raise exc from None

    async def _read_loop(self) -> None:
        st = self.stats
        sent_at = self._sent_at
        data = b"\0"
        try:
            while True:
                data = await self._reader.read(1 << 20)
                now = time.monotonic()
                st.rxbytes += len(data)
                st.last_rx = now
                for correlation_id, body in self.wire.receive_data(data):
                    st.rx += 1
                    if sent_at:
                        st.rtt.add(int((now - sent_at.popleft()) * 1e6))
                    throttle = getattr(body, "throttle_time", None)
                    if throttle is not None:
                        st.throttle.add(int(throttle.total_seconds() * 1000))
                    fut = self._waiters.pop(correlation_id, None)
                    if fut is not None and not fut.done():
                        if isinstance(body, KafkaError):
                            fut.set_exception(body)
                        else:
                            fut.set_result(body)
                if not data:
                    raise KafkaConnectionError(f"{self.host}:{self.port} closed the connection")
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            if data:  # a malformed answer; a close by the peer (b"") is a disconnect, not an error
                st.rxerrs += 1
            self.close(exc)
        except OSError as exc:
            st.rxerrs += 1
            self.close(KafkaConnectionError(f"{self.host}:{self.port}: {exc!r}"))

    def close(self, error: Exception | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.error = error
        st = self.stats
        if st.state == "UP" and error is not None:
            st.disconnects += 1  # lost (peer, network, timeout), not closed by us
        st.set_state("DOWN", time.monotonic())
        self._sent_at.clear()
        err = error or KafkaConnectionError(f"connection to {self.host}:{self.port} closed")
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: the caller may have given up on it (timeout, cancel)
        self._waiters.clear()
        if self._writer is not None:
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()


class Client:
    """Connections, metadata and coordinators shared by a producer, consumer or admin."""

    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "odradek",
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 retries: int = 10, metadata_max_age_ms: int = 300000, connect_timeout_ms: int = 10000,
                 security: ClientSecurity | dict | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        # Kafka's client properties (security.protocol, sasl.*, ssl.*) or a ClientSecurity.
        self.security = security if isinstance(security, ClientSecurity) else ClientSecurity.from_properties(security)
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self.backoff_max = retry_backoff_max_ms / 1000
        self.retries = retries
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.cluster = ClusterView()
        self._conns: dict[Any, BrokerConnection] = {}
        self._opening: dict[Any, asyncio.Task] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}
        self._metadata_at = 0.0
        self._metadata_lock: asyncio.Lock | None = None
        self._known_topics: set[str] = set()
        self.closed = False
        self.stats = ClientStats(client_id, time.monotonic())

    # ---------------------------------------------------------------- connections

    def _address(self, node: Any) -> tuple[str, int]:
        if isinstance(node, tuple):
            kind, ident = node
            if kind == "bootstrap":
                return self.bootstrap[ident]
            node = ident  # ("coordinator", node id): see coordinator()
        b = self.cluster.brokers.get(node)
        if b is None:
            raise KafkaError(ErrorCode.broker_not_available, f"node {node} is not in the metadata")
        return b.host, b.port

    async def connection(self, node: Any) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            if not (conn.expiring and not conn._waiters):
                return conn
            conn.close(None)  # KIP-368: authenticate afresh before the broker's session ends
        task = self._opening.get(node)
        if task is None:
            host, port = self._address(node)
            conn = BrokerConnection(host, port, self.client_id, self.request_timeout, self.security,
                                    self.stats.broker(node, host, port))

            async def opener() -> BrokerConnection:
                try:
                    await conn.open(self.connect_timeout)
                    self._conns[node] = conn
                    return conn
                finally:
                    self._opening.pop(node, None)

            task = self._opening[node] = asyncio.get_running_loop().create_task(opener())
        return await asyncio.shield(task)

    async def any_connection(self) -> tuple[Any, BrokerConnection]:
        """A live connection to any broker: known brokers first, then bootstrap addresses."""
        for node, conn in self._conns.items():
            if not conn.closed and not (isinstance(node, tuple) and node[0] == "coordinator"):
                return node, conn
        candidates: list[Any] = list(self.cluster.brokers) or []
        random.shuffle(candidates)
        candidates += [("bootstrap", i) for i in range(len(self.bootstrap))]
        last: Exception | None = None
        for node in candidates:
            try:
                return node, await self.connection(node)
            except KafkaError as exc:
                last = exc
        raise last or KafkaConnectionError("no broker reachable")

    def backoff_for(self, attempt: int) -> float:
        # Exponential with 20% jitter, as Kafka's retry.backoff.ms/retry.backoff.max.ms (KIP-580).
        base = min(self.backoff_max, self.backoff * (2 ** attempt))
        return base * random.uniform(0.8, 1.2)

    async def send(self, node: Any, api: int, body: Body, *, timeout: float | None = None,
                   expect_response: bool = True):
        conn = await self.connection(node)
        return await conn.request(api, body, timeout=timeout, expect_response=expect_response)

    async def send_any(self, api: int, body: Body, *, timeout: float | None = None):
        _, conn = await self.any_connection()
        return await conn.request(api, body, timeout=timeout)

    async def call(self, attempt_fn: Callable[[], Awaitable[Any]], *, deadline: float | None = None,
                   retries: int | None = None) -> Any:
        """Run `attempt_fn` until it succeeds, retrying retriable KafkaErrors with backoff."""
        retries = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                return await attempt_fn()
            except KafkaError as exc:
                if not exc.retriable or attempt >= retries or self.closed:
                    raise
                if exc.code in COORDINATOR_MOVED:
                    self._coordinators.clear()
                pause = self.backoff_for(attempt)
                if deadline is not None and time.monotonic() + pause > deadline:
                    raise
                log.debug("retrying after %s (attempt %d)", exc, attempt + 1)
                attempt += 1
                await asyncio.sleep(pause)

    # ---------------------------------------------------------------- metadata

    async def refresh_metadata(self, topics: list[str] | None = None, *, all_topics: bool = False) -> None:
        """Fetch metadata for `topics` plus every topic asked about before (or all topics)."""
        if topics:
            self._known_topics.update(topics)
        want = None if all_topics else sorted(self._known_topics)

        async def attempt():
            def body(version: int) -> dict:
                topics = None if want is None else [{"name": t, "topic_id": None} for t in want]
                return {"topics": topics, "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False, "include_cluster_authorized_operations": False}
            resp = await self.send_any(Api.METADATA, body)
            self.cluster.update(resp, all_topics=want is None)
            self._metadata_at = now = time.monotonic()
            stamps = self.stats.metadata_at
            for t in resp.topics:
                if t.name is not None:
                    stamps[t.name] = now

        await self.call(attempt)

    def metadata_age(self) -> float:
        """Seconds since the last successful Metadata response."""
        return time.monotonic() - self._metadata_at

    async def ensure_topics(self, topics: list[str], *, max_age: float | None = None) -> None:
        stale = time.monotonic() - self._metadata_at > (self.metadata_max_age if max_age is None else max_age)
        if stale or any(t not in self.cluster.topics for t in topics):
            await self.refresh_metadata(topics)

    async def leader_for(self, tp: TopicPartition) -> int:
        node = self.cluster.leader(tp)
        if node is None:
            await self.refresh_metadata([tp.topic])
            node = self.cluster.leader(tp)
        if node is None:
            info = self.cluster.topics.get(tp.topic)
            code = info.error if info is not None and info.error else ErrorCode.unknown_topic_or_partition
            if info is not None and tp.partition in info.partitions:
                code = ErrorCode.leader_not_available
            raise KafkaError(code, f"no leader for {tp}")
        return node

    # ---------------------------------------------------------------- coordinators

    async def coordinator(self, group_id: str) -> tuple[str, int]:
        node = self._coordinators.get(group_id)
        if node is not None:
            return node

        async def attempt():
            def body(version: int) -> dict:
                return {"key": group_id, "key_type": 0, "coordinator_keys": [group_id]}
            resp = await self.send_any(Api.FIND_COORDINATOR, body)
            if getattr(resp, "coordinators", None):
                c = resp.coordinators[0]
                code, node_id, host, port = c.error_code, int(c.node_id), c.host, int(c.port)
                message = c.error_message
            else:
                code, node_id, host, port = resp.error_code, int(resp.node_id), resp.host, int(resp.port)
                message = getattr(resp, "error_message", None)
            if code != ErrorCode.none:
                raise KafkaError(code, message or f"FindCoordinator({group_id})")
            if node_id not in self.cluster.brokers:
                from .cluster import BrokerInfo
                self.cluster.brokers[node_id] = BrokerInfo(node_id, host, port, None)
            return node_id

        node = await self.call(attempt)
        # Group requests get a connection of their own to the coordinator, as Java's
        # consumer does (node id MAX_VALUE - id): the broker answers a connection's
        # requests in order, so a heartbeat or commit must not queue behind a Fetch parked
        # for fetch_max_wait_ms on the data connection.
        key = ("coordinator", node)
        self._coordinators[group_id] = key
        return key

    def forget_coordinator(self, group_id: str) -> None:
        self._coordinators.pop(group_id, None)

    def coordinator_up(self, group_id: str) -> bool | None:
        """Whether the connection to the group's coordinator is open; None while the
        coordinator is not known (statistics: the cgrp state)."""
        key = self._coordinators.get(group_id)
        if key is None:
            return None
        conn = self._conns.get(key)
        return conn is not None and not conn.closed

    async def close(self) -> None:
        self.closed = True
        for task in list(self._opening.values()):
            task.cancel()
        for conn in list(self._conns.values()):
            conn.close(None)
        self._conns.clear()
