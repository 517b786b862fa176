"""The in-memory model of a classic group (the 0.9 consumer design's group membership).

Theory of operation (consumer-0.9-rewrite-design "Consumer group management", Kafka's
ClassicGroup): members join (JoinGroup), the coordinator waits until every known member
has rejoined or the rebalance timeout passed, bumps the generation, picks a leader and a
protocol every member supports, hands the leader everybody's metadata, and the leader's
SyncGroup brings the assignment that the coordinator distributes.

Unlike a consumer group, a classic group's rebalance is mostly transient: who is
waiting in JoinGroup or SyncGroup is not persisted, in Kafka or here. Only the group as of
its last completed rebalance (generation, protocol, leader, members with their
assignment) is written, as a GroupMetadata record, and only loading replays it; the
handlers change the transient state directly, as Kafka's classic group does (its writes
are not replayed either).

States move only by `transition(event)`, through the table `CLASSIC_TRANSITIONS`, keyed
by (state, event) as h11's `_state.py` is (DESIGN principle 3). The events are what
happens to the group: a rebalance is needed (REBALANCE), the join phase ends with members
(JOIN_COMPLETED) or with none (JOIN_EMPTIED), the leader's SyncGroup brings the assignment
(ASSIGNED), the group's tombstone is replayed (DELETED). The moves they allow are exactly
Kafka's ClassicGroupState valid previous states, inverted. An event with no entry for the
current state raises `IllegalTransition`: the coordinator broke its own invariant. A group
is born Empty (a JoinGroup creates it) or Stable (loaded from its record with members, or
converted from a consumer group: Kafka's ClassicGroup.fromRecord / fromConsumerGroup);
being born is not a transition.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from ...transitions import IllegalTransition

Reply = Callable[[dict], None]


class ClassicState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class ClassicEvent(enum.Enum):
    """What happens to a classic group: the inputs of `CLASSIC_TRANSITIONS`."""

    REBALANCE = "rebalance"  # a join, leave, expiry or change needs a new generation (prepare_rebalance)
    JOIN_COMPLETED = "join-completed"  # the join phase ended with members: leader and protocol chosen
    JOIN_EMPTIED = "join-emptied"  # the join phase ended with no member left
    ASSIGNED = "assigned"  # the leader's SyncGroup brought the assignment
    DELETED = "deleted"  # the group's tombstone: deleted, expired, or converted to a consumer group


S = ClassicState
E = ClassicEvent
# (state, event) -> new state. Kafka's ClassicGroupState valid previous states, inverted:
# PreparingRebalance <- Empty, Stable, CompletingRebalance; CompletingRebalance <-
# PreparingRebalance; Stable <- CompletingRebalance; Empty <- PreparingRebalance; Dead <- any.
CLASSIC_TRANSITIONS: dict[tuple[ClassicState, ClassicEvent], ClassicState] = {
    (S.EMPTY, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.STABLE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.REBALANCE): S.PREPARING_REBALANCE,  # the leader's assignment is for a dead generation
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETED): S.COMPLETING_REBALANCE,
    (S.PREPARING_REBALANCE, E.JOIN_EMPTIED): S.EMPTY,
    (S.COMPLETING_REBALANCE, E.ASSIGNED): S.STABLE,
    **{(state, E.DELETED): S.DEAD for state in ClassicState},  # Dead stays Dead (Kafka allows Dead -> Dead)
}
# The states a group may be created in (see the module docstring).
INITIAL_STATES = frozenset({S.EMPTY, S.STABLE})


@dataclass(slots=True, eq=False)
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    join_reply: Reply | None = None  # a JoinGroup parked until the join phase completes
    sync_reply: Reply | None = None  # a SyncGroup parked until the leader's assignment arrives

    def metadata(self, protocol: str | None) -> bytes | None:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return None

    def names(self) -> list[str]:
        return [n for n, _ in self.protocols]

    def snapshot(self) -> dict:
        return {"instance_id": self.instance_id, "client_id": self.client_id, "client_host": self.client_host,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "session_timeout_ms": self.session_timeout_ms,
                "assignment": self.assignment}


class ClassicGroup:
    def __init__(self, group_id: str, now_ms: int = 0, state: ClassicState = ClassicState.EMPTY) -> None:
        if state not in INITIAL_STATES:
            raise IllegalTransition(f"classic group {group_id}: a group is not created {state.value}")
        self.group_id = group_id
        self.state = state
        self.previous_state: ClassicState | None = None
        self.state_timestamp = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id (KIP-345)
        self.pending_members: set[str] = set()  # told MEMBER_ID_REQUIRED, not joined yet (KIP-394)
        self.pending_sync: set[str] = set()  # joined this generation, SyncGroup not seen yet
        self.new_member_added = False  # extends the initial rebalance delay
        self.initial_delay = False  # the join phase waits out group.initial.rebalance.delay.ms
        self._awaiting = 0  # members parked in JoinGroup (kept, not counted: joins are O(1))
        self._support: dict[str, int] = {}  # protocol name -> members supporting it (Kafka keeps the same)

    # --- state ---------------------------------------------------------------------------

    def transition(self, event: ClassicEvent, now_ms: int) -> None:
        new = CLASSIC_TRANSITIONS.get((self.state, event))
        if new is None:
            raise IllegalTransition(f"classic group {self.group_id}: no transition from {self.state.value} "
                                    f"on {event.value}")
        self.previous_state = self.state
        self.state = new
        self.state_timestamp = now_ms

    def mark_deleted(self, now_ms: int) -> None:
        """Its tombstone was replayed (shard.py): the group is Dead."""
        self.transition(ClassicEvent.DELETED, now_ms)

    def is_(self, *states: ClassicState) -> bool:
        return self.state in states

    # --- membership ------------------------------------------------------------------------

    def park_join(self, member: ClassicMember, reply: Reply) -> None:
        if member.join_reply is None:
            self._awaiting += 1
        member.join_reply = reply

    def unpark_join(self, member: ClassicMember) -> None:
        if member.join_reply is not None:
            self._awaiting -= 1
            member.join_reply = None

    def _count(self, member: ClassicMember, delta: int) -> None:
        for name in set(member.names()):
            n = self._support.get(name, 0) + delta
            if n:
                self._support[name] = n
            else:
                del self._support[name]

    def set_protocols(self, member: ClassicMember, protocols: tuple[tuple[str, bytes], ...]) -> None:
        self._count(member, -1)
        member.protocols = protocols
        self._count(member, +1)

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._count(member, +1)
        if member.join_reply is not None:
            self._awaiting += 1
        if member.instance_id:
            self.static_members[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is None:
            return None
        if member.join_reply is not None:
            self._awaiting -= 1
        self._count(member, -1)
        if member.instance_id and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def member_by_instance(self, instance_id: str | None) -> ClassicMember | None:
        mid = self.static_members.get(instance_id) if instance_id else None
        return self.members.get(mid) if mid else None

    def awaiting_join(self) -> int:
        return self._awaiting

    def all_joined(self) -> bool:
        return not self.pending_members and self._awaiting == len(self.members)

    def rebalance_timeout_ms(self) -> int:
        # Kafka waits for the slowest member: the largest rebalance timeout of the group.
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols (consumer-0.9 design "Protocol selection") ---------------------------------

    def candidate_protocols(self) -> list[str]:
        """The protocols every member supports, in the first member's order."""
        if not self.members:
            return []
        everyone = len(self.members)
        return [n for n in next(iter(self.members.values())).names() if self._support.get(n) == everyone]

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        everyone = len(self.members)
        return protocol_type == self.protocol_type and any(self._support.get(n) == everyone for n in names)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all support; most votes win
        (ties go to the earliest candidate)."""
        candidates = self.candidate_protocols()
        votes = dict.fromkeys(candidates, 0)
        for m in self.members.values():
            for name in m.names():
                if name in votes:
                    votes[name] += 1
                    break
        return max(candidates, key=lambda n: votes[n])

    def snapshot(self) -> dict:
        """The persisted part of the group, for comparisons across a restart."""
        return {
            "group_id": self.group_id, "state": self.state.value, "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name, "generation": self.generation, "leader_id": self.leader_id,
            "members": {k: m.snapshot() for k, m in sorted(self.members.items())},
            "static_members": dict(sorted(self.static_members.items())),
        }
