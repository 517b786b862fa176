#!/usr/bin/env python3
"""Replicated cluster (issue 17): what replication costs, and how long a partition is
unavailable after its leader is killed.

This is a benchmark script, not a test. Two sections (``--sections``):

``throughput``  Produce throughput with confluent-kafka (librdkafka) producer processes,
                ``bench/throughput.py``'s producer worker and settings (``--producers``
                processes, record *i* to partition *i mod* ``--partitions``, linger 5 ms,
                batch.size 1,000,000, no compression, no idempotence), timed from the
                first ``produce()`` to the last ``flush()``, for three configurations in
                the same run:

                * ``single acks=1``: one ``odradek broker --data-dir D --listen
                  127.0.0.1:PORT`` (no etcd, the file metadata store), topic RF=1;
                * ``cluster acks=all``: ``LocalCluster`` (etcd + three broker processes,
                  racks a,b,c), topic RF=3 with ``min.insync.replicas=2``;
                * ``cluster acks=1``: the same cluster, a topic RF=3, acks=1 (for
                  reference: replication still runs, the producer does not wait for it).

                Every run uses a fresh topic; after it the topic's high watermarks must
                have grown by exactly the record count. Repeats are interleaved (single,
                then cluster) with a fresh broker/cluster per repeat; the table shows
                medians, the CPU time the brokers, etcd and the producer processes used
                during the phase (in cores: CPU seconds / wall seconds), and the ratio
                cluster / single.

``failover``    Unavailability after ``kill -9`` of a partition leader, for each
                ``broker.session.timeout.ms`` in ``--ttls`` (the broker's etcd lease TTL),
                ``--failover-repeat`` times each, a fresh cluster every time: create a
                topic (1 partition, RF=3, min.insync.replicas=2), wait for the full ISR,
                run one idempotent acks=all librdkafka producer at a steady
                ``--rate`` records/s (settings printed), after a warm-up of 2 s plus a
                random fraction of the keepalive interval (so that the kill lands at a
                random point of the lease's keepalive cycle) SIGKILL the partition's
                leader and keep producing. Measured, on one monotonic clock:

                * **unavailability**: from the kill until the first acknowledged
                  (acks=all) record among those produced after the kill;
                * **max gap**: the longest time between two consecutive acknowledgements;
                * the components, from an etcd watch on the metadata prefix run by this
                  script: kill -> the dead broker's registration deleted (its lease
                  expired), -> the partition's new leader written by the controller,
                  -> the first post-kill acknowledgement (the producer finding the new
                  leader, the new leader taking over, the follower catching up for the
                  acks=all high watermark).

                Interleaved with them, the same trials run with each ``--client-variant`` of the producer
                settings (default: ``topic.metadata.refresh.interval.ms=250``) at the
                session timeouts in ``--variant-ttls``, to show the client's share.
                ``--client-debug metadata,topic`` (with ``--keep``) writes librdkafka's
                debug log, stamped with this script's clock and the kill/etcd events, to
                each trial's directory: that is how the client's part was traced (with
                librdkafka 2.16 a partition whose leader's connection is down is
                re-queried by the 1 s topic scan, whatever ``retry.backoff.max.ms`` says).

                The issue's goal: under 3 s.

A cluster start that fails (on a shared machine another process can take the free port
LocalCluster picked before the broker binds it) is retried with new ports, at most 3 times,
and noted. Every phase is bounded in time (``--phase-timeout``, ``--failover-timeout``) and
records (``--records``); all traffic stays on 127.0.0.1; brokers and etcd are stopped in
``finally`` blocks (SIGTERM to this script stops them too). The machine line printed first
says what shares the cores: etcd, the brokers and the producer processes all run on the
same machine (2 cores where the figures in BENCHMARKS.md were taken).

Run:  .venv/bin/python bench/cluster.py                 # both sections, about 6 minutes on 2 cores
      .venv/bin/python bench/cluster.py --quick         # tiny counts, one TTL, one repeat
See ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # puts src/ on sys.path too
    BrokerProcess,
    drain,
    interrupt_on_sigterm,
    machine_line,
    stop_workers,
    table,
)
from throughput import (
    MB,
    _process_tree,
    plan_partition_counts,
    producer_worker,
    split,
    tree_cpu_s,
    watermarks,
)

from odradek.cluster.etcd_process import find_etcd
from odradek.commands.cluster import LocalCluster

ETCD_PREFIX = b"/odradek/"
RACKS = ["a", "b", "c"]


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _fmt(v: float | None, spec: str = ",.0f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def versions() -> dict[str, str]:
    import confluent_kafka

    first = lambda v: v[0] if isinstance(v, tuple) else v
    out = {"confluent_kafka": first(confluent_kafka.version()), "librdkafka": first(confluent_kafka.libversion())}
    try:
        first = subprocess.run([find_etcd(), "--version"], capture_output=True, text=True,
                               timeout=10, check=False).stdout.splitlines()
        out["etcd"] = first[0].split(":", 1)[1].strip() if first else "?"
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        out["etcd"] = f"? ({exc})"
    return out


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, configs: dict[str, str],
                 timeout: float = 30.0) -> None:
    """Create `topic` and wait until every partition has a leader and its full ISR."""
    from confluent_kafka.admin import NewTopic

    adm = admin(bootstrap)  # kept alive until the answer comes
    fs = adm.create_topics([NewTopic(topic, partitions, rf, config=configs)],
                           operation_timeout=timeout, request_timeout=timeout)
    fs[topic].result(timeout)
    deadline = time.monotonic() + timeout
    last = "no metadata"
    while time.monotonic() < deadline:
        try:
            md = adm.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if (t is not None and t.error is None and len(t.partitions) == partitions
                    and all(p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values())):
                return
            last = f"{t.error if t else 'missing'}: " + (
                ", ".join(f"{i}: leader {p.leader} isr {p.isrs}" for i, p in t.partitions.items()) if t else "")
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic}: no leader/full ISR within {timeout:.0f}s ({last})")


def start_cluster(work: Path, overrides: list[str], notes: list[str], attempts: int = 3,
                  log_level: str = "WARNING") -> LocalCluster:
    """A started LocalCluster (etcd + 3 brokers on free ports, logging at `log_level`).
    LocalCluster picks a free port, closes it and lets the broker bind it: on a shared
    machine another process can take it in between ("address already in use"). Such a
    failed start is stopped and retried with new ports (at most `attempts` times), and noted."""
    for attempt in range(1, attempts + 1):
        cluster = LocalCluster(work / f"cluster-{attempt}", brokers=3, racks=RACKS, port=0, overrides=overrides,
                               log_level=log_level)
        try:
            return cluster.start()
        except (RuntimeError, TimeoutError, OSError) as exc:
            cluster.stop()
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            notes.append(f"cluster start {attempt}/{attempts} failed: {last}")
            print(f"    cluster start {attempt}/{attempts} failed ({last[:200]}); "
                  f"{'retrying with new ports' if attempt < attempts else 'giving up'}", flush=True)
            if attempt == attempts:
                raise
        except BaseException:
            cluster.stop()
            raise
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------
# Section 1: throughput
# --------------------------------------------------------------------------


def producer_conf(bootstrap: str, acks: str, timeout: float) -> dict[str, Any]:
    """bench/throughput.py's producer settings, acks as given."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": False,
        "compression.type": "none",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "delivery.report.only.error": True,
        "socket.nagle.disable": True,
        "message.timeout.ms": int(timeout * 1000),
        "log_level": 3,
    }


class Servers:
    """What the throughput section produces to: one broker, or a cluster."""

    def __init__(self, kind: str, work: Path, args: argparse.Namespace) -> None:
        self.kind, self.work, self.args = kind, work, args
        self.single: BrokerProcess | None = None
        self.cluster: LocalCluster | None = None
        self.notes: list[str] = []

    def start(self) -> Servers:
        if self.kind == "single":
            self.single = BrokerProcess(self.work / "data", [], self.work / "broker.log",
                                        cli_args=("--log-level", "WARNING"))
            self.single.start()
        else:
            self.cluster = start_cluster(self.work, ["offsets.topic.num.partitions=3"], self.notes)
        return self

    @property
    def bootstrap(self) -> str:
        return self.single.bootstrap if self.single else self.cluster.bootstrap

    def pids(self) -> dict[str, list[int]]:
        if self.single:
            return {"brokers": [self.single.pid], "etcd": []}
        return {"brokers": [p.pid for p in self.cluster.procs.values()],
                "etcd": [self.cluster.etcd.proc.pid] if self.cluster.etcd and self.cluster.etcd.proc else []}

    def alive(self) -> bool:
        if self.single:
            return self.single.alive()
        return all(p.poll() is None for p in self.cluster.procs.values())

    def log_tail(self) -> str:
        if self.single:
            return self.single.log_tail()
        return " | ".join(f"broker {n}: {self.cluster.log_of(n)[-600:]}" for n in sorted(self.cluster.procs))

    def stop(self) -> None:
        if self.single:
            self.single.stop()
        if self.cluster:
            self.cluster.stop()


def cpu_of(pids: list[int]) -> float:
    return sum(tree_cpu_s(_process_tree(p)) for p in pids)


def run_produce(ctx: Any, servers: Servers, topic: str, records: int, size: int, acks: str,
                args: argparse.Namespace) -> dict[str, Any]:
    """bench/throughput.py's produce phase against `servers` (any broker set)."""
    res: dict[str, Any] = {"status": "failed", "records": records, "size": size}
    per = [n for n in split(records, args.producers) if n > 0]
    plan = plan_partition_counts(per, args.partitions)
    before = watermarks(servers.bootstrap, topic, args.partitions, 10.0)
    conf = producer_conf(servers.bootstrap, acks, args.phase_timeout)
    start_evt, ready_q, result_q = ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=producer_worker, daemon=True, name=f"bench-producer-{i}",
                         args=(i, conf, topic, n, size, args.partitions, args.phase_timeout,
                               start_evt, ready_q, result_q)) for i, n in enumerate(per)]
    results: list[dict] = []
    try:
        for p in procs:
            p.start()
        ready, deadline = 0, time.monotonic() + 60
        while ready < len(procs):
            try:
                ready_q.get(timeout=0.2)
                ready += 1
            except queue.Empty:
                pass
            drain(result_q, results)
            if results or time.monotonic() > deadline or not servers.alive():
                res["error"] = ("setup: " + "; ".join(str(r.get("error")) for r in results)) if results \
                    else f"setup: {ready}/{len(procs)} producers connected; servers alive: {servers.alive()}"
                return res
        pids = servers.pids()
        cpu0 = {k: cpu_of(v) for k, v in pids.items()}
        start_evt.set()
        hard = time.monotonic() + args.phase_timeout + 15
        while len(results) < len(procs) and time.monotonic() < hard:
            try:
                results.append(result_q.get(timeout=0.2))
            except queue.Empty:
                if not servers.alive():
                    res["error"] = f"a broker died: {servers.log_tail()}"
                    return res
        cpu1 = {k: cpu_of(v) for k, v in pids.items()}
        if len(results) < len(procs):
            res["status"], res["error"] = "timeout", f"{len(procs) - len(results)} producers did not report"
            return res
        bad = [r for r in results if not r.get("ok")]
        if bad:
            res["status"] = "timeout" if all(r.get("timeout") for r in bad) else "failed"
            res["error"] = "; ".join(f"producer {r['idx']}: {r.get('error')}" for r in bad)
            return res
        secs = max(r["t1"] for r in results) - min(r["t0"] for r in results)
        res.update(seconds=secs, rec_s=records / secs, mb_s=records * size / MB / secs,
                   cores_brokers=(cpu1["brokers"] - cpu0["brokers"]) / secs,
                   cores_etcd=(cpu1["etcd"] - cpu0["etcd"]) / secs if pids["etcd"] else None,
                   cores_clients=sum(r.get("cpu_s", 0.0) for r in results) / secs)
        # With acks=1 the producer is done before the followers have the records: the high
        # watermark (what consumers see) follows once they fetched them. Wait for it.
        t_done, hw_deadline = time.monotonic(), time.monotonic() + 30
        while True:
            after = watermarks(servers.bootstrap, topic, args.partitions, 10.0)
            grown = {p: after[p][1] - before[p][1] for p in range(args.partitions)}
            if grown == plan or time.monotonic() > hw_deadline or any(grown[p] > plan[p] for p in plan):
                break
            time.sleep(0.02)
        res["hw_wait_s"] = time.monotonic() - t_done
        if grown != plan:
            res["status"] = "failed"
            res["error"] = f"high watermarks grew by {grown}, expected {plan} ({res['hw_wait_s']:.1f}s after flush)"
            return res
        res["status"] = "ok"
        return res
    finally:
        stop_workers(procs, (ready_q, result_q))


# (name, servers kind, acks, RF, topic configs)
CONFIGS = [
    ("single acks=1 RF=1", "single", "1", 1, {}),
    ("cluster acks=all RF=3", "cluster", "all", 3, {"min.insync.replicas": "2"}),
    ("cluster acks=1 RF=3", "cluster", "1", 3, {"min.insync.replicas": "2"}),
]


def section_throughput(args: argparse.Namespace, ctx: Any) -> dict[str, Any]:
    print("\n== produce throughput: one broker vs. a three-broker cluster ==")
    print(f"  {args.producers} librdkafka producer processes, topic of {args.partitions} partitions (fresh per run), "
          f"linger.ms=5, batch.size=1000000, no compression, enable.idempotence=false; "
          f"single broker: file metadata store, no etcd; cluster: etcd + 3 brokers (racks a,b,c), "
          f"RF=3 topics with min.insync.replicas=2; all brokers --log-level WARNING, data under {args.work_dir or tempfile.gettempdir()}; "
          f"{args.repeat} repeat(s), fresh broker/cluster per repeat, medians", flush=True)
    runs: dict[tuple[str, int], list[dict]] = {}
    for rep in range(args.repeat):
        for kind in ("single", "cluster"):
            work = Path(tempfile.mkdtemp(prefix=f"bench-cluster-{kind}-", dir=args.work_dir))
            servers = Servers(kind, work, args)
            try:
                t0 = time.monotonic()
                servers.start()
                print(f"  [run {rep + 1}/{args.repeat}] {kind} up in {time.monotonic() - t0:.1f}s "
                      f"({servers.bootstrap})", flush=True)
                for size, records in zip(args.size_list, args.record_list):
                    for name, k, acks, rf, configs in CONFIGS:
                        if k != kind:
                            continue
                        topic = f"tp-{size}-{acks}-{uuid.uuid4().hex[:6]}"
                        try:
                            create_topic(servers.bootstrap, topic, args.partitions, rf, configs)
                            r = run_produce(ctx, servers, topic, records, size, acks, args)
                        except Exception as exc:  # noqa: BLE001 - recorded as a failed run
                            r = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
                        runs.setdefault((name, size), []).append(r)
                        if r["status"] == "ok":
                            print(f"    {name:22s} {size:5d} B x {records:,}: {r['seconds']:.2f}s "
                                  f"{r['rec_s']:,.0f} rec/s  cores: brokers {r['cores_brokers']:.2f}"
                                  + (f" etcd {r['cores_etcd']:.2f}" if r.get("cores_etcd") is not None else "")
                                  + f" clients {r['cores_clients']:.2f}; high watermark complete "
                                  f"{r['hw_wait_s']:.2f}s after flush", flush=True)
                        else:
                            print(f"    {name:22s} {size:5d} B: {r['status'].upper()}: {str(r.get('error'))[:600]}",
                                  flush=True)
            except Exception as exc:  # noqa: BLE001 - a failed start is reported, the run goes on
                print(f"  [run {rep + 1}] {kind}: FAILED: {type(exc).__name__}: {str(exc)[:1500]}", flush=True)
            finally:
                servers.stop()
                if not args.keep:
                    shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, Any] = {}
    for size, records in zip(args.size_list, args.record_list):
        print(f"\n  -- {size}-byte values, {records:,} records per run --")
        rows, sums = [], {}
        for name, *_ in CONFIGS:
            rs = runs.get((name, size), [])
            ok = [r for r in rs if r["status"] == "ok"]
            s = {"ok_runs": len(ok), "runs": len(rs),
                 "rec_s": _median([r["rec_s"] for r in ok]), "mb_s": _median([r["mb_s"] for r in ok]),
                 "rec_s_all": [r.get("rec_s") for r in rs],
                 "cores_brokers": _median([r["cores_brokers"] for r in ok]),
                 "cores_etcd": _median([r["cores_etcd"] for r in ok if r.get("cores_etcd") is not None]),
                 "cores_clients": _median([r["cores_clients"] for r in ok]),
                 "hw_wait_s": _median([r["hw_wait_s"] for r in ok]),
                 "broker_cpu_us_per_record": _median([1e6 * r["cores_brokers"] * r["seconds"] / records
                                                      for r in ok])}
            sums[name] = s
            rows.append((name, _fmt(s["rec_s"]) if ok else "FAILED", _fmt(s["mb_s"], ",.1f"),
                         " / ".join(_fmt(x) for x in s["rec_s_all"]),
                         _fmt(s["cores_brokers"], ".2f"), _fmt(s["cores_etcd"], ".2f"), _fmt(s["cores_clients"], ".2f"),
                         _fmt(s["broker_cpu_us_per_record"], ".2f"), _fmt(s["hw_wait_s"], ".2f"),
                         f"{len(ok)}/{len(rs)}"))
        table(("configuration", "rec/s", "MB/s", "each run rec/s", "brokers cores", "etcd cores",
               "clients cores", "broker us/rec", "HW after s", "ok"), rows)
        base = sums.get(CONFIGS[0][0], {}).get("rec_s")
        ratios = {}
        for name, *_ in CONFIGS[1:]:
            v = sums.get(name, {}).get("rec_s")
            ratios[name] = v / base if v and base else None
        print("  ratio cluster / single (rec/s; the MB/s ratio is the same): "
              + ", ".join(f"{n}: {_fmt(r, '.2f', 'n/a')}x" for n, r in ratios.items()))
        summary[str(size)] = {"records": records, "configs": sums, "ratio_over_single": ratios}
    print("  (MB/s = 10^6 value bytes/s; cores = CPU seconds used during the produce phase / its wall time, "
          "summed over the broker processes, etcd, and the producer processes; broker us/rec = broker CPU "
          "microseconds per record, all brokers together; HW after = from the last flush() until every partition's "
          "high watermark had grown by what was sent, polled with ListOffsets every ~20 ms plus the call's own time)")
    return {"summary": summary, "runs": {f"{k[0]} / {k[1]}": v for k, v in runs.items()}}


# --------------------------------------------------------------------------
# Section 2: unavailability after kill -9 of the leader
# --------------------------------------------------------------------------


class EtcdWatch:
    """A watch on the metadata prefix, in a thread of its own: every event with the
    monotonic time this process saw it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.events: list[tuple[float, str, str, bytes]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="etcd-watch", daemon=True)
        self.client = None
        self.watch = None
        self.task = None

    def _run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> EtcdWatch:
        import aetcd

        self.thread.start()

        async def open_() -> None:
            self.client = aetcd.Client(self.host, self.port, timeout=5)
            self.watch = await self.client.watch_prefix(ETCD_PREFIX)
            self.task = asyncio.ensure_future(self._consume())

        self._run(open_())
        return self

    async def _consume(self) -> None:
        async for ev in self.watch:
            self.events.append((time.monotonic(), ev.kind, ev.kv.key.decode(errors="replace"), ev.kv.value))

    def get(self, key: str) -> Any:
        return self._run(self.client.get(key.encode()))

    def lease_ttl(self, key: str) -> tuple[int, int] | None:
        """(granted TTL, remaining TTL) in seconds of the lease `key` is on."""
        kv = self.get(key)
        if kv is None or not kv.lease:
            return None
        info = self._run(self.client.get_lease_info(kv.lease))
        return info.grantedTTL, info.TTL

    def stop(self) -> None:
        async def close() -> None:
            if self.task is not None:
                self.task.cancel()
            if self.watch is not None:
                try:
                    await asyncio.wait_for(self.watch.cancel(), 2)
                except Exception:  # noqa: BLE001, S110 - etcd may be gone already
                    pass
            if self.client is not None:
                try:
                    await asyncio.wait_for(self.client.close(), 2)
                except Exception:  # noqa: BLE001, S110 - closing is best effort
                    pass

        try:
            if self.thread.is_alive():
                self._run(close(), 5)
        except Exception:  # noqa: BLE001, S110 - best effort
            pass
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)

    def first(self, after: float, kind: str, key: str, pred=lambda v: True) -> float | None:
        for t, k, kk, v in list(self.events):
            if t >= after and k == kind and kk == key and pred(v):
                return t
        return None


def failover_client_conf(bootstrap: str, args: argparse.Namespace, variant: str = "") -> dict[str, Any]:
    """The steady producer's settings; `variant` ("k=v,k=v") overrides some of them."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 0,
        "request.timeout.ms": 2000,
        "message.timeout.ms": int(args.failover_timeout * 1000) + 30_000,
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 1000,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": 2000,
        "log_level": 0,
        **dict(kv.split("=", 1) for kv in args.client_config),
        **dict(kv.split("=", 1) for kv in variant.split(",") if kv),
    }


def failover_trial(args: argparse.Namespace, ttl_ms: int, rnd: random.Random, variant: str = "") -> dict[str, Any]:
    from confluent_kafka import Producer

    res: dict[str, Any] = {"ttl_ms": ttl_ms, "variant": variant, "status": "failed"}
    work = Path(tempfile.mkdtemp(prefix=f"bench-failover-{ttl_ms}-", dir=args.work_dir))
    cluster: LocalCluster | None = None
    watch: EtcdWatch | None = None
    producer = None
    res["notes"] = []
    try:
        cluster = start_cluster(work, [f"broker.session.timeout.ms={ttl_ms}", "offsets.topic.num.partitions=3"],
                                res["notes"])
        watch = EtcdWatch(*cluster.etcd.endpoint).start()
        topic = f"failover-{uuid.uuid4().hex[:6]}"
        create_topic(cluster.bootstrap, topic, 1, 3, {"min.insync.replicas": "2"})
        md = admin(cluster.bootstrap).list_topics(topic, timeout=10)
        leader = md.topics[topic].partitions[0].leader
        controller = md.controller_id
        res.update(leader=leader, controller=controller, leader_was_controller=leader == controller)
        lease = watch.lease_ttl(f"/odradek/brokers/{leader}")
        res["lease_granted_s"] = lease[0] if lease else None
        keepalive = (lease[0] if lease else ttl_ms / 1000) / 3

        errors: list[str] = []
        client_errors: list[str] = []
        sent_at: list[float] = []
        acked: list[tuple[float, int]] = []  # (time the delivery report was served, sequence number)
        post = {"first_seq": None, "t_first": None}  # the first record produced after the kill; its ack

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                if len(errors) < 20:
                    errors.append(str(err))
                return
            t, s = time.monotonic(), int(msg.value()[:10])
            acked.append((t, s))
            if post["t_first"] is None and post["first_seq"] is not None and s >= post["first_seq"]:
                post["t_first"] = t

        conf = failover_client_conf(cluster.bootstrap, args, variant)
        conf["error_cb"] = lambda e: client_errors.append(f"{time.monotonic():.3f} {e}") \
            if len(client_errors) < 50 else None
        debug_log = None
        if args.client_debug:
            import logging

            debug_log = open(work / "librdkafka-debug.log", "w")  # noqa: SIM115 - closed below

            class Stamp(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    t = time.monotonic()
                    mark = "" if t_kill is None else f" (kill{t - t_kill:+.3f})"
                    debug_log.write(f"{t:.3f}{mark} {record.getMessage()}\n")

            lg = logging.getLogger(f"librdkafka-{uuid.uuid4().hex[:6]}")
            lg.propagate = False
            lg.addHandler(Stamp())
            lg.setLevel(logging.DEBUG)
            conf.update({"debug": args.client_debug, "logger": lg, "log_level": 7})
        producer = Producer(conf)
        producer.list_topics(topic, timeout=10)
        pad = b"x" * max(0, args.failover_size - 10)
        interval = 1.0 / args.rate
        warmup = args.warmup + rnd.uniform(0, keepalive)
        t_start = time.monotonic()
        t_kill_at = t_start + warmup
        hard_end = t_kill_at + args.failover_timeout
        t_kill: float | None = None
        stopping = False
        next_send = t_start
        seq = 0
        while True:
            now = time.monotonic()
            if now >= hard_end:
                break
            if t_kill is None and now >= t_kill_at:
                t_kill = time.monotonic()
                cluster.procs[leader].kill()  # SIGKILL
                cluster.procs[leader].wait(10)
                post["first_seq"] = seq
                if debug_log is not None:
                    debug_log.write(f"{t_kill:.3f} ===== SIGKILL broker {leader} =====\n")
            if now >= next_send:
                producer.produce(topic, b"%010d" % seq + pad, partition=0, on_delivery=report)
                sent_at.append(time.monotonic())
                seq += 1
                next_send += interval
                if next_send < now - 1.0:  # fell behind (a slow produce() call): do not burst
                    next_send = now
            producer.poll(max(0.0, min(next_send - time.monotonic(), 0.005)))
            if not stopping and post["t_first"] is not None:
                stopping = True
                hard_end = min(hard_end, time.monotonic() + args.tail)
        t_first_post, first_post_seq = post["t_first"], post["first_seq"]
        remaining = producer.flush(10)
        t_end = time.monotonic()
        res.update(sent=seq, acked=len(acked), unflushed=remaining, delivery_errors=errors[:5],
                   client_errors=client_errors[:10], warmup_s=warmup)
        if t_kill is None:
            res["error"] = "never killed the leader"
            return res
        pre_after_kill = [s for t, s in acked if s < first_post_seq and t >= t_kill]
        lat_pre = [t - sent_at[s] for t, s in acked if s < first_post_seq and sent_at[s] < t_kill - 0.5]
        res["ack_latency_before_kill_ms"] = {"median": 1000 * _median(lat_pre) if lat_pre else None,
                                             "max": 1000 * max(lat_pre) if lat_pre else None}
        times = sorted(t for t, _ in acked)
        gaps = [(b - a, a) for a, b in itertools.pairwise(times) if b >= t_kill]
        if times and times[-1] < t_end and t_first_post is None:
            gaps.append((t_end - max(times[-1], t_kill), max(times[-1], t_kill)))
        res["max_gap_s"] = max((g for g, _ in gaps), default=None)
        res["last_ack_before_kill_s"] = (max((t for t in times if t < t_kill), default=t_kill) - t_kill)
        res["unavailable_s"] = (t_first_post - t_kill) if t_first_post is not None else None
        # etcd: the dead broker's registration (lease expiry), its controller key, the new leader
        leader_key = f"/odradek/brokers/{leader}"
        part_key = f"/odradek/partitions/{topic}/0"

        def new_leader(v: bytes) -> bool:
            try:
                return json.loads(v)["leader"] not in (leader, -1)
            except Exception:  # noqa: BLE001
                return False

        t_expired = watch.first(t_kill, "DELETE", leader_key)
        t_elected = watch.first(t_kill, "PUT", part_key, new_leader)
        if debug_log is not None:
            for t, what in ((t_expired, "lease expired"), (t_elected, "new leader in etcd"),
                            (t_first_post, "first post-kill ack")):
                if t is not None:
                    debug_log.write(f"{t:.3f} (kill{t - t_kill:+.3f}) ===== {what} =====\n")
            debug_log.close()
        t_ctrl = watch.first(t_kill, "PUT", "/odradek/controller") if res["leader_was_controller"] else None
        rel = lambda t: None if t is None else t - t_kill
        res.update(lease_expired_s=rel(t_expired), controller_elected_s=rel(t_ctrl), leader_elected_s=rel(t_elected),
                   pre_kill_acked_after_kill=len(pre_after_kill))
        if t_elected is not None and t_first_post is not None:
            res["client_after_election_s"] = t_first_post - t_elected
        if t_first_post is None:
            res["status"] = "timeout"
            res["error"] = (f"no post-kill acknowledgement within {args.failover_timeout:.0f}s; "
                            f"errors {errors[:3]}; client errors {client_errors[-3:]}")
        elif errors:
            res["error"] = f"{len(errors)} delivery errors, first: {errors[0]}"
        else:
            res["status"] = "ok"
        return res
    except Exception as exc:  # noqa: BLE001 - recorded as a failed trial
        res["error"] = f"{type(exc).__name__}: {exc}"
        return res
    finally:
        if producer is not None:
            try:
                producer.purge()
                producer.flush(0)
            except Exception:  # noqa: BLE001, S110 - the client is going away anyway
                pass
            del producer
        if watch is not None:
            watch.stop()
        if cluster is not None:
            cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"    kept {work}")


def section_failover(args: argparse.Namespace) -> dict[str, Any]:
    conf = failover_client_conf("<cluster>", args)
    print("\n== unavailability after kill -9 of the partition leader ==")
    print(f"  cluster: etcd + 3 brokers (racks a,b,c), topic 1 partition RF=3 min.insync.replicas=2, "
          f"replica.lag.time.max.ms at its default; fresh cluster per trial; {args.failover_repeat} trial(s) per TTL")
    print(f"  producer: one librdkafka producer in this process, {args.rate} records/s of {args.failover_size} B, "
          f"delivery reports served by poll() at least every 5 ms; settings: "
          + ", ".join(f"{k}={v}" for k, v in conf.items() if k not in ("bootstrap.servers", "log_level")))
    print(f"  the kill lands {args.warmup:.1f}s + uniform(0, keepalive interval = granted TTL/3) after the producer "
          f"starts; a trial gives up {args.failover_timeout:.0f}s after the kill; it stops {args.tail:.1f}s after the "
          f"first post-kill ack", flush=True)
    if args.variant_list:
        print(f"  client variants (only these settings changed), for session timeouts {args.variant_ttl_list}: "
              + "; ".join(args.variant_list))
    rnd = random.Random(args.seed)
    cases = [(ttl, "") for ttl in args.ttl_list] + [(ttl, v) for v in args.variant_list for ttl in args.variant_ttl_list]
    trials: dict[tuple[int, str], list[dict]] = {}
    for rep in range(args.failover_repeat):
        for ttl, variant in cases:  # interleaved: drift on the machine hits every case alike
            r = failover_trial(args, ttl, rnd, variant)
            trials.setdefault((ttl, variant), []).append(r)
            f = lambda v: _fmt(v, ".2f")
            tag = f"TTL {ttl:5d} ms{' [' + variant + ']' if variant else ''} try {rep + 1}"
            if r.get("unavailable_s") is not None or r["status"] == "ok":
                print(f"  {tag}: unavailable {f(r.get('unavailable_s'))}s  "
                      f"max gap {f(r.get('max_gap_s'))}s | lease expired +{f(r.get('lease_expired_s'))}s, "
                      f"new leader +{f(r.get('leader_elected_s'))}s, client +{f(r.get('client_after_election_s'))}s "
                      f"after that | killed broker {r.get('leader')}"
                      f"{' (controller)' if r.get('leader_was_controller') else ''}, lease granted "
                      f"{r.get('lease_granted_s')}s, acked {r.get('acked')}/{r.get('sent')}, ack latency before the "
                      f"kill median {_fmt((r.get('ack_latency_before_kill_ms') or {}).get('median'), '.1f')} ms"
                      + (f"  ! {r['error']}" if r.get("error") else ""), flush=True)
            else:
                print(f"  {tag}: {r['status'].upper()}: {str(r.get('error'))[:800]}",
                      flush=True)
    rows, summary = [], {}
    for ttl, variant in cases:
        rs = trials.get((ttl, variant), [])
        ok = [r for r in rs if r["status"] == "ok"]

        def mmm(key: str, ok: list[dict] = ok) -> tuple[float | None, float | None, float | None]:
            xs = [r[key] for r in ok if r.get(key) is not None]
            return (min(xs), _median(xs), max(xs)) if xs else (None, None, None)

        s = {k: mmm(k) for k in ("unavailable_s", "max_gap_s", "lease_expired_s", "leader_elected_s",
                                 "client_after_election_s")}
        s["ok"], s["runs"] = len(ok), len(rs)
        s["controller_killed"] = sum(1 for r in ok if r.get("leader_was_controller"))
        s["lease_granted_s"] = sorted({r.get("lease_granted_s") for r in rs if r.get("lease_granted_s")})
        summary[f"{ttl} {variant}".strip()] = s
        trip = lambda t: "/".join(_fmt(x, ".2f") for x in t)
        rows.append((str(ttl), variant or "as above", ",".join(map(str, s["lease_granted_s"])) or "-", trip(s["unavailable_s"]),
                     trip(s["max_gap_s"]), trip(s["lease_expired_s"]), trip(s["leader_elected_s"]),
                     trip(s["client_after_election_s"]), f"{s['controller_killed']}/{len(ok)}", f"{len(ok)}/{len(rs)}",
                     "yes" if s["unavailable_s"][2] is not None and s["unavailable_s"][2] < 3.0 else "no"))
    print()
    table(("session ms", "client", "lease s", "unavailable s", "max gap s", "kill->lease expiry s", "kill->new leader s",
           "new leader->1st ack s", "ctrl killed", "ok", "all < 3 s"), rows)
    print("  (min/median/max over the successful trials; times from the SIGKILL, one monotonic clock; the etcd "
          "events are when this script's watch saw them; 'new leader->1st ack' is the client finding the new "
          "leader plus the new leader's acks=all round; 'ctrl killed': trials whose killed leader was also the "
          "controller)")
    return {"summary": summary, "trials": {f"{k[0]} {k[1]}".strip(): v for k, v in trials.items()}}


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Replicated cluster: produce throughput vs. one broker, and "
                                 "unavailability after kill -9 of a leader (librdkafka clients, loopback).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="throughput,failover", help="comma list of: throughput, failover")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: tiny record counts, one repeat, one TTL (2000), one trial (unless given)")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    ap.add_argument("--records", default="3000000,750000", help="records per run: one number or one per size")
    ap.add_argument("--producers", type=int, default=2, help="throughput: producer processes")
    ap.add_argument("--partitions", type=int, default=6, help="throughput: partitions of each topic")
    ap.add_argument("--repeat", type=int, default=3, help="throughput: runs per configuration (fresh servers)")
    ap.add_argument("--phase-timeout", type=float, default=120.0, help="throughput: seconds per produce phase")
    ap.add_argument("--ttls", default="2000,3000,6000,9000", help="failover: broker.session.timeout.ms values")
    ap.add_argument("--failover-repeat", type=int, default=5, help="failover: trials per TTL (fresh cluster each)")
    ap.add_argument("--rate", type=float, default=500.0, help="failover: records/s of the steady producer")
    ap.add_argument("--failover-size", type=int, default=100, help="failover: record size in bytes (>= 10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="failover: seconds of producing before the kill "
                    "(plus a random part of the keepalive interval)")
    ap.add_argument("--tail", type=float, default=1.0, help="failover: seconds to keep producing after the first "
                    "post-kill ack")
    ap.add_argument("--failover-timeout", type=float, default=40.0, help="failover: give up this long after the kill")
    ap.add_argument("-X", "--client-config", action="append", default=[], metavar="KEY=VALUE",
                    help="failover: extra librdkafka producer property for every trial (repeatable)")
    ap.add_argument("--client-variant", action="append", default=None, metavar="K=V[,K=V]",
                    help="failover: also run these producer settings (repeatable) [None = "
                    "topic.metadata.refresh.interval.ms=250; 'none' = no variant]")
    ap.add_argument("--variant-ttls", default="2000,3000", help="failover: session timeouts the variants run at")
    ap.add_argument("--client-debug", metavar="CONTEXTS", help="failover: librdkafka debug contexts (e.g. "
                    "metadata,topic,broker,eos) logged with this script's clock to <trial dir>/librdkafka-debug.log "
                    "(use with --keep)")
    ap.add_argument("--seed", type=int, default=17, help="failover: seed of the kill-time jitter")
    ap.add_argument("--work-dir", default=None, help="where brokers and etcd keep their data [None = the temp dir]")
    ap.add_argument("--json", metavar="PATH", help="also write every figure as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    args = ap.parse_args(argv)
    if args.quick:  # only what was left at its default
        for name, value in (("records", "20000,5000"), ("repeat", 1), ("ttls", "2000"), ("failover_repeat", 1),
                            ("variant_ttls", "2000")):
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    variants = ["topic.metadata.refresh.interval.ms=250"] if args.client_variant is None else args.client_variant
    args.variant_list = [v for v in variants if v and v != "none"]
    args.variant_ttl_list = [int(x) for x in args.variant_ttls.split(",") if x.strip()]
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    args.size_list = [int(s) for s in args.sizes.split(",") if s.strip()]
    rl = [int(x.replace("_", "")) for x in args.records.split(",") if x.strip()]
    args.record_list = rl * len(args.size_list) if len(rl) == 1 else rl
    if len(args.record_list) != len(args.size_list):
        ap.error("--records must be one number or one per --sizes entry")
    args.ttl_list = [int(x) for x in args.ttls.split(",") if x.strip()]
    if args.failover_size < 10:
        ap.error("--failover-size must be >= 10 (the sequence number)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("this benchmark reads /proc and needs Linux", file=sys.stderr)
        return 2
    interrupt_on_sigterm()
    ctx = mp.get_context("spawn")  # never fork a process that has librdkafka threads
    v = versions()
    try:
        with open("/proc/meminfo") as f:
            mem = next((int(line.split()[1]) // 1024 for line in f if line.startswith("MemTotal")), None)
    except OSError:
        mem = None
    ncpu = len(os.sched_getaffinity(0))
    print("== machine ==")
    print("  " + machine_line(f"ram={mem} MiB"))
    print(f"  confluent-kafka {v['confluent_kafka']}, librdkafka {v['librdkafka']}, etcd {v['etcd']}; "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"  the {ncpu} cores are shared by etcd, the three brokers (one for the single-broker runs), the "
          f"producer process(es) and this script; anything else running shows in the load average above", flush=True)
    out: dict[str, Any] = {"versions": v, "machine": machine_line(), "settings": {k: val for k, val in vars(args).items()}}
    t0 = time.monotonic()
    ok = True
    try:
        if "throughput" in args.section_list:
            out["throughput"] = section_throughput(args, ctx)
            ok &= all(r.get("status") == "ok" for rs in out["throughput"]["runs"].values() for r in rs)
        if "failover" in args.section_list:
            out["failover"] = section_failover(args)
            ok &= all(r.get("status") == "ok" for rs in out["failover"]["trials"].values() for r in rs)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        ok = False
    out["elapsed_s"] = time.monotonic() - t0
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        print(f"\nresults written to {args.json}")
    print(f"\ntotal bench time {out['elapsed_s']:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
