"""One log segment: a file of record batches plus its sparse offset and time indexes.

Theory of operation: batches are appended exactly as validated and offset-patched by
the partition log, with plain `os.write` on an O_APPEND descriptor, so an acknowledged
batch is in the kernel's page cache before the produce response goes out and survives
the broker being killed (fsync, for power loss, follows the flush policy). Reads use
`os.pread`, so any number of fetches share one descriptor. The segment knows its base
offset (the file name), its next offset, its size and its largest timestamp.

Recovery (`recover`) scans every batch header from the start, verifying each CRC32C,
truncates the file at the first torn or corrupt batch, and rebuilds both indexes; it
runs for the segments a crash may have left half-written and for any segment whose
index files fail their sanity check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_of, iter_headers, read_header
from .index import IndexCorrupt, OffsetIndex, TimeIndex

_SCAN_CHUNK = 1 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(slots=True)
class RecoveryResult:
    truncated_bytes: int
    batches: int


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.path = directory / f"{name}.log"
        self.index = OffsetIndex(directory / f"{name}.index", base_offset)
        self.time_index = TimeIndex(directory / f"{name}.timeindex", base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.max_timestamp_position = -1  # file position of the batch holding max_timestamp
        self.first_batch_timestamp: int | None = None  # drives time-based roll (Kafka: rollingBasedTimestamp)
        self.created_ms = created_ms
        self._bytes_since_index = 0

    # --- writing ---------------------------------------------------------------------

    def append(self, data: bytes | bytearray, headers: list[BatchHeader]) -> None:
        """Append validated, offset-patched batches; `headers` positions are relative to `data`."""
        position = self.size
        written = os.write(self.fd, data)
        while written < len(data):  # os.write may be partial on some filesystems
            written += os.write(self.fd, memoryview(data)[written:])
        for h in headers:
            self._track(h, position + h.position)
        self.size = position + len(data)

    def _track(self, h: BatchHeader, file_position: int) -> None:
        if self._bytes_since_index >= self.index_interval_bytes or not len(self.index):
            self.index.append(h.base_offset, file_position)
            self._bytes_since_index = 0
        self._bytes_since_index += h.size
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.max_timestamp_position = file_position
            self.time_index.append(h.max_timestamp, h.base_offset)
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = h.max_timestamp
        self.next_offset = h.base_offset + h.last_offset_delta + 1

    def flush(self) -> None:
        os.fsync(self.fd)
        self.index.flush()
        self.time_index.flush()

    def close(self) -> None:
        if self.fd >= 0:
            self.index.flush()
            self.time_index.flush()
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for p in (self.path, self.index.path, self.time_index.path):
            p.unlink(missing_ok=True)

    # --- reading ---------------------------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def batch_at(self, position: int) -> BatchHeader | None:
        raw = os.pread(self.fd, HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        h = read_header(raw, 0, at=position)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + h.size > self.size:
            return None  # torn or garbage: callers stop scanning here
        return h

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None if there is none here."""
        for h in self._headers_from(self.index.lookup(offset)):
            if h.last_offset >= offset:
                return h
        return None

    def find_timestamp(self, timestamp: int) -> BatchHeader | None:
        """The first batch whose max timestamp is >= `timestamp`."""
        if self.max_timestamp < timestamp:
            return None
        for h in self._headers_from(self.index.lookup(self.time_index.lookup(timestamp))):
            if h.max_timestamp >= timestamp:
                return h
        return None

    def headers(self):
        """Every batch header in the segment, in order (reads in large chunks)."""
        position = 0
        while position < self.size:
            chunk = os.pread(self.fd, max(_SCAN_CHUNK, HEADER_SIZE), position)
            consumed = 0
            for h in iter_headers(chunk, base=position):
                consumed = h.position - position + h.size
                yield h
            if consumed == 0:
                h = self.batch_at(position)  # a batch larger than one chunk
                if h is None:
                    return
                yield h
                consumed = h.size
            position += consumed

    # --- loading and recovery --------------------------------------------------------

    def load(self, trust_indexes: bool) -> RecoveryResult | None:
        """Load indexes; fall back to full recovery if they are missing or insane."""
        if trust_indexes and self.index.path.exists() and self.time_index.path.exists():
            try:
                self.index.load(self.size)
                self._load_tail()
                return None
            except IndexCorrupt:
                pass
        return self.recover()

    def _load_tail(self) -> None:
        """Derive next offset and max timestamp from the indexes plus a short scan."""
        start = self.index.values[-1] if len(self.index) else 0
        end = start
        for h in self._headers_from(start):
            self.next_offset = h.next_offset
            end = h.position + h.size
        if end != self.size:
            raise IndexCorrupt(f"{self.path}: torn batch at {end}")
        self._bytes_since_index = end - start
        first = self.batch_at(0)
        self.first_batch_timestamp = first.max_timestamp if first else None
        # The time index's last entry is the running maximum up to its offset; batches
        # after it can only raise it, so scan from there.
        self.time_index.load(self.next_offset)
        scan_from = self.index.lookup(self.time_index.values[-1]) if len(self.time_index) else 0
        for h in self._headers_from(scan_from):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.max_timestamp_position = h.position

    def _headers_from(self, position: int):
        while position < self.size:
            h = self.batch_at(position)
            if h is None:
                return
            yield h
            position += h.size

    def recover(self) -> RecoveryResult:
        self.index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.max_timestamp_position = -1
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        valid_end = 0
        batches = 0
        position = 0
        while position < self.size:
            raw = os.pread(self.fd, HEADER_SIZE, position)
            if len(raw) < HEADER_SIZE:
                break
            h = read_header(raw, 0, at=position)
            if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + h.size > self.size:
                break
            if h.base_offset < self.next_offset:
                break  # offsets must increase; anything else is garbage from a torn write
            body = os.pread(self.fd, h.size, position)
            hdr = read_header(body, 0)
            if crc_of(body, hdr) != hdr.crc:
                break
            self._track(h, position)
            batches += 1
            position += h.size
            valid_end = position
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self.index.flush()
        self.time_index.flush()
        return RecoveryResult(truncated, batches)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after `offset` (the whole batch containing it too)."""
        h = self.find(offset)
        if h is None:
            return
        position = h.position
        os.ftruncate(self.fd, position)
        self.size = position
        self.recover()
