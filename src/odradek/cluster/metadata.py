"""Cluster metadata: the cluster id, this broker, and the topics with their ids.

Theory of operation: the state lives in memory and on disk as a snapshot plus a journal,
like a log with a checkpoint:

- `__cluster_metadata.json`: a JSON snapshot (cluster id, topics with ids, partition
  counts and config overrides, producer-id block, group config overrides, dynamic
  broker configs) and the
  sequence number of the last journal entry it includes. Replaced atomically
  (temporary file, fsync, rename).
- `__cluster_metadata.log`: one JSON line per change *request*, appended and fsynced
  before the change is applied in memory. Creating 10,000 topics in one request is one
  line and one fsync; creating them in 10,000 requests is 10,000 short appends, never a
  rewrite of the whole document per topic (which made one Metadata request naming
  10,000 new topics take six minutes).

Loading reads the snapshot, then replays the journal entries newer than it; a torn last
line (a crash mid-append, never acknowledged) is dropped. When the journal grows past
the snapshot's size the snapshot is rewritten and the journal emptied, so both stay
proportional to the state.

A write that fails (a full disk) is undone, nothing in memory changes, and the caller
gets StorageError. Topic ids come from an injected generator: a deleted and recreated
topic gets a fresh id, and ids are stable across restarts because they are read back.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..log.errors import StorageError, storage_error
from ..log.files import replace_file
from .names import INTERNAL_TOPICS, collision_key

log = logging.getLogger(__name__)

METADATA_FILE = "__cluster_metadata.json"
JOURNAL_FILE = "__cluster_metadata.log"
MIN_COMPACT_BYTES = 1 << 20


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


class TopicRegistry:
    """Topics by name and by id, and the names they collide with: the read side every
    metadata backend shares (the file store here, etcd's mirror in etcd_mirror.py)."""

    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._collisions: dict[str, str] = {}  # collision key -> topic name

    def _add(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic
        self._collisions[collision_key(topic.name)] = topic.name

    def _remove(self, name: str) -> Topic:
        topic = self.topics.pop(name)
        self.by_id.pop(topic.topic_id, None)
        if self._collisions.get(collision_key(topic.name)) == topic.name:
            del self._collisions[collision_key(topic.name)]
        return topic

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self.by_id.get(topic_id)

    def check_create(self, name: str) -> None:
        """Raise TopicExists or TopicCollision (Kafka: '.' and '_' collide in metric names)."""
        if name in self.topics:
            raise TopicExists(name)
        other = self._collisions.get(collision_key(name))
        if other is not None:
            raise TopicCollision(f"topic {name!r} collides with existing topic {other!r}")

    def check_create_many(self, names: list[str]) -> None:
        """check_create for every name, and no two of them colliding with each other."""
        keys: dict[str, str] = {}
        for name in names:
            self.check_create(name)
            key = collision_key(name)
            if key in keys:
                raise (TopicExists(name) if keys[key] == name else
                       TopicCollision(f"topic {name!r} collides with topic {keys[key]!r} in the same request"))
            keys[key] = name


class MetadataStore(TopicRegistry):
    def __init__(self, data_dir: Path, new_id: Callable[[], uuid.UUID] = _random_uuid) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.path = data_dir / METADATA_FILE
        self.journal_path = data_dir / JOURNAL_FILE
        self.new_id = new_id
        self.cluster_id = ""
        self.producer_id_block_end = 0  # producer ids below this were handed out (or reserved)
        self._next_producer_id = 0
        # KIP-848 "Dynamic Group Configuration": per-group overrides live with the cluster's
        # metadata, not with the group, so they exist before a group and survive its deletion.
        self.group_configs: dict[str, dict[str, str]] = {}
        # Dynamic broker configs (Kafka's DynamicBrokerConfig): resource name -> {key: value},
        # "" the cluster-wide default, "<node id>" one broker. Changed in place only, so a
        # BrokerConfig attached to it (BrokerConfig.attach_dynamic) always sees the current one.
        self.broker_configs: dict[str, dict[str, str]] = {}
        # SCRAM credentials (KIP-554): user -> {mechanism: Kafka's credential string
        # "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>"}; never a password.
        self.user_scram: dict[str, dict[str, str]] = {}
        # ACLs (security/acl.py encodes them): resource pattern -> {entry: "1"}, as Kafka
        # keeps one ACL set per resource pattern. `acl_version` moves on every change.
        self.acls: dict[str, dict[str, str]] = {}
        self.acl_version = 0
        self._seq = 0  # last journal entry applied
        self._snapshot_seq = 0
        self._snapshot_bytes = 0
        self._journal_bytes = 0
        self._load()

    # --- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            # Kafka's cluster ids are 22-character URL-safe base64 UUIDs.
            self.cluster_id = base64.urlsafe_b64encode(self.new_id().bytes).decode().rstrip("=")
            self.journal_path.unlink(missing_ok=True)  # a journal without its snapshot is an aborted start
            self._snapshot()
            return
        raw = self.path.read_text()
        doc = json.loads(raw)
        self._snapshot_bytes = len(raw)
        self.cluster_id = doc["cluster_id"]
        self.producer_id_block_end = int(doc.get("producer_id_block_end", 0))
        self.group_configs = {g: dict(c) for g, c in doc.get("group_configs", {}).items()}
        self.broker_configs.update({r: dict(c) for r, c in doc.get("broker_configs", {}).items()})
        self.user_scram = {u: dict(c) for u, c in doc.get("user_scram", {}).items()}
        self.acls = {r: dict(c) for r, c in doc.get("acls", {}).items()}
        for t in doc["topics"]:
            self._add(Topic(t["name"], uuid.UUID(t["id"]), int(t["partitions"]), dict(t.get("configs", {}))))
        self._seq = self._snapshot_seq = int(doc.get("journal_seq", 0))
        self._replay_journal()
        self._next_producer_id = self.producer_id_block_end

    def _replay_journal(self) -> None:
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn: the request that wrote it was never answered
            try:
                entry = json.loads(line)
                seq = int(entry["seq"])
            except (ValueError, KeyError, TypeError):
                break
            if seq > self._seq:
                for op in entry["ops"]:
                    self._apply(op)
                self._seq = seq
            good += len(line)
        if good < len(data):
            log.warning("dropping %d bytes of a torn last entry in %s", len(data) - good, self.journal_path)
            with open(self.journal_path, "r+b") as f:
                f.truncate(good)
        self._journal_bytes = good

    # --- applying changes -----------------------------------------------------------------------

    # journal kind -> the dict it replaces entries of
    _NAMED = {"group_config": "group_configs", "broker_configs": "broker_configs", "user_scram": "user_scram",
              "acls": "acls"}

    def _apply(self, op: list[Any]) -> None:
        kind = op[0]
        if kind == "create":
            _, name, tid, partitions, configs = op
            self._add(Topic(name, uuid.UUID(tid), int(partitions), dict(configs)))
        elif kind == "delete":
            self._remove(op[1])
        elif kind == "partitions":
            self.topics[op[1]].partitions = int(op[2])
        elif kind in self._NAMED:
            # A named dict of settings replaced whole; empty removes it.
            target = getattr(self, self._NAMED[kind])
            if op[2]:
                target[op[1]] = dict(op[2])
            else:
                target.pop(op[1], None)
            if kind == "acls":
                self.acl_version += 1
        elif kind == "topic_configs":
            # Kafka's AlterConfigs / IncrementalAlterConfigs on a TOPIC: its whole set of overrides.
            self.topics[op[1]].configs = dict(op[2])
        elif kind == "producer_block":
            self.producer_id_block_end = int(op[1])
        else:
            raise ValueError(f"unknown metadata operation {kind!r}")

    def _commit(self, ops: list[list[Any]]) -> None:
        """Make `ops` durable, then apply them. Raises StorageError with nothing changed."""
        seq = self._seq + 1
        line = (json.dumps({"seq": seq, "ops": ops}, separators=(",", ":")) + "\n").encode()
        try:
            with open(self.journal_path, "ab") as f:
                start = f.tell()
                try:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(start)  # leave no torn line behind a refused change
                    raise
        except OSError as exc:
            raise storage_error(f"cannot write {self.journal_path}", exc) from exc
        for op in ops:
            self._apply(op)
        self._seq = seq
        self._journal_bytes += len(line)
        if self._journal_bytes > max(MIN_COMPACT_BYTES, self._snapshot_bytes):
            try:
                self._snapshot()
            except StorageError as exc:  # the journal still holds everything
                log.warning("%s; keeping the journal", exc)

    def _snapshot(self) -> None:
        doc = {
            "cluster_id": self.cluster_id,
            "journal_seq": self._seq,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": [
                {"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            ],
            "group_configs": self.group_configs,
            "broker_configs": self.broker_configs,
            "user_scram": self.user_scram,
            "acls": self.acls,
        }
        text = json.dumps(doc, separators=(",", ":"))
        try:
            replace_file(self.path, text)
            if self.journal_path.exists():
                with open(self.journal_path, "r+b") as f:
                    f.truncate(0)
        except OSError as exc:
            raise storage_error(f"cannot write {self.path}", exc) from exc
        self._snapshot_seq = self._seq
        self._snapshot_bytes = len(text)
        self._journal_bytes = 0

    def compact(self) -> None:
        """Fold the journal into the snapshot now (also done automatically)."""
        self._snapshot()

    # --- writes -------------------------------------------------------------------------------

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        return self.create_many([(name, partitions, configs)])[0]

    def create_many(self, specs: list[tuple[str, int, dict[str, str]]]) -> list[Topic]:
        """Create topics with one journal write; all or none (checks raise before writing)."""
        self.check_create_many([name for name, _, _ in specs])
        ops = [["create", name, str(self.new_id()), partitions, dict(configs)] for name, partitions, configs in specs]
        self._commit(ops)
        return [self.topics[name] for name, _, _ in specs]

    def delete(self, name: str) -> Topic:
        topic = self.topics[name]  # KeyError for an unknown topic
        self._commit([["delete", name]])
        return topic

    def set_partitions(self, name: str, count: int) -> None:
        self.set_partitions_many({name: count})

    def set_partitions_many(self, counts: dict[str, int]) -> None:
        self._commit([["partitions", name, count] for name, count in counts.items()])

    def set_group_config(self, group_id: str, values: dict[str, str]) -> None:
        self._commit([["group_config", group_id, dict(values)]])

    def set_configs(self, topics: dict[str, dict[str, str]] | None = None,
                    brokers: dict[str, dict[str, str]] | None = None,
                    groups: dict[str, dict[str, str]] | None = None,
                    users: dict[str, dict[str, str]] | None = None,
                    acls: dict[str, dict[str, str]] | None = None) -> None:
        """Replace the config overrides of topics, the dynamic configs of BROKER resources
        ("" or a node id), group overrides and users' SCRAM credentials (an empty dict
        removes the entry), all in one journal write (one AlterConfigs request). Raises KeyError for an unknown topic (before writing), StorageError with
        nothing changed."""
        ops: list[list[Any]] = []
        for name, configs in (topics or {}).items():
            if name not in self.topics:
                raise KeyError(name)
            ops.append(["topic_configs", name, dict(configs)])
        for resource, configs in (brokers or {}).items():
            ops.append(["broker_configs", resource, dict(configs)])
        for group_id, configs in (groups or {}).items():
            ops.append(["group_config", group_id, dict(configs)])
        for user, credentials in (users or {}).items():
            ops.append(["user_scram", user, dict(credentials)])
        for pattern, entries in (acls or {}).items():
            ops.append(["acls", pattern, dict(entries)])
        if ops:
            self._commit(ops)

    def allocate_producer_id(self, block: int = 1000) -> int:
        """A never-reused producer id: blocks are reserved on disk before use (as Kafka's
        controller hands out blocks), so a restart skips the rest of a block, never reuses."""
        if self._next_producer_id >= self.producer_id_block_end:
            self._commit([["producer_block", self._next_producer_id + block]])
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid
