"""Walk the records of one RecordBatch v2 payload and check their structure.

Theory of operation: `scan(payload, count)` checks what Kafka's DefaultRecord.readFrom
and the batch's record iterator check when a broker validates a produced batch (every
length fits, the fields of each record add up to its declared length, no bytes remain
after the declared count), plus odradek's rule that offset deltas run 0..n-1 (odradek
stores batches as sent, so a wrong delta would reach consumers as a wrong offset). It
returns a `ScanResult`: an error code with the index of the failing record, or the
smallest and largest timestamp delta and the number of null keys, which is all the
validator needs to check timestamps (KIP-937) and compacted-topic keys without building
a Python object per record.

The loop is native (`_scan.c`, built with the package) because in CPython it costs
about a microsecond a record; `scan_py` below is its exact twin, used when the
extension is not built and compared with it by the tests.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

log = logging.getLogger(__name__)

OK = 0
TRUNCATED = 1
VARINT_TOO_LONG = 2
BAD_LENGTH = 3
SIZE_MISMATCH = 4
OFFSET_DELTA = 5
BAD_KEY_LENGTH = 6
BAD_VALUE_LENGTH = 7
BAD_HEADER_COUNT = 8
BAD_HEADER_KEY = 9
BAD_HEADER_VALUE = 10
TRAILING = 11

# Kafka's InvalidRecordException texts where there is one (DefaultRecord.readFrom,
# DefaultRecordBatch.RecordIterator), odradek's own otherwise.
MESSAGES = {
    TRUNCATED: "Found invalid record structure",
    VARINT_TOO_LONG: "Found invalid record structure: varint too long",
    BAD_LENGTH: "Invalid record size",
    SIZE_MISMATCH: "Invalid record size: the record's fields do not add up to its length",
    OFFSET_DELTA: "Record offset delta is not its index in the batch",
    BAD_KEY_LENGTH: "Invalid negative key size",
    BAD_VALUE_LENGTH: "Invalid negative value size",
    BAD_HEADER_COUNT: "Found invalid number of record headers",
    BAD_HEADER_KEY: "Invalid negative header key size",
    BAD_HEADER_VALUE: "Invalid negative header value size",
    TRAILING: "Incorrect declared batch size, records still remaining in file",
}


class ScanResult(NamedTuple):
    code: int
    index: int  # the failing record, or the record count on success
    min_ts_delta: int
    max_ts_delta: int
    null_keys: int

    @property
    def message(self) -> str:
        return f"{MESSAGES[self.code]} (record {self.index})" if self.code != TRAILING else MESSAGES[TRAILING]


_I64_MAX = (1 << 63) - 1
_I64_MIN = -(1 << 63)


class _Fail(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _varint(p, end: int, pos: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise _Fail(TRUNCATED)
        b = p[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5:
                raw &= 0xFFFFFFFF
            else:
                raw &= 0xFFFFFFFFFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise _Fail(VARINT_TOO_LONG)


def scan_py(payload, count: int) -> ScanResult:
    """The pure-Python twin of `_scan.scan` (same codes, same indexes)."""
    p = bytes(payload)
    n = len(p)
    pos = 0
    min_ts, max_ts, null_keys = _I64_MAX, _I64_MIN, 0
    i = 0
    try:
        while i < count:
            length, pos = _varint(p, n, pos, 5)
            if length < 0 or length > n - pos:
                raise _Fail(BAD_LENGTH)
            end = pos + length
            if pos >= end:
                raise _Fail(SIZE_MISMATCH)
            pos += 1  # attributes
            ts, pos = _varint(p, end, pos, 10)
            off, pos = _varint(p, end, pos, 5)
            if off != i:
                raise _Fail(OFFSET_DELTA)
            klen, pos = _varint(p, end, pos, 5)
            if klen < -1:
                raise _Fail(BAD_KEY_LENGTH)
            if klen == -1:
                null_keys += 1
            elif klen > end - pos:
                raise _Fail(SIZE_MISMATCH)
            else:
                pos += klen
            vlen, pos = _varint(p, end, pos, 5)
            if vlen < -1:
                raise _Fail(BAD_VALUE_LENGTH)
            if vlen > end - pos:
                raise _Fail(SIZE_MISMATCH)
            if vlen > 0:
                pos += vlen
            hcount, pos = _varint(p, end, pos, 5)
            if hcount < 0 or hcount > end - pos:
                raise _Fail(BAD_HEADER_COUNT)
            for _ in range(hcount):
                hk, pos = _varint(p, end, pos, 5)
                if hk < 0:
                    raise _Fail(BAD_HEADER_KEY)
                if hk > end - pos:
                    raise _Fail(SIZE_MISMATCH)
                pos += hk
                hv, pos = _varint(p, end, pos, 5)
                if hv < -1:
                    raise _Fail(BAD_HEADER_VALUE)
                if hv > end - pos:
                    raise _Fail(SIZE_MISMATCH)
                if hv > 0:
                    pos += hv
            if pos != end:
                raise _Fail(SIZE_MISMATCH)
            min_ts = min(min_ts, ts)
            max_ts = max(max_ts, ts)
            i += 1
    except _Fail as fail:
        return ScanResult(fail.code, i, min_ts, max_ts, null_keys)
    if pos != n:
        return ScanResult(TRAILING, i, min_ts, max_ts, null_keys)
    if count == 0:
        min_ts = max_ts = 0
    return ScanResult(OK, i, min_ts, max_ts, null_keys)


try:
    from ._scan import scan as _native_scan
except ImportError:  # pragma: no cover - the package build compiles it
    _native_scan = None
    log.warning("odradek.records._scan is not built: produce validation uses the slow Python record walk")

NATIVE = _native_scan is not None


def scan(payload, count: int) -> ScanResult:
    if _native_scan is not None:
        return ScanResult(*_native_scan(payload, count))
    return scan_py(payload, count)
