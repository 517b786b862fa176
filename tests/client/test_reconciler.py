"""The reconciler (`odradek.client.reconciler.Reconciler`), sans-I/O: what the application
does around a group member core, in which order, and with which offsets and identity.

A scripted core (`Scripted`) says everything at once -- fenced, something to revoke and
something to assign -- so the order is the reconciler's, not the core's; the real cores
(KIP-848 and classic) are driven through their own responses for the rest."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.assignors import CooperativeStickyAssignor
from odradek.client.classic import HEARTBEAT, JOIN_GROUP, SYNC_GROUP, ClassicGroupMember
from odradek.client.cluster import TopicPartition as TP
from odradek.client.consumer import AsyncConsumer
from odradek.client.errors import IllegalStateError, KafkaError
from odradek.client.member import GroupMember
from odradek.client.membership import CONSUMER_GROUP_HEARTBEAT, ConsumerGroupMember
from odradek.client.reconciler import (
    NO_IDENTITY,
    Assign,
    Lose,
    Reconciler,
    Revoke,
    committed_offsets,
)
from odradek.coordinator.consumer_protocol import encode_assignment
from odradek.protocol.messages import build, response_class

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {T1: "a", T2: "b"}


class Scripted:
    """A GroupMember whose answers the test sets; records what the reconciler tells it."""

    def __init__(self) -> None:
        self.member_id = "m1"
        self.state = SimpleNamespace(name="STABLE")
        self.error = None
        self.next_heartbeat_ms = 0.0
        self.in_flight = False
        self.epoch_changes = 0
        self.owned: frozenset = frozenset()
        self.fenced = False
        self.active = True
        self.revoke: frozenset = frozenset()
        self.assign: frozenset = frozenset()
        self.identity = (5, "m1", "inst-1")
        self.calls: list = []

    def subscribe(self, topics=None, regex=None, *, now=0) -> None:
        self.calls.append(("subscribe", topics))

    def leave(self, *, now=0) -> None:
        self.calls.append(("leave",))
        self.active = False

    def to_revoke(self):
        return self.revoke

    def to_assign(self):
        return self.assign  # not gated on revocations: the reconciler must order them itself

    def revoked(self, partitions, *, now=0) -> None:
        self.calls.append(("revoked", frozenset(partitions)))
        self.owned -= frozenset(partitions)
        self.revoke -= frozenset(partitions)

    def assigned(self, partitions, *, now=0) -> None:
        self.calls.append(("assigned", frozenset(partitions)))
        self.owned |= frozenset(partitions)
        self.assign -= frozenset(partitions)

    def lost(self, *, now=0) -> None:
        self.calls.append(("lost",))
        self.owned = frozenset()
        self.fenced = False

    def next_request(self, now):
        return None

    def next_deadline(self):
        return None

    def on_response(self, api, resp, now) -> None:
        pass

    def on_failure(self, api, error, now) -> None:
        pass

    def commit_identity(self):
        return self.identity


def by_id(key):
    tid, p = key
    return TP(NAMES[tid], p) if tid in NAMES else None


def holding(*parts, positions=None) -> tuple[Reconciler, Scripted]:
    """A reconciler whose application holds `parts` ((topic id, partition)) at `positions`."""
    m = Scripted()
    rec = Reconciler("g", member=m, resolve=by_id)
    m.assign = frozenset(parts)
    step = rec.next_step()
    rec.start_assign(step)
    rec.finish_assign(step, 0)
    for tp, offset in (positions or {}).items():
        rec.positions.parts[tp].position = offset
    m.calls.clear()
    return rec, m


def test_the_scripted_core_is_a_group_member():
    assert isinstance(Scripted(), GroupMember)


# ------------------------------------------------------------------ order


def test_lose_comes_first_then_revoke_then_assign():
    """KIP-848 "Fenced" before anything else, and revocations before assignments: a core
    that says all three at once gets them one after the other."""
    rec, m = holding((T1, 0), (T1, 1), positions={TP("a", 0): 4, TP("a", 1): 9})
    m.fenced = True
    m.revoke = frozenset({(T1, 0)})
    m.assign = frozenset({(T2, 0)})
    step = rec.next_step()
    assert step == Lose(frozenset({TP("a", 0), TP("a", 1)}))
    rec.drop_lost(step)
    assert rec.positions.parts == {} and rec.offsets() == {}  # dropped uncommitted
    assert m.calls == []  # the core hears of it only after on_partitions_lost
    rec.lost(0)
    assert m.calls == [("lost",)]

    m.owned = frozenset({(T1, 1)})  # (as if assigned again since)
    rec.names[(T1, 1)] = TP("a", 1)
    m.revoke = frozenset({(T1, 1)})
    step = rec.next_step()
    assert isinstance(step, Revoke) and step.keys == {(T1, 1)}, "revoke before the assignment the core offers"
    rec.start_revoke(step)
    assert rec.next_step() is step, "nothing is assigned while a revocation is under way"
    rec.finish_revoke(0)
    step = rec.next_step()
    assert isinstance(step, Assign) and step.keys == {(T2, 0)} and step.parts == {TP("b", 0)}
    assert rec.next_step() == step


def test_a_revocation_does_not_complete_before_its_commit_is_answered():
    rec, m = holding((T1, 0), (T1, 1), positions={TP("a", 0): 4, TP("a", 1): 9})
    m.revoke = frozenset({(T1, 0)})
    m.assign = frozenset({(T2, 0)})
    step = rec.next_step()
    offsets = rec.start_revoke(step)
    assert offsets == {TP("a", 0): 4}  # commit the revoked partition's position first
    commit = rec.commit_request(offsets)
    assert (commit.generation, commit.member_id, commit.instance_id) == (5, "m1", "inst-1")
    assert not rec.revoke_committed
    with pytest.raises(IllegalStateError):
        rec.finish_revoke(0)
    assert m.calls == [] and m.owned == {(T1, 0), (T1, 1)}  # the core has not been told
    assert rec.next_step() is step  # still under way; no Assign offered meanwhile
    assert TP("a", 0) in rec.positions.parts  # position() and commit() still work in the callback
    rec.revoke_commit_done()  # answered (or failed: auto-commit failures are not fatal)
    assert rec.finish_revoke(0) == {(T1, 0)}
    assert m.calls == [("revoked", frozenset({(T1, 0)}))]
    assert set(rec.positions.parts) == {TP("a", 1)}
    assert isinstance(rec.next_step(), Assign)


def test_the_late_answer_of_an_abandoned_revocations_commit_completes_nothing():
    rec, m = holding((T1, 0), (T1, 1), positions={TP("a", 0): 4, TP("a", 1): 9})
    m.revoke = frozenset({(T1, 0)})
    first = rec.next_step()
    rec.start_revoke(first)
    m.fenced = True  # its commit still out, the member is fenced...
    lose = rec.next_step()
    rec.drop_lost(lose)
    rec.lost(0)
    rec.names[(T1, 1)] = TP("a", 1)  # ...rejoins, is given a-1 again, consumes and must give it up
    rec.positions.add([TP("a", 1)])
    rec.positions.parts[TP("a", 1)].position = 9
    m.owned, m.revoke = frozenset({(T1, 1)}), frozenset({(T1, 1)})
    second = rec.next_step()
    assert rec.start_revoke(second) == {TP("a", 1): 9}
    rec.revoke_commit_done(first)  # the first commit's answer arrives now
    assert not rec.revoke_committed
    with pytest.raises(IllegalStateError):
        rec.finish_revoke(0)
    rec.revoke_commit_done(second)
    assert rec.finish_revoke(0) == {(T1, 1)}


def test_a_revocation_with_nothing_to_commit_may_complete_at_once():
    rec, m = holding((T1, 0))  # position still unknown: nothing consumed, nothing to commit
    m.revoke = frozenset({(T1, 0)})
    assert rec.start_revoke(rec.next_step()) == {}
    assert rec.revoke_committed
    rec.finish_revoke(0)
    assert m.owned == frozenset()

    rec, m = holding((T1, 0), positions={TP("a", 0): 3})
    rec.auto_commit = False
    m.revoke = frozenset({(T1, 0)})
    assert rec.start_revoke(rec.next_step()) == {} and rec.revoke_committed


def test_a_cancelled_revocation_starts_again_with_its_commit():
    rec, m = holding((T1, 0), positions={TP("a", 0): 3})
    m.revoke = frozenset({(T1, 0)})
    step = rec.next_step()
    rec.start_revoke(step)
    rec.cancel_revoke()  # the application's callback raised
    again = rec.next_step()
    assert again == step and rec.start_revoke(again) == {TP("a", 0): 3}
    with pytest.raises(IllegalStateError):
        rec.start_revoke(Revoke(frozenset({(T2, 0)}), frozenset({TP("b", 0)})))  # one at a time


def test_a_revocation_gives_back_only_what_the_core_still_owns():
    rec, m = holding((T1, 0), (T1, 1))
    m.revoke = frozenset({(T1, 0), (T1, 1)})
    rec.start_revoke(rec.next_step())
    m.owned = frozenset({(T1, 1)})  # the core moved on meanwhile
    assert rec.finish_revoke(0) == {(T1, 1)}


def test_lost_partitions_are_dropped_with_any_revocation_under_way():
    rec, m = holding((T1, 0), positions={TP("a", 0): 3})
    m.revoke = frozenset({(T1, 0)})
    rec.start_revoke(rec.next_step())
    m.fenced = True
    step = rec.next_step()
    assert isinstance(step, Lose)
    rec.drop_lost(step)
    rec.lost(0)
    assert rec.revoking is None and rec.positions.parts == {} and rec.names == {}


# ------------------------------------------------------------------ assign: fetch before consume


def test_assigned_partitions_fetch_their_committed_offsets_before_anything_is_consumed():
    m = Scripted()
    rec = Reconciler("g", member=m, resolve=by_id)
    m.assign = frozenset({(T1, 0), (T1, 1), (T2, 0)})
    step = rec.next_step()
    rec.start_assign(step)
    assert m.calls == []  # the core hears of it after on_partitions_assigned
    rec.finish_assign(step, 0)
    assert m.calls == [("assigned", frozenset({(T1, 0), (T1, 1), (T2, 0)}))]
    assert rec.to_fetch() == [TP("a", 0), TP("a", 1), TP("b", 0)]
    assert rec.positions.fetchable() == [] and rec.offsets() == {}  # no records, no commits yet
    body = rec.fetch_body(rec.to_fetch())
    assert body["group_id"] == "g" and body["require_stable"] is True
    assert sorted((t["name"], t["partition_indexes"]) for t in body["topics"]) == [("a", [0, 1]), ("b", [0])]
    rec.positions.parts[TP("b", 0)].reset = "earliest"  # a seek_to_beginning since
    assert rec.to_fetch() == [TP("a", 0), TP("a", 1)]
    left = rec.apply_committed({TP("a", 0): 17, TP("b", 0): 5}, [TP("a", 0), TP("a", 1), TP("b", 0)])
    assert left == [TP("a", 1), TP("b", 0)]  # no committed offset / a reset pending: the reset policy decides
    assert rec.positions.parts[TP("a", 0)].position == 17 and rec.positions.parts[TP("b", 0)].position is None
    assert rec.positions.fetchable() == [TP("a", 0)] and rec.offsets() == {TP("a", 0): 17}
    assert rec.to_fetch() == [TP("a", 1)]


def test_partitions_of_topics_metadata_does_not_know_wait():
    m = Scripted()
    rec = Reconciler("g", member=m, resolve=by_id)
    t3 = uuid.UUID(int=3)
    m.assign = frozenset({(T1, 0), (t3, 0)})
    step = rec.next_step()
    assert step.keys == {(T1, 0)} and step.unresolved == {(t3, 0)}
    NAMES[t3] = "c"
    try:
        assert rec.next_step().keys == {(T1, 0), (t3, 0)}  # after the driver refreshed metadata
    finally:
        del NAMES[t3]


def test_a_partition_is_revoked_under_the_name_it_was_assigned_with():
    """A topic deleted (and recreated under the same name) since: its id no longer resolves,
    or resolves to nothing; the position kept under the old name still goes."""
    rec, m = holding((T1, 0), positions={TP("a", 0): 6})
    del NAMES[T1]
    try:
        m.revoke = frozenset({(T1, 0)})
        step = rec.next_step()
        assert step.parts == {TP("a", 0)}
        rec.start_revoke(step)
        rec.revoke_commit_done()
        rec.finish_revoke(0)
        assert rec.positions.parts == {}
    finally:
        NAMES[T1] = "a"


def _classic_holding(parts, ids, positions):
    """A reconciler for a classic core (keys are names) whose metadata gives `ids` (a dict the
    test changes: name -> topic id, absent = no such topic)."""
    m = Scripted()
    rec = Reconciler("g", member=m, resolve=lambda key: key, topic_id=ids.get, needs_generation=True)
    m.assign = frozenset(parts)
    step = rec.next_step()
    rec.start_assign(step)
    rec.finish_assign(step, 0)
    for tp, offset in positions.items():
        rec.positions.parts[tp].position = offset
    return rec, m


def test_a_recreated_topics_old_positions_are_never_committed():
    """A classic member holding a partition of a topic deleted and recreated under the same
    name (it revokes slowly): by name its position would land on the new topic's offsets
    (sim seed 2381: the new owner's commit then went back). Only the topic it was assigned
    under is committed; a deleted one is not committed either."""
    ids = {"a": T1, "b": T2}
    rec, m = _classic_holding({TP("a", 0), TP("b", 0)}, ids, {TP("a", 0): 495, TP("b", 0): 7})
    assert rec.offsets() == {TP("a", 0): 495, TP("b", 0): 7}
    del ids["a"]  # deleted
    assert rec.offsets() == {TP("b", 0): 7}
    ids["a"] = uuid.UUID(int=3)  # recreated
    assert rec.offsets() == {TP("b", 0): 7}
    m.revoke = frozenset({TP("a", 0)})
    step = rec.next_step()
    assert rec.start_revoke(step) == {} and rec.revoke_committed  # nothing to commit: revoke at once
    rec.finish_revoke(0)
    # assigned again, now under the new topic: its position is committed again
    m.assign = frozenset({TP("a", 0)})
    step = rec.next_step()
    rec.start_assign(step)
    rec.finish_assign(step, 0)
    rec.positions.parts[TP("a", 0)].position = 3
    assert rec.offsets() == {TP("a", 0): 3, TP("b", 0): 7}


def test_a_partition_assigned_before_metadata_knew_its_topic_takes_the_first_id_seen():
    ids: dict = {}
    rec, _m = _classic_holding({TP("a", 0)}, ids, {TP("a", 0): 4})
    assert rec.offsets() == {TP("a", 0): 4}  # no id to tell incarnations apart: by name, as without ids
    ids["a"] = T1
    assert rec.offsets() == {TP("a", 0): 4}  # the first id metadata gives is the one
    ids["a"] = T2
    assert rec.offsets() == {}


def test_a_kip848_partition_is_current_while_its_name_means_its_id():
    ids = {"a": T1}
    m = Scripted()
    rec = Reconciler("g", member=m, resolve=by_id, topic_id=ids.get)
    m.assign = frozenset({(T1, 0)})
    step = rec.next_step()
    rec.start_assign(step)
    rec.finish_assign(step, 0)
    rec.positions.parts[TP("a", 0)].position = 8
    assert rec.offsets() == {TP("a", 0): 8}
    ids["a"] = T2
    assert rec.offsets() == {} and rec.held() == {TP("a", 0)}


def test_without_topic_ids_every_position_is_committed():
    rec, _m = holding((T1, 0), positions={TP("a", 0): 6})
    assert rec.current(TP("a", 0)) and rec.offsets() == {TP("a", 0): 6}


def test_leave_revokes_everything_then_leaves():
    rec, m = holding((T1, 0), (T2, 0), positions={TP("a", 0): 2})
    held = rec.held()
    assert held == {TP("a", 0), TP("b", 0)} and rec.offsets(held) == {TP("a", 0): 2}
    rec.leave(held, 0)
    assert m.calls == [("revoked", frozenset({(T1, 0), (T2, 0)})), ("leave",)]
    assert rec.positions.parts == {} and rec.names == {}


# ------------------------------------------------------------------ commits


def test_commits_carry_the_core_identity():
    rec, m = holding((T1, 0), positions={TP("a", 0): 8})
    body = rec.commit_request(rec.offsets()).body()
    assert body["generation_id_or_member_epoch"] == 5 and body["member_id"] == "m1"
    assert body["group_instance_id"] == "inst-1"
    assert body["topics"][0]["name"] == "a" and body["topics"][0]["partitions"][0]["committed_offset"] == 8

    m.fenced = True  # Java's CommitFailedException: the partitions are no longer ours
    with pytest.raises(KafkaError) as info:
        rec.commit_request(rec.offsets())
    assert info.value.code == ErrorCode.fenced_member_epoch and not info.value.retriable

    m.fenced, m.active = False, False  # not a member (any more): a membership-free commit
    assert rec.identity() == NO_IDENTITY
    assert Reconciler("g").identity() == NO_IDENTITY  # manual assignment: no member at all

    m.active, m.identity = True, (-1, "", None)
    assert rec.identity() == NO_IDENTITY  # KIP-848 needs no generation
    rec.needs_generation = True  # classic, between generations: Java's RebalanceInProgressException
    with pytest.raises(KafkaError) as info:
        rec.identity()
    assert info.value.code == ErrorCode.rebalance_in_progress


def test_commit_offsets_follow_the_positions_order_not_a_sets():
    rec, _ = holding((T1, 0), (T1, 1), (T2, 0), positions={TP("a", 0): 1, TP("a", 1): 2, TP("b", 0): 3})
    assert list(rec.offsets({TP("b", 0), TP("a", 1), TP("a", 0)})) == [TP("a", 0), TP("a", 1), TP("b", 0)]


def test_auto_commit_is_due_once_per_interval():
    rec = Reconciler("g", auto_commit_interval_ms=1000, first_auto_commit_ms=500)
    assert not rec.auto_commit_due(499)
    assert rec.auto_commit_due(500) and not rec.auto_commit_due(1499)
    assert rec.auto_commit_due(1500)
    rec.committed(1700)  # a commit succeeded: the interval starts again
    assert not rec.auto_commit_due(2500) and rec.auto_commit_due(2700)
    rec.auto_commit = False
    assert not rec.auto_commit_due(10_000)


def test_offset_fetch_answers():
    resp = build(response_class(9, 7), {
        "throttle_time": 0, "error_code": ErrorCode.none, "topics": [
            {"name": "a", "partitions": [
                {"partition_index": 0, "committed_offset": 12, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": ErrorCode.none},
                {"partition_index": 1, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": ErrorCode.none}]}]})
    assert committed_offsets(resp) == {TP("a", 0): 12}
    bad = build(response_class(9, 7), {"throttle_time": 0, "error_code": ErrorCode.coordinator_load_in_progress,
                                       "topics": []})
    with pytest.raises(KafkaError):
        committed_offsets(bad)


# ------------------------------------------------------------------ the real cores


def _hb(epoch, assignment=None, error=ErrorCode.none):
    body = {"throttle_time": 0, "error_code": error, "error_message": None, "member_id": None,
            "member_epoch": epoch, "heartbeat_interval": 5000, "assignment": None}
    if assignment is not None:
        body["assignment"] = {"topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in assignment.items()]}
    return build(response_class(CONSUMER_GROUP_HEARTBEAT, 1), body)


def test_a_kip848_member_reconciles_through_the_reconciler():
    m = ConsumerGroupMember("g", member_id="m1", instance_id="i1")
    rec = Reconciler("g", member=m, resolve=by_id)
    m.subscribe(["a", "b"], now=0)
    m.next_request(0)
    m.on_response(CONSUMER_GROUP_HEARTBEAT, _hb(3, {T1: [0, 1]}), 0)
    step = rec.next_step()
    assert isinstance(step, Assign) and step.parts == {TP("a", 0), TP("a", 1)}
    rec.start_assign(step)
    rec.finish_assign(step, 0)
    assert m.owned == {(T1, 0), (T1, 1)} and rec.next_step() is None
    assert rec.commit_request({TP("a", 0): 1}).generation == 3  # the member epoch
    m.next_request(0)
    m.on_response(CONSUMER_GROUP_HEARTBEAT, _hb(4, {T1: [1], T2: [0]}), 10)
    step = rec.next_step()
    assert isinstance(step, Revoke) and step.parts == {TP("a", 0)}  # the new partition waits
    rec.start_revoke(step)
    rec.finish_revoke(10)
    step = rec.next_step()
    assert isinstance(step, Assign) and step.parts == {TP("b", 0)}
    m.on_response(CONSUMER_GROUP_HEARTBEAT, _hb(0, error=ErrorCode.fenced_member_epoch), 20)
    step = rec.next_step()
    assert step == Lose(frozenset({TP("a", 1)}))
    with pytest.raises(KafkaError):
        rec.identity()
    rec.drop_lost(step)
    rec.lost(20)
    assert m.owned == frozenset() and not m.fenced and rec.next_step() is None


def test_a_classic_member_that_missed_a_generation_loses_without_committing():
    m = ClassicGroupMember("g", assignors=[CooperativeStickyAssignor()])
    rec = Reconciler("g", member=m, needs_generation=True)
    m.subscribe(["a"], now=0)
    m.next_request(0)
    m.on_response(JOIN_GROUP, build(response_class(JOIN_GROUP, 9), {
        "throttle_time": 0, "error_code": ErrorCode.none, "generation_id": 7, "protocol_type": "consumer",
        "protocol_name": "cooperative-sticky", "leader": "x", "skip_assignment": False, "member_id": "m1",
        "members": []}), 0)
    m.next_request(0)
    m.on_response(SYNC_GROUP, build(response_class(SYNC_GROUP, 5), {
        "throttle_time": 0, "error_code": ErrorCode.none, "protocol_type": "consumer",
        "protocol_name": "cooperative-sticky", "assignment": encode_assignment({"a": [0, 1]})}), 0)
    step = rec.next_step()
    rec.start_assign(step)
    rec.finish_assign(step, 0)
    assert rec.identity() == (7, "m1", None)
    m.next_request(5000)
    m.on_response(HEARTBEAT, build(response_class(HEARTBEAT, 4), {
        "throttle_time": 0, "error_code": ErrorCode.rebalance_in_progress}), 5000)
    m.next_request(5000)
    m.on_response(JOIN_GROUP, build(response_class(JOIN_GROUP, 9), {
        "throttle_time": 0, "error_code": ErrorCode.none, "generation_id": 9, "protocol_type": "consumer",
        "protocol_name": "cooperative-sticky", "leader": "x", "skip_assignment": False, "member_id": "m1",
        "members": []}), 5001)
    step = rec.next_step()
    assert step == Lose(frozenset({TP("a", 0), TP("a", 1)}))  # not a Revoke: no commit
    with pytest.raises(KafkaError) as info:
        rec.identity()  # between generations: nothing could be committed anyway
    assert info.value.code == ErrorCode.rebalance_in_progress


# ------------------------------------------------------------------ both drivers use it


def test_the_consumer_and_the_simulator_drive_the_same_reconciler():
    from odradek.sim.world import World

    async def consumer():
        c = AsyncConsumer("127.0.0.1:1", group_id="g")
        assert isinstance(c._rec, Reconciler) and c._rec.positions is c.positions
        m = ConsumerGroupMember("g", member_id="m")
        c.member = m
        assert c._rec.member is m
        await c.client.close()

    asyncio.run(consumer())
    world = World(0, "consumer")
    sim_member = world.start_member()
    assert isinstance(sim_member.rec, Reconciler) and sim_member.rec.member is sim_member.core
