"""`odradek pipeline demo` end to end: a real broker process, the CLI as a user runs it (a
subprocess, so its SparkSession is its own and its exit status is what is checked), then the
Parquet files, the page-counts topic and the group's lag read back independently."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ODRADEK, ROOT

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")
pa_ds = pytest.importorskip("pyarrow.dataset")

needs_java = pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
                                reason="PySpark needs a Java runtime (apt-get install default-jre-headless)")


def run_demo(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("ODRADEK_BOOTSTRAP", None)
    return subprocess.run([*ODRADEK, "pipeline", "demo", *args], check=False, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


def summary(stdout: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines and lines[0].split() == ["METRIC", "VALUE"], stdout
    out = {}
    for line in lines[1:]:
        key, _, value = line.partition("  ")
        out[key.strip()] = value.strip()
    return out


# 28 s (a Spark session and 30 s of clicks squeezed): -m slow, with `make test-all`. The
# connector's source and sink run by default in tests/spark.
@pytest.mark.slow
@needs_java
def test_demo_against_a_broker(broker_factory, tmp_path):
    from odradek.client import Admin, Consumer, TopicPartition

    broker = broker_factory()
    out = tmp_path / "out"
    r = run_demo("--bootstrap-server", broker.bootstrap, "--duration", "8", "--rate", "500", "--partitions", "3",
                 "--output", str(out), "--seed", "7")
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    s = summary(r.stdout)
    assert s["records in"].startswith("4001 "), s  # 8 s x 500/s, and the end-of-stream marker
    assert s["events produced"].startswith("4000 "), s
    written = int(s["records out"].split()[0])
    assert written > 0, s
    assert s["group lag"].startswith("0 "), s

    # Parquet: every window once, counts adding up to the events produced.
    table = pa_ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == written
    assert {"window_start", "window_end", "page", "count"} <= set(table.column_names)
    assert table.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert sum(table.column("count").to_pylist()) == 4000
    keys = list(zip(table.column("window_start").to_pylist(), table.column("page").to_pylist()))
    assert len(keys) == len(set(keys)), "a (window, page) was written twice"

    with Admin(broker.bootstrap) as admin:
        # The topic Spark read has the partitions asked for; the group has caught up.
        assert len(admin.partitions_of(["clicks"])) == 3
        lag = admin.group_lag("odradek-pipeline-demo")
        assert lag and all(committed == end for committed, end in lag.values()), lag

    # page-counts: the same rows as JSON, keyed by page.
    tp = TopicPartition("page-counts", 0)
    c = Consumer(broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        c.assign([tp])
        records = []
        while len(records) < written:
            got = c.poll(2000)
            assert got, f"page-counts has {len(records)} records, expected {written}"
            records.extend(got)
    finally:
        c.close()
    assert len(records) == written
    rows = [json.loads(rec.value) for rec in records]
    assert all(rec.key.decode() == row["page"] for rec, row in zip(records, rows))
    assert sum(row["count"] for row in rows) == 4000


def test_refuses_a_foreign_output_directory(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    r = run_demo("--output", str(out), "--duration", "1", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "odradek: error:" in r.stderr and "not written by the demo" in r.stderr, r.stderr
    assert (out / "precious.txt").read_text() == "keep me"


def test_bad_window_is_a_usage_error():
    r = run_demo("--window", "ten seconds", timeout=60)
    assert r.returncode == 2
    assert "expected a duration" in r.stderr


def test_durations():
    from odradek.spark.pipeline import parse_duration, spark_interval

    assert parse_duration("10 seconds") == 10
    assert parse_duration("1 minute") == 60
    assert parse_duration("500 ms") == 0.5
    assert parse_duration("2m") == 120
    assert spark_interval("2m") == "120 seconds"
    for bad in ("", "10", "ten seconds", "0 seconds", "5 fortnights"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_embedded_broker_starts_and_cleans_up():
    from odradek.client import Admin
    from odradek.spark.pipeline import EmbeddedBroker

    with EmbeddedBroker() as b:
        data_dir = b.data_dir
        with Admin(b.bootstrap) as admin:
            assert admin.list_topics() == []
        assert Path(data_dir).exists()
    assert b.proc is None
    assert not Path(data_dir).exists()
