"""One log segment: a file of record batches plus its sparse offset and time indexes.

Theory of operation: batches are appended exactly as validated and offset-patched by
the partition log, with plain `os.write` on an O_APPEND descriptor, so an acknowledged
batch is in the kernel's page cache before the produce response goes out and survives
the broker being killed (fsync, for power loss, follows the flush policy). Reads use
`os.pread`, so any number of fetches share one descriptor. Descriptors come from a
`FileCache`: opened on first use, closed again when the budget needs room.

A write either lands whole or leaves no trace: if `write` or the flush policy's
`fsync` fails (ENOSPC, EIO), the file is cut back to its size before the append and
nothing in memory moves, so the next append lands at the right position. If even the
cut fails the segment can no longer be trusted and the error says so (`undone=False`).

A segment holds offsets `base .. base + 2^31 - 1` and file positions below 2^31: the
index stores both in 32 bits (Kafka's `LogSegment.canConvertToRelativeOffset`); the
partition rolls before an append would leave that range, and loading refuses a
stored batch outside it.

Two ways to load:
- `load()` for a segment the log knows was flushed: trust the index files if they
  are sane, else rebuild them from the batch headers; the batches' structure is
  checked from the last index entry to the end. Structural damage raises
  SegmentDamaged: the data was acknowledged and flushed, so the partition goes
  offline rather than silently losing it. CRCs are checked when batches are read.
- `recover()` for a segment that may hold unflushed writes after an unclean stop
  (Kafka's `LogSegment.recover`): every batch is checked, CRC32C included, and the
  file is truncated at the first one that fails; the result says how many bytes and
  offsets were dropped and whether whole batches (not only a torn tail) were lost.

Replication cuts a segment's tail (`truncate_to`, Kafka's LogSegment.truncateTo): the
file and both indexes are cut at a batch boundary, and the tail state comes from the
indexes plus a short scan, as a flushed segment's load does.

Transactions (KIP-98): each segment owns its aborted-transaction index
(`<base>.txnindex`, txn_index.py), cut, fsynced and deleted with it; the partition log
fills it. Deleting a segment also deletes the producer snapshot taken when it was rolled
in (`<base>.snapshot`, transactions.py), as Kafka's UnifiedLog.deleteSegmentFiles does.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path

from ..records.batch import CONTROL_MASK, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_of, iter_headers, read_header
from .errors import CorruptBatch, SegmentDamaged, storage_error
from .files import FileCache
from .index import IndexCorrupt, OffsetIndex, TimeIndex
from .txn_index import TxnIndex

_SCAN_CHUNK = 1 << 20
MAX_RELATIVE_OFFSET = (1 << 31) - 1  # Kafka: relative offsets are ints
MAX_POSITION = (1 << 31) - 1  # Kafka: file positions are ints (segment.bytes <= Int.MaxValue)

# Segments smaller than this keep their indexes in memory only (see flush_indexes).
INDEX_FILE_MIN_BYTES = 64 * 1024

# Every segment without a cache of its own shares this one (tests, tools).
UNBOUNDED = FileCache(1 << 30)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(slots=True)
class RecoveryResult:
    truncated_bytes: int
    batches: int
    dropped_offsets: int = 0  # offsets the truncated bytes claimed (best effort)
    whole_batches_dropped: bool = False  # corruption, not only an interrupted last write
    first_dropped_offset: int = -1
    reason: str = ""


def header_problem(h: BatchHeader, next_offset: int, base_offset: int, limit: int) -> str | None:
    """Why a stored header cannot be part of this segment, or None."""
    if h.magic != 2:
        return f"magic {h.magic}"
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return f"batch length {h.batch_length}"
    if h.position + h.size > limit:
        return "batch runs past the end of the file"
    if h.base_offset < next_offset:
        return f"offset {h.base_offset} does not follow {next_offset - 1}"
    if h.last_offset_delta < 0:
        return f"last offset delta {h.last_offset_delta}"
    if h.last_offset - base_offset > MAX_RELATIVE_OFFSET:
        return f"offsets up to {h.last_offset} overflow the segment's 32-bit index (base {base_offset})"
    if h.position > MAX_POSITION:
        return f"position {h.position} overflows the index"
    return None


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, created_ms: int,
                 files: FileCache | None = None) -> None:
        self.directory = directory
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.path = directory / f"{name}.log"
        self.index = OffsetIndex(directory / f"{name}.index", base_offset)
        self.time_index = TimeIndex(directory / f"{name}.timeindex", base_offset)
        self.txn_index = TxnIndex(directory / f"{name}.txnindex")
        self.index_interval_bytes = index_interval_bytes
        self.files = files if files is not None else UNBOUNDED
        self.fd = -1
        self._create_if_missing()
        self.size = os.stat(self.path).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.max_timestamp_position = -1  # file position of the batch holding max_timestamp
        self.max_timestamp_offset = -1  # and its base offset
        self.first_batch_timestamp: int | None = None  # drives time-based roll (Kafka: rollingBasedTimestamp)
        self.created_ms = created_ms
        self._bytes_since_index = 0

    def _create_if_missing(self) -> None:
        if not self.path.exists():
            try:
                self.files.acquire(self)  # O_CREAT
            except OSError as exc:
                raise storage_error(f"cannot create {self.path}", exc) from exc

    # --- descriptors (FileCache protocol) ---------------------------------------------

    def open_descriptor(self) -> int:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self.fd

    def close_descriptor(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            except OSError:
                pass

    def _fd(self) -> int:
        try:
            return self.files.acquire(self)
        except OSError as exc:
            raise storage_error(f"cannot open {self.path}", exc) from exc

    # --- writing ---------------------------------------------------------------------

    def can_hold(self, last_offset: int, incoming: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET and self.size + incoming <= MAX_POSITION

    def append(self, data: bytes | bytearray, headers: list[BatchHeader], fsync: bool = False) -> None:
        """Append validated, offset-patched batches; `headers` positions are relative to `data`.

        All or nothing: on failure the file is cut back and StorageError raised.
        """
        fd = self._fd()
        position = self.size
        try:
            written = os.write(fd, data)
            while written < len(data):  # os.write may be partial (a disk filling up)
                written += os.write(fd, memoryview(data)[written:])
            if fsync:
                os.fsync(fd)
        except OSError as exc:
            self._cut_back(fd, position, exc)
            raise storage_error(f"append to {self.path} failed and was undone", exc) from exc
        for h in headers:
            self._track(h, position + h.position)
        self.size = position + len(data)

    def _cut_back(self, fd: int, position: int, cause: OSError) -> None:
        try:
            os.ftruncate(fd, position)
        except OSError as exc:
            error = storage_error(f"append to {self.path} failed ({cause.strerror}) and could not be undone", exc)
            error.undone = False
            raise error from cause

    def _track(self, h: BatchHeader, file_position: int) -> None:
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.max_timestamp_position = file_position
            self.max_timestamp_offset = h.base_offset
        if self._bytes_since_index >= self.index_interval_bytes or not len(self.index):
            # Kafka's LogSegment.append: both indexes grow once per index.interval.bytes,
            # the time index with the largest timestamp so far and the batch holding it.
            # (One time entry per batch grew the broker's memory by 3 MB a minute.)
            self.index.append(h.base_offset, file_position)
            self.time_index.append(self.max_timestamp, self.max_timestamp_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += h.size
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = h.max_timestamp
        self.next_offset = h.base_offset + h.last_offset_delta + 1

    def fsync(self) -> None:
        try:
            os.fsync(self._fd())
        except OSError as exc:
            raise storage_error(f"fsync of {self.path} failed", exc) from exc

    def flush(self) -> None:
        """fsync the data and the aborted-transaction index; write the index files (their
        failure only costs a rebuild later)."""
        self.fsync()
        self.txn_index.sync()
        self.flush_indexes()

    def seal_time_index(self) -> None:
        """A segment stops growing (Kafka's onBecomeInactiveSegment): the time index gets
        the segment's largest timestamp, so lookups past the last sparse entry stop here."""
        if self.max_timestamp_offset >= 0:
            self.time_index.append(self.max_timestamp, self.max_timestamp_offset)

    def flush_indexes(self, force: bool = False) -> None:
        """Write the indexes. A small segment's index files are not created: creating two
        files costs more than rebuilding the index from a short scan at the next load, and
        with 100,000 partitions it made a clean shutdown take tens of seconds."""
        create = force or self.size >= INDEX_FILE_MIN_BYTES
        self.index.flush(create)
        self.time_index.flush(create)

    def close(self) -> None:
        self.flush_indexes()  # even when the cache closed the descriptor: indexes live apart
        self.files.forget(self)
        self.close_descriptor()

    def delete(self) -> None:
        self.files.forget(self)
        self.close_descriptor()
        for p in (self.path, self.index.path, self.time_index.path, self.directory / f"{self.path.stem}.snapshot"):
            p.unlink(missing_ok=True)
        self.txn_index.delete()

    # --- reading ---------------------------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        try:
            return os.pread(self._fd(), size, position)
        except OSError as exc:
            raise storage_error(f"read of {self.path} failed", exc) from exc

    def batch_at(self, position: int) -> BatchHeader | None:
        raw = self.pread(position, HEADER_SIZE)
        if len(raw) < HEADER_SIZE:
            return None
        h = read_header(raw, 0, at=position)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + h.size > self.size:
            return None  # torn or garbage: callers stop scanning here
        return h

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None if there is none here.

        A header that does not parse before the end of the segment is corruption: the
        read fails loudly (CorruptBatch) instead of looking like the end of the data.
        """
        position = self.index.lookup(offset)
        for h in self._headers_from(position, strict=True):
            if h.last_offset >= offset:
                return h
        return None

    def find_timestamp(self, timestamp: int) -> BatchHeader | None:
        """The first batch whose max timestamp is >= `timestamp`."""
        return next(self.batches_from_timestamp(timestamp), None)

    def batches_from_timestamp(self, timestamp: int):
        """Every batch from the first whose max timestamp is >= `timestamp` to the end."""
        if self.max_timestamp < timestamp:
            return
        found = False
        for h in self._headers_from(self.index.lookup(self.time_index.lookup(timestamp)), strict=True):
            found = found or h.max_timestamp >= timestamp
            if found:
                yield h

    def headers(self):
        """Every batch header in the segment, in order (reads in large chunks)."""
        position = 0
        while position < self.size:
            chunk = self.pread(position, min(max(_SCAN_CHUNK, HEADER_SIZE), self.size - position))
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

    def verify_crcs(self, data: bytes, start_position: int) -> tuple[int, int]:
        """(how many leading bytes of `data` (read at `start_position`) hold batches whose
        CRC32C is right, the data records in those batches); raises CorruptBatch when the
        first one is wrong. The record count rides on this walk over the headers so the
        broker's messages-out metric needs no second one (issue 21: metrics under 5 %)."""
        good = records = 0
        for h in iter_headers(data):
            if crc_of(data, h) != h.crc:
                if good == 0:
                    raise CorruptBatch(f"batch at offset {h.base_offset} of {self.path} (position "
                                       f"{start_position + h.position}) fails its CRC32C check", h.base_offset)
                return good, records
            good = h.position + h.size
            if not h.attributes & CONTROL_MASK:
                records += h.records_count
        return len(data), records

    # --- loading and recovery --------------------------------------------------------

    def load(self) -> RecoveryResult | None:
        """Load a flushed segment (see the module docstring). Returns a RecoveryResult
        when the indexes had to be rebuilt, None when they were trusted."""
        if self.index.path.exists() and self.time_index.path.exists():
            try:
                self.index.load(self.size)
                self._load_tail()
                return None
            except IndexCorrupt:
                pass
        return self._rebuild()

    def _load_tail(self) -> None:
        """Derive next offset and max timestamp from the indexes plus a short scan."""
        start = self.index.values[-1] if len(self.index) else 0
        self.next_offset = self.index.keys[-1] if len(self.index) else self.base_offset
        end = start
        for h in self._headers_from(start):
            problem = header_problem(h, self.next_offset, self.base_offset, self.size)
            if problem:
                raise IndexCorrupt(f"{self.path}: {problem}")
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
                self.max_timestamp_offset = h.base_offset

    def _headers_from(self, position: int, strict: bool = False):
        while position < self.size:
            h = self.batch_at(position)
            if h is None:
                if strict:
                    raise CorruptBatch(f"{self.path}: no valid batch header at position {position}", -1)
                return
            yield h
            position += h.size

    def _reset(self) -> None:
        self.index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.max_timestamp_position = -1
        self.max_timestamp_offset = -1
        self.first_batch_timestamp = None
        self._bytes_since_index = 0

    def _rebuild(self) -> RecoveryResult:
        """Rebuild the indexes of a flushed segment; its bytes must be whole."""
        self._reset()
        batches = 0
        for h in self._scan_headers():
            problem = header_problem(h, self.next_offset, self.base_offset, self.size)
            if problem:
                raise SegmentDamaged(f"{self.path}: {problem} at position {h.position}", h.base_offset)
            self._track(h, h.position)
            batches += 1
        end = self._scanned_end
        if end != self.size:
            raise SegmentDamaged(f"{self.path}: {self.size - end} bytes after the last whole batch "
                                 f"(position {end}, offset {self.next_offset}): the segment was cut short",
                                 self.next_offset)
        self.flush_indexes()
        return RecoveryResult(0, batches)

    def _scan_headers(self):
        """Headers from position 0 while they parse; `_scanned_end` is where it stopped."""
        position = 0
        self._scanned_end = 0
        while position < self.size:
            raw = self.pread(position, HEADER_SIZE)
            if len(raw) < HEADER_SIZE:
                return
            h = read_header(raw, 0, at=position)
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + h.size > self.size:
                return
            yield h
            position += h.size
            self._scanned_end = position

    def recover(self, verify_from: int | None = None) -> RecoveryResult:
        """Kafka's LogSegment.recover: keep the longest valid prefix, truncate the rest.

        Batches wholly below `verify_from` (the recovery point) were flushed: their
        structure is checked and damage there raises SegmentDamaged rather than
        truncating acknowledged, flushed data; their CRCs are checked by reads.
        """
        self._reset()
        batches = 0
        valid_end = 0
        reason = ""
        for h in self._scan_headers():
            reason = header_problem(h, self.next_offset, self.base_offset, self.size) or ""
            flushed = verify_from is not None and h.last_offset < verify_from
            if reason and flushed:
                raise SegmentDamaged(f"{self.path}: {reason} at position {h.position}", h.base_offset)
            if not reason and not flushed:
                body = self.pread(h.position, h.size)
                if crc_of(body, read_header(body, 0)) != h.crc:
                    reason = f"CRC32C mismatch in the batch at offset {h.base_offset}"
            if reason:
                break
            self._track(h, h.position)
            batches += 1
            valid_end = h.position + h.size
        truncated = self.size - valid_end
        if truncated and verify_from is not None and self.next_offset < verify_from:
            raise SegmentDamaged(f"{self.path}: the segment was cut short or overwritten at position {valid_end} "
                                 f"(offset {self.next_offset}, {reason or 'an incomplete batch'}) although data up to "
                                 f"offset {verify_from} was flushed", self.next_offset)
        result = RecoveryResult(truncated, batches)
        if truncated:
            if not reason:
                reason = f"{truncated} bytes of an incomplete batch at the end"
            dropped_last, whole = self._claimed_after(valid_end)
            result = RecoveryResult(truncated, batches, max(dropped_last + 1 - self.next_offset, 0), whole,
                                    self.next_offset, reason)
            try:
                os.ftruncate(self._fd(), valid_end)
            except OSError as exc:
                raise storage_error(f"cannot truncate {self.path}", exc) from exc
            self.size = valid_end
        self.flush_indexes()
        return result

    def _claimed_after(self, position: int) -> tuple[int, bool]:
        """(last offset the batches after `position` claim, whether any of them is whole):
        what recovery is about to drop, read from their headers as far as they parse."""
        last = self.next_offset - 1
        whole = False
        while position + HEADER_SIZE <= self.size:
            h = read_header(self.pread(position, HEADER_SIZE), 0, at=position)
            if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.base_offset < last + 1 \
                    or h.last_offset_delta < 0:
                break
            last = h.last_offset
            if position + h.size > self.size:
                break
            whole = True
            position += h.size
        return last, whole

    def truncate_to(self, offset: int) -> BatchHeader | None:
        """Kafka's LogSegment.truncateTo: drop every batch whose last offset is >= `offset`
        (the whole batch containing `offset` too). Returns the first batch dropped, None
        when nothing was (everything here is below `offset`).

        A header that does not parse before the batch holding `offset` is cut along with
        everything after it: nothing past it could be read anyway. The indexes are cut in
        memory (their files are rewritten at the next flush, or rebuilt after a crash) and
        the segment's tail state is derived from them plus a short scan, not by a full
        recovery: a truncating follower must not read back a gigabyte segment. Raises
        StorageError if the file cannot be cut; nothing changed then.
        """
        position = self.index.lookup(offset)
        dropped: BatchHeader | None = None
        kept_next = self._offset_at(position)
        for h in self._headers_from(position):
            if h.last_offset >= offset:
                dropped = h
                break
            position = h.position + h.size
            kept_next = h.next_offset
        if dropped is None and position >= self.size:
            return None
        cut = dropped.position if dropped is not None else position
        try:
            os.ftruncate(self._fd(), cut)
        except OSError as exc:
            raise storage_error(f"cannot truncate {self.path}", exc) from exc
        self.size = cut
        self.index.truncate_to_position(cut)
        # Time index entries name the batch holding the running maximum: those at or past
        # the cut go (every batch kept has a smaller base offset than every batch dropped).
        self.time_index.truncate_to_offset(dropped.base_offset if dropped is not None else kept_next)
        self._retrack()
        self.txn_index.truncate_to(self.next_offset)  # entries whose marker was cut
        return dropped

    def _offset_at(self, position: int) -> int:
        """The base offset of the batch at `position`, an index entry's (the segment base
        for position 0): a lower bound for every batch from there on."""
        i = bisect.bisect_left(self.index.values, position)
        if i < len(self.index) and self.index.values[i] == position:
            return self.index.keys[i]
        return self.base_offset

    def _retrack(self) -> None:
        """Next offset, largest timestamp and index spacing of a segment whose tail was cut,
        from the (cut) indexes plus a scan, as `_load_tail`: the time index's last entry
        names the batch holding the largest timestamp before it, so scanning from that
        batch (or the last offset index entry, if earlier) sees every candidate."""
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.max_timestamp_position = -1
        self.max_timestamp_offset = -1
        last_indexed = self.index.values[-1] if len(self.index) else 0
        scan_from = last_indexed
        if len(self.time_index):
            scan_from = min(scan_from, self.index.lookup(self.time_index.values[-1]))
        for h in self._headers_from(scan_from):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.max_timestamp_position = h.position
                self.max_timestamp_offset = h.base_offset
            self.next_offset = h.next_offset
        self._bytes_since_index = self.size - last_indexed if self.size else 0
        first = self.batch_at(0) if self.size else None
        self.first_batch_timestamp = first.max_timestamp if first is not None else None
