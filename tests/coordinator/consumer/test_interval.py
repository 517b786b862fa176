"""odradek's adaptive heartbeat interval (coordinator/consumer/interval.py), step by step
through KIP-848's case studies: which member is answered which interval after each
heartbeat. REGULAR is Kafka's default group.consumer.heartbeat.interval.ms; SHORT is
group.consumer.reconciling.heartbeat.interval.ms."""

from __future__ import annotations

import dataclasses

import pytest

from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer.interval import interval_ms
from odradek.coordinator.consumer.model import ConsumerMember, MemberState
from tests.coordinator.harness import FOO, Coord, member_view

REGULAR, SHORT = 5_000, 250


def owned(c: Coord, member: str) -> dict:
    m = c.group().members[member]
    return {FOO: sorted(m.assigned.get(FOO, {}))}


def test_basic_case_study_intervals():
    c = Coord(topics=[("foo", FOO, 3)])
    g = c.group
    # A joins alone: everything at once, nothing to wait for.
    assert c.hb(member="A")["heartbeat_interval"] == REGULAR
    # B joins: its foo-2 is still A's (UNRELEASED_PARTITIONS): short, so it picks it up
    # soon after A lets go.
    r = c.hb(member="B")
    assert member_view(g(), "B")[3] == "UNRELEASED_PARTITIONS" and r["heartbeat_interval"] == SHORT
    # A learns it must revoke foo-2 (UNREVOKED_PARTITIONS, epoch behind the target): short.
    r = c.hb(member="A", epoch=1)
    assert member_view(g(), "A")[3] == "UNREVOKED_PARTITIONS" and r["heartbeat_interval"] == SHORT
    # B again, still waiting: short.
    assert c.hb(member="B", epoch=2)["heartbeat_interval"] == SHORT
    # A acknowledges: stable at the target epoch, back to the regular interval.
    r = c.hb(member="A", epoch=1, owned={FOO: [0, 1]})
    assert r["member_epoch"] == 2 and r["heartbeat_interval"] == REGULAR
    # B's next (short) heartbeat gets foo-2, and it is stable: regular again.
    r = c.hb(member="B", epoch=2)
    assert r["assignment"] is not None and r["heartbeat_interval"] == REGULAR
    # A steady heartbeat of a stable member (the partial-heartbeat fast path): regular.
    assert c.hb(member="A", epoch=2)["heartbeat_interval"] == REGULAR
    assert c.hb(member="B", epoch=2)["heartbeat_interval"] == REGULAR


def test_incremental_case_study_the_waiting_member_stays_short_until_it_has_everything():
    c = Coord(topics=[("foo", FOO, 6)])
    c.hb(member="A")
    c.hb(member="B")
    c.hb(member="A", epoch=1)
    c.hb(member="A", epoch=1, owned=owned(c, "A"))
    e0 = c.group().group_epoch
    c.hb(member="B", epoch=e0)
    assert c.group().state.value == "Stable"
    # C joins and waits on one partition from A and one from B.
    assert c.hb(member="C")["heartbeat_interval"] == SHORT
    e1 = e0 + 1
    # A and B are told to revoke: short.
    assert c.hb(member="A", epoch=e0)["heartbeat_interval"] == SHORT
    assert c.hb(member="B", epoch=e0)["heartbeat_interval"] == SHORT
    # A acknowledges (regular); C gets A's partition but still waits for B's: short.
    assert c.hb(member="A", epoch=e0, owned=owned(c, "A"))["heartbeat_interval"] == REGULAR
    r = c.hb(member="C", epoch=e1)
    assert member_view(c.group(), "C")[3] == "UNRELEASED_PARTITIONS" and r["heartbeat_interval"] == SHORT
    # B acknowledges; C gets the rest and is stable: everyone regular.
    assert c.hb(member="B", epoch=e0, owned=owned(c, "B"))["heartbeat_interval"] == REGULAR
    r = c.hb(member="C", epoch=e1)
    assert member_view(c.group(), "C")[3] == "STABLE" and r["heartbeat_interval"] == REGULAR


def test_partition_added_case_study_needs_no_short_interval():
    """New partitions are free: each member takes its share at its next regular heartbeat
    and is stable at once. (The extension cannot make a stable member hear of the new
    target sooner: no push in KIP-848.)"""
    c = Coord(topics=[("foo", FOO, 1)])
    c.hb(member="A")
    c.hb(member="B")
    for m in "AB":
        c.hb(member=m, epoch=c.group().members[m].member_epoch, owned=owned(c, m))
    e = c.group().group_epoch
    c.set_topics([("foo", FOO, 2)])
    for m in "AB":
        r = c.hb(member=m, epoch=e)
        assert r["member_epoch"] == e + 1 and r["heartbeat_interval"] == REGULAR


def test_member_failure_case_study_survivors_stay_regular():
    c = Coord(topics=[("foo", FOO, 6)])
    for m in "ABC":
        c.hb(member=m)
    for _ in range(3):
        for m in "ABC":
            c.hb(member=m, epoch=c.group().members[m].member_epoch, owned=owned(c, m))
    g = c.group()
    assert g.state.value == "Stable"
    e = g.group_epoch
    for _ in range(9):  # A stops; B and C keep their sessions; A expires after 45 s
        c.advance(5_001)
        for m in "BC":
            c.hb(member=m, epoch=g.members[m].member_epoch, owned=owned(c, m))
    assert "A" not in g.members and g.target_epoch == e + 1
    # B and C had nothing to revoke and nobody to wait for: A's partitions were free.
    for m in "BC":
        r = c.hb(member=m, epoch=g.members[m].member_epoch, owned=owned(c, m))
        assert r["member_epoch"] == e + 1 and r["heartbeat_interval"] == REGULAR


def test_zero_turns_the_extension_off():
    c = Coord(topics=[("foo", FOO, 3)], config=CoordinatorConfig(offsets_topic_partitions=1,
                                                                  reconciling_heartbeat_interval_ms=0))
    c.hb(member="A")
    assert c.hb(member="B")["heartbeat_interval"] == REGULAR  # waiting, but Kafka's behaviour
    assert c.hb(member="A", epoch=1)["heartbeat_interval"] == REGULAR  # revoking, likewise


def test_group_override_of_the_regular_interval_caps_the_short_one():
    c = Coord(topics=[("foo", FOO, 3)])
    c.runtime.shard_for("g").group_overrides = lambda gid: {"consumer.heartbeat.interval.ms": 200}
    c.hb(member="A")
    assert c.hb(member="B")["heartbeat_interval"] == 200  # never longer than the group's own interval


@pytest.mark.parametrize("state, epoch, target, expected", [
    (MemberState.STABLE, 3, 3, REGULAR),
    (MemberState.STABLE, 2, 3, SHORT),  # behind the target epoch
    (MemberState.UNREVOKED_PARTITIONS, 2, 3, SHORT),
    (MemberState.UNRELEASED_PARTITIONS, 3, 3, SHORT),
    (MemberState.UNKNOWN, 3, 3, SHORT),  # fenced on its next heartbeat: it should come soon
])
def test_interval_by_member_state(state, epoch, target, expected):
    member = dataclasses.replace(ConsumerMember("m"), state=state, member_epoch=epoch)
    assert interval_ms(CoordinatorConfig(), REGULAR, member, target) == expected


def test_the_short_interval_is_never_below_the_min():
    member = dataclasses.replace(ConsumerMember("m"), state=MemberState.UNRELEASED_PARTITIONS, member_epoch=1)
    kafka_min = CoordinatorConfig(min_heartbeat_interval_ms=5_000)
    assert interval_ms(kafka_min, REGULAR, member, 1) == 5_000  # Kafka's min: the extension is inert
    floor = CoordinatorConfig(min_heartbeat_interval_ms=1_000, reconciling_heartbeat_interval_ms=100)
    assert interval_ms(floor, REGULAR, member, 1) == 1_000


def test_mixed_group_a_member_waiting_on_classic_owners_heartbeats_short():
    """During migration a consumer-protocol member waiting for partitions that classic
    members hold gets the short interval; the classic members' own interval is their
    client's (the classic Heartbeat response carries none), so what the coordinator can do
    for them is answer REBALANCE_IN_PROGRESS at their first heartbeat, which it does."""
    from odradek.coordinator.consumer.model import MemberState
    from tests.coordinator.test_migration import REBALANCE_IN_PROGRESS, _classic_pair, _coord, _rejoin_and_sync

    c = _coord()
    a, b, gen = _classic_pair(c)
    r = c.hb(member="C", epoch=0, topics=("foo",))
    assert c.group().members["C"].state is MemberState.UNRELEASED_PARTITIONS and r["heartbeat_interval"] == SHORT
    owned = {a: [0, 1], b: [2, 3]}
    for mid in (a, b):
        assert c.cheartbeat(member=mid, generation=gen) == REBALANCE_IN_PROGRESS  # at once
        epoch, kept = _rejoin_and_sync(c, mid, owned[mid])
        if c.group().members[mid].state is MemberState.UNREVOKED_PARTITIONS:
            assert c.member_hb("g", "C")["heartbeat_interval"] == SHORT  # still waiting
            assert c.cheartbeat(member=mid, generation=epoch) == REBALANCE_IN_PROGRESS
            _rejoin_and_sync(c, mid, kept)
    r = c.member_hb("g", "C")
    assert c.group().members["C"].state is MemberState.STABLE and r["assignment"]["topic_partitions"]
    assert r["heartbeat_interval"] == REGULAR
