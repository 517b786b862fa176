"""Transaction markers: the control batches that end a transaction in a partition (KIP-98).

A marker is a RecordBatch v2 with the control and transactional attribute bits set, the
producer's id and epoch, no sequence, and one record whose
  key   = version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)   (ControlRecordTypeSchema)
  value = version int16 (0), coordinator_epoch int32              (EndTxnMarker)
The coordinator epoch is the leader epoch of the transaction coordinator's
`__transaction_state` partition; a partition refuses a marker whose coordinator epoch is
older than the last one it saw from that producer (TRANSACTION_COORDINATOR_FENCED), so a
deposed coordinator cannot end a transaction its successor decided otherwise.

The bodies are kio's generated schemas (ControlRecordTypeSchema, EndTxnMarker); the
int16 version in front of each is the record's own versioning, as Kafka writes it.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from kio.schema.control_record_type_schema.v0.data import ControlRecordTypeSchema
from kio.schema.end_txn_marker.v0.data import EndTxnMarker
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from .batch import CONTROL_MASK, HEADER_SIZE, TRANSACTIONAL_MASK, BatchHeader
from .codec import CodecError, decode_batches, encode_batch

ABORT = 0
COMMIT = 1
_VERSION = struct.Struct(">h")
_write_type = entity_writer(ControlRecordTypeSchema)
_read_type = entity_reader(ControlRecordTypeSchema)
_write_marker = entity_writer(EndTxnMarker)
_read_marker = entity_reader(EndTxnMarker)


@dataclass(frozen=True, slots=True)
class Marker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def marker_key(commit: bool) -> bytes:
    buf = io.BytesIO()
    buf.write(_VERSION.pack(0))
    _write_type(buf, ControlRecordTypeSchema(type_=i16(COMMIT if commit else ABORT)))
    return buf.getvalue()


def marker_value(coordinator_epoch: int) -> bytes:
    buf = io.BytesIO()
    buf.write(_VERSION.pack(0))
    _write_marker(buf, EndTxnMarker(coordinator_epoch=i32(coordinator_epoch)))
    return buf.getvalue()


def encode_marker(marker: Marker, timestamp_ms: int, base_offset: int = 0) -> bytes:
    """One control batch holding `marker` (offset `base_offset`, to be patched by the log)."""
    return encode_batch(
        [(base_offset, timestamp_ms, marker_key(marker.commit), marker_value(marker.coordinator_epoch))],
        base_offset=base_offset, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
        is_transactional=True, is_control=True)


def is_control(h: BatchHeader) -> bool:
    return bool(h.attributes & CONTROL_MASK)


def is_transactional(h: BatchHeader) -> bool:
    return bool(h.attributes & TRANSACTIONAL_MASK)


def control_type(key: bytes | None) -> int:
    """The type (ABORT, COMMIT, or another control type Kafka may add) of a control record key."""
    if key is None or len(key) < 4:
        raise CodecError("control record without a (version, type) key")
    # After the key's version: every version starts with the type.
    return int(_read_type(memoryview(key), 2)[0].type_)


def decode_marker(batch: bytes | bytearray | memoryview, h: BatchHeader | None = None) -> Marker | None:
    """The marker a control batch holds, or None for a control batch that is not a
    transaction marker (Kafka reserves other control types). `batch` is exactly one batch.
    Raises CodecError when it is malformed."""
    decoded = decode_batches(batch)
    if len(decoded) != 1 or not decoded[0].is_control or len(decoded[0].records) != 1:
        raise CodecError("a control batch must hold exactly one control record")
    header = decoded[0].header if h is None else h
    record = decoded[0].records[0]
    kind = control_type(record.key)
    if kind not in (ABORT, COMMIT):
        return None
    if record.value is None or len(record.value) < 6:
        raise CodecError("transaction marker without a (version, coordinator epoch) value")
    epoch = int(_read_marker(memoryview(record.value), 2)[0].coordinator_epoch)
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, epoch)


__all__ = ["ABORT", "COMMIT", "HEADER_SIZE", "Marker", "control_type", "decode_marker", "encode_marker",
           "is_control", "is_transactional", "marker_key", "marker_value"]
