"""The `odradek` PySpark source and sink against a real broker process on loopback.

One SparkSession (`local[2]`) serves the whole test session (fixture `spark`). Streaming
queries use Trigger.AvailableNow, or a short processingTime trigger with bounded waits,
and small data. Sinks of streaming queries are `foreachBatch` functions (they run in this
process) that write one JSON file per batch id, atomically: a replayed batch overwrites
its own file, so the union of the files is what was committed, and exactly-once shows as
every (partition, offset) appearing once in that union.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from pathlib import Path

import pytest

from odradek.client import Admin, NewTopic, Producer, TopicPartition
from tests.polling import wait_until

pyspark = pytest.importorskip("pyspark")

from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

QUERY_TIMEOUT = 90  # seconds for any one streaming query run
HOUR_MS = 3_600_000


# --------------------------------------------------------------------------- helpers


def create_topic(admin: Admin, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
    admin.create_topics([NewTopic(name, partitions, configs=configs or {})])
    return name


def produce(bootstrap: str, topic: str, records: list[dict], *, compression: str = "none",
            one_batch_each: bool = False) -> list[dict]:
    """Send `records` (dicts of value/key/partition/headers/timestamp_ms) and return them with
    the partition, offset and timestamp the broker gave each."""
    out = []
    with Producer(bootstrap, compression_type=compression, linger_ms=0 if one_batch_each else 20) as p:
        futures = []
        for r in records:
            futures.append(p.send(topic, r.get("value"), r.get("key"), partition=r.get("partition"),
                                  timestamp_ms=r.get("timestamp_ms"), headers=r.get("headers")))
            if one_batch_each:
                p.flush()
        p.flush()
        for r, f in zip(records, futures, strict=True):
            md = f.result(30)
            out.append({**r, "topic": md.topic, "partition": md.partition, "offset": md.offset,
                        "timestamp": md.timestamp})
    return out


def reader(spark, bootstrap: str, **options):
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def stream(spark, bootstrap: str, **options):
    r = spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df, include_headers: bool = False) -> list[tuple]:
    """Collected rows as comparable tuples; timestamps as epoch milliseconds."""
    cols = ["key", "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"),
            "timestampType"]
    if include_headers:
        cols.append("headers")
    out = []
    for r in df.select(*cols).collect():
        t = (None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value), r.topic,
             r.partition, r.offset, r.ts, r.timestampType)
        if include_headers:
            t += (tuple((h.key, None if h.value is None else bytes(h.value)) for h in (r.headers or [])),)
        out.append(t)
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


def expected_rows(produced: list[dict], include_headers: bool = False, timestamp_type: int = 0) -> list[tuple]:
    out = []
    for r in produced:
        t = (r.get("key"), r.get("value"), r["topic"], r["partition"], r["offset"], r["timestamp"], timestamp_type)
        if include_headers:
            t += (tuple(r.get("headers") or ()),)
        out.append(t)
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


class BatchFiles:
    """A foreachBatch function: each batch's rows (given columns) go to `batch-<id>.json`
    through a temporary file and a rename, so the union of the files is the committed output
    and a replayed batch id replaces its file. A replay that writes different rows than the
    first attempt is recorded in `mismatched`. Optional hooks: `on_batch(batch_id, rows)`
    runs after the write, and `fail_after` = (batch_id, marker) raises once after writing that
    batch (the marker file makes it once), as a crash between the sink's write and Spark's
    commit would."""

    def __init__(self, directory: Path, columns=("topic", "partition", "offset"), on_batch=None,
                 fail_after: tuple[int, Path] | None = None) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.columns = list(columns)
        self.on_batch = on_batch
        self.fail_after = fail_after
        self.mismatched: list[int] = []
        self.replayed: list[int] = []
        self.calls: list[int] = []

    def __call__(self, df, batch_id: int) -> None:
        self.calls.append(batch_id)
        rows = sorted([list(r) for r in df.select(*self.columns).collect()], key=repr)
        path = self.dir / f"batch-{batch_id:05d}.json"
        if path.exists():
            self.replayed.append(batch_id)
            if json.loads(path.read_text()) != rows:
                self.mismatched.append(batch_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, path)
        if self.on_batch is not None:
            self.on_batch(batch_id, rows)
        if self.fail_after is not None:
            fail_id, marker = self.fail_after
            if batch_id == fail_id and not marker.exists():
                marker.touch()
                raise RuntimeError(f"injected failure after writing batch {batch_id}")

    def rows(self) -> list[tuple]:
        out = []
        for f in sorted(self.dir.glob("batch-*.json")):
            out.extend(tuple(r) for r in json.loads(f.read_text()))
        return out

    def count(self) -> int:
        return len(self.rows())


def run_available_now(df, sink: BatchFiles, checkpoint: Path):
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(QUERY_TIMEOUT), "the AvailableNow query did not finish"
    finally:
        q.stop()
    return q


def consume_librdkafka(bootstrap: str, topic: str, partitions: int, n: int, timeout: float = 30.0) -> list[tuple]:
    """(partition, offset, key, value, headers) of every record of `topic`, read with
    librdkafka from the beginning by manual assignment; exactly `n` are expected."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-spark-tests-unused",
                  "enable.auto.commit": False, "enable.auto.offset.store": False, "fetch.wait.max.ms": 100,
                  "check.crcs": True})
    out: list[tuple] = []
    try:
        c.assign([CTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert not m.error(), m.error()
            out.append((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
        quiet_until = time.monotonic() + 0.5  # nothing beyond the n expected
        while time.monotonic() < quiet_until:
            m = c.poll(0.1)
            if m is not None and not m.error():
                out.append((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
    finally:
        c.close()
    assert len(out) == n, f"librdkafka read {len(out)} records of {topic}, expected {n}"
    return sorted(out)


# --------------------------------------------------------------------------- 1. batch reads


def test_batch_read_equals_what_was_produced(spark, broker, admin, topic_name):
    """Every key/value/offset/header/timestamp, across uncompressed, zstd and lz4 batches."""
    t = create_topic(admin, topic_name, 3)
    now = int(time.time() * 1000)
    records = []
    for i in range(30):
        records.append({
            "value": None if i == 7 else f"value-{i}".encode() * (1 + i % 3),
            "key": None if i % 5 == 0 else f"key-{i}".encode(),
            "partition": i % 3,
            "timestamp_ms": now - 10_000 + i,
            "headers": [] if i % 4 == 0 else [("h", f"{i}".encode()), ("dup", b"a"), ("dup", None), ("é", b"\x00")],
        })
    produced = (produce(broker.bootstrap, t, records[:10])
                + produce(broker.bootstrap, t, records[10:20], compression="zstd")
                + produce(broker.bootstrap, t, records[20:], compression="lz4"))
    assert {r["offset"] for r in produced} == set(range(10))

    df = reader(spark, broker.bootstrap, subscribe=t, includeHeaders="true").load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert rows_of(df, include_headers=True) == expected_rows(produced, include_headers=True)

    plain = reader(spark, broker.bootstrap, subscribe=t).load()
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert dict(plain.dtypes) == {"key": "binary", "value": "binary", "topic": "string", "partition": "int",
                                  "offset": "bigint", "timestamp": "timestamp", "timestampType": "int"}
    assert rows_of(plain) == expected_rows(produced)


def test_batch_read_offset_ranges_inside_compressed_batches(spark, broker, admin, topic_name):
    """startingOffsets/endingOffsets cutting into one compressed batch; minPartitions splits
    the ranges without changing the result; assign and subscribePattern read the same."""
    t = create_topic(admin, topic_name, 2)
    produced = produce(broker.bootstrap, t, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(40)],
                       compression="zstd")
    want = [r for r in produced if (r["partition"] == 0 and 3 <= r["offset"] < 17)
            or (r["partition"] == 1 and r["offset"] >= 5)]
    df = reader(spark, broker.bootstrap, subscribe=t, startingOffsets=json.dumps({t: {"0": 3, "1": 5}}),
                endingOffsets=json.dumps({t: {"0": 17, "1": -1}})).load()
    assert rows_of(df) == expected_rows(want)

    split = reader(spark, broker.bootstrap, assign=json.dumps({t: [0, 1]}), minPartitions="6",
                   startingOffsets=json.dumps({t: {"0": 3, "1": 5}}),
                   endingOffsets=json.dumps({t: {"0": 17}})).load()
    assert split.rdd.getNumPartitions() >= 6
    assert rows_of(split) == expected_rows(want)

    pattern = reader(spark, broker.bootstrap, subscribePattern=re.escape(t[:-4]) + ".*").load()
    assert rows_of(pattern) == expected_rows(produced)


def test_batch_read_log_append_time(spark, broker, admin, topic_name):
    """timestampType 1 and the broker's timestamps on a LogAppendTime topic. Produced with
    librdkafka: odradek's own Producer fails on LogAppendTime topics (client bug, see the
    report: producer.py applies int() to the decoded log_append_time datetime)."""
    from confluent_kafka import Producer as CKProducer

    t = create_topic(admin, topic_name, 1, {"message.timestamp.type": "LogAppendTime"})
    reports = []
    p = CKProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i, v in enumerate([b"x", b"y"]):
        p.produce(t, v, timestamp=1000 + i, on_delivery=lambda err, m: reports.append((err, m)))
        p.flush(30)
    assert [err for err, _ in reports] == [None, None]
    produced = [{"value": m.value(), "topic": t, "partition": m.partition(), "offset": m.offset(),
                 "timestamp": m.timestamp()[1]} for _, m in reports]
    assert all(r["timestamp"] > 1001 for r in produced)  # the broker's append time, not ours
    assert rows_of(reader(spark, broker.bootstrap, subscribe=t).load()) == expected_rows(produced, timestamp_type=1)


# --------------------------------------------------------------------------- 2. streaming


def test_streaming_restart_after_failures_is_exactly_once(spark, broker, admin, topic_name, tmp_path):
    """Run 1 fails after its sink wrote batch 1 (before Spark committed it); run 2 replays
    batch 1 and then fails in a task (a UDF raising once); run 3 finishes. Every run uses the
    same checkpoint. The union of committed outputs holds every (partition, offset) once and
    the replayed batch wrote the same rows as the first attempt."""
    t = create_topic(admin, topic_name, 2)
    produced = produce(broker.bootstrap, t, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(40)])
    checkpoint = tmp_path / "checkpoint"
    task_marker = str(tmp_path / "task-failed-once")

    def fail_once(partition, offset):
        if partition == 1 and offset == 12 and not os.path.exists(task_marker):
            open(task_marker, "w").close()
            raise RuntimeError("injected task failure at partition 1 offset 12")
        return True

    fail_udf = F.udf(fail_once, "boolean")
    sink = BatchFiles(tmp_path / "out", fail_after=(1, tmp_path / "driver-failed-once"))

    def query_df():
        df = stream(spark, broker.bootstrap, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger="10")
        return df.where(fail_udf("partition", "offset"))

    with pytest.raises(StreamingQueryException) as first:
        run_available_now(query_df(), sink, checkpoint)
    assert "injected failure after writing batch 1" in str(first.value)
    with pytest.raises(StreamingQueryException) as second:
        run_available_now(query_df(), sink, checkpoint)
    assert "injected task failure at partition 1 offset 12" in str(second.value)
    assert os.path.exists(task_marker)
    run_available_now(query_df(), sink, checkpoint)

    got = sorted(sink.rows())
    assert got == sorted((t, r["partition"], r["offset"]) for r in produced)  # each exactly once
    assert 1 in sink.replayed and not sink.mismatched
    assert sink.calls[:3] == [0, 1, 1]  # run 2 started by replaying the uncommitted batch 1


def test_streaming_picks_up_partition_added_mid_query(spark, broker, admin, topic_name, tmp_path):
    """While the first batch is held inside the sink, the topic grows from 1 to 2 partitions
    and the new one gets records: the running query reads them all, from the new
    partition's earliest offset."""
    t = create_topic(admin, topic_name, 1)
    first = produce(broker.bootstrap, t, [{"value": f"a{i}".encode()} for i in range(5)])
    entered, grown = threading.Event(), threading.Event()

    def hold_first(batch_id, rows):
        if batch_id == 0:
            entered.set()
            assert grown.wait(60), "the test never grew the topic"

    sink = BatchFiles(tmp_path / "out", on_batch=hold_first)
    q = (stream(spark, broker.bootstrap, subscribe=t, startingOffsets="earliest")
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        assert entered.wait(QUERY_TIMEOUT), "the first batch never reached the sink"
        admin.create_partitions({t: 2})
        later = (produce(broker.bootstrap, t, [{"value": f"b{i}".encode(), "partition": 1} for i in range(4)])
                 + produce(broker.bootstrap, t, [{"value": f"c{i}".encode(), "partition": 0} for i in range(2)]))
        grown.set()
        wait_until(lambda: sink.count() >= 11 or q.exception(), QUERY_TIMEOUT, 0.2, "the new records")
        assert q.exception() is None
        time.sleep(0.5)  # a later batch would show duplicates
    finally:
        grown.set()
        q.stop()
    want = sorted((t, r["partition"], r["offset"]) for r in first + later)
    assert sorted(sink.rows()) == want
    assert [(p, o) for (_, p, o) in sorted(sink.rows()) if p == 1] == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_max_offsets_per_trigger_bounds_each_batch(spark, broker, admin, topic_name, tmp_path):
    t = create_topic(admin, topic_name, 3)
    produced = produce(broker.bootstrap, t, [{"value": b"x", "partition": i % 3} for i in range(31)])
    sink = BatchFiles(tmp_path / "out")
    q = run_available_now(stream(spark, broker.bootstrap, subscribe=t, startingOffsets="earliest",
                                 maxOffsetsPerTrigger="7"), sink, tmp_path / "checkpoint")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 7, sizes
    assert sum(sizes) == 31 and len(sizes) >= 5, sizes
    assert sorted(sink.rows()) == sorted((t, r["partition"], r["offset"]) for r in produced)


def test_streaming_starting_latest_reads_only_new_records(spark, broker, admin, topic_name, tmp_path):
    """The default for a stream is startingOffsets=latest: records that exist when the query
    first starts are skipped; those produced after are read."""
    t = create_topic(admin, topic_name, 2)
    produce(broker.bootstrap, t, [{"value": b"old", "partition": i % 2} for i in range(6)])
    sink = BatchFiles(tmp_path / "out", columns=(F.col("value").cast("string"), "partition", "offset"))
    run_available_now(stream(spark, broker.bootstrap, subscribe=t), sink, tmp_path / "checkpoint")
    assert sink.rows() == []
    new = produce(broker.bootstrap, t, [{"value": b"new", "partition": i % 2} for i in range(4)])
    run_available_now(stream(spark, broker.bootstrap, subscribe=t), sink, tmp_path / "checkpoint")
    assert sorted(sink.rows()) == sorted(("new", r["partition"], r["offset"]) for r in new)


# --------------------------------------------------------------------------- 3. data loss


RETENTION_BROKER = ["-o", "log.retention.check.interval.ms=200"]
# Every produce request rolls a segment (segment.bytes is far below one batch) and retention
# keeps the newest segments up to ~retention.bytes: producing more deletes the oldest records.
RETENTION_TOPIC = {"segment.bytes": "100", "retention.bytes": "600", "retention.ms": "-1"}
PAYLOAD = b"p" * 100


def log_start(admin: Admin, t: str) -> int:
    return admin.list_offsets({TopicPartition(t, 0): -2})[TopicPartition(t, 0)].offset


def settled_log_start(admin: Admin, t: str, above: int) -> int:
    """The log start offset once retention moved it above `above` and then stopped moving
    (a retention pass may run while records are still being produced)."""
    wait_until(lambda: log_start(admin, t) > above, 20, what="retention")
    previous = -1
    for _ in range(50):
        current = log_start(admin, t)
        if current == previous:
            return current
        previous = current
        time.sleep(0.5)  # more than the 200 ms between retention passes
    raise AssertionError("the log start offset kept moving")


def test_batch_read_below_log_start(spark, broker_factory, topic_name, caplog):
    """Records below the log start (deleted by retention) asked for explicitly:
    failOnDataLoss=true fails naming the partition; false returns what survives."""
    b = broker_factory("data", extra=RETENTION_BROKER)
    with Admin(b.bootstrap) as adm:
        t = create_topic(adm, topic_name, 1, RETENTION_TOPIC)
        produced = produce(b.bootstrap, t, [{"value": PAYLOAD, "key": b"%d" % i} for i in range(12)],
                           one_batch_each=True)
        start = settled_log_start(adm, t, 4)
    assert start < 12
    survivors = [r for r in produced if r["offset"] >= start]
    starting = json.dumps({t: {"0": 0}})

    with pytest.raises(Exception) as info:
        reader(spark, b.bootstrap, subscribe=t, startingOffsets=starting).load().collect()
    msg = str(info.value)
    assert f"{t}-0" in msg and f"offsets 0..{start - 1}" in msg and "failOnDataLoss" in msg, msg[-2000:]

    df = reader(spark, b.bootstrap, subscribe=t, startingOffsets=starting, failOnDataLoss="false").load()
    assert rows_of(df) == expected_rows(survivors)

    # the warning failOnDataLoss=false logs (executor-side code, run here to see its log)
    from odradek.spark.fetch import read_range

    with caplog.at_level(logging.WARNING, logger="odradek.spark"):
        batches = list(read_range(b.bootstrap, t, 0, 0, 12, fail_on_data_loss=False, include_headers=False))
    assert sum(x.num_rows for x in batches) == len(survivors)
    assert any(f"offsets 0..{start - 1} of {t}-0 were deleted" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_streaming_records_deleted_under_the_query(spark, broker_factory, topic_name, tmp_path, fail_on_data_loss):
    """Batch 0 reads offsets 0..2 and is held in the sink while 12 more records arrive and
    retention deletes everything up to some offset > 3; batch 1 then starts below the log
    start."""
    b = broker_factory("data", extra=RETENTION_BROKER)
    adm = Admin(b.bootstrap)
    t = create_topic(adm, topic_name, 1, RETENTION_TOPIC)
    produced = produce(b.bootstrap, t, [{"value": PAYLOAD} for _ in range(3)], one_batch_each=True)
    assert log_start(adm, t) == 0
    entered, deleted = threading.Event(), threading.Event()

    def hold_first(batch_id, rows):
        if batch_id == 0:
            entered.set()
            assert deleted.wait(60)

    sink = BatchFiles(tmp_path / "out", on_batch=hold_first)
    q = (stream(spark, b.bootstrap, subscribe=t, startingOffsets="earliest",
                failOnDataLoss=str(fail_on_data_loss).lower())
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        assert entered.wait(QUERY_TIMEOUT)
        produced += produce(b.bootstrap, t, [{"value": PAYLOAD} for _ in range(12)], one_batch_each=True)
        start = settled_log_start(adm, t, 3)
        deleted.set()
        if fail_on_data_loss:
            with pytest.raises(StreamingQueryException) as info:
                q.awaitTermination(QUERY_TIMEOUT)
            msg = str(info.value)
            assert f"{t}-0" in msg and f"offsets 3..{start - 1}" in msg and "failOnDataLoss" in msg, msg[-2000:]
            assert sorted(sink.rows()) == [(t, 0, o) for o in range(3)]
        else:
            wait_until(lambda: sink.count() >= 3 + 15 - start or q.exception(), QUERY_TIMEOUT, 0.2, "survivors")
            assert q.exception() is None
            time.sleep(0.5)
            assert sorted(sink.rows()) == [(t, 0, o) for o in [0, 1, 2, *range(start, 15)]]
    finally:
        deleted.set()
        q.stop()
        adm.close()
    assert len(produced) == 15


# --------------------------------------------------------------------------- 4. group commits


def _committed(admin: Admin, group: str) -> dict[int, int]:
    return {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()}


def _ends(admin: Admin, t: str, n: int) -> dict[int, int]:
    found = admin.list_offsets({TopicPartition(t, p): -1 for p in range(n)})
    return {tp.partition: ot.offset for tp, ot in found.items()}


def test_group_commit_shows_the_right_lag(spark, broker, admin, topic_name, tmp_path):
    """After a query with kafka.group.id processed everything, the group's committed offsets
    are the end offsets (lag 0); records produced later show as exactly that lag. Spark
    calls commit() for batch N only when it plans batch N+1, so the last batch's end must
    reach the group some other way (regression: it once trailed by one batch)."""
    t = create_topic(admin, topic_name, 2)
    group = f"g-{t}"
    produce(broker.bootstrap, t, [{"value": b"x", "partition": i % 2} for i in range(20)])
    sink = BatchFiles(tmp_path / "out")
    checkpoint = tmp_path / "checkpoint"

    def query():
        return stream(spark, broker.bootstrap, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger="8",
                      **{"kafka.group.id": group})

    run_available_now(query(), sink, checkpoint)
    assert sink.count() == 20
    assert _committed(admin, group) == _ends(admin, t, 2) == {0: 10, 1: 10}
    lag = admin.group_lag(group)
    assert {tp.partition: end - committed for tp, (committed, end) in lag.items()} == {0: 0, 1: 0}

    produce(broker.bootstrap, t, [{"value": b"y", "partition": 0}] * 3 + [{"value": b"y", "partition": 1}])
    lag = admin.group_lag(group)
    assert {tp.partition: end - committed for tp, (committed, end) in lag.items()} == {0: 3, 1: 1}

    run_available_now(query(), sink, checkpoint)
    assert sink.count() == 24
    assert _committed(admin, group) == {0: 13, 1: 11}


def test_group_id_prefix_names_the_group(spark, broker, admin, topic_name, tmp_path):
    """Without kafka.group.id the commits go to groupIdPrefix + a uuid: one such group,
    holding the end of what the query read."""
    t = create_topic(admin, topic_name, 1)
    prefix = f"pfx-{t}"
    produce(broker.bootstrap, t, [{"value": b"x"} for _ in range(12)])
    sink = BatchFiles(tmp_path / "out")
    run_available_now(stream(spark, broker.bootstrap, subscribe=t, startingOffsets="earliest",
                             maxOffsetsPerTrigger="4", groupIdPrefix=prefix), sink, tmp_path / "checkpoint")
    assert sink.count() == 12
    groups = [g.group_id for g in admin.list_groups() if g.group_id.startswith(prefix + "-")]
    assert len(groups) == 1, groups
    committed = _committed(admin, groups[0])
    assert committed == {0: 12}


# --------------------------------------------------------------------------- 5. sink

SINK_SCHEMA = "key string, value binary, partition int, headers array<struct<key: string, value: binary>>"


def test_sink_batch_round_trip_with_topic_option(spark, broker, admin, topic_name):
    t = create_topic(admin, topic_name, 3)
    data = []
    for i in range(24):
        headers = [] if i % 3 == 0 else [("n", b"%d" % i), ("x", None)]
        data.append((None if i % 6 == 0 else f"k{i}", None if i == 5 else b"v%d" % i, i % 3, headers))
    df = spark.createDataFrame(data, SINK_SCHEMA)
    df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", t) \
        .mode("append").save()
    got = consume_librdkafka(broker.bootstrap, t, 3, len(data))
    want = [(p, None if k is None else k.encode(), v, tuple(h)) for k, v, p, h in data]
    assert sorted(((p, k, v, h) for p, _, k, v, h in got), key=repr) == sorted(want, key=repr)
    for p in range(3):  # offsets dense from 0 per partition
        assert sorted(o for q, o, *_ in got if q == p) == list(range(8))


def test_sink_batch_topic_column(spark, broker, admin, topic_name):
    a = create_topic(admin, topic_name + "-a", 2)
    b = create_topic(admin, topic_name + "-b", 1)
    data = [(a if i % 3 else b, f"k{i}", f"v{i}") for i in range(15)]
    df = spark.createDataFrame(data, "topic string, key string, value string")
    df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    got_a = consume_librdkafka(broker.bootstrap, a, 2, 10)
    got_b = consume_librdkafka(broker.bootstrap, b, 1, 5)
    assert sorted((k, v) for _, _, k, v, _ in got_a) == sorted((k.encode(), v.encode()) for x, k, v in data if x == a)
    assert sorted((k, v) for _, _, k, v, _ in got_b) == sorted((k.encode(), v.encode()) for x, k, v in data if x == b)
    # the same key always lands in the same partition
    by_key: dict[bytes, set[int]] = {}
    for p, _, k, _, _ in got_a:
        by_key.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in by_key.values())


def test_sink_topic_option_overrides_topic_column(spark, broker, admin, topic_name):
    """Spark's Kafka sink: the topic option overrides any topic column (regression: the
    column once won)."""
    column_topic = create_topic(admin, topic_name + "-col", 1)
    option_topic = create_topic(admin, topic_name + "-opt", 1)
    df = spark.createDataFrame([(column_topic, f"v{i}") for i in range(4)], "topic string, value string")
    df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", option_topic).mode("append").save()
    got = consume_librdkafka(broker.bootstrap, option_topic, 1, 4, timeout=5)
    assert sorted(v for *_, v, _ in got) == [b"v0", b"v1", b"v2", b"v3"]


def test_sink_streaming_copy_between_topics(spark, broker, admin, topic_name, tmp_path):
    """readStream from one topic, writeStream to another with the sink: per partition, the
    same keys, values and headers in the same order."""
    src = create_topic(admin, topic_name + "-src", 2)
    dst = create_topic(admin, topic_name + "-dst", 2)
    produced = produce(broker.bootstrap, src, [
        {"value": f"v{i}".encode(), "key": f"k{i}".encode(), "partition": i % 2,
         "headers": [("i", b"%d" % i)] if i % 2 else None} for i in range(20)], compression="lz4")
    df = stream(spark, broker.bootstrap, subscribe=src, startingOffsets="earliest", includeHeaders="true",
                maxOffsetsPerTrigger="8")
    q = (df.select("key", "value", "headers", "partition").writeStream.format("odradek")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(QUERY_TIMEOUT)
    finally:
        q.stop()
    got = consume_librdkafka(broker.bootstrap, dst, 2, 20)
    want = sorted((r["partition"], r["offset"], r["key"], r["value"], tuple(r.get("headers") or ()))
                  for r in produced)
    assert got == want


# --------------------------------------------------------------------------- 6. bad options


def batch_error(spark, bootstrap: str, **options) -> str:
    with pytest.raises(Exception) as info:
        reader(spark, bootstrap, **options).load().collect()
    return str(info.value)


def stream_error(spark, bootstrap: str, checkpoint: Path, **options) -> str:
    with pytest.raises(Exception) as info:
        q = (stream(spark, bootstrap, **options).writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            q.awaitTermination(QUERY_TIMEOUT)
        finally:
            q.stop()
    return str(info.value)


@pytest.fixture
def existing_topic(admin, topic_name):
    return create_topic(admin, topic_name, 2)


BAD_BATCH = [
    ({}, "exactly one of the options subscribe, subscribePattern, assign must be given"),
    ({"subscribe": "{t}", "assign": '{{"{t}":[0]}}'}, "exactly one of the options subscribe, subscribePattern"),
    ({"subscribe": "{t}", "startingOffsets": '{{"{t}":{{"0":1}}'}, "option startingOffsets must be earliest"),
    ({"assign": '{{"{t}-nosuch":[0]}}'}, "{t}-nosuch"),
    ({"assign": '{{"{t}":[0,7]}}'}, "option assign names partitions that do not exist: {t}-7"),
    ({"subscribe": "{t}-nosuch"}, "option subscribe: topic '{t}-nosuch' does not exist"),
    ({"subscribe": "{t}", "startingOffsets": '{{"{t}":{{"9":0}}}}'}, "query does not read: {t}-9"),
]


@pytest.mark.parametrize(("options", "text"), BAD_BATCH, ids=["none", "two", "malformed-json", "unknown-topic",
                                                              "unknown-partition", "subscribe-unknown",
                                                              "offsets-for-unread-partition"])
def test_bad_batch_options(spark, broker, existing_topic, options, text):
    t = existing_topic
    msg = batch_error(spark, broker.bootstrap, **{k: v.format(t=t) for k, v in options.items()})
    assert text.format(t=t) in msg, msg[-3000:]


BAD_STREAM = [
    ({"assign": '{{"{t}":[0]}}', "subscribePattern": "{t}"}, "exactly one of the options subscribe"),
    ({"subscribe": "{t}", "endingOffsets": "latest"}, "option endingOffsets is not allowed in a streaming query"),
    ({"subscribe": "{t}", "startingOffsets": "{{{t}:0}}"}, "option startingOffsets must be earliest, latest or JSON"),
    ({"assign": '{{"{t}-nosuch":[0]}}'}, "{t}-nosuch"),
]


@pytest.mark.parametrize(("options", "text"), BAD_STREAM, ids=["two", "ending-offsets", "malformed-json",
                                                               "unknown-topic"])
def test_bad_streaming_options(spark, broker, existing_topic, tmp_path, options, text):
    t = existing_topic
    msg = stream_error(spark, broker.bootstrap, tmp_path / "checkpoint",
                       **{k: v.format(t=t) for k, v in options.items()})
    assert text.format(t=t) in msg, msg[-3000:]


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_unknown_topic_in_assign_names_the_option(spark, broker, topic_name, tmp_path, streaming):
    """A clear error, like subscribe's, not a raw UNKNOWN_TOPIC_OR_PARTITION (regression)."""
    assign = json.dumps({f"{topic_name}-nosuch": [0]})
    msg = (stream_error(spark, broker.bootstrap, tmp_path / "checkpoint", assign=assign) if streaming
           else batch_error(spark, broker.bootstrap, assign=assign))
    assert f"{topic_name}-nosuch" in msg
    assert "option assign" in msg, msg[-3000:]


def test_bad_sink_options(spark, broker, existing_topic):
    t = existing_topic
    writer = spark.createDataFrame([("k",)], "key string").write.format("odradek") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", t).mode("append")
    with pytest.raises(Exception, match="the sink needs a 'value' column"):
        writer.save()
    writer = spark.createDataFrame([("v",)], "value string").write.format("odradek") \
        .option("kafka.bootstrap.servers", broker.bootstrap).mode("append")
    with pytest.raises(Exception, match="the sink needs a 'topic' column or the topic option"):
        writer.save()
