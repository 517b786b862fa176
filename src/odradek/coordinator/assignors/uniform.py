"""The uniform assignor: sticky and balanced across the whole group (KIP-848 "Server Side Mode").

Theory of operation
-------------------
Every partition of every topic somebody subscribes to goes to exactly one of its
subscribers; members that subscribe to nothing that exists get ``{}``. The priorities,
in order, are **balance, rack, stickiness**: the partition counts are as even as the
subscriptions allow; within that, a partition goes to a member in one of its replicas'
racks when there is one; within that, partitions stay where they are.

Homogeneous groups (every subscribed member subscribes to the same topics) use the
quota path. With N partitions and M members each member's quota is ``q = N // M``, and
``N % M`` members may hold one more (the "extra" slots).

1. *Retain.* In member-id order, each member keeps the valid part of its current
   assignment (partitions that exist, not already kept by an earlier member) up to its
   quota: a member holding more than ``q`` takes an extra slot while any are left and
   keeps ``q + 1``, else keeps ``q`` (lowest topic ids and partitions first). When rack
   matters, a partition whose replicas are not in the member's rack is let go if some
   member *is* in one of its replicas' racks (rack outranks stickiness).
2. *Rack fill* (only when rack matters). The unassigned partitions that some member's
   rack matches, those with the fewest matching racks first, go to the least loaded
   member of a matching rack that is still below its quota (or can take an extra slot).
3. *Fill.* The remaining unassigned partitions, in topic-id and partition order, are
   dealt out in contiguous runs to the members in member-id order: each gets up to
   ``q``, and the remaining extra slots go to the first members that have none.

Only partitions a member loses above its quota (or to rack) move, so a member joining
a balanced group takes exactly the partitions it ends up with from the others, and a
member leaving frees only its own. Nothing on this path loops over partitions in
Python when nothing is current: each member's run is one ``frozenset(range(a, b))``,
and equal runs share one frozenset (see bench/assignors.py for the cost).

Heterogeneous groups use the general path. Members with the same (effective)
subscription form a *class*; topics subscribed by the same classes form a *group*.

1. *Retain* every valid current partition (rack rule as above), no quota yet.
2. *Place* the unassigned partitions. Topic by topic "least loaded subscriber first" is
   short-sighted (a class that can also take from a later topic gets as much as one
   that cannot), so first the shares: how many of each group's partitions each of its
   classes gets, from the fractional optimum of the class-level problem (see
   `_class_shares`). Then within a class the partitions go in contiguous runs to the
   least loaded members. When rack matters, a group's partitions go preferably to a
   class with a member in a replica's rack, and within the class one by one to the
   least loaded member, a rack match breaking ties.
3. *Balance.* Repeatedly find a chain of moves m0 -> m1 -> ... -> mk, each step
   handing one partition of a topic the next member subscribes to, with
   ``load(m0) >= load(mk) + 2``, and apply it (the start loses one partition, the end
   gains one, the middle keeps its count). When no such chain exists the loads are the
   most even the subscriptions allow: no member's load can be lowered without raising
   another's to at least the same value (the optimality condition for load-balancing
   semi-matchings, Harvey et al. 2003), stronger than "no single move helps".
   See `_balance` for the search. A moved partition is one the member did not hold
   before this round if possible, then one that gains rack locality, then the lowest.

The general path is slower than the quota path (bench/assignors.py reports both); its
costs are linear in members + topics + (class, topic) pairs per balancing search, and
step 2's class-level optimisation is capped at a fixed amount of work.

Rack matters only if some subscribed member has a rack and some partition's replica
racks include some but not all of the members' racks; otherwise racks are ignored.
"""

from __future__ import annotations

from heapq import heapify, heappop, heapreplace
from uuid import UUID

from .spec import Assignment, AssignmentSpec, check, group_members, topic_order

NAME = "uniform"


def assign(spec: AssignmentSpec) -> Assignment:
    check(spec)
    order, member_class, classes = group_members(spec)
    mids = [mid for mid, c in zip(order, member_class) if c >= 0]
    if not mids:
        return {mid: {} for mid in order}
    racks = _member_racks_if_relevant(spec, mids, classes)
    if len(classes) == 1:
        got = _homogeneous(spec, mids, topic_order(classes[0]), racks)
    else:
        subscribed = [c for c in member_class if c >= 0]
        got = _general(spec, mids, subscribed, classes, racks)
    out = dict(zip(mids, got))
    if len(out) < len(order):  # members without (existing) subscriptions get nothing
        out = {mid: out.get(mid) or {} for mid in order}
    return out


def _member_racks_if_relevant(spec: AssignmentSpec, mids: list[str], classes) -> frozenset[str] | None:
    """The subscribed members' racks, or None when racks cannot change any choice."""
    members = spec.members
    racks = frozenset(r for r in (members[mid].rack_id for mid in mids) if r is not None)
    if not racks:
        return None
    for tid in frozenset().union(*classes):
        pr = spec.topics[tid].partition_racks
        if pr is None:
            continue
        for r in set(pr):  # coordinators often share one rack set among all partitions
            if r and not r.isdisjoint(racks) and not racks <= r:
                return racks
    return None


def _drop_mismatched(parts: frozenset[int], rack: str, pr, candidate_racks) -> frozenset[int]:
    """Let go of partitions with no replica in `rack` that a member in another rack could take."""
    if pr is None:
        return parts
    bad = [p for p in parts if (r := pr[p]) and rack not in r and not r.isdisjoint(candidate_racks)]
    return parts.difference(bad) if bad else parts


# --------------------------------------------------------------------------- homogeneous


def _homogeneous(spec: AssignmentSpec, mids: list[str], tids: list[UUID], racks) -> list[dict]:
    members, topics = spec.members, spec.topics
    m = len(mids)
    sizes = [topics[t].partitions for t in tids]
    q, extras = divmod(sum(sizes), m)
    # Per topic: (partition count, every valid partition, partitions kept so far). One
    # lookup per current entry: each dict lookup by UUID runs UUID.__hash__ (Python).
    valid = {n: frozenset(range(n)) for n in set(sizes)}
    info = {tid: (n, valid[n], set()) for tid, n in zip(tids, sizes) if n}
    counts = [0] * m
    kept: list = [None] * m  # the member's current mapping if kept whole, else [(topic, parts)]
    whole = bytearray(m)
    bonus = bytearray(m)  # 1: the member holds one of the extra (+1) slots
    rack_of = [members[mid].rack_id for mid in mids] if racks else None

    # 1. Retain, up to quota. KIP-848 "Server Side Mode": the assignor gets each member's
    #    current target so that it can be sticky; fewer moves means shorter revocations.
    for i, mid in enumerate(mids):
        cur = members[mid].current
        if not cur:
            continue
        mine = []
        c = 0
        intact = type(cur) is dict
        for tid, parts in cur.items():
            e = info.get(tid)
            if e is None or not parts:
                intact = False
                continue
            n, ok, t = e
            if type(parts) is not frozenset:
                parts = frozenset(parts)
                intact = False
            if not parts <= ok:  # the topic shrank or the entry is bogus
                parts = parts & ok
                intact = False
            if not t.isdisjoint(parts):  # two members claim a partition: the first keeps it
                parts = parts - t
                intact = False
            if racks and rack_of[i] is not None:
                kept_racks = _drop_mismatched(parts, rack_of[i], topics[tid].partition_racks, racks)
                if kept_racks is not parts:
                    parts = kept_racks
                    intact = False
            if parts:
                t |= parts
                mine.append((tid, parts, t))
                c += len(parts)
        if not c:
            continue
        if c > q:
            # A member above the minimum keeps one more while extra slots last: fewer moves.
            if extras:
                extras -= 1
                bonus[i] = 1
                cap = q + 1
            else:
                cap = q
            if c > cap:
                mine = _trim(mine, cap)
                c = cap
                intact = False
        if intact:
            kept[i] = cur
            whole[i] = 1
        else:
            kept[i] = [(tid, parts) for tid, parts, _t in mine]
        counts[i] = c

    segs = []  # what is left to deal out: (topic id, ascending partitions: range(n) or list)
    for tid in tids:
        e = info.get(tid)
        if e is None:
            continue
        n, _ok, t = e
        if not t:
            segs.append((tid, range(n)))
        elif len(t) < n:
            segs.append((tid, [p for p in range(n) if p not in t]))

    # 2. Rack fill.
    given = None
    if racks and segs:
        given, segs, extras = _rack_fill(topics, segs, rack_of, counts, bonus, q, extras)

    # 3. Fill, in contiguous runs. The first branch is the common case of a whole group
    #    from scratch: one run inside one topic for a member that keeps nothing.
    out: list[dict] = []
    append = out.append
    shared: dict[tuple[int, int], frozenset[int]] = {}  # equal runs share one frozenset
    nseg = len(segs)
    si = off = 0
    stid, seq = segs[0] if segs else (None, range(0))
    slen = len(seq)
    whole_range = type(seq) is range
    for i in range(m):
        c = counts[i]
        need = q - c if c < q else 0
        if extras and not bonus[i]:
            need += 1
            extras -= 1
        mine = kept[i]
        if mine is None and given is None and need and off + need < slen and whole_range:
            end = off + need
            fs = shared.get((off, end))
            if fs is None:
                fs = shared[off, end] = frozenset(range(off, end))
            append({stid: fs})
            off = end
            continue
        if mine is None:
            d = {}
        elif whole[i]:
            d = mine.copy()  # a dict copy reuses the stored hashes
        else:
            d = dict(mine)
        if given is not None and i in given:
            for tid, ps in given[i].items():
                d[tid] = d[tid] | frozenset(ps) if tid in d else frozenset(ps)
        while need:
            end = off + need
            tid = stid
            if end < slen:
                piece = range(off, end) if whole_range else seq[off:end]
                off = end
                need = 0
            else:
                piece = seq[off:] if off else seq
                need = end - slen
                si += 1
                off = 0
                if si < nseg:
                    stid, seq = segs[si]
                    slen = len(seq)
                    whole_range = type(seq) is range
            old = d.get(tid) if d else None
            d[tid] = frozenset(piece) if old is None else old | frozenset(piece)
        append(d)
    return out


def _trim(mine: list, cap: int) -> list:
    """Keep `cap` partitions, lowest topic ids and partitions first; give the rest back
    (unmark them in the topic's kept set)."""
    out = []
    for tid, parts, t in sorted(mine, key=lambda e: e[0].int):
        if len(parts) > cap:
            keep = frozenset(sorted(parts)[:cap])
            t -= parts - keep
            parts = keep
        if parts:
            out.append((tid, parts, t))
        cap -= len(parts)
    return out


def _rack_fill(topics, segs, rack_of, counts, bonus, q, extras):
    """Step 2 of the homogeneous path: unassigned partitions to below-quota members of a
    matching rack. Returns ({member: {topic: [partitions]}}, the segments left, extras left)."""
    heaps: dict[str, list] = {}
    for i, r in enumerate(rack_of):
        if r is not None and (counts[i] < q or (counts[i] == q and not bonus[i])):
            heaps.setdefault(r, []).append((counts[i], i))
    for h in heaps.values():
        heapify(h)
    cands = []
    for k, (tid, seq) in enumerate(segs):
        pr = topics[tid].partition_racks
        if pr is None:
            continue
        for p in seq:
            rs = [r for r in pr[p] if r in heaps]
            if rs:
                # Partitions with fewer matching racks first: they have fewer places to go.
                cands.append((len(rs), k, p, sorted(rs)))
    cands.sort(key=lambda e: e[:3])
    given: dict[int, dict[UUID, list[int]]] = {}
    gone: dict[UUID, set[int]] = {}
    for _n, k, p, rs in cands:
        best = None
        for r in rs:
            h = heaps[r]
            # Entries are exact (a member is only in its own rack's heap); only the
            # extra-slot eligibility can lapse, and it never comes back.
            while h and not (h[0][0] < q or (h[0][0] == q and extras)):
                heappop(h)
            if h and (best is None or h[0] < best[0]):
                best = (h[0], h)
        if best is None:
            continue
        (c, i), h = best
        if c == q:  # crossing the quota takes an extra slot
            bonus[i] = 1
            extras -= 1
        counts[i] = c + 1
        heapreplace(h, (c + 1, i))
        tid = segs[k][0]
        given.setdefault(i, {}).setdefault(tid, []).append(p)
        gone.setdefault(tid, set()).add(p)
    left = []
    for tid, seq in segs:
        g = gone.get(tid)
        if g:
            seq = [p for p in seq if p not in g]
        if seq:
            left.append((tid, seq))
    return given, left, extras


# --------------------------------------------------------------------------- heterogeneous


class _Held:
    """Who holds what on the general path: per member a load and {topic index: partitions},
    per topic the members holding any of it, and which members changed."""

    __slots__ = ("dirty", "hold", "holders", "load")

    def __init__(self, m: int, ntop: int) -> None:
        self.load = [0] * m
        self.hold: list[dict[int, set[int]]] = [{} for _ in range(m)]
        self.holders: list[set[int]] = [set() for _ in range(ntop)]
        self.dirty = bytearray(m)

    def add(self, i: int, t: int, parts) -> None:
        h = self.hold[i]
        s = h.get(t)
        if s is None:
            h[t] = set(parts)
            self.holders[t].add(i)
        else:
            s.update(parts)
        self.load[i] += len(parts)
        self.dirty[i] = 1

    def move(self, x: int, v: int, t: int, p: int) -> None:
        s = self.hold[x][t]
        s.remove(p)
        if not s:
            del self.hold[x][t]
            self.holders[t].discard(x)
        self.load[x] -= 1
        self.dirty[x] = 1
        self.add(v, t, (p,))


def _general(spec: AssignmentSpec, mids: list[str], mclass: list[int], classes, racks) -> list[dict]:
    members, topics = spec.members, spec.topics
    m, nclass = len(mids), len(classes)
    tids = topic_order(frozenset().union(*classes))
    ntop = len(tids)
    tix = {tid: k for k, tid in enumerate(tids)}
    sizes = [topics[t].partitions for t in tids]
    valid = {n: frozenset(range(n)) for n in set(sizes)}
    prs = [topics[t].partition_racks for t in tids] if racks else [None] * ntop
    class_topics = [sorted(tix[t] for t in cls) for cls in classes]
    class_tset = [frozenset(ct) for ct in class_topics]
    class_members: list[list[int]] = [[] for _ in range(nclass)]
    for i, c in enumerate(mclass):
        class_members[c].append(i)
    topic_classes: list[list[int]] = [[] for _ in range(ntop)]
    for c, ct in enumerate(class_topics):
        for t in ct:
            topic_classes[t].append(c)
    rack_of = [members[mid].rack_id for mid in mids]
    topic_racks = class_racks = None
    if racks:
        class_racks = [frozenset(rack_of[i] for i in ms) - {None} for ms in class_members]
        topic_racks = [frozenset().union(*(class_racks[c] for c in tc)) for tc in topic_classes]

    held = _Held(m, ntop)
    load, hold, holders = held.load, held.hold, held.holders
    taken: list[set[int] | None] = [None] * ntop
    orig: list[dict[int, frozenset[int]] | None] = [None] * m  # what each member kept
    whole = bytearray(m)  # 1: kept its current mapping exactly

    # 1. Retain everything valid (KIP-848 "Server Side Mode": sticky); step 3 moves only
    #    what balance needs.
    for i, mid in enumerate(mids):
        cur = members[mid].current
        if not cur:
            continue
        ts = class_tset[mclass[i]]
        mine = {}
        intact = type(cur) is dict
        for tid, parts in cur.items():
            t = tix.get(tid)
            if t is None or t not in ts or not parts:
                intact = False
                continue
            ok = valid[sizes[t]]
            if type(parts) is not frozenset:
                parts = frozenset(parts)
                intact = False
            if not parts <= ok:  # the topic shrank or the entry is bogus
                parts = parts & ok
                intact = False
            tk = taken[t]
            if tk is None:
                tk = taken[t] = set()
            elif not tk.isdisjoint(parts):  # two members claim a partition: the first keeps it
                parts = parts - tk
                intact = False
            if topic_racks is not None and rack_of[i] is not None:
                kept_racks = _drop_mismatched(parts, rack_of[i], prs[t], topic_racks[t])
                if kept_racks is not parts:
                    parts = kept_racks
                    intact = False
            if parts:
                mine[t] = parts
                hold[i][t] = set(parts)
                tk |= parts
                holders[t].add(i)
                load[i] += len(parts)
        if mine:
            orig[i] = mine
            whole[i] = intact

    # 2. Place the unassigned partitions: how many each class gets from each group of
    #    topics with the same subscriber classes, then which members (least loaded).
    free: list = [None] * ntop
    groups: dict[tuple[int, ...], list[int]] = {}
    for t in range(ntop):
        n, tk = sizes[t], taken[t]
        if tk is None:
            f = range(n)
        elif len(tk) >= n:
            continue
        else:
            f = [p for p in range(n) if p not in tk]
        if f:
            free[t] = f
            groups.setdefault(tuple(topic_classes[t]), []).append(t)
    base = [0] * nclass
    for i, c in enumerate(mclass):
        base[c] += load[i]
    supply = [sum(len(free[t]) for t in ts) for ts in groups.values()]
    shares = _class_shares(list(groups), supply, [len(ms) for ms in class_members], base)
    cells = _rack_cells(class_members, rack_of, load) if racks else None
    for (key, ts), share in zip(groups.items(), shares):
        if cells is not None:
            _deal_with_racks([(t, p) for t in ts for p in free[t]], dict(zip(key, share)),
                             class_racks, cells, prs, held)
            continue
        runs = _Runs([(t, free[t]) for t in ts])
        for c, k in zip(key, share):
            if k:
                ms = class_members[c]
                for i, a in zip(ms, _level_up([load[i] for i in ms], k)):
                    for t, run in runs.take(a):
                        held.add(i, t, run)

    # 3. Balance.
    _balance(held, orig, mclass, class_topics, prs, rack_of)

    out = []
    for i, mid in enumerate(mids):
        if whole[i] and not held.dirty[i]:
            out.append(members[mid].current.copy())  # unchanged: reuse the stored hashes
        else:
            out.append({tids[t]: frozenset(s) for t, s in sorted(hold[i].items())})
    return out


class _Runs:
    """The partitions of a topic group in order, handed out as contiguous runs."""

    __slots__ = ("off", "segs", "si")

    def __init__(self, segs: list[tuple[int, range | list[int]]]) -> None:
        self.segs, self.si, self.off = segs, 0, 0

    def take(self, k: int):
        while k > 0:
            t, seq = self.segs[self.si]
            end = self.off + k
            if end < len(seq):
                yield t, seq[self.off : end]
                self.off = end
                return
            yield t, seq[self.off :] if self.off else seq
            k = end - len(seq)
            self.si += 1
            self.off = 0


def _level_up(loads: list[int], k: int) -> list[int]:
    """Spread `k` units over members with these loads, lowest first, evening them out:
    how many each gets. Ties go to the earlier member."""
    order = sorted(range(len(loads)), key=loads.__getitem__)
    out = [0] * len(loads)
    prefix = 0
    for j, x in enumerate(order):
        prefix += loads[x]
        nxt = loads[order[j + 1]] if j + 1 < len(order) else None
        if nxt is None or k <= nxt * (j + 1) - prefix:
            level, extra = divmod(prefix + k, j + 1)
            for y in order[: j + 1]:
                out[y] = level - loads[y] + (1 if extra > 0 else 0)
                extra -= 1
            return out
    return out


def _deal_with_racks(items, left: dict[int, int], class_racks, cells, prs, held: _Held) -> None:
    """Step 2 when racks matter: hand a topic group's partitions (`items`: (topic, partition))
    to its classes, `left[c]` each, preferring a class with a member in a replica's rack,
    partitions with the fewest such classes first; then within each class to the least
    loaded member, a rack match breaking ties (balance outranks rack)."""

    def racks_of(t: int, p: int) -> frozenset[str]:
        return prs[t][p] if prs[t] is not None else frozenset()

    per_class: dict[int, list[tuple[int, int]]] = {c: [] for c in left}
    rest = []
    scored = []
    for t, p in items:
        rs = racks_of(t, p)
        scored.append(([c for c in left if not class_racks[c].isdisjoint(rs)], t, p))
    scored.sort(key=lambda e: (len(e[0]) or len(left) + 1, e[1], e[2]))
    for cs, t, p in scored:
        cs = [c for c in cs if left[c]]
        if cs:
            c = max(cs, key=lambda c: (left[c], -c))  # the class with the most room left
            left[c] -= 1
            per_class[c].append((t, p))
        else:
            rest.append((t, p))
    for t, p in rest:
        c = next(c for c in left if left[c])
        left[c] -= 1
        per_class[c].append((t, p))
    for c, got in per_class.items():
        cc = cells[c]
        got.sort(key=lambda e: (sum(r in racks_of(*e) for r, _h in cc), e))
        for t, p in got:
            rs = racks_of(t, p)
            h = min(cc, key=lambda e: (e[1][0][0], e[0] not in rs, e[1][0][1]))[1]
            n, i = h[0]
            heapreplace(h, (n + 1, i))
            held.add(i, t, (p,))


def _rack_cells(class_members, rack_of, load) -> list[list[tuple[str | None, list]]]:
    """Per class, per rack (None last): a heap of (load, member)."""
    cells = []
    for ms in class_members:
        by_rack: dict[str | None, list] = {}
        for i in ms:
            by_rack.setdefault(rack_of[i], []).append((load[i], i))
        for h in by_rack.values():
            heapify(h)
        cells.append(sorted(by_rack.items(), key=lambda e: (e[0] is None, e[0] or "")))
    return cells


def _class_shares(keys, supply, size, base) -> list[list[int]]:
    """How many partitions of each topic group (`keys[g]`: its subscriber classes, `supply[g]`
    partitions to place) each of its classes gets, so that the classes' mean loads come out
    as even as possible given `base` (what each class already holds) and `size` (members).

    Placing group by group onto the least loaded members is short-sighted: a class that
    can also take from a later group gets as much as one that cannot. So this solves the
    fractional problem first: minimise sum(size[c] * mean[c] ** 2) by block coordinate
    descent, one group at a time water-filling its supply over its classes' means with
    the other groups fixed (convex, so it converges to the optimum), then rounds each
    group's shares by largest remainder. What rounding and the class-level view leave
    uneven, step 3 fixes member by member.
    """
    tot = [float(b) for b in base]
    share: list[list[float]] = []
    for key, u in zip(keys, supply):
        n = sum(size[c] for c in key)
        share.append([u * size[c] / n for c in key])
        for c, f in zip(key, share[-1]):
            tot[c] += f
    work = sum(len(k) for k in keys) or 1
    for _ in range(max(1, min(100, 2_000_000 // work))):  # bounded: the rest is step 3's job
        delta = 0.0
        for g, (key, u) in enumerate(zip(keys, supply)):
            old = share[g]
            for c, f in zip(key, old):
                tot[c] -= f
            new = _water_fill(u, [(tot[c] / size[c], size[c]) for c in key])
            for k, c in enumerate(key):
                tot[c] += new[k]
                delta = max(delta, abs(new[k] - old[k]))
            share[g] = new
        if delta < 0.25:
            break
    out = []
    for u, fs in zip(supply, share):
        ks = [int(f) for f in fs]
        by_remainder = sorted(range(len(fs)), key=lambda k: (ks[k] - fs[k], k))
        rest = u - sum(ks)  # 0 <= rest <= len(fs) up to float error; exact either way
        for j in range(rest):
            ks[by_remainder[j % len(fs)]] += 1
        for j in range(-rest):
            k = max(range(len(ks)), key=lambda k: (ks[k], -k))
            ks[k] -= 1
        out.append(ks)
    return out


def _water_fill(total: int, levels: list[tuple[float, int]]) -> list[float]:
    """Pour `total` over bins given as (level, width), lowest first; what each bin gets."""
    order = sorted(range(len(levels)), key=lambda k: levels[k][0])
    width = 0
    need = float(total)
    mu = levels[order[0]][0]
    for j, k in enumerate(order):
        width += levels[k][1]
        nxt = levels[order[j + 1]][0] if j + 1 < len(order) else float("inf")
        cost = width * (nxt - mu)
        if cost >= need:
            mu += need / width
            break
        need -= cost
        mu = nxt
    return [max(0.0, mu - lv) * w for lv, w in levels]


def _balance(held: _Held, orig, mclass, class_topics, prs, rack_of) -> None:
    """Apply improving chains until none is left (step 3 of the general path).

    Members are visited by load level, lowest first. A search starts at one member of
    the lowest level L and walks backwards (who could hand it a partition, who could
    hand *them* one, ...) looking for a member with load >= L + 2, stopping early at
    the group maximum and otherwise taking the most loaded one it saw. A search that
    finds nothing marks all it saw *dead*: those members, topics and classes cannot
    lead to a useful source for level L or any higher level, and no later chain can
    touch them (a chain only uses topics a live class subscribes to, and every topic a
    dead class subscribes to is dead). Failed searches therefore cost O(group) in
    total; a successful one costs what it explored before finding its source.
    """
    load, hold, holders = held.load, held.hold, held.holders
    m, ntop, nclass = len(load), len(holders), len(class_topics)
    hi, lo = max(load), min(load)
    if hi - lo < 2:
        return
    buckets: list[list[int]] = [[] for _ in range(hi + 1)]  # members by load, stale entries skipped
    count = [0] * (hi + 1)  # live members per load
    for i, n in enumerate(load):
        buckets[n].append(i)
        count[n] += 1
    ptr = [0] * (hi + 1)
    dead, tdead, cdead = bytearray(m), bytearray(ntop), bytearray(nclass)
    vis, tvis, cvis = [0] * m, [0] * ntop, [0] * nclass
    stamp = 0
    level = lo
    while True:
        while hi > level and not count[hi]:
            hi -= 1
        while level < hi and not count[level]:
            level += 1
        if level + 2 > hi:
            return
        b, k = buckets[level], ptr[level]
        while dead[b[k]] or load[b[k]] != level:  # count[level] > 0: a live entry exists
            k += 1
        ptr[level] = k
        stamp += 1
        seed = b[k]
        vis[seed] = stamp
        parent: dict[int, tuple[int, int]] = {}
        queue = [seed]
        seen_t: list[int] = []
        seen_c: list[int] = []
        best = -1
        best_load = level + 1
        for v in queue:  # the list grows while we walk it: breadth-first order
            c = mclass[v]
            if cdead[c] or cvis[c] == stamp:  # same class, same topics: nothing new
                continue
            cvis[c] = stamp
            seen_c.append(c)
            for t in class_topics[c]:
                if tdead[t] or tvis[t] == stamp:
                    continue
                tvis[t] = stamp
                seen_t.append(t)
                for x in holders[t]:
                    if dead[x] or vis[x] == stamp:
                        continue
                    vis[x] = stamp
                    parent[x] = (v, t)
                    if load[x] > best_load:
                        best, best_load = x, load[x]
                        if best_load >= hi:
                            break
                    queue.append(x)
                if best_load >= hi:
                    break
            if best_load >= hi:
                break
        if best < 0:
            for x in queue:
                dead[x] = 1
                count[load[x]] -= 1
            for t in seen_t:
                tdead[t] = 1
            for c in seen_c:
                cdead[c] = 1
            continue
        # Apply the chain best -> ... -> seed: one partition per step.
        x = best
        count[load[x]] -= 1
        count[load[x] - 1] += 1
        buckets[load[x] - 1].append(x)
        while x != seed:
            v, t = parent[x]
            held.move(x, v, t, _pick(hold[x][t], orig[x], t, prs[t], rack_of[x], rack_of[v]))
            x = v
        count[level] -= 1
        count[level + 1] += 1
        buckets[level + 1].append(seed)


def _pick(parts: set[int], orig, t: int, pr, src_rack, dst_rack) -> int:
    """The partition to move: one the source did not hold before this round, then one that
    gains (or does not lose) rack locality, then the lowest number."""
    o = orig.get(t) if orig else None
    best = None
    for p in parts:
        cost = 0
        if pr is not None:
            rs = pr[p]
            cost = (src_rack in rs) - (dst_rack in rs)
        key = (o is not None and p in o, cost, p)
        if best is None or key < best:
            best = key
    return best[2]
