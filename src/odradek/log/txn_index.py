"""The aborted-transaction index of one segment: `<base offset>.txnindex` (Kafka's TransactionIndex).

Theory of operation (KIP-98): when an ABORT marker is written, the transaction it ends
gets an entry in the index of the segment that holds the marker:

    version int16 (0), producer id int64, first offset int64, last offset int64,
    last stable offset int64                                        -- 34 bytes, big-endian

`first offset` is the offset of the producer's first transactional batch in this
partition, `last offset` the marker's offset, `last stable offset` the LSO once the
transaction ended (the first offset of the next transaction still open then, or the
marker's offset + 1): a search that meets an entry whose LSO is at or past its upper
bound can stop, since every transaction aborted later started after that bound (Kafka's
TransactionIndex.collectAbortedTxns). A read_committed Fetch returns the (producer id,
first offset) of the entries overlapping the records it returns, and the consumer drops
those producers' records from the first offset up to their ABORT marker.

Entries are kept in memory, read from the file on first use (most segments have none:
aborts are rare, and the partition log tells an index whose file does not exist, so it
never looks). `append` writes the entry at once (os.write, O_APPEND; a failed write is
kept pending and retried by the next `sync`), `sync` fsyncs the file before the recovery
point passes its segment. The file goes with its segment: cut by `truncate_to` (Kafka's
TransactionIndex.truncateTo, entries whose marker is at or past the offset), removed by
`delete`, rewritten by `replace_from` when the partition log rebuilds it from the batches
(recovery, see transactions.py).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import storage_error

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">hqqqq")  # Kafka's AbortedTxn: version, producerId, firstOffset, lastOffset, lastStableOffset
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def parse_entries(data: bytes, path: Path | str = "") -> list[AbortedTxn]:
    """The entries of an index file's bytes. A torn last entry (a crash mid-write) is
    ignored; an entry with an unknown version or offsets out of order ends the parse,
    with a warning (Kafka's TransactionIndex.sanityCheck refuses such a file)."""
    out: list[AbortedTxn] = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != VERSION or first > last or (out and last < out[-1].last_offset):
            log.warning("%s: entry %d is not a valid aborted transaction (version %d, offsets %d..%d): ignoring it "
                        "and the rest of the file", path, pos // ENTRY_SIZE, version, first, last)
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    def __init__(self, path: Path, exists: bool | None = None) -> None:
        """`exists`: whether the file is known to exist (None: look when first needed)."""
        self.path = path
        self._entries: list[AbortedTxn] | None = [] if exists is False else None
        self._written = 0  # entries known to be in the file, in order
        self._unsynced = False

    def known_absent(self) -> None:
        """The file does not exist (the partition log listed the directory): no look later."""
        if self._entries is None:
            self._entries = []

    # --- reading -------------------------------------------------------------------

    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest marker first (raises StorageError when the file cannot be read)."""
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            except OSError as exc:
                raise storage_error(f"cannot read {self.path}", exc) from exc
            self._entries = parse_entries(data, self.path)
            self._written = len(self._entries)
        return self._entries

    def collect(self, fetch_offset: int, upper_bound_offset: int, out: list[AbortedTxn]) -> bool:
        """Kafka's collectAbortedTxns: add to `out` the entries whose marker is at or past
        `fetch_offset` and whose first offset is below `upper_bound_offset`; True when the
        search is complete (an entry's LSO reached the bound)."""
        for e in self.entries():
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return True
        return False

    # --- writing -------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry (its marker was just written to the segment). The in-memory list
        is right at once; a failed write is logged and retried by `sync`, which the
        recovery point waits for."""
        self.entries().append(entry)
        self._write_pending()

    def _write_pending(self, raise_errors: bool = False) -> None:
        entries = self.entries()
        if self._written == len(entries):
            return
        data = b"".join(e.to_bytes() for e in entries[self._written :])
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                if os.fstat(fd).st_size != self._written * ENTRY_SIZE:
                    os.ftruncate(fd, self._written * ENTRY_SIZE)  # a torn earlier attempt
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
            finally:
                os.close(fd)
        except OSError as exc:
            if raise_errors:
                raise storage_error(f"cannot write {self.path}", exc) from exc
            log.warning("cannot write %s (%s): the aborted transaction is kept in memory and written by the next "
                        "flush", self.path, exc)
            return
        self._written = len(entries)
        self._unsynced = True

    def sync(self) -> None:
        """Write what is pending and fsync the file (before the recovery point passes the
        segment). Raises StorageError."""
        self._write_pending(raise_errors=True)
        if not self._unsynced:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            pass  # deleted meanwhile (nothing left to keep)
        except OSError as exc:
            raise storage_error(f"fsync of {self.path} failed", exc) from exc
        self._unsynced = False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past `offset` (Kafka's TransactionIndex.truncateTo)."""
        entries = self.entries()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) != len(entries):
            self._rewrite(kept)

    def replace_from(self, offset: int, entries: list[AbortedTxn]) -> bool:
        """Make the entries whose marker is at or past `offset` be `entries` (rebuilt from
        the batches); rewrites and fsyncs the file only when that changes it. True if it did."""
        current = self.entries()
        wanted = [e for e in current if e.last_offset < offset] + entries
        if wanted == current:
            return False
        self._rewrite(wanted, fsync=True)
        return True

    def _rewrite(self, entries: list[AbortedTxn], fsync: bool = False) -> None:
        try:
            if not entries:
                self.path.unlink(missing_ok=True)
            else:
                tmp = self.path.with_name(self.path.name + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(b"".join(e.to_bytes() for e in entries))
                    if fsync:
                        f.flush()
                        os.fsync(f.fileno())
                os.replace(tmp, self.path)
        except OSError as exc:
            raise storage_error(f"cannot rewrite {self.path}", exc) from exc
        self._entries = list(entries)
        self._written = len(entries)
        self._unsynced = bool(entries) and not fsync

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._written = 0
        self._unsynced = False
