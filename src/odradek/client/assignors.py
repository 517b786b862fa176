"""Client-side partition assignors for the classic consumer group protocol.

Theory of operation
-------------------
In the classic protocol the coordinator does not assign partitions. Each member joins
(JoinGroup) with its assignors' names and a ConsumerProtocolSubscription for each; the
coordinator picks one assignor every member supports and elects a leader, which gets
all subscriptions in its JoinGroup response, runs that assignor locally and sends the
result back in SyncGroup. The classes here are that local step, as pure functions of

* the members' subscriptions (:class:`MemberSubscription`: topics, plus, from
  subscription v1, the partitions each member owns and, from v2, its generation), and
* ``partitions``: topic -> partition count for the topics that exist (the leader's
  metadata). Subscribed topics that are absent (or have no partitions) are skipped,
  as in Kafka's ``AbstractPartitionAssignor``.

The result maps every member id to ``{topic: sorted partitions}`` (``{}`` when it gets
nothing; topics with no partitions for a member are left out). Decoding subscriptions
and encoding ConsumerProtocolAssignment is the caller's job.

Member order follows Kafka's ``AbstractPartitionAssignor.MemberInfo``: members with a
``group.instance.id`` first, ordered by instance id, then the rest by member id (KIP-345
"Static Membership": the instance id survives restarts, the member id does not, so
ordering by it keeps range and round-robin layouts stable across rolling bounces).
Strings compare as Java's ``String.compareTo`` does (UTF-16 code units), so a Java
leader and this one lay out the same group identically.

* :class:`RangeAssignor` ("range", eager): per topic, contiguous ranges; with ``P``
  partitions and ``S`` subscribers the first ``P % S`` get ``P // S + 1``.
* :class:`RoundRobinAssignor` ("roundrobin", eager): all partitions, sorted by topic
  then number, dealt round-robin over the members, skipping non-subscribers.
* :class:`CooperativeStickyAssignor` ("cooperative-sticky", cooperative): balanced and
  sticky, withholding moved partitions for one round; see its docstring.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import ClassVar, NamedTuple, Protocol

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
]

DEFAULT_GENERATION = -1  # AbstractStickyAssignor.DEFAULT_GENERATION: "no generation known"


class MemberSubscription(NamedTuple):
    """One member's ConsumerProtocolSubscription, as the group leader sees it."""

    member_id: str
    instance_id: str | None = None
    topics: tuple[str, ...] = ()
    # Partitions the member says it owns (ConsumerProtocolSubscription v1+); may be empty.
    owned: Mapping[str, frozenset[int]] = MappingProxyType({})
    # The generation those were owned in (v2+); DEFAULT_GENERATION when unknown.
    generation: int = DEFAULT_GENERATION


Assignment = dict[str, dict[str, list[int]]]  # member_id -> topic -> sorted partitions
TP = tuple[str, int]


class Assignor(Protocol):
    name: ClassVar[str]  # the protocol name in JoinGroup (ConsumerPartitionAssignor.name)
    rebalance_protocol: ClassVar[str]  # "eager" or "cooperative" (KIP-429)

    def assign(self, members: list[MemberSubscription], partitions: Mapping[str, int]) -> Assignment: ...


def _jkey(s: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; big-endian UTF-16 bytes sort the same.
    return s.encode("utf-16-be", "surrogatepass")


def _member_key(m: MemberSubscription) -> tuple[int, bytes, bytes]:
    # AbstractPartitionAssignor.MemberInfo.compareTo: static members first, by instance id;
    # then dynamic members by member id.
    if m.instance_id is not None:
        return (0, _jkey(m.instance_id), _jkey(m.member_id))
    return (1, _jkey(m.member_id), b"")


def _check(members: list[MemberSubscription]) -> None:
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate member ids")


def _topics(m: MemberSubscription, partitions: Mapping[str, int]) -> frozenset[str]:
    """The member's subscribed topics that exist (and have partitions)."""
    return frozenset(t for t in m.topics if partitions.get(t, 0) > 0)


def _result(members: Iterable[MemberSubscription], held: Mapping[str, Iterable[TP]]) -> Assignment:
    out: Assignment = {}
    for m in members:
        per_topic: dict[str, list[int]] = {}
        for t, p in held.get(m.member_id, ()):
            per_topic.setdefault(t, []).append(p)
        for ps in per_topic.values():
            ps.sort()
        out[m.member_id] = per_topic
    return out


class RangeAssignor:
    """Kafka's RangeAssignor: per topic, consumers in member order, contiguous ranges.

    For each topic, its subscribers in member order (static members by instance id
    first, KIP-345) get ``P // S`` partitions each and the first ``P % S`` one more, in
    ascending runs: 3 partitions over C0, C1 give C0 [0, 1] and C1 [2]. Topics with the
    same partition count and subscribers are co-partitioned (same numbers per member).
    """

    name: ClassVar[str] = "range"
    rebalance_protocol: ClassVar[str] = "eager"

    def assign(self, members: list[MemberSubscription], partitions: Mapping[str, int]) -> Assignment:
        _check(members)
        out: Assignment = {m.member_id: {} for m in members}
        subscribers: dict[str, list[MemberSubscription]] = {}
        for m in members:
            for t in _topics(m, partitions):
                subscribers.setdefault(t, []).append(m)
        for t, subs in subscribers.items():
            subs.sort(key=_member_key)
            quota, extra = divmod(partitions[t], len(subs))
            start = 0
            for i, m in enumerate(subs):
                # RangeAssignor: "the first few consumers will have one extra partition"
                n = quota + (1 if i < extra else 0)
                if n:
                    out[m.member_id][t] = list(range(start, start + n))
                start += n
        return out


class RoundRobinAssignor:
    """Kafka's RoundRobinAssignor: every partition, topic by topic, to the next subscriber.

    Partitions of all subscribed topics, sorted by (topic, partition), go round-robin
    over all members in member order; a member not subscribed to the partition's topic
    is skipped (and the walk continues from the one that took it).
    """

    name: ClassVar[str] = "roundrobin"
    rebalance_protocol: ClassVar[str] = "eager"

    def assign(self, members: list[MemberSubscription], partitions: Mapping[str, int]) -> Assignment:
        _check(members)
        order = sorted(members, key=_member_key)
        subscribed = [_topics(m, partitions) for m in order]
        held: dict[str, list[TP]] = {m.member_id: [] for m in order}
        topics = sorted(frozenset().union(*subscribed), key=_jkey)
        i = 0
        for t in topics:
            for p in range(partitions[t]):
                while t not in subscribed[i]:  # someone subscribes, so this stops
                    i = (i + 1) % len(order)
                held[order[i].member_id].append((t, p))
                i = (i + 1) % len(order)
        return _result(members, held)


class CooperativeStickyAssignor:
    """Kafka's CooperativeStickyAssignor: balanced, sticky, and cooperative (KIP-429).

    Three steps.

    1. *Owners.* Each partition's owner is taken from the members' ``owned`` claims
       (AbstractStickyAssignor ``allSubscriptionsEqual``). When several members claim
       the same partition the one with the highest ``generation`` wins; if the highest
       generation is claimed more than once the claims are invalid and nobody owns it
       ("claiming the same TopicPartition in the same generation"). A winning claim on
       a topic its owner no longer subscribes to is dropped. Claims on topics or
       partitions that do not exist are ignored.
    2. *Sticky balance.* Every member keeps what it owns. Unowned partitions go, hardest
       to place first (topics with the fewest subscribers, then by name; partitions
       ascending), to the least loaded subscriber (ties: member order). Then load
       shifts from X to Y while ``count(X) >= count(Y) + 2`` and Y can take something
       of X's: through unowned partitions if possible, even along a chain (X gives one
       to U, U gives one of another topic to Y), else by moving one owned partition
       of the most loaded X straight to the least loaded eligible Y. It stops when no
       such X and Y remain, which is Kafka's ``isBalanced`` criterion; every shift
       strictly lowers the sum of squared counts, so it does stop. When all members
       subscribe to the same topics that means max - min <= 1, and the owned
       partitions that move are only those above what the final counts allow, the
       fewest possible.
    3. *Cooperative withholding* (KIP-429 "Incremental Cooperative Rebalancing",
       CooperativeStickyAssignor ``adjustAssignment``). Under the cooperative protocol a
       member keeps consuming its partitions through the rebalance and only revokes
       those missing from its new assignment. So a partition assigned to a member
       other than its owner, while another member still claims it, is left out of
       this round's assignment altogether: the claimant revokes it and, having revoked
       something, rejoins; in that next rebalance nobody claims it and step 2 hands it
       to the member that is short of it. Giving it to the new member at once would let
       two members consume it at the same time.

    A layout is not guaranteed to equal a Java leader's (Kafka iterates hash maps); the
    properties are the ones above, which are what members rely on.
    """

    name: ClassVar[str] = "cooperative-sticky"
    rebalance_protocol: ClassVar[str] = "cooperative"

    def assign(self, members: list[MemberSubscription], partitions: Mapping[str, int]) -> Assignment:
        _check(members)
        order = [m.member_id for m in sorted(members, key=lambda m: _jkey(m.member_id))]
        rank = {mid: i for i, mid in enumerate(order)}
        topics_of = {m.member_id: _topics(m, partitions) for m in members}
        subscribers: dict[str, list[str]] = {}
        for mid in order:
            for t in topics_of[mid]:
                subscribers.setdefault(t, []).append(mid)

        # 1. Owners, from the claims (highest generation wins; a tie at the top voids them).
        #    A member whose generation is older than the newest any member reports missed a
        #    rebalance: it has dropped its partitions as lost (or will), so its claims count
        #    for nothing, neither here nor for withholding (Java's AbstractStickyAssignor
        #    ignores them; counting them withheld partitions for a round that never came).
        newest = max((m.generation for m in members if m.owned), default=-1)
        claims: dict[TP, list[tuple[int, str]]] = {}
        for m in members:
            if m.generation < newest:
                continue
            for t, ps in m.owned.items():
                n = partitions.get(t, 0)
                for p in ps:
                    if 0 <= p < n:
                        claims.setdefault((t, p), []).append((m.generation, m.member_id))
        owner: dict[TP, str] = {}
        for tp, cl in claims.items():
            top = max(g for g, _ in cl)
            winners = [mid for g, mid in cl if g == top]
            if len(winners) == 1 and tp[0] in topics_of[winners[0]]:
                owner[tp] = winners[0]

        # 2. Sticky balance: keep, fill the rest least-loaded-first, then even out.
        held: dict[str, dict[str, set[int]]] = {mid: {} for mid in order}
        count = dict.fromkeys(order, 0)
        for (t, p), mid in owner.items():
            held[mid].setdefault(t, set()).add(p)
            count[mid] += 1
        self._fill(subscribers, partitions, owner, held, count, rank)
        self._even_out(order, subscribers, owner, held, count, rank)

        # 3. Cooperative withholding: a partition changing hands while someone else still
        #    claims it is assigned to nobody this round (KIP-429).
        out: Assignment = {}
        for m in members:
            mid = m.member_id
            per_topic: dict[str, list[int]] = {}
            for t, ps in held[mid].items():
                kept = [
                    p
                    for p in ps
                    if owner.get((t, p)) == mid or not any(c != mid for _, c in claims.get((t, p), ()))
                ]
                if kept:
                    per_topic[t] = sorted(kept)
            out[mid] = per_topic
        return out

    @staticmethod
    def _fill(
        subscribers: dict[str, list[str]],
        partitions: Mapping[str, int],
        owner: dict[TP, str],
        held: dict[str, dict[str, set[int]]],
        count: dict[str, int],
        rank: dict[str, int],
    ) -> None:
        """Give every unowned partition to its least loaded subscriber."""
        # Hardest to place first (AbstractStickyAssignor's TopicComparator): fewest subscribers.
        topics = sorted(subscribers, key=lambda t: (len(subscribers[t]), _jkey(t)))
        # One lazy min-heap per distinct subscriber list. Counts only grow here, so a
        # stale entry is too small: refresh it when it surfaces; a fresh top is the minimum.
        heaps: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}
        for t in topics:
            subs = tuple(subscribers[t])
            heap = heaps.get(subs)
            if heap is None:
                heap = heaps[subs] = [(count[mid], rank[mid], mid) for mid in subs]
                heapq.heapify(heap)
            for p in range(partitions[t]):
                if (t, p) in owner:
                    continue
                while True:
                    c, r, mid = heap[0]
                    if c == count[mid]:
                        break
                    heapq.heapreplace(heap, (count[mid], r, mid))
                held[mid].setdefault(t, set()).add(p)
                count[mid] = c + 1
                heapq.heapreplace(heap, (c + 1, r, mid))

    @staticmethod
    def _even_out(
        order: list[str],
        subscribers: dict[str, list[str]],
        owner: dict[TP, str],
        held: dict[str, dict[str, set[int]]],
        count: dict[str, int],
        rank: dict[str, int],
    ) -> None:
        """Shift load, one partition at a time, from the most loaded members to eligible lighter ones.

        A shift from giver X to taker Y is worth it when ``count(X) >= count(Y) + 2``.
        Partitions nobody owned (just filled in) move for free, so first a shift is sought
        along a chain of such moves (X hands one to U, U hands one of another topic to
        Y: U's count stays put); only when there is none does one owned partition move,
        straight from X to Y (AbstractStickyAssignor ``balance``: "first try to balance
        by only moving newly added partitions").
        """

        def fresh(u: str, t: str) -> list[int]:
            return [p for p in held[u][t] if (t, p) not in owner]

        def taker(t: str) -> str:
            return min(subscribers[t], key=lambda v: (count[v], rank[v]))

        while True:
            low = min(count.values(), default=0)
            givers = sorted((x for x in order if count[x] >= low + 2), key=lambda x: (-count[x], rank[x]))
            steps: list[tuple[str, str, str]] = []  # (giver, taker, topic)
            for x in givers:  # a free chain, breadth first (shortest, then least loaded end)
                parent: dict[str, tuple[str, str]] = {x: (x, "")}
                level, goal = [x], None
                while level and goal is None:
                    nxt: list[str] = []
                    ends: list[tuple[int, int, str]] = []
                    for u in level:
                        for t in sorted(held[u]):
                            if not fresh(u, t):
                                continue
                            for v in subscribers[t]:
                                if v not in parent:
                                    parent[v] = (u, t)
                                    nxt.append(v)
                                    if count[v] + 2 <= count[x]:
                                        ends.append((count[v], rank[v], v))
                    goal = min(ends)[2] if ends else None
                    level = nxt
                if goal is not None:
                    while goal != x:
                        u, t = parent[goal]
                        steps.append((u, goal, t))
                        goal = u
                    steps.reverse()
                    break
            if not steps:  # no free chain: one owned partition moves, biggest giver first
                for x in givers:
                    best = min(
                        ((count[y], rank[y], y, t) for t in held[x] if held[x][t] for y in [taker(t)]),
                        default=None,
                    )
                    if best is not None and best[0] + 2 <= count[x]:
                        steps.append((x, best[2], best[3]))
                        break
            if not steps:
                return  # nothing can shift: balanced in the sense of Kafka's isBalanced
            for u, v, t in steps:
                ps = fresh(u, t) or held[u][t]
                p = max(ps)  # the highest number: Kafka's constrained path keeps the lowest
                held[u][t].discard(p)
                held[v].setdefault(t, set()).add(p)
            count[steps[0][0]] -= 1
            count[steps[-1][1]] += 1


ASSIGNORS: dict[str, type[Assignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}
