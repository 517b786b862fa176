"""Reconciliation around a group member core, sans-I/O: what the application does next.

Theory of operation. A group member core (`member.GroupMember`: KIP-848's
`ConsumerGroupMember` or the classic `ClassicGroupMember`) decides what the member should
own; the application owns partitions only through this reconciler, which both drivers use:
`consumer.AsyncConsumer` (asyncio, the code users run) and `sim.member.SimMember` (simulated
time and links). The reconciler never sends, sleeps or reads a clock (`now` is passed in);
it answers "what next?" with a step, and the driver carries the step out (callbacks,
requests) and reports back. The steps, always in this order (`next_step`):

  1. `Lose` -- the core was fenced (KIP-848 "Fenced": "abandon all its partitions and call
     ConsumerRebalanceListener#onPartitionsLost"; the classic core after UNKNOWN_MEMBER_ID /
     ILLEGAL_GENERATION, or for partitions owned across a generation it missed). The
     positions go *without a commit*: the partitions may already be someone else's and our
     offsets would overwrite theirs. `drop_lost`, the driver's on_partitions_lost, `lost`.
  2. `Revoke` -- what the core owns and its target lacks (KIP-848 "Response Handling": "It
     revokes the partitions, commit all the offsets, and calls onPartitionsRevoked"; the 0.9
     design's "Offset commits during rebalance": "stops fetching and commits existing
     offsets"). `start_revoke` returns the positions to commit (auto-commit); the revocation
     may complete only once that commit is answered or has failed (`revoke_commit_done`),
     and then `finish_revoke` (after the driver's on_partitions_revoked) tells the core,
     which acknowledges. Nothing is assigned while a revocation is under way: KIP-848
     "Member Epoch - Reconciliation of the group" hands a partition to its next owner only
     after this one acknowledged giving it up, and the core offers no assignment before.
  3. `Assign` -- what the target adds, under the topic names the driver's metadata resolves
     (KIP-848 names topics by id; ids metadata does not know yet are left `unresolved`, for
     the driver to refresh and ask again). `start_assign` adds positions that are *unknown*:
     the committed offsets must be fetched (`to_fetch`, `fetch_body`, `apply_committed`)
     before anything is consumed, else a reset policy decides; then the driver's
     on_partitions_assigned and `finish_assign`.

Positions are a `fetcher.Positions`, keyed by the name each partition was assigned with: a
topic deleted (and perhaps recreated under the same name) since is still revoked or lost
under that name (finding 8 of SIMULATION.md). Each held partition also remembers the topic
id it was assigned under (`current`): a position of a topic since deleted, or recreated
under the same name, is never committed, for by name it would land on the new topic's
offsets (OffsetCommit v10 commits by id, and Kafka answers UNKNOWN_TOPIC_ID instead).
Commits carry the core's identity (`identity`: member epoch or generation, member id,
instance id; none when fenced, and none for a classic member between generations);
auto-commit runs on an interval (`auto_commit_due`). Leaving (`leave`) commits what is held, revokes everything and tells the core to leave.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .cluster import TopicPartition
from .errors import IllegalStateError, KafkaError
from .fetcher import Positions
from .member import GroupMember, LosesPartitions
from .offsets import commit_body, fetch_committed_body

Key = Hashable  # a core's partition: (topic id, partition) for KIP-848, TopicPartition for classic

NO_IDENTITY: tuple[int, str, str | None] = (-1, "", None)  # a commit with no membership (0.9 design)

# OffsetFetch asks for stable offsets (KIP-447): a partition with a pending transactional
# offset commit answers UNSTABLE_OFFSET_COMMIT, retried, rather than an offset about to change.
REQUIRE_STABLE = True


@dataclass(frozen=True)
class Lose:
    parts: frozenset[TopicPartition]  # everything the application holds


@dataclass(frozen=True)
class Revoke:
    keys: frozenset  # the core's partitions to give up
    parts: frozenset[TopicPartition]  # the same, under the names they were assigned with


@dataclass(frozen=True)
class Assign:
    pairs: tuple  # ((core partition, its name), ...) in name order, for those whose topic is known
    unresolved: frozenset = frozenset()  # core partitions whose topic the driver's metadata does not know yet

    @property
    def keys(self) -> frozenset:
        return frozenset(k for k, _ in self.pairs)

    @property
    def parts(self) -> frozenset[TopicPartition]:
        return frozenset(tp for _, tp in self.pairs)


Step = Lose | Revoke | Assign


@dataclass(frozen=True)
class OffsetCommit:
    """An OffsetCommit with the identity that fences it (KIP-848 "Offset commit"; KIP-1251:
    assignment epoch <= client epoch <= broker epoch)."""

    group_id: str
    offsets: dict[TopicPartition, int]
    generation: int = -1
    member_id: str = ""
    instance_id: str | None = None

    def body(self) -> dict:
        return commit_body(self.group_id, self.offsets, generation=self.generation, member_id=self.member_id,
                           instance_id=self.instance_id)


def _default_name(key) -> TopicPartition:
    if isinstance(key, TopicPartition):
        return key
    topic, partition = key
    return TopicPartition(str(topic), partition)


def committed_offsets(resp) -> dict[TopicPartition, int]:
    """An OffsetFetch answer as tp -> committed offset (partitions with none left out);
    raises KafkaError for an error of the group or of any partition (the fetch is retried)."""
    code = getattr(resp, "error_code", ErrorCode.none)
    if code != ErrorCode.none:
        raise KafkaError(code, "OffsetFetch")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                raise KafkaError(p.error_code, f"OffsetFetch {t.name}-{p.partition_index}")
            if int(p.committed_offset) >= 0:
                out[TopicPartition(t.name, int(p.partition_index))] = int(p.committed_offset)
    return out


class Reconciler:
    """The application's side of a group member core. See the module docstring.

    `resolve(key)` names a core partition (None while the driver's metadata does not know
    its topic); `needs_generation`: commits need a generation (the classic protocol, whose
    coordinator refuses a membership-free commit to a non-empty group)."""

    def __init__(self, group_id: str | None, positions: Positions | None = None, *,
                 member: GroupMember | None = None,
                 resolve: Callable[[Key], TopicPartition | None] | None = None,
                 topic_id: Callable[[str], Hashable | None] | None = None,
                 needs_generation: bool = False, auto_commit: bool = True,
                 auto_commit_interval_ms: float = 5000, first_auto_commit_ms: float = 0) -> None:
        self.group_id = group_id
        self.positions = positions if positions is not None else Positions()
        self.resolve: Callable[[Key], TopicPartition | None] = resolve or _default_name
        self.needs_generation = needs_generation
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.next_auto_commit_ms = first_auto_commit_ms
        self.topic_id = topic_id  # the driver's metadata: a topic name's id now (None: unknown or gone)
        self.names: dict = {}  # core key -> the name it was assigned with, for what the application holds
        self._ids: dict[TopicPartition, Hashable | None] = {}  # held partition -> the topic id it was assigned under
        self._keys: dict[TopicPartition, Key] = {}
        self.revoking: Revoke | None = None  # the revocation under way
        self.revoke_committed = False  # its commit was answered or failed (or there was none)
        self._member: GroupMember | None = None
        self._loses = False
        self.member = member

    @property
    def member(self) -> GroupMember | None:
        return self._member

    @member.setter
    def member(self, member: GroupMember | None) -> None:
        self._member = member
        # A capability, looked up once: an isinstance against a Protocol is slow per step.
        self._loses = isinstance(member, LosesPartitions)

    # ------------------------------------------------------------------ what next

    def next_step(self) -> Step | None:
        """Lose, else the revocation under way (or a new one), else assign; None when the
        application holds what the core wants."""
        m = self._member
        if m is None:
            return None
        if m.fenced or (self._loses and m.to_lose()):
            return Lose(frozenset(self.positions.parts))
        if self.revoking is not None:
            return self.revoking
        revoke = m.to_revoke()
        if revoke:
            return Revoke(frozenset(revoke), frozenset(self.name(k) for k in revoke))
        assign = m.to_assign()
        if assign:
            named = [(k, self.resolve(k)) for k in assign]
            ready = tuple(sorted(((k, tp) for k, tp in named if tp is not None), key=lambda pair: pair[1]))
            return Assign(ready, frozenset(k for k, tp in named if tp is None))
        return None

    def name(self, key) -> TopicPartition:
        """The name the application holds `key` under: the one it was assigned with."""
        return self.names.get(key) or self.resolve(key) or _default_name(key)

    def key_of(self, tp: TopicPartition):
        return self._keys.get(tp, tp)

    def held(self) -> frozenset[TopicPartition]:
        return frozenset(self.positions.parts)

    # ------------------------------------------------------------------ 1. lose

    def drop_lost(self, step: Lose) -> None:
        """Before on_partitions_lost: the positions go, uncommitted; so does any revocation."""
        self.positions.set([])
        self.names.clear()
        self._keys.clear()
        self._ids.clear()
        self.revoking = None

    def lost(self, now: float) -> None:
        """After on_partitions_lost: the core drops everything and rejoins."""
        self._member.lost(now=now)

    # ------------------------------------------------------------------ 2. revoke

    def start_revoke(self, step: Revoke) -> dict[TopicPartition, int]:
        """Begin revoking: returns the positions to commit first (auto-commit). With nothing
        to commit the revocation may complete at once; else once `revoke_commit_done`."""
        if self.revoking is not None and self.revoking != step:
            raise IllegalStateError(f"revocation of {sorted(step.parts)} while {sorted(self.revoking.parts)} is under way")
        self.revoking = step
        offsets = self.offsets(step.parts) if self.auto_commit else {}
        self.revoke_committed = not offsets
        return offsets

    def revoke_commit_done(self, step: Revoke | None = None) -> None:
        """The commit of revocation `step` (default: the one under way) was answered, or
        failed: auto-commit failures are logged, not fatal (a fenced member's commit is
        refused, and its partitions are gone anyway). The late answer of an abandoned
        revocation's commit (lost, left) does not complete a newer one."""
        if step is None or step is self.revoking:
            self.revoke_committed = True

    def cancel_revoke(self) -> None:
        """The driver gave up on this revocation (its callback raised): the next step begins it
        again, commit included."""
        self.revoking = None

    def finish_revoke(self, now: float) -> frozenset:
        """After on_partitions_revoked: forget the positions and tell the core, which
        acknowledges. Returns the core partitions revoked."""
        step = self.revoking
        if step is None:
            raise IllegalStateError("finish_revoke: no revocation under way")
        if not self.revoke_committed:
            # KIP-848 "Response Handling": revoke, commit, then acknowledge; acknowledging
            # first would let the next owner start from offsets we are about to move.
            raise IllegalStateError("finish_revoke: the revocation's commit has not been answered")
        self.revoking = None
        # The core may have moved on while we committed (a newer target): only what it
        # still counts as owned is given back.
        keys = step.keys & self._member.owned
        parts = [self.name(k) for k in keys]
        self.positions.remove(parts)
        for k in keys:
            tp = self.names.pop(k, None)
            self._keys.pop(tp, None)
            self._ids.pop(tp, None)
        self._member.revoked(keys, now=now)
        return keys

    # ------------------------------------------------------------------ 3. assign

    def start_assign(self, step: Assign) -> None:
        """Before on_partitions_assigned: the partitions are held, their positions unknown
        until their committed offsets are fetched (or a reset policy decides)."""
        for key, tp in step.pairs:
            self.names[key] = tp
            self._keys[tp] = key
            self._ids[tp] = self._assigned_id(key, tp)
        self.positions.add(step.parts)

    def finish_assign(self, step: Assign, now: float) -> None:
        """After on_partitions_assigned: tell the core, which acknowledges."""
        self._member.assigned(step.keys, now=now)

    # ------------------------------------------------------------------ leave

    def leave(self, parts: Iterable[TopicPartition], now: float) -> None:
        """After the driver committed `parts` (what it held) and ran on_partitions_revoked:
        everything is revoked and the core starts leaving."""
        self.positions.remove(parts)
        self.names.clear()
        self._keys.clear()
        self._ids.clear()
        self.revoking = None
        m = self._member
        m.revoked(m.owned, now=now)
        m.leave(now=now)

    # ------------------------------------------------------------------ offsets

    def offsets(self, parts: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The known positions of `parts` (default: everything held) whose topic is still the
        one they were assigned under (`current`): what auto-commit commits."""
        # In the order positions are kept (not a set's hash order): a commit's bytes must not
        # depend on PYTHONHASHSEED, for the simulator replays them.
        ps = self.positions.parts
        wanted = None if parts is None else set(parts)
        return {tp: s.position for tp, s in ps.items()
                if s.position is not None and (wanted is None or tp in wanted) and self.current(tp)}

    def current(self, tp: TopicPartition) -> bool:
        """Whether the topic named `tp.topic` is still the one `tp` was assigned under, as far
        as the driver's metadata knows: False once it names another id (recreated) or none
        (deleted). A partition assigned before metadata knew its topic's id takes the first id
        metadata gives; without ids (no `topic_id`, or a broker too old to send them) every
        partition is current."""
        if self.topic_id is None or tp not in self._ids:
            return True  # no ids to compare, or not held (offsets the application chose)
        now = self.topic_id(tp.topic)
        was = self._ids[tp]
        if was is None:  # (only a classic assignment's: a KIP-848 key carries its id)
            self._ids[tp] = now
            return True
        return now == was

    def _assigned_id(self, key: Key, tp: TopicPartition) -> Hashable | None:
        """The topic id a partition is assigned under: a KIP-848 key carries it; a classic
        assignment names the topic, whose id is what metadata says now."""
        if not isinstance(key, TopicPartition):
            return key[0]
        return self.topic_id(tp.topic) if self.topic_id is not None else None

    def identity(self) -> tuple[int, str, str | None]:
        """(member epoch or generation, member id, instance id) for an OffsetCommit; raises
        KafkaError (not retriable) when the member has none to commit with."""
        m = self._member
        if m is None:
            return NO_IDENTITY
        if m.fenced:
            # Java's CommitFailedException: the partitions are no longer ours to commit.
            raise KafkaError(ErrorCode.fenced_member_epoch,
                             f"group {self.group_id}: the member was fenced; its partitions are lost", retriable=False)
        if not m.active:
            return NO_IDENTITY
        generation, member_id, instance_id = m.commit_identity()
        if generation < 0 and self.needs_generation:
            # Java's RebalanceInProgressException: a classic member between generations has
            # no identity to commit with; a membership-free commit would be refused
            # (UNKNOWN_MEMBER_ID) by a non-empty group.
            raise KafkaError(ErrorCode.rebalance_in_progress, f"group {self.group_id}: commit during a rebalance",
                             retriable=False)
        return generation, member_id, instance_id

    def commit_request(self, offsets: Mapping[TopicPartition, int]) -> OffsetCommit:
        """An OffsetCommit of `offsets` with the core's identity now (see `identity`)."""
        generation, member_id, instance_id = self.identity()
        return OffsetCommit(self.group_id or "", dict(offsets), generation, member_id, instance_id)

    def auto_commit_due(self, now: float) -> bool:
        """True once per interval (and the interval starts again)."""
        if not self.auto_commit or now < self.next_auto_commit_ms:
            return False
        self.next_auto_commit_ms = now + self.auto_commit_interval_ms
        return True

    def committed(self, now: float) -> None:
        """A commit succeeded: the next auto-commit is an interval away."""
        self.next_auto_commit_ms = now + self.auto_commit_interval_ms

    def to_fetch(self, parts: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        """Of `parts` (default: everything held), those whose committed offset must be
        fetched before they are consumed: position unknown and no seek_to_* pending."""
        ps = self.positions.parts
        tps = ps if parts is None else [tp for tp in sorted(parts) if tp in ps]
        return [tp for tp in tps if ps[tp].position is None and ps[tp].reset is None]

    def fetch_body(self, tps: list[TopicPartition]) -> dict:
        return fetch_committed_body(self.group_id or "", tps, require_stable=REQUIRE_STABLE)

    def apply_committed(self, found: Mapping[TopicPartition, int],
                        parts: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Committed offsets for `parts` arrived: those still waiting start from theirs.
        Returns those of `parts` still without a position (no committed offset, or a
        seek_to_* pending), for the reset policy."""
        ps = self.positions.parts
        left = []
        for tp in parts:
            s = ps.get(tp)
            if s is None or s.position is not None:
                continue
            if s.reset is None and tp in found:
                s.position = found[tp]
            else:
                left.append(tp)
        return left
