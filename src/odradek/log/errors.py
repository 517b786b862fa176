"""What can go wrong with stored data, and whose fault it is.

Theory of operation: every failure of the log layer reaches the broker as one of these,
never as a bare OSError, so a handler can answer with the error Kafka gives instead of
closing the connection with a traceback:

- `StorageError`: an operation on the disk failed and was undone (a write cut back to
  its last good size). Clients get KAFKA_STORAGE_ERROR, which Kafka's clients retry.
  `transient` tells the log directory's health whether the disk itself is suspect:
  a full disk (ENOSPC, EDQUOT) or a descriptor shortage (EMFILE, ENFILE) is not; an
  I/O error is.
- `LogDirOffline`: the log directory was taken offline after a failure that cannot
  be undone or kept recurring (Kafka's LogDirFailureChannel); every partition in it
  answers KAFKA_STORAGE_ERROR until the broker restarts on a healthy disk.
- `PartitionOffline`: one partition's stored data cannot be served safely (a batch its
  index cannot hold, a segment cut short after it was flushed); the others serve.
- `CorruptBatch`: a stored batch fails its CRC32C. Reads answer CORRUPT_MESSAGE for
  that offset, as Kafka's consumers would if the bytes reached them.
"""

from __future__ import annotations

import errno

# Failures that say nothing about the health of the disk: space or descriptors ran out.
TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE})


class StorageError(Exception):
    undone = True  # the failed operation left no trace (False: the segment is suspect)

    def __init__(self, message: str, cause: OSError | None = None) -> None:
        super().__init__(message)
        self.cause = cause

    @property
    def errno(self) -> int | None:
        return self.cause.errno if self.cause is not None else None

    @property
    def transient(self) -> bool:
        return self.errno in TRANSIENT_ERRNOS


class LogDirOffline(StorageError):
    pass


class PartitionOffline(StorageError):
    pass


class SegmentDamaged(Exception):
    """A flushed segment's structure is broken at `offset` (raised while loading)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class CorruptBatch(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def storage_error(what: str, exc: OSError) -> StorageError:
    return StorageError(f"{what}: {exc.strerror or exc}", exc)
