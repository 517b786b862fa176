#!/usr/bin/env python3
"""Rebalance latency with real librdkafka consumers: KIP-848 (group.protocol=consumer) and,
side by side on the same broker, the classic protocol (JoinGroup/SyncGroup); and what
odradek's adaptive heartbeat interval (issue 22, coordinator/consumer/interval.py) changes.

This is a benchmark script, not a test. For every heartbeat interval H in ``--intervals``
(5000 = Kafka's default) it starts fresh ``odradek broker`` subprocesses on 127.0.0.1 with
``-o group.consumer.heartbeat.interval.ms=H -o group.consumer.min.heartbeat.interval.ms=min(R,H)
-o metrics.listener=127.0.0.1:0`` and ``-o group.consumer.reconciling.heartbeat.interval.ms=R``
(adaptive ON: reconciling members are answered R, ``--reconciling-ms``, 250 by default) or
``=0`` (OFF: everyone is answered H, as Kafka does). The min is min(R, H) and not H: the
broker clamps R to at least the min, so a min of H would make the ON broker inert.
``--adaptive`` (default ``on,off``) picks the modes: every measurement runs with each, in
the same run, alternating which goes first, and the summaries show them side by side with
the ratio OFF/ON of the medians. The sections (``--sections``, default ``growth,second``):

``growth``  Rebalance after partition growth. ``--consumers`` librdkafka consumers (one
            process each by default, ``--mode threads`` runs them as threads of one
            process) subscribe to a topic of ``--partitions`` partitions that holds one
            record per partition. Once every partition is assigned (evenly: the group has
            converged) and each partition's record has been consumed, the clock starts;
            the topic is grown to ``--grow-to`` partitions (AdminClient.create_partitions),
            a fresh producer writes one record to every partition of the grown topic, and
            the clock stops when every partition is assigned to some consumer AND a record
            of every new partition has been consumed. Times are CLOCK_MONOTONIC readings
            taken in the consumers' rebalance callbacks and poll loops (the same clock in
            every process), relative to the create_partitions call. The reference: Apache
            Kafka 4.0 needs about 5 s with this protocol (103 s with the classic one),
            consumers polled at 1 s; the goal is < 1 s. ``--repeat`` runs per interval
            and mode, each on a fresh broker; the first run per mode then measures the
            steady-state heartbeat rate of the grown group (below).
``second``  A second consumer joining a busy group. One consumer (a thread of this process)
            subscribes to a topic of ``--second-partitions`` partitions with a record in
            each, gets every partition and consumes the records; H + a random 0..H
            (``--seed``) after its assignment callback, so it has been stable for an
            interval and joins at a random phase of its heartbeat timer, a second consumer
            is constructed. Measured from that construction: the owner's revocation
            callback, (a) the newcomer's first assignment callback with partitions, (b)
            the gap (a) - revocation, and the ConsumerGroupHeartbeats the broker handled
            until both hold their share. ``--second-runs`` runs per mode, a fresh group
            id each, against one broker per mode (both up for the section); run k of
            each mode joins at the same phase. Prints every run, the medians and min-max.
            The last run per mode then measures its pair's steady-state heartbeat rate.
``steady``  (part of growth and second, ``--steady-s``, 0 = off) A stable group's heartbeat
            rate: 2 s after its last rebalance, the broker's /metrics counter
            odradek_requests_total{request="ConsumerGroupHeartbeat"} is read at both ends
            of a ``--steady-s`` window; shown per member per second next to 1/H (the
            extension must not change it).
``join``    (not in the default run) Time from a new consumer's ``Consumer(...)``
            construction to its first record, ``--join-runs`` times, on a topic of ``--join-partitions`` partitions with
            records waiting, in two flavours: an *idle* group (it has committed offsets
            and no members: every run's consumer leaves on close) and a *new* group (a
            fresh group id per run, auto.offset.reset=earliest). The consumer runs in this
            process; the table shows the median and the range, and when the assignment
            arrived (on_assign) on the way. Goal: < 0.5 s.
``protocols`` (not in the default run) The ``growth`` measurement for both group
            protocols against ONE broker process per --adaptive mode (started with
            ``--protocols-heartbeat-ms`` as its KIP-848 heartbeat interval): group A =
            ``--consumers`` consumers with group.protocol=classic,
            partition.assignment.strategy=cooperative-sticky and heartbeat.interval.ms set
            to the same value; group B = as many with group.protocol=consumer. Both set
            topic.metadata.refresh.interval.ms=``--metadata-refresh-ms``: a classic member
            only learns that its topic grew from its own metadata refresh (it then rejoins
            and the others follow on their next heartbeat), a KIP-848 member is told its new
            partitions by the coordinator. Every run uses a fresh topic and group (the topic
            is deleted afterwards), ``--protocols-repeat`` runs per protocol, alternating
            which protocol goes first. Consumer i subscribes i x ``--stagger-ms`` after the
            first (spreading their timers' phases) and the topic grows a random
            0..``--jitter-ms`` after the group converged. Prints every run, the median and
            min-max per protocol, the ratio classic/consumer of the medians, the broker's
            group settings as DescribeConfigs reports them, when the consumers' metadata
            first/last showed the new partition count, and the CPU the broker and the
            clients used.

Consumers use librdkafka's defaults except group.protocol, auto.offset.reset=earliest,
log_level=4 (and enable.auto.commit=false in ``join``; the settings above in
``protocols``); a KIP-848 consumer's heartbeat interval is the broker's to give.
``-C key=value`` adds any librdkafka property (e.g. ``-C fetch.wait.max.ms=100``). They
call ``poll(0.05)`` in a loop (poll returns at once when a record or callback is ready).
The consumers of ``growth`` and ``protocols`` run at nice ``--client-nice`` (default 10)
so that on a small machine the broker, the thing measured, wins the CPU when they contend
(the two of ``second`` at nice 0). Every wait is bounded by ``--timeout`` seconds.

Run:  .venv/bin/python bench/rebalance.py [--intervals 500,5000] [--adaptive on,off] [--consumers 10]
      .venv/bin/python bench/rebalance.py --sections second --intervals 5000 --second-runs 10
      .venv/bin/python bench/rebalance.py --sections protocols --work-dir /dev/shm   # classic vs consumer
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import queue
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typing import Any

from bench_common import BrokerProcess, interrupt_on_sigterm, machine_line, table

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "bench-growth"
JOIN_TOPIC = "bench-join"
SECOND_TOPIC = "bench-second"
ADAPTIVE = ("on", "off")  # odradek's reconciling heartbeat interval (issue 22), --adaptive
SETTLE_S = 2.0  # steady-state rate: rest after the last rebalance before the window opens

# Keep the module's top level light: consumer processes are spawned and re-import it.


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def median_of(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def consumer_conf(bootstrap: str, group: str, extra: dict[str, str], protocol: str = "consumer") -> dict[str, Any]:
    # log_level 4: no NOTICE lines such as "partition count changed" on stderr
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "log_level": 4, **extra}


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one process (all its threads) from /proc, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def med_range(xs: list[float | None]) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "-"


def ordered(modes: tuple[str, ...], k: int) -> tuple[str, ...]:
    """The --adaptive modes in the order run k takes them: alternating which goes first."""
    return modes if k % 2 == 0 else modes[::-1]


def on_off_table(args: argparse.Namespace, rows_in: list[tuple[str, str, dict[str, list]]]) -> None:
    """Rows of (label, quantity, {mode: values}): the median (min-max) per --adaptive mode side
    by side, and the ratio OFF/ON of the medians when both ran."""
    modes = args.adaptive_list
    both = set(modes) == set(ADAPTIVE)
    rows = []
    for label, what, by_mode in rows_in:
        cells = [med_range(by_mode.get(m, [])) for m in modes]
        if both:
            on, off = median_of(by_mode.get("on", [])), median_of(by_mode.get("off", []))
            cells.append(f"{off / on:.2f}x" if on and off is not None else "-")
        rows.append((label, what, *cells))
    table(("heartbeat", "seconds", *(f"{m.upper()} median (min-max)" for m in modes), *(("OFF/ON",) if both else ())),
          rows, left=2)


def parse_kv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[k.strip()] = v.strip()
    return out


# --------------------------------------------------------------------------
# Consumer worker (a process under 'spawn', or a thread)
# --------------------------------------------------------------------------


class _PartitionCountWatch(logging.Handler):
    """librdkafka's log lines (NOTICE and up, through `logger`): reports "Topic T partition
    count changed from A to B" as a 'noticed' event (when this consumer's metadata first
    showed the growth) and passes warnings and errors on to stderr, as log_level=4 would."""

    def __init__(self, idx: int, put: Any) -> None:
        super().__init__(logging.INFO)
        self.idx, self.put = idx, put

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "partition count changed" in msg:
            self.put(("noticed", self.idx, msg, time.monotonic()))
        elif record.levelno >= logging.WARNING:
            print(f"%{record.levelno // 10} bench-{self.idx}: {msg}", file=sys.stderr, flush=True)


def group_consumer(idx: int, conf: dict, topic: str, events: Any, stop: Any, max_s: float, nice: int = 0,
                   watch_metadata: bool = False, start_at: float | None = None) -> None:
    """Subscribe, poll, and report every rebalance callback and every record (partition
    only) as (kind, idx, payload, monotonic time) on `events`.

    `nice` is added to this process's niceness (under --mode threads, on Linux, to this
    thread's; the threads librdkafka starts inherit it). `watch_metadata` reports when
    this consumer's metadata showed a new partition count ('noticed'). `start_at`
    (CLOCK_MONOTONIC, the same in every process) delays creating the consumer, whose
    periodic timers (metadata refresh; KIP-848 heartbeats) take their phase from it."""
    from confluent_kafka import Consumer

    put = events.put
    c = None
    try:
        if nice:
            os.nice(nice)
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.monotonic()))
        extra: dict[str, Any] = {}
        if watch_metadata:
            log = logging.getLogger(f"bench-rebalance-{idx}")
            log.propagate = False
            log.setLevel(logging.INFO)
            log.addHandler(_PartitionCountWatch(idx, put))
            extra = {"logger": log, "log_level": 5}  # the partition count line is a NOTICE
        c = Consumer({**conf, **extra, "client.id": f"bench-{idx}",
                      "error_cb": lambda e: put(("client_error", idx, str(e), time.monotonic()))})

        def cb(kind):
            return lambda _c, parts: put((kind, idx, [p.partition for p in parts], time.monotonic()))

        c.subscribe([topic], on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
        put(("started", idx, None, time.monotonic()))  # when it subscribed
        deadline = time.monotonic() + max_s
        while not stop.is_set() and time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is None:
                continue
            if m.error() is not None:
                put(("msg_error", idx, str(m.error()), time.monotonic()))
                continue
            put(("rec", idx, m.partition(), time.monotonic()))
    except Exception as e:  # noqa: BLE001 - reported to the main process
        put(("crash", idx, f"{type(e).__name__}: {e}", time.monotonic()))
    finally:
        if c is not None:
            try:
                c.close()
            except Exception as e:  # noqa: BLE001
                put(("client_error", idx, f"close: {e}", time.monotonic()))
        put(("closed", idx, None, time.monotonic()))


class Group:
    """The consumers' shared view, folded from their events."""

    def __init__(self, n: int) -> None:
        self.owned: list[set[int]] = [set() for _ in range(n)]
        self.consumed_at: dict[int, float] = {}   # partition -> first record time (since reset)
        self.records = 0
        self.problems: list[str] = []
        self.closed: set[int] = set()
        self.started: set[int] = set()
        self.started_at: dict[int, float] = {}
        self.rebalance_events: list[tuple[float, int, str, int]] = []
        self.noticed_at: dict[int, float] = {}    # consumer -> first "partition count changed" (since reset)

    def apply(self, ev: tuple) -> None:
        kind, idx, payload, t = ev
        if kind == "noticed":
            self.noticed_at.setdefault(idx, t)
        elif kind == "assign":
            for p in payload:
                holder = [i for i, s in enumerate(self.owned) if p in s and i != idx]
                if holder:
                    self.problems.append(f"partition {p} assigned to {idx} while held by {holder}")
            self.owned[idx].update(payload)
            self.rebalance_events.append((t, idx, kind, len(payload)))
        elif kind in ("revoke", "lost"):
            self.owned[idx].difference_update(payload)
            self.rebalance_events.append((t, idx, kind, len(payload)))
        elif kind == "rec":
            self.records += 1
            self.consumed_at.setdefault(payload, t)
        elif kind == "started":
            self.started.add(idx)
            self.started_at[idx] = t
        elif kind == "closed":
            self.closed.add(idx)
        elif kind in ("crash", "msg_error", "client_error") and len(self.problems) < 20:
            self.problems.append(f"consumer {idx} {kind}: {payload}")

    def assigned(self) -> set[int]:
        return set().union(*self.owned)

    def balanced(self) -> bool:
        sizes = [len(s) for s in self.owned]
        return min(sizes) > 0 and max(sizes) - min(sizes) <= 1


def drain(events: Any, group: Group, until: float) -> int:
    """Apply events until `until` (monotonic); returns how many."""
    n = 0
    while True:
        left = until - time.monotonic()
        try:
            ev = events.get(timeout=max(0.0, min(left, 0.05))) if left > 0 else events.get_nowait()
        except queue.Empty:
            return n
        group.apply(ev)
        n += 1


def produce_one_each(bootstrap: str, topic: str, partitions: range, timeout: float) -> int:
    """One record on each partition with a fresh producer (it learns the partition count
    from its own first metadata request). Returns the records acknowledged."""
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ok = [0]
    errors: list[str] = []

    def done(err, _msg):
        if err is None:
            ok[0] += 1
        elif len(errors) < 5:
            errors.append(str(err))

    pending = list(partitions)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        retry = []
        for part in pending:
            try:
                p.produce(topic, value=b"x", partition=part, on_delivery=done)
            except (KafkaException, BufferError):
                retry.append(part)  # partition not in this producer's metadata yet
        if retry:
            p.list_topics(topic, timeout=5)
        pending = retry
        p.poll(0)
    left = p.flush(max(0.1, deadline - time.monotonic()))
    if pending or left or errors:
        raise RuntimeError(f"produce: {len(pending)} not sent, {left} unacknowledged, errors {errors}")
    return ok[0]


def drain_until(events: Any, group: Group, until: float) -> None:
    """Apply events up to `until` (drain returns early once the queue is quiet: loop)."""
    while time.monotonic() < until:
        drain(events, group, until)


# --------------------------------------------------------------------------
# Brokers, and their heartbeat counter
# --------------------------------------------------------------------------


def broker_opts(args: argparse.Namespace, interval_ms: int, adaptive: str) -> list[str]:
    """Heartbeat interval H and odradek's reconciling interval R (issue 22) ON (R) or OFF (0).
    The min interval is min(R, H), not H: the broker clamps R to at least the min, so with
    min = H = 5000 the ON broker would answer 5000 to reconciling members too (the extension
    inert); with min <= R the ON and OFF brokers differ in the reconciling key only."""
    r = args.reconciling_ms
    return ["-o", f"group.consumer.heartbeat.interval.ms={interval_ms}",
            "-o", f"group.consumer.min.heartbeat.interval.ms={min(r, interval_ms)}",
            "-o", f"group.consumer.reconciling.heartbeat.interval.ms={r if adaptive == 'on' else 0}",
            "-o", "metrics.listener=127.0.0.1:0", *args.broker_extra]


def start_broker(args: argparse.Namespace, interval_ms: int, adaptive: str, name: str) -> tuple[BrokerProcess, Path]:
    work = Path(tempfile.mkdtemp(prefix=f"bench-rebalance-{name}-", dir=args.work_dir))
    try:
        return BrokerProcess(work / "data", broker_opts(args, interval_ms, adaptive), work / "broker.log").start(), work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def finish_broker(args: argparse.Namespace, broker: BrokerProcess, work: Path) -> str | None:
    """Stop a broker and remove its work dir (--keep-logs: say where it is); a note when it
    exited badly or logged a traceback."""
    rc = broker.stop()
    log = broker.log_tail(100_000)
    if args.keep_logs:
        print(f"   broker work dir kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return f"broker exit code {rc}; log tail: {log[-1500:]}" if rc not in (0, None) or "Traceback" in log else None


def heartbeats_sent(broker: BrokerProcess) -> float:
    """ConsumerGroupHeartbeat requests the broker has handled: its /metrics counter
    odradek_requests_total{request="ConsumerGroupHeartbeat"} summed over the versions."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    if broker.metrics_port is None:
        raise RuntimeError("the broker did not say its /metrics port")
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "odradek_requests_total" and s.labels.get("request") == "ConsumerGroupHeartbeat")


def steady_rate(broker: BrokerProcess, events: Any, group: Group, window_s: float,
                tags: dict[str, Any]) -> dict[str, Any]:
    """Heartbeats per member per second of a stable group (every member of `group`) over a
    quiet window of `window_s`, after SETTLE_S of rest; its events are drained meanwhile."""
    out: dict[str, Any] = {**tags, "members": len(group.owned)}
    try:
        drain_until(events, group, time.monotonic() + SETTLE_S)
        callbacks = len(group.rebalance_events)
        n0, t0 = heartbeats_sent(broker), time.monotonic()
        drain_until(events, group, t0 + window_s)
        n1, t1 = heartbeats_sent(broker), time.monotonic()
    except Exception as e:  # noqa: BLE001 - the table says so
        return {**out, "error": f"{type(e).__name__}: {e}"}
    moved = len(group.rebalance_events) - callbacks
    return {**out, "window_s": t1 - t0, "heartbeats": n1 - n0, "rate": (n1 - n0) / out["members"] / (t1 - t0),
            "error": f"not stable: {moved} rebalance callbacks in the window" if moved else None}


# --------------------------------------------------------------------------
# growth
# --------------------------------------------------------------------------


def cpu_snapshot(broker: BrokerProcess, workers: list, mode: str) -> tuple[float | None, float]:
    """(broker CPU s, client CPU s): the client side is this process (admin client,
    producer, and the consumers under --mode threads) plus the consumer processes."""
    t = os.times()
    clients = t.user + t.system
    if mode == "processes":
        clients += sum(proc_cpu_s(w.pid) or 0.0 for w in workers if w.pid is not None)
    return proc_cpu_s(broker.pid), clients


def run_growth(args: argparse.Namespace, broker: BrokerProcess, *, topic: str, conf: dict[str, Any],
               tags: dict[str, Any], watch_metadata: bool = False, pre_delay: float = 0.0,
               stagger: float = 0.0, steady_s: float = 0.0) -> dict[str, Any]:
    """One growth measurement: `args.consumers` consumers with `conf` on a new `topic`;
    consumer i subscribes `i * stagger` seconds after the first (0: as soon as each is up);
    the topic grows `pre_delay` seconds after the group has converged (+ 0.2 s). With
    `steady_s`, the grown group's heartbeat rate is measured afterwards ("steady")."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    res: dict[str, Any] = {**tags, "status": "failed"}
    bootstrap = broker.bootstrap
    adm = AdminClient({"bootstrap.servers": bootstrap})
    adm.create_topics([NewTopic(topic, args.partitions, 1)], operation_timeout=10)[topic].result(args.timeout)
    produce_one_each(bootstrap, topic, range(args.partitions), args.timeout)

    n = args.consumers
    # with a stagger, every consumer waits for its turn; the first turn leaves time to start them all
    base = time.monotonic() + (1.0 + 0.15 * n if args.mode == "processes" else 0.5) if stagger > 0 else None
    if args.mode == "processes":
        ctx = mp.get_context("spawn")
        events, stop = ctx.Queue(), ctx.Event()
        make_worker: Any = ctx.Process
    else:
        events, stop = queue.Queue(), threading.Event()
        make_worker = threading.Thread
    workers = [make_worker(target=group_consumer, name=f"bench-consumer-{i}", daemon=True,
                           args=(i, conf, topic, events, stop, args.timeout * 4 + steady_s, args.client_nice,
                                 watch_metadata,
                                 None if base is None else base + i * stagger))
               for i in range(n)]
    group = Group(n)
    t_start = time.monotonic()
    for w in workers:
        w.start()
    try:
        # 1) converge: all partitions assigned evenly and every record consumed
        deadline = t_start + args.timeout
        while time.monotonic() < deadline:
            drain(events, group, time.monotonic() + 0.1)
            if (len(group.started) == n and group.assigned() == set(range(args.partitions)) and group.balanced()
                    and len(group.consumed_at) == args.partitions):
                break
            if not broker.alive():
                res["error"] = f"broker died: {broker.log_tail()}"
                return res
        else:
            res["error"] = (f"initial convergence timed out: {len(group.started)}/{n} started, "
                            f"{len(group.assigned())}/{args.partitions} assigned, sizes "
                            f"{[len(s) for s in group.owned]}, {len(group.consumed_at)} partitions consumed; "
                            f"{group.problems[:3]}")
            return res
        res["converge_s"] = time.monotonic() - t_start
        first = min(group.started_at.values())
        res["start_offsets_s"] = [group.started_at[i] - first for i in sorted(group.started_at)]
        # let trailing callbacks land, so nothing from the first rebalance is counted below
        # (drain returns once the queue has been quiet for 50 ms: loop to the end)
        drain_until(events, group, time.monotonic() + 0.2 + pre_delay)
        group.consumed_at.clear()
        group.rebalance_events.clear()
        group.noticed_at.clear()
        before = [len(s) for s in group.owned]

        # 2) grow, produce, and wait for every partition to be assigned and consumed
        new = range(args.partitions, args.grow_to)
        cpu0 = cpu_snapshot(broker, workers, args.mode)
        t0 = time.monotonic()
        adm.create_partitions([NewPartitions(topic, args.grow_to)], operation_timeout=10)[topic].result(args.timeout)
        res["create_s"] = time.monotonic() - t0
        produce_one_each(bootstrap, topic, range(args.grow_to), args.timeout)
        res["produced_s"] = time.monotonic() - t0
        everything = set(range(args.grow_to))
        t_assigned = None
        deadline = t0 + args.timeout
        while time.monotonic() < deadline:
            drain(events, group, time.monotonic() + 0.05)
            if group.assigned() == everything:
                # events from different processes may arrive out of order: the latest assign
                # callback since the growth that handed out partitions is when the last one was
                # (an empty one, e.g. a classic no-op rebalance, hands out nothing)
                t_assigned = max(t for t, _, kind, k in group.rebalance_events if kind == "assign" and k)
            else:
                t_assigned = None  # something was taken away again
            if t_assigned is not None and all(p in group.consumed_at for p in new):
                t_done = time.monotonic()
                cpu1 = cpu_snapshot(broker, workers, args.mode)
                break
        else:
            missing = len([p for p in new if p not in group.consumed_at])
            res["error"] = (f"timed out after {args.timeout:g} s: {len(group.assigned())}/{args.grow_to} assigned, "
                            f"{missing} new partitions not consumed yet; {group.problems[:3]}")
            return res
        res["assigned_s"] = t_assigned - t0
        res["consumed_s"] = max(group.consumed_at[p] for p in new) - t0
        res["total_s"] = max(res["assigned_s"], res["consumed_s"])
        first_assign = [t for t, _, kind, k in group.rebalance_events if kind == "assign" and k]
        res["first_assign_s"] = min(first_assign) - t0 if first_assign else None
        # the last on_assign of all, an empty one included (a classic rebalance that changed nothing)
        res["settled_s"] = max(t for t, _, kind, _ in group.rebalance_events if kind == "assign") - t0
        res["callbacks"] = {k: sum(1 for e in group.rebalance_events if e[2] == k) for k in ("assign", "revoke", "lost")}
        # on_assign calls per consumer (an empty incremental assignment included): how many
        # assignments each member went through after the growth
        per = [sum(1 for e in group.rebalance_events if e[1] == i and e[2] == "assign") for i in range(n)]
        res["assigns_per_consumer"] = (min(per), max(per))
        noticed = sorted(group.noticed_at.values())
        res["noticed_first_s"] = noticed[0] - t0 if noticed else None
        res["noticed_last_s"] = noticed[-1] - t0 if noticed else None
        res["noticed_n"] = len(noticed)
        wall = t_done - t0
        res["timeline"] = sorted([(t - t0, i, kind, k) for t, i, kind, k in group.rebalance_events]
                                 + [(t - t0, i, "noticed", args.grow_to) for i, t in group.noticed_at.items()])
        res["cpu_window_s"] = wall
        res["broker_cpu"] = (cpu1[0] - cpu0[0]) / wall if cpu0[0] is not None and cpu1[0] is not None else None
        res["clients_cpu"] = (cpu1[1] - cpu0[1]) / wall
        res["sizes_before"] = before
        res["sizes_after"] = [len(s) for s in group.owned]
        res["problems"] = group.problems[:5]
        res["status"] = "ok"
        if steady_s > 0:
            res["steady"] = steady_rate(broker, events, group, steady_s, {"section": "growth", **tags})
        return res
    finally:
        stop.set()
        t_end = time.monotonic() + 20
        while len(group.closed) < n and time.monotonic() < t_end:
            drain(events, group, time.monotonic() + 0.2)
        for w in workers:
            w.join(timeout=max(0.1, t_end - time.monotonic()))
            if args.mode == "processes" and w.is_alive():
                w.terminate()


# --------------------------------------------------------------------------
# join
# --------------------------------------------------------------------------


def time_first_record(conf: dict, topic: str, timeout: float) -> tuple[float | None, float | None, str | None]:
    """Consumer(...) -> first record: (seconds to first record, seconds to on_assign, error)."""
    from confluent_kafka import Consumer

    assigned: list[float] = []
    errors: list[str] = []
    t0 = time.monotonic()
    c = Consumer({**conf, "error_cb": lambda e: errors.append(str(e))})
    try:
        c.subscribe([topic], on_assign=lambda _c, _p: assigned.append(time.monotonic()))
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error() is not None:
                errors.append(str(m.error()))
                continue
            t1 = time.monotonic()
            return t1 - t0, (assigned[0] - t0) if assigned else None, None
        return None, (assigned[0] - t0) if assigned else None, f"no record within {timeout:g} s; {errors[:3]}"
    finally:
        c.close()  # leaves the group (epoch -1): it is idle again for the next run


def run_join(args: argparse.Namespace, broker: BrokerProcess, interval_ms: int, adaptive: str) -> list[dict[str, Any]]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = broker.bootstrap
    adm = AdminClient({"bootstrap.servers": bootstrap})
    adm.create_topics([NewTopic(JOIN_TOPIC, args.join_partitions, 1)], operation_timeout=10)[JOIN_TOPIC].result(args.timeout)
    for _ in range(args.join_records):
        produce_one_each(bootstrap, JOIN_TOPIC, range(args.join_partitions), args.timeout)

    # the idle group: a member joins once, commits offset 0 everywhere, and leaves
    idle = f"bench-idle-{interval_ms}"
    conf = consumer_conf(bootstrap, idle, {"enable.auto.commit": "false", **args.consumer_extra})
    c = Consumer(conf)
    try:
        got: list[int] = []
        c.subscribe([JOIN_TOPIC], on_assign=lambda _c, parts: got.extend(p.partition for p in parts))
        deadline = time.monotonic() + args.timeout
        while len(got) < args.join_partitions and time.monotonic() < deadline:
            c.poll(0.1)
        c.commit(offsets=[TopicPartition(JOIN_TOPIC, p, 0) for p in range(args.join_partitions)], asynchronous=False)
    finally:
        c.close()

    out = []
    for flavour in ("idle", "new"):
        runs = []
        for r in range(args.join_runs):
            time.sleep(args.join_pause)
            gid = idle if flavour == "idle" else f"bench-new-{interval_ms}-{r}"
            conf = consumer_conf(bootstrap, gid, {"enable.auto.commit": "false", **args.consumer_extra})
            first, assigned, err = time_first_record(conf, JOIN_TOPIC, args.timeout)
            runs.append({"first_s": first, "assign_s": assigned, "error": err})
        out.append({"interval_ms": interval_ms, "adaptive": adaptive, "flavour": flavour, "runs": runs})
    return out


# --------------------------------------------------------------------------
# second: a second consumer joins a busy group
# --------------------------------------------------------------------------


def second_run(args: argparse.Namespace, broker: BrokerProcess, gid: str, phase_s: float, interval_s: float,
               steady_s: float) -> dict[str, Any]:
    """Consumer 0 takes every partition of SECOND_TOPIC and consumes its records; consumer 1
    is constructed `interval_s + phase_s` after 0's assignment callback; both are threads
    of this process. With `steady_s`, the pair's heartbeat rate is measured afterwards."""
    n = args.second_partitions
    everything = set(range(n))
    conf = consumer_conf(broker.bootstrap, gid, args.consumer_extra)
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    group = Group(2)
    res: dict[str, Any] = {"status": "failed", "phase_s": phase_s}
    max_s = 3 * args.timeout + interval_s + phase_s + SETTLE_S + steady_s

    def launch(i: int) -> threading.Thread:
        th = threading.Thread(target=group_consumer, name=f"bench-second-{i}", daemon=True,
                              args=(i, conf, SECOND_TOPIC, events, stop, max_s))
        th.start()
        return th

    threads = [launch(0)]
    try:
        deadline = time.monotonic() + args.timeout
        while group.owned[0] != everything or len(group.consumed_at) < n:
            if time.monotonic() > deadline:
                res["error"] = (f"first consumer: {len(group.owned[0])}/{n} assigned, {len(group.consumed_at)} "
                                f"consumed after {args.timeout:g} s; {group.problems[:3]}")
                return res
            drain(events, group, time.monotonic() + 0.05)
        t_owner = max(t for t, i, kind, k in group.rebalance_events if i == 0 and kind == "assign" and k)
        drain_until(events, group, t_owner + interval_s + phase_s)
        hb0 = heartbeats_sent(broker)
        t_join = time.monotonic()
        threads.append(launch(1))
        deadline = t_join + args.timeout
        while not (group.assigned() == everything and group.balanced()):
            if time.monotonic() > deadline:
                res["error"] = (f"not rebalanced {args.timeout:g} s after the join: sizes "
                                f"{[len(o) for o in group.owned]}; {group.problems[:3]}")
                return res
            drain(events, group, time.monotonic() + 0.05)
        res["heartbeats"] = heartbeats_sent(broker) - hb0
        after = [(t - t_join, i, kind) for t, i, kind, k in group.rebalance_events if t >= t_join and k]
        res["assign_s"] = min(t for t, i, kind in after if i == 1 and kind == "assign")
        revoked = [t for t, i, kind in after if i == 0 and kind in ("revoke", "lost")]
        res["revoke_s"] = min(revoked) if revoked else None
        res["gap_s"] = res["assign_s"] - res["revoke_s"] if revoked else None
        res["settled_s"] = max(t for t, _, _ in after)
        res["sizes"] = [len(o) for o in group.owned]
        res["problems"] = group.problems[:3]
        res["status"] = "ok"
        if steady_s > 0:
            res["steady"] = steady_rate(broker, events, group, steady_s, {"section": "second"})
        return res
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=20)


def run_second(args: argparse.Namespace, interval_ms: int) -> list[dict[str, Any]]:
    """`args.second_runs` runs per --adaptive mode at one heartbeat interval: one broker per
    mode, both up for the whole section; run k alternates which mode goes first, and both
    modes' run k join at the same random phase. The last run of each mode ends with the
    steady-state rate of its two members."""
    from confluent_kafka.admin import AdminClient, NewTopic

    interval_s = interval_ms / 1000
    rng = random.Random(args.seed + interval_ms)
    phases = [rng.uniform(0, interval_s) for _ in range(args.second_runs)]
    brokers: dict[str, tuple[BrokerProcess, Path]] = {}
    out: list[dict[str, Any]] = []
    try:
        for mode in args.adaptive_list:
            brokers[mode] = start_broker(args, interval_ms, mode, f"second-{interval_ms}-{mode}")
            bootstrap = brokers[mode][0].bootstrap
            adm = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
            fut = adm.create_topics([NewTopic(SECOND_TOPIC, args.second_partitions, 1)], operation_timeout=10)
            fut[SECOND_TOPIC].result(args.timeout)
            produce_one_each(bootstrap, SECOND_TOPIC, range(args.second_partitions), args.timeout)
            adm = None
        for k, phase in enumerate(phases):
            for mode in ordered(args.adaptive_list, k):
                tags = {"interval_ms": interval_ms, "adaptive": mode, "run": k + 1}
                print(f"\n-- heartbeat interval {interval_ms} ms, adaptive {mode.upper()}: second run {k + 1}/"
                      f"{args.second_runs}, joins {interval_ms} + {1000 * phase:.0f} ms after the first's "
                      f"assignment ...", flush=True)
                try:
                    r = second_run(args, brokers[mode][0], f"bench-second-{interval_ms}-{mode}-{k + 1}", phase,
                                   interval_s, args.steady_s if k == args.second_runs - 1 else 0.0)
                except Exception as e:  # noqa: BLE001 - one failed run does not end the section
                    r = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
                r.update(tags)
                if r.get("steady"):
                    r["steady"].update(tags)
                out.append(r)
                if r["status"] == "ok":
                    print(f"   owner revoked {fmt_s(r['revoke_s'])} s after the join, the newcomer's first partitions "
                          f"{r['assign_s']:.3f} s after it (gap {fmt_s(r['gap_s'])} s), {r['heartbeats']:.0f} "
                          f"heartbeats meanwhile", flush=True)
                else:
                    print(f"   FAILED: {r.get('error')}", flush=True)
        return out
    finally:
        for mode, (broker, work) in brokers.items():
            note = finish_broker(args, broker, work)
            if note:
                out.append({"status": "failed", "interval_ms": interval_ms, "adaptive": mode, "run": 0,
                            "error": note})


def print_second(args: argparse.Namespace, runs: list[dict[str, Any]]) -> bool:
    """The second tables; returns False when a run failed."""
    print(f"\n== second: a KIP-848 consumer joins a group of one that owns all {args.second_partitions} partitions "
          f"(a record each) and has been stable for one heartbeat interval H; it joins H + a random 0..H (seed "
          f"{args.seed}) after the owner's assignment; seconds after the newcomer's Consumer(...) ==")
    rows = []
    for r in runs:
        label = (f"{r['interval_ms']} ms", r["adaptive"].upper(), f"#{r['run']}")
        if r["status"] != "ok":
            rows.append((*label, "FAILED", *[""] * 6))
            continue
        rows.append((*label, f"{1000 * r['phase_s']:.0f}", fmt_s(r["revoke_s"]), fmt_s(r["assign_s"]),
                     fmt_s(r["gap_s"]), fmt_s(r["settled_s"]), f"{r['heartbeats']:.0f}",
                     "/".join(str(x) for x in r["sizes"])))
    table(("heartbeat", "adaptive", "run", "phase ms", "owner revoked", "(a) newcomer assigned", "(b) gap",
           "last callback", "heartbeats", "split"), rows, left=3)
    print("  ('phase' = the random part of the join's delay; 'owner revoked' = its on_revoke; (a) = the newcomer's "
          "first on_assign with partitions; (b) = (a) - owner revoked; 'heartbeats' = ConsumerGroupHeartbeats "
          "the broker handled from the join until both were seen holding their share)")
    ok = [r for r in runs if r["status"] == "ok"]
    summary = []
    for interval in args.interval_list:
        for key, what in (("revoke_s", "owner revoked"), ("assign_s", "(a) newcomer assigned"), ("gap_s", "(b) gap")):
            summary.append((f"{interval} ms", what, {m: [r[key] for r in ok if r["interval_ms"] == interval
                                                         and r["adaptive"] == m] for m in args.adaptive_list}))
    print()
    on_off_table(args, summary)
    for r in runs:
        for prob in r.get("problems") or []:
            print(f"  ! {r['interval_ms']} ms {r['adaptive']} #{r['run']}: {prob}")
    return len(ok) == len(runs)


def print_steady(args: argparse.Namespace, rates: list[dict[str, Any]]) -> bool:
    print(f"\n== steady state: ConsumerGroupHeartbeat requests per member per second of a stable group, from the "
          f"broker's /metrics, over {args.steady_s:g} s starting {SETTLE_S:g} s after its last rebalance ==")
    rows = []
    for r in rates:
        expected = 1000 / r["interval_ms"]
        rows.append((r["section"], f"{r['interval_ms']} ms", r["adaptive"].upper(), str(r["members"]),
                     fmt_s(r.get("window_s")), "-" if r.get("heartbeats") is None else f"{r['heartbeats']:.0f}",
                     "-" if r.get("rate") is None else f"{r['rate']:.3f}", f"{expected:.3f}",
                     "-" if r.get("rate") is None else f"{r['rate'] / expected:.2f}", r.get("error") or ""))
    table(("group", "heartbeat", "adaptive", "members", "window s", "heartbeats", "per member per s", "1/H",
           "ratio", "note"), rows, left=3)
    return all(r.get("error") is None for r in rates)


# --------------------------------------------------------------------------
# protocols: classic (cooperative-sticky) vs consumer, same broker
# --------------------------------------------------------------------------

PROTOCOLS = ("classic", "consumer")
# broker settings that bear on the comparison, read back with DescribeConfigs
BROKER_GROUP_KEYS = ("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
                     "group.consumer.reconciling.heartbeat.interval.ms",
                     "group.consumer.session.timeout.ms", "group.consumer.assignors",
                     "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms",
                     "group.max.session.timeout.ms")
# librdkafka defaults that bear on it, shown when -C does not set them
CLIENT_DEFAULTS = {"classic": {"session.timeout.ms": "45000", "max.poll.interval.ms": "300000 (= rebalance timeout)",
                               "fetch.wait.max.ms": "500"},
                   "consumer": {"fetch.wait.max.ms": "500"}}


def protocol_settings(args: argparse.Namespace, protocol: str) -> dict[str, str]:
    """The librdkafka properties the protocols section sets for one group (beyond consumer_conf's)."""
    out = {"topic.metadata.refresh.interval.ms": str(args.metadata_refresh_ms)}
    if protocol == "classic":
        out.update({"partition.assignment.strategy": "cooperative-sticky",
                    "heartbeat.interval.ms": str(args.protocols_heartbeat_ms)})
    return {**out, **args.consumer_extra}


def broker_group_settings(bootstrap: str, timeout: float) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    adm = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    try:
        node = next(iter(adm.list_topics(timeout=timeout).brokers))
        fut = adm.describe_configs([ConfigResource(ResourceType.BROKER, str(node))])
        entries = next(iter(fut.values())).result(timeout)
        return {k: entries[k].value for k in BROKER_GROUP_KEYS if k in entries}
    except Exception as e:  # noqa: BLE001 - the conditions line then says so
        return {"(DescribeConfigs failed)": f"{type(e).__name__}: {e}"}


def run_protocols(args: argparse.Namespace, adaptive: str) -> dict[str, Any]:
    """Both protocols, `args.protocols_repeat` runs each, against one broker process (with
    odradek's reconciling heartbeat interval `adaptive`: on/off)."""
    from confluent_kafka.admin import AdminClient

    out: dict[str, Any] = {"runs": [], "broker": {}, "notes": [], "adaptive": adaptive}
    hb = args.protocols_heartbeat_ms
    out["broker_cli"] = " ".join(broker_opts(args, hb, adaptive))
    broker, work = start_broker(args, hb, adaptive, f"protocols-{adaptive}")
    out["data_dir"] = str(work / "data")
    # The consumers' heartbeats and metadata refreshes keep the phase they had when the group
    # formed, and the growth would otherwise follow convergence at a fixed delay: a random
    # wait samples that phase, so the runs average over it instead of repeating one case.
    rng = random.Random(args.seed)
    try:
        out["broker"] = broker_group_settings(broker.bootstrap, args.timeout)
        adm = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
        for rep in range(args.protocols_repeat):
            for protocol in (args.protocol_list if rep % 2 == 0 else args.protocol_list[::-1]):
                name = f"bench-{protocol}-{rep + 1}"
                print(f"\n-- protocols (adaptive {adaptive.upper()}): {protocol} run {rep + 1}/"
                      f"{args.protocols_repeat}: {args.consumers} consumers ({args.mode}), {args.partitions} -> "
                      f"{args.grow_to} partitions ...", flush=True)
                conf = consumer_conf(broker.bootstrap, name, protocol_settings(args, protocol), protocol=protocol)
                tags = {"protocol": protocol, "rep": rep + 1, "pre_delay_s": rng.uniform(0, args.jitter_s)}
                try:
                    r = run_growth(args, broker, topic=name, conf=conf, tags=tags, watch_metadata=True,
                                   pre_delay=tags["pre_delay_s"], stagger=args.stagger_s)
                except Exception as e:  # noqa: BLE001 - one failed run does not end the section
                    r = {**tags, "status": "failed", "error": f"{type(e).__name__}: {e}"}
                out["runs"].append(r)
                if r["status"] == "ok":
                    print(f"   converged in {r['converge_s']:.1f} s; after create_partitions: metadata showed it "
                          f"{fmt_s(r['noticed_first_s'])}-{fmt_s(r['noticed_last_s'])} s, first new assignment "
                          f"{fmt_s(r['first_assign_s'])} s, all assigned {r['assigned_s']:.3f} s, all new consumed "
                          f"{r['consumed_s']:.3f} s", flush=True)
                else:
                    print(f"   FAILED: {r.get('error')}", flush=True)
                if not broker.alive():
                    out["notes"].append(f"broker died: {broker.log_tail()}")
                    return out
                try:  # the broker keeps the same state from run to run: no 1,000-partition topics pile up
                    adm.delete_topics([name], operation_timeout=10)[name].result(args.timeout)
                except Exception as e:  # noqa: BLE001
                    out["notes"].append(f"delete {name}: {type(e).__name__}: {e}")
                time.sleep(args.settle)
        return out
    finally:
        adm = None  # destroyed before the broker goes, or it logs the disconnect
        note = finish_broker(args, broker, work)
        if note:
            out["notes"].append(note)


def stagger_range(runs: list[dict[str, Any]]) -> str:
    lasts = [max(r["start_offsets_s"]) for r in runs if r.get("start_offsets_s")]
    return f"{min(lasts):.2f}-{max(lasts):.2f} s" if lasts else "-"


def print_protocols(args: argparse.Namespace, out: dict[str, Any]) -> bool:
    """The protocols tables; returns False when a run failed."""
    hb, refresh = args.protocols_heartbeat_ms, args.metadata_refresh_ms
    print(f"\n== protocols, adaptive {out['adaptive'].upper()}: classic (cooperative-sticky) vs consumer (KIP-848), "
          f"one broker process, {args.consumers} consumers per group ({args.mode}), topic {args.partitions} -> {args.grow_to} partitions, "
          f"one record produced to every partition after growing; seconds from the create_partitions call ==")
    print("  conditions:")
    print(f"    broker: odradek broker --data-dir {out.get('data_dir')} --listen 127.0.0.1:0 {out.get('broker_cli', '')}")
    print("    broker group settings (DescribeConfigs): "
          + "  ".join(f"{k}={v}" for k, v in out["broker"].items()))
    for protocol in args.protocol_list:
        explicit = {"group.protocol": protocol, "auto.offset.reset": "earliest",
                    **protocol_settings(args, protocol)}
        defaults = {k: v for k, v in CLIENT_DEFAULTS[protocol].items() if k not in explicit}
        print(f"    {protocol} consumers: " + " ".join(f"{k}={v}" for k, v in explicit.items())
              + ("; librdkafka defaults: " + " ".join(f"{k}={v}" for k, v in defaults.items()) if defaults else "")
              + ("; heartbeat interval and session timeout come from the broker" if protocol == "consumer" else ""))
    print(f"    consumers at nice +{args.client_nice} ({args.mode}), poll(0.05) loop; the broker at nice 0. Every "
          f"run: fresh topic and group, deleted afterwards; the protocols alternate which goes first; consumer i "
          f"subscribes i x {args.stagger_s * 1000:.0f} ms after the first (achieved: last one after "
          f"{stagger_range(out['runs'])}); the topic grows 0.2 s + a random 0-{args.jitter_s * 1000:.0f} ms "
          f"(seed {args.seed}) after the group converged.")
    runs = out["runs"]
    rows = []
    keys = ("create_s", "produced_s", "noticed_first_s", "noticed_last_s", "first_assign_s", "assigned_s",
            "consumed_s", "total_s", "settled_s")
    for r in runs:
        label = (r["protocol"], f"#{r['rep']}")
        if r["status"] != "ok":
            rows.append((*label, "FAILED", *[""] * (len(keys) + 3)))
            continue
        lo, hi = r["assigns_per_consumer"]
        rows.append((*label, *(fmt_s(r[k]) for k in keys), f"{lo}-{hi}" if lo != hi else str(lo),
                     str(r["callbacks"]["lost"]),
                     "-" if r["broker_cpu"] is None else f"{100 * r['broker_cpu']:.0f}%",
                     f"{100 * r['clients_cpu']:.0f}%"))
    table(("protocol", "run", "create done", "produced", "1st noticed", "last noticed", "1st assign", "all assigned",
           "all consumed", "TOTAL", "last on_assign", "on_assign/consumer", "lost", "broker CPU", "clients CPU"),
          rows, left=2)
    print(f"  (TOTAL = max(all assigned, all consumed); 'noticed' = a consumer's metadata showed the new partition "
          f"count (librdkafka's \"partition count changed\" notice, seen at its next poll); 'all assigned' = the "
          f"last on_assign that handed out partitions; 'last on_assign' = the last one of all, an empty one "
          f"included; 'on_assign/consumer' = on_assign calls per member after the growth (2 = a second rebalance); CPU in % of one core over the measured window (2 cores = 200%); 'clients' = "
          f"the {args.consumers} consumer processes + this process (admin client, producer))")

    ok = {p: [r for r in runs if r["protocol"] == p and r["status"] == "ok"] for p in args.protocol_list}
    summary = []
    med: dict[tuple[str, str], float | None] = {}
    cols = (("assigned_s", "all assigned"), ("consumed_s", "all consumed"), ("total_s", "TOTAL"))
    for p in args.protocol_list:
        cells = []
        for key, _ in cols:
            xs = [r[key] for r in ok[p]]
            med[p, key] = statistics.median(xs) if xs else None
            cells.append(f"{med[p, key]:.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "-")
        n_p = sum(1 for r in runs if r["protocol"] == p)
        summary.append((p, *cells, f"{len(ok[p])}/{n_p}"))
    if len(args.protocol_list) == 2:
        ratio = []
        for key, _ in cols:
            a, b = med["classic", key], med["consumer", key]
            ratio.append(f"{a / b:.2f}x" if a is not None and b else "-")
        summary.append(("ratio classic/consumer", *ratio, ""))
    print(f"\n  median (min-max) of {args.protocols_repeat} runs per protocol; heartbeat interval {hb} ms for both, "
          f"topic.metadata.refresh.interval.ms={refresh} for both:")
    table(("protocol", *(c for _, c in cols), "ok runs"), summary)
    if args.timeline:
        print("\n  timelines: seconds after create_partitions, consumer: event (partitions in the callback)")
        for r in runs:
            if r["status"] == "ok":
                print(f"    {r['protocol']} #{r['rep']} (random wait {1000 * r['pre_delay_s']:.0f} ms): " + ", ".join(
                    f"{t:.3f} {i}:{kind}" + (f"({k})" if kind != "noticed" else "") for t, i, kind, k in r["timeline"]))
    for r in runs:
        for prob in r.get("problems") or []:
            print(f"  ! {r['protocol']} #{r['rep']}: {prob}")
    for note in out["notes"]:
        print(f"  ! {note}")
    return all(len(ok[p]) == sum(1 for r in runs if r["protocol"] == p) for p in args.protocol_list) and not out["notes"]


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Rebalance latency (KIP-848 and classic) with librdkafka consumers over loopback.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="growth,second", help="comma list of: growth, second, join, protocols")
    ap.add_argument("--intervals", default="500,5000",
                    help="broker heartbeat intervals in ms (comma list; 5000 = Kafka's default)")
    ap.add_argument("--adaptive", default=",".join(ADAPTIVE),
                    help="odradek's reconciling heartbeat interval (issue 22) on and/or off: every measurement runs "
                         "with each, in the same run, alternating which goes first")
    ap.add_argument("--reconciling-ms", type=int, default=250,
                    help="ON: group.consumer.reconciling.heartbeat.interval.ms (every broker gets "
                         "group.consumer.min.heartbeat.interval.ms=min(this, H))")
    ap.add_argument("--second-runs", type=int, default=6, help="second: runs per --adaptive mode and interval")
    ap.add_argument("--second-partitions", type=int, default=12, help="second: partitions of its topic")
    ap.add_argument("--steady-s", type=float, default=15.0,
                    help="growth (first run per mode), second (last run per mode): seconds of the steady-state "
                         "heartbeat rate window (0 = skip)")
    ap.add_argument("--consumers", type=int, default=10, help="growth: consumers in the group")
    ap.add_argument("--mode", choices=("processes", "threads"), default="processes",
                    help="growth: one process per consumer, or threads of this process")
    ap.add_argument("--partitions", type=int, default=100, help="growth: partitions before growing")
    ap.add_argument("--grow-to", type=int, default=1000, help="growth: partitions after growing")
    ap.add_argument("--repeat", type=int, default=3,
                    help="growth: runs per interval and --adaptive mode (fresh broker each)")
    ap.add_argument("--join-partitions", type=int, default=10, help="join: partitions of the topic")
    ap.add_argument("--join-records", type=int, default=10, help="join: records waiting per partition")
    ap.add_argument("--join-runs", type=int, default=5, help="join: runs per flavour (median shown)")
    ap.add_argument("--join-pause", type=float, default=0.3, help="join: seconds between runs")
    ap.add_argument("--protocols-repeat", type=int, default=5, help="protocols: runs per protocol (one broker)")
    ap.add_argument("--protocols-heartbeat-ms", type=int, default=1000,
                    help="protocols: heartbeat interval of both groups (classic: heartbeat.interval.ms; consumer: "
                         "the broker's group.consumer.heartbeat.interval.ms)")
    ap.add_argument("--metadata-refresh-ms", type=int, default=1000,
                    help="protocols: topic.metadata.refresh.interval.ms of both groups' consumers")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="protocols: which group protocols to run")
    ap.add_argument("--timeline", action="store_true",
                    help="protocols: print every run's rebalance callbacks and metadata notices")
    ap.add_argument("--jitter-ms", type=int, default=-1,
                    help="protocols: the topic grows a random 0..J ms after the group converged "
                         "[-1 = max(heartbeat, metadata refresh interval)]")
    ap.add_argument("--seed", type=int, default=848, help="protocols, second: seed of their random waits")
    ap.add_argument("--stagger-ms", type=int, default=-1,
                    help="protocols: consumer i subscribes i*S ms after the first, which spreads the phases of "
                         "their metadata refreshes (and KIP-848 heartbeats) over the interval; 0 = all at once "
                         "[-1 = metadata refresh interval / consumers]")
    ap.add_argument("--settle", type=float, default=0.5, help="protocols: seconds of rest between runs")
    ap.add_argument("--client-nice", type=int, default=10,
                    help="growth, protocols: niceness added to the consumers (0 = none)")
    ap.add_argument("-O", "--broker-option", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker property, passed as -o KEY=VALUE to every broker (repeatable)")
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds: limit of every wait")
    ap.add_argument("-C", "--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka consumer property (repeatable)")
    ap.add_argument("--work-dir", help="parent of the brokers' temp data dirs (e.g. /dev/shm for tmpfs) [None = the system temp dir]")
    ap.add_argument("--keep-logs", action="store_true", help="keep the brokers' work dirs and logs")
    args = ap.parse_args(argv)
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    if set(args.section_list) - {"growth", "second", "join", "protocols"}:
        ap.error("--sections: growth, second, join, protocols")
    args.interval_list = [int(x) for x in args.intervals.split(",") if x.strip()]
    args.adaptive_list = tuple(x.strip().lower() for x in args.adaptive.split(",") if x.strip())
    if not args.adaptive_list or set(args.adaptive_list) - set(ADAPTIVE) or len(set(args.adaptive_list)) < len(
            args.adaptive_list):
        ap.error("--adaptive: on and/or off")
    if args.reconciling_ms < 1 or args.second_runs < 1 or args.second_partitions < 2:
        ap.error("need --reconciling-ms >= 1, --second-runs >= 1, --second-partitions >= 2")
    args.consumer_extra = parse_kv(args.consumer_config)
    args.broker_extra = [x for kv in parse_kv(args.broker_option).items() for x in ("-o", "=".join(kv))]
    if args.protocols_repeat < 1:
        ap.error("--protocols-repeat must be at least 1")
    jitter = args.jitter_ms if args.jitter_ms >= 0 else max(args.protocols_heartbeat_ms, args.metadata_refresh_ms)
    args.jitter_s = jitter / 1000
    args.stagger_s = (args.stagger_ms if args.stagger_ms >= 0 else args.metadata_refresh_ms / args.consumers) / 1000
    args.protocol_list = tuple(x.strip() for x in args.protocols.split(",") if x.strip())
    if not args.protocol_list or set(args.protocol_list) - set(PROTOCOLS):
        ap.error("--protocols: classic and/or consumer")
    if args.grow_to <= args.partitions:
        ap.error("--grow-to must exceed --partitions")
    if args.consumers < 1 or args.partitions < args.consumers:
        ap.error("need 1 <= --consumers <= --partitions")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("== machine ==")
    import confluent_kafka

    print("  " + machine_line(f"confluent-kafka={confluent_kafka.version()[0]}  librdkafka={confluent_kafka.libversion()[0]}"))
    extra = " ".join(f"{k}={v}" for k, v in args.consumer_extra.items())
    print(f"  consumers: librdkafka defaults + group.protocol=consumer auto.offset.reset=earliest log_level=4 "
          f"{extra}".rstrip() + f"; poll(0.05) loop; growth/protocols consumers at nice +{args.client_nice}"
          + (" (protocols: see its conditions)" if "protocols" in args.section_list else ""))
    r = args.reconciling_ms
    print(f"  brokers (H = heartbeat interval): -o group.consumer.heartbeat.interval.ms=H "
          f"-o group.consumer.min.heartbeat.interval.ms=min({r},H) -o metrics.listener=127.0.0.1:0 "
          f"-o group.consumer.reconciling.heartbeat.interval.ms={r} (adaptive ON) or =0 (OFF)"
          + (f" {' '.join(args.broker_extra)}" if args.broker_extra else ""))
    interrupt_on_sigterm()
    t_begin = time.monotonic()
    growth: list[dict] = []
    joins: list[dict] = []
    seconds: list[dict] = []
    notes: list[str] = []
    protocols: list[dict] = []
    failed = False
    try:
        for interval in args.interval_list:
            reps = args.repeat if "growth" in args.section_list else 0
            for rep in range(max(reps, 1)):
                do_growth = "growth" in args.section_list and rep < reps
                do_join = "join" in args.section_list and rep == 0
                if not (do_growth or do_join):
                    continue
                for mode in ordered(args.adaptive_list, rep):
                    tags = {"interval_ms": interval, "adaptive": mode}
                    broker, work = start_broker(args, interval, mode, f"{interval}-{mode}")
                    try:
                        if do_growth:
                            print(f"\n-- heartbeat interval {interval} ms, adaptive {mode.upper()}: growth run "
                                  f"{rep + 1}/{reps}: {args.consumers} consumers ({args.mode}), {args.partitions} -> "
                                  f"{args.grow_to} partitions ...", flush=True)
                            conf = consumer_conf(broker.bootstrap, f"bench-growth-{interval}", args.consumer_extra)
                            g = run_growth(args, broker, topic=TOPIC, conf=conf, tags=tags,
                                           steady_s=args.steady_s if rep == 0 else 0.0)
                            growth.append(g)
                            if g["status"] == "ok":
                                print(f"   converged in {g['converge_s']:.1f} s; after create_partitions: first new "
                                      f"assignment {fmt_s(g['first_assign_s'])} s, all assigned {g['assigned_s']:.3f} "
                                      f"s, all new consumed {g['consumed_s']:.3f} s", flush=True)
                            else:
                                failed = True
                                print(f"   FAILED: {g.get('error')}", flush=True)
                        if do_join:
                            print(f"\n-- heartbeat interval {interval} ms, adaptive {mode.upper()}: join runs ...",
                                  flush=True)
                            joins += run_join(args, broker, interval, mode)
                    finally:
                        note = finish_broker(args, broker, work)
                        if note:
                            notes.append(f"{interval} ms {mode}: {note}")
                            print(f"   note: {note}")
            if "second" in args.section_list:
                seconds += run_second(args, interval)
        if "protocols" in args.section_list:
            protocols = [run_protocols(args, mode) for mode in args.adaptive_list]
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 1

    if growth:
        print(f"\n== growth: {args.consumers} consumers ({args.mode}), topic {args.partitions} -> {args.grow_to} "
              f"partitions, one record produced to every partition after growing; seconds from the "
              f"create_partitions call (Kafka 4.0: ~5 s; goal < 1 s) ==")
        rows = []
        keys = ("create_s", "produced_s", "first_assign_s", "assigned_s", "after_create_s", "consumed_s", "total_s")
        for g in growth:
            label = (f"{g['interval_ms']} ms", g["adaptive"].upper())
            if g["status"] != "ok":
                rows.append((*label, "FAILED", *[""] * 8))
                continue
            g["after_create_s"] = g["assigned_s"] - g["create_s"]
            cb = g["callbacks"]
            rows.append((*label, *(fmt_s(g[key]) for key in keys), f"{cb['assign']}/{cb['revoke']}/{cb['lost']}",
                         f"{min(g['sizes_after'])}-{max(g['sizes_after'])}"))
        table(("heartbeat", "adaptive", "create done", "produced", "1st assign", "all assigned", "(after create)",
               "all consumed", "TOTAL", "assign/revoke/lost", "partitions/consumer"), rows, left=2)
        print(f"  (TOTAL = max(all assigned, all new consumed). 'create done' = create_partitions answered (the "
              f"broker creates the new partition logs before answering); '(after create)' = all assigned - create "
              f"done; 'produced' = {args.grow_to:,} records acknowledged by a fresh producer; callbacks counted after "
              f"the growth, 'lost' = librdkafka gave partitions up without a revocation)")
        ok = [g for g in growth if g["status"] == "ok"]
        print()
        on_off_table(args, [(f"{interval} ms", what, {m: [g[key] for g in ok if g["interval_ms"] == interval
                                                          and g["adaptive"] == m] for m in args.adaptive_list})
                            for interval in args.interval_list
                            for key, what in (("first_assign_s", "1st assign"), ("assigned_s", "all assigned"),
                                              ("consumed_s", "all consumed"), ("total_s", "TOTAL"))])
        for g in growth:
            for p in g.get("problems") or []:
                print(f"  ! {g['interval_ms']} ms {g['adaptive']}: {p}")
    if seconds and not print_second(args, seconds):
        failed = True
    rates = [x["steady"] for x in growth + seconds if x.get("steady")]
    if rates and not print_steady(args, rates):
        failed = True
    if joins:
        print(f"\n== join: Consumer(...) -> first record, topic of {args.join_partitions} partitions with "
              f"{args.join_records} records each waiting, {args.join_runs} runs per row (goal < 0.5 s) ==")
        rows = []
        for j in joins:
            ok = [r for r in j["runs"] if r["first_s"] is not None]
            firsts = [r["first_s"] for r in ok]
            assigns = [r["assign_s"] for r in ok if r["assign_s"] is not None]
            if not ok:
                failed = True
            rows.append((f"{j['interval_ms']} ms", j["adaptive"].upper(),
                         j["flavour"] + (" (committed offsets)" if j["flavour"] == "idle" else " (fresh group id)"),
                         fmt_s(statistics.median(firsts)) if firsts else "FAILED",
                         f"{min(firsts):.3f}-{max(firsts):.3f}" if firsts else "-",
                         fmt_s(statistics.median(assigns)) if assigns else "-",
                         f"{len(ok)}/{len(j['runs'])}"))
            for r in j["runs"]:
                if r["error"]:
                    print(f"  ! {j['interval_ms']} ms {j['adaptive']} {j['flavour']}: {r['error']}")
        table(("heartbeat", "adaptive", "group", "median s", "min-max s", "median on_assign s", "ok runs"), rows,
              left=3)
    for out in protocols:
        if not print_protocols(args, out):
            failed = True
    if len(protocols) == 2:
        meds = {out["adaptive"]: median_of([r["total_s"] for r in out["runs"]
                                            if r["protocol"] == "consumer" and r["status"] == "ok"])
                for out in protocols}
        if meds["on"] and meds["off"] is not None:
            print(f"\n  protocols, consumer group TOTAL median: ON {meds['on']:.3f} s, OFF {meds['off']:.3f} s, "
                  f"OFF/ON {meds['off'] / meds['on']:.2f}x")
    for note in notes:
        failed = True
        print(f"  ! {note}")
    print(f"\ntotal bench time {time.monotonic() - t_begin:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
