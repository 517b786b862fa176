"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

Theory of operation: every `index.interval.bytes` of appended batches the segment adds
one entry to each index (Kafka's LogSegment does the same). Entries are kept in memory
(two parallel int64 arrays, searched with bisect) and written to disk in Kafka's layout when
the segment is flushed, rolled or closed:

    .index      relative offset u32, position u32        (8 bytes per entry)
    .timeindex  timestamp i64, relative offset u32        (12 bytes per entry)

On load an index file is trusted only if it is a whole number of entries, strictly
increasing, and points inside the segment; otherwise the caller rebuilds it by
scanning the segment's batch headers (see Segment.recover).
"""

from __future__ import annotations

import bisect
import logging
import struct
from array import array
from pathlib import Path

log = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class IndexCorrupt(Exception):
    pass


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:  # unreadable index: rebuild it from the segment
        raise IndexCorrupt(f"{path}: {exc}") from exc


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # Typed arrays, not lists: 16 bytes an entry instead of about 70 (two int objects
        # and two list slots); a 1 GiB segment holds 262,144 offset entries.
        self.keys = array("q")
        self.values = array("q")
        self._persisted = 0  # entries already on disk

    def __len__(self) -> int:
        return len(self.keys)

    def clear(self) -> None:
        del self.keys[:]
        del self.values[:]
        self._persisted = 0
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # rewritten (or rebuilt) on the next flush

    def flush(self, create: bool = True) -> None:
        """Write the entries not yet on disk (`create=False`: only into an existing file).
        Never raises: an index that cannot be written is removed instead, and the next
        load rebuilds it from the segment."""
        exists = self.path.exists()
        if (self._persisted == len(self.keys) and exists) or (not exists and not create):
            return
        start = self._persisted if exists else 0
        mode = "ab" if start else "wb"
        pack = self._pack
        try:
            data = b"".join(pack(k, v) for k, v in zip(self.keys[start:], self.values[start:]))
            with open(self.path, mode) as f:
                f.write(data)
        except (OSError, struct.error) as exc:
            log.warning("cannot write %s (%s): it will be rebuilt from its segment", self.path, exc)
            self._persisted = 0
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass
            return
        self._persisted = len(self.keys)

    def truncate_entries(self, keep: int) -> None:
        del self.keys[keep:]
        del self.values[keep:]
        self._persisted = 0  # rewrite the file on next flush
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass


class OffsetIndex(_Index):
    def _pack(self, offset: int, position: int) -> bytes:
        return _OFFSET_ENTRY.pack(offset - self.base_offset, position)

    def append(self, offset: int, position: int) -> None:
        if self.keys and offset <= self.keys[-1]:
            return
        self.keys.append(offset)
        self.values.append(position)

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before `offset` (0 if none)."""
        i = bisect.bisect_right(self.keys, offset) - 1
        return self.values[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        self.truncate_entries(bisect.bisect_left(self.values, position))

    def load(self, segment_size: int) -> None:
        data = _read(self.path)
        if len(data) % _OFFSET_ENTRY.size:
            raise IndexCorrupt(f"{self.path}: size {len(data)} is not a multiple of 8")
        keys, values = [], []
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if (keys and (off <= keys[-1] or pos <= values[-1])) or pos >= max(segment_size, 1):
                raise IndexCorrupt(f"{self.path}: entry ({off}, {pos}) out of order or past the segment")
            keys.append(off)
            values.append(pos)
        self.keys, self.values, self._persisted = array("q", keys), array("q", values), len(keys)


class TimeIndex(_Index):
    def _pack(self, timestamp: int, offset: int) -> bytes:
        return _TIME_ENTRY.pack(timestamp, offset - self.base_offset)

    def append(self, timestamp: int, offset: int) -> None:
        # Kafka's time index holds only increasing timestamps: an entry says "every
        # record before this offset has a timestamp below this one's successor".
        if self.keys and timestamp <= self.keys[-1]:
            return
        self.keys.append(timestamp)
        self.values.append(offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start scanning from for the first record with ts >= `timestamp`."""
        i = bisect.bisect_left(self.keys, timestamp) - 1
        return self.values[i] if i >= 0 else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        self.truncate_entries(bisect.bisect_left(self.values, offset))

    def load(self, next_offset: int) -> None:
        data = _read(self.path)
        if len(data) % _TIME_ENTRY.size:
            raise IndexCorrupt(f"{self.path}: size {len(data)} is not a multiple of 12")
        keys, values = [], []
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if (keys and (ts <= keys[-1] or off < values[-1])) or off >= max(next_offset, self.base_offset + 1):
                raise IndexCorrupt(f"{self.path}: entry ({ts}, {off}) out of order or past the segment")
            keys.append(ts)
            values.append(off)
        self.keys, self.values, self._persisted = array("q", keys), array("q", values), len(keys)
