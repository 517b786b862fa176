"""sim/cluster.py: coordinator brokers over a replicated __consumer_offsets; the coordinator
moves, the old one is a zombie until it hears (serving nothing, its lease being gone; and,
without that check, acknowledging nothing it writes), and groups keep working."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import NOT_COORDINATOR
from odradek.sim import defects
from odradek.sim import run as sim_run
from odradek.sim import scenario
from odradek.sim.coordinator import COMMIT_TIMEOUT_MS
from odradek.sim.faults import FaultPlan
from odradek.sim.result import GROUP_PROTOCOLS
from odradek.sim.run import run_seed
from odradek.sim.world import World

OFFSET_COMMIT = 8


class Answers:
    """Every broker's requests (time, broker, api key) and answers (time, broker, api key, error codes)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.requests: list[tuple[int, int, int]] = []
        self.seen: list[tuple[int, int, int, set[int]]] = []

    def on_request(self, coordinator, request) -> None:
        self.requests.append((self.world.now, coordinator.node_id, request.api_key))

    def on_response(self, coordinator, request, body: dict) -> None:
        codes = {int(body.get("error_code", 0) or 0)}
        codes |= {int(p["error_code"]) for t in body.get("topics", []) for p in t.get("partitions", [])
                  if "error_code" in p}
        self.seen.append((self.world.now, coordinator.node_id, request.api_key, codes))


def _quiet_world(seed: int, protocol: str) -> World:
    """A world whose seed draws no faults: only what the test does happens."""
    world = World(seed, protocol)
    world.plan = world.network.plan = FaultPlan()
    scenario.start(world)
    return world


def test_the_coordinator_starts_on_broker_0_with_every_broker_in_the_isr():
    world = World(4, "consumer")
    c = world.coordinator
    assert c.leader_id == 0 and c.up and len(c.brokers) == world.brokers
    for p in c.partitions:
        assert c.states[p].leader == 0 and c.states[p].isr == tuple(range(world.brokers))
        assert c.brokers[0].leads(p) and not any(b.leads(p) for b in c.brokers[1:])
    assert c.find_coordinator() == 0


def test_an_answer_waits_until_a_follower_has_the_records():
    world = _quiet_world(3, "consumer")
    world.run_until(5000)
    c = world.coordinator
    p = c.group_partition
    leader = c.leader
    assert leader.logs[p].end > 0
    # Whatever the leader answered was committed: every follower in the ISR has it.
    for b in c.brokers[1:]:
        assert b.logs[p].entries[:leader.logs[p].hw] == leader.logs[p].entries[:leader.logs[p].hw]
    assert world.fenced_checker.acked, "no commit was acknowledged"


def _moved(world: World, answers: Answers):
    c = world.coordinator
    c.all_observers.append(answers)
    world.run_until(8000)
    assert sim_run.converged(world)
    return c.move()


def _heals_and_converges(world: World, new) -> None:
    scenario.heal(world)
    assert world.run_until(world.now + sim_run.liveness_bound_ms(world), stop=lambda: sim_run.converged(world))
    world.fenced_checker.final(world)
    world.replay_checker.compare(world, "at the end")
    assert not world.violations, world.violations
    for m in world.live_members():
        assert m.link.broker == new.node_id


def test_a_zombie_coordinator_serves_nothing_writes_nothing_and_follows_when_it_hears():
    """The lease check (broker/coordinator.py): the controller deposes only a broker whose
    lease expired, and the broker's own clock saw that first."""
    world = _quiet_world(3, "consumer")
    answers = Answers(world)
    old, new = _moved(world, answers)
    c = world.coordinator
    p = c.group_partition
    end = old.logs[p].end
    assert old.leads(p) and not old.serving()  # it still believes it leads, but cannot count on its lease
    assert all(c.find_coordinator() == new.node_id for _ in range(20))  # it names nobody, itself least
    moved_at = world.now
    world.run_until(moved_at + COMMIT_TIMEOUT_MS - 1000)
    reached = [a for a in answers.seen if a[0] > moved_at and a[1] == old.node_id]
    assert reached, "nobody reached the zombie"
    assert all(NOT_COORDINATOR in codes for *_, codes in reached), reached
    assert old.logs[p].end == end, "the zombie wrote"
    assert c.learn(old)
    world.run_until(world.now + 1000)
    assert not old.leads(p) and old.serving()
    _heals_and_converges(world, new)


def test_without_the_lease_check_a_zombie_acknowledges_nothing_it_writes_and_is_fenced_when_it_hears():
    """The second line of defence: answers wait for the high watermark, which nobody moves
    for a zombie (defect `no-lease-check` takes the first line away)."""
    with defects.inject("no-lease-check"):
        world = _quiet_world(3, "consumer")
        answers = Answers(world)
        old, new = _moved(world, answers)
        c = world.coordinator
        p = c.group_partition
        epoch = old.view[p].leader_epoch
        deposed_at = c.deposed[(p, epoch)]
        hw = old.logs[p].hw
        assert new is c.leader and new.leads(p) and old.leads(p)  # the zombie still believes it leads
        assert old.node_id not in c.states[p].isr and c.find_coordinator() in (old.node_id, new.node_id)
        moved_at = world.now
        world.run_until(moved_at + COMMIT_TIMEOUT_MS - 1000)  # its waiting answers have not timed out yet

        assert [r for r in answers.requests if r[0] > moved_at and r[1] == old.node_id], "nobody reached the zombie"
        zombie_answers = [a for a in answers.seen if a[0] > moved_at and a[1] == old.node_id]
        assert old.logs[p].end > deposed_at, "the zombie wrote nothing"
        assert old.logs[p].hw == hw  # nobody copies it, so its high watermark stays
        assert not [a for a in zombie_answers if a[2] == OFFSET_COMMIT and a[3] == {0}], \
            "the zombie acknowledged a commit"
        assert all(e.epoch != epoch for e in new.logs[p].entries[deposed_at:])

        learned_at = world.now
        assert c.learn(old)
        world.run_until(learned_at + 1000)
        told = [a for a in answers.seen if a[0] >= learned_at and a[1] == old.node_id]
        assert any(NOT_COORDINATOR in codes for *_, codes in told), "the zombie's waiting answers did not fail"
        assert not old.leads(p)
        assert old.logs[p].entries == new.logs[p].entries[:old.logs[p].end]  # its zombie writes are gone
        _heals_and_converges(world, new)


@pytest.mark.parametrize("protocol", GROUP_PROTOCOLS)
def test_groups_keep_working_while_the_coordinator_moves(protocol):
    for seed in range(40):
        r = run_seed(seed, protocol)
        if r.coordinator_moves >= 2:
            break
    else:
        pytest.fail(f"no seed of {protocol} moved the coordinator twice")
    assert "coordinator_move" in r.faults
    assert not r.violations and r.converged, (r.seed, r.first_violation, r.trace_tail[-5:])
