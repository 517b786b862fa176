#!/usr/bin/env python3
"""Group coordinator fail-over (issue 18): how long a KIP-848 group is without a coordinator
after ``kill -9`` of the broker coordinating it, and how long until it consumes again.

This is a benchmark script, not a test. Each trial, for each ``broker.session.timeout.ms``
in ``--ttls`` (the broker's etcd lease TTL), ``--repeat`` times, on a fresh cluster:

1. ``LocalCluster``: etcd + three broker processes on 127.0.0.1 (racks a, b, c), with
   ``offsets.topic.num.partitions`` = ``--offsets-partitions`` and the KIP-848 heartbeat
   interval ``--heartbeat-ms`` (the broker's ``group.consumer.heartbeat.interval.ms``;
   Kafka's default is 5000). ``__consumer_offsets`` must have three replicas (its
   replication factor defaults to min(3, brokers)); a start that gave it fewer is counted,
   stopped and retried on a fresh cluster, at most ``--rf-attempts`` times: fail-over of a
   coordinator whose log has one replica cannot be measured, and how often that happened
   is itself a result.
2. A topic of ``--partitions`` partitions, RF 3, min.insync.replicas 2; ``--members``
   librdkafka consumers (confluent-kafka, ``group.protocol=consumer``, one process each,
   at nice ``--client-nice``) subscribe; the group must be Stable with every member
   holding its target assignment (DescribeConsumerGroups) before the clock starts.
3. One idempotent acks=all producer in this process writes ``--rate`` records/s round
   robin over the partitions; each value carries a sequence number. After ``--warmup``
   seconds plus a random part of one heartbeat interval (so that the kill lands anywhere
   in the members' heartbeat cycle), the group's coordinator (FindCoordinator, via
   DescribeConsumerGroups) is SIGKILLed; production goes on.

Measured from the SIGKILL, on one clock (CLOCK_MONOTONIC, the same in every process):

* **all members heartbeating**: the time until the *last* member had a successful
  ConsumerGroupHeartbeat response from the new coordinator. The signal is librdkafka's own
  debug log (``debug=cgrp``, delivered through ``logger`` and stamped by the member's poll
  loop, which polls every 50 ms): after ``Group "G" changing coordinator K -> N`` with N
  not the killed broker, the first ``ConsumerGroupHeartbeat response received for member
  id "M" with epoch E``. librdkafka writes that line only for a response it parsed with
  error code 0 (``rd_kafka_cgrp_handle_ConsumerGroupHeartbeat``), so it is exactly "the
  member heartbeats successfully again". Not used: DescribeConsumerGroups at the new
  coordinator lists all members as soon as the shard is loaded from the log, whether or
  not they have reached it; librdkafka's statistics have no heartbeat timestamp.
* **first member**: the same for the first member (when the new coordinator served the
  group at all).
* **consumption resumed**: the first record produced after the kill that the group
  consumed; **every partition**: when each partition had delivered such a record (that
  includes the partitions the killed broker led, i.e. the partition-leader fail-over
  ``bench/cluster.py`` measures, plus the members' metadata refresh).
* components, from an etcd watch on the metadata prefix (``bench/cluster.py``'s): kill ->
  the killed broker's registration deleted (lease expired) -> the group's
  ``__consumer_offsets`` partition given a new leader by the controller; and per member
  kill -> librdkafka switched to the new coordinator.
* checks (a fail-over of a stable group must not rebalance it): every member's epoch
  after the fail-over equals its epoch before, and no rebalance callback ran after the kill.

The goal of issue 18: under 3 s (all members heartbeating, and consumption resumed).

Every wait is bounded (``--timeout``, ``--failover-timeout``); all traffic stays on
127.0.0.1; brokers, etcd and consumer processes are stopped in ``finally`` blocks (SIGTERM
to this script stops them too). The machine line printed first shows the load average:
etcd, three brokers, ``--members`` consumer processes, the producer and this script share
the cores (2 where BENCHMARKS.md's figures were taken); the CPU each side used during the
fail-over window is printed per trial.

Run:  .venv/bin/python bench/failover.py                   # 2 TTLs x 5 trials, about 6 minutes on 2 cores
      .venv/bin/python bench/failover.py --quick           # one TTL (2000), one trial
See ``--help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import queue
import random
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ROOT, interrupt_on_sigterm, machine_line, stop_workers, table  # puts src/ on sys.path too
from cluster import EtcdWatch, _median, admin, create_topic, start_cluster, versions
from throughput import tree_cpu_s

from odradek.cluster.names import CONSUMER_OFFSETS
from odradek.coordinator.runtime import partition_for

HB_OK = re.compile(r'ConsumerGroupHeartbeat response received for member id "[^"]*" with epoch (-?\d+)')
COORD = re.compile(r"changing coordinator (-?\d+) -> (-?\d+)")


def _f(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


# --------------------------------------------------------------------------
# Member process
# --------------------------------------------------------------------------


class _CgrpLog(logging.Handler):
    """librdkafka's cgrp debug lines -> events: successful heartbeat responses (with the
    member epoch), coordinator changes, heartbeat failures; warnings go to stderr."""

    def __init__(self, idx: int, put: Any, copy_to: Any = None) -> None:
        super().__init__(logging.DEBUG)
        self.idx, self.put, self.copy_to = idx, put, copy_to

    def emit(self, record: logging.LogRecord) -> None:
        t = time.monotonic()
        msg = record.getMessage()
        if self.copy_to is not None:
            self.copy_to.write(f"{t:.3f} {msg}\n")
        if (m := HB_OK.search(msg)) is not None:
            self.put(("hb", self.idx, int(m.group(1)), t))
        elif (m := COORD.search(msg)) is not None:
            self.put(("coord", self.idx, (int(m.group(1)), int(m.group(2))), t))
        elif "ConsumerGroupHeartbeat failed" in msg:
            self.put(("hb_failed", self.idx, msg[:300], t))
        elif record.levelno >= logging.WARNING and "Connection refused" not in msg:
            print(f"%{record.levelno // 10} member-{self.idx}: {msg}", file=sys.stderr, flush=True)


def member(idx: int, conf: dict, topic: str, events: Any, stop: Any, max_s: float, nice: int,
           log_dir: str | None = None) -> None:
    """Subscribe, poll every 50 ms, and report heartbeats, coordinator changes, rebalance
    callbacks and records (partition, sequence number) as (kind, idx, payload, t).
    `log_dir`: every librdkafka log line also goes to log_dir/member-<idx>.log, stamped."""
    from confluent_kafka import Consumer

    put = events.put
    c = None
    copy_to = None
    try:
        if nice:
            os.nice(nice)
        if log_dir:
            copy_to = open(Path(log_dir) / f"member-{idx}.log", "w", buffering=1)  # noqa: SIM115 - closed below
        log = logging.getLogger(f"bench-failover-{idx}")
        log.propagate = False
        log.setLevel(logging.DEBUG)
        log.addHandler(_CgrpLog(idx, put, copy_to))
        # cgrp: heartbeat responses and coordinator changes; consumer: heartbeat failures.
        debug = ",".join(sorted({"cgrp", "consumer", *filter(None, str(conf.get("debug", "")).split(","))}))
        c = Consumer({**conf, "client.id": f"member-{idx}", "debug": debug, "log_level": 7, "logger": log,
                      "error_cb": lambda e: put(("client_error", idx, str(e), time.monotonic()))})

        def cb(kind):
            return lambda _c, parts: put((kind, idx, [p.partition for p in parts], time.monotonic()))

        c.subscribe([topic], on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
        put(("started", idx, None, time.monotonic()))
        deadline = time.monotonic() + max_s
        while not stop.is_set() and time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is None:
                continue
            if m.error() is not None:
                put(("msg_error", idx, str(m.error()), time.monotonic()))
                continue
            put(("rec", idx, (m.partition(), int(m.value()[:10])), time.monotonic()))
    except Exception as e:  # noqa: BLE001 - reported to the main process
        put(("crash", idx, f"{type(e).__name__}: {e}", time.monotonic()))
    finally:
        if c is not None:
            try:
                c.close()
            except Exception as e:  # noqa: BLE001
                put(("client_error", idx, f"close: {e}", time.monotonic()))
        if copy_to is not None:
            copy_to.close()
        put(("closed", idx, None, time.monotonic()))


class Group:
    """The members' events, folded."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.owned: list[set[int]] = [set() for _ in range(n)]
        self.hb: list[list[tuple[float, int]]] = [[] for _ in range(n)]  # (t, epoch) of successful heartbeats
        self.coord: list[list[tuple[float, int, int]]] = [[] for _ in range(n)]  # (t, from, to)
        self.callbacks: list[tuple[float, int, str, list[int]]] = []
        self.records: list[tuple[float, int, int, int]] = []  # (t, member, partition, seq)
        self.problems: list[str] = []
        self.hb_failures: list[tuple[float, int, str]] = []
        self.client_errors: list[tuple[float, int, str]] = []

    def apply(self, ev: tuple) -> None:
        kind, idx, payload, t = ev
        if kind == "hb":
            self.hb[idx].append((t, payload))
        elif kind == "coord":
            self.coord[idx].append((t, *payload))
        elif kind == "hb_failed":
            self.hb_failures.append((t, idx, payload))
        elif kind == "assign":
            self.owned[idx].update(payload)
            self.callbacks.append((t, idx, kind, payload))
        elif kind in ("revoke", "lost"):
            self.owned[idx].difference_update(payload)
            self.callbacks.append((t, idx, kind, payload))
        elif kind == "rec":
            self.records.append((t, idx, *payload))
        elif kind == "crash" and len(self.problems) < 20:
            self.problems.append(f"member {idx} {kind}: {payload}")
        elif kind in ("msg_error", "client_error"):
            # The killed broker refusing connections is expected; counted and shown, not a failure.
            self.client_errors.append((t, idx, str(payload)))


def drain(events: Any, group: Group, until: float) -> None:
    while True:
        left = until - time.monotonic()
        try:
            ev = events.get(timeout=max(0.0, min(left, 0.02))) if left > 0 else events.get_nowait()
        except queue.Empty:
            return
        group.apply(ev)


# --------------------------------------------------------------------------
# One trial
# --------------------------------------------------------------------------


def consumer_conf(bootstrap: str, group: str, args: argparse.Namespace) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000}  # bench/cluster.py: finds a dead leader's successor sooner
    conf.update(dict(kv.split("=", 1) for kv in args.consumer_config))
    return conf


def producer_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
            "request.timeout.ms": 2000, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 1000, "log_level": 0}


def offsets_replication(bootstrap: str, timeout: float = 30.0) -> dict[int, int]:
    """__consumer_offsets partition -> replica count, once the topic exists (it is asked for
    a group's coordinator first: Kafka creates the topic on the first FindCoordinator)."""
    adm = admin(bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            adm.describe_consumer_groups(["bench-warm-up"], request_timeout=5)["bench-warm-up"].result(10)
            t = adm.list_topics(CONSUMER_OFFSETS, timeout=5).topics.get(CONSUMER_OFFSETS)
            if t is not None and t.error is None and t.partitions:
                return {p: len(s.replicas) for p, s in t.partitions.items()}
        except Exception:  # noqa: BLE001 - retried until the deadline
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no {CONSUMER_OFFSETS} within {timeout:.0f}s")


def group_stable(bootstrap: str, group: str, n: int) -> str | None:
    """None once the coordinator describes the group as Stable with `n` members, each holding
    its whole target assignment; else what it describes."""
    from confluent_kafka import ConsumerGroupState

    adm = admin(bootstrap)  # kept alive until the answer comes
    d = adm.describe_consumer_groups([group], request_timeout=5)[group].result(10)

    def tps(a):
        return sorted(tp.partition for tp in (a.topic_partitions if a else []))

    if d.state == ConsumerGroupState.STABLE and len(d.members) == n and all(
            m.assignment.topic_partitions and tps(m.assignment) == tps(m.target_assignment) for m in d.members):
        return None
    return f"{d.state} " + ", ".join(f"{tps(m.assignment)}->{tps(m.target_assignment)}" for m in d.members)


def trial(args: argparse.Namespace, ttl_ms: int, rnd: random.Random, ctx: Any) -> dict[str, Any]:
    from confluent_kafka import Producer

    res: dict[str, Any] = {"ttl_ms": ttl_ms, "status": "failed", "notes": [], "rf_starts": []}
    work = Path(tempfile.mkdtemp(prefix=f"bench-failover-{ttl_ms}-", dir=args.work_dir))
    cluster = watch = producer = None
    procs: list[Any] = []
    events = stop = None
    try:
        overrides = [f"broker.session.timeout.ms={ttl_ms}", f"offsets.topic.num.partitions={args.offsets_partitions}",
                     f"group.consumer.heartbeat.interval.ms={args.heartbeat_ms}",
                     f"group.consumer.min.heartbeat.interval.ms={min(args.heartbeat_ms, 5000)}"]
        for attempt in range(1, args.rf_attempts + 1):
            cluster = start_cluster(work / f"start-{attempt}", overrides, res["notes"],
                                    log_level=args.broker_log_level)
            rf = offsets_replication(cluster.bootstrap)
            res["rf_starts"].append(min(rf.values()))
            if min(rf.values()) == 3:
                break
            print(f"    start {attempt}: {CONSUMER_OFFSETS} has {sorted(set(rf.values()))} replica(s) per partition "
                  f"(expected 3); {'starting a fresh cluster' if attempt < args.rf_attempts else 'giving up'}",
                  flush=True)
            cluster.stop()
            cluster = None
        if cluster is None:
            res["error"] = f"{CONSUMER_OFFSETS} never had 3 replicas in {args.rf_attempts} cluster starts"
            return res
        watch = EtcdWatch(*cluster.etcd.endpoint).start()
        topic, group = f"fo-{uuid.uuid4().hex[:6]}", f"bench-fo-{uuid.uuid4().hex[:6]}"
        create_topic(cluster.bootstrap, topic, args.partitions, 3, {"min.insync.replicas": "2"})
        offsets_partition = partition_for(group, args.offsets_partitions)

        events, stop = ctx.Queue(), ctx.Event()
        conf = consumer_conf(cluster.bootstrap, group, args)
        log_dir = None
        if args.client_log:
            log_dir = str(work / "client-logs")
            Path(log_dir).mkdir(exist_ok=True)
        procs = [ctx.Process(target=member, args=(i, conf, topic, events, stop, args.timeout * 4, args.client_nice,
                                                  log_dir), daemon=True, name=f"bench-member-{i}")
                 for i in range(args.members)]
        for p in procs:
            p.start()
        g = Group(args.members)
        deadline = time.monotonic() + args.timeout
        described = "not asked"
        while True:
            drain(events, g, time.monotonic() + 0.5)
            if g.problems:
                res["error"] = "; ".join(g.problems[:5])
                return res
            if all(g.owned) and len(set().union(*g.owned)) == args.partitions:
                try:
                    described = group_stable(cluster.bootstrap, group, args.members)
                    if described is None:
                        break
                except Exception as exc:  # noqa: BLE001 - asked again
                    described = repr(exc)
            if time.monotonic() > deadline:
                res["error"] = (f"the group did not settle in {args.timeout:.0f}s: owned {[sorted(o) for o in g.owned]}; "
                                f"described {described}")
                return res
        res["settle_s"] = time.monotonic() - (deadline - args.timeout)

        adm = admin(cluster.bootstrap)  # kept alive until the answer comes
        coordinator = adm.describe_consumer_groups([group], request_timeout=5)[group].result(10).coordinator.id
        md = admin(cluster.bootstrap).list_topics(timeout=10)
        leader = md.topics[CONSUMER_OFFSETS].partitions[offsets_partition].leader
        res.update(coordinator=coordinator, controller=md.controller_id, offsets_partition=offsets_partition,
                   coordinator_leads=sum(1 for p in md.topics[topic].partitions.values() if p.leader == coordinator))
        if leader != coordinator:
            res["notes"].append(f"FindCoordinator said {coordinator}, partition {offsets_partition} led by {leader}")
        lease = watch.lease_ttl(f"/odradek/brokers/{coordinator}")
        res["lease_granted_s"] = lease[0] if lease else None

        producer = Producer(producer_conf(cluster.bootstrap))
        producer.list_topics(topic, timeout=10)
        errors: list[str] = []
        producer_cb = lambda err, _m: errors.append(str(err)) if err is not None and len(errors) < 20 else None  # noqa: E731
        pad = b"x" * 90
        interval = 1.0 / args.rate
        t_kill_at = time.monotonic() + args.warmup + rnd.uniform(0, args.heartbeat_ms / 1000)
        t_kill = None
        first_post_seq = None
        seq = 0
        next_send = time.monotonic()
        end = t_kill_at + args.failover_timeout
        stopping_at = None
        pids = {"brokers": [p.pid for n, p in cluster.procs.items() if n != coordinator],
                "members": [p.pid for p in procs], "etcd": [cluster.etcd.proc.pid] if cluster.etcd.proc else []}
        cpu0 = {}
        while True:
            now = time.monotonic()
            if now >= end or (stopping_at is not None and now >= stopping_at):
                break
            if t_kill is None and now >= t_kill_at:
                cpu0 = {k: tree_cpu_s(v) for k, v in pids.items()}
                res["loadavg_at_kill"] = os.getloadavg()[0]
                t_kill = time.monotonic()
                if log_dir:
                    (Path(log_dir) / "kill.txt").write_text(f"{t_kill:.3f} SIGKILL broker {coordinator}\n")
                cluster.procs[coordinator].kill()  # SIGKILL
                cluster.procs[coordinator].wait(10)
                first_post_seq = seq
                res["epochs_before"] = [h[-1][1] if h else None for h in g.hb]
            if now >= next_send:
                producer.produce(topic, b"%010d" % seq + pad, partition=seq % args.partitions, on_delivery=producer_cb)
                seq += 1
                next_send += interval
                if next_send < now - 1.0:
                    next_send = now
            producer.poll(0)
            drain(events, g, min(next_send, time.monotonic() + 0.005))
            if t_kill is not None and stopping_at is None and _done(g, t_kill, coordinator, first_post_seq, args):
                stopping_at = time.monotonic() + args.tail
        t_end = time.monotonic()
        if t_kill is None:
            res["error"] = "never killed the coordinator"
            return res
        cpu1 = {k: tree_cpu_s(v) for k, v in pids.items()}
        res["cores"] = {k: (cpu1[k] - cpu0.get(k, cpu1[k])) / (t_end - t_kill) for k in pids}
        res.update(_measure(g, t_kill, coordinator, first_post_seq, args))
        res["produced"], res["delivery_errors"] = seq, errors[:5]
        t_expired = watch.first(t_kill, "DELETE", f"/odradek/brokers/{coordinator}")

        def moved(v: bytes) -> bool:
            try:
                return json.loads(v)["leader"] not in (coordinator, -1)
            except Exception:  # noqa: BLE001
                return False

        t_elected = watch.first(t_kill, "PUT", f"/odradek/partitions/{CONSUMER_OFFSETS}/{offsets_partition}", moved)
        res["lease_expired_s"] = None if t_expired is None else t_expired - t_kill
        res["coordinator_elected_s"] = None if t_elected is None else t_elected - t_kill
        missing = [] if res.get("all_hb_s") is not None else [
            i for i in range(args.members) if res["hb_after"][i] is None]
        if missing or res.get("all_partitions_s") is None:
            res["status"] = "timeout"
            res["error"] = (f"{args.failover_timeout:.0f}s after the kill: members without a heartbeat at the new "
                            f"coordinator {missing}; partitions without a post-kill record "
                            f"{res.get('partitions_waiting')}; last heartbeat failures "
                            f"{[(round(t - t_kill, 2), i, m[:120]) for t, i, m in g.hb_failures[-3:]]}; member 0: "
                            f"coordinator changes {[(round(t - t_kill, 2), a, b) for t, a, b in g.coord[0]]}, "
                            f"successful heartbeats {len(g.hb[0])} (last {round(g.hb[0][-1][0] - t_kill, 2) if g.hb[0] else None}s)")
        elif g.problems:
            res["error"] = "; ".join(g.problems[:3])
        else:
            res["status"] = "ok"
        return res
    except Exception as exc:  # noqa: BLE001 - a failed trial, reported
        res["error"] = f"{type(exc).__name__}: {exc}"
        return res
    finally:
        if stop is not None:
            stop.set()
        stop_workers(procs, [events] if events is not None else [])
        if producer is not None:
            try:
                producer.purge()
                producer.flush(0)
            except Exception:  # noqa: BLE001, S110 - going away anyway
                pass
        if watch is not None:
            watch.stop()
        if cluster is not None:
            cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"    kept {work}")


def _hb_after(g: Group, idx: int, t_kill: float, killed: int) -> tuple[float | None, float | None, int | None]:
    """(switched to a new coordinator, first successful heartbeat there, its epoch) for a member."""
    switched = next((t for t, _a, b in g.coord[idx] if t >= t_kill and b not in (killed, -1)), None)
    if switched is None:
        return None, None, None
    hb = next(((t, e) for t, e in g.hb[idx] if t >= switched), None)
    return switched, hb[0] if hb else None, hb[1] if hb else None


def _done(g: Group, t_kill: float, killed: int, first_post: int, args: argparse.Namespace) -> bool:
    if any(_hb_after(g, i, t_kill, killed)[1] is None for i in range(args.members)):
        return False
    return len({p for _t, _i, p, s in g.records if s >= first_post}) == args.partitions


def _measure(g: Group, t_kill: float, killed: int, first_post: int, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    per = [_hb_after(g, i, t_kill, killed) for i in range(args.members)]
    out["switched_after"] = [None if s is None else s - t_kill for s, _, _ in per]
    out["hb_after"] = [None if h is None else h - t_kill for _, h, _ in per]
    out["epochs_after"] = [e for _, _, e in per]
    hbs = [x for x in out["hb_after"] if x is not None]
    out["first_hb_s"] = min(hbs) if hbs else None
    out["all_hb_s"] = max(hbs) if len(hbs) == args.members else None
    sw = [x for x in out["switched_after"] if x is not None]
    out["all_switched_s"] = max(sw) if len(sw) == args.members else None
    post = sorted((t, p) for t, _i, p, s in g.records if s >= first_post)
    out["first_record_s"] = post[0][0] - t_kill if post else None
    first_by_p: dict[int, float] = {}
    for t, p in post:
        first_by_p.setdefault(p, t)
    out["all_partitions_s"] = (max(first_by_p.values()) - t_kill) if len(first_by_p) == args.partitions else None
    out["partitions_waiting"] = sorted(set(range(args.partitions)) - set(first_by_p))
    times = sorted(t for t, *_ in g.records if t >= t_kill)
    gaps = [b - a for a, b in zip([t_kill, *times], times)]
    out["max_gap_s"] = max(gaps) if gaps else None
    out["callbacks_after_kill"] = [(round(t - t_kill, 3), i, k, ps) for t, i, k, ps in g.callbacks if t >= t_kill]
    out["hb_failures_after_kill"] = sorted({m.split(":", 1)[-1].strip()[:100] for t, _i, m in g.hb_failures
                                            if t >= t_kill})[:5]
    errs = [e for t, _i, e in g.client_errors if t >= t_kill]
    out["client_errors_after_kill"] = len(errs)
    out["client_error_kinds"] = sorted({re.sub(r"\d+", "N", e)[:90] for e in errs})[:5]
    return out


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def run(args: argparse.Namespace, ctx: Any) -> dict[str, Any]:
    print("\n== KIP-848 group fail-over after kill -9 of its coordinator ==")
    print(f"  cluster: etcd + 3 brokers (racks a,b,c), {CONSUMER_OFFSETS} {args.offsets_partitions} partitions (RF 3 "
          f"required), group.consumer.heartbeat.interval.ms={args.heartbeat_ms}, session timeout at its default "
          f"(45 s); fresh cluster per trial; {args.repeat} trial(s) per TTL")
    print(f"  group: {args.members} librdkafka members (one process each, nice +{args.client_nice}, poll every 50 ms), "
          f"settings: " + ", ".join(f"{k}={v}" for k, v in consumer_conf("<cluster>", "<group>", args).items()
                                    if k not in ("bootstrap.servers", "group.id")))
    print(f"  topic: {args.partitions} partitions RF 3 min.insync.replicas 2; producer: {args.rate:.0f} records/s, "
          f"idempotent acks=all; the kill lands {args.warmup:.1f}s + uniform(0, heartbeat interval) after production "
          f"starts; a trial gives up {args.failover_timeout:.0f}s after the kill", flush=True)
    rnd = random.Random(args.seed)
    trials: dict[int, list[dict]] = {}
    for rep in range(args.repeat):
        for ttl in args.ttl_list:  # interleaved: drift on the machine hits every TTL alike
            r = trial(args, ttl, rnd, ctx)
            trials.setdefault(ttl, []).append(r)
            tag = f"TTL {ttl:5d} ms try {rep + 1}"
            rf = "" if r.get("rf_starts") in ([3], None) else f" [{CONSUMER_OFFSETS} replicas per start: {r['rf_starts']}]"
            if r.get("all_hb_s") is not None or r["status"] == "ok":
                cores = r.get("cores", {})
                print(f"  {tag}: all members heartbeating {_f(r.get('all_hb_s'))}s (first {_f(r.get('first_hb_s'))}s), "
                      f"consumption resumed {_f(r.get('first_record_s'))}s, every partition "
                      f"{_f(r.get('all_partitions_s'))}s, max gap {_f(r.get('max_gap_s'))}s | lease expired "
                      f"+{_f(r.get('lease_expired_s'))}s, new coordinator elected +{_f(r.get('coordinator_elected_s'))}s, "
                      f"all members switched +{_f(r.get('all_switched_s'))}s | killed broker {r.get('coordinator')}"
                      f"{' (controller)' if r.get('coordinator') == r.get('controller') else ''} leading "
                      f"{r.get('coordinator_leads')} of the topic's partitions; epochs kept: "
                      f"{r.get('epochs_before') == r.get('epochs_after')}; callbacks after the kill: "
                      f"{len(r.get('callbacks_after_kill') or [])}; load {_f(r.get('loadavg_at_kill'))}, cores during "
                      f"fail-over: brokers {_f(cores.get('brokers'))} members {_f(cores.get('members'))} etcd "
                      f"{_f(cores.get('etcd'))}{rf}" + (f"  ! {r['error']}" if r.get("error") else ""), flush=True)
                if r.get("epochs_before") != r.get("epochs_after"):
                    print(f"      epochs before {r.get('epochs_before')} after {r.get('epochs_after')}")
                if r.get("callbacks_after_kill"):
                    print(f"      callbacks after the kill: {r['callbacks_after_kill'][:10]}")
                if r.get("hb_failures_after_kill") or r.get("client_errors_after_kill"):
                    print(f"      heartbeat failures after the kill: {r.get('hb_failures_after_kill')}; client errors "
                          f"(error_cb, poll): {r.get('client_errors_after_kill')}, kinds {r.get('client_error_kinds')}")
            else:
                print(f"  {tag}: {r['status'].upper()}: {str(r.get('error'))[:900]}{rf}", flush=True)
    rows, summary = [], {}
    keys = ("all_hb_s", "first_hb_s", "first_record_s", "all_partitions_s", "lease_expired_s",
            "coordinator_elected_s", "all_switched_s")
    for ttl in args.ttl_list:
        rs = trials.get(ttl, [])
        ok = [r for r in rs if r["status"] == "ok"]

        def mmm(key: str, ok: list[dict] = ok):
            xs = [r[key] for r in ok if r.get(key) is not None]
            return (min(xs), _median(xs), max(xs)) if xs else (None, None, None)

        s = {k: mmm(k) for k in keys}
        s["ok"], s["runs"] = len(ok), len(rs)
        s["epochs_kept"] = sum(1 for r in ok if r.get("epochs_before") == r.get("epochs_after"))
        s["no_callbacks"] = sum(1 for r in ok if not r.get("callbacks_after_kill"))
        s["rf_starts"] = [x for r in rs for x in r.get("rf_starts", [])]
        summary[str(ttl)] = s
        trip = lambda t: "/".join(_f(x) for x in t)  # noqa: E731
        goal = s["all_hb_s"][2] is not None and s["all_hb_s"][2] < 3 and s["first_record_s"][2] is not None \
            and s["first_record_s"][2] < 3 and len(ok) == len(rs)
        rows.append((str(ttl), trip(s["all_hb_s"]), trip(s["first_hb_s"]), trip(s["first_record_s"]),
                     trip(s["all_partitions_s"]), trip(s["lease_expired_s"]), trip(s["coordinator_elected_s"]),
                     trip(s["all_switched_s"]), f"{s['epochs_kept']}/{len(ok)}", f"{len(ok)}/{len(rs)}",
                     "yes" if goal else "no"))
    print()
    table(("session ms", "all members hb s", "first hb s", "consumption s", "every partition s", "lease expired s",
           "coordinator elected s", "members switched s", "epochs kept", "ok", "all < 3 s"), rows)
    print("  (min/median/max over the successful trials, seconds from the SIGKILL on one monotonic clock; 'all members "
          "hb': the last member's first successful ConsumerGroupHeartbeat at the new coordinator (librdkafka's debug "
          "log); 'consumption': the first record produced after the kill consumed by the group; 'every partition': "
          "each partition delivered such a record; etcd events as this script's watch saw them; 'members switched': "
          "the last member's 'changing coordinator' to the new broker; 'all < 3 s': every trial ok with both 'all "
          "members hb' and 'consumption' under 3 s)")
    starts = [x for s in summary.values() for x in s["rf_starts"]]
    if starts:
        print(f"  cluster starts: {len(starts)}, of which {sum(1 for x in starts if x < 3)} gave {CONSUMER_OFFSETS} "
              f"fewer than 3 replicas per partition (min replicas per start: {starts})")
    return {"summary": summary, "trials": {str(k): v for k, v in trials.items()}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="KIP-848 group fail-over after kill -9 of its coordinator (librdkafka "
                                 "members, three-broker cluster on loopback).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one TTL (2000), one trial (unless given)")
    ap.add_argument("--ttls", default="2000,3000", help="broker.session.timeout.ms values (the etcd lease TTL)")
    ap.add_argument("--repeat", type=int, default=5, help="trials per TTL, each on a fresh cluster")
    ap.add_argument("--members", type=int, default=10, help="consumers in the KIP-848 group (one process each)")
    ap.add_argument("--partitions", type=int, default=20, help="partitions of the consumed topic")
    ap.add_argument("--offsets-partitions", type=int, default=50, help="offsets.topic.num.partitions (Kafka's default)")
    ap.add_argument("--heartbeat-ms", type=int, default=5000,
                    help="group.consumer.heartbeat.interval.ms on the brokers (Kafka's default)")
    ap.add_argument("--rate", type=float, default=200.0, help="records/s of the producer")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of production before the kill (plus a random "
                    "part of a heartbeat interval)")
    ap.add_argument("--tail", type=float, default=1.0, help="seconds to go on after everything resumed")
    ap.add_argument("--failover-timeout", type=float, default=40.0, help="give up this long after the kill")
    ap.add_argument("--timeout", type=float, default=90.0, help="bound of every other wait (group settling)")
    ap.add_argument("--rf-attempts", type=int, default=5, help=f"cluster starts per trial until {CONSUMER_OFFSETS} "
                    "has 3 replicas")
    ap.add_argument("--client-nice", type=int, default=10, help="niceness of the member processes")
    ap.add_argument("-C", "--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property for every member (repeatable)")
    ap.add_argument("--seed", type=int, default=18, help="seed of the kill-time jitter")
    ap.add_argument("--work-dir", default=None, help="where brokers and etcd keep their data [None = the temp dir]")
    ap.add_argument("--json", metavar="PATH", help="also write every figure as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    ap.add_argument("--client-log", action="store_true", help="write every member's librdkafka log (debug cgrp, "
                    "consumer, plus any -C debug=...) stamped with this script's clock to <trial dir>/client-logs "
                    "(use with --keep)")
    ap.add_argument("--broker-log-level", default="WARNING", help="the brokers' --log-level")
    args = ap.parse_args(argv)
    if args.quick:
        for name, value in (("ttls", "2000"), ("repeat", 1)):
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    args.ttl_list = [int(x) for x in str(args.ttls).split(",") if x.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("this benchmark reads /proc and needs Linux", file=sys.stderr)
        return 2
    interrupt_on_sigterm()
    # The brokers (LocalCluster runs `python -m odradek`) and the member processes run the
    # odradek this script imports: the src/ next to it, not whatever else is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    ctx = mp.get_context("spawn")  # never fork a process that has librdkafka threads
    v = versions()
    ncpu = len(os.sched_getaffinity(0))
    print("== machine ==")
    print("  " + machine_line())
    print(f"  confluent-kafka {v['confluent_kafka']}, librdkafka {v['librdkafka']}, etcd {v['etcd']}; "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"  the {ncpu} cores are shared by etcd, the three brokers, {args.members} member processes, the producer "
          f"and this script; anything else running shows in the load average (above, and per trial)", flush=True)
    out: dict[str, Any] = {"versions": v, "machine": machine_line(), "settings": vars(args)}
    t0 = time.monotonic()
    ok = True
    try:
        out["failover"] = run(args, ctx)
        ok = all(r.get("status") == "ok" for rs in out["failover"]["trials"].values() for r in rs)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        ok = False
    out["elapsed_s"] = time.monotonic() - t0
    print(f"  load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        print(f"\nresults written to {args.json}")
    print(f"\ntotal bench time {out['elapsed_s']:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
