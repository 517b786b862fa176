"""Epoch bumps and their triggers from successive group views (observability/history.py)."""

from __future__ import annotations

from odradek.observability.history import GroupHistory, triggers


def view(epoch, target, members, lag=0):
    return {"type": "consumer", "group_epoch": epoch, "target_epoch": target, "assignor": "uniform",
            "state": "Stable", "members": members, "lag": [{"topic": "foo", "partition": 0, "lag": lag}],
            "total_lag": lag}


def m(mid, subscription=("foo",), epoch=1, state="stable", instance=None, regex=None):
    return {"member_id": mid, "subscription": list(subscription), "member_epoch": epoch, "reconciliation": state,
            "instance_id": instance, "regex": regex}


def test_each_kip848_trigger_is_named():
    before = view(1, 1, [m("A"), m("B")])
    after = view(2, 2, [m("A", ("foo", "bar")), m("C", instance="i-9")])
    assert triggers(before, after, {"foo": 2, "bar": 1}, {"foo": 4, "bar": 1}) == [
        "member C (static i-9) joined", "member B left", "member A changed its subscription to foo, bar",
        "topic foo now has 4 partitions (was 2)"]


def test_history_records_bumps_target_epochs_and_reconciliation_and_lag():
    h = GroupHistory()
    parts = {"foo": 2}
    assert [e["kind"] for e in h.observe(view(1, 1, [m("A")]), parts, 10.0)] == ["observed"]
    added = h.observe(view(2, 1, [m("A", epoch=1, state="revoking"), m("B", epoch=2, state="waiting")], lag=5),
                      parts, 11.0)
    assert [e["kind"] for e in added] == ["group-epoch"]
    assert added[0]["from"] == 1 and added[0]["to"] == 2 and added[0]["triggers"] == ["member B joined"]
    added = h.observe(view(2, 2, [m("A", epoch=2), m("B", epoch=2)], lag=3), parts, 12.0)
    assert [e["kind"] for e in added] == ["target-epoch", "reconciled"]
    assert h.observe(view(2, 2, [m("A", epoch=2), m("B", epoch=2)]), parts, 13.0) == []  # nothing new
    assert list(h.lag) == [(10.0, 0), (11.0, 5), (12.0, 3), (13.0, 0)]
    assert list(h.partition_lag["foo-0"])[-1] == (13.0, 0)
