"""RecordBatch v2 headers: parse, validate and patch without touching the records.

Theory of operation: the broker never decodes records on the data path. A produce
request carries one or more record batches back to back; for each we read the fixed
61-byte header, check the magic and the CRC32C (which covers everything from the
attributes field to the end of the batch), check the offset bookkeeping, and later
patch the base offset and partition leader epoch in place (both lie *before* the CRC'd
region, so no CRC recomputation is needed). Compression is passed through untouched.

Layout (Kafka "RecordBatch" v2, big-endian):

    baseOffset           int64   0
    batchLength          int32   8   (bytes after this field)
    partitionLeaderEpoch int32   12
    magic                int8    16
    crc                  uint32  17  (CRC32C of bytes [21, end))
    attributes           int16   21
    lastOffsetDelta      int32   23
    baseTimestamp        int64   27
    maxTimestamp         int64   35
    producerId           int64   43
    producerEpoch        int16   51
    baseSequence         int32   53
    recordsCount         int32   57
    records              ...     61
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted in batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
PREFIX_STRUCT = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
CRC_STRUCT = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class RecordError:
    """One rejected record of a batch (Kafka's ProduceResponse.RecordError)."""

    batch_index: int
    message: str


class BatchError(Exception):
    """A batch the client sent is not acceptable. `code` is the Kafka error name."""

    def __init__(self, code: str, message: str, record_errors: list[RecordError] | tuple = ()) -> None:
        super().__init__(message)
        self.code = code  # "corrupt_message", "invalid_record", "invalid_timestamp", ...
        self.record_errors = tuple(record_errors)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    position: int  # where the batch starts in the buffer it was read from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


def read_header(buf: bytes | bytearray | memoryview, position: int = 0, at: int | None = None) -> BatchHeader:
    """Parse the header at `position`. The caller ensures HEADER_SIZE bytes are there.

    `at` overrides the recorded position (e.g. the batch's position in a file when the
    header was read from a small buffer).
    """
    return BatchHeader(position if at is None else at, *HEADER_STRUCT.unpack_from(buf, position))


def iter_headers(buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None, base: int = 0):
    """Yield headers of the complete batches in buf[start:end]; stop at a partial batch.

    Each header's position is `base` plus its offset in `buf` (e.g. the file position of
    a chunk read from a segment).
    """
    end = len(buf) if end is None else end
    pos = start
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos, at=base + pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield header
        pos += header.size


def crc_of(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    view = memoryview(buf)
    return crc32c.crc32c(view[header.position + ATTRIBUTES_OFFSET : header.position + header.size])


def validate_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Validate every batch of a produce payload; raise BatchError on the first bad one.

    Mirrors Kafka's LogValidator for magic v2: a client batch has base offset 0,
    a consistent record count, and a valid CRC. Nothing is partially accepted:
    the caller appends only if the whole payload validates.
    """
    headers: list[BatchHeader] = []
    pos = 0
    n = len(buf)
    if n == 0:
        raise BatchError("invalid_record", "empty record set")
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise BatchError("corrupt_message", f"truncated batch header at byte {pos}")
        header = read_header(buf, pos)
        if header.magic != 2:
            raise BatchError("corrupt_message", f"unsupported magic {header.magic} (only v2)")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > n:
            raise BatchError("corrupt_message", f"batch length {header.batch_length} overruns payload")
        if crc_of(buf, header) != header.crc:
            raise BatchError("corrupt_message", "record batch CRC32C mismatch")
        if header.base_offset != 0:
            raise BatchError("invalid_record", "base offset of a produced batch must be 0")
        if header.last_offset_delta < 0 or header.records_count != header.last_offset_delta + 1:
            raise BatchError(
                "invalid_record",
                f"record count {header.records_count} does not match last offset delta "
                f"{header.last_offset_delta}",
            )
        headers.append(header)
        pos += header.size
    return headers


def patch_base_offset(buf: bytearray, header: BatchHeader, base_offset: int, leader_epoch: int) -> None:
    """Assign the batch its log offsets. Both fields precede the CRC'd region."""
    _BASE_OFFSET.pack_into(buf, header.position, base_offset)
    _EPOCH.pack_into(buf, header.position + 12, leader_epoch)


def set_log_append_time(buf: bytearray, header: BatchHeader, now_ms: int) -> None:
    """message.timestamp.type=LogAppendTime: flag the batch and stamp max timestamp; re-CRC."""
    _I16.pack_into(buf, header.position + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, header.position + MAX_TIMESTAMP_OFFSET, now_ms)
    crc = crc32c.crc32c(memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.position + header.size])
    CRC_STRUCT.pack_into(buf, header.position + CRC_OFFSET, crc)
