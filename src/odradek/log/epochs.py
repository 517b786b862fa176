"""The leader epoch cache of one partition (Kafka's LeaderEpochFileCache).

Theory of operation: every record batch carries the epoch of the leader that appended
it (`partitionLeaderEpoch` in the batch header). The cache keeps, for each epoch found
in the log, the offset of its first batch: a list of (epoch, start_offset) entries,
strictly increasing in both. It is what lets replicas agree on a common history after
a leader change (KIP-101, KIP-279): a follower asks "where did my latest epoch end on
the leader?" (OffsetsForLeaderEpoch, API 23; the DivergingEpoch of Fetch v12+) and
truncates its log to that offset instead of to its high watermark, which could lose
acknowledged records or keep divergent ones. Consumers ask the same question to
validate their position after a leader change (KIP-320).

The log maintains it: `assign` when a batch with a newer epoch is appended,
`truncate_from_end` when the log is cut back (follower truncation, recovery),
`truncate_from_start` when the log start moves forward (retention, DeleteRecords).

The entries live in `leader-epoch-checkpoint` in the partition's directory, in Kafka's
LeaderEpochCheckpointFile layout: a version line (0), a count line, then
`epoch start_offset` per line, every line ending in a newline. Each change replaces
the file atomically before the cache itself changes, so a failed write (StorageError)
leaves both as they were. Kafka flushes after truncations asynchronously to spare the
fetcher an fsync; here every change is written at once, which also keeps the file and
the cache equal after a crash.

A missing or empty file is an empty cache. A malformed one (Kafka's reader throws and
the log directory goes offline) is logged and read as empty: the broker rebuilds the
cache from the batch headers of the log, which are the source of truth.
"""

from __future__ import annotations

import bisect
import logging
import re
from itertools import pairwise
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

from .errors import storage_error
from .files import replace_file

log = logging.getLogger(__name__)

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
VERSION = 0  # Kafka LeaderEpochCheckpointFile.CURRENT_VERSION
UNDEFINED_EPOCH = -1  # Kafka OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # Kafka OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET
MAX_EPOCH = (1 << 31) - 1  # an int32 on the wire and in Kafka's parser
MAX_OFFSET = (1 << 63) - 1

# Java's parseInt/parseLong: an optional sign and ASCII digits, nothing else (Python's
# int() would also take surrounding blanks, underscores and non-ASCII digits).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_epoch = attrgetter("epoch")
_start = attrgetter("start_offset")


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset for one partition, written to `path` on every change
    (`path=None`: in memory only, as in the simulator)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._entries: list[EpochEntry] = []

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """The cache of the partition in `directory`, from its checkpoint file; empty
        when the file is missing or malformed (the caller rebuilds it from the log)."""
        cache = cls(directory / LEADER_EPOCH_FILE)
        cache._entries = _read(cache.path)
        return cache

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {self._entries})"

    # Kafka LeaderEpochFileCache.assign
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed.

        Once assigned, an epoch's start only moves down: the same epoch again at the
        same or a later offset is the common case (every batch of the epoch) and is a
        no-op. Entries that would break monotonicity (epoch >= `epoch` or start >=
        `start_offset`) are removed first: they belong to a history that was truncated.
        """
        if epoch < 0:
            # No leader epoch (message format v0/v1). Kafka's cache throws here and its
            # callers (UnifiedLog, LogLoader) skip such batches; we skip them here.
            return False
        if not 0 <= start_offset <= MAX_OFFSET or epoch > MAX_EPOCH:
            raise ValueError(f"invalid leader epoch entry {epoch} {start_offset}")
        latest = self.latest_entry()
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        kept = list(self._entries)
        while kept and (kept[-1].epoch >= epoch or kept[-1].start_offset >= start_offset):
            kept.pop()
        removed = self._entries[len(kept):]
        # Kafka maybeTruncateNonMonotonicEntries: an entry replaced at the same offset
        # held no data and is expected; anything more means data was truncated.
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("%s: new epoch entry (%d, %d) truncated conflicting entries %s",
                        self._name(), epoch, start_offset, removed)
        return self._commit([*kept, EpochEntry(epoch, start_offset)])

    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    # Kafka LeaderEpochFileCache.epochForOffset
    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the entry covering `offset`; None below the first entry."""
        i = bisect.bisect_right(self._entries, offset, key=_start) - 1
        return self._entries[i].epoch if i >= 0 else None

    # Kafka LeaderEpochFileCache.endOffsetFor
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `requested_epoch`, the offset where it ended): the start of
        the next higher epoch, or `log_end_offset` for the latest epoch.

        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) for UNDEFINED_EPOCH, an empty cache or
        an epoch above the latest. Below the first epoch the answer is (requested, start
        of the first epoch), as in Kafka: the log before it is gone, and the follower
        should replicate from the leader's earliest known epoch boundary.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch():
            # The epoch still being written to ends at the log end (a consumer checking
            # its position, or a leader answering for its own epoch).
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._entries, requested_epoch, key=_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end
        return self._entries[higher - 1].epoch, end

    # Kafka LeaderEpochFileCache.truncateFromEnd
    def truncate_from_end(self, end_offset: int) -> bool:
        """The log now ends before `end_offset`: drop the epochs starting at or after it.
        A negative offset (UNDEFINED_EPOCH_OFFSET) changes nothing."""
        if end_offset < 0:
            return False
        return self._commit([e for e in self._entries if e.start_offset < end_offset])

    # Kafka LeaderEpochFileCache.truncateFromStart
    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop the epochs that ended before it, and
        the epoch covering it now starts there (so its first offset is still in the log).
        An offset before the first entry changes nothing."""
        below = bisect.bisect_right(self._entries, start_offset, key=_start)
        if below == 0:
            return False
        covering = EpochEntry(self._entries[below - 1].epoch, start_offset)
        return self._commit([covering, *self._entries[below:]])

    def clear(self) -> None:
        """Forget every entry; the file is rewritten even if the cache was empty
        (Kafka's clearAndFlush), which also replaces a malformed one."""
        self._commit([], force=True)

    def _commit(self, entries: list[EpochEntry], *, force: bool = False) -> bool:
        if entries == self._entries and not force:
            return False
        if self.path is not None:
            # Write first: if it fails the cache keeps matching the file, as a
            # StorageError promises. (Kafka changes the cache, then takes the log
            # directory offline when the write fails.)
            try:
                replace_file(self.path, _format(entries))
            except OSError as exc:
                raise storage_error(f"cannot write {self.path}", exc) from exc
        self._entries = entries
        return True

    def _name(self) -> str:
        return str(self.path) if self.path is not None else "in-memory leader epoch cache"


def _format(entries: list[EpochEntry]) -> str:
    body = "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
    return f"{VERSION}\n{len(entries)}\n{body}"


def _read(path: Path) -> list[EpochEntry]:
    fallback = "starting with an empty leader epoch cache, to be rebuilt from the log"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s (%s): %s", path, exc, fallback)
        return []
    try:
        return _parse(text)
    except ValueError as exc:
        log.warning("ignoring malformed %s (%s): %s", path, exc, fallback)
        return []


# Kafka CheckpointFile.CheckpointReadBuffer.read with LeaderEpochCheckpointFile's formatter
def _parse(text: str) -> list[EpochEntry]:
    lines = text.splitlines()
    # Kafka creates the file empty and reads a file without a count line as empty.
    if not lines:
        return []
    if (version := _integer(lines[0])) != VERSION:
        raise ValueError(f"version {version}")
    if len(lines) == 1:
        return []
    count = _integer(lines[1])
    entries = [_parse_entry(line) for line in lines[2:]]  # to the end, as Kafka reads
    if len(entries) != count:
        raise ValueError(f"{len(entries)} entries, header says {count}")
    # Kafka replays the entries through assign, which would silently drop the ones out
    # of order; such a file was not written by a cache, so the log decides instead.
    for before, after in pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset <= before.start_offset:
            raise ValueError(f"entry {tuple(after)} does not follow {tuple(before)}")
    return entries


def _parse_entry(line: str) -> EpochEntry:
    fields = line.split()
    if len(fields) != 2:
        raise ValueError(f"line {line!r}")
    epoch, start_offset = _integer(fields[0]), _integer(fields[1])
    if not (0 <= epoch <= MAX_EPOCH and 0 <= start_offset <= MAX_OFFSET):
        raise ValueError(f"entry out of range: {line!r}")  # Kafka's assign would throw
    return EpochEntry(epoch, start_offset)


def _integer(text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)
