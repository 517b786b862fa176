"""Executor side: read `[start, end)` of one partition from its leader, as Arrow batches.

Theory of operation: a manual-assignment odradek consumer (no group) seeks to `start` and
polls until its position reaches `end`. The stop is by offset, never by count:
compaction leaves gaps and transaction markers take offsets, so a range may hold fewer
records than `end - start`. Records at or past `end` are dropped; records before `start`
never appear (the consumer's fetch skips them inside compressed batches). An offset that
is out of range (deleted by retention while the query ran) fails the task when
`failOnDataLoss` is true, and otherwise skips ahead with a warning naming the partition and
the offsets lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa

from odradek.client import Consumer, KafkaError, TopicPartition

from .arrow import to_batch

log = logging.getLogger("odradek.spark")


class DataLossError(RuntimeError):
    pass


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int, *, fail_on_data_loss: bool,
               include_headers: bool, max_records: int = 20000, stall_timeout: float = 60.0
               ) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(topic, partition)
    consumer = Consumer(bootstrap, auto_offset_reset="none", enable_auto_commit=False, max_poll_records=max_records,
                        fetch_max_wait_ms=100, client_id="odradek-spark")
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        progress_at = time.monotonic()
        while position < end:
            try:
                records = consumer.poll(500)
            except KafkaError as exc:
                if exc.name != "OFFSET_OUT_OF_RANGE":
                    raise
                position = _skip_lost(consumer, tp, position, end, fail_on_data_loss)
                continue
            new_position = consumer.position(tp)
            if records:
                if records[-1].offset >= end:
                    records = [r for r in records if r.offset < end]
                if records:
                    yield to_batch(records, include_headers)
            if new_position > position:
                position, progress_at = new_position, time.monotonic()
            elif time.monotonic() - progress_at > stall_timeout:
                latest = consumer.end_offsets([tp])[tp]
                message = (f"{tp}: no progress at offset {position} for {stall_timeout:.0f}s; the log ends at "
                           f"{latest}, the batch was planned up to {end}")
                if latest < end and not fail_on_data_loss:
                    log.warning("%s; offsets %d..%d are lost (failOnDataLoss=false)", message, position, end - 1)
                    return
                raise DataLossError(message + (" (records were removed)" if latest < end else ""))
    finally:
        consumer.close()


def _skip_lost(consumer: Consumer, tp: TopicPartition, position: int, end: int, fail: bool) -> int:
    earliest = consumer.beginning_offsets([tp])[tp]
    latest = consumer.end_offsets([tp])[tp]
    if earliest > position:
        lost = f"offsets {position}..{min(earliest, end) - 1} of {tp} were deleted (retention) before they were read"
        resume = earliest
    else:
        lost = f"offsets {max(position, latest)}..{end - 1} of {tp} no longer exist (the log ends at {latest})"
        resume = end
    if fail:
        raise DataLossError(f"{lost}. Some data may have been lost; set failOnDataLoss=false to skip it "
                            "and go on (Spark's Kafka source says the same)")
    log.warning("%s; skipping them (failOnDataLoss=false)", lost)
    if resume < end:
        consumer.seek(tp, resume)
    return min(resume, end)
