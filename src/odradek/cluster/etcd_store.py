"""The etcd v3 metadata backend: Kafka's ZooKeeper-era coordination, on etcd.

Theory of operation. Every broker keeps a mirror of everything under `<prefix>/` in
memory (reads never do I/O) and changes it only with etcd transactions; one watch on the
prefix applies every change, its own included, to the mirror in revision order and
publishes a new ClusterImage. A write returns once etcd committed it and the watch has
applied its revision, so the caller sees its own write at once.

Key layout (JSON values), the ZooKeeper layout of Kafka 2.x/3.x moved onto etcd
(/work/shared/CLUSTER.md, "Coordination in the ZooKeeper era"):

    cluster_id                  {"id"}: created once, by whoever comes first
    brokers/<id>                {host, port, rack} on the broker's lease (ZK: ephemeral
                                /brokers/ids/<id>); broker epoch = the key's create_revision
    controller                  {node_id} on the controller's lease (ZK: /controller);
                                controller epoch = its create_revision (ZK: /controller_epoch)
    topics/<name>               {id, partitions: [[replica ids] per partition], configs}
    partitions/<name>/<index>   {leader, leader_epoch, isr}; partition epoch = mod_revision
                                (ZK: .../partitions/<p>/state and its version)
    group_configs/<group>       {key: value}  (names encoded by `_encode_name`)
    broker_configs/<resource>   {key: value}; "" (the cluster default) is "-default"
    producer_ids                {block_end}: blocks of 1000 handed out by compare-and-set

Fencing (KIP-497, and ZooKeeper's version checks): a partition state is written only with
a compare on the mod_revision it was computed from; the controller's writes also compare
the controller key's create_revision with its own epoch, so a deposed controller's
decisions are refused by etcd itself.

etcd facts this relies on: leases have whole-second TTLs and a floor of about 1.5 x the
election timeout (2 s with etcd's defaults), so `lease_ttl_ms` is rounded up to whole
seconds and etcd may raise it further; a transaction holds at most `--max-txn-ops` (128 by
default) compares and as many operations, and never two operations on one key; a watch
from a compacted revision is cancelled with `compact_revision` set, and the mirror is then
reloaded whole and the difference published.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote

import aetcd
import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from .backend import Fenced, Listener, MetadataUnavailable, TopicSpec
from .controller import elect, initial_state
from .image import BrokerInfo, ClusterImage, PartitionState, TopicPartition
from .metadata import Topic, TopicExists, TopicRegistry, _random_uuid

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000  # as MetadataStore and Kafka's ProducerIdManager hand them out
DEFAULT_RESOURCE = "-default"  # the encoded "" (cluster-wide default) resource name
MIN_BACKOFF, MAX_BACKOFF = 0.05, 1.0  # seconds between retries of the background tasks
CAS_RETRIES = 5
_PUT = rpc.Event.EventType.Value("PUT")
# gRPC channel: reconnect quickly once etcd is back, notice a silent peer (keepalive pings
# every 10 s are above etcd's 5 s --grpc-keepalive-min-time), no 4 MiB cap on a large load.
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.max_receive_message_length": -1,
    # Calls wait (up to their deadline) for a reconnecting channel instead of failing at
    # once, so an etcd restart shorter than the request timeout is not an error.
    "grpc.service_config": json.dumps({"methodConfig": [{"name": [{}], "waitForReady": True}]}),
}


def lease_seconds(ttl_ms: int) -> int:
    """etcd leases are whole seconds: round up, at least 1 (etcd may grant more)."""
    return max(1, -(-int(ttl_ms) // 1000))


def _encode_name(name: str) -> str:
    """A group or broker resource name as one key segment: "" is "-default", others are
    percent-encoded with a leading '-' escaped, so no name maps onto "-default"."""
    if name == "":
        return DEFAULT_RESOURCE
    enc = quote(name, safe="")
    return "%2D" + enc[1:] if enc.startswith("-") else enc


def _decode_name(seg: str) -> str:
    return "" if seg == DEFAULT_RESOURCE else unquote(seg)


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError,
                        TimeoutError, OSError)):
        return True
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() in (
        grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


_ETCD_ERRORS = (aetcd.exceptions.ClientError, grpc.aio.AioRpcError, TimeoutError, OSError)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _TxnResult:
    __slots__ = ("succeeded", "revision", "changed", "kvs")

    def __init__(self, resp: Any) -> None:
        self.succeeded: bool = resp.succeeded
        self.revision: int = resp.header.revision
        self.changed = False
        self.kvs: dict[bytes, Any] = {}  # what the failure branch's gets found
        for r in resp.responses:
            kind = r.WhichOneof("response")
            if kind == "response_put" or (kind == "response_delete_range" and r.response_delete_range.deleted):
                self.changed = True
            elif kind == "response_range":
                self.kvs.update((kv.key, kv) for kv in r.response_range.kvs)


def _cmp_create(key: bytes, rev: int) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=rev)


def _cmp_mod(key: bytes, rev: int) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=rev)


def _put(key: bytes, doc: Any, lease: int = 0) -> Any:
    value = json.dumps(doc, separators=(",", ":")).encode()
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def _delete(key: bytes, range_end: bytes = b"") -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=range_end))


def _get(key: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


def _state_doc(state: PartitionState) -> dict[str, Any]:
    return {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr)}


Item = tuple[list[Any], list[Any]]  # (compares, operations) that must commit together


class EtcdBackend(TopicRegistry):
    """MetadataBackend over etcd v3 (see the module docstring)."""

    def __init__(self, endpoints: list[tuple[str, int]], node_id: int, *, prefix: str = "/odradek",
                 lease_ttl_ms: int = 6000, new_id: Callable[[], uuid.UUID] | None = None,
                 unclean: Callable[[str], bool] = lambda topic: False, request_timeout_ms: int = 5000,
                 max_txn_ops: int = 128) -> None:
        super().__init__()
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = list(endpoints)
        self.node_id = node_id
        self.prefix = prefix.rstrip("/")
        self._p = (self.prefix + "/").encode()
        self.lease_ttl_s = lease_seconds(lease_ttl_ms)
        self.new_id = new_id or _random_uuid
        self.unclean = unclean
        self.request_timeout = request_timeout_ms / 1000
        self.max_txn_ops = max(3, max_txn_ops)
        # The mirror. These dicts are changed in place only: the broker holds them.
        self.cluster_id = ""
        self.group_configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = (-1, 0, 0)  # node id, epoch (create_revision), lease
        self._assign: dict[str, list[tuple[int, ...]]] = {}
        self._topic_revs: dict[str, tuple[int, int]] = {}  # name -> (create, mod) revision
        self._praw: dict[TopicPartition, tuple[int, int, tuple[int, ...], int]] = {}
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._producer_block_end = 0
        self._revision = 0  # every event up to this revision is applied
        self._loaded = False
        self._dirty = False
        self._image = ClusterImage()
        self._listeners: list[Listener] = []
        self._waiters: list[tuple[int, asyncio.Future]] = []
        # Connection, lease and tasks.
        self._client: aetcd.Client | None = None
        self._ep = 0
        self._lease = 0
        self._granted_ttl = 0  # etcd may grant more than asked (its minimum TTL)
        self._me: BrokerInfo | None = None
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self._started = False
        self._closed = False
        self._elect_kick = asyncio.Event()
        self._campaign_kick = asyncio.Event()
        self._pid_lock = asyncio.Lock()
        self._pid_next = self._pid_end = 0

    # --- reads: the mirror ----------------------------------------------------------------

    def image(self) -> ClusterImage:
        return self._image

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def is_controller(self) -> bool:
        node, _, lease = self._controller
        return node == self.node_id and lease == self._lease != 0

    # --- keys -------------------------------------------------------------------------------

    def _key(self, *parts: str) -> bytes:
        return self._p + "/".join(parts).encode()

    def _topic_key(self, name: str) -> bytes:
        return self._key("topics", name)

    def _part_key(self, tp: TopicPartition) -> bytes:
        return self._key("partitions", tp[0], str(tp[1]))

    def _topic_doc(self, topic: Topic, assignment: list[tuple[int, ...]], configs: dict[str, str]) -> dict:
        return {"id": str(topic.topic_id), "partitions": [list(r) for r in assignment], "configs": dict(configs)}

    # --- connection -------------------------------------------------------------------------

    def _make_client(self) -> aetcd.Client:
        host, port = self.endpoints[self._ep]
        return aetcd.Client(host, port, timeout=self.request_timeout, options=dict(_CHANNEL_OPTIONS))

    async def _connect(self) -> None:
        """The first endpoint, in order, that answers."""
        errors = []
        for _ in self.endpoints:
            client = self._make_client()
            try:
                await client.get(self._key("cluster_id"))
                self._client = client
                return
            except _ETCD_ERRORS as exc:
                errors.append(f"{self.endpoints[self._ep][0]}:{self.endpoints[self._ep][1]}: {exc}")
                await self._close_quietly(client)
                self._ep = (self._ep + 1) % len(self.endpoints)
        raise MetadataUnavailable("no etcd endpoint answers: " + "; ".join(errors))

    def _failover(self, client: aetcd.Client) -> None:
        """After a connection failure, later calls go to the next endpoint (the watch
        stream on the old channel ends and restarts there). One endpoint: gRPC reconnects."""
        if len(self.endpoints) < 2 or client is not self._client or self._closed:
            return
        self._ep = (self._ep + 1) % len(self.endpoints)
        log.warning("etcd: switching to %s:%d", *self.endpoints[self._ep])
        self._client = self._make_client()
        self._spawn(self._close_quietly(client))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @staticmethod
    async def _close_quietly(client: aetcd.Client) -> None:
        try:
            async with asyncio.timeout(2):
                await client.close()
        except Exception:  # noqa: BLE001 - a dead channel may fail to close; nothing to do
            pass

    async def _call(self, what: str, fn: Callable[[aetcd.Client], Any]) -> Any:
        """Run `fn(client)`; any etcd failure becomes MetadataUnavailable (never a raw gRPC
        error), and a lost connection moves later calls to the next endpoint."""
        client = self._client
        if client is None or self._closed:
            raise MetadataUnavailable("the etcd metadata backend is not running")
        try:
            return await fn(client)
        except _ETCD_ERRORS as exc:
            if _connection_lost(exc):
                self._failover(client)
            raise MetadataUnavailable(f"etcd {what}: {_describe(exc)}") from exc

    async def _txn(self, compare: list[Any], success: list[Any], failure: Iterable[Any] = ()) -> _TxnResult:
        request = rpc.TxnRequest(compare=compare, success=success, failure=list(failure))

        async def run(c: aetcd.Client) -> Any:
            await c.connect()
            return await c.kvstub.Txn(request, timeout=self.request_timeout, metadata=c.metadata)

        return _TxnResult(await self._call("transaction", run))

    async def _revoke(self, lease_id: int) -> None:
        try:
            await self._call("lease revoke", lambda c: c.revoke_lease(lease_id))
        except MetadataUnavailable as exc:
            if "not found" not in str(exc):
                raise

    # --- waiting for the watch --------------------------------------------------------------

    async def _seen(self, revision: int) -> None:
        """Wait until the mirror has applied `revision` (a write of ours, or what a lost
        compare-and-set found), so the caller reads what etcd holds now."""
        if self._revision >= revision:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((revision, fut))
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for loses a cancellation that
            # arrives as the future completes, and close() must be able to stop us.
            async with asyncio.timeout(self.request_timeout * 2 + 1):
                await fut
        except TimeoutError:
            raise MetadataUnavailable(f"etcd revision {revision} was not seen by the watch in time") from None
        finally:
            if not fut.done():
                fut.cancel()
            self._waiters = [(r, f) for r, f in self._waiters if f is not fut]

    async def _catch_up(self, res: _TxnResult) -> None:
        revs = [kv.mod_revision for kv in res.kvs.values()]
        if revs:
            await self._seen(max(revs))

    def _advance(self, revision: int) -> None:
        if revision <= self._revision:
            return
        self._revision = revision
        keep = []
        for rev, fut in self._waiters:
            if rev <= revision:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((rev, fut))
        self._waiters = keep

    # --- the mirror -------------------------------------------------------------------------

    def _apply(self, put: bool, key: bytes, kv: Any) -> None:
        """One key's new value (or its deletion) into the mirror."""
        rel = key[len(self._p):].decode()
        kind, _, rest = rel.partition("/")
        try:
            doc = json.loads(kv.value) if put else None
            if kind == "brokers":
                self._apply_broker(int(rest), doc, kv)
            elif kind == "controller":
                self._controller = (int(doc["node_id"]), kv.create_revision, kv.lease) if put else (-1, 0, 0)
                self._dirty = True
                self._campaign_kick.set()
            elif kind == "topics":
                self._apply_topic(rest, doc, kv)
            elif kind == "partitions":
                name, _, index = rest.rpartition("/")
                tp = (name, int(index))
                if put:
                    self._praw[tp] = (int(doc["leader"]), int(doc["leader_epoch"]),
                                      tuple(int(b) for b in doc["isr"]), kv.mod_revision)
                else:
                    self._praw.pop(tp, None)
                self._set_part(tp)
            elif kind in ("group_configs", "broker_configs"):
                target = self.group_configs if kind == "group_configs" else self.broker_configs
                if put:
                    target[_decode_name(rest)] = {str(k): str(v) for k, v in doc.items()}
                else:
                    target.pop(_decode_name(rest), None)
            elif kind == "cluster_id" and put:
                self.cluster_id = str(doc["id"])
                self._dirty = True
            elif kind == "producer_ids":
                self._producer_block_end = int(doc["block_end"]) if put else 0
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            log.warning("etcd: ignoring malformed %s: %s", key.decode(errors="replace"), exc)

    def _apply_broker(self, node_id: int, doc: Any, kv: Any) -> None:
        if doc is None:
            self._brokers.pop(node_id, None)
        else:
            rack = doc.get("rack")
            self._brokers[node_id] = BrokerInfo(node_id, str(doc["host"]), int(doc["port"]),
                                                None if rack is None else str(rack), kv.create_revision)
        self._dirty = True

    def _apply_topic(self, name: str, doc: Any, kv: Any) -> None:
        old_count = len(self._assign.get(name, ()))
        topic = self.topics.get(name)
        if doc is None:
            if topic is not None:
                self._remove(name)
            self._assign.pop(name, None)
            self._topic_revs.pop(name, None)
        else:
            tid = uuid.UUID(doc["id"])
            assignment = [tuple(int(b) for b in r) for r in doc["partitions"]]
            configs = {str(k): str(v) for k, v in (doc.get("configs") or {}).items()}
            if topic is not None and topic.topic_id != tid:  # deleted and created again
                self._remove(name)
                topic = None
            if topic is None:
                self._add(Topic(name, tid, len(assignment), configs))
            else:  # the same Topic object, changed in place: the broker holds it
                topic.partitions = len(assignment)
                if topic.configs != configs:
                    topic.configs = configs
            self._assign[name] = assignment
            self._topic_revs[name] = (kv.create_revision, kv.mod_revision)
        for index in range(max(old_count, len(self._assign.get(name, ())))):
            self._set_part((name, index))

    def _set_part(self, tp: TopicPartition) -> None:
        """A partition is in the image when both its topic and its state key exist."""
        raw = self._praw.get(tp)
        assignment = self._assign.get(tp[0])
        if raw is not None and assignment is not None and tp[1] < len(assignment):
            self._parts[tp] = PartitionState(assignment[tp[1]], *raw)
        elif self._parts.pop(tp, None) is None:
            return
        self._dirty = True

    def _mirrored_keys(self) -> list[bytes]:
        keys = [self._key("brokers", str(b)) for b in self._brokers]
        keys += [self._topic_key(n) for n in self.topics] + [self._part_key(tp) for tp in self._praw]
        keys += [self._key("group_configs", _encode_name(g)) for g in self.group_configs]
        keys += [self._key("broker_configs", _encode_name(r)) for r in self.broker_configs]
        if self._controller[0] != -1:
            keys.append(self._key("controller"))
        if self._producer_block_end:
            keys.append(self._key("producer_ids"))
        return keys

    def _publish(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        node, epoch, _ = self._controller
        old, self._image = self._image, ClusterImage.of(self.cluster_id, self._brokers.values(), node, epoch,
                                                        self._parts)
        for listener in list(self._listeners):
            try:
                listener(old, self._image)
            except Exception:  # noqa: BLE001 - a subscriber's bug must not stop the watch
                log.exception("metadata listener %r failed", listener)
        self._elect_kick.set()

    async def _load(self) -> None:
        """Read everything under the prefix and make the mirror exactly that (at start, and
        when the watch's revision was compacted away: the difference is published)."""
        resp = await self._call("load", lambda c: c.get_prefix(self._p))
        present = {kv.key for kv in resp.kvs}
        for key in self._mirrored_keys():
            if key not in present:
                self._apply(False, key, None)
        for kv in resp.kvs:
            self._apply(True, kv.key, kv)
        self._loaded = True
        self._dirty = True
        self._publish()
        self._advance(resp.header.revision)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, me: BrokerInfo) -> None:
        """Connect, load the mirror, register `me` on a fresh lease, and start the watch,
        the lease keepalive, the controller campaign and the controller's duty."""
        if self._started:
            return
        if self._closed:
            raise MetadataUnavailable("the etcd metadata backend is closed")
        self._me = me
        try:
            await self._connect()
            cid = base64.urlsafe_b64encode(self.new_id().bytes).decode().rstrip("=")
            key = self._key("cluster_id")
            await self._txn([_cmp_create(key, 0)], [_put(key, {"id": cid})])
            await self._load()
            registered = await self._register()
        except BaseException:
            await self._abandon()
            raise
        self._started = True
        self._tasks = [asyncio.ensure_future(self._forever(what, step)) for what, step in (
            ("watch", self._watch_step), ("lease keepalive", self._keepalive_step),
            ("controller campaign", self._campaign_step), ("controller", self._controller_step))]
        await self._seen(registered)

    async def _register(self) -> int:
        """Put brokers/<id> on a new lease; returns its revision (the broker epoch). An
        existing key is this node id's previous life (ids are unique per broker): its lease
        is revoked so the new registration, and epoch, take effect at once."""
        assert self._me is not None
        key = self._key("brokers", str(self.node_id))
        doc = {"host": self._me.host, "port": self._me.port, "rack": self._me.rack}
        lease = await self._call("lease grant", lambda c: c.lease(self.lease_ttl_s))
        for _ in range(CAS_RETRIES):
            res = await self._txn([_cmp_create(key, 0)], [_put(key, doc, lease.id)], [_get(key)])
            if res.succeeded:
                self._lease, self._granted_ttl = lease.id, lease.ttl
                self._campaign_kick.set()
                return res.revision
            old = res.kvs.get(key)
            if old is not None:
                log.info("broker %d: replacing its previous registration (epoch %d)", self.node_id, old.create_revision)
                if old.lease:
                    await self._revoke(old.lease)
                else:
                    await self._txn([_cmp_mod(key, old.mod_revision)], [_delete(key)])
        self._spawn(self._revoke(lease.id))
        raise MetadataUnavailable(f"broker {self.node_id}: could not register in etcd")

    async def close(self) -> None:
        """Stop, and revoke the lease: the registration (and the controller key, if held)
        vanish at once instead of after the TTL. Idempotent."""
        if self._closed:
            return
        lease, self._lease = self._lease, 0
        if lease and self._client is not None:
            await self._cancel_tasks()
            try:
                async with asyncio.timeout(self.request_timeout):
                    await self._revoke(lease)
            except (MetadataUnavailable, TimeoutError) as exc:
                log.warning("broker %d: could not revoke its etcd lease (%s); it expires in %d s",
                            self.node_id, exc, self.lease_ttl_s)
        await self._abandon()

    async def _abandon(self) -> None:
        """Stop everything without revoking the lease: what a crash leaves behind (tests)."""
        self._closed = True
        await self._cancel_tasks()
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(MetadataUnavailable("the etcd metadata backend closed"))
        self._waiters = []
        client, self._client = self._client, None
        if client is not None:
            await self._close_quietly(client)
        for task in list(self._background):
            task.cancel()

    async def _cancel_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- background tasks -------------------------------------------------------------------

    async def _forever(self, what: str, step: Callable[[], Awaitable[None]]) -> None:
        """Run `step` over and over; a failure is logged once per outage and retried after
        a backoff bounded by MAX_BACKOFF, so every task comes back when etcd does."""
        delay, failing = MIN_BACKOFF, False
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd down, or a bug: log, retry, never die
                if not failing:
                    log.warning("broker %d: etcd %s failed (%s); retrying", self.node_id, what, _describe(exc))
                failing = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)
                continue
            if failing:
                log.info("broker %d: etcd %s works again", self.node_id, what)
            delay, failing = MIN_BACKOFF, False

    async def _watch_step(self) -> None:
        """One watch stream from the mirror's revision + 1. It returns (success) when a
        stream that delivered something breaks, so the next one starts at once."""
        client = self._client
        if client is None:
            raise MetadataUnavailable("no etcd client")
        await client.connect()
        create = rpc.WatchCreateRequest(key=self._p, range_end=prefix_range_end(self._p),
                                        start_revision=self._revision + 1, progress_notify=True)
        hold = asyncio.Event()

        async def requests() -> Any:
            yield rpc.WatchRequest(create_request=create)
            await hold.wait()  # keep the stream open

        call = rpc.WatchStub(client.channel).Watch(requests(), metadata=client.metadata)
        delivered = False
        try:
            async for resp in call:
                if resp.compact_revision:
                    log.warning("etcd: watch from revision %d: compacted up to %d; reloading the metadata",
                                self._revision + 1, resp.compact_revision)
                    await self._load()
                    return
                if resp.canceled:
                    raise MetadataUnavailable(f"watch cancelled: {resp.cancel_reason}")
                delivered = True
                if resp.events:
                    top = self._revision
                    for ev in resp.events:
                        self._apply(ev.type == _PUT, ev.kv.key, ev.kv)
                        top = max(top, ev.kv.mod_revision)
                    self._publish()
                    self._advance(top)
                elif not resp.created:  # a progress notification: nothing more up to here
                    self._advance(resp.header.revision)
            raise MetadataUnavailable("watch stream ended")
        except _ETCD_ERRORS + (MetadataUnavailable,) as exc:
            if not delivered:
                raise
            log.warning("etcd: watch lost (%s); resuming from revision %d", _describe(exc), self._revision + 1)
        finally:
            hold.set()
            call.cancel()

    async def _keepalive_step(self) -> None:
        """Refresh the lease every TTL/3. If it is gone (etcd or this process paused longer
        than the TTL), register again: a new lease and a new broker epoch."""
        interval = (self._granted_ttl or self.lease_ttl_s) / 3
        await asyncio.sleep(interval)
        lease, client = self._lease, self._client
        try:
            async with asyncio.timeout(max(interval, 0.5)):
                reply = await self._call("lease keepalive", lambda c: c.refresh_lease(lease))
        except TimeoutError:
            if client is not None:
                self._failover(client)
            raise MetadataUnavailable("lease keepalive timed out") from None
        if reply is None:
            raise MetadataUnavailable("lease keepalive: no answer")
        if reply.TTL <= 0 and lease == self._lease:
            log.warning("broker %d: its etcd lease expired; registering again with a new broker epoch", self.node_id)
            await self._register()

    async def _campaign_step(self) -> None:
        """While the mirror shows no controller, try to become it: create the controller key
        on our lease if nobody has (ZooKeeper: create the ephemeral /controller)."""
        self._campaign_kick.clear()
        if not (self._controller[0] == -1 and self._lease and self._loaded):
            await self._campaign_kick.wait()
            return
        key = self._key("controller")
        res = await self._txn([_cmp_create(key, 0)], [_put(key, {"node_id": self.node_id}, self._lease)], [_get(key)])
        if res.succeeded:
            log.info("broker %d is the controller (epoch %d)", self.node_id, res.revision)
            await self._seen(res.revision)
        else:
            await self._catch_up(res)

    async def _controller_step(self) -> None:
        """While we hold the controller key: after every new image, elect leaders and shrink
        ISRs for the brokers that are gone, and create missing partition states."""
        await self._elect_kick.wait()
        self._elect_kick.clear()
        if self._loaded and self.is_controller:
            try:
                await self._control(self._image, self._controller[1])
            except MetadataUnavailable:
                self._elect_kick.set()  # try again after the backoff
                raise

    async def _control(self, image: ClusterImage, epoch: int) -> None:
        live = set(image.brokers)
        fence = [(self._key("controller"), epoch)]
        decisions = elect(image.partitions, live=live, unclean=self.unclean)
        top = 0
        if decisions:
            log.info("controller %d (epoch %d): %d partition state change(s) for live brokers %s",
                     self.node_id, epoch, len(decisions), sorted(live))
            items = [([_cmp_mod(self._part_key(tp), st.partition_epoch)], [_put(self._part_key(tp), _state_doc(st))])
                     for tp, st in decisions.items()]
            top = await self._commit_batches(items, fence)
        # Partition states a creator did not get to write (it died between transactions).
        for name, assignment in list(self._assign.items()):
            missing = [i for i in range(len(assignment)) if (name, i) not in self._praw]
            if missing and name in self._topic_revs:
                top = max(top, await self._create_partition_keys(name, self._topic_revs[name][0], missing, live,
                                                                 fence))
        await self._seen(top)  # the next round starts from an image with these decisions in it

    # --- transaction batching ----------------------------------------------------------------

    async def _commit_batches(self, items: list[Item], guards: list[tuple[bytes, int]]) -> int:
        """Commit `items` in as few transactions as etcd's op limit allows, each guarded by
        `guards` (key, create_revision). A batch whose compare fails is retried one item at a
        time (the others may still apply); if a guard itself failed, stop. Returns the
        highest committed revision (0 if none)."""
        guard_cmps = [_cmp_create(k, r) for k, r in guards]
        guard_gets = [_get(k) for k, _ in guards]
        room = self.max_txn_ops - len(guard_cmps)
        batches: list[list[Item]] = [[]]
        used_c = used_o = 0
        for item in items:
            if batches[-1] and (used_c + len(item[0]) > room or used_o + len(item[1]) > self.max_txn_ops):
                batches.append([])
                used_c = used_o = 0
            batches[-1].append(item)
            used_c += len(item[0])
            used_o += len(item[1])
        top = 0
        for batch in batches:
            for attempt in ([batch] if len(batch) == 1 else [batch, *([i] for i in batch)]):
                res = await self._txn(guard_cmps + [c for it in attempt for c in it[0]],
                                      [op for it in attempt for op in it[1]], guard_gets)
                if res.succeeded:
                    top = max(top, res.revision)
                    if attempt is batch:
                        break
                elif any(res.kvs.get(k) is None or res.kvs[k].create_revision != r for k, r in guards):
                    return top
        return top

    async def _create_partition_keys(self, name: str, topic_rev: int, indexes: list[int], live: set[int],
                                     extra: list[tuple[bytes, int]] = ()) -> int:
        """Create absent partition states of topic `name` (incarnation `topic_rev`)."""
        assignment = self._assign.get(name)
        items = []
        for i in indexes:
            replicas = assignment[i] if assignment and i < len(assignment) else None
            if replicas is not None:
                key = self._part_key((name, i))
                items.append(([_cmp_create(key, 0)], [_put(key, _state_doc(initial_state(replicas, live)))]))
        return await self._commit_batches(items, [(self._topic_key(name), topic_rev), *extra])

    # --- writes -------------------------------------------------------------------------------

    def _assignment(self, name: str, count: int, assignments: dict | None) -> list[tuple[int, ...]]:
        if not assignments or name not in assignments:
            raise ValueError(f"topic {name!r}: the etcd backend needs its replica assignment")
        replicas = [tuple(int(b) for b in r) for r in assignments[name]]
        if len(replicas) != count or not all(replicas) or any(len(set(r)) != len(r) for r in replicas):
            raise ValueError(f"topic {name!r}: bad replica assignment {assignments[name]!r} for {count} partition(s)")
        return replicas

    async def create_topics(self, specs: list[TopicSpec],
                            assignments: dict[str, list[tuple[int, ...]]] | None = None) -> list[Topic]:
        """Create topics with the replicas the caller placed (`assignments`, required). One
        transaction creates the topic keys (compare create_revision == 0: TopicExists when
        one lost a race) and as many partition states as fit; more topics than one holds
        take several, and one losing undoes those before it. Partition states beyond the
        transactions' room follow in more (the controller writes any a dead creator left)."""
        if not specs:
            return []
        names = [name for name, _, _ in specs]
        self.check_create_many(names)
        plans = [(name, self._assignment(name, count, assignments), dict(configs), self.new_id())
                 for name, count, configs in specs]
        live = set(self._image.brokers)
        created: dict[str, int] = {}
        pending: dict[str, list[int]] = {}
        per_txn = max(1, self.max_txn_ops // 2)
        try:
            for start in range(0, len(plans), per_txn):
                chunk = plans[start:start + per_txn]
                keys = [self._topic_key(name) for name, *_ in chunk]
                ops = [_put(k, {"id": str(tid), "partitions": [list(r) for r in a], "configs": c})
                       for k, (_, a, c, tid) in zip(keys, chunk)]
                parts = [(name, i, r) for name, a, _, _ in chunk for i, r in enumerate(a)]
                room = self.max_txn_ops - len(ops)
                ops += [_put(self._part_key((n, i)), _state_doc(initial_state(r, live))) for n, i, r in parts[:room]]
                res = await self._txn([_cmp_create(k, 0) for k in keys], ops, [_get(k) for k in keys])
                if not res.succeeded:
                    await self._catch_up(res)
                    raise TopicExists(next((n for (n, *_), k in zip(chunk, keys) if k in res.kvs), chunk[0][0]))
                created.update((name, res.revision) for name, *_ in chunk)
                for n, i, _ in parts[room:]:
                    pending.setdefault(n, []).append(i)
        except (TopicExists, MetadataUnavailable):
            await self._undo_create(created)
            raise
        last = max(created.values())
        await self._seen(last)  # _create_partition_keys reads the assignments from the mirror
        for name, indexes in pending.items():
            last = max(last, await self._create_partition_keys(name, created[name], indexes, live))
        await self._seen(last)
        return [self.topics[name] for name in names]

    async def _undo_create(self, created: dict[str, int]) -> None:
        for name, rev in created.items():
            try:
                await self._delete_topic_txn(name, rev)
            except MetadataUnavailable as exc:
                log.warning("could not undo the creation of topic %r: %s", name, exc)

    async def _delete_topic_txn(self, name: str, create_rev: int) -> _TxnResult:
        """The topic key (if still incarnation `create_rev`) and, by a range delete, all its
        partition states, in one transaction."""
        key, pre = self._topic_key(name), self._key("partitions", name) + b"/"
        return await self._txn([_cmp_create(key, create_rev)], [_delete(key), _delete(pre, prefix_range_end(pre))])

    async def delete_topic(self, name: str) -> Topic:
        """KeyError if unknown (or deleted meanwhile)."""
        topic = self.topics[name]
        res = await self._delete_topic_txn(name, self._topic_revs[name][0])
        if not res.succeeded:
            raise KeyError(name)
        await self._seen(res.revision)
        return topic

    async def _topic_cas(self, names: list[str], build: Callable[[], Item]) -> None:
        """Commit `build()` (compares on the named topic keys' mod_revisions, from the
        mirror); when one changed meanwhile, catch the mirror up and build again."""
        for _ in range(CAS_RETRIES):
            for name in names:
                if name not in self.topics:
                    raise KeyError(name)
            compares, ops = build()
            res = await self._txn(compares, ops, [_get(self._topic_key(n)) for n in names])
            if res.succeeded:
                if res.changed:
                    await self._seen(res.revision)
                return
            for name in names:
                if self._topic_key(name) not in res.kvs:
                    raise KeyError(name)
            await self._catch_up(res)
        raise Fenced(f"topics {names}: too many concurrent changes")

    async def add_partitions(self, counts: dict[str, int],
                             assignments: dict[str, list[tuple[int, ...]]] | None = None) -> None:
        """Grow topics to `counts` partitions; `assignments[name]` lists the new partitions'
        replicas (or all of them). KeyError for an unknown topic, ValueError for a missing
        assignment (both before writing), Fenced if the count changed concurrently."""
        plans = []
        for name, count in counts.items():
            if name not in self.topics:
                raise KeyError(name)
            base = len(self._assign[name])
            if count < base:
                raise ValueError(f"topic {name!r} has {base} partitions; cannot shrink to {count}")
            given = (assignments or {}).get(name) or []
            if count > base:
                given = given[base:] if len(given) == count else given
                plans.append((name, base, self._assignment(name, count - base, {name: given})))
        live = set(self._image.brokers)
        room = self.max_txn_ops - 1
        for name, base, new in plans:
            key = self._topic_key(name)

            def build(name=name, base=base, new=new, key=key) -> Item:
                if len(self._assign[name]) != base:
                    raise Fenced(f"topic {name!r} changed its partition count meanwhile")
                topic = self.topics[name]
                ops = [_put(key, self._topic_doc(topic, self._assign[name] + new, topic.configs))]
                ops += [_put(self._part_key((name, base + i)), _state_doc(initial_state(r, live)))
                        for i, r in enumerate(new[:room])]
                return [_cmp_mod(key, self._topic_revs[name][1])], ops

            await self._topic_cas([name], build)
            if len(new) > room:
                rest = list(range(base + room, base + len(new)))
                await self._seen(await self._create_partition_keys(name, self._topic_revs[name][0], rest, live))

    async def set_configs(self, topics: dict[str, dict[str, str]] | None = None,
                          brokers: dict[str, dict[str, str]] | None = None,
                          groups: dict[str, dict[str, str]] | None = None) -> None:
        """Replace topic overrides (compare-and-set on each topic key), dynamic broker
        configs and group overrides; an empty dict deletes a broker or group entry. One
        transaction unless etcd's op limit needs more. KeyError for an unknown topic,
        before writing."""
        topics = topics or {}
        for name in topics:
            if name not in self.topics:
                raise KeyError(name)
        plain = [_put(key, dict(configs)) if configs else _delete(key)
                 for kind, entries in (("broker_configs", brokers or {}), ("group_configs", groups or {}))
                 for key, configs in ((self._key(kind, _encode_name(r)), c) for r, c in entries.items())]
        names, limit = list(topics), self.max_txn_ops
        while names or plain:
            some, names = names[:limit], names[limit:]
            extra, plain = plain[:limit - len(some)], plain[limit - len(some):]

            def build(some=some, extra=extra) -> Item:
                return ([_cmp_mod(self._topic_key(t), self._topic_revs[t][1]) for t in some],
                        [_put(self._topic_key(t), self._topic_doc(self.topics[t], self._assign[t], topics[t]))
                         for t in some] + extra)

            await self._topic_cas(some, build)

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, by any broker: blocks of 1000 are
        reserved in etcd by compare-and-set (Kafka's ProducerIdManager over ZooKeeper's
        /latest_producer_id_block), a restart abandons the rest of its block."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                key = self._key("producer_ids")
                for _ in range(20):
                    cur = await self._call("get", lambda c: c.get(key))
                    end = int(json.loads(cur.value)["block_end"]) if cur is not None else 0
                    guard = _cmp_mod(key, cur.mod_revision) if cur is not None else _cmp_create(key, 0)
                    res = await self._txn([guard], [_put(key, {"block_end": end + PRODUCER_ID_BLOCK})])
                    if res.succeeded:
                        self._pid_next, self._pid_end = end, end + PRODUCER_ID_BLOCK
                        break
                else:
                    raise MetadataUnavailable("producer id block: too much contention")
            pid = self._pid_next
            self._pid_next += 1
            return pid

    async def alter_partition(self, tp: TopicPartition, expected: PartitionState,
                              new: PartitionState) -> PartitionState:
        """KIP-497 AlterPartition: write `new`'s leader, epoch and ISR if the partition is
        still at `expected.partition_epoch`; else Fenced (the mirror then shows the newer
        state). Returns the state as stored, its partition epoch the new revision."""
        key = self._part_key(tp)
        if expected.partition_epoch <= 0:  # mod_revision 0 would match an absent key
            raise Fenced(f"{tp[0]}-{tp[1]}: no partition epoch to compare with")
        res = await self._txn([_cmp_mod(key, expected.partition_epoch)], [_put(key, _state_doc(new))], [_get(key)])
        if not res.succeeded:
            await self._catch_up(res)
            raise Fenced(f"{tp[0]}-{tp[1]}: partition epoch {expected.partition_epoch} is stale")
        await self._seen(res.revision)
        state = self._parts.get(tp)
        if state is not None and state.partition_epoch == res.revision:
            return state
        return PartitionState(expected.replicas, new.leader, new.leader_epoch, tuple(new.isr), res.revision)
