"""The coordinator runtime: shards, write-then-replay, deferred answers, elections, timers.

Theory of operation (KIP-848 "Group Coordinator": one state machine per
`__consumer_offsets` partition, run as an event loop; Kafka's CoordinatorRuntime): a
group belongs to partition `abs(java_hash(group_id)) % offsets.topic.num.partitions`, as
in Kafka, so tools that compute the coordinator partition agree with us.

Writes. `submit(group_id, op, now)` calls the handler `op(shard, now) -> Result`, hands
its records to the injected `writer` (`append(partition, records, now) -> last offset
written`: the broker appends a batch to the partition log, the simulator keeps a list),
and only after the append succeeded replays them into the shard. The answer (and every
classic reply the handler queued in `shard.outbox`) waits in the shard's deferred queue
until the committed offset reaches the last offset written (`complete_up_to`): on a
single node (`commit_on_write`) that is the log end right after the write, in a cluster
the high watermark. Answers of a partition whose committed offset has not moved for
`write_timeout_ms` while some wait fail COORDINATOR_NOT_AVAILABLE (`fail_stalled_writes`:
Kafka's write timeout, offsets.commit.timeout.ms, normalized as GroupCoordinatorService
does); their records stay in the log and may still commit. If the append fails, nothing of the operation survives: its queued
replies and its answer fail with the code Kafka gives (`errors.error_code_for`), and the
shard is reloaded from its log in place (the revert: whatever a handler changed directly,
as classic handlers do, is rebuilt from the records), with every parked request failed
NOT_COORDINATOR and every timer re-armed by the load.

Loading. A shard exists while this broker coordinates its partition: `on_election
(partition, epoch, now)` loads it by replaying the log (`reader`), `on_resignation
(partition, epoch)` unloads it, failing its parked requests and deferred answers with
NOT_COORDINATOR and cancelling its timers. Both ignore a stale epoch. A request for a
shard that is not active gets NOT_COORDINATOR (never elected here, resigned, failed to
load) or COORDINATOR_LOAD_IN_PROGRESS, as Kafka's runtime answers. The states and the
moves between them are the table `SHARD_TRANSITIONS`, keyed by (state, event).

Transactions (KIP-98; Kafka's scheduleTransactionalWriteOperation and
scheduleTransactionCompletion). A Result tagged `transactional` (TxnOffsetCommit) is
handed to the writer with the tag as a fourth argument, so it writes one transactional
batch with that producer id and epoch, and its records replay as pending offsets.
`complete_transaction(partition, ...)` writes a transaction marker to a partition (a
TXN_MARKER record, which the writer turns into a control batch) in order with the
shard's other writes, and settles once it is committed. Loading replays a `StoredLog`
(a partition with transactional or control batches) item by item in log order.

The runtime is synchronous and touches no socket or clock: callers pass `now_ms`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import Callable, Iterable

from ..protocol.errors import NOT_COORDINATOR
from .classic.join import leaves_partitions_unowned
from .classic.model import ClassicState
from .classic.rebalance import (
    error_join,
    prepare_rebalance,
    schedule_heartbeat,
    sync_error,
)
from .config import CoordinatorConfig
from .consumer.heartbeat import assign_if_needed, refresh_metadata
from .deferred import Deferred, DeferredQueue
from .elections import SHARD_TRANSITIONS, ShardElections, ShardEvent, ShardState  # noqa: F401 (re-exported)
from .dispatch import arm_member_timers
from .errors import CoordinatorUnavailable, error_code_for
from .image import MetadataImage
from .offsets import expire_offsets
from .records import CLASSIC_GROUP, GROUP_METADATA, CoordinatorRecord, StoredLog, Transactional, TransactionalPairs, decode, txn_marker
from .shard import Result, Shard, Then, _random_member_id
from .timer import Timer

log = logging.getLogger(__name__)

# append(partition, records, now_ms) -> the last offset written; a transactional write also
# gets the Transactional tag: append(partition, records, now_ms, transactional).
Writer = Callable[..., int]


def discarding_writer() -> Writer:
    """A writer whose records go nowhere, numbered as a log would number them (the last
    offset written): for a runtime whose log is not kept (benchmarks, fuzzing)."""
    end = -1

    def write(_partition: int, records: list[CoordinatorRecord], _now_ms: int) -> int:
        nonlocal end
        end += len(records)
        return end

    return write
Reader = Callable[[int], Iterable[tuple[bytes | None, bytes | None]]]


# Fields a failed classic answer must not carry (a SyncGroup's assignment, a leader's member list).
_EMPTY_ON_ERROR = {"assignment": b"", "members": []}

ShardNotLoaded = CoordinatorUnavailable  # the name callers used before elections existed


@contextlib.contextmanager
def _collector_paused():
    """Run a shard load without CPython's cyclic garbage collector.

    The collector runs after every 700 net allocations of container objects, and a load
    allocates several per record: the (key, value) pairs read, and the shard's state,
    one OffsetEntry per committed offset, which stays tracked for good (CPython untracks
    exact tuples of atoms only, not a NamedTuple's). Every 25% of growth of the tracked
    heap then costs a full collection over all of it, the pairs and the shards loaded
    before included: measured, about 40% of the load time of a 1M-record partition
    (BENCHMARKS.md "Start-up replay"). Mercurial's `util.nogc` pauses it while building
    large containers for the same reason. A load is one synchronous call that makes no
    garbage cycles to speak of.

    What the load built is the shard's state, long-lived by construction, so on the way
    out it goes to the oldest generation at once (gc.freeze + unfreeze: list splices)
    rather than first through a young collection over every object made (another 5-15%
    of the load) and a second one; the next full collection sees it, as it would have.
    Skipped when something else froze objects (unfreeze would thaw theirs too). The
    collector's state is restored as found.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class _AppendFailed(Exception):
    """The writer refused an operation's records (its cause is `__cause__`)."""


@functools.lru_cache(maxsize=65536)
def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class CoordinatorRuntime(ShardElections):
    def __init__(
        self,
        config: CoordinatorConfig,
        writer: Writer,
        image: MetadataImage | None = None,
        new_member_id: Callable[[], str] = _random_member_id,
        group_overrides: Callable[[str], dict[str, int]] = lambda _g: {},
        reader: Reader | None = None,
        commit_on_write: bool | Callable[[int], bool] = True,
        serving: Callable[[], bool] = lambda: True,
        write_timeout_ms: int = 5_000,
        stats=None,
    ) -> None:
        super().__init__()
        # KIP-848 "Broker Metrics" sensors (observability/stats.py CoordinatorStats, with its
        # injected clock); None: nothing is measured (the simulator, benchmarks of the runtime).
        self.stats = stats
        self.config = config
        self.writer = writer
        self.reader = reader
        # Whether a partition's writes are committed once appended (a single replica), or
        # when the high watermark passes them (the driver calls complete_up_to): a bool for
        # every partition, or asked per partition.
        self.commit_on_write = commit_on_write
        # Whether this node may act as a coordinator at all now: False while it cannot be
        # sure it has not been replaced (a broker whose cluster lease may have expired,
        # cluster/etcd_store.py `lease_current`). Its shards then answer nothing and run no
        # timers; they stay loaded, so the node serves again at once if it was not replaced.
        self.serving = serving
        self._refresh_pending = False  # the image changed while not serving: groups not refreshed yet
        self.write_timeout_ms = write_timeout_ms
        self.image = image or MetadataImage()
        self.new_member_id = new_member_id
        self.group_overrides = group_overrides
        self.shards: dict[int, Shard] = {}  # the active ones
        self.deferred: dict[int, DeferredQueue] = {}
        self.records_written = 0
        self.write_failures = 0

    # --- shards ---------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_partitions)

    def shard_for(self, group_id: str) -> Shard | None:
        return self.shards.get(self.partition_for(group_id))

    def active_shard(self, group_id: str) -> Shard:
        """The group's shard, or CoordinatorUnavailable saying why it cannot be served here."""
        return self.active_shard_at(self.partition_for(group_id), f" of group {group_id}")

    def new_shard(self, partition: int) -> Shard:
        return Shard(partition, self.config, self.image, Timer(), self.new_member_id, self.group_overrides)

    # --- elections (KIP-848 "Fail Over"; Kafka's scheduleLoadOperation/scheduleUnloadOperation) ---

    def on_election(self, partition: int, epoch: int, now_ms: int) -> bool:
        """This broker now coordinates `partition` (leader epoch `epoch`): load it from its
        log. Returns whether it is active. A stale epoch, or a shard already loaded, is left
        as it is; a failed load leaves it FAILED (NOT_COORDINATOR) and raises the cause."""
        if not self.begin_election(partition, epoch):
            return self.state_of(partition) is ShardState.ACTIVE
        assert self.reader is not None, "on_election needs a reader"
        return self.finish_election(partition, epoch, lambda: self.reader(partition), now_ms)

    def finish_election(self, partition: int, epoch: int,
                        read: Callable[[], Iterable[tuple[bytes | None, bytes | None]]], now_ms: int) -> bool:
        """Load the shard `begin_election` left LOADING from `read()`'s stored pairs.
        False, with nothing done, when it is no longer loading for this leadership (it
        resigned meanwhile); a failed load leaves it FAILED and raises the cause."""
        state, current = self.states.get(partition, (None, -1))
        if state is not ShardState.LOADING or current < epoch:
            return False
        try:
            with _collector_paused():  # reading builds a (key, value) per record: see _collector_paused
                self.load_bytes(partition, read(), now_ms)
        except Exception as exc:
            shard = self.shards.pop(partition, None)
            if shard is not None:
                self._drop(shard, exc)
            self._move(partition, ShardEvent.LOAD_FAILED)
            if isinstance(exc, _AppendFailed) and exc.__cause__ is not None:
                raise exc.__cause__ from None  # a fail-over bump could not be written
            raise
        return True

    def on_resignation(self, partition: int, epoch: int | None = None) -> bool:
        """This broker no longer coordinates `partition`: parked requests and answers not yet
        committed fail NOT_COORDINATOR (the clients find the new coordinator), timers stop.
        A stale epoch (an older leadership's resignation arriving late) is ignored."""
        current = self.states.get(partition, (None, -1))[1]
        if epoch is not None and epoch < current:
            return False
        self._move(partition, ShardEvent.RESIGN, current if epoch is None else epoch)
        self._stalled.pop(partition, None)
        shard = self.shards.pop(partition, None)
        if shard is not None:
            self._drop(shard, CoordinatorUnavailable(NOT_COORDINATOR, f"shard {partition} resigned"))
        return shard is not None

    def load(self, partition: int, records: Iterable[CoordinatorRecord], now_ms: int) -> Shard:
        """Replay a partition's records into a fresh shard and take it over (KIP-848 "Fail Over")."""
        shard = self.new_shard(partition)
        shard.loading = True
        for record in records:
            shard.replay(record)
        return self._take_over(shard, now_ms)

    def load_bytes(self, partition: int, pairs: Iterable[tuple[bytes | None, bytes | None]], now_ms: int) -> Shard:
        """`load` from the stored (key, value) bytes, as the broker reads them from the log."""
        shard = self.new_shard(partition)
        self._replay_bytes(shard, pairs)
        return self._take_over(shard, now_ms)

    @staticmethod
    def _replay_bytes(shard: Shard, pairs: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        shard.loading = True
        with _collector_paused():
            if not isinstance(pairs, StoredLog):
                _replay_plain(shard, pairs if isinstance(pairs, list) else list(pairs))
                return
            # Transactional batches and markers: every item in log order, since a marker
            # acts on what its producer wrote before it and a later commit overrides both.
            for item in pairs:
                if isinstance(item, TransactionalPairs):
                    for key, value in item.pairs:
                        record = None if key is None else decode(key, value)
                        if record is not None:
                            shard.replay_transactional(record, item.producer_id)
                elif isinstance(item, CoordinatorRecord):
                    shard.replay(item)  # a transaction marker
                else:
                    _replay_plain(shard, item)

    def _take_over(self, shard: Shard, now_ms: int) -> Shard:
        partition = shard.partition
        shard.loading = False
        if self.state_of(partition) is ShardState.ACTIVE:
            self.on_resignation(partition)  # loaded again directly: the old shard's waiters are failed
        if self.state_of(partition) is not ShardState.LOADING:
            self._move(partition, ShardEvent.ELECT)  # loaded directly (tests, start-up without elections)
        self.shards[partition] = shard
        self.deferred.setdefault(partition, DeferredQueue())
        # Everything loaded is committed: it is what the log holds.
        shard.last_written_offset = shard.last_committed_offset = max(shard.last_written_offset, -1)
        self._move(partition, ShardEvent.LOADED)
        self._on_loaded(shard, now_ms)
        return shard

    def unload(self, partition: int) -> None:
        self.on_resignation(partition)

    def _drop(self, shard: Shard, error: BaseException) -> None:
        """Fail everything waiting on `shard` and stop its timers (it resigned or is being
        reverted): the replies an operation queued get `error`'s code, parked requests and
        answers not yet committed NOT_COORDINATOR; each request is answered once."""
        shard.timer.cancel_all()
        answered = {id(reply) for reply, _ in shard.outbox}
        code = error_code_for(error)
        for reply, response in shard.outbox:
            reply(_failed_reply(response, code))
        shard.outbox.clear()
        gone = CoordinatorUnavailable(NOT_COORDINATOR, f"coordinator shard {shard.partition} unloaded")
        queue = self.deferred.get(shard.partition)
        if queue is not None:
            queue.fail_all(gone)
        for group in shard.classic_groups.values():
            for member in group.members.values():
                # Kafka completes parked JoinGroup/SyncGroup futures with NOT_COORDINATOR on unload.
                if member.join_reply is not None and id(member.join_reply) not in answered:
                    member.join_reply(error_join(NOT_COORDINATOR, member.member_id))
                if member.sync_reply is not None and id(member.sync_reply) not in answered:
                    member.sync_reply(sync_error(NOT_COORDINATOR))
                member.join_reply = member.sync_reply = None

    def _revert(self, shard: Shard, cause: BaseException, now_ms: int) -> None:
        """A write failed with `cause`: the shard becomes what its log says, in place (the
        same object, so a driver holding it sees the revert). Without a reader, or if
        reading fails, the shard is unloaded and FAILED until it is elected again."""
        partition = shard.partition
        self._drop(shard, cause)
        try:
            if self.reader is None:
                raise LookupError("no reader to reload from")
            shard.reset()
            self._replay_bytes(shard, self.reader(partition))
            shard.loading = False
            shard.last_committed_offset = shard.last_written_offset
            self._on_loaded(shard, now_ms)
        except Exception as exc:  # noqa: BLE001 - the log cannot be read back either: not served
            log.error("coordinator shard %d could not be reloaded after a failed write: %s", partition, exc)
            shard.loading = False
            self.shards.pop(partition, None)
            self._move(partition, ShardEvent.LOAD_FAILED)

    def _on_loaded(self, shard: Shard, now_ms: int) -> None:
        # KIP-848 "Fail Over": members get a fresh session (static members that left with
        # -2 too: they have a session timeout to return), members mid-revocation a fresh
        # rebalance timeout; groups whose topics changed meanwhile get a new epoch.
        for group in list(shard.consumer_groups.values()):
            for member in group.members.values():
                # Through dispatch: the timer may downgrade a mixed group (KIP-848 "Online Migration").
                arm_member_timers(shard, group.group_id, member, now_ms)
            self._write(shard, refresh_metadata(shard, group) or assign_if_needed(shard, group), now_ms)
        # Classic groups resume as of their last completed rebalance; every member gets a
        # fresh session (consumer-0.9 design "Coordinator failover").
        for cgroup in list(shard.classic_groups.values()):
            for member in cgroup.members.values():
                schedule_heartbeat(shard, cgroup, member, now_ms)
            if len(cgroup.members) > self.config.classic_max_size:
                # group.max.size was lowered: rebalance, and the last to rejoin are refused.
                self._write(shard, prepare_rebalance(shard, cgroup, now_ms), now_ms)
            elif cgroup.is_(ClassicState.STABLE) and leaves_partitions_unowned(shard, cgroup):
                # A rebalance was under way (a downgrade from a consumer group, partitions
                # added) but only completed ones are stored: resume it, or the stored
                # assignment would leave those partitions with nobody.
                self._write(shard, prepare_rebalance(shard, cgroup, now_ms), now_ms)
        self._arm_offset_expiry(shard, now_ms)

    def _arm_offset_expiry(self, shard: Shard, now_ms: int) -> None:
        def op(s: Shard, now: int) -> Result:
            self._arm_offset_expiry(s, now)
            return expire_offsets(s, now)

        shard.timer.schedule(("offset-expiry",), now_ms + self.config.offsets_retention_check_interval_ms, op)

    # --- writing and completing -------------------------------------------------------------------

    def _write(self, shard: Shard, records: list[CoordinatorRecord], now_ms: int,
               transactional: Transactional | None = None) -> None:
        """Append, then replay, then queue the outbox's replies behind the last offset written.
        Raises _AppendFailed (the outbox untouched) if the writer refused the records."""
        if records:
            stats = self.stats
            started = stats.clock() if stats is not None else 0.0
            try:
                if transactional is None:
                    last = self.writer(shard.partition, records, now_ms)
                else:
                    last = self.writer(shard.partition, records, now_ms, transactional)
            except Exception as exc:
                raise _AppendFailed(str(exc)) from exc
            if stats is not None:
                _count_written(stats, records, stats.clock() - started)
            assert isinstance(last, int) and last > shard.last_written_offset, (
                f"writer returned {last!r} after offset {shard.last_written_offset}")
            self.records_written += len(records)
            if not self._commits_on_write(shard.partition):
                self._stalled.setdefault(shard.partition, now_ms)
            # Offsets committed by this write are undoable until the write commits (never
            # needed when every write commits at once).
            shard.writing_offset = None if self._commits_on_write(shard.partition) else last
            try:
                if transactional is None:
                    for record in records:
                        shard.replay(record)
                else:
                    for record in records:
                        shard.replay_transactional(record, transactional.producer_id)
            finally:
                shard.writing_offset = None
            shard.last_written_offset = last
        if shard.outbox:
            outbox, shard.outbox = shard.outbox, []
            for reply, response in outbox:
                self._defer(shard, functools.partial(reply, response),
                            lambda exc, reply=reply, response=response: reply(
                                _failed_reply(response, error_code_for(exc))))
        if records and self._commits_on_write(shard.partition):
            self.complete_up_to(shard.partition, shard.last_written_offset)

    def _defer(self, shard: Shard, on_commit: Callable[[], None], on_fail: Callable[[BaseException], None]) -> None:
        if shard.last_written_offset <= shard.last_committed_offset:
            on_commit()
        else:
            stats = self.stats
            if stats is not None:
                # KIP-848 "event purgatory time": from the write to its commit.
                on_commit = functools.partial(_timed_commit, stats, stats.clock(), on_commit)
            self.deferred[shard.partition].add(shard.last_written_offset, on_commit, on_fail)

    def _committed(self, partition: int, shard: Shard, committed_offset: int) -> None:
        shard.commit_up_to(committed_offset)

    def loaded_up_to(self, partition: int, log_end_offset: int, high_watermark: int, now_ms: int) -> None:
        """A replicated partition's load ends at its log end, committed up to its high
        watermark (Kafka's CoordinatorLoaderImpl): a new leader's records beyond it (the
        previous leader's last writes) are committed once the followers have them, and
        answers that describe them wait until then too."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        shard.last_written_offset = max(shard.last_written_offset, log_end_offset - 1)
        shard.last_committed_offset = min(shard.last_written_offset, high_watermark - 1)
        if shard.last_committed_offset < shard.last_written_offset:
            self._stalled.setdefault(partition, now_ms)

    def _apply(self, shard: Shard, op: Callable[[Shard, int], Result], now_ms: int):
        """Run `op` and what it chains (Then), writing each step; the final response."""
        result = op(shard, now_ms)
        self._write(shard, result.records, now_ms, result.transactional)
        while isinstance(result.response, Then):
            result = result.response.op(shard, now_ms)
            self._write(shard, result.records, now_ms, result.transactional)
        return result.response

    def _run_guarded(self, shard: Shard, op: Callable[[Shard, int], Result], now_ms: int, answer: Deferred,
                     queued_at: float | None = None) -> None:
        """Run `op`; with metrics on, timed for KIP-848's event queue time (from `queued_at`,
        when the request behind it started on the stats' clock; None for timers) and event
        processing time, in one call into the stats as this runs on every heartbeat."""
        stats = self.stats
        try:
            if stats is None:
                response = self._apply(shard, op, now_ms)
            else:
                written_before = shard.last_written_offset
                started = stats.clock()
                try:
                    response = self._apply(shard, op, now_ms)
                finally:
                    stats.event(started, stats.clock(), queued_at)
                if written_before != shard.last_written_offset <= shard.last_committed_offset:
                    # KIP-848 "event purgatory time" of a write committed as it was appended (a
                    # single replica): it spent no time there. Operations that wrote nothing
                    # never enter it.
                    stats.event_purgatory_time.observe(0.0)
        except _AppendFailed as exc:
            cause = exc.__cause__ or exc
            self.write_failures += 1
            # The operation's replies fail with Kafka's code for the cause; the revert fails
            # every other parked request NOT_COORDINATOR and rebuilds the shard from its log.
            log.warning("coordinator shard %d: a write failed (%s); reloading it from its log", shard.partition, cause)
            self._revert(shard, cause, now_ms)
            answer.fail(cause)
            return
        self._defer(shard, functools.partial(answer.complete, response), answer.fail)

    # --- running operations -----------------------------------------------------------------------

    def submit(self, group_id: str, op: Callable[[Shard, int], Result], now_ms: int,
               queued_at: float | None = None) -> Deferred:
        """Run `op` on the group's shard; the handle settles when its records are committed,
        or fails (CoordinatorUnavailable, or the writer's error) and then nothing of it stays."""
        return self.submit_at(self.partition_for(group_id), op, now_ms, f" of group {group_id}", queued_at)

    def submit_at(self, partition: int, op: Callable[[Shard, int], Result], now_ms: int, what: str = "",
                  queued_at: float | None = None) -> Deferred:
        """`submit` to the shard of `partition` (an operation on the partition, not a group).
        `queued_at`: when the request behind it started (`Request.started`), for the event
        queue time metric; None for operations no request waits on."""
        answer = Deferred()
        try:
            shard = self.active_shard_at(partition, what)
        except CoordinatorUnavailable as exc:
            answer.fail(exc)
            return answer
        self._run_guarded(shard, op, now_ms, answer, queued_at)
        return answer

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                             coordinator_epoch: int, now_ms: int) -> Deferred:
        """Write a transaction marker to `partition` (Kafka's scheduleTransactionCompletion):
        in order with the shard's other writes; its replay commits or aborts the producer's
        pending offsets. Settles (response None) once the marker is committed, or fails
        like any write (CoordinatorUnavailable when the shard is not served here)."""
        marker = txn_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        return self.submit_at(partition, lambda _shard, _now: Result([marker], None), now_ms)

    def run(self, group_id: str, op: Callable[[Shard, int], Result], now_ms: int):
        """`submit` for callers that need the answer now (a single node commits on write):
        the response, or the error raised."""
        return self.submit(group_id, op, now_ms).result()

    def run_on(self, shard: Shard, op: Callable[[Shard, int], Result], now_ms: int):
        answer = Deferred()
        self._run_guarded(shard, op, now_ms, answer)
        return answer.result()

    def read(self, group_id: str) -> Shard:
        """The shard for a read (describe, OffsetFetch), or CoordinatorUnavailable. Reads that
        must not see uncommitted state use the shard's committed view (`committed_offsets`)."""
        return self.active_shard(group_id)

    def tick(self, now_ms: int) -> int:
        """Run every due timer; returns how many ran. A timer whose write fails reverts its
        shard (and the load re-arms the timers) without stopping the other shards'. None
        run while the node is not serving: a node that may have been replaced must not, say,
        expire every session it was frozen through; its timers stay due."""
        ran = 0
        if not self.serving():
            return ran
        if self._refresh_pending:
            self._refresh_groups(now_ms)
        for shard in list(self.shards.values()):
            for _key, op in shard.timer.due(now_ms):
                if self.shards.get(shard.partition) is not shard:
                    break  # reverted and unloaded by an earlier timer's failed write
                answer = Deferred()
                self._run_guarded(shard, op, now_ms, answer)
                ran += 1
                if answer.error is not None:
                    break  # the reload re-armed this shard's timers: the rest of this batch is stale
        return ran

    def next_deadline(self) -> int | None:
        """When `tick` or `fail_stalled_writes` next has something to do."""
        deadlines = [since + self.write_timeout_ms for since in self._stalled.values()]
        if self.serving():  # else no timer runs until it serves again (a driver must not spin on them)
            if self._refresh_pending:
                deadlines.append(0)
            deadlines += [d for s in self.shards.values() if (d := s.timer.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def update_image(self, image: MetadataImage, now_ms: int) -> None:
        """Topics changed: groups whose subscribed partitions changed get a new epoch and target.

        Regexes are not resolved here (consumer/regex.py): a created topic only marks every
        resolution made before it as stale (Kafka's onNewMetadataImage sets
        lastMetadataImageWithNewTopics), and each group's next heartbeat schedules its
        refresh, at most one per REGEX_BATCH_REFRESH_MIN_INTERVAL_MS."""
        old = self.image
        self.image = image
        created = _creates_topics(old, image)
        for shard in self.shards.values():
            shard.image = image
            if created:
                # Callers number images upwards; one that does not still makes resolutions stale.
                shard.new_topics_version = max(image.version, shard.new_topics_version + 1)
        if self.serving():
            self._refresh_groups(now_ms)
        else:
            self._refresh_pending = True  # done by the first tick that serves (a refresh writes)

    def _refresh_groups(self, now_ms: int) -> None:
        self._refresh_pending = False
        for shard in list(self.shards.values()):
            for group in list(shard.consumer_groups.values()):
                answer = Deferred()
                self._run_guarded(shard, lambda s, _now, group=group: Result(refresh_metadata(s, group), None),
                                  now_ms, answer)
                if answer.error is not None:
                    break  # reverted: the reload refreshed every group against the new image


def _count_written(stats, records: list[CoordinatorRecord], seconds: float) -> None:
    """KIP-848 "batch flush time", and the rebalances the records write: a consumer
    group's epoch record is a group epoch bump (consumer-group-rebalance-count); a classic
    group's snapshot with members is a completed rebalance."""
    stats.batch_flush_time.observe(seconds)
    for record in records:
        rtype = record.type
        if rtype == GROUP_METADATA and record.value is not None:
            stats.consumer_rebalances += 1
        elif rtype == CLASSIC_GROUP and record.value is not None and record.value["members"]:
            stats.classic_rebalances += 1


def _timed_commit(stats, written: float, on_commit: Callable[[], None]) -> None:
    stats.event_purgatory_time.observe(stats.clock() - written)
    on_commit()


def _replay_plain(shard: Shard, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    # Offset commits, most of a partition, are independent of every other record: the
    # shard reads them in bulk (only each one's newest value is decoded) and hands back
    # the others, replayed here in log order.
    for key, value in shard.replay_offset_commits(pairs):
        record = decode(key, value)
        if record is not None:
            shard.replay(record)


def _creates_topics(old: MetadataImage, new: MetadataImage) -> bool:
    """Whether `new` has a topic (by id) that `old` lacks: created, or deleted and recreated."""
    if len(new.topics) > len(old.topics):
        return True
    return any(old.by_id(t.topic_id) is None for t in new.topics.values())


def _failed_reply(response: dict, code) -> dict:
    """A classic answer turned into the error Kafka sends when its write failed."""
    return {**response, "error_code": code, **{k: v for k, v in _EMPTY_ON_ERROR.items() if k in response}}
