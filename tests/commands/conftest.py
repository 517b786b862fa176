"""Kafka's tools as KAFKA_PATH users run them: the scripts `odradek kafka-scripts DIR`
writes, run as subprocesses with no PATH at all, against the session's broker process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ODRADEK, ROOT


@pytest.fixture(scope="session")
def kafka_path(tmp_path_factory) -> Path:
    """A KAFKA_PATH: DIR with bin/kafka-*.sh."""
    directory = tmp_path_factory.mktemp("kafka")
    subprocess.run([*ODRADEK, "kafka-scripts", str(directory)], check=True, cwd=ROOT, capture_output=True,
                   timeout=60)
    return directory


class Kafka:
    def __init__(self, path: Path, bootstrap: str) -> None:
        self.path = path
        self.bootstrap = bootstrap

    def run(self, script: str, *args: str, input: str | None = None, bootstrap: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess:
        # No PATH: the scripts must find their interpreter by themselves.
        env = {k: v for k, v in os.environ.items() if k != "PATH"}
        cmd = [str(self.path / "bin" / script), *(["--bootstrap-server", self.bootstrap] if bootstrap else []), *args]
        return subprocess.run(cmd, input=input, capture_output=True, text=True, env=env, cwd="/", timeout=timeout,
                              check=False)

    def ok(self, script: str, *args: str, **kw) -> subprocess.CompletedProcess:
        r = self.run(script, *args, **kw)
        assert r.returncode == 0, f"{script} {args}: rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        assert "Traceback" not in r.stderr, r.stderr
        return r

    def fails(self, script: str, *args: str, error: str | None = None, **kw) -> subprocess.CompletedProcess:
        """Exit status 1 (Kafka's, for usage errors too), no traceback, `error` on stderr."""
        r = self.run(script, *args, **kw)
        assert r.returncode == 1, f"{script} {args}: rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        assert "Traceback" not in r.stderr, r.stderr
        if error is not None:
            assert error in r.stderr, r.stderr
        return r


@pytest.fixture
def kafka(kafka_path, broker) -> Kafka:
    return Kafka(kafka_path, broker.bootstrap)


def kafka_table(stdout: str) -> list[dict[str, str]]:
    """Rows of one of kafka-consumer-groups.sh's fixed-width tables (cells have no spaces,
    except COORDINATOR (ID), which the caller handles)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    rows = [line.split() for line in lines[1:]]
    assert all(len(r) == len(header) for r in rows), stdout
    return [dict(zip(header, r)) for r in rows]


@pytest.fixture
def topic(topic_name) -> str:
    """A topic name unique to the test, without '_' or '.' (kafka-topics.sh warns about those)."""
    return topic_name.replace("_", "-").replace(".", "-")
