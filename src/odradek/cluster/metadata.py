"""Cluster metadata: the cluster id, this broker, and the topics with their ids.

Theory of operation: one JSON document (`__cluster_metadata.json` in the data
directory) holds every topic's name, UUID topic id, partition count and config
overrides. It is rewritten atomically (write to a temporary file, fsync, rename) on
every change, so a crash leaves either the old or the new document. Topic ids come
from an injected generator: a deleted and recreated topic gets a fresh id, and ids
are stable across restarts because they are read back from the document.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .names import INTERNAL_TOPICS, collision_key

METADATA_FILE = "__cluster_metadata.json"


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicExists(Exception):
    pass


class TopicCollision(Exception):
    pass


def _random_uuid() -> uuid.UUID:
    while True:
        u = uuid.uuid4()
        if u.int != 0:  # the zero UUID means "no topic id" on the wire
            return u


class MetadataStore:
    def __init__(self, data_dir: Path, new_id: Callable[[], uuid.UUID] = _random_uuid) -> None:
        self.data_dir = data_dir
        self.path = data_dir / METADATA_FILE
        self.new_id = new_id
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.cluster_id = ""
        self.producer_id_block_end = 0  # producer ids below this were handed out (or reserved)
        self._next_producer_id = 0
        # KIP-848 "Dynamic Group Configuration": per-group overrides live with the cluster's
        # metadata, not with the group, so they exist before a group and survive its deletion.
        self.group_configs: dict[str, dict[str, str]] = {}
        self._load()

    def _load(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            # Kafka's cluster ids are 22-character URL-safe base64 UUIDs.
            import base64

            self.cluster_id = base64.urlsafe_b64encode(self.new_id().bytes).decode().rstrip("=")
            self._save()
            return
        doc = json.loads(self.path.read_text())
        self.cluster_id = doc["cluster_id"]
        self.producer_id_block_end = self._next_producer_id = int(doc.get("producer_id_block_end", 0))
        self.group_configs = {g: dict(c) for g, c in doc.get("group_configs", {}).items()}
        for t in doc["topics"]:
            topic = Topic(t["name"], uuid.UUID(t["id"]), int(t["partitions"]), dict(t.get("configs", {})))
            self.topics[topic.name] = topic
            self.by_id[topic.topic_id] = topic

    def _save(self) -> None:
        doc = {
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": [
                {"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            ],
            "group_configs": self.group_configs,
        }
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def allocate_producer_id(self, block: int = 1000) -> int:
        """A never-reused producer id: blocks are reserved on disk before use (as Kafka's
        controller hands out blocks), so a restart skips the rest of a block, never reuses."""
        if self._next_producer_id >= self.producer_id_block_end:
            self.producer_id_block_end = self._next_producer_id + block
            self._save()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self.by_id.get(topic_id)

    def check_create(self, name: str) -> None:
        if name in self.topics:
            raise TopicExists(name)
        key = collision_key(name)
        for other in self.topics:
            if collision_key(other) == key:
                raise TopicCollision(f"topic {name!r} collides with existing topic {other!r}")

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        self.check_create(name)
        topic = Topic(name, self.new_id(), partitions, dict(configs))
        self.topics[name] = topic
        self.by_id[topic.topic_id] = topic
        self._save()
        return topic

    def delete(self, name: str) -> Topic:
        topic = self.topics.pop(name)
        del self.by_id[topic.topic_id]
        self._save()
        return topic

    def set_partitions(self, name: str, count: int) -> None:
        self.topics[name].partitions = count
        self._save()

    def set_group_config(self, group_id: str, values: dict[str, str]) -> None:
        if values:
            self.group_configs[group_id] = dict(values)
        else:
            self.group_configs.pop(group_id, None)
        self._save()
