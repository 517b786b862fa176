"""Followers copy their leaders' logs with the Fetch API, as Kafka's ReplicaFetcherThread does.

Theory of operation. One `Fetcher` per source broker (Kafka's num.replica.fetchers = 1)
holds one connection and fetches every partition this broker follows from that leader in
one request: Fetch v12 with this node's id as `replica_id`, each partition at the log end
(`fetch_offset`), with the leader epoch this follower knows (`current_leader_epoch`) and
the epoch of its last batch (`last_fetched_epoch`). The leader long-polls it for up to
`replica.fetch.wait.max.ms`, so a new batch reaches the followers at once.

For each partition in the answer (Kafka's processPartitionData and handlers):
  * `diverging_epoch`: this log went further than the leader's history of that epoch (it
    led, or followed a leader, whose last records were never committed); truncate where
    replication/follower.truncation says (the end of the last common epoch), then fetch on;
  * records: appended byte for byte (`append_as_follower`, the leader's offsets and
    epochs kept), then the high watermark becomes min(leader's, own log end), and the log
    start follows the leader's;
  * OFFSET_OUT_OF_RANGE: below the leader's log start, the log restarts empty there
    (Kafka's truncateFullyAndStartAt); otherwise it is cut to the leader's high watermark,
    which the leader's log surely holds;
  * a leader-epoch or leadership error: the partition waits `replica.fetch.backoff.ms`;
    the next cluster image re-points it (ReplicaManager).

A connection failure closes the connection and retries after the backoff, at the address
the latest image gives the leader. The fetcher never decides anything about leadership.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..client.errors import KafkaError
from ..client.net import BrokerConnection
from ..cluster.image import PartitionState, TopicPartition
from ..log.errors import StorageError
from ..log.partition import OffsetMismatch
from ..protocol.errors import NONE, OFFSET_OUT_OF_RANGE
from ..records.batch import iter_headers
from ..replication.follower import EpochEndOffset, follower_high_watermark, truncation

if TYPE_CHECKING:
    from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)

FETCH = 1
FETCH_VERSION = 12  # the first with last_fetched_epoch / diverging_epoch; replica_id is top-level


@dataclass
class _Partition:
    leader_epoch: int
    retry_at: float = 0.0


class Fetcher:
    """Replication from one source broker."""

    def __init__(self, manager: ReplicaManager, source: int) -> None:
        self.manager = manager
        self.source = source
        self.partitions: dict[TopicPartition, _Partition] = {}
        self.wake = asyncio.Event()
        self.conn: BrokerConnection | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = _Partition(leader_epoch)
        self.wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def stop(self) -> None:
        self.task.cancel()
        if self.conn is not None:
            self.conn.close()

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        cfg = self.manager.broker.config
        backoff = cfg.replica_fetch_backoff_ms / 1000
        while True:
            if not self.partitions:
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                conn = await self._connection()
                resp = await conn.request(FETCH, self._body, timeout=cfg.replica_fetch_wait_max_ms / 1000 + 30)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a connection failure, or a bug: the fetcher must live on
                if isinstance(exc, (KafkaError, OSError)):
                    log.info("replica fetcher from broker %d: %s; retrying in %.1fs", self.source, exc, backoff)
                else:
                    log.exception("replica fetcher from broker %d failed; retrying in %.1fs", self.source, backoff)
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                await asyncio.sleep(backoff)
                continue
            try:
                self._process(resp)
            except Exception:
                log.exception("replica fetcher from broker %d: cannot apply a response", self.source)
                await asyncio.sleep(backoff)
                continue
            if resp.error_code != NONE or not self._ready():
                await asyncio.sleep(backoff)

    async def _connection(self) -> BrokerConnection:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        info = self.manager.image.brokers.get(self.source)
        if info is None:
            raise KafkaError(-1, f"broker {self.source} is not registered")
        cfg = self.manager.broker.config
        conn = BrokerConnection(info.host, info.port, f"replica-fetcher-{cfg.node_id}", 30.0,
                                self.manager.broker.inter_broker_security)
        await conn.open(10.0)
        conn.versions[FETCH] = FETCH_VERSION  # pinned: the fields below are v12's
        self.conn = conn
        return conn

    def _ready(self) -> list[TopicPartition]:
        now = asyncio.get_running_loop().time()
        return [tp for tp, p in self.partitions.items() if p.retry_at <= now]

    def _body(self, version: int) -> dict:
        cfg = self.manager.broker.config
        by_topic: dict[str, list[dict]] = {}
        for tp in self._ready():
            plog = self.manager.broker.logs.opened(*tp) or self.manager._log(tp)
            if plog is None:
                continue
            last_epoch = plog.epochs.latest_epoch()
            by_topic.setdefault(tp[0], []).append({
                "partition": tp[1],
                "current_leader_epoch": self.partitions[tp].leader_epoch,
                "fetch_offset": plog.log_end_offset,
                "last_fetched_epoch": -1 if last_epoch is None else last_epoch,
                "log_start_offset": plog.log_start_offset,
                "partition_max_bytes": cfg.replica_fetch_max_bytes,
            })
        return {
            "cluster_id": None,
            "replica_id": cfg.node_id,
            "max_wait": cfg.replica_fetch_wait_max_ms,
            "min_bytes": cfg.replica_fetch_min_bytes,
            "max_bytes": max(cfg.replica_fetch_max_bytes, 10 * 1024 * 1024),
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    # --- answers --------------------------------------------------------------------------

    def _process(self, resp) -> None:
        now = asyncio.get_running_loop().time()
        backoff = self.manager.broker.config.replica_fetch_backoff_ms / 1000
        for t in resp.responses:
            for p in t.partitions:
                tp = (t.topic, p.partition_index)
                state = self.partitions.get(tp)
                if state is None:
                    continue  # removed while the fetch was out
                plog = self.manager.broker.logs.opened(*tp)
                if plog is None:
                    continue
                try:
                    ok = self._apply(tp, plog, p)
                except StorageError as exc:
                    self.manager.broker.storage_failed(exc)
                    ok = False
                if not ok:
                    state.retry_at = now + backoff

    def _apply(self, tp: TopicPartition, plog, p) -> bool:
        code = p.error_code
        if code == OFFSET_OUT_OF_RANGE:
            if plog.log_end_offset < p.log_start_offset:
                log.info("%s-%d: below the leader's log start %d: restarting the log there", *tp, p.log_start_offset)
                plog.truncate_fully_and_start_at(p.log_start_offset)
            elif p.high_watermark >= 0 and plog.log_end_offset > p.high_watermark:
                log.info("%s-%d: ahead of the leader: truncating to its high watermark %d", *tp, p.high_watermark)
                plog.truncate_to(p.high_watermark)
            return True
        if code != NONE:
            log.debug("%s-%d: fetch from %d answered %s", tp[0], tp[1], self.source, code)
            return False
        diverging = getattr(p, "diverging_epoch", None)
        if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
            cut = truncation(EpochEndOffset(diverging.epoch, diverging.end_offset), plog.epochs,
                             plog.log_end_offset, plog.high_watermark)
            log.info("%s-%d: diverged from the leader at epoch %d: truncating to %d", tp[0], tp[1],
                     diverging.epoch, cut.offset)
            plog.truncate_to(cut.offset)
            return True
        records = p.records or b""
        if records:
            headers = list(iter_headers(records))
            if headers:
                end = headers[-1].position + headers[-1].size
                data = bytearray(records[:end])
                try:
                    # A compacted leader may skip offsets (emptied batches are dropped): a
                    # first offset past the log end is fine, one below it is not (Kafka).
                    plog.append_as_follower(data, headers, self.manager.broker.clock())
                except OffsetMismatch as exc:
                    log.warning("%s-%d: %s", tp[0], tp[1], exc)
                    return False
        hw = follower_high_watermark(p.high_watermark, plog.log_end_offset)
        if hw > plog.high_watermark:
            plog.update_high_watermark(hw)
        if 0 <= p.log_start_offset <= plog.high_watermark and p.log_start_offset > plog.log_start_offset:
            plog.increment_log_start_offset(p.log_start_offset)  # Kafka: the follower follows the leader's start
        return True


class FetcherPool:
    """The fetchers of this broker, one per source broker (Kafka's ReplicaFetcherManager)."""

    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager
        self.fetchers: dict[int, Fetcher] = {}
        self.assigned: dict[TopicPartition, int] = {}

    def add(self, tp: TopicPartition, state: PartitionState) -> None:
        if self.assigned.get(tp) not in (None, state.leader):
            self.remove(tp)
        fetcher = self.fetchers.get(state.leader)
        if fetcher is None:
            fetcher = self.fetchers[state.leader] = Fetcher(self.manager, state.leader)
        fetcher.add(tp, state.leader_epoch)
        self.assigned[tp] = state.leader

    def remove(self, tp: TopicPartition) -> None:
        source = self.assigned.pop(tp, None)
        if source is not None and source in self.fetchers:
            self.fetchers[source].remove(tp)

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        self.assigned.clear()
