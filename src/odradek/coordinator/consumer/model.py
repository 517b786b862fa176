"""The in-memory model of a KIP-848 consumer group, changed only by replaying records.

Theory of operation (KIP-848 "Data Model", "Rebalance Process"): a group has a group
epoch (bumped whenever the assignment input changes), a target assignment computed at an
assignment epoch, and members that each reconcile their current assignment towards their
target at their own member epoch. `ConsumerMember` is frozen: the heartbeat handler
computes the member it wants and returns a record for it; replay swaps the new value in.
The group keeps derived indexes: `owners`, which member currently holds each partition
(assigned or still pending revocation; a partition is handed to a new member only when it
has no owner, KIP-848: "never assign a partition before the previous owner revoked it"),
and `regex_counts`, how many members subscribe to each regular expression (Kafka's
`subscribedRegularExpressions`). What each regex resolved to is hard state of its own,
`resolved_regexes`, replayed from ConsumerGroupRegularExpression records (regex.py).

Group states are derived (KIP-848 "Consumer Group States"). After every record, replay
reads the group's condition (`GroupCondition`: deleted, no members, group epoch ahead of
the target epoch, some member not yet reconciled, all reconciled) and feeds it to the
table `GROUP_TRANSITIONS`, keyed by (state, condition) as h11's `_state.py` is keyed by
(state, event) (DESIGN principle 3). A live group goes wherever its condition says in
one record (a member joining an empty group with a server-side assignor is Reconciling as
soon as the target is written); only an Empty group may be deleted, and a Dead one takes
no input. A condition with no entry raises `IllegalTransition`: replay broke an invariant.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace

from ...transitions import IllegalTransition

# topic id -> partition -> assignment epoch (KIP-1251)
Partitions = dict[uuid.UUID, dict[int, int]]
# topic id -> partitions (target assignments carry no epochs)
TargetPartitions = dict[uuid.UUID, frozenset[int]]

LEAVE_EPOCH = -1          # KIP-848 "Joining & Leaving": leave the group
STATIC_LEAVE_EPOCH = -2   # KIP-848 "Static Membership": leave, keep the assignment for the session timeout


class MemberState(enum.IntEnum):
    """Reconciliation state of one member (Kafka's MemberState values, stored in records)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 3


class GroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupCondition(enum.Enum):
    """What replay finds after a record: the input of `GROUP_TRANSITIONS`."""

    DELETED = "deleted"  # the group's tombstone (ConsumerGroupMetadata) was replayed
    NO_MEMBERS = "no-members"
    EPOCH_AHEAD = "epoch-ahead"  # group epoch > target assignment epoch: a target is due
    UNRECONCILED = "unreconciled"  # a member is not at the target epoch, or not STABLE
    RECONCILED = "reconciled"  # every member is STABLE at the target epoch


_G, _C = GroupState, GroupCondition
# KIP-848 "Consumer Group States": Empty (no members), Assigning (group epoch ahead of the
# assignment epoch), Reconciling (members not yet at the target), Stable; Dead once deleted.
_LIVE_MOVES = {_C.NO_MEMBERS: _G.EMPTY, _C.EPOCH_AHEAD: _G.ASSIGNING, _C.UNRECONCILED: _G.RECONCILING,
               _C.RECONCILED: _G.STABLE}
GROUP_TRANSITIONS: dict[tuple[GroupState, GroupCondition], GroupState] = {
    **{(state, cond): new for state in (_G.EMPTY, _G.ASSIGNING, _G.RECONCILING, _G.STABLE)
       for cond, new in _LIVE_MOVES.items()},
    # A group is deleted only once its last member is gone (shard.py asserts so first).
    (_G.EMPTY, _C.DELETED): _G.DEAD,
    # Dead: no entry. Replay drops the group at once; nothing may happen to it after.
}


@dataclass(frozen=True, slots=True)
class ClassicMeta:
    """A consumer-group member that speaks the classic protocol (KIP-848 "Online Migration")."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) as in its last JoinGroup


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    classic: ClassicMeta | None = None  # set while the member is driven by JoinGroup/SyncGroup/Heartbeat

    def with_(self, **changes) -> ConsumerMember:
        return replace(self, **changes)

    def subscription_key(self) -> tuple:
        """What the assignment depends on: a change here bumps the group epoch."""
        return (self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor, self.rack_id)

    def owned_pairs(self):
        for parts in (self.assigned, self.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    yield t, p


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """Kafka's ResolvedRegularExpression: the topics a regex matched in the metadata image of
    `version`, resolved at `timestamp_ms`."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class TopicMeta:
    topic_id: uuid.UUID
    name: str
    partitions: int


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        # KIP-848 "Partitions Metadata": the subscribed topics as of the last epoch bump
        self.subscribed_topics: dict[str, TopicMeta] = {}
        self._target_epoch = 0
        self._unconverged = 0  # members not at the target epoch or not STABLE (kept incrementally)
        self.target: dict[str, TargetPartitions] = {}
        self.owners: dict[tuple[uuid.UUID, int], str] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.regex_counts: dict[str, int] = {}  # regex -> members subscribed to it
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        # Classic members told MEMBER_ID_REQUIRED and not joined yet (KIP-394); in memory
        # only, as in a classic group: after a fail-over they are asked again.
        self.pending_classic: set[str] = set()
        self.dead = False
        self._state = GroupState.EMPTY

    # --- derived ------------------------------------------------------------------------

    @property
    def target_epoch(self) -> int:
        return self._target_epoch

    def _converged(self, m: ConsumerMember) -> bool:
        return m.member_epoch == self._target_epoch and m.state is MemberState.STABLE

    def condition(self) -> GroupCondition:
        # O(1): replay calls this after every record, and groups have thousands of members.
        if self.dead:
            return GroupCondition.DELETED
        if not self.members:
            return GroupCondition.NO_MEMBERS
        if self.group_epoch > self._target_epoch:
            return GroupCondition.EPOCH_AHEAD
        return GroupCondition.UNRECONCILED if self._unconverged else GroupCondition.RECONCILED

    @property
    def state(self) -> GroupState:
        return self._state

    def refresh_state(self) -> None:
        """Replay calls this after every record: the state moves on the group's condition."""
        condition = self.condition()
        new = GROUP_TRANSITIONS.get((self._state, condition))
        if new is None:
            raise IllegalTransition(f"group {self.group_id}: no transition from {self._state.value} "
                                    f"on {condition.value}")
        self._state = new

    def owner(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    def member_by_instance(self, instance_id: str) -> ConsumerMember | None:
        mid = self.static_members.get(instance_id)
        return self.members.get(mid) if mid is not None else None


    # --- replay: the only mutators --------------------------------------------------------

    def set_target_epoch(self, epoch: int) -> None:
        self._target_epoch = epoch
        self._unconverged = sum(1 for m in self.members.values() if not self._converged(m))

    def put_member(self, member: ConsumerMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._unconverged -= not self._converged(old)
            self._unown(old)
            self._count_regex(old.subscribed_topic_regex, -1)
            if old.instance_id and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        self._unconverged += not self._converged(member)
        self._count_regex(member.subscribed_topic_regex, 1)
        if member.instance_id:
            self.static_members[member.instance_id] = member.member_id
        for tp in member.owned_pairs():
            self.owners[tp] = member.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._unconverged -= not self._converged(old)
        self._unown(old)
        self._count_regex(old.subscribed_topic_regex, -1)
        if old.instance_id and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def _count_regex(self, regex: str | None, delta: int) -> None:
        if regex:
            n = self.regex_counts.get(regex, 0) + delta
            if n:
                self.regex_counts[regex] = n
            else:
                del self.regex_counts[regex]

    def put_resolved_regex(self, regex: str, resolved: ResolvedRegex | None) -> None:
        if resolved is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = resolved

    def _unown(self, member: ConsumerMember) -> None:
        for tp in member.owned_pairs():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def snapshot(self) -> dict:
        """A plain-value picture of the whole group, for tests that compare state across a restart."""
        return {
            "group_id": self.group_id,
            "group_epoch": self.group_epoch,
            "target_epoch": self.target_epoch,
            "state": self.state.value,
            "subscribed_topics": dict(sorted(self.subscribed_topics.items())),
            "members": {k: v for k, v in sorted(self.members.items())},
            "target": {k: dict(sorted(v.items())) for k, v in sorted(self.target.items())},
            "owners": dict(sorted(self.owners.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))),
            "static_members": dict(sorted(self.static_members.items())),
            "resolved_regexes": dict(sorted(self.resolved_regexes.items())),
        }
