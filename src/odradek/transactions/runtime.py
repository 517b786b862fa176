"""The transaction coordinator's runtime: shards of `__transaction_state`, write-then-replay, markers.

Theory of operation (the same design as the group coordinator's runtime,
coordinator/runtime.py, which Kafka 4 also uses for transactions' sibling): a
transactional id belongs to partition `abs(java_hash(id)) % transaction.state.log.num.partitions`
(Kafka's TransactionStateManager.partitionFor). The shard of a partition exists while
this node leads it: `begin_election`/`finish_election` load it by replaying the log,
`on_resignation` drops it and fails everything waiting with NOT_COORDINATOR.

`submit(tid, op, now)` runs a handler (transactions/coordinator.py) on the shard, hands
its records to the injected `writer(partition, records, now) -> last offset`, replays them,
and settles the returned Deferred when the partition's committed offset (single node:
the log end; cluster: the high watermark, reported through `complete_up_to`) reaches
them. A handler's `markers` job goes to the injected `send_markers(partition,
coordinator_epoch, job)` at the same moment: markers are written only for a decision that
is committed, so a fail-over can never leave a marker whose decision was lost. The driver
then calls `complete_markers(job)` to write CompleteCommit/CompleteAbort.

A freshly loaded shard re-sends the markers of every prepared transaction (the previous
coordinator may have died between the decision and the markers) once its load is
committed, arms a timeout per ongoing transaction (Kafka's abortTimedOutTransactions,
here a timer at start + timeout rather than a 10 s scan) and the periodic expiry of idle
transactional ids. While `serving()` is False (a broker that cannot count on its cluster
lease) nothing is answered and no timer runs. Answers that wait longer than
`write_timeout_ms` for their records to commit fail COORDINATOR_NOT_AVAILABLE.

A failed append fails the operation with the writer's error and rebuilds the shard from
its log (its records never existed); nothing here reads a clock or touches a socket.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..cluster.names import TRANSACTION_STATE
from ..coordinator.deferred import Deferred, DeferredQueue
from ..coordinator.elections import ShardElections, ShardEvent, ShardState
from ..coordinator.errors import CoordinatorUnavailable
from ..coordinator.runtime import partition_for
from ..protocol.errors import NOT_COORDINATOR
from . import coordinator as C
from .model import TxnState
from .records import decode

log = logging.getLogger(__name__)

Writer = Callable[[int, list[C.TxnRecord], int], int]
Reader = Callable[[int], Iterable[tuple[bytes | None, bytes | None]]]
SendMarkers = Callable[[int, int, C.MarkerJob], None]


class TxnRuntime(ShardElections):
    log_topic = TRANSACTION_STATE
    def __init__(self, config: C.TxnConfig, writer: Writer, send_markers: SendMarkers,
                 reader: Reader | None = None, commit_on_write: bool | Callable[[int], bool] = True,
                 serving: Callable[[], bool] = lambda: True, write_timeout_ms: int = 5_000) -> None:
        super().__init__()
        self.config = config
        self.writer = writer
        self.send_markers = send_markers
        self.reader = reader
        self.commit_on_write = commit_on_write
        self.serving = serving
        self.write_timeout_ms = write_timeout_ms
        self.shards: dict[int, C.TxnShard] = {}
        self.deferred: dict[int, DeferredQueue] = {}
        # partition -> [(offset, coordinator epoch, job)]: decisions whose markers wait for that offset to commit
        self._waiting_markers: dict[int, list[tuple[int, int, C.MarkerJob]]] = {}
        # (log end, high watermark) of a partition, for a reload after a failed write
        self.log_bounds: Callable[[int], tuple[int, int | None]] | None = None

    # --- shards -----------------------------------------------------------------------------

    def partition_for(self, tid: str) -> int:
        return partition_for(tid, self.config.num_partitions)

    def active_shard(self, tid: str) -> C.TxnShard:
        """The shard of `tid`, or CoordinatorUnavailable saying why it cannot be served here."""
        return self.active_shard_at(self.partition_for(tid), f" of transactional id {tid}")

    def finish_election(self, partition: int, epoch: int, read: Callable[[], Iterable[tuple]], now_ms: int,
                        log_end: int = 0, high_watermark: int | None = None) -> bool:
        """Load the shard from `read()`. Its log ends at `log_end` and is committed below
        `high_watermark` (the log end when None): answers and re-sent markers wait for the
        rest, as a new leader's last records are committed only once its followers have them."""
        state, current = self.states.get(partition, (None, -1))
        if state is not ShardState.LOADING or current < epoch:
            return False
        try:
            shard = self._load(partition, read())
        except Exception:
            self._move(partition, ShardEvent.LOAD_FAILED)
            raise
        shard.last_written_offset = log_end - 1
        shard.last_committed_offset = (log_end if high_watermark is None else min(high_watermark, log_end)) - 1
        if shard.last_committed_offset < shard.last_written_offset:
            self._stalled.setdefault(partition, now_ms)
        self.shards[partition] = shard
        self.deferred[partition] = DeferredQueue()
        self._move(partition, ShardEvent.LOADED)
        self._on_loaded(shard, now_ms)
        return True

    def _load(self, partition: int, pairs: Iterable[tuple[bytes | None, bytes | None]]) -> C.TxnShard:
        shard = C.TxnShard(partition, self.config)
        shard.loading = True
        for key, value in pairs:
            if key is not None:
                shard.replay(C.TxnRecord(*decode(key, value)))
        shard.loading = False
        return shard

    def _on_loaded(self, shard: C.TxnShard, now_ms: int) -> None:
        for tid, txn in shard.txns.items():
            self._arm_timeout(shard, tid, txn)
        self._arm_expiry(shard, now_ms)
        for job in C.pending_markers(shard):
            self._markers_after(shard, job)

    def on_resignation(self, partition: int, epoch: int | None = None) -> bool:
        current = self.epoch_of(partition)
        if epoch is not None and epoch < current:
            return False
        self._move(partition, ShardEvent.RESIGN, current if epoch is None else epoch)
        self._stalled.pop(partition, None)
        self._waiting_markers.pop(partition, None)  # the next leader re-sends them when it loads
        shard = self.shards.pop(partition, None)
        if shard is not None:
            shard.timer.cancel_all()
            queue = self.deferred.get(partition)
            if queue is not None:
                queue.fail_all(CoordinatorUnavailable(NOT_COORDINATOR, f"transaction shard {partition} resigned"))
        return shard is not None

    # --- writing ----------------------------------------------------------------------------

    def _defer(self, shard: C.TxnShard, on_commit: Callable[[], None], on_fail: Callable[[BaseException], None]) -> None:
        if shard.last_written_offset <= shard.last_committed_offset:
            on_commit()
        else:
            self.deferred[shard.partition].add(shard.last_written_offset, on_commit, on_fail)

    def _markers_after(self, shard: C.TxnShard, job: C.MarkerJob) -> None:
        """Send `job`'s markers once the records written so far are committed. Not through
        the deferred answers: the write timeout fails those (the client retries), but a
        decision that commits later must still get its markers (found by the simulator's
        EOS workload, seeds 458 and 750), or its transaction stays prepared for good."""
        epoch = self.epoch_of(shard.partition)
        if shard.last_written_offset <= shard.last_committed_offset:
            self._dispatch(shard.partition, epoch, job)
        else:
            self._waiting_markers.setdefault(shard.partition, []).append((shard.last_written_offset, epoch, job))

    def _release_markers(self, partition: int, committed_offset: int) -> None:
        waiting = self._waiting_markers.get(partition)
        while waiting and waiting[0][0] <= committed_offset:
            _offset, epoch, job = waiting.pop(0)
            self._dispatch(partition, epoch, job)

    def _dispatch(self, partition: int, epoch: int, job: C.MarkerJob) -> None:
        if self.shards.get(partition) is None:
            return  # resigned before the decision committed: the next leader sends them
        self.send_markers(partition, epoch, job)

    def _run(self, shard: C.TxnShard, op: C.Handler, now_ms: int, answer: Deferred) -> None:
        result = op(shard, now_ms)
        if result.records:
            try:
                last = self.writer(shard.partition, result.records, now_ms)
            except Exception as exc:  # noqa: BLE001 - the write failed: nothing of the operation stays
                log.warning("transaction shard %d: a write failed (%s); reloading it from its log", shard.partition, exc)
                answer.fail(exc)
                self._reload(shard, now_ms)
                return
            assert last > shard.last_written_offset, f"writer returned {last} after {shard.last_written_offset}"
            for record in result.records:
                shard.replay(record)
                self._arm_timeout(shard, record.transactional_id, record.txn)
            shard.last_written_offset = last
            if not self._commits_on_write(shard.partition):
                self._stalled.setdefault(shard.partition, now_ms)
        if result.markers is not None:
            self._markers_after(shard, result.markers)
        self._defer(shard, lambda: answer.complete(result.response), answer.fail)
        if result.records and self._commits_on_write(shard.partition):
            self.complete_up_to(shard.partition, shard.last_written_offset)

    def _reload(self, shard: C.TxnShard, now_ms: int) -> None:
        partition = shard.partition
        self.on_resignation(partition)
        if self.reader is None:
            return
        epoch = self.epoch_of(partition)
        try:
            if self.begin_election(partition, epoch):
                self.finish_election(partition, epoch, lambda: self.reader(partition), now_ms,
                                     *self._reload_bounds(partition))
        except Exception as exc:  # noqa: BLE001 - unreadable: unserved until elected again
            log.error("transaction shard %d could not be reloaded: %s", partition, exc)

    def _reload_bounds(self, partition: int) -> tuple[int, int | None]:
        return self.log_bounds(partition) if self.log_bounds is not None else (0, None)

    def submit(self, tid: str, op: C.Handler, now_ms: int) -> Deferred:
        answer = Deferred()
        try:
            shard = self.active_shard(tid)
        except CoordinatorUnavailable as exc:
            answer.fail(exc)
            return answer
        self._run(shard, op, now_ms, answer)
        return answer

    def complete_markers(self, partition: int, job: C.MarkerJob, now_ms: int) -> Deferred:
        """Every marker of `job` was written: write CompleteCommit/CompleteAbort."""
        answer = Deferred()
        shard = self.shards.get(partition)
        if shard is None:
            answer.fail(CoordinatorUnavailable(NOT_COORDINATOR, f"transaction shard {partition} resigned"))
            return answer
        self._run(shard, lambda s, now: C.complete(s, job, now), now_ms, answer)
        return answer

    def _committed(self, partition: int, shard: C.TxnShard, committed_offset: int) -> None:
        shard.last_committed_offset = max(shard.last_committed_offset, min(committed_offset, shard.last_written_offset))
        self._release_markers(partition, committed_offset)

    # --- timers -----------------------------------------------------------------------------

    def _arm_timeout(self, shard: C.TxnShard, tid: str, txn) -> None:
        key = ("timeout", tid)
        if txn is None or txn.state is not TxnState.ONGOING:
            shard.timer.cancel(key)
            return
        shard.timer.schedule(key, txn.deadline_ms, lambda s, now, tid=tid: C.abort_timed_out(s, tid, now))

    def _arm_expiry(self, shard: C.TxnShard, now_ms: int) -> None:
        def op(s: C.TxnShard, now: int) -> C.Result:
            self._arm_expiry(s, now)
            return C.expire_ids(s, now)

        shard.timer.schedule(("expire-ids",), now_ms + self.config.expiration_check_ms, op)

    def tick(self, now_ms: int) -> int:
        if not self.serving():
            return 0
        ran = 0
        for shard in list(self.shards.values()):
            for _key, op in shard.timer.due(now_ms):
                if self.shards.get(shard.partition) is not shard:
                    break
                answer = Deferred()
                self._run(shard, op, now_ms, answer)
                ran += 1
        return ran

    def next_deadline(self) -> int | None:
        deadlines = [since + self.write_timeout_ms for since in self._stalled.values()]
        if self.serving():
            deadlines += [d for s in self.shards.values() if (d := s.timer.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

