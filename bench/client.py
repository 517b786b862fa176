#!/usr/bin/env python3
"""Client throughput: odradek's own Python client vs. librdkafka (confluent-kafka), same run.

This is a benchmark script, not a test. It starts one ``odradek broker`` subprocess on a
free 127.0.0.1 port (temp data dir) and measures, for each record size in ``--sizes``,
one client *process* at a time, every case in a fresh process (spawned, so nothing is
shared between cases):

``produce``  ``--records`` pre-generated values of the given size (1024 distinct ones, each
             half random bytes and half a repeated ASCII pattern), record *i* to
             partition *i mod* ``--partitions`` of a fresh topic, for acks in ``--acks``
             and codecs in ``--compression``; linger 5 ms, batch size 1,000,000 bytes,
             no idempotence for either client unless ``--idempotence`` (odradek's
             producer is idempotent by default with acks=all, librdkafka's is not).
             Timed from the first send to the final flush returning.
             After each case the topic's end offsets (ListOffsets through librdkafka)
             must have grown by exactly ``--records``; the topic is then deleted.
``consume``  a topic of each partition count in ``--consume-partitions`` is filled once
             per size (by librdkafka, not timed); each client then ``assign()``s all its
             partitions from the beginning (no group) and polls until it has every
             record. Timed from ``assign()`` to the last record; the final positions
             must equal the end offsets.

Clients (``--clients``):

* ``odradek``: the asyncio API. Produce: ``await AsyncProducer.send(...)`` in a loop
  (the returned futures are not awaited; one in 1024 is kept and checked), then
  ``await flush()``. Consume: ``AsyncConsumer`` with no group, ``assign`` +
  ``seek_to_beginning``, ``await poll(250)`` in a loop (``max_poll_records`` left at
  the client's default unless ``--max-poll-records``).
* ``odradek-sync``: the synchronous facade (``odradek.client.Producer.send`` returning
  a concurrent future, ``flush()``; ``Consumer.poll``), which runs the asyncio client
  on a background thread.
* ``librdkafka``: confluent-kafka ``Producer.produce`` (``poll(0)`` every 1024 records,
  ``BufferError`` handled by polling; delivery reports for errors only, a queue large
  enough for the whole run, as ``bench/throughput.py`` configures it) and
  ``Consumer.consume(num_messages=--consume-batch)`` after ``assign()`` at
  OFFSET_BEGINNING, with ``bench/throughput.py``'s fetch settings (librdkafka's default
  fetch.queue.backoff.ms=1000 stalls a single-partition consumer of 1 KB records).

Each case has a hard limit of ``--case-timeout`` seconds (the worker stops itself; the
parent kills it if it does not report). The table shows records/s and MB/s (10^6 value
bytes/s; medians of ``--repeat`` runs, clients interleaved), the client process's CPU
(all its threads, % of one core), the broker's CPU over the same interval, the client's
peak RSS, and the ratio of each odradek client to librdkafka for the same case. The goal
of the issue: the odradek client at least 0.25x librdkafka for 1 KB records.

``--profile`` runs the asyncio ``odradek`` cases under cProfile (slower: its rates are
not comparable) and prints the top functions by own time.

Results go to ``--json`` (default ``bench/results/client.json``). With the default 200,000
records a librdkafka phase lasts well under a second and varies by +-30 %; use
``--records 1000000`` (and ``--work-dir /dev/shm`` to keep disk writeback out of it) for
figures to quote.

Run:  .venv/bin/python bench/client.py [--sizes 100,1000] [--records 200000] [--compression none,lz4]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (
    ROOT,
    BrokerProcess,
    git_revision,
    interrupt_on_sigterm,
    librdkafka_produce_loop,
    machine_line,
    table,
)

MB = 1_000_000
VALUE_POOL = 1024  # distinct pre-generated values per worker (power of two)
CLIENTS = ("odradek", "odradek-sync", "librdkafka")
_CLK_TCK = os.sysconf("SC_CLK_TCK")

# Keep the module's top level light: workers are spawned and re-import it.


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def values(size: int) -> list[bytes]:
    """VALUE_POOL distinct values: half random bytes, half a repeated ASCII pattern, so a
    codec has something to do (lz4 about halves a batch) and no value repeats another."""
    pattern = b"odradek bench record " * (size // 21 + 1)
    half = size // 2
    return [os.urandom(half) + pattern[:size - half] for _ in range(VALUE_POOL)]


def max_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def librdkafka_producer_conf(bootstrap: str, acks: str, compression: str, linger_ms: float, timeout: float,
                             idempotence: bool = False) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": idempotence,
        "compression.type": compression,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "delivery.report.only.error": True,
        "socket.nagle.disable": True,
        "message.timeout.ms": int(timeout * 1000),
        "log_level": 3,
    }


def librdkafka_consumer_conf(bootstrap: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-client-{os.getpid()}",  # librdkafka insists; we only assign()
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        # as bench/throughput.py: with librdkafka's defaults (queued.min.messages=100000,
        # queued.max.messages.kbytes=65536, fetch.queue.backoff.ms=1000) a single-partition
        # consumer of 1 KB records stalls for up to 1 s whenever its local queue is "full"
        "fetch.wait.max.ms": 100,
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": 200_000,
        "socket.nagle.disable": True,
        "log_level": 3,
    }


# --------------------------------------------------------------------------
# Workers (spawned processes; each reports one dict on result_q)
# --------------------------------------------------------------------------


def _profile_top(prof: Any, n: int) -> str:
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(n)
    text = out.getvalue()
    start = text.find("   ncalls")
    return text[start:] if start >= 0 else text


def worker(kind: str, client: str, p: dict, ready_q: Any, start_evt: Any, result_q: Any) -> None:
    res: dict[str, Any] = {"kind": kind, "client": client, "ok": False}
    try:
        if client == "librdkafka":
            fn = rdk_produce if kind == "produce" else rdk_consume
            fn(p, res, ready_q, start_evt)
        elif client == "odradek-sync":
            fn = sync_produce if kind == "produce" else sync_consume
            fn(p, res, ready_q, start_evt)
        else:
            import asyncio

            coro = odr_produce if kind == "produce" else odr_consume
            if p.get("loop") == "uvloop":
                import uvloop

                uvloop.run(coro(p, res, ready_q, start_evt))
            else:
                asyncio.run(coro(p, res, ready_q, start_evt))
        res["max_rss_mib"] = max_rss_mib()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        result_q.put(res)


def _odr_producer_kw(p: dict) -> dict:
    from odradek.client import AsyncProducer

    kw: dict[str, Any] = {"acks": p["acks"], "linger_ms": p["linger_ms"], "batch_size": 1_000_000,
                          "compression_type": p["compression"], "delivery_timeout_ms": int(p["timeout"] * 1000)}
    if "enable_idempotence" in inspect.signature(AsyncProducer).parameters:
        kw["enable_idempotence"] = p["idempotence"]
    elif p["idempotence"]:
        raise ValueError("this odradek client has no enable_idempotence")
    return kw


def _wait_start(ready_q: Any, start_evt: Any, timeout: float) -> None:
    ready_q.put(os.getpid())
    if not start_evt.wait(timeout):
        raise TimeoutError("start signal never came")


def _finish_produce(res: dict, n: int, sent: int, t0: float, t1: float, c0: float, failed: int, first: str | None,
                    timed_out: bool) -> None:
    res.update(t0=t0, t1=t1, seconds=t1 - t0, cpu_s=time.process_time() - c0, sent=sent, records=n,
               failed=failed, first_failure=first)
    if timed_out:
        res["error"] = f"timeout: {sent}/{n} sent, not all delivered"
        res["timeout"] = True
    elif failed:
        res["error"] = f"{failed} sampled deliveries failed, first: {first}"
    else:
        res["ok"] = True


async def odr_produce(p: dict, res: dict, ready_q: Any, start_evt: Any) -> None:
    from odradek.client import AsyncProducer, KafkaError

    n, topic, parts, timeout = p["records"], p["topic"], p["partitions"], p["timeout"]
    vals, mask = values(p["size"]), VALUE_POOL - 1
    prod = AsyncProducer(p["bootstrap"], **_odr_producer_kw(p))
    await prod.start()
    try:
        await prod.partitions_for(topic)  # metadata before timing
        _wait_start(ready_q, start_evt, timeout)
        prof = None
        if p.get("profile"):
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        deadline = time.monotonic() + timeout
        sample: list = []
        send = prod.send
        sent = 0
        c0 = time.process_time()
        t0 = time.monotonic()
        for i in range(n):
            fut = await send(topic, vals[i & mask], partition=i % parts)
            if not i & 1023:
                sample.append(fut)
                if time.monotonic() > deadline:
                    break
            sent += 1
        timed_out = sent < n
        try:
            await prod.flush(max(0.1, deadline - time.monotonic()))
        except KafkaError:
            timed_out = True
        t1 = time.monotonic()
        if prof is not None:
            prof.disable()
            res["profile"] = _profile_top(prof, p.get("profile_top", 30))
        bad = [f.exception() for f in sample if f.done() and f.exception() is not None]
        _finish_produce(res, n, sent, t0, t1, c0, len(bad), repr(bad[0]) if bad else None, timed_out)
    finally:
        await prod.close(5)


def sync_produce(p: dict, res: dict, ready_q: Any, start_evt: Any) -> None:
    from odradek.client import KafkaError, Producer

    n, topic, parts, timeout = p["records"], p["topic"], p["partitions"], p["timeout"]
    vals, mask = values(p["size"]), VALUE_POOL - 1
    prod = Producer(p["bootstrap"], **_odr_producer_kw(p))
    try:
        from odradek.client import sync

        sync.run(prod._p.partitions_for(topic))  # metadata before timing
        _wait_start(ready_q, start_evt, timeout)
        deadline = time.monotonic() + timeout
        sample: list = []
        send = prod.send
        sent = 0
        c0 = time.process_time()
        t0 = time.monotonic()
        for i in range(n):
            fut = send(topic, vals[i & mask], partition=i % parts)
            if not i & 1023:
                sample.append(fut)
                if time.monotonic() > deadline:
                    break
            sent += 1
        timed_out = sent < n
        try:
            prod.flush(max(0.1, deadline - time.monotonic()))
        except KafkaError:
            timed_out = True
        t1 = time.monotonic()
        bad = [f.exception() for f in sample if f.done() and f.exception() is not None]
        _finish_produce(res, n, sent, t0, t1, c0, len(bad), repr(bad[0]) if bad else None, timed_out)
    finally:
        prod.close(5)


def rdk_produce(p: dict, res: dict, ready_q: Any, start_evt: Any) -> None:
    from confluent_kafka import Producer

    n, topic, parts, timeout = p["records"], p["topic"], p["partitions"], p["timeout"]
    vals = values(p["size"])
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:  # errors only (delivery.report.only.error)
        if err is not None:
            errors.append(str(err))

    conf = librdkafka_producer_conf(p["bootstrap"], p["acks"], p["compression"], p["linger_ms"], timeout,
                                    p["idempotence"])
    conf["on_delivery"] = on_delivery
    prod = Producer(conf)
    prod.list_topics(topic, timeout=10)  # connect + metadata before timing
    _wait_start(ready_q, start_evt, timeout)
    deadline = time.monotonic() + timeout
    c0 = time.process_time()
    t0 = time.monotonic()
    sent, timed_out = librdkafka_produce_loop(prod, topic, vals, n, lambda i: i % parts, deadline)
    remaining = prod.flush(max(0.1, deadline - time.monotonic()))
    t1 = time.monotonic()
    _finish_produce(res, n, sent, t0, t1, c0, len(errors), errors[0] if errors else None,
                    timed_out or sent < n or remaining > 0)


def _finish_consume(res: dict, want: int, got: int, t0: float, t1: float, c0: float, bad_sizes: int,
                    positions: dict[int, int], ends: dict[int, int]) -> None:
    mismatch = {str(k): (positions.get(k), v) for k, v in ends.items() if positions.get(k) != v}
    res.update(t0=t0, t1=t1, seconds=t1 - t0, cpu_s=time.process_time() - c0, records=want, got=got,
               bad_sizes=bad_sizes, position_mismatch=mismatch)
    if got < want:
        res["error"] = f"timeout: consumed {got}/{want}"
        res["timeout"] = True
    elif got > want or mismatch:
        res["error"] = f"count mismatch: consumed {got}, expected {want}, positions (got, want) {mismatch}"
    elif bad_sizes:
        res["error"] = f"{bad_sizes} polls ended with a value of the wrong size"
    else:
        res["ok"] = True


def _odr_consumer_kw(p: dict) -> dict:
    kw: dict[str, Any] = {"auto_offset_reset": "earliest", "enable_auto_commit": False}
    if p.get("max_poll_records"):
        kw["max_poll_records"] = p["max_poll_records"]
    return kw


async def odr_consume(p: dict, res: dict, ready_q: Any, start_evt: Any) -> None:
    from odradek.client import AsyncConsumer, TopicPartition

    topic, size, timeout, ends = p["topic"], p["size"], p["timeout"], p["ends"]
    want = sum(ends.values())
    tps = [TopicPartition(topic, int(k)) for k in ends]
    cons = AsyncConsumer(p["bootstrap"], **_odr_consumer_kw(p))
    await cons.start()
    try:
        await cons.client.refresh_metadata([topic])  # metadata before timing
        _wait_start(ready_q, start_evt, timeout)
        prof = None
        if p.get("profile"):
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        got = bad_sizes = 0
        poll = cons.poll
        c0 = time.process_time()
        t0 = t_last = time.monotonic()
        deadline = t0 + timeout
        cons.assign(tps)
        cons.seek_to_beginning()
        while got < want and time.monotonic() < deadline:
            recs = await poll(250)
            if recs:
                got += len(recs)
                if len(recs[-1].value) != size:
                    bad_sizes += 1
                t_last = time.monotonic()
        if prof is not None:
            prof.disable()
            res["profile"] = _profile_top(prof, p.get("profile_top", 30))
        positions = {tp.partition: await cons.position(tp) for tp in tps}
        _finish_consume(res, want, got, t0, t_last, c0, bad_sizes, positions, {int(k): v for k, v in ends.items()})
    finally:
        await cons.close(5)


def sync_consume(p: dict, res: dict, ready_q: Any, start_evt: Any) -> None:
    from odradek.client import Consumer, TopicPartition, sync

    topic, size, timeout, ends = p["topic"], p["size"], p["timeout"], p["ends"]
    want = sum(ends.values())
    tps = [TopicPartition(topic, int(k)) for k in ends]
    cons = Consumer(p["bootstrap"], **_odr_consumer_kw(p))
    try:
        sync.run(cons._c.client.refresh_metadata([topic]))  # metadata before timing
        _wait_start(ready_q, start_evt, timeout)
        got = bad_sizes = 0
        poll = cons.poll
        c0 = time.process_time()
        t0 = t_last = time.monotonic()
        deadline = t0 + timeout
        cons.assign(tps)
        cons.seek_to_beginning()
        while got < want and time.monotonic() < deadline:
            recs = poll(250)
            if recs:
                got += len(recs)
                if len(recs[-1].value) != size:
                    bad_sizes += 1
                t_last = time.monotonic()
        positions = {tp.partition: cons.position(tp) for tp in tps}
        _finish_consume(res, want, got, t0, t_last, c0, bad_sizes, positions, {int(k): v for k, v in ends.items()})
    finally:
        cons.close(5)


def rdk_consume(p: dict, res: dict, ready_q: Any, start_evt: Any) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    topic, size, timeout, ends = p["topic"], p["size"], p["timeout"], p["ends"]
    want = sum(ends.values())
    cons = Consumer(librdkafka_consumer_conf(p["bootstrap"]))
    try:
        cons.list_topics(topic, timeout=10)  # connect + metadata before timing
        _wait_start(ready_q, start_evt, timeout)
        got = bad_sizes = errors = 0
        consume, batch = cons.consume, p["consume_batch"]
        c0 = time.process_time()
        t0 = t_last = time.monotonic()
        deadline = t0 + timeout
        cons.assign([TopicPartition(topic, int(k), OFFSET_BEGINNING) for k in ends])
        while got < want and time.monotonic() < deadline:
            # never ask for more than is left: consume() waits for num_messages or the timeout
            msgs = consume(num_messages=min(batch, want - got), timeout=0.25)
            if not msgs:
                continue
            k = len(msgs)
            for m in msgs:
                if m.error() is not None:
                    errors += 1
                    k -= 1
            if k and len(msgs[-1].value() or b"") != size:
                bad_sizes += 1
            got += k
            t_last = time.monotonic()
        positions = {tp.partition: tp.offset
                     for tp in cons.position([TopicPartition(topic, int(k)) for k in ends])}
        _finish_consume(res, want, got, t0, t_last, c0, bad_sizes, positions, {int(k): v for k, v in ends.items()})
        if errors:
            res["ok"] = False
            res["error"] = f"{errors} message errors"
    finally:
        cons.close()


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------


class Admin:
    """Topic set-up and verification through librdkafka (independent of the client measured)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        self.consumer = Consumer(librdkafka_consumer_conf(bootstrap))

    def create(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import NewTopic

        for f in self.admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
            f.result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = self.admin.list_topics(topic, timeout=10).topics.get(topic)
            if md is not None and md.error is None and len(md.partitions) == partitions:
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {topic} did not appear with {partitions} partitions")

    def delete(self, topic: str) -> None:
        for f in self.admin.delete_topics([topic], operation_timeout=30).values():
            try:
                f.result(timeout=30)
            except Exception as e:  # noqa: BLE001 - not fatal for the bench
                print(f"    note: deleting {topic}: {e}")

    def ends(self, topic: str, partitions: int) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        out = {}
        for part in range(partitions):
            lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
            out[part] = hi - lo
        return out

    def close(self) -> None:
        self.consumer.close()
        del self.admin  # librdkafka handles keep reconnecting until destroyed


def run_case(ctx: Any, broker: BrokerProcess, kind: str, client: str, params: dict, timeout: float) -> dict:
    """One worker process; returns its result dict plus broker CPU over the timed interval."""
    ready_q, result_q, start_evt = ctx.Queue(), ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=worker, args=(kind, client, params, ready_q, start_evt, result_q), daemon=True)
    proc.start()
    res: dict[str, Any] | None = None
    b0 = None
    try:
        deadline = time.monotonic() + 60  # set-up: spawn, imports, connect, metadata
        while time.monotonic() < deadline and proc.is_alive():
            try:
                ready_q.get(timeout=0.2)
            except queue.Empty:
                continue
            b0 = proc_cpu_s(broker.pid)
            start_evt.set()
            break
        # (not ready: the worker failed to set up, and its result says why)
        deadline = time.monotonic() + timeout + 30
        while res is None and time.monotonic() < deadline:
            try:
                res = result_q.get(timeout=0.5)
            except queue.Empty:
                if not proc.is_alive():  # died without reporting (a result put just before exit is taken above)
                    try:
                        res = result_q.get(timeout=1)
                    except queue.Empty:
                        res = {"kind": kind, "client": client, "ok": False,
                               "error": f"worker exited with code {proc.exitcode} and no result"}
        if res is None:
            res = {"kind": kind, "client": client, "ok": False, "timeout": True,
                   "error": f"no result within {timeout + 30:.0f}s of the start: worker killed"}
        b1 = proc_cpu_s(broker.pid)
        if b0 is not None and b1 is not None:
            res["broker_cpu_s"] = b1 - b0
    finally:
        proc.join(timeout=15)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
    if not broker.alive():
        res["ok"] = False
        res["error"] = (res.get("error") or "") + f"; broker died: {broker.log_tail()}"
    return res


def rates(res: dict, size: int) -> None:
    if res.get("ok") and res.get("seconds"):
        s = res["seconds"]
        res["rec_s"] = res["records"] / s
        res["mb_s"] = res["records"] * size / s / MB
        res["client_cpu_pct"] = 100 * res["cpu_s"] / s
        if "broker_cpu_s" in res:
            res["broker_cpu_pct"] = 100 * res["broker_cpu_s"] / s


def case_label(c: dict) -> str:
    if c["kind"] == "produce":
        return f"produce acks={c['acks']} {c['compression']}"
    return f"consume {c['partitions']}p"


def build_cases(args: argparse.Namespace) -> list[dict]:
    cases = []
    if "produce" in args.section_list:
        for comp in args.compression_list:
            for acks in args.acks_list:
                cases.append({"kind": "produce", "acks": acks, "compression": comp, "partitions": args.partitions})
    if "consume" in args.section_list:
        for parts in args.consume_partition_list:
            cases.append({"kind": "consume", "partitions": parts})
    return cases


def run_size(ctx: Any, args: argparse.Namespace, broker: BrokerProcess, admin: Admin, size: int) -> list[dict]:
    n = args.records
    out: list[dict] = []
    cases = build_cases(args)
    consume_topics: dict[int, tuple[str, dict[int, int]]] = {}
    for parts in (args.consume_partition_list if "consume" in args.section_list else []):
        topic = f"bench-client-consume-{size}-{parts}p"
        admin.create(topic, parts)
        params = {"bootstrap": broker.bootstrap, "topic": topic, "partitions": parts, "records": n, "size": size,
                  "acks": "1", "compression": args.consume_compression, "linger_ms": args.linger_ms,
                  "timeout": max(args.case_timeout, 120.0), "idempotence": False}
        r = run_case(ctx, broker, "produce", "librdkafka", params, params["timeout"])
        ends = admin.ends(topic, parts)
        if not r.get("ok") or sum(ends.values()) != n:
            raise RuntimeError(f"filling {topic} failed: {r.get('error')}; end offsets {ends}")
        consume_topics[parts] = (topic, ends)
        print(f"  filled {topic}: {n:,} records ({args.consume_compression}) in {r['seconds']:.2f}s", flush=True)
    seq = 0
    for rep in range(args.repeat):
        for case in cases:
            k = rep % len(args.client_list)
            order = args.client_list[k:] + args.client_list[:k]  # rotate, so drift hits every client alike
            for client in order:
                seq += 1
                params = {"bootstrap": broker.bootstrap, "size": size, "records": n, "timeout": args.case_timeout,
                          "linger_ms": args.linger_ms, "loop": args.loop, "idempotence": args.idempotence,
                          "profile": args.profile and client == "odradek", "profile_top": args.profile_top,
                          "max_poll_records": args.max_poll_records, "consume_batch": args.consume_batch}
                if case["kind"] == "produce":
                    topic = f"bench-client-produce-{size}-{seq}"
                    admin.create(topic, case["partitions"])
                    params.update(topic=topic, partitions=case["partitions"], acks=case["acks"],
                                  compression=case["compression"])
                    r = run_case(ctx, broker, "produce", client, params, args.case_timeout)
                    if r.get("ok"):
                        ends = admin.ends(topic, case["partitions"])
                        if sum(ends.values()) != n:
                            r["ok"] = False
                            r["error"] = f"end offsets sum to {sum(ends.values())}, expected {n}: {ends}"
                    admin.delete(topic)
                else:
                    topic, ends = consume_topics[case["partitions"]]
                    params.update(topic=topic, ends={str(p): e for p, e in ends.items()})
                    r = run_case(ctx, broker, "consume", client, params, args.case_timeout)
                rates(r, size)
                r.update(size=size, repeat=rep, case=case_label(case), **{k: v for k, v in case.items() if k != "kind"})
                out.append(r)
                if r.get("ok"):
                    print(f"  [{case_label(case)}] {client:<12} run {rep + 1}/{args.repeat}: {r['seconds']:.2f}s  "
                          f"{r['rec_s']:,.0f} rec/s  client CPU {r['client_cpu_pct']:.0f}%", flush=True)
                else:
                    print(f"  [{case_label(case)}] {client:<12} run {rep + 1}/{args.repeat}: FAILED: "
                          f"{(r.get('error') or '')[:400]}", flush=True)
                if r.get("profile"):
                    print(f"  --- cProfile, {client}, {case_label(case)} (top {args.profile_top} by own time) ---")
                    print("\n".join("    " + line for line in r["profile"].rstrip().splitlines()))
    for topic, _ in consume_topics.values():
        admin.delete(topic)
    return out


def summarize(results: list[dict], args: argparse.Namespace) -> list[dict]:
    rows = []
    seen: list[tuple[int, str]] = []
    for r in results:
        key = (r["size"], r["case"])
        if key not in seen:
            seen.append(key)
    for size, case in seen:
        by_client = {}
        for client in args.client_list:
            runs = [r for r in results if r["size"] == size and r["case"] == case and r["client"] == client]
            ok = [r for r in runs if r.get("ok")]
            by_client[client] = {
                "runs": len(runs), "ok_runs": len(ok),
                "status": "ok" if runs and len(ok) == len(runs) else
                ("timeout" if any(r.get("timeout") for r in runs) else "failed"),
                "rec_s": median([r["rec_s"] for r in ok]),
                "mb_s": median([r["mb_s"] for r in ok]),
                "rec_s_all": [r.get("rec_s") for r in runs],
                "client_cpu_pct": median([r["client_cpu_pct"] for r in ok]),
                "broker_cpu_pct": median([r.get("broker_cpu_pct") for r in ok]),
                "max_rss_mib": max((r.get("max_rss_mib") or 0 for r in runs), default=None),
                "errors": [r["error"] for r in runs if r.get("error")][:3],
            }
        rd = by_client.get("librdkafka", {})
        ref = rd.get("rec_s") if rd.get("status") == "ok" else None
        for client, d in by_client.items():  # only when every run of both succeeded
            ok = ref and d["status"] == "ok" and d["rec_s"] and client != "librdkafka"
            d["vs_librdkafka"] = d["rec_s"] / ref if ok else None
        rows.append({"size": size, "case": case, "clients": by_client})
    return rows


def print_tables(summary: list[dict], args: argparse.Namespace) -> None:
    for size in args.size_list:
        rows = [s for s in summary if s["size"] == size]
        if not rows:
            continue
        rep = f", median of {args.repeat}" if args.repeat > 1 else ""
        print(f"\n== {size}-byte values, {args.records:,} records per case, 1 client process, linger.ms="
              f"{args.linger_ms:g}, idempotence {'on' if args.idempotence else 'off'}, produce topic "
              f"{args.partitions} partitions{rep} ==")
        lines = []
        for s in rows:
            first = True
            for client, d in s["clients"].items():
                ok = d["status"] == "ok"
                lines.append((
                    s["case"] if first else "", client,
                    f"{d['rec_s']:,.0f}" if ok else d["status"].upper(),
                    f"{d['mb_s']:,.1f}" if ok else "",
                    f"{d['client_cpu_pct']:.0f}%" if ok else "",
                    f"{d['broker_cpu_pct']:.0f}%" if ok and d["broker_cpu_pct"] is not None else "",
                    f"{d['max_rss_mib']:.0f} MiB" if d["max_rss_mib"] else "",
                    f"{d['vs_librdkafka']:.2f}x" if d["vs_librdkafka"] is not None else "",
                ))
                first = False
        table(("case", "client", "rec/s", "MB/s", "client CPU", "broker CPU", "client max RSS", "/librdkafka"),
              lines, left=2)
        print("  (MB/s = 10^6 value bytes/s; CPU = % of one core over the timed interval, client = all threads of the "
              "client process; /librdkafka = rec/s ratio for the same case)")
        for s in rows:
            for client, d in s["clients"].items():
                for e in d["errors"]:
                    print(f"  ! {s['case']} {client}: {e[:600]}")
        goal = [(s["case"], d["vs_librdkafka"]) for s in rows for c, d in s["clients"].items()
                if c == "odradek" and d["vs_librdkafka"] is not None]
        if goal:
            worst = min(goal, key=lambda x: x[1])
            verdict = (f"; goal for 1 KB records >= 0.25x: {'met' if worst[1] >= 0.25 else 'NOT met'} "
                       f"(lowest: {worst[0]})") if size == 1000 else " (the goal is stated for 1 KB records)"
            print("  odradek (asyncio) / librdkafka: " + ", ".join(f"{c} {v:.2f}x" for c, v in goal) + verdict)


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dist in ("odradek", "confluent-kafka", "kio", "uvloop", "cramjam"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        import confluent_kafka

        out["librdkafka"] = confluent_kafka.libversion()[0]
    except Exception as e:  # noqa: BLE001
        out["librdkafka"] = f"unavailable: {e}"
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Produce/consume throughput of odradek's Python client vs. librdkafka against an odradek broker.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="produce,consume", help="comma list of: produce, consume")
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"comma list of: {', '.join(CLIENTS)}")
    ap.add_argument("--sizes", default="1000", help="record value sizes in bytes (comma list, e.g. 100,1000)")
    ap.add_argument("--records", type=int, default=200_000, help="records per case")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of each produce case's topic")
    ap.add_argument("--consume-partitions", default="1,6", help="partition counts of the consume topics")
    ap.add_argument("--acks", default="1,all", help="comma list of producer acks: 0, 1, all")
    ap.add_argument("--compression", default="none", help="comma list of producer codecs: none, gzip, snappy, lz4, zstd")
    ap.add_argument("--consume-compression", default="none", help="codec of the records the consume cases read")
    ap.add_argument("--linger-ms", type=float, default=5, help="producer linger")
    ap.add_argument("--idempotence", action="store_true",
                    help="idempotent producers (both clients; odradek makes acks=all idempotent by default, "
                         "librdkafka does not: off unless given)")
    ap.add_argument("--max-poll-records", type=int, default=None,
                    help="odradek consumers' max_poll_records [None = the client's default]")
    ap.add_argument("--consume-batch", type=int, default=10_000, help="librdkafka consume(num_messages=...)")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                    help="event loop of the asyncio odradek cases (the sync facade uses its own asyncio loop)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case and client (clients interleaved); medians shown")
    ap.add_argument("--case-timeout", type=float, default=120.0, help="seconds: hard limit of one case")
    ap.add_argument("--profile", action="store_true", help="run the asyncio odradek cases under cProfile and print it")
    ap.add_argument("--profile-top", type=int, default=30, help="functions shown per profile")
    ap.add_argument("-E", "--client-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment variable for the client processes only (repeatable), e.g. glibc's "
                         "MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "client.json"),
                    help="write settings and every run here ('' = do not)")
    ap.add_argument("--work-dir", help="parent of the broker's temp data dir [None = the system temp dir]")
    ap.add_argument("--keep-logs", action="store_true", help="keep the broker's work dir and log")
    args = ap.parse_args(argv)

    def lst(s: str) -> list[str]:
        return [x.strip() for x in s.split(",") if x.strip()]

    args.section_list = lst(args.sections)
    if any("=" not in kv for kv in args.client_env):
        ap.error("--client-env takes KEY=VALUE")
    args.client_env_map = dict(kv.split("=", 1) for kv in args.client_env)
    args.client_list = lst(args.clients)
    args.size_list = [int(x) for x in lst(args.sizes)]
    args.acks_list = ["all" if a == "-1" else a for a in lst(args.acks)]
    args.compression_list = lst(args.compression)
    args.consume_partition_list = [int(x) for x in lst(args.consume_partitions)]
    if set(args.section_list) - {"produce", "consume"} or not args.section_list:
        ap.error("--sections: produce and/or consume")
    if set(args.client_list) - set(CLIENTS) or not args.client_list:
        ap.error(f"--clients: any of {', '.join(CLIENTS)}")
    if set(args.acks_list) - {"0", "1", "all"}:
        ap.error("--acks: 0, 1, all")
    codecs = {"none", "gzip", "snappy", "lz4", "zstd"}
    if set(args.compression_list) - codecs or args.consume_compression not in codecs:
        ap.error("--compression: none, gzip, snappy, lz4, zstd")
    if args.records < 1 or args.repeat < 1 or args.partitions < 1 or min(args.consume_partition_list or [1]) < 1:
        ap.error("--records, --repeat and partition counts must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    vers = versions()
    print("== machine ==")
    print("  " + machine_line(f"confluent-kafka={vers['confluent-kafka']}  librdkafka={vers['librdkafka']}"))
    print(f"  broker: odradek {vers['odradek']} (python -m odradek broker, default config); clients: "
          f"{', '.join(args.client_list)}; asyncio cases on {args.loop}"
          + (f"; client env {' '.join(args.client_env)}" if args.client_env else "")
          + ("; PROFILING (rates of profiled cases are not comparable)" if args.profile else ""))
    interrupt_on_sigterm()
    ctx = mp.get_context("spawn")  # never fork a process that has librdkafka or event-loop threads
    t_begin = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-client-", dir=args.work_dir))
    broker = BrokerProcess(work / "data", [], work / "broker.log", ("--log-level", "WARNING"))
    results: list[dict] = []
    interrupted = failed = False
    try:
        broker.start()
        os.environ.update(args.client_env_map)  # after the broker started: workers are spawned with it
        admin = Admin(broker.bootstrap)
        try:
            for size in args.size_list:
                print(f"\n-- {size}-byte values, {args.records:,} records per case --", flush=True)
                results += run_size(ctx, args, broker, admin, size)
        finally:
            admin.close()
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - set-up failed (broker, topics): report what was measured so far
        failed = True
        print(f"\nFAILED: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        rc = broker.stop()
        log = broker.log_tail(100_000)
        if rc not in (0, None) or "Traceback" in log:
            print(f"  note: broker exit code {rc}; log tail: {log[-1500:]}")
        if args.keep_logs:
            print(f"  broker work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(results, args)
    print_tables(summary, args)
    elapsed = time.monotonic() - t_begin
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"machine": machine_line(), "revision": git_revision(), "versions": vers,
               "settings": {k: v for k, v in vars(args).items() if k != "json"}, "summary": summary,
               "runs": results, "elapsed_s": elapsed,
               "units": {"mb_s": "10^6 bytes of record value per second", "cpu_pct": "% of one core"}}
        path.write_text(json.dumps(doc, indent=2, default=str))
        print(f"\nresults written to {path}")
    print(f"\ntotal bench time {elapsed:.1f}s")
    return 0 if results and not (interrupted or failed) and all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
