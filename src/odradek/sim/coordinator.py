"""One coordinator broker inside the simulation: the real runtime and handlers over a replicated log.

Theory of operation: this is the broker's group-coordinator path with the sockets, disk and
wall clock taken out. A request frame from a link is parsed by the broker's
`parse_request`, handled by the broker's own API handler (ConsumerGroupHeartbeat,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch) or, for the two requests the coordinator
parks (JoinGroup, SyncGroup), translated by the handler's own functions and run with a
reply callback of ours; the answer is encoded by `encode_response`.

The runtime is the real `CoordinatorRuntime` of a broker in a cluster (`commit_on_write=
False`): its records are encoded with the real record codec and appended at this broker's
leader epoch to its replica of the `__consumer_offsets` partition (sim/replication.py),
and an answer is released only when the high watermark passes the records it waits for
(`complete_up_to`). The high watermark is the broker's own `LeaderPartition`
(replication/leader.py): the followers' fetches move it (sim/cluster.py), and on a broker
alone in its ISR every append moves it at once. Becoming leader loads the shard by
replaying this broker's replica (`on_election`); ceasing to lead unloads it
(`on_resignation`: parked requests and answers not yet released fail NOT_COORDINATOR).
A broker that is deposed without hearing of it (a zombie, sim/cluster.py) keeps its
shards but serves nothing as coordinator (`serving`, the broker's lease check): leadership
moves only off a broker whose lease expired, so its own count of the lease ran out first.
What it had appended and not yet committed is never copied, so its high watermark never
passes it and those answers are never released.

Two rules are the runtime's, driven here as broker/coordinator.py drives them: a load
ends at the log end but is committed only up to the high watermark (`loaded_up_to`,
Kafka's CoordinatorLoaderImpl; a new leader's records past it are the old leader's last
writes, and answers that describe them wait until the followers have them), and answers
still waiting `COMMIT_TIMEOUT_MS` after the high watermark last moved fail
COORDINATOR_NOT_AVAILABLE (`fail_stalled_writes`, Kafka's write timeout,
offsets.commit.timeout.ms); their records stay in the log and may still commit.

Handlers answer at once or with a future (broker/coordinated.py `answer`). The future
needs an asyncio loop to be created in, so each handler call runs inside one
(`_call_handler`); the loop never runs anything else and no time passes in it: the
answer is taken from the future when the runtime's deferred answer settles.

Each link's requests are handled in arrival order, and a request whose answer waits holds
back the ones behind it until it is answered, as the broker mutes a connection. A crash
forgets every parked request, every answer waiting and every timer; their clients time out.
Constructed alone (no cluster), the broker leads every partition at epoch 0 with itself as
the whole ISR: a single node, whose writes commit as they are appended.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker import handlers as _handlers  # noqa: F401 - registers every API
from odradek.broker.handlers.classic_group import (
    heartbeat_api,
    join_request,
    join_response,
    leave_group,
    sync_request,
)
from odradek.broker.handlers.consumer_group import consumer_group_heartbeat
from odradek.broker.handlers.offsets import offset_commit, offset_fetch
from odradek.broker.handlers.producer_id import init_producer_id
from odradek.broker.handlers.transactions import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
)
from odradek.broker.handlers.txn_offsets import txn_offset_commit
from odradek.broker.registry import supported_versions
from odradek.broker.txn_coordinator import MARKERS_WAIT_MS
from odradek.cluster.image import PartitionState
from odradek.cluster.names import TRANSACTION_STATE
from odradek.coordinator import dispatch
from odradek.coordinator import records as R
from odradek.coordinator.classic.rebalance import error_join, sync_error
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.errors import (
    CoordinatorError,
    CoordinatorUnavailable,
    error_code_for,
)
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.records import StoredLog
from odradek.coordinator.runtime import CoordinatorRuntime
from odradek.coordinator.shard import Shard
from odradek.log.producer_state import SequenceError
from odradek.protocol.errors import NOT_COORDINATOR, UNKNOWN_SERVER_ERROR
from odradek.protocol.messages import Request, encode_response, parse_request
from odradek.records.control import Marker
from odradek.replication.leader import HighWatermark, LeaderPartition, ProposeIsr
from odradek.security.acl import OPEN
from odradek.transactions.coordinator import TxnConfig

from .network import Link
from .replication import Entry, ReplicaLog
from .txn import SimTxnCoordinator, SimWait, is_txn_key, txn_key

JOIN_GROUP, SYNC_GROUP = 11, 14
_HANDLERS = {68: consumer_group_heartbeat, 12: heartbeat_api, 13: leave_group, 8: offset_commit, 9: offset_fetch,
             28: txn_offset_commit, 22: init_producer_id, 24: add_partitions_to_txn, 25: add_offsets_to_txn,
             26: end_txn}
TXN_APIS = frozenset({22, 24, 25, 26})  # answered by the transaction coordinator's runtime
COMMIT_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms, Kafka's default
_LOOP: asyncio.AbstractEventLoop | None = None


@dataclass
class SimTopic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    is_internal: bool = False


class SimMetadata:
    """What the handlers ask of the broker's metadata store (one for the whole cluster)."""

    def __init__(self) -> None:
        self.topics: dict[str, SimTopic] = {}
        self.transaction_state: SimTopic | None = None  # __transaction_state (internal), when transactions run
        self.next_producer_id = 1000

    def get(self, name: str) -> SimTopic | None:
        if name == TRANSACTION_STATE:
            return self.transaction_state
        return self.topics.get(name)

    async def allocate_producer_id(self) -> int:
        """The controller hands out producer ids (Kafka's ProducerIdManager): unique in the cluster."""
        self.next_producer_id += 1
        return self.next_producer_id

    def get_by_id(self, topic_id: uuid.UUID) -> SimTopic | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def image(self, version: int) -> MetadataImage:
        return MetadataImage.of([(t.name, t.topic_id, t.partitions) for t in self.topics.values()], (), version)


def _call_handler(handler, host, request):
    """handler(host, request) with an asyncio loop running, so an answer that waits for its
    commit can be a future (broker/coordinated.py); nested calls reuse the running one."""
    global _LOOP
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return handler(host, request)
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()

    async def call():
        return handler(host, request)

    return _LOOP.run_until_complete(call())


def _step(coro):
    """Run a coroutine handler until it next waits: ("done", response) or ("waiting", what
    it awaits: an asyncio future of `answer`, or a sim/txn.SimWait)."""
    try:
        return "waiting", coro.send(None)
    except StopIteration as stop:
        return "done", stop.value



class _Runtime:
    """The runtime as the handlers see it, keeping the answer handle of the last `submit`."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self._runtime = runtime
        self.last = None

    def submit(self, group_id, op, now_ms, queued_at=None):
        # queued_at (the metrics' request start) only comes from group handlers; the
        # transaction runtime takes none.
        args = (group_id, op, now_ms) if queued_at is None else (group_id, op, now_ms, queued_at)
        self.last = self._runtime.submit(*args)
        return self.last

    def __getattr__(self, name: str):
        return getattr(self._runtime, name)


class _CoordinatorView:
    """`broker.coordinator` (or `broker.txn_coordinator`) for the handlers."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = _Runtime(runtime)


class _TxnCoordinatorView(_CoordinatorView):
    """`broker.txn_coordinator` for the handlers: the runtime, and the wait for a decision's
    markers (broker/txn_coordinator.py `wait_for_markers`), on the simulated clock."""

    def __init__(self, txn: SimTxnCoordinator) -> None:
        super().__init__(txn.runtime)
        self._txn = txn

    def wait_for_markers(self, transactional_id: str, timeout_ms: int = MARKERS_WAIT_MS):
        return self._txn.wait_for_markers(transactional_id, timeout_ms)


class SimCoordinator:
    """One broker: the handlers' `broker` (broker/coordinated.CoordinatorHost) and its replicas."""

    def __init__(self, config: CoordinatorConfig, rng: random.Random, clock: Callable[[], int],
                 send_down: Callable[[Link, bytes], None], *, node_id: int = 0, metadata: SimMetadata | None = None,
                 cluster=None, txn_config: TxnConfig | None = None) -> None:
        self.config = config
        self.rng = rng
        self.clock = clock
        self.send_down = send_down
        self.node_id = node_id
        self.metadata = metadata or SimMetadata()
        self.cluster = cluster  # sim/cluster.SimCluster, or None: a single node
        self.supported = supported_versions()
        self.partitions = range(config.offsets_topic_partitions)
        # Replicas by key: __consumer_offsets-p under p, __transaction_state-p under txn_key(p).
        self.keys = list(self.partitions) + [txn_key(p) for p in range(txn_config.num_partitions if txn_config else 0)]
        self.logs: dict[int, ReplicaLog] = {k: ReplicaLog() for k in self.keys}
        self.view: dict[int, PartitionState] = {}  # what this broker knows of each partition's leadership
        self.leading: dict[int, LeaderPartition] = {}  # partitions it leads (or believes it does)
        self.up = True
        self.image_version = 0
        self.queues: dict[int, deque[bytes]] = {}  # link id -> frames waiting behind an unanswered request
        self.parked: set[int] = set()  # links whose head request awaits its answer
        self.links: dict[int, Link] = {}
        self.observers: list = []  # on_request(coordinator, request), on_response(coordinator, request, response)
        self.crashes = 0
        self._appended: set[int] = set()  # partitions appended to since the last flush
        self._depth = 0  # runtime calls under way (answers released inside them are flushed after)
        self._current: Request | None = None  # the request whose operation is writing
        self.writes: dict[int, list[tuple[int, int]]] = {}  # id(request) -> (partition, offset) it appended
        self.runtime = self._new_runtime()
        self.coordinator = _CoordinatorView(self.runtime)
        # The transaction coordinator (issue 19), when the cluster runs transactions.
        self.txn = SimTxnCoordinator(self, txn_config, COMMIT_TIMEOUT_MS) if txn_config is not None else None
        self.txn_coordinator = _TxnCoordinatorView(self.txn) if self.txn is not None else None
        if cluster is None:
            me = (node_id,)
            for p in self.keys:
                self.become_leader(p, PartitionState(me, node_id, 0, me), clock())

    def __repr__(self) -> str:
        return f"b{self.node_id}"

    def access(self, request):
        """The simulated clients are not authenticated: no authorizer, everything allowed."""
        return OPEN

    def _new_runtime(self) -> CoordinatorRuntime:
        rng = self.rng
        return CoordinatorRuntime(self.config, self._write, self.metadata.image(self.image_version),
                                  new_member_id=lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                                  reader=lambda p: self.logs[p].stored(), commit_on_write=False,
                                  serving=self.serving, write_timeout_ms=COMMIT_TIMEOUT_MS)

    def serving(self) -> bool:
        """Whether this broker can count on its lease (broker/coordinator.py, cluster/
        etcd_store.py `lease_current`): not while it is a zombie. The controller deposes only
        a broker whose lease expired, which the broker's own clock saw first."""
        return self.cluster is None or self.node_id not in self.cluster.deaf

    def _write(self, partition: int, records: list[R.CoordinatorRecord], now_ms: int,
               transactional: R.Transactional | None = None) -> int:
        if not self.serving():
            # broker/coordinator.py refuses so; the runtime rebuilds the shard from its log.
            raise CoordinatorUnavailable(NOT_COORDINATOR, f"{self} cannot count on its lease")
        leader = self.leading.get(partition)
        assert leader is not None, f"{self} wrote to __consumer_offsets-{partition}, which it does not lead"
        log = self.logs[partition]
        first = log.end
        try:
            if records[0].type == R.TXN_MARKER:
                # A control batch: the partition's producer state refuses a marker of an older
                # producer or coordinator epoch.
                assert len(records) == 1, "a transaction marker is written alone"
                (producer_id, producer_epoch), v = records[0].key, records[0].value
                last = log.append_marker(leader.leader_epoch, Marker(producer_id, producer_epoch, v["commit"],
                                                                     v["coordinator_epoch"]))
            elif transactional is not None:
                # KIP-98: one transactional batch of the producer, without a sequence (the
                # coordinator numbers nothing), checked by the producer state as the broker's is.
                last = log.append_as_leader(leader.leader_epoch, [R.encode(r) for r in records],
                                            transactional.producer_id, transactional.producer_epoch)
            else:
                last = log.append_as_leader(leader.leader_epoch, [R.encode(r) for r in records])
        except SequenceError as exc:
            # The log fenced the producer or the marker's coordinator: its code is the answer
            # (broker/coordinator.py `_write`).
            raise CoordinatorError(ErrorCode.__members__.get(exc.code, UNKNOWN_SERVER_ERROR),
                                   f"__consumer_offsets-{partition}: {exc}") from exc
        self._appended.add(partition)
        if self._current is not None:
            self.writes.setdefault(id(self._current), []).extend((partition, o) for o in range(first, last + 1))
        return last

    def appended_to(self, key: int) -> None:
        """A runtime appended to replica `key`: its followers are told once the call is done."""
        self._appended.add(key)

    def entries_written(self, request: Request) -> list[tuple[int, int, Entry]]:
        """(partition, offset, entry) of the records `request`'s operation appended here."""
        return [(p, o, self.logs[p].entries[o]) for p, o in self.writes.get(id(request), ())
                if o < self.logs[p].end]

    # --- leadership -------------------------------------------------------------------------

    def leads(self, partition: int) -> bool:
        return self.up and partition in self.leading

    def become_leader(self, partition: int, state: PartitionState, now: int) -> None:
        """Lead `partition` at `state`'s epoch (Kafka makeLeader): start the epoch in the log,
        track the followers, load the shard by replaying this replica."""
        log = self.logs[partition]
        log.become_leader(state.leader_epoch)
        self.view[partition] = state
        leader = self.leading[partition] = LeaderPartition(
            self.node_id, state.replicas, state.isr, leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch, log_end_offset=log.end, high_watermark=log.hw, now_ms=now)
        if is_txn_key(partition):
            # As broker/replica_manager.py does (Kafka's makeLeader: maybeIncrementLeaderHW):
            # a leader alone in its ISR commits its whole log at once, before the shard loads.
            # (Not done for __consumer_offsets, whose leaders wait for their first append,
            # so that the seeds of the group protocols replay as they always have.)
            self.apply(partition, leader.appended(log.end, now))
        self._run(lambda: self._elected(partition, state.leader_epoch, now))

    def _elected(self, partition: int, epoch: int, now: int) -> None:
        if is_txn_key(partition):
            self.txn.elected(partition - txn_key(0), epoch, now)
            return
        self.runtime.on_election(partition, epoch, now)
        if self.cluster is not None:  # as broker/coordinator.py does for a replicated partition
            log = self.logs[partition]
            self.runtime.loaded_up_to(partition, log.end, log.hw, now)

    def become_follower(self, partition: int, state: PartitionState) -> None:
        """Follow `state.leader` (Kafka makeFollower): a shard this broker led is unloaded."""
        self.view[partition] = state
        old = self.leading.pop(partition, None)
        if old is not None and self.up:
            if is_txn_key(partition):
                self._run(lambda: self.txn.resigned(partition - txn_key(0), old.leader_epoch))
            else:
                self._run(lambda: self.runtime.on_resignation(partition, old.leader_epoch))

    def apply(self, partition: int, effects) -> None:
        """Carry out what this broker's LeaderPartition asks: release answers up to a new high
        watermark; hand an ISR change to the controller."""
        for effect in effects:
            if isinstance(effect, HighWatermark):
                self.logs[partition].hw = effect.offset
                if is_txn_key(partition):
                    self._run(lambda hw=effect.offset: self.txn.committed_up_to(partition - txn_key(0), hw,
                                                                                 self.clock()))
                else:
                    self._run(lambda hw=effect.offset: self.runtime.complete_up_to(partition, hw - 1, self.clock()))
            elif isinstance(effect, ProposeIsr) and self.cluster is not None:
                self.cluster.propose_isr(self, partition, effect)

    def run(self, call):
        """A runtime call from outside the request path (a marker job): see `_run`."""
        return self._run(call)

    def _run(self, call):
        """A runtime call; what it appended is reported once the outermost call is done (the
        runtime is not re-entered from inside its own write)."""
        self._depth += 1
        try:
            return call()
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._flush()

    def _flush(self) -> None:
        while self._appended:
            partition = min(self._appended)
            self._appended.discard(partition)
            leader = self.leading.get(partition)
            if leader is None or not self.up:
                continue
            self.apply(partition, leader.appended(self.logs[partition].end, self.clock()))
            if self.cluster is not None:
                self.cluster.appended(self, partition)

    # --- topics -----------------------------------------------------------------------------

    def topics_changed(self, version: int) -> None:
        self.image_version = version
        if self.up:
            self._run(lambda: self.runtime.update_image(self.metadata.image(version), self.clock()))

    # --- crash and restart ------------------------------------------------------------------

    def crash(self) -> None:
        """Lose everything but the replicas: shards, timers, parked requests, queued frames."""
        self.up = False
        self.crashes += 1
        self.queues.clear()
        self.parked.clear()
        self.leading.clear()
        self._appended.clear()
        self.writes.clear()
        for link in self.links.values():
            link.alive = False
        self.links.clear()

    def restart(self) -> None:
        """Up again with a fresh runtime and no leadership: the controller says what it leads
        (KIP-848 "Fail Over": a broker that becomes coordinator loads by replay)."""
        self.runtime = self._new_runtime()
        self.coordinator = _CoordinatorView(self.runtime)
        if self.txn is not None:
            self.txn.runtime = self.txn.new_runtime()
            self.txn_coordinator = _TxnCoordinatorView(self.txn)
        self.view.clear()
        self.up = True

    def replayed_shard(self, partition: int) -> Shard:
        """A fresh shard rebuilt from this replica alone (no take-over: nothing re-armed or rewritten)."""
        runtime = CoordinatorRuntime(self.config, lambda *_: None, self.runtime.image)
        shard = runtime.new_shard(partition)
        stored = self.logs[partition].stored()
        if isinstance(stored, StoredLog):
            # Transactional batches and markers: the runtime's own load, item by item in log order.
            CoordinatorRuntime._replay_bytes(shard, stored)
            shard.loading = False
            return shard
        shard.loading = True
        for key, value in stored:
            record = R.decode(key, value)
            if record is not None:
                shard.replay(record)
        shard.loading = False
        return shard

    # --- requests ---------------------------------------------------------------------------

    def deliver(self, link: Link, frame: bytes) -> None:
        """A request frame (size prefix included) arrived on `link`."""
        if not self.up:
            link.alive = False  # connection refused: the client times out and retries
            return
        self.links[link.id] = link
        queue = self.queues.setdefault(link.id, deque())
        queue.append(frame[4:])
        self._drain(link)

    def _drain(self, link: Link) -> None:
        queue = self.queues.get(link.id)
        if queue and not link.alive:
            # The client closed the connection: what it sent that was not read yet (the
            # connection was muted) is gone with it.
            queue.clear()
        while queue and link.id not in self.parked and self.up:
            self._handle(link, queue.popleft())

    def _handle(self, link: Link, payload: bytes) -> None:
        request = parse_request(payload, self.supported)
        for o in self.observers:
            o.on_request(self, request)
        self.parked.add(link.id)  # the next request on the link waits for this one's answer
        runtime = self.runtime
        answered = []

        def answer(body: dict) -> None:
            if answered or runtime is not self.runtime or not self.up:
                return  # answered already, or by a runtime that has since crashed
            answered.append(True)
            self._respond(link, request, body)
            self.parked.discard(link.id)
            self._drain(link)

        previous, self._current = self._current, request
        try:
            self._run(lambda: self._dispatch(request, answer))
        finally:
            self._current = previous

    def _dispatch(self, request: Request, answer: Callable[[dict], None]) -> None:
        key = request.api_key
        if key in (JOIN_GROUP, SYNC_GROUP):
            # The handlers' own translation, with a reply callback of ours (their _run_parked
            # awaits an asyncio future instead).
            if key == JOIN_GROUP:
                req = join_request(request)

                def op(shard, reply, now, req=req):
                    return dispatch.join_group(shard, req, reply, now)

                def shape(response: dict) -> dict:
                    return join_response(request, response)

                def on_error(code) -> dict:
                    return error_join(code, req.member_id)
            else:
                req = sync_request(request)

                def op(shard, reply, now, req=req):
                    return dispatch.sync_group(shard, req, reply, now)

                def shape(response: dict) -> dict:
                    return {"throttle_time": 0, **response}

                on_error = sync_error

            def reply(response: dict) -> None:
                answer(shape(response))

            deferred = self.runtime.submit(req.group_id, lambda shard, now: op(shard, reply, now), self.clock())
            deferred.add_done_callback(lambda d: d.error is None or reply(on_error(error_code_for(d.error))))
            return
        runtime = self.txn_coordinator.runtime if key in TXN_APIS else self.coordinator.runtime
        if inspect.iscoroutinefunction(_HANDLERS[key]):
            self._coroutine(_HANDLERS[key], request, runtime, answer)
            return
        out = _call_handler(_HANDLERS[key], self, request)
        if isinstance(out, dict):
            answer(out)
            return
        # A future: the runtime's answer waits for its records to be committed. The handler's
        # own callback on it ran first, so the future holds the response when ours runs.
        runtime.last.add_done_callback(lambda _d: answer(out.result()))

    def _coroutine(self, handler, request: Request, runtime: _Runtime, answer: Callable[[dict], None]) -> None:
        """A coroutine handler (InitProducerId, which may await a producer id from the
        controller, here at once; EndTxn, which awaits its decision's markers), stepped by
        hand: no time passes in the loop. Each time it waits, it is stepped again when what
        it waits for settles: the runtime's deferred answer behind an `answer` future, or a
        sim/txn.SimWait (resolved by simulated time or a marker job)."""
        coro = handler(self, request)
        me = self.runtime

        def step() -> None:
            if me is not self.runtime or not self.up:
                coro.close()  # crashed meanwhile: the request is gone with the process
                return
            runtime.last = None
            state, out = _call_handler(lambda _host, _req: _step(coro), self, request)
            if state == "done":
                answer(out)
            elif isinstance(out, SimWait):
                out.on_done(step)
            else:
                waiting_on = runtime.last
                assert waiting_on is not None and not waiting_on.done, "a handler awaits the runtime's answer"
                waiting_on.add_done_callback(lambda _d: step())

        step()

    def _respond(self, link: Link, request: Request, body: dict) -> None:
        for o in self.observers:
            o.on_response(self, request, body)
        self.writes.pop(id(request), None)
        self.send_down(link, encode_response(request, body))

    def tick(self) -> int:
        if not self.up:
            return 0
        now = self.clock()
        ran = self._run(lambda: self.runtime.tick(now))
        ran += len(self._run(lambda: self.runtime.fail_stalled_writes(now)))
        if self.txn is not None:
            ran += self._run(lambda: self.txn.runtime.tick(now))
            ran += len(self._run(lambda: self.txn.runtime.fail_stalled_writes(now)))
        return ran

    def next_deadline(self) -> int | None:
        if not self.up:
            return None
        if self.txn is None:
            return self.runtime.next_deadline()
        deadlines = [d for d in (self.runtime.next_deadline(), self.txn.runtime.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None
