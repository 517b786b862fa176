"""The exact records KIP-848 ConsumerGroupHeartbeat handling writes (DESIGN principle 2;
Kafka's GroupMetadataManagerTest pins them with assertRecordsEquals).

Each test drives the coordinator through its handlers, compares every record batch a
request (or a timer) wrote with the records built by hand, order included, and then checks
that replaying the whole log into a fresh shard rebuilds the live state.

Record order of a heartbeat, as in Kafka's consumerGroupHeartbeat: member metadata, the
subscribed-partition metadata when it changed, the group epoch, the target assignment of
every member whose target changed then the target epoch, and last the member's current
assignment. A member removal writes its current assignment, target and metadata
tombstones in that order (Kafka's removeMember: "The order matters here").

Where odradek writes something else than Kafka (GroupMetadataManager, CurrentAssignmentBuilder
as of 2024-10) the test says so in a comment and pins odradek's records.
"""

from __future__ import annotations

from odradek.coordinator import records as R
from odradek.coordinator.consumer.model import ConsumerMember, MemberState
from tests.coordinator.records_drive import (
    CLIENT_HOST,
    CLIENT_ID,
    FOO,
    Driver,
    assert_records_equal,
)

G = "g"
STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def meta(mid: str, *, instance_id=None, topics=("foo",), rebalance=300_000) -> R.CoordinatorRecord:
    return R.member_metadata(G, ConsumerMember(
        mid, instance_id=instance_id, client_id=CLIENT_ID, client_host=CLIENT_HOST,
        subscribed_topic_names=tuple(topics), rebalance_timeout_ms=rebalance,
    ))


def current(mid: str, epoch: int, previous: int, state: MemberState, assigned=None, pending=None) -> R.CoordinatorRecord:
    """`assigned`/`pending`: {partition of foo: assignment epoch (KIP-1251)}."""
    return R.current_assignment(G, ConsumerMember(
        mid, member_epoch=epoch, previous_member_epoch=previous, state=state,
        assigned={FOO: assigned} if assigned else {}, pending_revocation={FOO: pending} if pending else {},
    ))


def target(mid: str, *partitions: int) -> R.CoordinatorRecord:
    return R.target_member(G, mid, {FOO: frozenset(partitions)})


def foo_metadata(partitions: int = 4) -> R.CoordinatorRecord:
    return R.partition_metadata(G, [(FOO, "foo", partitions)])


def removal(mid: str) -> list[R.CoordinatorRecord]:
    return [R.current_assignment_tombstone(G, mid), R.target_member_tombstone(G, mid), R.member_tombstone(G, mid)]


def assert_replays(d: Driver) -> None:
    assert d.replay() == d.shard.snapshot()


def two_stable(d: Driver, first: str = "A", *, first_instance=None) -> None:
    """`first` holds foo-0,1 and B foo-2,3, both Stable at epoch 2 (records pinned in the tests below)."""
    d.hb(first, 0, instance_id=first_instance)
    d.hb("B", 0)
    d.hb(first, 1, owned={FOO: [0, 1, 2, 3]}, instance_id=first_instance)
    d.hb(first, 1, owned={FOO: [0, 1]}, instance_id=first_instance)
    d.hb("B", 2, owned={})
    g = d.shard.consumer_groups[G]
    assert (g.group_epoch, g.target_epoch) == (2, 2)
    assert {m.member_id: (m.member_epoch, m.state) for m in g.members.values()} == {first: (2, STABLE), "B": (2, STABLE)}


# --- joining, target computation ----------------------------------------------------------------


def test_first_member_join_writes_metadata_epoch_target_and_current_assignment():
    d = Driver()
    resp = d.hb("A", 0)
    assert resp["member_epoch"] == 1
    assert_records_equal([
        meta("A"),
        foo_metadata(),
        R.group_epoch(G, 1),
        target("A", 0, 1, 2, 3),
        R.target_epoch(G, 1),
        current("A", 1, 0, STABLE, {0: 1, 1: 1, 2: 1, 3: 1}),
    ], d.written)
    assert_replays(d)


def test_second_member_join_recomputes_the_target_and_waits_for_unreleased_partitions():
    d = Driver()
    d.hb("A", 0)
    resp = d.hb("B", 0)
    assert resp["member_epoch"] == 2 and resp["assignment"] == {"topic_partitions": []}
    assert_records_equal([
        meta("B"),
        # the subscribed topics did not change: no partition metadata record
        R.group_epoch(G, 2),
        target("A", 0, 1),
        target("B", 2, 3),
        R.target_epoch(G, 2),
        # foo-2,3 are still A's: B moves to the target epoch and waits for them
        current("B", 2, 0, UNRELEASED),
    ], d.written)
    assert_replays(d)


def test_a_join_writes_target_records_only_for_members_whose_target_changed():
    d = Driver()
    two_stable(d)
    d.hb("C", 0)
    assert_records_equal([
        meta("C"),
        R.group_epoch(G, 3),
        # A keeps foo-0,1 (the uniform assignor is sticky): no record for A
        target("B", 2),
        target("C", 3),
        R.target_epoch(G, 3),
        current("C", 3, 0, UNRELEASED),
    ], d.written)
    assert_replays(d)


def test_partitions_added_to_a_subscribed_topic_write_metadata_epoch_and_targets():
    d = Driver()
    two_stable(d)
    d.set_topics([("foo", FOO, 6)])
    assert_records_equal([
        foo_metadata(6),
        R.group_epoch(G, 3),
        target("A", 0, 1, 4),
        target("B", 2, 3, 5),
        R.target_epoch(G, 3),
    ], d.written)
    assert_replays(d)


# --- reconciliation -----------------------------------------------------------------------------


def test_reconciliation_steps_revoke_acknowledge_and_release():
    d = Driver()
    d.hb("A", 0)
    d.hb("B", 0)

    # A still owns foo-0..3 but its target is foo-0,1: it must revoke foo-2,3 first and
    # stays at its epoch (KIP-848 "revoke, then assign").
    resp = d.hb("A", 1, owned={FOO: [0, 1, 2, 3]})
    assert resp["member_epoch"] == 1
    # Kafka's CurrentAssignmentBuilder writes previous_member_epoch 1 here (updateMemberEpoch
    # shifts the epoch even when it does not change); odradek keeps the previous one, 0.
    assert_records_equal([current("A", 1, 0, UNREVOKED, {0: 1, 1: 1}, {2: 1, 3: 1})], d.written)

    # A heartbeat that still reports foo-2,3 changes nothing and writes nothing.
    d.hb("A", 1, owned={FOO: [0, 1, 2, 3]})
    assert d.batches == []

    # A acknowledges the revocation: it moves to the target epoch, keeping the
    # assignment epochs of the partitions it kept (KIP-1251).
    resp = d.hb("A", 1, owned={FOO: [0, 1]})
    assert resp["member_epoch"] == 2
    assert_records_equal([current("A", 2, 1, STABLE, {0: 1, 1: 1})], d.written)

    # B, waiting at epoch 2, now receives the released partitions at epoch 2.
    resp = d.hb("B", 2, owned={})
    assert resp["assignment"]["topic_partitions"] == [{"topic_id": FOO, "partitions": [2, 3]}]
    # Kafka writes previous_member_epoch 2 (updateMemberEpoch(2) from 2); odradek keeps 0.
    assert_records_equal([current("B", 2, 0, STABLE, {2: 2, 3: 2})], d.written)

    # Converged: a steady heartbeat writes nothing.
    d.hb("B", 2, owned={FOO: [2, 3]})
    d.hb("A", 2, owned={FOO: [0, 1]})
    assert d.batches == []
    assert_replays(d)


# --- leaving ------------------------------------------------------------------------------------


def test_dynamic_member_leaving_writes_tombstones_in_kafkas_order_then_the_epoch():
    d = Driver()
    two_stable(d)
    resp = d.hb("B", -1)
    assert resp["member_epoch"] == -1
    assert_records_equal([
        *removal("B"),
        R.group_epoch(G, 3),
        # Kafka's consumerGroupFenceMember stops at the epoch bump and computes the target on
        # the next heartbeat; odradek installs the new target in the same batch.
        target("A", 0, 1, 2, 3),
        R.target_epoch(G, 3),
    ], d.written)
    assert_replays(d)

    # A takes the rest at the new epoch; the partitions it kept keep their epoch.
    d.hb("A", 2, owned={FOO: [0, 1]})
    assert_records_equal([current("A", 3, 2, STABLE, {0: 1, 1: 1, 2: 3, 3: 3})], d.written)

    # The last member leaves: the subscribed topics become empty (a record with no
    # topics, not a tombstone, as in Kafka), the epoch is bumped and the empty target installed.
    d.hb("A", -1)
    assert_records_equal([
        *removal("A"),
        R.partition_metadata(G, []),
        R.group_epoch(G, 4),
        R.target_epoch(G, 4),
    ], d.written)
    assert_replays(d)
    assert d.shard.consumer_groups[G].members == {}


def test_static_member_leaving_with_minus_two_keeps_its_assignment_at_epoch_zero():
    d = Driver()
    two_stable(d, "S1", first_instance="i1")
    resp = d.hb("S1", -2, instance_id="i1")
    assert resp["member_epoch"] == -2
    # One record, no epoch bump (KIP-848 "Static Membership"). KIP-1251: the assignment
    # epochs drop to 0. Kafka's consumerGroupStaticMemberGroupLeave uses setMemberEpoch(-2),
    # leaving previous_member_epoch at 1; odradek writes the epoch it left at, 2.
    assert_records_equal([current("S1", -2, 2, STABLE, {0: 0, 1: 0})], d.written)
    assert_replays(d)


def test_static_member_leaving_mid_revocation_keeps_its_pending_partitions():
    d = Driver()
    d.hb("S1", 0, instance_id="i1")
    d.hb("B", 0)
    d.hb("S1", 1, owned={FOO: [0, 1, 2, 3]}, instance_id="i1")  # revoking foo-2,3
    d.hb("S1", -2, instance_id="i1")
    # Kafka clears partitions_pending_revocation on a static leave; odradek keeps them
    # (at epoch 0), so B still waits for them until S1's session runs out or it returns.
    assert_records_equal([current("S1", -2, 1, UNREVOKED, {0: 0, 1: 0}, {2: 0, 3: 0})], d.written)
    assert_replays(d)
    resp = d.hb("B", 2, owned={})
    assert resp["assignment"] is None and d.batches == []  # B, UNRELEASED, still waits for foo-2,3


def test_static_member_replaced_by_a_new_member_id_with_the_same_instance_id():
    d = Driver()
    two_stable(d, "S1", first_instance="i1")
    d.hb("S1", -2, instance_id="i1")
    resp = d.hb("S2", 0, instance_id="i1", rebalance_timeout=200_000)
    assert (resp["member_id"], resp["member_epoch"]) == ("S2", 2)
    assert resp["assignment"]["topic_partitions"] == [{"topic_id": FOO, "partitions": [0, 1]}]
    assert_records_equal([
        *removal("S1"),
        meta("S2", instance_id="i1", rebalance=200_000),
        # no epoch bump: the new incarnation takes over the old one's target and assignment
        target("S2", 0, 1),
        current("S2", 2, 0, STABLE, {0: 0, 1: 0}),
    ], d.written)
    # Kafka's replaceMember writes the copied member first (metadata, target, and a current
    # assignment at epoch 0), then the updated metadata and the reconciled current
    # assignment again; odradek writes each once, with the final values.
    assert_replays(d)
    g = d.shard.consumer_groups[G]
    assert g.static_members == {"i1": "S2"} and g.group_epoch == 2


# --- session expiry -----------------------------------------------------------------------------


def test_session_expiry_removes_the_member_like_a_leave():
    d = Driver()
    two_stable(d)
    d.advance(30_000)
    assert d.batches == []
    d.hb("A", 2, owned={FOO: [0, 1]})  # A's session restarts; B stays silent
    assert d.batches == []
    d.advance(15_000)  # B's 45 s session, from its last heartbeat, ran out
    assert len(d.batches) == 1
    assert_records_equal([
        *removal("B"),
        R.group_epoch(G, 3),
        target("A", 0, 1, 2, 3),
        R.target_epoch(G, 3),
    ], d.written)
    assert_replays(d)


def test_a_static_member_that_does_not_return_within_its_session_is_removed():
    d = Driver()
    two_stable(d, "S1", first_instance="i1")
    d.hb("S1", -2, instance_id="i1")
    d.advance(40_000)
    d.hb("B", 2, owned={FOO: [2, 3]})
    assert d.batches == []
    d.advance(5_000)
    assert_records_equal([
        *removal("S1"),
        R.group_epoch(G, 3),
        target("B", 0, 1, 2, 3),
        R.target_epoch(G, 3),
    ], d.written)
    assert_replays(d)
