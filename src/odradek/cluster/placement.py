"""Where a new topic's replicas go (Kafka's AdminUtils.assignReplicasToBrokers).

Theory of operation: the partitions' first replicas (their preferred leaders) go round the
brokers from a random start, so leadership spreads evenly; each partition's other replicas
follow its first at a shift that grows by one every time the partitions have gone once
round the brokers, so the followers of one broker's partitions spread over all the others
too. With racks, the brokers are first listed alternating between racks (rack a, b, c, a,
b, c, ... each rack's brokers in id order) and the shift is counted in racks, and a
replica skips a broker whose rack already holds one while some rack holds none (and a
broker already chosen while some broker is not): as many racks as possible hold each
partition, and a rack's loss leaves at least one replica when RF > 1 and racks >= 2.

Rack-aware placement needs every broker to name a rack; if none does it is the plain
round; a mix is refused, as Kafka's RackAwareMode.Enforced refuses it. Kafka's
`max.broker.partitions` limits (KIP-578's placement variant) are not modelled.

`rng` is injected (a `random.Random`), so the same seed places the same way; Kafka draws
the start index and the shift from its own Random, or takes them fixed for tests.
"""

from __future__ import annotations

import random
from collections.abc import Mapping


class PlacementError(ValueError):
    """Kafka's InvalidReplicationFactorException (replication factor <= 0 or more than
    the brokers) or AdminOperationException (brokers with and without racks)."""


def assign_replicas(num_partitions: int, replication_factor: int, brokers: Mapping[int, str | None], *,
                    rng: random.Random | None = None, fixed_start: int = -1,
                    start_partition: int = 0) -> dict[int, list[int]]:
    """Partition id -> replica list (the first is the preferred leader) for partitions
    `start_partition ..` of a topic, over `brokers` (id -> rack or None)."""
    if replication_factor <= 0:
        raise PlacementError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(f"Replication factor: {replication_factor} larger than available brokers: "
                             f"{len(brokers)}.")
    racks = {b: r for b, r in brokers.items() if r is not None}
    if racks and len(racks) < len(brokers):
        raise PlacementError("Not all brokers have rack information for replica rack aware assignment.")
    rng = rng or random.Random()
    ordered = _rack_alternated(racks) if racks else sorted(brokers)
    n = len(ordered)
    num_racks = len(set(racks.values())) if racks else 0
    start = fixed_start % n if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start % n if fixed_start >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        if racks:
            out[partition] = _rack_aware(ordered, racks, num_racks, first, shift, replication_factor)
        else:
            out[partition] = [ordered[first]] + [ordered[_replica_index(first, shift, j, n)]
                                                 for j in range(replication_factor - 1)]
        partition += 1
    return out


def _rack_aware(ordered: list[int], racks: Mapping[int, str], num_racks: int, first: int, shift: int,
                replication_factor: int) -> list[int]:
    n = len(ordered)
    leader = ordered[first]
    chosen, racks_used, brokers_used = [leader], {racks[leader]}, {leader}
    k = 0
    for _ in range(replication_factor - 1):
        while True:
            broker = ordered[_replica_index(first, shift * num_racks, k, n)]
            rack = racks[broker]
            k += 1
            # Skip a broker whose rack already has a replica while some rack has none, or
            # one already chosen while some broker is not.
            if (rack not in racks_used or len(racks_used) == num_racks) \
                    and (broker not in brokers_used or len(brokers_used) == n):
                break
        chosen.append(broker)
        racks_used.add(rack)
        brokers_used.add(broker)
    return chosen


# Kafka AdminUtils.getRackAlternatedBrokerList
def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """rack1: 0 1 2, rack2: 3 4 5, rack3: 6 7 8 -> 0 3 6 1 4 7 2 5 8 (racks in name order)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    columns = [by_rack[r] for r in sorted(by_rack)]
    return [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]


# Kafka AdminUtils.replicaIndex
def _replica_index(first: int, second_shift: int, j: int, n: int) -> int:
    return (first + 1 + (second_shift + j) % (n - 1)) % n
