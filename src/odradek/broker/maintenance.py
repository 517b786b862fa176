"""The broker's background storage work, each job a small asyncio loop.

Theory of operation: the log layer only records what needs doing (segments rolled but
not yet fsynced, recovery points, renamed directories of deleted topics, partitions
never opened that may hold expired data); these loops do it without holding the event
loop for long:

- `flush_rolled`: fsync every rolled segment soon after its roll, in a worker thread on
  a duplicate of its descriptor (Kafka flushes a rolled segment asynchronously too), then
  advance the partition's recovery point.
- `checkpoint`: write the recovery points every `log.flush.offset.checkpoint.interval.ms`
  (Kafka's default 60 s), in a worker thread.
- `purge_deleted`: remove deleted topics' directories a few at a time.
- `retention_sweep`: partitions nobody opened since the start are visited in slices, so
  their expired segments are deleted too without opening 100,000 partitions at once.
- `compaction`: Kafka's log cleaner. Every `log.cleaner.backoff.ms` (read each round, so
  a dynamic broker config applies without a restart) it offers each open compacted log
  to log/compaction.py, which cleans it only when Kafka's cleaner would pick it
  (min.cleanable.dirty.ratio, max.compaction.lag.ms), yielding to the loop between logs.
- `freeze_long_lived`: CPython's full garbage collections walk every tracked object;
  with 20,000 partitions open each one paused the event loop for up to 90 ms. Opened
  partitions live until their topic is deleted, so after each burst of opens they are
  moved to the collector's permanent generation (gc.freeze) and full passes skip them.

A storage failure is reported to the log directory's health; no loop dies of one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time

from ..dynamic_config import effective_values
from ..log.checkpoint import write_checkpoint
from ..log.errors import StorageError, storage_error

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_MS = 60_000
SWEEP_SLICE = 200  # partitions looked at between yields to the event loop


async def flush_rolled(broker, interval_s: float = 1.0) -> None:
    while True:
        await asyncio.sleep(interval_s)
        await flush_rolled_once(broker)


async def flush_rolled_once(broker) -> int:
    done = 0
    for plog, seg in broker.logs.rolled_unflushed():
        if broker.logs.health.offline:
            return done
        try:
            fd = os.dup(seg._fd())
        except (OSError, StorageError):
            continue  # no descriptor to spare now: the next round tries again
        started = time.perf_counter()
        try:
            await asyncio.to_thread(os.fsync, fd)
            if broker.stats is not None:  # Kafka's LogFlushRateAndTimeMs
                broker.stats.log_flush.observe(time.perf_counter() - started)
        except OSError as exc:
            broker.storage_failed(storage_error(f"fsync of {seg.path} failed", exc))
            continue
        finally:
            os.close(fd)
        plog.mark_flushed(seg)
        done += 1
    return done


async def _keep_written(broker, interval_ms: int, snapshot, write, failure: str) -> None:
    """Every `interval_ms`: take `snapshot()` -> (number, points) on the event loop and,
    when the points changed since the last write, `write(number, points)` in a worker
    thread (False: a newer snapshot was written first). A failed write is logged with
    `failure` and retried at the next round."""
    written = None
    while True:
        await asyncio.sleep(interval_ms / 1000)
        if broker.logs.health.offline:
            continue
        seq, points = snapshot()
        if points == written:
            continue
        try:
            if await asyncio.to_thread(write, seq, points) is not False:
                written = points
        except StorageError as exc:
            log.warning("%s; %s", exc, failure)


async def checkpoint(broker, interval_ms: int = CHECKPOINT_INTERVAL_MS) -> None:
    logs = broker.logs
    await _keep_written(broker, interval_ms, lambda: (0, logs.recovery_snapshot()),
                        lambda _seq, points: write_checkpoint(logs.checkpoint_path, points),
                        "the next start recovers more of the log")


HIGH_WATERMARK_INTERVAL_MS = 5_000  # Kafka's replica.high.watermark.checkpoint.interval.ms


async def checkpoint_high_watermarks(broker, interval_ms: int = HIGH_WATERMARK_INTERVAL_MS) -> None:
    """Kafka's replication-offset-checkpoint, written off the loop when it changed: a
    restarted replica starts from this high watermark rather than its log start."""
    logs = broker.logs
    await _keep_written(broker, interval_ms, logs.high_watermark_snapshot, logs.write_high_watermarks,
                        "a restart starts from an older high watermark")


async def purge_deleted(broker, interval_s: float = 1.0) -> None:
    while True:
        await asyncio.sleep(interval_s)
        if broker.logs.pending_deletes:
            await asyncio.to_thread(broker.logs.purge_deleted, 64)


async def retention_sweep(broker) -> int:
    """Open, in slices, the unopened partitions that may hold expired segments, and apply
    retention to them. Returns segments deleted."""
    deleted = 0
    now = broker.clock()
    for seen, (topic, partition, expired) in enumerate(broker.logs.unopened_partitions(now), 1):
        if seen % SWEEP_SLICE == 0:
            await asyncio.sleep(0)  # listing 100,000 directories must not hold the loop
        if not expired:
            continue
        try:
            plog = broker.logs.get(topic, partition)
            if plog is not None:
                deleted += plog.delete_old_segments(now)
        except StorageError as exc:
            broker.storage_failed(exc)
    return deleted


async def retention(broker, interval_ms: int) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        started = time.monotonic()
        try:
            deleted = broker.retention() + await retention_sweep(broker)
        except Exception:
            log.exception("retention pass failed")
            continue
        if deleted:
            log.info("retention deleted %d segment(s) in %.1f s", deleted, time.monotonic() - started)


def cleaner_backoff_ms(broker) -> int:
    """log.cleaner.backoff.ms as the broker resolves it now: dynamic per-broker, dynamic
    cluster default, then the static configuration."""
    return effective_values(broker.config)["log.cleaner.backoff.ms"]


async def compact_once(broker) -> int:
    """One round of the cleaner over the open compacted logs; returns records removed."""
    removed = 0
    now = broker.clock()
    for key, plog in list(broker.logs.logs.items()):
        if broker.logs.health.offline:
            break
        if "compact" not in plog.config["cleanup.policy"]:
            continue
        removed += broker.compact_log(key, plog, now)
        await asyncio.sleep(0)  # one log at a time: other clients get their turns between
    return removed


async def compaction(broker) -> None:
    while True:
        await asyncio.sleep(cleaner_backoff_ms(broker) / 1000)
        try:
            removed = await compact_once(broker)
        except Exception:
            log.exception("compaction round failed")
            continue
        if removed:
            log.info("compaction removed %d record(s)", removed)


FREEZE_AFTER_OPENS = 500


async def freeze_long_lived(broker, interval_s: float = 1.0) -> None:
    frozen_at = len(broker.logs.logs)
    while True:
        await asyncio.sleep(interval_s)
        opened = len(broker.logs.logs)
        if opened - frozen_at >= FREEZE_AFTER_OPENS:
            gc.freeze()
            frozen_at = opened
        elif opened < frozen_at:
            frozen_at = opened  # topics deleted: count again from here
