"""The client's view of the cluster: brokers, topics, partition leaders (sans-I/O).

Theory of operation: a Metadata response replaces the view of the topics it covers
(and the broker list). Lookups never block; callers that miss (unknown topic, no
leader) ask the driver for a refresh. Topic ids map both ways, because
ConsumerGroupHeartbeat speaks only ids while everything else the client sends uses
names.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

ZERO_UUID = uuid.UUID(int=0)


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class PartitionInfo:
    partition: int
    leader: int  # -1 when there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: ErrorCode = ErrorCode.none


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error: ErrorCode = ErrorCode.none


class ClusterView:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, str] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1

    def update(self, response, *, all_topics: bool = False) -> None:
        """Apply a Metadata response. With `all_topics` it lists every topic, so the
        ones missing from it are gone."""
        self.brokers = {
            b.node_id: BrokerInfo(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
            for b in response.brokers
        }
        self.cluster_id = getattr(response, "cluster_id", None)
        self.controller_id = int(getattr(response, "controller_id", -1))
        if all_topics:
            self.topics.clear()
            self.by_id.clear()
        for t in response.topics:
            name = t.name
            tid = getattr(t, "topic_id", ZERO_UUID) or ZERO_UUID
            if name is None:
                name = self.by_id.get(tid)
                if name is None:
                    continue
            if t.error_code != ErrorCode.none and not t.partitions:
                old = self.topics.pop(name, None)
                if old is not None:
                    self.by_id.pop(old.topic_id, None)
                if t.error_code != ErrorCode.unknown_topic_or_partition:
                    self.topics[name] = TopicInfo(name, tid, bool(getattr(t, "is_internal", False)), error=t.error_code)
                continue
            info = TopicInfo(name, tid, bool(getattr(t, "is_internal", False)))
            for p in t.partitions:
                info.partitions[int(p.partition_index)] = PartitionInfo(
                    int(p.partition_index), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes), p.error_code)
            old = self.topics.get(name)
            if old is not None and old.topic_id != tid:
                self.by_id.pop(old.topic_id, None)
            self.topics[name] = info
            if tid != ZERO_UUID:
                self.by_id[tid] = name

    def leader(self, tp: TopicPartition) -> int | None:
        info = self.topics.get(tp.topic)
        p = info.partitions.get(tp.partition) if info else None
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return None
        return p.leader

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        """What metadata says of `tp` (leader, leader epoch, replicas, ISR), None when unknown."""
        info = self.topics.get(tp.topic)
        return info.partitions.get(tp.partition) if info else None

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return len(info.partitions) if info and info.partitions else None

    def partitions(self, topic: str) -> list[TopicPartition]:
        info = self.topics.get(topic)
        return [TopicPartition(topic, p) for p in sorted(info.partitions)] if info else []

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.topics.get(topic)
        return info.topic_id if info and info.topic_id != ZERO_UUID else None
