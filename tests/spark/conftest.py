"""Fixtures for the PySpark connector tests. The SparkSession (`spark`) and the `spark`
marker live in tests/conftest.py, shared with the simulator's sweep tests; everything
under tests/spark carries the marker.
"""

from __future__ import annotations

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
