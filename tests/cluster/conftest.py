"""Fixtures for the cluster tests: `etcd`, a real etcd server per test."""

from __future__ import annotations

import pytest

from .etcd_fixture import etcd_server


@pytest.fixture
def etcd(tmp_path):
    yield from etcd_server(tmp_path)
