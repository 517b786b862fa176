"""cluster/controller: leader election and ISR removal when brokers disappear (KRaft rules)."""

from odradek.cluster.controller import elect, elect_one, initial_state
from odradek.cluster.image import NO_LEADER, PartitionState


def st(leader, epoch=3, isr=(1, 2, 3), replicas=(1, 2, 3)):
    return PartitionState(replicas, leader, epoch, isr, 7)


def test_nothing_changes_while_every_replica_lives():
    assert elect_one(st(1), {1, 2, 3}, False) is None


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch():
    new = elect_one(st(1), {1, 2}, False)
    assert (new.leader, new.leader_epoch, new.isr) == (1, 3, (1, 2))


def test_a_dead_leader_is_replaced_by_the_first_live_isr_replica_in_assignment_order():
    new = elect_one(st(1, isr=(1, 3, 2), replicas=(1, 2, 3)), {2, 3}, False)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, (3, 2))


def test_a_live_replica_outside_the_isr_is_not_elected_unless_unclean_election_is_on():
    state = st(1, isr=(1,))
    clean = elect_one(state, {2, 3}, False)
    assert (clean.leader, clean.isr) == (NO_LEADER, (1,))  # the last ISR member is kept
    unclean = elect_one(state, {2, 3}, True)
    assert (unclean.leader, unclean.leader_epoch, unclean.isr) == (2, 4, (2,))


def test_the_last_isr_member_leads_again_when_it_returns():
    leaderless = st(NO_LEADER, epoch=4, isr=(1,))
    assert elect_one(leaderless, {2, 3}, False) is None  # still nobody eligible: no write
    back = elect_one(leaderless, {1, 2, 3}, False)
    assert (back.leader, back.leader_epoch) == (1, 5)


def test_elect_returns_only_partitions_that_change_and_asks_unclean_per_topic():
    parts = {("a", 0): st(1, isr=(1,)), ("b", 0): st(2), ("c", 0): st(1, isr=(1,)), ("d", 0): st(2, isr=(2, 3))}
    out = elect(parts, {2, 3}, unclean=lambda topic: topic == "c")
    assert set(out) == {("a", 0), ("b", 0), ("c", 0)}  # d is untouched: its replicas live
    assert out[("a", 0)].leader == NO_LEADER and out[("c", 0)].leader == 2
    assert (out[("b", 0)].leader, out[("b", 0)].isr) == (2, (2, 3))


def test_initial_state_leads_with_the_first_live_replica():
    s = initial_state((3, 1, 2), {1, 2, 3})
    assert (s.leader, s.leader_epoch, s.isr) == (3, 0, (3, 1, 2))
    s = initial_state((3, 1, 2), {1, 2})
    assert (s.leader, s.isr) == (1, (1, 2))
