"""Helpers for the coordinator fail-over tests (test_coordinator_failover.py).

What is recorded, all on one clock (time.monotonic) so that events of different threads compare:

  * `Journal`: every rebalance callback of every member of one group, from the member's own
    thread (librdkafka runs them inside poll()). Ownership of a partition is the interval
    from an assign callback to the revoke or lost callback; two intervals of one partition
    that overlap are a partition owned twice. KIP-848 releases a revoked partition (the
    member's revoke callback returns, then its next heartbeat says it no longer owns it)
    before the coordinator gives it to another member, and the classic cooperative protocol
    revokes in one rebalance and assigns in the next, so the intervals must not overlap
    at all, not even by a few milliseconds.
  * `Member`: a librdkafka consumer in a thread of its own, polling, checking that every
    record it gets is of a partition it holds, and committing what it consumed
    synchronously every `commit_interval` seconds (and on revoke, and before it closes).
    Every commit the broker acknowledged goes to the `CommitLog` with the time the call
    returned; a thread per member, so that a commit waiting for a coordinator that is gone
    stalls only its own member.
  * `OffsetSampler`: OffsetFetch of each group, over and over, from a thread of its own,
    with odradek's client (so that each sample says which broker answered it): committed
    offsets must never go back, and a commit acknowledged before a sample was sent must be
    visible in it.
  * `SteadyProducer`: an idempotent acks=all librdkafka producer writing a bounded number of
    keyed records at a steady rate; every acknowledged (partition, offset) -> key.

Every loop here is bounded in time.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from odradek.client.admin import AsyncAdmin, GroupDescription
from odradek.client.cluster import TopicPartition as OTopicPartition
from odradek.client.net import Client
from odradek.client.offsets import fetch_committed_body
from odradek.client.versions import Api
from odradek.coordinator.runtime import partition_for


def names_on_one_partition(prefixes: list[str], partitions: int, tag: str) -> list[str]:
    """One group id per prefix, all mapped to the same `__consumer_offsets` partition (so
    one broker coordinates them all and one fault hits them all)."""
    first = f"{prefixes[0]}-{tag}"
    target = partition_for(first, partitions)
    out = [first]
    for prefix in prefixes[1:]:
        out.append(next(n for i in range(10_000) if partition_for(n := f"{prefix}-{tag}-{i}", partitions) == target))
    return out


class AsyncLoop:
    """An asyncio loop in a thread, for odradek clients used from test threads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="failover-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# --------------------------------------------------------------------------- ownership


class Journal:
    """Rebalance callbacks of one group's members, in the order they ran (thread-safe)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, tuple[int, ...]]] = []  # (t, member, kind, partitions)
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []

    def record(self, member: str, kind: str, parts: list[int]) -> float:
        with self.lock:  # the time is taken under the lock: the list is in time order
            t = time.monotonic()
            self.events.append((t, member, kind, tuple(sorted(parts))))
            for p in parts:
                holder = self.owner.get(p)
                if kind == "assign":
                    if holder is not None and holder != member:
                        self.violations.append(f"{t:.3f}: {member} assigned partition {p} still held by {holder}")
                    self.owner[p] = member
                elif holder != member:
                    self.violations.append(f"{t:.3f}: {member} {kind} partition {p} held by {holder}")
                else:
                    del self.owner[p]
            return t

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    def holder(self, p: int) -> str | None:
        with self.lock:
            return self.owner.get(p)

    def snapshot(self) -> dict[int, str]:
        with self.lock:
            return dict(self.owner)

    def intervals(self) -> list[tuple[int, str, float, float]]:
        """(partition, member, from, to): from an assign callback to its revoke/lost callback."""
        with self.lock:
            events = list(self.events)
        opened: dict[tuple[str, int], float] = {}
        out = []
        for t, member, kind, parts in events:
            for p in parts:
                if kind == "assign":
                    opened.setdefault((member, p), t)
                elif (member, p) in opened:
                    out.append((p, member, opened.pop((member, p)), t))
        out += [(p, member, start, math.inf) for (member, p), start in opened.items()]
        return out

    def overlaps(self) -> list[str]:
        by_p = defaultdict(list)
        for p, member, start, end in self.intervals():
            by_p[p].append((start, end, member))
        bad = []
        for p, spans in sorted(by_p.items()):
            spans.sort()
            for (s1, e1, m1), (s2, e2, m2) in itertools.pairwise(spans):
                if s2 < e1:
                    bad.append(f"{self.group}: partition {p} held by {m1} {s1:.3f}-{e1:.3f} and by {m2} from {s2:.3f}")
        return bad

    def interval_start(self, member: str, p: int, t: float) -> float | None:
        """When `member`'s ownership of `p` that covers time `t` began."""
        for q, m, start, end in self.intervals():
            if q == p and m == member and start <= t <= end:
                return start
        return None

    def callbacks_between(self, t0: float, t1: float) -> list[tuple[float, str, str, tuple[int, ...]]]:
        with self.lock:
            return [e for e in self.events if t0 <= e[0] < t1]


# --------------------------------------------------------------------------- commits


@dataclass(frozen=True)
class Ack:
    t_sent: float
    t_acked: float
    group: str
    member: str
    partition: int
    offset: int


class CommitLog:
    """Every commit the broker acknowledged, and every commit that failed (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acks: list[Ack] = []
        self.failures: list[tuple[float, str, str, str]] = []  # (t, group, member, error)

    def acked(self, ack: Ack) -> None:
        with self.lock:
            self.acks.append(ack)

    def failed(self, t: float, group: str, member: str, error: str) -> None:
        with self.lock:
            self.failures.append((t, group, member, error))

    def of(self, group: str) -> list[Ack]:
        with self.lock:
            return [a for a in self.acks if a.group == group]

    def highest(self, group: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for a in self.of(group):
            out[a.partition] = max(out.get(a.partition, -1), a.offset)
        return out


# --------------------------------------------------------------------------- members


class Member(threading.Thread):
    """One librdkafka group member in a thread of its own (see the module docstring)."""

    def __init__(self, name: str, conf: dict, topic: str, journal: Journal, commits: CommitLog,
                 commit_interval: float = 0.5, max_s: float = 240.0) -> None:
        super().__init__(name=name, daemon=True)
        self.conf = dict(conf)
        self.topic = topic
        self.journal = journal
        self.group = journal.group
        self.commits = commits
        self.commit_interval = commit_interval
        self.hard_deadline = time.monotonic() + max_s
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.records: list[tuple[float, int, int, bytes | None]] = []  # (t, partition, offset, key)
        self.owned: set[int] = set()
        self.position: dict[int, int] = {}  # partition -> next offset (after the last record consumed)
        self.committed: dict[int, int] = {}  # partition -> last offset the broker acknowledged
        self.errors: list[tuple[float, str]] = []
        self.member_id: str | None = None
        self.crash: BaseException | None = None
        self.closed_at: float | None = None
        self.consumer: Consumer | None = None

    # callbacks run inside poll()/close() on this thread

    def _on_assign(self, c, parts) -> None:
        ps = [tp.partition for tp in parts]
        self.member_id = c.memberid()
        self.journal.record(self.name, "assign", ps)
        with self.lock:
            for p in ps:  # a partition held before and given back: start from what the group committed
                self.position.pop(p, None)
                self.committed.pop(p, None)
            self.owned.update(ps)

    def _on_revoke(self, c, parts) -> None:
        ps = [tp.partition for tp in parts]
        self._commit(ps)  # before the revocation is acknowledged (the callback returns first)
        self.journal.record(self.name, "revoke", ps)
        with self.lock:
            self.owned.difference_update(ps)

    def _on_lost(self, c, parts) -> None:
        ps = [tp.partition for tp in parts]
        self.journal.record(self.name, "lost", ps)
        with self.lock:
            self.owned.difference_update(ps)

    def _on_error(self, err) -> None:
        with self.lock:
            if len(self.errors) < 200:
                self.errors.append((time.monotonic(), str(err)))

    def _commit(self, parts) -> None:
        with self.lock:
            offsets = [TopicPartition(self.topic, p, self.position[p]) for p in sorted(parts)
                       if self.position.get(p, -1) > self.committed.get(p, -1)]
        if not offsets or self.consumer is None:
            return
        t0 = time.monotonic()
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.commits.failed(time.monotonic(), self.group, self.name, str(exc.args[0]))
            return
        t1 = time.monotonic()
        for tp in result:
            if tp.error is None:
                self.commits.acked(Ack(t0, t1, self.group, self.name, tp.partition, tp.offset))
                with self.lock:
                    self.committed[tp.partition] = max(self.committed.get(tp.partition, -1), tp.offset)
            else:
                self.commits.failed(t1, self.group, self.name, f"partition {tp.partition}: {tp.error}")

    def run(self) -> None:
        try:
            self.consumer = Consumer({**self.conf, "error_cb": self._on_error, "client.id": self.name})
            self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                    on_lost=self._on_lost)
            next_commit = time.monotonic() + self.commit_interval
            while not self.stop_event.is_set() and time.monotonic() < self.hard_deadline:
                m = self.consumer.poll(0.1)
                if m is not None:
                    if m.error() is not None:
                        self._on_error(m.error())
                    else:
                        t, p = time.monotonic(), m.partition()
                        with self.lock:
                            held = p in self.owned
                            self.records.append((t, p, m.offset(), m.key()))
                            self.position[p] = m.offset() + 1
                        if not held:
                            self.journal.violation(f"{t:.3f}: {self.name} consumed partition {p} offset "
                                                   f"{m.offset()} without holding it")
                if time.monotonic() >= next_commit:
                    with self.lock:
                        owned = set(self.owned)
                    self._commit(owned)
                    next_commit = time.monotonic() + self.commit_interval
            with self.lock:
                owned = set(self.owned)
            self._commit(owned)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.crash = exc
        finally:
            if self.consumer is not None:
                try:
                    self.consumer.close()  # revoke callbacks (which commit), then leave
                except Exception as exc:  # noqa: BLE001
                    self._on_error(f"close: {exc}")
            self.closed_at = time.monotonic()

    def consumed(self) -> list[tuple[float, int, int, bytes | None]]:
        with self.lock:
            return list(self.records)

    def owned_now(self) -> set[int]:
        with self.lock:
            return set(self.owned)


def stop_members(members: list[Member], timeout: float = 60.0) -> list[str]:
    """Stop every member (they commit and close concurrently); names of those that did not end."""
    for m in members:
        m.stop_event.set()
    deadline = time.monotonic() + timeout
    for m in members:
        m.join(max(0.1, deadline - time.monotonic()))
    return [m.name for m in members if m.is_alive()]


# --------------------------------------------------------------------------- committed offsets


@dataclass(frozen=True)
class Sample:
    t_sent: float
    t_received: float
    group: str
    node: int
    offsets: dict[int, int]  # partition -> committed offset (-1: none)


class OffsetSampler:
    """OffsetFetch of every group in turn, every `interval` seconds, until stopped."""

    def __init__(self, loop: AsyncLoop, bootstrap: str, groups: list[str], topic: str, partitions: int,
                 interval: float = 0.25, request_timeout: float = 3.0) -> None:
        self.loop, self.bootstrap, self.groups = loop, bootstrap, groups
        self.topic, self.partitions = topic, partitions
        self.interval, self.request_timeout = interval, request_timeout
        self.samples: list[Sample] = []
        self.errors: list[tuple[float, str, str]] = []
        self._stop = asyncio.Event()
        self._future = None

    async def _run(self, max_s: float) -> None:
        client = Client(self.bootstrap, client_id="failover-sampler", request_timeout_ms=int(self.request_timeout * 1000),
                        retries=0, connect_timeout_ms=2000)
        tps = [OTopicPartition(self.topic, p) for p in range(self.partitions)]
        deadline = time.monotonic() + max_s
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                for group in self.groups:
                    t0 = time.monotonic()
                    try:
                        node = await asyncio.wait_for(client.coordinator(group), self.request_timeout)
                        resp = await client.send(node, Api.OFFSET_FETCH, fetch_committed_body(group, tps),
                                                 timeout=self.request_timeout)
                        top = getattr(resp, "error_code", 0)
                        if top != 0:
                            raise RuntimeError(f"OffsetFetch error {int(top)} from node {node[1]}")
                        offsets = {p: -1 for p in range(self.partitions)}
                        for t in resp.topics:
                            for p in t.partitions:
                                if int(p.error_code) != 0:
                                    raise RuntimeError(f"OffsetFetch partition {p.partition_index} error "
                                                       f"{int(p.error_code)} from node {node[1]}")
                                offsets[int(p.partition_index)] = int(p.committed_offset)
                        self.samples.append(Sample(t0, time.monotonic(), group, node[1], offsets))
                    except Exception as exc:  # noqa: BLE001 - a fail-over in progress; recorded
                        client.forget_coordinator(group)
                        if len(self.errors) < 500:
                            self.errors.append((t0, group, f"{type(exc).__name__}: {exc}"))
                try:
                    await asyncio.wait_for(self._stop.wait(), self.interval)
                except TimeoutError:
                    pass
        finally:
            await client.close()

    def start(self, max_s: float = 300.0) -> OffsetSampler:
        self._future = self.loop.submit(self._run(max_s))
        return self

    def stop(self) -> None:
        self.loop.loop.call_soon_threadsafe(self._stop.set)
        if self._future is not None:
            self._future.result(30)

    def latest(self, group: str) -> Sample | None:
        return next((s for s in reversed(self.samples) if s.group == group), None)

    def problems(self, group: str, acks: list[Ack]) -> list[str]:
        """Committed offsets going back between two samples taken one after the other, and
        acknowledged commits missing from a sample sent after the acknowledgement."""
        samples = sorted((s for s in self.samples if s.group == group), key=lambda s: s.t_sent)
        out: list[str] = []
        best: dict[int, tuple[int, Sample]] = {}
        for s in samples:
            for p, off in s.offsets.items():
                prev = best.get(p)
                if prev is not None and off < prev[0] and s.t_sent >= prev[1].t_received:
                    out.append(f"{group}: partition {p}: committed offset went back from {prev[0]} (read "
                               f"{prev[1].t_received:.3f} from node {prev[1].node}) to {off} (read "
                               f"{s.t_received:.3f} from node {s.node})")
                if prev is None or off > prev[0]:
                    best[p] = (off, s)
        by_p: dict[int, list[Ack]] = defaultdict(list)
        for a in acks:
            by_p[a.partition].append(a)
        for p, ps in by_p.items():
            ps.sort(key=lambda a: a.t_acked)
            for s in samples:
                done = [a for a in ps if a.t_acked <= s.t_sent]
                if done:
                    top = max(done, key=lambda a: a.offset)
                    if s.offsets.get(p, -1) < top.offset:
                        out.append(f"{group}: partition {p}: commit of offset {top.offset} acknowledged to "
                                   f"{top.member} at {top.t_acked:.3f}, but a read sent at {s.t_sent:.3f} "
                                   f"(node {s.node}) shows {s.offsets.get(p, -1)}")
        return out[:40]


# --------------------------------------------------------------------------- producer


class SteadyProducer(threading.Thread):
    """`count` keyed records, partition i mod `partitions`, at `rate` records/s; acks=all, idempotent."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, count: int, rate: float, tag: str,
                 max_s: float = 120.0) -> None:
        super().__init__(name=f"producer-{tag}", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.count, self.rate, self.tag, self.max_s = count, rate, tag, max_s
        self.lock = threading.Lock()
        self.acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> key
        self.failures: list[str] = []
        self.unflushed: int | None = None
        self.crash: BaseException | None = None

    def _report(self, err, msg) -> None:
        with self.lock:
            if err is not None:
                self.failures.append(str(err))
            else:
                self.acked[(msg.partition(), msg.offset())] = msg.key()

    def run(self) -> None:
        try:
            prod = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000, "request.timeout.ms": 5000})
            deadline = time.monotonic() + self.max_s
            start = time.monotonic()
            for i in range(self.count):
                due = start + i / self.rate
                while time.monotonic() < due:
                    prod.poll(min(0.01, max(0.0, due - time.monotonic())))
                if time.monotonic() > deadline:
                    break
                prod.produce(self.topic, key=b"%s-%06d" % (self.tag.encode(), i), value=b"v" * 50,
                             partition=i % self.partitions, on_delivery=self._report)
                prod.poll(0)
            self.unflushed = prod.flush(max(1.0, deadline - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.crash = exc

    def snapshot(self) -> dict[tuple[int, int], bytes]:
        with self.lock:
            return dict(self.acked)


# --------------------------------------------------------------------------- describing groups


async def describe_group(bootstrap: str, group: str) -> GroupDescription:
    """ConsumerGroupDescribe (KIP-848 group: member epochs, assignments) or DescribeGroups
    (classic), at the group's coordinator as FindCoordinator names it now."""
    async with AsyncAdmin(bootstrap, client_id="failover-describe", request_timeout_ms=5000) as admin:
        return (await admin.describe_groups([group]))[group]


def group_view(desc: GroupDescription) -> dict:
    """What must not change across a fail-over: the group's epochs and, per member, its epoch
    and its assignment (current and target)."""
    return {
        "type": desc.type,
        "state": desc.state,
        "group_epoch": desc.epoch,
        "assignment_epoch": desc.assignment_epoch,
        "members": {m.member_id: {"epoch": m.epoch, "assignment": sorted((tp.topic, tp.partition) for tp in m.assignment),
                                  "target": None if m.target is None else sorted((tp.topic, tp.partition)
                                                                                  for tp in m.target)}
                    for m in desc.members},
    }
