"""Transactions in a partition log (KIP-98): the last stable offset, the aborted index, producer snapshots.

Theory of operation. A mixin of PartitionLog (as truncation.py), holding what Kafka
spreads over ProducerStateManager, TransactionIndex and UnifiedLog:

- State. `self.producers` (producer_state.py) knows, per producer, its epoch, the
  coordinator epoch of its last marker, its recent batches, and the first offset of its
  open transaction. Every batch written goes through it, whichever path wrote it
  (`append` as leader, `append_as_follower` byte for byte, the group coordinator's
  control batches through `append`, `append_marker` for WriteTxnMarkers): data batches
  by header only, control batches by their one record (COMMIT or ABORT; the header's
  control bit says which batches need their payload read). Markers are checked before
  a leader writes anything (an older producer epoch, a fenced coordinator), as the
  sequence checks are.
- Last stable offset (Kafka's UnifiedLog.lastStableOffset): min(first unstable offset,
  high watermark), where the first unstable offset is the first offset of a transaction
  still open (or ended by a marker not yet below the high watermark), raised to the log
  start offset if it lies below it (Kafka's updateFirstUnstableOffset).
- Aborted index. An ABORT marker that ends an open transaction adds an entry to the
  `.txnindex` of the segment it lands in (txn_index.py, Kafka's layout). A
  read_committed fetch asks `aborted_transactions(fetch_offset, upper_bound)`: the walk
  starts at the segment holding the fetch offset (a marker at or past it lives there or
  later) and stops at the first entry whose LSO reaches the bound (Kafka's
  collectAbortedTransactions). The index goes with its segment: deleted by retention,
  cut by truncation, kept by compaction (which keeps every marker).
- Snapshots. Rebuilding the open transactions needs more than the active segment: a
  transaction may have started many segments back. Kafka's answer, followed here: when
  the log rolls, the producer state as of the new segment's base offset is written to
  `<base offset>.snapshot` (producer_state.py, Kafka's layout; no fsync: a torn or lost
  snapshot fails its CRC and an older one is used). Opening a log loads the latest
  snapshot at or below both the log end and the first segment that was not trusted as
  flushed (so every segment recovery re-read is replayed), then replays the batch
  headers from there to the log end, rewriting the aborted index of each replayed
  segment when it differs from what the batches say (a crash between writing a marker
  and its index entry, or a recovery that cut the log). After a clean stop that is the
  active segment only: what opening read before transactions existed. Without any
  snapshot (a log never rolled, or its snapshots lost) the replay starts at the first
  segment, and when that passes the active segment's base the missing snapshot is
  written there, so the next start is short again. A snapshot is deleted with its
  segment (Segment.delete, as Kafka's deleteSegmentFiles), every snapshot past the log
  end goes when the log is opened or truncated (Kafka's truncateAndReload), and a
  truncation replays from the latest snapshot left, as opening does.
- Durability. An index entry is written (not fsynced) with its marker; the recovery
  point passes a segment only once its index is fsynced (`mark_flushed`, Segment.flush),
  and indexes rebuilt at open are fsynced before the log trusts them.

Differences from Kafka, noted for the docs: no snapshot is written at a clean shutdown
(the active segment is replayed instead: a broker with 100,000 partitions would
otherwise create as many files when it stops); a snapshot keeps each producer's last
batch only, as Kafka's does; producer ids are never expired.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..records.batch import CONTROL_MASK, BatchError, BatchHeader, validate_batches
from ..records.codec import CodecError
from ..records.control import Marker, decode_marker, encode_marker
from .errors import StorageError, storage_error
from .producer_state import ProducerState
from .segment import Segment, segment_name
from .txn_index import AbortedTxn

log = logging.getLogger("odradek.log.partition")

SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{segment_name(offset)}{SNAPSHOT_SUFFIX}"


def markers_of(data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> list[Marker | None] | None:
    """The transaction marker of each control batch among `headers` (positions relative
    to `data`), aligned with them; None when there is no control batch (the usual case).
    A control batch of another type (Kafka reserves them) has no marker. Raises
    BatchError for a control batch that cannot be read, before anything is written."""
    out: list[Marker | None] | None = None
    for i, h in enumerate(headers):
        if h.attributes & CONTROL_MASK:
            if out is None:
                out = [None] * len(headers)
            try:
                out[i] = decode_marker(bytes(data[h.position : h.position + h.size]), h)
            except CodecError as exc:
                raise BatchError("corrupt_message", f"control batch at offset {h.base_offset}: {exc}") from None
    return out


def read_snapshot(path: Path) -> ProducerState | None:
    """The producer state a snapshot file holds; None if it cannot be read or is corrupt."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return ProducerState.from_snapshot(data)


class Transactions:
    # --- what consumers see ----------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of a transaction not yet decided below the high watermark, at
        least the log start offset; None when there is none."""
        first = self.producers.first_unstable_offset(self.high_watermark)
        return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """KIP-98: read_committed consumers read below it (Kafka's UnifiedLog.lastStableOffset)."""
        hw = self.high_watermark
        first = self.first_unstable_offset
        return hw if first is None else min(first, hw)

    def aborted_entries(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions whose marker is at or past `fetch_offset` and whose first
        offset is below `upper_bound_offset` (Kafka's UnifiedLog.collectAbortedTransactions).
        Raises StorageError when an index cannot be read."""
        out: list[AbortedTxn] = []
        for seg in self.segments[self._segment_index(fetch_offset) :]:
            if seg.txn_index.collect(fetch_offset, upper_bound_offset, out):
                break
        return out

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction a read_committed Fetch of
        [fetch_offset, upper_bound_offset) must name (the response's AbortedTransactions)."""
        return [(e.producer_id, e.first_offset) for e in self.aborted_entries(fetch_offset, upper_bound_offset)]

    # --- appends -----------------------------------------------------------------------

    def append_marker(self, marker: Marker, now_ms: int, leader_epoch: int = 0):
        """Write a transaction marker as leader (WriteTxnMarkers): an AppendInfo. Raises
        SequenceError ("invalid_producer_epoch", "transaction_coordinator_fenced") when
        the marker is refused (nothing written), StorageError as `append` does."""
        data = bytearray(encode_marker(marker, now_ms))
        return self.append(data, validate_batches(data), now_ms, leader_epoch)

    def _check_batches(self, data: bytes | bytearray, headers: list[BatchHeader]) -> list[Marker | None] | None:
        """A leader's checks before writing: sequences of data batches, epochs of markers.
        Returns the markers (see markers_of); raises Duplicate, SequenceError, BatchError."""
        markers = markers_of(data, headers)
        for i, h in enumerate(headers):
            marker = markers[i] if markers is not None else None
            if marker is not None:
                self.producers.check_marker(marker)
            elif not h.attributes & CONTROL_MASK:
                self.producers.check(h)
        return markers

    def _track_batches(self, headers: list[BatchHeader], markers: list[Marker | None] | None) -> None:
        """Producer and transaction state after `headers` (offsets assigned) were written to
        the active segment."""
        state = self.producers
        for i, h in enumerate(headers):
            marker = markers[i] if markers is not None else None
            if marker is not None:
                done = state.end_transaction(marker, h.base_offset)
                if done is not None and done.aborted:
                    self.active.txn_index.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                                            done.last_stable_offset))
            elif not h.attributes & CONTROL_MASK:
                state.update(h)
        if markers is not None:
            state.first_unstable_offset(self.high_watermark)  # forget what the high watermark passed

    # --- snapshots and flushing ----------------------------------------------------------

    def _snapshot_at(self, offset: int) -> None:
        """Write the producer state as of `offset` (the log end: a roll). Best effort: a
        snapshot that is missing or torn costs a longer replay at the next open."""
        path = snapshot_path(self.directory, offset)
        data = self.producers.to_snapshot()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("%s: cannot write the producer snapshot %s (%s): the next open replays more of the log",
                        self.directory.name, path.name, exc)
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass

    def _txn_index_synced(self, seg: Segment) -> bool:
        """fsync a rolled segment's aborted index before the recovery point passes it."""
        try:
            seg.txn_index.sync()
            return True
        except StorageError as exc:
            log.warning("%s: %s; the recovery point waits", self.directory.name, exc)
            return False

    # --- opening and truncation ----------------------------------------------------------

    def _txn_files(self) -> list[int]:
        """Snapshot offsets in the directory, ascending; removes aborted indexes whose
        segment is gone (a crash while deleting it) and tells each segment whether its
        index file exists, so that reads never look for one that does not."""
        snapshots, indexed = [], set()
        try:
            entries = list(os.scandir(self.directory))
        except OSError as exc:
            raise storage_error(f"cannot list {self.directory}", exc) from exc
        bases = {s.base_offset for s in self.segments}
        for e in entries:
            stem, dot, suffix = e.name.partition(".")
            if not stem.isdigit():
                continue
            if dot and "." + suffix == SNAPSHOT_SUFFIX:
                snapshots.append(int(stem))
            elif dot and "." + suffix == TXN_INDEX_SUFFIX:
                if int(stem) in bases:
                    indexed.add(int(stem))
                else:
                    self._remove_file(Path(e.path))
            elif dot and suffix == TXN_INDEX_SUFFIX[1:] + ".tmp":
                self._remove_file(Path(e.path))
        for seg in self.segments:
            if seg.base_offset not in indexed:
                seg.txn_index.known_absent()
        return sorted(snapshots)

    def _remove_file(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s: cannot remove %s (%s)", self.directory.name, path.name, exc)

    def _load_transactions(self, replay_floor: int | None = None) -> None:
        """Rebuild producer and transaction state (module docstring): from the latest
        snapshot at or below the log end and `replay_floor` (the first segment not
        trusted as flushed), replaying the batches after it. Raises StorageError."""
        leo = self.log_end_offset
        first_base = self.segments[0].base_offset
        limit = leo if replay_floor is None else min(replay_floor, leo)
        state, start = None, first_base
        for offset in reversed(self._txn_files()):
            if offset > leo or offset < first_base:
                self._remove_file(snapshot_path(self.directory, offset))  # cut off, or its segment is gone
            elif state is None and offset <= limit:
                state = read_snapshot(snapshot_path(self.directory, offset))
                if state is None:
                    log.warning("%s: producer snapshot at offset %d is unreadable or corrupt: using an older one",
                                self.directory.name, offset)
                    self._remove_file(snapshot_path(self.directory, offset))
                else:
                    start = offset
        self.producers = state if state is not None else ProducerState()
        self._replay(start, snapshot_missing=start < self.active.base_offset)

    def _reset_transactions(self) -> None:
        """The log restarts empty (truncate_fully_and_start_at): no producer, no snapshot."""
        for offset in self._txn_files():
            self._remove_file(snapshot_path(self.directory, offset))
        self.producers = ProducerState()

    def _replay(self, start: int, snapshot_missing: bool) -> None:
        """Apply every batch from `start` to the log end to `self.producers`, rewriting the
        aborted index of each segment replayed from where the replay began in it."""
        active = self.active
        for seg in self.segments[self._segment_index(start) :]:
            if seg is active and snapshot_missing and start < seg.base_offset:
                self._snapshot_at(seg.base_offset)  # the next open starts here
            rebuilt: list[AbortedTxn] = []
            for h in seg.headers():
                if h.base_offset < start:
                    continue
                if not h.attributes & CONTROL_MASK:
                    self.producers.update(h)
                    continue
                marker = self._stored_marker(seg, h)
                done = self.producers.end_transaction(marker, h.base_offset) if marker is not None else None
                if done is not None and done.aborted:
                    rebuilt.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                              done.last_stable_offset))
            if seg.txn_index.replace_from(max(start, seg.base_offset), rebuilt):
                log.info("%s: rebuilt the aborted transaction index of segment %d from its batches",
                         self.directory.name, seg.base_offset)

    def _stored_marker(self, seg: Segment, h: BatchHeader) -> Marker | None:
        try:
            return decode_marker(seg.pread(h.position, h.size), h)
        except CodecError as exc:
            log.warning("%s: unreadable control batch at offset %d (%s): ignored for transaction state",
                        self.directory.name, h.base_offset, exc)
            return None
