"""The broker's driver of replication (Kafka's ReplicaManager): images in, roles out.

Theory of operation. The metadata backend publishes cluster images; `on_image` turns the
difference for this node (cluster/image.local_changes) into roles, as Kafka's
ReplicaManager.applyDelta does:

  * become leader (a new leader epoch): the log records the epoch's start offset (Kafka
    Partition.makeLeader assigns it at the log end at once), a fresh sans-I/O
    `LeaderPartition` (replication/leader.py) tracks the followers, and any fetcher for
    the partition stops;
  * the same leader epoch with a new ISR or partition epoch: `LeaderPartition.replaced`;
  * become follower: the leader state is dropped (parked acks=all produces then fail
    NOT_LEADER_OR_FOLLOWER) and the fetcher for the leader's broker takes the partition
    (broker/replica_fetcher.py truncates as the leader tells it, then appends);
  * partitions no longer hosted here stop.

A partition with a single replica is today's log: no leader state, its high watermark is
its log end. Every other log is `replicated`: its high watermark is what the leader's
state machine computes (`HighWatermark` effects) or, on a follower, what the leader said.

Effects of the state machine are carried out here: `HighWatermark` moves the log's high
watermark (which wakes parked fetches and acks=all produces through the purgatory);
`ProposeIsr` becomes a compare-and-set through the backend, answered with
`isr_committed` or `isr_rejected`. The periodic `tick` runs the ISR shrink check every
`replica.lag.time.max.ms / 2` (Kafka's isr-expiration task).

Group coordinator shards follow leadership of their `__consumer_offsets` partition: elected
with the leader epoch when this node becomes leader, resigned when it stops; high
watermark moves of those partitions release the coordinator's answers waiting for them
(broker/coordinator.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..cluster.backend import Fenced, MetadataUnavailable
from ..cluster.image import (
    NO_LEADER,
    BrokerInfo,
    ClusterImage,
    PartitionState,
    TopicPartition,
    local_changes,
    partitions_added_or_removed,
)
from ..cluster.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from ..cluster.placement import PlacementError, assign_replicas
from ..protocol.errors import (
    FENCED_LEADER_EPOCH,
    LEADER_NOT_AVAILABLE,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
)
from ..replication.leader import HighWatermark, LeaderPartition, ProposeIsr
from ..replication.selector import (
    NO_PREFERENCE,
    ClientMetadata,
    FollowerSnapshot,
    preferred_read_replica,
    selector_named,
)

if TYPE_CHECKING:
    from ..log.partition import PartitionLog
    from .broker import Broker

log = logging.getLogger(__name__)


class NotServable(Exception):
    """This broker cannot serve the request for this partition: `code` says why."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or str(code))
        self.code = code


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.node_id = broker.config.node_id
        self.image = ClusterImage()
        self.leaders: dict[TopicPartition, LeaderPartition] = {}
        self.following: dict[TopicPartition, PartitionState] = {}
        self._tasks: set[asyncio.Task] = set()
        self._rng = random.Random()
        self._fetchers = None  # replica_fetcher.FetcherPool, made on the first follower role
        self._stopped = False
        self._counts: dict[str, tuple[Any, int, tuple]] = {}  # topic -> (id, partitions, configs) the logs know
        cfg = broker.config
        self.selector = selector_named(cfg.replica_selector_class, cfg.broker_configs())
        self._hw_sent: dict[TopicPartition, dict[int, int]] = {}  # led partition -> follower -> high watermark sent

    # --- placement (Kafka's controller: AdminUtils.assignReplicasToBrokers) ---------------

    def _racks(self) -> dict[int, str | None]:
        brokers = dict(self.image.brokers)
        if not brokers:  # the embedded store before start(): this node alone
            return {self.node_id: self.broker.config.rack}
        return {b.node_id: b.rack for b in brokers.values()}

    def place(self, specs, assignments: dict[str, list[tuple[int, ...]]],
              factors: dict[str, int] | None = None) -> dict[str, list[tuple[int, ...]]]:
        """Replicas for every partition of every topic in `specs`; explicit assignments
        win. Raises PlacementError (INVALID_REPLICATION_FACTOR on the wire)."""
        racks = self._racks()
        out = {}
        for name, partitions, _configs in specs:
            if name in assignments:
                out[name] = [tuple(r) for r in assignments[name]]
                continue
            rf = (factors or {}).get(name, -1)
            if rf < 0:  # CreateTopics' -1, or not given: the broker default
                rf = self.broker.config.default_replication_factor
            if name in (CONSUMER_OFFSETS, TRANSACTION_STATE) or len(racks) == 1:
                # The coordinators' topics: min(factor, registered brokers); a lone broker keeps
                # every topic to itself whatever default.replication.factor says.
                rf = min(rf, len(racks))
            placed = assign_replicas(partitions, rf, racks, rng=self._rng)
            out[name] = [tuple(placed[p]) for p in range(partitions)]
        return out

    def place_more(self, counts: dict[str, int], old: dict[str, int],
                   assignments: dict[str, list[tuple[int, ...]]]) -> dict[str, list[tuple[int, ...]]]:
        """Replicas for partitions added to existing topics, at each topic's current factor."""
        racks = self._racks()
        out = {}
        for name, count in counts.items():
            if name in assignments:
                out[name] = [tuple(r) for r in assignments[name]]
                continue
            first = self.image.partition(name, 0)
            rf = len(first.replicas) if first is not None else 1
            placed = assign_replicas(count - old[name], rf, racks, rng=self._rng, start_partition=old[name])
            out[name] = [tuple(placed[p]) for p in range(old[name], count)]
        return out

    # --- the cluster as clients see it ---------------------------------------------------

    def brokers(self, listener: str | None = None) -> list[BrokerInfo]:
        """The live brokers, this one with its advertised address as it listens now, as
        clients of `listener` reach them (those without that listener left out)."""
        others = [b for b in self.image.brokers.values() if b.node_id != self.node_id]
        found = (b.on(listener) for b in [self.broker.me(), *others])
        return sorted((b for b in found if b is not None), key=lambda b: b.node_id)

    def controller(self) -> int:
        """DescribeCluster/Metadata controller id: the etcd-elected controller (this node
        when the embedded store is in use)."""
        return self.image.controller if self.image.controller >= 0 else self.node_id

    # --- roles -----------------------------------------------------------------------------

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.image.partition(topic, partition)

    def on_image(self, old: ClusterImage | None, new: ClusterImage) -> None:
        """Apply a new cluster image (the backend's listener; also called once at start)."""
        if self._stopped or not self.broker.started:
            self.image = new
            return
        self.image = new
        if old is None:  # the first image: everything in it is new, whatever delta it carries
            before, new = ClusterImage(), dataclasses.replace(new, changed=None)
        else:
            before = old
        self._sync_topics(new.changed)
        changes = local_changes(before, new, self.node_id)
        now = self.broker.clock()
        for tp in changes.deletes:
            self._stop_partition(tp)
        if self.broker.stats is not None:
            self.broker.stats.leaderships_taken += len(changes.leaders)
        for tp, state in changes.leaders.items():
            self._become_leader(tp, state, now)
        for tp, state in changes.followers.items():
            self._become_follower(tp, state)
        if dict(before.brokers) != dict(new.brokers):
            if self.broker.coordinator is not None:
                self.broker.coordinator.maybe_create_topic()  # enough brokers now for its factor?
            live = set(new.brokers)
            for tp, leader in self.leaders.items():
                self._apply(tp, leader.brokers_changed(live, now))
        if partitions_added_or_removed(before, new):
            # KIP-848 "Group Epoch": partition metadata changes bump subscribed groups' epochs.
            self.broker._topics_changed()

    def _sync_topics(self, names=None) -> None:
        """Tell the log manager of topics created, grown or deleted (by any broker);
        `names`: the topics that may have changed (None: any)."""
        logs, purgatory = self.broker.logs, self.broker.purgatory
        current = self.broker.metadata.topics
        if names is not None:
            current = {n: current[n] for n in names if n in current}
        for name in list(self._counts) if names is None else [n for n in names if n in self._counts]:
            topic_id = self._counts[name][0]
            topic = current.get(name)
            if topic is None or topic.topic_id != topic_id:
                gone = logs.topics.get(name)
                if gone is not None and gone.topic_id == topic_id:
                    logs.delete(gone)
                del self._counts[name]
                purgatory.notify_topic(name)
        for name, topic in current.items():
            known = self._counts.get(name)
            configs = tuple(sorted(topic.configs.items()))
            if known is None:
                logs.create(topic) if name not in logs.topics else None
            elif known[1] != topic.partitions:
                logs.create(topic, first_partition=known[1])
            elif known[2] != configs:
                # AlterConfigs on any broker: every broker's open logs follow (Kafka's
                # DynamicConfigPublisher applies topic config changes from the metadata log),
                # and so does min.insync.replicas for the partitions led here.
                config = self.broker.topic_config(topic)
                logs.reconfigure(topic, config)
                self._min_isr_changed(name, int(config["min.insync.replicas"]))
            else:
                continue
            self._counts[name] = (topic.topic_id, topic.partitions, configs)

    def _min_isr_changed(self, topic: str, min_isr: int) -> None:
        now = self.broker.clock()
        for tp, leader in list(self.leaders.items()):
            if tp[0] == topic and leader.min_isr != min_isr:
                leader.min_isr = min_isr
                self._apply(tp, leader.appended(leader.log_end_offset, now))  # the HW rule depends on it

    def _log(self, tp: TopicPartition) -> PartitionLog | None:
        try:
            return self.broker.logs.get(*tp)
        except Exception as exc:  # an offline directory: the partition cannot take a role
            log.warning("%s-%d: cannot open the log: %s", tp[0], tp[1], exc)
            return None

    def _become_leader(self, tp: TopicPartition, state: PartitionState, now: int) -> None:
        current = self.leaders.get(tp)
        if current is not None and current.leader_epoch == state.leader_epoch:
            self._apply(tp, current.replaced(state.isr, state.partition_epoch, now))
            return
        self.following.pop(tp, None)
        self._hw_sent.pop(tp, None)  # a new leadership: nothing has been sent yet
        if self._fetchers is not None:
            self._fetchers.remove(tp)
        if len(state.replicas) == 1 and current is None:
            # One replica: today's log, opened on first use (10,000 topics must not open
            # 10,000 logs here); its high watermark is its log end.
            self._elect_coordinator(tp, state, now)
            return
        plog = self._log(tp)
        if plog is None:
            return
        topic = self.broker.metadata.get(tp[0])
        plog.replicated = True
        # Kafka Partition.makeLeader: the new epoch starts at the log end.
        plog.epochs.assign(state.leader_epoch, plog.log_end_offset)
        min_isr = int(self.broker.topic_config(topic)["min.insync.replicas"]) if topic is not None else 1
        leader = LeaderPartition(
            self.node_id, state.replicas, state.isr, leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch, log_end_offset=plog.log_end_offset,
            high_watermark=plog.high_watermark, now_ms=now, min_isr=min_isr,
            max_lag_ms=self.broker.config.replica_lag_time_max_ms, eligible=set(self.image.brokers),
        )
        self.leaders[tp] = leader
        log.info("%s-%d: leader at epoch %d, ISR %s", tp[0], tp[1], state.leader_epoch, sorted(state.isr))
        self._apply(tp, leader.appended(plog.log_end_offset, now))
        self._elect_coordinator(tp, state, now)

    def _coordinator_of(self, topic: str):
        """The coordinator whose shards follow leadership of `topic`'s partitions, or None."""
        if topic == CONSUMER_OFFSETS:
            return self.broker.coordinator
        if topic == TRANSACTION_STATE:
            return getattr(self.broker, "txn_coordinator", None)
        return None

    def _elect_coordinator(self, tp: TopicPartition, state: PartitionState, now: int) -> None:
        coordinator = self._coordinator_of(tp[0])
        if coordinator is not None:
            coordinator.elect(tp[1], state.leader_epoch, now)
        self.broker.purgatory.notify(tp)  # parked requests re-check leadership

    def _become_follower(self, tp: TopicPartition, state: PartitionState) -> None:
        was_leader = self.leaders.pop(tp, None)
        self._hw_sent.pop(tp, None)
        if was_leader is not None or tp not in self.following:
            log.info("%s-%d: follower of %d at epoch %d", tp[0], tp[1], state.leader, state.leader_epoch)
        if (coordinator := self._coordinator_of(tp[0])) is not None:
            coordinator.resign(tp[1], state.leader_epoch)
        self.following[tp] = state
        plog = self._log(tp)
        if plog is not None:
            plog.replicated = True
        if state.leader != NO_LEADER and plog is not None:
            self.fetchers.add(tp, state)
        elif self._fetchers is not None:
            self._fetchers.remove(tp)
        self.broker.purgatory.notify(tp)

    def _stop_partition(self, tp: TopicPartition) -> None:
        self.leaders.pop(tp, None)
        self._hw_sent.pop(tp, None)
        self.following.pop(tp, None)
        if self._fetchers is not None:
            self._fetchers.remove(tp)
        if (coordinator := self._coordinator_of(tp[0])) is not None:
            coordinator.resign(tp[1], None)
        self.broker.purgatory.notify(tp)

    @property
    def fetchers(self):
        if self._fetchers is None:
            from .replica_fetcher import FetcherPool

            self._fetchers = FetcherPool(self)
        return self._fetchers

    # --- effects ---------------------------------------------------------------------------

    def _apply(self, tp: TopicPartition, effects: Iterable[Any]) -> None:
        for effect in effects:
            if isinstance(effect, HighWatermark):
                plog = self.broker.logs.opened(*tp)
                if plog is not None and plog.replicated:
                    plog.update_high_watermark(effect.offset)
                    if (coordinator := self._coordinator_of(tp[0])) is not None:
                        # Coordinator answers wait for their records to commit (issue 18).
                        coordinator.high_watermark_moved(tp[1], plog.high_watermark)
                self.broker.purgatory.notify(tp)
            elif isinstance(effect, ProposeIsr):
                self.spawn(self._propose(tp, effect))

    def spawn(self, coro) -> None:
        """Run `coro` as a task the manager cancels when it stops (nothing, with no loop)."""
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # no loop (a synchronous test): nothing can be written anyway
            coro.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _propose(self, tp: TopicPartition, effect: ProposeIsr) -> None:
        """KIP-497 AlterPartition, as a compare-and-set in the metadata store."""
        leader = self.leaders.get(tp)
        if leader is None or leader.leader_epoch != effect.leader_epoch:
            return
        current = self.image.partition(*tp)
        if current is None or current.partition_epoch != effect.partition_epoch:
            leader.isr_rejected(effect.isr)
            return
        wanted = current.with_changes(isr=tuple(r for r in current.replicas if r in effect.isr))
        try:
            written = await self.broker.metadata.alter_partition(tp, current, wanted)
        except (Fenced, MetadataUnavailable) as exc:
            log.info("%s-%d: ISR change to %s refused: %s", tp[0], tp[1], sorted(effect.isr), exc)
            if self.leaders.get(tp) is leader:
                leader.isr_rejected(effect.isr)
            return
        if self.leaders.get(tp) is leader:
            log.info("%s-%d: ISR now %s", tp[0], tp[1], sorted(effect.isr))
            stats = self.broker.stats
            if stats is not None:  # Kafka's IsrShrinksPerSec / IsrExpandsPerSec
                if len(written.isr) < len(current.isr):
                    stats.isr_shrinks += 1
                elif len(written.isr) > len(current.isr):
                    stats.isr_expands += 1
            self._apply(tp, leader.isr_committed(written.partition_epoch, self.broker.clock(), effect.isr))

    def tick(self, now_ms: int | None = None) -> None:
        """Kafka's isr-expiration task; the server runs it every replica.lag.time.max.ms / 2."""
        now = self.broker.clock() if now_ms is None else now_ms
        for tp, leader in list(self.leaders.items()):
            self._apply(tp, leader.tick(now))

    # --- serving -------------------------------------------------------------------------

    def check_epoch(self, tp: TopicPartition, current_leader_epoch: int) -> None:
        """Kafka Partition.checkCurrentLeaderEpoch: -1 means the client does not know it."""
        if current_leader_epoch < 0:
            return
        state = self.image.partition(*tp)
        local = state.leader_epoch if state is not None else -1
        if current_leader_epoch < local:
            raise NotServable(FENCED_LEADER_EPOCH, f"epoch {current_leader_epoch} is older than {local}")
        if current_leader_epoch > local:
            raise NotServable(UNKNOWN_LEADER_EPOCH, f"epoch {current_leader_epoch} is newer than {local}")

    def leader_for_serving(self, tp: TopicPartition, current_leader_epoch: int = -1) -> LeaderPartition | None:
        """The leader state for a leader-only request, or NotServable. None: a
        single-replica partition led here (no replication state needed)."""
        state = self.image.partition(*tp)
        if state is None:
            return None  # not in the image yet (the embedded store before start)
        self.check_epoch(tp, current_leader_epoch)
        if state.leader != self.node_id:
            raise NotServable(LEADER_NOT_AVAILABLE if state.leader == NO_LEADER else NOT_LEADER_OR_FOLLOWER)
        return self.leaders.get(tp)

    def replica_for_serving(self, tp: TopicPartition, current_leader_epoch: int = -1) -> bool:
        """KIP-392: a consumer Fetch v11+ may be served by any replica hosted here, up to its
        own high watermark (Kafka's fetchOnlyFromLeader is false once the request carries
        client metadata). Returns whether this node leads `tp`; NotServable when it hosts
        no replica of it or the epoch check fails (Kafka checks it on followers too)."""
        state = self.image.partition(*tp)
        if state is None:
            return True
        self.check_epoch(tp, current_leader_epoch)
        if state.leader == self.node_id:
            return True
        if tp in self.following and self.node_id in state.replicas:
            return False
        raise NotServable(LEADER_NOT_AVAILABLE if state.leader == NO_LEADER else NOT_LEADER_OR_FOLLOWER)

    def preferred_read_replica(self, tp: TopicPartition, fetch_offset: int, client: ClientMetadata) -> int:
        """Kafka ReplicaManager.findPreferredReadReplica, on the leader, for a consumer: the
        replica `replica.selector.class` picks among the ISR followers holding `fetch_offset`
        (replication/selector.py), or NO_PREFERENCE."""
        leader = self.leaders.get(tp)
        if self.selector is None or leader is None:
            return NO_PREFERENCE
        racks = {b.node_id: b.rack for b in self.image.brokers.values()}
        followers = [FollowerSnapshot(r.broker_id, r.log_start_offset, r.log_end_offset, r.last_caught_up_ms)
                     for r in leader.followers.values()]
        return preferred_read_replica(
            self.selector, client, fetch_offset, topic_partition=tp, leader_id=self.node_id,
            leader_rack=self.broker.config.rack, leader_log_end=leader.log_end_offset, followers=followers,
            isr=leader.isr, racks=racks, now_ms=self.broker.clock())

    def high_watermark_news(self, tp: TopicPartition, replica_id: int, high_watermark: int) -> bool:
        """Whether a follower's fetch must be answered at once to tell it a high watermark it
        has not been sent (KIP-392 "the follower's high watermark lags": a follower serving
        consumers should not wait replica.fetch.wait.max.ms to learn it). Records what is
        now being sent."""
        sent = self._hw_sent.setdefault(tp, {})
        news = sent.get(replica_id, -1) != high_watermark
        sent[replica_id] = high_watermark
        return news

    def current_leader(self, tp: TopicPartition) -> dict | None:
        """The leader this broker knows, in the `current_leader` field's shape (Produce v10,
        Fetch v12: KIP-951 lets a client skip a metadata refresh); None when unknown."""
        state = self.image.partition(*tp)
        return None if state is None else {"leader_id": state.leader, "leader_epoch": state.leader_epoch}

    def is_leader(self, tp: TopicPartition) -> bool:
        state = self.image.partition(*tp)
        return state is None or state.leader == self.node_id

    def leader_epoch(self, tp: TopicPartition) -> int:
        state = self.image.partition(*tp)
        return state.leader_epoch if state is not None else 0

    def append_error(self, tp: TopicPartition, acks: int) -> int:
        leader = self.leaders.get(tp)
        return leader.append_error(acks) if leader is not None else NONE

    def appended(self, tp: TopicPartition, plog: PartitionLog) -> None:
        """This node appended to a partition it leads (a produce, a coordinator write)."""
        leader = self.leaders.get(tp)
        if leader is not None:
            self._apply(tp, leader.appended(plog.log_end_offset, self.broker.clock()))

    async def wait_for_acks(self, tp: TopicPartition, required_offset: int, timeout_ms: float) -> int:
        """acks=all: wait until the high watermark reaches `required_offset` (Kafka's
        DelayedProduce). NOT_LEADER_OR_FOLLOWER if this node stops leading meanwhile,
        REQUEST_TIMED_OUT at the deadline."""
        leader = self.leaders.get(tp)
        if leader is None:
            return NONE if self.is_leader(tp) else NOT_LEADER_OR_FOLLOWER
        deadline = self.broker.clock() + timeout_ms
        stats = self.broker.stats
        while True:
            if self.leaders.get(tp) is not leader:
                return NOT_LEADER_OR_FOLLOWER
            result = leader.acks_all_result(required_offset)
            if result is not None:
                return result
            remaining = deadline - self.broker.clock()
            if remaining <= 0:
                return REQUEST_TIMED_OUT
            # Kafka's produce purgatory size: acks=all produces waiting for the high watermark.
            if stats is not None:
                stats.produce_waiting += 1
            try:
                await self.broker.purgatory.wait([tp], remaining / 1000)
            finally:
                if stats is not None:
                    stats.produce_waiting -= 1

    def follower_fetched(self, tp: TopicPartition, replica_id: int, fetch_offset: int, log_start_offset: int,
                         broker_epoch: int = -1) -> None:
        leader = self.leaders.get(tp)
        if leader is None or replica_id not in leader.followers:
            return
        self._apply(tp, leader.follower_fetched(replica_id, fetch_offset, log_start_offset, self.broker.clock(),
                                                broker_epoch))

    def stop(self) -> None:
        self._stopped = True
        if self._fetchers is not None:
            self._fetchers.stop()
        for task in list(self._tasks):
            task.cancel()


__all__ = ["NotServable", "PlacementError", "ReplicaManager"]
