"""broker/coordinated.py: deferred answers become responses; the broker and the simulator
are both the host the group handlers expect."""

from __future__ import annotations

import asyncio
import random

from odradek.broker.coordinated import CoordinatorHost, answer, answer_all
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.deferred import Deferred
from odradek.coordinator.errors import CoordinatorUnavailable
from odradek.protocol.errors import COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_SERVER_ERROR
from odradek.sim.coordinator import SimCoordinator


def test_a_settled_answer_is_the_response_now():
    d = Deferred()
    d.complete({"x": 1})
    assert answer(d, lambda code: {"error": code}, lambda r: {**r, "shaped": True}) == {"x": 1, "shaped": True}


def test_a_failed_answer_is_the_apis_error_shape_with_kafkas_code():
    d = Deferred()
    d.fail(CoordinatorUnavailable(COORDINATOR_LOAD_IN_PROGRESS))
    assert answer(d, lambda code: {"error": code}) == {"error": COORDINATOR_LOAD_IN_PROGRESS}
    d2 = Deferred()
    d2.fail(OSError("anything else"))
    assert answer(d2, lambda code: {"error": code}) == {"error": UNKNOWN_SERVER_ERROR}


def test_an_answer_waiting_for_its_commit_is_a_future():
    async def main():
        d = Deferred()
        fut = answer(d, lambda code: {"error": code})
        assert isinstance(fut, asyncio.Future) and not fut.done()
        d.complete({"ok": True})
        return await fut

    assert asyncio.run(main()) == {"ok": True}


def test_answer_all_builds_once_everything_settled():
    async def main():
        a, b = Deferred(), Deferred()
        a.complete(1)
        fut = answer_all([a, b], lambda: (a.response, b.response))
        assert not fut.done()
        b.complete(2)
        return await fut

    assert asyncio.run(main()) == (1, 2)


def test_the_broker_and_the_simulator_are_coordinator_hosts(inproc):
    assert isinstance(inproc.broker, CoordinatorHost)
    sim = SimCoordinator(CoordinatorConfig(offsets_topic_partitions=1), random.Random(0), lambda: 0, lambda *_: None)
    assert isinstance(sim, CoordinatorHost)
