"""Fixtures for the PySpark connector tests. The SparkSession (`spark`) and the `spark`
marker live in tests/conftest.py, shared with the simulator's sweep tests; everything
under tests/spark carries the marker.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture
def admin(broker):
    from odradek.client import Admin

    a = Admin(broker.bootstrap, client_id="spark-tests-admin")
    yield a
    a.close()


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
    """Poll `predicate` until truthy (returned); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
