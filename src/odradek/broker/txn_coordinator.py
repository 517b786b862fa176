"""The broker's side of the transaction coordinator: the `__transaction_state` log and the markers.

Theory of operation: the sans-I/O `TxnRuntime` (transactions/runtime.py) decides; this
module gives it a writer that appends each result's records as one RecordBatch to the
shard's partition of `__transaction_state` (compacted, `transaction.state.log.num.partitions`
partitions, created by the first FindCoordinator or InitProducerId for a transactional
id, as Kafka creates it), a reader that replays a partition, and carries out marker jobs.

Shards follow leadership of their partition exactly as group coordinator shards follow
`__consumer_offsets` (the replica manager elects and resigns them with the leader epoch,
and reports high watermark moves, which release answers waiting for their records).
The leader epoch of the partition is the coordinator epoch stamped on every marker
(KIP-98: it fences a deposed coordinator at the data partitions).

Markers (Kafka's TransactionMarkerChannelManager): once a PrepareCommit/PrepareAbort is
committed, every partition of the transaction gets a marker: partitions led here are
written directly (`write_marker`, the same code WriteTxnMarkers runs), the others with a
WriteTxnMarkers request to their leader, grouped per broker. Retriable failures (a
leader moving, too few in-sync replicas, a timeout, a broker down) are retried every
`MARKER_RETRY_MS` at the leader the latest cluster image names; a partition whose topic
was deleted is skipped; a producer-epoch or coordinator fencing error stops the job (a
newer coordinator or producer epoch has taken over, Kafka's removeMarkersForTxn). When
every marker is written, CompleteCommit/CompleteAbort is written. A job of a shard that
resigned is dropped: the new coordinator re-sends the markers of every prepared
transaction when it loads.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..client.errors import KafkaError
from ..client.net import BrokerConnection
from ..cluster.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from ..log.errors import StorageError
from ..log.producer_state import SequenceError
from ..protocol.errors import (
    INVALID_PRODUCER_EPOCH,
    KAFKA_STORAGE_ERROR,
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    TRANSACTION_COORDINATOR_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ..records.codec import CodecError, encode_batch, key_values
from ..records.control import Marker
from ..transactions import records as TR
from ..transactions.coordinator import MarkerJob, TxnConfig, TxnRecord
from ..transactions.runtime import TxnRuntime
from .coordinator_log import CoordinatorLog
from .replica_manager import NotServable

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
MARKER_RETRY_MS = 100
MARKER_TIMEOUT_MS = 30_000  # per attempt: Kafka's request.timeout.ms for the marker channel
RELOAD_BACKOFF_MS = 5_000
MARKERS_WAIT_MS = 2_000  # how long EndTxn waits for its markers before answering anyway

# Errors that end a marker job: a newer producer epoch or coordinator has decided (Kafka's
# TransactionMarkerRequestCompletionHandler).
_FENCED = {INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED}


def _code(code) -> int:
    return int(getattr(code, "value", code))


async def write_marker(broker, tp: tuple[str, int], marker: Marker, timeout_ms: int) -> int:
    """Append `marker` to partition `tp` led here and wait until it is committed (acks=all,
    as Kafka's WriteTxnMarkers appends): the error code. `__consumer_offsets` partitions go
    through the group coordinator, which applies the marker to pending transactional offsets."""
    topic = broker.metadata.get(tp[0])
    if topic is None or not 0 <= tp[1] < topic.partitions:
        return _code(UNKNOWN_TOPIC_OR_PARTITION)
    if tp[0] == CONSUMER_OFFSETS:
        return _code(await broker.coordinator.complete_transaction(tp[1], marker, timeout_ms))
    try:
        broker.replicas.leader_for_serving(tp)
    except NotServable as exc:
        return _code(exc.code)
    if broker.replicas.append_error(tp, -1) == NOT_ENOUGH_REPLICAS:
        return _code(NOT_ENOUGH_REPLICAS)
    try:
        plog = broker.logs.get(*tp)
        info = plog.append_marker(marker, broker.clock(), broker.replicas.leader_epoch(tp))
    except SequenceError as exc:
        return _code(TRANSACTION_COORDINATOR_FENCED if exc.code == "transaction_coordinator_fenced"
                     else INVALID_PRODUCER_EPOCH)
    except StorageError as exc:
        broker.storage_failed(exc)
        return _code(KAFKA_STORAGE_ERROR)
    broker.replicas.appended(tp, plog)
    return _code(await broker.replicas.wait_for_acks(tp, info.last_offset + 1, timeout_ms))


class TxnCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        props = broker.config.extra
        self.config = c = TxnConfig.from_properties(props)
        # Kafka's transaction.state.log.replication.factor (3) and min ISR (2).
        self.log = CoordinatorLog(broker, TRANSACTION_STATE, c.num_partitions, "transaction.state.log.num.partitions",
                                  c.replication_factor, {"cleanup.policy": "compact",
                                                         "segment.bytes": str(c.segment_bytes),
                                                         "unclean.leader.election.enable": "false"},
                                  min_isr=c.min_isr)
        self.runtime = TxnRuntime(
            self.config, self._write, self._send_markers, reader=lambda p: list(self.read_partition(p)),
            commit_on_write=self.log.commits_on_write, serving=lambda: self.broker.metadata.lease_current(),
            write_timeout_ms=int(props.get("offsets.commit.timeout.ms", "5000")),
        )
        self.runtime.log_bounds = self.log.bounds
        self.epochs = self.log.epochs  # partitions led here -> leader epoch (the coordinator epoch)
        self.unavailable: dict[int, int] = {}  # partition -> when to try loading it again
        self._connections: dict[int, BrokerConnection] = {}
        self.markers_written = 0
        self._jobs_done: dict[str, asyncio.Future] = {}  # transactional id -> its marker job finished

    # --- the topic and its partitions (coordinator_log.py) -----------------------------------

    async def ensure_topic(self):
        return await self.log.ensure()

    def _write(self, partition: int, records: list[TxnRecord], now_ms: int) -> int:
        self.log.check_writable(partition)
        rows = [(i, now_ms, *TR.encode(r.transactional_id, r.txn)) for i, r in enumerate(records)]
        return self.log.append(partition, bytearray(encode_batch(rows, base_offset=0)), now_ms)

    def read_partition(self, partition: int):
        plog = self.broker.logs.get(TRANSACTION_STATE, partition)
        for seg in list(plog.segments):
            yield from key_values(seg.pread(0, seg.size), verify_crc=True)

    # --- leadership -----------------------------------------------------------------------

    def elect(self, partition: int, epoch: int, now_ms: int) -> bool:
        self.epochs[partition] = epoch
        if not self.runtime.begin_election(partition, epoch):
            return self.runtime.shards.get(partition) is not None
        return self._finish_load(partition, epoch, now_ms)

    def _finish_load(self, partition: int, epoch: int, now_ms: int) -> bool:
        started = time.perf_counter()
        try:
            ok = self.runtime.finish_election(partition, epoch, lambda: self.runtime.reader(partition), now_ms,
                                              *self.log.bounds(partition))
        except (StorageError, CodecError, ValueError) as exc:
            log.error("transaction coordinator shard %s-%d is unavailable: %s", TRANSACTION_STATE, partition, exc)
            self.unavailable[partition] = now_ms + RELOAD_BACKOFF_MS
            return False
        self.unavailable.pop(partition, None)
        ms = (time.perf_counter() - started) * 1000
        if ms > 100:
            log.info("loaded %s-%d in %.0f ms", TRANSACTION_STATE, partition, ms)
        return ok

    def resign(self, partition: int, epoch: int | None) -> None:
        self.epochs.pop(partition, None)
        self.unavailable.pop(partition, None)
        self.runtime.on_resignation(partition, epoch)

    def high_watermark_moved(self, partition: int, high_watermark: int) -> None:
        self.runtime.complete_up_to(partition, high_watermark - 1, self.broker.clock())

    def tick(self, now_ms: int) -> int:
        for partition, due in list(self.unavailable.items()):
            if now_ms >= due and partition in self.epochs:
                if self.runtime.begin_election(partition, self.epochs[partition]):
                    self._finish_load(partition, self.epochs[partition], now_ms)
        for partition, waited in self.runtime.fail_stalled_writes(now_ms):
            log.warning("%s-%d: transaction coordinator writes not committed after %d ms", TRANSACTION_STATE,
                        partition, waited)
        return self.runtime.tick(now_ms)

    # --- markers --------------------------------------------------------------------------

    def _send_markers(self, partition: int, coordinator_epoch: int, job: MarkerJob) -> None:
        try:
            done = asyncio.get_running_loop().create_future()
        except RuntimeError:  # no loop (a synchronous test): nothing can be sent anyway
            done = None
        if done is not None:
            self._jobs_done[job.transactional_id] = done
        self.broker.replicas.spawn(self._marker_job(partition, coordinator_epoch, job, done))

    async def wait_for_markers(self, transactional_id: str, timeout_ms: int = MARKERS_WAIT_MS) -> None:
        """Wait (at most `timeout_ms`) until the marker job of `transactional_id`'s last
        decision has finished. EndTxn answers after it: the decision is durable once
        PrepareCommit/PrepareAbort is committed, as when Kafka answers, but a client that
        starts its next transaction at once would otherwise meet CONCURRENT_TRANSACTIONS
        and back off (librdkafka: 20 ms for AddPartitionsToTxn, retry.backoff.ms 100 ms for
        AddOffsetsToTxn) while the markers are written."""
        done = self._jobs_done.get(transactional_id)
        if done is None or done.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout_ms / 1000)
        except asyncio.TimeoutError:
            pass  # markers to a broker that is down: answer anyway, the job goes on

    def _still_mine(self, partition: int, coordinator_epoch: int) -> bool:
        return self.runtime.shards.get(partition) is not None and self.runtime.epoch_of(partition) == coordinator_epoch

    async def _marker_job(self, partition: int, coordinator_epoch: int, job: MarkerJob,
                          done: asyncio.Future | None = None) -> None:
        try:
            await self._run_marker_job(partition, coordinator_epoch, job)
        finally:
            if done is not None and not done.done():
                done.set_result(None)
            if self._jobs_done.get(job.transactional_id) is done:
                del self._jobs_done[job.transactional_id]

    async def _run_marker_job(self, partition: int, coordinator_epoch: int, job: MarkerJob) -> None:
        marker = Marker(job.producer_id, job.producer_epoch, job.commit, coordinator_epoch)
        todo = set(job.partitions)
        while todo:
            if not self._still_mine(partition, coordinator_epoch):
                return  # resigned: the new coordinator re-sends them
            results = await self._write_markers_once(marker, sorted(todo))
            for tp, code in results.items():
                if code == _code(NONE):
                    todo.discard(tp)
                    self.markers_written += 1
                elif code == _code(UNKNOWN_TOPIC_OR_PARTITION) and not self._exists(tp):
                    todo.discard(tp)  # the topic was deleted: nothing to mark
                elif code in {_code(c) for c in _FENCED}:
                    log.warning("transaction %s: marker for %s-%d refused (%s); another coordinator or producer "
                                "epoch has taken over", job.transactional_id, tp[0], tp[1], code)
                    return
            if todo:
                await asyncio.sleep(MARKER_RETRY_MS / 1000)
        if self._still_mine(partition, coordinator_epoch):
            answer = self.runtime.complete_markers(partition, job, self.broker.clock())
            if answer.done and answer.error is not None:
                log.warning("transaction %s: cannot write its completion: %s", job.transactional_id, answer.error)

    def _exists(self, tp: tuple[str, int]) -> bool:
        topic = self.broker.metadata.get(tp[0])
        return topic is not None and 0 <= tp[1] < topic.partitions

    async def _write_markers_once(self, marker: Marker, partitions: list[tuple[str, int]]) -> dict:
        """One attempt at every partition: {partition: error code}."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        results: dict[tuple[str, int], int] = {}
        for tp in partitions:
            state = self.broker.replicas.state(*tp)
            if state is None and not self.broker.metadata.single_node:
                results[tp] = _code(UNKNOWN_TOPIC_OR_PARTITION)
                continue
            leader = self.broker.config.node_id if state is None else state.leader
            by_leader.setdefault(leader, []).append(tp)
        tasks = []
        for leader, tps in by_leader.items():
            if leader == self.broker.config.node_id:
                tasks += [self._local(tp, marker) for tp in tps]
            else:
                tasks.append(self._remote(leader, tps, marker))
        for part in await asyncio.gather(*tasks):
            results.update(part)
        return results

    async def _local(self, tp, marker: Marker) -> dict:
        try:
            return {tp: await write_marker(self.broker, tp, marker, MARKER_TIMEOUT_MS)}
        except Exception:  # noqa: BLE001 - a bug must not stop the job forever: log, retry
            log.exception("writing a transaction marker to %s-%d failed", *tp)
            return {tp: _code(NOT_LEADER_OR_FOLLOWER)}

    async def _remote(self, leader: int, tps: list, marker: Marker) -> dict:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {"markers": [{
            "producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
            "transaction_result": marker.commit, "coordinator_epoch": marker.coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        }]}
        try:
            conn = await self._connection(leader)
            resp = await conn.request(WRITE_TXN_MARKERS, body, timeout=MARKER_TIMEOUT_MS / 1000 + 5)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.info("WriteTxnMarkers to broker %d failed (%s); retrying", leader, exc)
            self._drop_connection(leader)
            return {tp: _code(NOT_LEADER_OR_FOLLOWER) for tp in tps}
        out = {}
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = _code(p.error_code)
        return {tp: out.get(tp, _code(NOT_LEADER_OR_FOLLOWER)) for tp in tps}

    async def _connection(self, node: int) -> BrokerConnection:
        conn = self._connections.get(node)
        if conn is not None and not conn.closed:
            return conn
        info = self.broker.replicas.image.brokers.get(node)
        if info is None:
            raise KafkaError(-1, f"broker {node} is not registered")
        conn = BrokerConnection(info.host, info.port, f"txn-markers-{self.broker.config.node_id}", 60.0,
                                self.broker.inter_broker_security)
        await conn.open(10.0)
        conn.versions[WRITE_TXN_MARKERS] = 1
        self._connections[node] = conn
        return conn

    def _drop_connection(self, node: int) -> None:
        conn = self._connections.pop(node, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node in list(self._connections):
            self._drop_connection(node)
