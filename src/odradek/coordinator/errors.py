"""Kafka error codes the coordinator answers with, and the exception handlers raise.

A `CoordinatorError` is the client's fault (DESIGN principle 8): handlers catch it and
answer with its code and message; anything else escaping a handler is our bug.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

NONE = ErrorCode.none
COORDINATOR_NOT_AVAILABLE = ErrorCode.coordinator_not_available
NOT_COORDINATOR = ErrorCode.not_coordinator
INVALID_REQUEST = ErrorCode.invalid_request
INVALID_GROUP_ID = ErrorCode.invalid_group_id
UNKNOWN_MEMBER_ID = ErrorCode.unknown_member_id
ILLEGAL_GENERATION = ErrorCode.illegal_generation
FENCED_INSTANCE_ID = ErrorCode.fenced_instance_id
FENCED_MEMBER_EPOCH = ErrorCode.fenced_member_epoch
STALE_MEMBER_EPOCH = ErrorCode.stale_member_epoch
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found
GROUP_MAX_SIZE_REACHED = ErrorCode.group_max_size_reached
NON_EMPTY_GROUP = ErrorCode.non_empty_group
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.group_subscribed_to_topic
INVALID_REGULAR_EXPRESSION = ErrorCode.invalid_regular_expression
UNRELEASED_INSTANCE_ID = ErrorCode.unreleased_instance_id
UNSUPPORTED_ASSIGNOR = ErrorCode.unsupported_assignor
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
UNKNOWN_TOPIC_ID = ErrorCode.unknown_topic_id
OFFSET_METADATA_TOO_LARGE = ErrorCode.offset_metadata_too_large
REBALANCE_IN_PROGRESS = ErrorCode.rebalance_in_progress
INVALID_CONFIG = ErrorCode.invalid_config
UNSUPPORTED_VERSION = ErrorCode.unsupported_version
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.inconsistent_group_protocol
INVALID_SESSION_TIMEOUT = ErrorCode.invalid_session_timeout
MEMBER_ID_REQUIRED = ErrorCode.member_id_required


class CoordinatorError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
