"""The broker's state and request dispatch, independent of sockets.

Theory of operation: `Broker` owns the cluster metadata (topics and ids), the log
manager (every partition log) and the fetch purgatory. `handle_frame` turns one
request frame into one response frame (or None), through the version table in
`registry`; the asyncio server in `server.py` only moves bytes. Tests and the property
tests drive `handle_frame` directly.

Who is at fault (DESIGN principle 8): a frame that does not parse, or names an api key
or version we do not serve, raises CloseConnection (ApiVersions instead gets the KIP-511
fallback). A bug in a handler is logged and closes only that connection; the broker
never dies from what a client sends. A disk that fails under a request is not a bug:
handlers answer KAFKA_STORAGE_ERROR where the API has a place for it; elsewhere (a
coordinator write) the connection is closed without a traceback and the client retries.

Topics are created in batches (`create_topics`): one cluster-metadata write for a whole
CreateTopics request or a Metadata request auto-creating many names, and no disk I/O per
partition (partitions are opened on first use, see log/manager.py).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..cluster.backend import Fenced, MetadataUnavailable, open_backend, run_now
from ..cluster.image import BrokerInfo
from ..cluster.metadata import Topic, TopicCollision, TopicExists
from ..cluster.names import InvalidTopicName, collision_key, validate_topic_name
from ..cluster.placement import PlacementError
from ..config import BrokerConfig, resolve_topic_config
from ..log.errors import LogDirOffline, StorageError
from ..log.files import FileCache, capacity_for_limit, raise_fd_limit
from ..log.manager import LogManager
from ..log.partition import PartitionLog
from ..protocol.messages import (
    Request,
    RequestParseError,
    UnsupportedVersionError,
    encode_response,
    parse_request,
)
from ..observability.stats import BrokerStats
from ..security.acl import OPEN, Access, authorizer_from_properties, bindings_from_store
from ..security.authentication import ADMITS_API_VERSIONS, ANONYMOUS, Admit
from .errors import CloseConnection
from .purgatory import Purgatory
from .registry import APIS, supported_versions

log = logging.getLogger(__name__)

MAX_PARTITIONS_PER_TOPIC = 10_000  # odradek limit: each partition is a directory of files
# Kafka's controller (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH): a CreateTopics
# request may create at most this many partitions; more is POLICY_VIOLATION for all.
MAX_PARTITIONS_PER_REQUEST = 10_000
CREATE_SLICE = 1000  # topics per metadata write when a request creates many
HEAVY_RESPONSE_ENTRIES = 2000  # responses this big are encoded in a worker thread


def _entries(result: dict) -> int:
    """Topics and partitions in a response: what its encoding time grows with."""
    n = 0
    for value in result.values():
        if isinstance(value, list) and value:
            n += len(value)
            if isinstance(value[0], dict):
                for item in value:
                    parts = item.get("partitions")
                    if isinstance(parts, list):
                        n += len(parts)
    return n


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
        # Descriptors are a budget: segments get a share of the (raised) process limit.
        self.fd_limit = raise_fd_limit()
        self.files = FileCache(capacity_for_limit(self.fd_limit, config.log_max_open_files))
        # The one place that knows which metadata store is in use (cluster/backend.py).
        self.metadata = open_backend(
            config.data_dir, config.metadata_url, config.node_id, new_id,
            lease_ttl_ms=config.broker_session_timeout_ms,
            unclean=lambda topic: self._unclean_election(topic),
        )
        # Dynamic broker configs (AlterConfigs on BROKER resources) live with the cluster
        # metadata; attach them before any log opens so every partition sees them.
        config.attach_dynamic(self.metadata.broker_configs)
        self.logs = LogManager(config.data_dir, clock(), self.files)
        self.logs.on_open.append(self._watch)
        self.purgatory = Purgatory()
        self.supported = supported_versions()
        # Kafka's authorizer.class.name (security/acl.py); None: everything is allowed.
        self.authorizer = authorizer_from_properties(config.extra)
        self._acl_version = -1
        self.inter_broker_security = None  # a ClientSecurity for other brokers (server.py); None: PLAINTEXT
        self.closed = False
        self.started = False
        self.internal_errors = 0  # handler bugs; tests assert this stays 0
        # What /metrics reports (observability/); None when metrics.listener is empty, and
        # then nothing is counted on any path.
        self.stats: BrokerStats | None = BrokerStats() if config.metrics_listener else None
        # Requests being handled now (KIP-848 event-queue-size): the server counts its
        # connections' when asked (server.py); a broker driven without one has none.
        self.requests_in_flight: Callable[[], int] = lambda: 0
        from .coordinator import GroupCoordinator
        from .replica_manager import ReplicaManager
        from .txn_coordinator import TxnCoordinator

        self.replicas = ReplicaManager(self)
        self.coordinator: GroupCoordinator | None = GroupCoordinator(self)
        self.txn_coordinator: TxnCoordinator | None = TxnCoordinator(self)
        if not config.metadata_url:
            # The embedded store answers without I/O: the broker is ready when constructed.
            run_now(self.start())

    async def start(self) -> None:
        """Join the cluster (register, load the metadata), open the logs, and take up the
        partitions and coordinator shards this broker leads. The server calls it once it
        listens, so the registration carries the real port."""
        if self.started:
            return
        self.metadata.subscribe(self.replicas.on_image)
        await self.metadata.start(self.me())
        self.logs.open_all(self.metadata.topics.values(), self.topic_config)
        self.started = True
        self.replicas.on_image(None, self.metadata.image())
        await self.coordinator.create_at_start()

    def _unclean_election(self, topic: str) -> bool:
        t = self.metadata.get(topic)
        return bool(t is not None and self.topic_config(t)["unclean.leader.election.enable"])

    # --- topics ----------------------------------------------------------------------

    def topic_config(self, topic: Topic) -> dict[str, Any]:
        return resolve_topic_config(self.config.topic_defaults(), topic.configs)

    def _watch(self, topic: str, partition: int, plog: PartitionLog) -> None:
        key = (topic, partition)
        plog.listeners.append(lambda _log: self.purgatory.notify(key))
        stats = getattr(self, "stats", None)
        if stats is not None:
            plog.flush_observer = stats.log_flush.observe  # Kafka's LogFlushRateAndTimeMs

    async def open_partitions(self, keys: list[tuple[str, int]]) -> None:
        """Create, in a worker thread, the files of partitions about to be used for the
        first time (see LogManager.prepare_dirs); opening them then costs the loop little."""
        todo = self.logs.unprepared(keys)
        if todo and not self.logs.health.offline:
            await asyncio.to_thread(self.logs.prepare_dirs, todo)

    def _check_writable(self) -> None:
        if self.logs.health.offline:
            raise LogDirOffline(f"log directory {self.config.data_dir} is offline: {self.logs.health.reason}")

    def access(self, request) -> Access:
        """What the request's principal may do (the handlers ask it; security/acl.py)."""
        authorizer = self.authorizer
        if authorizer is None:
            return OPEN
        version = self.metadata.acl_version
        if version != self._acl_version:
            authorizer.set_acls(bindings_from_store(self.metadata.acls))
            self._acl_version = version
        session = request.session
        principal = session.principal if session is not None else ANONYMOUS
        return Access(authorizer, principal, request.client_host.lstrip("/"))

    def me(self) -> BrokerInfo:
        """This broker as it registers: the inter-broker listener's address, and every
        listener's (Metadata answers each client with the listener it came in on)."""
        host, port = self.config.advertised
        endpoints = tuple((lst.name, *lst.advertised) for lst in self.config.effective_listeners())
        return BrokerInfo(self.config.node_id, host, port, self.config.rack, endpoints=endpoints)

    def scram_credential(self, user: str, mechanism: str):
        """A user's SCRAM credential from the cluster metadata, or None (SASL listeners)."""
        from .handlers.scram_credentials import scram_credential

        return scram_credential(self, user, mechanism)

    def storage_failed(self, exc: StorageError) -> None:
        """Every StorageError a handler meets goes here: the log directory's health decides."""
        self.logs.report(exc)

    async def create_topics_async(self, specs: list[tuple[str, int, dict[str, str]]],
                                  assignments: dict[str, list[tuple[int, ...]]] | None = None,
                                  factors: dict[str, int] | None = None) -> list[Topic]:
        """Create validated topics with one metadata write (callers check names, counts and
        configs first). `assignments`: explicit replicas per partition; topics without one
        are placed as Kafka places them (cluster/placement.py) with their
        `replication.factor` or `default.replication.factor`. Raises TopicExists/
        TopicCollision, PlacementError, or StorageError with nothing created."""
        self._check_writable()
        placed = self.replicas.place(specs, assignments or {}, factors)
        try:
            topics = await self.metadata.create_topics(specs, placed)
        except StorageError as exc:
            self.storage_failed(exc)
            raise
        return topics  # the logs learnt of them from the new image (ReplicaManager.on_image)

    def create_topics(self, specs: list[tuple[str, int, dict[str, str]]]) -> list[Topic]:
        """`create_topics_async` for the embedded store, which never suspends (tests, tools)."""
        return run_now(self.create_topics_async(specs))

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        return self.create_topics([(name, partitions, configs)])[0]

    def _topics_changed(self) -> None:
        # KIP-848 "Group Epoch": partition metadata changes bump subscribed groups' epochs.
        if self.coordinator is not None:
            self.coordinator.topics_changed()

    def delete_topic(self, topic: Topic) -> None:
        run_now(self.delete_topic_async(topic))

    async def delete_topic_async(self, topic: Topic) -> None:
        self._check_writable()
        try:
            await self.metadata.delete_topic(topic.name)
        except StorageError as exc:
            self.storage_failed(exc)
            raise

    def add_partitions(self, topic: Topic, count: int) -> None:
        self.add_partitions_many({topic.name: count})

    def add_partitions_many(self, counts: dict[str, int]) -> None:
        run_now(self.add_partitions_async(counts))

    async def add_partitions_async(self, counts: dict[str, int],
                                   assignments: dict[str, list[tuple[int, ...]]] | None = None) -> None:
        self._check_writable()
        old = {name: self.metadata.topics[name].partitions for name in counts}
        placed = self.replicas.place_more(counts, old, assignments or {})
        try:
            await self.metadata.add_partitions(counts, placed)
        except StorageError as exc:
            self.storage_failed(exc)
            raise

    def auto_creatable(self, name: str) -> bool:
        if not self.config.auto_create_topics:
            return False
        try:
            validate_topic_name(name)
            self.metadata.check_create(name)
        except (InvalidTopicName, TopicExists, TopicCollision):
            return False
        return True

    def _auto_create_specs(self, names: list[str]) -> list[tuple[str, int, dict[str, str]]]:
        wanted: dict[str, None] = {}
        keys = set()
        for name in names:
            if name in wanted or not self.auto_creatable(name):
                continue
            key = collision_key(name)
            if key in keys:
                continue  # two names of this request collide: the first wins, as one at a time would
            keys.add(key)
            wanted[name] = None
        if wanted:
            log.info("auto-creating %d topic(s) with %d partitions: %s%s", len(wanted), self.config.num_partitions,
                     ", ".join(list(wanted)[:5]), " ..." if len(wanted) > 5 else "")
        return [(name, self.config.num_partitions, {}) for name in wanted]

    async def auto_create_many_async(self, names: list[str]) -> dict[str, Topic]:
        """Create every creatable name with the broker defaults, a slice at a time (one
        metadata write each), yielding to the event loop between them. Names that cannot
        be created are left out."""
        results = await self.create_topics_sliced(self._auto_create_specs(names))
        return {t.name: t for t in results if isinstance(t, Topic)}

    async def create_topics_sliced(self, specs: list[tuple[str, int, dict[str, str]]],
                                   size: int = CREATE_SLICE,
                                   assignments: dict[str, list[tuple[int, ...]]] | None = None) -> list[Topic | Exception]:
        """Create validated topics a slice at a time (one metadata write each), so that a
        request creating 10,000 topics never holds the event loop for long. Returns, per
        spec, its Topic or the exception that stopped it (a name taken meanwhile, or a
        storage failure, or too few brokers for the replication factor)."""
        out: list[Topic | Exception] = []
        for i in range(0, len(specs), size):
            if i:
                await asyncio.sleep(0)
            chunk = specs[i : i + size]
            results: dict[str, Topic | Exception] = {}
            ready = []
            for spec in chunk:  # a concurrent request may have taken a name since validation
                try:
                    self.metadata.check_create(spec[0])
                    ready.append(spec)
                except (TopicExists, TopicCollision) as exc:
                    results[spec[0]] = exc
            if ready:
                try:
                    for topic in await self.create_topics_async(ready, assignments):
                        results[topic.name] = topic
                except (StorageError, TopicExists, TopicCollision, MetadataUnavailable, Fenced, PlacementError) as exc:
                    for spec in ready:
                        results[spec[0]] = exc
            out.extend(results[spec[0]] for spec in chunk)
        return out

    async def auto_create_async(self, name: str) -> Topic | None:
        """Create `name` with the broker defaults if auto.create.topics.enable allows it."""
        return (await self.auto_create_many_async([name])).get(name)

    # --- requests --------------------------------------------------------------------

    async def handle_frame(self, frame: bytes, client_host: str = "", session=None) -> bytes | None:
        auth = session.auth if session is not None else None
        if auth is not None and auth.legacy:
            return self._legacy_sasl_token(frame, auth, session)
        try:
            request = parse_request(frame, self.supported)
            request.client_host = client_host
            request.session = session
        except UnsupportedVersionError as exc:
            if exc.api_key == 18 and (auth is None or auth.state in ADMITS_API_VERSIONS):
                from .handlers.api_versions import unsupported_version_response

                return unsupported_version_response(self, exc.correlation_id)
            log.info("closing connection: %s", exc)
            raise CloseConnection(str(exc)) from exc
        except RequestParseError as exc:
            log.info("closing connection: %s", exc)
            raise CloseConnection(str(exc)) from exc
        if auth is not None:
            # Nothing reaches a handler before the client authenticated (security/authentication.py).
            admit = auth.admit(request.api_key, self.clock())
            if admit is Admit.CLOSE or admit is Admit.REFUSE:
                # Kafka answers REFUSE with ILLEGAL_SASL_STATE in the request's own response
                # before closing; odradek closes without it (README "Security").
                raise CloseConnection(f"{APIS[request.api_key].name} not allowed in SASL state {auth.state.value}")
        return await self.handle_request(request)

    def _legacy_sasl_token(self, frame: bytes, auth, session) -> bytes:
        """After SaslHandshake v0 a frame is a raw SASL token, answered by a raw,
        size-prefixed token; a failure closes the connection without an answer (Kafka)."""
        answer = auth.token(bytes(frame), self.clock())
        stats = self.stats
        if stats is not None and (answer.error_code or auth.authenticated):
            (stats.auth_failed if answer.error_code else stats.auth_succeeded)[(session.listener, auth.mechanism or "")] += 1
        if answer.error_code:
            raise CloseConnection(f"SASL authentication failed: {answer.error_message}")
        return len(answer.auth_bytes).to_bytes(4, "big") + answer.auth_bytes

    async def handle_request(self, request: Request) -> bytes | None:
        stats = self.stats
        if stats is None:
            return await self._handle_request(request, None)
        request.started = started = stats.clock()
        try:
            return await self._handle_request(request, stats)
        finally:
            stats.request(request.api_key, request.api_version, stats.clock() - started, request.result)

    async def _handle_request(self, request: Request, stats) -> bytes | None:
        api = APIS[request.api_key]
        try:
            result = api.fn(self, request)
            if inspect.isawaitable(result):
                result = await result
            if stats is not None:
                request.result = result  # its error codes are counted (observability/stats.py)
            if result is None:
                return None
            if isinstance(result, dict) and _entries(result) > HEAVY_RESPONSE_ENTRIES:
                # Encoding 10,000 topics takes a quarter of a second of Python: in a worker
                # thread the event loop keeps its turns (the GIL switches every 5 ms) and
                # other clients are served meanwhile. The result is this request's alone.
                return await asyncio.to_thread(encode_response, request, result)
            return encode_response(request, result)
        except CloseConnection:
            raise
        except MetadataUnavailable as exc:  # etcd unreachable: not a bug either; the client retries
            log.warning("closing connection: %s v%d needs the metadata store: %s", api.name, request.api_version, exc)
            raise CloseConnection(f"metadata store unavailable in {api.name}") from exc
        except StorageError as exc:  # the disk, not a bug: no traceback, the client retries
            self.storage_failed(exc)
            log.warning("closing connection: %s v%d met a storage failure: %s", api.name, request.api_version, exc)
            raise CloseConnection(f"storage failure in {api.name}") from exc
        except Exception as exc:  # a bug of ours: this connection only
            self.internal_errors += 1
            log.exception("handler for %s v%d failed", api.name, request.api_version)
            raise CloseConnection(f"internal error in {api.name}") from exc

    # --- periodic work and shutdown --------------------------------------------------

    def tick(self, now_ms: int | None = None) -> None:
        self.logs.tick(self.clock() if now_ms is None else now_ms)

    def coordinator_tick(self, now_ms: int | None = None) -> int:
        """Run the group coordinator's due timers (session, rebalance, offset expiry)."""
        if self.coordinator is None:
            return 0
        # A timer whose write fails is the runtime's to revert (the writer reported the
        # storage failure): nothing escapes to here.
        ran = self.coordinator.tick(now_ms)
        if self.txn_coordinator is not None:
            ran += self.txn_coordinator.tick(self.clock() if now_ms is None else now_ms)
        return ran

    def retention(self, now_ms: int | None = None) -> int:
        return self.logs.retention(self.clock() if now_ms is None else now_ms)

    def compact(self, now_ms: int | None = None) -> int:
        """One cleaner pass over every open compacted log, synchronously (tests, shutdown);
        the server runs maintenance.compaction, which yields between logs."""
        now = self.clock() if now_ms is None else now_ms
        return sum(self.compact_log(key, plog, now) for key, plog in list(self.logs.logs.items()))

    def compact_log(self, key: tuple[str, int], plog: PartitionLog, now_ms: int) -> int:
        """Clean one log if its policy compacts; a storage failure goes to storage_failed."""
        from ..log.compaction import compact_log

        if "compact" not in plog.config["cleanup.policy"]:
            return 0
        try:
            return compact_log(plog, now_ms)
        except StorageError as exc:
            self.storage_failed(exc)
            log.warning("compaction of %s-%d failed: %s", key[0], key[1], exc)
            return 0

    async def stop(self) -> None:
        """Leave the cluster (the registration lease is revoked at once) and close."""
        self.replicas.stop()
        try:
            await self.metadata.close()
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.replicas.stop()
            if self.txn_coordinator is not None:
                self.txn_coordinator.close()
            self.logs.close()
