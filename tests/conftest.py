"""Shared fixtures: a real broker process on loopback, an in-process broker, and one
SparkSession for the whole test session."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.broker.spawn import metrics_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
ODRADEK = [sys.executable, "-m", "odradek"]


class BrokerProcess:
    """`odradek broker` as a subprocess on an ephemeral loopback port."""

    def __init__(self, data_dir: Path, extra: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "BrokerProcess":
        listen = f"127.0.0.1:{self.port or 0}"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*ODRADEK, "broker", "--data-dir", str(self.data_dir), "--listen", listen, *self.extra],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
        )
        said = bytearray()
        port = wait_for_port(self.proc, timeout, said)
        if port is not None:
            self.port = port
            self.metrics_port = metrics_port(bytes(said))  # metrics.listener=HOST:0 picks one
            return self
        raise RuntimeError(f"broker did not start; log:\n{self.log_path.read_text()[-3000:]}")

    def stop(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.proc.stdout.close()
        return rc

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(name: str = "data", extra: list[str] | None = None) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, extra)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        if b.alive():
            b.kill()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker process shared by the interop tests of a session (fresh topics per test)."""
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield b
    if b.alive():
        assert b.stop() == 0


@pytest.fixture
def topic_name(request):
    """A topic name unique to the test."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:150]
    return f"{base}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


def pytest_configure(config):
    # Registered here rather than in pyproject.toml: tests/spark and tests/sim both use it.
    config.addinivalue_line("markers", "spark: PySpark tests, one shared SparkSession (the `spark` fixture)")


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the test session, created lazily (only tests that ask for it
    pay the JVM start-up) and stopped when the test session ends."""
    pytest.importorskip("pyspark")
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
