"""The KIP-848 member (`odradek.client.membership.ConsumerGroupMember`), sans-I/O.

Responses are real kio ConsumerGroupHeartbeat v1 entities built with
`protocol.messages.build`; time is passed in milliseconds.
"""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.errors import KafkaConnectionError
from odradek.client.membership import (
    CONSUMER_GROUP_HEARTBEAT,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    TRANSITIONS,
    ConsumerGroupMember,
    Event,
    IllegalTransition,
    State,
)
from odradek.protocol.messages import build, request_class, response_class

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
HB = CONSUMER_GROUP_HEARTBEAT


def response(epoch: int = 1, assignment: dict[uuid.UUID, list[int]] | None = None, *, error=ErrorCode.none,
             member_id: str | None = None, interval: int = 5000, message: str | None = None):
    body = {"throttle_time": 0, "error_code": error, "error_message": message, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval": interval, "assignment": None}
    if assignment is not None:
        body["assignment"] = {"topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in assignment.items()]}
    return build(response_class(68, 1), body)


def error(code: ErrorCode):
    return response(epoch=0, error=code, interval=0)


def member(**kw) -> ConsumerGroupMember:
    kw.setdefault("retry_backoff_ms", 100)
    return ConsumerGroupMember("g", member_id="member-1", **kw)


def heartbeat(m: ConsumerGroupMember, now: float = 0) -> dict:
    req = m.next_request(now)
    assert req is not None, f"no heartbeat due at {now} in {m.state}"
    api, body = req
    assert api == HB
    build(request_class(68, 1), body)  # every body is a valid ConsumerGroupHeartbeat v1
    return body


def owned_field(body) -> dict | None:
    tps = body["topic_partitions"]
    return None if tps is None else {t["topic_id"]: t["partitions"] for t in tps}


def stable(m: ConsumerGroupMember, assignment=None, now: float = 0) -> ConsumerGroupMember:
    """Join, reconcile `assignment` and acknowledge it: the member ends STABLE at epoch 1."""
    assignment = {T1: [0, 1]} if assignment is None else assignment
    m.subscribe(["a"], now=now)
    heartbeat(m, now)
    m.on_response(HB, response(1, assignment), now)
    m.assigned(m.to_assign(), now=now)
    heartbeat(m, now)
    m.on_response(HB, response(1), now)
    assert m.state is State.STABLE
    return m


# ------------------------------------------------------------------ joining


def test_join_sends_a_full_heartbeat_with_epoch_zero():
    m = member(instance_id="inst", rack_id="rack-a", rebalance_timeout_ms=12345, server_assignor="uniform")
    assert m.state is State.UNSUBSCRIBED and m.next_request(0) is None
    m.subscribe(["b", "a", "b"], now=0)
    assert m.state is State.JOINING
    body = heartbeat(m)
    assert body == {"group_id": "g", "member_id": "member-1", "member_epoch": 0, "instance_id": "inst",
                    "rack_id": "rack-a", "rebalance_timeout": 12345, "subscribed_topic_names": ["a", "b"],
                    "subscribed_topic_regex": None, "server_assignor": "uniform", "topic_partitions": []}
    assert m.in_flight and m.next_request(0) is None  # one heartbeat at a time


def test_join_with_a_regex_sends_empty_names():
    m = member()
    m.subscribe(regex="^t.*", now=0)
    body = heartbeat(m)
    assert body["subscribed_topic_names"] == [] and body["subscribed_topic_regex"] == "^t.*"


def test_member_id_is_generated_when_not_given():
    a, b = ConsumerGroupMember("g"), ConsumerGroupMember("g")
    assert a.member_id != b.member_id
    uuid.UUID(a.member_id)


def test_response_without_assignment_stays_joining():
    m = member()
    m.subscribe(["a"])
    heartbeat(m)
    m.on_response(HB, response(1, None, interval=2500), 100)
    assert m.state is State.JOINING and m.epoch == 1
    assert m.heartbeat_interval_ms == 2500 and m.next_deadline() == 2600
    assert not m.heartbeat_due(2599) and m.heartbeat_due(2600)


def test_response_with_assignment_reconciles_then_acknowledges_at_once():
    m = member()
    m.subscribe(["a"])
    heartbeat(m)
    m.on_response(HB, response(3, {T1: [2, 0], T2: [1]}, member_id="from-coordinator"), 10)
    assert m.state is State.RECONCILING and m.epoch == 3 and m.member_id == "from-coordinator"
    assert m.to_revoke() == frozenset()
    assert m.to_assign() == {(T1, 0), (T1, 2), (T2, 1)}
    assert m.next_request(10) is None  # regular heartbeat not due before the interval
    m.assigned(m.to_assign(), now=20)
    assert m.state is State.ACKNOWLEDGING
    body = heartbeat(m, 20)  # the acknowledgement goes out immediately
    assert body["member_epoch"] == 3 and body["member_id"] == "from-coordinator"
    assert owned_field(body) == {T1: [0, 2], T2: [1]}
    m.on_response(HB, response(3), 30)
    assert m.state is State.STABLE


def test_revoke_before_assign():
    m = stable(member(), {T1: [0, 1]})
    m.on_response(HB, response(2, {T1: [1], T2: [0]}), 100)  # not via heartbeat(): the interval passed
    assert m.state is State.RECONCILING
    assert m.to_revoke() == {(T1, 0)}
    assert m.to_assign() == frozenset()  # nothing is assigned while a revocation is pending
    m.revoked({(T1, 0)}, now=110)
    assert m.state is State.RECONCILING
    assert m.to_revoke() == frozenset() and m.to_assign() == {(T2, 0)}
    m.assigned({(T2, 0)}, now=120)
    assert m.state is State.ACKNOWLEDGING
    assert owned_field(heartbeat(m, 120)) == {T1: [1], T2: [0]}


def test_revocation_alone_is_acknowledged_with_what_is_still_owned():
    m = stable(member(), {T1: [0, 1]})
    m.on_response(HB, response(2, {T1: [1]}), 100)
    m.revoked(m.to_revoke(), now=110)
    assert m.state is State.ACKNOWLEDGING
    body = heartbeat(m, 110)
    assert body["member_epoch"] == 2 and owned_field(body) == {T1: [1]}


def test_empty_assignment_revokes_everything():
    m = stable(member(), {T1: [0, 1]})
    m.on_response(HB, response(2, {}), 100)
    assert m.to_revoke() == {(T1, 0), (T1, 1)}
    m.revoked(m.to_revoke(), now=100)
    assert m.state is State.ACKNOWLEDGING
    assert owned_field(heartbeat(m, 100)) == {}


def test_reconciled_while_a_heartbeat_was_in_flight_acknowledges_after_its_response():
    m = member()
    m.subscribe(["a"])
    heartbeat(m, 0)
    m.on_response(HB, response(1, {T1: [0]}), 0)
    heartbeat(m, 5000)  # regular heartbeat, still claiming nothing owned
    m.assigned({(T1, 0)}, now=5001)
    assert m.state is State.ACKNOWLEDGING and m.next_request(5001) is None  # that heartbeat is in flight
    m.on_response(HB, response(1), 5010)  # answers the heartbeat that did not list T1-0
    assert m.state is State.ACKNOWLEDGING
    assert owned_field(heartbeat(m, 5010)) == {T1: [0]}  # at once, not after the interval
    m.on_response(HB, response(1), 5020)
    assert m.state is State.STABLE


# ------------------------------------------------------------------ partial heartbeats


def test_partial_heartbeats_omit_unchanged_fields():
    m = stable(member(instance_id="inst", rack_id="r", server_assignor="range"))
    body = heartbeat(m, 5000)
    assert body == {"group_id": "g", "member_id": "member-1", "member_epoch": 1, "instance_id": None,
                    "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
                    "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None}


def test_changed_subscription_is_sent_at_once_and_alone():
    m = stable(member())
    m.subscribe(["a", "c"], now=100)
    assert m.state is State.STABLE  # no rejoin
    body = heartbeat(m, 100)
    assert body["subscribed_topic_names"] == ["a", "c"] and body["member_epoch"] == 1
    assert body["topic_partitions"] is None and body["rebalance_timeout"] == -1
    m.on_response(HB, response(1), 110)
    assert heartbeat(m, 5110)["subscribed_topic_names"] is None


def test_switch_to_regex_sends_names_empty():
    m = stable(member())
    m.subscribe(regex="^x", now=100)
    body = heartbeat(m, 100)
    assert body["subscribed_topic_names"] == [] and body["subscribed_topic_regex"] == "^x"


# ------------------------------------------------------------------ fencing


@pytest.mark.parametrize("code", [ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id])
def test_fenced_loses_everything_and_rejoins_with_epoch_zero(code):
    m = stable(member(), {T1: [0, 1]})
    heartbeat(m, 5000)
    m.on_response(HB, error(code), 5010)
    assert m.state is State.FENCED and m.fenced
    assert m.epoch == 0 and m.target is None
    assert m.next_request(10**9) is None  # no heartbeat until the driver ran on_partitions_lost
    assert m.to_revoke() == frozenset() and m.to_assign() == frozenset()
    assert m.owned == {(T1, 0), (T1, 1)}  # until lost() the driver still sees what to report lost
    m.lost(now=5020)
    assert m.owned == frozenset() and m.state is State.JOINING
    body = heartbeat(m, 5020)
    assert body["member_epoch"] == 0 and body["member_id"] == "member-1"
    assert body["topic_partitions"] == [] and body["subscribed_topic_names"] == ["a"]
    assert body["rebalance_timeout"] == 300000  # a full request
    m.on_response(HB, response(5, {T1: [1]}), 5030)
    assert m.state is State.RECONCILING and m.to_assign() == {(T1, 1)}


def test_fenced_while_joining():
    m = member()
    m.subscribe(["a"])
    heartbeat(m)
    m.on_response(HB, error(ErrorCode.unknown_member_id), 0)
    assert m.state is State.FENCED
    m.lost(now=1)
    assert m.state is State.JOINING and heartbeat(m, 1)["member_epoch"] == 0


def test_subscribe_while_fenced_rejoins():
    m = stable(member())
    heartbeat(m, 5000)
    m.on_response(HB, error(ErrorCode.fenced_member_epoch), 5000)
    m.subscribe(["b"], now=5001)
    assert m.state is State.JOINING
    assert heartbeat(m, 5001)["subscribed_topic_names"] == ["b"]


# ------------------------------------------------------------------ fatal and retriable errors


@pytest.mark.parametrize("code", [ErrorCode.unreleased_instance_id, ErrorCode.group_authorization_failed,
                                  ErrorCode.fenced_instance_id, ErrorCode.unsupported_assignor,
                                  ErrorCode.group_max_size_reached, ErrorCode.invalid_request])
def test_fatal_errors_stop_the_member(code):
    m = member(instance_id="inst")
    m.subscribe(["a"])
    heartbeat(m)
    m.on_response(HB, response(0, error=code, message="no way"), 0)
    assert m.state is State.FATAL
    assert m.error is not None and m.error.code == code and "no way" in str(m.error)
    assert m.error.name == code.name.upper()
    assert not m.active and m.next_request(10**9) is None and m.next_deadline() is None
    m.subscribe(["b"], now=1)  # stays FATAL
    m.leave(now=1)
    assert m.state is State.FATAL


@pytest.mark.parametrize("code", [ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                  ErrorCode.coordinator_load_in_progress])
def test_coordinator_errors_retry_with_backoff_and_a_full_request(code):
    m = stable(member(instance_id="i", server_assignor="range"))
    heartbeat(m, 5000)
    waits = []
    now = 5000
    for _ in range(5):
        m.on_response(HB, error(code), now)
        assert m.state is State.STABLE and m.error is None and m.epoch == 1  # epoch kept: not fenced
        due = m.next_deadline()
        waits.append(due - now)
        assert m.next_request(due - 1) is None
        now = due
        body = heartbeat(m, now)
        # The coordinator may be a new one: everything is sent again.
        assert body["member_epoch"] == 1 and body["rebalance_timeout"] == 300000
        assert body["subscribed_topic_names"] == ["a"] and owned_field(body) == {T1: [0, 1]}
        assert body["instance_id"] == "i" and body["server_assignor"] == "range"
    assert waits == sorted(waits) and waits[0] >= 100 and waits[-1] == 1000  # exponential, capped
    m.on_response(HB, response(1), now)
    assert heartbeat(m, now + 5000)["rebalance_timeout"] == -1  # partial again after a success


def test_transport_failure_retries_with_a_full_request():
    m = stable(member())
    heartbeat(m, 5000)
    m.on_failure(HB, KafkaConnectionError("gone"), 5000)
    assert m.state is State.STABLE and not m.in_flight
    due = m.next_deadline()
    assert 5000 < due <= 5000 + m.heartbeat_interval_ms
    body = heartbeat(m, due)
    assert body["rebalance_timeout"] == 300000 and owned_field(body) == {T1: [0, 1]}


def test_unexpected_error_is_retried_after_the_backoff():
    m = stable(member())
    heartbeat(m, 5000)
    m.on_response(HB, error(ErrorCode.unknown_server_error), 5000)
    assert m.state is State.STABLE and m.next_deadline() == 5100
    assert heartbeat(m, 5100)["rebalance_timeout"] == 300000


# ------------------------------------------------------------------ leaving


def _leave_body(m, now):
    body = heartbeat(m, now)
    assert body["topic_partitions"] is None and body["subscribed_topic_names"] is None
    return body


def test_leave_sends_epoch_minus_one():
    m = stable(member())
    m.revoked(m.owned, now=100)  # the driver revokes first
    m.leave(now=100)
    assert m.state is State.LEAVING
    body = _leave_body(m, 100)
    assert body["member_epoch"] == LEAVE_EPOCH == -1 and body["member_id"] == "member-1"
    m.on_response(HB, response(-1, interval=0), 110)
    assert m.state is State.UNSUBSCRIBED and m.epoch == 0 and not m.active
    assert m.next_request(10**9) is None


def test_static_member_leaves_with_epoch_minus_two():
    m = stable(member(instance_id="inst"))
    m.revoked(m.owned, now=100)
    m.leave(now=100)
    body = _leave_body(m, 100)
    assert body["member_epoch"] == STATIC_LEAVE_EPOCH == -2 and body["instance_id"] == "inst"
    m.on_response(HB, response(-2, interval=0), 110)
    assert m.state is State.UNSUBSCRIBED


def test_failure_during_leave_unsubscribes():
    m = stable(member())
    m.leave(now=100)
    heartbeat(m, 100)
    m.on_failure(HB, KafkaConnectionError("gone"), 110)
    assert m.state is State.UNSUBSCRIBED and m.next_request(10**9) is None


def test_error_response_during_leave_unsubscribes():
    m = stable(member())
    m.leave(now=100)
    heartbeat(m, 100)
    m.on_response(HB, error(ErrorCode.unknown_member_id), 110)
    assert m.state is State.UNSUBSCRIBED


def test_leave_before_joining_sends_nothing():
    m = member()
    m.subscribe(["a"])
    m.leave(now=0)
    assert m.state is State.UNSUBSCRIBED and m.next_request(0) is None


def test_leave_when_unsubscribed_is_a_no_op():
    m = member()
    m.leave(now=0)
    assert m.state is State.UNSUBSCRIBED


def test_rejoin_after_leaving():
    m = stable(member())
    m.leave(now=100)
    heartbeat(m, 100)
    m.on_response(HB, response(-1, interval=0), 110)
    m.subscribe(["a"], now=120)
    assert m.state is State.JOINING
    assert heartbeat(m, 120)["member_epoch"] == 0


def test_leave_while_a_heartbeat_is_in_flight_still_sends_the_leave():
    m = stable(member())
    heartbeat(m, 5000)  # a regular heartbeat is in flight when the application closes
    m.revoked(m.owned, now=5001)
    m.leave(now=5001)
    m.on_response(HB, response(1), 5010)  # the regular heartbeat's answer
    # Kafka (ConsumerMembershipManager) ignores that answer while leaving and still sends
    # the leave heartbeat; otherwise the coordinator keeps the member until session timeout.
    body = heartbeat(m, 5010)
    assert body["member_epoch"] == LEAVE_EPOCH


def test_leave_while_the_join_is_in_flight_still_sends_the_leave():
    m = member()
    m.subscribe(["a"])
    heartbeat(m, 0)  # the coordinator will add the member on receiving this
    m.leave(now=1)
    assert m.state is State.LEAVING
    m.on_response(HB, response(1, {T1: [0]}), 10)  # joined, with an assignment
    body = heartbeat(m, 10)
    assert body["member_epoch"] == LEAVE_EPOCH


# ------------------------------------------------------------------ the transition table


def moves(state: State) -> set[State]:
    """Where some event takes `state` (staying put is not a move)."""
    return {new for (src, _event), new in TRANSITIONS.items() if src is state and new is not state}


def test_transition_table_is_closed_and_fatal_is_terminal():
    # Every state but FATAL takes some event; FATAL takes none.
    assert {src for src, _event in TRANSITIONS} == set(State) - {State.FATAL}
    assert all(isinstance(new, State) and isinstance(event, Event) for (_src, event), new in TRANSITIONS.items())
    assert moves(State.FATAL) == set() and not any(src is State.FATAL for src, _event in TRANSITIONS)
    assert moves(State.LEAVING) == {State.UNSUBSCRIBED, State.FATAL}
    # Every state can be reached from UNSUBSCRIBED.
    seen, todo = {State.UNSUBSCRIBED}, [State.UNSUBSCRIBED]
    while todo:
        for nxt in moves(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(State)


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
    with pytest.raises(IllegalTransition, match="illegal member transition"):
        m._fire(event)
    assert m.state is src  # nothing changed


@pytest.mark.parametrize("src,dst", [
    (State.UNSUBSCRIBED, State.STABLE),
    (State.UNSUBSCRIBED, State.RECONCILING),
    (State.FATAL, State.JOINING),
    (State.LEAVING, State.JOINING),
    (State.FENCED, State.STABLE),
])
def test_illegal_transition_raises_assertion_error(src, dst):
    assert not any(TRANSITIONS.get((src, e)) is dst for e in Event)  # no event makes the move
    for event in Event:
        if (src, event) in TRANSITIONS:
            continue
        m = member()
        m.state = src
        with pytest.raises(AssertionError, match="illegal member transition"):
            m._fire(event)


def test_assignment_reaching_an_unsubscribed_member_is_an_illegal_transition():
    # A response the driver should never deliver: the table catches it instead of
    # silently resurrecting the member.
    m = member()
    with pytest.raises(AssertionError, match="UNSUBSCRIBED"):
        m.on_response(HB, response(1, {T1: [0]}), 0)


def test_every_transition_taken_in_a_lifecycle_is_in_the_table():
    taken = []
    m = member()
    original = m._fire

    def spy(event):
        src = m.state
        original(event)
        assert TRANSITIONS[(src, event)] is m.state
        taken.append((src, m.state))

    m._fire = spy
    stable(m)
    m.on_response(HB, response(2, {T1: [1], T2: [0]}), 10)
    m.revoked(m.to_revoke(), now=10)
    m.assigned(m.to_assign(), now=10)
    heartbeat(m, 10)
    m.on_response(HB, error(ErrorCode.fenced_member_epoch), 20)
    m.lost(now=20)
    heartbeat(m, 20)
    m.on_response(HB, response(3, {}), 30)
    m.leave(now=30)
    heartbeat(m, 30)
    m.on_failure(HB, KafkaConnectionError("x"), 40)
    for src, dst in taken:
        if src is not dst:
            assert dst in moves(src), (src, dst)
    assert (State.FENCED, State.JOINING) in taken and (State.LEAVING, State.UNSUBSCRIBED) in taken


def test_commit_identity_follows_the_epoch():
    m = member(instance_id="i")
    assert m.commit_identity() == (0, "member-1", "i")
    stable(m)
    assert m.commit_identity() == (1, "member-1", "i")
