#!/usr/bin/env python3
"""Server-side assignor benchmark: how long one full target assignment takes.

This is a benchmark script, not a test. For members in 100 / 1,000 / 10,000 with 10
partitions per member (1k / 10k / 100k partitions) spread over 10 / 100 / 1,000 topics
of 100 partitions each, it times ``assign(spec)`` for each assignor, for

* subscription kind ``homogeneous``: every member subscribes to every topic;
* subscription kind ``heterogeneous``: the topics are split into three buckets, member
  i subscribes to bucket i % 3, and every even member also to bucket (i + 1) % 3;

and two scenarios:

* ``scratch``: nobody has a current assignment;
* ``join``: the group is balanced (its current assignment is the assignor's own
  result from scratch) and one more member has just joined.

Members that subscribe to the same topics share one frozenset, as the coordinator
builds them. Building the spec is not timed. Each case runs a bounded number of times
(at most ``--repeat`` and at most ``--budget`` seconds) and the table shows the median.
The reference point is Apache Kafka's JVM uniform assignor: about 4.3 ms for 10,000
members / 100,000 partitions, homogeneous, from scratch.

Run:  .venv/bin/python bench/assignors.py [--repeat 7] [--budget 4] [--sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from odradek.coordinator.assignors import (
    ASSIGNORS,
    AssignmentSpec,
    MemberSpec,
    TopicSpec,
)

PARTITIONS_PER_MEMBER = 10
PARTITIONS_PER_TOPIC = 100
KAFKA_MS = 4.3  # Kafka's uniform assignor, 10k members / 100k partitions, homogeneous


def make_topics(n_topics: int) -> dict[UUID, TopicSpec]:
    out = {}
    for k in range(n_topics):
        tid = UUID(int=(k + 1) * 0x9E3779B97F4A7C15 % (1 << 128))  # spread over the id space
        out[tid] = TopicSpec(tid, f"topic-{k}", PARTITIONS_PER_TOPIC)
    return out


def subscriptions(n_members: int, topics: dict[UUID, TopicSpec], kind: str) -> list[frozenset[UUID]]:
    ids = list(topics)
    if kind == "homogeneous":
        everything = frozenset(ids)
        return [everything] * (n_members + 1)
    buckets = [frozenset(ids[b::3]) for b in range(3)]
    shared: dict[tuple[int, ...], frozenset[UUID]] = {}
    out = []
    for i in range(n_members + 1):  # one spare for the member that joins
        key = (i % 3,) if i % 2 else (i % 3, (i + 1) % 3)
        if key not in shared:
            shared[key] = frozenset().union(*(buckets[b] for b in key))
        out.append(shared[key])
    return out


def member_id(i: int) -> str:
    return f"member-{i:05d}"


def make_spec(n_members: int, topics, subs, current=None, joined=False) -> AssignmentSpec:
    current = current or {}
    members = {}
    for i in range(n_members + (1 if joined else 0)):
        mid = member_id(i)
        members[mid] = MemberSpec(mid, None, None, subs[i], current.get(mid, {}))
    return AssignmentSpec(members, topics)


def check(spec: AssignmentSpec, result) -> None:
    """Outside the timing: every subscribed partition assigned once."""
    owned = sum(len(ps) for a in result.values() for ps in a.values())
    subscribed = frozenset().union(*(m.subscribed_topic_ids for m in spec.members.values()))
    expect = sum(spec.topics[t].partitions for t in subscribed)
    if owned != expect:
        raise SystemExit(f"bad assignment: {owned} partitions assigned, {expect} expected")


def time_case(fn, spec, repeat: int, budget: float) -> tuple[float, int]:
    times = []
    deadline = time.perf_counter() + budget
    gc.collect()
    gc.disable()  # collections triggered by earlier cases' garbage would land in random runs
    try:
        while len(times) < repeat and (not times or time.perf_counter() < deadline):
            t0 = time.perf_counter()
            fn(spec)
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return statistics.median(times) * 1000, len(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=9, help="max runs per case (median shown)")
    ap.add_argument("--budget", type=float, default=4.0, help="max seconds per case (at least one run)")
    ap.add_argument("--sizes", default="100,1000,10000", help="member counts")
    ap.add_argument("--assignors", default="uniform,range")
    args = ap.parse_args()

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; median of up to {args.repeat} runs")
    header = ("assignor", "members", "topics", "partitions", "subscriptions", "scenario", "median ms", "runs", "moved")
    rows = []
    headline = None
    for n_members in (int(s) for s in args.sizes.split(",")):
        n_topics = n_members * PARTITIONS_PER_MEMBER // PARTITIONS_PER_TOPIC
        topics = make_topics(n_topics)
        for kind in ("homogeneous", "heterogeneous"):
            subs = subscriptions(n_members, topics, kind)
            for name in args.assignors.split(","):
                fn = ASSIGNORS[name].assign
                scratch = make_spec(n_members, topics, subs)
                base = fn(scratch)
                check(scratch, base)
                joined = make_spec(n_members, topics, subs, current=base, joined=True)
                after = fn(joined)
                check(joined, after)
                moved = sum(
                    len(ps - after[mid].get(t, frozenset())) for mid, a in base.items() for t, ps in a.items()
                )
                for scenario, spec, mv in (("scratch", scratch, "-"), ("join", joined, str(moved))):
                    ms, runs = time_case(fn, spec, args.repeat, args.budget)
                    row = (name, str(len(spec.members)), str(n_topics), str(n_topics * PARTITIONS_PER_TOPIC),
                           kind, scenario, f"{ms:.1f}", str(runs), mv)
                    rows.append(row)
                    print("  ".join(row), file=sys.stderr, flush=True)
                    if (name, n_members, kind, scenario) == ("uniform", 10000, "homogeneous", "scratch"):
                        headline = ms

    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        print("| " + " | ".join(c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(r, widths)) + " |")
    if headline is not None:
        print(f"\nuniform, 10,000 members / 100,000 partitions, homogeneous, scratch: {headline:.1f} ms "
              f"= {headline / KAFKA_MS:.1f}x Kafka's {KAFKA_MS} ms (goal: <= 10x, {10 * KAFKA_MS:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
