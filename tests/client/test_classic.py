"""ClassicGroupMember: the classic consumer group protocol, client side (no network).

Responses are real kio entities built the way the wire layer would hand them over.
"""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.assignors import CooperativeStickyAssignor, RangeAssignor
from odradek.client.classic import (
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    SYNC_GROUP,
    TRANSITIONS,
    ClassicGroupMember,
    Event,
    IllegalTransition,
    State,
)
from odradek.client.cluster import TopicPartition as TP
from odradek.client.errors import KafkaConnectionError, KafkaError, UnsupportedApiError
from odradek.coordinator.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.protocol.messages import build, request_class, response_class

GEN = 7


# ---------------------------------------------------------------------------- responses


def join_resp(error=ErrorCode.none, *, member_id="", generation=-1, leader="", protocol="range", members=(),
              skip=False, version=9, protocol_type="consumer"):
    return build(response_class(JOIN_GROUP, version), {
        "throttle_time": 0, "error_code": error, "generation_id": generation, "protocol_type": protocol_type,
        "protocol_name": protocol, "leader": leader, "skip_assignment": skip, "member_id": member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in members],
    })


def sync_resp(error=ErrorCode.none, assignment: dict | None = None, *, protocol="range", version=5):
    raw = encode_assignment(assignment) if assignment is not None else b""
    return build(response_class(SYNC_GROUP, version), {
        "throttle_time": 0, "error_code": error, "protocol_type": "consumer", "protocol_name": protocol,
        "assignment": raw})


def hb_resp(error=ErrorCode.none):
    return build(response_class(HEARTBEAT, 4), {"throttle_time": 0, "error_code": error})


def leave_resp(error=ErrorCode.none):
    return build(response_class(LEAVE_GROUP, 5), {"throttle_time": 0, "error_code": error, "members": []})


def sub(topics, owned=None):
    return encode_subscription(topics, owned, version=1)


# ---------------------------------------------------------------------------- drivers


def member(assignors=None, **kw) -> ClassicGroupMember:
    return ClassicGroupMember("g", assignors=assignors or [RangeAssignor()], **kw)


def expect(m, now, api):
    req = m.next_request(now)
    assert req is not None, f"expected api {api}, got nothing in {m.state}"
    assert req[0] == api, f"expected api {api}, got {req[0]} in {m.state}"
    return req[1]


def follow(m, now, assignment, *, member_id="m1", generation=GEN, protocol=None):
    """Send the JoinGroup the member wants and answer as a follower; then SyncGroup with `assignment`."""
    protocol = protocol or m.assignors[0].name
    expect(m, now, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id=member_id, generation=generation, leader="other",
                                        protocol=protocol), now)
    body = expect(m, now, SYNC_GROUP)
    assert body["assignments"] == []
    m.on_response(SYNC_GROUP, sync_resp(assignment=assignment, protocol=protocol), now)


def settle(m, now=0):
    """Do what the driver does: revoke, then assign."""
    if m.to_revoke():
        m.revoked(m.to_revoke(), now=now)
    if m.to_assign():
        m.assigned(m.to_assign(), now=now)


def stable(assignors=None, assignment=None, topics=("a",), **kw) -> ClassicGroupMember:
    m = member(assignors, **kw)
    m.subscribe(list(topics), now=0)
    follow(m, 0, assignment if assignment is not None else {"a": [0, 1]})
    settle(m)
    assert m.state is State.STABLE
    return m


def tps(*specs):
    return frozenset(TP(t, p) for t, p in specs)


# ---------------------------------------------------------------------------- requests


def test_request_bodies_build_for_every_version():
    m = member(instance_id="i1")
    m.subscribe(["a"], now=0)
    join = expect(m, 0, JOIN_GROUP)
    for v in range(2, 10):
        req = build(request_class(JOIN_GROUP, v), join)
        assert req.session_timeout == datetime.timedelta(milliseconds=45000)
        assert req.rebalance_timeout == datetime.timedelta(milliseconds=300000)
        assert req.protocol_type == "consumer"
    assert build(request_class(JOIN_GROUP, 9), join).group_instance_id == "i1"
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="other"), 0)
    sync = expect(m, 0, SYNC_GROUP)
    for v in range(6):
        assert build(request_class(SYNC_GROUP, v), sync).generation_id == GEN
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}), 0)
    settle(m)
    hb = expect(m, 3000, HEARTBEAT)
    for v in range(5):
        assert build(request_class(HEARTBEAT, v), hb).member_id == "m1"
    m.on_response(HEARTBEAT, hb_resp(), 3000)

    d = stable()
    d.leave(now=0)
    leave = expect(d, 0, LEAVE_GROUP)
    for v in range(3):
        assert build(request_class(LEAVE_GROUP, v), leave).member_id == "m1"
    for v in range(3, 6):
        req = build(request_class(LEAVE_GROUP, v), leave)
        assert [x.member_id for x in req.members] == ["m1"]
        assert req.members[0].group_instance_id is None


def test_join_metadata_has_one_protocol_per_assignor():
    m = member([CooperativeStickyAssignor(), RangeAssignor()])
    m.subscribe(["b", "a", "a"], now=0)
    body = expect(m, 0, JOIN_GROUP)
    assert [p["name"] for p in body["protocols"]] == ["cooperative-sticky", "range"]
    for p in body["protocols"]:
        assert decode_subscription(p["metadata"]).topics == ("a", "b")
    assert body["member_id"] == ""


# ---------------------------------------------------------------------------- join, leader, follower


def test_member_id_required_then_leader_assigns_with_metadata():
    m = member()
    m.subscribe(["a", "b"], now=0)
    assert m.state is State.JOINING
    expect(m, 0, JOIN_GROUP)
    assert m.next_request(0) is None  # one request in flight
    # KIP-394: told our id, join again at once with it.
    m.on_response(JOIN_GROUP, join_resp(ErrorCode.member_id_required, member_id="m1"), 5)
    body = expect(m, 5, JOIN_GROUP)
    assert body["member_id"] == "m1"
    members = [("m1", None, sub(["a", "b"])), ("m2", None, sub(["a"]))]
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1", members=members), 10)
    assert m.state is State.ASSIGNING
    assert m.needs_metadata == ["a", "b"]
    assert m.next_request(10) is None  # no SyncGroup before the assignment is computed
    m.set_metadata({"a": 4, "b": 2, "zzz": 9}, 20)
    assert m.needs_metadata is None
    body = expect(m, 20, SYNC_GROUP)
    assert (body["generation_id"], body["member_id"], body["protocol_name"]) == (GEN, "m1", "range")
    got = {a["member_id"]: decode_assignment(a["assignment"]) for a in body["assignments"]}
    assert got == {"m1": {"a": frozenset({0, 1}), "b": frozenset({0, 1})}, "m2": {"a": frozenset({2, 3})}}
    assert m.to_assign() == frozenset()
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0, 1], "b": [0, 1]}), 30)
    assert m.state is State.RECONCILING
    assert m.to_revoke() == frozenset()
    assert m.to_assign() == tps(("a", 0), ("a", 1), ("b", 0), ("b", 1))
    m.assigned(m.to_assign(), now=31)
    assert m.state is State.STABLE
    assert m.owned == m.target == tps(("a", 0), ("a", 1), ("b", 0), ("b", 1))
    assert m.commit_identity() == (GEN, "m1", None)


def test_leader_assigns_with_the_protocol_the_coordinator_chose():
    m = member([CooperativeStickyAssignor(), RangeAssignor()])
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    members = [("m1", None, sub(["a"], {"a": [0, 1, 2]})), ("m2", None, sub(["a"]))]
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1", members=members,
                                        protocol="cooperative-sticky"), 0)
    m.set_metadata({"a": 4}, 0)
    body = expect(m, 0, SYNC_GROUP)
    got = {a["member_id"]: decode_assignment(a["assignment"]) for a in body["assignments"]}
    # Sticky: m1 keeps two of what it owns; m2 gets the unowned one; one is withheld (KIP-429).
    assert got["m2"] == {"a": frozenset({3})}
    assert len(got["m1"]["a"]) == 2 and got["m1"]["a"] <= {0, 1, 2}
    assert body["protocol_name"] == "cooperative-sticky"


def test_leader_with_no_topics_assigns_without_metadata():
    m = member()
    m.subscribe([], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1",
                                        members=[("m1", None, sub([]))]), 0)
    assert m.needs_metadata is None
    body = expect(m, 0, SYNC_GROUP)
    assert [a["member_id"] for a in body["assignments"]] == ["m1"]


def test_follower_syncs_at_once_with_no_assignments():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m2", generation=GEN, leader="m1"), 0)
    assert m.needs_metadata is None
    body = expect(m, 0, SYNC_GROUP)
    assert body["assignments"] == [] and body["generation_id"] == GEN and body["member_id"] == "m2"
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [2]}), 0)
    assert m.to_assign() == tps(("a", 2))


def test_static_leader_skips_assignment():
    # KIP-814: a static leader rejoining a stable group keeps the stored assignment.
    m = member(instance_id="i1")
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1", skip=True,
                                        members=[("m1", "i1", sub(["a"]))]), 0)
    # It still watches the group's topics, from the partition counts of the rejoin on.
    assert m.needs_metadata == ["a"]
    m.set_metadata({"a": 3}, 0)
    assert m.needs_metadata is None
    assert expect(m, 0, SYNC_GROUP)["assignments"] == []
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0, 1, 2]}), 0)
    m.assigned(m.to_assign(), now=0)
    assert m.state is State.STABLE
    m.set_metadata({"a": 3}, 1)
    assert m.state is State.STABLE
    m.set_metadata({"a": 5}, 2)  # partitions added after the rejoin: the leader rejoins
    assert m.state is State.PREPARING


def test_member_left_out_by_the_leader_gets_nothing():
    m = member()
    m.subscribe(["a"], now=0)
    follow(m, 0, None)  # the coordinator sends empty bytes
    assert m.state is State.STABLE and m.target == frozenset()


def test_old_join_and_sync_versions():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x", version=2), 0)
    expect(m, 0, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}, version=0), 0)
    assert m.to_assign() == tps(("a", 0))


def test_regex_waits_for_topic_names():
    m = member()
    m.subscribe(regex="a.*", now=0)
    assert m.active and m.next_request(0) is None and m.next_deadline() is None
    m.subscribe(["a1", "a2"], now=5)
    body = expect(m, 5, JOIN_GROUP)
    assert decode_subscription(body["protocols"][0]["metadata"]).topics == ("a1", "a2")


# ---------------------------------------------------------------------------- heartbeats


def test_heartbeats_at_the_interval_while_stable():
    m = stable(heartbeat_interval_ms=3000)
    assert m.next_request(2999) is None
    assert m.next_deadline() == 3000
    body = expect(m, 3000, HEARTBEAT)
    assert body == {"group_id": "g", "generation_id": GEN, "member_id": "m1", "group_instance_id": None}
    m.on_response(HEARTBEAT, hb_resp(), 3010)
    assert m.next_request(5999) is None
    expect(m, 6000, HEARTBEAT)


# ---------------------------------------------------------------------------- rebalances


def test_eager_rebalance_revokes_everything_before_joining():
    m = stable(assignment={"a": [0, 1]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    assert m.to_revoke() == tps(("a", 0), ("a", 1))
    assert m.to_assign() == frozenset()
    assert m.next_request(3000) is None  # no JoinGroup while we own partitions
    assert m.commit_identity() == (GEN, "m1", None)  # the revocation commits with the old generation
    m.revoked(tps(("a", 0)), now=3001)
    assert m.next_request(3001) is None
    m.revoked(tps(("a", 1)), now=3002)
    body = expect(m, 3002, JOIN_GROUP)
    assert body["member_id"] == "m1"
    assert decode_subscription(body["protocols"][0]["metadata"]).owned == {}
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 1, leader="x"), 3003)
    expect(m, 3003, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [1]}), 3004)
    assert m.to_assign() == tps(("a", 1))
    m.assigned(m.to_assign(), now=3004)
    assert m.state is State.STABLE and m.commit_identity() == (GEN + 1, "m1", None)


def test_cooperative_rebalance_keeps_partitions_and_revokes_only_moved_ones():
    coop = [CooperativeStickyAssignor()]
    m = stable(coop, assignment={"a": [0, 1, 2]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    assert m.to_revoke() == frozenset()  # KIP-429: nothing revoked before joining
    body = expect(m, 3000, JOIN_GROUP)
    assert decode_subscription(body["protocols"][0]["metadata"]).owned == {"a": frozenset({0, 1, 2})}
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 1, leader="x",
                                        protocol="cooperative-sticky"), 3001)
    expect(m, 3001, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0, 1]}, protocol="cooperative-sticky"), 3002)
    assert m.owned == tps(("a", 0), ("a", 1), ("a", 2))
    assert m.to_revoke() == tps(("a", 2))
    assert m.to_assign() == frozenset()
    assert m.next_request(3002) is None  # heartbeat not due; no JoinGroup before the revocation
    m.revoked(m.to_revoke(), now=3003)
    # KIP-429: having revoked something, join again at once.
    body = expect(m, 3003, JOIN_GROUP)
    assert decode_subscription(body["protocols"][0]["metadata"]).owned == {"a": frozenset({0, 1})}
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 2, leader="x",
                                        protocol="cooperative-sticky"), 3004)
    expect(m, 3004, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0, 1]}, protocol="cooperative-sticky"), 3005)
    assert m.state is State.STABLE
    assert m.to_revoke() == m.to_assign() == frozenset()


def test_a_cooperative_member_that_missed_a_generation_loses_what_it_owned():
    """A static member kept in the group while away comes back a generation late: the leader
    of the generation it missed may have given its partitions away, so it drops them without
    committing (to_lose, then lost()) instead of keeping them into the new generation."""
    coop = [CooperativeStickyAssignor()]
    m = stable(coop, assignment={"a": [0, 1, 2]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    expect(m, 3000, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 2, leader="x",
                                        protocol="cooperative-sticky"), 3001)
    assert m.to_lose() == tps(("a", 0), ("a", 1), ("a", 2)) and m.to_revoke() == frozenset()
    m.lost(now=3001)
    assert m.owned == frozenset() and m.to_lose() == frozenset()
    expect(m, 3001, SYNC_GROUP)  # the rebalance goes on
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}, protocol="cooperative-sticky"), 3002)
    assert m.to_assign() == tps(("a", 0))


def test_the_next_generation_keeps_what_it_owned():
    coop = [CooperativeStickyAssignor()]
    m = stable(coop, assignment={"a": [0, 1]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    expect(m, 3000, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 1, leader="x",
                                        protocol="cooperative-sticky"), 3001)
    assert m.to_lose() == frozenset() and m.owned == tps(("a", 0), ("a", 1))


def test_revocation_comes_before_assignment():
    m = stable([CooperativeStickyAssignor()], assignment={"a": [0, 1]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    follow(m, 3000, {"a": [1, 2]}, generation=GEN + 1, protocol="cooperative-sticky")
    assert m.to_revoke() == tps(("a", 0))
    assert m.to_assign() == frozenset()  # revoke first
    m.revoked(m.to_revoke(), now=3001)
    assert m.to_assign() == tps(("a", 2))
    m.assigned(m.to_assign(), now=3002)
    assert m.owned == tps(("a", 1), ("a", 2))
    expect(m, 3002, JOIN_GROUP)  # revoked something: KIP-429 second rebalance


def test_cooperative_takes_new_partitions_without_rejoining():
    m = stable([CooperativeStickyAssignor()], assignment={"a": [0]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    follow(m, 3000, {"a": [0, 1]}, generation=GEN + 1)
    assert m.to_revoke() == frozenset() and m.to_assign() == tps(("a", 1))
    m.assigned(m.to_assign(), now=3001)
    assert m.state is State.STABLE
    assert m.next_request(3001) is None


def test_mixed_assignors_rebalance_eagerly():
    # Only cooperative if every assignor is (the KIP-429 upgrade path goes through eager).
    m = stable([CooperativeStickyAssignor(), RangeAssignor()], assignment={"a": [0]})
    assert not m.cooperative
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    assert m.to_revoke() == tps(("a", 0))


def test_cooperative_revokes_unsubscribed_topics_before_joining():
    m = stable([CooperativeStickyAssignor()], assignment={"a": [0], "b": [0]}, topics=("a", "b"))
    m.subscribe(["a"], now=10)
    assert m.to_revoke() == tps(("b", 0))
    assert m.next_request(10) is None
    m.revoked(m.to_revoke(), now=11)
    body = expect(m, 11, JOIN_GROUP)
    s = decode_subscription(body["protocols"][0]["metadata"])
    assert s.topics == ("a",) and s.owned == {"a": frozenset({0})}


def test_subscription_change_while_stable_rejoins():
    m = stable()
    m.subscribe(["a"], now=10)
    assert m.state is State.STABLE  # same topics: nothing to do
    m.subscribe(["a", "b"], now=10)
    assert m.to_revoke() == tps(("a", 0), ("a", 1))
    m.revoked(m.to_revoke(), now=11)
    body = expect(m, 11, JOIN_GROUP)
    assert decode_subscription(body["protocols"][0]["metadata"]).topics == ("a", "b")
    assert body["reason"] == "subscription changed"


def test_subscription_change_during_join_rejoins_after_sync():
    m = member([CooperativeStickyAssignor()])
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.subscribe(["a", "b"], now=1)  # JoinGroup in flight with the old subscription
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x",
                                        protocol="cooperative-sticky"), 2)
    expect(m, 2, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}, protocol="cooperative-sticky"), 3)
    m.assigned(m.to_assign(), now=4)
    body = expect(m, 4, JOIN_GROUP)
    assert decode_subscription(body["protocols"][0]["metadata"]).topics == ("a", "b")


def test_assignment_outside_the_subscription_is_not_taken():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.subscribe(["b"], now=1)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x"), 2)
    expect(m, 2, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}), 3)
    assert m.to_assign() == frozenset()
    body = expect(m, 3, JOIN_GROUP)
    assert decode_subscription(body["protocols"][0]["metadata"]).topics == ("b",)


def test_rebalance_in_progress_is_ignored_while_not_stable():
    m = stable(assignment={"a": [0]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    assert m.state is State.PREPARING
    expect(m, 6000, HEARTBEAT)  # heartbeats go on while the app revokes
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 6000)
    assert m.state is State.PREPARING and m.to_revoke() == tps(("a", 0))
    # A leader computing the assignment: the coordinator is rebalancing already; go on.
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1",
                                        members=[("m1", None, sub(["a"]))]), 0)
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    assert m.state is State.ASSIGNING
    m.set_metadata({"a": 1}, 3001)
    expect(m, 3001, SYNC_GROUP)


def test_sync_rebalance_in_progress_rejoins_at_once():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x"), 0)
    expect(m, 0, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(ErrorCode.rebalance_in_progress), 1)
    assert expect(m, 1, JOIN_GROUP)["member_id"] == "m1"


def test_leader_rejoins_when_partition_counts_change():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1",
                                        members=[("m1", None, sub(["a"]))]), 0)
    m.set_metadata({"a": 2}, 0)
    expect(m, 0, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0, 1]}), 0)
    settle(m)
    assert m.group_topics == {"a"}
    m.set_metadata({"a": 2}, 10)
    assert m.state is State.STABLE
    m.set_metadata({"a": 3}, 10)
    assert m.state is State.PREPARING and m.to_revoke() == tps(("a", 0), ("a", 1))


# ---------------------------------------------------------------------------- fencing


@pytest.mark.parametrize("api", [HEARTBEAT, SYNC_GROUP, JOIN_GROUP])
def test_unknown_member_id_fences_and_forgets_the_member_id(api):
    m = stable([CooperativeStickyAssignor()], assignment={"a": [0]})
    if api == HEARTBEAT:
        expect(m, 3000, HEARTBEAT)
        m.on_response(HEARTBEAT, hb_resp(ErrorCode.unknown_member_id), 3000)
    else:
        expect(m, 3000, HEARTBEAT)
        m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
        expect(m, 3000, JOIN_GROUP)
        if api == JOIN_GROUP:
            m.on_response(JOIN_GROUP, join_resp(ErrorCode.unknown_member_id), 3000)
        else:
            m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 1, leader="x",
                                                protocol="cooperative-sticky"), 3000)
            expect(m, 3000, SYNC_GROUP)
            m.on_response(SYNC_GROUP, sync_resp(ErrorCode.unknown_member_id), 3000)
    assert m.fenced and m.state is State.FENCED
    assert m.member_id == ""
    assert m.commit_identity() == (-1, "", None)
    assert m.to_revoke() == frozenset() and m.to_assign() == frozenset()
    assert m.next_request(10**9) is None  # nothing until the driver ran on_partitions_lost
    m.lost(now=3001)
    assert m.owned == frozenset() and not m.fenced
    body = expect(m, 3001, JOIN_GROUP)
    assert body["member_id"] == ""
    assert decode_subscription(body["protocols"][0]["metadata"]).owned == {}


@pytest.mark.parametrize("api", [HEARTBEAT, SYNC_GROUP])
def test_illegal_generation_fences_but_keeps_the_member_id(api):
    m = stable([CooperativeStickyAssignor()], assignment={"a": [0]})
    expect(m, 3000, HEARTBEAT)
    if api == HEARTBEAT:
        m.on_response(HEARTBEAT, hb_resp(ErrorCode.illegal_generation), 3000)
    else:
        m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
        expect(m, 3000, JOIN_GROUP)
        m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN + 1, leader="x",
                                            protocol="cooperative-sticky"), 3000)
        expect(m, 3000, SYNC_GROUP)
        m.on_response(SYNC_GROUP, sync_resp(ErrorCode.illegal_generation), 3000)
    assert m.fenced
    m.lost(now=3001)
    assert expect(m, 3001, JOIN_GROUP)["member_id"] == "m1"


def test_fencing_with_nothing_owned_rejoins_at_once():
    m = stable(assignment={"a": [0]})
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    m.revoked(m.to_revoke(), now=3000)  # eager: owns nothing while joining
    expect(m, 3000, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(ErrorCode.unknown_member_id), 3001)
    assert not m.fenced
    assert expect(m, 3001, JOIN_GROUP)["member_id"] == ""


def test_stale_heartbeat_error_is_ignored():
    # A heartbeat sent before the member rejoined says nothing about the new generation.
    m = stable([CooperativeStickyAssignor()], assignment={"a": [0]})
    expect(m, 3000, HEARTBEAT)
    m._hb_identity = (GEN - 1, "m1")  # as if sent in an earlier generation
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.unknown_member_id), 3000)
    assert m.state is State.STABLE and m.member_id == "m1"


# ---------------------------------------------------------------------------- fatal errors


def test_fenced_instance_id_on_heartbeat_is_fatal():
    m = stable(instance_id="i1")
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.fenced_instance_id), 3000)
    assert m.state is State.FATAL and m.error.code == ErrorCode.fenced_instance_id
    assert not m.active and m.next_request(10**9) is None


@pytest.mark.parametrize("code", [ErrorCode.fenced_instance_id, ErrorCode.group_authorization_failed,
                                  ErrorCode.invalid_session_timeout, ErrorCode.inconsistent_group_protocol,
                                  ErrorCode.group_max_size_reached, ErrorCode.unsupported_version])
def test_fatal_join_errors(code):
    m = member(instance_id="i1")
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(code), 0)
    assert m.state is State.FATAL and m.error.code == code
    assert isinstance(m.error, KafkaError)


def test_fenced_instance_id_on_sync_is_fatal():
    m = member(instance_id="i1")
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="i1-x", generation=GEN, leader="y"), 0)
    expect(m, 0, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(ErrorCode.fenced_instance_id), 0)
    assert m.state is State.FATAL


def test_unsupported_api_is_fatal():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_failure(JOIN_GROUP, UnsupportedApiError("JoinGroup", 11, "no common version"), 0)
    assert m.state is State.FATAL


def test_coordinator_choosing_a_foreign_protocol_is_fatal():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x", protocol="roundrobin"), 0)
    assert m.state is State.FATAL and m.error.code == ErrorCode.inconsistent_group_protocol


# ---------------------------------------------------------------------------- retries


@pytest.mark.parametrize("code", [ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                  ErrorCode.coordinator_load_in_progress])
def test_join_coordinator_errors_retry_with_backoff(code):
    m = member(retry_backoff_ms=100)
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(code), 1000)
    assert m.state is State.JOINING and m.error is None
    assert m.next_request(1099) is None and m.next_deadline() == 1100
    expect(m, 1100, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(code), 2000)
    assert m.next_deadline() == 2200  # exponential (KIP-580)


def test_heartbeat_coordinator_error_retries_after_backoff():
    m = stable(retry_backoff_ms=100, heartbeat_interval_ms=3000)
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.not_coordinator), 3000)
    assert m.state is State.STABLE and m.next_deadline() == 3100
    assert m.next_request(3099) is None
    expect(m, 3100, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(), 3100)
    assert m.next_deadline() == 6100


def test_disconnects_retry_with_backoff():
    m = member(retry_backoff_ms=100)
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x"), 0)
    expect(m, 0, SYNC_GROUP)
    # A lost SyncGroup restarts the rebalance from JoinGroup (AbstractCoordinator).
    m.on_failure(SYNC_GROUP, KafkaConnectionError("gone"), 10)
    assert m.next_request(109) is None
    assert expect(m, 110, JOIN_GROUP)["member_id"] == "m1"
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x"), 120)
    expect(m, 120, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}), 120)
    settle(m, 120)
    expect(m, 3120, HEARTBEAT)
    m.on_failure(HEARTBEAT, KafkaConnectionError("gone"), 3120)
    assert m.state is State.STABLE and m.next_deadline() == 3220


# ---------------------------------------------------------------------------- leaving


def test_dynamic_member_leave_sends_leave_group():
    m = stable()
    m.revoked(m.owned, now=0)
    m.leave(now=10)
    assert m.state is State.LEAVING and m.active
    body = expect(m, 10, LEAVE_GROUP)
    assert body["member_id"] == "m1" and body["members"][0]["member_id"] == "m1"
    m.on_response(LEAVE_GROUP, leave_resp(), 11)
    assert m.state is State.UNSUBSCRIBED and not m.active
    assert m.member_id == "" and m.commit_identity() == (-1, "", None)
    assert m.next_request(10**9) is None


def test_leave_waits_for_the_request_in_flight():
    m = member()
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(ErrorCode.member_id_required, member_id="m1"), 0)
    expect(m, 0, JOIN_GROUP)
    m.leave(now=1)
    assert m.next_request(1) is None
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="x"), 2)
    assert expect(m, 2, LEAVE_GROUP)["member_id"] == "m1"
    m.on_failure(LEAVE_GROUP, KafkaConnectionError("gone"), 3)  # not retried
    assert m.state is State.UNSUBSCRIBED


def test_static_member_leave_sends_nothing():
    m = stable(instance_id="i1")
    assert m.commit_identity() == (GEN, "m1", "i1")
    m.revoked(m.owned, now=0)
    m.leave(now=10)
    # KIP-345: the coordinator keeps its place until the session times out.
    assert m.state is State.UNSUBSCRIBED
    assert m.next_request(10**9) is None


def test_leave_before_any_member_id_sends_nothing():
    m = member()
    m.subscribe(["a"], now=0)
    m.leave(now=0)
    assert m.state is State.UNSUBSCRIBED and m.next_request(0) is None


def test_subscribe_again_after_leaving():
    m = stable()
    m.revoked(m.owned, now=0)
    m.leave(now=0)
    expect(m, 0, LEAVE_GROUP)
    m.subscribe(["a"], now=1)  # while the LeaveGroup is in flight
    m.on_response(LEAVE_GROUP, leave_resp(), 2)
    assert expect(m, 2, JOIN_GROUP)["member_id"] == ""


# ---------------------------------------------------------------------------- commit identity


def test_commit_identity_across_states():
    m = member(instance_id="i1")
    assert m.commit_identity() == (-1, "", None)
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    assert m.commit_identity() == (-1, "", None)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1",
                                        members=[("m1", "i1", sub(["a"]))]), 0)
    assert m.state is State.ASSIGNING
    assert m.commit_identity() == (-1, "", None)  # the coordinator refuses commits until SyncGroup
    m.set_metadata({"a": 1}, 0)
    expect(m, 0, SYNC_GROUP)
    assert m.commit_identity() == (-1, "", None)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0]}), 0)
    assert m.state is State.RECONCILING
    assert m.commit_identity() == (GEN, "m1", "i1")
    settle(m)
    assert m.commit_identity() == (GEN, "m1", "i1")


# ---------------------------------------------------------------------------- the table


def test_transition_table_is_enforced():
    # Every state but FATAL takes some event; FATAL takes none.
    assert {src for src, _event in TRANSITIONS} == set(State) - {State.FATAL}
    m = member()
    # UNSUBSCRIBED -> STABLE skips the rebalance: no event makes that move, and every
    # event UNSUBSCRIBED has no entry for raises.
    assert not any(TRANSITIONS.get((State.UNSUBSCRIBED, e)) is State.STABLE for e in Event)
    for event in Event:
        if (State.UNSUBSCRIBED, event) not in TRANSITIONS:
            with pytest.raises(AssertionError):
                m._fire(event)
            assert m.state is State.UNSUBSCRIBED
    assert not any(src is State.FATAL for src, _event in TRANSITIONS)


@pytest.mark.parametrize(("src", "event"), sorted(TRANSITIONS, key=lambda k: (k[0].value, k[1].value)))
def test_every_entry_goes_where_the_table_says(src, event):
    m = member()
    m.state = src
    m._fire(event)
    assert m.state is TRANSITIONS[(src, event)]


@pytest.mark.parametrize(("src", "event"), [(s, e) for s in State for e in Event if (s, e) not in TRANSITIONS])
def test_an_event_with_no_entry_raises_illegal_transition(src, event):
    m = member()
    m.state = src
    with pytest.raises(IllegalTransition, match="illegal classic member transition"):
        m._fire(event)
    assert m.state is src  # nothing changed


def test_every_event_fired_in_a_lifecycle_has_an_entry():
    fired = []
    m = member()
    original = m._fire

    def spy(event):
        src = m.state
        original(event)
        fired.append((src, event, m.state))

    m._fire = spy
    m.subscribe(["a"], now=0)
    expect(m, 0, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(member_id="m1", generation=GEN, leader="m1",
                                        members=[("m1", None, sub(["a"]))]), 0)
    m.set_metadata({"a": 2}, 0)
    expect(m, 0, SYNC_GROUP)
    m.on_response(SYNC_GROUP, sync_resp(assignment={"a": [0, 1]}), 0)
    settle(m)
    expect(m, 3000, HEARTBEAT)
    m.on_response(HEARTBEAT, hb_resp(ErrorCode.rebalance_in_progress), 3000)
    settle(m)  # eager: everything revoked, then JoinGroup
    expect(m, 3000, JOIN_GROUP)
    m.on_response(JOIN_GROUP, join_resp(ErrorCode.unknown_member_id), 3000)  # fenced, owning nothing
    m.leave(now=4000)
    assert all(TRANSITIONS[(src, event)] is dst for src, event, dst in fired)
    assert [(src, dst) for src, _event, dst in fired] == [
        (State.UNSUBSCRIBED, State.PREPARING), (State.PREPARING, State.JOINING), (State.JOINING, State.ASSIGNING),
        (State.ASSIGNING, State.SYNCING), (State.SYNCING, State.RECONCILING), (State.RECONCILING, State.STABLE),
        (State.STABLE, State.PREPARING), (State.PREPARING, State.JOINING), (State.JOINING, State.JOINING),
        (State.JOINING, State.LEAVING), (State.LEAVING, State.UNSUBSCRIBED)]
