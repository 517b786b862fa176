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

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

NO_PREFERENCE = -1  # Fetch's PreferredReadReplica default: read from the leader


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """Kafka's ReplicaView: a candidate with its rack and how caught up it is."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int  # 0 for the leader


Selector = Callable[[str | None, ReplicaView, list[ReplicaView]], ReplicaView]


def leader_selector(client_rack: str | None, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView:
    return leader


def _most_caught_up(view: ReplicaView) -> tuple[int, int]:
    # Kafka's ReplicaView.comparator: log end offset first, then the smallest time since caught up.
    return view.log_end_offset, -view.time_since_caught_up_ms


def rack_aware_selector(client_rack: str | None, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView:
    if not client_rack:
        return leader
    same = [r for r in replicas if r.rack == client_rack]
    if not same:
        return leader
    if any(r.broker_id == leader.broker_id for r in same):
        return leader
    return max(same, key=lambda r: (_most_caught_up(r), -r.broker_id))  # ties: the lowest id, deterministically


RACK_AWARE_CLASS = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS: dict[str, Selector] = {
    RACK_AWARE_CLASS: rack_aware_selector,
    "rack-aware": rack_aware_selector,
    "org.apache.kafka.common.replica.LeaderSelector": leader_selector,
    "leader": leader_selector,
}


def selector_named(name: str | None) -> Selector | None:
    """`replica.selector.class`: None (unset) means no selection at all; an unknown name
    raises ValueError (Kafka fails to start on a class it cannot load)."""
    if not name:
        return None
    try:
        return SELECTORS[name.strip()]
    except KeyError:
        raise ValueError(f"replica.selector.class {name!r} is not one of {sorted(SELECTORS)}") from None


@dataclass(frozen=True, slots=True)
class FollowerSnapshot:
    """What the leader knows of one follower (replication/replica.ReplicaState)."""

    broker_id: int
    log_start_offset: int
    log_end_offset: int
    last_caught_up_ms: int


def preferred_read_replica(selector: Selector | None, client_rack: str | None, fetch_offset: int, *,
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
    chosen = selector(client_rack, leader, [*candidates, leader])
    return NO_PREFERENCE if chosen.broker_id == leader_id else chosen.broker_id
