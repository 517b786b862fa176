"""The simulated network: order per connection, what a broken connection drops, partitions."""

from __future__ import annotations

import heapq
import random

from odradek.sim.faults import FaultPlan
from odradek.sim.network import Network


class Clock:
    def __init__(self) -> None:
        self.events: list = []
        self.seq = 0

    def schedule(self, at, label, action) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, label, action))

    def run(self) -> None:
        while self.events:
            heapq.heappop(self.events)[3]()


def test_frames_of_one_connection_arrive_in_order_even_with_jitter():
    clock = Clock()
    net = Network(random.Random(1), FaultPlan(frozenset({"jitter"}), {}), clock.schedule)
    link = net.new_link("m1")
    got = []
    for i in range(200):
        net.send_up(link, i, lambda i=i: got.append(i))
    clock.run()
    assert got == list(range(200))


def test_a_lost_frame_breaks_the_connection_and_nothing_more_arrives():
    clock = Clock()
    net = Network(random.Random(2), FaultPlan(frozenset({"loss"}), {"loss": 1.0}), clock.schedule)
    link = net.new_link("m1")
    got = []
    net.send_up(link, 0, lambda: got.append("a"))
    assert not link.alive
    net.faults_active = False
    net.send_up(link, 1, lambda: got.append("b"))  # a dead connection stays dead
    net.send_down(link, 1, lambda: got.append("c"))
    clock.run()
    assert got == [] and net.dropped == 3


def test_a_frame_in_flight_on_a_connection_that_breaks_is_not_delivered():
    clock = Clock()
    net = Network(random.Random(3), FaultPlan(), clock.schedule)
    link = net.new_link("m1")
    got = []
    net.send_up(link, 0, lambda: got.append("late"))
    link.alive = False  # the client closed it (a timeout) before the frame was read
    clock.run()
    assert got == []


def test_a_partition_drops_both_ways_until_it_ends():
    clock = Clock()
    net = Network(random.Random(4), FaultPlan(), clock.schedule)
    net.cut("m1", until=100)
    a, b = net.new_link("m1"), net.new_link("m2")
    got = []
    net.send_up(a, 10, lambda: got.append("m1"))
    net.send_up(b, 10, lambda: got.append("m2"))
    clock.run()
    assert got == ["m2"] and not a.alive
    c = net.new_link("m1")
    net.send_up(c, 150, lambda: got.append("m1 again"))
    clock.run()
    assert got == ["m2", "m1 again"]


def test_the_fault_plan_is_a_function_of_the_seed():
    plans = [FaultPlan.draw(random.Random(s)) for s in range(200)]
    assert plans == [FaultPlan.draw(random.Random(s)) for s in range(200)]
    assert len({p.label() for p in plans}) > 50  # swarm: many different combinations
    assert all(set(p.rate) == p.on - {"jitter"} for p in plans)  # a rate for every kind that is on but jitter
