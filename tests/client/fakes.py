"""Fakes for client tests: a scriptable fake broker and a connection-dropping proxy.

`FakeBroker` is an asyncio server on loopback that parses requests with the broker's own
`protocol.messages.parse_request` and answers with `encode_response`, through one
handler per api key. A handler is `fn(fake, request)` (plain or async) returning

- a dict (or kio entity): the response body, encoded for the request's version;
- bytes: written as they are (a whole frame, size prefix included: see `garbage_frame`);
- None: no answer (as for Produce with acks=0);
- CLOSE: close the connection without answering;
- HANG: never answer; the connection is kept until the client closes it.

Defaults answer ApiVersions (with the KIP-511 fallback for versions not advertised),
Metadata (this fake as the only broker, leader of every partition of `topics`) and
FindCoordinator (this fake). `versions` is what ApiVersions advertises and what the
parser accepts, so leaving an API out of it makes the fake a broker without that API.

`DroppingProxy` forwards bytes between clients and a real broker and, when told to,
closes a client's connection right after forwarding a chosen request, before its
response can come back: the "broker disconnects mid-request" failure. It runs its
own event loop in a thread, so one proxy can serve a whole test module.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Self

from kio.schema.errors import ErrorCode

from odradek.protocol.framing import NEED_DATA, FrameReader
from odradek.protocol.messages import (
    Request,
    RequestParseError,
    UnsupportedVersionError,
    build,
    encode_entity,
    encode_response,
    parse_request,
    peek_header,
    response_class,
)


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


CLOSE = _Sentinel("CLOSE")
HANG = _Sentinel("HANG")

NO_OPS = -(2**31)

# What the fakes advertise: data-path APIs only, or those plus the group APIs.
DATA_APIS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 8),  # ListOffsets
    3: (1, 12),  # Metadata
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    37: (0, 3),  # CreatePartitions
    60: (0, 1),  # DescribeCluster
}
GROUP_APIS: dict[int, tuple[int, int]] = {
    8: (2, 9),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (2, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe
}
ALL_APIS = {**DATA_APIS, **GROUP_APIS}

Handler = Callable[["FakeBroker", Request], Any]


def garbage_frame(length: int = 12) -> bytes:
    """A well-framed response whose payload is not a valid response of any kind."""
    payload = b"\xff" * length
    return struct.pack(">i", len(payload)) + payload


def sequence(*results: Any) -> Handler:
    """A handler giving each result in turn (the last one from then on). A result may
    itself be a handler (called with the fake and the request) or a plain value."""
    calls = [0]

    async def handler(fake: FakeBroker, req: Request):
        i = min(calls[0], len(results) - 1)
        calls[0] += 1
        r = results[i]
        if callable(r):
            r = r(fake, req)
            if inspect.isawaitable(r):
                r = await r
        return r

    return handler


# ------------------------------------------------------------------ default handlers


def api_versions(fake: FakeBroker, req: Request) -> dict:
    return {"error_code": ErrorCode.none, "throttle_time": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(fake.versions.items())]}


def metadata(fake: FakeBroker, req: Request) -> dict:
    wanted = req.body.topics
    names = sorted(fake.topics) if wanted is None else [t.name for t in wanted]
    return {"throttle_time": 0, "brokers": fake.broker_entries(), "cluster_id": fake.cluster_id,
            "controller_id": fake.node_id, "cluster_authorized_operations": NO_OPS,
            "topics": [fake.topic_entry(n) for n in names]}


def find_coordinator(fake: FakeBroker, req: Request) -> dict:
    keys = list(req.field("coordinator_keys", None) or [req.field("key")])
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "node_id": fake.node_id,
            "host": fake.host, "port": fake.port,
            "coordinators": [{"key": k, "node_id": fake.node_id, "host": fake.host, "port": fake.port,
                              "error_code": ErrorCode.none, "error_message": None} for k in keys]}


def coordinator_error(code: ErrorCode) -> Handler:
    def handler(fake: FakeBroker, req: Request) -> dict:
        keys = list(req.field("coordinator_keys", None) or [req.field("key")])
        return {"throttle_time": 0, "error_code": code, "error_message": None, "node_id": -1, "host": "", "port": -1,
                "coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
                                  "error_message": None} for k in keys]}
    return handler


# ------------------------------------------------------------------ response builders for tests


def produce_reply(req: Request, error: ErrorCode = ErrorCode.none, base_offset: int = 0,
                  message: str | None = None) -> dict:
    """Every partition of a Produce request answered with the same error / base offset."""
    return {"throttle_time": 0, "responses": [
        {"name": t.name, "partition_responses": [
            {"index": p.index, "error_code": error, "base_offset": base_offset if not error else -1,
             "log_append_time": -1, "log_start_offset": 0, "record_errors": [], "error_message": message}
            for p in t.partition_data]} for t in req.body.topic_data]}


def fetch_reply(req: Request, partition: Callable[[str, int, int], dict]) -> dict:
    """`partition(topic, index, fetch_offset)` gives the error_code / records / high_watermark
    of each partition the Fetch asks for."""
    responses = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            d = {"error_code": ErrorCode.none, "records": None, "high_watermark": 0}
            d.update(partition(t.topic, int(p.partition), int(p.fetch_offset)))
            hw = d["high_watermark"]
            parts.append({"partition_index": p.partition, "error_code": d["error_code"], "high_watermark": hw,
                          "last_stable_offset": hw, "log_start_offset": 0, "aborted_transactions": None,
                          "preferred_read_replica": -1, "records": d["records"]})
        responses.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}


def list_offsets_reply(req: Request, partition: Callable[[str, int, int], tuple[ErrorCode, int]]) -> dict:
    """`partition(topic, index, timestamp)` gives (error, offset) for each partition asked."""
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, offset = partition(t.name, int(p.partition_index), int(p.timestamp))
            parts.append({"partition_index": p.partition_index, "error_code": code, "timestamp": -1,
                          "offset": offset, "leader_epoch": 0, "old_style_offsets": [offset]})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def offset_commit_reply(req: Request, error: ErrorCode = ErrorCode.none) -> dict:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                        for p in t.partitions]} for t in req.body.topics]}


def create_topics_reply(req: Request, error: ErrorCode = ErrorCode.none, message: str | None = None) -> dict:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "topic_id": uuid.uuid4(), "error_code": error, "error_message": message,
         "topic_config_error_code": 0, "num_partitions": t.num_partitions, "replication_factor": 1, "configs": []}
        for t in req.body.topics]}


def describe_cluster_reply(fake: FakeBroker, req: Request) -> dict:
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "endpoint_type": 1,
            "cluster_id": fake.cluster_id, "controller_id": fake.node_id,
            "brokers": [{"broker_id": fake.node_id, "host": fake.host, "port": fake.port, "rack": None}],
            "cluster_authorized_operations": NO_OPS}


# ------------------------------------------------------------------ the fake broker


class FakeBroker:
    def __init__(self, handlers: dict[int, Handler] | None = None, *, versions: dict[int, tuple[int, int]] | None = None,
                 topics: dict[str, int] | None = None, node_id: int = 1, cluster_id: str = "fake-cluster") -> None:
        self.versions = dict(ALL_APIS if versions is None else versions)
        self.handlers: dict[int, Handler] = {18: api_versions, 3: metadata, 10: find_coordinator,
                                             60: describe_cluster_reply}
        self.handlers.update(handlers or {})
        self.topics: dict[str, int] = dict(topics or {})
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.requests: list[Request] = []
        self.connections = 0  # accepted
        self.client_closes = 0  # connections the client closed (EOF seen)
        self.errors: list[BaseException] = []  # handler exceptions: a test bug, reported at stop()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.rejected: list[tuple[int, int]] = []  # (api key, version) of requests refused as unsupported
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()  # every serving task then sees EOF and ends
        if self._tasks:
            _done, pending = await asyncio.wait(list(self._tasks), timeout=2)
            for t in pending:  # a handler stuck in its own await
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)
        if self._server is not None:
            await self._server.wait_closed()
        if self.errors:
            raise AssertionError(f"fake broker handler failed: {self.errors[0]!r}") from self.errors[0]

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # ------------------------------------------------------------ what the tests look at

    def of(self, api_key: int) -> list[Request]:
        return [r for r in self.requests if r.api_key == api_key]

    def count(self, api_key: int) -> int:
        return len(self.of(api_key))

    def topic_id(self, name: str) -> uuid.UUID:
        return self.topic_ids.setdefault(name, uuid.uuid5(uuid.NAMESPACE_DNS, name))

    def broker_entries(self) -> list[dict]:
        return [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}]

    def topic_entry(self, name: str) -> dict:
        n = self.topics.get(name)
        if n is None:
            return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "topic_id": uuid.UUID(int=0),
                    "is_internal": False, "partitions": [], "topic_authorized_operations": NO_OPS}
        return {"error_code": ErrorCode.none, "name": name, "topic_id": self.topic_id(name), "is_internal": False,
                "topic_authorized_operations": NO_OPS,
                "partitions": [{"error_code": ErrorCode.none, "partition_index": p, "leader_id": self.node_id,
                                "leader_epoch": 0, "replica_nodes": [self.node_id], "isr_nodes": [self.node_id],
                                "offline_replicas": []} for p in range(n)]}

    # ------------------------------------------------------------ serving

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass  # cancelled only by stop(), after the test is over
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader(1 << 30)
        while True:
            data = await reader.read(1 << 16)
            if not data:
                self.client_closes += 1
                return
            frames.receive_data(data)
            while (payload := frames.next_frame()) is not NEED_DATA:
                try:
                    req = parse_request(payload, self.versions)
                except UnsupportedVersionError as exc:
                    self.rejected.append((exc.api_key, exc.api_version))
                    if exc.api_key == 18:  # KIP-511: answer in v0 with our ranges
                        writer.write(_unsupported_api_versions(self, exc.correlation_id))
                        continue
                    return  # Kafka closes the connection on an API version it does not serve
                except RequestParseError:
                    return
                self.requests.append(req)
                handler = self.handlers.get(req.api_key)
                if handler is None:
                    self.errors.append(LookupError(f"fake broker has no handler for api key {req.api_key}"))
                    return
                try:
                    result = handler(self, req)
                    if inspect.isawaitable(result):
                        result = await result
                except Exception as exc:  # noqa: BLE001 - a broken test handler: fail the test at stop()
                    self.errors.append(exc)
                    return
                if result is CLOSE:
                    return
                if result is HANG:
                    while await reader.read(1 << 16):
                        pass
                    self.client_closes += 1
                    return
                if result is None:
                    continue
                writer.write(result if isinstance(result, bytes) else encode_response(req, result))
                await writer.drain()


def _unsupported_api_versions(fake: FakeBroker, correlation_id: int) -> bytes:
    cls = response_class(18, 0)
    body = build(cls, {"error_code": ErrorCode.unsupported_version,
                       "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                    for k, (lo, hi) in sorted(fake.versions.items())]})
    return encode_entity(cls.__header_schema__, correlation_id, body)


# ------------------------------------------------------------------ the dropping proxy


class DroppingProxy:
    """A TCP proxy in front of a real broker that can drop a connection mid-request.

    `drop(api_key, ordinals)` arms it: the n-th request of that api key counted from
    now (for each n in `ordinals`, 1-based) is forwarded to the broker, and then the
    client's connection and its upstream connection are closed at once, so the response
    never reaches the client. `tripped(api_key)` tells how many were dropped.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._armed: dict[int, set[int]] = {}
        self._seen: dict[int, int] = {}
        self._tripped: dict[int, int] = {}
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dropping-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self.sock = None

    def start(self, sock) -> DroppingProxy:
        """Serve on an already bound and listening socket (so its port can be advertised
        by the broker before the proxy exists)."""
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, sock=sock), self._loop).result(10)
        return self

    def close(self) -> None:
        async def shutdown():
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def drop(self, api_key: int, ordinals: Iterable[int] = (1,)) -> None:
        with self._lock:
            self._armed[api_key] = set(ordinals)
            self._seen[api_key] = 0
            self._tripped[api_key] = 0

    def disarm(self) -> None:
        with self._lock:
            self._armed.clear()

    def seen(self, api_key: int) -> int:
        """Requests of that api key forwarded since it was armed."""
        with self._lock:
            return self._seen.get(api_key, 0)

    def tripped(self, api_key: int) -> int:
        with self._lock:
            return self._tripped.get(api_key, 0)

    def _should_drop(self, api_key: int) -> bool:
        with self._lock:
            if api_key not in self._armed:
                return False
            self._seen[api_key] += 1
            if self._seen[api_key] in self._armed[api_key]:
                self._tripped[api_key] += 1
                return True
            return False

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self.connections += 1
        u_writer = None
        try:
            u_reader, u_writer = await asyncio.open_connection(*self.upstream)
            back = asyncio.ensure_future(self._pump(u_reader, c_writer))
            try:
                await self._forward(c_reader, u_writer, c_writer)
            finally:
                back.cancel()
                await asyncio.gather(back, return_exceptions=True)
        except (ConnectionError, OSError):
            pass
        finally:
            self._tasks.discard(task)
            c_writer.close()
            if u_writer is not None:
                u_writer.close()

    async def _forward(self, c_reader, u_writer, c_writer) -> None:
        frames = FrameReader(1 << 30)
        while True:
            data = await c_reader.read(1 << 16)
            if not data:
                return
            frames.receive_data(data)
            while (payload := frames.next_frame()) is not NEED_DATA:
                api_key, _version, _cid = peek_header(payload)
                u_writer.write(struct.pack(">i", len(payload)) + payload)
                if self._should_drop(api_key):
                    # Forwarded, and the connection dies before any answer: nothing awaited
                    # in between, so the response pump cannot pass the answer on.
                    c_writer.transport.abort()
                    await u_writer.drain()
                    return
            await u_writer.drain()

    @staticmethod
    async def _pump(reader, writer) -> None:
        while data := await reader.read(1 << 16):
            if writer.transport.is_closing():
                return
            writer.write(data)
            await writer.drain()
        writer.close()
