"""The asyncio producer: partition, batch, send, retry in order, resolve futures.

Theory of operation: `send` picks the partition (explicit, else murmur2 of the key as
the Java client and librdkafka's `murmur2_random` do, else the sticky partition for
null keys, KIP-480) and appends to the `Accumulator`, returning a future for the
record's metadata. One sender task drains ready batches, groups them by partition
leader into one Produce request per broker, and handles the answers: success resolves
the futures with offsets, a retriable error (leader moved, timeout, disconnect) puts
the batch back at the head of its partition queue after a metadata refresh and a
backoff, anything else fails the batch's futures. Because the accumulator lets one
batch per partition be in flight, retries never reorder a partition. With acks=0
nothing is answered and futures resolve with offset -1 once the request is written.

With a `transactional_id` (KIP-98) the producer is idempotent and every batch is part of a
transaction: `init_transactions`, then per transaction `begin_transaction`, sends,
optionally `send_offsets_to_transaction`, and `commit_transaction` or `abort_transaction`.
The state machine and the meaning of the coordinator's answers live in `transaction`, the
requests to the coordinators in `transacting`; here the sender holds a batch back until
its partition is in the transaction, marks batches transactional, and reports batches
that fail for good, which fails the transaction (abortable) or the producer (fatal). When
the transaction fails, what is still queued fails with it (Java abortUndrainedBatches,
librdkafka's purge on an abortable error).

`metrics()` is librdkafka's statistics object (client/stats.py): the connections count
requests, `_deliver` counts each acknowledged batch (records, bytes as sent, one batch
sample per topic), and the queue gauges are read from the accumulator when asked.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from typing import NamedTuple, Self

from kio.schema.errors import ErrorCode

from odradek.records.codec import GZIP, LZ4, NONE, SNAPPY, ZSTD, encode_batch

from .accumulator import Accumulator, ProducerBatch
from .cluster import TopicPartition
from .errors import (
    STALE_METADATA,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortedError,
    UnsupportedApiError,
)
from .net import Client
from .partitioner import key_partition
from .stats import Snapshot, render
from .transacting import TransactionDriver
from .transaction import GroupMetadata, State, TransactionCore, as_offsets
from .versions import Api

log = logging.getLogger(__name__)

COMPRESSION = {"none": NONE, None: NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
ACKS = {"all": -1, "-1": -1, -1: -1, 1: 1, "1": 1, 0: 0, "0": 0}


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int  # ms: CreateTime as sent, or the broker's LogAppendTime


def _headers(headers) -> tuple:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in items)


def _bytes(v) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


class AsyncProducer:
    def __init__(self, bootstrap_servers: str | list[str], *, acks: int | str = "all", linger_ms: float = 5,
                 batch_size: int = 1_000_000, compression_type: str | None = "none", retries: int = 2**31 - 1,
                 delivery_timeout_ms: int = 120000, request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 max_request_size: int = 1048576, client_id: str = "odradek-producer",
                 enable_idempotence: bool = True, max_buffered_records: int = 100_000,
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60000,
                 max_block_ms: int = 60000, client: Client | None = None,
                 security: dict | None = None) -> None:
        if acks not in ACKS:
            raise ValueError(f"acks must be 0, 1 or 'all', not {acks!r}")
        if transactional_id is not None and (not enable_idempotence or ACKS[acks] != -1):
            # Java's ConfigException: transactions are built on the idempotent producer.
            raise ValueError("a transactional_id needs enable_idempotence=True and acks='all'")
        if compression_type not in COMPRESSION:
            raise ValueError(f"compression_type must be one of none/gzip/snappy/lz4/zstd, not {compression_type!r}")
        self.acks = ACKS[acks]
        # Idempotence needs acks=all (as in Java, where it is the default since 3.0): the
        # broker then drops a retried batch it already appended, so retries neither reorder
        # nor duplicate.
        self.idempotent = enable_idempotence and self.acks == -1
        self.producer_id, self.producer_epoch = -1, -1
        self._sequences: dict[TopicPartition, int] = {}
        self.compression = COMPRESSION[compression_type]
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_request_size = max_request_size
        self.client = client or Client(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                       retry_backoff_ms=retry_backoff_ms, security=security)
        self._own_client = client is None
        self.client.stats.set_type("producer")
        self.acc = Accumulator(batch_size, linger_ms)
        # send() waits while this many records are undelivered (Java blocks on buffer.memory).
        self.max_buffered_records = max_buffered_records
        self._space = asyncio.Event()
        self._sticky: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._sender: asyncio.Task | None = None
        self._inflight: set[asyncio.Task] = set()
        self._refreshing: set[str] = set()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # Transactions (KIP-98): the core decides, the driver talks to the coordinators.
        self.transactional_id = transactional_id
        self.max_block_ms = max_block_ms  # Java's bound on init/send offsets/commit/abort
        self.txn: TransactionCore | None = None
        self._txn: TransactionDriver | None = None
        if transactional_id is not None:
            self.txn = TransactionCore(transactional_id, transaction_timeout_ms)
            self._txn = TransactionDriver(self.client, self.txn, on_change=self._txn_changed)

    async def start(self) -> AsyncProducer:
        self._loop = asyncio.get_running_loop()
        await self.client.refresh_metadata()
        if self.idempotent and self.txn is None:  # a transactional id gets its producer id in init_transactions
            await self._init_producer_id()
        self._sender = self._loop.create_task(self._run())
        return self

    async def _init_producer_id(self) -> None:
        async def attempt():
            resp = await self.client.send_any(Api.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout": -1, "producer_id": -1, "producer_epoch": -1})
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, "InitProducerId")
            return resp
        try:
            resp = await self.client.call(attempt)
        except UnsupportedApiError as exc:
            log.warning("idempotence off: %s", exc)  # an old or minimal broker: at-least-once retries
            self.idempotent = False
            return
        self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ send

    async def partitions_for(self, topic: str) -> int:
        n = self.client.cluster.partition_count(topic)
        if n is None:
            # Metadata with auto-creation off: an unknown topic fails the send, as with
            # allow.auto.create.topics=false; topics are created explicitly (admin/CLI).
            await self.client.refresh_metadata([topic])
            n = self.client.cluster.partition_count(topic)
            if n is None:
                info = self.client.cluster.topics.get(topic)
                raise KafkaError(info.error if info and info.error else ErrorCode.unknown_topic_or_partition, topic)
        return n

    async def send(self, topic: str, value=None, key=None, *, partition: int | None = None,
                   timestamp_ms: int | None = None, headers=None) -> asyncio.Future:
        """Queue one record; returns a future resolving to RecordMetadata (or raising KafkaError)."""
        if self._closed:
            raise KafkaError(ErrorCode.unknown_server_error, "producer is closed", retriable=False)
        if self.txn is not None:
            self.txn.check_send()
        n = await self.room_for(topic)
        fut = self._loop.create_future()
        self.append(topic, value, key, partition, timestamp_ms, headers, fut, n)
        return fut

    async def room_for(self, topic: str) -> int:
        """Wait until the buffer has room (back-pressure) and the topic's partition count is
        known; returns that count."""
        while self.acc.records >= self.max_buffered_records:
            self._space.clear()
            self._wake.set()
            await self._space.wait()
        n = self.client.cluster.partition_count(topic)
        return n if n is not None else await self.partitions_for(topic)

    def append(self, topic: str, value, key, partition: int | None, timestamp_ms: int | None, headers,
               handle, n: int) -> None:
        """Partition and queue one record without waiting (`room_for` came first). `handle`
        is anything with done/set_result/set_exception: an asyncio future, or the sync
        facade's lighter DeliveryFuture."""
        if self.txn is not None:
            self.txn.check_send()  # only inside a transaction that has not failed
        key, value = _bytes(key), _bytes(value)
        if partition is None:
            if key is not None:
                partition = key_partition(key, n)
            else:
                partition = self._sticky.get(topic)
                if partition is None or partition >= n:
                    partition = self._sticky[topic] = random.randrange(n)
        elif not 0 <= partition < n:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic} has {n} partitions, not {partition + 1}")
        now = time.monotonic() * 1000
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        tp = TopicPartition(topic, partition)
        if self.txn is not None and self.txn.add_partition(tp):
            self._txn.kick()  # AddPartitionsToTxn before the partition's first batch goes
        if self.acc.append(tp, ts, key, value, _headers(headers), handle, now):
            if key is None and partition == self._sticky.get(topic) and n > 1:
                # KIP-480: switch the sticky partition when its batch fills.
                self._sticky[topic] = random.choice([p for p in range(n) if p != partition])
            self._wake.set()
        elif self.acc.linger_ms <= 0:
            self._wake.set()
        elif not self._wake.is_set() and self.acc.records == 1:
            self._wake.set()  # the sender sleeps until there is something to time
        self._idle.clear()

    async def send_and_wait(self, topic: str, value=None, key=None, **kw) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kw))

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is delivered or failed."""
        self.acc.flushing = True
        self._wake.set()
        try:
            await asyncio.wait_for(self._wait_idle(), timeout)
        except TimeoutError:
            raise KafkaTimeoutError(f"flush: {self.acc.records} record(s) still undelivered after {timeout}s") from None
        finally:
            self.acc.flushing = False

    async def _wait_idle(self) -> None:
        while self.acc.records or self._inflight:
            self._idle.clear()
            await self._idle.wait()

    async def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        try:
            await self.flush(timeout)
        except KafkaError:
            pass
        self._closed = True
        if self._txn is not None:
            await self._txn.close()
        for b in self.acc.abort_all():
            self._fail(b, KafkaError(ErrorCode.unknown_server_error, "producer closed before delivery",
                                     retriable=False))
        if self._sender is not None:
            self._sender.cancel()
            try:
                await self._sender
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # noqa: BLE001 - shutting down: report, do not raise
                log.warning("producer sender ended with %r", exc)
        if self._own_client:
            await self.client.close()

    # ------------------------------------------------------------------ statistics

    def metrics(self) -> dict:
        """The producer's statistics in the shape of librdkafka's (STATISTICS.md), as a dict;
        client/stats.py says which fields are filled. Windows (rtt, throttle, batchsize,
        batchcnt) cover the time since the previous call."""
        cluster = self.client.cluster
        size, queues = self.acc.gauges()
        # Every partition of the topics produced to (as librdkafka lists its topics' partitions).
        tps = set(queues)
        for t in set(self.client.stats.topics) | {tp.topic for tp in queues}:
            tps.update(cluster.partitions(t))
        parts: dict[tuple[str, int], dict] = {}
        for tp in tps:
            info = cluster.partition(tp)
            queued, queued_bytes, inflight = queues.get(tp, (0, 0, 0))
            parts[tp] = {"leader": info.leader if info is not None else -1, "unknown": info is None,
                         "msgq_cnt": queued, "msgq_bytes": queued_bytes,
                         "leader_epoch": info.leader_epoch if info is not None else -1, "msgs_inflight": inflight}
        eos = None
        if self.idempotent:
            pid, epoch = (self.txn.producer_id, self.txn.producer_epoch) if self.txn is not None \
                else (self.producer_id, self.producer_epoch)
            eos = {"idemp_state": "Assigned" if pid >= 0 else "Init"}
            if self.txn is not None:
                eos["txn_state"] = _TXN_STATES[self.txn.state]
                eos["txn_may_enq"] = self.txn.state is State.IN_TRANSACTION
            eos.update({"producer_id": pid, "producer_epoch": epoch})
        snap = Snapshot(time.monotonic(), time.time(), metadata_cache_cnt=len(cluster.topics),
                        top={"msg_cnt": self.acc.records, "msg_size": size, "msg_max": self.max_buffered_records},
                        partitions=parts, eos=eos)
        return render(self.client.stats, snap)

    # ------------------------------------------------------------------ transactions (KIP-98)

    def _core(self) -> TransactionCore:
        if self.txn is None:
            raise IllegalStateError("transactional methods need a transactional_id")
        return self.txn

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.max_block_ms / 1000 if timeout is None else timeout)

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Get the producer id and epoch of the transactional id, fencing older producers
        with the same id and aborting what they left open. Once per producer; a call that
        timed out (KafkaTimeoutError) may be made again."""
        core = self._core()
        core.start_init()
        await self._txn.init(self._deadline(timeout))
        self._sequences.clear()  # a new epoch: every partition's sequence starts again at 0

    def begin_transaction(self) -> None:
        """Start a transaction (nothing is sent until the first record or offsets)."""
        self._core().begin()

    async def send_offsets_to_transaction(self, offsets: dict, group_metadata: GroupMetadata | str,
                                          timeout: float | None = None) -> None:
        """Commit a consumer group's offsets (tp -> next offset to read, int or
        OffsetAndMetadata) as part of the transaction: they count only if it commits.
        `group_metadata` is the consumer's `group_metadata()` (KIP-447 fencing), or a bare
        group id (no fencing, as aiokafka sends it)."""
        core = self._core()
        core.check_offsets()
        group = GroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        await self._txn.send_offsets(as_offsets(offsets), group, self._deadline(timeout))

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver every record of the transaction, then commit it. A
        TransactionAbortableError means it cannot commit: call abort_transaction()."""
        core = self._core()
        core.start_commit()
        deadline = self._deadline(timeout)
        await self.flush(max(0.0, deadline - time.monotonic()))
        if core.state is not State.COMMITTING and core.error is not None:
            raise core.error  # a batch (or adding its partition) failed: the transaction cannot commit
        await self._txn.end(True, deadline)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the records still queued, wait for those in flight, and abort."""
        core = self._core()
        core.start_abort()
        deadline = self._deadline(timeout)
        await self._purge(deadline)
        epoch = core.producer_epoch
        await self._txn.end(False, deadline)
        if core.producer_epoch != epoch:
            self._sequences.clear()  # KIP-360: bumped, every sequence starts again at 0

    def transaction(self) -> _Transaction:
        """`async with producer.transaction(): ...` begins a transaction, commits it when the
        block ends normally and aborts it when the block raises (aiokafka's helper)."""
        return _Transaction(self)

    async def _purge(self, deadline: float) -> None:
        """Abort: fail what is queued (never sent), wait for what is in flight (Java sends
        EndTxn only when no batch is incomplete; librdkafka purges and waits the same way)."""
        aborted = TransactionAbortedError()
        for b in self.acc.abort_all():
            self._fail(b, aborted)
        self._wake.set()
        try:
            await asyncio.wait_for(self._wait_idle(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise KafkaTimeoutError(f"abort: {self.acc.records} record(s) still in flight") from None

    def _txn_changed(self) -> None:
        """The transaction driver or a failed batch changed something: wake the sender, and
        when the transaction has failed, fail what is still queued with its error."""
        core = self.txn
        if core is not None and core.state in (State.ABORTABLE_ERROR, State.FATAL_ERROR) and core.error is not None:
            for b in self.acc.abort_all():
                self._fail(b, core.error)
        self._wake.set()

    # ------------------------------------------------------------------ sender

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()  # before looking, so a wake-up during the look is not lost
            now = time.monotonic() * 1000
            for b in self.acc.expire(now - self.delivery_timeout_ms):
                self._fail(b, KafkaTimeoutError(f"{b.tp}: not delivered within delivery.timeout.ms"))
            ready, wake_at = self.acc.ready(now)
            if ready:
                self._send_ready(ready)
            if not self.acc.records and not self._inflight:
                self._idle.set()
            if self.acc.records < self.max_buffered_records:
                self._space.set()
            timeout = None if wake_at is None else max(0.0, (wake_at - now) / 1000)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    def _send_ready(self, ready: list[TopicPartition]) -> None:
        by_node: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        for tp in ready:
            if self.txn is not None and not self.txn.may_send(tp):
                continue  # not yet in the transaction: the driver wakes us when it is
            node = self.client.cluster.leader(tp)
            if node is None:
                if tp.topic not in self._refreshing:
                    self._refresh_soon(tp.topic)
                continue
            batch = self.acc.drain(tp)
            if batch.encoded is None:
                if self.idempotent:
                    if batch.base_sequence < 0:
                        batch.base_sequence = self._sequences.get(tp, 0)
                        self._sequences[tp] = (batch.base_sequence + len(batch.records)) & 0x7FFFFFFF
                    pid, epoch = (self.txn.producer_id, self.txn.producer_epoch) if self.txn is not None \
                        else (self.producer_id, self.producer_epoch)
                    batch.encoded = encode_batch(batch.records, compression=self.compression,
                                                 producer_id=pid, producer_epoch=epoch,
                                                 base_sequence=batch.base_sequence,
                                                 is_transactional=self.txn is not None)
                else:
                    batch.encoded = encode_batch(batch.records, compression=self.compression)
            if by_node.get(node) and sizes[node] + len(batch.encoded) > self.max_request_size:
                self.acc.reenqueue(batch, failed=False)  # the request was full
                continue
            by_node.setdefault(node, []).append(batch)
            sizes[node] = sizes.get(node, 0) + len(batch.encoded)
        for node, batches in by_node.items():
            self._track(self._produce(node, batches))

    def _refresh_soon(self, topic: str) -> None:
        self._refreshing.add(topic)

        async def refresh():
            try:
                await self.client.refresh_metadata([topic])
            except KafkaError as exc:
                log.debug("metadata refresh for %s failed: %s", topic, exc)
            await asyncio.sleep(self.client.backoff)
            self._refreshing.discard(topic)
            self._wake.set()
        self._track(refresh())

    def _track(self, coro) -> None:
        task = self._loop.create_task(coro)
        self._inflight.add(task)

        def done(t: asyncio.Task) -> None:
            self._inflight.discard(t)
            if self.acc.records < self.max_buffered_records:
                self._space.set()
            self._wake.set()  # the sender decides whether the producer is now idle
        task.add_done_callback(done)

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        topics: dict[str, list[dict]] = {}
        for b in batches:
            topics.setdefault(b.tp.topic, []).append({"index": b.tp.partition, "records": b.encoded})
        body = {"transactional_id": self.transactional_id, "acks": self.acks, "timeout": self.request_timeout_ms,
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}
        try:
            resp = await self.client.send(node, Api.PRODUCE, body, expect_response=self.acks != 0,
                                          timeout=self.request_timeout_ms / 1000 + 5)
        except KafkaError as exc:
            for b in batches:
                self._retry_or_fail(b, exc)
            self._wake.set()
            return
        if resp is None:  # acks=0
            for b in batches:
                self._deliver(b, -1, -1)
        else:
            results = {}
            for t in resp.responses:
                for p in t.partition_responses:
                    results[(t.name, int(p.index))] = p
            for b in batches:
                p = results.get((b.tp.topic, b.tp.partition))
                if p is None:
                    self._retry_or_fail(b, KafkaError(ErrorCode.unknown_server_error, f"no answer for {b.tp}",
                                                      retriable=False))
                elif p.error_code == ErrorCode.none:
                    self._deliver(b, int(p.base_offset), getattr(p, "log_append_time", None))
                else:
                    self._retry_or_fail(b, KafkaError(p.error_code, f"{b.tp}: {getattr(p, 'error_message', None) or ''}"))
        self._wake.set()

    def _deliver(self, b: ProducerBatch, base_offset: int, log_append_time) -> None:
        self.acc.complete(b)
        # Statistics, per batch: librdkafka's txmsgs/txbytes and its batchsize/batchcnt windows.
        n, size, now = len(b.records), len(b.encoded), time.monotonic()
        stats = self.client.stats
        ps = stats.partition(b.tp.topic, b.tp.partition, now)
        ps.txmsgs += n
        ps.txbytes += size
        topic_stats = stats.topics[b.tp.topic]
        topic_stats.batchsize.add(size)
        topic_stats.batchcnt.add(n)
        append_ts = _ms(log_append_time)
        for (delta, ts, *_rest), fut in zip(b.records, b.handles):
            if not fut.done():
                fut.set_result(RecordMetadata(b.tp.topic, b.tp.partition,
                                              base_offset + delta if base_offset >= 0 else -1,
                                              append_ts if append_ts >= 0 else ts))

    def _fail(self, b: ProducerBatch, exc: Exception) -> None:
        for fut in b.handles:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: an unawaited failed future is not an error here
        if self.txn is not None and isinstance(exc, KafkaError):
            # Records whose fate is unknown (retries gave up, or dropped after being sent)
            # leave a hole in the partition's sequence numbers; a refusal does not
            # (_release_sequences gives the numbers back).
            gap = b.base_sequence >= 0 and (exc.retriable or isinstance(exc, TransactionAbortedError) or exc.code in (
                ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id))
            before = self.txn.state
            self.txn.batch_failed(exc, sequence_gap=gap)
            if self.txn.state is not before:
                self._txn_changed()

    def _retry_or_fail(self, b: ProducerBatch, exc: KafkaError) -> None:
        if exc.code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large) and len(b.records) > 1:
            self.acc.split(b)  # only the record that is too large on its own will fail
            return
        age = time.monotonic() * 1000 - b.created_ms
        if exc.retriable and b.attempts < self.retries and age < self.delivery_timeout_ms and not self._closed and (
                self.txn is None or self.txn.state in (State.IN_TRANSACTION, State.COMMITTING)):
            log.debug("retrying %s after %s", b.tp, exc)
            if (exc.code in STALE_METADATA or exc.code == ErrorCode.network_exception) and \
                    b.tp.topic not in self._refreshing:
                self._refresh_soon(b.tp.topic)
            self.acc.reenqueue(b, time.monotonic() * 1000 + self.client.backoff_for(b.attempts) * 1000)
        else:
            self.acc.complete(b)
            self._fail(b, exc)
            if self.idempotent and b.base_sequence >= 0 and not exc.retriable:
                self._release_sequences(b)

    def _release_sequences(self, failed: ProducerBatch) -> None:
        """A batch the broker refused (so never appended) must not leave a hole in the
        partition's sequence numbers, or every later batch is OUT_OF_ORDER_SEQUENCE_NUMBER:
        give its numbers back, renumbering the batches queued after it."""
        n = len(failed.records)
        for b in self.acc.queued(failed.tp):
            if b.base_sequence > failed.base_sequence:
                b.base_sequence -= n
                b.encoded = None
        self._sequences[failed.tp] = (self._sequences[failed.tp] - n) & 0x7FFFFFFF


class _Transaction:
    def __init__(self, producer: AsyncProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> AsyncProducer:
        self.producer.begin_transaction()
        return self.producer

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self.producer.commit_transaction()
        elif self.producer.txn is not None and self.producer.txn.state is not State.FATAL_ERROR:
            await self.producer.abort_transaction()


# librdkafka's txn_state names for TransactionCore's states (rd_kafka_txn_state2str).
_TXN_STATES = {State.UNINITIALIZED: "Init", State.INITIALIZING: "WaitPID", State.READY: "Ready",
               State.IN_TRANSACTION: "InTransaction", State.COMMITTING: "CommittingTransaction",
               State.ABORTING: "AbortingTransaction", State.ABORTABLE_ERROR: "AbortableError",
               State.FATAL_ERROR: "FatalError"}


def _ms(value) -> int:
    """kio gives timestamps as datetimes (None for -1)."""
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


async def produce_all(producer: AsyncProducer, topic: str, items: Iterable[tuple]) -> list[RecordMetadata]:
    """Send (key, value) pairs and wait for all of them."""
    futs = [await producer.send(topic, v, k) for k, v in items]
    return list(await asyncio.gather(*futs))
