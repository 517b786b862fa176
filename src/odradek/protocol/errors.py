"""Kafka error codes by Kafka's names: the one table the broker and the coordinator answer with.

kio's `ErrorCode` enumerates every code; these aliases give the handlers Kafka's spelling
(`NOT_COORDINATOR`, not `ErrorCode.not_coordinator`). Add a name here when a handler needs
one; never define a code in a second module (the replication and security rooms import
from here too).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.coordinator_load_in_progress
COORDINATOR_NOT_AVAILABLE = ErrorCode.coordinator_not_available
CORRUPT_MESSAGE = ErrorCode.corrupt_message
FENCED_INSTANCE_ID = ErrorCode.fenced_instance_id
FENCED_LEADER_EPOCH = ErrorCode.fenced_leader_epoch
FENCED_MEMBER_EPOCH = ErrorCode.fenced_member_epoch
FETCH_SESSION_ID_NOT_FOUND = ErrorCode.fetch_session_id_not_found
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found
GROUP_MAX_SIZE_REACHED = ErrorCode.group_max_size_reached
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.group_subscribed_to_topic
ILLEGAL_GENERATION = ErrorCode.illegal_generation
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.inconsistent_group_protocol
INVALID_CONFIG = ErrorCode.invalid_config
INVALID_GROUP_ID = ErrorCode.invalid_group_id
INVALID_PARTITIONS = ErrorCode.invalid_partitions
INVALID_PRODUCER_EPOCH = ErrorCode.invalid_producer_epoch
INVALID_RECORD = ErrorCode.invalid_record
INVALID_REGULAR_EXPRESSION = ErrorCode.invalid_regular_expression
INVALID_REPLICATION_FACTOR = ErrorCode.invalid_replication_factor
INVALID_REPLICA_ASSIGNMENT = ErrorCode.invalid_replica_assignment
INVALID_REQUEST = ErrorCode.invalid_request
INVALID_REQUIRED_ACKS = ErrorCode.invalid_required_acks
INVALID_SESSION_TIMEOUT = ErrorCode.invalid_session_timeout
INVALID_TOPIC_EXCEPTION = ErrorCode.invalid_topic_exception
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
LEADER_NOT_AVAILABLE = ErrorCode.leader_not_available
MEMBER_ID_REQUIRED = ErrorCode.member_id_required
MESSAGE_TOO_LARGE = ErrorCode.message_too_large
NONE = ErrorCode.none
NON_EMPTY_GROUP = ErrorCode.non_empty_group
NOT_COORDINATOR = ErrorCode.not_coordinator
NOT_ENOUGH_REPLICAS = ErrorCode.not_enough_replicas
NOT_ENOUGH_REPLICAS_AFTER_APPEND = ErrorCode.not_enough_replicas_after_append
NOT_LEADER_OR_FOLLOWER = ErrorCode.not_leader_or_follower
OFFSET_METADATA_TOO_LARGE = ErrorCode.offset_metadata_too_large
OFFSET_NOT_AVAILABLE = ErrorCode.offset_not_available
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.out_of_order_sequence_number
POLICY_VIOLATION = ErrorCode.policy_violation
REBALANCE_IN_PROGRESS = ErrorCode.rebalance_in_progress
RECORD_LIST_TOO_LARGE = ErrorCode.record_list_too_large
REQUEST_TIMED_OUT = ErrorCode.request_timed_out
STALE_MEMBER_EPOCH = ErrorCode.stale_member_epoch
TOPIC_ALREADY_EXISTS = ErrorCode.topic_already_exists
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.transactional_id_authorization_failed
UNKNOWN_LEADER_EPOCH = ErrorCode.unknown_leader_epoch
UNKNOWN_MEMBER_ID = ErrorCode.unknown_member_id
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
UNKNOWN_TOPIC_ID = ErrorCode.unknown_topic_id
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
UNRELEASED_INSTANCE_ID = ErrorCode.unreleased_instance_id
UNSUPPORTED_ASSIGNOR = ErrorCode.unsupported_assignor
UNSUPPORTED_VERSION = ErrorCode.unsupported_version

# Transactions (KIP-98, KIP-447, KIP-588).
CONCURRENT_TRANSACTIONS = ErrorCode.concurrent_transactions
INVALID_PRODUCER_ID_MAPPING = ErrorCode.invalid_producer_id_mapping
INVALID_TRANSACTION_TIMEOUT = ErrorCode.invalid_transaction_timeout
INVALID_TXN_STATE = ErrorCode.invalid_txn_state
OPERATION_NOT_ATTEMPTED = ErrorCode.operation_not_attempted
PRODUCER_FENCED = ErrorCode.producer_fenced
TRANSACTIONAL_ID_NOT_FOUND = ErrorCode.transactional_id_not_found
TRANSACTION_COORDINATOR_FENCED = ErrorCode.transaction_coordinator_fenced
UNKNOWN_PRODUCER_ID = ErrorCode.unknown_producer_id
UNSTABLE_OFFSET_COMMIT = ErrorCode.unstable_offset_commit

# Security (SASL, KIP-43/152/368; SCRAM credentials, KIP-554; ACLs, KIP-11/140).
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.cluster_authorization_failed
DUPLICATE_RESOURCE = ErrorCode.duplicate_resource
GROUP_AUTHORIZATION_FAILED = ErrorCode.group_authorization_failed
ILLEGAL_SASL_STATE = ErrorCode.illegal_sasl_state
RESOURCE_NOT_FOUND = ErrorCode.resource_not_found
SASL_AUTHENTICATION_FAILED = ErrorCode.sasl_authentication_failed
SECURITY_DISABLED = ErrorCode.security_disabled
TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed
UNACCEPTABLE_CREDENTIAL = ErrorCode.unacceptable_credential
UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism

# What a refused TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID resource is answered with.
AUTHORIZATION_FAILED = {"TOPIC": TOPIC_AUTHORIZATION_FAILED, "GROUP": GROUP_AUTHORIZATION_FAILED,
                        "CLUSTER": CLUSTER_AUTHORIZATION_FAILED,
                        "TRANSACTIONAL_ID": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
