"""The exact records offset handling writes: OffsetCommit, OffsetDelete, offset expiry
(DESIGN principle 2; Kafka's OffsetMetadataManagerTest pins them with assertRecordsEquals).

An OffsetCommit writes one OffsetCommit record (value v3) per accepted partition, in
request order, stamped with the coordinator's time; a partition refused (metadata too
large, a stale epoch) writes nothing. OffsetDelete writes a tombstone for each named
partition that has an offset. Expiry tombstones the offsets of empty groups, and an empty
group whose last offset expires is deleted with them.
"""

from __future__ import annotations

from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.protocol.errors import (
    GROUP_SUBSCRIBED_TO_TOPIC,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    STALE_MEMBER_EPOCH,
)
from tests.coordinator.records_drive import (
    BAR,
    FOO,
    CommitPartition,
    Driver,
    assert_records_equal,
)

G = "g"


def offset(topic: str, partition: int, committed: int, *, leader_epoch: int = -1, metadata: str = "",
           at: int = 1_000, group: str = G) -> R.CoordinatorRecord:
    """The OffsetCommitValue v3 fields, spelled out."""
    return R.CoordinatorRecord(R.OFFSET_COMMIT, (group, topic, partition), {
        "offset": committed, "leader_epoch": leader_epoch, "metadata": metadata, "commit_timestamp": at,
    })


def tombstone(topic: str, partition: int, group: str = G) -> R.CoordinatorRecord:
    return R.CoordinatorRecord(R.OFFSET_COMMIT, (group, topic, partition), None)


def assert_replays(d: Driver) -> None:
    assert d.replay() == d.shard.snapshot()


def expiring(retention: int = 60_000, interval: int = 10_000) -> Driver:
    return Driver(topics=(("foo", FOO, 4), ("bar", BAR, 2)), config=CoordinatorConfig(
        offsets_topic_partitions=1, initial_rebalance_delay_ms=0,
        offsets_retention_ms=retention, offsets_retention_check_interval_ms=interval))


# --- OffsetCommit ---------------------------------------------------------------------------------


def test_commit_writes_one_record_per_partition_in_request_order():
    d = Driver(topics=(("foo", FOO, 4), ("bar", BAR, 2)))
    codes = d.commit([
        ("foo", [CommitPartition(2, 10, leader_epoch=3, metadata="m2"), CommitPartition(0, 20)]),
        ("bar", [CommitPartition(1, 5, metadata=None)]),
    ])
    assert codes == {("foo", 2): NONE, ("foo", 0): NONE, ("bar", 1): NONE}
    assert_records_equal([
        offset("foo", 2, 10, leader_epoch=3, metadata="m2"),
        offset("foo", 0, 20),
        offset("bar", 1, 5),  # null metadata is stored as "" (Kafka's OffsetAndMetadata.fromRequest)
    ], d.written)
    assert_replays(d)

    # A later commit overwrites with its own timestamp.
    d.advance(7)
    d.commit([("foo", [CommitPartition(0, 21)])])
    assert_records_equal([offset("foo", 0, 21, at=1_007)], d.written)
    assert_replays(d)


def test_too_large_metadata_refuses_only_that_partition():
    d = Driver()
    limit = "x" * 4096  # offset.metadata.max.bytes
    codes = d.commit([("foo", [
        CommitPartition(0, 1, metadata=limit),
        CommitPartition(1, 2, metadata=limit + "x"),
        CommitPartition(2, 3),
    ])])
    assert codes == {("foo", 0): NONE, ("foo", 1): OFFSET_METADATA_TOO_LARGE, ("foo", 2): NONE}
    assert_records_equal([offset("foo", 0, 1, metadata=limit), offset("foo", 2, 3)], d.written)
    assert_replays(d)


def test_a_commit_with_nothing_accepted_writes_nothing():
    d = Driver()
    assert len(d.commit([("foo", [CommitPartition(0, 1, metadata="y" * 5000)])])) == 1
    assert d.batches == []
    d.hb("A", 0)
    assert d.commit([("foo", [CommitPartition(0, 1)])], member="A", epoch=2) == {("foo", 0): STALE_MEMBER_EPOCH}
    assert d.batches == []


def test_a_consumer_group_member_commits_at_its_epoch():
    d = Driver()
    d.hb("A", 0)
    d.advance(3)
    codes = d.commit([("foo", [CommitPartition(0, 100, leader_epoch=0), CommitPartition(3, 300)])], member="A", epoch=1)
    assert codes == {("foo", 0): NONE, ("foo", 3): NONE}
    assert_records_equal([offset("foo", 0, 100, leader_epoch=0, at=1_003), offset("foo", 3, 300, at=1_003)], d.written)
    assert_replays(d)


# --- OffsetDelete ---------------------------------------------------------------------------------


def test_offset_delete_tombstones_only_committed_partitions_in_request_order():
    d = Driver(topics=(("foo", FOO, 4), ("bar", BAR, 2)))
    d.commit([("foo", [CommitPartition(p, p) for p in range(4)]), ("bar", [CommitPartition(0, 9)])])
    resp = d.delete_offsets([("foo", [3, 1]), ("bar", [1, 0])])
    assert resp["error_code"] == NONE
    assert [(t["name"], [p["error_code"] for p in t["partitions"]]) for t in resp["topics"]] == [
        ("foo", [NONE, NONE]), ("bar", [NONE, NONE])]
    # bar-1 never had an offset: no tombstone (Kafka's deleteOffsets: hasCommittedOffset)
    assert_records_equal([tombstone("foo", 3), tombstone("foo", 1), tombstone("bar", 0)], d.written)
    assert_replays(d)
    assert sorted(d.shard.offsets[G]) == [("foo", 0), ("foo", 2)]


def test_offset_delete_of_a_subscribed_topic_writes_nothing_for_it():
    d = Driver(topics=(("foo", FOO, 4), ("bar", BAR, 2)))
    d.hb("A", 0)
    d.commit([("foo", [CommitPartition(0, 1)]), ("bar", [CommitPartition(0, 2)])], member="A", epoch=1)
    resp = d.delete_offsets([("foo", [0]), ("bar", [0])])
    assert [p["error_code"] for t in resp["topics"] for p in t["partitions"]] == [GROUP_SUBSCRIBED_TO_TOPIC, NONE]
    assert_records_equal([tombstone("bar", 0)], d.written)
    assert_replays(d)


# --- expiry ---------------------------------------------------------------------------------------


def test_expiry_tombstones_each_offset_once_its_retention_passed():
    d = expiring()
    d.commit([("foo", [CommitPartition(0, 10), CommitPartition(1, 20)])])
    d.advance(30_000)
    d.commit([("foo", [CommitPartition(1, 21)])])
    assert_records_equal([offset("foo", 1, 21, at=31_000)], d.written)
    for _ in range(2):
        d.advance(10_000)  # checks at 41 s and 51 s: nothing is 60 s old yet
        assert d.batches == []
    d.advance(10_000)  # 61 s: foo-0 (committed at 1 s) expires, foo-1 (31 s) stays
    assert_records_equal([tombstone("foo", 0)], d.written)
    assert_replays(d)
    d.advance(20_000)
    assert d.batches == []
    d.advance(10_000)  # 91 s
    assert_records_equal([tombstone("foo", 1)], d.written)
    assert_replays(d)
    assert d.shard.snapshot()["offsets"] == {}


def test_expiry_of_the_last_offset_of_an_empty_consumer_group_deletes_the_group():
    d = expiring()
    d.hb("A", 0)
    d.commit([("foo", [CommitPartition(1, 1)]), ("bar", [CommitPartition(0, 2)])], member="A", epoch=1)
    d.hb("A", -1)
    assert d.shard.consumer_groups[G].members == {}
    # Offsets of live groups never expire; this one is empty now.
    for _ in range(5):
        d.advance(10_000)
        assert d.batches == []
    d.advance(10_000)
    # Kafka: cleanupExpiredOffsets' tombstones, then ConsumerGroup.createGroupTombstoneRecords
    # (no members left: target epoch, partition metadata, group epoch).
    assert_records_equal([
        tombstone("bar", 0),
        tombstone("foo", 1),
        R.target_epoch_tombstone(G),
        R.partition_metadata_tombstone(G),
        R.group_tombstone(G),
    ], d.written)
    assert_replays(d)
    assert G not in d.shard.consumer_groups


def test_expiry_of_the_last_offset_of_an_empty_classic_group_deletes_the_group():
    d = expiring()
    a = d.join()[0]["member_id"]
    d.join(a)
    d.sync(a, 1, assignments=[(a, b"x")])
    d.commit([("foo", [CommitPartition(0, 5)])], member=a, epoch=1)
    d.leave((a,))
    assert d.shard.classic_groups[G].state.value == "Empty"
    for _ in range(5):
        d.advance(10_000)
        assert d.batches == []
    d.advance(10_000)
    assert_records_equal([tombstone("foo", 0), R.classic_group_tombstone(G)], d.written)
    assert_replays(d)
    assert G not in d.shard.classic_groups


def test_offsets_of_a_group_with_members_do_not_expire():
    d = expiring()
    d.hb("A", 0)
    d.commit([("foo", [CommitPartition(0, 5)])], member="A", epoch=1)
    for _ in range(4):
        d.advance(10_000)
        d.hb("A", 1, owned={FOO: [0, 1, 2, 3]})  # keep the session alive
    for _ in range(4):
        d.advance(10_000)
        assert d.batches == []
        d.hb("A", 1, owned={FOO: [0, 1, 2, 3]})
    assert d.shard.offsets[G][("foo", 0)].offset == 5
