"""Produce v3-v10: validate the batch (records/validate.py), recompress it when the topic's
compression.type asks for another codec (records/recompress.py), append, answer (or not,
for acks=0).

In a cluster (Kafka's ReplicaManager.appendRecords): only the partition's leader appends
(NOT_LEADER_OR_FOLLOWER elsewhere, with the current leader in v10's `current_leader` and
`node_endpoints`); acks=all is refused before the append with NOT_ENOUGH_REPLICAS while
the ISR is below `min.insync.replicas`, and answered once the high watermark passes the
batch (Kafka's DelayedProduce), with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank
below the minimum meanwhile, REQUEST_TIMED_OUT after the request's timeout, and
NOT_LEADER_OR_FOLLOWER if this broker stopped leading first.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from ...log.errors import StorageError
from ...log.producer_state import SequenceError
from ...protocol.errors import (
    INVALID_PRODUCER_EPOCH,
    INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...records.batch import BatchError
from ...records.recompress import PRODUCER, recompress
from ...records.validate import ProduceRules, validate_produce_records
from ...security.acl import Operation
from ..errors import CloseConnection
from ..registry import api
from ..replica_manager import NotServable
from ..slices import TimeSlice
from .metadata import listener_of

_SEQUENCE_ERRORS = {
    "out_of_order_sequence_number": OUT_OF_ORDER_SEQUENCE_NUMBER,
    "invalid_producer_epoch": INVALID_PRODUCER_EPOCH,
}


def _partition_result(index, code, message=None, base_offset=-1, append_time=-1, log_start=-1, record_errors=(),
                      leader=None):
    out = {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time": append_time,
        "log_start_offset": log_start,
        "record_errors": [{"batch_index": e.batch_index, "batch_index_error_message": e.message} for e in record_errors],
        "error_message": message,
    }
    if leader is not None:
        out["current_leader"] = leader
    return out


def produce_rules(plog, api_version: int) -> ProduceRules:
    config = plog.config
    return ProduceRules(
        api_version=api_version,
        max_message_bytes=int(config["max.message.bytes"]),
        compacted="compact" in config["cleanup.policy"],
        log_append_time=config["message.timestamp.type"] == "LogAppendTime",
        timestamp_before_max_ms=int(config["message.timestamp.before.max.ms"]),
        timestamp_after_max_ms=int(config["message.timestamp.after.max.ms"]),
    )


def append_partition(broker, topic, index, records, now_ms, api_version=10, acks=1) -> dict:
    tp = (topic.name, index) if topic is not None else None
    if tp is not None and index < topic.partitions:
        try:
            broker.replicas.leader_for_serving(tp)
        except NotServable as exc:
            return _partition_result(index, exc.code, str(exc), leader=broker.replicas.current_leader(tp))
    try:
        plog = broker.logs.get(topic.name, index) if topic is not None else None
    except StorageError as exc:
        return _partition_result(index, KAFKA_STORAGE_ERROR, str(exc))
    if plog is None:
        return _partition_result(index, UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition")
    if topic.is_internal:
        # Kafka's ReplicaManager.appendToLocalLog: clients never write internal topics (the
        # coordinator would replay whatever they wrote into __consumer_offsets).
        return _partition_result(index, INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic.name}")
    data = bytearray(records or b"")
    rules = produce_rules(plog, api_version)
    try:
        header, uncompressed = validate_produce_records(data, rules, now_ms)
        compression = plog.config.get("compression.type", PRODUCER)
        if compression != PRODUCER:  # the default keeps the batch as sent: no work at all
            data, header = recompress(data, header, uncompressed, compression, plog.config, rules.max_message_bytes)
    except BatchError as exc:
        # Kafka's ReplicaManager.appendToLocalLog answers a RecordValidationException (the
        # per-record errors) with the log start offset; other rejections with -1.
        log_start = plog.log_start_offset if exc.record_errors else -1
        return _partition_result(index, ErrorCode[exc.code], str(exc), log_start=log_start,
                                 record_errors=exc.record_errors)
    refused = broker.replicas.append_error(tp, acks)
    if refused != NONE:
        return _partition_result(index, refused, f"the ISR of {topic.name}-{index} is below min.insync.replicas")
    try:
        info = plog.append(data, [header], now_ms, broker.replicas.leader_epoch(tp))
        broker.replicas.appended(tp, plog)
    except SequenceError as exc:
        # Kafka answers these with the log start offset too; an idempotent producer
        # (KIP-360) compares it with its last acknowledged offset to tell deleted records
        # from lost ones.
        return _partition_result(index, _SEQUENCE_ERRORS[exc.code], str(exc), log_start=plog.log_start_offset)
    except StorageError as exc:
        # The write was undone (log/segment.py): nothing was acknowledged, the client retries.
        broker.storage_failed(exc)
        return _partition_result(index, KAFKA_STORAGE_ERROR, str(exc))
    if broker.stats is not None:
        broker.stats.produced(topic.name, len(data), info.last_offset - info.base_offset + 1)
    result = _partition_result(index, NONE, None, info.base_offset, info.log_append_time, info.log_start_offset)
    result["_end"] = info.last_offset + 1  # acks=all waits for the high watermark to reach it
    return result


@api(0, "Produce", 3, 10)
async def produce(broker, request):
    body = request.body
    acks = body.acks
    now = broker.clock()
    responses = []
    failed = False
    topics = []
    # Kafka: WRITE on the transactional id of a transactional producer (else every
    # partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic.
    access = broker.access(request)
    tid = request.field("transactional_id")
    txn_denied = tid is not None and not access.transactional_id(Operation.WRITE, tid)
    denied: dict[str, object] = {}
    for t in body.topic_data:
        if txn_denied or not access.topic(Operation.WRITE, t.name):
            denied[t.name] = TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied else TOPIC_AUTHORIZATION_FAILED
            topics.append(None)
            continue
        topic = broker.metadata.get(t.name)
        if topic is None and (access.cluster(Operation.CREATE) or access.topic(Operation.CREATE, t.name)):
            topic = await broker.auto_create_async(t.name)
        topics.append(topic)
    # Partitions written for the first time get their files off the event loop, and the
    # appends themselves give other clients a turn every few milliseconds (a Produce to
    # 2,000 new partitions held everyone for seconds).
    await broker.open_partitions([(topic.name, p.index) for t, topic in zip(body.topic_data, topics)
                                  if topic is not None for p in t.partition_data])
    turn = TimeSlice()
    waits = []
    for t, topic in zip(body.topic_data, topics):
        parts = []
        for p in t.partition_data:
            if t.name in denied:
                result = _partition_result(p.index, denied[t.name], "not authorized")
            elif acks not in (-1, 0, 1):
                result = _partition_result(p.index, INVALID_REQUIRED_ACKS, f"acks={acks}")
            else:
                result = append_partition(broker, topic, p.index, p.records, now, request.api_version, acks)
            failed |= result["error_code"] != NONE
            parts.append(result)
            end = result.pop("_end", None)
            if acks == -1 and end is not None:
                waits.append(_await_replicas(broker, (topic.name, p.index), result, end, body.timeout))
            await turn.tick()
        responses.append({"name": t.name, "partition_responses": parts})
    if waits:
        await asyncio.gather(*waits)
    if acks == 0:
        if failed:
            # Kafka closes the connection so an acks=0 producer learns something went wrong.
            raise CloseConnection("acks=0 produce failed")
        return None
    return {"responses": responses, "throttle_time": 0, "node_endpoints": _endpoints(broker, responses, listener_of(request))}


async def _await_replicas(broker, tp, result, end: int, timeout) -> None:
    """Kafka's DelayedProduce for one partition: the answer waits for the high watermark."""
    ms = timeout.total_seconds() * 1000 if hasattr(timeout, "total_seconds") else float(timeout)
    code = await broker.replicas.wait_for_acks(tp, end, ms)
    if code != NONE:
        result["error_code"] = code
        result["error_message"] = f"acks=all for {tp[0]}-{tp[1]}: {code.name}"


def _endpoints(broker, responses, listener: str | None) -> list:
    """Produce v10 (KIP-951): the leaders named in `current_leader`, so the client need not
    refresh its metadata to find them."""
    wanted = {p["current_leader"]["leader_id"] for t in responses for p in t["partition_responses"]
              if "current_leader" in p and p["current_leader"]["leader_id"] >= 0}
    brokers = {b.node_id: b for b in broker.replicas.brokers(listener)}
    return [{"node_id": b, "host": brokers[b].host, "port": brokers[b].port, "rack": brokers[b].rack}
            for b in sorted(wanted) if b in brokers]
