"""Error codes used by the handlers, by Kafka name, plus the connection-closing signal."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

NONE = ErrorCode.none
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range
CORRUPT_MESSAGE = ErrorCode.corrupt_message
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
MESSAGE_TOO_LARGE = ErrorCode.message_too_large
INVALID_TOPIC_EXCEPTION = ErrorCode.invalid_topic_exception
RECORD_LIST_TOO_LARGE = ErrorCode.record_list_too_large
INVALID_REQUIRED_ACKS = ErrorCode.invalid_required_acks
UNSUPPORTED_VERSION = ErrorCode.unsupported_version
TOPIC_ALREADY_EXISTS = ErrorCode.topic_already_exists
INVALID_PARTITIONS = ErrorCode.invalid_partitions
INVALID_REPLICATION_FACTOR = ErrorCode.invalid_replication_factor
INVALID_REPLICA_ASSIGNMENT = ErrorCode.invalid_replica_assignment
INVALID_CONFIG = ErrorCode.invalid_config
INVALID_REQUEST = ErrorCode.invalid_request
INVALID_RECORD = ErrorCode.invalid_record
UNKNOWN_TOPIC_ID = ErrorCode.unknown_topic_id
FETCH_SESSION_ID_NOT_FOUND = ErrorCode.fetch_session_id_not_found
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.out_of_order_sequence_number
INVALID_PRODUCER_EPOCH = ErrorCode.invalid_producer_epoch
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.transactional_id_authorization_failed
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
POLICY_VIOLATION = ErrorCode.policy_violation
LEADER_NOT_AVAILABLE = ErrorCode.leader_not_available


class CloseConnection(Exception):
    """The request cannot be answered; Kafka closes the connection in this case."""
