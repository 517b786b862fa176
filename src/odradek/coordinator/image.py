"""What the coordinator knows of the cluster: an immutable picture of the topics.

The broker builds a new `MetadataImage` whenever topics change and hands it to the
coordinator runtime, which compares subscriptions against it (KIP-848 "Group Epoch":
partition metadata changes bump the epoch). Nothing here reads live broker state, so the
simulator can hand in any picture it likes.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field

from .consumer.model import TopicMeta


@dataclass(frozen=True)
class MetadataImage:
    topics: dict[str, TopicMeta] = field(default_factory=dict)  # by name, internal topics excluded
    racks: frozenset[str] = frozenset()  # racks holding replicas (every partition, one broker here)
    # Kafka's metadata offset: numbered upwards, across restarts too. A regex resolution
    # records the version it saw and is refreshed once a later image creates a topic.
    version: int = 0

    @classmethod
    def of(cls, topics: list[tuple[str, uuid.UUID, int]], racks=(), version: int = 0) -> MetadataImage:
        return cls({n: TopicMeta(i, n, p) for n, i, p in topics}, frozenset(racks), version)

    def by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._ids.get(topic_id)

    @functools.cached_property
    def _ids(self) -> dict[uuid.UUID, TopicMeta]:
        return {t.topic_id: t for t in self.topics.values()}
