"""The EOS workload's application: consume-transform-produce with a transactional producer.

Theory of operation (issue 19; librdkafka's examples/transactions.c, Kafka's KIP-98 and
KIP-447): every member of the EOS workload is a consumer (the member's group core and
reconciler, sim/member.py) plus a transactional producer, `EosProducer`, whose state
machine, request bodies and error handling are the client's own sans-I/O
`client.transaction.TransactionCore`; this module is its driver with simulated links in
place of `client.transacting.TransactionDriver`'s sockets, and the application loop.

One transactional id per member process (`world.eos_txn_id`): a restarted member comes
back with the same id, so its InitProducerId bumps the epoch, fencing the instance
before it and aborting what that one left open. InitProducerId is sent once per
producer (and again after an abort that needs a new epoch, KIP-360, or when a fatal
error made the application create a new producer). Then, while the member holds input
partitions with known positions and input is waiting (a poll every 100 ms):

  1. begin; read up to `batch_max` records of each held partition from its position;
     each input record (t, p, o) becomes the output record "t:p:o" in partition
     (p + o) mod n of the output topic;
  2. AddPartitionsToTxn for those output partitions (to the transaction coordinator);
  3. produce one transactional batch per output partition to the data partitions'
     broker (sim/data.py; producer id, epoch and sequence: an idempotent producer's
     retries are duplicates, not new records), waiting for every acknowledgement;
  4. AddOffsetsToTxn for the group, then TxnOffsetCommit (to the group coordinator) of
     the positions after the batch, with the consumer's group metadata (member id,
     generation or member epoch, instance id: KIP-447), taken when the offsets are sent;
  5. EndTxn(commit); once answered, the positions move past the batch.

Each request is retried as the client's core says (`Step`): after a backoff, at a
coordinator found again when the answer says it moved or the request timed out (the
producer keeps its own connections, one per coordinator and one to the data broker).
A transaction is aborted (EndTxn(abort), KIP-360's epoch bump when a batch's fate is
unknown) when the core says it must (an abortable error: a fenced TxnOffsetCommit, a
failed batch) or the application decides so: the group revokes partitions (the
revocation waits until the abort is done) or the member lost them (fenced). After an
abort the application rewinds: every held partition's position is fetched again from the
committed offsets (OffsetFetch with require_stable, KIP-447: UNSTABLE_OFFSET_COMMIT is
retried after 100 ms while a transaction holds an offset of it). A fatal error
(PRODUCER_FENCED, INVALID_TXN_STATE) ends the producer: the application makes a new one
with the same transactional id and rewinds. A member that leaves or crashes abandons
its open transaction; the coordinator aborts it when it times out (or at the next
InitProducerId of the same id).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.cluster import TopicPartition
from odradek.client.errors import KafkaError
from odradek.client.offsets import OffsetAndMetadata
from odradek.client.transacting import NAMES, TXN_VERSIONS
from odradek.client.transaction import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
    Act,
    GroupMetadata,
    Input,
    State,
    Step,
    TransactionCore,
)

from .data import Produce
from .network import Link

OUTPUT_TOPIC = "out"
REQUEST_TIMEOUT_MS = 3000  # as the member's (sim/member.py)
RETRY_BACKOFF_MS = 100  # retry.backoff.ms
POLL_MS = 100  # how often an idle application polls for input
PRODUCE_ATTEMPTS = 5  # a batch that timed out this often fails (its fate unknown: a new epoch)
DATA_BROKER = -1  # the link's broker id for the data partitions' broker


def output_of(topic: str, partition: int, offset: int, out_partitions: int) -> tuple[tuple[str, int], str]:
    """The output partition and record of input record (topic, partition, offset)."""
    return (OUTPUT_TOPIC, (partition + offset) % out_partitions), f"{topic}:{partition}:{offset}"


def input_of(value: str) -> tuple[str, int, int]:
    topic, partition, offset = value.rsplit(":", 2)
    return topic, int(partition), int(offset)


@dataclass
class _Call:
    """One request the producer makes until the core says it is done (TransactionDriver._call)."""

    api: int
    target: str  # "txn": the transaction coordinator; "group": the group's coordinator
    body: Callable[[int], dict]
    handle: Callable[[Any, int], Step]
    then: Callable[[int], None]  # once done
    counts: bool = False  # it may add to the transaction (librdkafka txn_req_cnt)
    key: tuple[int, int] | None = None  # (link id, correlation id) while in flight
    version: int = 0
    retry_at: int = 0


@dataclass
class _Batch:
    tp: tuple[str, int]
    values: tuple[str, ...]
    seq: int | None = None  # assigned when first sent
    attempts: int = 0
    waiting: tuple[int, int] | None = None  # (link id, attempt) in flight
    retry_at: int | None = None
    acked: bool = False


@dataclass
class _Txn:
    number: int
    start: dict[TopicPartition, int]  # input positions it read from
    end: dict[TopicPartition, int]  # and up to
    batches: dict[tuple[str, int], _Batch] = field(default_factory=dict)
    stage: str = "add-partitions"  # add-partitions, produce, add-offsets, offsets, commit
    group: GroupMetadata | None = None


class EosProducer:
    def __init__(self, member, transactional_id: str, timeout_ms: int, out_partitions: int, batch_max: int) -> None:
        self.m = member
        self.world = member.world
        self.timeout_ms = timeout_ms
        self.out_partitions = out_partitions
        self.batch_max = batch_max
        self.core = TransactionCore(transactional_id, timeout_ms)
        self.coordinators: dict[str, int | None] = {"txn": None, "group": None}
        self.links: dict[str, Link | None] = {"txn": None, "group": None, "data": None}
        self.call: _Call | None = None
        self.txn: _Txn | None = None
        self.sequences: dict[tuple[str, int], int] = {}
        self.abort_wanted: str | None = None  # why the application wants the open transaction aborted
        self.rewind = False  # positions to fetch again once the transaction is over
        self.next_poll = 0
        self.attempt_ids = 0
        self.started = 0  # transactions begun
        self.producers = 1  # producer instances made (a fatal error makes a new one)

    @property
    def tid(self) -> str:
        return self.core.transactional_id

    def trace(self, line: str) -> None:
        self.world.trace(f"{self.m.name} (txn {self.tid}): {line}")

    # ------------------------------------------------------------------ what the member asks

    def owns(self, link: Link) -> bool:
        return any(link is mine for mine in self.links.values())

    def settled(self) -> bool:
        """No transaction of ours can still commit: a revocation may complete."""
        return self.txn is None and self.core.state not in (State.IN_TRANSACTION, State.COMMITTING, State.ABORTING,
                                                              State.ABORTABLE_ERROR)

    def abort_for(self, why: str) -> None:
        """The application aborts the open transaction (revocation, lost partitions). A
        commit already under way is let finish (EndTxn(commit) cannot be taken back)."""
        if self.txn is None:
            return
        self.rewind = True
        if self.core.state is not State.COMMITTING and self.abort_wanted is None:
            self.abort_wanted = why
            self.trace(f"aborts transaction {self.txn.number}: {why}")

    def next_wake(self) -> int | None:
        times = []
        call = self.call
        if call is not None and call.key is None:
            times.append(call.retry_at)
        if self.txn is not None:
            times += [b.retry_at for b in self.txn.batches.values() if b.retry_at is not None and b.waiting is None]
        elif self.core.state is State.READY and self.call is None:
            times.append(self.next_poll)
        return min(times) if times else None

    def crash(self) -> None:
        for link in self.links.values():
            if link is not None:
                link.alive = False

    # ------------------------------------------------------------------ the loop

    def pump(self, now: int) -> None:
        m = self.m
        if not m.alive:
            return
        core = self.core
        if core.state is State.FATAL_ERROR:
            self._new_producer(now)
        call = self.call
        if call is not None:
            if call.key is None and now >= call.retry_at:
                if self._moot(call):
                    self.call = None
                else:
                    self._send(now, call)
            if self.call is not None:
                return  # one request to the coordinators at a time
        state = core.state
        if state is State.UNINITIALIZED:
            core.start_init()
            state = core.state
        if state is State.INITIALIZING:
            self._start(now, _Call(INIT_PRODUCER_ID, "txn", core.init_body, core.on_init, self._initialized))
            return
        if state in (State.ABORTABLE_ERROR, State.ABORTING) or (state is State.IN_TRANSACTION and self.abort_wanted):
            self._abort(now)
            return
        txn = self.txn
        if txn is not None:
            self._continue(now, txn)
            return
        if state is State.READY:
            if self.rewind:
                self._rewind(now)
            self._begin(now)

    def _moot(self, call: _Call) -> bool:
        """A request waiting for its retry that the transaction no longer needs (TransactionDriver `still`)."""
        core = self.core
        if call.api == ADD_PARTITIONS_TO_TXN:
            return not core.adding or self.abort_wanted is not None
        if call.api in (ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT):
            return core.state is not State.IN_TRANSACTION or self.abort_wanted is not None
        return False

    def _initialized(self, now: int) -> None:
        core = self.core
        self.sequences.clear()  # a new epoch: every partition's sequence starts again at 0
        self.trace(f"producer id {core.producer_id} epoch {core.producer_epoch}")

    def _new_producer(self, now: int) -> None:
        """The application closes a producer that failed for good and makes a new one."""
        self.trace(f"producer failed ({self.core.error}); a new producer with the same transactional id")
        self._drop_links()
        self.call = None
        if self.txn is not None:
            self.world.stats.txn_aborted += 1
            self.txn = None
        self.abort_wanted = None
        self.rewind = True
        self.producers += 1
        self.core = TransactionCore(self.tid, self.timeout_ms)

    def _drop_links(self) -> None:
        for name, link in self.links.items():
            if link is not None:
                link.alive = False
            self.links[name] = None
        self.coordinators = {"txn": None, "group": None}

    # ------------------------------------------------------------------ one transaction

    def _begin(self, now: int) -> None:
        m, world = self.m, self.world
        if now < self.next_poll:
            return
        self.next_poll = now + POLL_MS
        if m.stopping or m.revoking is not None or self.abort_wanted:
            return
        try:
            m.rec.identity()  # a member between generations or fenced has nothing to commit with
        except KafkaError:
            return
        start, end = {}, {}
        for tp, s in sorted(m.rec.positions.parts.items()):
            if s.position is None or not m.exists(tp):
                continue
            available = world.data.partition((tp.topic, tp.partition)).end
            if s.position < available:
                start[tp] = s.position
                end[tp] = min(available, s.position + world.rng.randint(1, self.batch_max))
        if not start:
            return
        self.started += 1
        txn = self.txn = _Txn(self.started, start, end)
        out: dict[tuple[str, int], list[str]] = {}
        for tp in sorted(start):
            for o in range(start[tp], end[tp]):
                otp, value = output_of(tp.topic, tp.partition, o, self.out_partitions)
                out.setdefault(otp, []).append(value)
        txn.batches = {otp: _Batch(otp, tuple(vs)) for otp, vs in sorted(out.items())}
        self.core.begin()
        for otp in sorted(out):
            self.core.add_partition(TopicPartition(*otp))
        self.trace(f"transaction {txn.number} begins: " + " ".join(
            f"{tp.topic}-{tp.partition} [{start[tp]}, {end[tp]})" for tp in sorted(start)))
        self._continue(now, txn)

    def _continue(self, now: int, txn: _Txn) -> None:
        core = self.core
        if txn.stage == "add-partitions":
            if core.adding:
                self._start(now, _Call(ADD_PARTITIONS_TO_TXN, "txn",
                                       lambda _v: core.add_partitions_body(core.take_new()),
                                       lambda resp, _v: core.on_add_partitions(resp), self._next_stage, counts=True))
                return
            txn.stage = "produce"
        if txn.stage == "produce":
            for b in txn.batches.values():
                if not b.acked and b.waiting is None and (b.retry_at is None or now >= b.retry_at):
                    self._produce(now, b)
            if not all(b.acked for b in txn.batches.values()):
                return
            txn.stage = "add-offsets"
        group_id = self.world.group_id
        if txn.stage == "add-offsets":
            self._start(now, _Call(ADD_OFFSETS_TO_TXN, "txn", lambda _v: core.add_offsets_body(group_id),
                                   lambda resp, _v: core.on_add_offsets(resp, group_id), self._next_stage,
                                   counts=True))
        elif txn.stage == "offsets":
            try:
                generation, member_id, instance_id = self.m.rec.identity()
            except KafkaError as exc:
                # The consumer has no group metadata to send (fenced, or between generations):
                # the offsets cannot be committed, so neither can the transaction.
                core.fail(Act.ABORTABLE, exc.code, f"no group metadata: {exc}")
                self.pump(now)
                return
            txn.group = GroupMetadata(group_id, generation, member_id, instance_id)
            pending = {tp: OffsetAndMetadata(o) for tp, o in txn.end.items()}
            self._start(now, _Call(TXN_OFFSET_COMMIT, "group",
                                   lambda _v: core.txn_offset_commit_body(pending, txn.group),
                                   lambda resp, _v: core.on_txn_offset_commit(resp, pending, group_id),
                                   self._next_stage))
        elif txn.stage == "commit":
            if core.state is State.IN_TRANSACTION:
                core.start_commit()
            self._start(now, _Call(END_TXN, "txn", lambda _v: core.end_body(True),
                                   lambda resp, _v: core.on_end(resp, True), self._committed))

    def _next_stage(self, now: int) -> None:
        txn = self.txn
        if txn is not None:
            txn.stage = {"add-partitions": "produce", "add-offsets": "offsets", "offsets": "commit"}.get(txn.stage,
                                                                                                   txn.stage)

    def _committed(self, now: int) -> None:
        txn = self.txn
        self.core.fire(Input.COMPLETED)
        self.txn = None
        self.world.stats.txn_committed += 1
        for tp, o in txn.end.items():
            s = self.m.rec.positions.parts.get(tp)
            if s is not None and s.position == txn.start[tp]:
                s.position = o
        self.trace(f"transaction {txn.number} committed")

    def _abort(self, now: int) -> None:
        core = self.core
        if core.state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
            why = self.abort_wanted or str(core.error)
            core.start_abort()
            self.trace(f"aborting transaction {self.txn.number if self.txn else '?'}: {why}")
        txn = self.txn
        if txn is not None and any(b.waiting is not None for b in txn.batches.values()):
            return  # abort waits for the batches in flight (the producer's purge)
        if txn is not None:
            for b in txn.batches.values():
                b.retry_at = None
        lost_mapping = core.error is not None and core.error.code == ErrorCode.invalid_producer_id_mapping
        if core.added > 0 and not lost_mapping:
            self._start(now, _Call(END_TXN, "txn", lambda _v: core.end_body(False),
                                   lambda resp, _v: core.on_end(resp, False), self._aborted))
        else:
            core.end_reset()
            self._aborted(now)

    def _aborted(self, now: int) -> None:
        core = self.core
        if self.txn is not None:
            self.world.stats.txn_aborted += 1
            self.trace(f"transaction {self.txn.number} aborted")
        self.txn = None
        self.abort_wanted = None
        self.rewind = True
        if core.bump_required:
            core.fire(Input.BUMP)  # KIP-360: a new epoch, every sequence from 0
        else:
            core.fire(Input.COMPLETED)

    def _rewind(self, now: int) -> None:
        """Seek every held partition back to its committed offset (fetched again)."""
        self.rewind = False
        rec = self.m.rec
        held = [tp for tp, s in sorted(rec.positions.parts.items()) if s.position is not None]
        if not held:
            return
        for tp in held:
            rec.positions.parts[tp].position = None
        self.trace(f"rewinds {', '.join(f'{tp.topic}-{tp.partition}' for tp in held)} to the committed offsets")
        self.m.fetch_committed(now, held)

    # ------------------------------------------------------------------ coordinator requests

    def _start(self, now: int, call: _Call) -> None:
        self.call = call
        self._send(now, call)

    def _link(self, target: str) -> Link:
        link = self.links[target]
        if link is None or not link.alive:
            c = self.world.coordinator
            if self.coordinators[target] is None:
                self.coordinators[target] = c.find_txn_coordinator(self.tid) if target == "txn" \
                    else c.find_coordinator()
            link = self.links[target] = self.world.network.new_link(self.m.name, self.coordinators[target])
        return link

    def _version(self, api: int) -> int:
        if api == INIT_PRODUCER_ID:
            return self.world.versions[api]
        _lo, hi = TXN_VERSIONS[api]
        return min(hi, self.world.coordinator.supported[api][1])

    def _send(self, now: int, call: _Call) -> None:
        link = self._link(call.target)
        call.version = self._version(call.api)
        if call.counts:
            self.core.added += 1  # counted when sent: its answer may be lost
        cid, frame = link.wire.request(call.api, call.version, call.body(call.version))
        key = call.key = (link.id, cid)
        self.world.schedule(now + REQUEST_TIMEOUT_MS, f"{self.m.name}: deadline of {NAMES[call.api]} {cid} "
                                                      f"(link {link.id})", lambda: self._timeout(call, key))
        self.world.network.send_up(link, now, lambda: self.world.coordinator.deliver(link, frame),
                                   f"{NAMES[call.api]} {cid}")

    def on_frame(self, link: Link, frame: bytes, now: int) -> None:
        try:
            answers = link.wire.receive_data(frame)
        except KafkaError:
            self._close(link)
            self.m.pump(now)
            return
        call = self.call
        for cid, resp in answers:
            if call is not None and call.key == (link.id, cid):
                call.key = None
                self._answered(now, call, resp)
        self.m.pump(now)

    def _answered(self, now: int, call: _Call, resp) -> None:
        if isinstance(resp, KafkaError):
            step = Step(Act.REFIND) if resp.retriable else Step(
                Act.FATAL, None, self.core.fail(Act.FATAL, resp.code, f"{NAMES[call.api]}: {resp}"))
        else:
            step = call.handle(resp, call.version)
        if step.act is Act.DONE:
            self.call = None
            call.then(now)
        elif step.error is not None:
            self.call = None  # the core recorded the error: abort, or a new producer
            self.trace(f"{NAMES[call.api]} failed: {step.error}")
        else:
            if step.act is Act.REFIND:
                self._refind(call.target)
            call.retry_at = now + (step.backoff_ms if step.backoff_ms is not None else RETRY_BACKOFF_MS)

    def _refind(self, target: str) -> None:
        link = self.links[target]
        if link is not None:
            link.alive = False
        self.links[target] = None
        self.coordinators[target] = None

    def _close(self, link: Link) -> None:
        for target, mine in self.links.items():
            if mine is link:
                if target == "data":
                    self._data_broke(link)
                else:
                    self._refind(target)

    def _timeout(self, call: _Call, key: tuple[int, int]) -> None:
        if self.call is not call or call.key != key or not self.m.alive:
            return
        now = self.world.now
        self.trace(f"{NAMES[call.api]} {key[1]} on link {key[0]} timed out")
        call.key = None
        self._refind(call.target)  # a closed connection: find the coordinator again (Java)
        call.retry_at = now + RETRY_BACKOFF_MS
        self.m.pump(now)

    # ------------------------------------------------------------------ produce

    def _data_link(self) -> Link:
        link = self.links["data"]
        if link is None or not link.alive:
            link = self.links["data"] = self.world.network.new_link(self.m.name, DATA_BROKER)
        return link

    def _produce(self, now: int, b: _Batch) -> None:
        world, core = self.world, self.core
        link = self._data_link()
        if b.seq is None:
            b.seq = self.sequences.get(b.tp, 0)
            self.sequences[b.tp] = b.seq + len(b.values)
        b.attempts += 1
        b.retry_at = None
        self.attempt_ids += 1
        token = b.waiting = (link.id, self.attempt_ids)
        req = Produce(b.tp, core.producer_id, core.producer_epoch, b.seq, b.values)

        def at_broker() -> None:
            code, _base = world.data.produce(req)
            world.network.send_down(link, world.now, lambda: self._produced(b, token, code), f"Produce answer {b.tp}")

        world.schedule(now + REQUEST_TIMEOUT_MS, f"{self.m.name}: deadline of Produce {b.tp} (link {link.id})",
                       lambda: self._produce_timeout(b, token))
        world.network.send_up(link, now, at_broker, f"Produce {b.tp[0]}-{b.tp[1]} seq {b.seq} ({len(b.values)})")

    def _mine(self, b: _Batch) -> bool:
        return self.m.alive and self.txn is not None and self.txn.batches.get(b.tp) is b

    def _produced(self, b: _Batch, token, code: int) -> None:
        if b.waiting != token or not self._mine(b):
            return
        b.waiting = None
        now = self.world.now
        if code == 0:
            b.acked = True
        else:
            err = KafkaError(code, f"Produce {b.tp}")
            if err.retriable:
                self._retry_or_fail(now, b, err)
            else:
                gap = code in (int(ErrorCode.out_of_order_sequence_number), int(ErrorCode.unknown_producer_id))
                self.trace(f"a batch for {b.tp[0]}-{b.tp[1]} failed: {err}")
                self.core.batch_failed(err, sequence_gap=gap)
        self.m.pump(now)

    def _retry_or_fail(self, now: int, b: _Batch, err: KafkaError) -> None:
        if b.attempts < PRODUCE_ATTEMPTS and self.core.state in (State.IN_TRANSACTION, State.COMMITTING) \
                and self.abort_wanted is None:
            b.retry_at = now + RETRY_BACKOFF_MS
            return
        # Its records may or may not be in the log: the sequence cannot go on (KIP-360).
        self.trace(f"a batch for {b.tp[0]}-{b.tp[1]} failed: {err}")
        self.core.batch_failed(err, sequence_gap=True)

    def _produce_timeout(self, b: _Batch, token) -> None:
        if b.waiting != token or not self._mine(b):
            return
        link = self.links["data"]
        if link is not None and link.id == token[0]:
            self._data_broke(link)  # the client closes the connection: every batch on it failed
        else:
            # Sent on a connection the network had broken since (a newer one is open now).
            b.waiting = None
            self._retry_or_fail(self.world.now, b, KafkaError(ErrorCode.request_timed_out,
                                                              f"Produce {b.tp}: timed out", retriable=True))
        self.m.pump(self.world.now)

    def _data_broke(self, link: Link) -> None:
        """The connection to the data broker is closed: every batch on it failed (retriable)."""
        link.alive = False
        self.links["data"] = None
        now = self.world.now
        if self.txn is None:
            return
        for b in self.txn.batches.values():
            if b.waiting is not None and b.waiting[0] == link.id:
                b.waiting = None
                self._retry_or_fail(now, b, KafkaError(ErrorCode.request_timed_out, f"Produce {b.tp}: timed out",
                                                       retriable=True))
