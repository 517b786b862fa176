"""The exception coordinator handlers raise; the codes are protocol/errors.py's.

A `CoordinatorError` is the client's fault (DESIGN principle 8): handlers catch it and
answer with its code and message; anything else escaping a handler is our bug.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class CoordinatorError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CoordinatorUnavailable(LookupError):
    """The group's shard cannot be served here now; the client looks the coordinator up again.

    NOT_COORDINATOR: the shard is not loaded on this broker (never elected, resigned,
    failed to load) or the log refused a write (Kafka maps KafkaStorageException and
    NotLeaderOrFollower to it). COORDINATOR_LOAD_IN_PROGRESS: it is being loaded.
    COORDINATOR_NOT_AVAILABLE: the write could not be committed (too few replicas, timed out).
    """

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


def error_code_for(exc: BaseException) -> ErrorCode:
    """The code a request gets when its operation failed with `exc` (Kafka's
    GroupCoordinatorService.normalizeException): an unavailable coordinator says which
    way; anything else is UNKNOWN_SERVER_ERROR, never a closed connection."""
    if isinstance(exc, (CoordinatorUnavailable, CoordinatorError)):
        return exc.code
    return ErrorCode.unknown_server_error
