"""The broker's side of the group coordinator: the `__consumer_offsets` log and the clock.

Theory of operation: the sans-I/O `CoordinatorRuntime` decides; this module gives it a
writer that appends each result's records as one RecordBatch to the shard's partition
of `__consumer_offsets` (a compacted topic, created at start-up with
`offsets.topic.num.partitions` partitions) and returns the batch's last offset, a
reader that decodes a partition's stored batches, and tells the runtime when topics
change (each new picture of the topics is numbered upwards, across restarts too).

Each shard is active on the leader of its partition only (replica_manager elects it with
the leader epoch, and resigns it when another broker leads or the partition stops here).
On a fail-over the partition's log is read in a worker thread while the shard answers
COORDINATOR_LOAD_IN_PROGRESS, then replayed on the event loop; the embedded single node
loads synchronously at start-up.
A write to a partition with one replica is committed as soon as it is appended; a write to
a replicated one is committed when the high watermark passes it (Kafka's coordinator
runtime completes its deferred answers then): the replica manager reports every high
watermark move of an offsets partition (`high_watermark_moved`), which releases the
answers waiting for it (and restarts the runtime's write timeout). A deposed leader (a zombie) keeps its uncommitted answers
unreleased, since the followers now fetch from the new leader, until it learns of the new
leader and resigns, which fails them NOT_COORDINATOR: nothing it accepted after losing
the lead is ever acknowledged. Nor does it answer from state that may be stale: leadership
moves only off a broker whose cluster lease expired, so a broker that cannot be sure its
lease lives (`lease_current`: no refresh within the TTL, as after a SIGSTOP) refuses every
coordinator request with NOT_COORDINATOR, writes nothing and runs no timers until etcd
answers (and it then learns whether it was replaced). Answers still waiting after
`offsets.commit.timeout.ms` fail COORDINATOR_NOT_AVAILABLE (Kafka's write timeout, normalized as
GroupCoordinatorService does); their records stay in the log and may still commit.

Before a write, the partition must still be led here and have enough in-sync replicas
(the rules `CoordinatorLog` holds for both coordinators, coordinator_log.py): otherwise
nothing is appended, and the runtime rebuilds the shard from its log, so the in-memory
state is what the stored records say.

A write that the disk refuses (StorageError) is reported to the log directory's health
and raised to the runtime as NOT_COORDINATOR (Kafka maps KafkaStorageException so): the
runtime fails the operation's requests with it and reloads the shard from its log, so
nothing a handler prepared survives. A partition that cannot be loaded (offline,
corrupt) leaves its shard FAILED (its groups get NOT_COORDINATOR) and is elected again
every RELOAD_BACKOFF_MS; the other shards serve.

Transactions (KIP-98/447). A TxnOffsetCommit's records come tagged `Transactional`: they
are appended as one transactional batch with the producer's id and epoch (no sequence:
the coordinator, not the producer, numbers them, as Kafka's runtime appends them
unverified). The transaction coordinator ends a transaction in an offsets partition with
`complete_transaction(partition, marker, timeout_ms)`: the runtime writes the marker in
order with the shard's other writes (a TXN_MARKER record, appended here as the control
batch `encode_marker` makes) and its replay commits or aborts the producer's pending
offsets; the call returns a Kafka error code once the marker is committed or cannot be.
Loading reads each segment with `key_values` as before when none of its batches is
transactional or a control batch (a walk over the batch headers says so); otherwise the
segment is split into runs of plain pairs, transactional batches and markers, in log
order (`StoredLog`), so a restart or fail-over rebuilds pending offsets exactly.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time

from kio.schema.errors import ErrorCode

from ..cluster.names import CONSUMER_OFFSETS
from ..coordinator import records as R
from ..coordinator.config import CoordinatorConfig
from ..coordinator.consumer.model import TopicMeta
from ..coordinator.errors import CoordinatorError, CoordinatorUnavailable, error_code_for
from ..coordinator.image import MetadataImage
from ..coordinator.runtime import CoordinatorRuntime, ShardState
from ..log.errors import StorageError
from ..log.producer_state import SequenceError
from ..protocol.errors import (
    NONE,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
)
from ..records.batch import CONTROL_MASK, HEADER_SIZE, LOG_OVERHEAD, TRANSACTIONAL_MASK, read_header
from ..records.codec import CodecError, encode_batch, key_values
from ..records.control import Marker, decode_marker, encode_marker
from .coordinator_log import SINGLE_NODE_EPOCH, CoordinatorLog

log = logging.getLogger(__name__)

RELOAD_BACKOFF_MS = 5_000
_FLAGS_AT = 22  # the low byte of a batch's attributes (base offset, length, leader epoch, magic, CRC, then int16)
_TXN_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK
_LENGTH = struct.Struct(">i")


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


class GroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.config = CoordinatorConfig.from_properties(broker.config.extra)
        self._image_version = 0
        # Kafka's offsets.topic.replication.factor (default 3), capped at the brokers registered
        # when the topic is created; min ISR the broker's default.
        self.log = CoordinatorLog(broker, CONSUMER_OFFSETS, self.config.offsets_topic_partitions,
                                  "offsets.topic.num.partitions", self.replication_factor,
                                  {"cleanup.policy": "compact",
                                   "segment.bytes": str(self.config.offsets_topic_segment_bytes)})
        self.runtime = CoordinatorRuntime(
            self.config, self._write, self.build_image(), group_overrides=self._group_overrides,
            reader=lambda p: _read_all(self.read_partition(p)), commit_on_write=self.log.commits_on_write,
            serving=lambda: self.broker.metadata.lease_current(),
            write_timeout_ms=int(broker.config.extra.get("offsets.commit.timeout.ms", "5000")),
            stats=broker.stats.coordinator if broker.stats is not None else None,
        )
        self.load_time_ms = 0.0
        self.records_loaded = 0
        self.unavailable: dict[int, int] = {}  # shard -> when to try loading it again (ms)
        self.epochs = self.log.epochs  # offsets partitions this broker leads -> leader epoch

    # --- plumbing -----------------------------------------------------------------------------

    def _group_overrides(self, group_id: str) -> dict[str, int]:
        raw = self.broker.metadata.group_configs.get(group_id)
        return {k: int(v) for k, v in raw.items()} if raw else {}

    def build_image(self) -> MetadataImage:
        # The version stands in for Kafka's metadata offset: regex resolutions record it and
        # are refreshed when a topic is created in a later image (consumer/regex.py), so it
        # must keep rising across restarts. Milliseconds of the clock do, within a run too.
        self._image_version = max(self._image_version + 1, self.broker.clock())
        topics = {
            t.name: TopicMeta(t.topic_id, t.name, t.partitions)
            for t in self.broker.metadata.topics.values()
            if not t.is_internal
        }
        racks = frozenset([self.broker.config.rack]) if self.broker.config.rack else frozenset()
        return MetadataImage(topics, racks, self._image_version)

    def topics_changed(self) -> None:
        self.runtime.update_image(self.build_image(), self.broker.clock())

    @property
    def replication_factor(self) -> int:
        return int(self.broker.config.extra.get("offsets.topic.replication.factor", "3"))

    def maybe_create_topic(self) -> None:
        """Create `__consumer_offsets` now if it is missing and enough brokers have
        registered for its replication factor (or none other can: the embedded store).
        Otherwise the first FindCoordinator creates it with the brokers there are then
        (Kafka creates it on the first FindCoordinator too), so a cluster whose brokers
        start one by one does not get an offsets topic on the first broker alone."""
        if not self.log.exists and not self.log.creating and self.log.enough_brokers():
            self.broker.replicas.spawn(self.ensure_topic())

    async def create_at_start(self):
        """Start-up: the offsets topic if it may be created now (see maybe_create_topic)."""
        if not self.log.exists and self.log.enough_brokers():
            await self.log.create()
        return self.log.check()

    async def ensure_topic(self):
        """The offsets topic, created if missing (one creation at a time per broker)."""
        return await self.log.ensure()

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition whose coordinator serves `group_id`."""
        return self.runtime.partition_for(group_id)

    async def complete_transaction(self, partition: int, marker: Marker, timeout_ms: int) -> int:
        """Write `marker` to `__consumer_offsets-<partition>` through its shard (Kafka's
        GroupCoordinatorService.completeTransaction): the producer's pending offsets there
        are committed or dropped. Returns NONE once the marker is committed, else the code
        why not: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (not served here),
        COORDINATOR_NOT_AVAILABLE (not enough replicas, or the runtime's write timeout),
        REQUEST_TIMED_OUT (not committed within `timeout_ms`; the marker may still commit),
        or what the log refused it with. The caller maps these for WriteTxnMarkers."""
        deferred = self.runtime.complete_transaction(partition, marker.producer_id, marker.producer_epoch,
                                                     marker.commit, marker.coordinator_epoch, self.broker.clock())
        if not deferred.done:
            future = asyncio.get_running_loop().create_future()

            def settled(_d) -> None:
                if not future.done():
                    future.set_result(None)

            deferred.add_done_callback(settled)
            try:
                await asyncio.wait_for(future, max(timeout_ms, 0) / 1000)
            except asyncio.TimeoutError:
                return REQUEST_TIMED_OUT
        return NONE if deferred.error is None else error_code_for(deferred.error)

    def high_watermark_moved(self, partition: int, high_watermark: int) -> None:
        """The replica manager moved the high watermark of an offsets partition led here:
        release the answers waiting for records below it."""
        self.runtime.complete_up_to(partition, high_watermark - 1, self.broker.clock())

    def _write(self, partition: int, records: list[R.CoordinatorRecord], now_ms: int,
               transactional: R.Transactional | None = None) -> int:
        self.log.check_writable(partition)
        if records[0].type == R.TXN_MARKER:
            assert len(records) == 1, "a transaction marker is written alone"
            (producer_id, producer_epoch), v = records[0].key, records[0].value
            batch = bytearray(encode_marker(Marker(producer_id, producer_epoch, v["commit"], v["coordinator_epoch"]),
                                            now_ms))
        else:
            rows = []
            for i, record in enumerate(records):
                key, value = R.encode(record)
                rows.append((i, now_ms, key, value))
            if transactional is None:
                batch = bytearray(encode_batch(rows, base_offset=0))
            else:
                # KIP-98: one transactional batch of the producer; no sequence (nothing to dedupe).
                batch = bytearray(encode_batch(rows, base_offset=0, producer_id=transactional.producer_id,
                                               producer_epoch=transactional.producer_epoch, is_transactional=True))
        try:
            return self.log.append(partition, batch, now_ms)
        except SequenceError as exc:
            # The log fenced the producer or the marker's coordinator epoch: its code is the answer.
            code = ErrorCode.__members__.get(exc.code, UNKNOWN_SERVER_ERROR)
            raise CoordinatorError(code, f"{CONSUMER_OFFSETS}-{partition}: {exc}") from exc

    def elect(self, partition: int, epoch: int, now_ms: int) -> bool:
        """This broker leads `partition` of the offsets topic at `epoch`: load its shard.
        A replicated partition (a fail-over) is read in a worker thread while the shard
        answers COORDINATOR_LOAD_IN_PROGRESS, then replayed on the loop (Kafka loads on
        its own threads too); the embedded single node loads at once."""
        self.epochs[partition] = epoch
        plog = self.broker.logs.opened(CONSUMER_OFFSETS, partition)
        if plog is not None and plog.replicated and _loop_running():
            if self.runtime.begin_election(partition, epoch):
                self.broker.replicas.spawn(self._load_off_loop(partition, epoch))
            return True
        return self._load(partition, now_ms)

    async def _load_off_loop(self, partition: int, epoch: int) -> None:
        started = time.perf_counter()
        try:
            pairs = await asyncio.to_thread(self.runtime.reader, partition)

            def read():
                return pairs
        except (StorageError, CodecError) as exc:
            def read(exc=exc):
                raise exc  # inside finish_election, so the shard ends FAILED as any failed load
        self._finish_load(partition, epoch, read, self.broker.clock(), started)

    def resign(self, partition: int, epoch: int | None) -> None:
        """This broker no longer leads `partition`: its shard unloads (parked requests and
        waiting answers fail NOT_COORDINATOR, the clients find the new leader), or stops
        loading (a load still reading its log is then discarded)."""
        self.epochs.pop(partition, None)
        self.unavailable.pop(partition, None)
        if self.runtime.state_of(partition) in (ShardState.ACTIVE, ShardState.LOADING):
            self.runtime.on_resignation(partition)

    def _load(self, partition: int, now_ms: int) -> bool:
        """Load one shard now; on failure it stays unloaded (its groups unavailable) and is
        retried by `tick`. Loading writes records too (KIP-848 fail-over bumps), so a
        full disk can fail it as well as an offline partition can. A shard already loaded
        (or still loading off the loop) is left as it is."""
        epoch = self.epochs.get(partition, SINGLE_NODE_EPOCH)
        if not self.runtime.begin_election(partition, epoch):
            return self.runtime.state_of(partition) is ShardState.ACTIVE
        return self._finish_load(partition, epoch, lambda: self.runtime.reader(partition), now_ms, time.perf_counter())

    def _finish_load(self, partition: int, epoch: int, read, now_ms: int, started: float) -> bool:
        """The runtime's finish_election and what both load paths keep track of: the
        unavailable shards, the records loaded and how long it took, the committed
        offset a replicated partition's load ends at."""
        try:
            if not self.runtime.finish_election(partition, epoch, read, now_ms):
                return False  # resigned (or re-elected and loaded) meanwhile
        except (StorageError, CodecError, CoordinatorUnavailable) as exc:
            if partition not in self.unavailable:
                log.error("group coordinator shard %s-%d is unavailable (its groups cannot be served until it "
                          "loads): %s", CONSUMER_OFFSETS, partition, exc)
            self.unavailable[partition] = now_ms + RELOAD_BACKOFF_MS
            return False
        if self.unavailable.pop(partition, None) is not None:
            log.info("group coordinator shard %s-%d loaded", CONSUMER_OFFSETS, partition)
        shard = self.runtime.shards[partition]
        self.records_loaded += shard.records_replayed
        plog = self.broker.logs.opened(CONSUMER_OFFSETS, partition)
        if plog is not None and plog.replicated:
            self.runtime.loaded_up_to(partition, plog.log_end_offset, plog.high_watermark, self.broker.clock())
        ms = (time.perf_counter() - started) * 1000
        self.load_time_ms += ms
        if self.broker.stats is not None:  # KIP-848 partition-load-time
            self.broker.stats.coordinator.partition_load_time.observe(ms / 1000)
        if shard.records_replayed > 1000:
            log.info("loaded %d coordinator records of %s-%d in %.0f ms", shard.records_replayed, CONSUMER_OFFSETS,
                     partition, ms)
        return True

    def read_partition(self, partition: int) -> list | R.StoredLog:
        """Every stored (key, value) of a `__consumer_offsets` partition, oldest first,
        CRC-checked (a corrupt batch fails the load rather than replaying garbage). A
        partition holding transactional or control batches is read as a StoredLog."""
        plog = self.broker.logs.get(CONSUMER_OFFSETS, partition)
        plain: list = []
        stored: R.StoredLog | None = None
        for seg in list(plog.segments):
            data = seg.pread(0, seg.size)
            if not _has_transactional_batches(data):
                plain += key_values(data, verify_crc=True)  # the common case, at full speed
                continue
            if stored is None:
                stored = R.StoredLog()
            plain = _split_transactional(data, stored, plain)
        if stored is None:
            return plain
        if plain:
            stored.append(plain)
        return stored

    def tick(self, now_ms: int | None = None) -> int:
        now = self.broker.clock() if now_ms is None else now_ms
        for partition, due in list(self.unavailable.items()):
            if now >= due:
                self._load(partition, now)
        for partition, waited in self.runtime.fail_stalled_writes(now):
            log.warning("%s-%d: coordinator writes not committed after %d ms (high watermark stuck)",
                        CONSUMER_OFFSETS, partition, waited)
        for partition in self.epochs:
            # A shard whose revert could not read its log is FAILED: elect it again later.
            if partition not in self.runtime.shards and partition not in self.unavailable \
                    and self.runtime.state_of(partition) is not ShardState.LOADING:
                self.unavailable[partition] = now + RELOAD_BACKOFF_MS
        return self.runtime.tick(now)


def _read_all(stored):
    """What a reader returns, read to the end where it runs (a load reads off the loop)."""
    return stored if isinstance(stored, list) else list(stored)


def _has_transactional_batches(data: bytes) -> bool:
    """Whether a complete batch of `data` is transactional or a control batch: one read of
    each batch's length and attributes (about 1% of what key_values costs on the same bytes)."""
    n = len(data)
    pos = 0
    length_at = _LENGTH.unpack_from
    while n - pos >= HEADER_SIZE:
        if data[pos + _FLAGS_AT] & _TXN_OR_CONTROL:
            return True
        length = length_at(data, pos + 8)[0]
        if length < HEADER_SIZE - LOG_OVERHEAD:
            return False  # malformed: key_values refuses it
        pos += LOG_OVERHEAD + length
    return False


def _split_transactional(data: bytes, out: R.StoredLog, plain: list) -> list:
    """Append the batches of one segment to `out` in log order: runs of plain pairs (added
    to `plain`, the run still open, which is returned), each transactional batch's pairs
    with its producer, and each transaction marker. Every byte goes through key_values,
    so CRCs and malformed batches are checked exactly as for a plain segment."""
    n = len(data)
    pos = start = 0
    length_at = _LENGTH.unpack_from
    while n - pos >= HEADER_SIZE:
        length = length_at(data, pos + 8)[0]
        end = pos + LOG_OVERHEAD + length
        if end > n or length < HEADER_SIZE - LOG_OVERHEAD:
            break  # a trailing partial batch or a malformed one: key_values below decides
        if data[pos + _FLAGS_AT] & _TXN_OR_CONTROL:
            if pos > start:
                plain += key_values(data[start:pos], verify_crc=True)
            batch = data[pos:end]
            pairs = key_values(batch, verify_crc=True)  # a control batch yields none, but its CRC is checked
            h = read_header(batch)
            if h.attributes & CONTROL_MASK:
                marker = decode_marker(batch, h)
                item = None if marker is None else R.txn_marker(
                    marker.producer_id, marker.producer_epoch, marker.commit, marker.coordinator_epoch)
            else:
                item = R.TransactionalPairs(h.producer_id, h.producer_epoch, pairs)
            if item is not None:  # (a control batch of a type other than a marker means nothing here)
                if plain:
                    out.append(plain)
                    plain = []
                out.append(item)
            start = end
        pos = end
    if start < n:
        plain += key_values(data[start:], verify_crc=True)
    return plain
