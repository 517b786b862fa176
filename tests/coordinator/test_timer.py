"""The keyed coordinator timer: schedule, reschedule, cancel, due order, bounded heap."""

from __future__ import annotations

import random

from odradek.coordinator.timer import Timer


def op(name):
    def f(shard, now):
        return name
    f.name = name
    return f


def fired(timer: Timer, now: int) -> list:
    return [(key, o.name) for key, o in timer.due(now)]


def test_empty_timer():
    t = Timer()
    assert len(t) == 0
    assert t.next_deadline() is None
    assert t.due(10**12) == []
    assert t.deadline("x") is None
    assert "x" not in t


def test_schedule_and_due_in_deadline_order():
    t = Timer()
    t.schedule("c", 300, op("c"))
    t.schedule("a", 100, op("a"))
    t.schedule("b", 200, op("b"))
    assert len(t) == 3 and "a" in t
    assert t.deadline("b") == 200
    assert t.next_deadline() == 100
    assert fired(t, 99) == []
    assert fired(t, 100) == [("a", "a")]  # deadline <= now fires
    assert "a" not in t and len(t) == 2
    assert fired(t, 1_000) == [("b", "b"), ("c", "c")]
    assert len(t) == 0 and t.next_deadline() is None
    assert fired(t, 10_000) == []  # an op fires once


def test_equal_deadlines_fire_in_schedule_order():
    t = Timer()
    for k in "xyzw":
        t.schedule(k, 50, op(k))
    assert [k for k, _ in fired(t, 50)] == list("xyzw")


def test_reschedule_later_replaces_the_deadline_and_op():
    t = Timer()
    t.schedule("k", 100, op("first"))
    t.schedule("other", 150, op("other"))
    t.schedule("k", 200, op("second"))
    assert len(t) == 2 and t.deadline("k") == 200
    assert t.next_deadline() == 150
    assert fired(t, 199) == [("other", "other")]
    assert fired(t, 200) == [("k", "second")]
    assert len(t) == 0


def test_reschedule_earlier_replaces_the_deadline():
    t = Timer()
    t.schedule("k", 500, op("late"))
    t.schedule("other", 300, op("other"))
    t.schedule("k", 100, op("early"))
    assert t.deadline("k") == 100 and len(t) == 2
    assert t.next_deadline() == 100
    assert fired(t, 100) == [("k", "early")]
    # the old deadline at 500 must not fire the key a second time
    assert fired(t, 1_000) == [("other", "other")]
    assert len(t) == 0 and t.next_deadline() is None


def test_reschedule_earlier_then_later_again():
    t = Timer()
    t.schedule("k", 100, op("1"))
    t.schedule("k", 50, op("2"))
    t.schedule("k", 200, op("3"))
    assert t.deadline("k") == 200
    assert t.next_deadline() == 200
    assert fired(t, 150) == []
    assert fired(t, 200) == [("k", "3")]
    assert fired(t, 10_000) == []


def test_cancelled_keys_never_fire():
    t = Timer()
    t.schedule("a", 100, op("a"))
    t.schedule("b", 200, op("b"))
    t.schedule("c", 50, op("c"))
    t.cancel("a")
    t.cancel("c")
    t.cancel("never-scheduled")  # no error
    assert "a" not in t and len(t) == 1 and t.deadline("a") is None
    assert t.next_deadline() == 200
    assert fired(t, 10_000) == [("b", "b")]


def test_cancel_after_postponing_and_reschedule_after_cancel():
    t = Timer()
    t.schedule("a", 100, op("a1"))
    t.schedule("a", 300, op("a2"))
    t.cancel("a")
    assert fired(t, 1_000) == []
    t.schedule("a", 1_500, op("a3"))
    assert t.next_deadline() == 1_500
    assert fired(t, 1_499) == []
    assert fired(t, 1_500) == [("a", "a3")]


def test_rescheduling_from_within_due_processing():
    t = Timer()
    t.schedule("a", 100, op("a"))
    out = t.due(100)
    assert [k for k, _ in out] == ["a"]
    t.schedule("a", 200, op("a-again"))  # what a periodic op does
    assert t.next_deadline() == 200
    assert fired(t, 200) == [("a", "a-again")]


def test_next_deadline_skips_postponed_and_cancelled_entries():
    t = Timer()
    t.schedule("a", 10, op("a"))
    t.schedule("b", 20, op("b"))
    t.schedule("c", 30, op("c"))
    t.schedule("a", 40, op("a"))
    t.cancel("b")
    assert t.next_deadline() == 30
    assert fired(t, 35) == [("c", "c")]
    assert t.next_deadline() == 40


def test_heap_stays_bounded_when_one_key_is_pushed_back_repeatedly():
    t = Timer()
    t.schedule("other", 10**12, op("other"))
    for i in range(100_000):
        t.schedule("session", 45_000 + i, op("session"))
        assert len(t._heap) <= 2
        if i % 10_000 == 0:  # the runtime polls now and then; that must not grow the heap either
            t.due(i)
            t.next_deadline()
            assert len(t._heap) <= 2
    assert t.deadline("session") == 45_000 + 99_999
    assert fired(t, 45_000 + 99_998) == []
    assert fired(t, 45_000 + 99_999) == [("session", "session")]
    assert len(t._heap) <= 1


def test_heap_bounded_with_many_keys_each_pushed_back():
    t = Timer()
    keys = [f"m{i}" for i in range(50)]
    for rnd in range(2_000):
        for k in keys:
            t.schedule(k, 1_000 + rnd, op(k))
    assert len(t._heap) <= 2 * len(keys)
    assert len(t) == 50


def test_random_operations_match_a_reference_model():
    rng = random.Random(848)
    t = Timer()
    model: dict[str, tuple[int, str]] = {}
    now = 0
    for step in range(5_000):
        k = f"k{rng.randrange(20)}"
        r = rng.random()
        if r < 0.55:
            d = now + rng.randrange(0, 500)
            t.schedule(k, d, op(f"{k}@{step}"))
            model[k] = (d, f"{k}@{step}")
        elif r < 0.7:
            t.cancel(k)
            model.pop(k, None)
        else:
            now += rng.randrange(0, 200)
            got = fired(t, now)
            due = [(k2, v[1]) for k2, v in model.items() if v[0] <= now]
            # deadline order (ties in any order)
            assert sorted(got) == sorted(due)
            deadlines = [model[k2][0] for k2, _ in got]
            assert deadlines == sorted(deadlines)
            for k2, _ in got:
                del model[k2]
        assert len(t) == len(model)
        expected_next = min((d for d, _ in model.values()), default=None)
        assert t.next_deadline() == expected_next
