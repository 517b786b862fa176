"""The coordinator brokers of the simulation, the controller, replication, and fail-over.

Theory of operation (issue 18; Kafka's controller, Partition.makeLeader/makeFollower and the
replica fetcher, cut down to `__consumer_offsets`): two or three brokers each run a
coordinator (sim/coordinator.py) over their own replica of every offsets partition
(sim/replication.py). The controller's truth is one `PartitionState` per partition
(cluster/image.py: leader, leader epoch, ISR, partition epoch); every partition has the
same leader, "the coordinator". Each broker acts on its own `view` of those states, told
to it by `_inform` (Kafka's LeaderAndIsr / metadata publisher): a broker named leader at a
new epoch starts the epoch in its log, builds its `LeaderPartition` and loads the shard
by replay; a broker named follower unloads a shard it led and fetches from the leader.

Replication. After a leader appends, each follower fetches after a delay drawn by the
network: it truncates where its log diverges from the leader's (the leader epoch
protocol), copies the rest, and the leader's `LeaderPartition` learns its new log end,
which moves the high watermark (the least log end over the ISR); the leader's runtime then
releases the answers the high watermark passed (`complete_up_to`). An idle follower
waits (a long poll) until the leader appends again. ISR changes the leader proposes
(a follower caught up again) are a compare-and-set on the partition epoch, as KIP-497's
AlterPartition is; so is the shrink the leader proposes every `replica.lag.time.max.ms`
/ 2 for followers that have not caught up within `replica.lag.time.max.ms` (a fetch
delayed that long by the jitter fault). A fetch takes at most the replica fetcher's
request timeout (30 s): a slower one is given up and sent again; when the faults stop,
fetches still on their way are sent again at once (`heal`).

Faults. `crash` takes the leader down; it keeps its replicas (the log survives a process
crash). When it comes back and nobody took over, the controller elects it again at a
higher epoch and it reloads by replay. `move` hands leadership to another broker of the
ISR at a new epoch, with the old leader out of the ISR (the controller lost it), as a
controller does with a broker whose session it lost. The new leader loads by replay of
its own replica. The old one, if it is up, is a zombie for a while (`deaf`): it hears of
nothing, so it still believes it leads, but it cannot count on its lease any more (the
controller moved the lead because that lease expired, which the broker's own clock saw
first: cluster/etcd_store.py `lease_current`), so it answers every coordinator request
NOT_COORDINATOR, writes nothing and runs no timers. Nobody copies what it appended before
and had not committed, so its high watermark never passes it and the answers waiting for
it are never released. When it hears (`learn`), it resigns (its waiting answers fail
NOT_COORDINATOR), follows the new leader and truncates what it wrote as a zombie. The
defect `no-lease-check` takes the lease check away: the zombie then answers, from state
that may be stale, whatever reaches it.

For the checkers this object is "the coordinator" the single-node simulator had: `up`,
`runtime`, `log`, `crashes` (every fail-over: a crash or a move) and `replayed_shard` are
those of the current leader, and `observers` only see the requests it handles; the
observers in `all_observers` see every broker's, zombies' included.
"""

from __future__ import annotations

from odradek.cluster.image import PartitionState
from odradek.coordinator.runtime import partition_for
from odradek.transactions.coordinator import TxnConfig

from .coordinator import SimCoordinator, SimMetadata, SimTopic
from .network import Link
from .replication import follow
from .txn import partition_name, txn_key

CONSUMER_OFFSETS = "__consumer_offsets"
MAX_LAG_MS = 30_000  # replica.lag.time.max.ms (LeaderPartition's default)
FETCH_TIMEOUT_MS = 30_000  # replica.socket.timeout.ms: the longest a fetch takes before it is sent again


class _Observers:
    """Each broker's one observer: every request to `all_observers`, the leader's to `observers`."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    def on_request(self, broker, request) -> None:
        c = self.cluster
        for o in c.all_observers:
            o.on_request(broker, request)
        if broker.node_id == c.leader_id:
            for o in c.observers:
                o.on_request(broker, request)

    def on_response(self, broker, request, body: dict) -> None:
        c = self.cluster
        for o in c.all_observers:
            o.on_response(broker, request, body)
        if broker.node_id == c.leader_id:
            for o in c.observers:
                o.on_response(broker, request, body)


class SimCluster:
    def __init__(self, world, brokers: int, txn_partitions: int = 0) -> None:
        self.world = world
        config = world.config
        self.partitions = range(config.offsets_topic_partitions)
        self.group_partition = partition_for(world.group_id, config.offsets_topic_partitions)
        self.metadata = SimMetadata()
        # Transactions (issue 19): __transaction_state, replicated like __consumer_offsets and
        # led by the same broker; its replicas are the keys txn_key(p) of every broker's logs.
        self.txn_config = TxnConfig(num_partitions=txn_partitions) if txn_partitions else None
        if self.txn_config is not None:
            self.metadata.transaction_state = SimTopic("__transaction_state", None, txn_partitions, True)
        self.keys = list(self.partitions) + [txn_key(p) for p in range(txn_partitions)]
        self.brokers = [SimCoordinator(config, world.rng, lambda: world.now, world._send_down, node_id=i,
                                       metadata=self.metadata, cluster=self, txn_config=self.txn_config)
                        for i in range(brokers)]
        self.supported = self.brokers[0].supported
        self.observers: list = []  # see the current leader's requests only
        self.all_observers: list = []  # see every broker's
        self.failover_observers: list = []  # after_failover(world, when): a new leader loaded, a zombie heard
        for b in self.brokers:
            b.observers.append(_Observers(self))
        ids = tuple(range(brokers))
        self.states = {p: PartitionState(ids, 0, 0, ids, 0) for p in self.keys}
        self.leader_id = 0
        self.deaf: set[int] = set()  # zombies: deposed, and not told yet
        # (partition, leader epoch) -> the log end of that epoch's leader when it was deposed:
        # what it appended from there on, it appended as a zombie.
        self.deposed: dict[tuple[int, int], int] = {}
        self.fetching: set[tuple[int, int]] = set()  # (broker, partition) with a fetch on its way
        self.crash_count = 0
        self.moves = 0
        self.image_version = 0
        self._publish()
        world.schedule(MAX_LAG_MS // 2, "leaders check their ISR", self._check_isr)

    # ------------------------------------------------------------------ "the coordinator"

    @property
    def leader(self) -> SimCoordinator:
        return self.brokers[self.leader_id]

    @property
    def up(self) -> bool:
        return self.leader.up

    @property
    def runtime(self):
        return self.leader.runtime

    @property
    def log(self) -> dict[int, list[tuple[bytes, bytes | None]]]:
        leader = self.leader
        return {p: leader.logs[p].pairs() for p in self.partitions}

    @property
    def crashes(self) -> int:
        """Fail-overs: each reloads the shard from a log (checkers.Epochs allows a classic group
        to fall back to its last stored generation across one)."""
        return self.crash_count + self.moves

    def replayed_shard(self, partition: int):
        return self.leader.replayed_shard(partition)

    def settled(self) -> bool:
        """Whether everything the leader wrote for the group is committed (its state is what
        the clients may have been told, and what a new leader would load)."""
        leader = self.leader
        log = leader.logs[self.group_partition]
        return leader.up and log.hw >= log.end

    def deliver(self, link: Link, frame: bytes) -> None:
        self.brokers[link.broker].deliver(link, frame)

    def tick(self) -> int:
        return sum(b.tick() for b in self.brokers)

    def next_deadline(self) -> int | None:
        deadlines = [d for b in self.brokers if (d := b.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def topics_changed(self) -> None:
        self.image_version += 1
        for b in self.brokers:
            b.topics_changed(self.image_version)

    def find_coordinator(self) -> int:
        """FindCoordinator: a broker that is up (drawn) answers the leader of the group's
        partition as it knows it."""
        up = [b for b in self.brokers if b.up]
        if not up:
            return self.leader_id
        asked = self.world.rng.choice(up)
        if not asked.serving():
            # A zombie answers COORDINATOR_NOT_AVAILABLE (find_coordinator.py: it cannot vouch
            # for its view); the client asks again, here at once and at a broker that can.
            asked = next((b for b in up if b.serving()), asked)
        return asked.view[self.group_partition].leader

    def find_txn_coordinator(self, transactional_id: str) -> int:
        """FindCoordinator with key_type 1: the leader of the id's __transaction_state
        partition, as a broker that is up (drawn) knows it."""
        up = [b for b in self.brokers if b.up]
        if not up:
            return self.leader_id
        asked = self.world.rng.choice(up)
        if not asked.serving():
            asked = next((b for b in up if b.serving()), asked)
        partition = txn_key(asked.txn.runtime.partition_for(transactional_id))
        return asked.view[partition].leader

    # ------------------------------------------------------------------ controller

    def _publish(self) -> None:
        for b in self.brokers:
            if b.up and b.node_id not in self.deaf:
                self._inform(b)

    def _inform(self, b: SimCoordinator) -> None:
        """Tell `b` the controller's states (Kafka's LeaderAndIsr; TopicsDelta.localChanges)."""
        now = self.world.now
        for p in self.keys:
            new, old = self.states[p], b.view.get(p)
            if new == old:
                continue
            if new.leader == b.node_id:
                if old is None or old.leader != b.node_id or old.leader_epoch != new.leader_epoch:
                    b.become_leader(p, new, now)
                else:
                    b.view[p] = new  # the ISR it proposed, committed
            elif old is not None and old.leader == new.leader and old.leader_epoch == new.leader_epoch:
                b.view[p] = new  # the same leadership, another ISR
            else:
                b.become_follower(p, new)
                self._schedule_fetch(b, p)

    def _elect(self, leader: int, isr_of) -> None:
        for p in self.keys:
            s = self.states[p]
            self.states[p] = PartitionState(s.replicas, leader, s.leader_epoch + 1, tuple(sorted(isr_of(s))),
                                            s.partition_epoch + 1)
        self.leader_id = leader
        self._publish()

    def propose_isr(self, broker: SimCoordinator, partition: int, proposal) -> None:
        """AlterPartition: a compare-and-set on the partition epoch (KIP-497)."""
        s = self.states[partition]
        leader = broker.leading[partition]
        if (broker.node_id != s.leader or broker.node_id in self.deaf or proposal.leader_epoch != s.leader_epoch
                or proposal.partition_epoch != s.partition_epoch):
            leader.isr_rejected(proposal.isr)
            return
        new = PartitionState(s.replicas, s.leader, s.leader_epoch, tuple(sorted(proposal.isr)), s.partition_epoch + 1)
        self.states[partition] = new
        self.world.trace(f"{partition_name(partition)}: ISR {list(new.isr)} (partition epoch {new.partition_epoch})")
        broker.apply(partition, leader.isr_committed(new.partition_epoch, self.world.now, proposal.isr))
        self._publish()

    # ------------------------------------------------------------------ replication

    def appended(self, broker: SimCoordinator, partition: int) -> None:
        """`broker` appended to `partition` as its leader: its followers fetch (a long poll answered)."""
        for b in self.brokers:
            view = b.view.get(partition)
            if b.up and view is not None and view.leader == broker.node_id != b.node_id:
                self._schedule_fetch(b, partition)

    def _check_isr(self) -> None:
        """Kafka's maybeShrinkIsr on every leader (zombies too: their proposals are refused)."""
        now = self.world.now
        for b in self.brokers:
            if b.up:
                for p in sorted(b.leading):
                    leader = b.leading.get(p)
                    if leader is not None:
                        b.apply(p, leader.tick(now))
        self.world.schedule(now + MAX_LAG_MS // 2, "leaders check their ISR", self._check_isr)

    def _schedule_fetch(self, b: SimCoordinator, partition: int, *, again: bool = False) -> None:
        key = (b.node_id, partition)
        if key in self.fetching and not again:
            return
        self.fetching.add(key)
        at = self.world.now + min(self.world.network.delay(), FETCH_TIMEOUT_MS)
        self.world.schedule(at, f"{b} fetches {partition_name(partition)}", lambda: self._fetch(b, partition))

    def heal(self) -> None:
        """The faults stop: a fetch the jitter fault delays is given up and sent again now
        (whichever answer comes first counts; the other finds nothing new)."""
        for broker, partition in sorted(self.fetching):
            self._schedule_fetch(self.brokers[broker], partition, again=True)

    def _fetch(self, b: SimCoordinator, partition: int) -> None:
        self.fetching.discard((b.node_id, partition))
        view = b.view.get(partition)
        if not b.up or view is None or view.leader == b.node_id:
            return
        source = self.brokers[view.leader]
        leader = source.leading.get(partition) if source.up else None
        if leader is None or leader.leader_epoch != view.leader_epoch:
            return  # FENCED_LEADER_EPOCH or a dead leader: wait for the controller's next word
        log = b.logs[partition]
        got = follow(log, source.logs[partition], leader.high_watermark)
        if got.truncated:
            self.world.trace(f"{b} truncates {got.truncated} record(s) of {partition_name(partition)} to "
                             f"{log.end} (diverged from {source}'s epoch {view.leader_epoch})")
        source.apply(partition, leader.follower_fetched(b.node_id, log.end, 0, self.world.now))

    # ------------------------------------------------------------------ faults

    def crash(self) -> SimCoordinator | None:
        """The leader's process dies; the controller elects nobody else meanwhile."""
        b = self.leader
        if not b.up:
            return None
        b.crash()
        self.crash_count += 1
        self.fetching = {k for k in self.fetching if k[0] != b.node_id}
        return b

    def restart(self, b: SimCoordinator) -> None:
        if b.up:
            return
        b.restart()
        self.deaf.discard(b.node_id)  # it registers again and hears the controller
        if b.node_id == self.leader_id:
            # Nobody took over: a new leadership of every partition, at a higher epoch.
            self._elect(b.node_id, lambda s: s.isr)
            self._after_failover(f"{b} restarted as coordinator")
        else:
            self._publish()

    def move(self) -> tuple[SimCoordinator, SimCoordinator] | None:
        """Leadership moves to another broker of the ISR; the old leader, if up, is a zombie.
        None when no other broker is in every partition's ISR and up."""
        old = self.leader
        candidates = [b for b in self.brokers if b is not old and b.up and b.node_id not in self.deaf
                      and all(b.node_id in self.states[p].isr for p in self.keys)]
        if not candidates:
            return None
        new = self.world.rng.choice(candidates)
        for p in self.keys:
            self.deposed[(p, self.states[p].leader_epoch)] = old.logs[p].end
        if old.up:
            self.deaf.add(old.node_id)
        self.moves += 1
        self._elect(new.node_id, lambda s: [i for i in s.isr if i != old.node_id])
        self._after_failover(f"the coordinator moved from {old} to {new}")
        return old, new

    def learn(self, b: SimCoordinator) -> bool:
        """The zombie `b` hears of the controller's states: it resigns and follows."""
        if b.node_id not in self.deaf:
            return False
        self.deaf.discard(b.node_id)
        if b.up:
            self._inform(b)
        self._after_failover(f"{b} learned it was deposed")
        return True

    def _after_failover(self, when: str) -> None:
        for o in self.failover_observers:
            o.after_failover(self.world, when)

    def describe(self) -> list[str]:
        lines = []
        for b in self.brokers:
            role = "down" if not b.up else "zombie" if b.node_id in self.deaf else \
                "leader" if b.node_id == self.leader_id else "follower"
            logs = ", ".join(f"{p if p in self.partitions else partition_name(p)}: end {b.logs[p].end} "
                             f"hw {b.logs[p].hw}" for p in self.keys)
            lines.append(f"{b} {role}: {logs}")
        s = self.states[self.group_partition]
        lines.append(f"{CONSUMER_OFFSETS}-{self.group_partition}: leader b{s.leader} epoch {s.leader_epoch} "
                     f"isr {list(s.isr)}")
        return lines
