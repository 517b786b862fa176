"""odradek's own group consumer (KIP-848 `group_protocol="consumer"`) against a real broker.

Every test starts an `odradek broker` process of its own on loopback with short group
timeouts (heartbeat interval 100 ms, session timeout of a few seconds), so rebalances
take a fraction of a second. The consumers of a test run in one asyncio loop, each
polling from a task of its own, and every rebalance callback of every consumer goes to
one `Journal` in the order the callbacks ran (one loop, so the order is the real one):
ownership of a partition is the interval from its on_partitions_assigned to its
on_partitions_revoked/lost. Outcomes are asserted from the journal, from the records
the application got, from committed offsets and from the coordinator's own view
(ConsumerGroupDescribe); the few tests that need a misbehaving consumer (no heartbeats,
a lagging epoch) arrange it by patching the instance in the test, never the source.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import time
from collections import Counter, defaultdict
from typing import NamedTuple

import pytest

from odradek.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    KafkaError,
    NewTopic,
    RebalanceListener,
    TopicPartition,
)
from odradek.client import offsets as O

pytestmark = pytest.mark.interop

HEARTBEAT_MS = 100
SESSION_MS = 3000
WAIT = 20.0  # seconds: the bound of any single wait for the group to get somewhere


def group_opts(session_ms: int = SESSION_MS, heartbeat_ms: int = HEARTBEAT_MS) -> list[str]:
    return [
        "-o", f"group.consumer.heartbeat.interval.ms={heartbeat_ms}",
        "-o", "group.consumer.min.heartbeat.interval.ms=50",
        "-o", f"group.consumer.session.timeout.ms={session_ms}",
        "-o", "group.consumer.min.session.timeout.ms=1000",
    ]


@pytest.fixture
def start_broker(broker_factory):
    """Starts a broker with fast group timeouts; its log must show no error afterwards."""
    started = []

    def make(session_ms: int = SESSION_MS):
        b = broker_factory("data", extra=group_opts(session_ms))
        started.append(b)
        return b

    yield make
    for b in started:
        log = b.log_path.read_text()
        assert "Traceback" not in log and " ERROR " not in log, f"broker logged errors:\n{log[-3000:]}"


def make_consumer(bootstrap: str, group: str, **kw) -> AsyncConsumer:
    conf = {"group_id": group, "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100,
            "auto_commit_interval_ms": 200, "request_timeout_ms": 10000}
    conf.update(kw)
    return AsyncConsumer(bootstrap, **conf)


def tps(topic: str, partitions) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


def short(parts) -> list[int]:
    return sorted(tp.partition for tp in parts)


async def wait_until(cond, timeout: float, what, *, step: float = 0.02) -> float:
    """Awaits cond() (plain or async) until it holds; returns the time it held. Bounded."""
    deadline = time.monotonic() + timeout
    while True:
        ok = cond()
        if inspect.isawaitable(ok):
            ok = await ok
        if ok:
            return time.monotonic()
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {detail}")
        await asyncio.sleep(step)


# --------------------------------------------------------------------------- the journal


class Event(NamedTuple):
    seq: int
    at: float
    who: str
    kind: str  # "assigned" | "revoked" | "lost"
    parts: frozenset[TopicPartition]


class Journal:
    """Every rebalance callback of every consumer of a test, with one global sequence.

    After each event it checks that (a) a partition is only assigned once no other
    consumer holds it (its previous owner's revoke/lost came first), (b) no two
    consumers hold a partition at the same time, and that nobody revokes or loses what
    it does not hold. Consumers in `zombies` are known to have a stale view (their
    session expired and they have not found out yet): they are left out of (a) and (b)
    until their on_partitions_lost."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.owned: dict[str, set[TopicPartition]] = defaultdict(set)
        self.violations: list[str] = []
        self.zombies: set[str] = set()
        self._seq = itertools.count()

    @property
    def seq(self) -> int:
        return len(self.events)

    def record(self, who: str, kind: str, parts) -> None:
        parts = frozenset(TopicPartition(*tp) for tp in parts)
        ev = Event(next(self._seq), time.monotonic(), who, kind, parts)
        self.events.append(ev)
        mine = self.owned[who]
        if kind == "assigned":
            for tp in sorted(parts):
                if tp in mine:
                    self.violations.append(f"#{ev.seq}: {who} assigned {tp} it already holds")
                holders = [o for o, s in self.owned.items() if o != who and tp in s and o not in self.zombies]
                if holders and who not in self.zombies:
                    self.violations.append(f"#{ev.seq}: {who} assigned {tp} still held by {holders}")
            mine |= parts
        else:
            if parts - mine:
                self.violations.append(f"#{ev.seq}: {who} {kind} {short(parts - mine)} it does not hold")
            mine -= parts
            if kind == "lost":
                self.zombies.discard(who)
        seen: dict[TopicPartition, str] = {}
        for o, s in self.owned.items():
            if o in self.zombies:
                continue
            for tp in s:
                if tp in seen:
                    self.violations.append(f"after #{ev.seq}: {tp} held by both {seen[tp]} and {o}")
                seen[tp] = o

    def since(self, seq: int, who: str | None = None) -> list[Event]:
        return [e for e in self.events[seq:] if who is None or e.who == who]

    def handoff_errors(self) -> list[str]:
        """(a) again, from the whole history: per partition, events alternate assigned(X),
        released(X), assigned(Y), ... where released is X's own revoke or lost."""
        holder: dict[TopicPartition, str | None] = {}
        bad = []
        for e in self.events:
            if e.who in self.zombies:
                continue
            for tp in e.parts:
                if e.kind == "assigned":
                    if holder.get(tp) is not None:
                        bad.append(f"#{e.seq}: {tp} assigned to {e.who} before {holder[tp]} released it")
                    holder[tp] = e.who
                else:
                    if holder.get(tp) != e.who:
                        bad.append(f"#{e.seq}: {tp} {e.kind} by {e.who}, held by {holder.get(tp)}")
                    holder[tp] = None
        return bad

    def describe(self) -> str:
        return ", ".join(f"{o}:{short(s)}" for o, s in sorted(self.owned.items()) if s)


class Recorder(RebalanceListener):
    """Journals callbacks; optionally commits, in on_partitions_revoked, the offset after
    the last record it consumed of each revoked partition (before the revocation is
    acknowledged, as a careful application does)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, partitions) -> None:
        r = self.runner
        if r.commit_on_revoke:
            offsets = {tp: r.next_offset[tp] for tp in partitions if tp in r.next_offset}
            if offsets:
                await r.consumer.commit(offsets)
        r.journal.record(r.who, "revoked", partitions)

    def on_partitions_assigned(self, partitions) -> None:
        self.runner.journal.record(self.runner.who, "assigned", partitions)

    def on_partitions_lost(self, partitions) -> None:
        self.runner.journal.record(self.runner.who, "lost", partitions)


class Runner:
    """One AsyncConsumer in a group, polling from a task of its own."""

    def __init__(self, who: str, consumer: AsyncConsumer, journal: Journal, *,
                 commit_on_revoke: bool = False) -> None:
        self.who = who
        self.consumer = consumer
        self.journal = journal
        self.commit_on_revoke = commit_on_revoke
        self.records: list[tuple[TopicPartition, int, bytes | None]] = []
        self.next_offset: dict[TopicPartition, int] = {}
        self.errors: list[KafkaError] = []
        self.task: asyncio.Task | None = None
        self._stop = False
        self.closed = False

    async def start(self, topics) -> Runner:
        await self.consumer.start()
        self.consumer.subscribe(topics, listener=Recorder(self))
        self.task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def _loop(self) -> None:
        while not self._stop:
            try:
                records = await self.consumer.poll(50)
            except KafkaError as exc:
                self.errors.append(exc)
                if not exc.retriable:
                    return
                await asyncio.sleep(0.05)
                continue
            held = self.journal.owned[self.who]
            for r in records:
                tp = TopicPartition(r.topic, r.partition)
                if tp not in held and self.who not in self.journal.zombies:
                    self.journal.violations.append(f"{self.who} consumed {tp}@{r.offset} without holding it")
                self.records.append((tp, r.offset, r.key))
                self.next_offset[tp] = r.offset + 1

    @property
    def member_id(self) -> str:
        return self.consumer.member.member_id

    @property
    def owned(self) -> set[TopicPartition]:
        return self.journal.owned[self.who]

    async def stop_polling(self) -> None:
        self._stop = True
        if self.task is not None:
            await asyncio.wait_for(self.task, 10)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.stop_polling()
            await asyncio.wait_for(self.consumer.close(), 15)


async def close_all(*things) -> None:
    for t in things:
        if t is None:
            continue
        with contextlib.suppress(Exception):
            await t.close()


# --------------------------------------------------------------------- coordinator's view


async def describe(admin: AsyncAdmin, group: str):
    return (await admin.describe_groups([group]))[group]


def described(desc) -> dict[str, set[TopicPartition]]:
    return {m.member_id: set(m.assignment) for m in desc.members}


def overlap(assignments: dict[str, set[TopicPartition]]) -> list[str]:
    seen: dict[TopicPartition, str] = {}
    bad = []
    for mid, parts in assignments.items():
        for tp in parts:
            if tp in seen:
                bad.append(f"{tp} assigned to {seen[tp][:8]} and {mid[:8]}")
            seen[tp] = mid
    return bad


def balanced(runners, everything) -> bool:
    """Each runner holds floor or ceil of the partitions, disjointly, together all of them."""
    n = len(runners)
    lo, hi = len(everything) // n, -(-len(everything) // n)
    seen: set = set()
    for r in runners:
        if not lo <= len(r.owned) <= hi or seen & r.owned:
            return False
        seen |= r.owned
    return seen == set(everything)


async def broker_agrees(admin: AsyncAdmin, group: str, runners) -> bool:
    """Stable, with exactly these members holding exactly what their callbacks say."""
    desc = await describe(admin, group)
    if desc.state != "Stable" or len(desc.members) != len(runners):
        return False
    held = described(desc)
    return all(held.get(r.member_id) == r.owned for r in runners)


async def settle(admin: AsyncAdmin, group: str, runners, everything, journal: Journal, what: str,
                 timeout: float = WAIT) -> float:
    async def done():
        assert not journal.violations, journal.violations[:10]  # fail at once, not at the timeout
        return balanced(runners, everything) and await broker_agrees(admin, group, runners)

    return await wait_until(done, timeout, lambda: f"{what}: balanced and stable; owned {journal.describe()}",
                            step=0.05)


@contextlib.contextmanager
def heartbeats_stopped(consumer: AsyncConsumer):
    """The consumer's member sends nothing (its group loop naps) until the block exits."""
    m = consumer.member
    m.next_request = lambda now: None
    m.next_deadline = lambda: time.monotonic() * 1000 + 50
    try:
        yield
    finally:
        del m.next_request
        del m.next_deadline


def spy_heartbeats(consumer: AsyncConsumer) -> list[int]:
    """The member epoch of every ConsumerGroupHeartbeat the consumer sends from now on."""
    m = consumer.member
    sent: list[int] = []
    build = m.build_heartbeat

    def spy(now):
        body = build(now)
        sent.append(body["member_epoch"])
        return body

    m.build_heartbeat = spy
    return sent


async def setup(bootstrap: str, topic: str, partitions: int, *more: tuple[str, int]) -> AsyncAdmin:
    admin = await AsyncAdmin(bootstrap).start()
    await admin.create_topics([NewTopic(topic, partitions), *(NewTopic(t, n) for t, n in more)])
    return admin


async def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict:
    """`per_partition` keyed records on each partition; {(partition, offset): key}."""
    producer = await AsyncProducer(bootstrap, linger_ms=2).start()
    try:
        sent = []
        for i in range(per_partition):
            for p in range(partitions):
                key = f"k-{p}-{i}".encode()
                sent.append((key, await producer.send(topic, b"v", key=key, partition=p)))
        await producer.flush(10)
        return {(f.result().partition, f.result().offset): key for key, f in sent}
    finally:
        await producer.close()


# ----------------------------------------------- 1. rebalance 1 -> 8 -> 1 under a producer


N_PARTITIONS = 16
N_CONSUMERS = 8


def test_rebalance_one_to_eight_to_one_while_producing(start_broker, topic_name):
    b = start_broker()
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(N_PARTITIONS))

    async def main():
        admin = await setup(b.bootstrap, topic_name, N_PARTITIONS)
        journal = Journal()
        producer = await AsyncProducer(b.bootstrap, linger_ms=2).start()
        delivered: dict[tuple[int, int], bytes] = {}
        stop_producing = asyncio.Event()

        async def produce_forever():
            for i in range(20000):  # ~200 records/s; bounded in count and by the test
                if stop_producing.is_set():
                    break
                key = b"r%05d" % i
                fut = await producer.send(topic_name, b"x", key=key)
                fut.add_done_callback(lambda f, key=key: f.exception() is None and delivered.__setitem__(
                    (f.result().partition, f.result().offset), key))
                await asyncio.sleep(0.005)

        producing = asyncio.get_running_loop().create_task(produce_forever())
        runners: list[Runner] = []
        everyone: list[Runner] = []
        try:
            for i in range(N_CONSUMERS):
                r = Runner(f"c{i}", make_consumer(b.bootstrap, group), journal, commit_on_revoke=True)
                await r.start([topic_name])
                runners.append(r)
                everyone.append(r)
                await settle(admin, group, runners, everything, journal, f"{len(runners)} consumers")
            assert all(len(r.owned) == 2 for r in runners)
            while len(runners) > 1:
                r = runners.pop()
                seq, held = journal.seq, frozenset(r.owned)
                await r.close()  # revokes everything (listener commits), then leaves with epoch -1
                assert [(e.kind, e.parts) for e in journal.since(seq, r.who)] == [("revoked", held)]
                await settle(admin, group, runners, everything, journal, f"{len(runners)} consumers")
            last = runners[0]
            # (c) the last consumer owns all 16, in its callbacks, its assignment and the coordinator's view
            assert last.owned == set(everything)
            assert last.consumer.assignment() == set(everything)
            assert described(await describe(admin, group)) == {last.member_id: set(everything)}

            stop_producing.set()
            await asyncio.wait_for(producing, 10)
            await producer.flush(10)
            assert len(delivered) > 200, "the producer hardly produced"

            def consumed():
                return {(tp.partition, off) for r in everyone for tp, off, _ in r.records}

            await wait_until(lambda: consumed() >= set(delivered), WAIT,
                             lambda: f"every record consumed; missing {len(set(delivered) - consumed())}")
            await last.stop_polling()
        finally:
            stop_producing.set()
            await close_all(*reversed(everyone), producer, admin)

        # (a), (b): hand-offs only after the previous owner let go; never two owners at once
        assert not journal.violations, journal.violations[:10]
        assert not journal.handoff_errors(), journal.handoff_errors()[:10]
        assert [e.kind for e in journal.events].count("lost") == 0
        # every rebalance moved partitions: 7 joins and 7 leaves, all incremental
        assert {e.who for e in journal.events if e.kind == "assigned"} == {r.who for r in everyone}
        # (d) nothing lost: every produced record was consumed by someone, with its key
        seen = Counter((tp.partition, off) for r in everyone for tp, off, _ in r.records)
        keys = {(tp.partition, off): key for r in everyone for tp, off, key in r.records}
        assert all(keys[where] == key for where, key in delivered.items())
        duplicates = {where: n for where, n in seen.items() if n > 1}
        print(f"\n{len(delivered)} records produced, {sum(seen.values())} consumed, "
              f"{len(duplicates)} consumed more than once: {sorted(duplicates)[:20]}")
        print(f"{len(journal.events)} rebalance callbacks")
        assert not any(r.errors for r in everyone), {r.who: r.errors for r in everyone if r.errors}

    asyncio.run(main())


# ----------------------------------------------------------- 2. static member restart


def test_static_member_restart_keeps_partitions_without_rebalance(start_broker, topic_name):
    b = start_broker(session_ms=3000)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(6))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 6)
        journal = Journal()
        a = Runner("a", make_consumer(b.bootstrap, group, group_instance_id="static-a"), journal)
        b1 = Runner("b1", make_consumer(b.bootstrap, group, group_instance_id="static-b"), journal)
        b2 = None
        try:
            await a.start([topic_name])
            await b1.start([topic_name])
            await settle(admin, group, [a, b1], everything, journal, "two static members")
            held_a, held_b = set(a.owned), set(b1.owned)
            old_member_id = b1.member_id
            desc = await describe(admin, group)
            assert {m.instance_id for m in desc.members} == {"static-a", "static-b"}
            epoch_before = desc.epoch

            seq = journal.seq
            await b1.close()  # static leave: epoch -2
            closed_at = time.monotonic()
            assert [(e.kind, e.parts) for e in journal.since(seq, "b1")] == [("revoked", frozenset(held_b))]
            desc = await describe(admin, group)
            # the coordinator keeps the static member (and its assignment) for the session timeout
            assert old_member_id in {m.member_id for m in desc.members}
            assert described(desc)[old_member_id] == held_b
            assert desc.epoch == epoch_before, "a static leave must not bump the group epoch"

            b2 = Runner("b2", make_consumer(b.bootstrap, group, group_instance_id="static-b"), journal)
            await b2.start([topic_name])
            got = await wait_until(lambda: b2.owned == held_b, SESSION_MS / 1000,
                                   lambda: f"the restarted member to get {short(held_b)}; {journal.describe()}; "
                                           f"its errors: {b2.errors}")
            assert got - closed_at < SESSION_MS / 1000
            # ... and nothing moves past the old incarnation's session timeout either
            await asyncio.sleep(max(0.0, closed_at + SESSION_MS / 1000 + 0.5 - time.monotonic()))
            assert a.owned == held_a and b2.owned == held_b
            assert journal.since(seq, "a") == [], f"the other member saw callbacks: {journal.since(seq, 'a')}"
            assert [(e.kind, e.parts) for e in journal.since(seq, "b2")] == [("assigned", frozenset(held_b))]
            desc = await describe(admin, group)
            assert desc.epoch == epoch_before
            assert desc.state == "Stable"
            by_instance = {m.instance_id: m for m in desc.members}
            assert set(by_instance) == {"static-a", "static-b"}
            assert by_instance["static-b"].member_id == b2.member_id
            assert by_instance["static-b"].assignment == held_b
            assert by_instance["static-a"].assignment == held_a
            assert not journal.violations, journal.violations
            assert not (a.errors or b1.errors or b2.errors)
        finally:
            await close_all(b2, b1, a, admin)

    asyncio.run(main())


# ------------------------------------------------------------------ 3. fencing and rejoin


def test_fenced_member_loses_partitions_and_rejoins(start_broker, topic_name):
    session_ms = 2000
    b = start_broker(session_ms=session_ms)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(6))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 6)
        journal = Journal()
        x, y, z = (Runner(w, make_consumer(b.bootstrap, group), journal) for w in "xyz")
        samples: list[dict[str, set[TopicPartition]]] = []
        try:
            for r in (x, y, z):
                await r.start([topic_name])
            await settle(admin, group, [x, y, z], everything, journal, "three members")
            held_x = set(x.owned)
            desc = await describe(admin, group)
            old_epoch = {m.member_id: m.epoch for m in desc.members}[x.member_id]
            old_member_id = x.member_id
            sent = spy_heartbeats(x.consumer)

            async def sample():
                samples.append(described(await describe(admin, group)))
                return False

            seq = journal.seq
            with heartbeats_stopped(x.consumer):
                journal.zombies.add("x")  # x keeps polling, unaware its session is expiring
                stopped = time.monotonic()

                async def x_expired():
                    await sample()
                    return set(samples[-1]) == {y.member_id, z.member_id} and balanced([y, z], everything)

                await wait_until(x_expired, session_ms / 1000 + 5,
                                 lambda: f"x's session to expire; {journal.describe()}; {samples[-1:]}", step=0.1)
                assert time.monotonic() - stopped >= session_ms / 1000 - 0.2
                assert journal.since(seq, "x") == [], "x was told before it heartbeated again"
                # A zombie commit: x's old epoch for a partition y or z owns now; x is gone.
                moved = next(iter(held_x))
                with pytest.raises(KafkaError) as info:
                    await O.commit(x.consumer.client, group, {moved: 1}, generation=old_epoch,
                                   member_id=old_member_id)
                assert info.value.name in ("UNKNOWN_MEMBER_ID", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH")
            # heartbeats resume: the coordinator fences x, which loses (not revokes) what it held
            await wait_until(lambda: any(e.kind == "lost" for e in journal.since(seq, "x")), WAIT,
                             "x's on_partitions_lost")
            await settle(admin, group, [x, y, z], everything, journal, "x back in the group")
            await sample()
            x_events = [(e.kind, e.parts) for e in journal.since(seq, "x")]
            assert x_events[0] == ("lost", frozenset(held_x)), x_events
            # then only assignments (the others hand x's share over, possibly in steps)
            assert {k for k, _ in x_events[1:]} == {"assigned"}, x_events
            # it rejoined with epoch 0 and got a new, larger epoch
            assert 0 in sent, sent
            assert sent[0] == old_epoch, "the first heartbeat after the pause still carries the old epoch"
            desc = await describe(admin, group)
            new_epoch = {m.member_id: m.epoch for m in desc.members}[x.member_id]
            assert new_epoch > old_epoch
            assert x.consumer.member.epoch == new_epoch
            # the old epoch cannot commit a partition x does not hold now (KIP-1251)
            not_x = next(iter(set(everything) - x.owned))
            with pytest.raises(KafkaError) as info:
                await O.commit(x.consumer.client, group, {not_x: 1}, generation=old_epoch,
                               member_id=old_member_id)
            assert info.value.name in ("STALE_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH")
            committed = await O.fetch_committed(admin.client, group, [moved, not_x])
            assert all(o.offset != 1 for o in committed.values()), committed  # neither zombie commit landed
        finally:
            await close_all(x, y, z, admin)
        # the coordinator never had a partition in two members' assignments
        for s in samples:
            assert not overlap(s), overlap(s)
        assert len(samples) >= 5
        # y and z never overlapped each other, and nobody but the zombie x consumed unowned
        assert not journal.violations, journal.violations
        assert not y.errors and not z.errors

    asyncio.run(main())


# ------------------------------------------------------------- 4. UNRELEASED_INSTANCE_ID


def test_second_live_consumer_with_same_instance_id_is_fatal(start_broker, topic_name):
    b = start_broker()
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(3))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 3)
        journal = Journal()
        a = Runner("a", make_consumer(b.bootstrap, group, group_instance_id="same"), journal)
        intruder = make_consumer(b.bootstrap, group, group_instance_id="same")
        try:
            await a.start([topic_name])
            await settle(admin, group, [a], everything, journal, "the first member")
            seq = journal.seq
            await intruder.start()
            intruder.subscribe([topic_name], listener=Recorder(Runner("intruder", intruder, journal)))
            deadline = time.monotonic() + 10
            err = None
            while err is None and time.monotonic() < deadline:
                try:
                    await intruder.poll(100)
                except KafkaError as exc:
                    err = exc
            assert err is not None, "the second consumer with the same instance id was never refused"
            assert err.name == "UNRELEASED_INSTANCE_ID", err
            assert not err.retriable
            with pytest.raises(KafkaError) as again:  # fatal: it stays refused
                await intruder.poll(100)
            assert again.value.name == "UNRELEASED_INSTANCE_ID"
            started = time.monotonic()
            await asyncio.wait_for(intruder.close(), 5)
            assert time.monotonic() - started < 2
            await asyncio.sleep(0.5)
            assert journal.since(seq) == [], journal.since(seq)
            desc = await describe(admin, group)
            assert [(m.member_id, m.instance_id) for m in desc.members] == [(a.member_id, "same")]
            assert described(desc) == {a.member_id: set(everything)}
            assert not a.errors
        finally:
            await close_all(intruder, a, admin)

    asyncio.run(main())


# ----------------------------------------------------- 5. commits with a lagging epoch (KIP-1251)


def test_commit_with_lagging_epoch_accepted_zombie_commit_rejected(start_broker, topic_name):
    b = start_broker()
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(4))

    async def committed(admin, tp):
        found = await O.fetch_committed(admin.client, group, [tp])
        return found[tp].offset if tp in found else None

    async def main():
        admin = await setup(b.bootstrap, topic_name, 4)
        journal = Journal()
        a = Runner("a", make_consumer(b.bootstrap, group, enable_auto_commit=False), journal)
        b_ = Runner("b", make_consumer(b.bootstrap, group, enable_auto_commit=False), journal)
        try:
            await a.start([topic_name])
            await settle(admin, group, [a], everything, journal, "a alone")
            desc = await describe(admin, group)
            e = desc.members[0].epoch
            assert a.consumer.member.epoch == e
            with heartbeats_stopped(a.consumer):
                await b_.start([topic_name])

                async def bumped():
                    d = await describe(admin, group)
                    return d.epoch > e and len(d.members) == 2

                await wait_until(bumped, WAIT, "b's join to bump the group epoch", step=0.05)
                d = await describe(admin, group)
                assert {m.member_id: m.epoch for m in d.members}[a.member_id] == e, "a's epoch must lag"
                # a, at epoch e < group epoch, commits partitions it still owns (some are
                # about to move to b): accepted.
                await a.consumer.commit({tp: 3 for tp in everything})
                for tp in everything:
                    assert await committed(admin, tp) == 3
            await settle(admin, group, [a, b_], everything, journal, "a and b")
            kept, moved = min(a.owned), min(b_.owned)
            e2 = {m.member_id: m.epoch for m in (await describe(admin, group)).members}[a.member_id]
            assert e2 > e
            # KIP-1251: assignment epoch <= client epoch (e) <= broker epoch (e2) for what a holds
            await O.commit(a.consumer.client, group, {kept: 7}, generation=e, member_id=a.member_id)
            assert await committed(admin, kept) == 7
            # ... but a zombie a (epoch e) cannot commit the partition b owns now
            with pytest.raises(KafkaError) as info:
                await O.commit(a.consumer.client, group, {moved: 9}, generation=e, member_id=a.member_id)
            assert info.value.name == "STALE_MEMBER_EPOCH"
            assert await committed(admin, moved) == 3
            # the current epoch commits both of a's, and b commits its own
            await a.consumer.commit({kept: 8})
            await b_.consumer.commit({moved: 10})
            assert (await committed(admin, kept), await committed(admin, moved)) == (8, 10)
            assert not journal.violations
        finally:
            await close_all(b_, a, admin)

    asyncio.run(main())


# ------------------------------------------------------- 6. STALE_MEMBER_EPOCH is retried


def test_commit_retries_after_stale_member_epoch(start_broker, topic_name):
    b = start_broker()
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(2))
    tp = TopicPartition(topic_name, 0)

    async def main():
        admin = await setup(b.bootstrap, topic_name, 2)
        journal = Journal()
        c = Runner("c", make_consumer(b.bootstrap, group, enable_auto_commit=False), journal)
        try:
            await c.start([topic_name])
            await settle(admin, group, [c], everything, journal, "one member")
            m = c.consumer.member
            epoch, member_id = m.epoch, m.member_id
            # the coordinator refuses an epoch ahead of the member's
            with pytest.raises(KafkaError) as info:
                await O.commit(c.consumer.client, group, {tp: 1}, generation=epoch + 1, member_id=member_id)
            assert info.value.name == "STALE_MEMBER_EPOCH"
            # the consumer's first attempt carries that epoch (as if its view raced ahead of
            # the coordinator's); commit() must retry after the next heartbeat and succeed
            real = m.commit_identity
            attempts: list[int] = []

            def racing():
                e, mid, inst = real()
                attempts.append(e + 1 if not attempts else e)
                return attempts[-1], mid, inst

            m.commit_identity = racing
            seq = journal.seq
            started = time.monotonic()
            try:
                await asyncio.wait_for(c.consumer.commit({tp: 5}), 10)
            finally:
                del m.commit_identity
            took = time.monotonic() - started
            assert attempts[0] == epoch + 1 and attempts[-1] == epoch, attempts
            found = await O.fetch_committed(admin.client, group, [tp])
            assert found[tp].offset == 5
            assert took < 2, f"the retry took {took:.2f}s"
            assert journal.since(seq) == [] and m.epoch == epoch, "a stale commit must not disturb the member"
            print(f"\ncommit retried after STALE_MEMBER_EPOCH in {took * 1000:.0f} ms")
        finally:
            await close_all(c, admin)

    asyncio.run(main())


# ------------------------------------------------------------ 7. auto-commit is at-least-once


def test_auto_commit_commits_only_returned_records(start_broker, topic_name):
    b = start_broker()
    group = f"g-{topic_name}"
    tp = TopicPartition(topic_name, 0)

    async def main():
        admin = await setup(b.bootstrap, topic_name, 1)
        await produce(b.bootstrap, topic_name, 1, 40)
        c = make_consumer(b.bootstrap, group, enable_auto_commit=True, auto_commit_interval_ms=100,
                          max_poll_records=5)
        c2 = None
        try:
            await c.start()
            c.subscribe([topic_name])

            async def committed():
                found = await O.fetch_committed(admin.client, group, [tp])
                return found[tp].offset if tp in found else None

            returned: list[int] = []
            progress = []
            for _ in range(6):
                before = returned[-1] + 1 if returned else None
                records = []
                deadline = time.monotonic() + 10
                while not records and time.monotonic() < deadline:
                    records = await c.poll(200)
                assert 0 < len(records) <= 5
                returned += [r.offset for r in records]
                assert returned == list(range(len(returned))), "records out of order or skipped"
                now = await committed()
                # never more than what the application got ...
                assert now is None or now <= returned[-1] + 1, (now, returned[-1])
                # ... and, the interval having passed, at least what earlier polls returned
                if before is not None:
                    assert now is not None and now >= before, (now, before)
                progress.append(now)
                await asyncio.sleep(0.15)  # past the auto-commit interval
            assert await committed() <= returned[-1] + 1
            await c.close()
            assert await committed() == returned[-1] + 1 == 30
            print(f"\ncommitted after each poll: {progress}")
            # a successor resumes exactly after the last returned record
            c2 = make_consumer(b.bootstrap, group, enable_auto_commit=False)
            await c2.start()
            c2.subscribe([topic_name])
            first = []
            deadline = time.monotonic() + 10
            while not first and time.monotonic() < deadline:
                first = await c2.poll(200)
            assert first and first[0].offset == 30
        finally:
            await close_all(c2, c, admin)

    asyncio.run(main())


# ------------------------------------------------------------ 8. regex subscription


# 21 s: two regex refreshes, at most one per 10 s (Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS).
# -m slow; the broker's side runs by default with librdkafka (tests/interop/test_consumer_groups.py),
# the client's regex heartbeat fields in tests/client/test_membership.py.
@pytest.mark.slow
def test_regex_subscription_assigns_topics_created_later(start_broker, topic_name):
    b = start_broker()
    group = f"g-{topic_name}"
    uniq = topic_name[-9:]
    first, second = f"rx-{uniq}-a", f"rx-{uniq}-b"
    others = [f"rx-{uniq}", f"rxx-{uniq}-c", f"other-rx-{uniq}-d"]  # no full match of ^rx-<uniq>-.*

    async def main():
        admin = await AsyncAdmin(b.bootstrap).start()
        journal = Journal()
        c = Runner("c", make_consumer(b.bootstrap, group), journal)
        try:
            await c.start(f"^rx-{uniq}-.*")

            async def joined():
                d = await describe(admin, group)
                return len(d.members) == 1 and d.members[0].epoch > 0

            await wait_until(joined, WAIT, "the regex consumer to join", step=0.05)
            desc = await describe(admin, group)
            assert desc.members[0].regex == f"^rx-{uniq}-.*"
            assert not c.owned
            await admin.create_topics([NewTopic(t, 1) for t in others] + [NewTopic(first, 2)])
            await wait_until(lambda: c.owned == set(tps(first, range(2))), WAIT,
                             lambda: f"{first} to be assigned; holds {sorted(c.owned)}")
            await admin.create_topics([NewTopic(second, 3)])
            want = set(tps(first, range(2)) | tps(second, range(3)))
            await wait_until(lambda: c.owned == want, WAIT, lambda: f"{second} too; holds {sorted(c.owned)}")
            for t, n in ((first, 2), (second, 3), *((o, 1) for o in others)):
                await produce(b.bootstrap, t, n, 1)
            await wait_until(lambda: len(c.records) >= 5, WAIT, lambda: f"5 records, got {c.records}")
            await asyncio.sleep(0.3)
            assert {(tp.topic, tp.partition) for tp, _, _ in c.records} == {(tp.topic, tp.partition) for tp in want}
            assert len(c.records) == 5
            assert described(await describe(admin, group)) == {c.member_id: want}
            assert [e.kind for e in journal.events] == ["assigned", "assigned"]
            assert not journal.violations and not c.errors
        finally:
            await close_all(c, admin)

    asyncio.run(main())


# -------------------------------------------------- 9. mixed group: odradek + librdkafka


def test_mixed_group_with_librdkafka_consumer(start_broker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    b = start_broker()
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(6))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 6)
        journal = Journal()
        ours = Runner("odradek", make_consumer(b.bootstrap, group), journal)
        rd_errors: list = []
        rd = confluent_kafka.Consumer({
            "bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
            "error_cb": rd_errors.append})

        def parts(partitions):
            return [TopicPartition(p.topic, p.partition) for p in partitions]

        rd.subscribe([topic_name],
                     on_assign=lambda _c, ps: journal.record("librdkafka", "assigned", parts(ps)),
                     on_revoke=lambda _c, ps: journal.record("librdkafka", "revoked", parts(ps)),
                     on_lost=lambda _c, ps: journal.record("librdkafka", "lost", parts(ps)))
        stop = False

        async def poll_rd():
            # librdkafka runs callbacks inside poll(): poll it from this loop, never blocking
            for _ in range(10000):
                if stop:
                    return
                rd.poll(0)
                await asyncio.sleep(0.02)

        rd_task = asyncio.get_running_loop().create_task(poll_rd())
        rd_closed = False
        try:
            await ours.start([topic_name])

            def split():
                theirs = journal.owned["librdkafka"]
                return (len(ours.owned) == 3 and len(theirs) == 3 and not ours.owned & theirs
                        and ours.owned | theirs == set(everything))

            async def agreed():
                if not split():
                    return False
                desc = await describe(admin, group)
                held = described(desc)
                return (desc.state == "Stable" and held.get(ours.member_id) == ours.owned
                        and {frozenset(v) for v in held.values()}
                        == {frozenset(ours.owned), frozenset(journal.owned["librdkafka"])})

            await wait_until(agreed, WAIT, lambda: f"a 3/3 split; {journal.describe()}", step=0.05)
            seq = journal.seq
            stop = True
            await asyncio.wait_for(rd_task, 5)
            rd.close()  # revokes, leaves with -1
            rd_closed = True
            await wait_until(lambda: ours.owned == set(everything), WAIT,
                             lambda: f"odradek to get all 6; {journal.describe()}")
            rd_events = [e.kind for e in journal.since(seq, "librdkafka")]
            assert rd_events == ["revoked"], rd_events
            assert [e.kind for e in journal.since(seq, "odradek")] == ["assigned"]
            await wait_until(lambda: broker_agrees(admin, group, [ours]), WAIT, "the coordinator to agree")
            assert not journal.violations, journal.violations
            assert not journal.handoff_errors()
            assert not ours.errors
            assert not rd_errors, rd_errors
        finally:
            stop = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(rd_task, 5)
            if not rd_closed:
                rd.close()
            await close_all(ours, admin)

    asyncio.run(main())


# ------------------------------------------------------------ 10. dynamic leave (-1)


def test_dynamic_leave_hands_partitions_over_at_once(start_broker, topic_name):
    session_ms = 10000
    b = start_broker(session_ms=session_ms)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(4))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 4)
        journal = Journal()
        a = Runner("a", make_consumer(b.bootstrap, group), journal)
        c = Runner("c", make_consumer(b.bootstrap, group), journal)
        try:
            await a.start([topic_name])
            await c.start([topic_name])
            await settle(admin, group, [a, c], everything, journal, "two members")
            held_c = set(c.owned)
            epoch = (await describe(admin, group)).epoch
            seq = journal.seq
            leaving = time.monotonic()
            await c.close()  # epoch -1
            closed = time.monotonic()
            desc = await describe(admin, group)
            assert [m.member_id for m in desc.members] == [a.member_id], "a dynamic leave removes the member now"
            assert desc.epoch > epoch
            got = await wait_until(lambda: a.owned == set(everything), session_ms / 1000,
                                   lambda: f"a to get everything; {journal.describe()}")
            print(f"\nclose took {(closed - leaving) * 1000:.0f} ms; "
                  f"a had c's partitions {(got - leaving) * 1000:.0f} ms after close() began")
            assert got - leaving < 2.0, f"took {got - leaving:.2f}s (session timeout {session_ms / 1000}s)"
            assert [(e.who, e.kind, e.parts) for e in journal.since(seq)] == [
                ("c", "revoked", frozenset(held_c)), ("a", "assigned", frozenset(held_c))]
            await wait_until(lambda: broker_agrees(admin, group, [a]), WAIT, "the coordinator to agree")
            assert not journal.violations
        finally:
            await close_all(c, a, admin)

    asyncio.run(main())


# ------------------------------------ regressions: client bugs these tests found (fixed in c6837b1)


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_close_with_heartbeat_in_flight_still_leaves(start_broker, topic_name, kind):
    """Was: the answer to a regular heartbeat in flight when close() called leave() was
    taken for the leave's answer (membership.on_response in LEAVING), so the leave was
    never sent: a dynamic member's partitions waited for the session timeout, and a
    restarted static member got UNRELEASED_INSTANCE_ID (fatal)."""
    session_ms = 10000
    b = start_broker(session_ms=session_ms)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(4))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 4)
        journal = Journal()
        static = {"group_instance_id": "leaver"} if kind == "static" else {}
        a = Runner("a", make_consumer(b.bootstrap, group), journal)
        c = Runner("c", make_consumer(b.bootstrap, group, **static), journal)
        try:
            await a.start([topic_name])
            await c.start([topic_name])
            await settle(admin, group, [a, c], everything, journal, "two members")
            member_id = c.member_id
            # c's heartbeat responses take 300 ms to arrive (latency on its side of the wire)
            real_send = c.consumer.client.send

            async def slow_send(node, api, body, **kw):
                resp = await real_send(node, api, body, **kw)
                if api == 68:  # ConsumerGroupHeartbeat
                    await asyncio.sleep(0.3)
                return resp

            c.consumer.client.send = slow_send
            m = c.consumer.member
            sent = asyncio.Event()
            build = m.build_heartbeat

            def spy(now):
                sent.set()
                return build(now)

            m.build_heartbeat = spy
            await c.stop_polling()
            sent.clear()
            await asyncio.wait_for(sent.wait(), 5)  # a regular heartbeat is on its way
            await asyncio.wait_for(c.consumer.close(), 15)
            c.closed = True
            desc = await describe(admin, group)
            if kind == "dynamic":
                assert [x.member_id for x in desc.members] == [a.member_id], "the leave (-1) never arrived"
                await wait_until(lambda: a.owned == set(everything), 2, "a to take c's partitions at once")
            else:
                epochs = {x.member_id: x.epoch for x in desc.members}
                assert epochs.get(member_id) == -2, f"the static leave (-2) never arrived: {epochs}"
        finally:
            await close_all(c, a, admin)

    asyncio.run(main())


def test_commit_in_revoke_callback_covers_the_revoked_partitions(start_broker, topic_name):
    """Was: _reconcile and _leave_group removed the revoked partitions' positions before
    on_partitions_revoked ran, so commit() in the callback skipped them and position()
    raised IllegalStateError; the successor re-consumed what had been consumed. Java keeps
    them assigned (paused) until the callback returns."""
    b = start_broker()
    group = f"g-{topic_name}"

    async def main():
        admin = await setup(b.bootstrap, topic_name, 2)
        await produce(b.bootstrap, topic_name, 2, 10)
        c1 = make_consumer(b.bootstrap, group, enable_auto_commit=False)
        c2 = make_consumer(b.bootstrap, group, enable_auto_commit=False)
        seen_in_callback: dict = {}

        class CommitOnRevoke(RebalanceListener):
            async def on_partitions_revoked(self, partitions):
                for tp in partitions:
                    try:
                        seen_in_callback[tp] = await c1.position(tp)
                    except Exception as exc:  # noqa: BLE001 - recorded, asserted below
                        seen_in_callback[tp] = repr(exc)
                await c1.commit()  # the usual at-least-once pattern: commit what was consumed

        try:
            await c1.start()
            c1.subscribe([topic_name], listener=CommitOnRevoke())
            got = []
            deadline = time.monotonic() + 10
            while len(got) < 20 and time.monotonic() < deadline:
                got += await c1.poll(100)
            assert len(got) == 20
            await c2.start()
            c2.subscribe([topic_name])
            again = []
            deadline = time.monotonic() + 10
            while not seen_in_callback and time.monotonic() < deadline:
                await asyncio.gather(c1.poll(50), c2.poll(50))
            for _ in range(20):  # c2 takes the revoked partition over and polls a while
                again += (await asyncio.gather(c1.poll(20), c2.poll(20)))[1]
            assert len(seen_in_callback) == 1
            revoked = next(iter(seen_in_callback))
            found = await O.fetch_committed(admin.client, group, [revoked])
            assert revoked in found and found[revoked].offset == 10, f"commit() in the callback: {found}"
            assert again == [], f"c2 got {len(again)} records c1 had consumed"
            assert seen_in_callback[revoked] == 10, seen_in_callback
        finally:
            await close_all(c2, c1, admin)

    asyncio.run(main())


def test_commit_is_not_delayed_by_a_parked_fetch(start_broker, topic_name):
    """Was: group requests went over the data connection, and the broker answers a
    connection's requests in order, so a commit (or heartbeat, or leave) waited behind a
    Fetch parked for fetch_max_wait_ms."""
    b = start_broker()
    group = f"g-{topic_name}"
    tp = TopicPartition(topic_name, 0)

    async def main():
        admin = await setup(b.bootstrap, topic_name, 1)
        c = make_consumer(b.bootstrap, group, fetch_max_wait_ms=1500, auto_offset_reset="latest",
                          enable_auto_commit=False)
        try:
            await c.start()
            c.subscribe([topic_name])
            deadline = time.monotonic() + 10
            while c.assignment() != {tp} and time.monotonic() < deadline:
                await c.poll(50)
            await c.poll(1600)  # idle partition: returns while a fresh Fetch is parked on the broker
            started = time.monotonic()
            await c.commit({tp: 0})
            took = time.monotonic() - started
            assert took < 0.5, f"a commit took {took:.2f}s behind a parked fetch"
        finally:
            await close_all(c, admin)

    asyncio.run(main())


def test_idle_consumer_with_long_fetch_wait_keeps_its_membership(start_broker, topic_name):
    """Was (same cause): heartbeats queued behind parked fetches, so an idle consumer whose
    fetch_max_wait_ms exceeds the session timeout was expired although it heartbeated on
    time (Java and librdkafka heartbeat on a connection of their own)."""
    b = start_broker(session_ms=1500)
    group = f"g-{topic_name}"
    everything = tps(topic_name, range(2))

    async def main():
        admin = await setup(b.bootstrap, topic_name, 2)
        journal = Journal()
        c = Runner("c", make_consumer(b.bootstrap, group, fetch_max_wait_ms=2500), journal)
        try:
            await c.start([topic_name])
            await wait_until(lambda: c.owned == set(everything), WAIT, "the assignment")
            epoch = c.consumer.member.epoch
            await asyncio.sleep(3.0)  # polling an idle topic, heartbeats due every 100 ms
            assert [e.kind for e in journal.events] == ["assigned"], journal.events
            assert c.consumer.member.epoch == epoch
        finally:
            await close_all(c, admin)

    asyncio.run(main())
