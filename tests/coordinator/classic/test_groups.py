"""ListGroups and DescribeGroups for classic groups (groups.py); deletion is in test_persistence."""

from __future__ import annotations

from odradek.protocol.errors import NONE
from tests.coordinator.classic.helpers import describe, form, listed, state
from tests.coordinator.harness import Coord


def test_a_classic_group_is_listed_with_its_type_and_state():
    c = Coord()
    _mids, leader, _gen = form(c, 2)
    assert listed(c) == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}]
    assert listed(c, types=("classic",)) and listed(c, states=("STABLE",))
    assert listed(c, types=("consumer",)) == []
    assert listed(c, states=("Empty",)) == []
    c.join(member=leader)
    assert listed(c)[0]["group_state"] == "PreparingRebalance"
    assert listed(c, states=("preparingrebalance",))


def test_describe_a_stable_group_shows_protocol_metadata_and_assignments():
    c = Coord()
    mids, _leader, _gen = form(c, 2, static=("s0",))
    d = describe(c)
    assert d["error_code"] == NONE
    assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == ("Stable", "consumer", "range")
    rows = {m["member_id"]: m for m in d["members"]}
    assert set(rows) == set(mids)
    assert rows[mids[0]]["group_instance_id"] == "s0" and rows[mids[1]]["group_instance_id"] is None
    assert [rows[m]["member_assignment"] for m in mids] == [b"a0", b"a1"]
    assert {m["member_metadata"] for m in d["members"]} == {b"m"}
    assert {m["client_id"] for m in d["members"]} == {"client"}


def test_describe_a_rebalancing_group_hides_protocol_and_metadata():
    c = Coord()
    mids, _leader, _gen = form(c, 2)
    for m in mids:
        c.join(member=m)
    assert state(c) == "CompletingRebalance"
    d = describe(c)
    assert (d["group_state"], d["protocol_data"]) == ("CompletingRebalance", "")
    assert sorted(m["member_id"] for m in d["members"]) == sorted(mids)
    assert all(m["member_metadata"] == b"" for m in d["members"])


def test_describe_an_empty_group():
    c = Coord()
    mids, _leader, _gen = form(c, 1)
    c.leave("g", (mids[0],))
    d = describe(c)
    assert (d["error_code"], d["group_state"], d["members"], d["protocol_type"]) == (NONE, "Empty", [], "consumer")
