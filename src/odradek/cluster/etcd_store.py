"""The etcd v3 metadata backend: Kafka's ZooKeeper-era coordination, on etcd.

Theory of operation. Every broker keeps a mirror of everything under `<prefix>/` in
memory (reads never do I/O) and changes it only with etcd transactions; one watch on the
prefix applies every change, its own included, to the mirror in revision order and
publishes a new ClusterImage. A write returns once etcd committed it and the watch has
applied its revision, so the caller sees its own write at once.

The key layout, and the mirror itself, are in etcd_mirror.py: what the keys and values
mean, pure. This module does the I/O: when to read, watch and write them.

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
import functools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import aetcd
import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from .backend import Fenced, MetadataUnavailable, MirroredReads, TopicSpec
from .controller import elect
from .etcd_mirror import (
    EtcdMirror,
    Item,
    _assignment,
    _batches,
    _cmp_create,
    _cmp_mod,
    _decode_name,  # noqa: F401 - the tests import it from here
    _delete,
    _encode_name,  # noqa: F401 - the tests import it from here
    _get,
    _put,
    _TxnResult,
)
from .image import BrokerInfo, ClusterImage, PartitionState, TopicPartition
from .metadata import Topic, TopicExists, _random_uuid

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000  # as MetadataStore and Kafka's ProducerIdManager hand them out
MIN_BACKOFF, MAX_BACKOFF = 0.05, 1.0  # seconds between retries of the background tasks
CAS_RETRIES = 5
# The part of a lease's TTL a broker counts on (see lease_current): the rest covers a clock
# that runs a little slower here than at etcd.
LEASE_TRUST = 0.9
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


class EtcdBackend(MirroredReads):
    """MetadataBackend over etcd v3 (see the module docstring)."""

    single_node = False

    def __init__(self, endpoints: list[tuple[str, int]], node_id: int, *, prefix: str = "/odradek",
                 lease_ttl_ms: int = 6000, new_id: Callable[[], uuid.UUID] | None = None,
                 unclean: Callable[[str], bool] = lambda topic: False, request_timeout_ms: int = 5000,
                 max_txn_ops: int = 128, clock: Callable[[], float] = time.monotonic) -> None:
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
        # The mirror, changed by the watch (and a reload) only. Its dicts are changed in
        # place only, so the broker may hold them.
        self.mirror = EtcdMirror(self._p)
        super().__init__(self.mirror)
        self._revision = 0  # every event up to this revision is applied
        self._loaded = False
        self._waiters: list[tuple[int, asyncio.Future]] = []
        # Connection, lease and tasks.
        self._client: aetcd.Client | None = None
        self._ep = 0
        self._lease = 0
        self._granted_ttl = 0  # etcd may grant more than asked (its minimum TTL)
        # Until when (on `clock`) the lease surely lives, and the registration revision the
        # watch must have applied before the broker trusts its view (see lease_current).
        self._clock = clock
        self._lease_deadline = float("-inf")
        self._lease_revision = 0
        self._lapse_logged = False
        self._me: BrokerInfo | None = None
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self._started = False
        self._closed = False
        self._elect_kick = asyncio.Event()
        self._campaign_kick = asyncio.Event()
        self._pid_lock = asyncio.Lock()
        self._pid_next = self._pid_end = 0

    @property
    def is_controller(self) -> bool:
        node, _, lease = self.mirror.controller
        return node == self.node_id and lease == self._lease != 0

    def lease_current(self) -> bool:
        """Whether this broker can be sure nobody has been elected in its place: the
        controller moves leadership only off a broker whose registration is gone, and the
        registration lives as long as its lease. Judged locally, with no I/O: the lease lives
        at least its TTL from when the last refresh etcd answered was sent (etcd counts from
        when it got it, later), of which LEASE_TRUST is counted on. After a new registration
        (the old lease expired: etcd, or this process, stood still), only once the watch has
        applied it, and so every change made while the old lease was gone, such as leaders
        elected in this broker's place. A SIGSTOPped coordinator that wakes up after its lease
        expired therefore answers NOT_COORDINATOR at once, not from state that may be stale."""
        current = self._lease != 0 and self._clock() < self._lease_deadline and self._revision >= self._lease_revision
        if current == self._lapse_logged:
            self._lapse_logged = not current
            if current:
                log.info("broker %d: its etcd lease is current again", self.node_id)
            else:
                log.warning("broker %d: its etcd lease may have expired; coordinator requests get NOT_COORDINATOR "
                            "until etcd answers", self.node_id)
        return current

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
                await client.get(self.mirror.key("cluster_id"))
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

    def _publish(self) -> None:
        if not self.mirror.dirty:
            return
        old, self._image = self._image, self.mirror.image()
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
        if self.mirror.load(resp.kvs):  # the controller key: the campaign looks again
            self._campaign_kick.set()
        self._loaded = True
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
            key = self.mirror.key("cluster_id")
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
        key = self.mirror.key("brokers", str(self.node_id))
        doc = {"host": self._me.host, "port": self._me.port, "rack": self._me.rack,
               "endpoints": [list(e) for e in self._me.endpoints]}
        sent = self._clock()
        lease = await self._call("lease grant", lambda c: c.lease(self.lease_ttl_s))
        for _ in range(CAS_RETRIES):
            res = await self._txn([_cmp_create(key, 0)], [_put(key, doc, lease.id)], [_get(key)])
            if res.succeeded:
                self._lease, self._granted_ttl = lease.id, lease.ttl
                self._lease_deadline = sent + lease.ttl * LEASE_TRUST
                self._lease_revision = res.revision
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
                    if self.mirror.apply_events(resp.events):
                        self._campaign_kick.set()
                    self._publish()
                    self._advance(max(ev.kv.mod_revision for ev in resp.events))
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
        sent = self._clock()
        try:
            async with asyncio.timeout(max(interval, 0.5)):
                reply = await self._call("lease keepalive", lambda c: c.refresh_lease(lease))
        except TimeoutError:
            if client is not None:
                self._failover(client)
            raise MetadataUnavailable("lease keepalive timed out") from None
        if reply is None:
            raise MetadataUnavailable("lease keepalive: no answer")
        if reply.TTL > 0 and lease == self._lease:
            self._lease_deadline = max(self._lease_deadline, sent + reply.TTL * LEASE_TRUST)
        elif reply.TTL <= 0 and lease == self._lease:
            log.warning("broker %d: its etcd lease expired; registering again with a new broker epoch", self.node_id)
            await self._register()

    async def _campaign_step(self) -> None:
        """While the mirror shows no controller, try to become it: create the controller key
        on our lease if nobody has (ZooKeeper: create the ephemeral /controller)."""
        self._campaign_kick.clear()
        if not (self.mirror.controller[0] == -1 and self._lease and self._loaded):
            await self._campaign_kick.wait()
            return
        key = self.mirror.key("controller")
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
                await self._control(self._image, self.mirror.controller[1])
            except MetadataUnavailable:
                self._elect_kick.set()  # try again after the backoff
                raise

    async def _control(self, image: ClusterImage, epoch: int) -> None:
        live = set(image.brokers)
        fence = [(self.mirror.key("controller"), epoch)]
        decisions = elect(image.partitions, live=live, unclean=self.unclean)
        top = 0
        if decisions:
            log.info("controller %d (epoch %d): %d partition state change(s) for live brokers %s",
                     self.node_id, epoch, len(decisions), sorted(live))
            items = [self.mirror.state_item(tp, st.partition_epoch, st) for tp, st in decisions.items()]
            top = await self._commit_batches(items, fence)
        # Partition states a creator did not get to write (it died between transactions).
        for name, assignment in list(self.mirror.assign.items()):
            missing = [i for i in range(len(assignment)) if (name, i) not in self.mirror.raw_states]
            if missing and name in self.mirror.topic_revs:
                top = max(top, await self._create_partition_keys(name, self.mirror.topic_revs[name][0], missing,
                                                                 live, fence))
        await self._seen(top)  # the next round starts from an image with these decisions in it

    # --- transaction batching ----------------------------------------------------------------

    async def _commit_batches(self, items: list[Item], guards: list[tuple[bytes, int]]) -> int:
        """Commit `items` in as few transactions as etcd's op limit allows, each guarded by
        `guards` (key, create_revision). A batch whose compare fails is retried one item at a
        time (the others may still apply); if a guard itself failed, stop. Returns the
        highest committed revision (0 if none)."""
        guard_cmps = [_cmp_create(k, r) for k, r in guards]
        guard_gets = [_get(k) for k, _ in guards]
        top = 0
        for batch in _batches(items, self.max_txn_ops - len(guard_cmps), self.max_txn_ops):
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
        items = self.mirror.create_state_items(name, indexes, live)
        return await self._commit_batches(items, [(self.mirror.topic_key(name), topic_rev), *extra])

    # --- writes -------------------------------------------------------------------------------

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
        self.mirror.check_create_many(names)
        plans = [(name, _assignment(name, count, assignments), dict(configs), self.new_id())
                 for name, count, configs in specs]
        live = set(self._image.brokers)
        created: dict[str, int] = {}
        pending: dict[str, list[int]] = {}
        per_txn = max(1, self.max_txn_ops // 2)
        try:
            for start in range(0, len(plans), per_txn):
                chunk = plans[start:start + per_txn]
                keys = [self.mirror.topic_key(name) for name, *_ in chunk]
                (compares, ops), rest = self.mirror.create_topics_item(chunk, live, self.max_txn_ops)
                res = await self._txn(compares, ops, [_get(k) for k in keys])
                if not res.succeeded:
                    await self._catch_up(res)
                    raise TopicExists(next((n for (n, *_), k in zip(chunk, keys) if k in res.kvs), chunk[0][0]))
                created.update((name, res.revision) for name, *_ in chunk)
                for n, i in rest:
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
                await self._txn(*self.mirror.delete_topic_item(name, rev))
            except MetadataUnavailable as exc:
                log.warning("could not undo the creation of topic %r: %s", name, exc)

    async def delete_topic(self, name: str) -> Topic:
        """KeyError if unknown (or deleted meanwhile)."""
        topic = self.topics[name]
        res = await self._txn(*self.mirror.delete_topic_item(name, self.mirror.topic_revs[name][0]))
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
            res = await self._txn(compares, ops, [_get(self.mirror.topic_key(n)) for n in names])
            if res.succeeded:
                if res.changed:
                    await self._seen(res.revision)
                return
            for name in names:
                if self.mirror.topic_key(name) not in res.kvs:
                    raise KeyError(name)
            await self._catch_up(res)
        raise Fenced(f"topics {names}: too many concurrent changes")

    async def add_partitions(self, counts: dict[str, int],
                             assignments: dict[str, list[tuple[int, ...]]] | None = None) -> None:
        """Grow topics to `counts` partitions; `assignments[name]` lists the new partitions'
        replicas (or all of them). KeyError for an unknown topic, ValueError for a missing
        assignment (both before writing), Fenced if the count changed concurrently."""
        plans = self.mirror.grow_plans(counts, assignments)
        live = set(self._image.brokers)
        room = self.max_txn_ops - 1
        for name, base, new in plans:
            await self._topic_cas([name], functools.partial(self.mirror.grow_item, name, base, new, live, room))
            if len(new) > room:
                rest = list(range(base + room, base + len(new)))
                await self._seen(await self._create_partition_keys(name, self.mirror.topic_revs[name][0], rest, live))

    async def set_configs(self, topics: dict[str, dict[str, str]] | None = None,
                          brokers: dict[str, dict[str, str]] | None = None,
                          groups: dict[str, dict[str, str]] | None = None,
                          users: dict[str, dict[str, str]] | None = None,
                          acls: dict[str, dict[str, str]] | None = None) -> None:
        """Replace topic overrides (compare-and-set on each topic key), dynamic broker
        configs, group overrides and users' SCRAM credentials; an empty dict deletes a
        broker, group or user entry. One
        transaction unless etcd's op limit needs more. KeyError for an unknown topic,
        before writing."""
        topics = topics or {}
        for name in topics:
            if name not in self.topics:
                raise KeyError(name)
        plain = self.mirror.config_ops(brokers or {}, groups or {}, users or {}, acls or {})
        names, limit = list(topics), self.max_txn_ops
        while names or plain:
            some, names = names[:limit], names[limit:]
            extra, plain = plain[:limit - len(some)], plain[limit - len(some):]

            def build(some=some, extra=extra) -> Item:
                compares, ops = self.mirror.topic_configs_item({t: topics[t] for t in some})
                return compares, ops + extra

            await self._topic_cas(some, build)

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, by any broker: blocks of 1000 are
        reserved in etcd by compare-and-set (Kafka's ProducerIdManager over ZooKeeper's
        /latest_producer_id_block), a restart abandons the rest of its block."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                key = self.mirror.key("producer_ids")
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
        if expected.partition_epoch <= 0:  # mod_revision 0 would match an absent key
            raise Fenced(f"{tp[0]}-{tp[1]}: no partition epoch to compare with")
        compares, ops = self.mirror.state_item(tp, expected.partition_epoch, new)
        res = await self._txn(compares, ops, [_get(self.mirror.part_key(tp))])
        if not res.succeeded:
            await self._catch_up(res)
            raise Fenced(f"{tp[0]}-{tp[1]}: partition epoch {expected.partition_epoch} is stale")
        await self._seen(res.revision)
        state = self.mirror.parts.get(tp)
        if state is not None and state.partition_epoch == res.revision:
            return state
        return PartitionState(expected.replicas, new.leader, new.leader_epoch, tuple(new.isr), res.revision)
