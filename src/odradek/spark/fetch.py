"""Executor side: read `[start, end)` of one partition from its leader, as Arrow batches.

Theory of operation: Fetch requests for the one partition go to its leader through the
odradek client's connection handling (leader lookup, retries, timeouts), one request
ahead, so the next chunk is on its way while this one is decoded; each chunk becomes one
Arrow batch through `columnar.to_arrow`, with no Python object per record. The read ends
when the fetch position reaches `end`. The stop is by offset, never by count:
compaction leaves gaps and transaction markers take offsets, so a range may hold fewer
records than `end - start`. Records at or past `end` are dropped; records before `start`
are masked out (a compressed batch can start before `start`). An offset that
is out of range (deleted by retention while the query ran) fails the task when
`failOnDataLoss` is true, and otherwise skips ahead with a warning naming the partition and
the offsets lost.

Isolation (KIP-98): with read_committed (the default, `kafka.isolation.level`) every Fetch
asks for isolation level 1, so the broker returns the log only up to the last stable offset,
which is also where the driver ends the range; the batches of aborted transactions the
answer lists are cut out (`drop_aborted`, the consumer's `aborted.AbortedTransactions`)
before the columns are built, and control batches never become rows. Both still move the
position past them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from kio.schema.errors import ErrorCode

from odradek.client import KafkaError, TopicPartition
from odradek.client.aborted import AbortedTransactions
from odradek.client.fetcher import fetch_body
from odradek.client.net import Client
from odradek.client.offsets import EARLIEST, LATEST, list_offsets
from odradek.client.sync import loop, run
from odradek.client.versions import Api
from odradek.records.batch import iter_headers
from odradek.records.codec import CodecError
from odradek.records.control import ABORT, COMMIT, decode_marker

from .columnar import to_arrow

log = logging.getLogger("odradek.spark")


class DataLossError(RuntimeError):
    pass


class _PartitionFetcher:
    """Fetch requests for one partition through the client's connections (on the sync
    facade's loop thread); decoding stays on the calling (Spark worker) thread."""

    def __init__(self, bootstrap: str, tp: TopicPartition, isolation_level: int = 1) -> None:
        self.tp = tp
        self.isolation_level = isolation_level
        self.client = run(_make_client(bootstrap))

    async def fetch(self, offset: int, max_bytes: int) -> tuple[bytes | None, int, list] | None:
        """(records, end of the readable log, aborted transactions); None when `offset` is
        out of range. The end is the last stable offset for read_committed, else the high
        watermark. Other partition errors raise KafkaError (retriable ones are retried by
        the caller)."""
        tp, client = self.tp, self.client
        node = await client.leader_for(tp)
        body = fetch_body({tp: offset}, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes,
                          partition_max_bytes=max_bytes, isolation_level=self.isolation_level)
        resp = await client.send(node, Api.FETCH, body)
        for t in resp.responses:
            for p in t.partitions:
                if t.topic == tp.topic and int(p.partition_index) == tp.partition:
                    if p.error_code == ErrorCode.offset_out_of_range:
                        return None
                    if p.error_code != ErrorCode.none:
                        raise KafkaError(p.error_code, f"Fetch {tp} at {offset}")
                    end = int(p.high_watermark)
                    if self.isolation_level == 1:
                        lso = int(getattr(p, "last_stable_offset", -1))
                        end = lso if lso >= 0 else end
                        return p.records, end, list(p.aborted_transactions or ())
                    return p.records, end, []
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Fetch {tp}: no answer for the partition")

    def submit(self, offset: int, max_bytes: int):
        return asyncio.run_coroutine_threadsafe(self.fetch(offset, max_bytes), loop())

    def close(self) -> None:
        run(self.client.close())


async def _make_client(bootstrap: str) -> Client:
    return Client(bootstrap, client_id="odradek-spark")


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int, *, fail_on_data_loss: bool,
               include_headers: bool, max_bytes: int = 4 << 20, stall_timeout: float = 60.0,
               isolation_level: int = 1) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(topic, partition)
    fetcher = _PartitionFetcher(bootstrap, tp, isolation_level)
    try:
        position = start
        progress_at = time.monotonic()
        pending = fetcher.submit(position, max_bytes)
        failures = 0
        while position < end:
            try:
                answer = pending.result(fetcher.client.request_timeout + 5)
            except KafkaError as exc:
                if not exc.retriable or failures >= 10:
                    raise
                failures += 1
                time.sleep(fetcher.client.backoff_for(failures))
                run(fetcher.client.refresh_metadata([topic]))
                pending = fetcher.submit(position, max_bytes)
                continue
            if answer is None:  # out of range: the log's bounds now (a Fetch error need not carry them)
                bounds = run(list_offsets(fetcher.client, {tp: EARLIEST}))[tp].offset, \
                    run(list_offsets(fetcher.client, {tp: LATEST}, isolation_level=isolation_level))[tp].offset
                position = _skip_lost(tp, position, end, *bounds, fail_on_data_loss)
                if position < end:
                    pending = fetcher.submit(position, max_bytes)
                continue
            data, high_watermark, aborted = answer
            failures = 0
            # Where the next fetch starts (after the last complete batch), so it is in
            # flight while this one is decoded.
            next_position = position
            for h in iter_headers(data or b""):
                next_position = max(next_position, h.next_offset)
            if next_position < end:
                pending = fetcher.submit(next_position, max_bytes)
            if next_position > position:
                if aborted:
                    data = drop_aborted(data, aborted)
                batch = to_arrow(data, topic, partition, position, end, include_headers)
                if batch is not None and batch.num_rows:
                    yield batch
                position, progress_at = next_position, time.monotonic()
            elif time.monotonic() - progress_at > stall_timeout:
                message = (f"{tp}: no records at offset {position} for {stall_timeout:.0f}s; the log ends at "
                           f"{high_watermark}, the batch was planned up to {end}")
                if high_watermark < end and not fail_on_data_loss:
                    log.warning("%s; offsets %d..%d are lost (failOnDataLoss=false)", message, position, end - 1)
                    return
                raise DataLossError(message + (" (records were removed)" if high_watermark < end else ""))
    finally:
        fetcher.close()


def drop_aborted(data: bytes, aborted) -> bytes:
    """`data` without the batches of aborted transactions (read_committed; see
    `aborted.AbortedTransactions`); the same bytes when none is dropped. Control batches
    stay (to_arrow skips them) and so does a trailing partial batch."""
    txns = AbortedTransactions(aborted)
    view = memoryview(data)
    keep: list = []
    cut = False
    end = 0
    for h in iter_headers(data):
        piece = view[h.position:h.position + h.size]
        end = h.position + h.size
        if txns.skip(h, lambda piece=piece, h=h: _marker_type(piece, h)):
            cut = True
        else:
            keep.append(piece)
    if not cut:
        return data
    keep.append(view[end:])  # a partial batch cut by max_bytes, as it came
    return b"".join(keep)


def _marker_type(piece, h) -> int | None:
    try:
        m = decode_marker(piece, h)
    except CodecError:
        return None
    return None if m is None else (COMMIT if m.commit else ABORT)


def _skip_lost(tp: TopicPartition, position: int, end: int, log_start: int, log_end: int, fail: bool) -> int:
    if log_start > position:
        lost = f"offsets {position}..{min(log_start, end) - 1} of {tp} were deleted (retention) before they were read"
        resume = log_start
    else:
        lost = f"offsets {max(position, log_end)}..{end - 1} of {tp} no longer exist (the log ends at {log_end})"
        resume = end
    if fail:
        raise DataLossError(f"{lost}. Some data may have been lost; set failOnDataLoss=false to skip it "
                            "and go on (Spark's Kafka source says the same)")
    log.warning("%s; skipping them (failOnDataLoss=false)", lost)
    return min(resume, end)
