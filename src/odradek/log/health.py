"""The health of a log directory: a two-state machine fed with storage failures.

Theory of operation (Kafka's LogDirFailureChannel, with one difference): the directory
is ONLINE until a failure says the disk itself cannot be trusted, then OFFLINE for the
rest of the process's life; Kafka's operators replace the disk and restart the broker,
and so do odradek's.

- A full disk (ENOSPC, EDQUOT) or a descriptor shortage (EMFILE, ENFILE) is transient:
  the write was undone, the client gets KAFKA_STORAGE_ERROR and retries, and writes
  resume by themselves once space or descriptors come back. Kafka takes the directory
  offline even for a full disk; odradek does not, because an undone write leaves
  nothing to distrust and a disk that fills up usually empties again.
- Any other I/O error (EIO, EROFS, ...), or a failed write that could not be undone,
  takes the directory offline at once, as Kafka does for every IOException.

Nothing here does I/O; callers record what they saw and read `offline`/`reason`.
"""

from __future__ import annotations

from enum import Enum

from .errors import StorageError


class DirState(Enum):
    ONLINE = "online"
    OFFLINE = "offline"


class Failure(Enum):
    TRANSIENT = "transient"  # full disk, no descriptors: undone, retried by clients
    FATAL = "fatal"  # the disk misbehaves, or a failed write could not be undone


# (state, failure) -> next state. OFFLINE is terminal.
TRANSITIONS: dict[tuple[DirState, Failure], DirState] = {
    (DirState.ONLINE, Failure.TRANSIENT): DirState.ONLINE,
    (DirState.ONLINE, Failure.FATAL): DirState.OFFLINE,
    (DirState.OFFLINE, Failure.TRANSIENT): DirState.OFFLINE,
    (DirState.OFFLINE, Failure.FATAL): DirState.OFFLINE,
}


def classify(exc: StorageError) -> Failure:
    if exc.transient and exc.undone:
        return Failure.TRANSIENT
    return Failure.FATAL


class LogDirHealth:
    def __init__(self) -> None:
        self.state = DirState.ONLINE
        self.reason = ""
        self.transient_failures = 0

    @property
    def offline(self) -> bool:
        return self.state is DirState.OFFLINE

    def record(self, exc: StorageError) -> DirState:
        failure = classify(exc)
        if failure is Failure.TRANSIENT:
            self.transient_failures += 1
        new = TRANSITIONS[(self.state, failure)]
        if new is DirState.OFFLINE and not self.offline:
            self.reason = str(exc)
        self.state = new
        return new
