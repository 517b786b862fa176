"""Validation of a produced record batch, as Kafka's broker validates it.

Theory of operation: Kafka checks a produced partition's records in three places, and
this module runs the same checks in the same order, stopping at the first failure so
that nothing of a rejected batch is appended:

1. `ProduceRequest.validateRecords`: at least one batch, magic 2, no zstd before
   Produce v7, exactly one batch per partition.
2. `UnifiedLog.analyzeAndValidateRecords`: base offset 0, size within
   `max.message.bytes`, CRC32C.
3. `LogValidator`: the batch header's offset range and record count agree and are
   positive, no control batches and no idempotent batch without a sequence from
   clients; then every record parses (decompressed first when the batch is
   compressed); then the record-level checks, which Kafka reports per record in the
   Produce response's `record_errors` (v8+): keyless records on a compacted topic, and
   CreateTime timestamps outside `message.timestamp.before/after.max.ms` (KIP-937).

odradek additionally rejects what Kafka would store but no reader could use: batch
attribute bits Kafka reserves (bit 6 is the cleaner's delete-horizon flag; 7-15 are
unused), compression ids 5-7, record offset deltas other than 0..n-1, and key, value or
header lengths below -1. Finally, as Kafka does when it assigns offsets in place, the
header's max timestamp is set to the largest record timestamp (re-CRCing the batch)
when the client wrote another value.

Cost: records are never turned into Python objects on the success path. The record
walk is native (`scan`), compressed payloads are decompressed into one reusable
scratch buffer with a bound (a small payload cannot make the broker allocate
gigabytes), and the slow, per-record Python decoder runs only to list the records of
a batch that is being rejected.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, replace

import cramjam
import crc32c

from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    CRC_STRUCT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchError,
    BatchHeader,
    RecordError,
    crc_of,
    read_header,
)
from .codec import CodecError, decode_batches
from .scan import OK, scan

ZSTD = 4
# Attribute bits a client may set: compression (0-2), timestamp type (3),
# transactional (4), control (5). Bit 6 is written only by the log cleaner (KIP-534).
CLIENT_ATTRIBUTE_BITS = 0x3F
# The smallest record: length, attributes, timestamp delta, offset delta, key length,
# value length and header count, one byte each.
MIN_RECORD_SIZE = 7
NO_TIMESTAMP = -1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Largest decompressed payload accepted from one batch. A legitimate batch is at most
# `max.message.bytes` (1 MiB by default) compressed; 64 MiB leaves room for ratios
# far beyond what real data compresses to, while bounding a decompression bomb.
MAX_DECOMPRESSED = 64 << 20


@dataclass(frozen=True, slots=True)
class ProduceRules:
    """The topic settings and request facts the validation depends on."""

    api_version: int
    max_message_bytes: int
    compacted: bool = False
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime: timestamps are not checked
    timestamp_before_max_ms: int = (1 << 63) - 1
    timestamp_after_max_ms: int = (1 << 63) - 1


def _invalid(message: str) -> BatchError:
    return BatchError("invalid_record", message)


def _corrupt(message: str) -> BatchError:
    return BatchError("corrupt_message", message)


def validate_produce(buf: bytearray, rules: ProduceRules, now_ms: int) -> BatchHeader:
    """Validate the records of one produced partition; return its batch header.

    Raises BatchError (code corrupt_message, invalid_record, invalid_timestamp,
    message_too_large or unsupported_compression_type). May patch the header's max
    timestamp in `buf` (see the module docstring).
    """
    return validate_produce_records(buf, rules, now_ms)[0]


def validate_produce_records(buf: bytearray, rules: ProduceRules, now_ms: int) -> tuple[BatchHeader, memoryview]:
    """`validate_produce`, also returning the batch's records uncompressed: a view of
    `buf`, or of the shared decompression buffer, valid until the next validation (what
    broker-side recompression, records/recompress.py, starts from)."""
    n = len(buf)
    version = rules.api_version
    # 1. ProduceRequest.validateRecords
    if n < LOG_OVERHEAD:
        raise _invalid(f"Produce requests with version {version} must have at least one record batch per partition")
    header = _frame(buf, n)
    if header.size < n:
        raise _invalid(f"Produce requests with version {version} are only allowed to contain exactly one record batch per partition")
    codec = header.attributes & COMPRESSION_MASK
    if codec > ZSTD:
        raise _invalid(f"Unknown compression type id {codec}")
    if codec == ZSTD and version < 7:
        raise BatchError("unsupported_compression_type",
                         f"Produce requests with version {version} are not allowed to use ZStandard compression")
    # 2. UnifiedLog.analyzeAndValidateRecords
    if header.base_offset != 0:
        raise _invalid(f"The baseOffset of the record batch in the append should be 0, but it is {header.base_offset}")
    if header.size > rules.max_message_bytes:
        raise BatchError("message_too_large",
                         f"The record batch of {header.size} bytes exceeds max.message.bytes={rules.max_message_bytes}")
    if crc_of(buf, header) != header.crc:
        raise _corrupt(f"Record is corrupt (stored crc = {header.crc}, computed crc = {crc_of(buf, header)})")
    # 3. LogValidator.validateBatch
    _check_batch(header)
    # ... and every record
    payload = memoryview(buf)[HEADER_SIZE:n]
    if codec:
        payload = _decompress(codec, payload)
    count = header.records_count
    if len(payload) < count * MIN_RECORD_SIZE:
        raise _invalid(f"Found invalid record structure: {count} records cannot fit in {len(payload)} bytes")
    result = scan(payload, count)
    if result.code != OK:
        raise _invalid(result.message)
    _check_records(buf, header, rules, now_ms, result)
    max_ts = header.base_timestamp + result.max_ts_delta
    if not (INT64_MIN <= header.base_timestamp + result.min_ts_delta and max_ts <= INT64_MAX):
        raise _invalid("Record timestamps overflow a 64-bit integer")
    if not header.attributes & TIMESTAMP_TYPE_MASK and max_ts != header.max_timestamp:
        header = set_max_timestamp(buf, header, max_ts)
    return header, payload


def _frame(buf: bytearray, n: int) -> BatchHeader:
    """The first batch's header, after the checks Kafka's batch iterator makes."""
    if n <= MAGIC_OFFSET:
        raise _corrupt(f"Record batch of {n} bytes is too short to hold a magic byte")
    magic = buf[MAGIC_OFFSET]
    if magic > 2:
        raise _corrupt(f"Invalid magic found in record: {magic}")
    if magic != 2:
        raise _invalid("Produce requests are only allowed to contain record batches with magic version 2")
    if n < HEADER_SIZE:
        raise _corrupt(f"Record batch of {n} bytes is smaller than the minimum batch overhead {HEADER_SIZE}")
    header = read_header(buf, 0)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise _corrupt(f"Record batch is corrupt (the size {header.size} is smaller than the minimum allowed overhead {HEADER_SIZE})")
    if header.size > n:
        raise _corrupt(f"Record batch declares {header.size} bytes but the partition holds {n}")
    return header


def _check_batch(h: BatchHeader) -> None:
    """Kafka's LogValidator.validateBatch for a client's v2 batch, plus reserved bits."""
    count_from_offsets = h.last_offset_delta + 1
    if count_from_offsets <= 0:
        raise _invalid(f"Batch has an invalid offset range: [{h.base_offset}, {h.base_offset + h.last_offset_delta}]")
    if h.records_count <= 0:
        raise _invalid(f"Invalid reported count for record batch: {h.records_count}")
    if count_from_offsets != h.records_count:
        raise _invalid(f"Inconsistent batch offset range [{h.base_offset}, {h.base_offset + h.last_offset_delta}] "
                       f"and count of records {h.records_count}")
    if h.attributes & CONTROL_MASK:
        raise _invalid("Clients are not allowed to write control records")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise _invalid(f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}")
    if h.attributes & ~CLIENT_ATTRIBUTE_BITS & 0xFFFF:
        raise _invalid(f"Record batch attributes {h.attributes:#06x} set bits reserved by Kafka")


# --- decompression with a bound ------------------------------------------------------------

_scratch: mmap.mmap | None = None


def _scratch_buffer() -> mmap.mmap:
    # Anonymous memory: pages are only resident once written, so the bound costs
    # nothing until a large batch arrives (and is released again after one).
    global _scratch
    if _scratch is None:
        _scratch = mmap.mmap(-1, MAX_DECOMPRESSED)
    return _scratch


_DECOMPRESS_INTO = {1: cramjam.gzip.decompress_into, 3: cramjam.lz4.decompress_into, 4: cramjam.zstd.decompress_into}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _decompress(codec: int, data: memoryview) -> memoryview:
    out = _scratch_buffer()
    try:
        if codec == 2:
            written = _snappy_into(bytes(data), out)
        else:
            written = _DECOMPRESS_INTO[codec](data, out)
    except Exception as exc:  # cramjam.DecompressionError and friends
        if _is_overflow(exc):
            raise _invalid(f"Decompressed records exceed {MAX_DECOMPRESSED} bytes") from None
        raise _invalid(f"Failed to decompress the records: {exc}") from None
    if written > 16 << 20:
        out.madvise(mmap.MADV_DONTNEED, 0, MAX_DECOMPRESSED)  # give large scratch pages back
    return memoryview(out)[:written]


def _is_overflow(exc: Exception) -> bool:
    return "whole buffer" in str(exc) or isinstance(exc, _Overflow)


class _Overflow(Exception):
    pass


def _snappy_into(data: bytes, out: mmap.mmap) -> int:
    """Raw snappy (librdkafka) or xerial-framed snappy (Java); see codec._snappy_decompress."""
    if not data.startswith(_XERIAL_MAGIC):
        size = cramjam.snappy.decompress_raw_len(data)
        if size > len(out):
            raise _Overflow()
        return cramjam.snappy.decompress_raw_into(data, out)
    pos, n, written = 16, len(data), 0
    view = memoryview(out)
    while pos < n:
        if data.startswith(_XERIAL_MAGIC, pos):
            pos += 16
            continue
        if n - pos < 4:
            raise ValueError("truncated xerial snappy block length")
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        pos += 4
        if size < 0 or size > n - pos:
            raise ValueError(f"xerial snappy block of {size} bytes overruns the payload")
        block = data[pos : pos + size]
        if written + cramjam.snappy.decompress_raw_len(block) > len(out):
            raise _Overflow()
        written += cramjam.snappy.decompress_raw_into(block, view[written:])
        pos += size
    return written


# --- record-level checks (Kafka's RecordValidationException) ---------------------------------


def _check_records(buf: bytearray, header: BatchHeader, rules: ProduceRules, now_ms: int, result) -> None:
    bad_keys = rules.compacted and result.null_keys
    bad_time = False
    if not rules.log_append_time and not header.attributes & TIMESTAMP_TYPE_MASK and header.records_count:
        low = now_ms - rules.timestamp_before_max_ms
        high = now_ms + rules.timestamp_after_max_ms
        first = header.base_timestamp + result.min_ts_delta
        last = header.base_timestamp + result.max_ts_delta
        no_timestamps = header.base_timestamp == NO_TIMESTAMP and result.min_ts_delta == result.max_ts_delta == 0
        bad_time = not no_timestamps and (first < low or last > high)
    if not bad_keys and not bad_time:
        return
    # A rejection: decode the batch once to name every offending record, as Kafka does.
    errors: list[RecordError] = []
    invalid_timestamp = False
    try:
        (decoded,) = decode_batches(bytes(buf))
    except (CodecError, ValueError) as exc:  # scanned fine above, so this is not expected
        raise _invalid(f"Found invalid record structure: {exc}") from None
    for index, record in enumerate(decoded.records):
        if rules.compacted and record.key is None:
            errors.append(RecordError(index, "Compacted topic cannot accept message without key"))
        elif bad_time and record.timestamp != NO_TIMESTAMP and not low <= record.timestamp <= high:
            invalid_timestamp = True
            errors.append(RecordError(index, f"Timestamp {record.timestamp} of message with offset {index} is out of "
                                             f"range. The timestamp should be within [{low}, {high}]"))
    if invalid_timestamp:
        raise BatchError("invalid_timestamp", "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"{e.batch_index}: {e.message}" for e in errors[:3])
    raise BatchError("invalid_record", f"One or more records have been rejected due to {len(errors)} record errors in "
                                       f"total, and only showing the first three errors at most: [{shown}]", errors)


def set_max_timestamp(buf: bytearray, header: BatchHeader, max_timestamp: int) -> BatchHeader:
    """Write the batch's max timestamp and recompute its CRC (Kafka's setMaxTimestamp)."""
    start = header.position
    buf[start + MAX_TIMESTAMP_OFFSET : start + MAX_TIMESTAMP_OFFSET + 8] = max_timestamp.to_bytes(8, "big", signed=True)
    crc = crc32c.crc32c(memoryview(buf)[start + ATTRIBUTES_OFFSET : start + header.size])
    CRC_STRUCT.pack_into(buf, start + CRC_OFFSET, crc)
    return replace(header, max_timestamp=max_timestamp, crc=crc)
