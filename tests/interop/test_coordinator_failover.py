"""Group coordinator fail-over between brokers (issue 18), with real clients and real processes.

etcd and three broker processes on loopback (racks a, b, c), a topic of 12 partitions with
RF 3, and `__consumer_offsets` replicated on all three brokers (offsets.topic.replication.factor
defaults to min(3, brokers)). Two groups consume the topic concurrently, both committing what
they consumed: a librdkafka KIP-848 group of 6 members (`group.protocol=consumer`) and a
classic group of 4 with the cooperative-sticky assignor. The group ids are chosen so that
both live on the same `__consumer_offsets` partition: one broker coordinates both, and one
fault hits both. While an idempotent acks=all producer writes a bounded number of records,
the coordinator broker is killed (kill -9), or paused (SIGSTOP) for longer than the broker
session timeout (a zombie that must be fenced) and then resumed.

What must hold, each checked from what the clients saw (group_failover.py records it):

  * both groups carry on: every member has a commit acknowledged after the fault, and every
    record produced (before and across the fault) is consumed by each group;
  * at no moment is a partition owned by two members of a group (assign-to-revoke intervals
    of the rebalance callbacks never overlap), and no member receives a record of a
    partition it does not hold;
  * no committed offset goes back: OffsetFetch, sampled all along, never shows a partition's
    offset lower than an earlier read, nor lower than a commit acknowledged before the
    read was sent (a commit acknowledged and then lost is a commit going back);
  * duplicates only beyond committed positions: a record is consumed again only by a
    member whose ownership began after the first read, and only at or above every commit
    acknowledged before that ownership began;
  * no member died, so nothing moves: no rebalance callback in either group after the
    fault; the KIP-848 group keeps its group epoch, assignment epoch, and every member its
    member epoch and assignment (ConsumerGroupDescribe before and after); the classic group
    keeps its members and their assignments (DescribeGroups);
  * a probe group on the same shard, committing over a connection of its own: with kill -9,
    a commit acknowledged just before the kill is visible after the fail-over; with SIGSTOP,
    an OffsetCommit that reached the zombie while it was paused is not acknowledged by it
    and is not visible after the fail-over, and the zombie rejoins the ISR of the offsets
    partition.

Broker logs are kept in the test's tmp dir (`<tmp>/cluster/broker-N.log`); the failure
message names it, and lists every check that failed (they are all evaluated) with the
timings seen (when each member's first commit after the fault was acknowledged, when the
offsets partition got its new leader). Each test takes about 18 s with its cluster start
(both together 35-45 s on a busy 2-core machine), so both run in the default suite.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from odradek.client.cluster import TopicPartition as OTopicPartition
from odradek.client.net import BrokerConnection, Client
from odradek.client.offsets import commit_body, fetch_committed
from odradek.client.versions import Api
from odradek.cluster.names import CONSUMER_OFFSETS
from odradek.commands.cluster import LocalCluster
from odradek.coordinator.runtime import partition_for
from tests.interop.group_failover import (
    AsyncLoop,
    CommitLog,
    Journal,
    Member,
    OffsetSampler,
    SteadyProducer,
    describe_group,
    group_view,
    names_on_one_partition,
    stop_members,
)
from tests.interop.test_cluster import SESSION_MS, _create, _describe

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

OFFSETS_PARTITIONS = 3
PARTITIONS = 12
KIP848_MEMBERS = 6
CLASSIC_MEMBERS = 4
BEFORE = 600  # records written before the groups start (50 per partition)
ACROSS = 1800  # records written at RATE while the fault happens
RATE = 150.0  # records/s: ACROSS takes 12 s
FAULT_AFTER_S = 3.0  # into the steady production
PAUSE_S = 8.0  # SIGSTOP this long: well past broker.session.timeout.ms (3 s)
HEARTBEAT_MS = 1000  # group.consumer.heartbeat.interval.ms, and the classic members' heartbeat.interval.ms

BROKER_OVERRIDES = [
    f"broker.session.timeout.ms={SESSION_MS}",
    "replica.lag.time.max.ms=4000",
    f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
    f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
    "group.consumer.min.heartbeat.interval.ms=500",
    "group.initial.rebalance.delay.ms=0",
]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "cluster", brokers=3, racks=["a", "b", "c"], port=0, overrides=BROKER_OVERRIDES)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _consumer_conf(cluster, group: str, protocol: str) -> dict:
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,  # finds a dead leader's successor within ~1 s
            "socket.timeout.ms": 15000, "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000,
            "log_level": 3}
    if protocol == "classic":
        # Session timeout at Kafka's default (45 s): fail-over must not depend on fencing anyone.
        conf.update({"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": HEARTBEAT_MS,
                     "session.timeout.ms": 45000})
    return conf


def _live_bootstrap(cluster, exclude: int | None) -> str:
    return ",".join(f"127.0.0.1:{cluster.ports[n]}" for n in sorted(cluster.ports) if n != exclude)


def _offsets_partition_state(bootstrap: str, partition: int):
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(CONSUMER_OFFSETS, timeout=5)
    t = md.topics.get(CONSUMER_OFFSETS)
    return None if t is None or t.error is not None else t.partitions.get(partition)


def _wait(cond, timeout: float, step: float = 0.25):
    """Poll `cond` until it returns something truthy (returned) or `timeout` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = cond()
        except Exception:  # noqa: BLE001 - a fail-over in progress: ask again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(step)


def _offsets_topic_is_replicated(cluster) -> None:
    """The precondition of every fail-over: each `__consumer_offsets` partition has three
    replicas, all in sync (offsets.topic.replication.factor at its default on three brokers)."""
    seen = {}

    def state():
        parts = _describe(cluster, CONSUMER_OFFSETS)
        seen.clear()
        seen.update({p: (s.leader, sorted(s.replicas), sorted(s.isrs)) for p, s in parts.items()})
        return len(parts) == OFFSETS_PARTITIONS

    assert _wait(state, 30), f"{CONSUMER_OFFSETS} never had its {OFFSETS_PARTITIONS} partitions: {seen}"
    # The replicas are placed when the topic is created and never change: no point waiting for more.
    assert all(len(r) == 3 for _, r, _ in seen.values()), \
        f"{CONSUMER_OFFSETS} is not replicated on the three brokers: partition -> (leader, replicas, isr) {seen}"
    assert _wait(lambda: state() and all(isr == [1, 2, 3] for _, _, isr in seen.values()), 30), \
        f"{CONSUMER_OFFSETS} never had its full ISR: partition -> (leader, replicas, isr) {seen}"


def _coordinator_of(cluster, groups: list[str]) -> dict[str, int]:
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    futures = adm.describe_consumer_groups(groups, request_timeout=10)
    return {g: f.result(15).coordinator.id for g, f in futures.items()}


def _consumed(members: list[Member]) -> list[tuple[float, str, int, int, bytes | None]]:
    return sorted((t, m.name, p, o, k) for m in members for t, p, o, k in m.consumed())


def _consumption_problems(group: str, members: list[Member], journal: Journal, acked: dict, acks) -> tuple[list[str], int]:
    """Every acknowledged record consumed, nothing consumed that was not written, and
    duplicates only beyond committed positions. Returns (problems, duplicates)."""
    problems: list[str] = []
    first_read: dict[tuple[int, int], float] = {}
    duplicates = 0
    for t, name, p, o, key in _consumed(members):
        if acked.get((p, o)) != key:
            problems.append(f"{group}: {name} read partition {p} offset {o} key {key!r}; the producer was "
                            f"acknowledged {acked.get((p, o))!r} there")
        if (p, o) in first_read:
            duplicates += 1
            start = journal.interval_start(name, p, t)
            if start is None or start < first_read[(p, o)]:
                problems.append(f"{group}: {name} read partition {p} offset {o} twice within one assignment")
            else:
                below = [a for a in acks if a.partition == p and a.t_acked <= start and a.offset > o]
                if below:
                    a = max(below, key=lambda a: a.offset)
                    problems.append(f"{group}: {name} read partition {p} offset {o} again after its assignment at "
                                    f"{start:.3f}, below the commit of {a.offset} acknowledged at {a.t_acked:.3f}")
        else:
            first_read[(p, o)] = t
    missing = sorted(set(acked) - set(first_read))
    if missing:
        problems.append(f"{group}: {len(missing)} acknowledged records never consumed, e.g. {missing[:10]}")
    return problems[:40], duplicates


def _log_problems(cluster) -> list[str]:
    out = []
    for n in sorted(cluster.ports):
        text = cluster.log_of(n)
        if "Traceback" in text:
            i = text.index("Traceback")
            out.append(f"broker {n} logged a traceback:\n{text[max(0, i - 300):i + 2500]}")
    return out


def run_failover(cluster, fault: str) -> None:
    assert fault in ("kill", "pause")
    # Kafka creates the offsets topic on the first FindCoordinator: ask once (any group) first.
    assert _wait(lambda: _coordinator_of(cluster, ["fo-warm-up"]), 30), "FindCoordinator never answered"
    _offsets_topic_is_replicated(cluster)
    tag = uuid.uuid4().hex[:6]
    topic = f"fo-{fault}-{tag}"
    _create(cluster, topic, partitions=PARTITIONS)  # RF 3, min.insync.replicas 2
    assert _wait(lambda: all(sorted(p.isrs) == [1, 2, 3] for p in _describe(cluster, topic).values()), 30), \
        "the topic never had its full ISR"
    g848, gclassic, gprobe = names_on_one_partition(["fo-848", "fo-classic", "fo-probe"], OFFSETS_PARTITIONS, tag)
    groups = [g848, gclassic]
    offsets_partition = partition_for(g848, OFFSETS_PARTITIONS)

    before = SteadyProducer(cluster.bootstrap, topic, PARTITIONS, BEFORE, rate=5000, tag="before")
    before.start()
    before.join(90)
    assert before.crash is None and not before.failures and len(before.acked) == BEFORE, \
        (before.crash, before.failures[:3], len(before.acked))

    problems: list[str] = []
    notes: list[str] = [f"broker logs: {cluster.data_dir}"]
    loop = AsyncLoop()
    commits = CommitLog()
    journals = {g: Journal(g) for g in groups}
    sampler = OffsetSampler(loop, cluster.bootstrap, groups, topic, PARTITIONS).start()
    members = ([Member(f"k{i}", _consumer_conf(cluster, g848, "consumer"), topic, journals[g848], commits)
                for i in range(KIP848_MEMBERS)]
               + [Member(f"c{i}", _consumer_conf(cluster, gclassic, "classic"), topic, journals[gclassic], commits)
                  for i in range(CLASSIC_MEMBERS)])
    of_group = {g848: members[:KIP848_MEMBERS], gclassic: members[KIP848_MEMBERS:]}
    across: SteadyProducer | None = None
    probe_conn: BrokerConnection | None = None
    zombie_answer = None
    coordinator = None
    t_fault = t_stop = None
    probe_expected = None
    pre: dict[str, dict] = {}
    post: dict[str, dict] = {}
    for m in members:
        m.start()
    try:
        # 1. Both groups settle: every partition held by one member, the records written so
        # far consumed and committed, and the coordinator describing what the callbacks say.
        expected_before = {p: BEFORE // PARTITIONS for p in range(PARTITIONS)}
        last_state = {}

        def settled() -> bool:
            for g in groups:
                ms = of_group[g]
                owned = [m.owned_now() for m in ms]
                if any(not o for o in owned) or set().union(*owned) != set(range(PARTITIONS)) \
                        or sum(len(o) for o in owned) != PARTITIONS:
                    last_state[g] = f"owned {[sorted(o) for o in owned]}"
                    return False
                s = sampler.latest(g)
                if s is None or s.offsets != expected_before:
                    last_state[g] = f"committed {s and s.offsets}"
                    return False
                view = group_view(loop.run(describe_group(cluster.bootstrap, g)))
                by_id = {m.member_id: sorted((topic, p) for p in m.owned_now()) for m in ms}
                if view["state"].lower() != "stable" or set(view["members"]) != set(by_id) or any(
                        v["assignment"] != by_id[mid] or v["target"] not in (None, v["assignment"])
                        for mid, v in view["members"].items()):
                    last_state[g] = f"described {view} vs callbacks {by_id}"
                    return False
                pre[g] = view
            return True

        assert _wait(settled, 90, 0.5), f"the groups never settled: {last_state}"
        coordinators = _coordinator_of(cluster, groups)
        coordinator = coordinators[g848]
        assert coordinators[gclassic] == coordinator, coordinators
        leader = _describe(cluster, CONSUMER_OFFSETS)[offsets_partition].leader
        assert leader == coordinator, f"FindCoordinator says {coordinator}, {CONSUMER_OFFSETS}-{offsets_partition} " \
                                      f"is led by {leader}"
        notes.append(f"coordinator of both groups: broker {coordinator} ({CONSUMER_OFFSETS}-{offsets_partition})")

        # A probe group (memberless, on the same shard) committed through a connection of its
        # own to the coordinator: offset 5 well before the fault, then, for kill -9, offset 777
        # acknowledged right before the kill (it must survive); for SIGSTOP, offset 777 sent
        # while the coordinator is paused: it waits in the socket and reaches the zombie when it
        # resumes, believing it coordinates (it must be refused, and not become visible).
        probe_conn = BrokerConnection("127.0.0.1", cluster.ports[coordinator], "failover-probe", 90.0)
        loop.run(probe_conn.open(10))
        first = loop.run(probe_conn.request(Api.OFFSET_COMMIT, commit_body(gprobe, {OTopicPartition(topic, 0): 5})))
        assert first.topics[0].partitions[0].error_code == 0, first

        # 2. The fault, FAULT_AFTER_S into a steady production that goes on across it.
        across = SteadyProducer(cluster.bootstrap, topic, PARTITIONS, ACROSS, rate=RATE, tag="across")
        across.start()
        time.sleep(FAULT_AFTER_S)
        live = _live_bootstrap(cluster, coordinator)
        if fault == "kill":
            last = loop.run(probe_conn.request(Api.OFFSET_COMMIT, commit_body(gprobe, {OTopicPartition(topic, 0): 777})))
            t_fault = time.monotonic()
            cluster.kill(coordinator)
            probe_expected = 777
            assert last.topics[0].partitions[0].error_code == 0, f"the last commit before the kill failed: {last}"
        else:
            t_fault = time.monotonic()
            cluster.signal(coordinator, signal.SIGSTOP)
            probe_expected = 5
        try:
            if fault == "pause":
                zombie_answer = loop.submit(probe_conn.request(
                    Api.OFFSET_COMMIT, commit_body(gprobe, {OTopicPartition(topic, 0): 777}), timeout=90))
            moved = _wait(lambda: (s := _offsets_partition_state(live, offsets_partition)) is not None
                          and s.leader not in (coordinator, -1) and s.leader, 30, 0.1)
            if moved:
                notes.append(f"new leader of {CONSUMER_OFFSETS}-{offsets_partition}: broker {moved}, seen "
                             f"{time.monotonic() - t_fault:.1f}s after the fault")
            else:
                problems.append(f"{CONSUMER_OFFSETS}-{offsets_partition} got no new leader within 30 s of the fault")
            if fault == "pause":
                time.sleep(max(0.0, t_fault + PAUSE_S - time.monotonic()))
        finally:
            if fault == "pause":
                cluster.signal(coordinator, signal.SIGCONT)
                notes.append(f"SIGCONT after {time.monotonic() - t_fault:.1f}s")

        # 3. Everything written is consumed, and committed, by both groups.
        across.join(120)
        if across.is_alive() or across.crash is not None or across.failures or len(across.acked) != ACROSS:
            problems.append(f"producer: crash {across.crash!r}, {len(across.failures)} failures "
                            f"{across.failures[:3]}, {len(across.acked)}/{ACROSS} acknowledged")
        acked = {**before.snapshot(), **across.snapshot()}
        end = {p: 1 + max(o for q, o in acked if q == p) for p in range(PARTITIONS)}
        for g in groups:
            if not _wait(lambda g=g: {(p, o) for _, _, p, o, _ in _consumed(of_group[g])} >= set(acked), 90, 0.5):
                problems.append(f"{g}: not every record consumed within 90 s of the end of production")
            latest = _wait(lambda g=g: (s := sampler.latest(g)) is not None and s.t_sent > time.monotonic() - 2
                           and s.offsets == end and s, 60, 0.5)
            if not latest:
                problems.append(f"{g}: committed offsets never reached the log ends {end}: last read "
                                f"{sampler.latest(g)}")
            try:
                post[g] = group_view(loop.run(describe_group(_live_bootstrap(cluster, coordinator if fault == "kill"
                                                                              else None), g)))
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{g}: cannot be described after the fail-over: {exc!r}")
    finally:
        t_stop = time.monotonic()
        stuck = stop_members(members)
        try:
            sampler.stop()
        except Exception as exc:  # noqa: BLE001
            problems.append(f"offset sampler: {exc!r}")
        if probe_conn is not None:
            loop.loop.call_soon_threadsafe(probe_conn.close)
    if stuck:
        problems.append(f"members that did not close within 60 s: {stuck}")
    for m in members:
        if m.crash is not None:
            problems.append(f"{m.name} crashed: {m.crash!r}")

    # 4. The checks.
    for g in groups:
        j = journals[g]
        problems += j.violations[:20] + j.overlaps()[:20]
        moved = j.callbacks_between(t_fault, t_stop)
        if moved:
            problems.append(f"{g}: rebalance callbacks after the fault (nothing should move, no member died): "
                            f"{[(round(t - t_fault, 3), n, k, ps) for t, n, k, ps in moved][:12]}")
        if g in pre and g in post and pre[g] != post[g]:
            problems.append(f"{g}: the group changed across the fail-over:\n  before {pre[g]}\n  after  {post[g]}")
        problems += sampler.problems(g, commits.of(g))
        cons, dups = _consumption_problems(g, of_group[g], j, acked, commits.of(g))
        problems += cons
        notes.append(f"{g}: {dups} records consumed twice")
        for m in of_group[g]:
            after = [a for a in commits.of(g) if a.member == m.name and a.t_sent >= t_fault]
            if not after:
                problems.append(f"{g}: {m.name} never had a commit acknowledged after the fault")
            else:
                notes.append(f"{m.name}: first commit acknowledged {min(a.t_acked for a in after) - t_fault:.2f}s "
                             f"after the fault")
    failures = [f for f in commits.failures if f[0] >= t_fault]
    notes.append(f"commits failed after the fault: {len(failures)}: "
                 + "; ".join(f"+{t - t_fault:.2f}s {m}: {e[:90]}" for t, _, m, e in failures[:12]))
    reads = [s for s in sampler.samples if s.t_sent >= t_fault]
    notes.append(f"offset reads failed: {len(sampler.errors)}; first read after the fault answered "
                 + (f"+{reads[0].t_received - t_fault:.2f}s by node {reads[0].node}; nodes answering after the fault: "
                    f"{sorted({s.node for s in reads})}" if reads else "never"))

    probe = _wait(lambda: (s := loop.run(_committed(cluster, gprobe, topic))) is not None and (s,), 30)
    if probe is None or probe[0] != probe_expected:
        problems.append(f"{gprobe}: committed offset after the fail-over is {probe and probe[0]}, expected "
                        f"{probe_expected} " + ("(777 was acknowledged right before the kill)" if fault == "kill"
                                                else "(777 was sent only to the fenced zombie)"))
    if fault == "pause":
        try:
            answer = zombie_answer.result(60)
            code = int(answer.topics[0].partitions[0].error_code)
        except Exception as exc:  # noqa: BLE001 - the zombie may also drop the connection when it steps down
            code = exc
        notes.append(f"the zombie answered the commit it got while paused with {code!r}")
        if code == 0:
            problems.append("the paused coordinator acknowledged an OffsetCommit after it was fenced")
        if not _wait(lambda: sorted(_offsets_partition_state(cluster.bootstrap, offsets_partition).isrs) == [1, 2, 3],
                     60, 0.5):
            problems.append(f"the zombie did not rejoin the ISR of {CONSUMER_OFFSETS}-{offsets_partition} in 60 s")
    loop.close()
    problems += _log_problems(cluster)
    print("\n".join(notes))
    assert not problems, "\n".join([*problems, "--", *notes])


async def _committed(cluster, group: str, topic: str) -> int | None:
    client = Client(cluster.bootstrap, client_id="failover-check", request_timeout_ms=5000, retries=3)
    try:
        got = await fetch_committed(client, group, [OTopicPartition(topic, 0)])
        o = got.get(OTopicPartition(topic, 0))
        return None if o is None else o.offset
    finally:
        await client.close()


def test_both_groups_survive_kill_9_of_their_coordinator(cluster):
    run_failover(cluster, "kill")


def test_both_groups_survive_a_paused_coordinator_that_must_be_fenced(cluster):
    run_failover(cluster, "pause")
