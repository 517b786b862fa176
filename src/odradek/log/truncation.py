"""Cutting a partition's log back: what a follower does when its log diverged.

Theory of operation (Kafka's UnifiedLog.truncateTo / truncateFullyAndStartAt): a cut
deletes later segments last first (so a failure leaves a whole, shorter log), cuts the
segment holding the offset at a batch boundary, and brings down everything that names
offsets: segment bases, the recovery point, the log start, the high watermark, the
compactor's memo, producer and transaction state (reloaded from the latest producer
snapshot left and the batches after it, Kafka's truncateAndReload: a transaction whose
marker was cut is open again, an aborted-index entry whose marker was cut is gone) and
the leader epoch cache. A mixin of PartitionLog, kept apart because only replication
truncates.
"""

from __future__ import annotations

import logging

from .errors import storage_error
from .segment import Segment

log = logging.getLogger("odradek.log.partition")


class Truncation:
    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or past `offset` (Kafka's UnifiedLog.truncateTo); True if
        the log was cut, False when `offset` is at or past the log end.

        Later segments are deleted, the one holding `offset` is cut at the batch holding
        it. Replication truncates at epoch boundaries, which are batch boundaries; an
        offset inside a batch takes the whole batch (the log then ends below `offset`)
        and is logged. Below the first segment the log restarts empty at `offset`
        (truncate_fully_and_start_at), as Kafka does. The epoch cache, producer state,
        recovery point, high watermark and log start come down with the log end. Raises
        StorageError when a file cannot be cut or deleted: the log is then what is left,
        still whole and usable, with everything above brought down to it.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to a negative offset ({offset})")
        leo = self.log_end_offset
        if offset >= leo:
            # Kafka truncates the cache even so: a leader may have assigned its epoch at the
            # log end and lost leadership before appending anything.
            self.epochs.truncate_from_end(leo)
            return False
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        log.info("%s: truncating to offset %d (log end %d)", self.directory.name, offset, leo)
        i = self._segment_index(offset)
        try:
            self._remove_segments_after(i)
            dropped = self.segments[i].truncate_to(offset)
        finally:
            self._after_truncation()
        if dropped is not None and dropped.base_offset < offset:
            log.warning("%s: truncation offset %d is inside the batch %d..%d: the whole batch was removed, the log "
                        "now ends at %d", self.directory.name, offset, dropped.base_offset, dropped.last_offset,
                        self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete every record; the log restarts empty at `offset`, which becomes its log
        start and high watermark (Kafka's UnifiedLog.truncateFullyAndStartAt: a follower
        whose fetch offset is out of range on the leader). The epoch cache and producer
        state are emptied. `now_ms` is the new segment's creation time (default: the old
        first segment's). Raises StorageError as truncate_to does."""
        if offset < 0:
            raise ValueError(f"cannot restart {self.directory.name} at a negative offset ({offset})")
        log.info("%s: truncating fully (log %d..%d) and starting at offset %d", self.directory.name,
                 self.log_start_offset, self.log_end_offset, offset)
        try:
            self._remove_segments_after(0)
            first = self.segments[0]
            first.truncate_to(first.base_offset)
            if first.base_offset != offset:
                created = first.created_ms if now_ms is None else now_ms
                self.segments.append(Segment(self.directory, offset, self.index_interval, created, self.files))
                self._remove_segment(0)
            elif now_ms is not None:
                first.created_ms = now_ms
        except BaseException:
            self._after_truncation()
            raise
        self._bases = [offset]
        self.rolled_unflushed.clear()
        self._log_start = offset
        self.recovery_point = offset
        self._hw = offset
        self._unflushed_messages = 0
        self.cleaner_state = None
        self._reset_transactions()  # no producer state, no snapshot left (transactions.py)
        self._forget_epoch_file()
        self.epochs.clear()  # Kafka's clearAndFlush

    def _remove_segments_after(self, i: int) -> None:
        """Delete the segments after index `i`, last first, so the log is whole if one fails."""
        while len(self.segments) > i + 1:
            self._remove_segment(len(self.segments) - 1)

    def _remove_segment(self, i: int) -> None:
        seg = self.segments.pop(i)
        try:
            seg.delete()
        except OSError as exc:
            raise storage_error(f"cannot delete {seg.path}", exc) from exc

    def _after_truncation(self) -> None:
        """Bring everything that refers to offsets down to the log end after a cut."""
        self._bases = [s.base_offset for s in self.segments]
        active = self.active
        self.rolled_unflushed = [s for s in self.rolled_unflushed if s is not active and s in self.segments]
        leo = active.next_offset
        self.recovery_point = min(self.recovery_point, leo)
        self._log_start = min(self._log_start, leo)  # Kafka: logStartOffset = min(target, logStartOffset)
        self._hw = min(self._hw, leo) if self._replicated else leo
        if isinstance(self.cleaner_state, int) and self.cleaner_state > leo:
            self.cleaner_state = active.base_offset  # the compactor's next pass starts no later
        # Producer and transaction state (Kafka's truncateAndReload): snapshots past the new
        # end go, and the state is replayed from the latest one left (transactions.py).
        self._load_transactions()
        self._forget_epoch_file()
        self.epochs.truncate_from_end(leo)

    def _forget_epoch_file(self) -> None:
        """A cache kept in memory (not replicated) may now differ from its file in the
        middle, where opening could not tell: remove the file, opening then rebuilds the
        cache from the log."""
        if self._replicated or self._epoch_file is None:
            return
        self._epochs_on_disk = None
        try:
            self._epoch_file.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s: cannot remove %s (%s); the log is checked against it when opened",
                        self.directory.name, self._epoch_file, exc)
