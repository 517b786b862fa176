"""The coordinator inside the simulation: the real runtime and handlers, a log kept in memory.

Theory of operation: this is the broker's group-coordinator path with the sockets, disk and
wall clock taken out. A request frame from a link is parsed by the broker's
`parse_request`, handled by the broker's own API handler (ConsumerGroupHeartbeat,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch) or, for the two requests the coordinator
parks (JoinGroup, SyncGroup), translated by the handler's own functions and run with a
reply callback of ours; the answer is encoded by `encode_response`. The runtime is the
real `CoordinatorRuntime`: its records are encoded with the real record codec and kept in
a list per `__consumer_offsets` partition, which is what a crash leaves behind and what a
restart replays (`on_election`, as a broker that becomes coordinator loads its log).

Each link's requests are handled in arrival order, and a parked request holds back the ones
behind it until it is answered, as the broker mutes a connection. A crash forgets every
parked request and every timer; their clients time out.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

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
from odradek.broker.registry import supported_versions
from odradek.coordinator import dispatch
from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.runtime import CoordinatorRuntime
from odradek.coordinator.shard import Shard
from odradek.protocol.messages import Request, encode_response, parse_request

from .network import Link

JOIN_GROUP, SYNC_GROUP = 11, 14
_HANDLERS = {68: consumer_group_heartbeat, 12: heartbeat_api, 13: leave_group, 8: offset_commit, 9: offset_fetch}


@dataclass
class SimTopic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    is_internal: bool = False


class SimMetadata:
    """What the handlers ask of the broker's metadata store."""

    def __init__(self) -> None:
        self.topics: dict[str, SimTopic] = {}

    def get(self, name: str) -> SimTopic | None:
        return self.topics.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> SimTopic | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def image(self, version: int) -> MetadataImage:
        return MetadataImage.of([(t.name, t.topic_id, t.partitions) for t in self.topics.values()], (), version)


class _CoordinatorView:
    """`broker.coordinator` for the handlers."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime


class SimCoordinator:
    """The handlers' `broker` (broker/coordinated.CoordinatorHost): coordinator, metadata, clock."""

    def __init__(self, config: CoordinatorConfig, rng: random.Random, clock: Callable[[], int],
                 send_down: Callable[[Link, bytes], None]) -> None:
        self.config = config
        self.rng = rng
        self.clock = clock
        self.send_down = send_down
        self.metadata = SimMetadata()
        self.supported = supported_versions()
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(config.offsets_topic_partitions)}
        self.up = True
        self.image_version = 0
        self.queues: dict[int, deque[bytes]] = {}  # link id -> frames waiting behind a parked request
        self.parked: set[int] = set()  # links whose head request awaits its reply
        self.links: dict[int, Link] = {}
        self.observers: list = []  # on_request(coordinator, request), on_response(coordinator, request, response)
        self.crashes = 0
        self.runtime = self._new_runtime()
        for p in self.log:
            self.runtime.on_election(p, 0, clock())
        self.coordinator = _CoordinatorView(self.runtime)

    def _new_runtime(self) -> CoordinatorRuntime:
        rng = self.rng
        return CoordinatorRuntime(self.config, self._write, self.metadata.image(self.image_version),
                                  new_member_id=lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                                  reader=lambda p: list(self.log[p]))

    def _write(self, partition: int, records: list[R.CoordinatorRecord], now_ms: int) -> int:
        self.log[partition].extend(R.encode(r) for r in records)
        return len(self.log[partition]) - 1  # the last offset written; every write commits at once

    # --- topics -----------------------------------------------------------------------------

    def topics_changed(self) -> None:
        self.image_version += 1
        if self.up:
            self.runtime.update_image(self.metadata.image(self.image_version), self.clock())

    # --- crash and reload -------------------------------------------------------------------

    def crash(self) -> None:
        """Lose everything but the log: shards, timers, parked requests, queued frames."""
        self.up = False
        self.crashes += 1
        self.queues.clear()
        self.parked.clear()
        for link in self.links.values():
            link.alive = False
        self.links.clear()

    def restart(self) -> None:
        """KIP-848 "Fail Over": a new runtime replays each partition's records."""
        self.runtime = self._new_runtime()
        self.coordinator = _CoordinatorView(self.runtime)
        now = self.clock()
        for p in self.log:
            # Each restart is a new leadership of every partition (a higher epoch), loaded
            # by replaying its log: the path a broker takes when it becomes coordinator.
            self.runtime.on_election(p, self.crashes, now)
        self.up = True

    def replayed_shard(self, partition: int) -> Shard:
        """A fresh shard rebuilt from the log alone (no take-over: nothing re-armed or rewritten)."""
        runtime = CoordinatorRuntime(self.config, lambda *_: None, self.runtime.image)
        shard = runtime.new_shard(partition)
        shard.loading = True
        for key, value in self.log[partition]:
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
        while queue and link.id not in self.parked and self.up:
            self._handle(link, queue.popleft())

    def _handle(self, link: Link, payload: bytes) -> None:
        request = parse_request(payload, self.supported)
        for o in self.observers:
            o.on_request(self, request)
        key = request.api_key
        if key in (JOIN_GROUP, SYNC_GROUP):
            self.parked.add(link.id)
            if key == JOIN_GROUP:
                req = join_request(request)

                def op(shard, reply, now, req=req):
                    return dispatch.join_group(shard, req, reply, now)
            else:
                req = sync_request(request)

                def op(shard, reply, now, req=req):
                    return dispatch.sync_group(shard, req, reply, now)

            def reply(response: dict, request=request, link=link, runtime=self.runtime) -> None:
                if runtime is not self.runtime:
                    return  # answered by a coordinator that has since crashed
                body = join_response(request, response) if request.api_key == JOIN_GROUP else \
                    {"throttle_time": 0, **response}
                self._respond(link, request, body)
                self.parked.discard(link.id)
                self._drain(link)

            self.runtime.run(req.group_id, lambda shard, now: op(shard, reply, now), self.clock())
            return
        self._respond(link, request, _HANDLERS[key](self, request))

    def _respond(self, link: Link, request: Request, body: dict) -> None:
        for o in self.observers:
            o.on_response(self, request, body)
        self.send_down(link, encode_response(request, body))

    def tick(self) -> int:
        return self.runtime.tick(self.clock()) if self.up else 0

    def next_deadline(self) -> int | None:
        return self.runtime.next_deadline() if self.up else None
