"""The exact records classic JoinGroup/SyncGroup/LeaveGroup handling writes (DESIGN
principle 2; Kafka's GroupMetadataManagerTest pins them with assertRecordsEquals).

A classic group persists only GroupMetadata records (type 2), snapshots of the group as of
its last completed rebalance (Kafka's newGroupMetadataRecord / newEmptyGroupMetadataRecord):
a new group is written empty at once, the leader's SyncGroup writes the group with every
member's assignment, the join phase writes nothing, a group that empties is written
empty at the next generation, and a KIP-345 static replacement that needs no rebalance
writes the group with the new member id. The expected values are spelled out field by
field, not built from the live group.

Replay: only loading replays these records, and it resumes from the last completed
rebalance, so the replayed snapshot equals the live one only when no rebalance is under way.
"""

from __future__ import annotations

from odradek.coordinator import records as R
from odradek.protocol.errors import MEMBER_ID_REQUIRED, NONE
from tests.coordinator.records_drive import (
    CLIENT_HOST,
    CLIENT_ID,
    Driver,
    assert_records_equal,
)

G = "g"


def row(mid: str, assignment: bytes, *, instance_id=None, client_id=CLIENT_ID, rebalance=30_000, session=10_000,
        subscription=b"m") -> dict:
    return {"member_id": mid, "group_instance_id": instance_id, "client_id": client_id, "client_host": CLIENT_HOST,
            "rebalance_timeout": rebalance, "session_timeout": session, "subscription": subscription,
            "assignment": assignment}


def group_record(generation: int, leader: str | None, timestamp: int, members: list[dict], *,
                 protocol: str | None = "range", protocol_type: str = "consumer") -> R.CoordinatorRecord:
    return R.CoordinatorRecord(R.CLASSIC_GROUP, (G,), {
        "protocol_type": protocol_type, "generation": generation, "protocol": protocol, "leader": leader,
        "current_state_timestamp": timestamp, "members": members,
    })


def assert_replays(d: Driver) -> None:
    assert d.replay() == d.shard.snapshot()


def code(box: list) -> int:
    assert len(box) == 1, box
    return int(box[0]["error_code"])


def form_pair(d: Driver) -> tuple[str, str]:
    """Two dynamic members, Stable at generation 2 with assignments b"a" (leader) and b"b"."""
    a = d.join()[0]["member_id"]
    assert code(d.join(a)) == NONE
    d.sync(a, 1, assignments=[(a, b"a")])
    b = d.join()[0]["member_id"]
    assert d.join(b) == []
    assert code(d.join(a)) == NONE
    d.sync(b, 2)
    d.sync(a, 2, assignments=[(a, b"a"), (b, b"b")])
    assert d.shard.classic_groups[G].state.value == "Stable"
    return a, b


def test_a_new_group_is_persisted_empty_at_once():
    d = Driver()
    box = d.join()
    assert code(box) == MEMBER_ID_REQUIRED
    # Kafka's newEmptyGroupMetadataRecord: no protocol type yet ("" on the wire), generation 0.
    assert_records_equal([group_record(0, None, 1_000, [], protocol=None, protocol_type="")], d.written)
    assert_replays(d)
    # The member's second JoinGroup completes the join phase (no initial delay here) and
    # writes nothing: the join phase is not persisted.
    box = d.join(box[0]["member_id"])
    assert code(box) == NONE and box[0]["generation_id"] == 1
    assert d.batches == []


def test_the_leaders_sync_writes_the_group_with_members_and_assignments():
    d = Driver()
    a = d.join()[0]["member_id"]
    assert a == "client-id0"
    d.join(a)  # generation 1, CompletingRebalance at t=1000
    d.advance(500)
    done = d.sync(a, 1, assignments=[(a, b"a0")])
    assert code(done) == NONE
    # Kafka builds this record while the group is still CompletingRebalance, so its
    # current_state_timestamp is that transition's time (1000); odradek moves the group to
    # Stable first and writes the time of the sync (1500).
    assert_records_equal([group_record(1, a, 1_500, [row(a, b"a0")])], d.written)
    assert_replays(d)

    # A second member: its joins, the leader's rejoin and the follower's parked sync write
    # nothing; the leader's sync writes both members, in join order.
    b = d.join()[0]["member_id"]
    assert d.batches == []
    assert d.join(b) == [] and d.batches == []
    assert code(d.join(a)) == NONE and d.batches == []
    assert d.sync(b, 2) == [] and d.batches == []
    d.sync(a, 2, assignments=[(a, b"x"), (b, b"y")])
    assert_records_equal([group_record(2, a, 1_500, [row(a, b"x"), row(b, b"y")])], d.written)
    assert_replays(d)

    # A follower's sync in the Stable group just reads its assignment.
    assert d.sync(b, 2)[0]["assignment"] == b"y"
    assert d.batches == []


def test_a_member_the_leader_left_out_is_written_with_an_empty_assignment():
    d = Driver()
    a = d.join()[0]["member_id"]
    d.join(a)
    d.sync(a, 1, assignments=[(a, b"a")])
    b = d.join()[0]["member_id"]
    d.join(b)
    d.join(a)
    d.sync(a, 2, assignments=[(a, b"a")])
    assert_records_equal([group_record(2, a, 1_000, [row(a, b"a"), row(b, b"")])], d.written)
    assert_replays(d)


def test_leave_group_writes_nothing_until_the_rebalance_completes():
    d = Driver()
    a, b = form_pair(d)
    resp = d.leave((b,))
    assert resp["members"] == [{"member_id": b, "group_instance_id": None, "error_code": NONE}]
    assert d.batches == []  # PreparingRebalance: A has not rejoined
    box = d.join(a)
    assert code(box) == NONE and box[0]["generation_id"] == 3
    assert d.batches == []
    d.sync(a, 3, assignments=[(a, b"all")])
    assert_records_equal([group_record(3, a, 1_000, [row(a, b"all")])], d.written)
    assert_replays(d)


def test_the_last_member_leaving_writes_the_empty_group_at_the_next_generation():
    d = Driver()
    a, b = form_pair(d)
    d.leave((a,), (b,))
    # Kafka's completeClassicGroupJoin on an empty group: generation + 1, no protocol and
    # no leader; the protocol type stays.
    assert_records_equal([group_record(3, None, 1_000, [], protocol=None)], d.written)
    assert d.shard.classic_groups[G].state.value == "Empty"
    assert_replays(d)


def test_a_static_member_replaced_in_a_stable_group_writes_the_group_with_the_new_member_id():
    d = Driver()
    box = d.join(instance_id="s1")  # KIP-345: a static member joins without MEMBER_ID_REQUIRED
    s1 = box[0]["member_id"]
    assert s1 == "s1-id0" and box[0]["leader"] == s1
    assert_records_equal([group_record(0, None, 1_000, [], protocol=None, protocol_type="")], d.written)
    d.sync(s1, 1, instance_id="s1", assignments=[(s1, b"s")])
    assert_records_equal([group_record(1, s1, 1_000, [row(s1, b"s", instance_id="s1")])], d.written)
    b = d.join()[0]["member_id"]
    d.join(b)
    d.join(s1, instance_id="s1")
    d.sync(b, 2)
    d.sync(s1, 2, instance_id="s1", assignments=[(s1, b"s"), (b, b"b")])
    assert_records_equal([group_record(2, s1, 1_000, [row(s1, b"s", instance_id="s1"), row(b, b"b")])], d.written)

    # The instance restarts: a JoinGroup with its group.instance.id and no member id.
    d.advance(1_000)
    box = d.join(instance_id="s1", client_id="restarted", session=20_000, rebalance=40_000)
    new = box[0]["member_id"]
    assert new == "s1-id2" and code(box) == NONE and box[0]["generation_id"] == 2
    # No rebalance: the group is written at once with the new member id, which takes the
    # old one's place as leader and keeps its assignment; the new client id and timeouts
    # are those of the new JoinGroup. The state timestamp is the Stable one (1000).
    assert_records_equal([group_record(2, new, 1_000, [
        row(b, b"b"),
        row(new, b"s", instance_id="s1", client_id="restarted", session=20_000, rebalance=40_000),
    ])], d.written)
    assert_replays(d)
    # The old incarnation is fenced; the new one syncs for its stored assignment, writing nothing.
    assert d.cheartbeat(s1, 2, instance_id="s1") != NONE
    assert d.sync(new, 2, instance_id="s1")[0]["assignment"] == b"s"
    assert d.batches == []


def test_admin_removal_of_a_static_member_by_instance_id():
    d = Driver()
    s1 = d.join(instance_id="s1")[0]["member_id"]
    d.sync(s1, 1, instance_id="s1", assignments=[(s1, b"s")])
    d.leave(("", "s1"))
    assert_records_equal([group_record(2, None, 1_000, [], protocol=None)], d.written)
    assert_replays(d)
