"""The range assignor: per topic, contiguous ranges for the subscribers (KIP-848 "Server Side Mode").

Theory of operation
-------------------
Each topic is assigned on its own. With P partitions and S subscribers (sorted by
member id) the quota is ``q = P // S`` and ``P % S`` members get one more (the extra
slots). From scratch that gives the classic ranges: the first ``P % S`` members get
``ceil(P/S)`` consecutive partitions, the rest ``floor(P/S)``.

It is sticky, in two steps per topic:

1. *Retain.* In member-id order each subscriber keeps the valid part of its current
   assignment of the topic (partitions that exist, not already kept by an earlier
   member): a member holding more than ``q`` takes an extra slot while any are left and
   keeps ``q + 1``, otherwise it keeps ``q`` (its lowest partitions).
2. *Fill.* The unassigned partitions, ascending, go in contiguous runs to the
   subscribers in member-id order: each gets up to ``q``, and the remaining extra slots
   go to the first members without one.

Co-partitioning falls out of determinism: the result for a topic depends only on its
partition count, its sorted subscribers and the partition *numbers* they currently
hold. So topics with the same partition count and the same subscribers get the same
partition numbers per member from scratch, and keep doing so after any sticky
rebalance as long as the current assignment was co-partitioned.

Racks are ignored: what range promises is per-topic ranges and co-partitioning, and
a rack preference would break both. The fill stops at the last unassigned partition,
so a topic with many more subscribers than partitions costs about O(partitions), not
O(subscribers).
"""

from __future__ import annotations

from .spec import Assignment, AssignmentSpec, check, group_members, topic_order

NAME = "range"


def assign(spec: AssignmentSpec) -> Assignment:
    check(spec)
    order, member_class, classes = group_members(spec)
    if not classes:
        return {mid: {} for mid in order}
    members, topics = spec.members, spec.topics
    tids = topic_order(frozenset().union(*classes))
    ntop = len(tids)
    tix = {tid: k for k, tid in enumerate(tids)}
    sizes = [topics[t].partitions for t in tids]
    valid = {n: frozenset(range(n)) for n in set(sizes)}
    class_tset = [frozenset(tix[t] for t in cls) for cls in classes]
    class_members: list[list[int]] = [[] for _ in classes]
    for i, c in enumerate(member_class):
        if c >= 0:
            class_members[c].append(i)
    topic_classes: list[list[int]] = [[] for _ in tids]
    for c, ts in enumerate(class_tset):
        for t in ts:
            topic_classes[t].append(c)
    subscribers: list[list[int]] = []
    shared_subs: dict[tuple[int, ...], list[int]] = {}  # topics with the same classes share one list
    for tc in topic_classes:
        key = tuple(sorted(tc))
        subs = shared_subs.get(key)
        if subs is None:
            subs = shared_subs[key] = sorted(i for c in key for i in class_members[c])
        subscribers.append(subs)
    quota = [divmod(n, len(subs)) for n, subs in zip(sizes, subscribers)]
    extras = [e for _q, e in quota]

    # 1. Retain, up to quota (KIP-848 "Server Side Mode": sticky). Walking the members in
    #    id order and their topics in any order is the same as walking each topic's
    #    subscribers in id order.
    m = len(order)
    entries: list[list | None] = [None] * m  # per member: [(topic id, partitions)]
    intact = bytearray(m)  # 1: the member keeps its current mapping exactly (so far)
    split = bytearray(m)  # 1: some topic has a kept part and a filled part in `entries`
    taken: list[set[int] | None] = [None] * ntop
    got: list[dict[int, int] | None] = [None] * ntop  # per topic: member -> partitions kept
    bonus: list[set[int] | None] = [None] * ntop  # per topic: members holding an extra slot
    for i, mid in enumerate(order):
        c = member_class[i]
        cur = members[mid].current if c >= 0 else None
        if not cur:
            continue
        ts = class_tset[c]
        mine = entries[i] = []
        whole = type(cur) is dict
        for tid, parts in cur.items():
            t = tix.get(tid)
            if t is None or t not in ts or not parts:
                whole = False
                continue
            if type(parts) is not frozenset:
                parts = frozenset(parts)
                whole = False
            ok = valid[sizes[t]]
            if not parts <= ok:  # the topic shrank or the entry is bogus
                parts = parts & ok
                whole = False
            tk = taken[t]
            if tk is None:
                tk = taken[t] = set()
                got[t] = {}
            elif not tk.isdisjoint(parts):  # two members claim a partition: the first keeps it
                parts = parts - tk
                whole = False
            n = len(parts)
            q = quota[t][0]
            if n > q and extras[t]:  # extra slots go first to members that already hold them
                extras[t] -= 1
                if bonus[t] is None:
                    bonus[t] = set()
                bonus[t].add(i)
                cap = q + 1
            else:
                cap = q
            if n > cap:
                parts = frozenset(sorted(parts)[:cap])
                n = cap
                whole = False
            if n:
                mine.append((tid, parts))
                tk |= parts
                got[t][i] = n
        intact[i] = whole

    # 2. Fill, in contiguous runs.
    shared: dict[tuple[int, int], frozenset[int]] = {}  # equal runs share one frozenset
    for t, tid in enumerate(tids):
        n = sizes[t]
        tk = taken[t]
        if not n or (tk is not None and len(tk) >= n):
            continue
        q, e = quota[t][0], extras[t]
        free = [p for p in range(n) if p not in tk] if tk else None
        nfree = len(free) if free is not None else n
        kept, extra = got[t] or {}, bonus[t] or ()
        pos = 0
        for i in subscribers[t]:
            c = kept.get(i, 0) if kept else 0
            need = q - c if c < q else 0
            if e and i not in extra:
                need += 1
                e -= 1
            if not need:
                continue
            end = pos + need
            if free is None:  # nothing kept: the run is range(pos, end)
                piece = shared.get((pos, end))
                if piece is None:
                    piece = shared[pos, end] = frozenset(range(pos, end))
            else:
                piece = frozenset(free[pos:end])
            pos = end
            mine = entries[i]
            if mine is None:
                entries[i] = [(tid, piece)]
            else:
                mine.append((tid, piece))
                intact[i] = 0
                if c:
                    split[i] = 1
            if pos >= nfree:  # everything is placed; the rest of the subscribers get none
                break

    out = {}
    for i, mid in enumerate(order):
        mine = entries[i]
        if not mine:
            out[mid] = {}
        elif intact[i]:
            out[mid] = members[mid].current.copy()  # unchanged: reuse the stored hashes
        elif not split[i]:
            out[mid] = dict(mine)
        else:
            d = out[mid] = {}
            for tid, parts in mine:
                old = d.get(tid)
                d[tid] = parts if old is None else old | parts
    return out
