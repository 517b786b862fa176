"""A frozen picture of the cluster's metadata, and what changed between two of them.

Theory of operation (Kafka's MetadataImage / TopicsDelta.localChanges): a metadata
backend publishes a new `ClusterImage` whenever etcd (or the file store) changes; brokers
never read the backend's mutable state for decisions, only images. `local_changes(old,
new, node_id)` says what one broker must do about the difference: become leader of some
partitions, become follower of others (or follow a new leader or epoch), stop replicating
partitions it no longer hosts. It is pure, so the broker, the simulator and the tests
compute the same answer.

The partition epoch is the version of the partition's state (etcd: the key's mod
revision); every compare-and-set names the epoch it read (KIP-497 "AlterPartition").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = 0  # Kafka's broker epoch: etcd's create revision of the registration
    # Every listener's advertised address: (name, host, port). host/port above are the
    # inter-broker listener's. Empty (a broker registered before listeners had names):
    # host/port serve every listener.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def on(self, listener: str | None) -> BrokerInfo | None:
        """This broker as clients of `listener` reach it, or None when it has no such
        listener (Kafka's MetadataCache leaves it out of their Metadata)."""
        if listener is None or not self.endpoints:
            return self
        for name, host, port in self.endpoints:
            if name == listener:
                return self if (host, port) == (self.host, self.port) else \
                    BrokerInfo(self.node_id, host, port, self.rack, self.epoch, self.endpoints)
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0

    def with_changes(self, *, leader: int | None = None, leader_epoch: int | None = None,
                     isr: Iterable[int] | None = None) -> PartitionState:
        return PartitionState(
            self.replicas,
            self.leader if leader is None else leader,
            self.leader_epoch if leader_epoch is None else leader_epoch,
            self.isr if isr is None else tuple(isr),
            self.partition_epoch,
        )


def _frozen(d: Mapping | None) -> Mapping:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True)
class ClusterImage:
    cluster_id: str = ""
    brokers: Mapping[int, BrokerInfo] = field(default_factory=lambda: _frozen({}))
    controller: int = -1
    controller_epoch: int = 0
    # (topic, partition) -> state; topics themselves (ids, counts, configs) are the
    # backend's `topics` registry, which the broker already reads.
    partitions: Mapping[TopicPartition, PartitionState] = field(default_factory=lambda: _frozen({}))
    # The topics whose partitions may differ from the previous image, when the backend knows
    # (Kafka publishes deltas); None means any may have, and readers compare everything.
    # It keeps reacting to one new topic proportional to that topic, not to all of them.
    changed: frozenset[str] | None = None

    @staticmethod
    def of(cluster_id: str, brokers: Iterable[BrokerInfo], controller: int, controller_epoch: int,
           partitions: Mapping[TopicPartition, PartitionState], changed: Iterable[str] | None = None) -> ClusterImage:
        return ClusterImage(cluster_id, _frozen({b.node_id: b for b in brokers}), controller, controller_epoch,
                            _frozen(partitions), None if changed is None else frozenset(changed))

    def partition(self, topic: str, index: int) -> PartitionState | None:
        return self.partitions.get((topic, index))

    def leader_of(self, topic: str, index: int) -> int:
        state = self.partitions.get((topic, index))
        return NO_LEADER if state is None else state.leader


@dataclass(frozen=True, slots=True)
class LocalChanges:
    """Kafka's LocalReplicaChanges: what `node_id` must do about a new image."""

    leaders: dict[TopicPartition, PartitionState]
    followers: dict[TopicPartition, PartitionState]
    deletes: frozenset[TopicPartition]

    def __bool__(self) -> bool:
        return bool(self.leaders or self.followers or self.deletes)


def local_changes(old: ClusterImage, new: ClusterImage, node_id: int) -> LocalChanges:
    """The partitions whose state changed for `node_id` between two images.

    A partition appears when it is new, or its leader, leader epoch, ISR or replicas
    changed (Kafka's TopicsDelta.localChanges also reacts to any partition change, since
    a leader must learn of its ISR as committed). Partitions `node_id` stopped hosting,
    or that were deleted, are in `deletes`."""
    leaders: dict[TopicPartition, PartitionState] = {}
    followers: dict[TopicPartition, PartitionState] = {}
    deletes: set[TopicPartition] = set()
    for tp, state in _candidates(new.partitions, new.changed):
        before = old.partitions.get(tp)
        if before is state or before == state:
            continue
        if node_id not in state.replicas:
            if before is not None and node_id in before.replicas:
                deletes.add(tp)
            continue
        if state.leader == node_id:
            leaders[tp] = state
        else:
            followers[tp] = state
    for tp, before in _candidates(old.partitions, new.changed):
        if tp not in new.partitions and node_id in before.replicas:
            deletes.add(tp)
    return LocalChanges(leaders, followers, frozenset(deletes))


def _candidates(partitions: Mapping[TopicPartition, PartitionState], topics: frozenset[str] | None):
    """The partitions of `topics` (all of them when None)."""
    if topics is None:
        yield from partitions.items()
        return
    for topic in topics:
        p = 0
        while (state := partitions.get((topic, p))) is not None:
            yield (topic, p), state
            p += 1


def partitions_added_or_removed(old: ClusterImage, new: ClusterImage) -> bool:
    """Whether any topic gained or lost partitions (or appeared, or went) between the two:
    what the group coordinator must hear of (KIP-848 "Group Epoch"); ISR and leader
    changes are not."""
    if new.changed is None:
        return old.partitions.keys() != new.partitions.keys()
    for topic in new.changed:
        if sum(1 for _ in _candidates(old.partitions, frozenset([topic]))) != \
                sum(1 for _ in _candidates(new.partitions, frozenset([topic]))):
            return True
    return False
