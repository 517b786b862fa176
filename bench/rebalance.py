#!/usr/bin/env python3
"""KIP-848 rebalance latency with real librdkafka consumers (group.protocol=consumer).

This is a benchmark script, not a test. For every heartbeat interval in ``--intervals``
it starts a fresh ``odradek broker`` subprocess on 127.0.0.1 with
``-o group.consumer.heartbeat.interval.ms=H -o group.consumer.min.heartbeat.interval.ms=H``
and measures (``--sections``):

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
            consumers polled at 1 s; the goal is < 1 s.
``join``    Time from a new consumer's ``Consumer(...)`` construction to its first record,
            ``--join-runs`` times, on a topic of ``--join-partitions`` partitions with
            records waiting, in two flavours: an *idle* group (it has committed offsets
            and no members: every run's consumer leaves on close) and a *new* group (a
            fresh group id per run, auto.offset.reset=earliest). The consumer runs in this
            process; the table shows the median and the range, and when the assignment
            arrived (on_assign) on the way. Goal: < 0.5 s.

Consumers use librdkafka's defaults except group.protocol=consumer,
auto.offset.reset=earliest, log_level=4 (and enable.auto.commit=false in ``join``);
``-C key=value`` adds any librdkafka property (e.g. ``-C fetch.wait.max.ms=100``). They
call ``poll(0.05)`` in a loop (poll returns at once when a record or callback is ready).
Every wait is bounded by ``--timeout`` seconds.

Run:  .venv/bin/python bench/rebalance.py [--intervals 500,5000] [--consumers 10] [--mode processes]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typing import Any

from bench_common import BrokerProcess, machine_line, table

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "bench-growth"
JOIN_TOPIC = "bench-join"

# Keep the module's top level light: consumer processes are spawned and re-import it.


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------








def median_of(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def consumer_conf(bootstrap: str, group: str, extra: dict[str, str]) -> dict[str, Any]:
    # log_level 4: no NOTICE lines such as "partition count changed" on stderr
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "log_level": 4, **extra}


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


def group_consumer(idx: int, conf: dict, topic: str, events: Any, stop: Any, max_s: float) -> None:
    """Subscribe, poll, and report every rebalance callback and every record (partition
    only) as (kind, idx, payload, monotonic time) on `events`."""
    from confluent_kafka import Consumer

    put = events.put
    c = None
    try:
        c = Consumer({**conf, "client.id": f"bench-{idx}",
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
        self.rebalance_events: list[tuple[float, int, str, int]] = []

    def apply(self, ev: tuple) -> None:
        kind, idx, payload, t = ev
        if kind == "assign":
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


# --------------------------------------------------------------------------
# growth
# --------------------------------------------------------------------------


def run_growth(args: argparse.Namespace, broker: BrokerProcess, interval_ms: int) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    res: dict[str, Any] = {"interval_ms": interval_ms, "status": "failed"}
    bootstrap = broker.bootstrap
    adm = AdminClient({"bootstrap.servers": bootstrap})
    adm.create_topics([NewTopic(TOPIC, args.partitions, 1)], operation_timeout=10)[TOPIC].result(args.timeout)
    produce_one_each(bootstrap, TOPIC, range(args.partitions), args.timeout)

    n = args.consumers
    conf = consumer_conf(bootstrap, f"bench-growth-{interval_ms}", args.consumer_extra)
    if args.mode == "processes":
        ctx = mp.get_context("spawn")
        events, stop = ctx.Queue(), ctx.Event()
        workers = [ctx.Process(target=group_consumer, args=(i, conf, TOPIC, events, stop, args.timeout * 4),
                               name=f"bench-consumer-{i}", daemon=True) for i in range(n)]
    else:
        events, stop = queue.Queue(), threading.Event()
        workers = [threading.Thread(target=group_consumer, args=(i, conf, TOPIC, events, stop, args.timeout * 4),
                                    name=f"bench-consumer-{i}", daemon=True) for i in range(n)]
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
        # let trailing callbacks land, so nothing from the first rebalance is counted below
        drain(events, group, time.monotonic() + 0.2)
        group.consumed_at.clear()
        group.rebalance_events.clear()
        before = [len(s) for s in group.owned]

        # 2) grow, produce, and wait for every partition to be assigned and consumed
        new = range(args.partitions, args.grow_to)
        t0 = time.monotonic()
        adm.create_partitions([NewPartitions(TOPIC, args.grow_to)], operation_timeout=10)[TOPIC].result(args.timeout)
        res["create_s"] = time.monotonic() - t0
        produce_one_each(bootstrap, TOPIC, range(args.grow_to), args.timeout)
        res["produced_s"] = time.monotonic() - t0
        everything = set(range(args.grow_to))
        t_assigned = None
        deadline = t0 + args.timeout
        while time.monotonic() < deadline:
            drain(events, group, time.monotonic() + 0.05)
            if group.assigned() == everything:
                # events from different processes may arrive out of order: the latest assign
                # callback since the growth is when the last partition was handed out
                t_assigned = max(t for t, _, kind, _ in group.rebalance_events if kind == "assign")
            else:
                t_assigned = None  # something was taken away again
            if t_assigned is not None and all(p in group.consumed_at for p in new):
                break
        else:
            missing = len([p for p in new if p not in group.consumed_at])
            res["error"] = (f"timed out after {args.timeout:g} s: {len(group.assigned())}/{args.grow_to} assigned, "
                            f"{missing} new partitions not consumed yet; {group.problems[:3]}")
            return res
        res["assigned_s"] = t_assigned - t0
        res["consumed_s"] = max(group.consumed_at[p] for p in new) - t0
        res["total_s"] = max(res["assigned_s"], res["consumed_s"])
        first_assign = [t for t, _, kind, _ in group.rebalance_events if kind == "assign"]
        res["first_assign_s"] = min(first_assign) - t0 if first_assign else None
        res["callbacks"] = {k: sum(1 for e in group.rebalance_events if e[2] == k) for k in ("assign", "revoke", "lost")}
        res["sizes_before"] = before
        res["sizes_after"] = [len(s) for s in group.owned]
        res["problems"] = group.problems[:5]
        res["status"] = "ok"
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


def run_join(args: argparse.Namespace, broker: BrokerProcess, interval_ms: int) -> list[dict[str, Any]]:
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
        out.append({"interval_ms": interval_ms, "flavour": flavour, "runs": runs})
    return out


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="KIP-848 rebalance latency with librdkafka consumers over loopback.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="growth,join", help="comma list of: growth, join")
    ap.add_argument("--intervals", default="500,5000", help="broker heartbeat intervals in ms (comma list)")
    ap.add_argument("--consumers", type=int, default=10, help="growth: consumers in the group")
    ap.add_argument("--mode", choices=("processes", "threads"), default="processes",
                    help="growth: one process per consumer, or threads of this process")
    ap.add_argument("--partitions", type=int, default=100, help="growth: partitions before growing")
    ap.add_argument("--grow-to", type=int, default=1000, help="growth: partitions after growing")
    ap.add_argument("--repeat", type=int, default=3, help="growth: runs per interval (fresh broker each)")
    ap.add_argument("--join-partitions", type=int, default=10, help="join: partitions of the topic")
    ap.add_argument("--join-records", type=int, default=10, help="join: records waiting per partition")
    ap.add_argument("--join-runs", type=int, default=5, help="join: runs per flavour (median shown)")
    ap.add_argument("--join-pause", type=float, default=0.3, help="join: seconds between runs")
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds: limit of every wait")
    ap.add_argument("-C", "--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka consumer property (repeatable)")
    ap.add_argument("--work-dir", help="parent of the brokers' temp data dirs [None = the system temp dir]")
    ap.add_argument("--keep-logs", action="store_true", help="keep the brokers' work dirs and logs")
    args = ap.parse_args(argv)
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    if set(args.section_list) - {"growth", "join"}:
        ap.error("--sections: growth, join")
    args.interval_list = [int(x) for x in args.intervals.split(",") if x.strip()]
    args.consumer_extra = parse_kv(args.consumer_config)
    if args.grow_to <= args.partitions:
        ap.error("--grow-to must exceed --partitions")
    if args.consumers < 1 or args.partitions < args.consumers:
        ap.error("need 1 <= --consumers <= --partitions")
    return args


def broker_opts(interval_ms: int) -> list[str]:
    return ["-o", f"group.consumer.heartbeat.interval.ms={interval_ms}",
            "-o", f"group.consumer.min.heartbeat.interval.ms={min(interval_ms, 5000)}"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("== machine ==")
    import confluent_kafka

    print("  " + machine_line(f"confluent-kafka={confluent_kafka.version()[0]}  librdkafka={confluent_kafka.libversion()[0]}"))
    extra = " ".join(f"{k}={v}" for k, v in args.consumer_extra.items())
    print(f"  consumers: librdkafka defaults + group.protocol=consumer auto.offset.reset=earliest log_level=4 "
          f"{extra}".rstrip() + "; poll(0.05) loop")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    t_begin = time.monotonic()
    growth: list[dict] = []
    joins: list[dict] = []
    failed = False
    try:
        for interval in args.interval_list:
            reps = args.repeat if "growth" in args.section_list else 0
            for rep in range(max(reps, 1)):
                do_growth = "growth" in args.section_list and rep < reps
                do_join = "join" in args.section_list and rep == 0
                if not (do_growth or do_join):
                    continue
                work = Path(tempfile.mkdtemp(prefix=f"bench-rebalance-{interval}-", dir=args.work_dir))
                broker = BrokerProcess(work / "data", broker_opts(interval), work / "broker.log").start()
                try:
                    if do_growth:
                        print(f"\n-- heartbeat interval {interval} ms: growth run {rep + 1}/{reps}: {args.consumers} "
                              f"consumers ({args.mode}), {args.partitions} -> {args.grow_to} partitions ...", flush=True)
                        r = run_growth(args, broker, interval)
                        growth.append(r)
                        if r["status"] == "ok":
                            print(f"   converged in {r['converge_s']:.1f} s; after create_partitions: first new "
                                  f"assignment {fmt_s(r['first_assign_s'])} s, all assigned {r['assigned_s']:.3f} s, "
                                  f"all new consumed {r['consumed_s']:.3f} s", flush=True)
                        else:
                            failed = True
                            print(f"   FAILED: {r.get('error')}", flush=True)
                    if do_join:
                        print(f"\n-- heartbeat interval {interval} ms: join runs ...", flush=True)
                        joins += run_join(args, broker, interval)
                finally:
                    rc = broker.stop()
                    log = broker.log_tail(100_000)
                    if rc not in (0, None) or "Traceback" in log:
                        print(f"   note: broker exit code {rc}; log tail: {log[-1500:]}")
                    if args.keep_logs:
                        print(f"   broker work dir kept: {work}")
                    else:
                        shutil.rmtree(work, ignore_errors=True)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 1

    if growth:
        print(f"\n== growth: {args.consumers} consumers ({args.mode}), topic {args.partitions} -> {args.grow_to} "
              f"partitions, one record produced to every partition after growing; seconds from the "
              f"create_partitions call (Kafka 4.0: ~5 s; goal < 1 s) ==")
        rows = []
        keys = ("create_s", "produced_s", "first_assign_s", "assigned_s", "after_create_s", "consumed_s", "total_s")
        for interval in args.interval_list:
            runs = [r for r in growth if r["interval_ms"] == interval]
            for k, r in enumerate(runs):
                label = f"{interval} ms" + (f" #{k + 1}" if len(runs) > 1 else "")
                if r["status"] != "ok":
                    rows.append((label, "FAILED", "", "", "", "", "", "", "", ""))
                    continue
                r["after_create_s"] = r["assigned_s"] - r["create_s"]
                cb = r["callbacks"]
                rows.append((label, *(fmt_s(r[key]) for key in keys), f"{cb['assign']}/{cb['revoke']}/{cb['lost']}",
                             f"{min(r['sizes_after'])}-{max(r['sizes_after'])}"))
            ok = [r for r in runs if r["status"] == "ok"]
            if len(runs) > 1 and ok:
                rows.append((f"{interval} ms median", *(fmt_s(median_of([r[key] for r in ok])) for key in keys),
                             "", f"{len(ok)}/{len(runs)} ok"))
        table(("heartbeat", "create done", "produced", "1st assign", "all assigned", "(after create)",
               "all consumed", "TOTAL", "assign/revoke/lost", "partitions/consumer"), rows)
        print(f"  (TOTAL = max(all assigned, all new consumed). 'create done' = create_partitions answered (the "
              f"broker creates the new partition logs before answering); '(after create)' = all assigned - create "
              f"done; 'produced' = {args.grow_to:,} records acknowledged by a fresh producer; callbacks counted after "
              f"the growth, 'lost' = librdkafka gave partitions up without a revocation)")
        for r in growth:
            for p in r.get("problems") or []:
                print(f"  ! {r['interval_ms']} ms: {p}")
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
            rows.append((f"{j['interval_ms']} ms", j["flavour"] + (" (committed offsets)" if j["flavour"] == "idle"
                                                                  else " (fresh group id)"),
                         fmt_s(statistics.median(firsts)) if firsts else "FAILED",
                         f"{min(firsts):.3f}-{max(firsts):.3f}" if firsts else "-",
                         fmt_s(statistics.median(assigns)) if assigns else "-",
                         f"{len(ok)}/{len(j['runs'])}"))
            for r in j["runs"]:
                if r["error"]:
                    print(f"  ! {j['interval_ms']} ms {j['flavour']}: {r['error']}")
        table(("heartbeat", "group", "median s", "min-max s", "median on_assign s", "ok runs"), rows, left=2)
    print(f"\ntotal bench time {time.monotonic() - t_begin:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
