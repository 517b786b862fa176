"""A member process inside the simulation: the real client core and the consumer's real
reconciliation, driven with simulated time and links.

Theory of operation: `client.membership.ConsumerGroupMember` (KIP-848) or
`client.classic.ClassicGroupMember` (JoinGroup/SyncGroup, eager or cooperative) decides
what to send and what to own, and `client.reconciler.Reconciler` -- the same object
`client.consumer.AsyncConsumer` drives -- decides what the application does about it and
keeps its positions. This driver carries the reconciler's steps out with simulated time
and links instead of sockets and callbacks:

  * lost partitions first (fenced: dropped, no commit), then revocations (the commit goes
    out; the revocation completes once it is answered or has failed), then assignments
    (the committed offsets are fetched before anything is consumed), in the order
    `Reconciler.next_step` gives them;
  * the core's next request goes out on the member's link, with the consumer's timeouts
    (JoinGroup: the rebalance timeout + 5 s); a timeout fails the request and closes the
    link, as the client closes a connection after a request timeout;
  * positions advance while partitions are owned (the application consuming), and are
    committed every `commit_interval_ms` with the core's commit identity (epoch or
    generation), as auto-commit does;
  * the classic leader gets partition counts when it must assign and every second after,
    as the consumer's metadata watch gives them;
  * the coordinator is found as the consumer finds it: a FindCoordinator answered by a
    broker (sim/cluster.py; a zombie names itself), kept until a connection to it fails or
    an answer says NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE; then the member
    disconnects, failing what was in flight on that connection (Java's
    markCoordinatorUnknown), and looks it up again for its next request.

What is the simulator's own: the faults. A "slow" member holds a revocation back (fault
`slow_member`), requests time out, members crash. The driver reports what it believes it
owns in `owned()` (topic name, partition) for the checkers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.client.assignors import CooperativeStickyAssignor, RangeAssignor
from odradek.client.classic import ClassicGroupMember
from odradek.client.cluster import TopicPartition
from odradek.client.errors import COORDINATOR_MOVED, KafkaError
from odradek.client.member import AssigningMember, GroupMember
from odradek.client.membership import ConsumerGroupMember
from odradek.client.reconciler import (
    Assign,
    Lose,
    Reconciler,
    Revoke,
    committed_offsets,
)

from .eos import EosProducer
from .network import Link

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP = 8, 9, 11
REQUEST_TIMEOUT_MS = 3000
API_NAMES = {8: "OffsetCommit", 9: "OffsetFetch", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
             68: "ConsumerGroupHeartbeat"}
UNSTABLE_RETRY_MS = 100  # the consumer's retry.backoff.ms after UNSTABLE_OFFSET_COMMIT (KIP-447)


@dataclass
class Pending:
    api: int
    kind: str  # "group", "commit", "revoke-commit", "fetch"
    deadline: int
    link: Link
    parts: frozenset = frozenset()  # fetch: the partitions concerned
    revocation: Revoke | None = None  # revoke-commit: the revocation waiting for it


def coordinator_moved(resp) -> bool:
    """Whether an answer says the coordinator is elsewhere (top level, per group, per partition)."""
    if isinstance(resp, KafkaError):
        return resp.code in COORDINATOR_MOVED
    if getattr(resp, "error_code", None) in COORDINATOR_MOVED:
        return True
    if any(getattr(g, "error_code", None) in COORDINATOR_MOVED for g in getattr(resp, "groups", None) or ()):
        return True
    return any(getattr(p, "error_code", None) in COORDINATOR_MOVED
               for t in getattr(resp, "topics", None) or () for p in getattr(t, "partitions", None) or ())


class SimMember:
    def __init__(self, world, name: str, kind: str, *, instance_id: str | None,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 server_assignor: str | None, commit_interval_ms: int, eos: dict | None = None) -> None:
        self.world = world
        self.name = name
        self.kind = kind  # "consumer", "classic-eager", "classic-cooperative"
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        rng = world.rng
        self.core: GroupMember
        if kind == "consumer":
            self.core = ConsumerGroupMember(world.group_id, instance_id=instance_id,
                                            rebalance_timeout_ms=rebalance_timeout_ms,
                                            server_assignor=server_assignor,
                                            member_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)))
        else:
            assignor = CooperativeStickyAssignor() if kind == "classic-cooperative" else RangeAssignor()
            self.core = ClassicGroupMember(world.group_id, assignors=[assignor], instance_id=instance_id,
                                           session_timeout_ms=session_timeout_ms,
                                           rebalance_timeout_ms=rebalance_timeout_ms,
                                           heartbeat_interval_ms=heartbeat_interval_ms)
        self._assigning = isinstance(self.core, AssigningMember)
        # Positions are keyed by the name each partition was assigned with; whether its topic
        # still exists (the same incarnation) is asked of the world's metadata when a commit or
        # fetch is built.
        # The EOS workload (issue 19): offsets are committed only inside transactions
        # (enable.auto.commit=false, as librdkafka's transactions example sets it).
        self.rec = Reconciler(world.group_id, member=self.core, resolve=self._resolve, topic_id=self._topic_id,
                              needs_generation=kind != "consumer", auto_commit=eos is None,
                              auto_commit_interval_ms=commit_interval_ms, first_auto_commit_ms=0)
        self.alive = True
        self.stopping = False  # graceful leave under way
        self.link: Link | None = None
        self.coordinator: int | None = None  # the broker it takes for the group's coordinator
        self.pending: dict[tuple[int, int], Pending] = {}
        self.revoke_at = 0  # slow member: when the revocation may complete
        self.next_poll = 0
        self.next_watch = 0
        self.fatal_at: int | None = None
        self.eos: EosProducer | None = EosProducer(self, **eos) if eos is not None else None

    # ------------------------------------------------------------------ beliefs

    def _resolve(self, key) -> TopicPartition:
        if isinstance(key, TopicPartition):
            return key
        return TopicPartition(self.world.topic_name(key[0]), key[1])

    def _name(self, key) -> tuple[str, int]:
        """The name of a core partition now (a deleted topic's are renamed, for the checkers)."""
        tp = self._resolve(key)
        return tp.topic, tp.partition

    def _topic_id(self, name: str):
        """The id of the topic named `name` now, as the member's metadata would say (None: none)."""
        topic = self.world.coordinator.metadata.topics.get(name)
        return None if topic is None else topic.topic_id

    def _exists(self, tp: TopicPartition) -> bool:
        """Whether the topic of the partition held as `tp` still exists, the same incarnation
        it was assigned under: a deleted topic's partitions have nothing left to commit to or
        fetch from, and a recreated one's offsets are not theirs (Reconciler.current)."""
        return tp.topic in self.world.coordinator.metadata.topics and self.rec.current(tp)

    def exists(self, tp: TopicPartition) -> bool:
        return self._exists(tp)

    def owned(self) -> set[tuple[str, int]]:
        return {self._name(tp) for tp in self.core.owned} if self.alive else set()

    @property
    def member_id(self) -> str:
        return self.core.member_id

    @property
    def revoking(self) -> frozenset | None:
        """The core partitions whose revocation is under way, or None."""
        step = self.rec.revoking
        return None if step is None else step.keys

    @revoking.setter
    def revoking(self, keys) -> None:
        # sim/defects.py's stuck-revocation holds a revocation open this way.
        self.rec.revoking = None if keys is None else Revoke(frozenset(keys), frozenset(map(self.rec.name, keys)))

    # ------------------------------------------------------------------ the driver loop

    def pump(self, now: int) -> None:
        """Do everything that is due; called after every event that concerns this member."""
        if not self.alive:
            return
        core = self.core
        if core.error is not None or core.state.name == "FATAL":
            if self.fatal_at is None:
                self.fatal_at = now
                self.world.trace(f"{self.name}: fatal {core.error}")
                self.world.member_failed(self)
            return
        step = self.rec.next_step()
        if isinstance(step, Lose):
            if self.eos is not None:
                self.eos.abort_for("the member lost its partitions")
            lost = self.owned()
            self.world.stats.revocations += len(lost)
            self.rec.drop_lost(step)
            self.world.trace(f"{self.name}: {'fenced' if core.fenced else 'missed a generation'}, lost {sorted(lost)}")
            self.rec.lost(now)
        self._revoke(now)
        self._assign(now)
        self._metadata(now)
        self._send_group(now)
        self._commit_periodically(now)
        if self.eos is None:
            self._consume(now)
        else:
            self.eos.pump(now)
        if self.stopping and not core.active and not self.pending:
            self.world.member_stopped(self)

    def _revoke(self, now: int) -> None:
        rec = self.rec
        if rec.revoking is None:
            step = rec.next_step()
            if not isinstance(step, Revoke):
                return
            offsets = rec.start_revoke(step)
            self.revoke_at = now + self.world.slow_delay(self)
            if offsets and not self._commit(now, offsets, revocation=step):
                rec.revoke_commit_done(step)  # nothing could be sent: nothing to wait for
            if self.eos is not None:
                self.eos.abort_for("partitions are revoked")
        if rec.revoke_committed and now >= self.revoke_at and (self.eos is None or self.eos.settled()):
            revoked = rec.finish_revoke(now)
            names = {self._name(tp) for tp in revoked}
            self.world.stats.revocations += len(names)
            self.world.trace(f"{self.name}: revoked {sorted(names)}")

    def _assign(self, now: int) -> None:
        step = self.rec.next_step()
        if not isinstance(step, Assign) or not step.pairs:
            return
        names = {(tp.topic, tp.partition) for tp in step.parts}
        self.rec.start_assign(step)
        self.world.stats.acquired(names)
        self.world.trace(f"{self.name}: assigned {sorted(names)}")
        self.rec.finish_assign(step, now)
        self._fetch_committed(now, step.parts)

    def _metadata(self, now: int) -> None:
        core = self.core
        if not self._assigning:
            return
        if core.needs_metadata is not None:
            core.set_metadata(self.world.partition_counts(core.needs_metadata), now)
        elif core.is_leader and now >= self.next_watch:
            self.next_watch = now + 1000
            core.set_metadata(self.world.partition_counts(sorted(core.group_topics)), now)

    def _send_group(self, now: int) -> None:
        if any(p.kind == "group" for p in self.pending.values()):
            return
        request = self.core.next_request(now)
        if request is None:
            return
        api, body = request
        timeout = REQUEST_TIMEOUT_MS
        if api == JOIN_GROUP:
            timeout = max(timeout, self.rebalance_timeout_ms + 5000)  # Java's JoinGroup timeout
        self._send(now, api, body, Pending(api, "group", now + timeout, self._link()))

    def _commit_periodically(self, now: int) -> None:
        if not self.rec.auto_commit_due(now):
            return
        offsets = self.rec.offsets()
        if offsets and not any(p.kind == "commit" for p in self.pending.values()):
            self._commit(now, offsets)

    def _consume(self, now: int) -> None:
        if now < self.next_poll:
            return
        self.next_poll = now + 100
        rng = self.world.rng
        for s in self.rec.positions.parts.values():
            if s.position is not None:
                s.position += rng.randint(0, 3)

    # ------------------------------------------------------------------ requests

    def _link(self) -> Link:
        if self.link is None or not self.link.alive:
            if self.coordinator is None:
                self.coordinator = self.world.coordinator.find_coordinator()
                self.world.trace(f"{self.name}: FindCoordinator says b{self.coordinator}")
            self.link = self.world.network.new_link(self.name, self.coordinator)
        return self.link

    def _send(self, now: int, api: int, body: dict, pending: Pending) -> None:
        link = pending.link
        version = self.world.versions[api]
        cid, frame = link.wire.request(api, version, body)
        key = (link.id, cid)  # correlation ids restart on every connection
        self.pending[key] = pending
        self.world.schedule(pending.deadline, f"{self.name}: deadline of request {cid} (link {link.id})",
                            lambda: self._timeout(key))
        self.world.network.send_up(link, now, lambda: self.world.coordinator.deliver(link, frame),
                                   f"{API_NAMES.get(api, api)} {cid}")

    def _commit(self, now: int, offsets: dict, *, revocation: Revoke | None = None) -> bool:
        """Send an OffsetCommit with the core's identity; False if there was nothing to send."""
        try:
            req = self.rec.commit_request({tp: o for tp, o in offsets.items() if self._exists(tp)})
        except KafkaError:
            return False  # no identity to commit with (fenced, or between generations)
        if not req.offsets:
            return False
        pending = Pending(OFFSET_COMMIT, "commit" if revocation is None else "revoke-commit",
                          now + REQUEST_TIMEOUT_MS, self._link(), revocation=revocation)
        self._send(now, OFFSET_COMMIT, req.body(), pending)
        return True

    def _fetch_committed(self, now: int, parts) -> None:
        """Fetch the committed offsets of those of `parts` still waiting for them."""
        live = []
        for tp in self.rec.to_fetch(parts):
            if self._exists(tp):
                live.append(tp)
            else:
                self.rec.positions.parts[tp].position = 0  # the topic is gone: nothing to fetch
        if live:
            self._send(now, OFFSET_FETCH, self.rec.fetch_body(live),
                       Pending(OFFSET_FETCH, "fetch", now + REQUEST_TIMEOUT_MS, self._link(), frozenset(live)))

    def fetch_committed(self, now: int, parts) -> None:
        self._fetch_committed(now, parts)

    def on_frame(self, link: Link, frame: bytes, now: int) -> None:
        if self.eos is not None and self.alive and self.eos.owns(link):
            self.eos.on_frame(link, frame, now)  # the member's producer has connections of its own
            return
        if not self.alive or link is not self.link:
            return
        try:
            answers = link.wire.receive_data(frame)
        except KafkaError:
            self._close_link(now)
            return
        answered = [(p, resp) for cid, resp in answers if (p := self.pending.pop((link.id, cid), None)) is not None]
        if any(coordinator_moved(resp) for _, resp in answered):
            self.world.trace(f"{self.name}: b{link.broker} is not the coordinator; disconnects")
            self._close_link(now)
        for pending, resp in answered:
            self._answered(pending, resp, now)
        self.pump(now)

    def _answered(self, pending: Pending, resp, now: int) -> None:
        if pending.kind == "group":
            if isinstance(resp, KafkaError):
                self.core.on_failure(pending.api, resp, now)
            else:
                self.core.on_response(pending.api, resp, now)
        elif pending.kind == "revoke-commit":
            self.rec.revoke_commit_done(pending.revocation)
        elif pending.kind == "fetch":
            self._fetched(pending, resp, now)

    def _fetched(self, pending: Pending, resp, now: int) -> None:
        try:
            if isinstance(resp, KafkaError):
                raise resp
            found = committed_offsets(resp)
        except KafkaError as exc:
            if self.eos is not None and exc.code == ErrorCode.unstable_offset_commit:
                # KIP-447: a transaction holds an offset of the partition; ask again later.
                self.world.schedule(now + UNSTABLE_RETRY_MS, f"{self.name}: retry offset fetch (unstable)",
                                    lambda parts=pending.parts: self._refetch(parts))
                return
            self._fetch_committed(now, pending.parts)  # retry, as the consumer's position lookup does
            return
        found = {tp: o for tp, o in found.items() if self._exists(tp)}
        for tp in self.rec.apply_committed(found, sorted(pending.parts)):
            self.rec.positions.parts[tp].position = 0  # none committed: auto.offset.reset=earliest, from 0

    def _timeout(self, key: tuple[int, int]) -> None:
        pending = self.pending.get(key)
        if pending is None or not self.alive:
            return
        now = self.world.now
        self.world.trace(f"{self.name}: request {key[1]} on link {key[0]} ({API_NAMES[pending.api]}) timed out")
        self._close_link(now)
        self.pump(now)

    def _close_link(self, now: int) -> None:
        """The client closes the connection: every request on it (and on any connection the
        network broke before) fails."""
        if self.link is not None:
            self.link.alive = False
        self.coordinator = None  # looked up again for the next request
        failed, self.pending = self.pending, {}
        for pending in failed.values():
            error = KafkaError(ErrorCode.request_timed_out, "simulated connection closed")
            if pending.kind == "group":
                self.core.on_failure(pending.api, error, now)
            elif pending.kind == "revoke-commit":
                self.rec.revoke_commit_done(pending.revocation)  # auto-commit failures are logged, not fatal
            elif pending.kind == "fetch" and self.rec.to_fetch(pending.parts):
                self.world.schedule(now + 100, f"{self.name}: retry offset fetch",
                                    lambda parts=pending.parts: self._refetch(parts))

    def _refetch(self, parts) -> None:
        if self.alive:
            self._fetch_committed(self.world.now, parts)

    # ------------------------------------------------------------------ lifecycle

    def next_wake(self) -> int | None:
        """When `pump` will next have something to do that no message will bring."""
        if not self.alive:
            return None
        kinds = {p.kind for p in self.pending.values()}
        times = []
        if self.eos is not None:
            times.append(self.eos.next_wake())  # no auto-commit, and its own polls
        elif self.rec.positions.parts:
            times.append(self.next_poll)
            if "commit" not in kinds:
                times.append(self.rec.next_auto_commit_ms)
        if "group" not in kinds:
            times.append(self.core.next_deadline())
        if self.rec.revoking is not None and self.rec.revoke_committed:
            times.append(self.revoke_at)
        if self._assigning and self.core.is_leader:
            times.append(self.next_watch)
        times = [t for t in times if t is not None]
        return int(min(times)) if times else None

    def crash(self) -> None:
        self.alive = False
        if self.link is not None:
            self.link.alive = False
        self.pending.clear()
        if self.eos is not None:
            self.eos.crash()

    def leave(self, now: int) -> None:
        """Graceful close, as the consumer's close(): commit, revoke everything, leave."""
        self.stopping = True
        held = self.rec.held()
        # EOS: offsets are committed only in transactions; an open one is abandoned (the
        # coordinator aborts it when it times out).
        offsets = self.rec.offsets(held) if self.eos is None else {}
        if offsets:
            self._commit(now, offsets)
        self.world.stats.revocations += len(self.core.owned)
        self.rec.leave(held, now)
        self.pump(now)
