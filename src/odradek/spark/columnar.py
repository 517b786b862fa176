"""Fetched record batches straight to Arrow columns, with no Python object per record.

Theory of operation: per-record Python objects are what made the executor slow (decoding
into Records, then ConsumerRecords, then lists for `pa.array`: about 3 µs a row, against
Spark's own 1.4). Here each RecordBatch v2 payload of a Fetch response is decompressed
once (`codec._batches`), and the compiled `recordscan.scan` walks its records, writing the
rows of `[start, end)` of all the response's batches into one set of column buffers:
offsets, timestamps, and keys, values (and headers) in Arrow's binary layout. Python then
wraps those buffers as one RecordBatch. Control batches (transaction markers) are skipped;
batches wholly before `start` are skipped unread.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from odradek.records.batch import TIMESTAMP_TYPE_MASK
from odradek.records.codec import CONTROL_MASK, CodecError, _batches

from .arrow import HEADER_TYPE, SCHEMA, SCHEMA_WITH_HEADERS

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MIN_RECORD = 7  # length varint + attributes, timestamp, offset, key, value, header count
_MIN_HEADER = 2  # key length, value length


def to_arrow(data: bytes, topic: str, partition: int, start: int, end: int, include_headers: bool
             ) -> pa.RecordBatch | None:
    """The rows of `[start, end)` in a Fetch response's records, as one RecordBatch (None if none)."""
    # Imported here, not at the top: numba takes 0.15-0.3 s to import, and the driver-side
    # Python processes that import this package (planning, the streaming source) never decode.
    from . import recordscan

    parts = []
    for pos, header, payload in _batches(data):
        if header.attributes & CONTROL_MASK or header.base_offset + header.last_offset_delta < start:
            continue
        if header.base_offset >= end:
            break
        if header.records_count * _MIN_RECORD > len(payload):
            raise CodecError(f"batch at byte {pos} declares {header.records_count} records in {len(payload)} bytes")
        if header.records_count:
            parts.append((pos, header, np.frombuffer(payload, np.uint8)))
    if not parts:
        return None
    rows = sum(h.records_count for _, h, _ in parts)
    room = sum(len(p) for _, _, p in parts)
    heads = room // _MIN_HEADER if include_headers else 0
    c = _Columns(rows, room, heads, include_headers)
    n = hn = 0
    for pos, header, buf in parts:
        fixed = bool(header.attributes & TIMESTAMP_TYPE_MASK)  # LogAppendTime: the batch's time for every record
        first = n
        n, hn = recordscan.scan(
            buf, header.records_count, header.base_offset, header.max_timestamp if fixed else header.base_timestamp,
            fixed, start, end, include_headers, n, c.offsets, c.stamps, c.key_off, c.key_valid, c.key_data,
            c.value_off, c.value_valid, c.value_data, c.header_count, hn, c.hkey_off, c.hkey_valid, c.hkey_data, c.hvalue_off,
            c.hvalue_valid, c.hvalue_data)
        if n == recordscan.ERROR:
            raise CodecError(f"record {hn} of batch at byte {pos} overruns its batch or is malformed")
        c.types[first:n] = int(fixed)
    return c.batch(n, hn, topic, partition) if n else None


class _Columns:
    """Output buffers for up to `rows` rows, `room` key (and value) bytes and `heads` headers."""

    def __init__(self, rows: int, room: int, heads: int, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.offsets = np.empty(rows, np.int64)
        self.stamps = np.empty(rows, np.int64)
        self.types = np.empty(rows, np.int32)
        self.key_off, self.key_valid, self.key_data = _binary_buffers(rows, room)
        self.value_off, self.value_valid, self.value_data = _binary_buffers(rows, room)
        self.header_count = np.empty(rows if include_headers else 0, np.int32)
        self.hkey_off, self.hkey_valid, self.hkey_data = _binary_buffers(heads, room if include_headers else 0)
        self.hvalue_off, self.hvalue_valid, self.hvalue_data = _binary_buffers(heads, room if include_headers else 0)

    def batch(self, n: int, hn: int, topic: str, partition: int) -> pa.RecordBatch:
        cols = [
            _binary(n, self.key_off, self.key_valid, self.key_data),
            _binary(n, self.value_off, self.value_valid, self.value_data),
            pa.array([topic], pa.string()).take(np.zeros(n, np.int32)),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(self.offsets[:n]),
            pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(self.stamps[:n])]),
            pa.array(self.types[:n]),
        ]
        if not self.include_headers:
            return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)
        keys = _binary(hn, self.hkey_off, None, self.hkey_data)
        try:
            keys = keys.cast(pa.string())  # Kafka header keys are UTF-8 strings
        except pa.ArrowInvalid as exc:
            raise CodecError(f"a record header key is not UTF-8: {exc}") from None
        values = _binary(hn, self.hvalue_off, self.hvalue_valid, self.hvalue_data)
        entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
        list_off = np.zeros(n + 1, np.int32)
        np.cumsum(self.header_count[:n], out=list_off[1:])
        cols.append(pa.ListArray.from_arrays(pa.array(list_off), entries, type=HEADER_TYPE))
        return pa.RecordBatch.from_arrays(cols, schema=SCHEMA_WITH_HEADERS)


def _binary_buffers(rows: int, room: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    off = np.empty(rows + 1, np.int32)
    off[0] = 0
    return off, np.empty(rows, np.bool_), np.empty(room, np.uint8)


def _binary(n: int, off: np.ndarray, valid: np.ndarray | None, data: np.ndarray) -> pa.Array:
    """The first `n` entries as an Arrow binary array over the buffers (no copy)."""
    bitmap, nulls = None, 0
    if valid is not None:
        v = valid[:n]
        nulls = n - int(np.count_nonzero(v))
        if nulls:
            bitmap = pa.py_buffer(np.packbits(v, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(off[: n + 1]),
                                                  pa.py_buffer(data[: off[n]])], null_count=nulls)
