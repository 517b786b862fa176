"""The reconciliation picture of a KIP-848 member (observability/view.py), following the
KIP's case study of a member joining: the owner revokes first, the new member waits."""

from __future__ import annotations

from types import SimpleNamespace

from odradek.client.cluster import TopicPartition as TP
from odradek.observability.view import group_view, member_view


def member(mid, current, target, epoch=1, instance=None):
    return SimpleNamespace(member_id=mid, instance_id=instance, client_id="c", host="/127.0.0.1", epoch=epoch,
                           member_type="consumer", subscription=["foo"], regex=None,
                           assignment={TP("foo", p) for p in current}, target={TP("foo", p) for p in target})


def owners(*members):
    return {(tp.topic, tp.partition): m.member_id for m in members for tp in m.assignment}


def test_member_joining_a_group_sees_its_partitions_pending_until_the_owner_revokes():
    # KIP-848 "Assignment Reconciliation": A owned foo-0..3; B joined, the target gives B foo-2, foo-3.
    a = member("A", [0, 1, 2, 3], [0, 1], epoch=1)
    b = member("B", [], [2, 3], epoch=2)
    o = owners(a, b)
    va, vb = member_view(a, o), member_view(b, o)
    assert va["revoking"] == [["foo", 2], ["foo", 3]] and va["reconciliation"] == "revoking"
    assert vb["pending"] == [["foo", 2], ["foo", 3]] and vb["reconciliation"] == "waiting"
    assert vb["pending_owners"] == {"foo-2": "A", "foo-3": "A"}
    assert vb["assigning"] == []
    # A revoked: B's partitions are now free, and arrive at B's next heartbeat.
    a = member("A", [0, 1], [0, 1], epoch=2)
    o = owners(a, b)
    vb = member_view(b, o)
    assert vb["pending"] == [] and vb["assigning"] == [["foo", 2], ["foo", 3]]
    assert vb["reconciliation"] == "assigning"
    assert member_view(a, o)["reconciliation"] == "stable"


def test_group_view_counts_static_members_and_lag():
    a = member("A", [0], [0], instance="i-1")
    b = member("B", [1], [1])
    desc = SimpleNamespace(group_id="g", type="consumer", state="Stable", protocol_type="consumer", protocol="uniform",
                           epoch=3, assignment_epoch=3, members=[b, a])
    view = group_view(desc, {TP("foo", 0): (5, 9), TP("foo", 1): (None, 4)})
    assert [m["member_id"] for m in view["members"]] == ["A", "B"]
    assert view["static_members"] == 1
    assert view["lag"][0]["lag"] == 4 and view["lag"][1]["lag"] is None
    assert view["total_lag"] == 4
