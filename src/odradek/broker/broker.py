"""The broker's state and request dispatch, independent of sockets.

Theory of operation: `Broker` owns the cluster metadata (topics and ids), the log
manager (every partition log) and the fetch purgatory. `handle_frame` turns one
request frame into one response frame (or None), through the version table in
`registry`; the asyncio server in `server.py` only moves bytes. Tests and the property
tests drive `handle_frame` directly.

Who is at fault (DESIGN principle 8): a frame that does not parse, or names an api key
or version we do not serve, raises CloseConnection (ApiVersions instead gets the KIP-511
fallback). A bug in a handler is logged and closes only that connection; the broker
never dies from what a client sends.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..cluster.metadata import MetadataStore, Topic, TopicCollision, TopicExists
from ..cluster.names import InvalidTopicName, validate_topic_name
from ..config import BrokerConfig, resolve_topic_config
from ..log.manager import LogManager
from ..log.partition import PartitionLog
from ..protocol.messages import (
    Request,
    RequestParseError,
    UnsupportedVersionError,
    encode_response,
    parse_request,
)
from .errors import CloseConnection
from .purgatory import Purgatory
from .registry import APIS, supported_versions

log = logging.getLogger(__name__)

MAX_PARTITIONS_PER_TOPIC = 10_000  # odradek limit: each partition is a directory of files


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Callable[[], int] = wall_clock_ms,
        new_id: Callable[[], uuid.UUID] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataStore(config.data_dir, *([new_id] if new_id else []))
        self.logs = LogManager(config.data_dir, clock())
        self.logs.open_all(self.metadata.topics.values(), self.topic_config)
        self.purgatory = Purgatory()
        for (topic, partition), plog in self.logs.logs.items():
            self._watch(topic, partition, plog)
        self.supported = supported_versions()
        self.closed = False
        self.internal_errors = 0  # handler bugs; tests assert this stays 0
        from .coordinator import GroupCoordinator

        self.coordinator: GroupCoordinator | None = None
        coordinator = GroupCoordinator(self)
        coordinator.ensure_topic()
        self.coordinator = coordinator
        coordinator.load_all()

    # --- topics ----------------------------------------------------------------------

    def topic_config(self, topic: Topic) -> dict[str, Any]:
        return resolve_topic_config(self.config.topic_defaults(), topic.configs)

    def _watch(self, topic: str, partition: int, plog: PartitionLog) -> None:
        key = (topic, partition)
        plog.listeners.append(lambda _log: self.purgatory.notify(key))

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        """Create a validated topic (callers check names, counts and configs first)."""
        topic = self.metadata.create(name, partitions, configs)
        for p, plog in enumerate(self.logs.create(topic, self.topic_config(topic))):
            self._watch(name, p, plog)
        self._topics_changed()
        return topic

    def _topics_changed(self) -> None:
        # KIP-848 "Group Epoch": partition metadata changes bump subscribed groups' epochs.
        if self.coordinator is not None:
            self.coordinator.topics_changed()

    def delete_topic(self, topic: Topic) -> None:
        self.logs.delete(topic)
        self.metadata.delete(topic.name)
        self.purgatory.notify_topic(topic.name)
        self._topics_changed()

    def add_partitions(self, topic: Topic, count: int) -> None:
        old = topic.partitions
        self.metadata.set_partitions(topic.name, count)
        for i, plog in enumerate(self.logs.create(topic, self.topic_config(topic), first_partition=old)):
            self._watch(topic.name, old + i, plog)
        self._topics_changed()

    def auto_create(self, name: str) -> Topic | None:
        """Create `name` with the broker defaults if auto.create.topics.enable allows it."""
        if not self.config.auto_create_topics:
            return None
        try:
            validate_topic_name(name)
            self.metadata.check_create(name)
        except (InvalidTopicName, TopicExists, TopicCollision):
            return None
        log.info("auto-creating topic %s with %d partitions", name, self.config.num_partitions)
        return self.create_topic(name, self.config.num_partitions, {})

    # --- requests --------------------------------------------------------------------

    async def handle_frame(self, frame: bytes, client_host: str = "") -> bytes | None:
        try:
            request = parse_request(frame, self.supported)
            request.client_host = client_host
        except UnsupportedVersionError as exc:
            if exc.api_key == 18:
                from .handlers.api_versions import unsupported_version_response

                return unsupported_version_response(self, exc.correlation_id)
            log.info("closing connection: %s", exc)
            raise CloseConnection(str(exc)) from exc
        except RequestParseError as exc:
            log.info("closing connection: %s", exc)
            raise CloseConnection(str(exc)) from exc
        return await self.handle_request(request)

    async def handle_request(self, request: Request) -> bytes | None:
        api = APIS[request.api_key]
        try:
            result = api.fn(self, request)
            if inspect.isawaitable(result):
                result = await result
            if result is None:
                return None
            return encode_response(request, result)
        except CloseConnection:
            raise
        except Exception as exc:  # a bug of ours: this connection only
            self.internal_errors += 1
            log.exception("handler for %s v%d failed", api.name, request.api_version)
            raise CloseConnection(f"internal error in {api.name}") from exc

    # --- periodic work and shutdown --------------------------------------------------

    def tick(self, now_ms: int | None = None) -> None:
        self.logs.tick(self.clock() if now_ms is None else now_ms)

    def coordinator_tick(self, now_ms: int | None = None) -> int:
        """Run the group coordinator's due timers (session, rebalance, offset expiry)."""
        return self.coordinator.tick(now_ms) if self.coordinator is not None else 0

    def retention(self, now_ms: int | None = None) -> int:
        return self.logs.retention(self.clock() if now_ms is None else now_ms)

    def compact(self, now_ms: int | None = None) -> int:
        from ..log.compaction import compact_log

        now = self.clock() if now_ms is None else now_ms
        done = 0
        for plog in list(self.logs.logs.values()):
            if "compact" in plog.config["cleanup.policy"]:
                done += compact_log(plog, now)
        return done

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.logs.close()
