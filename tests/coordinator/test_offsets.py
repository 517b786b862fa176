"""Offset commit/fetch/delete/expiry, and KIP-1251 fencing with assignment epochs."""

from __future__ import annotations

from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.offsets import (
    CommitPartition,
    CommitRequest,
    commit,
    delete,
    fetch_group,
)
from odradek.protocol.errors import (
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNSUPPORTED_VERSION,
)
from tests.coordinator.harness import FOO, Coord

OK, STALE = int(NONE), int(STALE_MEMBER_EPOCH)


def _a_gives_foo2_to_b():
    """A owns foo-0..2 at epoch 1; B joins (epoch 2) and takes foo-2 after A revokes it."""
    c = Coord(topics=[("foo", FOO, 3)])
    c.hb(member="A")
    c.hb(member="B")
    g = c.group()
    assert sorted(g.target["B"][FOO]) == [2]
    c.hb(member="A", epoch=1)
    c.hb(member="A", epoch=1, owned={FOO: [0, 1]})
    c.hb(member="B", epoch=2)
    assert g.members["A"].assigned[FOO] == {0: 1, 1: 1}  # kept partitions keep epoch 1
    assert g.members["B"].assigned[FOO] == {2: 2}        # newly assigned at epoch 2
    return c, g


def test_zombie_commit_is_rejected():
    c, _g = _a_gives_foo2_to_b()
    # A, a zombie still at epoch 1, commits foo-2 which B now owns.
    assert c.commit(member="A", epoch=1, offsets=[("foo", 2, 99)]) == {("foo", 2): STALE}
    assert c.fetch(topics=[("foo", [2])]) == {("foo", 2): -1}
    # B, the owner, commits it at its epoch.
    assert c.commit(member="B", epoch=2, offsets=[("foo", 2, 5)]) == {("foo", 2): OK}


def test_current_owner_with_lagging_epoch_is_accepted():
    c, _g = _a_gives_foo2_to_b()
    # A is at epoch 2 but its commit was built at epoch 1: foo-0 has been A's since epoch 1.
    assert c.commit(member="A", epoch=1, offsets=[("foo", 0, 7), ("foo", 1, 8)]) == {("foo", 0): OK, ("foo", 1): OK}
    assert c.fetch(topics=[("foo", [0, 1])]) == {("foo", 0): 7, ("foo", 1): 8}


def test_partition_reassigned_back_rejects_commits_from_before():
    c, g = _a_gives_foo2_to_b()
    # B leaves: foo-2 goes back to A at epoch 3. A commit for foo-2 built at epoch 1
    # (when A owned it before B did) is a zombie: assignment epoch 3 > client epoch 1.
    c.hb(member="B", epoch=-1)
    c.hb(member="A", epoch=2)
    assert g.members["A"].assigned[FOO] == {0: 1, 1: 1, 2: 3}
    assert c.commit(member="A", epoch=1, offsets=[("foo", 2, 1)]) == {("foo", 2): STALE}
    assert c.commit(member="A", epoch=3, offsets=[("foo", 2, 1)]) == {("foo", 2): OK}


def test_unowned_partitions_only_at_the_current_epoch():
    c, _g = _a_gives_foo2_to_b()
    # B commits foo-0 (not its own) at its current epoch: allowed (KIP-1251 keeps this).
    assert c.commit(member="B", epoch=2, offsets=[("foo", 0, 3)]) == {("foo", 0): OK}
    # ... but not with an older epoch.
    assert c.commit(member="B", epoch=1, offsets=[("foo", 0, 3)]) == {("foo", 0): STALE}


def test_pending_revocation_partitions_keep_their_epoch():
    c = Coord(topics=[("foo", FOO, 3)])
    c.hb(member="A")
    c.hb(member="B")
    c.hb(member="A", epoch=1)  # told to revoke foo-2, not acknowledged yet
    g = c.group()
    assert g.members["A"].pending_revocation[FOO] == {2: 1}
    # Committing the revoked partition before acknowledging (what a consumer does) is fine.
    assert c.commit(member="A", epoch=1, offsets=[("foo", 2, 11)]) == {("foo", 2): OK}


def test_newer_epoch_than_broker_and_unknown_member():
    c, _g = _a_gives_foo2_to_b()
    assert c.commit(member="A", epoch=5, offsets=[("foo", 0, 1)]) == {("foo", 0): STALE}
    assert c.commit(member="Z", epoch=1, offsets=[("foo", 0, 1)]) == {("foo", 0): int(UNKNOWN_MEMBER_ID)}
    # A membership-free commit to a non-empty consumer group names no member: unknown.
    assert c.commit(member="", epoch=-1, offsets=[("foo", 0, 1)]) == {("foo", 0): int(UNKNOWN_MEMBER_ID)}
    # Consumer-protocol members must use OffsetCommit v9+.
    assert c.commit(member="A", epoch=2, offsets=[("foo", 0, 1)], version=8) == {("foo", 0): int(UNSUPPORTED_VERSION)}


def test_legacy_assignment_records_use_the_member_epoch():
    c, g = _a_gives_foo2_to_b()
    # Rewrite A's current assignment as a pre-KIP-1251 record (no AssignmentEpochs tag).
    key, value = R.encode(R.current_assignment("g", g.members["A"]))
    decoded = R.decode(key, value)
    for tp in decoded.value["assigned_partitions"]:
        tp["assignment_epochs"] = None
    c.log[0].append(R.encode(decoded))
    c.restart()
    g = c.group()
    assert g.members["A"].assigned[FOO] == {0: 2, 1: 2}  # every epoch = member epoch 2
    # So the relaxed check degrades to the strict one: epoch 1 is now rejected.
    assert c.commit(member="A", epoch=1, offsets=[("foo", 0, 1)]) == {("foo", 0): STALE}
    assert c.commit(member="A", epoch=2, offsets=[("foo", 0, 1)]) == {("foo", 0): OK}


def test_static_member_rejoin_commits():
    c = Coord(topics=[("foo", FOO, 2)])
    c.hb(member="A1", instance_id="a")
    c.hb(member="A1", epoch=-2, instance_id="a")
    g = c.group()
    assert g.members["A1"].assigned[FOO] == {0: 0, 1: 0}  # KIP-1251: reset to 0
    c.hb(member="A2", instance_id="a")
    assert c.commit(member="A2", epoch=1, offsets=[("foo", 0, 4)]) == {("foo", 0): OK}
    # The old incarnation's member id is gone: its commits are fenced by id.
    assert c.commit(member="A1", epoch=1, offsets=[("foo", 0, 9)]) == {("foo", 0): int(UNKNOWN_MEMBER_ID)}
    assert c.fetch(topics=[("foo", [0])]) == {("foo", 0): 4}


def test_membership_free_commits_create_a_simple_group():
    c = Coord()
    assert c.commit(group="simple", offsets=[("foo", 0, 5)]) == {("foo", 0): OK}
    shard = c.runtime.shard_for("simple")
    assert "simple" not in shard.consumer_groups and shard.offsets["simple"]
    # An empty consumer group accepts them too.
    c.hb(member="A")
    c.hb(member="A", epoch=-1)
    assert c.commit(offsets=[("foo", 1, 6)]) == {("foo", 1): OK}
    # A generation for a group that does not exist: GROUP_ID_NOT_FOUND (v9), ILLEGAL_GENERATION before.
    assert c.commit(group="nope", member="m", epoch=3) == {("foo", 0): int(GROUP_ID_NOT_FOUND)}
    assert c.commit(group="nope", member="m", epoch=3, version=8) == {("foo", 0): int(ILLEGAL_GENERATION)}
    assert c.commit(group="simple", member="m", epoch=3) == {("foo", 0): int(UNKNOWN_MEMBER_ID)}


def test_commit_with_member_id_and_no_epoch_creates_a_simple_group():
    # librdkafka's consumer-protocol consumer has a client-generated member id from creation
    # and commits after assign() with it and epoch -1 (conformance tests 0026, 0030, 0099,
    # 0130, 0140); Kafka's validateOffsetCommit accepts any negative epoch into a new group.
    c = Coord()
    assert c.commit(group="manual", member="lrk-uuid", epoch=-1, offsets=[("foo", 0, 3)]) == {("foo", 0): OK}
    assert c.fetch(group="manual", topics=[("foo", [0])]) == {("foo", 0): 3}
    # And again once the simple group holds offsets (was UNKNOWN_MEMBER_ID).
    assert c.commit(group="manual", member="lrk-uuid", epoch=-1, offsets=[("foo", 0, 7)]) == {("foo", 0): OK}
    assert c.fetch(group="manual", topics=[("foo", [0])]) == {("foo", 0): 7}


def test_metadata_too_large_is_per_partition():
    c = Coord()
    req = CommitRequest("g", topics=(("foo", FOO, (CommitPartition(0, 1, -1, "x" * 5000), CommitPartition(1, 2))),))
    resp = c.runtime.run("g", lambda s, now: commit(s, req, now), c.now)
    codes = [int(p["error_code"]) for p in resp["topics"][0]["partitions"]]
    assert codes == [int(OFFSET_METADATA_TOO_LARGE), OK]
    assert c.fetch() == {("foo", 1): 2}


def test_fetch_all_and_member_checks():
    c, _g = _a_gives_foo2_to_b()
    c.commit(member="A", epoch=2, offsets=[("foo", 0, 10), ("foo", 1, 11)])
    shard = c.runtime.shard_for("g")
    out = fetch_group(shard, "g", None)
    assert [(t["name"], [p["committed_offset"] for p in t["partitions"]]) for t in out["topics"]] == [("foo", [10, 11])]
    assert fetch_group(shard, "g", None, "A", 1)["error_code"] == STALE_MEMBER_EPOCH
    assert fetch_group(shard, "g", None, "Q", 1)["error_code"] == UNKNOWN_MEMBER_ID
    assert fetch_group(shard, "g", None, "A", 2)["error_code"] == NONE
    assert fetch_group(shard, "unknown", [("foo", [0])])["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_offset_delete_refuses_subscribed_topics_of_live_groups():
    c = Coord()
    c.hb(member="A")
    c.commit(member="A", epoch=1, offsets=[("foo", 0, 1)])
    c.commit(member="A", epoch=1, offsets=[("other", 0, 1)])
    resp = c.runtime.run("g", lambda s, now: delete(s, "g", [("foo", [0]), ("other", [0])], now), c.now)
    codes = {t["name"]: int(t["partitions"][0]["error_code"]) for t in resp["topics"]}
    assert codes == {"foo": int(GROUP_SUBSCRIBED_TO_TOPIC), "other": OK}
    assert c.fetch() == {("foo", 0): 1}
    resp = c.runtime.run("zz", lambda s, now: delete(s, "zz", [("foo", [0])], now), c.now)
    assert resp["error_code"] == GROUP_ID_NOT_FOUND


def test_offsets_of_empty_groups_expire_and_the_group_goes():
    cfg = CoordinatorConfig(offsets_topic_partitions=1, offsets_retention_ms=60_000,
                            offsets_retention_check_interval_ms=10_000)
    c = Coord(config=cfg)
    c.commit(group="simple", offsets=[("foo", 0, 5)])
    c.hb(group="live", member="A")
    c.commit(group="live", member="A", epoch=1, offsets=[("foo", 0, 5)])
    c.hb(group="gone", member="B")
    c.commit(group="gone", member="B", epoch=1, offsets=[("foo", 0, 5)])
    c.hb(group="gone", member="B", epoch=-1)
    for _ in range(5):
        c.advance(10_000)
        c.hb(group="live", member="A", epoch=1)
    shard = c.runtime.shard_for("g")
    assert "simple" in shard.offsets and "gone" in shard.offsets  # 50 s: within the retention
    c.advance(10_000)
    c.hb(group="live", member="A", epoch=1)
    assert "simple" not in shard.offsets and "gone" not in shard.offsets
    assert "gone" not in shard.consumer_groups          # empty consumer group deleted with its offsets
    assert shard.offsets["live"][("foo", 0)].offset == 5  # live groups keep theirs
    c.restart()
    assert set(c.runtime.shard_for("g").group_ids()) == {"live"}
