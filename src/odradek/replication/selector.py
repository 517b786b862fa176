"""KIP-392 "Fetch from the closest replica": which replica a consumer should read from.

Theory of operation. The seed's draft put the selector in the consumer; shipped Kafka put it
on the broker (`replica.selector.class`, ReplicaManager.findPreferredReadReplica), and real
clients (librdkafka, the Java consumer, kafka-python, aiokafka) follow the broker's answer
in `preferred_read_replica`. So here, as in Kafka, the leader decides, per consumer Fetch
(v11+, replica id -1):

  * the candidates are the leader and every follower that is in the ISR and holds the fetch
    offset (log start <= offset <= log end) -- a lagging or out-of-ISR follower is never
    offered, or a consumer could be sent to it forever;
  * the selector picks one: `leader` (Kafka's LeaderSelector; also what an unset
    `replica.selector.class` means) always the leader; `rack-aware` (Kafka's
    RackAwareReplicaSelector) a candidate in the client's rack -- the leader if it is
    there, else the most caught-up one: the largest log end, then the most recently caught
    up -- and the leader when the client names no rack or no candidate shares it;
  * the leader itself is never sent back as a preferred replica (-1 means "stay").

Pure: the broker passes the leader's view of its followers (replication/replica.py) and
the racks from the cluster image.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

NO_PREFERENCE = -1  # Fetch's PreferredReadReplica default: read from the leader


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """Kafka's ReplicaView: a candidate with its rack and how caught up it is."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int  # 0 for the leader


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """Kafka's ClientMetadata: who is fetching (Fetch v11+ `rack_id`; the rest for custom selectors)."""

    rack_id: str | None
    client_id: str = ""
    client_address: str = ""


@dataclass(frozen=True, slots=True)
class PartitionView:
    """Kafka's PartitionView: the candidates (the leader among them) and the leader."""

    replicas: tuple[ReplicaView, ...]
    leader: ReplicaView


@runtime_checkable
class ReplicaSelector(Protocol):
    """Kafka's `org.apache.kafka.common.replica.ReplicaSelector`, the plugin interface KIP-392
    describes, on the broker side where Kafka shipped it. `select` returns the replica the
    client should read from (the leader, or None, means "stay"). A class named in
    `replica.selector.class` ("package.module.Class" or "package.module:Class") is made with
    no arguments and, when it has one, its `configure(configs)` is called with the broker's
    configuration, as Kafka's Configurable plugins are."""

    def select(self, topic_partition: tuple[str, int], client: ClientMetadata,
               partition: PartitionView) -> ReplicaView | None: ...


class LeaderSelector:
    """Kafka's LeaderSelector: always the leader."""

    def select(self, topic_partition, client, partition):
        return partition.leader


def _most_caught_up(view: ReplicaView) -> tuple[int, int]:
    # Kafka's ReplicaView.comparator: log end offset first, then the smallest time since caught up.
    return view.log_end_offset, -view.time_since_caught_up_ms


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: a replica in the client's rack (the leader if it is
    there, else the most caught-up one), the leader when the client names no rack or none
    of the candidates shares it."""

    def select(self, topic_partition, client, partition):
        rack = client.rack_id
        if not rack:
            return partition.leader
        same = [r for r in partition.replicas if r.rack == rack]
        if not same:
            return partition.leader
        if any(r.broker_id == partition.leader.broker_id for r in same):
            return partition.leader
        return max(same, key=lambda r: (_most_caught_up(r), -r.broker_id))  # ties: the lowest id, deterministically


RACK_AWARE_CLASS = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_CLASS = "org.apache.kafka.common.replica.LeaderSelector"
SELECTORS: dict[str, type] = {
    RACK_AWARE_CLASS: RackAwareReplicaSelector,
    "rack-aware": RackAwareReplicaSelector,
    LEADER_CLASS: LeaderSelector,
    "leader": LeaderSelector,
}


def selector_named(name: str | None, configs: dict[str, str] | None = None) -> ReplicaSelector | None:
    """`replica.selector.class`: None (unset) means no selection at all. Kafka's class names
    and the short names pick the built-ins; any other name is imported as a user's class.
    A name that cannot be loaded raises ValueError (Kafka fails to start on a class it
    cannot load)."""
    if not name or not name.strip():
        return None
    name = name.strip()
    cls = SELECTORS.get(name) or _import(name)
    selector = cls()
    if not isinstance(selector, ReplicaSelector):
        raise ValueError(f"replica.selector.class {name!r} has no select(topic_partition, client, partition)")
    configure = getattr(selector, "configure", None)
    if callable(configure):
        configure(dict(configs or {}))
    return selector


def _import(name: str) -> type:
    module, sep, attr = name.partition(":") if ":" in name else name.rpartition(".")
    if not module or not attr:
        raise ValueError(f"replica.selector.class {name!r} is not one of {sorted(SELECTORS)} "
                         "nor an importable package.module.Class")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"replica.selector.class {name!r} cannot be loaded: {exc}") from None


@dataclass(frozen=True, slots=True)
class FollowerSnapshot:
    """What the leader knows of one follower (replication/replica.ReplicaState)."""

    broker_id: int
    log_start_offset: int
    log_end_offset: int
    last_caught_up_ms: int


def preferred_read_replica(selector: ReplicaSelector | None, client: ClientMetadata, fetch_offset: int, *,
                           topic_partition: tuple[str, int] = ("", 0),
                           leader_id: int, leader_rack: str | None, leader_log_end: int,
                           followers: Iterable[FollowerSnapshot], isr: Collection[int],
                           racks: dict[int, str | None], now_ms: int) -> int:
    """Kafka's ReplicaManager.findPreferredReadReplica for one consumer fetch: the broker id
    the consumer should read from, or NO_PREFERENCE (stay with the leader)."""
    if selector is None:
        return NO_PREFERENCE
    candidates = [
        ReplicaView(f.broker_id, racks.get(f.broker_id), f.log_end_offset, max(0, now_ms - f.last_caught_up_ms))
        for f in followers
        if f.broker_id in isr and f.broker_id in racks
        and f.log_start_offset <= fetch_offset <= f.log_end_offset
    ]
    leader = ReplicaView(leader_id, leader_rack, leader_log_end, 0)
    chosen = selector.select(topic_partition, client, PartitionView((*candidates, leader), leader))
    # Kafka: the selector may name the leader, but the leader is never sent back as a
    # preferred replica, nor is anything that was not offered.
    if chosen is None or chosen.broker_id == leader_id or all(c.broker_id != chosen.broker_id for c in candidates):
        return NO_PREFERENCE
    return chosen.broker_id
