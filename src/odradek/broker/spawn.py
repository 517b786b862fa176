"""An `odradek broker` started as a child process: learning its port, stopping it.

The broker prints one line, "odradek broker listening on HOST:PORT", to stdout once it
accepts connections (server.py); a parent that asked for port 0 reads it from there. The
pipeline's embedded broker, the benchmarks and the test fixtures all start brokers so.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time

LISTENING = re.compile(rb"listening on [\d.]+:(\d+)")
# Printed before the "listening on" line when metrics.listener is set (server.py _start_http).
METRICS = re.compile(rb"odradek metrics on http://[^:/]+:(\d+)/metrics")


def metrics_port(said: bytes) -> int | None:
    """The /metrics port in what a broker printed before it listened (`wait_for_port`'s
    `said`), e.g. when it was started with metrics.listener=HOST:0."""
    m = METRICS.search(said)
    return int(m.group(1)) if m else None


def wait_for_port(proc: subprocess.Popen, timeout: float, said: bytearray | None = None) -> int | None:
    """The port `proc` (started with stdout=PIPE) announces, or None if it exits, closes its
    stdout or says nothing within `timeout` seconds. `said` receives what it printed up to
    then (the /metrics line comes first: `metrics_port`)."""
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            buf += chunk
            m = LISTENING.search(buf)
            if m:
                if said is not None:
                    said += buf
                return int(m.group(1))
        elif proc.poll() is not None:
            return None
    return None


def terminate(proc: subprocess.Popen, grace: float = 20.0) -> int:
    """Stop a broker child as its SIGTERM handler expects (a clean shutdown), killing it if it
    has not exited after `grace` seconds; returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode
