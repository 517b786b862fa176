"""Fixtures for the PySpark connector tests: one SparkSession for the whole test session.

The session is created lazily (only tests that ask for `spark` pay the JVM start-up) and
stopped when the test session ends. Everything under tests/spark carries the `spark`
marker, registered here since pyproject.toml is not ours to edit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: PySpark connector tests (format 'odradek'), one shared SparkSession")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    import odradek.spark

    session = odradek.spark.session(
        "local[2]",
        "odradek-tests",
        spark__ui__enabled="false",
        spark__sql__shuffle__partitions="2",
        spark__driver__memory="1g",
        spark__sql__streaming__stopTimeout="30s",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


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
