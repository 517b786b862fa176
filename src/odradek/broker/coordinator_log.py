"""A coordinator's internal topic as its runtime sees it: `__consumer_offsets` for the group
coordinator, `__transaction_state` for the transaction coordinator.

Both coordinators keep their state in a compacted topic whose partition count places their
keys (a group, a transactional id) and so can never change once the topic exists; both
create it on first use (Kafka's FindCoordinator creates it, and InitProducerId for a
transactional id) with at most one creation in flight per broker, capping the replication
factor at the brokers registered; and both append their records under the same rules:

- only the partition's leader writes (KIP-848 "Fencing" of the coordinator itself: else
  NOT_COORDINATOR);
- nor does a leader that cannot count on its cluster lease (it may have been replaced
  after a SIGSTOP): NOT_COORDINATOR;
- as Kafka's acks=-1 coordinator appends, a partition whose ISR is below
  `min.insync.replicas` takes nothing: COORDINATOR_NOT_AVAILABLE (Kafka's mapping of
  NOT_ENOUGH_REPLICAS);
- a write the disk refuses is reported to the log directory's health and raised as
  NOT_COORDINATOR (GroupCoordinatorService.normalizeException maps KafkaStorageException so).

`CoordinatorLog` holds those rules once; each coordinator gives it its topic's name, the
settings that shape it, and encodes its own records.
"""

from __future__ import annotations

import asyncio

from ..cluster.metadata import TopicExists
from ..coordinator.errors import CoordinatorUnavailable
from ..log.errors import StorageError
from ..protocol.errors import COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, NOT_ENOUGH_REPLICAS
from ..records.batch import read_header

SINGLE_NODE_EPOCH = 0  # the leader epoch of every coordinator partition on a single broker


class CoordinatorLog:
    def __init__(self, broker, topic: str, partitions: int, partitions_setting: str, replication_factor: int,
                 configs: dict[str, str], min_isr: int | None = None) -> None:
        self.broker = broker
        self.topic = topic
        self.partitions = partitions
        self.partitions_setting = partitions_setting  # named when the topic disagrees with it
        self.replication_factor = replication_factor
        self.configs = configs
        self.min_isr = min_isr  # None: the broker's default min.insync.replicas
        self.epochs: dict[int, int] = {}  # partitions led here -> leader epoch
        self._creating: asyncio.Future | None = None

    # --- the topic ------------------------------------------------------------------------

    @property
    def exists(self) -> bool:
        return self.broker.metadata.get(self.topic) is not None

    @property
    def creating(self) -> bool:
        return self._creating is not None

    def enough_brokers(self) -> bool:
        """Whether the topic may be created now with its full replication factor (or no
        other broker can ever join: the embedded store)."""
        return self.broker.metadata.single_node or \
            len(self.broker.replicas.image.brokers) >= self.replication_factor

    async def ensure(self):
        """The topic, created if missing (one creation at a time per broker)."""
        if not self.exists:
            if self._creating is None:
                self._creating = asyncio.ensure_future(self.create())
                self._creating.add_done_callback(lambda _f: setattr(self, "_creating", None))
            await asyncio.shield(self._creating)
        return self.check()

    async def create(self) -> None:
        if self.exists:
            return
        # The factor is capped by the placement at the brokers registered now.
        configs = dict(self.configs)
        if self.min_isr is not None:
            brokers = 1 if self.broker.metadata.single_node else max(len(self.broker.replicas.image.brokers), 1)
            # A min ISR above the replicas the topic gets would refuse every write.
            configs["min.insync.replicas"] = str(min(self.min_isr, self.replication_factor, brokers))
        try:
            await self.broker.create_topics_async([(self.topic, self.partitions, configs)],
                                                  factors={self.topic: self.replication_factor})
        except TopicExists:  # another broker of the cluster created it first
            pass

    def check(self):
        """The topic (or None), refusing to run when its partition count is not the
        setting's: keys are placed by it, so Kafka never changes it after creation either."""
        topic = self.broker.metadata.get(self.topic)
        if topic is not None and topic.partitions != self.partitions:
            raise SystemExit(f"{self.topic} has {topic.partitions} partitions but {self.partitions_setting}="
                             f"{self.partitions}; the setting cannot change once the topic exists")
        return topic

    # --- the partitions -------------------------------------------------------------------

    def commits_on_write(self, partition: int) -> bool:
        """An unreplicated partition's records are committed once appended."""
        plog = self.broker.logs.opened(self.topic, partition)
        return plog is None or not plog.replicated

    def bounds(self, partition: int) -> tuple[int, int | None]:
        """(log end offset, high watermark or None when unreplicated) of a partition."""
        plog = self.broker.logs.opened(self.topic, partition)
        if plog is None:
            return 0, None
        return plog.log_end_offset, (plog.high_watermark if plog.replicated else None)

    def check_writable(self, partition: int) -> None:
        """CoordinatorUnavailable unless a write to `partition` may be appended now (the
        rules in the module's docstring)."""
        tp = (self.topic, partition)
        replicas = self.broker.replicas
        if not replicas.is_leader(tp):
            raise CoordinatorUnavailable(NOT_COORDINATOR, f"{self.topic}-{partition} is led elsewhere")
        if not self.broker.metadata.lease_current():
            raise CoordinatorUnavailable(NOT_COORDINATOR, f"{self.topic}-{partition}: this broker cannot "
                                                          "count on its lease, so may have been replaced")
        if replicas.append_error(tp, -1) == NOT_ENOUGH_REPLICAS:
            raise CoordinatorUnavailable(COORDINATOR_NOT_AVAILABLE, f"{self.topic}-{partition}: fewer in-sync "
                                                                    "replicas than min.insync.replicas")

    def append(self, partition: int, batch: bytearray, now_ms: int) -> int:
        """Append one batch the coordinator encoded to `partition` led here: its last offset.
        The log's own refusals (a fenced producer: SequenceError) reach the caller."""
        try:
            plog = self.broker.logs.get(self.topic, partition)
            # One batch we just encoded: its header is all append needs (no client validation, no second CRC pass).
            last = plog.append(batch, [read_header(batch)], now_ms,
                               self.epochs.get(partition, SINGLE_NODE_EPOCH)).last_offset
            self.broker.replicas.appended((self.topic, partition), plog)  # may move the HW at once (an ISR of one)
            return last
        except StorageError as exc:
            self.broker.storage_failed(exc)
            raise CoordinatorUnavailable(NOT_COORDINATOR, f"{self.topic}-{partition}: {exc}") from exc


__all__ = ["SINGLE_NODE_EPOCH", "CoordinatorLog"]
