"""The streaming demo behind `odradek pipeline demo`: clicks in, windowed page counts out.

Theory of operation: a producer thread sends synthetic click events (JSON `{"user", "page",
"ts"}`, ts in ms, keyed by user) to topic `clicks` at a fixed rate for a fixed time. One
Spark Structured Streaming query reads them with the odradek source (format "odradek",
starting at the offsets `clicks` had before the first event, committing to group
`odradek-pipeline-demo`), parses the JSON, and counts events per page per event-time
window with a watermark, in append output mode: a window is written once, when the
watermark passes its end. Each micro-batch's finished windows go through `foreachBatch`
to two places: Parquet under the output directory (one `batch=N` directory per
micro-batch, overwritten if Spark retries the batch, so the files hold each window once)
and topic `page-counts` through the odradek sink (JSON values keyed by page;
at-least-once, like Spark's Kafka sink).

Ending a bounded demo: the watermark only moves when data arrives, so the last windows
would stay open forever once the producer stops. After the last event the producer sends
one end-of-stream marker whose event time is past the last event by window + watermark
delay (+1 s). It moves the watermark beyond the end of every real window, so Spark's
next (no-data) micro-batch writes them out; the marker's own window is still open and
never written. The run is complete when a micro-batch reports that watermark.

Everything here is callable without the CLI: `run_pipeline(PipelineConfig(...))` returns
a `PipelineResult`; `on_status` gets a `Status` snapshot about twice a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Self

from odradek.broker.spawn import terminate, wait_for_port

log = logging.getLogger("odradek.pipeline")
GROUP_ID = "odradek-pipeline-demo"
SOURCE_TOPIC = "clicks"
SINK_TOPIC = "page-counts"
EVENT_SCHEMA = "user string, page string, ts long"
END_PAGE = "/_end-of-stream"  # the end-of-stream marker's page (its window is never written)
PAGES = ["/", "/search", "/cart", "/checkout", "/account", "/help", "/blog", "/pricing",
         *(f"/product/{i}" for i in range(1, 13))]

_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
          "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
          "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600}


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


class PipelineError(RuntimeError):
    """The demo could not complete (broker, Spark or a timeout); the message says why."""


def parse_duration(text: str) -> float:
    """Seconds in a Spark interval string as the demo takes it: `10 seconds`, `1 minute`,
    `500 ms`, `2m`."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a duration like '10 seconds', '1 minute' or '500 ms', not {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be > 0")
    return seconds


def spark_interval(text: str) -> str:
    """The same duration in a form Spark parses (`2m` -> `120.0 seconds`)."""
    return f"{parse_duration(text):g} seconds"


@dataclass
class PipelineConfig:
    bootstrap: str | None = None  # None: start an embedded broker for the run
    master: str = "local[2]"
    partitions: int = 4
    rate: float = 2000.0  # events per second
    duration: float = 30.0  # seconds of production
    window: str = "10 seconds"  # "1 minute" for per-minute counts (then run for well over a minute)
    watermark: str = "10 seconds"
    output: Path = Path("pipeline-output")
    trigger: str = "1 second"  # micro-batch interval
    source_topic: str = SOURCE_TOPIC
    sink_topic: str = SINK_TOPIC
    group_id: str = GROUP_ID
    users: int = 200
    seed: int | None = None
    finish_timeout: float = 180.0  # seconds allowed after the last event for the last windows
    spark_conf: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if self.rate <= 0 or self.duration <= 0:
            raise ValueError("rate and duration must be > 0")
        for name in ("window", "watermark", "trigger"):
            parse_duration(getattr(self, name))


@dataclass
class Status:
    """What the run looks like now (handed to `on_status`)."""

    phase: str = "starting"
    elapsed: float = 0.0  # since production started
    produced: int = 0
    batches: int = 0  # micro-batches completed
    input_rows: int = 0  # rows the source read, over all batches
    input_rate: float = 0.0  # last batch: rows/s arriving
    processed_rate: float = 0.0  # last batch: rows/s processed
    rows_out: int = 0  # window rows written (Parquet and page-counts)
    lag: int | None = None  # log end minus the group's committed offsets on `clicks`
    watermark: str | None = None


@dataclass
class PipelineResult:
    bootstrap: str
    embedded_broker: bool
    output: Path
    produced: int  # click events, the end-of-stream marker not counted
    records_in: int  # rows the Spark source read (marker included)
    batches: int
    rows_out: int  # window rows written to Parquet (and to page-counts)
    parquet_rows: int  # rows found in the Parquet files at the end
    sink_records: int  # records appended to page-counts during the run
    lag: int  # group lag on clicks at the end
    lag_by_partition: dict[int, int]
    produce_seconds: float
    stream_seconds: float  # query start to the last window written
    peak_processed_rate: float

    @property
    def throughput(self) -> float:
        return self.records_in / self.stream_seconds if self.stream_seconds else 0.0


# ------------------------------------------------------------------ embedded broker


class EmbeddedBroker:
    """`odradek broker` as a subprocess on a free loopback port with a temporary data
    directory; `stop()` ends it (SIGTERM, then SIGKILL) and removes the directory."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.data_dir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EmbeddedBroker:
        self.data_dir = Path(tempfile.mkdtemp(prefix="odradek-pipeline-"))
        self._log = open(self.data_dir / "broker.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "odradek", "--log-level", "WARNING", "broker",
             "--data-dir", str(self.data_dir / "data"), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL)
        self.port = wait_for_port(self.proc, self.timeout)
        if self.port is not None:
            return self
        tail = self.log_tail()
        self.stop()
        raise PipelineError(f"the embedded broker did not start; its log ends with:\n{tail}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.data_dir / "broker.log").read_text(errors="replace")[-n:]
        except (OSError, TypeError):
            return "<no log>"

    def stop(self) -> int | None:
        rc = None
        if self.proc is not None:
            rc = terminate(self.proc)
            self.proc.stdout.close()
            self._log.close()
            self.proc = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
        return rc

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ------------------------------------------------------------------ events


def click_events(rng: random.Random, users: int):
    """An endless stream of (key, event) for "now": users and pages skewed (a few are hot)."""
    pages = PAGES
    weights = [1 / (i + 1) for i in range(len(pages))]
    while True:
        user = f"user-{int(users * rng.random() ** 2):04d}"
        page = rng.choices(pages, weights)[0]
        yield user, {"user": user, "page": page, "ts": int(time.time() * 1000)}


class ClickProducer(threading.Thread):
    """Sends `rate` events/s for `duration` s, then (unless stopped early) the end-of-stream
    marker. Pacing is by elapsed time, so a slow moment is caught up, not lost."""

    def __init__(self, bootstrap: str, topic: str, rate: float, duration: float, marker_delay_ms: int,
                 users: int = 200, seed: int | None = None) -> None:
        super().__init__(name="odradek-pipeline-producer", daemon=True)
        self.bootstrap, self.topic, self.rate, self.duration = bootstrap, topic, rate, duration
        self.marker_delay_ms = marker_delay_ms
        self.users, self.rng = users, random.Random(seed)
        self.sent = 0
        self.last_ts = 0
        self.marker_ts: int | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from odradek.client import Producer

        try:
            with Producer(self.bootstrap, acks="all", linger_ms=5, client_id="odradek-pipeline") as producer:
                events = click_events(self.rng, self.users)
                futures = []
                self.started_at = time.monotonic()
                while not self._halt.is_set():
                    elapsed = time.monotonic() - self.started_at
                    due = int(min(elapsed, self.duration) * self.rate)
                    for _ in range(due - self.sent):
                        key, event = next(events)
                        futures.append(producer.send(self.topic, json.dumps(event, separators=(",", ":")).encode(),
                                                     key.encode(), timestamp_ms=event["ts"]))
                        self.last_ts = event["ts"]
                        self.sent += 1
                    if len(futures) > 20_000:
                        for f in futures:
                            f.result()
                        futures.clear()
                    if elapsed >= self.duration:
                        break
                    self._halt.wait(0.01)
                producer.flush()
                for f in futures:
                    f.result()  # every event acknowledged before the marker goes out
                if not self._halt.is_set():
                    ts = max(self.last_ts, int(time.time() * 1000)) + self.marker_delay_ms
                    marker = {"user": "pipeline", "page": END_PAGE, "ts": ts}
                    producer.send(self.topic, json.dumps(marker).encode(), b"pipeline", timestamp_ms=ts).result()
                    self.marker_ts = ts
                self.finished_at = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the pipeline
            self.error = exc


# ------------------------------------------------------------------ the Spark query


def build_query(spark, cfg: PipelineConfig, bootstrap: str, starting: dict, checkpoint: Path, on_batch):
    """Start the streaming query: odradek source -> JSON -> windowed counts with a watermark ->
    foreachBatch to Parquet and the page-counts topic. `on_batch(batch_id, rows)` is called on
    the driver after both writes of a micro-batch."""
    from pyspark.sql import functions as F

    output = str(cfg.output.resolve())
    counts = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", cfg.source_topic)
        .option("startingOffsets", json.dumps(starting))
        .option("kafka.group.id", cfg.group_id)
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .where(F.col("ts").isNotNull() & F.col("page").isNotNull())  # malformed JSON is dropped
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", spark_interval(cfg.watermark))
        .groupBy(F.window("event_time", spark_interval(cfg.window)), "page")
        .count()
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "page",
                "count")
    )

    def write(batch, batch_id: int) -> None:
        batch = batch.persist()
        try:
            rows = batch.count()
            if rows:
                # One directory per micro-batch, overwritten when Spark retries the batch.
                batch.write.mode("overwrite").parquet(f"{output}/batch={batch_id}")
                (batch.select(F.col("page").alias("key"),
                              F.to_json(F.struct(F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX")
                                                 .alias("window_start"),
                                                 F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ssXXX")
                                                 .alias("window_end"),
                                                 "page", "count")).alias("value"))
                 .write.format("odradek")
                 .option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", cfg.sink_topic)
                 .mode("append")
                 .save())
        finally:
            batch.unpersist()
        on_batch(batch_id, rows)

    return (counts.writeStream.outputMode("append")
            .foreachBatch(write)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=spark_interval(cfg.trigger))
            .queryName("odradek-pipeline-demo")
            .start())


# ------------------------------------------------------------------ helpers


def _end_offsets(admin, topic: str) -> dict[int, int]:
    from odradek.client import offsets as O

    tps = admin.partitions_of([topic])
    found = admin.list_offsets({tp: O.LATEST for tp in tps})
    return {tp.partition: found[tp].offset for tp in tps}


def group_lag(admin, group_id: str, topic: str, starting: dict[int, int]) -> dict[int, int]:
    """Per partition of `topic`: log end offset minus the group's committed offset (the
    starting offset where nothing was committed yet)."""
    lag = {p: 0 for p in starting}
    committed = {tp.partition: (c, end) for tp, (c, end) in admin.group_lag(group_id).items() if tp.topic == topic}
    ends = _end_offsets(admin, topic)
    for p, end in ends.items():
        c = committed.get(p, (None, end))[0]
        lag[p] = max(0, end - (c if c is not None else starting.get(p, 0)))
    return lag


def _create_topics(admin, cfg: PipelineConfig) -> None:
    from odradek.client import KafkaError, NewTopic

    for name, parts in ((cfg.source_topic, cfg.partitions), (cfg.sink_topic, 1)):
        try:
            admin.create_topics([NewTopic(name, parts)])
        except KafkaError as exc:
            if exc.name != "TOPIC_ALREADY_EXISTS":
                raise
            if name == cfg.source_topic:
                have = len(admin.partitions_of([name]))
                if have != parts:
                    log.warning("topic %s exists with %d partitions; using it as it is (asked for %d)",
                                name, have, parts)


def _prepare_output(cfg: PipelineConfig) -> None:
    """An empty or missing directory is used; an earlier demo's output (it has the
    `_pipeline` marker file) is replaced; anything else is refused."""
    out = cfg.output
    if out.exists() and not out.is_dir():
        raise PipelineError(f"output {out} exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not (out / "_pipeline").exists():
            raise PipelineError(f"output directory {out} is not empty and was not written by the demo; "
                                "choose another --output")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "_pipeline").write_text("written by odradek pipeline demo; replaced by the next run\n")


def parquet_rows(output: Path) -> int:
    import pyarrow.dataset as ds

    if not any(output.glob("batch=*/*.parquet")):
        return 0
    return ds.dataset(str(output), format="parquet", partitioning="hive",
                      exclude_invalid_files=True).count_rows()


def _iso_to_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


# ------------------------------------------------------------------ the run


def run_pipeline(cfg: PipelineConfig, on_status: Callable[[Status], None] | None = None,
                 spark_factory=None) -> PipelineResult:
    """Run the demo end to end; raises PipelineError (or the underlying error) on failure.
    Spark: `spark_factory(master)` if given, else the active SparkSession if there is one
    (both left running, their SQL settings put back), else `odradek.spark.session`
    (stopped at the end)."""
    cfg.validate()
    _prepare_output(cfg)
    broker = EmbeddedBroker().start() if cfg.bootstrap is None else None
    try:
        return _run(cfg, broker.bootstrap if broker else cfg.bootstrap, broker is not None, on_status or (lambda s: None),
                    spark_factory)
    finally:
        if broker is not None:
            broker.stop()


def _run(cfg: PipelineConfig, bootstrap: str, embedded: bool, on_status, spark_factory) -> PipelineResult:
    from odradek.client import Admin

    status = Status()
    on_status(status)
    admin = Admin(bootstrap, client_id="odradek-pipeline-admin")
    spark = query = producer = None
    own_spark = spark_factory is None
    restore: dict[str, str | None] = {}  # SQL settings of a session that is not ours, put back at the end
    work = Path(tempfile.mkdtemp(prefix="odradek-pipeline-spark-"))  # checkpoint and log config
    checkpoint = work / "checkpoint"
    try:
        _create_topics(admin, cfg)
        starting = _end_offsets(admin, cfg.source_topic)
        sink_start = sum(_end_offsets(admin, cfg.sink_topic).values())

        status.phase = "starting Spark"
        on_status(status)
        conf = {"spark.sql.shuffle.partitions": str(max(1, cfg.partitions)),
                "spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
                "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS", **cfg.spark_conf}
        active = None
        if own_spark:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()  # e.g. a notebook's: use it and leave it running
            own_spark = active is None
        if own_spark:
            from odradek.spark import session

            if cfg.master.startswith("local"):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
            if "spark.driver.extraJavaOptions" not in conf:  # Spark's INFO/WARN lines would garble the display
                (work / "log4j2.properties").write_text(_LOG4J2)
                conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{work / 'log4j2.properties'}"
            spark = session(cfg.master, app_name="odradek-pipeline",
                            **{k.replace(".", "__"): v for k, v in conf.items()})
        else:
            spark = active if active is not None else spark_factory(cfg.master)
            from odradek.spark import register

            register(spark)
            for k, v in conf.items():
                if k.startswith("spark.sql."):  # the others are fixed once the SparkContext runs
                    restore[k] = spark.conf.get(k, None)
                    spark.conf.set(k, v)
        if own_spark:
            spark.sparkContext.setLogLevel("ERROR")

        out_lock = threading.Lock()
        written = {"rows": 0}

        def on_batch(batch_id: int, rows: int) -> None:
            with out_lock:
                written["rows"] += rows

        query = build_query(spark, cfg, bootstrap, {cfg.source_topic: {str(p): o for p, o in starting.items()}},
                            checkpoint, on_batch)
        stream_started = time.monotonic()

        marker_delay_ms = int((parse_duration(cfg.window) + parse_duration(cfg.watermark) + 1) * 1000)
        producer = ClickProducer(bootstrap, cfg.source_topic, cfg.rate, cfg.duration, marker_delay_ms,
                                 users=cfg.users, seed=cfg.seed)
        producer.start()
        status.phase = "producing"

        seen_batches: set[int] = set()
        peak = 0.0
        finish_deadline: float | None = None
        done = False
        last_lag_at = 0.0
        while not done:
            time.sleep(0.5)
            if query.exception() is not None:
                raise PipelineError(f"the Spark query failed: {query.exception()}")
            if not query.isActive:
                raise PipelineError("the Spark query stopped unexpectedly")
            if producer.error is not None:
                raise PipelineError(f"producing click events failed: {producer.error!r}") from producer.error
            for p in query.recentProgress:
                if p["batchId"] in seen_batches:
                    continue
                seen_batches.add(p["batchId"])
                status.batches += 1
                status.input_rows += int(p.get("numInputRows") or 0)
                if p.get("numInputRows"):
                    status.input_rate = float(p.get("inputRowsPerSecond") or 0.0)
                    status.processed_rate = float(p.get("processedRowsPerSecond") or 0.0)
                    peak = max(peak, status.processed_rate)
                wm = (p.get("eventTime") or {}).get("watermark")
                if wm:
                    status.watermark = wm
                    if producer.marker_ts is not None and _iso_to_ms(wm) >= producer.marker_ts - \
                            int(parse_duration(cfg.watermark) * 1000):
                        done = True
            now = time.monotonic()
            if producer.started_at is not None:
                status.elapsed = (producer.finished_at or now) - producer.started_at
            status.produced = producer.sent
            with out_lock:
                status.rows_out = written["rows"]
            if now - last_lag_at >= 1.0 or done:
                status.lag = sum(group_lag(admin, cfg.group_id, cfg.source_topic, starting).values())
                last_lag_at = now
            if producer.finished_at is not None:
                status.phase = "finishing the last windows"
                if finish_deadline is None:
                    finish_deadline = now + cfg.finish_timeout
                elif now > finish_deadline and not done:
                    raise PipelineError(f"the last windows were not written within {cfg.finish_timeout:.0f}s of "
                                        f"the last event (watermark {status.watermark}, lag {status.lag})")
            on_status(status)
        stream_seconds = time.monotonic() - stream_started
        # The source commits a batch's end offsets when the next batch is planned (Spark's
        # order); give the commit of the marker's batch a moment to land.
        lag_by_partition = group_lag(admin, cfg.group_id, cfg.source_topic, starting)
        deadline = time.monotonic() + 15
        while sum(lag_by_partition.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
            lag_by_partition = group_lag(admin, cfg.group_id, cfg.source_topic, starting)
        status.lag = sum(lag_by_partition.values())
        status.phase = "done"
        on_status(status)
        query.stop()
        return PipelineResult(
            bootstrap=bootstrap, embedded_broker=embedded, output=cfg.output,
            produced=producer.sent, records_in=status.input_rows, batches=status.batches,
            rows_out=written["rows"], parquet_rows=parquet_rows(cfg.output),
            sink_records=sum(_end_offsets(admin, cfg.sink_topic).values()) - sink_start,
            lag=status.lag, lag_by_partition=lag_by_partition,
            produce_seconds=(producer.finished_at or time.monotonic()) - (producer.started_at or 0),
            stream_seconds=stream_seconds, peak_processed_rate=peak)
    finally:
        if producer is not None:
            producer.stop()
            producer.join(30)
        if query is not None:
            with contextlib.suppress(Exception):
                query.stop()
        if spark is not None and own_spark:
            with contextlib.suppress(Exception):
                spark.stop()
        elif spark is not None:
            for k, v in restore.items():
                with contextlib.suppress(Exception):
                    spark.conf.unset(k) if v is None else spark.conf.set(k, v)
        admin.close()
        shutil.rmtree(work, ignore_errors=True)
