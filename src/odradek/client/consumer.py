"""The asyncio consumer: one object for both modes of the 0.9 design.

Manual mode: `assign` partitions, `seek`, `poll`, `commit` (to a group id if one is
configured, with no membership: generation -1, as the 0.9 design's "manual offset
management" allows). Group mode: `subscribe(topics or regex, listener)` joins a group
with the KIP-848 consumer protocol (`membership.ConsumerGroupMember`) or, with
`group_protocol="classic"`, with JoinGroup/SyncGroup (`classic.ClassicGroupMember`).

Theory of operation: the membership state machines are sans-I/O (`member.GroupMember`).
A background task (`_group_loop`) sends what the member asks for (heartbeats, joins) to
the coordinator and feeds it the answers, so heartbeats flow whether or not the
application polls. Reconciliation, the part that runs application code, happens inside
`poll` (and `close`), as in Java; what to do and in which order is decided by
`reconciler.Reconciler`, which the simulator drives too, and this class is its asyncio
driver: after fencing, `on_partitions_lost` with no commit; then revocations (auto-commit
of the revoked partitions, then `on_partitions_revoked`, then the member acknowledges);
then assignments (`on_partitions_assigned`; committed offsets fetched before the first
fetch of records). Fetching
is prefetching: after a poll hands out records, fetches for the next ones are already
in flight, one per broker; `fetcher.Positions` drops anything made stale by a seek,
pause or rebalance in between. `fetching.FetchDriver` sends them: to each partition's
leader, or to the replica the leader prefers for `client_rack` (KIP-392), validating
positions after a leader change (KIP-320).

Isolation (KIP-98): `isolation_level` is "read_committed" by default, as librdkafka's (the
Java consumer defaults to read_uncommitted): Fetch and ListOffsets ask for isolation level
1, so reads and "latest" stop at the last stable offset, and records of aborted
transactions are dropped (`fetcher`, `aborted`). `group_metadata()` is what a
transactional producer's `send_offsets_to_transaction` takes (KIP-447).

Auto-commit is at-least-once: what it commits is the position, i.e. the offset after
the last record an earlier poll returned; it runs at the start of a poll (before new
records are handed out), before revocations, and at close.

`metrics()` is librdkafka's statistics object (client/stats.py). The connections and
`fetching` count traffic and records; here every rebalance callback run (lost, revoked,
assigned: librdkafka counts its assign/revoke ops) and every committed offset learned (our
commits, and the OffsetFetch before the first fetch) are recorded; positions, buffered
records and the member's state are read when asked.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Iterable
from typing import Any, Self

from kio.schema.errors import ErrorCode

from . import offsets as O
from .assignors import ASSIGNORS
from .cluster import TopicPartition
from .errors import (
    COORDINATOR_MOVED,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
)
from .fetcher import ConsumerRecord, Positions
from .fetching import FetchDriver
from .member import AssigningMember, GroupMember
from .membership import ConsumerGroupMember
from .net import Client
from .reconciler import REQUIRE_STABLE, Assign, Lose, Reconciler, Revoke
from .stats import OFFSET_INVALID, Snapshot, render
from .transaction import GroupMetadata
from .versions import Api

log = logging.getLogger(__name__)

RESETS = ("earliest", "latest", "none")
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


class RebalanceListener:
    """Override any of these; methods may be plain functions or coroutines.

    The default `on_partitions_lost` calls `on_partitions_revoked`, as Java's does."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> Any:
        pass

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> Any:
        pass

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(partitions)


async def _call(fn, partitions) -> None:
    result = fn(partitions)
    if inspect.isawaitable(result):
        await result


class AsyncConsumer:
    def __init__(self, bootstrap_servers: str | list[str], *, group_id: str | None = None,
                 group_protocol: str = "consumer", group_instance_id: str | None = None,
                 client_id: str = "odradek-consumer", client_rack: str | None = None,
                 auto_offset_reset: str = "latest", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, max_poll_records: int = 500, fetch_max_wait_ms: int = 500,
                 fetch_min_bytes: int = 1, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, session_timeout_ms: int = 45000,
                 heartbeat_interval_ms: int = 3000, max_poll_interval_ms: int = 300000,
                 partition_assignment_strategy: str | list[str] = "range",
                 group_remote_assignor: str | None = None, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300000,
                 isolation_level: str = "read_committed", check_crcs: bool = True,
                 client: Client | None = None, security: dict | None = None) -> None:
        if auto_offset_reset not in RESETS:
            raise ValueError(f"auto_offset_reset must be one of {RESETS}, not {auto_offset_reset!r}")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {tuple(ISOLATION_LEVELS)}, not {isolation_level!r}")
        if group_protocol not in ("consumer", "classic"):
            raise ValueError(f"group_protocol must be 'consumer' or 'classic', not {group_protocol!r}")
        self.group_id = group_id
        self.group_protocol = group_protocol
        self.instance_id = group_instance_id
        self.rack = client_rack
        self.auto_offset_reset = auto_offset_reset
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = max_poll_interval_ms
        strategies = [partition_assignment_strategy] if isinstance(partition_assignment_strategy, str) \
            else list(partition_assignment_strategy)
        unknown = [s for s in strategies if s not in ASSIGNORS]
        if unknown:
            raise ValueError(f"unknown partition_assignment_strategy {unknown}; known: {sorted(ASSIGNORS)}")
        self.strategies = strategies
        self.remote_assignor = group_remote_assignor
        self.isolation_level = ISOLATION_LEVELS[isolation_level]
        self.client = client or Client(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                       retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms,
                                       security=security)
        self._own_client = client is None
        self.client.stats.set_type("consumer")
        self.positions = Positions(check_crcs)
        # The application's side of the group member (lost, revoke, assign; positions of
        # what it holds; commit identity; the auto-commit interval), shared with the simulator.
        self._rec = Reconciler(group_id, self.positions, resolve=self._resolve, topic_id=self.client.cluster.topic_id,
                               needs_generation=group_protocol == "classic",
                               auto_commit=enable_auto_commit and group_id is not None,
                               auto_commit_interval_ms=auto_commit_interval_ms, first_auto_commit_ms=_now())
        self.listener: RebalanceListener = RebalanceListener()
        self._mode: str | None = None  # "assign" | "subscribe"
        self._pattern: re.Pattern | None = None
        self._topics: list[str] | None = None
        self._wake: asyncio.Event | None = None
        self._group_wake: asyncio.Event | None = None
        self._group_task: asyncio.Task | None = None
        # Fetches, the replica each partition is read from (KIP-392; `fetching.replicas.lease_ms`
        # is metadata_max_age_ms, as in Java) and position validation (KIP-320).
        self.fetching = FetchDriver(
            self.client, self.positions, wake=self._wake_poll, rack=client_rack, max_wait_ms=fetch_max_wait_ms,
            min_bytes=fetch_min_bytes, max_bytes=fetch_max_bytes, partition_max_bytes=max_partition_fetch_bytes,
            isolation_level=self.isolation_level, reset_policy=auto_offset_reset)
        self._heartbeat_seen: asyncio.Condition | None = None
        self._closed = False
        self._started = False

    @property
    def member(self) -> GroupMember | None:
        """The group member core (ConsumerGroupMember or classic.ClassicGroupMember)."""
        return self._rec.member

    @member.setter
    def member(self, member: GroupMember | None) -> None:
        self._rec.member = member

    @property
    def auto_commit(self) -> bool:
        return self._rec.auto_commit

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> AsyncConsumer:
        self._wake = asyncio.Event()
        self._group_wake = asyncio.Event()
        self._heartbeat_seen = asyncio.Condition()
        await self.client.refresh_metadata()
        self._started = True
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self, timeout: float = 30.0) -> None:
        """Commit (auto-commit), revoke everything, leave the group, close connections."""
        if self._closed:
            return
        try:
            if self.member is not None and self.member.active:
                await asyncio.wait_for(self._leave_group(), timeout)
            elif self.auto_commit and self._mode == "assign":
                await self._commit_positions(self.positions.parts)
        except (TimeoutError, KafkaError) as exc:
            log.warning("consumer close: %s", exc)
        finally:
            self._closed = True
            await self._stop_tasks()
            if self._own_client:
                await self.client.close()

    def _wake_poll(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _stop_tasks(self) -> None:
        tasks = [t for t in (self._group_task, *self.fetching.all_tasks()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # noqa: BLE001 - shutting down: report, do not raise
                log.debug("consumer task ended with %r", exc)
        self.fetching.forget_tasks()

    # ------------------------------------------------------------------ manual assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        if self._mode == "subscribe":
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        tps = [TopicPartition(*tp) for tp in partitions]
        self._mode = "assign" if tps else None
        self.positions.set(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions.parts)

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        tp = TopicPartition(*tp)
        if tp not in self.positions.parts:
            raise IllegalStateError(f"seek: {tp} is not assigned to this consumer")
        if offset < 0:
            raise ValueError("seek offset must be >= 0")
        self.positions.seek(tp, offset)

    def seek_to_beginning(self, tps=None) -> None:
        self._reset_to(tps, "earliest")

    def seek_to_end(self, tps=None) -> None:
        self._reset_to(tps, "latest")

    def _reset_to(self, tps, how: str) -> None:
        for tp in (self.positions.parts if tps is None else [TopicPartition(*t) for t in tps]):
            s = self.positions.parts.get(tp)
            if s is None:
                raise IllegalStateError(f"{tp} is not assigned to this consumer")
            s.position, s.reset = None, how

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record poll will return (looked up if not yet known)."""
        tp = TopicPartition(*tp)
        s = self.positions.parts.get(tp)
        if s is None:
            raise IllegalStateError(f"position: {tp} is not assigned to this consumer")
        if s.position is None:
            await self._update_positions()
        return self.positions.parts[tp].position

    def pause(self, tps) -> None:
        for tp in (TopicPartition(*t) for t in tps):
            if tp not in self.positions.parts:
                raise IllegalStateError(f"pause: {tp} is not assigned to this consumer")
            self.positions.parts[tp].paused = True

    def resume(self, tps) -> None:
        for tp in (TopicPartition(*t) for t in tps):
            if tp in self.positions.parts:
                self.positions.parts[tp].paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.positions.parts.items() if s.paused}

    # ------------------------------------------------------------------ subscription

    def subscribe(self, topics: Iterable[str] | str | None = None, *, pattern: str | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Join the group. `topics` is a list of names, or a string starting with '^'
        (a regex, as librdkafka takes it); `pattern` is a regex (RE2, evaluated by the
        coordinator with the consumer protocol, by this client with the classic one)."""
        if self.group_id is None:
            raise IllegalStateError("subscribe() needs a group_id")
        if self._mode == "assign":
            raise IllegalStateError("subscribe() after assign(): call unassign (assign([])) first")
        if isinstance(topics, str):
            if topics.startswith("^"):
                pattern, topics = topics, None
            else:
                topics = [topics]
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes topics or a pattern, exactly one")
        if listener is not None:
            self.listener = listener
        self._mode = "subscribe"
        self._topics = sorted(set(topics)) if topics is not None else None
        self._pattern = re.compile(pattern) if pattern is not None else None
        now = _now()
        if self.member is None:
            if self.group_protocol == "consumer":
                self.member = ConsumerGroupMember(
                    self.group_id, instance_id=self.instance_id, rack_id=self.rack,
                    rebalance_timeout_ms=self.rebalance_timeout_ms, server_assignor=self.remote_assignor)
            else:
                from .classic import ClassicGroupMember

                self.member = ClassicGroupMember(
                    self.group_id, assignors=[ASSIGNORS[s]() for s in self.strategies],
                    instance_id=self.instance_id, rack_id=self.rack, session_timeout_ms=self.session_timeout_ms,
                    rebalance_timeout_ms=self.rebalance_timeout_ms, heartbeat_interval_ms=self.heartbeat_interval_ms)
        if self.group_protocol == "consumer":
            self.member.subscribe(self._topics, pattern, now=now)
        else:
            self.member.subscribe(self._classic_topics(), now=now)
        if self._group_task is None or self._group_task.done():
            self._group_task = asyncio.get_running_loop().create_task(self._group_loop())
        self._group_wake.set()

    def subscription(self) -> set[str]:
        return set(self._topics or [])

    def _classic_topics(self) -> list[str]:
        if self._pattern is None:
            return list(self._topics or [])
        # Java's pattern subscription: full match against every non-internal topic.
        return sorted(t for t, info in self.client.cluster.topics.items()
                      if not info.internal and self._pattern.fullmatch(t))

    async def unsubscribe(self) -> None:
        if self.member is not None and self.member.active:
            await self._leave_group()
        self._mode = None
        self.positions.set([])

    # ------------------------------------------------------------------ poll

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from assigned partitions, waiting up to `timeout_ms` for some."""
        if self._closed:
            raise IllegalStateError("consumer is closed")
        if self._mode is None:
            raise IllegalStateError("poll() needs assign() or subscribe() first")
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._raise_pending()
            if self.member is not None:
                await self._reconcile()
            await self._maybe_auto_commit()
            if self.positions.needing_position():
                await self._update_positions()
            records = self.positions.take(limit)
            self.fetching.start()
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._wake.clear()
            if self._has_work():
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except TimeoutError:
                pass

    def _has_work(self) -> bool:
        if self.positions.buffer:
            return True
        step = self._rec.next_step()
        return step is not None and (not isinstance(step, Assign) or bool(step.pairs))

    def _raise_pending(self) -> None:
        if self.member is not None and self.member.error is not None:
            raise self.member.error
        if self.fetching.error is not None:
            err, self.fetching.error = self.fetching.error, None
            raise err

    # ------------------------------------------------------------------ positions

    async def _update_positions(self) -> None:
        need = self.positions.needing_position()
        if not need:
            return
        committed: dict[TopicPartition, int] = {}
        fresh = self._rec.to_fetch(need)  # fetch-before-consume: committed offsets first
        if fresh and self.group_id is not None:
            found = await O.fetch_committed(self.client, self.group_id, fresh, require_stable=REQUIRE_STABLE)
            committed = {tp: om.offset for tp, om in found.items()}
            self._committed_seen(committed)
        resets: dict[TopicPartition, int] = {}
        for tp in self._rec.apply_committed(committed, need):
            s = self.positions.parts[tp]
            how = s.reset or self.auto_offset_reset
            if how == "none":
                raise KafkaError(ErrorCode.offset_out_of_range,
                                 f"{tp}: no committed offset and auto_offset_reset=none", retriable=False)
            resets[tp] = O.EARLIEST if how == "earliest" else O.LATEST
        if resets:
            found = await O.list_offsets(self.client, resets, isolation_level=self.isolation_level)
            for tp, ot in found.items():
                s = self.positions.parts.get(tp)
                if s is not None and s.position is None:
                    s.position, s.reset = ot.offset, None

    # ------------------------------------------------------------------ offsets

    async def commit(self, offsets: dict | None = None) -> None:
        """Commit `offsets` (tp -> offset of the next record to read), or every position.

        In a group the commit carries the member epoch (KIP-848) or generation; a
        STALE_MEMBER_EPOCH is retried once the next heartbeat has updated the epoch."""
        if self.group_id is None:
            raise IllegalStateError("commit() needs a group_id")
        if offsets is None:
            offsets = self._rec.offsets()  # what is consumed, of topics still the ones assigned
        offsets = {TopicPartition(*tp): o for tp, o in offsets.items()}
        await self._commit(offsets)

    async def _commit(self, offsets: dict) -> None:
        if not offsets:
            return
        for attempt in range(10):
            req = self._rec.commit_request(offsets)  # the identity of now; raises when there is none
            try:
                await O.commit(self.client, req.group_id, req.offsets, generation=req.generation,
                               member_id=req.member_id, instance_id=req.instance_id)
                self._rec.committed(_now())
                self._committed_seen(req.offsets)
                return
            except KafkaError as exc:
                if exc.code != ErrorCode.stale_member_epoch or self.member is None:
                    raise
                # KIP-848 "Offset commit": the epoch moved on; retry with the next one.
                await self._await_heartbeat()
        raise KafkaError(ErrorCode.stale_member_epoch, "commit: member epoch kept moving")

    async def _await_heartbeat(self, timeout: float = 10.0) -> None:
        seen = self.member.epoch_changes if self.member is not None else 0
        if self.member is not None and not self.member.in_flight:
            self.member.next_heartbeat_ms = 0  # ask for one now rather than at the interval
            self._group_wake.set()
        async with self._heartbeat_seen:
            try:
                await asyncio.wait_for(self._heartbeat_seen.wait_for(
                    lambda: self.member is None or self.member.epoch_changes > seen), timeout)
            except TimeoutError:
                pass

    async def _commit_positions(self, tps) -> None:
        await self._commit_logged(self._rec.offsets(tps))

    async def _commit_logged(self, offsets: dict) -> None:
        try:
            await self._commit(offsets)
        except KafkaError as exc:
            log.warning("auto-commit of %d partition(s) failed: %s", len(offsets), exc)

    async def _maybe_auto_commit(self) -> None:
        if self._rec.auto_commit_due(_now()):
            await self._commit_positions(list(self.positions.parts))

    async def committed(self, tps) -> dict[TopicPartition, int | None]:
        if self.group_id is None:
            raise IllegalStateError("committed() needs a group_id")
        tps = [TopicPartition(*tp) for tp in tps]
        found = await O.fetch_committed(self.client, self.group_id, tps)
        self._committed_seen({tp: om.offset for tp, om in found.items()})
        return {tp: found[tp].offset if tp in found else None for tp in tps}

    async def end_offsets(self, tps) -> dict[TopicPartition, int]:
        found = await O.list_offsets(self.client, {TopicPartition(*tp): O.LATEST for tp in tps},
                                     isolation_level=self.isolation_level)
        return {tp: ot.offset for tp, ot in found.items()}

    async def beginning_offsets(self, tps) -> dict[TopicPartition, int]:
        found = await O.list_offsets(self.client, {TopicPartition(*tp): O.EARLIEST for tp in tps})
        return {tp: ot.offset for tp, ot in found.items()}

    async def offsets_for_times(self, timestamps: dict) -> dict[TopicPartition, O.OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the given one, or None past the end."""
        found = await O.list_offsets(self.client, {TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()},
                                     isolation_level=self.isolation_level)
        return {tp: (ot if ot.offset >= 0 else None) for tp, ot in found.items()}

    def group_metadata(self) -> GroupMetadata:
        """The consumer's group identity now, for a transactional producer's
        `send_offsets_to_transaction` (Java groupMetadata(), confluent-kafka
        consumer_group_metadata()): the generation (the member epoch with the consumer
        protocol) and member id let the coordinator refuse offsets from a member that has
        lost its partitions (KIP-447). Outside a group (manual assignment, or not yet joined):
        generation -1 and no member id, which the coordinator does not fence."""
        if self.group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        m = self.member
        if m is not None and m.active:
            generation, member_id, instance_id = m.commit_identity()
            return GroupMetadata(self.group_id, generation, member_id, instance_id)
        # As the classic member's commit identity: the instance id goes only with a
        # member id (a static id without one is FENCED_INSTANCE_ID at the coordinator).
        return GroupMetadata(self.group_id, -1, "", None)

    # ------------------------------------------------------------------ group membership

    def _resolve(self, key) -> TopicPartition | None:
        """The name of a member's partition: classic members name topics, KIP-848 members
        give topic ids, which metadata names (None while it does not know the topic)."""
        if self.group_protocol == "classic":
            return key
        name = self.client.cluster.by_id.get(key[0])
        return None if name is None else TopicPartition(name, key[1])

    async def _reconcile(self) -> None:
        """Carry out what the reconciler says the member needs: lost, revoke, then assign."""
        rec = self._rec
        step = rec.next_step()
        if isinstance(step, Lose):
            rec.drop_lost(step)
            log.info("group %s: member fenced, %d partition(s) lost", self.group_id, len(step.parts))
            self._rebalanced("partitions lost")
            await _call(self.listener.on_partitions_lost, set(step.parts))
            rec.lost(_now())
            self._group_wake.set()
            return
        if isinstance(step, Revoke):
            names = set(step.parts)
            try:
                offsets = rec.start_revoke(step)
                if offsets:
                    try:
                        await self._commit_logged(offsets)  # commit before acknowledging the revocation
                    finally:
                        rec.revoke_commit_done(step)
                for tp in names:  # no more fetching, but position() and commit() still work in the callback
                    if tp in self.positions.parts:
                        self.positions.parts[tp].paused = True
                self._rebalanced("partitions revoked")
                await _call(self.listener.on_partitions_revoked, names)
            except BaseException:
                rec.cancel_revoke()  # the next poll starts it again
                raise
            rec.finish_revoke(_now())
            self._group_wake.set()
            step = rec.next_step()
        if isinstance(step, Assign):
            if step.unresolved:
                await self.client.refresh_metadata(all_topics=True)
                step = rec.next_step()
            if isinstance(step, Assign) and step.pairs:
                rec.start_assign(step)
                self._rebalanced("partitions assigned")
                await _call(self.listener.on_partitions_assigned, set(step.parts))
                rec.finish_assign(step, _now())
                self._group_wake.set()

    def _rebalanced(self, what: str) -> None:
        """Statistics: a rebalance callback is about to run (librdkafka's rebalance_cnt)."""
        reason = getattr(self.member, "join_reason", None)  # the classic member's JoinGroup reason (KIP-800)
        self.client.stats.rebalanced(f"{what}: {reason}" if reason else what, time.monotonic())

    def _committed_seen(self, offsets: dict) -> None:
        """Statistics: committed offsets this consumer committed or fetched (committed_offset)."""
        stats, now = self.client.stats, time.monotonic()
        for tp, o in offsets.items():
            stats.partition(tp.topic, tp.partition, now).committed_offset = o.offset if isinstance(
                o, O.OffsetAndMetadata) else int(o)

    # ------------------------------------------------------------------ statistics

    def metrics(self) -> dict:
        """The consumer's statistics in the shape of librdkafka's (STATISTICS.md), as a dict;
        client/stats.py says which fields are filled. Windows (rtt, throttle) cover the time
        since the previous call."""
        cluster = self.client.cluster
        positions = self.positions
        buffered = positions.buffered_records()
        tps = set(positions.parts)
        for t in set(self.client.stats.topics) | {tp.topic for tp in positions.parts}:
            tps.update(cluster.partitions(t))
        parts: dict[tuple[str, int], dict] = {}
        for tp in tps:
            info = cluster.partition(tp)
            s = positions.parts.get(tp)
            g: dict = {"leader": info.leader if info is not None else -1, "desired": s is not None,
                       "unknown": info is None, "leader_epoch": info.leader_epoch if info is not None else -1}
            if s is None:
                g.update(fetchq_cnt=0, fetch_state="none", next_offset=OFFSET_INVALID,
                         app_offset=OFFSET_INVALID, stored_offset=OFFSET_INVALID)
            else:
                pos = s.position if s.position is not None else OFFSET_INVALID
                # librdkafka's fetch states: offset-query while the start offset is looked up,
                # validate-epoch-wait during KIP-320 validation, active otherwise (paused too).
                state = "offset-query" if s.position is None else "validate-epoch-wait" if s.validating else "active"
                nxt = positions.next_fetch_offset(tp)
                g.update(fetchq_cnt=buffered.get(tp, 0), fetch_state=state,
                         next_offset=nxt if nxt is not None else OFFSET_INVALID, app_offset=pos, stored_offset=pos)
            parts[tp] = g
        cgrp = extra = None
        if self.group_id is not None:
            m = self.member
            extra = {"group_protocol": self.group_protocol}
            if m is not None:
                extra["member_id"] = m.member_id
                if self.group_protocol == "classic":
                    extra["generation_id"] = m.generation
                else:
                    extra["member_epoch"] = m.epoch
                extra["member_state"] = m.state.value
            cgrp = {"state": self._cgrp_state(), "join_state": _join_state(m),
                    "assignment_size": len(positions.parts) if self._mode == "subscribe" else 0}
        snap = Snapshot(time.monotonic(), time.time(), metadata_cache_cnt=len(cluster.topics), partitions=parts,
                        consumer=True, read_committed=self.isolation_level == 1, cgrp=cgrp, extra=extra)
        return render(self.client.stats, snap)

    def _cgrp_state(self) -> str:
        """librdkafka's cgrp state: "up" while a connection to the coordinator is open."""
        up = self.client.coordinator_up(self.group_id)
        if up is None:
            return "init" if self.member is None else "query-coord"
        return "up" if up else "wait-broker-transport"

    async def _leave_group(self) -> None:
        m = self.member
        owned = self._rec.held() if self._mode == "subscribe" else frozenset()
        if owned:
            if self.auto_commit:
                await self._commit_positions(owned)
            for tp in owned:
                self.positions.parts[tp].paused = True
            self._rebalanced("leaving the group")
            await _call(self.listener.on_partitions_revoked, set(owned))
        self._rec.leave(owned, _now())
        self._group_wake.set()
        # Wait for the leave heartbeat (bounded by the request timeout in the loop).
        while m.active and self._group_task is not None and not self._group_task.done():
            async with self._heartbeat_seen:
                try:
                    await asyncio.wait_for(self._heartbeat_seen.wait(), self.client.request_timeout)
                except TimeoutError:
                    break

    async def _group_loop(self) -> None:
        m = self.member
        last_watch = time.monotonic()
        assigning = isinstance(m, AssigningMember)
        while not self._closed and m.active and m.error is None:
            needs = m.needs_metadata if assigning else None
            if needs:
                # The classic leader assigns: it needs every member's topics' partition counts.
                if await self._feed_metadata(m, list(needs)):
                    continue
            elif self.group_protocol == "classic" and time.monotonic() - last_watch > self._watch_interval():
                # Java's classic consumer: pattern subscriptions are re-evaluated, and the
                # leader watches partition counts, on each metadata refresh.
                last_watch = time.monotonic()
                await self._watch_metadata(m)
            req = m.next_request(_now())
            if req is not None:
                api, body = req
                await self._send_group(api, body)
                continue
            deadline = m.next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - _now()) / 1000)
            if self.group_protocol == "classic":
                timeout = min(timeout if timeout is not None else self._watch_interval(), self._watch_interval())
            self._group_wake.clear()
            try:
                await asyncio.wait_for(self._group_wake.wait(), timeout)
            except TimeoutError:
                pass
        async with self._heartbeat_seen:
            self._heartbeat_seen.notify_all()

    def _watch_interval(self) -> float:
        return min(self.client.metadata_max_age, 5.0)

    async def _feed_metadata(self, m, topics: list[str]) -> bool:
        """Give the classic member partition counts; False when metadata failed (the loop
        then goes on heartbeating and retries after a backoff)."""
        try:
            await self.client.refresh_metadata(topics)
        except KafkaError as exc:
            log.warning("group %s: metadata for the assignment failed: %s", self.group_id, exc)
            return False
        m.set_metadata({t: n for t in topics if (n := self.client.cluster.partition_count(t))}, _now())
        return True

    async def _watch_metadata(self, m) -> None:
        try:
            await self.client.refresh_metadata(all_topics=self._pattern is not None)
        except KafkaError as exc:
            log.debug("group %s: metadata refresh failed: %s", self.group_id, exc)
            return
        if self._pattern is not None:
            topics = self._classic_topics()
            if topics != sorted(m.topics or []):
                m.subscribe(topics, now=_now())
        if isinstance(m, AssigningMember) and m.is_leader:
            cluster = self.client.cluster
            m.set_metadata({t: n for t in m.group_topics if (n := cluster.partition_count(t))}, _now())

    async def _send_group(self, api: int, body: dict) -> None:
        m = self.member
        try:
            node = await self.client.coordinator(self.group_id)
            timeout = self.client.request_timeout
            if api == Api.JOIN_GROUP:
                # A JoinGroup is parked until the rebalance completes (up to the rebalance timeout).
                timeout = max(timeout, self.rebalance_timeout_ms / 1000 + 5)  # Java's JoinGroup timeout
            resp = await self.client.send(node, api, body, timeout=timeout)
        except KafkaError as exc:
            if exc.code in COORDINATOR_MOVED or isinstance(exc, KafkaConnectionError) or exc.retriable:
                self.client.forget_coordinator(self.group_id)
            if not exc.retriable and not isinstance(exc, KafkaConnectionError):
                m.error = exc
            m.on_failure(api, exc, _now())
        else:
            if getattr(resp, "error_code", ErrorCode.none) in COORDINATOR_MOVED:
                self.client.forget_coordinator(self.group_id)
            m.on_response(api, resp, _now())
        self._wake.set()
        async with self._heartbeat_seen:
            self._heartbeat_seen.notify_all()


# librdkafka's cgrp join_state for a member state that means the same (rd_kafka_cgrp_join_state_names);
# other states are shown under their own name.
_JOIN_STATES = {
    "unsubscribed": "init",
    "preparing": "wait-unassign-call",  # classic eager: revoking before JoinGroup
    "joining": "wait-join",
    "assigning": "wait-metadata",  # classic leader: partition counts for the assignor
    "syncing": "wait-sync",
    "reconciling": "wait-assign-call",
    "stable": "steady",
}


def _join_state(member) -> str:
    if member is None:
        return "init"
    state = member.state.value
    if state == "reconciling" and member.to_revoke():
        return "wait-unassign-call"  # revocations come first
    return _JOIN_STATES.get(state, state)


def _now() -> float:
    return time.monotonic() * 1000
