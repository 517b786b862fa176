"""Helpers shared by the benchmark scripts: a broker subprocess, table printing, the
machine/commit line and the run of a script's chosen sections."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
sys.path.insert(0, str(ROOT / "src"))

from odradek.broker.spawn import metrics_port, terminate, wait_for_port  # noqa: E402 - after the path above


def interrupt_on_sigterm() -> None:
    """SIGTERM (a timeout's kill) raises KeyboardInterrupt, so a benchmark's `finally`
    blocks stop its broker and clients as on Ctrl-C."""
    def handler(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def require_positive(ap: argparse.ArgumentParser, args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """An argument error for the first of the options `names` (attribute names) below 1."""
    for name in names:
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")


def run_sections(ap: argparse.ArgumentParser, args: argparse.Namespace,
                 sections: dict[str, Callable[[argparse.Namespace, dict], bool]],
                 finish: Callable[[dict, int, float], None], libraries: tuple[str, ...] = ()) -> int:
    """A benchmark script's main() after its arguments: the sections named in
    ``args.sections`` (comma-separated; an unknown name is an argument error), run in the
    order of `sections`, each ``fn(args, summary) -> ok``.

    First the machine line, with the cores that the broker and the client processes
    share, and the client libraries' versions: confluent-kafka and librdkafka, then
    ``libraries`` (importable module names, shown as their distributions' versions); one
    of them missing only matters for a ``throughput`` section (exit code 2). SIGTERM
    interrupts as Ctrl-C does (exit code 130, the sections' own clean-up having run).
    Then ``finish(summary, cores, seconds the sections took)`` prints the script's closing
    lines, ``--json PATH`` gets the summary, and the exit code is 0 when every section
    went well, else 1."""
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(chosen) - set(sections)
    if unknown:
        ap.error(f"unknown sections: {sorted(unknown)}")
    interrupt_on_sigterm()

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(machine_line(f"broker + client processes share {cores} cores"))
    try:
        import importlib
        from importlib.metadata import version

        import confluent_kafka

        for name in libraries:
            importlib.import_module(name)
        print(f"confluent-kafka {confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}"
              + "".join(f"; {name.replace('_', '-')} {version(name)}" for name in libraries))
    except ImportError as exc:
        if "throughput" in chosen:
            print(f"{(exc.name or 'confluent_kafka').replace('_', '-')} is not installed: pip install -e '.[bench]'",
                  file=sys.stderr)
            return 2
    summary: dict[str, Any] = {"args": vars(args)}
    t0 = time.monotonic()
    ok = True
    try:
        for name, fn in sections.items():
            if name in chosen:
                ok = fn(args, summary) and ok
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finish(summary, cores, time.monotonic() - t0)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
        print(f"results written to {args.json}")
    return 0 if ok else 1


class BrokerProcess:
    """`python -m odradek broker` on an ephemeral loopback port (as tests/conftest.py starts it).

    `cli_args` go before the `broker` subcommand (e.g. `--log-level WARNING`), `extra` after it."""

    def __init__(self, data_dir: Path, extra: list[str], log_path: Path, cli_args: tuple[str, ...] = ()) -> None:
        self.data_dir, self.extra, self.log_path, self.cli_args = data_dir, extra, log_path, cli_args
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None  # with metrics.listener=HOST:0, the port it took

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
        said = bytearray()
        self.port = wait_for_port(self.proc, timeout, said)
        if self.port is not None:
            self.metrics_port = metrics_port(bytes(said))
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


def stop_broker(proc: BrokerProcess, name: str = "broker") -> bool:
    """Stop a broker subprocess (if it was started) and say how it ended: False, with its
    log's tail printed, when its exit code was not 0; its log's ERROR/Traceback lines, if
    any, are pointed out either way."""
    rc = proc.stop()
    if rc not in (0, None):
        print(f"  {name} exit code {rc}; log tail: {proc.log_tail()}")
    bad = [ln for ln in proc.log_tail(200_000).splitlines() if "ERROR" in ln or "Traceback" in ln]
    if bad:
        print(f"  {name} log: {len(bad)} ERROR/Traceback line(s), first: {bad[0][:300]}")
    return rc in (0, None)


def remove_work(work: Path, keep: bool) -> None:
    """Remove a benchmark's work dir, or say where it is kept (``--keep``)."""
    if keep:
        print(f"  kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


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
