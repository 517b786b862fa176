"""The transaction coordinator of one simulated broker: the real `TxnRuntime` over replicated
`__transaction_state`, and the marker jobs (issue 19).

Theory of operation: this is broker/txn_coordinator.py with the disk, sockets and event loop
taken out, as sim/coordinator.py is broker/coordinator.py. The runtime is the real
`transactions.runtime.TxnRuntime` of a broker in a cluster (`commit_on_write=False`): its
records are encoded with the real codec (`transactions/records.py`) and appended at this
broker's leader epoch to its replica of the `__transaction_state` partition, which the
cluster replicates exactly as it replicates `__consumer_offsets` (sim/cluster.py: follower
fetches, the high watermark, fail-over, zombies). In a broker's `logs` the replica of
`__transaction_state-p` is kept under the key `TXN_KEY_BASE + p` beside the offsets
partitions 0..n-1 (`txn_key`, `partition_name`). Becoming leader loads the shard by replay
(`begin_election`/`finish_election` with the log end and high watermark, as the broker's
`TxnCoordinator.elect` does); ceasing to lead resigns it; the high watermark releases its
answers (`complete_up_to`); answers stalled for the write timeout fail; a zombie (not
`serving`) answers nothing and runs no timer. The coordinator epoch stamped on markers
is the partition's leader epoch.

The requests reach the broker's own handlers (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn; sim/coordinator.py dispatches them). Once a decision is
committed the runtime calls `send_markers`, and a `MarkerRun` carries the job out as
broker/txn_coordinator.py's `_marker_job` does: after an inter-broker delay, one attempt
at every partition still to mark: a data partition through sim/data.py (the checks of
the broker's partition log), an offsets partition through the group coordinator of the
broker leading it in this broker's view (`CoordinatorRuntime.complete_transaction`,
settled when the marker is committed, or REQUEST_TIMED_OUT after 30 s). Partitions that
failed are tried again every 100 ms; a fencing answer (an older producer epoch, a newer
coordinator) ends the job, as Kafka's removeMarkersForTxn; a partition of a topic that no
longer exists is skipped; once every marker is written, CompleteCommit/CompleteAbort is
written (`complete_markers`). A job stops when its shard is no longer this runtime's at
that epoch (resigned, crashed): the next leader re-sends the markers of every prepared
transaction when it loads. EndTxn's handler waits (at most MARKERS_WAIT_MS of simulated
time) until the job of its transactional id's last decision has ended, as it waits on the
broker (`wait_for_markers`): with a `SimWait`, which the simulator resolves, never an
event loop (the broker's wait is on the wall clock).
"""

from __future__ import annotations

from odradek.cluster.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from odradek.coordinator.errors import CoordinatorUnavailable, error_code_for
from odradek.protocol.errors import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    TRANSACTION_COORDINATOR_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from odradek.records.control import Marker
from odradek.transactions import records as TR
from odradek.transactions.coordinator import MarkerJob, TxnConfig, TxnRecord
from odradek.transactions.runtime import TxnRuntime

TXN_KEY_BASE = 1000  # __transaction_state-p is replica key TXN_KEY_BASE + p (offsets partitions are 0..n-1)
MARKER_RETRY_MS = 100  # broker/txn_coordinator.py
MARKER_TIMEOUT_MS = 30_000
_FENCED = {int(INVALID_PRODUCER_EPOCH), int(TRANSACTION_COORDINATOR_FENCED)}


def txn_key(partition: int) -> int:
    return TXN_KEY_BASE + partition


def is_txn_key(key: int) -> bool:
    return key >= TXN_KEY_BASE


def partition_name(key: int) -> str:
    return f"{TRANSACTION_STATE}-{key - TXN_KEY_BASE}" if is_txn_key(key) else f"{CONSUMER_OFFSETS}-{key}"


class SimWait:
    """What a coroutine handler awaits in the simulation (sim/coordinator.py steps it): it
    is resolved by the simulator, a marker job ending or simulated time passing."""

    def __init__(self) -> None:
        self.done = False
        self._callbacks: list = []

    def resolve(self) -> None:
        if not self.done:
            self.done = True
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback()

    def on_done(self, callback) -> None:
        if self.done:
            callback()
        else:
            self._callbacks.append(callback)

    def __await__(self):
        if not self.done:
            yield self


class SimTxnCoordinator:
    def __init__(self, broker, config: TxnConfig, write_timeout_ms: int) -> None:
        self.broker = broker  # sim/coordinator.SimCoordinator
        self.config = config
        self.write_timeout_ms = write_timeout_ms
        self.runtime = self.new_runtime()
        self.markers_done = 0  # markers written
        self.jobs: dict[str, SimWait] = {}  # transactional id -> its last decision's marker job ended

    def new_runtime(self) -> TxnRuntime:
        b = self.broker
        runtime = TxnRuntime(self.config, self._write, self._send_markers,
                             reader=lambda p: b.logs[txn_key(p)].pairs(), commit_on_write=False,
                             serving=b.serving, write_timeout_ms=self.write_timeout_ms)
        runtime.log_bounds = lambda p: (b.logs[txn_key(p)].end, b.logs[txn_key(p)].hw)
        return runtime

    def _write(self, partition: int, records: list[TxnRecord], now_ms: int) -> int:
        b = self.broker
        if not b.serving():
            raise CoordinatorUnavailable(NOT_COORDINATOR, f"{b} cannot count on its lease")
        key = txn_key(partition)
        leader = b.leading.get(key)
        assert leader is not None, f"{b} wrote to {partition_name(key)}, which it does not lead"
        last = b.logs[key].append_as_leader(leader.leader_epoch,
                                            [TR.encode(r.transactional_id, r.txn) for r in records])
        b.appended_to(key)
        return last

    # --- leadership (broker/txn_coordinator.py elect / resign / high_watermark_moved) ---------

    def elected(self, partition: int, epoch: int, now: int) -> None:
        log = self.broker.logs[txn_key(partition)]
        if self.runtime.begin_election(partition, epoch):
            self.runtime.finish_election(partition, epoch, lambda: self.runtime.reader(partition), now, log.end,
                                         log.hw)

    def resigned(self, partition: int, epoch: int) -> None:
        self.runtime.on_resignation(partition, epoch)

    def committed_up_to(self, partition: int, high_watermark: int, now: int) -> None:
        self.runtime.complete_up_to(partition, high_watermark - 1, now)

    # --- markers ---------------------------------------------------------------------------

    def _send_markers(self, partition: int, coordinator_epoch: int, job: MarkerJob) -> None:
        ended = self.jobs[job.transactional_id] = SimWait()
        MarkerRun(self, partition, coordinator_epoch, job, ended).next_attempt(0)

    async def wait_for_markers(self, transactional_id: str, timeout_ms: int) -> None:
        """Wait, at most `timeout_ms`, until the marker job of the id's last decision ended."""
        ended = self.jobs.get(transactional_id)
        if ended is None or ended.done:
            return
        wait = SimWait()
        ended.on_done(wait.resolve)
        world = self.broker.cluster.world
        world.schedule(world.now + timeout_ms, f"{self.broker}: EndTxn of {transactional_id} waited for its markers",
                       wait.resolve)
        await wait


class MarkerRun:
    """One marker job of one runtime (broker/txn_coordinator.py `_marker_job`)."""

    def __init__(self, txn: SimTxnCoordinator, partition: int, coordinator_epoch: int, job: MarkerJob,
                 ended: SimWait) -> None:
        self.txn = txn
        self.ended = ended
        self.runtime = txn.runtime
        self.partition = partition
        self.epoch = coordinator_epoch
        self.job = job
        self.marker = Marker(job.producer_id, job.producer_epoch, job.commit, coordinator_epoch)
        self.todo = set(job.partitions)
        self.attempts = 0

    @property
    def world(self):
        return self.txn.broker.cluster.world

    def _still_mine(self) -> bool:
        b = self.txn.broker
        return (b.up and self.txn.runtime is self.runtime and self.runtime.shards.get(self.partition) is not None
                and self.runtime.epoch_of(self.partition) == self.epoch)

    def next_attempt(self, backoff_ms: int) -> None:
        world = self.world
        at = world.now + backoff_ms + world.network.delay()
        what = "commit" if self.job.commit else "abort"
        world.schedule(at, f"{self.txn.broker} writes {what} markers of producer {self.job.producer_id} epoch "
                           f"{self.job.producer_epoch}", self._attempt)

    def _end(self) -> None:
        self.ended.resolve()
        if self.txn.jobs.get(self.job.transactional_id) is self.ended:
            del self.txn.jobs[self.job.transactional_id]

    def _attempt(self) -> None:
        if not self._still_mine():
            self._end()
            return
        self.attempts += 1
        if not self.todo:
            self._finish()
            return
        world = self.world
        results: dict[tuple[str, int], int] = {}
        offsets: list[tuple[str, int]] = []
        for tp in sorted(self.todo):
            if tp[0] == CONSUMER_OFFSETS:
                offsets.append(tp)
            else:
                results[tp] = world.data.write_marker(tp, self.marker)
        # Settled once every offsets partition answered; the extra count is released after
        # the loop, so an answer given at once cannot settle the attempt half-way.
        left = [len(offsets) + 1]

        def answered(tp, code: int) -> None:
            if tp is not None:
                results[tp] = code
            left[0] -= 1
            if left[0] == 0:
                self._settle(results)

        for tp in offsets:
            target = self._offsets_leader(tp[1])
            if target is None:
                answered(tp, int(NOT_LEADER_OR_FOLLOWER))
            else:
                self._offsets_marker(target, tp, answered)
        answered(None, 0)

    def _offsets_leader(self, partition: int):
        b = self.txn.broker
        view = b.view.get(partition)
        if view is None:
            return None
        target = b.cluster.brokers[view.leader] if b.cluster is not None else b
        return target if target.up else None

    def _offsets_marker(self, target, tp, answered) -> None:
        """The group coordinator of `target` writes the marker (WriteTxnMarkers to an offsets
        partition, broker/coordinator.py `complete_transaction`): its code once committed,
        or REQUEST_TIMED_OUT after MARKER_TIMEOUT_MS (the marker may still commit)."""
        world = self.world
        m = self.marker
        deferred = target.run(lambda: target.runtime.complete_transaction(
            tp[1], m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, world.now))
        settled = [False]

        def done(code: int) -> None:
            if not settled[0]:
                settled[0] = True
                answered(tp, code)

        if deferred.done:
            done(int(NONE) if deferred.error is None else int(error_code_for(deferred.error)))
            return
        deferred.add_done_callback(lambda d: done(int(NONE) if d.error is None else int(error_code_for(d.error))))
        world.schedule(world.now + MARKER_TIMEOUT_MS, f"marker to {tp[0]}-{tp[1]} times out",
                       lambda: done(int(REQUEST_TIMED_OUT)))

    def _settle(self, results: dict[tuple[str, int], int]) -> None:
        if not self._still_mine():
            self._end()
            return
        world = self.world
        for tp, code in sorted(results.items()):
            if code == int(NONE):
                self.todo.discard(tp)
                self.txn.markers_done += 1
            elif code == int(UNKNOWN_TOPIC_OR_PARTITION) and not world.data.exists(tp):
                self.todo.discard(tp)  # the topic was deleted: nothing to mark
            elif code in _FENCED:
                world.trace(f"{self.txn.broker}: marker of producer {self.job.producer_id} epoch "
                            f"{self.job.producer_epoch} refused at {tp[0]}-{tp[1]} (error {code}): the job stops")
                self._end()
                return
        if self.todo:
            self.next_attempt(MARKER_RETRY_MS)
        else:
            self._finish()

    def _finish(self) -> None:
        b = self.txn.broker
        job = self.job
        world = self.world
        world.trace(f"{b}: {'commit' if job.commit else 'abort'} markers of {job.transactional_id} (producer "
                    f"{job.producer_id} epoch {job.producer_epoch}) written to {len(job.partitions)} partition(s)")
        b.run(lambda: self.runtime.complete_markers(self.partition, job, world.now))
        self._end()
