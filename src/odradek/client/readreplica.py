"""Which replica a consumer fetches each partition from (KIP-392), sans-I/O.

Theory of operation. The leader decides: a consumer Fetch v11+ carries the client's rack,
and a leader with `replica.selector.class` set may answer a partition with no records and
a `preferred_read_replica`. The consumer then fetches that partition from that replica for
a lease, and falls back to the leader whenever the replica cannot serve it, so the leader
decides again. The state is per partition, in `fetcher.PartitionState` (`leader`,
`preferred`, `preferred_until_ms`, `rackless_until_ms`); `ReadReplicas` reads and changes it
given the time and the client's metadata, and returns what the driver
(`fetching.FetchDriver`) must do next, as a `Step`. Nothing here does I/O or reads a clock.

The rules, and where they come from:

* A preference is kept for a lease: `lease_ms`, Java's metadata.max.age.ms (librdkafka: a
  fixed 5 minutes; both are 5 minutes by default). When it ends the partition is fetched
  from the leader, which names a replica again or serves the data itself.
* A preferred replica missing from the client's metadata: refresh the metadata first
  (librdkafka rd_kafka_fetch_preferred_replica_handle); still missing, fetch from the
  leader (Java AbstractFetch.selectReadReplica: "missing from our metadata, using the
  leader instead").
* A new leader (node or epoch) in metadata drops the preference (Java
  SubscriptionState.maybeValidatePosition; librdkafka delegates to the new leader).
* A preferred replica metadata shows outside the ISR is dropped (the seed: an out-of-sync
  replica's consumers "find a new replica after [their] metadata refresh"); the leader only
  names ISR members, so this is the one way a follower that stopped replicating, and whose
  high watermark therefore stopped, lets go of its consumers before the lease ends.
* OFFSET_OUT_OF_RANGE from a follower is not definitive (KIP-392 "Out of range handling"):
  the preference is dropped and the same offset fetched from the leader, with no reset
  (Java FetchCollector: only the leader's OFFSET_OUT_OF_RANGE applies the reset policy).
  Past the follower's high watermark (the seed's case 4, "offset too large") the position
  is also validated with the leader first (KIP-320, via `validation`) and metadata
  refreshed, as the seed says; below it (case 3, "offset too small") the leader's answer
  decides.
* NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
  (and the other errors Java and librdkafka answer with a metadata refresh): back to the
  leader, refresh metadata, back off (Java requestMetadataUpdate clears the preferred
  replica; librdkafka rd_kafka_fetch_reply_handle_partition_error delegates to the leader).
* A replica that cannot be reached (connection refused or broken, request timed out):
  back to the leader and refresh (Java handleFetchFailure clears the preferred replica of
  every partition in the failed request). Beyond Java and librdkafka, odradek then treats
  the replica as unreachable for `unreachable_ms` and, while the leader would send a
  partition back there, asks the leader without its rack so the leader serves it: a
  follower cut off from this client but alive to the cluster stays in the ISR, and
  otherwise the leader would keep redirecting to it and the consumer would read nothing
  for a whole lease.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from .errors import STALE_METADATA
from .fetcher import PartitionState

NO_REPLICA = -1

# Fetch errors that send a partition back to its leader with a metadata refresh: Java's
# handleInitializeCompletedFetchErrors (requestMetadataUpdate) and librdkafka's
# "errors handled by rdkafka" (rd_kafka_toppar_delegate_to_leader + leader_unavailable).
# Every code that makes metadata stale, and four more.
BACK_TO_LEADER = STALE_METADATA | frozenset({
    ErrorCode.offset_not_available,
    ErrorCode.replica_not_available,
    ErrorCode.unknown_topic_id,
    ErrorCode.inconsistent_topic_id,
})

# librdkafka backs off a partition whose new lease comes within a minute of the previous
# one ("preferred replica lease changing too quickly"); a minute is also how long odradek
# keeps away from a replica it could not reach.
UNREACHABLE_MS = 60_000


class Step(Enum):
    RECORDS = "records"  # hand the partition's data (maybe none) to Positions
    LEADER = "leader"  # fetch again at once, from the leader; the position is unchanged
    REFRESH = "refresh"  # refresh metadata and back off before fetching again
    RESET = "reset"  # the leader's OFFSET_OUT_OF_RANGE: the reset policy applies
    VALIDATE = "validate"  # KIP-392 case 4: validate the position with the leader (KIP-320)
    FAIL = "fail"  # an error for the application


class Route(NamedTuple):
    node: int
    rack: bool  # send the client's rack (False: the leader should serve, not redirect)


def forget(s: PartitionState) -> int:
    """Drop the preferred read replica; returns the one dropped (or NO_REPLICA)."""
    dropped, s.preferred, s.preferred_until_ms = s.preferred, NO_REPLICA, 0.0
    return dropped


class ReadReplicas:
    """KIP-392 decisions of one consumer. `unreachable`: node -> until when (ms) the
    replicas this client could not reach are kept away from."""

    def __init__(self, lease_ms: float, unreachable_ms: float = UNREACHABLE_MS) -> None:
        self.lease_ms = lease_ms
        self.unreachable_ms = unreachable_ms
        self.unreachable: dict[int, float] = {}

    def _cut_off(self, node: int, now_ms: float) -> bool:
        until = self.unreachable.get(node)
        if until is None:
            return False
        if now_ms >= until:
            del self.unreachable[node]
            return False
        return True

    def route(self, s: PartitionState, now_ms: float, brokers: Collection[int], isr: Collection[int]) -> Route:
        """Where the partition's next fetch goes. `s.leader` must be known."""
        rack = now_ms >= s.rackless_until_ms
        if s.preferred == NO_REPLICA or s.preferred == s.leader:
            return Route(s.leader, rack)
        if now_ms >= s.preferred_until_ms or s.preferred not in brokers or isr and s.preferred not in isr:  # the lease ended: the leader decides again
            forget(s)
        elif self._cut_off(s.preferred, now_ms):
            s.rackless_until_ms = max(s.rackless_until_ms, self.unreachable[s.preferred])
            forget(s)
            return Route(s.leader, False)
        else:
            return Route(s.preferred, True)
        return Route(s.leader, rack)

    def on_fetched(self, s: PartitionState, node: int, code: ErrorCode | int, *, preferred: int,
                   fetch_offset: int, high_watermark: int, now_ms: float, brokers: Collection[int]) -> Step:
        """A partition's answer in a Fetch response from `node`."""
        from_follower = node != s.leader
        if code == ErrorCode.none:
            if preferred >= 0 and preferred != node:
                if self._cut_off(preferred, now_ms):
                    # The leader would have us read where we cannot: ask it again, rackless.
                    s.rackless_until_ms = max(s.rackless_until_ms, self.unreachable[preferred])
                    forget(s)
                    return Step.LEADER
                s.preferred, s.preferred_until_ms = preferred, now_ms + self.lease_ms
                # librdkafka: a replica this client does not know of yet: refresh first.
                return Step.RECORDS if preferred in brokers else Step.REFRESH
            return Step.RECORDS
        if code == ErrorCode.offset_out_of_range:
            if not from_follower:
                return Step.RESET
            forget(s)
            # KIP-392 "Out of range handling", case 4: an offset past this follower's high
            # watermark may well exist on the leader; check the position there (KIP-320).
            if fetch_offset > high_watermark >= 0 and s.position_epoch >= 0:
                return Step.VALIDATE
            return Step.LEADER
        if code in BACK_TO_LEADER:
            forget(s)
            return Step.REFRESH
        return Step.FAIL

    def on_unreachable(self, node: int, states: Mapping[object, PartitionState], now_ms: float) -> None:
        """A fetch sent to `node` failed without an answer (connection, timeout). The
        partitions it carried go back to their leaders; a follower is kept away from."""
        follower = False
        for s in states.values():
            if s.leader != node:
                follower = True
                if s.preferred == node:
                    forget(s)
        if follower:
            self.unreachable[node] = now_ms + self.unreachable_ms
