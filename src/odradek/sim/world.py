"""The simulated world: one seed, one clock, one event queue; members, network, coordinator brokers.

Theory of operation: everything that happens is an event on a heap ordered by (simulated
ms, sequence number), so two runs of a seed process the same events in the same order.
Every random choice comes from the seed's one `random.Random` (member ids, delays, faults,
topic sizes), no code here reads a clock, and the coordinator and clients are the real
sans-I/O objects (see coordinator.py, cluster.py and member.py). After every event the
world re-arms the coordinator brokers' timers and each member's next wake-up, then runs the
checkers. The epochs checker judges the coordinator's state only when everything it wrote
for the group is committed: epochs are promised of what clients can be told, and a
fail-over may rightly lose records nobody acknowledged.

A run has two phases (DESIGN principle 7): faults for `fault_ms`, drawn by the seed's
FaultPlan (swarm testing), then a quiet phase in which the network heals, the coordinator
brokers are up and told who leads, crashed members that were to come back do, and the
group must converge within a bound.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import uuid
from collections import deque
from collections.abc import Callable

from odradek.client.versions import CLIENT_VERSIONS, negotiate
from odradek.coordinator.config import CoordinatorConfig

from . import checkers as C
from .cluster import SimCluster
from .coordinator import SimTopic
from .data import SimData
from .eos import OUTPUT_TOPIC
from .faults import FaultPlan
from .member import SimMember
from .network import Link, Network

TRACE_TAIL = 60


def _names(world, parts) -> list:
    return sorted((world.topic_name(t), p) for t, ps in parts.items() for p in ps)


class Stats:
    def __init__(self) -> None:
        self.revocations = 0
        self.acquisitions = 0
        self.seen: set[tuple[str, int]] = set()
        self.member_events = 0
        self.txn_committed = 0  # EOS workload
        self.txn_aborted = 0

    def acquired(self, names) -> None:
        self.acquisitions += len(names)
        self.seen.update(names)

    @property
    def movements(self) -> int:
        """Acquisitions beyond each partition's first owner."""
        return self.acquisitions - len(self.seen)


class World:
    def __init__(self, seed: int, protocol: str | None = None, *, keep_trace: bool = False,
                 adaptive_heartbeat: bool = True) -> None:
        from .result import GROUP_PROTOCOLS, split_protocol

        self.seed = seed
        rng = self.rng = random.Random(seed)
        self.plan = FaultPlan.draw(rng)
        picked = rng.choice(GROUP_PROTOCOLS)  # drawn even when given, so `--protocol` replays the seed as it ran
        protocol, self.eos = split_protocol(protocol)
        self.protocol = protocol or picked  # the group protocol
        self.group_id = f"group-{seed}"
        self.now = 0
        self._seq = 0
        self.events: list = []
        self.steps = 0
        self._hash = hashlib.sha256()
        self.tail: deque[str] = deque(maxlen=TRACE_TAIL)
        self.full_trace: list[str] | None = [] if keep_trace else None
        self.first_tail: list[str] | None = None
        self.violations: list[tuple[int, str, str]] = []
        self.stats = Stats()
        self.faults_on = True
        self._holdings = None
        self._wakes: dict[str, int] = {}
        self.restarts_due = 0  # crashed members that will come back
        self.launches_due = 0  # members of the initial set not started yet
        self._tick_at: int | None = None
        self._view = None

        # --- the seed's setting
        self.session_ms = rng.choice((2000, 4000, 8000))
        self.heartbeat_ms = max(50, self.session_ms // rng.choice((3, 5, 8)))
        # Java's defaults keep the rebalance timeout (max.poll.interval.ms, 300 s) far above the
        # session (45 s) and heartbeat (3 s); a classic group whose heartbeat interval exceeds
        # the rebalance timeout livelocks (members learn of each rebalance too late, are
        # dropped, and their rejoin starts the next one), so the seeds stay within that.
        self.rebalance_ms = self.session_ms * rng.choice((1, 2, 3))
        self.commit_ms = rng.choice((200, 1000, 3000))
        self.static = rng.random() < 0.4
        self.fault_ms = rng.randint(10_000, 40_000)
        self.config = CoordinatorConfig(
            offsets_topic_partitions=rng.choice((1, 2, 4)), session_timeout_ms=self.session_ms,
            min_session_timeout_ms=1000, max_session_timeout_ms=60_000, heartbeat_interval_ms=self.heartbeat_ms,
            min_heartbeat_interval_ms=50, classic_min_session_timeout_ms=1000,
            initial_rebalance_delay_ms=rng.choice((0, 300, 1000)),
            assignors=rng.choice((("uniform", "range"), ("range", "uniform"))),
            # odradek's adaptive interval for reconciling members (consumer/interval.py), on
            # by default as in the broker; off: every member heartbeats at heartbeat_ms, as
            # in Kafka. Not drawn from the rng, so a seed replays alike either way.
            reconciling_heartbeat_interval_ms=250 if adaptive_heartbeat else 0)
        self.adaptive_heartbeat = adaptive_heartbeat
        self.server_assignor = rng.choice((None, "uniform", "range")) if self.protocol in ("consumer", "mixed") \
            else None
        self.subscription = ["t0", "t1"] if rng.random() < 0.5 else ["t0"]
        self.brokers = rng.choice((2, 3))  # __consumer_offsets replicated on every one
        if self.eos:
            # The EOS workload (issue 19): __transaction_state partitions, the output topic,
            # the producers' transaction timeout, the most records a transaction reads from
            # one partition.
            self.txn_partitions = rng.choice((1, 2, 3))
            self.out_partitions = rng.randint(1, 4)
            self.txn_timeout_ms = rng.choice((3000, 6000, 10_000, 20_000))
            self.batch_max = rng.choice((1, 5, 20))

        self.network = Network(rng, self.plan, self.schedule)
        self.coordinator = SimCluster(self, self.brokers, self.txn_partitions if self.eos else 0)
        self.versions = {int(k): v for k, v in negotiate(self.coordinator.supported).items()
                         if isinstance(v, int) and k in CLIENT_VERSIONS}
        self.id_names: dict[uuid.UUID, str] = {}
        self._deleted = 0
        self.create_topic("t0", rng.randint(1, 6))
        if "t1" in self.subscription and rng.random() < 0.6:
            self.create_topic("t1", rng.randint(1, 4))
        self.data = SimData(lambda name: self.partition_counts([name]).get(name))
        if self.eos:
            self.create_topic(OUTPUT_TOPIC, self.out_partitions)

        self.members: dict[str, SimMember] = {}
        self._serial = 0
        self.commit_checker = C.CommitFencing(self)
        self.epochs_checker = C.Epochs()
        self.stable_checker = C.StableAssignment()
        self.checkers: list[C.Checker] = [C.CoordinatorOwnership(), C.ClientOwnership(), self.stable_checker,
                                          self.epochs_checker, self.commit_checker]
        self.replay_checker = C.Replay()
        self.coordinator.observers.append(self.commit_checker)
        self.fenced_checker = C.FencedCoordinator(self)
        self.coordinator.all_observers.append(self.fenced_checker)
        self.coordinator.failover_observers.append(self.fenced_checker)
        self.eos_checker = C.ExactlyOnce(self) if self.eos else None
        if self.eos_checker is not None:
            self.checkers.append(self.eos_checker)
            self.data.observers.append(self.eos_checker)
            self.coordinator.observers.append(self.eos_checker)

    # ------------------------------------------------------------------ events

    def schedule(self, at: int, label: str, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (int(at), self._seq, label, action))

    def trace(self, line: str) -> None:
        text = f"{self.now:>8} {line}"
        self._hash.update(text.encode())
        self.tail.append(text)
        if self.full_trace is not None:
            self.full_trace.append(text)

    @property
    def trace_digest(self) -> str:
        return self._hash.hexdigest()

    def violation(self, kind: str, message: str) -> None:
        if len(self.violations) < 100:
            self.violations.append((self.now, kind, message))
            self.trace(f"VIOLATION {kind}: {message}")
            if self.first_tail is None:
                self.first_tail = list(self.tail)  # the events that led to the first report

    def run_until(self, until: int, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to `until`; True if `stop()` held after some step."""
        while self.events and self.events[0][0] <= until:
            at, _, label, action = heapq.heappop(self.events)
            self.now = at
            self.steps += 1
            self._holdings = None
            self.trace(label)
            action()
            self._after_step()
            if stop is not None and stop():
                return True
        self.now = max(self.now, until)
        return False

    def _after_step(self) -> None:
        self._holdings = None
        c = self.coordinator
        d = c.next_deadline()
        if d is not None and (self._tick_at is None or d < self._tick_at or self._tick_at < self.now):
            self._tick_at = max(d, self.now)
            self.schedule(self._tick_at, "coordinator timers", self._tick)
        for m in list(self.members.values()):
            wake = m.next_wake()
            if wake is None:
                continue
            wake = max(wake, self.now + 1)  # what is due now, the pump that just ran has done
            if self._wakes.get(m.name, -1) <= self.now or wake < self._wakes[m.name]:
                self._wakes[m.name] = wake
                self.schedule(wake, f"{m.name} wakes", lambda m=m: m.pump(self.now))
        settled = c.settled()
        for checker in self.checkers:
            if checker is self.epochs_checker and not settled:
                continue
            checker.check(self)
        self._trace_coordinator()

    def _trace_coordinator(self) -> None:
        """A line whenever the coordinator's view of the group changes (epochs, holdings)."""
        group, cgroup = C.consumer_group(self), C.classic_group(self)
        if group is not None:
            view = (group.state.value, group.group_epoch, tuple(sorted(
                (self._who(mid), m.member_epoch, m.state.name, tuple(_names(self, m.assigned)),
                 tuple(_names(self, m.pending_revocation))) for mid, m in group.members.items())))
        elif cgroup is not None:
            held = self.holdings() or {}
            view = (cgroup.state.value, cgroup.generation, tuple(sorted(
                (self._who(mid), tuple(sorted(held.get(mid, {})))) for mid in cgroup.members)))
        else:
            view = None
        if view != self._view:
            self._view = view
            self.trace(f"coordinator view: {view}")

    def _who(self, member_id: str) -> str:
        for m in self.members.values():
            if m.member_id == member_id:
                return m.name
        return member_id[:8]

    def _tick(self) -> None:
        self._tick_at = None
        self.coordinator.tick()

    def _send_down(self, link: Link, frame: bytes) -> None:
        member = self.members.get(link.member)
        if member is None:
            return
        self.network.send_down(link, self.now, lambda: member.on_frame(link, frame, self.now))

    # ------------------------------------------------------------------ what checkers ask

    def describe(self) -> list[str]:
        """The state now, in a few lines: for a failure's report."""
        c = self.coordinator
        lines = c.describe()
        group, cgroup = C.consumer_group(self), C.classic_group(self)
        if not c.up:
            lines.append("coordinator: down")
        elif group is not None:
            lines.append(f"coordinator: consumer group {group.state.value}, epoch {group.group_epoch}, target epoch "
                         f"{group.target_epoch}")
            for mid, m in sorted(group.members.items()):
                lines.append(f"  member {mid[:8]} epoch {m.member_epoch} {m.state.name} classic={m.classic is not None} "
                             f"assigned {_names(self, m.assigned)} revoking {_names(self, m.pending_revocation)}")
        elif cgroup is not None:
            lines.append(f"coordinator: classic group {cgroup.state.value}, generation {cgroup.generation}, "
                         f"leader {str(cgroup.leader_id)[:8]}")
            held = self.holdings() or {}
            for mid in sorted(cgroup.members):
                lines.append(f"  member {mid} holds {sorted(held.get(mid, {}))}")
        else:
            lines.append("coordinator: no group")
        for m in self.members.values():
            core = m.core
            lines.append(f"{m.name} ({m.kind}) {core.member_id} {core.state.name} owns {sorted(m.owned())} "
                         f"pending {[p.api for p in m.pending.values()]} revoking {m.revoking is not None} "
                         f"alive {m.alive} link {m.link.id if m.link else None}/{m.link.alive if m.link else None} "
                         f"to b{m.link.broker if m.link else None}")
        return lines

    def rebalances(self) -> int:
        return self.epochs_checker.bumps

    def holdings(self):
        if self._holdings is None:
            self._holdings = C.holdings(self)
        return self._holdings

    def live_members(self) -> list[SimMember]:
        return [m for m in self.members.values() if m.alive]

    def classic_only(self) -> bool:
        return self.coordinator.up and C.classic_group(self) is not None

    def topic_name(self, topic_id) -> str:
        name = self.id_names.get(topic_id)  # not .get(id, str(id)): that formats the UUID every time
        return name if name is not None else str(topic_id)

    def partition_counts(self, names) -> dict[str, int]:
        topics = self.coordinator.metadata.topics
        return {n: topics[n].partitions for n in names if n in topics}

    def input_partitions(self) -> list[tuple[str, int]]:
        """EOS: the partitions of the input topics (those subscribed) that exist now."""
        return sorted(self.subscribed_partitions())

    def subscribed_partitions(self) -> set[tuple[str, int]]:
        topics = self.coordinator.metadata.topics
        return {(t, p) for t in self.subscription if t in topics for p in range(topics[t].partitions)}

    def create_topic(self, name: str, partitions: int) -> None:
        tid = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        self.coordinator.metadata.topics[name] = SimTopic(name, tid, partitions)
        self.id_names[tid] = name
        self.trace(f"topic {name} created with {partitions} partitions")
        self.coordinator.topics_changed()

    def add_partitions(self, name: str, count: int) -> None:
        topic = self.coordinator.metadata.topics[name]
        topic.partitions += count
        self.trace(f"topic {name} grows to {topic.partitions} partitions")
        self.coordinator.topics_changed()

    def delete_topic(self, name: str) -> None:
        topic = self.coordinator.metadata.topics.pop(name)
        self._deleted += 1
        self.id_names[topic.topic_id] = f"{name}~{self._deleted}"  # the old incarnation's partitions
        self.commit_checker.topic_deleted(name)
        self.trace(f"topic {name} deleted")
        self.coordinator.topics_changed()

    # ------------------------------------------------------------------ members

    def member_kind(self, *, restart_of: SimMember | None = None) -> str:
        if self.protocol != "mixed":
            return self.protocol
        if restart_of is not None and restart_of.kind == "consumer":
            return "consumer"  # a rolling upgrade does not go back
        return self.rng.choice(("consumer", "classic-cooperative"))

    def start_member(self, *, instance: str | None = None, kind: str | None = None,
                     transactional_id: str | None = None) -> SimMember:
        self._serial += 1
        name = f"m{self._serial}"
        if self.static and instance is None:
            instance = f"instance-{self._serial}"
        kind = kind or self.member_kind()
        eos = None
        if self.eos:
            # One transactional id per member process; a restart keeps it (sim/eos.py).
            eos = {"transactional_id": transactional_id or f"{self.group_id}-txn-{self._serial}",
                   "timeout_ms": self.txn_timeout_ms, "out_partitions": self.out_partitions,
                   "batch_max": self.batch_max}
        m = SimMember(self, name, kind, instance_id=instance,
                      session_timeout_ms=self.session_ms, rebalance_timeout_ms=self.rebalance_ms,
                      heartbeat_interval_ms=self.heartbeat_ms, server_assignor=self.server_assignor,
                      commit_interval_ms=self.commit_ms, eos=eos)
        self.members[name] = m
        self.stats.member_events += 1
        self.trace(f"{name} starts ({kind}{', ' + instance if instance else ''})")
        m.core.subscribe(list(self.subscription), now=self.now)
        m.pump(self.now)
        return m

    def crash_member(self, m: SimMember, restart_after: int | None) -> None:
        self.trace(f"{m.name} crashes" + (f", back in {restart_after} ms" if restart_after is not None else ""))
        m.crash()
        del self.members[m.name]
        self.stats.member_events += 1
        if restart_after is not None:
            kind = self.member_kind(restart_of=m)
            self.restarts_due += 1
            tid = m.eos.tid if m.eos is not None else None

            def restart() -> None:
                self.restarts_due -= 1
                self.start_member(instance=m.instance_id, kind=kind, transactional_id=tid)

            self.schedule(self.now + restart_after, f"restart of {m.name}", restart)

    def member_failed(self, m: SimMember) -> None:
        """A fatal client error: the application's supervisor restarts the process."""
        self.crash_member(m, restart_after=self.rng.randint(500, 3000))

    def member_stopped(self, m: SimMember) -> None:
        if m.name in self.members:
            self.trace(f"{m.name} has left")
            m.crash()
            del self.members[m.name]

    def leave_member(self, m: SimMember) -> None:
        self.trace(f"{m.name} leaves")
        self.stats.member_events += 1
        m.leave(self.now)

    def slow_delay(self, m: SimMember) -> int:
        if self.faults_on and self.rng.random() < self.plan.rate.get("slow_member", 0.0):
            delay = self.rng.randint(self.rebalance_ms // 2, self.rebalance_ms * 2)
            self.trace(f"{m.name} is slow to revoke: {delay} ms")
            return delay
        return 0
