#!/usr/bin/env python3
"""Spark read throughput: the odradek source beside a synthetic Arrow source, same run.

This is a benchmark script, not a test. It starts one ``odradek broker`` subprocess on a
free 127.0.0.1 port (temp data dir), fills a topic of ``--partitions`` partitions with
``--records`` records of ``--value-bytes``-byte values and no key (record *i* to
partition *i mod partitions*; librdkafka through confluent-kafka when it is installed,
odradek's producer otherwise; not timed), then starts one SparkSession (``--master``,
default ``local[2]``) and times streaming queries

    spark.readStream.format(SOURCE).load()
         .writeStream.format("noop").trigger(availableNow=True).start()

from query start to termination, for two sources, interleaved, ``--repeat`` times each:

``odradek``    the connector: ``subscribe`` the topic, ``startingOffsets=earliest``; one
               input partition per Kafka partition, each read by ``fetch.read_range``
               (raw fetches, decoded straight to Arrow by ``columnar.to_arrow``).
``synthetic``  a Python DataSource defined in this file: the same schema and the same
               number of rows in the same number of input partitions, yielded as
               pyarrow RecordBatches of ``--batch-rows`` rows (the connector's
               ``max_poll_records``) built with no I/O and no per-record Python work
               (the value column is one buffer sliced, the other columns are arange/
               constant arrays). It is the ceiling: what Spark's Python data source
               path (Arrow batches from a Python worker to the JVM, then the noop sink)
               costs on this machine with nothing to read.

A warm-up query (synthetic, ``--warmup-records``) runs first, unmeasured: the first
streaming query of a JVM pays 5-7 s of start-up (FIELD-NOTES). Each measured query must
report exactly ``--records`` input rows. Rows/s is records / wall time of the query (its
planning included: that is what a user waits for); ``batch rows/s`` is records / the
micro-batch's ``triggerExecution`` time from the query progress. CPU is summed over
process trees from /proc: Spark = the JVM and its descendants (Python workers, the
streaming source runner), driver = this Python process (Py4J, the fill producer's and
admin's threads), broker = the broker process; in seconds and in cores (CPU s / wall s).
The goal of the issue: odradek >= 0.7 x the synthetic ceiling (medians).

``--breakdown`` (default on) then reads one partition in this process with
``fetch.read_range`` as an executor would, timing ``columnar.to_arrow`` apart from the
consumer (fetch + record decoding), and ``--profile`` adds a cProfile of that read (top
functions by own time).

Results go to ``--json`` (default ``bench/results/spark.json``).

Needs ``pip install -e '.[spark,bench]'`` and Java 17+.
Run:  .venv/bin/python bench/spark.py [--records 2000000] [--repeat 3] [--master local[2]]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (
    ROOT,
    BrokerProcess,
    git_revision,
    interrupt_on_sigterm,
    machine_line,
    table,
)

sys.path.insert(0, str(ROOT / "src"))

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from odradek.client import Admin, NewTopic, TopicPartition
from odradek.spark import arrow as odradek_arrow

TOPIC = "spark-bench"
CLK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- the synthetic source


class _Slice(InputPartition):
    def __init__(self, index: int, start: int, end: int) -> None:
        super().__init__((index, start, end))
        self.index, self.start, self.end = index, start, end


class SyntheticStreamReader(DataSourceStreamReader):
    def __init__(self, rows: int, partitions: int, batch_rows: int, value_bytes: int) -> None:
        self.rows, self.n_parts, self.batch_rows, self.value_bytes = rows, partitions, batch_rows, value_bytes

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self, start=None, limit=None) -> dict:
        return {"offset": self.rows}

    def partitions(self, start: dict, end: dict):
        lo, hi = int(start["offset"]), int(end["offset"])
        per = -(-(hi - lo) // self.n_parts) if hi > lo else 0
        return [_Slice(i, lo + i * per, min(hi, lo + (i + 1) * per)) for i in range(self.n_parts) if lo + i * per < hi]

    def read(self, partition: _Slice):
        # Templates built once per task: the value column is one buffer, sliced per batch.
        n = self.batch_rows
        vb = self.value_bytes
        data = pa.py_buffer(bytes(range(256)) * (n * vb // 256 + 1))
        offsets = pa.array(range(0, (n + 1) * vb, vb), pa.int32()).buffers()[1]
        values = pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])
        keys = pa.nulls(n, pa.binary())
        topic = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([TOPIC])).cast(pa.string())
        part = pa.array([partition.index] * n, pa.int32())
        ts = pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        ts_type = pa.array([0] * n, pa.int32())
        offset = partition.start
        while offset < partition.end:
            k = min(n, partition.end - offset)
            offs = pa.array(range(offset, offset + k), pa.int64())
            cols = [keys, values, topic, part, offs, ts, ts_type]
            yield pa.RecordBatch.from_arrays([c if c is offs else c.slice(0, k) for c in cols],
                                             schema=odradek_arrow.SCHEMA)
            offset += k

    def commit(self, end: dict) -> None:
        pass


class SyntheticArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "synthetic_arrow"

    def schema(self) -> str:
        return odradek_arrow.ddl(False)

    def streamReader(self, schema):
        o = self.options
        return SyntheticStreamReader(int(o["rows"]), int(o["partitions"]), int(o.get("batchRows", "20000")),
                                     int(o.get("valueBytes", "100")))


# ---------------------------------------------------------------------- measuring


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, utime+stime+cutime+cstime in seconds) for every process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        ppid = int(fields[1])
        ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        out[int(name)] = (ppid, ticks / CLK)
    return out


def tree_cpu(root: int, procs: dict[int, tuple[int, float]] | None = None) -> float:
    """CPU seconds of `root` and every descendant alive now (plus what reaped ones left in
    their parents' cutime/cstime)."""
    procs = procs if procs is not None else _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        if pid in procs:
            total += procs[pid][1]
        stack.extend(children.get(pid, []))
    return total


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Meter:
    def __init__(self, jvm_pid: int, broker_pid: int) -> None:
        self.jvm_pid, self.broker_pid = jvm_pid, broker_pid

    def snapshot(self) -> tuple[float, float, float, float]:
        procs = _proc_table()
        return time.monotonic(), tree_cpu(self.jvm_pid, procs), self_cpu(), tree_cpu(self.broker_pid, procs)


def fill(bootstrap: str, records: int, partitions: int, value_bytes: int, use: str, deadline: float) -> tuple[int, str]:
    values = [(os.urandom(value_bytes // 2) + b"x" * value_bytes)[:value_bytes] for _ in range(1024)]
    if use == "librdkafka":
        from bench_common import librdkafka_produce_loop
        from confluent_kafka import Producer as CKProducer

        p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "acks": 1,
                        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000,
                        "enable.idempotence": False})
        sent, timed_out = librdkafka_produce_loop(p, TOPIC, values, records, lambda i: i % partitions, deadline)
        left = p.flush(max(1.0, deadline - time.monotonic()))
        if timed_out or left:
            raise RuntimeError(f"fill timed out: {sent} handed over, {left} undelivered")
        return sent, "confluent-kafka"
    from odradek.client import Producer

    with Producer(bootstrap, acks=1, linger_ms=5, enable_idempotence=False) as p:
        futures = []
        for i in range(records):
            futures.append(p.send(TOPIC, values[i & 1023], partition=i % partitions))
            if len(futures) >= 50_000:
                for f in futures:
                    f.result()
                futures.clear()
            if not i & 0xFFFF and time.monotonic() > deadline:
                raise RuntimeError(f"fill timed out after {i} records")
        p.flush()
        for f in futures:
            f.result()
    return records, "odradek"


def run_query(spark, meter: Meter, source: str, args, bootstrap: str, rows: int, work: Path, tag: str) -> dict:
    reader = spark.readStream.format(source)
    if source == "odradek":
        reader = (reader.option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
                  .option("startingOffsets", "earliest"))
    else:
        reader = (reader.option("rows", str(rows)).option("partitions", str(args.partitions))
                  .option("batchRows", str(args.batch_rows)).option("valueBytes", str(args.value_bytes)))
    checkpoint = work / f"checkpoint-{tag}"
    t0, spark0, drv0, brk0 = meter.snapshot()
    q = (reader.load().writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", str(checkpoint)).queryName(tag).start())
    finished = q.awaitTermination(args.query_timeout)
    t1, spark1, drv1, brk1 = meter.snapshot()
    if not finished:
        q.stop()
    error = q.exception()
    progress = q.recentProgress
    shutil.rmtree(checkpoint, ignore_errors=True)
    got = sum(int(p.get("numInputRows") or 0) for p in progress)
    trigger_ms = sum(int((p.get("durationMs") or {}).get("triggerExecution") or 0) for p in progress
                     if p.get("numInputRows"))
    durations: dict[str, int] = {}
    for p in progress:
        for k, v in (p.get("durationMs") or {}).items():
            durations[k] = durations.get(k, 0) + int(v)
    wall = t1 - t0
    ok = finished and error is None and got == rows
    return {"source": source, "tag": tag, "ok": ok, "rows": got, "expected_rows": rows,
            "error": None if error is None else str(error)[:2000], "timed_out": not finished,
            "wall_s": wall, "rows_per_s": got / wall if wall else 0.0,
            "batch_s": trigger_ms / 1000, "batch_rows_per_s": got / (trigger_ms / 1000) if trigger_ms else 0.0,
            "batches": len([p for p in progress if p.get("numInputRows")]), "progress_entries": len(progress),
            "duration_ms": durations,
            "cpu_spark_s": spark1 - spark0, "cpu_driver_s": drv1 - drv0, "cpu_broker_s": brk1 - brk0}


def breakdown(bootstrap: str, partition: int, end: int, profile: bool, top: int) -> dict:
    """One partition read in this process exactly as an executor task reads it, with
    columnar.to_arrow timed apart (and, with `profile`, under cProfile)."""
    from odradek.records.codec import encode_batch
    from odradek.spark import fetch

    # The first decode in a process loads the compiled record loop (numba's disk cache, or
    # a compile): a once-per-Python-worker cost, timed apart from the read.
    t = time.perf_counter()
    fetch.to_arrow(encode_batch([(0, 0, None, b"x")]), TOPIC, partition, 0, 1, False)
    first_call = time.perf_counter() - t
    spent = {"to_batch": 0.0, "batches": 0}
    original = fetch.to_arrow

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent["to_batch"] += time.perf_counter() - t
            spent["batches"] += 1

    fetch.to_arrow = timed
    prof = cProfile.Profile() if profile else None
    rows = 0
    try:
        c0, t0 = self_cpu(), time.perf_counter()
        if prof:
            prof.enable()
        for batch in fetch.read_range(bootstrap, TOPIC, partition, 0, end, fail_on_data_loss=True,
                                      include_headers=False):
            rows += batch.num_rows
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, self_cpu() - c0
    finally:
        fetch.to_arrow = original
    out = {"partition": partition, "rows": rows, "wall_s": wall, "cpu_s": cpu, "rows_per_s": rows / wall,
           "to_batch_s": spent["to_batch"], "to_batch_calls": spent["batches"],
           "consumer_s": wall - spent["to_batch"], "profiled": profile, "first_decode_s": first_call}
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
        out["profile"] = s.getvalue()
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="measured queries per source (interleaved); medians")
    ap.add_argument("--batch-rows", type=int, default=20_000,
                    help="rows per synthetic Arrow batch (the connector polls up to 20,000 records)")
    ap.add_argument("--warmup-records", type=int, default=200_000)
    ap.add_argument("--fill", choices=("auto", "librdkafka", "odradek"), default="auto")
    ap.add_argument("--fill-timeout", type=float, default=300.0)
    ap.add_argument("--query-timeout", type=float, default=300.0, help="seconds: a query running longer is stopped")
    ap.add_argument("--no-breakdown", dest="breakdown", action="store_false")
    ap.add_argument("--profile", action="store_true", help="cProfile the in-process read of one partition")
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("--goal", type=float, default=0.7, help="ratio odradek/synthetic the issue asks for")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "spark.json"), help="'' = do not write")
    ap.add_argument("--work-dir", help="parent of the temp dir (broker data, checkpoints)")
    args = ap.parse_args(argv)
    if min(args.records, args.partitions, args.repeat, args.batch_rows, args.value_bytes) < 1:
        ap.error("--records, --partitions, --repeat, --batch-rows and --value-bytes must be >= 1")
    if args.fill == "auto":
        try:
            import confluent_kafka  # noqa: F401

            args.fill = "librdkafka"
        except ImportError:
            args.fill = "odradek"
    return args


def versions() -> dict[str, str]:
    import platform

    import pyspark

    out = {"pyspark": pyspark.__version__, "pyarrow": pa.__version__, "python": platform.python_version()}
    try:
        import confluent_kafka

        out["confluent-kafka"] = confluent_kafka.version()[0]
    except ImportError:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    vers = versions()
    print("== machine ==")
    print("  " + machine_line(f"pyspark={vers['pyspark']}  pyarrow={vers['pyarrow']}"))
    print(f"  {args.records:,} records of {args.value_bytes} B in {args.partitions} partitions; master {args.master}; "
          f"Trigger.AvailableNow into format('noop'); {args.repeat} runs per source, interleaved; fill by {args.fill}")
    interrupt_on_sigterm()
    t_begin = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.work_dir))
    broker = BrokerProcess(work / "data", [], work / "broker.log", ("--log-level", "WARNING"))
    runs: list[dict] = []
    fill_info: dict = {}
    bd: dict | None = None
    spark = None
    failed = interrupted = False
    try:
        broker.start()
        with Admin(broker.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, args.partitions)])
            t = time.monotonic()
            sent, by = fill(broker.bootstrap, args.records, args.partitions, args.value_bytes, args.fill,
                            t + args.fill_timeout)
            fill_s = time.monotonic() - t
            ends = admin.list_offsets({TopicPartition(TOPIC, p): -1 for p in range(args.partitions)})
            total = sum(o.offset for o in ends.values())
            end0 = ends[TopicPartition(TOPIC, 0)].offset
            if total != args.records:
                raise RuntimeError(f"the topic holds {total} records after the fill, not {args.records}")
        fill_info = {"records": sent, "by": by, "seconds": fill_s, "records_per_s": sent / fill_s}
        print(f"  filled {sent:,} records in {fill_s:.1f} s ({sent / fill_s:,.0f}/s, {by})", flush=True)

        from odradek.spark import session

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        log4j = work / "log4j2.properties"
        log4j.write_text("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
                         "appender.console.type = Console\nappender.console.name = console\n"
                         "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                         "appender.console.layout.pattern = %d %p %c{1}: %m%n%ex\n")
        spark = session(args.master, app_name="odradek-bench-spark",
                        spark__driver__extraJavaOptions=f"-Dlog4j.configurationFile=file:{log4j}",
                        spark__ui__showConsoleProgress="false")
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(SyntheticArrowSource)
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        meter = Meter(jvm_pid, broker.pid)

        t = time.monotonic()
        warm = run_query(spark, meter, "synthetic_arrow", args, broker.bootstrap, args.warmup_records, work, "warmup")
        print(f"  warm-up query ({args.warmup_records:,} synthetic rows): {time.monotonic() - t:.1f} s, "
              f"{'ok' if warm['ok'] else 'FAILED: ' + str(warm['error'])}", flush=True)
        for i in range(args.repeat):
            for source in ("synthetic_arrow", "odradek"):
                r = run_query(spark, meter, source, args, broker.bootstrap, args.records, work, f"{source}-{i}")
                r["source"] = "synthetic" if source == "synthetic_arrow" else source
                r["run"] = i
                runs.append(r)
                print(f"  run {i} {r['source']:<9} {r['rows']:>9,} rows {r['wall_s']:6.2f} s "
                      f"{r['rows_per_s']:>10,.0f} rows/s  spark CPU {r['cpu_spark_s']:5.1f} s  "
                      f"broker CPU {r['cpu_broker_s']:4.1f} s" + ("" if r["ok"] else f"  FAILED {r['error']}"),
                      flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - report what was measured so far
        failed = True
        print(f"\nFAILED: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        if spark is not None:
            spark.stop()

    summary = summarize(runs, args)
    if summary:
        print_summary(summary, args)
    if args.breakdown and not (failed or interrupted) and broker.alive():
        try:
            bd = breakdown(broker.bootstrap, 0, end0, args.profile, args.profile_top)
            print_breakdown(bd)
        except Exception as e:  # noqa: BLE001
            print(f"\nbreakdown FAILED: {type(e).__name__}: {e}", file=sys.stderr)
    rc = broker.stop()
    log = broker.log_tail(100_000)
    if rc not in (0, None) or "Traceback" in log:
        print(f"  note: broker exit code {rc}; log tail: {log[-1500:]}")
    shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - t_begin
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"machine": machine_line(), "revision": git_revision(), "versions": vers,
               "settings": {k: v for k, v in vars(args).items() if k != "json"}, "fill": fill_info,
               "summary": summary, "runs": runs, "breakdown": bd, "elapsed_s": elapsed,
               "units": {"rows_per_s": "input rows / query wall time (start() to termination)",
                         "cpu_*_s": "CPU seconds of the process tree over the query",
                         "cores": "CPU seconds / wall seconds"}}
        path.write_text(json.dumps(doc, indent=2, default=str))
        print(f"\nresults written to {path}")
    print(f"total bench time {elapsed:.1f}s")
    ok = bool(runs) and all(r["ok"] for r in runs) and not (failed or interrupted)
    return 0 if ok else 1


def summarize(runs: list[dict], args) -> dict:
    out = {}
    for source in ("synthetic", "odradek"):
        rs = [r for r in runs if r["source"] == source and r["ok"]]
        if not rs:
            continue

        def m(key, rs=rs):
            return statistics.median(r[key] for r in rs)

        wall = m("wall_s")
        out[source] = {"runs": len(rs), "rows_per_s": m("rows_per_s"), "batch_rows_per_s": m("batch_rows_per_s"),
                       "wall_s": wall, "cpu_spark_s": m("cpu_spark_s"), "cpu_driver_s": m("cpu_driver_s"),
                       "cpu_broker_s": m("cpu_broker_s"),
                       "cores": (m("cpu_spark_s") + m("cpu_driver_s") + m("cpu_broker_s")) / wall,
                       "min_rows_per_s": min(r["rows_per_s"] for r in rs),
                       "max_rows_per_s": max(r["rows_per_s"] for r in rs)}
    if "synthetic" in out and "odradek" in out:
        out["ratio"] = out["odradek"]["rows_per_s"] / out["synthetic"]["rows_per_s"]
        out["batch_ratio"] = out["odradek"]["batch_rows_per_s"] / out["synthetic"]["batch_rows_per_s"]
        out["goal"] = args.goal
        out["goal_met"] = out["ratio"] >= args.goal
    return out


def print_summary(s: dict, args) -> None:
    print(f"\n== medians of {args.repeat} runs: {args.records:,} rows of {args.value_bytes} B, "
          f"{args.partitions} partitions, {args.master}, Trigger.AvailableNow -> noop ==")
    rows = []
    for source in ("synthetic", "odradek"):
        if source in s:
            x = s[source]
            rows.append((source, f"{x['rows_per_s']:,.0f}", f"{x['min_rows_per_s']:,.0f}-{x['max_rows_per_s']:,.0f}",
                         f"{x['batch_rows_per_s']:,.0f}", f"{x['wall_s']:.2f}", f"{x['cpu_spark_s']:.1f}",
                         f"{x['cpu_driver_s']:.1f}", f"{x['cpu_broker_s']:.1f}", f"{x['cores']:.2f}"))
    table(("source", "rows/s", "range", "batch rows/s", "wall s", "spark CPU s", "driver CPU s", "broker CPU s",
           "cores"), rows)
    if "ratio" in s:
        print(f"\n  odradek / synthetic: {s['ratio']:.2f} (wall), {s['batch_ratio']:.2f} (micro-batch time); "
              f"goal >= {s['goal']}: {'met' if s['goal_met'] else 'NOT met'}")


def print_breakdown(bd: dict) -> None:
    print(f"\n== one partition read in-process (fetch.read_range, as an executor task): {bd['rows']:,} rows ==")
    print(f"  {bd['wall_s']:.2f} s wall, {bd['cpu_s']:.2f} s CPU (this process), {bd['rows_per_s']:,.0f} rows/s"
          + (" (under cProfile)" if bd["profiled"] else ""))
    print(f"  before it, the process's first decode (loading the compiled record loop): {bd['first_decode_s']:.2f} s")
    print(f"  columnar.to_arrow: {bd['to_batch_s']:.2f} s in {bd['to_batch_calls']} calls "
          f"({100 * bd['to_batch_s'] / bd['wall_s']:.0f} %); fetch (requests, waiting): "
          f"{bd['consumer_s']:.2f} s ({100 * bd['consumer_s'] / bd['wall_s']:.0f} %)")
    if bd.get("profile"):
        print(bd["profile"])


if __name__ == "__main__":
    sys.exit(main())
