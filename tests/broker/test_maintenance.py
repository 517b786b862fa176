"""The running broker compacts, applies retention and flushes on its own schedule."""

import asyncio
import os
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker import maintenance
from odradek.cluster.backend import run_now
from odradek.records.batch import read_header
from odradek.records.codec import Record, encode_batch
from tests.broker.conftest import InProcess

pytestmark = pytest.mark.interop


def _read_all(bootstrap, topic, timeout=20):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "m", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    c.close()
                    return out
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
    c.close()
    raise AssertionError("did not reach the end of the partition")


def test_broker_compacts_a_compacted_topic_in_the_background(broker_factory):
    b = broker_factory("compact", ["-o", "log.cleaner.backoff.ms=200"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("kv", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "2048",
                                                      "delete.retention.ms": "3600000"})])["kv"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all"})
    latest = {}
    for i in range(600):
        key = b"key-%d" % (i % 10)
        value = None if i == 595 else b"value-%d" % i  # key-5's last write is a tombstone
        p.produce("kv", key=key, value=value)
        latest[key] = value
        p.flush(10)
    deadline = time.monotonic() + 20
    while True:
        records = _read_all(b.bootstrap, "kv")
        if len(records) < 100 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert len(records) < 100, f"no background compaction: still {len(records)} records"
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == 599  # offsets keep their values, gaps allowed
    last_seen = {}
    for _, k, v in records:
        last_seen[k] = v
    assert last_seen == latest  # the latest value (or tombstone, within delete.retention.ms) per key survives


def test_broker_applies_time_retention_in_the_background(broker_factory):
    b = broker_factory("retention", ["-o", "log.retention.check.interval.ms=200"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("old", 1, 1, config={"retention.ms": "60000", "segment.bytes": "1024"})])["old"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(200):
        p.produce("old", value=b"x" * 50, timestamp=an_hour_ago + i)
        p.flush(10)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "r"})
    deadline = time.monotonic() + 20
    while True:
        low, high = c.get_watermark_offsets(TopicPartition("old", 0), timeout=5)
        if low == high or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    c.close()
    assert (low, high) == (200, 200), "expired segments were not deleted (log start offset did not advance)"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signals_stop_the_broker_cleanly(broker_factory, sig):
    b = broker_factory(f"sig-{sig.name}")
    b.proc.send_signal(sig)
    assert b.proc.wait(20) == 0
    b.proc.stdout.close()
    assert (b.data_dir / ".odradek_clean_shutdown").exists()


# --- the storage jobs of broker/maintenance.py, in process ------------------------------------


def _inproc(tmp_path, **config):
    return InProcess(tmp_path / "d", **config)


def _append(plog, n=1, ts=None):
    t = 1_700_000_000_000 if ts is None else ts
    buf = bytearray(encode_batch([Record(i, t, b"k", b"v" * 100) for i in range(n)]))
    plog.append(buf, [read_header(buf)], t)


def test_rolled_segments_are_fsynced_off_the_loop_and_the_recovery_point_follows(tmp_path, monkeypatch):
    b = _inproc(tmp_path)
    b.broker.create_topic("t", 1, {"segment.bytes": "1000"})
    plog = b.broker.logs.get("t", 0)
    for _ in range(5):
        _append(plog, 3)
    assert len(plog.rolled_unflushed) >= 2 and plog.recovery_point == 0
    threads = []
    real = os.fsync
    monkeypatch.setattr(maintenance.os, "fsync", lambda fd: threads.append(threading.get_ident()) or real(fd))
    done = b.loop.run_until_complete(maintenance.flush_rolled_once(b.broker))
    assert done >= 2 and plog.rolled_unflushed == []
    assert plog.recovery_point == plog.active.base_offset
    assert threads and all(t != threading.get_ident() for t in threads)  # a worker thread
    b.close()


def test_retention_reaches_partitions_nobody_opened(tmp_path):
    b = _inproc(tmp_path)
    b.broker.create_topic("old", 3, {"segment.bytes": "500", "retention.ms": "1000"})
    for p in range(3):
        plog = b.broker.logs.get("old", p)
        for _ in range(4):
            _append(plog, 2, ts=1_000)  # long expired
    b.close()
    again = _inproc(tmp_path)
    assert not again.broker.logs.logs.get(("old", 0))  # not opened by the restart
    deleted = again.loop.run_until_complete(maintenance.retention_sweep(again.broker))
    assert deleted >= 3
    assert all(again.broker.logs.get("old", p).log_start_offset > 0 for p in range(3))
    again.close()


def test_long_lived_partitions_are_frozen_out_of_full_collections(tmp_path, monkeypatch):
    b = _inproc(tmp_path)
    freezes = []
    monkeypatch.setattr(maintenance.gc, "freeze", lambda: freezes.append(len(b.broker.logs.logs)))
    monkeypatch.setattr(maintenance, "FREEZE_AFTER_OPENS", 20)
    b.broker.create_topic("many", 50, {})

    async def run():
        task = asyncio.create_task(maintenance.freeze_long_lived(b.broker, interval_s=0.01))
        await asyncio.sleep(0.05)
        for p in range(30):
            b.broker.logs.get("many", p)
        await asyncio.sleep(0.05)
        task.cancel()

    b.loop.run_until_complete(run())
    assert freezes and freezes[-1] >= 30
    b.close()


def _append_kv(plog, key: bytes, ts: int):
    buf = bytearray(encode_batch([Record(0, ts, key, b"v" * 100)]))
    plog.append(buf, [read_header(buf)], ts)


def test_the_cleaner_round_compacts_due_logs_only(tmp_path):
    """maintenance.compact_once offers every open compacted log to the cleaner, which
    cleans it when max.compaction.lag.ms (or the dirty ratio) says so."""
    b = _inproc(tmp_path)
    t0 = 1_700_000_000_000
    b.broker.create_topic("kv", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000",
                                    "min.cleanable.dirty.ratio": "1.0"})
    b.broker.create_topic("plain", 1, {})
    plog = b.broker.logs.get("kv", 0)
    for i in range(3):
        _append_kv(plog, b"k", t0 + i)
        plog.roll(t0 + i)
    _append_kv(b.broker.logs.get("plain", 0), b"k", t0)
    b.broker.clock = lambda: t0 + 500  # the first dirty batch is 500 ms old: not yet due
    assert b.loop.run_until_complete(maintenance.compact_once(b.broker)) == 0
    b.broker.clock = lambda: t0 + 1001
    assert b.loop.run_until_complete(maintenance.compact_once(b.broker)) == 2  # offsets 0 and 1
    b.close()


def test_cleaner_backoff_follows_dynamic_broker_configs(tmp_path):
    b = _inproc(tmp_path, cleaner_backoff_ms=200)
    assert maintenance.cleaner_backoff_ms(b.broker) == 200
    run_now(b.broker.metadata.set_configs(brokers={"": {"log.cleaner.backoff.ms": "100"}}))
    b.broker.config.attach_dynamic(b.broker.metadata.broker_configs)
    assert maintenance.cleaner_backoff_ms(b.broker) == 100
    run_now(b.broker.metadata.set_configs(brokers={"1": {"log.cleaner.backoff.ms": "50"}}))
    assert maintenance.cleaner_backoff_ms(b.broker) == 50
    b.close()


def test_the_checkpoint_tasks_write_recovery_points_and_high_watermarks_when_they_change(tmp_path):
    from odradek.log.checkpoint import read_checkpoint

    b = _inproc(tmp_path)
    b.broker.create_topic("cp", 1, {})
    plog = b.broker.logs.get("cp", 0)
    _append(plog, 3)
    plog.flush(0)  # the recovery point follows the flushed data
    logs = b.broker.logs

    async def run(seconds):
        tasks = [asyncio.ensure_future(maintenance.checkpoint(b.broker, 10)),
                 asyncio.ensure_future(maintenance.checkpoint_high_watermarks(b.broker, 10))]
        await asyncio.sleep(seconds)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    b.loop.run_until_complete(run(0.2))
    assert read_checkpoint(logs.checkpoint_path)[("cp", 0)] == 3
    assert read_checkpoint(logs.high_watermark_path)[("cp", 0)] == 3
    _append(plog, 2)
    plog.flush(0)
    b.loop.run_until_complete(run(0.2))
    assert read_checkpoint(logs.checkpoint_path)[("cp", 0)] == 5
    assert read_checkpoint(logs.high_watermark_path)[("cp", 0)] == 5
    b.close()
