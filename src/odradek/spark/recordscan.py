"""The one loop over every record of a fetched batch, compiled: records to column buffers.

Theory of operation: a RecordBatch v2 payload is a chain of records, each prefixed by its
length as a zigzag varint, so finding where record i+1 starts needs record i; in CPython
that loop alone cost about 0.3 µs a record, more than the rest of the decode together.
`scan` walks the chain once, compiled by numba (LLVM) on first use and cached on disk
(`cache=True`), and for every record inside `[start, end)` writes its offset, timestamp and
timestamp type to numeric columns and copies its key and value bytes into Arrow's binary
layout (int32 offsets plus one data buffer per column), so Python only wraps the buffers.
With headers asked for, each header's key and value are laid out the same way, with one
header count per record for the list column.

Nothing here trusts the payload: every varint read and every slice is checked against the
record's declared end, and a malformed record makes `scan` return its index as an error
(the caller raises CodecError) rather than read out of bounds. The output arrays are
sized by the caller from bounds that hold for any well-formed payload (a record is at
least 7 bytes, a header at least 2; key and value bytes are a part of the payload).

With NUMBA_DISABLE_JIT=1 the same functions run as plain Python (slowly), which is how
their logic can be stepped through in a debugger.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ERROR = -1


@njit(cache=True, nogil=True)
def _varint(buf, pos, limit):
    """Zigzag varint at buf[pos] (at most 10 bytes, inside `limit`): (value, next position),
    next position -1 when it overruns."""
    z = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= limit or shift > 63:
            return np.int64(0), np.int64(-1)
        b = np.uint64(buf[pos])
        pos += 1
        z |= (b & np.uint64(0x7F)) << shift
        if b < 0x80:
            break
        shift += np.uint64(7)
    return np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1)), np.int64(pos)


@njit(cache=True, nogil=True)
def _put(buf, start, size, off, valid, data, i):
    """Entry i of a binary column (offsets, validity, data): buf[start:start+size], or null
    when size < 0."""
    at = off[i]
    valid[i] = size >= 0
    if size > 0:
        data[at:at + size] = buf[start:start + size]
        at += size
    off[i + 1] = at


@njit(cache=True, nogil=True)
def scan(buf, count, base_offset, ts_base, ts_fixed, start, end, with_headers,
         n, offsets, stamps, key_off, key_valid, key_data, value_off, value_valid, value_data,
         header_count, hn, hkey_off, hkey_valid, hkey_data, hvalue_off, hvalue_valid, hvalue_data):
    """Append the records of one payload (`count` records) that fall in `[start, end)`.

    Rows are written from index `n` and headers from index `hn` (offset arrays one past);
    timestamps are microseconds: base + delta, or `ts_base` for every record when
    `ts_fixed` (LogAppendTime). Returns (rows written so far, headers written so far), or
    (ERROR, index of the bad record)."""
    limit = len(buf)
    pos = np.int64(0)
    for i in range(count):
        length, pos = _varint(buf, pos, limit)
        if pos < 0 or length < 6 or pos + length > limit:
            return ERROR, i
        rend = pos + length
        pos += 1  # attributes (unused in v2 records)
        ts_delta, pos = _varint(buf, pos, rend)
        if pos < 0:
            return ERROR, i
        off_delta, pos = _varint(buf, pos, rend)
        if pos < 0:
            return ERROR, i
        klen, pos = _varint(buf, pos, rend)
        if pos < 0 or pos + max(klen, 0) > rend:
            return ERROR, i
        kstart = pos
        pos += max(klen, 0)
        vlen, pos = _varint(buf, pos, rend)
        if pos < 0 or pos + max(vlen, 0) > rend:
            return ERROR, i
        vstart = pos
        pos += max(vlen, 0)
        offset = base_offset + off_delta
        if start <= offset < end:
            offsets[n] = offset
            stamps[n] = (ts_base if ts_fixed else ts_base + ts_delta) * 1000
            _put(buf, kstart, klen, key_off, key_valid, key_data, n)
            _put(buf, vstart, vlen, value_off, value_valid, value_data, n)
            if with_headers:
                headers, pos = _varint(buf, pos, rend)
                if pos < 0 or headers < 0:
                    return ERROR, i
                for _ in range(headers):
                    hk, pos = _varint(buf, pos, rend)
                    if pos < 0 or hk < 0 or pos + hk > rend:
                        return ERROR, i
                    _put(buf, pos, hk, hkey_off, hkey_valid, hkey_data, hn)
                    pos += hk
                    hv, pos = _varint(buf, pos, rend)
                    if pos < 0 or pos + max(hv, 0) > rend:
                        return ERROR, i
                    _put(buf, pos, hv, hvalue_off, hvalue_valid, hvalue_data, hn)
                    pos += max(hv, 0)
                    hn += 1
                header_count[n] = headers
            n += 1
        pos = rend
    if pos != limit:
        return ERROR, count
    return n, hn
