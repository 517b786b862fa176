"""The exact records of KIP-848 online migration (DESIGN principle 2; Kafka's
GroupMetadataManagerTest pins them with assertRecordsEquals).

  * Upgrade: a ConsumerGroupHeartbeat joining a classic group. The conversion is its own
    batch (Kafka writes conversion and heartbeat in one): the classic group's tombstone,
    then Kafka's ConsumerGroup.createConsumerGroupRecords order (every member's metadata,
    the group epoch = the classic generation, every target, the target epoch, every
    current assignment), then the heartbeat's records as for any join.
  * A classic JoinGroup into a consumer group is translated into a full heartbeat: its
    records are a heartbeat's, the member metadata carrying the classic metadata (session
    timeout, supported protocols).
  * Downgrade: the last consumer-protocol member leaves; Kafka's
    ConsumerGroup.createGroupTombstoneRecords order (every current assignment, every
    target, the target epoch, every member's metadata, the partition metadata, the group
    epoch) then the classic group, Stable at generation = group epoch, each member holding
    its target assignment.
"""

from __future__ import annotations

from odradek.coordinator import records as R
from odradek.coordinator.consumer.model import ClassicMeta, ConsumerMember, MemberState
from odradek.coordinator.consumer_protocol import encode_assignment, encode_subscription
from odradek.protocol.errors import MEMBER_ID_REQUIRED, NONE, REBALANCE_IN_PROGRESS
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


def sub(owned=()) -> tuple:
    """A classic consumer's JoinGroup protocols: "range", subscription v1 to foo owning `owned`."""
    return (("range", encode_subscription(["foo"], {"foo": list(owned)}, version=1)),)


def meta(mid: str, *, client_id=CLIENT_ID, rebalance=300_000, protocols=None, instance_id=None) -> R.CoordinatorRecord:
    return R.member_metadata(G, ConsumerMember(
        mid, instance_id=instance_id, client_id=client_id, client_host=CLIENT_HOST, subscribed_topic_names=("foo",),
        rebalance_timeout_ms=rebalance, classic=None if protocols is None else ClassicMeta(10_000, protocols),
    ))


def current(mid: str, epoch: int, previous: int, state: MemberState, assigned=None, pending=None) -> R.CoordinatorRecord:
    return R.current_assignment(G, ConsumerMember(
        mid, member_epoch=epoch, previous_member_epoch=previous, state=state,
        assigned={FOO: assigned} if assigned else {}, pending_revocation={FOO: pending} if pending else {},
    ))


def target(mid: str, *partitions: int) -> R.CoordinatorRecord:
    return R.target_member(G, mid, {FOO: frozenset(partitions)})


def row(mid: str, subscription: bytes, assignment: bytes, *, instance_id=None, client_id=CLIENT_ID) -> dict:
    return {"member_id": mid, "group_instance_id": instance_id, "client_id": client_id, "client_host": CLIENT_HOST,
            "rebalance_timeout": 30_000, "session_timeout": 10_000, "subscription": subscription,
            "assignment": assignment}


def classic_group(generation: int, leader: str, members: list[dict], *, timestamp: int = 1_000) -> R.CoordinatorRecord:
    return R.CoordinatorRecord(R.CLASSIC_GROUP, (G,), {
        "protocol_type": "consumer", "generation": generation, "protocol": "range", "leader": leader,
        "current_state_timestamp": timestamp, "members": members,
    })


def consumer_group_tombstones(mids: list[str]) -> list[R.CoordinatorRecord]:
    return [
        *(R.current_assignment_tombstone(G, m) for m in mids),
        *(R.target_member_tombstone(G, m) for m in mids),
        R.target_epoch_tombstone(G),
        *(R.member_tombstone(G, m) for m in mids),
        R.partition_metadata_tombstone(G),
        R.group_tombstone(G),
    ]


def assert_replays(d: Driver) -> None:
    assert d.replay() == d.shard.snapshot()


def classic_pair(d: Driver) -> tuple[str, str]:
    """Two classic members (JoinGroup v3), Stable at generation 2: A (leader) foo-0,1, B foo-2,3."""
    a = d.join(protocols=sub(), version=3, client_id="a")[0]["member_id"]
    box_b = d.join(protocols=sub(), version=3, client_id="b")
    (b,) = set(d.shard.classic_groups[G].members) - {a}
    d.join(a, protocols=sub(), version=3, client_id="a")
    assert box_b and box_b[0]["generation_id"] == 2
    d.sync(b, 2)
    d.sync(a, 2, assignments=((a, encode_assignment({"foo": [0, 1]}, 1)), (b, encode_assignment({"foo": [2, 3]}, 1))))
    assert (a, b) == ("a-id0", "b-id1")
    assert d.shard.classic_groups[G].state.value == "Stable"
    return a, b


# --- upgrade: classic -> consumer --------------------------------------------------------------


def test_a_consumer_heartbeat_converts_a_stable_classic_group_then_joins_it():
    d = Driver()
    a, b = classic_pair(d)
    resp = d.hb("C", 0)
    assert resp["error_code"] == NONE and resp["member_epoch"] == 3
    conversion, join = d.batches
    assert_records_equal([
        R.classic_group_tombstone(G),
        meta(a, client_id="a", rebalance=30_000, protocols=sub()),
        meta(b, client_id="b", rebalance=30_000, protocols=sub()),
        # Kafka (2024-10) writes no partition metadata here: its heartbeat that follows finds
        # the group's (empty) subscription metadata stale and writes it then.
        R.partition_metadata(G, [(FOO, "foo", 4)]),
        R.group_epoch(G, 2),  # the classic generation
        target(a, 0, 1),
        target(b, 2, 3),
        R.target_epoch(G, 2),
        # every member at epoch = generation, previous epoch too, holding its assignment
        current(a, 2, 2, STABLE, {0: 2, 1: 2}),
        current(b, 2, 2, STABLE, {2: 2, 3: 2}),
    ], conversion)
    assert_records_equal([
        meta("C"),
        R.group_epoch(G, 3),
        target("C", 3),  # "C" sorts before "a-id0" and "b-id1"
        target(b, 2),
        R.target_epoch(G, 3),
        current("C", 3, 0, UNRELEASED),
    ], join)
    assert_replays(d)

    # B, a classic member now, learns of the new epoch from its heartbeat and rejoins still
    # owning foo-2,3: its subscription bytes changed (metadata record) and it must revoke foo-3.
    assert d.cheartbeat(b, 2) == REBALANCE_IN_PROGRESS
    assert d.batches == []
    box = d.join(b, protocols=sub([2, 3]), version=3, client_id="b")
    assert box[0]["generation_id"] == 2
    assert_records_equal([
        meta(b, client_id="b", rebalance=30_000, protocols=sub([2, 3])),
        current(b, 2, 2, UNREVOKED, {2: 2}, {3: 2}),
    ], d.written)
    # It revoked foo-3 and rejoins: it moves to epoch 3.
    box = d.join(b, protocols=sub([2]), version=3, client_id="b")
    assert box[0]["generation_id"] == 3
    assert_records_equal([
        meta(b, client_id="b", rebalance=30_000, protocols=sub([2])),
        current(b, 3, 2, STABLE, {2: 2}),
    ], d.written)
    # C gets the released partition at epoch 3.
    d.hb("C", 3, owned={})
    assert_records_equal([current("C", 3, 0, STABLE, {3: 3})], d.written)
    assert_replays(d)


def test_a_consumer_heartbeat_replaces_an_empty_classic_group():
    d = Driver()
    a = d.join(protocols=sub(), version=3)[0]["member_id"]
    d.sync(a, 1, assignments=[(a, encode_assignment({"foo": [0, 1, 2, 3]}, 1))])
    d.leave((a,))
    assert d.shard.classic_groups[G].state.value == "Empty"
    d.hb("C", 0)
    tombstone, join = d.batches
    assert_records_equal([R.classic_group_tombstone(G)], tombstone)
    assert_records_equal([
        meta("C"),
        R.partition_metadata(G, [(FOO, "foo", 4)]),
        R.group_epoch(G, 1),
        target("C", 0, 1, 2, 3),
        R.target_epoch(G, 1),
        current("C", 1, 0, STABLE, {0: 1, 1: 1, 2: 1, 3: 1}),
    ], join)
    assert_replays(d)


# --- a classic member joins a consumer group -----------------------------------------------------


def test_a_classic_join_into_a_consumer_group_writes_a_heartbeats_records():
    d = Driver()
    d.hb("C", 0)
    box = d.join(protocols=sub())
    assert int(box[0]["error_code"]) == MEMBER_ID_REQUIRED  # KIP-394, as in a classic group
    assert d.batches == []
    k = box[0]["member_id"]
    box = d.join(k, protocols=sub())
    assert int(box[0]["error_code"]) == NONE and box[0]["generation_id"] == 2 and box[0]["leader"] == ""
    assert_records_equal([
        meta(k, rebalance=30_000, protocols=sub()),
        R.group_epoch(G, 2),
        target("C", 0, 1),
        target(k, 2, 3),
        R.target_epoch(G, 2),
        current(k, 2, 0, UNRELEASED),
    ], d.written)
    assert_replays(d)
    # Its SyncGroup and Heartbeat write nothing.
    assert d.sync(k, 2)[0]["assignment"] == encode_assignment({}, 1)
    assert d.cheartbeat(k, 2) == NONE
    assert d.batches == []


# --- downgrade: consumer -> classic --------------------------------------------------------------


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group():
    d = Driver()
    d.hb("C", 0)
    k = d.join(protocols=sub())[0]["member_id"]
    d.join(k, protocols=sub())
    resp = d.hb("C", -1)
    assert resp["member_epoch"] == -1
    assert_records_equal([
        *consumer_group_tombstones(["C", k]),
        # Stable at generation = group epoch; K holds its target (foo-2,3), encoded in the
        # version of its subscription; the rebalance that follows writes nothing yet.
        classic_group(2, k, [row(k, sub()[0][1], encode_assignment({"foo": [2, 3]}, 1))]),
    ], d.written)
    group = d.shard.classic_groups[G]
    assert G not in d.shard.consumer_groups and group.state.value == "PreparingRebalance"

    # K rejoins under the classic protocol and, as leader, assigns everything.
    box = d.join(k, protocols=sub([2, 3]))
    assert box[0]["generation_id"] == 3 and d.batches == []
    d.sync(k, 3, assignments=[(k, encode_assignment({"foo": [0, 1, 2, 3]}, 1))])
    assert_records_equal([
        classic_group(3, k, [row(k, sub([2, 3])[0][1], encode_assignment({"foo": [0, 1, 2, 3]}, 1))]),
    ], d.written)
    assert_replays(d)  # a completed rebalance: replay gives the live group


def test_a_classic_static_member_replacing_the_last_consumer_protocol_member_downgrades_without_rebalance():
    d = Driver()
    d.hb("S", 0, instance_id="i1")
    k = d.join(protocols=sub())[0]["member_id"]
    d.join(k, protocols=sub())
    d.hb("S", 1, owned={FOO: [0, 1, 2, 3]}, instance_id="i1")
    d.hb("S", 1, owned={FOO: [0, 1]}, instance_id="i1")  # S revoked foo-2,3 and is at epoch 2
    # The instance restarts as a classic consumer (a rolling downgrade of static members).
    box = d.join(protocols=sub([0, 1]), instance_id="i1")
    new = box[0]["member_id"]
    assert new == "id1" and int(box[0]["error_code"]) == NONE and box[0]["generation_id"] == 2
    replacement, downgrade = d.batches
    assert_records_equal([
        R.current_assignment_tombstone(G, "S"), R.target_member_tombstone(G, "S"), R.member_tombstone(G, "S"),
        meta(new, rebalance=30_000, protocols=sub([0, 1]), instance_id="i1"),
        target(new, 0, 1),
        # S did not leave with -2, so the assignment epochs it had (1) are kept.
        current(new, 2, 0, STABLE, {0: 1, 1: 1}),
    ], replacement)
    # Kafka does this in one batch, with createGroupTombstoneRecordsWithReplacedMember
    # (tombstones for the joining member's id, no records of its own); odradek writes the
    # replacement, then converts the group.
    assert_records_equal([
        *consumer_group_tombstones([k, new]),
        classic_group(2, k, [
            row(k, sub()[0][1], encode_assignment({"foo": [2, 3]}, 1)),
            row(new, sub([0, 1])[0][1], encode_assignment({"foo": [0, 1]}, 1), instance_id="i1"),
        ]),
    ], downgrade)
    assert d.shard.classic_groups[G].state.value == "Stable"
    assert_replays(d)
