"""The classic group model (classic/model.py): the state table, membership bookkeeping,
protocol candidates, votes and supports()."""

from __future__ import annotations

import itertools

import pytest

from odradek.coordinator.classic.model import (
    CLASSIC_TRANSITIONS,
    ClassicEvent,
    ClassicGroup,
    ClassicMember,
    ClassicState,
    IllegalTransition,
)

S = ClassicState
E = ClassicEvent

# Kafka's ClassicGroupState valid previous states, written out as the moves they allow.
KAFKA_MOVES = {
    (S.EMPTY, S.PREPARING_REBALANCE), (S.EMPTY, S.DEAD),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE), (S.PREPARING_REBALANCE, S.EMPTY),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.STABLE), (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.STABLE, S.PREPARING_REBALANCE), (S.STABLE, S.DEAD),
    (S.DEAD, S.DEAD),
}
ALL_MOVES = list(itertools.product(S, S))


def member(mid, protocols=(("range", b"r"),), instance=None, rebalance=30_000):
    return ClassicMember(member_id=mid, instance_id=instance, client_id="c", client_host="h",
                         rebalance_timeout_ms=rebalance, session_timeout_ms=10_000, protocol_type="consumer",
                         protocols=tuple(protocols))


def group_in(state: ClassicState) -> ClassicGroup:
    g = ClassicGroup("g", now_ms=5)
    g.state = state
    return g


def test_the_table_is_kafkas():
    assert {(a, b) for (a, _event), b in CLASSIC_TRANSITIONS.items()} == KAFKA_MOVES


def _events_from(src, dst):
    return [e for e in ClassicEvent if CLASSIC_TRANSITIONS.get((src, e)) is dst]


@pytest.mark.parametrize(("src", "dst"), sorted(KAFKA_MOVES, key=lambda m: (m[0].value, m[1].value)))
def test_allowed_move(src, dst):
    events = _events_from(src, dst)
    assert events  # some event makes the move
    for event in events:
        g = group_in(src)
        g.transition(event, now_ms=42)
        assert g.state is dst
        assert g.previous_state is src
        assert g.state_timestamp == 42


@pytest.mark.parametrize(("src", "dst"), [m for m in ALL_MOVES if m not in KAFKA_MOVES])
def test_disallowed_move_raises(src, dst):
    assert not _events_from(src, dst)  # no event makes the move
    for event in ClassicEvent:
        if (src, event) in CLASSIC_TRANSITIONS:
            continue
        g = group_in(src)
        with pytest.raises(AssertionError):
            g.transition(event, now_ms=42)
        assert g.state is src  # nothing changed
        assert g.state_timestamp == 5


@pytest.mark.parametrize(("src", "event"), sorted(CLASSIC_TRANSITIONS, key=lambda k: (k[0].value, k[1].value)))
def test_every_entry_goes_where_the_table_says(src, event):
    g = group_in(src)
    g.transition(event, now_ms=42)
    assert g.state is CLASSIC_TRANSITIONS[(src, event)]
    assert g.previous_state is src and g.state_timestamp == 42


@pytest.mark.parametrize(("src", "event"), [(s, e) for s in ClassicState for e in ClassicEvent
                                            if (s, e) not in CLASSIC_TRANSITIONS])
def test_an_event_with_no_entry_raises_illegal_transition(src, event):
    g = group_in(src)
    with pytest.raises(IllegalTransition, match="no transition from"):
        g.transition(event, now_ms=42)
    assert g.state is src and g.previous_state is None and g.state_timestamp == 5


def test_the_events_each_code_path_fires():
    # prepare_rebalance, complete_join (with and without members), the leader's SyncGroup,
    # and a tombstone: each is one event, and the table takes it where Kafka goes.
    assert CLASSIC_TRANSITIONS[(S.STABLE, E.REBALANCE)] is S.PREPARING_REBALANCE
    assert CLASSIC_TRANSITIONS[(S.PREPARING_REBALANCE, E.JOIN_COMPLETED)] is S.COMPLETING_REBALANCE
    assert CLASSIC_TRANSITIONS[(S.PREPARING_REBALANCE, E.JOIN_EMPTIED)] is S.EMPTY
    assert CLASSIC_TRANSITIONS[(S.COMPLETING_REBALANCE, E.ASSIGNED)] is S.STABLE
    assert all(CLASSIC_TRANSITIONS[(s, E.DELETED)] is S.DEAD for s in ClassicState)
    g = group_in(S.STABLE)
    g.mark_deleted(now_ms=9)
    assert g.is_(S.DEAD) and g.state_timestamp == 9


def test_a_group_is_created_empty_or_stable_only():
    assert ClassicGroup("g").is_(S.EMPTY)
    assert ClassicGroup("g", 3, state=S.STABLE).is_(S.STABLE)  # loaded, or converted from a consumer group
    for state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.DEAD):
        with pytest.raises(IllegalTransition):
            ClassicGroup("g", 3, state=state)


def test_a_new_group_is_empty_at_generation_zero():
    g = ClassicGroup("g", now_ms=7)
    assert g.is_(S.EMPTY) and g.generation == 0 and g.leader_id is None and g.protocol_name is None
    assert g.state_timestamp == 7


# --- membership --------------------------------------------------------------------------------


def test_first_member_sets_protocol_type_and_leader():
    g = ClassicGroup("g")
    g.add(member("a"))
    g.add(member("b"))
    assert g.protocol_type == "consumer"
    assert g.leader_id == "a"


def test_static_members_are_indexed_by_instance_id():
    g = ClassicGroup("g")
    g.add(member("a", instance="i-a"))
    g.add(member("b"))
    assert g.static_members == {"i-a": "a"}
    assert g.member_by_instance("i-a").member_id == "a"
    assert g.member_by_instance("nope") is None
    assert g.member_by_instance(None) is None
    g.remove("a")
    assert g.static_members == {}


def test_removing_the_leader_hands_leadership_to_the_next_member():
    g = ClassicGroup("g")
    for mid in ("a", "b", "c"):
        g.add(member(mid))
    g.pending_sync = {"a", "b"}
    assert g.remove("a").member_id == "a"
    assert g.leader_id == "b"
    assert g.pending_sync == {"b"}
    g.remove("c")  # not the leader: leadership stays
    assert g.leader_id == "b"
    g.remove("b")
    assert g.leader_id is None
    assert g.remove("b") is None  # unknown: nothing happens


def test_removing_a_replaced_static_member_keeps_the_new_mapping():
    g = ClassicGroup("g")
    g.add(member("old", instance="i"))
    g.static_members["i"] = "new"  # the instance now belongs to another member id
    g.remove("old")
    assert g.static_members == {"i": "new"}


def test_all_joined_counts_parked_joins_and_pending_members():
    g = ClassicGroup("g")
    g.add(member("a"))
    g.add(member("b"))
    assert not g.all_joined()
    g.park_join(g.members["a"], lambda r: None)
    assert g.awaiting_join() == 1 and not g.all_joined()
    g.park_join(g.members["a"], lambda r: None)  # a second join of the same member counts once
    g.park_join(g.members["b"], lambda r: None)
    assert g.awaiting_join() == 2 and g.all_joined()
    g.pending_members.add("p")
    assert not g.all_joined()
    g.pending_members.clear()
    g.unpark_join(g.members["a"])
    assert g.awaiting_join() == 1 and not g.all_joined()
    g.remove("b")  # a parked member that goes stops counting
    assert g.awaiting_join() == 0


def test_rebalance_timeout_is_the_largest_of_the_members():
    g = ClassicGroup("g")
    assert g.rebalance_timeout_ms() == 0
    g.add(member("a", rebalance=10_000))
    g.add(member("b", rebalance=25_000))
    assert g.rebalance_timeout_ms() == 25_000


# --- protocols -----------------------------------------------------------------------------------


def test_candidates_are_the_common_protocols_in_the_first_members_order():
    g = ClassicGroup("g")
    g.add(member("a", (("rr", b""), ("range", b""), ("sticky", b""))))
    g.add(member("b", (("sticky", b""), ("range", b""), ("rr", b""))))
    g.add(member("c", (("range", b""), ("sticky", b""))))
    assert g.candidate_protocols() == ["range", "sticky"]


def test_each_member_votes_for_its_most_preferred_common_protocol():
    g = ClassicGroup("g")
    # "rr" is a's favourite but not common; a votes for its next choice among candidates.
    g.add(member("a", (("rr", b""), ("range", b""), ("sticky", b""))))
    g.add(member("b", (("sticky", b""), ("range", b""))))
    g.add(member("c", (("sticky", b""), ("range", b""))))
    assert g.select_protocol() == "sticky"  # 2 votes to 1


def test_a_tie_goes_to_the_earliest_candidate():
    g = ClassicGroup("g")
    g.add(member("a", (("sticky", b""), ("range", b""))))
    g.add(member("b", (("range", b""), ("sticky", b""))))
    assert g.select_protocol() == "sticky"  # 1:1, sticky is first in a's order
    g2 = ClassicGroup("g")
    g2.add(member("b", (("range", b""), ("sticky", b""))))
    g2.add(member("a", (("sticky", b""), ("range", b""))))
    assert g2.select_protocol() == "range"


def test_supports_an_empty_group_needs_a_type_and_a_protocol():
    g = ClassicGroup("g")
    assert g.supports("consumer", ["range"])
    assert g.supports("connect", ["x"])  # an empty group speaks whatever comes first
    assert not g.supports("", ["range"])
    assert not g.supports("consumer", [])


def test_supports_a_non_empty_group_needs_its_type_and_a_common_protocol():
    g = ClassicGroup("g")
    g.add(member("a", (("range", b""), ("rr", b""))))
    g.add(member("b", (("rr", b""), ("sticky", b""))))
    assert g.supports("consumer", ["rr"])
    assert g.supports("consumer", ["zzz", "rr"])
    assert not g.supports("consumer", ["range"])  # not supported by b
    assert not g.supports("consumer", ["sticky"])  # not supported by a
    assert not g.supports("connect", ["rr"])  # another protocol type


def test_member_metadata_by_protocol():
    m = member("a", (("range", b"R"), ("rr", b"Q")))
    assert m.metadata("rr") == b"Q"
    assert m.metadata("nope") is None
    assert m.names() == ["range", "rr"]


def test_snapshot_holds_the_persisted_fields():
    g = ClassicGroup("g")
    g.add(member("b", instance="i-b"))
    g.add(member("a"))
    g.members["a"].assignment = b"x"
    snap = g.snapshot()
    assert list(snap["members"]) == ["a", "b"]  # sorted, comparable across restarts
    assert snap["members"]["a"]["assignment"] == b"x"
    assert snap["static_members"] == {"i-b": "b"}
    assert snap["leader_id"] == "b" and snap["state"] == "Empty"


def test_protocol_support_follows_protocol_changes_and_removals():
    # The per-protocol support counts (what keeps a join O(1)) stay right as members change.
    g = ClassicGroup("g")
    g.add(member("a", protocols=(("range", b""), ("roundrobin", b""))))
    g.add(member("b", protocols=(("roundrobin", b""), ("range", b""))))
    assert g.candidate_protocols() == ["range", "roundrobin"]
    g.set_protocols(g.members["b"], (("roundrobin", b""),))
    assert g.candidate_protocols() == ["roundrobin"]
    assert not g.supports("consumer", ["range"]) and g.supports("consumer", ["roundrobin", "x"])
    g.remove("b")
    assert g.candidate_protocols() == ["range", "roundrobin"] and g.supports("consumer", ["range"])
    g.remove("a")
    assert g.candidate_protocols() == [] and g._support == {}
