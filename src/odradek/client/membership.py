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
"""

from __future__ import annotations

import uuid
from enum import Enum

from kio.schema.errors import ErrorCode

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


# Legal transitions (DESIGN: transitions as tables); `_to` asserts against it.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.UNSUBSCRIBED: frozenset({State.JOINING, State.FATAL}),
    State.JOINING: frozenset({State.RECONCILING, State.ACKNOWLEDGING, State.STABLE, State.FENCED, State.FATAL,
                              State.LEAVING, State.JOINING}),
    State.RECONCILING: frozenset({State.ACKNOWLEDGING, State.FENCED, State.FATAL, State.LEAVING, State.RECONCILING,
                                  State.JOINING}),
    State.ACKNOWLEDGING: frozenset({State.STABLE, State.RECONCILING, State.FENCED, State.FATAL, State.LEAVING,
                                    State.JOINING}),
    State.STABLE: frozenset({State.RECONCILING, State.ACKNOWLEDGING, State.FENCED, State.FATAL, State.LEAVING,
                             State.JOINING}),
    State.FENCED: frozenset({State.JOINING, State.FATAL, State.LEAVING, State.UNSUBSCRIBED}),
    State.LEAVING: frozenset({State.UNSUBSCRIBED, State.FATAL}),
    State.FATAL: frozenset(),
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
            self._to(State.LEAVING)
            self._to(State.UNSUBSCRIBED)  # never joined: nothing to tell the coordinator
            return
        # KIP-345: a static member leaves with -2 so the coordinator keeps its place.
        self._leave_epoch = STATIC_LEAVE_EPOCH if self.instance_id else LEAVE_EPOCH
        self._leave_sent = False
        self._to(State.LEAVING)
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
            self._to(State.UNSUBSCRIBED)
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
            self._to(State.RECONCILING)
        elif self.owned != self._sent_owned:
            # Reconciled while this heartbeat was in flight: acknowledge at once.
            self._to(State.ACKNOWLEDGING)
            self.next_heartbeat_ms = now
        else:
            self._to(State.STABLE)

    def on_failure(self, api: int, error: KafkaError, now: float) -> None:
        """The heartbeat got no answer (disconnect, timeout)."""
        self.in_flight = False
        if self.state is State.LEAVING and not self._leave_sent:
            return  # a heartbeat sent before leave() failed: the leave is still due
        if self.state is State.LEAVING:
            # Kafka does not retry a leave: the session timeout removes the member anyway.
            self._to(State.UNSUBSCRIBED)
            return
        self._full = True  # the coordinator may not have seen what we sent
        self._failures += 1
        self.next_heartbeat_ms = now + min(self.retry_backoff_ms * 2 ** self._failures, self.heartbeat_interval_ms)

    def _on_error(self, error: KafkaError, now: float) -> None:
        code = error.code
        if code in FENCED:
            self.epoch = 0
            self.target = None
            self._to(State.FENCED)
        elif code in FATAL:
            self.error = error
            self._to(State.FATAL)
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
            self._to(State.ACKNOWLEDGING)
            self.next_heartbeat_ms = now  # KIP-848: acknowledge at once

    def _rejoin(self) -> None:
        self.epoch = 0
        self.target = None
        self._full = True
        self._sent_owned = None
        self._sent_subscription = None
        self._to(State.JOINING)

    def _to(self, state: State) -> None:
        if state is self.state:
            return
        assert state in TRANSITIONS[self.state], f"illegal member transition {self.state} -> {state}"
        self.state = state
