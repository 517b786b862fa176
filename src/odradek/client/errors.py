"""Errors the odradek client raises.

Theory of operation: every failure a caller can see is a `KafkaError` carrying the
Kafka error code (kio's `ErrorCode`, so `err.code.name` is Kafka's own name in
snake case) and whether retrying can help. Transport problems (refused connection,
broker gone mid-request, timeout) are `KafkaConnectionError`/`KafkaTimeoutError`,
which are retriable like Kafka's NETWORK_EXCEPTION and REQUEST_TIMED_OUT.
`UnsupportedApiError` names the API a broker does not advertise (for example a
broker with no group APIs), so the caller learns what is missing instead of
getting a closed connection.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

# Kafka's RetriableException subclasses, by code: the operation may succeed if repeated
# (after a metadata refresh or coordinator rediscovery where that applies).
RETRIABLE = frozenset({
    ErrorCode.corrupt_message,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.kafka_storage_error,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.offset_not_available,
    ErrorCode.preferred_leader_not_available,
    ErrorCode.eligible_leaders_not_available,
    ErrorCode.rebalance_in_progress,
    ErrorCode.unstable_offset_commit,
    ErrorCode.throttling_quota_exceeded,
})

# Codes after which the coordinator must be looked up again (FindCoordinator).
COORDINATOR_MOVED = frozenset({
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
})

# Codes after which partition leadership must be refreshed (Metadata).
STALE_METADATA = frozenset({
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.kafka_storage_error,
})


class KafkaError(Exception):
    """A Kafka error code from a response, or a client-side failure mapped onto one."""

    def __init__(self, code: ErrorCode | int, message: str | None = None, *, retriable: bool | None = None) -> None:
        self.code = code if isinstance(code, ErrorCode) else ErrorCode(int(code))
        self.retriable = self.code in RETRIABLE if retriable is None else retriable
        text = self.code.name.upper()
        super().__init__(f"{text}: {message}" if message else text)

    @property
    def name(self) -> str:
        """Kafka's name for the code, e.g. FENCED_MEMBER_EPOCH."""
        return self.code.name.upper()


class KafkaConnectionError(KafkaError):
    """The connection failed or was closed before the response arrived."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.network_exception, message, retriable=True)


class KafkaTimeoutError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.request_timed_out, message, retriable=True)


class UnsupportedApiError(KafkaError):
    """The broker does not serve an API (or no version both sides speak)."""

    def __init__(self, api_name: str, api_key: int, detail: str) -> None:
        self.api_name = api_name
        self.api_key = api_key
        super().__init__(ErrorCode.unsupported_version, f"broker does not support {api_name} (api key {api_key}): {detail}",
                         retriable=False)


class LogTruncationError(KafkaError):
    """KIP-320: the log under the consumer's position was truncated (an unclean leader
    election lost records it had read) and auto_offset_reset is none: Java's
    LogTruncationException (an OffsetOutOfRangeException, hence the code). `divergent_offsets`
    maps each partition to the first offset known to diverge, None when the leader knows no
    epoch that old. The position is left as it was: seek() to go on."""

    def __init__(self, divergent_offsets: dict, message: str) -> None:
        super().__init__(ErrorCode.offset_out_of_range, message, retriable=False)
        self.divergent_offsets = dict(divergent_offsets)


class IllegalStateError(Exception):
    """The call is not allowed in the client's current state (e.g. poll with no subscription)."""


def check(code: ErrorCode | int, message: str | None = None) -> None:
    """Raise KafkaError unless `code` is NONE."""
    if code:
        raise KafkaError(code, message)


# ---------------------------------------------------------------- transactions (KIP-98)

# Errors after which a transactional producer can do nothing more but close: a newer
# instance with the same transactional id fenced this one (KIP-98 "zombie fencing"; an
# old coordinator still says INVALID_PRODUCER_EPOCH for PRODUCER_FENCED, and librdkafka
# normalises both to _FENCED), or it is not allowed to use the id at all.
TXN_FATAL = frozenset({
    ErrorCode.producer_fenced,
    ErrorCode.invalid_producer_epoch,
    ErrorCode.transactional_id_authorization_failed,
    ErrorCode.cluster_authorization_failed,
})


class TransactionAbortableError(KafkaError):
    """The current transaction failed and can only be aborted: call `abort_transaction()`,
    then begin a new one (Java's abortable error state, confluent-kafka's
    `txn_requires_abort()`). `code` is the error that failed it."""

    txn_requires_abort = True

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        super().__init__(code, message, retriable=False)


class TransactionFatalError(KafkaError):
    """The transactional producer is unusable (fenced by a newer instance, not authorized,
    or its coordinator answered what no retry can fix): close it (Java's fatal error state,
    confluent-kafka's `fatal()`). `code` says why, e.g. PRODUCER_FENCED."""

    fatal = True

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        super().__init__(code, message, retriable=False)


class TransactionAbortedError(KafkaError):
    """A record that was still queued when its transaction was aborted: it was never sent
    (Java's TransactionAbortedException, librdkafka's _PURGE_QUEUE)."""

    def __init__(self, message: str = "the transaction was aborted before the record was sent") -> None:
        super().__init__(ErrorCode.operation_not_attempted, message, retriable=False)
