"""Model checking of partition replication: the real state machines, a simulated world.

The simulation-that-runs-the-real-code principle: `LeaderPartition` (leader.py), the
truncation protocol (follower.py) and the leader epoch cache (log/epochs.py) are driven
as the broker will drive them, by a small deterministic harness that plays everything
else -- three replicas with in-memory logs, a metadata store with compare-and-set, a
controller, producers, the clock and the faults -- from one `random.Random(seed)`.
No sockets, files, threads or wall clock: a seed is a complete, replayable history.

What is modelled (Kafka is the reference throughout):

  * One partition on brokers 1, 2, 3; `min.insync.replicas` 2, `replica.lag.time.max.ms`
    1000, a broker session timeout of 1500 ms. A log is a list of (leader_epoch, payload)
    records, offset = index; it survives crashes (no unflushed data is lost), and so does
    the epoch cache; the high watermark comes back as last checkpointed (every 5 s).
  * The store holds (leader, leader_epoch, isr, partition_epoch) and the registered
    brokers. An ISR proposal is applied after a random delay as a compare-and-set, with
    AlterPartition's checks: the proposer is the leader of that leader epoch, the
    partition epoch matches, new members are registered (KIP-497, KIP-841). Its answer
    reaches the proposer before the store's watch does.
  * The controller (KRaft's ReplicationControlManager) fences a broker whose heartbeats
    stopped for the session timeout, or which came back as a new incarnation; it removes
    a fenced broker from the ISR (but never the last member), elects a new leader among
    registered ISR members when the leader is fenced (clean elections only), and leaves
    the partition offline (leader -1) when there is none, until an ISR member registers.
    Every leader change bumps the leader epoch; every change bumps the partition epoch.
  * Replicas watch the store. A leader runs `LeaderPartition`; followers fetch from the
    leader they know, with their leader epoch (Fetch's CurrentLeaderEpoch: a mismatch is
    FENCED_LEADER_EPOCH), their LEO and the epoch they last fetched (KIP-595's
    DivergingEpoch loop). Producers send acks=all (mostly) or acks=1 to any broker that
    acts as a leader -- a stale client may well pick a zombie.
  * Faults: crash (restart later as a new incarnation), pause (SIGSTOP: the process does
    nothing, then resumes with its stale state), isolation (a network partition around one
    broker: no fetches, store or heartbeats, but some of its clients still reach it), slow
    follower (it rarely fetches). A leader that was replaced while paused or cut off comes
    back as a zombie: it keeps acting on what it knew for a few steps (its watch has not
    caught up) -- accepting appends, ticking, proposing ISR changes -- before it observes
    the store. Faults cluster: after an election the new leader often fails again within
    a few steps, which is what builds histories with epochs the next leader never had.
  * Time advances 1-50 ms a step; acks=all waits are tried on half the steps (purgatory
    lag, so NOT_ENOUGH_REPLICAS_AFTER_APPEND is reachable).

What is not: several partitions, log start offsets (retention, DeleteRecords), unclean
election, ELR (KIP-966), message loss or reordering between connected processes, lost
unflushed writes on crash, transactions and idempotence, fetch sessions, partitions that
split the brokers into groups, a resumed *follower* with a stale view (it refreshes its
metadata before fetching again). That last one is a choice: a zombie leader and a stale
follower of the same dead epoch can talk to each other in Kafka too, and the zombie may
then acknowledge records -- safely, as they are on an ISR member -- which checker 5 as
stated below would call a violation.

The checkers, each of which must be able to fail (see test_the_checkers_catch_a_defect):

  1. lost-ack: every acks=all acknowledged record is, at its offset, on at least
     min.insync.replicas replicas and in the log of every member of the store's ISR at
     the moment it is acknowledged, and in the final leader's and every final ISR
     member's log; no ISR member ever truncates below it.
  2. prefix: the records below every replica's high watermark form one history that never
     changes (stronger than "any two live replicas agree below the smaller of their high
     watermarks", which it implies); no replica truncates below its high watermark.
  3. hw: within one leader epoch the leader's high watermark only moves forward and only
     through a HighWatermark effect; when published it is not above the LEO of any member
     of the leader's maximal ISR (KIP-497) nor of the store's ISR, and min.insync.replicas
     replicas hold it (Kafka 3.7+); the current leader's is never above the LEO of a store
     ISR member, checked at every step. This is the strict form: "ISR" is the union of
     the maximal and the store's ISR, and a member's LEO is its actual log end, not what
     the leader last heard (which is what the leader computes with, and is lower).
  4. convergence: after the quiet phase (faults healed, producers stopped) every replica
     is live, in the ISR, with the same log and a high watermark at its end.
  5. zombie-ack: a record a leader appended after the store replaced it is never
     acknowledged. (A replaced leader may still acknowledge records it appended before:
     a late AlterPartition answer, or the clock letting a lagging non-ISR follower stop
     holding the high watermark back. That is Kafka's behaviour and safe -- checker 1
     verifies such records at that moment; the stats count them.)
  Plus protocol: the truncation loop converges, no unexpected OffsetOutOfRange, every
  ISR proposal names the leader's own epochs and includes the leader.

Run a sweep by hand: `python tests/replication/test_model.py [first_seed] [seeds] [steps]`.
"""

from __future__ import annotations

import functools
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import pytest

from odradek.log.epochs import LeaderEpochCache
from odradek.protocol.errors import NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND
from odradek.replication import follower
from odradek.replication.follower import EpochEndOffset, OffsetOutOfRange, Truncation
from odradek.replication.leader import (
    HighWatermark,
    IsrState,
    LeaderPartition,
    ProposeIsr,
)

IDS = (1, 2, 3)
NO_LEADER = -1
SEEDS = range(100)
STEPS = 3000
TRACE_TAIL = 30
MAX_TRUNCATION_ROUNDS = 20  # a DivergingEpoch loop longer than this is a protocol bug


@dataclass(frozen=True)
class Config:
    steps: int = STEPS
    quiet_steps: int = 3000  # an upper bound; the quiet phase ends once everything converged
    min_isr: int = 2
    max_lag_ms: int = 1000  # replica.lag.time.max.ms
    session_timeout_ms: int = 1500  # broker.session.timeout.ms
    fetch_batch: int = 5  # records per fetch response
    fault_rate: float = 0.015  # per step
    storm_rate: float = 0.3  # per election: the new leader fails again within a few steps
    produce_rate: float = 0.35  # per step
    fetch_rate: tuple[float, float] = (0.3, 0.9)  # per step; each replica draws its own in this range
    acks_all_share: float = 0.8
    isolated_clients: float = 0.2  # the share of produce requests that still reach an isolated broker
    purgatory_rate: float = 0.5  # per step: the delayed produces are tried (they lag the HW a little)
    max_store_delay_ms: int = 150  # an ISR proposal's time in flight
    max_zombie_steps: int = 20  # how long a resumed leader acts before its watch catches up
    hw_checkpoint_ms: int = 5000  # replica.high.watermark.checkpoint.interval.ms
    max_violations: int = 1  # stop there: the trace then ends at the (first) violation


@dataclass(frozen=True)
class PartitionState:
    """The store's record of the partition (the etcd key, later)."""

    leader: int
    leader_epoch: int
    isr: frozenset[int]
    partition_epoch: int

    def __str__(self) -> str:
        return (f"leader={self.leader} le={self.leader_epoch} isr={sorted(self.isr)} "
                f"pe={self.partition_epoch}")


@dataclass
class Replica:
    id: int
    log: list[tuple[int, str]] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw: int = 0
    hw_checkpoint: int = 0  # replication-offset-checkpoint: what a restart reads back
    alive: bool = True
    incarnation: int = 0
    paused_until: int | None = None
    isolated_until: int | None = None  # cut off from the other brokers and the store
    restart_at: int | None = None
    slow_until: int = 0
    zombie_steps: int = 0  # > 0: back, acting on stale state, not watching the store yet
    last_heartbeat: int = 0
    known_leader: int = NO_LEADER  # what its last look at the store said
    known_epoch: int = -1
    lp: LeaderPartition | None = None  # set while it acts as the leader
    next_tick: int = 0
    pending: int | None = None  # the id of the ISR proposal `lp` waits on
    replies: list[tuple[int, int | None]] = field(default_factory=list)  # answers it could not get yet

    @property
    def leo(self) -> int:
        return len(self.log)

    @property
    def running(self) -> bool:
        return self.alive and self.paused_until is None

    @property
    def connected(self) -> bool:
        """Running and reachable by the other brokers and the store."""
        return self.running and self.isolated_until is None

    @property
    def watching(self) -> bool:
        return self.connected and self.zombie_steps == 0


@dataclass
class Wait:
    """An acks=all produce waiting in the leader's purgatory."""

    broker: int
    lp: LeaderPartition
    required: int  # the batch's end: complete once the high watermark reaches it
    records: list[tuple[int, tuple[int, str]]]  # (offset, record)
    after_replacement: bool  # appended while the store already had another leader epoch


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    step: int


class Model:
    """One seeded run: the world around the real state machines, and the checkers."""

    def __init__(self, seed: int, cfg: Config | None = None) -> None:
        self.seed = seed
        self.cfg = cfg or Config()
        self.rng = random.Random(seed)
        self.now = 0
        self.step_no = 0
        self.replicas = {b: Replica(b) for b in IDS}
        self.state = PartitionState(IDS[0], 0, frozenset(IDS), 0)
        self.registered = {b: 0 for b in IDS}  # broker -> registered incarnation
        self.inflight: list[tuple[int, int, int, int, ProposeIsr]] = []  # (at, id, broker, inc, proposal)
        self.next_proposal = 0
        self.next_payload = 0
        self.waits: list[Wait] = []
        self.acked: dict[int, tuple[int, str]] = {}  # offset -> acknowledged record
        self.committed: list[tuple[int, str]] = []  # the one history below the high watermarks
        self.checked = {b: 0 for b in IDS}  # how much of each log was compared with `committed`
        self.hw_by_epoch: dict[int, int] = {}
        self.trace: list[str] = []
        self.violations: list[Violation] = []
        self.stats: Counter[str] = Counter()
        self.converged_at: int | None = None
        self.first_violation: int | None = None  # its index in the trace, + 1
        self.next_checkpoint = self.cfg.hw_checkpoint_ms
        self.storm_step = -1  # when the next leader fault after an election is due
        self.fetch_rate = {b: self.rng.uniform(*self.cfg.fetch_rate) for b in IDS}  # some links are slow
        self.publish()

    # ------------------------------------------------------------------ running

    def run(self) -> Model:
        for _ in range(self.cfg.steps):
            if self.stopped:
                return self
            self.step(faults=True)
        self.heal()
        for _ in range(self.cfg.quiet_steps):
            if self.stopped:
                return self
            if self.converged():
                self.converged_at = self.step_no
                break
            self.step(faults=False)
        else:
            self.violate("convergence", f"not converged after {self.cfg.quiet_steps} quiet steps: "
                         + self.describe())
        self.final_checks()
        return self

    @property
    def stopped(self) -> bool:
        return len(self.violations) >= self.cfg.max_violations

    def step(self, *, faults: bool) -> None:
        self.step_no += 1
        self.now += self.rng.randint(1, 50)
        if faults and self.rng.random() < self.cfg.fault_rate:
            self.inject_fault()
        self.wake()
        for r in self.replicas.values():
            if r.connected:
                r.last_heartbeat = self.now
        if self.now >= self.next_checkpoint:  # Kafka ReplicaManager.checkpointHighWatermarks
            self.next_checkpoint = self.now + self.cfg.hw_checkpoint_ms
            for r in self.replicas.values():
                if r.running:
                    r.hw_checkpoint = r.hw
        self.controller()
        self.deliver_store_answers()
        if faults and self.storm_step == self.step_no:
            self.inject_fault(storm=True)
        for r in self.replicas.values():
            self.leader_duties(r)
        order = list(IDS)
        self.rng.shuffle(order)
        for b in order:
            if self.rng.random() < self.fetch_rate[b]:
                self.fetch(self.replicas[b])
        if faults and self.rng.random() < self.cfg.produce_rate:
            self.produce()
        if self.rng.random() < self.cfg.purgatory_rate:
            self.check_acks()
        self.check_step()

    def event(self, text: str) -> None:
        self.trace.append(f"{self.step_no:5} {self.now:7}ms {text}")

    def violate(self, kind: str, message: str) -> None:
        self.violations.append(Violation(kind, message, self.step_no))
        self.event(f"VIOLATION {kind}: {message}")
        if self.first_violation is None:
            self.first_violation = len(self.trace)

    def describe(self) -> str:
        parts = [str(self.state)]
        for r in self.replicas.values():
            role = f"leader(le={r.lp.leader_epoch} isr={sorted(r.lp.isr)} {r.lp.state.value})" if r.lp else "follower"
            status = ("dead" if not r.alive else "paused" if r.paused_until is not None
                      else "isolated" if r.isolated_until is not None else "up")
            parts.append(f"b{r.id} {status} {role} leo={r.leo} hw={r.hw} cache={[tuple(e) for e in r.cache.entries()]}")
        return "; ".join(parts)

    def report(self) -> str:
        lines = [f"seed {self.seed}: {len(self.violations)} violation(s)"]
        lines += [f"  step {v.step} {v.kind}: {v.message}" for v in self.violations[:5]]
        lines.append(f"state at the end: {self.describe()}")
        end = self.first_violation or len(self.trace)
        lines.append(f"the {TRACE_TAIL} events up to {'the first violation' if self.first_violation else 'the end'}:")
        lines += self.trace[max(0, end - TRACE_TAIL):end]
        return "\n".join(lines)

    # ------------------------------------------------------------------ faults

    def inject_fault(self, *, storm: bool = False) -> None:
        running = [r for r in self.replicas.values() if r.running]
        if not running:
            return
        kind = self.rng.choice(("crash", "pause", "isolate") if storm else ("crash", "pause", "isolate", "slow"))
        leader = self.replicas.get(self.state.leader)
        if leader is not None and leader.running and (storm or self.rng.random() < 0.5):
            r = leader  # leader faults are the interesting ones
        else:
            r = self.rng.choice(running)
        if kind == "crash":
            # The process state goes; the log and the epoch cache stay, the high watermark
            # is what was last checkpointed. Its acks=all waits fail with it (check_acks).
            r.alive, r.lp, r.pending, r.replies, r.zombie_steps = False, None, None, [], 0
            r.hw = min(r.hw_checkpoint, r.leo)  # Kafka: the log's HW is bounded by its end
            r.restart_at = self.now + self.rng.randint(100, 5000)
            self.stats["crash"] += 1
            self.event(f"FAULT crash b{r.id} (restart at {r.restart_at}ms)")
        elif kind == "pause":
            r.paused_until = self.now + self.rng.randint(100, 4000)
            self.stats["pause"] += 1
            self.event(f"FAULT pause b{r.id} until {r.paused_until}ms")
        elif kind == "isolate":
            # A network partition around one broker: no fetches to or from it, no store, no
            # heartbeats; its own clients still reach it, so a leader keeps taking appends.
            if r.isolated_until is None:
                r.isolated_until = self.now + self.rng.randint(100, 5000)
                self.stats["isolate"] += 1
                self.event(f"FAULT isolate b{r.id} until {r.isolated_until}ms")
        else:
            r.slow_until = self.now + self.rng.randint(500, 4000)
            self.stats["slow"] += 1
            self.event(f"FAULT slow b{r.id} until {r.slow_until}ms")

    def heal(self) -> None:
        """The quiet phase: every fault ends now; nothing new is produced."""
        self.event("QUIET: faults healed, producers stopped")
        for r in self.replicas.values():
            if not r.alive:
                r.restart_at = self.now
            if r.paused_until is not None:
                r.paused_until = self.now
            if r.isolated_until is not None:
                r.isolated_until = self.now
            r.slow_until = 0

    def wake(self) -> None:
        for r in self.replicas.values():
            if not r.alive and r.restart_at is not None and r.restart_at <= self.now:
                # A new incarnation: it registers again, and the controller's answer to that
                # (fence the old incarnation, unfence the new one) tells it its role.
                r.alive, r.restart_at, r.incarnation = True, None, r.incarnation + 1
                r.known_leader, r.known_epoch = NO_LEADER, -1
                self.event(f"restart b{r.id} (incarnation {r.incarnation}) leo={r.leo} hw={r.hw}")
            if r.paused_until is not None and r.paused_until <= self.now:
                r.paused_until = None
                self.event(f"resume b{r.id}")
                self.reconnect(r)
            if r.isolated_until is not None and r.isolated_until <= self.now:
                r.isolated_until = None
                self.event(f"b{r.id} reconnects")
                self.reconnect(r)

    def reconnect(self, r: Replica) -> None:
        """`r` runs and reaches the others again (SIGCONT, or the partition healed)."""
        if not r.connected:
            return
        for pid, partition_epoch in r.replies:
            self.answer(r, pid, partition_epoch)
        r.replies = []
        if r.lp is not None:
            # It still believes it leads until its watch catches up.
            r.zombie_steps = self.rng.randint(0, self.cfg.max_zombie_steps)
            if self.replaced(r):
                self.stats["zombie"] += 1
                self.event(f"b{r.id} is back as a zombie leader of epoch {r.lp.leader_epoch} "
                           f"for {r.zombie_steps} steps")
        if r.zombie_steps == 0:
            self.observe(r)

    def replaced(self, r: Replica) -> bool:
        assert r.lp is not None
        return self.state.leader != r.id or self.state.leader_epoch != r.lp.leader_epoch

    # ------------------------------------------------------------------ store and controller

    def set_state(self, new: PartitionState, why: str) -> None:
        # Faults cluster: a leader that just took over (perhaps with a shorter log than
        # another ISR member, and a fresh epoch) failing again at once is what makes
        # histories with epochs the next leader never had (KIP-279's cases).
        elected = new.leader != NO_LEADER and new.leader_epoch != self.state.leader_epoch
        if elected and self.rng.random() < self.cfg.storm_rate:
            self.storm_step = self.step_no + self.rng.randint(0, 3)
        self.state = new
        self.event(f"store {new} ({why})")

    def publish(self) -> None:
        """The store's watch: every process that is running and watching sees the change."""
        for r in self.replicas.values():
            if r.watching:
                self.observe(r)

    # Kafka ReplicationControlManager.handleBrokerFenced / handleBrokerUnfenced
    def controller(self) -> None:
        changed = False
        for b in IDS:
            r = self.replicas[b]
            live = self.now - r.last_heartbeat <= self.cfg.session_timeout_ms
            if b in self.registered and (not live or self.registered[b] != r.incarnation):
                self.fence(b)
                changed = True
            if live and r.alive and b not in self.registered:
                self.unfence(b)
                changed = True
        if changed:
            self.publish()

    def fence(self, b: int) -> None:
        del self.registered[b]
        s = self.state
        self.event(f"controller: fence b{b}")
        if s.leader == b:
            candidates = sorted(x for x in s.isr if x != b and x in self.registered)
            if candidates:
                new = self.rng.choice(candidates)
                self.stats["election"] += 1
                self.set_state(PartitionState(new, s.leader_epoch + 1, s.isr - {b}, s.partition_epoch + 1),
                               f"leader b{b} fenced: b{new} elected")
            else:
                # No registered ISR member: offline. The ISR keeps its last members.
                self.stats["offline"] += 1
                self.set_state(replace(s, leader=NO_LEADER, leader_epoch=s.leader_epoch + 1,
                                       partition_epoch=s.partition_epoch + 1), f"leader b{b} fenced: offline")
        elif b in s.isr and len(s.isr) > 1:
            self.set_state(replace(s, isr=s.isr - {b}, partition_epoch=s.partition_epoch + 1),
                           f"b{b} fenced: out of the ISR")

    def unfence(self, b: int) -> None:
        self.registered[b] = self.replicas[b].incarnation
        s = self.state
        self.event(f"controller: unfence b{b}")
        if s.leader == NO_LEADER and b in s.isr:
            self.stats["election"] += 1
            self.set_state(replace(s, leader=b, leader_epoch=s.leader_epoch + 1,
                                   partition_epoch=s.partition_epoch + 1), f"b{b} back: elected")

    # Kafka's controller answering AlterPartition
    def deliver_store_answers(self) -> None:
        def arrived(x: tuple[int, int, int, int, ProposeIsr]) -> bool:
            return x[0] <= self.now and self.replicas[x[2]].isolated_until is None

        due = sorted(x for x in self.inflight if arrived(x))
        self.inflight = [x for x in self.inflight if not arrived(x)]
        for _, pid, b, incarnation, p in due:
            s = self.state
            new_members = p.isr - s.isr
            if s.leader != b or s.leader_epoch != p.leader_epoch:
                error = "FENCED_LEADER_EPOCH"
            elif s.partition_epoch != p.partition_epoch:
                error = "INVALID_UPDATE_VERSION"
            elif any(x not in self.registered for x in new_members):
                error = "INELIGIBLE_REPLICA"
            else:
                error = None
            if error is not None:
                self.stats["isr-rejected"] += 1
                self.event(f"store rejects #{pid} from b{b} isr={sorted(p.isr)}: {error}")
                self.reply(b, incarnation, pid, None)
                continue
            self.stats["isr-shrink" if len(p.isr) < len(s.isr) else "isr-expand"] += 1
            self.set_state(replace(s, isr=p.isr, partition_epoch=s.partition_epoch + 1), f"#{pid} from b{b}")
            self.reply(b, incarnation, pid, s.partition_epoch + 1)  # before the watch, as in Kafka
            self.publish()

    def reply(self, b: int, incarnation: int, pid: int, partition_epoch: int | None) -> None:
        r = self.replicas[b]
        if not r.alive or r.incarnation != incarnation:
            return
        if not r.connected:
            r.replies.append((pid, partition_epoch))
            return
        self.answer(r, pid, partition_epoch)

    def answer(self, r: Replica, pid: int, partition_epoch: int | None) -> None:
        # Kafka Partition.handleAlterPartitionUpdate ignores an answer to a proposal that is
        # no longer the pending one; the API leaves that matching to the driver.
        if r.lp is None or r.pending != pid:
            self.event(f"b{r.id} ignores the answer to #{pid}")
            return
        r.pending = None
        if partition_epoch is None:
            r.lp.isr_rejected()
        else:
            self.apply(r, r.lp.isr_committed(partition_epoch, self.now))

    # ------------------------------------------------------------------ replicas

    def observe(self, r: Replica) -> None:
        """`r` reads the store (its watch fired, or it came back)."""
        s = self.state
        if r.lp is not None:
            if s.leader == r.id and s.leader_epoch == r.lp.leader_epoch:
                self.apply(r, r.lp.replaced(s.isr, s.partition_epoch, self.now))
                if r.lp.state is IsrState.COMMITTED:
                    r.pending = None  # a proposal `replaced` voided: its answer is ignored
                eligible = frozenset(self.registered)
                if r.lp.eligible != eligible:
                    self.apply(r, r.lp.brokers_changed(eligible, self.now))
                return
            self.event(f"b{r.id} stops leading epoch {r.lp.leader_epoch}")
            r.lp, r.pending = None, None  # its waits fail (check_acks)
        if s.leader == r.id:
            self.make_leader(r)
        elif (r.known_leader, r.known_epoch) != (s.leader, s.leader_epoch):
            r.known_leader, r.known_epoch = s.leader, s.leader_epoch
            self.event(f"b{r.id} follows b{s.leader} in epoch {s.leader_epoch}")

    # Kafka Partition.makeLeader
    def make_leader(self, r: Replica) -> None:
        s = self.state
        r.cache.assign(s.leader_epoch, r.leo)  # UnifiedLog.maybeAssignEpochStartOffset
        r.lp = LeaderPartition(r.id, IDS, s.isr, leader_epoch=s.leader_epoch, partition_epoch=s.partition_epoch,
                               log_end_offset=r.leo, high_watermark=r.hw, now_ms=self.now,
                               min_isr=self.cfg.min_isr, max_lag_ms=self.cfg.max_lag_ms,
                               eligible=frozenset(self.registered))
        r.known_leader, r.known_epoch = r.id, s.leader_epoch
        r.pending, r.next_tick = None, self.now + self.cfg.max_lag_ms // 2
        self.hw_by_epoch[s.leader_epoch] = r.hw
        self.event(f"b{r.id} leads epoch {s.leader_epoch} leo={r.leo} hw={r.hw}")

    def leader_duties(self, r: Replica) -> None:
        if not r.running:
            return
        if r.zombie_steps > 0 and r.connected:
            r.zombie_steps -= 1
            if r.zombie_steps == 0:
                self.event(f"b{r.id}'s watch catches up")
                self.observe(r)
        # Kafka ReplicaManager.maybeShrinkIsr, scheduled every replica.lag.time.max.ms / 2
        if r.lp is not None and self.now >= r.next_tick:
            r.next_tick = self.now + self.cfg.max_lag_ms // 2
            self.apply(r, r.lp.tick(self.now))

    def apply(self, r: Replica, effects: list) -> None:
        """The driver carrying out a leader's effects."""
        for effect in effects:
            if isinstance(effect, HighWatermark):
                self.on_high_watermark(r, effect.offset)
            elif isinstance(effect, ProposeIsr):
                self.propose(r, effect)
            else:
                self.violate("protocol", f"unknown effect {effect!r}")

    def on_high_watermark(self, r: Replica, offset: int) -> None:
        lp = r.lp
        assert lp is not None
        epoch = lp.leader_epoch
        if offset <= self.hw_by_epoch.get(epoch, -1):
            self.violate("hw", f"b{r.id} epoch {epoch}: HighWatermark({offset}) not above "
                         f"{self.hw_by_epoch[epoch]}")
        self.hw_by_epoch[epoch] = max(offset, self.hw_by_epoch.get(epoch, -1))
        for b in sorted(lp.maximal_isr | self.state.isr):
            if offset > self.replicas[b].leo:
                self.violate("hw", f"b{r.id} publishes HW {offset} above the LEO {self.replicas[b].leo} of "
                             f"b{b} (maximal ISR {sorted(lp.maximal_isr)}, store ISR {sorted(self.state.isr)})")
        # Kafka 3.7+: what consumers may read is on min.insync.replicas replicas.
        copies = sum(x.leo >= offset for x in self.replicas.values())
        if copies < self.cfg.min_isr:
            self.violate("hw", f"b{r.id} publishes HW {offset}, held by {copies} replica(s) only")
        r.hw = offset
        self.event(f"b{r.id} HW -> {offset}")

    def propose(self, r: Replica, p: ProposeIsr) -> None:
        lp = r.lp
        assert lp is not None
        if (p.leader_epoch, p.partition_epoch) != (lp.leader_epoch, lp.partition_epoch) or r.id not in p.isr:
            self.violate("protocol", f"b{r.id} proposes {p} as leader of epoch {lp.leader_epoch}, "
                         f"partition epoch {lp.partition_epoch}")
        pid = self.next_proposal
        self.next_proposal += 1
        r.pending = pid
        at = self.now + self.rng.randint(0, self.cfg.max_store_delay_ms)
        self.inflight.append((at, pid, r.id, r.incarnation, p))
        self.event(f"b{r.id} proposes #{pid} isr={sorted(p.isr)} le={p.leader_epoch} pe={p.partition_epoch}")

    # Kafka AbstractFetcherThread (follower) + Partition.fetchRecords (leader)
    def fetch(self, f: Replica) -> None:
        if not f.connected or f.lp is not None or f.known_leader == NO_LEADER:
            return
        if self.now < f.slow_until and self.rng.random() > 0.05:
            return
        ldr = self.replicas[f.known_leader]
        if not ldr.connected or ldr.lp is None:
            return  # no answer: it is down, paused, cut off, or no longer leads
        if ldr.lp.leader_epoch != f.known_epoch:
            return  # FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
        for _ in range(MAX_TRUNCATION_ROUNDS):
            last_epoch = f.cache.latest_epoch()
            try:
                diverging = follower.diverging_epoch(ldr.cache, ldr.leo, 0,
                                                     -1 if last_epoch is None else last_epoch, f.leo)
            except OffsetOutOfRange as exc:
                self.violate("protocol", f"b{f.id} fetching from b{ldr.id}: OffsetOutOfRange {exc}")
                return
            if diverging is None:
                break
            t = follower.truncation(diverging, f.cache, f.leo, f.hw)
            self.stats["diverged-in-epoch" if diverging.epoch == last_epoch else "diverged-unknown-epoch"] += 1
            self.stats["truncation-incomplete"] += not t.complete
            self.event(f"b{f.id} last epoch {last_epoch} leo={f.leo}: b{ldr.id} answers {tuple(diverging)}, "
                       f"truncate to {t.offset}{'' if t.complete else ' (again)'}")
            self.truncate(f, t.offset)
        else:
            self.violate("protocol", f"b{f.id}: the DivergingEpoch loop with b{ldr.id} does not converge")
            return
        # Kafka order: the fetch at X tells the leader the follower's LEO is X; the
        # records from X reach the follower with this response.
        # The response carries the high watermark as it was before this fetch moved it
        # (Kafka Partition.fetchRecords reads, then updateFollowerFetchState).
        fetch_offset, leader_hw = f.leo, ldr.lp.high_watermark
        records = ldr.log[fetch_offset:fetch_offset + self.cfg.fetch_batch]
        self.apply(ldr, ldr.lp.follower_fetched(f.id, fetch_offset, 0, self.now))
        for record in records:
            if f.cache.latest_epoch() != record[0]:
                f.cache.assign(record[0], f.leo)
            f.log.append(record)
        f.hw = follower.follower_high_watermark(leader_hw, f.leo)

    # Kafka UnifiedLog.truncateTo
    def truncate(self, r: Replica, offset: int) -> None:
        if offset < r.hw:
            self.violate("prefix", f"b{r.id} truncates to {offset}, below its high watermark {r.hw}")
        if r.id in self.state.isr and self.acked and offset <= max(self.acked):
            self.violate("lost-ack", f"ISR member b{r.id} truncates to {offset}, dropping acknowledged "
                         f"records (the last at {max(self.acked)})")
        if offset < r.leo:
            self.stats["truncated"] += r.leo - offset
        del r.log[offset:]
        # Always, even at the log end: an epoch this broker started as leader without
        # appending to it must go (Kafka truncates the epoch cache there too).
        r.cache.truncate_from_end(offset)
        r.hw = min(r.hw, offset)
        self.checked[r.id] = min(self.checked[r.id], offset)

    # ------------------------------------------------------------------ producers

    # Kafka Partition.appendRecordsToLeader
    def produce(self) -> None:
        leaders = [r for r in self.replicas.values() if r.running and r.lp is not None]
        if not leaders:
            return
        r = self.rng.choice(leaders)
        if r.isolated_until is not None and self.rng.random() > self.cfg.isolated_clients:
            return  # most clients are on the other side of the partition
        lp = r.lp
        assert lp is not None
        acks = -1 if self.rng.random() < self.cfg.acks_all_share else 1
        if lp.append_error(acks) != NONE:
            self.stats["not-enough-replicas"] += 1
            return
        start = r.leo
        records = [(lp.leader_epoch, f"m{self.next_payload + i}") for i in range(self.rng.randint(1, 3))]
        self.next_payload += len(records)
        after_replacement = self.replaced(r)
        r.cache.assign(lp.leader_epoch, start)
        r.log.extend(records)
        self.stats["zombie-append" if after_replacement else "append"] += 1
        self.event(f"b{r.id} appends {start}..{r.leo - 1} acks={acks}{' (zombie)' if after_replacement else ''}")
        self.apply(r, lp.appended(r.leo, self.now))
        if acks == -1:
            self.waits.append(Wait(r.id, lp, r.leo, list(enumerate(records, start)), after_replacement))

    # Kafka DelayedProduce / Partition.checkEnoughReplicasReachOffset
    def check_acks(self) -> None:
        waiting = []
        for w in self.waits:
            r = self.replicas[w.broker]
            if not r.alive or r.lp is not w.lp:
                self.stats["ack-failed"] += 1  # NOT_LEADER_OR_FOLLOWER: the client retries
                continue
            result = None if r.paused_until is not None else w.lp.acks_all_result(w.required)
            if result is None:
                waiting.append(w)
            elif result == NONE:
                self.acknowledge(w)
            elif result == NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                self.stats["not-enough-replicas-after-append"] += 1
            else:
                self.violate("protocol", f"acks_all_result {result!r}")
        self.waits = waiting

    def acknowledge(self, w: Wait) -> None:
        self.stats["acked"] += len(w.records)
        first, last = w.records[0][0], w.records[-1][0]
        if self.replicas[w.broker].lp is not None and self.replaced(self.replicas[w.broker]):
            self.stats["acked-by-replaced-leader"] += len(w.records)
        self.event(f"b{w.broker} acknowledges {first}..{last} (epoch {w.lp.leader_epoch})")
        if w.after_replacement:
            self.violate("zombie-ack", f"b{w.broker}, replaced as leader of epoch {w.lp.leader_epoch}, "
                         f"acknowledges {first}..{last} appended after the store moved on")
        for offset, record in w.records:
            if self.acked.get(offset, record) != record:
                self.violate("lost-ack", f"offset {offset} acknowledged twice: {self.acked[offset]} then {record}")
            self.acked[offset] = record
            copies = sum(x.log[offset:offset + 1] == [record] for x in self.replicas.values())
            if copies < self.cfg.min_isr:
                self.violate("lost-ack", f"{record} acknowledged at {offset} with {copies} copies, "
                             f"below min.insync.replicas {self.cfg.min_isr}")
            for b in sorted(self.state.isr):
                log = self.replicas[b].log
                if offset >= len(log) or log[offset] != record:
                    self.violate("lost-ack", f"{record} acknowledged at {offset} but ISR member b{b} has "
                                 f"{log[offset] if offset < len(log) else 'nothing'} there")

    # ------------------------------------------------------------------ checkers

    def check_step(self) -> None:
        # 2. one committed history below every replica's high watermark
        for r in self.replicas.values():
            if r.hw > r.leo:
                self.violate("prefix", f"b{r.id} high watermark {r.hw} above its LEO {r.leo}")
            upto, reported = min(r.hw, r.leo), False
            for offset in range(self.checked[r.id], upto):  # checked <= len(committed), always
                record = r.log[offset]
                if offset == len(self.committed):
                    self.committed.append(record)
                elif self.committed[offset] != record and not reported:
                    reported = True
                    self.violate("prefix", f"b{r.id} has {record} at {offset} below its HW {r.hw}; "
                                 f"the committed history has {self.committed[offset]}")
            self.checked[r.id] = max(self.checked[r.id], upto)
        # 3. the high watermark moves only by effects, and no further than the ISR's logs
        for r in self.replicas.values():
            if r.lp is not None and r.lp.high_watermark != r.hw:
                self.violate("hw", f"b{r.id}'s high watermark became {r.lp.high_watermark} without an "
                             f"effect (the driver has {r.hw})")
        s = self.state
        ldr = self.replicas.get(s.leader)
        if ldr is not None and ldr.lp is not None and ldr.lp.leader_epoch == s.leader_epoch:
            for b in sorted(s.isr):
                if ldr.lp.high_watermark > self.replicas[b].leo:
                    self.violate("hw", f"leader b{ldr.id} HW {ldr.lp.high_watermark} above the LEO "
                                 f"{self.replicas[b].leo} of ISR member b{b}")

    def converged(self) -> bool:
        s = self.state
        ldr = self.replicas.get(s.leader)
        if ldr is None or ldr.lp is None or ldr.lp.leader_epoch != s.leader_epoch:
            return False
        return (all(r.watching for r in self.replicas.values())
                and s.isr == frozenset(IDS) and ldr.lp.isr == s.isr and ldr.lp.state is IsrState.COMMITTED
                and all(r.log == ldr.log and r.hw == ldr.leo for r in self.replicas.values()))

    def final_checks(self) -> None:
        # 1. no acknowledged record lost: on the final leader and every ISR member
        s = self.state
        holders = sorted(s.isr | ({s.leader} - {NO_LEADER}))
        for offset, record in sorted(self.acked.items()):
            for b in holders:
                log = self.replicas[b].log
                if offset >= len(log) or log[offset] != record:
                    self.violate("lost-ack", f"acknowledged {record} at {offset} is not in b{b}'s log")
                    return


@functools.cache
def result(seed: int) -> Model:
    return Model(seed).run()


@pytest.mark.parametrize("seed", SEEDS)
def test_no_invariant_is_violated(seed):
    m = result(seed)
    assert not m.violations, m.report()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1100))
def test_long_histories(seed):
    """Deeper: 100 more seeds of 20,000 steps each (about 20 s; run with -m slow)."""
    m = Model(seed, Config(steps=20_000)).run()
    assert not m.violations, m.report()


def test_the_model_exercises_what_it_checks():
    """The seeds together reach the interesting states; a harness that never elects, shrinks,
    truncates or resumes a zombie would pass the invariants vacuously."""
    total: Counter[str] = Counter()
    for seed in SEEDS:
        total.update(result(seed).stats)
    for what in ("crash", "pause", "isolate", "slow", "election", "offline", "zombie", "zombie-append",
                 "truncated", "diverged-in-epoch", "diverged-unknown-epoch",
                 "isr-shrink", "isr-expand", "isr-rejected", "acked", "acked-by-replaced-leader", "ack-failed",
                 "not-enough-replicas", "not-enough-replicas-after-append"):
        assert total[what] > 0, (what, dict(total))


def test_the_same_seed_gives_the_same_history():
    a, b = Model(7, Config(steps=800)).run(), Model(7, Config(steps=800)).run()
    assert a.trace == b.trace and a.trace
    assert [r.log for r in a.replicas.values()] == [r.log for r in b.replicas.values()]
    assert a.trace != Model(8, Config(steps=800)).run().trace


# ---------------------------------------------------------------------- the checkers can fail


def hw_is_leader_leo(self, now_ms):
    """Defect: the high watermark follows the leader's LEO, ignoring the followers."""
    if self.log_end_offset <= self.high_watermark:
        return []
    self.high_watermark = self.log_end_offset
    return [HighWatermark(self.log_end_offset)]


def truncate_to_high_watermark(leader, cache, log_end_offset, fetch_offset):
    """Defect: pre-KIP-101 truncation, to the follower's high watermark (`fetch_offset`)."""
    return Truncation(fetch_offset, True)


def never_diverging(cache, log_end_offset, log_start_offset, last_fetched_epoch, fetch_offset):
    """Defect: the leader never reports a DivergingEpoch, so followers never truncate."""


@property
def proposed_isr_counts(self):
    """Defect (what KIP-497 fixed): the high watermark trusts a proposed shrink before
    the store took it."""
    return self.proposed if self.proposed is not None else self.isr


def known_epoch_only(cache, log_end_offset, log_start_offset, last_fetched_epoch, fetch_offset):
    """Defect: divergence judged by offsets alone, not by the follower's last epoch being
    one the leader never had (KIP-279's case)."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = cache.end_offset_for(last_fetched_epoch, log_end_offset)
    return EpochEndOffset(epoch, end) if end < fetch_offset else None


def under_min_isr_hw(self, now_ms):
    """Defect: the high watermark advances while the ISR is below min.insync.replicas
    (Kafka before 3.7)."""
    self.min_isr, saved = 0, self.min_isr
    try:
        return original_increment_hw(self, now_ms)
    finally:
        self.min_isr = saved


original_increment_hw = LeaderPartition._maybe_increment_hw


def never_expand(self, r):
    """Defect: a follower that fell out of the ISR never comes back."""
    return []


def ack_on_append(self, required_offset):
    """Defect: acks=all answered as acks=1."""
    return NONE


# defect -> (where it goes, the violation kinds that must report it)
DEFECTS = {
    "hw-ignores-followers": ((LeaderPartition, "_maybe_increment_hw", hw_is_leader_leo), {"hw"}),
    "never-diverging": ((follower, "diverging_epoch", never_diverging), {"prefix"}),
    "truncate-to-hw": ((follower, "truncation", truncate_to_high_watermark), {"lost-ack"}),
    "ack-on-append": ((LeaderPartition, "acks_all_result", ack_on_append), {"lost-ack", "zombie-ack"}),
    "never-expand": ((LeaderPartition, "_maybe_expand", never_expand), {"convergence"}),
    "shrink-before-commit": ((LeaderPartition, "maximal_isr", proposed_isr_counts), {"hw"}),
    "hw-under-min-isr": ((LeaderPartition, "_maybe_increment_hw", under_min_isr_hw), {"hw"}),
    "divergence-by-offset-only": ((follower, "diverging_epoch", known_epoch_only), {"prefix"}),
}
DEFECT_SEEDS = range(300)  # searched in order until one seed reports every expected kind
DEFECT_CONFIG = Config(max_violations=100)  # carry on past the first, to see the later checkers too


def first_catch(wanted: set[str]) -> Model | None:
    for seed in DEFECT_SEEDS:
        m = Model(seed, DEFECT_CONFIG).run()
        if wanted <= {v.kind for v in m.violations}:
            return m
    return None


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_the_checkers_catch_a_defect(name, monkeypatch):
    (owner, attribute, defect), wanted = DEFECTS[name]
    monkeypatch.setattr(owner, attribute, defect)
    m = first_catch(wanted)
    assert m is not None, f"{name}: no seed in {DEFECT_SEEDS} reported all of {sorted(wanted)}"
    assert "VIOLATION" in m.report()
    again = Model(m.seed, DEFECT_CONFIG).run()
    assert again.violations == m.violations and again.trace == m.trace  # the failing seed replays


if __name__ == "__main__":
    import sys

    given = [int(a) for a in sys.argv[1:4]]
    first, count, steps = given + [0, len(SEEDS), STEPS][len(given):]
    started, failed = time.perf_counter(), []
    for s in range(first, first + count):
        m = Model(s, Config(steps=steps)).run()
        if m.violations:
            failed.append(s)
            print(m.report(), end="\n\n")
    print(f"{count} seeds x {steps} steps: failed {failed or 'none'}; {time.perf_counter() - started:.1f}s")
