"""Group admin operations (ListGroups, ConsumerGroupDescribe, DescribeGroups, DeleteGroups)
against a real coordinator driven through the harness."""

from __future__ import annotations

import pytest

from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.groups import (
    delete_group,
    describe_classic_group,
    describe_consumer_group,
    listed_groups,
)
from odradek.protocol.errors import GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NONE
from tests.coordinator.harness import BAR, FOO, Coord

TOPICS = (("foo", FOO, 3), ("bar", BAR, 2))


def shard(c: Coord, gid: str = "g"):
    return c.runtime.shard_for(gid)


def listed(c: Coord, states=(), types=()) -> dict[str, tuple[str, str, str]]:
    out = {}
    for s in c.runtime.shards.values():
        for row in listed_groups(s, set(states), set(types)):
            out[row["group_id"]] = (row["group_type"], row["group_state"], row["protocol_type"])
    return out


def delete(c: Coord, gid: str):
    c.written = []
    code = c.runtime.run(gid, lambda s, now: delete_group(s, gid, now), c.now)
    return code, list(c.written)


def converge(c: Coord, gid: str = "g"):
    g = c.converge(gid)
    assert g.state.value == "Stable"
    return g


@pytest.fixture
def world():
    """g: a stable consumer group; r: reconciling; e: an empty consumer group with offsets;
    s: a simple group (offsets only)."""
    c = Coord(topics=TOPICS)
    c.hb("g", "A", topics=("foo",))
    c.hb("r", "R1", topics=("foo",))
    c.hb("r", "R2", topics=("foo",))
    c.hb("e", "E1", topics=("bar",))
    assert c.commit("e", "E1", 1, offsets=(("bar", 0, 3),)) == {("bar", 0): 0}
    c.hb("e", "E1", -1)
    assert c.commit("s", offsets=(("foo", 0, 5), ("bar", 1, 7))) == {("foo", 0): 0, ("bar", 1): 0}
    return c


# --- ListGroups --------------------------------------------------------------------------


def test_list_all_groups_with_types_and_states(world):
    assert listed(world) == {
        "g": ("consumer", "Stable", "consumer"),
        "r": ("consumer", "Reconciling", "consumer"),
        "e": ("consumer", "Empty", "consumer"),
        "s": ("classic", "Empty", ""),
    }


def test_list_rows_are_sorted_and_complete(world):
    rows = listed_groups(shard(world), set(), set())
    assert [r["group_id"] for r in rows] == ["e", "g", "r", "s"]
    assert rows[3] == {"group_id": "s", "protocol_type": "", "group_state": "Empty", "group_type": "classic"}


@pytest.mark.parametrize("states, expected", [
    ({"Empty"}, {"e", "s"}),
    ({"empty"}, {"e", "s"}),
    ({"STABLE"}, {"g"}),
    ({"reconciling", "Stable"}, {"g", "r"}),
    ({"Assigning"}, set()),
    ({"Dead"}, set()),
    ({"PreparingRebalance"}, set()),
])
def test_list_state_filter_is_case_insensitive(world, states, expected):
    assert set(listed(world, states=states)) == expected


@pytest.mark.parametrize("types, expected", [
    ({"consumer"}, {"e", "g", "r"}),
    ({"CONSUMER"}, {"e", "g", "r"}),
    ({"Classic"}, {"s"}),
    ({"classic", "Consumer"}, {"e", "g", "r", "s"}),
    ({"share"}, set()),
])
def test_list_type_filter_is_case_insensitive(world, types, expected):
    assert set(listed(world, types=types)) == expected


def test_list_state_and_type_filters_combine(world):
    assert set(listed(world, states={"EMPTY"}, types={"CONSUMER"})) == {"e"}
    assert set(listed(world, states={"empty"}, types={"classic"})) == {"s"}
    assert set(listed(world, states={"stable"}, types={"classic"})) == set()


def test_groups_are_listed_by_the_shard_that_owns_them():
    c = Coord(topics=TOPICS, partitions=3)
    gids = [f"group-{i}" for i in range(12)]
    for gid in gids:
        c.commit(gid, offsets=(("foo", 0, 1),))
    seen = []
    for p, s in c.runtime.shards.items():
        for row in listed_groups(s, set(), set()):
            assert c.runtime.partition_for(row["group_id"]) == p
            seen.append(row["group_id"])
    assert sorted(seen) == sorted(gids)
    assert len({c.runtime.partition_for(g) for g in gids}) > 1


# --- ConsumerGroupDescribe ------------------------------------------------------------------


def _by_name(assignment: dict) -> dict[str, list[int]]:
    return {tp["topic_name"]: tp["partitions"] for tp in assignment["topic_partitions"]}


def test_describe_consumer_group_reconciling(world):
    d = describe_consumer_group(shard(world, "r"), "r")
    assert d["error_code"] == NONE and d["error_message"] is None
    assert (d["group_id"], d["group_state"], d["group_epoch"], d["assignment_epoch"]) == ("r", "Reconciling", 2, 2)
    assert d["assignor_name"] == "uniform"
    members = {m["member_id"]: m for m in d["members"]}
    assert list(members) == ["R1", "R2"]
    r1, r2 = members["R1"], members["R2"]
    g = world.group("r")
    t1, t2 = sorted(g.target["R1"][FOO]), sorted(g.target["R2"][FOO])
    assert sorted(t1 + t2) == [0, 1, 2] and t1 and t2
    # R1 still holds everything at epoch 1; its target is its share; R2 waits at epoch 2.
    assert r1["member_epoch"] == 1 and _by_name(r1["assignment"]) == {"foo": [0, 1, 2]}
    assert _by_name(r1["target_assignment"]) == {"foo": t1}
    assert r2["member_epoch"] == 2 and r2["assignment"] == {"topic_partitions": []}
    assert _by_name(r2["target_assignment"]) == {"foo": t2}
    for m in (r1, r2):
        assert m["client_id"] == "client" and m["client_host"] == "/127.0.0.1"
        assert m["subscribed_topic_names"] == ["foo"] and m["subscribed_topic_regex"] is None
        assert m["instance_id"] is None and m["rack_id"] is None
        assert m["member_type"] == 1
    tp = r1["assignment"]["topic_partitions"][0]
    assert tp["topic_id"] == FOO


def test_describe_resolves_every_topic_name_from_the_image():
    c = Coord(topics=TOPICS)
    c.hb("g", "A", topics=("foo", "bar"), instance_id="i-1", rack_id="rack-1", assignor="range")
    d = describe_consumer_group(shard(c), "g")
    (m,) = d["members"]
    assert _by_name(m["assignment"]) == {"foo": [0, 1, 2], "bar": [0, 1]}
    assert _by_name(m["target_assignment"]) == {"foo": [0, 1, 2], "bar": [0, 1]}
    ids = {tp["topic_name"]: tp["topic_id"] for tp in m["assignment"]["topic_partitions"]}
    assert ids == {"foo": FOO, "bar": BAR}
    assert (m["instance_id"], m["rack_id"], m["subscribed_topic_names"]) == ("i-1", "rack-1", ["bar", "foo"])
    assert d["assignor_name"] == "range"
    assert (d["group_state"], d["group_epoch"], d["assignment_epoch"], m["member_epoch"]) == ("Stable", 1, 1, 1)


def test_describe_assignor_name_follows_the_configured_default():
    c = Coord(topics=TOPICS, config=CoordinatorConfig(offsets_topic_partitions=1, assignors=("range", "uniform")))
    c.hb("g", "A")
    assert describe_consumer_group(shard(c), "g")["assignor_name"] == "range"


def test_describe_stable_group_after_convergence(world):
    g = converge(world, "r")
    d = describe_consumer_group(shard(world, "r"), "r")
    assert d["group_state"] == "Stable"
    for m in d["members"]:
        assert m["member_epoch"] == g.group_epoch
        assert m["assignment"] == m["target_assignment"]
        assert m["assignment"]["topic_partitions"]


def test_describe_empty_consumer_group(world):
    d = describe_consumer_group(shard(world, "e"), "e")
    assert d["error_code"] == NONE and d["group_state"] == "Empty" and d["members"] == []
    assert d["group_epoch"] == 2  # join (1), leave (2)


@pytest.mark.parametrize("gid", ["nope", "s"])  # unknown, and a simple (non-consumer) group
def test_describe_unknown_consumer_group_is_group_id_not_found(world, gid):
    d = describe_consumer_group(shard(world, gid), gid)
    assert d["error_code"] == GROUP_ID_NOT_FOUND
    assert d["group_id"] == gid and d["group_state"] == "Dead" and d["members"] == []
    assert gid in d["error_message"]


# --- DescribeGroups (classic) ------------------------------------------------------------------


@pytest.mark.parametrize("gid", ["g", "e", "nope"])
@pytest.mark.parametrize("version, code", [(0, NONE), (5, NONE), (6, GROUP_ID_NOT_FOUND)])
def test_describe_classic_of_consumer_or_unknown_group_is_dead(world, gid, version, code):
    d = describe_classic_group(shard(world, gid), gid, version)
    assert d["error_code"] == code
    assert (d["group_id"], d["group_state"], d["members"]) == (gid, "Dead", [])


@pytest.mark.parametrize("version", [0, 5, 6])
def test_describe_classic_of_simple_group_is_empty(world, version):
    d = describe_classic_group(shard(world, "s"), "s", version)
    assert d["error_code"] == NONE
    assert (d["group_state"], d["protocol_type"], d["members"]) == ("Empty", "", [])


# --- DeleteGroups ----------------------------------------------------------------------------


def test_delete_unknown_group(world):
    before = world.snapshot()
    code, written = delete(world, "nope")
    assert code == GROUP_ID_NOT_FOUND and written == []
    assert world.snapshot() == before


@pytest.mark.parametrize("gid", ["g", "r"])
def test_delete_non_empty_consumer_group(world, gid):
    before = world.snapshot()
    code, written = delete(world, gid)
    assert code == NON_EMPTY_GROUP and written == []
    assert world.snapshot() == before


def test_delete_refused_while_a_static_member_may_return():
    c = Coord(topics=TOPICS)
    c.hb("g", "A", instance_id="i-1")
    c.hb("g", "A", -2, instance_id="i-1")
    assert delete(c, "g")[0] == NON_EMPTY_GROUP
    c.advance(c.config.session_timeout_ms)  # the static member never came back
    assert not c.group("g").members
    assert delete(c, "g")[0] == NONE
    assert c.group("g") is None


def test_delete_empty_consumer_group_writes_tombstones_for_everything(world):
    code, written = delete(world, "e")
    assert code == NONE
    assert written and all(r.value is None for r in written)
    keys = {(r.type, r.key) for r in written}
    assert (R.OFFSET_COMMIT, ("e", "bar", 0)) in keys
    assert (R.GROUP_METADATA, ("e",)) in keys
    assert (R.TARGET_METADATA, ("e",)) in keys
    assert (R.PARTITION_METADATA, ("e",)) in keys
    # the group record goes last: replay removes the group when everything else is gone
    assert (written[-1].type, written[-1].key) == (R.GROUP_METADATA, ("e",))
    # every key the group ever wrote is tombstoned (or already was)
    last = {}
    for rec in world.replayed():
        last[(rec.type, rec.key)] = rec.value
    assert all(v is None for (t, k), v in last.items() if k[0] == "e")
    s = shard(world, "e")
    assert "e" not in s.consumer_groups and "e" not in s.offsets
    assert "e" not in listed(world)
    assert describe_consumer_group(s, "e")["error_code"] == GROUP_ID_NOT_FOUND
    assert world.fetch("e") == {}


def test_delete_simple_group_tombstones_its_offsets(world):
    code, written = delete(world, "s")
    assert code == NONE
    assert sorted((r.type, r.key, r.value) for r in written) == [
        (R.OFFSET_COMMIT, ("s", "bar", 1), None), (R.OFFSET_COMMIT, ("s", "foo", 0), None)]
    assert "s" not in listed(world)
    assert describe_classic_group(shard(world, "s"), "s", 6)["error_code"] == GROUP_ID_NOT_FOUND


def test_deleted_groups_stay_gone_after_restart(world):
    assert delete(world, "e")[0] == NONE
    assert delete(world, "s")[0] == NONE
    before = world.snapshot()
    world.restart()
    assert world.snapshot() == before
    assert set(listed(world)) == {"g", "r"}
    assert world.group("e") is None and world.fetch("s") == {}
    assert delete(world, "e")[0] == GROUP_ID_NOT_FOUND


def test_a_deleted_group_id_can_be_reused_from_scratch(world):
    assert delete(world, "e")[0] == NONE
    r = world.hb("e", "N1", topics=("foo",))
    assert r["error_code"] == NONE and r["member_epoch"] == 1
    g = world.group("e")
    assert g.group_epoch == 1 and list(g.members) == ["N1"]
    assert world.fetch("e") == {}
    before = world.snapshot()
    world.restart()
    assert world.snapshot() == before
