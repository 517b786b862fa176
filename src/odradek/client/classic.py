"""The client side of the classic consumer group protocol, sans-I/O.

Theory of operation (consumer-0.9-rewrite-design "Group management protocol",
"Failure detection protocol", "Heartbeats during rebalance"; Kafka's AbstractCoordinator
and ConsumerCoordinator are the model): a rebalance has two round trips. The member
sends JoinGroup with one protocol per assignor, each carrying its subscription
(`consumer_protocol.encode_subscription`); the coordinator waits for every member,
bumps the generation, picks one protocol all members support and a leader, and
answers. The leader gets every member's subscription, fetches partition counts for the
union of their topics (`needs_metadata` / `set_metadata`), runs the chosen assignor and
sends the result in its SyncGroup; followers send an empty SyncGroup. Each SyncGroup
response carries the member's own assignment. Between rebalances the member
heartbeats every `heartbeat_interval_ms`; REBALANCE_IN_PROGRESS in a heartbeat response
is how the coordinator asks it to join again.

What the application must do around a rebalance depends on the rebalance protocol,
which is fixed by the assignors: cooperative only if every configured assignor is
cooperative (ConsumerCoordinator: "only consider protocols that are supported by all
the assignors"), so a group can move from range to cooperative-sticky by two rolling
bounces as KIP-429 describes.

* EAGER: before every JoinGroup the member gives up everything it owns (Java's
  onJoinPrepare; the 0.9 design's "stops fetching data, commits offsets and sends a
  JoinGroupRequest"): `to_revoke()` is everything owned and no JoinGroup leaves until
  the driver reported it with `revoked()`. After SyncGroup, `to_assign()` is the new
  assignment.
* COOPERATIVE (KIP-429): the member keeps its partitions while it rejoins and lists
  them as owned partitions in its subscription; only partitions of topics it no longer
  subscribes to are revoked first. After SyncGroup it revokes owned - assigned, then
  takes assigned - owned; if it revoked anything it joins again at once, and in that
  second rebalance the partitions it released go to their new owner.

In both cases revocation comes first: `to_assign()` is empty while `to_revoke()` is not.

Errors follow Java. MEMBER_ID_REQUIRED (KIP-394) retries JoinGroup at once with the id
the coordinator gave. UNKNOWN_MEMBER_ID and ILLEGAL_GENERATION mean the coordinator no
longer counts us in this generation: our partitions may already be someone else's, so
the member is *fenced*: the driver runs on_partitions_lost (no commit) and calls
`lost()`, then the member joins again (with an empty member id after
UNKNOWN_MEMBER_ID). FENCED_INSTANCE_ID (another process uses our group.instance.id) and
configuration errors are fatal. Coordinator errors and disconnects are retried after a
backoff; the driver rediscovers the coordinator.

Leaving: a dynamic member sends LeaveGroup so the group rebalances at once; a static
member (KIP-345) sends nothing: "consumer with `group.instance.id` set will not send
leave group request when they go offline", so its place (and assignment) survives a
restart within the session timeout.

The member speaks topic names (TopicPartition). Time is the caller's: every method that
needs it takes `now` in milliseconds. At most one request is in flight; the driver asks
`next_request(now)` and reports with `on_response` / `on_failure`.

States move only by `_fire(event)`, through the table TRANSITIONS keyed by (state, event)
as h11's `_state.py` is (DESIGN principle 3). The events are the member's inputs: a
rebalance must start (PREPARE), nothing is left to revoke before JoinGroup
(READY_TO_JOIN), the JoinGroup answer (JOINED, or JOINED_AS_LEADER when we must assign),
the assignor ran (ASSIGNED), the SyncGroup answer (SYNCED, or RECONCILED when there is
nothing to do), the app finished reconciling (RECONCILED), the rebalance restarts from
JoinGroup (REJOIN), fencing (FENCED while we own partitions, FENCED_EMPTY when we own
none), lost() after fencing (LOST), a fatal error (FATAL_ERROR), leaving (LEAVE, LEFT).
An event with no entry for the current state raises `IllegalTransition`: the driver fed
the member something its state cannot take, a bug on our side.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from kio.schema.errors import ErrorCode

from odradek.coordinator.consumer_protocol import (
    MAX_VERSION,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.coordinator.records import RecordError

from ..transitions import IllegalTransition
from .assignors import MemberSubscription
from .cluster import TopicPartition
from .errors import KafkaError

JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1
MAX_BACKOFF_MS = 1000  # Kafka's retry.backoff.max.ms default (KIP-580)

# Errors after which the member stops for good (AbstractCoordinator raises them to the
# application instead of retrying).
FATAL = frozenset({
    ErrorCode.group_authorization_failed,
    ErrorCode.invalid_session_timeout,
    ErrorCode.inconsistent_group_protocol,
    ErrorCode.group_max_size_reached,
    ErrorCode.unsupported_version,
    ErrorCode.invalid_group_id,
    ErrorCode.fenced_instance_id,
})
# Everything else that is not handled by name (COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR -- the driver rediscovers the coordinator --,
# disconnects, timeouts, unexpected codes) is retried after a backoff.


class State(Enum):
    UNSUBSCRIBED = "unsubscribed"
    PREPARING = "preparing"  # onJoinPrepare: the app revokes what must go before JoinGroup
    JOINING = "joining"  # JoinGroup to send (or in flight)
    ASSIGNING = "assigning"  # leader: waiting for partition counts to run the assignor
    SYNCING = "syncing"  # SyncGroup to send (or in flight)
    RECONCILING = "reconciling"  # the app revokes, then takes, towards the new assignment
    STABLE = "stable"
    FENCED = "fenced"  # the driver must run on_partitions_lost, then call lost()
    LEAVING = "leaving"
    FATAL = "fatal"


class Event(Enum):
    """The member's inputs: the keys of `TRANSITIONS` besides the state."""

    PREPARE = "prepare"  # a (re)join is needed: subscribed, rebalance asked for, rejoin after revoking
    READY_TO_JOIN = "ready-to-join"  # nothing left to revoke: the JoinGroup may go
    JOINED = "joined"  # JoinGroup answered: a follower, or a leader told to skip the assignment (KIP-814)
    JOINED_AS_LEADER = "joined-as-leader"  # JoinGroup answered: we run the assignor
    ASSIGNED = "assigned"  # the assignor ran: the leader's SyncGroup may go
    SYNCED = "synced"  # SyncGroup answered with an assignment the app must reconcile to
    RECONCILED = "reconciled"  # owned == the assignment, and no rejoin is pending
    REJOIN = "rejoin"  # the rebalance restarts from JoinGroup (REBALANCE_IN_PROGRESS, a failed request)
    FENCED = "fenced"  # the coordinator no longer counts us, and we own partitions to drop
    FENCED_EMPTY = "fenced-empty"  # the same, owning nothing: join again at once
    LOST = "lost"  # lost(): the app dropped the partitions after fencing
    FATAL_ERROR = "fatal-error"
    LEAVE = "leave"
    LEFT = "left"  # LeaveGroup answered or failed, or there was nobody to tell


S = State
E = Event
_ALIVE = frozenset({S.PREPARING, S.JOINING, S.ASSIGNING, S.SYNCING, S.RECONCILING, S.STABLE})
# (state, event) -> new state (DESIGN: transitions as tables).
TRANSITIONS: dict[tuple[State, Event], State] = {
    **{(s, E.PREPARE): S.PREPARING for s in (S.UNSUBSCRIBED, S.SYNCING, S.RECONCILING, S.STABLE)},
    (S.PREPARING, E.READY_TO_JOIN): S.JOINING,
    (S.JOINING, E.JOINED): S.SYNCING,
    (S.JOINING, E.JOINED_AS_LEADER): S.ASSIGNING,
    (S.ASSIGNING, E.ASSIGNED): S.SYNCING,
    (S.SYNCING, E.SYNCED): S.RECONCILING,
    (S.SYNCING, E.RECONCILED): S.STABLE,
    (S.RECONCILING, E.RECONCILED): S.STABLE,
    (S.JOINING, E.REJOIN): S.JOINING,  # a failed JoinGroup is sent again after the backoff
    (S.SYNCING, E.REJOIN): S.JOINING,  # AbstractCoordinator: a failed SyncGroup restarts from JoinGroup
    **{(s, E.FENCED): S.FENCED for s in _ALIVE},
    **{(s, E.FENCED_EMPTY): S.JOINING for s in _ALIVE},
    (S.FENCED, E.LOST): S.JOINING,
    **{(s, E.FATAL_ERROR): S.FATAL for s in _ALIVE},
    **{(s, E.LEAVE): S.LEAVING for s in (*_ALIVE, S.FENCED, S.LEAVING)},
    (S.LEAVING, E.LEFT): S.UNSUBSCRIBED,
    # FATAL: no entry; the member is done for good.
}
# States in which the member holds a generation and heartbeats to keep it: also while the
# app revokes before rejoining (Java's heartbeat thread runs through onJoinPrepare), but
# not with a JoinGroup out (consumer-0.9 "Heartbeats during rebalance": "Until the
# consumer receives a JoinGroupResponse, it does not send any more HeartbeatRequests").
_HEARTBEATING = frozenset({S.PREPARING, S.ASSIGNING, S.RECONCILING, S.STABLE})
# States in which offset commits may carry the generation: a completed SyncGroup and no
# newer JoinGroup sent (Java's generationIfStable; the coordinator refuses commits while
# it completes a rebalance).
_COMMITTABLE = frozenset({S.PREPARING, S.RECONCILING, S.STABLE})


def _code(resp) -> ErrorCode:
    code = resp.error_code
    return code if isinstance(code, ErrorCode) else ErrorCode(int(code))


def _by_topic(parts: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in parts:
        out.setdefault(t, []).append(p)
    return {t: sorted(ps) for t, ps in out.items()}


class ClassicGroupMember:
    def __init__(self, group_id: str, *, assignors: list, instance_id: str | None = None,
                 rack_id: str | None = None, session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                 heartbeat_interval_ms: int = 3000, retry_backoff_ms: int = 100) -> None:
        if not assignors:
            raise ValueError("the classic protocol needs at least one assignor")
        self.group_id = group_id
        self.assignors = list(assignors)
        # ConsumerCoordinator: the rebalance protocol is the most advanced one every
        # assignor supports; ours declare one each, and cooperative implies eager.
        self.cooperative = all(a.rebalance_protocol == "cooperative" for a in self.assignors)
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = S.UNSUBSCRIBED
        self.error: KafkaError | None = None
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.is_leader = False
        self.topics: list[str] | None = None
        self.regex: str | None = None
        self.owned: frozenset[TopicPartition] = frozenset()
        self.target: frozenset[TopicPartition] | None = None  # the assignment of the last SyncGroup
        # Leader: the union of the members' topics (Java's group subscription); the driver
        # may keep passing their partition counts to set_metadata, and a change rejoins.
        self.group_topics: frozenset[str] = frozenset()
        self.next_heartbeat_ms = 0.0
        self.in_flight: int | None = None  # api key of the request awaiting an answer
        self.epoch_changes = 0  # counts responses (the driver's "wait for the next one")
        self._retry_at = 0.0  # when JoinGroup / SyncGroup / LeaveGroup may go
        self._failures = 0
        self._reason: str | None = None  # JoinGroup reason (KIP-800)
        self._rejoin_needed = False  # join again once the current reconciliation is done
        self._resubscribe = False  # subscribe() while leaving: join again afterwards
        self._joined_topics: tuple[str, ...] | None = None  # the subscription of the last JoinGroup sent
        self._subscriptions: list[MemberSubscription] = []  # leader: the members' subscriptions
        self._versions: dict[str, int] = {}  # leader: each member's subscription version
        self._assignments: list[dict] = []  # the SyncGroup assignments to send
        self._metadata_snapshot: dict[str, int] | None = None  # leader: counts the assignment used
        self._skipped = False  # KIP-814: this generation's assignment was kept, not computed
        self._stale: frozenset[TopicPartition] = frozenset()  # owned across a missed generation
        self._hb_identity: tuple[int, str] | None = None  # (generation, member id) of the heartbeat in flight

    # ------------------------------------------------------------------ inputs from the app

    def subscribe(self, topics: list[str] | None = None, regex: str | None = None, *, now: float = 0) -> None:
        """Set the subscription. The classic protocol has no server-side regex: the driver
        matches `regex` against metadata and calls again with the names (topics=None
        holds the JoinGroup back until it does)."""
        self.topics = sorted(set(topics)) if topics is not None else None
        self.regex = regex
        if self.state is S.FATAL:
            return
        if self.state is S.UNSUBSCRIBED:
            self._prepare(now, "subscribed")
        elif self.state is S.LEAVING:
            self._resubscribe = True
        elif self.state is S.PREPARING:
            self._maybe_join(now)  # cooperative: what must be revoked may have changed
        elif self.state in (S.STABLE, S.RECONCILING) and self._subscription() != self._joined_topics:
            # consumer-0.9 "Wildcard Subscription": "if the subscription list has changed
            # from the previous value, it will trigger rebalance".
            self._request_rejoin(now, "subscription changed")
        # JOINING (in flight), ASSIGNING, SYNCING: checked when the SyncGroup completes.

    def leave(self, *, now: float = 0) -> None:
        """Leave the group (after the driver revoked what it owns)."""
        if self.state in (S.UNSUBSCRIBED, S.FATAL):
            return
        was = self.state
        self._resubscribe = False
        self._rejoin_needed = False
        self._fire(E.LEAVE)
        # KIP-345: a static member "will not send leave group request when they go
        # offline"; a member that never got an id, or was fenced, has nothing to tell.
        if self.instance_id is not None or not self.member_id or was is S.FENCED:
            self._left(now)
            return
        self._retry_at = now  # after the request in flight, if any

    def revoked(self, partitions, *, now: float = 0) -> None:
        self.owned = self.owned - frozenset(partitions)
        self._after_step(now)

    def assigned(self, partitions, *, now: float = 0) -> None:
        self.owned = self.owned | frozenset(partitions)
        self._after_step(now)

    def lost(self, *, now: float = 0) -> None:
        """The driver ran on_partitions_lost (after fencing, or `to_lose`): drop everything;
        a fenced member rejoins."""
        self.owned = frozenset()
        self._stale = frozenset()
        if self.state is S.FENCED:
            self._fire(E.LOST)
            self._retry_at = now

    def set_metadata(self, partitions: dict[str, int], now: float = 0) -> None:
        """Partition counts (topic -> count, for topics that exist).

        While the leader waits (`needs_metadata`), they complete the assignment. A leader
        that already assigned rejoins when the counts of the group's topics changed since
        (Java's assignmentSnapshot: only the leader watches for new partitions)."""
        counts = {t: int(n) for t, n in partitions.items() if t in self.group_topics and n > 0}
        if self.state is S.ASSIGNING:
            self._assign(counts, now)
            return
        if self.state is S.SYNCING and self._skipped and self._metadata_snapshot is None:
            self._metadata_snapshot = counts  # KIP-814: the baseline of the kept assignment
            return
        if not self.is_leader or self.state not in (S.STABLE, S.RECONCILING):
            return
        if self._metadata_snapshot is None:
            self._metadata_snapshot = counts  # KIP-814 skipped assignment: start watching now
        elif counts != self._metadata_snapshot:
            self._request_rejoin(now, "partition counts of the group's topics changed")

    # ------------------------------------------------------------------ what to do now

    @property
    def needs_metadata(self) -> list[str] | None:
        """Topics whose partition counts the leader needs before it can assign."""
        if self.state is S.ASSIGNING or (self.state is S.SYNCING and self._skipped and self._metadata_snapshot is None):
            return sorted(self.group_topics)
        return None

    def to_lose(self) -> frozenset[TopicPartition]:
        """Partitions to drop without committing (call `lost()` after on_partitions_lost)."""
        return self._stale

    def to_revoke(self) -> frozenset[TopicPartition]:
        if self._stale:
            return frozenset()
        if self.state is S.PREPARING:
            if not self.cooperative:
                return self.owned  # EAGER: onJoinPrepare revokes everything
            # KIP-429: "before sending the join-group request, do NOT revoke any
            # partitions" -- except those of topics no longer subscribed (onJoinPrepare).
            keep = set(self.topics or ())
            return frozenset(tp for tp in self.owned if tp.topic not in keep)
        if self.state is S.RECONCILING and self.target is not None:
            return self.owned - self.target
        return frozenset()

    def to_assign(self) -> frozenset[TopicPartition]:
        """What the assignment adds, once every revocation is done (revoke, then assign)."""
        if self.state is not S.RECONCILING or self.target is None or self.owned - self.target:
            return frozenset()
        return self.target - self.owned

    def next_request(self, now: float) -> tuple[int, dict] | None:
        if self.in_flight is not None:
            return None
        st = self.state
        if st is S.LEAVING:
            if now >= self._retry_at:
                return self._send(LEAVE_GROUP, self._leave_body())
        elif st is S.JOINING:
            if self.topics is not None and now >= self._retry_at:
                return self._send(JOIN_GROUP, self._join_body())
        elif st is S.SYNCING:
            if now >= self._retry_at:
                return self._send(SYNC_GROUP, self._sync_body())
        elif self._heartbeating() and now >= self.next_heartbeat_ms:
            self._hb_identity = (self.generation, self.member_id)
            self.next_heartbeat_ms = now + self.heartbeat_interval_ms
            return self._send(HEARTBEAT, {"group_id": self.group_id, "generation_id": self.generation,
                                          "member_id": self.member_id, "group_instance_id": self.instance_id})
        return None

    def next_deadline(self) -> float | None:
        """When `next_request` will have something to send (ms), or None."""
        if self.in_flight is not None:
            return None
        st = self.state
        if st is S.JOINING:
            return self._retry_at if self.topics is not None else None
        if st in (S.SYNCING, S.LEAVING):
            return self._retry_at
        if self._heartbeating():
            return self.next_heartbeat_ms
        return None

    def commit_identity(self) -> tuple[int, str, str | None]:
        """(generation, member id, instance id) for OffsetCommit; (-1, "", None) outside a
        stable generation. The instance id goes only with the generation: a static
        identity with an empty member id is FENCED_INSTANCE_ID at the coordinator."""
        if self.state in _COMMITTABLE and self.generation != NO_GENERATION and self.member_id:
            return self.generation, self.member_id, self.instance_id
        return NO_GENERATION, "", None

    @property
    def fenced(self) -> bool:
        return self.state is S.FENCED

    @property
    def join_reason(self) -> str | None:
        """Why the member last (re)joined (KIP-800's JoinGroup reason): the consumer's
        statistics report it as librdkafka's cgrp rebalance_reason."""
        return self._reason

    @property
    def active(self) -> bool:
        """Joined or joining (or leaving)."""
        return self.state not in (S.UNSUBSCRIBED, S.FATAL)

    # ------------------------------------------------------------------ responses

    def on_response(self, api: int, resp, now: float) -> None:
        self.in_flight = None
        self.epoch_changes += 1
        code = _code(resp)
        if api == LEAVE_GROUP:
            self._left(now)  # Java logs a failed leave and moves on: the session expires it anyway
            return
        if self.state is S.LEAVING:
            if api == JOIN_GROUP and resp.member_id:
                self.member_id = resp.member_id  # so that the LeaveGroup names us
            if not self.member_id:
                self._left(now)
            return
        if self.state in (S.UNSUBSCRIBED, S.FATAL):
            return
        if api == JOIN_GROUP:
            self._on_join(resp, code, now)
        elif api == SYNC_GROUP:
            self._on_sync(resp, code, now)
        elif api == HEARTBEAT:
            self._on_heartbeat(code, now)

    def on_failure(self, api: int, error: KafkaError, now: float) -> None:
        """The request got no answer (disconnect, timeout) or could not be sent."""
        self.in_flight = None
        if api == LEAVE_GROUP or self.state is S.LEAVING:
            # Kafka does not retry a leave: the session timeout removes the member anyway.
            self._left(now)
            return
        if self.state in (S.UNSUBSCRIBED, S.FATAL):
            return
        if not error.retriable and error.code in FATAL:  # e.g. no JoinGroup version in common
            self._fatal(error)
            return
        self._failures += 1
        if api == HEARTBEAT:
            self.next_heartbeat_ms = now + min(self._backoff(), self.heartbeat_interval_ms)
        elif self.state in (S.JOINING, S.SYNCING):
            # AbstractCoordinator: a failed SyncGroup restarts the rebalance from JoinGroup.
            self._fire(E.REJOIN)
            self._retry_at = now + self._backoff()

    # ------------------------------------------------------------------ JoinGroup

    def _join_body(self) -> dict:
        topics = self._subscription()
        self._joined_topics = topics
        # KIP-429: cooperative members "encode the current assigned partitions as part of
        # the Subscription"; eager members own nothing by now.
        owned = _by_topic(self.owned) if self.cooperative else None
        # The newest ConsumerProtocolSubscription, as Java sends: with the generation the
        # owned partitions come from (KIP-792, so the leader can drop stale claims) and
        # the rack (KIP-881).
        metadata = encode_subscription(topics, owned, version=MAX_VERSION,
                                       generation=self.generation if self.cooperative else -1, rack_id=self.rack_id)
        return {
            "group_id": self.group_id, "session_timeout": self.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id,
            "group_instance_id": self.instance_id, "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": a.name, "metadata": metadata} for a in self.assignors],
            "reason": self._reason,
        }

    def _on_join(self, resp, code: ErrorCode, now: float) -> None:
        if self.state is not S.JOINING:
            return
        if code == ErrorCode.none:
            self._joined(resp, now)
        elif code == ErrorCode.member_id_required:
            # KIP-394: the coordinator names us and waits for a JoinGroup carrying that id.
            self.member_id = resp.member_id
            self._retry_at = now
        elif code == ErrorCode.unknown_member_id:
            self._fence(now, reset_member_id=True)
        elif code == ErrorCode.illegal_generation:
            self._fence(now, reset_member_id=False)
        elif code in FATAL:
            self._fatal(KafkaError(code, "JoinGroup"))
        elif code == ErrorCode.rebalance_in_progress:
            self._retry_at = now  # AbstractCoordinator retries at once
        else:
            self._failures += 1
            self._retry_at = now + self._backoff()

    def _joined(self, resp, now: float) -> None:
        protocol_type = getattr(resp, "protocol_type", None)  # JoinGroup v7+
        if protocol_type is not None and protocol_type != PROTOCOL_TYPE:
            self._fatal(KafkaError(ErrorCode.inconsistent_group_protocol,
                                   f"JoinGroup: protocol type {protocol_type!r}, expected {PROTOCOL_TYPE!r}"))
            return
        assignor = self._assignor(resp.protocol_name)
        if assignor is None:
            self._fatal(KafkaError(ErrorCode.inconsistent_group_protocol,
                                   f"JoinGroup: the coordinator selected {resp.protocol_name!r}, not one of ours"))
            return
        self._failures = 0
        self.member_id = resp.member_id
        previous, self.generation = self.generation, int(resp.generation_id)
        if self.cooperative and self.owned and previous != NO_GENERATION and self.generation > previous + 1:
            # KIP-429 keeps owned partitions across a rejoin, but this member missed a whole
            # generation (a static member is kept in the group while away): in it the leader
            # may have given them to others. Keeping them until the SyncGroup, then revoking
            # (and committing) them, overlapped the new owners and moved their offsets back
            # (simulator, seed 480). They are lost instead: no commit.
            self._stale = self.owned
        self.protocol_name = resp.protocol_name
        self.leader_id = resp.leader
        self.is_leader = bool(resp.leader) and resp.leader == resp.member_id
        self.next_heartbeat_ms = now + self.heartbeat_interval_ms
        self._retry_at = now
        self._assignments = []
        self._metadata_snapshot = None
        if not self.is_leader:
            self.group_topics = frozenset()
            self._fire(E.JOINED)  # a follower's SyncGroup is empty
            return
        self._subscriptions, self._versions = [], {}
        for m in resp.members:
            try:
                sub = decode_subscription(m.metadata or b"")
                topics, owned, version, generation = sub.topics, sub.owned, sub.version, sub.generation
            except RecordError:
                topics, owned, version, generation = (), {}, 0, -1  # undecodable: the member gets nothing
            self._versions[m.member_id] = version
            self._subscriptions.append(MemberSubscription(m.member_id, getattr(m, "group_instance_id", None),
                                                          tuple(topics), owned, generation))
        self.group_topics = frozenset(t for s in self._subscriptions for t in s.topics)
        self._skipped = bool(getattr(resp, "skip_assignment", False))
        if self._skipped:
            # KIP-814: a static leader rejoining a stable group keeps the stored assignment;
            # it only watches the group's topics again, from the partition counts of now
            # (Java takes assignmentSnapshot = metadataSnapshot here): `needs_metadata` asks
            # the driver for them before the SyncGroup. Taking them later, at the first
            # metadata refresh, missed partitions added in between (simulator, seed 399).
            self._fire(E.JOINED)
        elif not self.group_topics:
            self._fire(E.JOINED_AS_LEADER)
            self._assign({}, now)
        else:
            self._fire(E.JOINED_AS_LEADER)

    def _assign(self, counts: dict[str, int], now: float) -> None:
        assignor = self._assignor(self.protocol_name)
        result = assignor.assign(self._subscriptions, counts)
        self._assignments = [{"member_id": mid, "assignment": encode_assignment(parts, self._versions.get(mid, 0))}
                             for mid, parts in result.items()]
        self._metadata_snapshot = counts
        self._fire(E.ASSIGNED)
        self._retry_at = now

    # ------------------------------------------------------------------ SyncGroup

    def _sync_body(self) -> dict:
        return {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": self.instance_id, "protocol_type": PROTOCOL_TYPE,
                "protocol_name": self.protocol_name, "assignments": self._assignments}

    def _on_sync(self, resp, code: ErrorCode, now: float) -> None:
        if self.state is not S.SYNCING:
            return
        if code == ErrorCode.none:
            self._synced(resp, now)
        elif code == ErrorCode.unknown_member_id:
            self._fence(now, reset_member_id=True)
        elif code == ErrorCode.illegal_generation:
            self._fence(now, reset_member_id=False)
        elif code in FATAL:
            self._fatal(KafkaError(code, "SyncGroup"))
        elif code == ErrorCode.rebalance_in_progress:
            # "The group began another rebalance. Need to re-join the group."
            self._fire(E.REJOIN)
            self._retry_at = now
        else:
            self._failures += 1
            self._fire(E.REJOIN)
            self._retry_at = now + self._backoff()

    def _synced(self, resp, now: float) -> None:
        protocol_type = getattr(resp, "protocol_type", None)  # SyncGroup v5+
        protocol_name = getattr(resp, "protocol_name", None)
        if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            self._fatal(KafkaError(ErrorCode.inconsistent_group_protocol,
                                   f"SyncGroup: protocol {protocol_type}/{protocol_name}, "
                                   f"expected {PROTOCOL_TYPE}/{self.protocol_name}"))
            return
        try:
            # The coordinator sends empty bytes to a member the leader left out.
            parts = decode_assignment(resp.assignment) if resp.assignment else {}
        except RecordError as exc:
            self._fatal(KafkaError(ErrorCode.inconsistent_group_protocol, f"SyncGroup: {exc}"))
            return
        self._failures = 0
        self.next_heartbeat_ms = now + self.heartbeat_interval_ms
        assigned = frozenset(TopicPartition(t, p) for t, ps in parts.items() for p in ps)
        if any(tp.topic not in set(self.topics or ()) for tp in assigned):
            # ConsumerCoordinator: "received assignment does not match the current
            # subscription" -- it is not taken; join again with the current one.
            self.target = None
            self._prepare(now, "assignment does not match the subscription")
            return
        self.target = assigned
        if self.cooperative and self.owned - assigned:
            # KIP-429: "If revoked partitions is not empty, remove those partitions by calling
            # the rebalance-listener. And then immediately send another join group request".
            self._rejoin_needed = True
            self._reason = "need to revoke partitions and re-join"
        if self._subscription() != self._joined_topics:
            self._rejoin_needed = True
            self._reason = "subscription changed"
        if self.owned == assigned:
            self._reconciled(now)
        else:
            self._fire(E.SYNCED)

    # ------------------------------------------------------------------ Heartbeat

    def _on_heartbeat(self, code: ErrorCode, now: float) -> None:
        sent, self._hb_identity = self._hb_identity, None
        if code == ErrorCode.none:
            self._failures = 0
        elif code == ErrorCode.rebalance_in_progress:
            # AbstractCoordinator: only a STABLE member acts on it; during a rebalance the
            # error is expected and ignored.
            if self.state in (S.STABLE, S.RECONCILING):
                self._request_rejoin(now, "group is already rebalancing")
        elif code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id):
            if sent != (self.generation, self.member_id) or self.state not in _ALIVE:
                return  # about a generation we have left behind since: ignore
            if code == ErrorCode.fenced_instance_id:
                self._fatal(KafkaError(code, "Heartbeat"))
            else:
                self._fence(now, reset_member_id=code == ErrorCode.unknown_member_id)
        elif code in FATAL:
            self._fatal(KafkaError(code, "Heartbeat"))
        else:
            # Coordinator moved or loading (the driver rediscovers it), or unexpected: retry.
            self._failures += 1
            self.next_heartbeat_ms = now + min(self._backoff(), self.heartbeat_interval_ms)

    # ------------------------------------------------------------------ LeaveGroup

    def _leave_body(self) -> dict:
        reason = "the consumer is leaving the group"
        # v0-2 name one member; v3+ a batch of identities (KIP-345). A dynamic member
        # leaves by member id alone.
        return {"group_id": self.group_id, "member_id": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": reason}]}

    # ------------------------------------------------------------------ internals

    def _heartbeating(self) -> bool:
        return self.state in _HEARTBEATING and self.generation != NO_GENERATION

    def _send(self, api: int, body: dict) -> tuple[int, dict]:
        self.in_flight = api
        return api, body

    def _subscription(self) -> tuple[str, ...]:
        return tuple(self.topics or ())

    def _assignor(self, name: str | None):
        return next((a for a in self.assignors if a.name == name), None)

    def _backoff(self) -> float:
        # KIP-580: exponential from retry.backoff.ms, capped at retry.backoff.max.ms.
        return min(self.retry_backoff_ms * 2 ** max(self._failures - 1, 0), max(self.retry_backoff_ms, MAX_BACKOFF_MS))

    def _request_rejoin(self, now: float, reason: str) -> None:
        if self.state is S.STABLE:
            self._prepare(now, reason)
        elif self.state is S.RECONCILING:
            self._rejoin_needed = True  # after the app finished this reconciliation
            self._reason = reason

    def _prepare(self, now: float, reason: str) -> None:
        """Java's onJoinPrepare: revoke what must go (eager: everything), then JoinGroup."""
        self._rejoin_needed = False
        self._reason = reason
        self._fire(E.PREPARE)
        self._maybe_join(now)

    def _maybe_join(self, now: float) -> None:
        if self.state is S.PREPARING and not self.to_revoke():
            self._fire(E.READY_TO_JOIN)
            self._retry_at = now

    def _after_step(self, now: float) -> None:
        if self.state is S.PREPARING:
            self._maybe_join(now)
        elif self.state is S.RECONCILING and self.owned == self.target:
            self._reconciled(now)

    def _reconciled(self, now: float) -> None:
        if self._rejoin_needed:
            self._prepare(now, self._reason or "rejoin requested")
        else:
            self._fire(E.RECONCILED)

    def _fence(self, now: float, *, reset_member_id: bool) -> None:
        """The coordinator no longer counts us in our generation: our partitions are lost.

        UNKNOWN_MEMBER_ID forgets the member id; ILLEGAL_GENERATION keeps it, "since the
        member ID might still be valid" (AbstractCoordinator)."""
        self.generation = NO_GENERATION
        self.protocol_name = None
        self.target = None
        self.is_leader = False
        self._rejoin_needed = False
        self._metadata_snapshot = None
        self._reason = "fenced"
        if reset_member_id:
            self.member_id = ""
        if self.owned:
            self._fire(E.FENCED)
        else:
            self._fire(E.FENCED_EMPTY)  # nothing to lose: join again at once
            self._retry_at = now

    def _fatal(self, error: KafkaError) -> None:
        self.error = error
        self._fire(E.FATAL_ERROR)

    def _left(self, now: float) -> None:
        self.generation = NO_GENERATION
        self.member_id = ""
        self.protocol_name = None
        self.target = None
        self.is_leader = False
        self.group_topics = frozenset()
        self._metadata_snapshot = None
        self._fire(E.LEFT)
        if self._resubscribe:
            self._resubscribe = False
            self._prepare(now, "subscribed")

    def _fire(self, event: Event) -> None:
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            raise IllegalTransition(f"illegal classic member transition: {self.state.name} has no entry "
                                    f"for {event.name}")
        self.state = new
