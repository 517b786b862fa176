#!/usr/bin/env python3
"""Metrics benchmark: what Prometheus metrics cost on the produce/fetch path and on heartbeats.

This is a benchmark script, not a test. Issue 21's target: metrics on must cost under 5 %
on the produce/fetch path and on heartbeats, metrics on and off measured in the same run.
A broker counts (observability/stats.py) only when ``metrics.listener`` is set; with it
empty ``broker.stats`` is None and no path counts anything. Every comparison below runs
ON and OFF alternately (which goes first alternates from round to round, so load drift
hits both alike) and reports each figure, the ON/OFF ratio and the cost in %. Four
sections (``--sections``):

``throughput``  TWO ``odradek broker`` subprocesses on 127.0.0.1, started once for the
            section: ON with ``-o metrics.listener=127.0.0.1:<free port>``, OFF with
            ``-o metrics.listener=`` (checked: ON listens on its Kafka and /metrics ports,
            OFF on its Kafka port only). ``--rounds`` rounds of, on each broker, the produce
            and consume phases of bench/security.py (``security.run_listener`` on its
            PLAINTEXT listener, itself bench/throughput.py's ``run_phase``), on a fresh topic
            of ``--partitions`` partitions:
              * PRODUCE: ``--producers`` librdkafka (confluent-kafka) processes send
                ``--records`` records of ``--size`` bytes (security.py's producer settings:
                linger.ms=5, acks=1, no compression; plus batch.num.messages=
                ``--batch-num-messages``), timed from the first ``produce()`` to ``flush()``;
              * the per-partition counts are checked through ListOffsets;
              * CONSUME: ``--consumers`` processes, each *assigned* its partitions from the
                beginning (no group protocol), timed from ``assign()`` to the last record;
            every worker's connection is open (one warm-up record) before its phase starts.
            The headline is the broker's CPU time per record (totals over the rounds, and
            the median of each round's ON/OFF ratio): on 2 cores the clients share the CPU
            with the brokers, so records/s moves with who gets the cores. It is read around
            each phase by run_phase, here with nanosecond precision (the threads'
            /proc/PID/task/TID/schedstat instead of /proc/PID/stat's 10 ms ticks, which are
            5 % of a phase's few tenths of a second). Produce CPU per record depends on how
            many records a batch holds, which with linger.ms alone follows the producer's
            speed (i.e. the load on the cores): batch.num.messages=200 makes batches full
            and alike in both modes (librdkafka's default, 10,000: ``--batch-num-messages 0``).
            After each ON run /metrics is scraped once (urllib, outside the timed phases):
            how long it took, its size, the event-loop CPU it cost, and whether the broker
            counted every record of the round (odradek_topic_messages_in/out_total) in how
            many requests (odradek_requests_total).
            ``--control`` runs both brokers with metrics off: an A/A run whose "cost" is
            the noise floor of this comparison on this machine.
``requests``  Produce and Fetch through ``Broker.handle_frame`` in this process (no sockets,
            no client): the request path alone, without the client's batching and
            scheduling in the figure. Two in-process brokers, ON
            (``BrokerConfig(metrics_listener="127.0.0.1:0")``: it counts into broker.stats;
            an in-process Broker serves no HTTP) and OFF (``metrics_listener=""``), each
            timed by bench/coordinator.py's ``drive_broker`` loop: Produce v9 acks=1 of
            ``--partitions`` partitions x one batch of ``--batch-records`` records
            (``--produce-requests`` per run), then Fetch v12 of the same number of
            partitions from offset 0, 1 MiB each (``--fetch-requests`` per run);
            ``--inproc-rounds`` runs of each, CPU (time.thread_time) and wall us per request.
``heartbeat``  The ConsumerGroupHeartbeat path in this process: ``drive_broker`` as
            bench/coordinator.py runs it (pre-encoded partial ConsumerGroupHeartbeat v1
            frames round-robin over a Stable group of ``--members`` members, seeded by
            ``coordinator.seed_data_dir``, the coordinator timer ticked every 50 ms), on an
            ON and an OFF in-process broker; ``--heartbeats`` per run, ``--inproc-rounds``
            runs of each.
``heartbeat-wire``  The same heartbeats as an operator's broker serves them: over TCP, through
            the asyncio transport, the framing and the server's connection loop. TWO ``odradek
            broker`` subprocesses (MetricsBroker, as in ``throughput``: ON with a /metrics port,
            OFF with ``metrics.listener=``; ``--control``: both OFF), each on its own data dir
            seeded by ``coordinator.seed_data_dir`` (the Stable group of ``--members`` members at
            epoch 1, replayed at start-up; checked through ConsumerGroupDescribe, odradek's
            AsyncAdmin, before and after the rounds: Stable, every member at epoch 1, group and
            assignment epoch 1; and by the first heartbeat's answer: error 0, epoch 1, no
            assignment). The driver is this process, one thread: ``--wire-connections`` raw
            TCP connections per broker, each with its share of the members (round-robin), each
            keeping up to ``--wire-inflight`` heartbeats unanswered (pipelined; with fewer
            members than that on a connection, a member has two heartbeats in flight at times,
            which the coordinator answers alike); every answer's correlation id and error code
            are checked. A warm-up of max(2,000, 2 x members)
            heartbeats per broker, then ``--wire-rounds`` timed rounds per mode of
            ``--wire-heartbeats`` (at most ``--max-seconds`` each), ON and OFF alternating which
            goes first; all of it on ``--wire-pairs`` pairs of freshly started brokers, one pair
            after the other. Several pairs because a broker process keeps its own offset for
            life (its hash seed and memory layout): ON/OFF medians of single pairs were seen
            from -4 % to +7 % for the same code, while an A/A pair stays within 1-2 %. The headline is the broker's CPU time per heartbeat (all its threads'
            schedstat over the round, so its background work is in it too: the idle broker's
            CPU meanwhile is shown) and the median of each round's ON/OFF ratio; heartbeats/s
            is for information (the driver takes most of the other core). The ON broker's
            odradek_requests_total{request="ConsumerGroupHeartbeat",version="1"} is scraped
            before, after the warm-up and after the rounds: it must grow by exactly 1 +
            warm-up, then by the heartbeats of the timed ON rounds.

The brokers' data lives in ``--work-dir`` (/dev/shm when there is one: the virtual disk's
write path adds noise to the broker's CPU per record). Every loop is bounded in count and
in time; all traffic stays on 127.0.0.1. About 1.5 minutes with the defaults on 2 cores
(heartbeat-wire: about 70 s of it).

Run:  .venv/bin/python bench/metrics.py [--records 1000000] [--rounds 8] [--heartbeats 10000] [--control]
      .venv/bin/python bench/metrics.py --sections heartbeat,heartbeat-wire [--wire-heartbeats 20000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # isort: skip - puts src/ on sys.path
    ROOT,
    BrokerProcess,
    remove_work,
    require_positive,
    run_sections,
    stop_broker,
    table,
)
import throughput
from security import WARM_TOPIC, fmt, median, ratio_of, run_listener
from throughput import create_topic

# Keep the module's top level light: the client workers are spawned and re-import it
# (bench/coordinator.py, for the heartbeat section, is imported there only).

MODES = ("ON", "OFF")
LISTENER = "PLAINTEXT"  # security.run_listener's name for the plain listener (topics "sec-plaintext-<round>")
TARGET_PCT = 5.0


def task_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time of each live thread of `pid` in ns (/proc/PID/task/TID/schedstat, its first
    field: the scheduler's sum_exec_runtime)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def precise_tree_cpu_s(pids: list[int]) -> float:
    """tree_cpu_s with nanosecond precision: the CPU time of the live threads of `pids`.
    utime + stime come in 10 ms clock ticks, and a broker phase here uses a few tenths of a
    second of CPU: a tick is then about 5 % of the figure, as much as the difference this
    script measures. (A thread that ended between two readings is missed; a broker's threads
    are its event loop and its executor's, which live as long as it.)"""
    return sum(sum(task_cpu_ns(p).values()) for p in pids) / 1e9


# throughput.run_phase reads the broker's CPU around each phase through RssSampler, which
# calls throughput.tree_cpu_s: give it the precise clock (in this process only). The tick
# clock stays at hand to check the precise one over the whole section.
tick_tree_cpu_s = throughput.tree_cpu_s
throughput.tree_cpu_s = precise_tree_cpu_s


def cost_pct(on: float | None, off: float | None, higher_is_better: bool = False) -> float | None:
    """What metrics cost, in %: positive when ON is worse than OFF."""
    if not on or not off:
        return None
    return 100 * (off / on - 1) if higher_is_better else 100 * (on / off - 1)


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"


# --------------------------------------------------------------------------
# Section 1: produce / consume through a broker subprocess, metrics ON vs OFF
# --------------------------------------------------------------------------


class MetricsBroker:
    """An `odradek broker` subprocess with metrics on or off, shaped like security.py's
    SecuredBroker for `run_listener` (`.proc` and `.conf(listener)`)."""

    def __init__(self, work: Path, mode: str, metrics_on: bool, client_props: dict[str, str]) -> None:
        from odradek.cluster.etcd_process import free_port

        self.mode = mode
        self.client_props = client_props
        # The broker prints its metrics port before its "listening on" line, which
        # BrokerProcess reads (and discards what came before): pick the port here.
        self.metrics_port = free_port() if metrics_on else None
        value = f"127.0.0.1:{self.metrics_port}" if metrics_on else ""
        d = work / mode.lower()
        d.mkdir()
        self.proc = BrokerProcess(d / "data", ["-o", f"metrics.listener={value}"], d / "broker.log",
                                  ("--log-level", "WARNING"))

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else None

    def conf(self, listener: str) -> dict:
        # security.producer_conf / consumer_conf add their settings over these (-X goes to both)
        return {"bootstrap.servers": self.proc.bootstrap, **self.client_props}


def scrape(url: str, pid: int, timeout: float = 10.0) -> dict[str, Any]:
    """GET /metrics once: wall time, size, and the CPU the broker's event-loop thread spent
    meanwhile (the collector runs there; prometheus-client's HTTP thread formats the text,
    one new thread per request, whose CPU is gone with it)."""
    cpu0 = task_cpu_ns(pid).get(pid, 0)
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = resp.read()
        status = resp.status
    ms = 1e3 * (time.perf_counter() - t0)
    text = body.decode(errors="replace")
    return {"ms": ms, "bytes": len(body), "status": status, "loop_cpu_ms": (task_cpu_ns(pid).get(pid, 0) - cpu0) / 1e6,
            "samples": sum(1 for ln in text.splitlines() if ln and not ln.startswith("#")), "text": text}


def requests_total(text: str, request: str, version: int | None = None) -> float:
    """Requests of one API handled so far (odradek_requests_total): of one version, or of all."""
    v = r"\d+" if version is None else str(version)
    return sum(float(m.group(1)) for m in re.finditer(
        rf'^odradek_requests_total{{request="{request}",version="{v}"}} (\S+)$', text, re.MULTILINE))


def counted(text: str, family: str, topic: str) -> float | None:
    m = re.search(rf'^{family}_total{{topic="{re.escape(topic)}"}} (\S+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else None


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process `pid` listens on (its socket inodes in /proc/PID/net/tcp, state LISTEN)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.append(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def check_ports(brokers: dict[str, MetricsBroker]) -> None:
    """ON listens on its Kafka and /metrics ports, OFF on its Kafka port only."""
    for mb in brokers.values():
        want = sorted(p for p in (mb.proc.port, mb.metrics_port) if p)
        if listening_ports(mb.proc.pid) != want:
            raise RuntimeError(f"{mb.mode} broker listens on {listening_ports(mb.proc.pid)}, expected {want}")


def stop_brokers(brokers: dict[str, MetricsBroker], work: Path, keep: bool) -> bool:
    """Stop the started broker subprocesses (False when one exited badly), point out the
    ERROR/Traceback lines of their logs, and remove their work dir unless `keep`."""
    ok = True
    for mode in MODES:
        mb = brokers.get(mode)
        if mb is not None and mb.proc.proc is not None:
            ok = stop_broker(mb.proc, f"{mode} broker") and ok
    remove_work(work, keep)
    return ok


def section_throughput(args: argparse.Namespace, summary: dict) -> bool:
    print(f"\n== throughput: two broker subprocesses, metrics ON (metrics.listener=127.0.0.1:<port>) and OFF "
          f"(metrics.listener=); {args.records:,} records x {args.size} B per phase, topic of {args.partitions} "
          f"partitions (a fresh one per run), {args.producers} producer / {args.consumers} consumer process(es), "
          f"librdkafka linger.ms=5 acks=1"
          + (f" batch.num.messages={args.batch_num_messages}" if args.batch_num_messages else "")
          + f"; {args.rounds} round(s), ON and OFF alternating which goes first; "
          f"/metrics scraped once after each ON run"
          + (f"; librdkafka {' '.join(args.client_prop)}" if args.client_prop else "")
          + ("; CONTROL RUN: the 'ON' broker has metrics OFF too" if args.control else "") + " ==", flush=True)
    ctx = mp.get_context("spawn")  # never fork a process that has librdkafka threads
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-", dir=args.work_dir))
    props = {"batch.num.messages": str(args.batch_num_messages)} if args.batch_num_messages else {}
    props.update(kv.split("=", 1) for kv in args.client_prop)
    # --control: both brokers with metrics off, so ON/OFF shows the noise floor of the comparison
    brokers = {mode: MetricsBroker(work, mode, mode == "ON" and not args.control, props) for mode in MODES}
    runs: list[dict] = []
    scrapes: list[dict] = []
    ok = True
    try:
        for mode in MODES:
            mb = brokers[mode]
            mb.proc.start()
            create_topic(mb.proc.bootstrap, WARM_TOPIC, 1, 30.0)
        on = brokers["ON"]
        if on.url:
            first = scrape(on.url, on.proc.pid)  # the exporter answers before anything is timed
            first.update(produce_requests=requests_total(first["text"], "Produce"),
                         fetch_requests=requests_total(first["text"], "Fetch"))
            print(f"  ON  broker pid {on.proc.pid} on {on.proc.bootstrap}, {on.url}: first scrape {first['ms']:.1f} "
                  f"ms, {first['bytes']:,} B", flush=True)
        else:
            print(f"  ON  broker pid {on.proc.pid} on {on.proc.bootstrap}, metrics OFF (--control)", flush=True)
        off = brokers["OFF"]
        print(f"  OFF broker pid {off.proc.pid} on {off.proc.bootstrap}", flush=True)
        check_ports(brokers)
        clocks0 = {m: (tick_tree_cpu_s([b.proc.pid]), precise_tree_cpu_s([b.proc.pid]), len(task_cpu_ns(b.proc.pid)))
                   for m, b in brokers.items()}
        for rnd in range(args.rounds):
            for mode in (MODES if rnd % 2 == 0 else MODES[::-1]):
                mb = brokers[mode]
                r = run_listener(ctx, mb, LISTENER, rnd, args)
                r["mode"] = mode
                runs.append(r)
                if r["ok"]:
                    p, c = r["produce"], r["consume"]
                    line = (f"  round {rnd + 1} {mode:3s}: produce {p.seconds:.2f}s ({p.rec_s:,.0f} rec/s, broker CPU "
                            f"{p.broker_cpu_s:.3f}s = {1e6 * p.broker_cpu_s / args.records:.3f} us/rec), consume "
                            f"{c.seconds:.2f}s ({c.rec_s:,.0f} rec/s, broker CPU {c.broker_cpu_s:.3f}s = "
                            f"{1e6 * c.broker_cpu_s / args.records:.3f} us/rec)")
                else:
                    ok = False
                    line = f"  round {rnd + 1} {mode}: FAILED {r.get('error', '')[:600]}"
                if mb.url and mb.proc.alive():
                    s = scrape(mb.url, mb.proc.pid)
                    topic = f"sec-{LISTENER.lower()}-{rnd}"
                    s.update(round=rnd + 1, messages_in=counted(s["text"], "odradek_topic_messages_in", topic),
                             messages_out=counted(s["text"], "odradek_topic_messages_out", topic),
                             produce_requests=requests_total(s["text"], "Produce"),
                             fetch_requests=requests_total(s["text"], "Fetch"))
                    del s["text"]
                    prev = scrapes[-1] if scrapes else first
                    n_p = s["produce_requests"] - prev["produce_requests"]
                    n_f = s["fetch_requests"] - prev["fetch_requests"]
                    scrapes.append(s)
                    line += (f"; scrape {s['ms']:.1f} ms, {s['bytes']:,} B, {s['samples']} samples, counted "
                             f"{fmt(s['messages_in'])} in / {fmt(s['messages_out'])} out in {n_p:,.0f} Produce "
                             f"({args.records / max(n_p, 1):,.0f} records each) and {n_f:,.0f} Fetch requests")
                    if r["ok"] and s["messages_in"] != args.records:
                        ok = False
                        line += f" (MISMATCH: {args.records:,} produced)"
                print(line, flush=True)
                if not mb.proc.alive():
                    raise RuntimeError(f"{mode} broker exited (rc={mb.proc.proc.returncode}): {mb.proc.log_tail()}")
        for m, b in brokers.items():
            t0, p0, n0 = clocks0[m]
            pid = b.proc.pid
            print(f"  {m} broker CPU over the rounds: {tick_tree_cpu_s([pid]) - t0:.2f} s by /proc/PID/stat (all "
                  f"threads, 10 ms ticks), {precise_tree_cpu_s([pid]) - p0:.3f} s by its live threads' schedstat; "
                  f"threads {n0} -> {len(task_cpu_ns(pid))}", flush=True)
    finally:
        ok = stop_brokers(brokers, work, args.keep) and ok

    res: dict[str, dict] = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode and r["ok"]]
        d: dict[str, Any] = {"runs_ok": len(mine)}
        for ph in ("produce", "consume"):
            secs = sum(r[ph].seconds for r in mine)
            d[ph] = {"rec_s": median([r[ph].rec_s for r in mine]), "mb_s": median([r[ph].mb_s for r in mine]),
                     "rec_s_all": [r[ph].rec_s for r in mine],
                     # totals over the rounds (so a long run weighs more than a short one)
                     "broker_us_rec": ratio_of([r[ph].broker_cpu_s for r in mine], 1e-6 * args.records * len(mine)),
                     "broker_us_rec_all": [1e6 * r[ph].broker_cpu_s / args.records for r in mine],
                     "broker_cpu_pct": ratio_of([r[ph].broker_cpu_s for r in mine], 0.01 * secs),
                     "client_us_rec": ratio_of([r[ph].client_cpu_s for r in mine], 1e-6 * args.records * len(mine))}
        res[mode] = d

    # Per round, ON/OFF of the same round (they ran back to back): the spread of these
    # ratios is the noise the totals carry.
    paired: dict[str, list[float]] = {"produce": [], "consume": []}
    for rnd in range(args.rounds):
        pair = {r["mode"]: r for r in runs if r["round"] == rnd and r["ok"]}
        if len(pair) == 2:
            for ph, ratios in paired.items():
                a, b = pair["ON"][ph].broker_cpu_s, pair["OFF"][ph].broker_cpu_s
                if a and b:
                    ratios.append(a / b)

    rows = []
    for ph in ("produce", "consume"):
        for mode in MODES:
            d = res[mode][ph]
            spread = d["rec_s_all"]
            us_all = d["broker_us_rec_all"]
            rows.append((ph, mode, fmt(d["rec_s"]), fmt(d["mb_s"], ",.1f"),
                         f"{min(spread):,.0f}-{max(spread):,.0f}" if spread else "-",
                         fmt(d["broker_us_rec"], ".3f"),
                         f"{min(us_all):.3f}-{max(us_all):.3f}" if us_all else "-",
                         fmt(d["broker_cpu_pct"], ".0f") + ("%" if d["broker_cpu_pct"] is not None else ""),
                         fmt(d["client_us_rec"], ".2f")))
    print()
    table(("phase", "metrics", "rec/s", "MB/s", "rec/s min-max", "broker us/rec", "us/rec min-max", "broker CPU",
           "client us/rec"), rows, left=2)
    cost = {}
    for ph in ("produce", "consume"):
        on, off = res["ON"][ph], res["OFF"][ph]
        cost[ph] = {"broker_us_rec_ratio": (on["broker_us_rec"] / off["broker_us_rec"])
                    if on["broker_us_rec"] and off["broker_us_rec"] else None,
                    "broker_us_rec_pct": cost_pct(on["broker_us_rec"], off["broker_us_rec"]),
                    "rec_s_ratio": (on["rec_s"] / off["rec_s"]) if on["rec_s"] and off["rec_s"] else None,
                    "rec_s_pct": cost_pct(on["rec_s"], off["rec_s"], higher_is_better=True),
                    "paired_ratios": paired[ph], "paired_median": median(paired[ph])}
        pr = paired[ph]
        print(f"  {ph}: ON/OFF broker CPU per record, totals {fmt(cost[ph]['broker_us_rec_ratio'], '.3f')}x "
              f"(cost {fmt_pct(cost[ph]['broker_us_rec_pct'])}); in each round {', '.join(f'{x:.3f}' for x in pr) or '-'}"
              f", median {fmt(median(pr), '.3f')}x; ON/OFF rec/s {fmt(cost[ph]['rec_s_ratio'], '.3f')}x "
              f"(cost {fmt_pct(cost[ph]['rec_s_pct'])})")
    ms = [s["ms"] for s in scrapes]
    sizes = [s["bytes"] for s in scrapes]
    loop_ms = [s["loop_cpu_ms"] for s in scrapes]
    if scrapes:
        print(f"  /metrics scrapes of the ON broker (one after each ON run, outside the timed phases): "
              f"{', '.join(f'{m:.1f}' for m in ms)} ms; {', '.join(f'{b:,}' for b in sizes)} B "
              f"({scrapes[-1]['samples']} samples in the last; one more topic's series per round); the broker's "
              f"event-loop thread spent {', '.join(f'{m:.1f}' for m in loop_ms)} ms of CPU on them")
        print(f"  (at Prometheus' default 15 s interval a {median(ms):.1f} ms scrape is "
              f"{100 * median(ms) / 15_000:.2f} % of one core, if all of it were broker CPU)")
    print("  (rec/s and MB/s: medians over the rounds; broker us/rec: the broker's CPU time per record, totalled "
          "over the rounds, with the per-run min-max; broker CPU: % of one core while the phases ran; client us/rec: "
          "CPU of the client processes per record)")
    summary["throughput"] = {"modes": res, "cost": cost, "scrapes": scrapes,
                             "runs": [{k: (v.__dict__ if hasattr(v, "__dict__") else v) for k, v in r.items()} for r in runs]}
    return ok and all(r["ok"] for r in runs) and len(runs) == 2 * args.rounds


# --------------------------------------------------------------------------
# Sections 2 and 3: Broker.handle_frame in process, metrics ON vs OFF
# --------------------------------------------------------------------------


def inproc_brokers(work: Path, seed=None) -> dict[str, Any]:
    """One in-process Broker per mode on its own data dir (`seed(data_dir)` writes it first):
    ON counts into broker.stats (metrics_listener set; no HTTP server in process), OFF has none."""
    from odradek.broker.broker import Broker
    from odradek.config import BrokerConfig

    out = {}
    for mode in MODES:
        data = work / mode.lower() / "data"
        if seed is not None:
            seed(data)
        b = out[mode] = Broker(BrokerConfig(data_dir=data, listen_port=0,
                                            metrics_listener="127.0.0.1:0" if mode == "ON" else ""))
        if (b.stats is None) != (mode == "OFF"):
            raise RuntimeError(f"{mode} broker: stats is {b.stats!r}")
    return out


def alternate(loop: Any, brokers: dict[str, Any], frames: dict[str, list[bytes]], count: int, rounds: int,
              max_s: float) -> dict[str, list[tuple[int, float, int, float]]]:
    """`rounds` timed runs per mode through bench/coordinator.py's drive_broker, ON and OFF
    alternating which goes first; per run (requests, wall s, errors, CPU s of this thread).
    drive_broker's error count reads a ConsumerGroupHeartbeat response's error code: it means
    nothing for other requests, whose callers check the answers themselves."""
    from coordinator import drive_broker

    out: dict[str, list[tuple[int, float, int, float]]] = {m: [] for m in MODES}
    for rnd in range(rounds):
        for mode in (MODES if rnd % 2 == 0 else MODES[::-1]):
            c0 = time.thread_time()
            done, secs, errors = drive_broker(loop, brokers[mode], frames[mode], count, max_s)
            out[mode].append((done, secs, errors, time.thread_time() - c0))
    return out


def report_inproc(name: str, unit: str, results: dict[str, list[tuple[int, float, int, float]]],
                  extra: dict[str, list[str]], extra_header: tuple[str, ...]) -> dict[str, Any]:
    """Table of one in-process comparison; returns its figures (medians over the runs, and
    each round's ON/OFF CPU ratio)."""
    cpu: dict[str, float | None] = {}
    wall: dict[str, float | None] = {}
    rows = []
    for mode in MODES:
        rs = results[mode]
        per_cpu = [1e6 * c / d for d, _, _, c in rs if d]
        per_wall = [1e6 * s / d for d, s, _, _ in rs if d]
        cpu[mode], wall[mode] = median(per_cpu), median(per_wall)
        rows.append((mode, fmt(cpu[mode], ".2f"), f"{min(per_cpu):.2f}-{max(per_cpu):.2f}" if per_cpu else "-",
                     fmt(wall[mode], ".2f"), f"{min(per_wall):.2f}-{max(per_wall):.2f}" if per_wall else "-",
                     fmt(1e6 / wall[mode] if wall[mode] else None), f"{sum(r[0] for r in rs):,}", *extra[mode]))
    print()
    table(("metrics", f"CPU us/{unit}", "min-max", f"wall us/{unit}", "min-max", f"{unit}/s", unit + "s",
           *extra_header), rows)
    paired = [(a[3] / a[0]) / (b[3] / b[0]) for a, b in zip(results["ON"], results["OFF"]) if a[0] and b[0] and b[3]]
    pct = cost_pct(cpu["ON"], cpu["OFF"])
    print(f"  {name}: metrics ON adds {fmt(cpu['ON'] - cpu['OFF'] if cpu['ON'] and cpu['OFF'] else None, '+.2f')} "
          f"us of CPU per {unit} (medians: cost {fmt_pct(pct)}); ON/OFF in each round "
          f"{', '.join(f'{x:.3f}' for x in paired)}, median {fmt(median(paired), '.3f')}; wall clock: "
          f"{fmt_pct(cost_pct(wall['ON'], wall['OFF']))}")
    return {"cpu_us": cpu, "wall_us": wall, "cost_pct": pct, "wall_cost_pct": cost_pct(wall["ON"], wall["OFF"]),
            "paired_ratios": paired, "runs": results}


INPROC_NOTE = ("  (CPU us: this thread's CPU time (time.thread_time) per request, which what other processes take "
               "from the cores does not inflate; wall us: drive_broker's own figure; medians over the runs)")
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def section_requests(args: argparse.Namespace, summary: dict) -> bool:
    """Produce and Fetch through Broker.handle_frame in process: the request path's own cost,
    without the client's batching (which moves the subprocess figures) in the picture."""
    import asyncio
    import uuid

    sys.path.insert(0, str(ROOT))  # tests/wire.py builds the frames (as bench/security.py does)
    from coordinator import CLIENT_HOST

    from odradek.records.codec import Record, encode_batch
    from tests.wire import parse_response, request_frame

    parts, k, size = args.partitions, args.batch_records, args.size
    topic, fetch_topic = "inproc-produce", "inproc-fetch"
    print(f"\n== requests: Broker.handle_frame in process (no sockets), brokers' data in {args.work_dir or 'a temp dir'}: "
          f"Produce v9 acks=1 of {parts} partitions x one batch of {k} records x {size} B ({parts * k:,} records, "
          f"{args.produce_requests:,} requests per run); Fetch v12 of {parts} partitions from offset 0, max 1 MiB per "
          f"partition ({args.fetch_requests:,} requests per run); {args.inproc_rounds} run(s) per mode, ON and OFF "
          f"alternating which goes first ==", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-req-", dir=args.work_dir))
    loop = asyncio.new_event_loop()
    brokers: dict[str, Any] = {}
    ok = True
    try:
        brokers = inproc_brokers(work)
        now = int(time.time() * 1000)
        batch = encode_batch([Record(i, now, None, bytes([65 + i % 26]) * size) for i in range(k)])

        def produce_frame(name: str) -> bytes:
            return request_frame(0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                {"name": name, "partition_data": [{"index": p, "records": batch} for p in range(parts)]}]},
                correlation_id=1, client_id="bench")[4:]

        fetch = request_frame(1, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 52_428_800, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": fetch_topic, "topic_id": uuid.UUID(ZERO_UUID), "partitions": [{
                "partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20} for p in range(parts)]}]}, correlation_id=1, client_id="bench")[4:]

        def call(b, frame: bytes, api: int, version: int):
            return parse_response(api, version, loop.run_until_complete(b.handle_frame(frame, CLIENT_HOST)))[1]

        frames_p, frames_f = {}, {}
        fill = produce_frame(fetch_topic)
        fill_requests = -(-(1 << 20) * 2 // len(batch))  # 2 MiB per partition: every fetch returns its 1 MiB
        fetched_bytes, full_batches = {}, {}
        for mode, b in brokers.items():
            b.create_topic(topic, parts, {})
            b.create_topic(fetch_topic, parts, {})
            for _ in range(fill_requests):
                r = call(b, fill, 0, 9)
            frames_p[mode], frames_f[mode] = [produce_frame(topic)], [fetch]
            # the answers, checked fully once
            r = call(b, frames_p[mode][0], 0, 9)
            errs = [int(pr.error_code) for t in r.responses for pr in t.partition_responses]
            if errs != [0] * parts:
                raise RuntimeError(f"{mode} broker: Produce answered {r}")
            f = call(b, fetch, 1, 12)
            got = [(int(pr.error_code), len(pr.records or b"")) for t in f.responses for pr in t.partitions]
            if any(e for e, _ in got) or any(n < (1 << 20) - len(batch) for _, n in got):
                raise RuntimeError(f"{mode} broker: Fetch answered {got}")
            fetched_bytes[mode] = sum(n for _, n in got)
            # a fetch may end in a partial batch (as Kafka's); the complete ones are what counts
            full_batches[mode] = sum(n // len(batch) for _, n in got)
        alternate(loop, brokers, frames_p, 20, 1, args.max_seconds)  # warm-up
        alternate(loop, brokers, frames_f, 5, 1, args.max_seconds)
        stats = brokers["ON"].stats
        p0, f0 = stats.topic(topic).messages_in, stats.topic(fetch_topic).messages_out
        end0 = {m: [brokers[m].logs.get(topic, p).log_end_offset for p in range(parts)] for m in MODES}
        res_p = alternate(loop, brokers, frames_p, args.produce_requests, args.inproc_rounds, args.max_seconds)
        res_f = alternate(loop, brokers, frames_f, args.fetch_requests, args.inproc_rounds, args.max_seconds)
        counted_p = stats.topic(topic).messages_in - p0
        counted_f = stats.topic(fetch_topic).messages_out - f0
        sent_p = sum(r[0] for r in res_p["ON"]) * parts * k
        served_f = sum(r[0] for r in res_f["ON"]) * full_batches["ON"] * k
        # every run ran to its count, and every Produce was appended (each partition's log grew by it)
        ok = all(r[0] == args.produce_requests for rs in res_p.values() for r in rs) and \
            all(r[0] == args.fetch_requests for rs in res_f.values() for r in rs)
        for m in MODES:
            grew = [brokers[m].logs.get(topic, p).log_end_offset - end0[m][p] for p in range(parts)]
            if grew != [sum(r[0] for r in res_p[m]) * k] * parts:
                ok = False
                print(f"  {m} broker: the produce logs grew by {grew}")
        # the answers, checked again after the timed runs
        for mode, b in brokers.items():
            f = call(b, fetch, 1, 12)
            if any(int(pr.error_code) for t in f.responses for pr in t.partitions):
                ok = False
    finally:
        for b in brokers.values():
            b.close()
        loop.close()
        shutil.rmtree(work, ignore_errors=True)

    ok = ok and counted_p == sent_p and counted_f == served_f
    mb_fetch = fetched_bytes.get("ON", 0) / 1e6
    produce = report_inproc("produce", "request", res_p,
                            {"ON": [f"{counted_p:,} of {sent_p:,}"], "OFF": ["- (stats None)"]},
                            ("records counted in stats",))
    print(f"  ({parts * k:,} records per Produce: the cost per record is the cost per request / {parts * k:,})")
    fetch_r = report_inproc("fetch", "request", res_f,
                            {"ON": [f"{counted_f:,} of {served_f:,}"], "OFF": ["- (stats None)"]},
                            ("records counted in stats",))
    print(f"  (each Fetch returns {mb_fetch:.2f} MB: {full_batches.get('ON', 0):,} complete batches of {k} records; "
          f"with metrics on, the records served are counted during the read's own CRC walk, which reads each batch "
          f"header anyway: no second pass over the batches)")
    print(INPROC_NOTE)
    summary["requests"] = {"produce": produce, "fetch": fetch_r, "records_per_produce": parts * k,
                           "fetch_bytes": fetched_bytes, "counted": {"produce": [counted_p, sent_p],
                                                                     "fetch": [counted_f, served_f]}}
    return ok


def section_heartbeat(args: argparse.Namespace, summary: dict) -> bool:
    import asyncio

    from coordinator import (  # bench/coordinator.py: the seeded Stable group, its frames, its timed loop
        CLIENT_HOST,
        GROUP,
        HB_KEY,
        HB_VERSION,
        heartbeat_frame,
        member_ids,
        parse_heartbeat_response,
        seed_data_dir,
    )

    from odradek.coordinator.consumer.model import GroupState

    n = args.members
    print(f"\n== heartbeat: Broker.handle_frame in process, partial ConsumerGroupHeartbeat v{HB_VERSION} round-robin "
          f"over a Stable group of {n:,} member(s) ({n:,} partitions); {args.heartbeats:,} heartbeats per run (at most "
          f"{args.max_seconds:g} s), {args.inproc_rounds} run(s) per mode, ON and OFF alternating which goes first ==",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-hb-", dir=args.work_dir))
    loop = asyncio.new_event_loop()
    brokers: dict[str, Any] = {}
    try:
        brokers = inproc_brokers(work, lambda data: seed_data_dir(data, n, n))
        mids = member_ids(n)
        frames: dict[str, list[bytes]] = {}
        for mode, b in brokers.items():
            group = b.coordinator.runtime.shard_for(GROUP).consumer_groups[GROUP]
            if group.state is not GroupState.STABLE or len(group.members) != n:
                raise RuntimeError(f"{mode} broker: group {group.state}, {len(group.members)} members")
            frames[mode] = [heartbeat_frame(mid, group.members[mid].member_epoch, k + 1)[4:]
                            for k, mid in enumerate(mids)]
            # the answer, checked fully once
            cid, body = parse_heartbeat_response(
                loop.run_until_complete(b.handle_frame(frames[mode][0], CLIENT_HOST))[4:])
            if cid != 1 or int(body.error_code) or body.assignment is not None:
                raise RuntimeError(f"{mode} broker: heartbeat answered {body}")
        alternate(loop, brokers, frames, max(n, 1000), 1, args.max_seconds)  # warm-up: every member
        written0 = {m: brokers[m].coordinator.runtime.records_written for m in MODES}
        hb_stats = brokers["ON"].stats.requests.get((HB_KEY, HB_VERSION))
        count0 = hb_stats.latency.count if hb_stats is not None else 0
        results = alternate(loop, brokers, frames, args.heartbeats, args.inproc_rounds, args.max_seconds)
        written = {m: brokers[m].coordinator.runtime.records_written - written0[m] for m in MODES}
        hb_stats = brokers["ON"].stats.requests.get((HB_KEY, HB_VERSION))
        counted = (hb_stats.latency.count - count0) if hb_stats is not None else None
    finally:
        for b in brokers.values():
            b.close()
        loop.close()
        shutil.rmtree(work, ignore_errors=True)

    sent = sum(r[0] for r in results["ON"])
    errors = {m: sum(r[2] for r in results[m]) for m in MODES}
    ok = all(r[0] == args.heartbeats for rs in results.values() for r in rs) and not any(written.values()) \
        and not any(errors.values()) and counted == sent
    hb = report_inproc("heartbeat", "hb", results,
                       {m: [str(errors[m]), str(written[m]), fmt(counted) if m == "ON" else "- (stats None)"]
                        for m in MODES},
                       ("errors", "records written", "counted in stats"))
    print(INPROC_NOTE)
    print("  ('records written' must be 0: a steady heartbeat changes nothing; 'counted in stats': heartbeats the ON "
          "broker's BrokerStats counted in the timed runs, must equal the heartbeats sent)")
    summary["heartbeat"] = {**hb, "records_written": written, "counted": counted}
    return ok


# --------------------------------------------------------------------------
# Section 4: heartbeats over TCP to broker subprocesses, metrics ON vs OFF
# --------------------------------------------------------------------------


def drive_wire(conns: list[Any], frames: list[list[bytes]], count: int, inflight: int, max_s: float
               ) -> tuple[int, float, int]:
    """`count` heartbeats over the raw TCP connections `conns`, pipelined: connection c sends
    its frames `frames[c]` cyclically (frame j carries correlation id j + 1), its share of
    `count`, keeping at most `inflight` unanswered. Every answer is read and checked: its
    correlation id (the broker answers a connection's requests in order) and its error
    code. Returns (answers, wall s, answers with an error code). A wrong answer, a closed
    connection or running over `max_s` raises: the connections are then out of step."""
    import selectors

    from coordinator import ERROR_CODE_AT

    n = len(conns)
    quota = [count // n + (c < count % n) for c in range(n)]
    sent, got = [0] * n, [0] * n
    bufs = [bytearray() for _ in range(n)]
    at = 4 + ERROR_CODE_AT  # the error code, from the start of the size-prefixed answer
    errors = 0
    sel = selectors.DefaultSelector()

    def send(c: int, k: int) -> None:
        fr, s = frames[c], sent[c]
        m = len(fr)
        conns[c].sendall(b"".join([fr[(s + j) % m] for j in range(k)]))
        sent[c] = s + k

    t0 = time.perf_counter()
    deadline = t0 + max_s
    active = 0
    try:
        for c in range(n):
            if quota[c]:
                send(c, min(inflight, quota[c]))
                sel.register(conns[c], selectors.EVENT_READ, c)
                active += 1
        while active:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise RuntimeError(f"heartbeats over TCP: {sum(got):,} of {count:,} answered in {max_s:g} s")
            for key, _ in sel.select(left):
                c = key.data
                data = conns[c].recv(1 << 16)
                if not data:
                    raise RuntimeError(f"connection {c} closed by the broker after {got[c]:,} answers")
                buf = bufs[c]
                buf += data
                pos, size, done, m = 0, len(buf), got[c], len(frames[c])
                while size - pos >= 4:
                    end = pos + 4 + int.from_bytes(buf[pos:pos + 4], "big")
                    if end > size:
                        break
                    cid = int.from_bytes(buf[pos + 4:pos + 8], "big")
                    if cid != done % m + 1:
                        raise RuntimeError(f"connection {c}: answer {done} has correlation id {cid}, "
                                           f"expected {done % m + 1}")
                    if buf[pos + at] or buf[pos + at + 1]:
                        errors += 1
                    done += 1
                    pos = end
                del buf[:pos]
                more = min(done - got[c], quota[c] - sent[c])
                got[c] = done
                if more:
                    send(c, more)
                if done == quota[c]:
                    sel.unregister(conns[c])
                    active -= 1
    finally:
        sel.close()
    return sum(got), time.perf_counter() - t0, errors


def describe_group(bootstrap: str, group: str) -> Any:
    """ConsumerGroupDescribe through odradek's AsyncAdmin (a request of its own, not a heartbeat)."""
    import asyncio

    from odradek.client import AsyncAdmin

    async def go() -> Any:
        async with AsyncAdmin(bootstrap, request_timeout_ms=10_000) as admin:
            return (await admin.describe_groups([group]))[group]

    return asyncio.run(asyncio.wait_for(go(), 30))


def wire_pair(args: argparse.Namespace, pair: int) -> tuple[list[dict[str, Any]], dict[str, Any], bool, float]:
    """One pair of freshly started broker subprocesses (ON, OFF) through the heartbeat-wire
    rounds: (runs, checks, ok, seconds spent seeding). A fresh pair per repetition because a
    process's own layout (hash seed, addresses) moves its CPU per heartbeat by a few per cent
    for its whole life: with one pair that offset is read as the cost of metrics."""
    import socket
    import struct

    from coordinator import (  # bench/coordinator.py: the seeded Stable group and its frames
        GROUP,
        HB_VERSION,
        _recv_exact,
        heartbeat_frame,
        member_ids,
        parse_heartbeat_response,
        seed_data_dir,
    )

    n, count, inflight = args.members, args.wire_heartbeats, args.wire_inflight
    nconn = min(args.wire_connections, n)
    warm = max(2_000, 2 * n)
    epoch = 1  # the seeded group's epoch (coordinator.converged_records): every member's, the group's, the target's
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-wire-", dir=args.work_dir))
    brokers: dict[str, MetricsBroker] = {}
    socks: dict[str, list[socket.socket]] = {}
    mids = member_ids(n)
    shares = [mids[c::nconn] for c in range(nconn)]
    frames = [[heartbeat_frame(mid, epoch, j + 1) for j, mid in enumerate(share)] for share in shares]
    runs: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    ok = True
    try:
        t_seed = time.perf_counter()
        for mode in MODES:
            # --control: both with metrics off (the A/A run: ON/OFF is the noise floor)
            mb = brokers[mode] = MetricsBroker(work, mode, mode == "ON" and not args.control, {})
            seed_data_dir(mb.proc.data_dir, n, n)
        t_seed = time.perf_counter() - t_seed
        for mb in brokers.values():
            mb.proc.start()
        check_ports(brokers)
        on = brokers["ON"]

        def hb_counted() -> float | None:  # the ON broker's count of ConsumerGroupHeartbeat v1 requests, /metrics
            if on.url is None:
                return None
            return requests_total(scrape(on.url, on.proc.pid)["text"], "ConsumerGroupHeartbeat", HB_VERSION)

        hb0 = hb_counted()
        for mode, mb in brokers.items():
            # the group as the broker loaded it from the seeded data dir
            g = describe_group(mb.proc.bootstrap, GROUP)
            epochs = {m.member_id: m.epoch for m in g.members}
            if g.state != "Stable" or g.epoch != epoch or g.assignment_epoch != epoch or \
                    epochs != dict.fromkeys(mids, epoch):
                raise RuntimeError(f"{mode} broker loaded group {GROUP}: {g.state}, epoch {g.epoch}/"
                                   f"{g.assignment_epoch}, {len(epochs)} members, epochs {set(epochs.values())}")
            socks[mode] = []
            for _ in range(nconn):
                s = socket.create_connection(("127.0.0.1", mb.proc.port), timeout=10)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                socks[mode].append(s)
            # the first heartbeat's answer, parsed fully: no error, the same epoch, no new assignment
            s = socks[mode][0]
            s.sendall(heartbeat_frame(mids[0], epoch, 999_999))
            (size,) = struct.unpack(">i", _recv_exact(s, 4))
            cid, body = parse_heartbeat_response(_recv_exact(s, size))
            if cid != 999_999 or int(body.error_code) or body.member_epoch != epoch or body.assignment is not None:
                raise RuntimeError(f"{mode} broker: first heartbeat answered {body}")
            print(f"  {mode:3s} broker pid {mb.proc.pid} on {mb.proc.bootstrap}"
                  + (f", {mb.url}" if mb.url else "") + f": group {GROUP} loaded {g.state}, {len(g.members):,} "
                  f"members at epoch {epoch}; first heartbeat: error_code 0, member_epoch {body.member_epoch}, "
                  f"assignment None", flush=True)
            # warm-up (untimed): every member heartbeats
            done, _, errors = drive_wire(socks[mode], frames, warm, inflight, args.max_seconds)
            if done != warm or errors:
                raise RuntimeError(f"{mode} broker: warm-up {done:,} of {warm:,} answered, {errors} errors")
        hb1 = hb_counted()
        pids = {m: b.proc.pid for m, b in brokers.items()}
        for rnd in range(args.wire_rounds):
            for mode in (MODES if rnd % 2 == 0 else MODES[::-1]):
                other = MODES[1 - MODES.index(mode)]
                c0 = {m: precise_tree_cpu_s([p]) for m, p in pids.items()}
                d0 = time.thread_time()
                done, secs, errors = drive_wire(socks[mode], frames, count, inflight, args.max_seconds)
                d1 = time.thread_time()
                c1 = {m: precise_tree_cpu_s([p]) for m, p in pids.items()}
                r = {"pair": pair + 1, "round": rnd + 1, "mode": mode, "heartbeats": done, "seconds": secs, "errors": errors,
                     "broker_cpu_s": c1[mode] - c0[mode], "idle_broker_cpu_s": c1[other] - c0[other],
                     "driver_cpu_s": d1 - d0}
                runs.append(r)
                print(f"  pair {pair + 1} round {rnd + 1} {mode:3s}: {done:,} heartbeats in {secs:.3f} s ({done / secs:,.0f}/s), "
                      f"broker CPU {r['broker_cpu_s']:.3f} s = {1e6 * r['broker_cpu_s'] / done:.2f} us/hb, this "
                      f"driver {1e6 * r['driver_cpu_s'] / done:.2f} us/hb, errors {errors}; the idle {other} broker "
                      f"meanwhile {1e3 * r['idle_broker_cpu_s'] / secs:.2f} ms CPU per s", flush=True)
                if done != count or errors:
                    ok = False
                if not brokers[mode].proc.alive():
                    raise RuntimeError(f"{mode} broker exited: {brokers[mode].proc.log_tail()}")
        hb2 = hb_counted()
        timed_on = sum(r["heartbeats"] for r in runs if r["mode"] == "ON")
        if hb0 is None or hb1 is None or hb2 is None:
            print("  CONTROL RUN: the 'ON' broker has metrics OFF too (nothing to scrape)")
        else:
            checks = {"warm_up": [hb1 - hb0, 1 + warm], "timed": [hb2 - hb1, timed_on]}
            right = hb1 - hb0 == 1 + warm and hb2 - hb1 == timed_on
            print(f"  ON broker's odradek_requests_total{{request=\"ConsumerGroupHeartbeat\",version=\"{HB_VERSION}\"}} "
                  f"on /metrics: {hb0:,.0f} at start, +{hb1 - hb0:,.0f} over the first heartbeat and the warm-up (sent "
                  f"1 + {warm:,}), +{hb2 - hb1:,.0f} over the timed rounds (sent {timed_on:,})"
                  + ("" if right else "  MISMATCH"), flush=True)
            ok = ok and right
        for mode, mb in brokers.items():
            # nothing changed: the same group, epochs and members after every heartbeat
            g = describe_group(mb.proc.bootstrap, GROUP)
            same = g.state == "Stable" and g.epoch == epoch and g.assignment_epoch == epoch and \
                {m.member_id: m.epoch for m in g.members} == dict.fromkeys(mids, epoch)
            checks[f"group_after_{mode}"] = same
            if not same:
                ok = False
                print(f"  {mode} broker: group {GROUP} after the rounds: {g.state}, epoch {g.epoch}/"
                      f"{g.assignment_epoch}, {len(g.members)} members (CHANGED)")
    finally:
        for ss in socks.values():
            for s in ss:
                s.close()
        ok = stop_brokers(brokers, work, args.keep) and ok

    return runs, checks, ok, t_seed


def section_heartbeat_wire(args: argparse.Namespace, summary: dict) -> bool:
    from coordinator import HB_VERSION

    n, count, inflight = args.members, args.wire_heartbeats, args.wire_inflight
    nconn = min(args.wire_connections, n)
    warm = max(2_000, 2 * n)
    print(f"\n== heartbeat-wire: two broker subprocesses, metrics ON (metrics.listener=127.0.0.1:<port>) and OFF "
          f"(metrics.listener=), each on its own data dir seeded with a Stable group of {n:,} member(s) ({n:,} "
          f"partitions); this process sends partial ConsumerGroupHeartbeat v{HB_VERSION} round-robin over the members "
          f"on {nconn} raw TCP connection(s) per broker, pipelined ({inflight} in flight per connection at most), "
          f"every answer's correlation id and error code checked; {count:,} heartbeats per round (at most "
          f"{args.max_seconds:g} s), {args.wire_rounds} round(s) per mode, ON and OFF alternating which goes first, on each of "
          f"{args.wire_pairs} pair(s) of freshly started brokers; broker CPU from its threads' schedstat"
          + ("; CONTROL RUN: the 'ON' broker has metrics OFF too" if args.control else "") + " ==", flush=True)
    runs: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    ok = True
    t_seed = 0.0
    for pair in range(args.wire_pairs):
        pair_runs, pair_checks, pair_ok, seeded = wire_pair(args, pair)
        runs += pair_runs
        checks[f"pair_{pair + 1}"] = pair_checks
        ok = ok and pair_ok
        t_seed += seeded
        if not pair_ok:
            break
    res: dict[str, dict[str, Any]] = {}
    rows = []
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode and r["heartbeats"]]
        us = [1e6 * r["broker_cpu_s"] / r["heartbeats"] for r in mine]
        wall = [1e6 * r["seconds"] / r["heartbeats"] for r in mine]
        hbs = [r["heartbeats"] / r["seconds"] for r in mine]
        drv = [1e6 * r["driver_cpu_s"] / r["heartbeats"] for r in mine]
        total = ratio_of([r["broker_cpu_s"] for r in mine], 1e-6 * sum(r["heartbeats"] for r in mine))
        res[mode] = {"broker_us": median(us), "broker_us_total": total, "wall_us": median(wall), "hb_s": median(hbs),
                     "driver_us": median(drv), "errors": sum(r["errors"] for r in mine)}
        rows.append((mode, fmt(median(us), ".2f"), f"{min(us):.2f}-{max(us):.2f}" if us else "-", fmt(total, ".2f"),
                     fmt(median(hbs)), f"{min(hbs):,.0f}-{max(hbs):,.0f}" if hbs else "-", fmt(median(wall), ".2f"),
                     fmt(median(drv), ".2f"), f"{sum(r['heartbeats'] for r in mine):,}", str(res[mode]["errors"])))
    paired: list[float] = []
    by_pair: dict[int, list[float]] = {}
    for p in range(args.wire_pairs):
        for rnd in range(args.wire_rounds):
            two = {r["mode"]: r for r in runs if r["pair"] == p + 1 and r["round"] == rnd + 1 and r["heartbeats"]}
            if len(two) == 2 and two["OFF"]["broker_cpu_s"]:
                x = ((two["ON"]["broker_cpu_s"] / two["ON"]["heartbeats"])
                     / (two["OFF"]["broker_cpu_s"] / two["OFF"]["heartbeats"]))
                paired.append(x)
                by_pair.setdefault(p + 1, []).append(x)
    idle = [1e3 * r["idle_broker_cpu_s"] / r["seconds"] for r in runs if r["seconds"]]
    print()
    table(("metrics", "broker CPU us/hb", "min-max", "total", "heartbeats/s", "min-max", "wall us/hb",
           "driver CPU us/hb", "heartbeats", "errors"), rows)
    on_us, off_us = res.get("ON", {}).get("broker_us"), res.get("OFF", {}).get("broker_us")
    print(f"  heartbeat over TCP: metrics ON adds {fmt(on_us - off_us if on_us and off_us else None, '+.2f')} us of "
          f"broker CPU per heartbeat (medians: cost {fmt_pct(cost_pct(on_us, off_us))}); ON/OFF in each round "
          f"{', '.join(f'{x:.3f}' for x in paired)}, median {fmt(median(paired), '.3f')}; heartbeats/s: cost "
          f"{fmt_pct(cost_pct(res['ON']['hb_s'], res['OFF']['hb_s'], True) if runs else None)}")
    print("  per pair of broker processes, median ON/OFF: " + ", ".join(
        f"pair {p} {median(xs):.3f} ({fmt_pct(cost_pct(median(xs), 1.0))})" for p, xs in by_pair.items()))
    print(f"  (broker CPU us/hb: all the broker process's threads (schedstat) over a round / its heartbeats, median "
          f"over the rounds, 'total' over all of them; it includes the broker's background work, which the idle broker "
          f"shows: {fmt(median(idle), '.2f')} ms of CPU per s (min {fmt(min(idle) if idle else None, '.2f')}, max "
          f"{fmt(max(idle) if idle else None, '.2f')}); driver: this process's thread sending and checking; seeding "
          f"the two data dirs took {t_seed:.1f} s)" if runs else "")
    summary["heartbeat_wire"] = {"modes": res, "paired_ratios": paired, "pair_ratios": by_pair,
                                 "idle_broker_ms_per_s": idle,
                                 "counted": checks, "connections": nconn, "inflight": inflight, "warm_up": warm,
                                 "runs": runs}
    return ok and len(runs) == 2 * args.wire_rounds * args.wire_pairs


# --------------------------------------------------------------------------


def print_summary(args: argparse.Namespace, summary: dict, cores: int) -> None:
    rows = []

    def row(name: str, off: float | None, on: float | None, spec: str, paired: list[float] | None,
            headline: bool, higher_is_better: bool = False) -> None:
        # The verdict uses the median of the per-round ON/OFF ratios (each ON run against the
        # OFF run next to it): a burst of load from elsewhere then moves one round, not the figure.
        pm = median(paired) if paired else None
        pct = cost_pct(pm, 1.0) if pm else cost_pct(on, off, higher_is_better)
        verdict = "-" if pct is None else ("yes" if pct < TARGET_PCT else "NO")
        rows.append((name, fmt(off, spec), fmt(on, spec), fmt(on / off if on and off else None, ".3f"),
                     f"{pm:.3f} ({min(paired):.3f}-{max(paired):.3f})" if paired else "-", fmt_pct(pct),
                     verdict if headline else f"({verdict})"))

    tp = summary.get("throughput")
    if tp:
        for ph in ("produce", "consume"):
            off, on = tp["modes"]["OFF"][ph], tp["modes"]["ON"][ph]
            row(f"{ph}: broker CPU us/record", off["broker_us_rec"], on["broker_us_rec"], ".3f",
                tp["cost"][ph]["paired_ratios"], True)
        for ph in ("produce", "consume"):
            off, on = tp["modes"]["OFF"][ph], tp["modes"]["ON"][ph]
            row(f"{ph}: records/s (median)", off["rec_s"], on["rec_s"], ",.0f", None, False, True)
    rq = summary.get("requests")
    if rq:
        for ph in ("produce", "fetch"):
            r = rq[ph]
            row(f"{ph}: CPU us/request in process", r["cpu_us"]["OFF"], r["cpu_us"]["ON"], ".1f", r["paired_ratios"],
                True)
    hb = summary.get("heartbeat")
    if hb:
        row("heartbeat: CPU us/heartbeat in process", hb["cpu_us"]["OFF"], hb["cpu_us"]["ON"], ".2f",
            hb["paired_ratios"], True)
        row("heartbeat: wall us/heartbeat in process", hb["wall_us"]["OFF"], hb["wall_us"]["ON"], ".2f", None, False)
    hw = summary.get("heartbeat_wire")
    if hw:
        off, on = hw["modes"]["OFF"], hw["modes"]["ON"]
        row("heartbeat over TCP: broker CPU us/heartbeat (subprocess)", off["broker_us"], on["broker_us"], ".2f",
            hw["paired_ratios"], True)
        row("heartbeat over TCP: heartbeats/s (median)", off["hb_s"], on["hb_s"], ",.0f", None, False, True)
    control = " -- CONTROL RUN: both brokers had metrics OFF" if args.control else ""
    print(f"\n== summary: metrics ON vs OFF, same run (target: cost < {TARGET_PCT:g} %){control} ==")
    table(("measure", "OFF", "ON", "ON/OFF", "per round: median (min-max)", "cost", f"< {TARGET_PCT:g} %"), rows)
    if tp and tp["scrapes"]:
        ms = [s["ms"] for s in tp["scrapes"]]
        print(f"  /metrics scrape of the ON broker: median {median(ms):.1f} ms (min {min(ms):.1f}, max {max(ms):.1f}), "
              f"{tp['scrapes'][-1]['bytes']:,} B / {tp['scrapes'][-1]['samples']} samples after the last round")
    print("  cost: from the median of the per-round ON/OFF ratios where there is one (records/s, heartbeats/s: from "
          "the medians); OFF/ON columns: broker CPU us/record totals over the rounds, in process and over TCP medians "
          "over the runs. Rows in brackets are for information: records/s and heartbeats/s depend on who gets the "
          "cores")
    print(f"  conditions: {cores} cores shared by the two broker subprocesses, the client processes and whatever else "
          f"runs (loadavg at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}); brokers' data in "
          f"{args.work_dir or tempfile.gettempdir()}; {args.size}-byte values, {args.records:,} records per phase, "
          f"{args.rounds} round(s) per mode; in process: {args.produce_requests:,} Produce / {args.fetch_requests:,} "
          f"Fetch requests / {args.heartbeats:,} heartbeats ({args.members:,}-member group) per run, "
          f"{args.inproc_rounds} run(s) per mode; over TCP: {args.wire_heartbeats:,} heartbeats per round on "
          f"{min(args.wire_connections, args.members)} connection(s) x {args.wire_inflight} in flight, "
          f"{args.wire_rounds} round(s) per mode on each of {args.wire_pairs} pair(s) of broker processes")


SECTIONS = {"throughput": section_throughput, "requests": section_requests, "heartbeat": section_heartbeat,
            "heartbeat-wire": section_heartbeat_wire}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="throughput,requests,heartbeat,heartbeat-wire",
                    help="comma-separated: throughput, requests, heartbeat, heartbeat-wire")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce/consume phase")
    ap.add_argument("--rounds", type=int, default=8, help="throughput runs per mode (ON, OFF), alternating")
    ap.add_argument("--heartbeats", type=int, default=10_000, help="heartbeats per timed run")
    ap.add_argument("--inproc-rounds", type=int, default=15,
                    help="timed in-process runs per mode (requests, heartbeat sections), alternating")
    ap.add_argument("--produce-requests", type=int, default=300, help="requests: Produce requests per timed run")
    ap.add_argument("--fetch-requests", type=int, default=100, help="requests: Fetch requests per timed run")
    ap.add_argument("--batch-records", type=int, default=100,
                    help="requests: records per batch (one batch per partition in each Produce)")
    ap.add_argument("--wire-heartbeats", type=int, default=10_000, help="heartbeat-wire: heartbeats per timed round")
    ap.add_argument("--wire-rounds", type=int, default=10,
                    help="heartbeat-wire: timed rounds per mode and pair of brokers, alternating")
    ap.add_argument("--wire-pairs", type=int, default=4,
                    help="heartbeat-wire: pairs of broker processes (ON, OFF) started one after the other, each "
                         "through --wire-rounds rounds (a process's own layout moves its CPU per heartbeat)")
    ap.add_argument("--wire-connections", type=int, default=4,
                    help="heartbeat-wire: TCP connections per broker (each with its share of the members)")
    ap.add_argument("--wire-inflight", type=int, default=32,
                    help="heartbeat-wire: unanswered heartbeats per connection at most (pipelining)")
    ap.add_argument("--members", type=int, default=100, help="members of the heartbeating group (1 partition each)")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=1, help="producer processes per phase")
    ap.add_argument("--consumers", type=int, default=1, help="consumer processes per phase")
    ap.add_argument("--batch-num-messages", type=int, default=200,
                    help="throughput: the producers' batch.num.messages (0: librdkafka's default, 10,000); see above")
    ap.add_argument("-X", dest="client_prop", action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka property for the producers and consumers (e.g. -X batch.num.messages=500)")
    ap.add_argument("--control", action="store_true",
                    help="A/A control: the 'ON' broker runs with metrics off too (throughput, heartbeat-wire "
                         "sections), so the ON/OFF figures show the noise floor of the comparison")
    ap.add_argument("--phase-timeout", type=float, default=60.0, help="seconds; a phase that runs over fails")
    ap.add_argument("--max-seconds", type=float, default=20.0, help="upper bound of one heartbeat run or round")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    ap.add_argument("--work-dir", default=shm,
                    help="where the brokers keep their data (tmpfs: the virtual disk's write path adds noise to the "
                         "broker's CPU per record); empty: a temp dir")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' work dir (data, logs)")
    ap.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    args = ap.parse_args(argv)
    require_positive(ap, args, ("records", "rounds", "heartbeats", "inproc_rounds", "members", "producers",
                                "consumers", "partitions", "produce_requests", "fetch_requests", "batch_records",
                                "wire_heartbeats", "wire_rounds", "wire_pairs", "wire_connections", "wire_inflight"))
    if args.members > 10_000:
        ap.error("--members must be <= 10,000 (the broker's partitions-per-topic limit)")
    args.work_dir = args.work_dir or None
    if any("=" not in kv for kv in args.client_prop):
        ap.error("-X takes KEY=VALUE")

    def finish(summary: dict, cores: int, seconds: float) -> None:
        print_summary(args, summary, cores)
        print(f"  total bench time {seconds:.1f} s")

    return run_sections(ap, args, SECTIONS, finish, ("prometheus_client",))  # the broker's exporter


if __name__ == "__main__":
    sys.exit(main())
