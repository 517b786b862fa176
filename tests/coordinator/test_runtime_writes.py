"""Atomic coordinator writes with deferred completion (issue 16, item 1; Kafka's CoordinatorRuntime).

A write either commits with everything it answers, or fails and leaves nothing: its
replies fail with Kafka's code, parked requests get NOT_COORDINATOR, and the shard is
what its log says. Answers wait for the committed offset; OffsetFetch reads at it.
"""

from __future__ import annotations

import pytest

from odradek.coordinator import records as R
from odradek.coordinator.classic.model import ClassicState
from odradek.coordinator.classic.sync import SyncRequest, sync
from odradek.coordinator.consumer.heartbeat import HeartbeatRequest, heartbeat
from odradek.coordinator.errors import CoordinatorUnavailable
from odradek.coordinator.offsets import CommitPartition, CommitRequest, commit
from odradek.coordinator.runtime import CoordinatorRuntime
from odradek.coordinator.shard import Result
from odradek.protocol.errors import NONE, NOT_COORDINATOR, UNKNOWN_SERVER_ERROR
from tests.coordinator.classic.helpers import DELAY, code, join_dynamic
from tests.coordinator.harness import FOO, Coord


class Switch:
    """Wraps the harness writer; `fail` makes the next appends raise `error`."""

    def __init__(self, c: Coord, error: Exception):
        self.inner = c.runtime.writer
        self.error = error
        self.fail = False
        c.runtime.writer = self

    def __call__(self, partition, records, now_ms):
        if self.fail:
            raise self.error
        return self.inner(partition, records, now_ms)


def _two_members_joined(c: Coord):
    a, box_a = join_dynamic(c)
    b, box_b = join_dynamic(c)
    for _ in range(5):
        if box_a and box_b:
            break
        c.advance(DELAY)
    assert code(box_a) == NONE and code(box_b) == NONE
    return a, b, box_a[0]["leader"], box_a[0]["generation_id"]


@pytest.mark.parametrize("error, expected", [
    (RuntimeError("log closed"), UNKNOWN_SERVER_ERROR),
    (CoordinatorUnavailable(NOT_COORDINATOR, "disk"), NOT_COORDINATOR),  # what the broker's writer raises
])
def test_a_syncgroup_whose_write_fails_leaves_nothing_behind(error, expected):
    # The reproduction from the review of d669503: the writer raises during the leader's
    # SyncGroup. Before, the group stayed STABLE in memory with the new assignment, the next
    # unrelated OffsetCommit delivered the SyncGroup's success, and a restart lost the member.
    c = Coord()
    a, b, leader, gen = _two_members_joined(c)
    follower = b if leader == a else a
    follower_box = c.sync("g", follower, gen)
    assert follower_box == []  # parked until the leader's assignment
    logged = list(c.log[0])
    switch = Switch(c, error)
    switch.fail = True

    leader_box: list = []
    req = SyncRequest("g", leader, gen, None, None, None, ((a, b"to-a"), (b, b"to-b")))
    answer = c.runtime.submit("g", lambda shard, now: sync(shard, req, leader_box.append, now), c.now)

    assert answer.done and answer.error is error
    assert [int(r["error_code"]) for r in leader_box] == [expected]
    assert leader_box[0]["assignment"] == b""
    # The parked follower's success was queued by the same operation: it fails the same way,
    # once (Kafka propagates the append's error to every member's SyncGroup).
    assert [int(r["error_code"]) for r in follower_box] == [expected]
    assert c.log[0] == logged  # nothing was appended
    # The group is what the log says: the empty group persisted when it was created.
    group = c.classic()
    assert group.state is ClassicState.EMPTY and not group.members

    switch.fail = False
    assert c.commit("s", offsets=(("foo", 0, 5),)) == {("foo", 0): NONE}
    assert len(leader_box) == 1 and len(follower_box) == 1  # no late success for either
    live = c.snapshot()
    c.restart()
    assert c.snapshot() == live


def test_a_failed_commit_answers_only_its_error_and_replays_nothing():
    c = Coord()
    assert c.commit("s", offsets=(("foo", 0, 5),)) == {("foo", 0): NONE}
    switch = Switch(c, RuntimeError("disk"))
    switch.fail = True
    req = CommitRequest("s", topics=(("foo", FOO, (CommitPartition(0, 99),)),))
    answer = c.runtime.submit("s", lambda s, now: commit(s, req, now), c.now)
    assert isinstance(answer.error, RuntimeError)
    assert c.fetch("s") == {("foo", 0): 5}
    assert c.runtime.write_failures == 1


def test_a_consumer_heartbeat_whose_write_fails_is_reverted_by_reloading_the_shard():
    c = Coord()
    c.hb("g", "A")
    shard = c.runtime.shards[0]
    before = shard.snapshot()
    switch = Switch(c, RuntimeError("disk"))
    switch.fail = True
    req = HeartbeatRequest("g", "B", 0, None, None, 300_000, ("foo",), None, None, {}, "c", "/h", 1)
    answer = c.runtime.submit("g", lambda s, now: heartbeat(s, req, now), c.now)
    assert isinstance(answer.error, RuntimeError)
    assert c.runtime.shards[0] is shard  # reloaded in place
    assert shard.snapshot() == before
    # Timers were cancelled and re-armed by the reload: A's session is still watched.
    assert ("session", "g", "A") in shard.timer


def test_a_timer_whose_write_fails_reverts_its_shard_and_others_keep_running():
    c = Coord(partitions=2)
    g0 = next(g for g in (f"g{i}" for i in range(50)) if c.runtime.partition_for(g) == 0)
    g1 = next(g for g in (f"g{i}" for i in range(50)) if c.runtime.partition_for(g) == 1)
    c.hb(g0, "A")
    c.hb(g1, "B")
    switch = Switch(c, RuntimeError("disk"))

    def failing_on_0(partition, records, now_ms):
        if partition == 0:
            raise RuntimeError("disk")
        return switch.inner(partition, records, now_ms)

    c.runtime.writer = failing_on_0
    c.advance(c.config.session_timeout_ms + 1)  # both sessions expire
    assert "A" in c.runtime.shards[0].consumer_groups[g0].members  # its removal could not be written
    assert g1 not in c.runtime.shards[1].consumer_groups or not c.runtime.shards[1].consumer_groups[g1].members
    c.runtime.writer = switch.inner
    c.advance(c.config.session_timeout_ms + 1)  # the reload gave A a fresh session, which now ends
    assert not c.runtime.shards[0].consumer_groups.get(g0) or not c.runtime.shards[0].consumer_groups[g0].members


# --- deferred completion ----------------------------------------------------------------------


def _held_back() -> Coord:
    """A harness whose answers wait for an explicit complete_up_to, as in a cluster."""
    c = Coord()
    c.runtime.commit_on_write = False
    return c


def test_an_answer_waits_until_its_records_are_committed():
    c = _held_back()
    req = HeartbeatRequest("g", "A", 0, None, None, 300_000, ("foo",), None, None, {}, "c", "/h", 1)
    answer = c.runtime.submit("g", lambda s, now: heartbeat(s, req, now), c.now)
    assert not answer.done
    last = c.runtime.shards[0].last_written_offset
    assert c.runtime.complete_up_to(0, last - 1) == 0 and not answer.done
    assert c.runtime.complete_up_to(0, last) == 1
    assert answer.result()["member_epoch"] == 1


def test_an_operation_that_writes_nothing_waits_for_the_writes_before_it():
    c = _held_back()
    req = HeartbeatRequest("g", "A", 0, None, None, 300_000, ("foo",), None, None, {}, "c", "/h", 1)
    first = c.runtime.submit("g", lambda s, now: heartbeat(s, req, now), c.now)
    read = c.runtime.submit("g", lambda s, now: Result([], s.consumer_groups["g"].group_epoch), c.now)
    assert not first.done and not read.done  # it describes a state not yet committed
    c.runtime.complete_up_to(0, c.runtime.shards[0].last_written_offset)
    assert first.done and read.result() == 1


def test_classic_replies_wait_for_the_commit_too():
    c = _held_back()
    box: list = []
    from odradek.coordinator.classic.join import JoinRequest, join

    req = JoinRequest("g", "", 10_000, 30_000, "consumer", (("range", b"m"),), None, "c", "/h", None, 5)
    c.runtime.submit("g", lambda s, now: join(s, req, box.append, now), c.now)
    assert box == []  # MEMBER_ID_REQUIRED is held until the new group's record commits
    c.runtime.complete_up_to(0, c.runtime.shards[0].last_written_offset)
    assert len(box) == 1 and int(box[0]["error_code"]) == 79


def test_offset_fetch_reads_at_the_committed_offset():
    c = _held_back()
    req = CommitRequest("s", topics=(("foo", FOO, (CommitPartition(0, 5),)),))
    c.runtime.submit("s", lambda s, now: commit(s, req, now), c.now)
    assert c.fetch("s") == {}  # written, not committed: not visible
    c.runtime.complete_up_to(0, c.runtime.shards[0].last_written_offset)
    assert c.fetch("s") == {("foo", 0): 5}
    req2 = CommitRequest("s", topics=(("foo", FOO, (CommitPartition(0, 9), CommitPartition(1, 3))),))
    answer = c.runtime.submit("s", lambda s, now: commit(s, req2, now), c.now)
    assert c.fetch("s") == {("foo", 0): 5}  # the previous committed value, and no partition 1
    assert c.runtime.shards[0].offsets["s"][("foo", 0)].offset == 9  # the writer's view moved on
    c.runtime.complete_up_to(0, c.runtime.shards[0].last_written_offset)
    assert answer.done and c.fetch("s") == {("foo", 0): 9, ("foo", 1): 3}


def test_a_failed_write_fails_the_answers_still_waiting_not_coordinator():
    c = _held_back()
    req = CommitRequest("s", topics=(("foo", FOO, (CommitPartition(0, 5),)),))
    waiting = c.runtime.submit("s", lambda s, now: commit(s, req, now), c.now)
    switch = Switch(c, RuntimeError("disk"))
    switch.fail = True
    failed = c.runtime.submit("s", lambda s, now: commit(s, req, now), c.now)
    assert isinstance(failed.error, RuntimeError)
    assert isinstance(waiting.error, CoordinatorUnavailable) and waiting.error.code == NOT_COORDINATOR


def test_a_writer_must_report_growing_offsets():
    c = Coord()
    c.runtime.writer = lambda *_: None
    with pytest.raises(AssertionError):
        c.runtime.run("g", lambda s, now: Result([R.group_epoch("g", 1)], None), c.now)


def test_reload_after_a_failed_write_without_a_reader_leaves_the_shard_not_coordinator():
    c = Coord()
    rt = CoordinatorRuntime(c.config, lambda *_: (_ for _ in ()).throw(RuntimeError("disk")), c.image)
    rt.load(0, [], c.now)
    answer = rt.submit("g", lambda s, now: Result([R.group_epoch("g", 1)], None), c.now)
    assert isinstance(answer.error, RuntimeError)
    again = rt.submit("g", lambda s, now: Result([], None), c.now)
    assert isinstance(again.error, CoordinatorUnavailable) and again.error.code == NOT_COORDINATOR
