"""Helpers shared by the benchmark scripts: a broker subprocess, table printing and the
machine/commit line."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
sys.path.insert(0, str(ROOT / "src"))

from odradek.broker.spawn import terminate, wait_for_port  # noqa: E402 - after the path above


def interrupt_on_sigterm() -> None:
    """SIGTERM (a timeout's kill) raises KeyboardInterrupt, so a benchmark's `finally`
    blocks stop its broker and clients as on Ctrl-C."""
    def handler(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class BrokerProcess:
    """`python -m odradek broker` on an ephemeral loopback port (as tests/conftest.py starts it).

    `cli_args` go before the `broker` subcommand (e.g. `--log-level WARNING`), `extra` after it."""

    def __init__(self, data_dir: Path, extra: list[str], log_path: Path, cli_args: tuple[str, ...] = ()) -> None:
        self.data_dir, self.extra, self.log_path, self.cli_args = data_dir, extra, log_path, cli_args
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "odradek", *self.cli_args, "broker", "--data-dir", str(self.data_dir),
             "--listen", f"{LOOPBACK}:0", *self.extra],
            stdout=subprocess.PIPE, stderr=self._log, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")},
        )
        self.port = wait_for_port(self.proc, timeout)
        if self.port is not None:
            return self
        self.stop()
        raise RuntimeError(f"broker did not start; log tail: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "<no log>"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        rc = terminate(self.proc)
        self.proc.stdout.close()
        self._log.close()
        return rc


def table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: int = 1) -> None:
    """Print rows under header; the first `left` columns are left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells) -> str:
        return "  " + "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    print(line(header))
    for r in rows:
        print(line(r))


def git_revision() -> str:
    """The commit the broker code was measured at, '+dirty' when src/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], check=False,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head or "?") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_line(extra: str = "") -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"nproc={n}  cpu={model}  python={platform.python_version()} ({platform.python_implementation()})  "
            f"{extra + '  ' if extra else ''}loadavg at start {load}  odradek {git_revision()}")


def librdkafka_produce_loop(producer, topic: str, values: list[bytes], n: int, partition_of, deadline: float
                            ) -> tuple[int, bool]:
    """Produce `n` records with a confluent-kafka Producer as fast as it accepts them:
    values cycle through `values` (a power-of-two pool), record i goes to partition
    `partition_of(i)`; a full local queue is drained by serving delivery reports. Returns
    (records handed to librdkafka, timed out). Shared by throughput.py and client.py."""
    produce, poll = producer.produce, producer.poll
    mask = len(values) - 1
    sent = 0
    for i in range(n):
        v, part = values[i & mask], partition_of(i)
        try:
            produce(topic, v, None, part)
        except BufferError:
            while True:  # local queue full: serve delivery reports until there is room
                poll(0.005)
                try:
                    produce(topic, v, None, part)
                    break
                except BufferError:
                    if time.monotonic() > deadline:
                        return sent, True
        sent += 1
        if not i & 1023:
            poll(0)
            if time.monotonic() > deadline:
                return sent, True
    return sent, False


def drain(q, into: list) -> None:
    """Move whatever `q` (a multiprocessing queue) holds now into `into`, without waiting."""
    import queue

    try:
        while True:
            into.append(q.get_nowait())
    except queue.Empty:
        pass


def stop_workers(procs, queues=()) -> None:
    """Join worker processes (terminate, then kill, the ones that will not end) and close
    their queues without waiting for their feeder threads."""
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=2)
    for q in queues:
        q.close()
        q.cancel_join_thread()
