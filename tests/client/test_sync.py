"""The synchronous facade's DeliveryFuture: completed on one thread, awaited on another."""

from __future__ import annotations

import threading
import time

import pytest

from odradek.client.errors import KafkaError
from odradek.client.sync import DeliveryFuture


def test_result_waits_for_another_thread():
    fut = DeliveryFuture()
    threading.Timer(0.05, fut.set_result, args=("meta",)).start()
    t0 = time.monotonic()
    assert fut.result(5) == "meta"
    assert time.monotonic() - t0 >= 0.04 and fut.done()


def test_result_times_out_while_undelivered():
    fut = DeliveryFuture()
    with pytest.raises(TimeoutError):
        fut.result(0.01)
    assert not fut.done()


def test_exception_is_raised_by_result_and_returned_by_exception():
    fut = DeliveryFuture()
    err = KafkaError(10, "too large")
    fut.set_exception(err)
    assert fut.exception() is err
    with pytest.raises(KafkaError):
        fut.result()


def test_callbacks_run_once_whether_added_before_or_after_completion():
    seen = []
    fut = DeliveryFuture()
    fut.add_done_callback(lambda f: seen.append(("before", f.result())))
    fut.set_result(1)
    fut.add_done_callback(lambda f: seen.append(("after", f.result())))
    assert seen == [("before", 1), ("after", 1)]


def test_many_waiters_across_threads_all_wake():
    futs = [DeliveryFuture() for _ in range(200)]
    results = []
    waiters = [threading.Thread(target=lambda f=f: results.append(f.result(5))) for f in futs]
    for t in waiters:
        t.start()
    for i, f in enumerate(futs):
        f.set_result(i)
    for t in waiters:
        t.join(5)
    assert sorted(results) == list(range(200))
