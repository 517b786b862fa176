"""coordinator/dispatch.py: one entry point per request kind, dispatching on the group's type
(Kafka's GroupMetadataManager), and the layering it keeps: classic/ and consumer/ never
reach migration.py, migration.py uses only their public names."""

from __future__ import annotations

import ast
import pathlib

import pytest

import odradek.coordinator as coordinator_pkg
from odradek.coordinator import dispatch, migration
from odradek.coordinator.classic import join as classic_join
from odradek.coordinator.classic import leave as classic_leave
from odradek.coordinator.classic import sync as classic_sync
from odradek.coordinator.classic.join import JoinRequest
from odradek.coordinator.classic.leave import LeaveIdentity
from odradek.coordinator.classic.model import ClassicState
from odradek.coordinator.classic.sync import ClassicHeartbeat, SyncRequest
from odradek.coordinator.consumer import heartbeat as consumer
from odradek.coordinator.consumer.heartbeat import HeartbeatRequest
from odradek.coordinator.records import RecordError
from odradek.coordinator.shard import Then

from .test_migration import GROUP_ID_NOT_FOUND, NONE, _classic_pair, _coord, _sub

INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, INVALID_REQUEST = 24, 26, 42

PACKAGE = pathlib.Path(coordinator_pkg.__file__).parent


def _imports(path: pathlib.Path) -> list[tuple[str, str]]:
    """(module, name) of every import in the file, function-level ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out += [(node.module or "", a.name) for a in node.names]
    return out


# --- the layering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted([*PACKAGE.glob("classic/*.py"), *PACKAGE.glob("consumer/*.py")]),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_handlers_never_import_migration_or_dispatch(path):
    for module, name in _imports(path):
        for part in (*module.split("."), name):
            assert part not in ("migration", "dispatch"), f"{path.name} imports {module} {name}"


def test_migration_imports_only_public_names():
    private = [(m, n) for m, n in _imports(PACKAGE / "migration.py") if n.startswith("_")]
    assert private == []


def test_migration_never_sets_a_group_state():
    # A classic group's state moves only by transition() (classic/model.py); a converted group
    # is created Stable, as Kafka's ClassicGroup.fromConsumerGroup does.
    for node in ast.walk(ast.parse((PACKAGE / "migration.py").read_text())):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assert not any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets), ast.unparse(node)


def test_migration_never_changes_the_shards_classic_groups():
    # Conversions reach shard.classic_groups only by replay of their records (shard.py).
    mutators = {"pop", "setdefault", "update", "clear", "popitem", "__setitem__", "__delitem__"}
    for node in ast.walk(ast.parse((PACKAGE / "migration.py").read_text())):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                assert not (isinstance(t, ast.Subscript) and "classic_groups" in ast.unparse(t.value)), ast.unparse(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in mutators:
            assert "classic_groups" not in ast.unparse(node.func.value), ast.unparse(node)


def _downgrading(c, op):
    """Run `op` (a downgrade handler) on the shard without the runtime: what it returns, and
    then the state once its records are replayed (as the runtime's write does)."""
    shard = c.runtime.shard_for("g")
    result = op(shard, c.now)
    return shard, result


def test_a_downgrade_changes_nothing_until_its_records_are_replayed():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    epoch = c.group().group_epoch
    shard, result = _downgrading(c, lambda s, now: dispatch.fence_member(s, "g", "C", now))
    # the handler returned the conversion; the shard still has the consumer group, no classic one
    assert "g" not in shard.classic_groups and set(shard.consumer_groups["g"].members) == {a, b, "C"}
    assert isinstance(result.response, Then) and result.records[-1].type == 2
    for record in result.records:
        shard.replay(record)
    g = shard.classic_groups["g"]
    assert "g" not in shard.consumer_groups and set(g.members) == {a, b} and g.generation == epoch
    assert g.state is ClassicState.STABLE  # as Kafka's ClassicGroup.fromConsumerGroup makes it
    then = result.response.op(shard, c.now)
    assert then.response is None and shard.classic_groups["g"].state is ClassicState.PREPARING_REBALANCE


def test_a_static_replacement_downgrade_changes_nothing_until_replayed():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    shard = c.runtime.shard_for("g")
    # C's consumer-protocol member is gone but the group still holds only classic members:
    # (what a static classic member replacing C leaves behind; migration.join chains this)
    for record in consumer.remove_member_records(shard, shard.consumer_groups["g"], "C"):
        shard.replay(record)
    shard, result = _downgrading(c, lambda s, now: migration._downgrade_if_all_classic(s, "g", now))
    assert "g" not in shard.classic_groups and set(shard.consumer_groups["g"].members) == {a, b}
    for record in result.records:
        shard.replay(record)
    then = result.response.op(shard, c.now)
    assert then.records == [] and shard.classic_groups["g"].state is ClassicState.STABLE  # no rebalance
    assert ("classic-session", "g", a) in shard.timer and ("classic-session", "g", b) in shard.timer


def test_refusing_an_upgrade_is_not_a_record_error():
    assert not issubclass(migration.UpgradeRefused, RecordError)
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.join(member=a, protocols=_sub([0, 1]), version=3)
    c.join(member=b, protocols=_sub([2, 3]), version=3)
    c.join(member=b, protocols=_sub([2]), version=3)  # a new rebalance resets the assignments
    resp = c.hb(member="C", epoch=0, topics=("foo",))
    assert resp["error_code"] == GROUP_ID_NOT_FOUND and "no assignment yet" in resp["error_message"]
    assert c.classic() is not None and c.group() is None


# --- which handler each request reaches -------------------------------------------------------------


class Spy:
    def __init__(self, monkeypatch, module, name):
        self.calls = 0
        original = getattr(module, name)

        def spy(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)


def _consumer_group_with_a_member():
    c = _coord()
    assert c.hb(member="C", epoch=0, topics=("foo",))["error_code"] == NONE
    return c


def test_classic_requests_reach_migration_for_a_consumer_group(monkeypatch):
    c = _consumer_group_with_a_member()
    spies = {name: Spy(monkeypatch, migration, name) for name in ("join", "sync", "classic_heartbeat", "leave")}
    classic = [Spy(monkeypatch, classic_join, "join"), Spy(monkeypatch, classic_sync, "sync"),
               Spy(monkeypatch, classic_sync, "heartbeat"), Spy(monkeypatch, classic_leave, "leave")]
    j = c.join(member="", protocols=(("range", b""),), version=3)
    assert j[0]["leader"] == "" and c.classic() is None  # every classic member of a consumer group follows
    mid = j[0]["member_id"]
    c.sync(member=mid, generation=j[0]["generation_id"])
    c.cheartbeat(member=mid, generation=j[0]["generation_id"])
    c.leave("g", (mid,))
    assert {name: s.calls for name, s in spies.items()} == {"join": 1, "sync": 1, "classic_heartbeat": 1, "leave": 1}
    assert [s.calls for s in classic] == [0, 0, 0, 0]


def test_classic_requests_reach_the_classic_handlers_otherwise(monkeypatch):
    c = _coord()
    spies = [Spy(monkeypatch, migration, name) for name in ("join", "sync", "classic_heartbeat", "leave")]
    j = c.join(protocols=(("range", b""),), version=3)
    assert j[0]["error_code"] == NONE and c.classic() is not None
    mid = j[0]["member_id"]
    c.sync(member=mid, generation=j[0]["generation_id"])
    assert c.cheartbeat(member=mid, generation=j[0]["generation_id"]) == NONE
    c.leave("g", (mid,))
    assert [s.calls for s in spies] == [0, 0, 0, 0]


def test_an_empty_consumer_group_is_replaced_by_a_joining_classic_member():
    c = _consumer_group_with_a_member()
    c.hb(member="C", epoch=-1)
    assert c.group() is not None and not c.group().members
    j = c.join(protocols=(("range", b""),), version=3)
    assert j[0]["error_code"] == NONE and c.group() is None and c.classic() is not None


def test_a_consumer_heartbeat_for_a_classic_group_converts_it_then_runs_again():
    c = _coord()
    _classic_pair(c)
    shard = c.runtime.shard_for("g")
    req = HeartbeatRequest("g", "C", 0, rebalance_timeout_ms=300_000, subscribed_topic_names=("foo",), owned={})
    result = dispatch.consumer_group_heartbeat(shard, req, c.now)
    # The conversion is its own batch; the heartbeat itself follows once it is replayed.
    assert isinstance(result.response, Then) and result.records
    resp = c.runtime.run("g", lambda s, now: dispatch.consumer_group_heartbeat(s, req, now), c.now)
    assert resp["error_code"] == NONE and c.classic() is None and "C" in c.group().members


def test_request_validation_comes_before_the_group_type():
    c = _coord()
    _classic_pair(c)
    bad = HeartbeatRequest("g", "C", 0, rebalance_timeout_ms=0, subscribed_topic_names=("foo",), owned={})
    resp = c.runtime.run("g", lambda s, now: dispatch.consumer_group_heartbeat(s, bad, now), c.now)
    assert resp["error_code"] == INVALID_REQUEST and c.classic() is not None  # nothing converted
    d = _consumer_group_with_a_member()
    box: list = []
    join = JoinRequest("g", "", 1, 30_000, "consumer", (("range", b""),), version=3)  # session timeout too short
    d.runtime.run("g", lambda s, now: dispatch.join_group(s, join, box.append, now), d.now)
    assert box[0]["error_code"] == INVALID_SESSION_TIMEOUT and set(d.group().members) == {"C"}
    d.runtime.run("g", lambda s, now: dispatch.sync_group(s, SyncRequest("", "m", 1), box.append, now), d.now)
    assert box[1]["error_code"] == INVALID_GROUP_ID
    for op in (lambda s, now: dispatch.heartbeat(s, ClassicHeartbeat("", "m", 1), now),
               lambda s, now: dispatch.leave_group(s, "", (LeaveIdentity("m"),), now)):
        assert d.runtime.run("g", op, d.now)["error_code"] == INVALID_GROUP_ID


# --- the expiry path --------------------------------------------------------------------------------


def _fire(c, key):
    """Run the timer armed under `key` now, as the runtime does when it is due."""
    shard = c.runtime.shard_for("g")
    ops = dict(shard.timer.due(c.now + 10**9))
    return c.runtime.run("g", ops[key], c.now)


def test_the_session_timer_of_the_last_consumer_member_downgrades_the_group():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    epoch = c.group().group_epoch
    _fire(c, ("session", "g", "C"))  # armed by the heartbeat through dispatch: runs fence_member
    g = c.classic()
    assert c.group() is None and g is not None and set(g.members) == {a, b} and g.generation == epoch
    assert g.state is ClassicState.PREPARING_REBALANCE


def test_timers_armed_for_a_group_taken_over_fence_through_dispatch():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    shard = c.runtime.shard_for("g")
    shard.timer.cancel(("session", "g", "C"))
    dispatch.arm_member_timers(shard, "g", c.group().members["C"], c.now)
    _fire(c, ("session", "g", "C"))
    assert c.group() is None and set(c.classic().members) == {a, b}


def test_fencing_a_member_removes_it_when_consumer_members_remain(monkeypatch):
    c = _consumer_group_with_a_member()
    c.hb(member="D", epoch=0, topics=("foo",))
    downgrade = Spy(monkeypatch, migration, "downgrade")
    expire = Spy(monkeypatch, consumer, "expire_member")
    epoch = c.group().group_epoch
    _fire(c, ("session", "g", "C"))
    assert set(c.group().members) == {"D"} and c.group().group_epoch == epoch + 1
    assert (downgrade.calls, expire.calls) == (0, 1)
    assert c.runtime.run("g", lambda s, now: dispatch.fence_member(s, "g", "gone", now), c.now) is None


def test_a_member_that_leaves_last_downgrades_through_the_same_fence(monkeypatch):
    c = _coord()
    _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    downgrade = Spy(monkeypatch, migration, "downgrade")
    assert c.hb(member="C", epoch=-1)["error_code"] == NONE  # a leave (-1) is a removal like a timeout
    assert downgrade.calls == 1 and c.group() is None and c.classic() is not None


def test_after_a_restart_the_last_consumer_members_session_still_downgrades_the_group():
    # The runtime re-arms a loaded group's timers through dispatch (KIP-848 "Fail Over"):
    # the last consumer-protocol member dying across a fail-over still makes the group classic.
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    c.restart()
    _fire(c, ("session", "g", "C"))  # the session the load armed; C never heartbeats again
    assert c.group() is None and set(c.classic().members) == {a, b}
