"""A member process inside the simulation: the real client core, driven as the consumer drives it.

Theory of operation: `client.membership.ConsumerGroupMember` (KIP-848) or
`client.classic.ClassicGroupMember` (JoinGroup/SyncGroup, eager or cooperative) decides
what to send and what to own; this driver does what `client.consumer.AsyncConsumer` does
around it, with simulated time and links instead of sockets:

  * lost partitions first (fenced: drop everything, no commit, `lost()`), then revocations
    (commit the positions, then `revoked()`), then assignments (fetch the committed
    offsets, then consume from them, `assigned()`), as the consumer's `_reconcile` does;
  * the core's next request goes out on the member's link, with the consumer's timeouts
    (JoinGroup: the rebalance timeout + 5 s); a timeout fails the request and closes the
    link, as the client closes a connection after a request timeout;
  * positions advance while partitions are owned (the application consuming), and are
    committed every `commit_interval_ms` with the core's commit identity (epoch or
    generation), as auto-commit does;
  * the classic leader gets partition counts when it must assign and every second after,
    as the consumer's metadata watch gives them.

The driver records what it believes it owns in `owned()` (topic name, partition) for the
checkers. A "slow" member holds a revocation back (fault `slow_member`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from odradek.client.assignors import CooperativeStickyAssignor, RangeAssignor
from odradek.client.classic import ClassicGroupMember
from odradek.client.cluster import TopicPartition
from odradek.client.errors import KafkaError
from odradek.client.membership import ConsumerGroupMember
from odradek.client.offsets import commit_body, fetch_committed_body

from .network import Link

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP = 8, 9, 11
REQUEST_TIMEOUT_MS = 3000
API_NAMES = {8: "OffsetCommit", 9: "OffsetFetch", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
             68: "ConsumerGroupHeartbeat"}


@dataclass
class Pending:
    api: int
    kind: str  # "group", "commit", "fetch"
    deadline: int
    link: Link
    parts: frozenset = frozenset()  # commit/fetch: the partitions concerned
    identity: tuple = ()  # commit: (epoch or generation, member id)
    offsets: dict = field(default_factory=dict)


class SimMember:
    def __init__(self, world, name: str, kind: str, *, instance_id: str | None,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 server_assignor: str | None, commit_interval_ms: int) -> None:
        self.world = world
        self.name = name
        self.kind = kind  # "consumer", "classic-eager", "classic-cooperative"
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.commit_interval_ms = commit_interval_ms
        rng = world.rng
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
        self.alive = True
        self.stopping = False  # graceful leave under way
        self.link: Link | None = None
        self.pending: dict[int, Pending] = {}
        # Keyed as the core keys partitions ((topic id, partition) for KIP-848 members), so a
        # deleted and recreated topic's partitions are never mistaken for each other; names
        # are looked up when a commit or fetch is built.
        self.positions: dict = {}  # None: committed offset being fetched
        self.revoking: frozenset | None = None  # partitions whose revocation commit is under way
        self.revoke_at = 0  # slow member: when the revocation may complete
        self.revoke_committed = False
        self.next_commit = 0
        self.next_poll = 0
        self.next_watch = 0
        self.fatal_at: int | None = None

    # ------------------------------------------------------------------ beliefs

    def _name(self, tp) -> tuple[str, int]:
        if isinstance(tp, TopicPartition):
            return tp.topic, tp.partition
        return self.world.topic_name(tp[0]), tp[1]

    def _live_name(self, tp) -> str | None:
        """The topic name to commit or fetch `tp` under, None if that topic no longer exists."""
        if isinstance(tp, TopicPartition):
            return tp.topic if tp.topic in self.world.coordinator.metadata.topics else None
        name = self.world.topic_name(tp[0])
        topic = self.world.coordinator.metadata.topics.get(name)
        return name if topic is not None and topic.topic_id == tp[0] else None

    def owned(self) -> set[tuple[str, int]]:
        return {self._name(tp) for tp in self.core.owned} if self.alive else set()

    @property
    def member_id(self) -> str:
        return self.core.member_id

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
        if core.fenced or getattr(core, "to_lose", frozenset)():
            lost = self.owned()
            self.world.stats.revocations += len(lost)
            self.positions.clear()
            self.revoking = None
            self.world.trace(f"{self.name}: {'fenced' if core.fenced else 'missed a generation'}, lost {sorted(lost)}")
            core.lost(now=now)
        self._revoke(now)
        self._assign(now)
        self._metadata(now)
        self._send_group(now)
        self._commit_periodically(now)
        self._consume(now)
        if self.stopping and not core.active and not self.pending:
            self.world.member_stopped(self)

    def _revoke(self, now: int) -> None:
        core = self.core
        if self.revoking is None:
            revoke = core.to_revoke()
            if not revoke:
                return
            self.revoking = revoke
            self.revoke_committed = False
            self.revoke_at = now + self.world.slow_delay(self)
            offsets = {tp: o for tp, o in self.positions.items() if tp in revoke and o is not None}
            if offsets and not self._commit(now, offsets, for_revoke=True):
                self.revoke_committed = True
            elif not offsets:
                self.revoke_committed = True
        if self.revoke_committed and now >= self.revoke_at:
            revoke, self.revoking = self.revoking, None
            # The core may have moved on (fenced, or a newer target) while we committed.
            revoke = revoke & core.owned
            names = {self._name(tp) for tp in revoke}
            for tp in revoke:
                self.positions.pop(tp, None)
            self.world.stats.revocations += len(names)
            self.world.trace(f"{self.name}: revoked {sorted(names)}")
            core.revoked(revoke, now=now)

    def _assign(self, now: int) -> None:
        core = self.core
        if self.revoking is not None:
            return
        assign = core.to_assign()
        if not assign:
            return
        names = {self._name(tp) for tp in assign}
        for tp in sorted(assign, key=self._name):  # the RNG draws per partition must not follow set order
            self.positions[tp] = None
        self.world.stats.acquired(names)
        self.world.trace(f"{self.name}: assigned {sorted(names)}")
        core.assigned(assign, now=now)
        self._fetch_committed(now, set(assign))

    def _metadata(self, now: int) -> None:
        core = self.core
        if not isinstance(core, ClassicGroupMember):
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
        if now < self.next_commit:
            return
        self.next_commit = now + self.commit_interval_ms
        offsets = {tp: o for tp, o in self.positions.items() if o is not None}
        if offsets and not any(p.kind == "commit" for p in self.pending.values()):
            self._commit(now, offsets)

    def _consume(self, now: int) -> None:
        if now < self.next_poll:
            return
        self.next_poll = now + 100
        rng = self.world.rng
        for tp, pos in self.positions.items():
            if pos is not None:
                self.positions[tp] = pos + rng.randint(0, 3)

    # ------------------------------------------------------------------ requests

    def _link(self) -> Link:
        if self.link is None or not self.link.alive:
            self.link = self.world.network.new_link(self.name)
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

    def _commit(self, now: int, offsets: dict, *, for_revoke: bool = False) -> bool:
        generation, member_id, instance_id = self.core.commit_identity()
        if self.core.fenced or (generation < 0 and self.kind != "consumer"):
            return False  # no identity to commit with (fenced, or between generations)
        named = {}
        for tp, o in offsets.items():
            name = self._live_name(tp)
            if name is not None:  # a deleted topic's partitions have nothing left to commit to
                named[TopicPartition(name, tp[1])] = o
        if not named:
            return False
        body = commit_body(self.world.group_id, named, generation=generation, member_id=member_id,
                           instance_id=instance_id)
        pending = Pending(OFFSET_COMMIT, "revoke-commit" if for_revoke else "commit", now + REQUEST_TIMEOUT_MS,
                          self._link(), frozenset(offsets), (generation, member_id), dict(offsets))
        self._send(now, OFFSET_COMMIT, body, pending)
        return True

    def _fetch_committed(self, now: int, parts: set) -> None:
        live = {tp: self._live_name(tp) for tp in parts}
        for tp, name in live.items():
            if name is None and self.positions.get(tp, 0) is None:
                self.positions[tp] = 0  # the topic is gone: nothing to fetch
        tps = sorted(TopicPartition(name, tp[1]) for tp, name in live.items() if name is not None)
        if not tps:
            return
        body = fetch_committed_body(self.world.group_id, tps)
        self._send(now, OFFSET_FETCH, body, Pending(OFFSET_FETCH, "fetch", now + REQUEST_TIMEOUT_MS, self._link(),
                                                    frozenset(tp for tp, n in live.items() if n is not None)))

    def on_frame(self, link: Link, frame: bytes, now: int) -> None:
        if not self.alive or link is not self.link:
            return
        try:
            answers = link.wire.receive_data(frame)
        except KafkaError:
            self._close_link(now)
            return
        for cid, resp in answers:
            pending = self.pending.pop((link.id, cid), None)
            if pending is not None:
                self._answered(pending, resp, now)
        self.pump(now)

    def _answered(self, pending: Pending, resp, now: int) -> None:
        if pending.kind == "group":
            if isinstance(resp, KafkaError):
                self.core.on_failure(pending.api, resp, now)
            else:
                self.core.on_response(pending.api, resp, now)
        elif pending.kind == "revoke-commit":
            self.revoke_committed = True
        elif pending.kind == "fetch":
            self._fetched(pending, resp, now)

    def _fetched(self, pending: Pending, resp, now: int) -> None:
        ok = not isinstance(resp, KafkaError) and resp.error_code == ErrorCode.none
        got = {}
        if ok:
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        ok = False
                    got[(t.name, int(p.partition_index))] = max(0, int(p.committed_offset))
        waiting = [tp for tp in sorted(pending.parts, key=self._name)
                   if tp in self.positions and self.positions[tp] is None]
        if not ok:
            if waiting:  # retry, as the consumer's position lookup does
                self._fetch_committed(now, set(waiting))
            return
        for tp in waiting:
            self.positions[tp] = got.get((self._live_name(tp), tp[1]), 0)

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
        failed, self.pending = self.pending, {}
        for pending in failed.values():
            error = KafkaError(ErrorCode.request_timed_out, "simulated connection closed")
            if pending.kind == "group":
                self.core.on_failure(pending.api, error, now)
            elif pending.kind == "revoke-commit":
                self.revoke_committed = True  # auto-commit failures are logged, not fatal
            elif pending.kind == "fetch":
                waiting = {tp for tp in pending.parts if self.positions.get(tp, 0) is None}
                if waiting:
                    self.world.schedule(now + 100, f"{self.name}: retry offset fetch",
                                        lambda w=waiting: self._refetch(w))

    def _refetch(self, waiting: set) -> None:
        if self.alive:
            still = {tp for tp in waiting if tp in self.positions and self.positions[tp] is None}
            if still:
                self._fetch_committed(self.world.now, still)

    # ------------------------------------------------------------------ lifecycle

    def next_wake(self) -> int | None:
        """When `pump` will next have something to do that no message will bring."""
        if not self.alive:
            return None
        kinds = {p.kind for p in self.pending.values()}
        times = []
        if self.positions:
            times.append(self.next_poll)
            if "commit" not in kinds:
                times.append(self.next_commit)
        if "group" not in kinds:
            times.append(self.core.next_deadline())
        if self.revoking is not None and self.revoke_committed:
            times.append(self.revoke_at)
        if isinstance(self.core, ClassicGroupMember) and self.core.is_leader:
            times.append(self.next_watch)
        times = [t for t in times if t is not None]
        return int(min(times)) if times else None

    def crash(self) -> None:
        self.alive = False
        if self.link is not None:
            self.link.alive = False
        self.pending.clear()

    def leave(self, now: int) -> None:
        """Graceful close, as the consumer's close(): commit, revoke everything, leave."""
        self.stopping = True
        owned = self.core.owned
        offsets = {tp: o for tp, o in self.positions.items() if tp in owned and o is not None}
        if offsets:
            self._commit(now, offsets)
        self.world.stats.revocations += len(owned)
        self.positions.clear()
        self.revoking = None
        self.core.revoked(self.core.owned, now=now)
        self.core.leave(now=now)
        self.pump(now)

