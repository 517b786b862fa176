"""odradek's Kafka client: producer, consumer (manual and group, KIP-848 or classic), admin.

`AsyncProducer`, `AsyncConsumer`, `AsyncAdmin` are the asyncio API; `Producer`,
`Consumer`, `Admin` the synchronous facade. The protocol cores they drive are sans-I/O:
`wire` (framing, correlation ids), `membership` (KIP-848 member), `classic` (classic
member), `accumulator` (producer batching), `fetcher` (positions and fetches),
`readreplica` (KIP-392 fetch from the closest replica), `validation` (KIP-320).
"""

from .admin import (
    AsyncAdmin,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
)
from .cluster import TopicPartition
from .consumer import AsyncConsumer, RebalanceListener
from .errors import (
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    LogTruncationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
    UnsupportedApiError,
)
from .fetcher import ConsumerRecord
from .offsets import OffsetAndMetadata, OffsetAndTimestamp
from .producer import AsyncProducer, RecordMetadata
from .sync import Admin, Consumer, Producer
from .transaction import GroupMetadata

__all__ = [
    "Admin", "AsyncAdmin", "AsyncConsumer", "AsyncProducer", "Consumer", "ConsumerRecord", "GroupDescription",
    "GroupListing", "GroupMetadata", "IllegalStateError", "KafkaConnectionError", "KafkaError", "KafkaTimeoutError",
    "LogTruncationError", "MemberDescription", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "Producer", "RebalanceListener",
    "RecordMetadata", "TopicPartition", "TransactionAbortableError", "TransactionAbortedError",
    "TransactionFatalError", "UnsupportedApiError",
]
