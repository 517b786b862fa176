"""The consumer's asyncio fetch driver: Fetch requests, KIP-392 replica choice, KIP-320 validation.

Theory of operation. `start()` runs on every turn of `AsyncConsumer.poll`. It looks at each
assigned partition with a position: its leader and leader epoch from metadata
(`validation.observe_leader`: a new leader drops the preferred read replica and may make
the position await validation), then where it is fetched from (`readreplica.ReadReplicas.route`:
the leader, or the replica the leader prefers for this client's rack, for a lease). Fetchable
partitions (`fetcher.Positions.plan`) are grouped by that node and one Fetch per node is in
flight at a time; its answer is handed to `ReadReplicas.on_fetched`, whose `Step` says what to
do: keep the records, fetch again from the leader, refresh metadata and back off, apply the
reset policy (only the leader's OFFSET_OUT_OF_RANGE), validate, or fail. Partitions awaiting
validation get one OffsetsForLeaderEpoch per leader (`validation.request_body`/`on_answer`).

Metadata is refreshed when an answer says it is stale, when a broker cannot be reached, and
every `metadata.max.age.ms` while fetching (Java's periodic refresh: it is how a consumer sees
an ISR shrink, and the new leader after a change nobody told it about). Errors meant for
the application are kept in `error` and raised by the next poll. With read_committed every
Fetch asks for isolation_level 1 and the aborted transactions of each answer go to
`Positions.on_partition`, which drops their records (KIP-98). Every task sets the
consumer's wake-up event when it ends, so a poll waiting for records looks again.

Statistics (client/stats.py), per partition per answer: the log start, high watermark and
last stable offset of every answer without error, and the records and bytes of each chunk
kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from . import validation as V
from .cluster import TopicPartition
from .errors import (
    STALE_METADATA,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedApiError,
)
from .fetcher import Positions, fetch_body
from .net import Client
from .readreplica import ReadReplicas, Step
from .stats import OFFSET_INVALID
from .versions import Api

log = logging.getLogger(__name__)


class FetchDriver:
    def __init__(self, client: Client, positions: Positions, *, wake: Callable[[], None], rack: str | None,
                 max_wait_ms: int, min_bytes: int, max_bytes: int, partition_max_bytes: int,
                 isolation_level: int, reset_policy: str) -> None:
        self.client = client
        self.positions = positions
        self.wake = wake
        self.rack = rack
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.isolation_level = isolation_level
        self.reset_policy = reset_policy
        # KIP-392: Java keeps a preferred read replica for metadata.max.age.ms.
        self.replicas = ReadReplicas(lease_ms=client.metadata_max_age * 1000)
        self.fetches: dict[int, asyncio.Task] = {}
        self.validating: asyncio.Task | None = None
        self.tasks: set[asyncio.Task] = set()
        self.error: KafkaError | None = None
        self._refreshing: set[str] = set()
        self._refresh: asyncio.Task | None = None

    # ------------------------------------------------------------------ tasks

    def all_tasks(self) -> list[asyncio.Task]:
        return [t for t in (*self.fetches.values(), self.validating, self._refresh, *self.tasks) if t is not None]

    def forget_tasks(self) -> None:
        self.fetches.clear()
        self.validating = self._refresh = None

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def refresh(self) -> None:
        """Refresh metadata of every known topic; concurrent callers share one request."""
        t = self._refresh
        if t is None or t.done():
            t = self._refresh = asyncio.get_running_loop().create_task(self.client.refresh_metadata())
        try:
            await asyncio.shield(t)
        except KafkaError as exc:
            log.debug("metadata refresh failed: %s", exc)

    async def _refresh_topic(self, topic: str) -> None:
        try:
            await self.client.refresh_metadata([topic])
        except KafkaError as exc:
            log.debug("metadata for %s: %s", topic, exc)
            await asyncio.sleep(self.client.backoff)
        finally:
            self._refreshing.discard(topic)
            self.wake()  # poll may be waiting for exactly this leader

    async def _refresh_and_wake(self) -> None:
        await self.refresh()
        self.wake()

    # ------------------------------------------------------------------ planning

    def start(self) -> None:
        """Start the fetches and validations that can start now."""
        now = _now()
        cluster = self.client.cluster
        parts = self.positions.parts
        if parts and self.client.metadata_age() > self.client.metadata_max_age and \
                (self._refresh is None or self._refresh.done()):
            self._spawn(self._refresh_and_wake())  # Java: metadata.max.age.ms
        for tp, s in parts.items():
            if s.position is None:
                continue
            info = cluster.partition(tp)
            leader = cluster.leader(tp)
            if leader is None or info is None:
                if tp.topic not in self._refreshing:
                    self._refreshing.add(tp.topic)
                    self._spawn(self._refresh_topic(tp.topic))
                continue
            if V.observe_leader(s, leader, info.leader_epoch):
                log.debug("%s: leader %d at epoch %d; validating position %d (epoch %d)", tp, leader,
                          info.leader_epoch, s.position, s.position_epoch)
                self.positions.drop_buffered([tp])
        targets: dict[TopicPartition, int] = {}
        rackless: set[int] = set()
        for tp in self.positions.fetchable():
            s = parts[tp]
            info = cluster.partition(tp)
            if s.leader < 0 or info is None or cluster.leader(tp) is None:
                continue
            route = self.replicas.route(s, now, cluster.brokers, info.isr)
            targets[tp] = route.node
            if not route.rack:
                rackless.add(route.node)
        for node, items in self.positions.plan(targets).items():
            t = self.fetches.get(node)
            if t is None or t.done():
                self.fetches[node] = asyncio.get_running_loop().create_task(
                    self._fetch(node, items, rack=node not in rackless))
        if self.validating is None or self.validating.done():
            due = [(tp, s) for tp, s in parts.items() if s.validating and s.leader >= 0]
            if due:
                self.validating = asyncio.get_running_loop().create_task(self._validate(due))

    # ------------------------------------------------------------------ fetching

    async def _fetch(self, node: int, items: list[tuple[TopicPartition, int, int]], *, rack: bool = True) -> None:
        offsets = {tp: offset for tp, offset, _ in items}
        body = fetch_body(offsets, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
                          partition_max_bytes=self.partition_max_bytes, isolation_level=self.isolation_level,
                          rack=self.rack if rack else None, epochs={tp: epoch for tp, _, epoch in items})
        refresh = backoff = False
        try:
            resp = await self.client.send(node, Api.FETCH, body,
                                          timeout=self.client.request_timeout + self.max_wait_ms / 1000)
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, "Fetch")
            now = _now()
            brokers = self.client.cluster.brokers
            stats = self.client.stats
            for t in resp.responses:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, int(p.partition_index))
                    s = self.positions.parts.get(tp)
                    if tp not in offsets or s is None:
                        continue
                    if p.error_code == ErrorCode.none:
                        ps = stats.partition(tp.topic, tp.partition, now / 1000)
                        ps.hi_offset = hwm = int(p.high_watermark)
                        lso = int(getattr(p, "last_stable_offset", -1))
                        ps.ls_offset = lso if lso >= 0 else hwm  # librdkafka: the hwm when there is no LSO
                        start = int(getattr(p, "log_start_offset", -1))
                        ps.lo_offset = start if start >= 0 else OFFSET_INVALID
                    step = self.replicas.on_fetched(
                        s, node, p.error_code, preferred=int(getattr(p, "preferred_read_replica", -1)),
                        fetch_offset=offsets[tp], high_watermark=int(p.high_watermark), now_ms=now, brokers=brokers)
                    if step is Step.RECORDS:
                        # read_committed: the broker lists the aborted transactions in what
                        # it returns; the client drops their records (KIP-98).
                        aborted = p.aborted_transactions if self.isolation_level == 1 else None
                        chunk = self.positions.on_partition(tp, offsets[tp], p.records, int(p.high_watermark),
                                                            aborted)
                        if chunk is not None:
                            ps = stats.partition(tp.topic, tp.partition, now / 1000)
                            ps.rxmsgs += len(chunk.records)
                            ps.rxbytes += len(p.records)
                    elif step is Step.RESET:
                        self._out_of_range(tp, offsets[tp])
                    elif step is Step.VALIDATE:
                        log.info("%s: offset %d is past replica %d's high watermark %d; validating with the "
                                 "leader", tp, offsets[tp], node, int(p.high_watermark))
                        if V.require(s):
                            self.positions.drop_buffered([tp])
                        refresh = True
                    elif step is Step.REFRESH:
                        log.debug("fetch %s from node %d: %s", tp, node, ErrorCode(p.error_code).name)
                        refresh = backoff = True
                    elif step is Step.FAIL:
                        self.error = KafkaError(p.error_code, f"Fetch {tp} from node {node}")
        except KafkaError as exc:
            if not exc.retriable and not _unreachable(exc):
                self.error = exc
            else:
                log.debug("fetch from node %s failed: %s", node, exc)
                backoff = True
                if _unreachable(exc):
                    # Java handleFetchFailure: the partitions go back to their leaders.
                    self.replicas.on_unreachable(
                        node, {tp: s for tp in offsets if (s := self.positions.parts.get(tp)) is not None}, _now())
                    refresh = True
                elif exc.code in STALE_METADATA:
                    refresh = True
        try:
            # The leader moved, a replica went, or the preferred one is new to us: refresh,
            # and back off before the next fetch so a broker that keeps disagreeing is not hammered.
            if refresh:
                await self.refresh()
            if backoff:
                await asyncio.sleep(self.client.backoff)
        finally:
            self.wake()

    def _out_of_range(self, tp: TopicPartition, offset: int) -> None:
        """The leader's OFFSET_OUT_OF_RANGE at `offset`: the reset policy (Java handleOffsetOutOfRange)."""
        s = self.positions.parts.get(tp)
        if s is None or s.position != offset:
            return
        if self.reset_policy == "none":
            self.error = KafkaError(ErrorCode.offset_out_of_range,
                                    f"{tp}: offset {offset} is out of range and auto_offset_reset=none",
                                    retriable=False)
            return
        log.info("%s: offset %d out of range, resetting to %s", tp, offset, self.reset_policy)
        s.position, s.reset = None, self.reset_policy

    # ------------------------------------------------------------------ KIP-320 validation

    async def _validate(self, due) -> None:
        by_node: dict[int, list] = {}
        for tp, s in due:
            by_node.setdefault(s.leader, []).append((tp, s))
        try:
            await asyncio.gather(*(self._validate_at(node, items) for node, items in by_node.items()))
        finally:
            self.wake()

    async def _validate_at(self, node: int, items) -> None:
        asked = {tp: s.position for tp, s in items}
        body = V.request_body(items)
        try:
            resp = await self.client.send(node, Api.OFFSET_FOR_LEADER_EPOCH, body)
        except UnsupportedApiError:
            # Java: a broker without OffsetsForLeaderEpoch v3 cannot validate; skip it.
            for _, s in items:
                V.complete(s)
            return
        except KafkaError as exc:
            if not exc.retriable and not _unreachable(exc):
                self.error = exc
                return
            log.debug("OffsetsForLeaderEpoch to node %d failed: %s", node, exc)
            if _unreachable(exc) or exc.code in STALE_METADATA:
                await self.refresh()
            await asyncio.sleep(self.client.backoff)
            return
        refresh = retry = False
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, int(p.partition))
                s = self.positions.parts.get(tp)
                if s is None or tp not in asked:
                    continue
                verdict = V.on_answer(tp, s, asked[tp], p.error_code, int(p.leader_epoch), int(p.end_offset),
                                      self.reset_policy)
                outcome = verdict.outcome
                if outcome is V.Outcome.TRUNCATED:
                    log.warning("%s: truncation detected at offset %d; resuming from offset %d, the first "
                                "known to diverge", tp, asked[tp], s.position)
                    self.positions.drop_buffered([tp])
                elif outcome is V.Outcome.RESET:
                    log.warning("%s: truncation detected at offset %d; resetting to %s", tp, asked[tp],
                                self.reset_policy)
                    self.positions.drop_buffered([tp])
                elif outcome is V.Outcome.ERROR:
                    self.error = verdict.error
                    retry = True  # the position still awaits validation; poll raises meanwhile
                elif outcome is V.Outcome.REFRESH:
                    refresh = retry = True
                elif outcome is V.Outcome.RETRY:
                    retry = True
        if refresh:
            await self.refresh()
        if retry:
            await asyncio.sleep(self.client.backoff)


def _unreachable(exc: KafkaError) -> bool:
    """No answer from the broker: connection refused or broken, timed out, or gone from metadata."""
    return isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)) or exc.code == ErrorCode.broker_not_available


def _now() -> float:
    return time.monotonic() * 1000
