"""Which broker a partition is fetched from after each answer (`odradek.client.readreplica`), sans-I/O.

Each test follows one partition (leader 1; replicas 1, 2, 3 in racks a, b, c; the client
in rack b) through Fetch answers and failures, and checks where the next fetch goes.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.fetcher import PartitionState
from odradek.client.readreplica import (
    BACK_TO_LEADER,
    UNREACHABLE_MS,
    ReadReplicas,
    Route,
    Step,
)
from odradek.client.validation import observe_leader

BROKERS = {1, 2, 3}
ISR = (1, 2, 3)
LEASE = 300_000  # metadata.max.age.ms's default: Java's lease; librdkafka's fixed 5 minutes


def partition(position: int = 10, epoch_of_position: int | None = None) -> PartitionState:
    s = PartitionState(position=position)
    observe_leader(s, 1, 0)
    if epoch_of_position is not None:
        s.offset_epoch, s.epoch_of = epoch_of_position, position
    return s


def redirected(rr: ReadReplicas, s: PartitionState, to: int = 2, now: float = 0.0) -> Step:
    """The leader's answer: no records, read from `to`."""
    return rr.on_fetched(s, 1, ErrorCode.none, preferred=to, fetch_offset=s.position, high_watermark=20,
                         now_ms=now, brokers=BROKERS)


def test_a_partition_goes_to_its_leader_until_the_leader_names_a_replica():
    rr, s = ReadReplicas(LEASE), partition()
    assert rr.route(s, 0, BROKERS, ISR) == Route(1, True)
    # The leader serves data itself (no preference): nothing changes.
    assert rr.on_fetched(s, 1, ErrorCode.none, preferred=-1, fetch_offset=10, high_watermark=20, now_ms=0,
                         brokers=BROKERS) is Step.RECORDS
    assert rr.route(s, 0, BROKERS, ISR) == Route(1, True)
    assert redirected(rr, s) is Step.RECORDS  # no records in it, only the replica
    assert (s.preferred, s.preferred_until_ms) == (2, LEASE)
    assert rr.route(s, 1, BROKERS, ISR) == Route(2, True)
    # The follower serves it, and never redirects; the preference stands.
    assert rr.on_fetched(s, 2, ErrorCode.none, preferred=-1, fetch_offset=10, high_watermark=20, now_ms=5,
                         brokers=BROKERS) is Step.RECORDS
    assert rr.route(s, 5, BROKERS, ISR) == Route(2, True)


def test_a_leader_naming_itself_is_no_preference():
    rr, s = ReadReplicas(LEASE), partition()
    assert redirected(rr, s, to=1) is Step.RECORDS
    assert s.preferred == -1 and rr.route(s, 0, BROKERS, ISR).node == 1


def test_the_preference_lasts_one_lease_then_the_leader_decides_again():
    rr, s = ReadReplicas(lease_ms=1000), partition()
    redirected(rr, s, now=500)
    assert rr.route(s, 1499, BROKERS, ISR).node == 2
    assert rr.route(s, 1500, BROKERS, ISR).node == 1  # the lease ended
    assert s.preferred == -1
    redirected(rr, s, now=1600)  # the leader names it again: a new lease
    assert rr.route(s, 2599, BROKERS, ISR).node == 2


def test_a_replica_missing_from_metadata_means_a_refresh_then_the_leader():
    rr, s = ReadReplicas(LEASE), partition()
    step = rr.on_fetched(s, 1, ErrorCode.none, preferred=4, fetch_offset=10, high_watermark=20, now_ms=0,
                         brokers=BROKERS)
    assert step is Step.REFRESH and s.preferred == 4  # librdkafka: refresh the brokers first
    assert rr.route(s, 1, BROKERS | {4}, ISR + (4,)) == Route(4, True)  # the refresh found it
    assert rr.route(s, 2, BROKERS, ISR) == Route(1, True)  # still missing: Java uses the leader
    assert s.preferred == -1


def test_a_new_leader_or_epoch_drops_the_preference():
    rr, s = ReadReplicas(LEASE), partition()
    redirected(rr, s)
    assert not observe_leader(s, 1, 0)  # the same leader: nothing happens
    assert s.preferred == 2
    observe_leader(s, 1, 1)  # same node, new epoch
    assert s.preferred == -1 and rr.route(s, 0, BROKERS, ISR) == Route(1, True)
    redirected(rr, s)
    observe_leader(s, 3, 2)  # another node
    assert s.preferred == -1 and rr.route(s, 0, BROKERS, ISR) == Route(3, True)


def test_a_preferred_replica_metadata_shows_out_of_sync_is_dropped():
    rr, s = ReadReplicas(LEASE), partition()
    redirected(rr, s)
    assert rr.route(s, 0, BROKERS, (1, 3)) == Route(1, True)
    assert s.preferred == -1


def test_offset_out_of_range_from_a_follower_goes_back_to_the_leader_with_no_reset():
    """KIP-392 "Out of range handling"; Java FetchCollector: only the leader's resets."""
    rr = ReadReplicas(LEASE)
    # Case 3, offset too small (below the follower's log start): the leader decides.
    s = partition(position=10, epoch_of_position=0)
    redirected(rr, s)
    step = rr.on_fetched(s, 2, ErrorCode.offset_out_of_range, preferred=-1, fetch_offset=10, high_watermark=30,
                         now_ms=1, brokers=BROKERS)
    assert step is Step.LEADER and s.position == 10 and s.reset is None
    assert rr.route(s, 1, BROKERS, ISR) == Route(1, True)
    # The same answer from the leader is definitive: the reset policy.
    assert rr.on_fetched(s, 1, ErrorCode.offset_out_of_range, preferred=-1, fetch_offset=10, high_watermark=30,
                         now_ms=2, brokers=BROKERS) is Step.RESET


def test_offset_past_a_followers_high_watermark_validates_with_the_leader():
    """KIP-392 case 4, offset too large: validate (KIP-320) when the position has an epoch."""
    rr = ReadReplicas(LEASE)
    s = partition(position=25, epoch_of_position=0)
    redirected(rr, s)
    step = rr.on_fetched(s, 2, ErrorCode.offset_out_of_range, preferred=-1, fetch_offset=25, high_watermark=20,
                         now_ms=1, brokers=BROKERS)
    assert step is Step.VALIDATE and s.preferred == -1 and s.reset is None
    # No epoch to validate with: just the leader, as Java does.
    s = partition(position=25)
    redirected(rr, s)
    assert rr.on_fetched(s, 2, ErrorCode.offset_out_of_range, preferred=-1, fetch_offset=25, high_watermark=20,
                         now_ms=1, brokers=BROKERS) is Step.LEADER


@pytest.mark.parametrize("code", [ErrorCode.not_leader_or_follower, ErrorCode.offset_not_available,
                                  ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                                  ErrorCode.replica_not_available, ErrorCode.kafka_storage_error],
                         ids=lambda c: c.name)
def test_errors_java_and_librdkafka_answer_by_going_back_to_the_leader(code):
    rr, s = ReadReplicas(LEASE), partition()
    redirected(rr, s)
    assert code in BACK_TO_LEADER
    step = rr.on_fetched(s, 2, code, preferred=-1, fetch_offset=10, high_watermark=-1, now_ms=1, brokers=BROKERS)
    assert step is Step.REFRESH  # a metadata refresh and a backoff
    assert rr.route(s, 1, BROKERS, ISR) == Route(1, True)
    # From the leader they mean the same: refresh (OFFSET_NOT_AVAILABLE is retried, not raised).
    assert rr.on_fetched(s, 1, code, preferred=-1, fetch_offset=10, high_watermark=-1, now_ms=1,
                         brokers=BROKERS) is Step.REFRESH


def test_other_errors_are_the_applications():
    rr, s = ReadReplicas(LEASE), partition()
    assert rr.on_fetched(s, 1, ErrorCode.topic_authorization_failed, preferred=-1, fetch_offset=10,
                         high_watermark=-1, now_ms=0, brokers=BROKERS) is Step.FAIL


def test_an_unreachable_follower_sends_its_partitions_to_the_leader_which_is_asked_rackless():
    rr = ReadReplicas(LEASE)
    s, other = partition(), partition()
    redirected(rr, s)
    redirected(rr, other)
    rr.on_unreachable(2, {"s": s, "other": other}, now_ms=1000)  # Java handleFetchFailure
    assert s.preferred == other.preferred == -1
    assert rr.route(s, 1000, BROKERS, ISR) == Route(1, True)
    # The leader names it again (it is alive and in the ISR for the cluster): not followed;
    # the leader is asked again without the rack, so it serves the partition itself.
    assert redirected(rr, s, now=1001) is Step.LEADER
    assert s.preferred == -1
    assert rr.route(s, 1002, BROKERS, ISR) == Route(1, False)
    # Once the replica has been kept away from long enough, it is tried again.
    later = 1000 + UNREACHABLE_MS
    assert rr.route(s, later, BROKERS, ISR) == Route(1, True)
    assert redirected(rr, s, now=later) is Step.RECORDS
    assert rr.route(s, later, BROKERS, ISR) == Route(2, True)


def test_an_unreachable_leader_is_not_kept_away_from():
    rr, s = ReadReplicas(LEASE), partition()
    rr.on_unreachable(1, {"s": s}, now_ms=0)
    assert rr.unreachable == {}
    assert rr.route(s, 1, BROKERS, ISR) == Route(1, True)
