"""`odradek kafka-scripts DIR`: a KAFKA_PATH whose bin/ scripts run Kafka's tools on
odradek with no PATH, and the `odradek kafka-*` subcommands behind them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.commands import kafka_scripts
from tests.conftest import ODRADEK, ROOT

SCRIPTS = ["kafka-acls.sh", "kafka-configs.sh", "kafka-console-consumer.sh", "kafka-console-producer.sh",
           "kafka-consumer-groups.sh", "kafka-topics.sh"]


def odradek(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*ODRADEK, *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
                          env=env)


@pytest.mark.interop
def test_scripts_run_with_no_path(tmp_path, broker, topic_name):
    r = odradek("kafka-scripts", str(tmp_path / "kafka"))
    assert r.returncode == 0, r.stderr
    kafka_path = (tmp_path / "kafka").resolve()
    assert r.stderr == f"odradek: wrote 6 scripts to {kafka_path / 'bin'}; use them with KAFKA_PATH={kafka_path}\n"
    assert sorted(p.name for p in (kafka_path / "bin").iterdir()) == SCRIPTS
    for script in SCRIPTS:
        mode = (kafka_path / "bin" / script).stat().st_mode
        assert mode & stat.S_IXUSR and mode & stat.S_IXOTH

    # As librdkafka's test_kafka_cmd() runs them: system() with KAFKA_PATH, here with an
    # empty environment and a working directory where nothing of odradek's is.
    topic = topic_name.replace("_", "-")
    cmd = (f'"$KAFKA_PATH/bin/kafka-topics.sh" --bootstrap-server {broker.bootstrap} --create --topic "{topic}" '
           "--partitions 2 --replication-factor 1 && "
           f'"$KAFKA_PATH/bin/kafka-topics.sh" --bootstrap-server {broker.bootstrap} --list')
    r = subprocess.run(["/bin/sh", "-c", cmd], env={"KAFKA_PATH": str(kafka_path)}, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Created topic {topic}.\n") and topic in r.stdout.splitlines()
    for script in SCRIPTS:
        r = subprocess.run([str(kafka_path / "bin" / script), "--help"], env={}, capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0 and r.stdout, (script, r.stderr)


@pytest.mark.interop
def test_acls_against_a_broker_without_an_authorizer(tmp_path, broker):
    kafka_scripts.write_scripts(tmp_path)
    # librdkafka 0119-consumer_auth's command line
    r = subprocess.run([str(tmp_path / "bin" / "kafka-acls.sh"), "--bootstrap-server", broker.bootstrap, "--add",
                        "--allow-principal", "User:*", "--operation", "Describe", "--allow-host", "*", "--topic", "t"],
                       env={}, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1 and r.stdout == ""
    # The broker's answer, as Kafka's AclCommand reports SecurityDisabledException.
    assert "No Authorizer is configured on the broker" in r.stderr and "SECURITY_DISABLED" in r.stderr


def test_rewrites_its_own_scripts_but_not_others(tmp_path):
    first = kafka_scripts.write_scripts(tmp_path)
    assert kafka_scripts.write_scripts(tmp_path) == first  # idempotent
    foreign = tmp_path / "bin" / "kafka-topics.sh"
    foreign.write_text("#!/bin/sh\necho a real Kafka\n")
    r = odradek("kafka-scripts", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr == f"odradek: error: {foreign}: not written by odradek kafka-scripts (use --force to overwrite)\n"
    assert "real Kafka" in foreign.read_text()
    assert odradek("kafka-scripts", str(tmp_path), "--force").returncode == 0
    assert kafka_scripts.MARKER in foreign.read_text()


def test_pythonpath_only_when_the_interpreter_would_not_find_odradek(tmp_path, monkeypatch):
    import odradek as package

    here = Path(package.__file__).resolve()
    outcomes = {"found": subprocess.CompletedProcess([], 0, f"{here}\n", ""),
                "elsewhere": subprocess.CompletedProcess([], 0, "/somewhere/else/odradek/__init__.py\n", ""),
                "missing": subprocess.CompletedProcess([], 1, "", "ModuleNotFoundError")}
    for outcome, result in outcomes.items():
        monkeypatch.setattr(kafka_scripts.subprocess, "run", lambda *a, result=result, **kw: result)
        text = kafka_scripts.write_scripts(tmp_path / outcome)[0].read_text()
        if outcome == "found":
            assert "PYTHONPATH" not in text
        else:
            assert f"PYTHONPATH={here.parent.parent}${{PYTHONPATH:+:$PYTHONPATH}}\nexport PYTHONPATH\n" in text
        assert text.endswith(f'exec {os.path.abspath(sys.executable)} -P -m odradek kafka-topics "$@"\n')


@pytest.mark.interop
def test_subcommands_take_kafkas_command_line(broker):
    r = odradek("kafka-topics", "--bootstrap-server", broker.bootstrap, "--list")
    assert r.returncode == 0 and r.stderr == ""
    r = odradek("--log-level", "DEBUG", "kafka-topics", "--bootstrap-server", broker.bootstrap, "--list")
    assert r.returncode == 0 and "DEBUG" in r.stderr
    r = odradek("kafka-topics", "--list", "--bootstrap-server", "no-port")
    assert r.returncode == 1 and "expected HOST:PORT" in r.stderr
    assert "kafka-consumer-groups" in odradek("--help").stdout
