"""The broker's side of the group coordinator: the `__consumer_offsets` log and the clock.

Theory of operation: the sans-I/O `CoordinatorRuntime` decides; this module gives it a
writer that appends each result's records as one RecordBatch to the shard's partition
of `__consumer_offsets` (a compacted topic, created at start-up with
`offsets.topic.num.partitions` partitions), loads every partition at start-up by
decoding its batches and replaying them, and tells the runtime when topics change.
"""

from __future__ import annotations

import logging
import time

from ..cluster.names import CONSUMER_OFFSETS
from ..coordinator import records as R
from ..coordinator.config import CoordinatorConfig
from ..coordinator.consumer.model import TopicMeta
from ..coordinator.image import MetadataImage
from ..coordinator.runtime import CoordinatorRuntime
from ..records.batch import read_header
from ..records.codec import encode_batch, key_values

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.config = CoordinatorConfig.from_properties(broker.config.extra)
        self._image_version = 0
        self.runtime = CoordinatorRuntime(
            self.config, self._write, self.build_image(), group_overrides=self._group_overrides,
        )
        self.load_time_ms = 0.0
        self.records_loaded = 0

    # --- plumbing -----------------------------------------------------------------------------

    def _group_overrides(self, group_id: str) -> dict[str, int]:
        raw = self.broker.metadata.group_configs.get(group_id)
        return {k: int(v) for k, v in raw.items()} if raw else {}

    def build_image(self) -> MetadataImage:
        self._image_version += 1
        topics = {
            t.name: TopicMeta(t.topic_id, t.name, t.partitions)
            for t in self.broker.metadata.topics.values()
            if not t.is_internal
        }
        racks = frozenset([self.broker.config.rack]) if self.broker.config.rack else frozenset()
        return MetadataImage(topics, racks, self._image_version)

    def topics_changed(self) -> None:
        self.runtime.update_image(self.build_image(), self.broker.clock())

    def ensure_topic(self):
        topic = self.broker.metadata.get(CONSUMER_OFFSETS)
        if topic is None:
            topic = self.broker.create_topic(CONSUMER_OFFSETS, self.config.offsets_topic_partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config.offsets_topic_segment_bytes),
            })
        elif topic.partitions != self.config.offsets_topic_partitions:
            # Kafka never changes this after creation either: group placement depends on it.
            raise SystemExit(
                f"{CONSUMER_OFFSETS} has {topic.partitions} partitions but offsets.topic.num.partitions="
                f"{self.config.offsets_topic_partitions}; the setting cannot change once the topic exists"
            )
        return topic

    def _write(self, partition: int, records: list[R.CoordinatorRecord], now_ms: int) -> None:
        plog = self.broker.logs.get(CONSUMER_OFFSETS, partition)
        rows = []
        for i, record in enumerate(records):
            key, value = R.encode(record)
            rows.append((i, now_ms, key, value))
        batch = bytearray(encode_batch(rows, base_offset=0))
        # One batch we just encoded: its header is all append needs (no client validation, no second CRC pass).
        plog.append(batch, [read_header(batch)], now_ms)

    def load_all(self) -> None:
        started = time.perf_counter()
        now = self.broker.clock()
        for p in range(self.config.offsets_topic_partitions):
            shard = self.runtime.load_bytes(p, self.read_partition(p), now)
            self.records_loaded += shard.records_replayed
        self.load_time_ms = (time.perf_counter() - started) * 1000
        if self.records_loaded:
            log.info("loaded %d coordinator records in %.1f ms", self.records_loaded, self.load_time_ms)

    def read_partition(self, partition: int):
        """Every stored (key, value) of a `__consumer_offsets` partition, oldest first."""
        plog = self.broker.logs.get(CONSUMER_OFFSETS, partition)
        for seg in list(plog.segments):
            yield from key_values(seg.pread(0, seg.size))

    def tick(self, now_ms: int | None = None) -> int:
        return self.runtime.tick(self.broker.clock() if now_ms is None else now_ms)
