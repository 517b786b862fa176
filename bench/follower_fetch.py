#!/usr/bin/env python3
"""KIP-392 fetch from the closest replica (issue 18): bytes served per broker to rack-aware
consumers versus leader-only consumers, in the same run on the same cluster.

This is a benchmark script, not a test. It starts etcd and three broker processes on
loopback (``LocalCluster``, racks a, b, c for nodes 1, 2, 3) with
``replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector``, creates
one topic (``--partitions``, RF 3, odradek's own placement: the leaders spread over the three
brokers), writes ``--records`` x ``--size`` bytes with an idempotent acks=all librdkafka
producer, then, ``--repeat`` times and alternating which mode goes first, runs three
librdkafka consumers at once -- one per rack, each reading the whole topic from offset 0
with ``assign()`` (three applications, one per rack) -- in two modes:

* ``rack-aware``: ``client.rack`` = the consumer's rack, so each partition's leader sends it
  to the replica in its rack (``preferred_read_replica``);
* ``leader-only``: no ``client.rack`` (what every consumer did before KIP-392, and what an
  unset ``replica.selector.class`` gives everyone): the leaders serve everything.

Bytes served per broker are measured outside the brokers (odradek has no metrics endpoint):
each broker advertises (``--advertise``) a byte-counting proxy in this process
(``CountingProxy`` from tests/interop/test_fetch_from_follower.py), which counts the Fetch
response bytes each broker sends to each consumer connection (by client id). librdkafka's
own per-broker ``rxbytes`` statistics are printed next to them as a cross-check.

The figure that matters is *cross-rack* bytes: bytes a consumer received from a broker in
another rack (what a cloud bills as inter-zone traffic). With the leaders spread evenly,
leader-only consumers get about 2/3 of their bytes across racks; rack-aware ones none but
the leaders' empty redirect answers. The script prints per-broker bytes per mode, the
per-consumer split, the consume times, and the ratio of cross-rack bytes.

Every consumer must read every record exactly once (its count per partition equals the
high watermark, no offset twice), or the run is reported as failed. Every phase is
bounded (``--consume-timeout``); all traffic is on 127.0.0.1; the cluster and the proxy
are stopped in ``finally`` (SIGTERM too).

CPU: the three brokers (Python processes), etcd, the producer, the three consumers and the
proxy (both in this process) share the machine's cores -- 2 where the figures in
BENCHMARKS.md were taken -- so the consume times are those of a loaded machine; the
byte counts do not depend on it.

Run:  .venv/bin/python bench/follower_fetch.py             # ~15 s on 2 cores
      .venv/bin/python bench/follower_fetch.py --records 2000 --repeat 1   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ROOT, interrupt_on_sigterm, machine_line, table  # isort: skip - puts src/ on sys.path

sys.path.insert(0, str(ROOT))  # for the proxy in tests/interop

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.interop.test_fetch_from_follower import SELECTOR, start_proxied_cluster

RACKS = {1: "a", 2: "b", 3: "c"}
NODES = sorted(RACKS)
MODES = ("rack-aware", "leader-only")
MB = 1e6


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)


def create_and_fill(cluster, topic: str, args) -> dict[int, int]:
    """Create the topic, wait for its full ISR, produce; returns {partition: leader}."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(parts) == args.partitions and all(sorted(p.isrs) == NODES for p in parts.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the topic's ISR did not fill in 60 s")
        time.sleep(0.2)
    leaders = {p: parts[p].leader for p in parts}
    prod = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "client.id": "bench-producer", "message.timeout.ms": 120000})
    failed = []
    value = bytes(i % 251 for i in range(args.size))
    deadline = time.monotonic() + args.consume_timeout
    for i in range(args.records):
        while True:
            try:
                prod.produce(topic, value, None, i % args.partitions,
                             on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                prod.poll(0.05)
                if time.monotonic() > deadline:
                    raise RuntimeError("producing timed out") from None
        if not i & 1023:
            prod.poll(0)
    if prod.flush(args.consume_timeout) or failed:
        raise RuntimeError(f"producing failed: {failed[:3]}")
    return leaders


def high_watermarks(cluster, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bench-hw", "client.id": "bench-hw"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def consume_all(cluster, topic: str, hws: dict[int, int], client_id: str, rack: str | None, timeout: float) -> dict:
    """Read the whole topic from offset 0; returns counts, the check and librdkafka's rxbytes."""
    stats: list[dict] = []
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": client_id, "client.id": client_id,
            "enable.auto.commit": False, "statistics.interval.ms": 500,
            "stats_cb": lambda s: stats.append(json.loads(s))}
    if rack:
        conf["client.rack"] = rack
    c = Consumer(conf)
    expected = sum(hws.values())
    seen: dict[int, set] = {p: set() for p in hws}
    dupes = n = 0
    t0 = time.monotonic()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in hws])
        deadline = t0 + timeout
        while n < expected and time.monotonic() < deadline:
            for m in c.consume(2000, 0.5):
                if m.error():
                    continue
                s = seen[m.partition()]
                if m.offset() in s:
                    dupes += 1
                s.add(m.offset())
                n += 1
        elapsed = time.monotonic() - t0
        k = len(stats)
        wait_until = time.monotonic() + 5
        while len(stats) <= k and time.monotonic() < wait_until:
            c.poll(0.1)
    finally:
        c.close()
    rx: dict[int, int] = {}
    if stats:
        for b in stats[-1]["brokers"].values():
            if b.get("nodeid", -1) > 0:
                rx[b["nodeid"]] = rx.get(b["nodeid"], 0) + b["rxbytes"]
    ok = dupes == 0 and all(seen[p] == set(range(hws[p])) for p in hws)
    return {"records": n, "dupes": dupes, "ok": ok, "seconds": elapsed, "rxbytes": rx}


LAYOUTS = {"one per rack": ["a", "b", "c"], "all in rack b": ["b", "b", "b"]}
NODE_OF_RACK = {r: n for n, r in RACKS.items()}


def run_mode(cluster, topic, hws, layout: str, mode: str, rep: int, timeout: float) -> dict:
    """Three consumers at once, in the racks `LAYOUTS[layout]`, each reading everything."""
    racks = LAYOUTS[layout]
    results: dict[int, dict] = {}
    tag = "".join(racks)
    ids = {i: f"bench-{mode}-{tag}-{i}-{rep}-{uuid.uuid4().hex[:4]}" for i in range(len(racks))}

    def one(i):
        try:
            results[i] = consume_all(cluster, topic, hws, ids[i], racks[i] if mode == "rack-aware" else None, timeout)
        except Exception as exc:  # noqa: BLE001 - reported as a failed run
            results[i] = {"ok": False, "error": repr(exc), "seconds": None, "rxbytes": {}}

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(racks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    wall = time.monotonic() - t0
    served = {i: cluster.proxy.fetch_bytes(ids[i]) for i in range(len(racks))}  # consumer -> {broker: B}
    return {"layout": layout, "mode": mode, "rep": rep, "wall": wall, "racks": racks, "consumers": results,
            "served": served, "ok": all(results.get(i, {}).get("ok") for i in range(len(racks)))}


def summarize(runs: list[dict], layout: str) -> dict:
    out = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode and r["layout"] == layout]
        per_broker = Counter()
        cross = same = 0
        for r in mine:
            for i, split in r["served"].items():
                for broker, b in split.items():
                    per_broker[broker] += b
                    if RACKS[broker] == r["racks"][i]:
                        same += b
                    else:
                        cross += b
        reps = max(1, len(mine))
        out[mode] = {
            "per_broker_per_run": {b: per_broker[b] / reps for b in NODES},
            "cross_rack_per_run": cross / reps, "same_rack_per_run": same / reps,
            # assign() to the last record, per consumer (the wall time adds client start, one
            # statistics interval and close, the same in both modes)
            "read_median": statistics.median(c["seconds"] for r in mine for c in r["consumers"].values()
                                             if c.get("seconds") is not None) if mine else None,
            "ok": bool(mine) and all(r["ok"] for r in mine),
        }
    return out


def report(runs: list[dict], layout: str, args) -> dict:
    s = summarize(runs, layout)
    value_mb = args.records * args.size / MB
    print(f"\n== consumers {layout} ({', '.join(LAYOUTS[layout])}), each reading all {value_mb:.1f} MB ==")
    print(f"Fetch response bytes served per broker per run (mean of {args.repeat} runs), measured at the proxies:")
    rows = []
    for mode in MODES:
        m = s[mode]
        fetched = m["same_rack_per_run"] + m["cross_rack_per_run"]
        rows.append((mode, *(f"{m['per_broker_per_run'][b] / MB:.2f}" for b in NODES),
                     f"{m['same_rack_per_run'] / MB:.2f}", f"{m['cross_rack_per_run'] / MB:.3f}",
                     f"{100 * m['cross_rack_per_run'] / max(1, fetched):.1f}%",
                     f"{m['read_median']:.2f}" if m["read_median"] else "-",
                     "ok" if m["ok"] else "FAILED"))
    table(("mode", *(f"node {b} ({RACKS[b]}) MB" for b in NODES), "same-rack MB", "cross-rack MB",
           "cross %", "read s (median)", "exactly once"), rows)
    print("Per consumer (last run of each mode): MB from each broker, Fetch bytes at the proxy "
          "[librdkafka rxbytes, all responses]:")
    rows = []
    for mode in MODES:
        last = [r for r in runs if r["mode"] == mode and r["layout"] == layout][-1]
        for i, rack in enumerate(last["racks"]):
            split = last["served"][i]
            rx = last["consumers"][i].get("rxbytes", {})
            rows.append((mode, f"#{i} rack {rack}",
                         *(f"{split.get(b, 0) / MB:.3f} [{rx.get(b, 0) / MB:.3f}]" for b in NODES),
                         f"{last['consumers'][i].get('seconds') or 0:.2f}"))
    table(("mode", "consumer", *(f"node {b} ({RACKS[b]})" for b in NODES), "read s"), rows, left=2)
    ra, lo = s["rack-aware"], s["leader-only"]
    ra_cross, lo_cross = ra["cross_rack_per_run"], lo["cross_rack_per_run"]
    ratio = f"{lo_cross / ra_cross:,.0f}x" if ra_cross else "inf (rack-aware: 0 B)"
    print(f"cross-rack bytes per run, leader-only / rack-aware: {lo_cross / MB:.2f} MB / {ra_cross / MB:.4f} MB "
          f"= {ratio}; rack-aware consumers got "
          f"{100 * ra['same_rack_per_run'] / max(1, ra['same_rack_per_run'] + ra_cross):.3f}% of their Fetch "
          "bytes from their own rack")
    if layout == "all in rack b":
        share = lambda m: 100 * m["per_broker_per_run"][2] / max(1, sum(m["per_broker_per_run"].values()))
        print(f"node 2 (rack b) share of the bytes served: rack-aware {share(ra):.2f}%, leader-only "
              f"{share(lo):.2f}% (its leader share: {args._led[2]}/{args.partitions} partitions)")
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--size", type=int, default=1000, help="record value size in bytes")
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode, alternating which mode goes first")
    ap.add_argument("--consume-timeout", type=float, default=120.0, help="seconds per consumer (and for producing)")
    ap.add_argument("--work-dir", default=None, help="where etcd and the brokers keep their data [a temp dir]")
    ap.add_argument("--keep", action="store_true", help="keep the data dir and the broker logs")
    ap.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    args = ap.parse_args(argv)
    interrupt_on_sigterm()

    cores = _cores()
    print(machine_line(f"3 brokers + etcd + producer + 3 consumers + the counting proxy share {cores} cores"))
    print(f"topic: {args.partitions} partitions, RF 3, {args.records:,} records x {args.size:,} B "
          f"= {args.records * args.size / MB:.1f} MB; racks {RACKS}; selector {SELECTOR}")
    work = Path(tempfile.mkdtemp(prefix="bench-fff-", dir=args.work_dir))
    cluster = None
    rc = 0
    try:
        cluster = start_proxied_cluster(work / "cluster", [f"replica.selector.class={SELECTOR}",
                                                           "offsets.topic.num.partitions=3"])
        topic = f"fff-bench-{uuid.uuid4().hex[:6]}"
        t0 = time.monotonic()
        leaders = create_and_fill(cluster, topic, args)
        produce_s = time.monotonic() - t0
        hws = high_watermarks(cluster, topic, args.partitions)
        led = Counter(leaders.values())
        print(f"leaders: {dict(sorted(leaders.items()))} (partitions led: "
              + ", ".join(f"node {n} {led[n]}" for n in NODES) + f"); created and produced in {produce_s:.1f} s")
        args._led = led
        runs = []
        for rep in range(args.repeat):
            for layout in LAYOUTS:
                order = MODES if rep % 2 == 0 else MODES[::-1]
                for mode in order:
                    r = run_mode(cluster, topic, hws, layout, mode, rep, args.consume_timeout)
                    runs.append(r)
                    bad = [f"#{i}: {c.get('error') or c}" for i, c in r["consumers"].items() if not c.get("ok")]
                    if bad:
                        print(f"  run {rep} {layout} {mode}: FAILED {bad}")
                        rc = 1
        summaries = {layout: report(runs, layout, args) for layout in LAYOUTS}
        print(f"\nnote: 3 brokers, etcd, the producer, the 3 consumers and the counting proxy ran on the same "
              f"{cores}-core machine; times are under that load (and through the proxy); the byte counts do not "
              "depend on it")
        if args.json:
            del args._led
            Path(args.json).write_text(json.dumps({"args": vars(args), "leaders": leaders, "summary": summaries,
                                                   "runs": runs}, indent=1, default=str))
        if not all(sm[m]["ok"] for sm in summaries.values() for m in MODES):
            rc = 1
    except KeyboardInterrupt:
        print("interrupted")
        rc = 130
    finally:
        if cluster is not None:
            cluster.stop()
            cluster.proxy.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
