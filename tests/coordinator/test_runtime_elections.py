"""Per-shard loading and unloading, epoch-checked (issue 16, item 2; Kafka's
CoordinatorRuntime.scheduleLoadOperation / scheduleUnloadOperation)."""

from __future__ import annotations

import pytest

from odradek.coordinator import records as R
from odradek.coordinator.errors import CoordinatorUnavailable
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.runtime import (
    SHARD_TRANSITIONS,
    CoordinatorRuntime,
    ShardEvent,
    ShardState,
)
from odradek.coordinator.shard import Result
from odradek.protocol.errors import COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NONE, NOT_COORDINATOR
from tests.coordinator.classic.helpers import join_dynamic
from tests.coordinator.harness import FOO, Coord


def _elected() -> Coord:
    """A harness whose runtime starts with no shard: each is elected explicitly."""
    c = Coord()
    c.runtime = c._new_runtime()
    return c


def _code(answer) -> int:
    assert answer.done and isinstance(answer.error, CoordinatorUnavailable), answer.error
    return answer.error.code


def test_a_shard_never_elected_is_not_coordinator():
    c = _elected()
    assert _code(c.runtime.submit("g", lambda s, now: Result([], None), c.now)) == NOT_COORDINATOR
    with pytest.raises(CoordinatorUnavailable):
        c.runtime.read("g")


def test_election_loads_the_shard_from_its_log():
    c = Coord()
    c.hb("g", "A")
    before = c.snapshot()
    c.runtime = c._new_runtime()
    assert c.runtime.on_election(0, 3, c.now)
    assert c.runtime.states[0] == (ShardState.ACTIVE, 3)
    assert c.snapshot() == before


def test_a_request_during_the_load_gets_coordinator_load_in_progress():
    c = Coord()
    c.hb("g", "A")
    runtime = c._new_runtime()
    seen = []
    inner = runtime.reader

    def reader(partition):
        seen.append(_code(runtime.submit("g", lambda s, now: Result([], None), c.now)))
        return inner(partition)

    runtime.reader = reader
    runtime.on_election(0, 1, c.now)
    assert seen == [COORDINATOR_LOAD_IN_PROGRESS]
    assert runtime.submit("g", lambda s, now: Result([], "ok"), c.now).result() == "ok"


def test_resignation_fails_parked_requests_and_cancels_timers():
    c = Coord()
    c.runtime.on_election(0, 1, c.now)  # the harness loaded it at epoch -1: this only raises the epoch
    _mid, box = join_dynamic(c)
    assert box == []  # parked in the initial rebalance delay
    c.hb("g2", "A")
    shard = c.runtime.shards[0]
    assert len(shard.timer) > 0
    assert c.runtime.on_resignation(0, 1)
    assert [int(r["error_code"]) for r in box] == [NOT_COORDINATOR]
    assert len(shard.timer) == 0 and c.runtime.next_deadline() is None
    assert c.runtime.states[0] == (ShardState.CLOSED, 1)
    assert _code(c.runtime.submit("g2", lambda s, now: Result([], None), c.now)) == NOT_COORDINATOR


def test_resignation_fails_answers_waiting_for_their_commit():
    c = Coord()
    c.runtime.commit_on_write = False
    waiting = c.runtime.submit("g", lambda s, now: Result([R.group_epoch("g", 1)], "ok"), c.now)
    assert not waiting.done
    c.runtime.on_resignation(0)
    assert _code(waiting) == NOT_COORDINATOR


def test_stale_epochs_are_ignored():
    c = Coord()
    c.runtime.on_election(0, 5, c.now)
    assert not c.runtime.on_resignation(0, 4)  # an older leadership's resignation arriving late
    assert c.runtime.states[0] == (ShardState.ACTIVE, 5)
    c.runtime.on_resignation(0, 5)
    assert not c.runtime.on_election(0, 4, c.now)  # an older election
    assert c.runtime.states[0] == (ShardState.CLOSED, 5)
    assert c.runtime.on_election(0, 6, c.now)
    assert c.runtime.states[0] == (ShardState.ACTIVE, 6)


def test_a_shard_whose_load_fails_is_not_coordinator_and_can_be_elected_again():
    c = Coord()
    c.hb("g", "A")
    runtime = c._new_runtime()
    inner = runtime.reader
    runtime.reader = lambda p: (_ for _ in ()).throw(OSError("offline"))
    with pytest.raises(OSError):
        runtime.on_election(0, 1, c.now)
    assert runtime.states[0] == (ShardState.FAILED, 1)
    assert _code(runtime.submit("g", lambda s, now: Result([], None), c.now)) == NOT_COORDINATOR
    runtime.reader = inner
    assert runtime.on_election(0, 1, c.now)
    assert "A" in runtime.shards[0].consumer_groups["g"].members


def test_a_load_whose_fail_over_write_fails_leaves_the_shard_failed():
    c = Coord()
    c.hb("g", "A")
    records = c.log[0]
    # Partitions were added while no one coordinated: the load must write a new epoch.
    grown = MetadataImage.of([("foo", FOO, 6)], version=c.image.version + 1)
    rt = CoordinatorRuntime(c.config, lambda *_: (_ for _ in ()).throw(OSError("disk full")), grown,
                            reader=lambda p: list(records))
    with pytest.raises(OSError):
        rt.on_election(0, 1, c.now)
    assert rt.states[0][0] is ShardState.FAILED and 0 not in rt.shards


def test_the_shard_table_is_keyed_by_state_and_event_and_refuses_the_rest():
    assert SHARD_TRANSITIONS[(ShardState.LOADING, ShardEvent.LOADED)] is ShardState.ACTIVE
    assert (ShardState.ACTIVE, ShardEvent.LOADED) not in SHARD_TRANSITIONS
    c = Coord()
    with pytest.raises(AssertionError):
        c.runtime._move(0, ShardEvent.LOADED)  # already active: no entry


def test_a_single_node_elects_everything_and_serves_as_before():
    c = Coord(partitions=3)
    assert {p: s for p, (s, _e) in c.runtime.states.items()} == {p: ShardState.ACTIVE for p in range(3)}
    assert c.commit("g", offsets=(("foo", 0, 1),)) == {("foo", 0): NONE}


def test_a_node_that_is_not_serving_answers_nothing_and_runs_no_timers_until_it_serves_again():
    """A broker whose cluster lease may have expired (broker/coordinator.py): its shards stay
    loaded, but it refuses every request and runs no timer, so it neither answers from
    state that may be stale nor expires the sessions it was frozen through."""
    c = Coord()
    serving = [True]
    c.runtime.serving = lambda: serving[0]
    c.hb("g", "A")
    before = c.snapshot()
    assert c.runtime.next_deadline() is not None  # A's session timer
    serving[0] = False
    assert _code(c.runtime.submit("g", lambda s, now: Result([], "ok"), c.now)) == NOT_COORDINATOR
    with pytest.raises(CoordinatorUnavailable) as refused:
        c.runtime.read("g")
    assert refused.value.code == NOT_COORDINATOR
    assert c.runtime.next_deadline() is None  # a driver has nothing to wait for
    c.now += 10 * 60_000  # far past A's session timeout
    assert c.runtime.tick(c.now) == 0
    assert c.snapshot() == before  # A is still a member: nothing expired it
    serving[0] = True  # the lease was current after all: it serves again from where it was
    assert c.runtime.submit("g", lambda s, now: Result([], "ok"), c.now).result() == "ok"
    assert c.runtime.tick(c.now) > 0  # and the overdue timer runs now


def test_answers_waiting_longer_than_the_write_timeout_fail_and_progress_restarts_it():
    """Kafka's write timeout (offsets.commit.timeout.ms), kept by the runtime for every driver."""
    c = Coord()
    c.runtime.commit_on_write = False
    c.runtime.write_timeout_ms = 5_000
    first = c.runtime.submit("g", lambda s, now: Result([R.group_epoch("g", 1)], "one"), c.now)
    second = c.runtime.submit("g", lambda s, now: Result([R.group_epoch("g", 2)], "two"), c.now + 1)
    assert not first.done and not second.done
    assert c.runtime.next_deadline() == c.now + 5_000
    assert c.runtime.fail_stalled_writes(c.now + 4_999) == []
    last = c.runtime.shards[0].last_written_offset
    c.runtime.complete_up_to(0, last - 1, c.now + 4_000)  # the first commits: the timeout starts again
    assert first.result() == "one" and not second.done
    assert c.runtime.fail_stalled_writes(c.now + 8_999) == []
    assert c.runtime.fail_stalled_writes(c.now + 9_000) == [(0, 5_000)]
    assert _code(second) == COORDINATOR_NOT_AVAILABLE
    assert c.runtime.next_deadline() == c.runtime.shards[0].timer.next_deadline()  # only the shard's own timers left
