"""All partition logs under one data directory.

Theory of operation: partition `p` of topic `t` lives in `<data-dir>/t-p/`, with a
`partition.metadata` file naming the topic id (as Kafka does), so a directory left by
a topic that was deleted, or deleted and recreated under the same name, is recognised
and removed at start-up instead of being served under the wrong id. A marker file
written after a graceful shutdown tells the next start that every index was flushed;
without it the active segment of every partition is recovered (CRC-checked, torn tail
truncated, indexes rebuilt).
"""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

from ..cluster.metadata import Topic
from .partition import PartitionLog

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".odradek_clean_shutdown"
PARTITION_METADATA = "partition.metadata"


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


class LogManager:
    def __init__(self, data_dir: Path, now_ms: int) -> None:
        self.data_dir = data_dir
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        marker.unlink(missing_ok=True)
        self._now_ms = now_ms

    def open_all(self, topics: Iterable[Topic], config_for: Callable[[Topic], dict[str, Any]]) -> None:
        wanted: dict[Path, tuple[Topic, int]] = {}
        for topic in topics:
            for p in range(topic.partitions):
                wanted[partition_dir(self.data_dir, topic.name, p)] = (topic, p)
        for d in self.data_dir.iterdir():
            if d.is_dir() and d not in wanted and (d / PARTITION_METADATA).exists():
                log.info("removing %s: its topic no longer exists", d)
                shutil.rmtree(d, ignore_errors=True)
        for d, (topic, p) in wanted.items():
            if d.exists() and _read_topic_id(d) not in (None, topic.topic_id):
                log.info("removing %s: it belongs to an earlier topic of the same name", d)
                shutil.rmtree(d, ignore_errors=True)
            self._open(topic, p, config_for(topic))
        recovered = [(k, r) for k, plog in self.logs.items() for r in plog.recovery]
        for (t, p), r in recovered:
            if r.truncated_bytes:
                log.warning("recovered %s-%d: truncated %d bytes of torn tail", t, p, r.truncated_bytes)

    def _open(self, topic: Topic, partition: int, config: dict[str, Any]) -> PartitionLog:
        d = partition_dir(self.data_dir, topic.name, partition)
        fresh = not d.exists()
        plog = PartitionLog(d, config, self._now_ms, clean_shutdown=self.clean_shutdown or fresh)
        meta = d / PARTITION_METADATA
        if not meta.exists():
            meta.write_text(f"version: 0\ntopic_id: {topic.topic_id}\n")
        self.logs[(topic.name, partition)] = plog
        return plog

    def create(self, topic: Topic, config: dict[str, Any], first_partition: int = 0) -> list[PartitionLog]:
        return [self._open(topic, p, config) for p in range(first_partition, topic.partitions)]

    def delete(self, topic: Topic) -> None:
        for p in range(topic.partitions):
            plog = self.logs.pop((topic.name, p), None)
            if plog is not None:
                plog.delete()

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def reconfigure(self, topic: Topic, config: dict[str, Any]) -> None:
        for p in range(topic.partitions):
            plog = self.logs.get((topic.name, p))
            if plog is not None:
                plog.reconfigure(config)

    def tick(self, now_ms: int) -> None:
        for plog in self.logs.values():
            plog.tick(now_ms)

    def retention(self, now_ms: int) -> int:
        return sum(plog.delete_old_segments(now_ms) for plog in self.logs.values())

    def close(self) -> None:
        """Flush everything and mark the shutdown clean."""
        for plog in self.logs.values():
            plog.flush_all()
            plog.close()
        (self.data_dir / CLEAN_SHUTDOWN_FILE).write_text("clean\n")
