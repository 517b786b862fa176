"""Waiting in tests: poll a condition until it holds, with a bound."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.1, what="condition"):
    """Poll `predicate` until it returns something truthy, and return that; fail after
    `timeout` seconds naming `what` (a string, or a callable giving the last state seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
