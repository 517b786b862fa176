"""Per-partition offsets kept in one file per log directory (Kafka's OffsetCheckpointFile).

Three files, in Kafka's layout and under Kafka's names: a version line (0), a count line,
then `topic partition offset` per line.

- `recovery-point-offset-checkpoint`: the offset below which a partition's data is
  known to be fsynced; after an unclean stop only the segments at or beyond it are
  recovered (Kafka's LogLoader).
- `log-start-offset-checkpoint`: the log start offset of partitions where DeleteRecords
  moved it past the first segment's base offset (Kafka's
  LogManager.checkpointLogStartOffsetsInDir writes only those; the others start at
  their first segment).
- `replication-offset-checkpoint`: every open partition's high watermark (Kafka's
  ReplicaManager.checkpointHighWatermarks), so a replicated log does not restart at
  its log start and hide committed data from consumers until the ISR agrees again.

A file is replaced atomically (temporary file, fsync, rename), so a crash leaves the
old or the new one. A missing or malformed file reads as empty: for recovery points
that means recovering more; for log starts, Kafka's LogManager likewise falls back to
the first segment's base offset; for high watermarks, the log start (Kafka's
Partition.createLog reads a missing entry as 0, clamped to the log start).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from .errors import storage_error
from .files import replace_file

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
VERSION = 0


def read_checkpoint(path: Path, fallback: str = "recovering every partition's unflushed segments from offset 0"
                    ) -> dict[tuple[str, int], int]:
    """The file's entries; {} when it is missing, unreadable or malformed (a malformed
    recovery-point file means recovering more, never less). `fallback` says, in the
    warning, what an empty result means for this file."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s (%s): %s", path, exc, fallback)
        return {}
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1])
        out = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            raise ValueError(f"{len(out)} entries, header says {count}")
        return out
    except (IndexError, ValueError) as exc:
        log.warning("ignoring malformed %s (%s): %s", path, exc, fallback)
        return {}


def write_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    """Replace the file atomically. Raises StorageError (the old file stays)."""
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items()))
    try:
        replace_file(path, f"{VERSION}\n{len(entries)}\n{body}")
    except OSError as exc:
        raise storage_error(f"cannot write {path}", exc) from exc


class NumberedCheckpoint:
    """A checkpoint file whose snapshots are taken on the event loop and written in worker
    threads: snapshots are numbered when taken, and a write of an older snapshot than the
    last one written is dropped, so the file never goes back (two DeleteRecords answered
    out of order, or a periodic write overtaken by a later one)."""

    def __init__(self, path: Path, written: dict[tuple[str, int], int]) -> None:
        self.path = path
        self.written = dict(written)  # what the file says now
        self._seq = 0
        self._written_seq = 0
        self._lock = threading.Lock()

    def number(self, points: dict[tuple[str, int], int]) -> tuple[int, dict[tuple[str, int], int]]:
        self._seq += 1
        return self._seq, points

    def write(self, seq: int, points: dict[tuple[str, int], int]) -> bool:
        """Write a numbered snapshot unless a newer one was written already; safe in a
        worker thread. True when written; raises StorageError (the old file stays)."""
        with self._lock:
            if seq <= self._written_seq:
                return False
            write_checkpoint(self.path, points)
            self._written_seq = seq
            self.written = points
            return True
