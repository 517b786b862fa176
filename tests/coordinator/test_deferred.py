"""Deferred answers (coordinator/deferred.py): released in offset order, failed together."""

from __future__ import annotations

import pytest

from odradek.coordinator.deferred import Deferred, DeferredQueue


def test_a_deferred_settles_once_and_runs_its_callbacks():
    d = Deferred()
    seen = []
    d.add_done_callback(lambda x: seen.append(("first", x.response)))
    with pytest.raises(RuntimeError):
        d.result()
    d.complete("ok")
    d.complete("again")
    d.fail(OSError("late"))
    d.add_done_callback(lambda x: seen.append(("after", x.response)))
    assert d.result() == "ok"
    assert seen == [("first", "ok"), ("after", "ok")]


def test_a_failed_deferred_raises_its_error():
    d = Deferred()
    d.fail(OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        d.result()


def test_the_queue_releases_answers_up_to_the_committed_offset_in_order():
    q = DeferredQueue()
    released = []
    for offset, name in [(3, "a"), (3, "b"), (7, "c"), (9, "d")]:
        q.add(offset, lambda n=name: released.append(n), lambda e: released.append(("failed", e)))
    assert q.complete_up_to(2) == 0
    assert q.complete_up_to(5) == 2
    assert released == ["a", "b"]
    assert q.complete_up_to(8) == 1
    assert released == ["a", "b", "c"] and len(q) == 1
    err = OSError("gone")
    q.fail_all(err)
    assert released == ["a", "b", "c", ("failed", err)] and len(q) == 0


def test_the_queue_refuses_an_offset_below_its_tail():
    q = DeferredQueue()
    q.add(5, lambda: None, lambda e: None)
    with pytest.raises(AssertionError):
        q.add(4, lambda: None, lambda e: None)
