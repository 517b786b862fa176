"""Keeping a partition's leader epoch cache true to its log when the log is opened.

Theory of operation (Kafka's LogLoader): the cache file may be ahead of the log (an epoch
assigned before a write that never landed, a tail cut by recovery) or hold epochs below
the log start (retention since it was written), and a single-replica log keeps no file at
all (partition.py). The batches carry the truth, their stamped partition leader epochs:
the cache is cut to the log, checked against the first and last batch, and rebuilt from
the batches when they disagree, reading through only the segments where the epoch
changes. A mixin of PartitionLog, kept apart because it is only about loading.
"""

from __future__ import annotations

import logging

from ..records.batch import BatchHeader
from .epochs import UNDEFINED_EPOCH
from .errors import CorruptBatch

log = logging.getLogger("odradek.log.partition")


class EpochReconciliation:
    def _reconcile_epochs(self) -> None:
        """Kafka's LogLoader: the cache may be ahead of the log (an epoch assigned before
        a write that never landed, a tail cut by recovery) or hold epochs below the start
        (retention since the file was written). Then check it against the stamped epochs
        of the first and last batch, and rebuild it from the log if they disagree."""
        self.epochs.truncate_from_end(self.log_end_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        ends = self._end_batches()
        if ends is None:
            return
        start = self.log_start_offset
        first, last = ends
        ok = True
        for offset, h in ((max(first.base_offset, start), first), (last.base_offset, last)):
            if h.partition_leader_epoch >= 0 and self.epochs.epoch_for_offset(offset) != h.partition_leader_epoch:
                ok = False
        if last.partition_leader_epoch >= 0 and self.epochs.latest_epoch() != last.partition_leader_epoch:
            ok = False
        if not ok:
            self._rebuild_epochs(first, last)

    def _end_batches(self) -> tuple[BatchHeader, BatchHeader] | None:
        """(the batch holding the log start, the last batch), or None when the log holds
        no batch at or past its start or a header on the way does not parse (reads
        report that; the cache is then left as loaded)."""
        start = self.log_start_offset
        try:
            first = None
            for seg in self.segments[self._segment_index(start):]:
                first = seg.find(start)
                if first is not None:
                    break
            if first is None:
                return None
            last = None
            for seg in reversed(self.segments):
                if seg.size:
                    last = seg.find(seg.next_offset - 1)
                    break
        except CorruptBatch:
            return None
        return (first, last) if last is not None else None

    def _rebuild_epochs(self, first: BatchHeader, last: BatchHeader) -> None:
        """The cache from the batches' stamped epochs (Kafka instead re-reads only the
        segments it recovers). Epochs never decrease along a log, so a log whose first
        and last batch share an epoch (every single-replica log) holds that one only;
        otherwise a segment whose first batch has the epoch of the next segment's first
        batch (or, for the last, of its own last batch) holds that epoch only, and only
        the segments where the epoch changes are read through."""
        start = self.log_start_offset
        # No file is the rule for a single replica (module docstring): nothing to report.
        level = logging.WARNING if len(self.epochs) else logging.DEBUG
        log.log(level, "%s: the leader epoch cache %s does not match the log: rebuilding it from the batches",
                self.directory.name, self.epochs.entries())
        self.epochs.clear()
        if first.partition_leader_epoch == last.partition_leader_epoch:
            self.epochs.assign(first.partition_leader_epoch, max(first.base_offset, start))
            return
        segments = [s for s in self.segments if s.size and s.next_offset > start]
        firsts = [s.batch_at(0) for s in segments]
        for i, (seg, head) in enumerate(zip(segments, firsts)):
            if head is None:
                continue
            if i + 1 < len(segments) and firsts[i + 1] is not None:
                following = firsts[i + 1].partition_leader_epoch
            else:
                try:
                    end = seg.find(seg.next_offset - 1)
                except CorruptBatch:
                    end = None  # read the segment through: its headers stop at the damage
                following = end.partition_leader_epoch if end is not None else UNDEFINED_EPOCH
            if head.partition_leader_epoch == following:  # one epoch, with data at or past the start
                self.epochs.assign(head.partition_leader_epoch, max(head.base_offset, start))
                continue
            for h in seg.headers():
                if h.last_offset >= start:
                    self.epochs.assign(h.partition_leader_epoch, max(h.base_offset, start))
        log.log(level, "%s: leader epoch cache rebuilt: %s", self.directory.name, self.epochs.entries())
