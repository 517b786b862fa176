"""The one interface between a broker and its cluster metadata, and the embedded file store.

Theory of operation: a broker reads metadata synchronously from the backend's local
mirror (`topics`, `get`, `image()`, ...) and changes it only through the backend's
`async` writes, which return once the change is durable (fsynced to the journal, or
committed by etcd) and visible in the mirror. Every broker learns of every change,
its own included, through `subscribe`: the callback gets the image before and after.
Which backend is in use is decided once, by `open_backend`, from `--metadata`; nothing
else in the broker knows.

Implementations:
- `FileBackend`: today's single-node store (cluster/metadata.py), the embedded default.
  The node leads every partition at leader epoch 0 with itself as the whole ISR.
- `EtcdBackend` (cluster/etcd_store.py): etcd v3, for a replicated cluster.

The file store's writes never suspend, so code that must stay synchronous (the broker's
constructor creating `__consumer_offsets`, tests) completes them with `run_now`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .image import BrokerInfo, ClusterImage, PartitionState, TopicPartition
from .metadata import MetadataStore, Topic, TopicRegistry

T = TypeVar("T")
TopicSpec = tuple[str, int, dict[str, str]]  # name, partition count, config overrides
Listener = Callable[[ClusterImage, ClusterImage], None]


class Fenced(Exception):
    """A compare-and-set lost: the state it was based on is no longer current."""


class MetadataUnavailable(Exception):
    """The metadata store cannot be reached now; the caller retries or answers an error."""


class MetadataBackend(Protocol):
    cluster_id: str
    topics: dict[str, Topic]
    by_id: dict[uuid.UUID, Topic]
    group_configs: dict[str, dict[str, str]]
    broker_configs: dict[str, dict[str, str]]

    # --- reads: the local mirror, never I/O ---
    def get(self, name: str) -> Topic | None: ...
    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None: ...
    def check_create(self, name: str) -> None: ...
    def image(self) -> ClusterImage: ...
    def subscribe(self, listener: Listener) -> None: ...

    # Whether this store can only ever hold this broker (internal topics need not wait
    # for more brokers to register before they are created at their replication factor).
    single_node: bool

    # Whether this broker can be sure it has not been replaced as leader of what it leads
    # (its cluster registration surely lives); coordinators serve only while it is.
    def lease_current(self) -> bool: ...

    # --- lifecycle ---
    async def start(self, me: BrokerInfo) -> None: ...
    async def close(self) -> None: ...

    # --- writes: return once durable and visible in the mirror ---
    async def create_topics(self, specs: list[TopicSpec],
                            assignments: dict[str, list[tuple[int, ...]]] | None = None) -> list[Topic]: ...
    async def delete_topic(self, name: str) -> Topic: ...
    async def add_partitions(self, counts: dict[str, int],
                             assignments: dict[str, list[tuple[int, ...]]] | None = None) -> None: ...
    async def set_configs(self, topics: dict[str, dict[str, str]] | None = None,
                          brokers: dict[str, dict[str, str]] | None = None,
                          groups: dict[str, dict[str, str]] | None = None,
                          users: dict[str, dict[str, str]] | None = None,
                          acls: dict[str, dict[str, str]] | None = None) -> None: ...
    async def allocate_producer_id(self) -> int: ...
    async def alter_partition(self, tp: TopicPartition, expected: PartitionState,
                              new: PartitionState) -> PartitionState: ...


def run_now(work: Awaitable[T]) -> T:
    """Finish a coroutine that never suspends (the file store's writes) without a loop.
    Raises RuntimeError if it does suspend: that backend must be awaited."""
    coro: Coroutine[Any, Any, T] = work  # type: ignore[assignment]
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("this metadata backend must be awaited on the event loop")


class MirroredReads:
    """The read side both backends share: what a TopicRegistry they keep says (the file
    store itself, or the etcd mirror), the current image and its listeners. The registry's
    dicts are changed in place only, so what these return are live views."""

    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry
        self._image = ClusterImage()
        self._listeners: list[Listener] = []

    @property
    def cluster_id(self) -> str:
        return self._registry.cluster_id

    @property
    def topics(self) -> dict[str, Topic]:
        return self._registry.topics

    @property
    def by_id(self) -> dict[uuid.UUID, Topic]:
        return self._registry.by_id

    @property
    def group_configs(self) -> dict[str, dict[str, str]]:
        return self._registry.group_configs

    @property
    def broker_configs(self) -> dict[str, dict[str, str]]:
        return self._registry.broker_configs

    @property
    def user_scram(self) -> dict[str, dict[str, str]]:
        """SCRAM credentials: user -> {mechanism: credential string} (security/scram.py)."""
        return self._registry.user_scram

    @property
    def acls(self) -> dict[str, dict[str, str]]:
        """ACLs: resource pattern -> {entry: "1"} (security/acl.py's encoding)."""
        return self._registry.acls

    @property
    def acl_version(self) -> int:
        """Moves whenever the ACLs change (the authorizer rebuilds its index then)."""
        return self._registry.acl_version

    def get(self, name: str) -> Topic | None:
        return self._registry.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._registry.get_by_id(topic_id)

    def check_create(self, name: str) -> None:
        self._registry.check_create(name)

    def image(self) -> ClusterImage:
        return self._image

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)


class FileBackend(MirroredReads):
    """The embedded single-node backend over MetadataStore's snapshot and journal."""

    single_node = True  # no other broker can ever join: nothing waits for one

    def __init__(self, data_dir: Path, node_id: int = 0, new_id: Callable[[], uuid.UUID] | None = None) -> None:
        self.store = MetadataStore(data_dir, *([new_id] if new_id else []))
        super().__init__(self.store)
        self.node_id = node_id
        self._me: BrokerInfo | None = None
        self._parts: dict[TopicPartition, PartitionState] = {}
        for topic in self.store.topics.values():
            self._place(topic.name, 0)
        self._image = self._build(None)

    def compact(self) -> None:
        self.store.compact()

    def lease_current(self) -> bool:
        return True  # nobody else can ever lead what this node leads

    def _place(self, name: str, first: int) -> None:
        """Partitions `first..` of topic `name` as they exist in the store now (or none)."""
        n = self.node_id
        me = (n,)
        topic = self.store.topics.get(name)
        count = topic.partitions if topic is not None else 0
        p = first
        while (name, p) in self._parts and p >= count:
            del self._parts[(name, p)]
            p += 1
        for p in range(first, count):
            self._parts.setdefault((name, p), PartitionState(me, n, 0, me, 0))

    def _build(self, changed: list[str] | None) -> ClusterImage:
        brokers = [self._me] if self._me is not None else []
        n = self.node_id
        return ClusterImage.of(self.store.cluster_id, brokers, n if self._me else -1, 1 if self._me else 0,
                               self._parts, changed)

    def _publish(self, changed: list[str] | None = None) -> None:
        for name in changed or ():
            self._place(name, 0)
        old, self._image = self._image, self._build(changed)
        for listener in list(self._listeners):
            listener(old, self._image)

    async def start(self, me: BrokerInfo) -> None:
        self._me = me
        self._publish()

    async def close(self) -> None:
        return None

    async def create_topics(self, specs: list[TopicSpec],
                            assignments: dict[str, list[tuple[int, ...]]] | None = None) -> list[Topic]:
        topics = self.store.create_many(specs)
        self._publish([t.name for t in topics])
        return topics

    async def delete_topic(self, name: str) -> Topic:
        topic = self.store.delete(name)
        self._publish([name])
        return topic

    async def add_partitions(self, counts: dict[str, int],
                             assignments: dict[str, list[tuple[int, ...]]] | None = None) -> None:
        self.store.set_partitions_many(counts)
        self._publish(list(counts))

    async def set_configs(self, topics=None, brokers=None, groups=None, users=None, acls=None) -> None:
        self.store.set_configs(topics=topics, brokers=brokers, groups=groups, users=users, acls=acls)

    async def allocate_producer_id(self) -> int:
        return self.store.allocate_producer_id()

    async def alter_partition(self, tp: TopicPartition, expected: PartitionState,
                              new: PartitionState) -> PartitionState:
        # One node is always the whole ISR: nothing to change, nothing to race.
        raise Fenced(f"{tp}: a single-node store has no partition state to alter")


def parse_metadata_url(url: str) -> list[tuple[str, int]]:
    """`etcd://HOST:PORT[,HOST:PORT...]` -> endpoints."""
    if not url.startswith("etcd://"):
        raise ValueError(f"unsupported metadata store {url!r} (expected etcd://HOST:PORT[,HOST:PORT...])")
    out = []
    for part in url[len("etcd://"):].rstrip("/").split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad etcd endpoint {part!r} in {url!r}")
        out.append((host.strip("[]"), int(port)))
    return out


def open_backend(data_dir: Path, metadata_url: str | None, node_id: int,
                 new_id: Callable[[], uuid.UUID] | None = None, **etcd_options: Any) -> MetadataBackend:
    """The backend `--metadata` names: none is the embedded file store."""
    if not metadata_url:
        return FileBackend(data_dir, node_id, new_id)
    from .etcd_store import EtcdBackend

    return EtcdBackend(parse_metadata_url(metadata_url), node_id, new_id=new_id, **etcd_options)
