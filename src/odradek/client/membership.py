"""The client side of KIP-848's consumer group protocol, sans-I/O.

Theory of operation (KIP-848 "Consumer Group Heartbeat", "Client-side
reconciliation"; Java's ConsumerMembershipManager is the model): the member joins
by heartbeating with epoch 0, then heartbeats at the interval the coordinator gives.
Every response carries the member epoch; a response with an assignment replaces the
member's *target*. The application reconciles towards the target one step at a time:
first it revokes what it owns and the target lacks (the driver commits offsets and
calls `on_partitions_revoked`, then `revoked()`), then it takes what the target adds
(`on_partitions_assigned`, then `assigned()`). Once owned equals target the member
acknowledges at once with a heartbeat listing what it owns. The coordinator only puts
a partition in a member's assignment after its previous owner released it, so taking
the target as given is enough to never own a partition twice.

FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID mean the coordinator gave our partitions
away: the member loses everything (`on_partitions_lost`, no commit) and rejoins with
epoch 0. UNRELEASED_INSTANCE_ID (and the other errors Java treats as fatal) stop the
member for good. Leaving sends epoch -1, or -2 for a static member (KIP-345: the
coordinator keeps its assignment for the session timeout).

The member speaks topic ids only; the driver maps them to names with metadata. Time
is the caller's: every method that needs it takes `now` in milliseconds.

States move only by `_fire(event)`, through the table `TRANSITIONS` keyed by (state,
event) as h11's `_state.py` is (DESIGN principle 3). The events are the member's inputs:
the app (subscribe/lost: JOIN, leave: LEAVE, a finished reconciliation step: RECONCILED)
and the coordinator's answers (a new target: TARGET_CHANGED, owned equals target but not
yet reported: RECONCILED_IN_FLIGHT, owned equals target and reported: ACKNOWLEDGED,
FENCED_MEMBER_EPOCH/UNKNOWN_MEMBER_ID: FENCED, a fatal error: FATAL_ERROR, the leave's
answer: LEFT). An event with no entry for the current state raises `IllegalTransition`:
the driver fed the member something its state cannot take (say, an assignment before it
ever joined), which is a bug on our side, not something to ignore.
"""

from __future__ import annotations

import uuid
from enum import Enum

from kio.schema.errors import ErrorCode

from ..transitions import IllegalTransition
from .errors import COORDINATOR_MOVED, KafkaError

TopicIdPartition = tuple[uuid.UUID, int]

CONSUMER_GROUP_HEARTBEAT = 68

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Errors after which the member cannot continue (Java's ConsumerMembershipManager
# transitions to FATAL on these).
FATAL = frozenset({
    ErrorCode.group_authorization_failed,
    ErrorCode.topic_authorization_failed,
    ErrorCode.invalid_request,
    ErrorCode.unsupported_assignor,
    ErrorCode.unreleased_instance_id,
    ErrorCode.group_max_size_reached,
    ErrorCode.unsupported_version,
    ErrorCode.invalid_group_id,
    ErrorCode.group_id_not_found,
    ErrorCode.fenced_instance_id,
    ErrorCode.invalid_regular_expression,
})
FENCED = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})
RETRY = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                   ErrorCode.not_coordinator, ErrorCode.request_timed_out, ErrorCode.network_exception})


class State(Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    RECONCILING = "reconciling"
    ACKNOWLEDGING = "acknowledging"
    STABLE = "stable"
    FENCED = "fenced"
    LEAVING = "leaving"
    FATAL = "fatal"


class Event(Enum):
    """The member's inputs: the keys of `TRANSITIONS` besides the state."""

    JOIN = "join"  # subscribe() while not a member, or lost() after fencing: join with epoch 0
    TARGET_CHANGED = "target-changed"  # a heartbeat answer whose target differs from what is owned
    RECONCILED_IN_FLIGHT = "reconciled-in-flight"  # owned == target, not yet reported: acknowledge
    ACKNOWLEDGED = "acknowledged"  # owned == target == what the last heartbeat reported
    RECONCILED = "reconciled"  # the app's revoke/assign step made owned == target
    FENCED = "fenced"  # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: the partitions are lost
    FATAL_ERROR = "fatal-error"  # an error Java's ConsumerMembershipManager treats as fatal
    LEAVE = "leave"  # leave(): the next heartbeat carries epoch -1 (or -2)
    LEFT = "left"  # the leave heartbeat was answered or failed, or there was nobody to tell


_S, _E = State, Event
_ANSWERED = (_S.JOINING, _S.RECONCILING, _S.ACKNOWLEDGING, _S.STABLE)  # states a heartbeat answer finds
# (state, event) -> new state (DESIGN: transitions as tables; Java's MemberState valid moves).
TRANSITIONS: dict[tuple[State, Event], State] = {
    (_S.UNSUBSCRIBED, _E.JOIN): _S.JOINING,
    (_S.FENCED, _E.JOIN): _S.JOINING,
    **{(s, _E.TARGET_CHANGED): _S.RECONCILING for s in _ANSWERED},
    **{(s, _E.RECONCILED_IN_FLIGHT): _S.ACKNOWLEDGING for s in _ANSWERED},
    # Not from RECONCILING: the member owes the app's step (it has owned != target).
    **{(s, _E.ACKNOWLEDGED): _S.STABLE for s in (_S.JOINING, _S.ACKNOWLEDGING, _S.STABLE)},
    (_S.RECONCILING, _E.RECONCILED): _S.ACKNOWLEDGING,
    **{(s, _E.FENCED): _S.FENCED for s in _ANSWERED},
    **{(s, _E.FATAL_ERROR): _S.FATAL for s in State if s is not _S.FATAL},
    **{(s, _E.LEAVE): _S.LEAVING for s in (*_ANSWERED, _S.FENCED, _S.LEAVING)},
    (_S.LEAVING, _E.LEFT): _S.UNSUBSCRIBED,
    # FATAL: no entry; the member is done for good.
}


class ConsumerGroupMember:
    def __init__(self, group_id: str, *, instance_id: str | None = None, rack_id: str | None = None,
                 rebalance_timeout_ms: int = 300000, server_assignor: str | None = None,
                 member_id: str | None = None, retry_backoff_ms: int = 100) -> None:
        self.group_id = group_id
        # v1 of ConsumerGroupHeartbeat: the client generates its member id (KIP-1082).
        self.member_id = member_id or str(uuid.uuid4())
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.retry_backoff_ms = retry_backoff_ms
        self.state = State.UNSUBSCRIBED
        self.epoch = 0
        self.topics: list[str] | None = None
        self.regex: str | None = None
        self.target: frozenset[TopicIdPartition] | None = None
        self.owned: frozenset[TopicIdPartition] = frozenset()
        self.error: KafkaError | None = None
        self.heartbeat_interval_ms = 5000
        self.next_heartbeat_ms = 0.0
        self.in_flight = False
        self._full = True  # send every field in the next heartbeat
        self._sent_owned: frozenset[TopicIdPartition] | None = None
        self._sent_subscription: tuple | None = None
        self._leave_epoch: int | None = None
        self._leave_sent = False
        self._failures = 0
        self.epoch_changes = 0  # counts heartbeat responses, so commits can wait for the next one

    # ------------------------------------------------------------------ inputs from the app

    def subscribe(self, topics: list[str] | None = None, regex: str | None = None, *, now: float = 0) -> None:
        self.topics = sorted(set(topics)) if topics is not None else None
        self.regex = regex
        if self.state in (State.UNSUBSCRIBED, State.FENCED):
            self._rejoin()
        self.next_heartbeat_ms = now  # a changed subscription is sent at once

    def leave(self, *, now: float = 0) -> None:
        """Start leaving (after the driver revoked everything): the next heartbeat says so."""
        if self.state in (State.UNSUBSCRIBED, State.FATAL):
            return
        if self.state is State.JOINING and self.epoch == 0 and not self.in_flight and self._sent_owned is None:
            self._fire(Event.LEAVE)
            self._fire(Event.LEFT)  # never joined: nothing to tell the coordinator
            return
        # KIP-345: a static member leaves with -2 so the coordinator keeps its place.
        self._leave_epoch = STATIC_LEAVE_EPOCH if self.instance_id else LEAVE_EPOCH
        self._leave_sent = False
        self._fire(Event.LEAVE)
        self.next_heartbeat_ms = now

    def revoked(self, partitions, *, now: float = 0) -> None:
        self.owned = self.owned - frozenset(partitions)
        self._after_reconcile_step(now)

    def assigned(self, partitions, *, now: float = 0) -> None:
        self.owned = self.owned | frozenset(partitions)
        self._after_reconcile_step(now)

    def lost(self, *, now: float = 0) -> None:
        """The driver ran on_partitions_lost after FENCED: drop everything and rejoin."""
        self.owned = frozenset()
        if self.state is State.FENCED:
            self._rejoin()
            self.next_heartbeat_ms = now

    # ------------------------------------------------------------------ what to do now

    def to_revoke(self) -> frozenset[TopicIdPartition]:
        if self.target is None or self.state not in (State.RECONCILING, State.STABLE, State.ACKNOWLEDGING):
            return frozenset()
        return self.owned - self.target

    def to_assign(self) -> frozenset[TopicIdPartition]:
        """What the target adds, once every revocation is done (revoke, then assign)."""
        if self.target is None or self.state not in (State.RECONCILING, State.STABLE, State.ACKNOWLEDGING):
            return frozenset()
        if self.owned - self.target:
            return frozenset()
        return self.target - self.owned

    def heartbeat_due(self, now: float) -> bool:
        return (not self.in_flight and self.state not in (State.UNSUBSCRIBED, State.FATAL, State.FENCED)
                and now >= self.next_heartbeat_ms)

    def build_heartbeat(self, now: float) -> dict:
        """The next ConsumerGroupHeartbeat request body; marks it in flight."""
        self.in_flight = True
        if self.state is State.LEAVING:
            self._leave_sent = True
            return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self._leave_epoch,
                    "instance_id": self.instance_id, "rack_id": None, "rebalance_timeout": -1,
                    "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                    "topic_partitions": None}
        full = self._full or self.epoch == 0
        subscription = (tuple(self.topics) if self.topics is not None else None, self.regex)
        body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.epoch,
                "instance_id": self.instance_id if full else None, "rack_id": self.rack_id if full else None,
                "rebalance_timeout": self.rebalance_timeout_ms if full else -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None,
                "server_assignor": self.server_assignor if full else None, "topic_partitions": None}
        if full or subscription != self._sent_subscription:
            # KIP-848: names and regex are exclusive; the unused one is sent empty/null.
            body["subscribed_topic_names"] = list(self.topics) if self.topics is not None else []
            body["subscribed_topic_regex"] = self.regex
            self._sent_subscription = subscription
        if full or self.owned != self._sent_owned:
            by_topic: dict[uuid.UUID, list[int]] = {}
            for tid, p in self.owned:
                by_topic.setdefault(tid, []).append(p)
            body["topic_partitions"] = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in by_topic.items()]
            self._sent_owned = self.owned
        self._full = False
        return body

    # The driver's view, shared with the classic member (classic.py): requests out,
    # responses in, deadlines, and the identity offset commits carry.

    def next_request(self, now: float) -> tuple[int, dict] | None:
        if self.heartbeat_due(now):
            return CONSUMER_GROUP_HEARTBEAT, self.build_heartbeat(now)
        return None

    def next_deadline(self) -> float | None:
        if self.in_flight or self.state in (State.UNSUBSCRIBED, State.FATAL, State.FENCED):
            return None
        return self.next_heartbeat_ms

    def commit_identity(self) -> tuple[int, str, str | None]:
        """(generation id or member epoch, member id, instance id) for OffsetCommit."""
        return self.epoch, self.member_id, self.instance_id

    @property
    def fenced(self) -> bool:
        return self.state is State.FENCED

    @property
    def active(self) -> bool:
        """Joined or joining (heartbeats are running)."""
        return self.state not in (State.UNSUBSCRIBED, State.FATAL)

    # ------------------------------------------------------------------ responses

    def on_response(self, api: int, resp, now: float) -> None:
        self.in_flight = False
        self.epoch_changes += 1
        code = resp.error_code
        if self.state is State.LEAVING:
            if not self._leave_sent:
                return  # the answer to a heartbeat sent before leave(): the leave is still due
            self._fire(Event.LEFT)
            self.epoch = 0
            self.target = None
            return
        if code != ErrorCode.none:
            self._on_error(KafkaError(code, resp.error_message or "ConsumerGroupHeartbeat"), now)
            return
        self._failures = 0
        if resp.member_id:
            self.member_id = resp.member_id
        self.epoch = int(resp.member_epoch)
        interval = resp.heartbeat_interval
        self.heartbeat_interval_ms = interval.total_seconds() * 1000 if hasattr(interval, "total_seconds") else int(interval)
        self.next_heartbeat_ms = now + self.heartbeat_interval_ms
        if resp.assignment is not None:
            self.target = frozenset((t.topic_id, int(p)) for t in resp.assignment.topic_partitions
                                    for p in t.partitions)
        if self.target is None:
            return  # joined but no assignment yet; stay JOINING until one arrives
        if self.owned != self.target:
            self._fire(Event.TARGET_CHANGED)
        elif self.owned != self._sent_owned:
            # Reconciled while this heartbeat was in flight: acknowledge at once.
            self._fire(Event.RECONCILED_IN_FLIGHT)
            self.next_heartbeat_ms = now
        else:
            self._fire(Event.ACKNOWLEDGED)

    def on_failure(self, api: int, error: KafkaError, now: float) -> None:
        """The heartbeat got no answer (disconnect, timeout)."""
        self.in_flight = False
        if self.state is State.LEAVING and not self._leave_sent:
            return  # a heartbeat sent before leave() failed: the leave is still due
        if self.state is State.LEAVING:
            # Kafka does not retry a leave: the session timeout removes the member anyway.
            self._fire(Event.LEFT)
            return
        self._full = True  # the coordinator may not have seen what we sent
        self._failures += 1
        self.next_heartbeat_ms = now + min(self.retry_backoff_ms * 2 ** self._failures, self.heartbeat_interval_ms)

    def _on_error(self, error: KafkaError, now: float) -> None:
        code = error.code
        if code in FENCED:
            self.epoch = 0
            self.target = None
            self._fire(Event.FENCED)
        elif code in FATAL:
            self.error = error
            self._fire(Event.FATAL_ERROR)
        elif code in RETRY or code in COORDINATOR_MOVED:
            self._full = True
            self._failures += 1
            self.next_heartbeat_ms = now + min(self.retry_backoff_ms * 2 ** self._failures, 1000)
        else:
            # Java logs and retries unexpected errors after the backoff.
            self._full = True
            self.next_heartbeat_ms = now + self.retry_backoff_ms

    # ------------------------------------------------------------------ internals

    def _after_reconcile_step(self, now: float) -> None:
        if self.target is not None and self.owned == self.target and self.state is State.RECONCILING:
            self._fire(Event.RECONCILED)
            self.next_heartbeat_ms = now  # KIP-848: acknowledge at once

    def _rejoin(self) -> None:
        self.epoch = 0
        self.target = None
        self._full = True
        self._sent_owned = None
        self._sent_subscription = None
        self._fire(Event.JOIN)

    def _fire(self, event: Event) -> None:
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            raise IllegalTransition(f"illegal member transition: {self.state.name} has no entry for {event.name}")
        self.state = new
