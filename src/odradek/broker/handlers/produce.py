"""Produce v3-v10: validate batches, append, answer (or not, for acks=0)."""

from __future__ import annotations

from ...log.producer_state import SequenceError
from ...records.batch import BatchError, validate_batches
from ..errors import (
    CORRUPT_MESSAGE,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    INVALID_REQUIRED_ACKS,
    MESSAGE_TOO_LARGE,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    CloseConnection,
)
from ..registry import api

_SEQUENCE_ERRORS = {
    "out_of_order_sequence_number": OUT_OF_ORDER_SEQUENCE_NUMBER,
    "invalid_producer_epoch": INVALID_PRODUCER_EPOCH,
}
_BATCH_ERRORS = {"corrupt_message": CORRUPT_MESSAGE, "invalid_record": INVALID_RECORD}


def _partition_result(index, code, message=None, base_offset=-1, append_time=-1, log_start=-1):
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time": append_time,
        "log_start_offset": log_start,
        "record_errors": [],
        "error_message": message,
    }


def append_partition(broker, topic, index, records, now_ms) -> dict:
    plog = broker.logs.get(topic.name, index) if topic is not None else None
    if plog is None:
        return _partition_result(index, UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition")
    if not records:
        return _partition_result(index, INVALID_RECORD, "no record batches")
    try:
        headers = validate_batches(records)
    except BatchError as exc:
        return _partition_result(index, _BATCH_ERRORS[exc.code], str(exc))
    limit = int(plog.config["max.message.bytes"])
    for h in headers:
        if h.size > limit:
            return _partition_result(index, MESSAGE_TOO_LARGE, f"batch of {h.size} bytes exceeds max.message.bytes={limit}")
    if "compact" in plog.config["cleanup.policy"]:
        from ...log.compaction import check_keys

        problem = check_keys(records)
        if problem:
            return _partition_result(index, INVALID_RECORD, problem)
    try:
        info = plog.append(bytearray(records), headers, now_ms)
    except SequenceError as exc:
        return _partition_result(index, _SEQUENCE_ERRORS[exc.code], str(exc))
    return _partition_result(index, NONE, None, info.base_offset, info.log_append_time, info.log_start_offset)


@api(0, "Produce", 3, 10)
def produce(broker, request):
    body = request.body
    acks = body.acks
    now = broker.clock()
    responses = []
    failed = False
    for t in body.topic_data:
        topic = broker.metadata.get(t.name)
        if topic is None:
            topic = broker.auto_create(t.name)
        parts = []
        for p in t.partition_data:
            if acks not in (-1, 0, 1):
                result = _partition_result(p.index, INVALID_REQUIRED_ACKS, f"acks={acks}")
            else:
                result = append_partition(broker, topic, p.index, p.records, now)
            failed |= result["error_code"] != NONE
            parts.append(result)
        responses.append({"name": t.name, "partition_responses": parts})
    if acks == 0:
        if failed:
            # Kafka closes the connection so an acks=0 producer learns something went wrong.
            raise CloseConnection("acks=0 produce failed")
        return None
    return {"responses": responses, "throttle_time": 0, "node_endpoints": []}
