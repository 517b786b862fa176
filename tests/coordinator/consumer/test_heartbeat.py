"""ConsumerGroupHeartbeat handling: validation, fencing, joining/leaving, static members,
subscriptions and topic changes, timeouts, full vs partial responses (KIP-848)."""

from __future__ import annotations

import uuid

import pytest

from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer.regex import REGEX_BATCH_REFRESH_MIN_INTERVAL_MS
from odradek.protocol.errors import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
)
from tests.coordinator.harness import BAR, FOO, Coord, member_view, parts


def converge(c: Coord, gid: str = "g"):
    g = c.converge(gid)
    assert g.state.value == "Stable"
    return g


# --- request validation (KIP-848 "Request Validation") ---------------------------------------

@pytest.mark.parametrize("kwargs,needle", [
    ({"group": ""}, "GroupId"),
    ({"member": ""}, "MemberId"),
    ({"member": "x" * 37}, "MemberId"),
    ({"epoch": -3}, "MemberEpoch"),
    ({"epoch": -2}, "MemberEpoch"),            # -2 is for static members only
    ({"instance_id": ""}, "InstanceId"),
    ({"rack_id": ""}, "RackId"),
    ({"rebalance_timeout": 0}, "RebalanceTimeoutMs"),
    ({"owned": {FOO: [0]}}, "TopicPartitions"),  # joining with partitions
])
def test_invalid_requests(kwargs, needle):
    c = Coord()
    r = c.hb(**kwargs)
    assert r["error_code"] == INVALID_REQUEST and needle in r["error_message"]
    assert c.group() is None and c.written == []


def test_first_heartbeat_needs_a_subscription():
    c = Coord()
    from odradek.coordinator.consumer.heartbeat import HeartbeatRequest
    from odradek.coordinator.dispatch import consumer_group_heartbeat as heartbeat

    req = HeartbeatRequest("g", "A", 0, rebalance_timeout_ms=1000, owned={})
    r = c.runtime.run("g", lambda s, now: heartbeat(s, req, now), c.now)
    assert r["error_code"] == INVALID_REQUEST and "Subscribed" in r["error_message"]


def test_bad_regex_and_unknown_assignor():
    c = Coord()
    r = c.hb(regex="(unclosed")
    assert r["error_code"] == INVALID_REGULAR_EXPRESSION
    r = c.hb(regex="(?<=lookbehind)x")  # valid in Java/Python, not in RE2
    assert r["error_code"] == INVALID_REGULAR_EXPRESSION
    r = c.hb(assignor="sticky")
    assert r["error_code"] == UNSUPPORTED_ASSIGNOR and "uniform" in r["error_message"]
    assert c.group() is None


def test_v0_member_id_is_generated_and_v1_uses_the_clients():
    c = Coord()
    r = c.hb(member="", version=0)
    assert r["error_code"] == NONE and r["member_id"] == "member-0"
    r = c.hb(member="my-uuid", version=1)
    assert r["member_id"] == "my-uuid"


# --- fencing -----------------------------------------------------------------------------------

def test_unknown_member_and_unknown_group():
    c = Coord()
    assert c.hb(member="A", epoch=3)["error_code"] == GROUP_ID_NOT_FOUND
    c.hb(member="A")
    assert c.hb(member="B", epoch=1)["error_code"] == UNKNOWN_MEMBER_ID


def test_higher_epoch_is_fenced():
    c = Coord()
    c.hb(member="A")
    r = c.hb(member="A", epoch=2)
    assert r["error_code"] == FENCED_MEMBER_EPOCH


def test_lost_response_previous_epoch_accepted_with_subset():
    c = Coord(topics=[("foo", FOO, 4)])
    c.hb(member="A")
    c.hb(member="B")
    g = c.group()
    c.hb(member="A", epoch=1)                           # revoke
    t = sorted(g.target["A"][FOO])
    r = c.hb(member="A", epoch=1, owned={FOO: t})        # ack -> epoch 2; suppose this answer is lost
    assert r["member_epoch"] == 2
    # The client retries with epoch 1 and a subset of its assignment: accepted, told epoch 2.
    r = c.hb(member="A", epoch=1, owned={FOO: t})
    assert r["error_code"] == NONE and r["member_epoch"] == 2
    # Epoch 1 with a partition it no longer has: fenced.
    revoked = sorted(set(range(4)) - set(t))
    r = c.hb(member="A", epoch=1, owned={FOO: t + revoked[:1]})
    assert r["error_code"] == FENCED_MEMBER_EPOCH
    # Epoch 1 without saying what it owns (a partial heartbeat): fenced.
    assert c.hb(member="A", epoch=1)["error_code"] == FENCED_MEMBER_EPOCH


def test_fenced_member_rejoins_with_epoch_zero_and_gets_its_assignment():
    c = Coord()
    c.hb(member="A")
    assert c.hb(member="A", epoch=7)["error_code"] == FENCED_MEMBER_EPOCH
    r = c.hb(member="A", epoch=0)
    assert r["error_code"] == NONE and r["member_epoch"] == 1 and parts(r) == [0, 1, 2]


def test_a_member_in_an_unknown_state_is_fenced_until_it_rejoins_owning_nothing():
    # Kafka's CurrentAssignmentBuilder, case UNKNOWN: a state written by a newer coordinator
    # has no reconciliation rule here, so the member is fenced and reconciled from scratch.
    from odradek.coordinator import records as R
    from odradek.coordinator.consumer.model import MemberState

    c = Coord()
    c.hb(member="A")
    c.hb(member="B")
    converge(c)
    b = c.group().members["B"]
    c.log[0].append(R.encode(R.current_assignment("g", b.with_(state=MemberState.UNKNOWN))))
    c.restart()
    assert c.group().members["B"].state is MemberState.UNKNOWN
    owned = {t: sorted(ps) for t, ps in b.assigned.items()}
    r = c.hb(member="B", epoch=b.member_epoch, owned=owned)
    assert r["error_code"] == FENCED_MEMBER_EPOCH and "unknown state" in r["error_message"]
    assert c.hb(member="B", epoch=b.member_epoch)["error_code"] == FENCED_MEMBER_EPOCH  # owned not reported
    r = c.hb(member="B", epoch=0)  # rejoins having dropped everything
    assert r["error_code"] == NONE and r["member_epoch"] == c.group().target_epoch
    assert c.group().members["B"].state is MemberState.STABLE and parts(r) == sorted(b.assigned[FOO])


# --- full vs partial heartbeats ------------------------------------------------------------

def test_partial_heartbeat_gets_no_assignment_unless_it_changed():
    c = Coord()
    r = c.hb(member="A")
    assert parts(r) == [0, 1, 2]
    r = c.hb(member="A", epoch=1)
    assert r["assignment"] is None and r["member_epoch"] == 1 and c.written == []
    # A full heartbeat (rebalance timeout, subscription and owned partitions set) gets it again.
    r = c.hb(member="A", epoch=1, rebalance_timeout=1000, topics=["foo"], owned={FOO: [0, 1, 2]})
    assert parts(r) == [0, 1, 2]


def test_steady_heartbeat_writes_nothing_and_keeps_the_session():
    c = Coord()
    c.hb(member="A")
    for _ in range(20):
        c.advance(40_000)
        assert c.hb(member="A", epoch=1)["error_code"] == NONE
        assert c.written == []
    assert "A" in c.group().members


# --- joining and leaving -------------------------------------------------------------------

def test_dynamic_leave_bumps_epoch_and_reassigns():
    c = Coord(topics=[("foo", FOO, 4)])
    c.hb(member="A")
    c.hb(member="B")
    g = converge(c)
    e = g.group_epoch
    r = c.hb(member="A", epoch=-1)
    assert r["error_code"] == NONE and r["member_epoch"] == -1
    assert "A" not in g.members and g.group_epoch == e + 1 and g.target_epoch == e + 1
    assert sorted(g.target["B"][FOO]) == [0, 1, 2, 3]
    r = c.hb(member="B", epoch=e)
    assert parts(r) == [0, 1, 2, 3]
    # Leaving again: unknown member.
    assert c.hb(member="A", epoch=-1)["error_code"] == UNKNOWN_MEMBER_ID


def test_last_member_leaves_group_is_empty():
    c = Coord()
    c.hb(member="A")
    c.hb(member="A", epoch=-1)
    g = c.group()
    assert g.state.value == "Empty" and not g.members and not g.owners


def test_group_max_size():
    c = Coord(config=CoordinatorConfig(offsets_topic_partitions=1, max_size=2))
    c.hb(member="A")
    c.hb(member="B")
    r = c.hb(member="C")
    assert r["error_code"] == GROUP_MAX_SIZE_REACHED
    assert "C" not in c.group().members
    # Existing members still heartbeat; a member leaving frees a slot.
    c.hb(member="B", epoch=-1)
    assert c.hb(member="C")["error_code"] == NONE


# --- static membership (KIP-848 "Static Membership", KIP-345) --------------------------------

def test_static_leave_keeps_assignment_and_rejoin_takes_it_over_without_rebalance():
    c = Coord(topics=[("foo", FOO, 4)])
    c.hb(member="A1", instance_id="a")
    c.hb(member="B", )
    g = converge(c)
    e = g.group_epoch
    a_parts = sorted(g.members["A1"].assigned[FOO])
    b_before = member_view(g, "B")
    r = c.hb(member="A1", epoch=-2, instance_id="a")
    assert r["error_code"] == NONE and r["member_epoch"] == -2
    m = g.members["A1"]
    assert m.member_epoch == -2 and sorted(m.assigned[FOO]) == a_parts
    assert set(m.assigned[FOO].values()) == {0}  # KIP-1251: epochs reset on static leave
    assert g.group_epoch == e  # no rebalance
    # Same instance, new member id, within the session timeout: same partitions, no epoch bump.
    c.advance(10_000)
    r = c.hb(member="A2", instance_id="a")
    assert r["error_code"] == NONE and parts(r) == a_parts and r["member_epoch"] == e
    assert "A1" not in g.members and g.group_epoch == e
    assert member_view(g, "B") == b_before
    assert g.state.value == "Stable"


def test_unreleased_instance_id_and_fenced_instance_id():
    c = Coord()
    c.hb(member="A1", instance_id="a")
    r = c.hb(member="A2", instance_id="a")
    assert r["error_code"] == UNRELEASED_INSTANCE_ID
    assert "A2" not in c.group().members
    c.hb(member="A1", epoch=-2, instance_id="a")
    assert c.hb(member="A2", instance_id="a")["error_code"] == NONE
    # The old incarnation comes back with its member id: fenced by the new one.
    r = c.hb(member="A1", epoch=1, instance_id="a")
    assert r["error_code"] == FENCED_INSTANCE_ID
    assert c.hb(member="A1", epoch=-2, instance_id="a")["error_code"] == FENCED_INSTANCE_ID
    assert c.hb(member="X", epoch=1, instance_id="nobody")["error_code"] == UNKNOWN_MEMBER_ID


def test_static_member_not_back_in_time_is_removed():
    c = Coord(topics=[("foo", FOO, 2)])
    c.hb(member="A1", instance_id="a")
    c.hb(member="B")
    g = converge(c)
    e = g.group_epoch
    c.hb(member="A1", epoch=-2, instance_id="a")
    for _ in range(9):
        c.advance(5_001)
        m = g.members["B"]
        c.hb(member="B", epoch=m.member_epoch, owned={FOO: sorted(m.assigned.get(FOO, {}))})
    assert "A1" not in g.members and g.group_epoch == e + 1
    assert sorted(g.target["B"][FOO]) == [0, 1]


# --- timeouts ----------------------------------------------------------------------------------

def test_rebalance_timeout_removes_member_that_does_not_revoke():
    c = Coord(topics=[("foo", FOO, 2)])
    c.hb(member="A", rebalance_timeout=10_000)
    c.hb(member="B")
    c.hb(member="A", epoch=1)  # told to revoke; it never acknowledges
    g = c.group()
    assert g.members["A"].state.name == "UNREVOKED_PARTITIONS"
    c.advance(9_000)
    c.hb(member="A", epoch=1, owned={FOO: [0, 1]})  # still holding: the timeout keeps running
    c.hb(member="B", epoch=g.members["B"].member_epoch)
    assert "A" in g.members
    c.advance(1_001)
    assert "A" not in g.members
    m = g.members["B"]
    r = c.hb(member="B", epoch=m.member_epoch)
    assert parts(r) == [0, 1]


def test_session_timeout_uses_group_override():
    c = Coord()
    c.runtime.group_overrides = None  # not used: shards hold the callable
    shard = c.runtime.shard_for("g")
    shard.group_overrides = lambda gid: {"consumer.session.timeout.ms": 50_000, "consumer.heartbeat.interval.ms": 6_000}
    r = c.hb(member="A")
    assert r["heartbeat_interval"] == 6_000
    c.advance(49_000)
    assert "A" in c.group().members
    c.advance(1_001)
    assert "A" not in c.group().members


# --- subscriptions and metadata changes (KIP-848 "Group Epoch") -----------------------------

def test_subscription_change_bumps_epoch():
    c = Coord(topics=[("foo", FOO, 2), ("bar", BAR, 2)])
    c.hb(member="A")
    g = c.group()
    e = g.group_epoch
    r = c.hb(member="A", epoch=e, topics=["foo", "bar"])
    assert g.group_epoch == e + 1 and r["member_epoch"] == e + 1
    assert sorted(g.subscribed_topics) == ["bar", "foo"]
    assert parts(r, BAR) == [0, 1]
    # Same subscription again: no bump.
    c.hb(member="A", epoch=e + 1, topics=["bar", "foo"])
    assert g.group_epoch == e + 1


def test_regex_subscription_follows_topic_creation_and_deletion():
    # Kafka 4.0 resolves regexes off the request path (consumer/regex.py): a created topic
    # reaches a regex at the group's next refresh, which the next heartbeat schedules no
    # sooner than 10 s after the previous one; a deleted topic leaves at once.
    c = Coord(topics=[("foo", FOO, 1)])
    r = c.hb(member="A", regex="ba.*")
    g = c.group()
    assert r["error_code"] == NONE and r["assignment"] == {"topic_partitions": []}
    c.advance(0)  # the first resolution: nothing matches, nothing to bump
    e = g.group_epoch
    c.set_topics([("foo", FOO, 1), ("bar", BAR, 2), ("xbar", uuid.UUID(int=7), 1)])
    assert g.group_epoch == e
    c.hb(member="A", epoch=e)
    c.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    assert g.group_epoch == e + 1 and list(g.subscribed_topics) == ["bar"]  # full match: not xbar
    r = c.hb(member="A", epoch=e)
    assert parts(r, BAR) == [0, 1]
    c.set_topics([("foo", FOO, 1)])  # bar deleted
    assert g.group_epoch == e + 2 and g.subscribed_topics == {}
    m = g.members["A"]
    r = c.hb(member="A", epoch=m.member_epoch, owned={BAR: [0, 1]})
    assert parts(r, BAR) == []  # revoke
    r = c.hb(member="A", epoch=m.member_epoch, owned={})
    assert r["member_epoch"] == e + 2


def test_partition_growth_and_recreated_topic_bump_epoch():
    c = Coord(topics=[("foo", FOO, 2)])
    c.hb(member="A")
    g = c.group()
    e = g.group_epoch
    c.set_topics([("foo", FOO, 2)])
    assert g.group_epoch == e  # nothing changed
    c.set_topics([("foo", FOO, 3)])
    assert g.group_epoch == e + 1 and sorted(g.target["A"][FOO]) == [0, 1, 2]
    new_id = uuid.UUID(int=0xF01)
    c.set_topics([("foo", new_id, 3)])  # deleted and recreated under the same name
    assert g.group_epoch == e + 2 and sorted(g.target["A"][new_id]) == [0, 1, 2] and FOO not in g.target["A"]
    m = g.members["A"]
    r = c.hb(member="A", epoch=m.member_epoch, owned={FOO: sorted(m.assigned.get(FOO, {}))})
    assert parts(r, FOO) == []  # the old incarnation is revoked first
    r = c.hb(member="A", epoch=m.member_epoch, owned={})
    assert parts(r, new_id) == [0, 1, 2]


def test_static_member_leaving_mid_revocation_keeps_its_session_across_a_restart():
    """A static member that leaves (-2) while asked to revoke is waited for a session
    timeout, not a rebalance timeout, before and after a coordinator restart."""
    for restart in (False, True):
        c = Coord(topics=[("foo", FOO, 2)])
        c.hb(member="A1", instance_id="a", rebalance_timeout=5_000)
        c.hb(member="B")
        c.hb(member="A1", epoch=1, instance_id="a")  # told to revoke
        assert c.group().members["A1"].state.name == "UNREVOKED_PARTITIONS"
        c.hb(member="A1", epoch=-2, instance_id="a")
        if restart:
            c.restart()
        for _ in range(8):  # 40 s: past the rebalance timeout, within the 45 s session
            c.advance(5_000)
            m = c.group().members["B"]
            c.hb(member="B", epoch=m.member_epoch)
        assert "A1" in c.group().members, restart
        c.advance(6_000)
        assert "A1" not in c.group().members, restart
