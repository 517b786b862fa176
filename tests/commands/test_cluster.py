"""`odradek cluster up`: etcd and brokers start, the bootstrap string works, Ctrl-C stops all."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.timeout(120)


# A shell's background job (`make test &`, nohup, CI runners) starts with SIGINT ignored and
# hands that on through exec; Ctrl-C must still stop the cluster then.
@pytest.mark.parametrize("parent_sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_cluster_up_prints_a_working_bootstrap_and_stops_everything_on_ctrl_c(tmp_path, parent_sigint):
    proc = subprocess.Popen([sys.executable, "-m", "odradek", "--log-level", "WARNING", "cluster", "up",
                             "--brokers", "2", "--racks", "x,y", "--port", "0", "--data-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, parent_sigint))
    try:
        bootstrap = None
        deadline = time.monotonic() + 60
        lines = []
        while bootstrap is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("bootstrap: "):
                bootstrap = line.split(": ", 1)[1].strip()
        assert bootstrap, "".join(lines)
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2]
        pids = [int(line.rsplit("pid ", 1)[1].rstrip(")\n")) for line in lines if line.startswith("broker ")]
        assert len(pids) == 2
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in out
        for pid in pids:  # every broker process is gone
            assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_broker_that_cannot_reach_etcd_says_so_and_exits(tmp_path):
    run = subprocess.run([sys.executable, "-m", "odradek", "broker", "--node-id", "1", "--data-dir", str(tmp_path),
                          "--listen", "127.0.0.1:0", "--metadata", "etcd://127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "cannot join the cluster" in run.stderr and "Traceback" not in run.stderr
