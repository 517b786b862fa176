"""All partition logs under one data directory, opened on demand.

Theory of operation: partition `p` of topic `t` lives in `<data-dir>/t-p/`, with a
`partition.metadata` file naming the topic id (as Kafka does), so a directory left by
a topic that was deleted, or deleted and recreated under the same name, is recognised
and removed instead of being served under the wrong id.

Nothing is opened at start-up or at topic creation: a partition's directory, files and
descriptors are created the first time it is read or written (`get`). A broker with
100,000 partitions therefore starts in the time it takes to list its data directory,
and creating 10,000 partitions costs no disk I/O beyond the cluster metadata. Open
segments share one `FileCache`, so the number of open descriptors stays within the
process limit however many partitions exist.

Durability: the recovery point of every partition (the offset below which its data
was fsynced) is kept in `recovery-point-offset-checkpoint`, written periodically and at
a clean shutdown (Kafka's layout and name). Opening a partition recovers the segments
at or past its recovery point; a partition missing from the checkpoint is recovered
whole. Log start offsets moved by DeleteRecords are kept in `log-start-offset-checkpoint`
(Kafka's name; only partitions whose start is past their first segment, as Kafka
writes it), written when a DeleteRecords request moves one (`snapshot_log_starts` /
`write_log_starts`, before the client is answered: Kafka writes it every
`log.flush.start.offset.checkpoint.interval.ms` and accepts losing a move with an unclean
stop of every replica; a single-replica broker would lose it with any), when a topic is
deleted (Kafka's asyncDelete checkpoints at once, so a topic recreated under the same
name never inherits the old start) and at a clean shutdown. High watermarks (what a
replicated log has committed) are kept in `replication-offset-checkpoint` (Kafka's
name): every open log's, and the last known of the others; `checkpoint` writes it with
the recovery points, and `high_watermark_snapshot` / `write_high_watermarks` let the
broker write it from a worker thread (Kafka: every
`replica.high.watermark.checkpoint.interval.ms`). Opening a partition hands its entry
to the log, which clamps it to what recovery kept. A marker file written after a
graceful shutdown is kept for the log ("previous shutdown was clean"); correctness no
longer depends on it.

Failures: a partition whose flushed data is damaged goes offline by itself
(`offline`); the rest serve. An I/O error that is not a full disk or a descriptor
shortage takes the whole log directory offline (`health`, Kafka's LogDirFailureChannel):
every partition answers KAFKA_STORAGE_ERROR, the broker keeps running.

Deleted topics: their directories are renamed `<dir>.<id>-delete` and removed a few at
a time by `purge_deleted`, so deleting 10,000 partitions does not stall the broker;
leftovers are removed at the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable

from ..cluster.metadata import Topic
from .checkpoint import (HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, NumberedCheckpoint,
                         read_checkpoint, write_checkpoint)
from .errors import LogDirOffline, PartitionOffline, SegmentDamaged, StorageError, storage_error
from .files import FileCache, sync_filesystem
from .health import LogDirHealth
from .partition import PartitionLog, _segment_offsets

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".odradek_clean_shutdown"
PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"

ConfigFor = Callable[[Topic], dict[str, Any]]


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


def _read_topic_id(directory: Path) -> uuid.UUID | None:
    try:
        for line in (directory / PARTITION_METADATA).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return uuid.UUID(value.strip())
    except (OSError, ValueError):
        return None
    return None


def _write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    # A unique temporary name: a worker thread may be preparing the same directory.
    tmp = directory / f"{PARTITION_METADATA}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
    os.replace(tmp, directory / PARTITION_METADATA)


def _parse_dir(name: str) -> tuple[str, int] | None:
    topic, sep, index = name.rpartition("-")
    if not sep or not topic or not index.isdigit():
        return None
    return topic, int(index)


class LogManager:
    def __init__(self, data_dir: Path, now_ms: int, files: FileCache | None = None) -> None:
        self.data_dir = data_dir
        self.files = files
        self.logs: dict[tuple[str, int], PartitionLog] = {}  # opened partitions
        self.topics: dict[str, Topic] = {}
        self._config_for: ConfigFor = lambda _t: {}
        self.offline: dict[tuple[str, int], str] = {}
        self.health = LogDirHealth()
        self.on_open: list[Callable[[str, int, PartitionLog], None]] = []
        self._pending_delete: deque[Path] = deque()
        self._now_ms = now_ms
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        try:
            marker.unlink(missing_ok=True)
        except OSError:
            pass
        self.checkpoint_path = data_dir / RECOVERY_POINT_FILE
        self.recovery_points = read_checkpoint(self.checkpoint_path)
        self._written_checkpoint = dict(self.recovery_points)
        self.log_start_path = data_dir / LOG_START_OFFSET_FILE
        self.log_starts = read_checkpoint(self.log_start_path, "every log starts at its first segment's base offset")
        # Snapshots are numbered on the event loop and written in worker threads: a write
        # never replaces a newer snapshot's file with an older one.
        self._log_start_file = NumberedCheckpoint(self.log_start_path, self.log_starts)
        self.high_watermark_path = data_dir / HIGH_WATERMARK_FILE
        self.high_watermarks = read_checkpoint(self.high_watermark_path,
                                               "replicated logs start with their high watermark at their log start")
        self._high_watermark_file = NumberedCheckpoint(self.high_watermark_path, self.high_watermarks)

    # --- the set of partitions ------------------------------------------------------------

    def open_all(self, topics: Iterable[Topic], config_for: ConfigFor) -> None:
        """Register every topic (nothing is opened) and clear directories nobody owns."""
        self._config_for = config_for
        for topic in topics:
            self.topics[topic.name] = topic
        try:
            entries = list(os.scandir(self.data_dir))
        except OSError as exc:
            self._fail(storage_error(f"cannot list {self.data_dir}", exc))
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.endswith(DELETE_SUFFIX):
                self._pending_delete.append(Path(entry.path))
                continue
            parsed = _parse_dir(entry.name)
            if parsed is None or self._known(*parsed):
                continue
            if os.path.exists(os.path.join(entry.path, PARTITION_METADATA)):
                log.info("removing %s: its topic no longer exists", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
        if self.clean_shutdown:
            log.info("previous shutdown was clean")
        else:
            log.info("previous shutdown was not clean: unflushed segments are recovered when first opened")

    def _known(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and 0 <= partition < t.partitions

    def create(self, topic: Topic, first_partition: int = 0) -> None:
        """Register a new topic or new partitions; their files appear on first use."""
        self.topics[topic.name] = topic
        for p in range(first_partition, topic.partitions):
            self.recovery_points.pop((topic.name, p), None)
            self.log_starts.pop((topic.name, p), None)
            self.high_watermarks.pop((topic.name, p), None)

    def delete(self, topic: Topic) -> None:
        self.topics.pop(topic.name, None)
        for p in range(topic.partitions):
            key = (topic.name, p)
            self.offline.pop(key, None)
            self.recovery_points.pop(key, None)
            self.log_starts.pop(key, None)
            self.high_watermarks.pop(key, None)
            plog = self.logs.pop(key, None)
            if plog is not None:
                plog.close_files()
            self._schedule_delete(partition_dir(self.data_dir, topic.name, p))
        if any(t == topic.name for t, _ in self._log_start_file.written):
            self.checkpoint_log_starts()  # see the module docstring: never inherited by a new topic

    def _schedule_delete(self, directory: Path) -> None:
        # Kafka renames a deleted log's directory first: the name is free at once, and a
        # topic created under it meanwhile never sees the old files.
        target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            os.rename(directory, target)
        except FileNotFoundError:
            return  # never opened: nothing on disk
        except OSError as exc:
            log.warning("cannot rename %s for deletion (%s): removing it now", directory, exc)
            shutil.rmtree(directory, ignore_errors=True)
            return
        self._pending_delete.append(target)

    def purge_deleted(self, budget: int = 64) -> int:
        """Remove up to `budget` renamed directories of deleted topics; returns how many."""
        done = 0
        while self._pending_delete and done < budget:
            shutil.rmtree(self._pending_delete.popleft(), ignore_errors=True)
            done += 1
        return done

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_delete)

    # --- opening ------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log, opened if need be; None for a partition that does not exist.

        Raises LogDirOffline / PartitionOffline when it cannot be served, StorageError
        when opening it failed for a reason that may pass (a full disk, no descriptors).
        """
        plog = self.logs.get((topic, partition))
        if plog is not None:
            if self.health.offline:
                raise LogDirOffline(f"log directory {self.data_dir} is offline: {self.health.reason}")
            return plog
        if not self._known(topic, partition):
            return None
        return self._open(self.topics[topic], partition)

    def unprepared(self, keys: Iterable[tuple[str, int]]) -> list[tuple[Path, uuid.UUID]]:
        """The directories (and topic ids) of partitions among `keys` never opened here:
        what `prepare_dirs` should create before they are opened."""
        out = []
        for topic, partition in keys:
            if (topic, partition) in self.logs or (topic, partition) in self.offline or not self._known(topic, partition):
                continue
            out.append((partition_dir(self.data_dir, topic, partition), self.topics[topic].topic_id))
        return out

    @staticmethod
    def prepare_dirs(items: list[tuple[Path, uuid.UUID]]) -> None:
        """Create missing partition directories with their metadata and first segment file.

        Only filesystem calls, no shared state: the broker runs it in a worker thread,
        because creating a directory and two files costs about a millisecond on a
        journaling filesystem and a Produce to 2,000 new partitions would otherwise hold
        the event loop for seconds. Errors are left for `get` to meet and report.
        """
        for d, topic_id in items:
            if d.exists():
                continue  # opening checks its topic id
            try:
                d.mkdir(parents=True, exist_ok=True)
                _write_partition_metadata(d, topic_id)
                os.close(os.open(d / f"{0:020d}.log", os.O_WRONLY | os.O_CREAT, 0o644))
            except OSError:
                continue

    def opened(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log if it is open already (never opens it)."""
        return self.logs.get((topic, partition))

    def is_offline(self, topic: str, partition: int) -> str | None:
        if self.health.offline:
            return self.health.reason
        return self.offline.get((topic, partition))

    def _open(self, topic: Topic, partition: int) -> PartitionLog:
        key = (topic.name, partition)
        if self.health.offline:
            raise LogDirOffline(f"log directory {self.data_dir} is offline: {self.health.reason}")
        if key in self.offline:
            raise PartitionOffline(f"partition {topic.name}-{partition} is offline: {self.offline[key]}")
        d = partition_dir(self.data_dir, topic.name, partition)
        try:
            plog = self._load(topic, partition, d)
        except SegmentDamaged as exc:
            reason = (f"stored data cannot be served: {exc}. Repair or remove the partition's directory "
                      f"and restart the broker")
            self.offline[key] = reason
            log.error("partition %s-%d is offline from offset %d: %s", topic.name, partition, exc.offset, reason)
            raise PartitionOffline(f"partition {topic.name}-{partition} is offline: {reason}") from None
        except StorageError as exc:
            self._fail(exc)
            raise
        self.logs[key] = plog
        for callback in self.on_open:
            callback(topic.name, partition, plog)
        return plog

    def _load(self, topic: Topic, partition: int, d: Path) -> PartitionLog:
        key = (topic.name, partition)
        fresh = False
        try:
            if d.exists() and _read_topic_id(d) not in (None, topic.topic_id):
                log.info("removing %s: it belongs to an earlier topic of the same name", d)
                shutil.rmtree(d, ignore_errors=True)
            fresh = not d.exists() or not _segment_offsets(d)
        except OSError as exc:
            raise storage_error(f"cannot open {d}", exc) from exc
        point = None if fresh else self.recovery_points.get(key, 0)
        plog = PartitionLog(d, self._config_for(topic), self._now_ms, recovery_point=point, files=self.files,
                            log_start_offset=self.log_starts.get(key, 0),
                            high_watermark=None if fresh else self.high_watermarks.get(key))
        self._report_recovery(topic.name, partition, plog)
        meta = d / PARTITION_METADATA
        try:
            if not meta.exists():
                _write_partition_metadata(d, topic.topic_id)
        except OSError as exc:
            plog.close_files()
            raise storage_error(f"cannot write {meta}", exc) from exc
        return plog

    def set_time(self, now_ms: int) -> None:
        """The broker's clock, for partitions opened later (segment creation times)."""
        self._now_ms = now_ms

    def _report_recovery(self, topic: str, partition: int, plog: PartitionLog) -> None:
        for r in plog.recovery:
            if not r.truncated_bytes:
                continue
            # Kafka's LogLoader truncates an unflushed tail too; what matters is saying what went.
            level = logging.ERROR if r.whole_batches_dropped else logging.WARNING
            log.log(level, "recovered %s-%d after an unclean shutdown: dropped %d bytes and %d offsets from "
                    "offset %d (%s)", topic, partition, r.truncated_bytes, r.dropped_offsets,
                    r.first_dropped_offset, r.reason)

    # --- failures -------------------------------------------------------------------------

    def report(self, exc: StorageError) -> None:
        """A caller met a StorageError: decide whether the directory is still healthy."""
        self._fail(exc)

    def _fail(self, exc: StorageError) -> None:
        was_offline = self.health.offline
        self.health.record(exc)
        if self.health.offline and not was_offline:
            log.error("log directory %s is offline: %s. Every partition in it answers KAFKA_STORAGE_ERROR until "
                      "the broker is restarted on a working disk", self.data_dir, self.health.reason)
            for plog in self.logs.values():
                plog.close_files()

    # --- configuration and periodic work ---------------------------------------------------------

    def reconfigure(self, topic: Topic, config: dict[str, Any]) -> None:
        for p in range(topic.partitions):
            plog = self.logs.get((topic.name, p))
            if plog is not None:
                plog.reconfigure(config)

    def tick(self, now_ms: int) -> None:
        self._now_ms = now_ms
        if self.health.offline:
            return
        for plog in list(self.logs.values()):
            try:
                plog.tick(now_ms)
            except StorageError as exc:
                self._fail(exc)

    def retention(self, now_ms: int) -> int:
        if self.health.offline:
            return 0
        deleted = 0
        for plog in list(self.logs.values()):
            try:
                deleted += plog.delete_old_segments(now_ms)
            except StorageError as exc:
                self._fail(exc)
        return deleted

    def unopened_partitions(self, now_ms: int) -> Iterable[tuple[str, int, bool]]:
        """(topic, partition, may hold expired data) for every partition not opened yet:
        true when its directory has several segments, or one last written before the
        topic's retention.ms. Lazy: each step lists one directory."""
        for name, topic in list(self.topics.items()):
            config = self._config_for(topic)
            retention_ms = int(config.get("retention.ms", -1))
            for p in range(topic.partitions):
                if (name, p) in self.logs or (name, p) in self.offline:
                    continue
                try:
                    logs = [e for e in os.scandir(partition_dir(self.data_dir, name, p)) if e.name.endswith(".log")]
                    expired = len(logs) > 1 or bool(logs and retention_ms >= 0
                                                    and now_ms - logs[0].stat().st_mtime * 1000 > retention_ms)
                except OSError:
                    expired = False  # never opened, nothing on disk
                yield name, p, expired

    def recovery_snapshot(self) -> dict[tuple[str, int], int]:
        points = dict(self.recovery_points)
        for key, plog in self.logs.items():
            points[key] = plog.recovery_point
        return {k: v for k, v in points.items() if self._known(*k)}

    def checkpoint(self, force: bool = False) -> bool:
        """Write the recovery points, log start offsets and high watermarks if they
        changed; True when the recovery points were written."""
        self.checkpoint_log_starts()  # what was written is known exactly: no need to force it
        self.checkpoint_high_watermarks(force)
        points = self.recovery_snapshot()
        if not force and points == self._written_checkpoint:
            return False
        try:
            write_checkpoint(self.checkpoint_path, points)
        except StorageError as exc:
            log.warning("%s; the next start recovers more of the log", exc)
            return False
        self._written_checkpoint = points
        return True

    # --- log start offsets (DeleteRecords) ------------------------------------------------

    def log_start_points(self) -> dict[tuple[str, int], int]:
        """What `log-start-offset-checkpoint` should say now: Kafka's
        checkpointLogStartOffsetsInDir keeps a partition only while its start is past its
        first segment's base offset (otherwise the segments say it)."""
        starts = {k: v for k, v in self.log_starts.items() if k not in self.logs and self._known(*k)}
        for key, plog in self.logs.items():
            start = plog.log_start_offset
            if start > plog.segments[0].base_offset:
                starts[key] = start
        return starts

    def snapshot_log_starts(self) -> tuple[int, dict[tuple[str, int], int]]:
        """A numbered snapshot for `write_log_starts` (take it on the event loop)."""
        return self._log_start_file.number(self.log_start_points())

    def write_log_starts(self, seq: int, points: dict[tuple[str, int], int]) -> bool:
        """Write a snapshot unless a newer one was written already; safe in a worker
        thread. True when written; raises StorageError (the old file stays)."""
        return self._log_start_file.write(seq, points)

    def checkpoint_log_starts(self, force: bool = False) -> bool:
        """Write the log start offsets now if they changed (the calling thread)."""
        if self.health.offline:
            return False
        seq, points = self.snapshot_log_starts()
        if not force and points == self._log_start_file.written:
            return False
        try:
            return self.write_log_starts(seq, points)
        except StorageError as exc:
            log.warning("%s; records deleted by DeleteRecords since the last write may be served again after a "
                        "restart", exc)
            return False

    # --- high watermarks (replication) ---------------------------------------------------

    def high_watermark_points(self) -> dict[tuple[str, int], int]:
        """What `replication-offset-checkpoint` should say now: every open log's high
        watermark (a single replica's is its log end) and the last known of the others."""
        points = {k: v for k, v in self.high_watermarks.items() if k not in self.logs and self._known(*k)}
        for key, plog in self.logs.items():
            points[key] = plog.high_watermark
        return points

    def high_watermark_snapshot(self) -> tuple[int, dict[tuple[str, int], int]]:
        """A numbered snapshot for `write_high_watermarks` (take it on the event loop)."""
        return self._high_watermark_file.number(self.high_watermark_points())

    def write_high_watermarks(self, seq: int, points: dict[tuple[str, int], int]) -> bool:
        """Write a snapshot unless a newer one was written already; safe in a worker
        thread. True when written; raises StorageError (the old file stays)."""
        return self._high_watermark_file.write(seq, points)

    def checkpoint_high_watermarks(self, force: bool = False) -> bool:
        """Write the high watermarks now if they changed (the calling thread). A failure is
        logged: the next start may show replicated logs' consumers less until the ISR
        moves the high watermark again, never more."""
        if self.health.offline:
            return False
        seq, points = self.high_watermark_snapshot()
        if not force and points == self._high_watermark_file.written:
            return False
        try:
            return self.write_high_watermarks(seq, points)
        except StorageError as exc:
            log.warning("%s; replicated logs may restart with an older high watermark", exc)
            return False

    def rolled_unflushed(self) -> list[tuple[PartitionLog, Any]]:
        return [(plog, seg) for plog in self.logs.values() for seg in list(plog.rolled_unflushed)]

    def close(self) -> None:
        """Flush everything, checkpoint the recovery points, and mark the shutdown clean."""
        clean = not self.health.offline
        synced = clean and bool(self.logs) and sync_filesystem(self.data_dir)
        for key, plog in list(self.logs.items()):
            if clean:
                try:
                    if synced:
                        plog.mark_flushed_all()
                    else:
                        plog.flush_all()
                except StorageError as exc:
                    clean = False
                    log.error("cannot flush %s-%d at shutdown: %s", key[0], key[1], exc)
            plog.close()
        if self.health.offline:
            return
        self.checkpoint(force=True)
        self.purge_deleted(budget=1 << 30)
        if clean:
            try:
                (self.data_dir / CLEAN_SHUTDOWN_FILE).write_text("clean\n")
            except OSError as exc:
                log.warning("cannot write the clean-shutdown marker: %s", exc)
