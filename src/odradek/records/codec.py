"""RecordBatch v2 (magic 2) records: encode and decode, all five compression codecs.

Theory of operation: `batch.py` owns the 61-byte batch header; this module owns
what follows it. After the header comes `recordsCount` records, compressed as one
blob when the attributes say so (the header itself is never compressed). Each record
is a varint-length-prefixed body:

    length varint | attributes int8 (unused) | timestampDelta varlong
    offsetDelta varint | keyLen varint, key | valueLen varint, value
    headerCount varint | [keyLen varint, key utf-8 | valueLen varint, value]...

Every varint is a zigzag-encoded signed base-128 number (protobuf style); a length
of -1 means null. Offsets and timestamps are deltas from the header's baseOffset and
baseTimestamp; with LogAppendTime the broker only stamps maxTimestamp, so readers
must report maxTimestamp for every record and ignore the deltas.

Speed: this is pure Python, so the hot loops are written for CPython. Decoding
reads one- and two-byte varints inline and only calls `_read_varint` for longer
ones, and builds Records without the frozen-dataclass __init__ (see _RecordBuilder).
Encoding only ever writes non-negative varints (offsets and timestamps are deltas
from their minimum, lengths are >= 0), and a table of all 16,384 one- and two-byte
encodings covers every such value below 8192. Whole batches are
(de)compressed in one call to cramjam and CRC'd in one call to crc32c.

Codec wire details (what real clients emit and accept):
  * gzip: an ordinary gzip stream (multi-member streams decode too).
  * snappy: the Java client writes xerial framing (`\\x82SNAPPY\\x00`, two int32s,
    then int32-length-prefixed raw snappy blocks of <= 32 KiB input); librdkafka
    writes raw snappy. We decode both and encode xerial, as Java, kafka-python and
    aiokafka do, and which every client (librdkafka included) reads.
  * lz4: the LZ4 *frame* format with independent blocks. Kafka's Java reader
    decompresses every block on its own, so linked blocks (the lz4 default) would
    be rejected by it; we encode with block_linked=False (KIP-57).
  * zstd: an ordinary zstd frame; decoding handles frames that omit the content
    size (streaming producers) and concatenated frames.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import cramjam
import crc32c

from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    CRC_STRUCT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PREFIX_STRUCT,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    crc_of,
    read_header,
)

__all__ = [
    "CREATE_TIME",
    "GZIP",
    "LOG_APPEND_TIME",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "CodecError",
    "DecodedBatch",
    "Header",
    "Record",
    "compress",
    "decode_batches",
    "decompress",
    "encode_batch",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CREATE_TIME, LOG_APPEND_TIME = 0, 1

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class CodecError(ValueError):
    """The bytes are not a well-formed RecordBatch v2 (or its compressed payload)."""


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    offset: int  # absolute: baseOffset + offsetDelta
    timestamp: int  # absolute epoch ms (maxTimestamp for LogAppendTime batches)
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]

    @property
    def compression(self) -> int:
        return self.header.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.header.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_control(self) -> bool:
        return bool(self.header.attributes & CONTROL_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.header.attributes & TRANSACTIONAL_MASK)


class _RecordBuilder:
    """Slot-for-slot twin of Record, so decoding can build Records fast.

    A frozen dataclass's __init__ sets each field through object.__setattr__, which
    makes construction ~4x slower than plain slot stores. Decoding fills a twin with
    plain stores and then retypes it to Record; CPython allows that because the slot
    layouts are identical (and raises TypeError if they ever were not).
    """

    __slots__ = Record.__slots__


class _HeaderBuilder:
    __slots__ = Header.__slots__  # as _RecordBuilder, for Header


# ---------------------------------------------------------------------------- codecs

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024  # xerial's default block size, as the Java client uses
_I32 = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK])
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data) -> bytes:
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    # The two int32s after the magic are ignored: some producers (redpanda) write
    # them little-endian, and there has only ever been one framing version.
    out = []
    pos, n = len(_XERIAL_HEADER), len(data)
    while pos < n:
        if data.startswith(_XERIAL_MAGIC, pos):  # concatenated xerial streams
            pos += len(_XERIAL_HEADER)
            continue
        if n - pos < 4:
            raise CodecError("truncated xerial snappy block length")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or size > n - pos:
            raise CodecError(f"xerial snappy block of {size} bytes overruns the payload")
        out.append(cramjam.snappy.decompress_raw(data[pos : pos + size]))
        pos += size
    return b"".join(out)


def _lz4_compress(data: bytes, level: int = 0) -> bytes:
    # Not cramjam.lz4.compress: it links blocks (Java can't read that) and is much slower.
    # Levels below 3 are lz4's fast compressor, 3-12 its high-compression one.
    compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
    compressor.compress(data if type(data) is bytes else bytes(data))  # it takes bytes only
    return bytes(compressor.finish())


_NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_COMPRESS = {
    GZIP: lambda data: bytes(cramjam.gzip.compress(data, level=6)),  # Java's and zlib's default
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: lambda data: bytes(cramjam.zstd.compress(data, level=3)),  # Kafka's default; cramjam's is 11
}
_DECOMPRESS = {
    GZIP: lambda data: bytes(cramjam.gzip.decompress(data)),
    SNAPPY: _snappy_decompress,
    LZ4: lambda data: bytes(cramjam.lz4.decompress(data)),
    ZSTD: lambda data: bytes(cramjam.zstd.decompress(data)),
}


_COMPRESS_LEVEL = {
    GZIP: lambda data, level: bytes(cramjam.gzip.compress(data, level=level)),
    LZ4: _lz4_compress,
    ZSTD: lambda data, level: bytes(cramjam.zstd.compress(data, level=level)),
}


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a records blob the way a Kafka client would for `codec` (0 = identity).

    `level` is the library's own level (cramjam's gzip, lz4 frame and zstd levels;
    snappy has none); None is the client default noted in `_COMPRESS`."""
    if codec == NONE:
        return bytes(data)
    if level is not None and codec in _COMPRESS_LEVEL:
        return _COMPRESS_LEVEL[codec](data, level)
    try:
        return _COMPRESS[codec](data)
    except KeyError:
        raise ValueError(f"unknown compression codec {codec}") from None


def decompress(codec: int, data) -> bytes:
    """Inverse of `compress`; raises CodecError for unknown codecs or corrupt input."""
    if codec == NONE:
        return bytes(data)
    try:
        fn = _DECOMPRESS[codec]
    except KeyError:
        raise CodecError(f"unknown compression codec {codec}") from None
    try:
        return fn(data)
    except CodecError:
        raise
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise CodecError(f"corrupt {_NAMES[codec]} payload: {exc}") from exc


# ---------------------------------------------------------------------------- varints

# Zigzag decoding of one-byte varints: 0, -1, 1, -2, ...
_ZIGZAG1 = tuple((b >> 1) ^ -(b & 1) for b in range(128))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint of any length at data[pos]; returns (value, next position)."""
    result = 0
    shift = 0
    while True:
        b = data[pos]  # IndexError on overrun; the caller turns it into CodecError
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:  # a varlong is at most 10 bytes
            raise CodecError("varint longer than 10 bytes")


def _uvarint_slow(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Encodings of every 1- and 2-byte unsigned varint, indexed by the (zigzagged) value.
_UVARINT = tuple(_uvarint_slow(z) for z in range(1 << 14))
_UVARINT_N = len(_UVARINT)


def _zigzag(v: int) -> bytes:
    z = (v << 1) if v >= 0 else ((-v << 1) - 1)
    return _UVARINT[z] if z < _UVARINT_N else _uvarint_slow(z)


# ---------------------------------------------------------------------------- decode


def _batches(buf: bytes | bytearray | memoryview, verify_crc: bool = False):
    """(byte position, header, decompressed records payload) of every complete batch.

    Fetch responses are cut at max_bytes, so the last batch may be incomplete; that
    is not an error and it is skipped. Anything else malformed raises CodecError.
    """
    data = buf if type(buf) is bytes else bytes(buf)  # slices of bytes are bytes
    n = len(data)
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        batch_length = PREFIX_STRUCT.unpack_from(data, pos)[1]  # (baseOffset, batchLength)
        end = pos + LOG_OVERHEAD + batch_length
        if end > n:
            return  # trailing partial batch
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CodecError(f"batch at byte {pos} declares impossible length {batch_length}")
        if data[pos + MAGIC_OFFSET] != 2:
            raise CodecError(f"batch at byte {pos} has magic {data[pos + MAGIC_OFFSET]}; only v2 is supported")
        header = read_header(data, pos)
        if verify_crc and crc_of(data, header) != header.crc:
            raise CodecError(f"CRC32C mismatch in batch at byte {pos}")
        if header.records_count < 0:
            raise CodecError(f"negative record count {header.records_count}")
        codec = header.attributes & COMPRESSION_MASK
        if codec == NONE:
            payload = data[pos + HEADER_SIZE : end]
        else:
            payload = decompress(codec, memoryview(data)[pos + HEADER_SIZE : end])
        yield pos, header, payload
        pos = end


def decode_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool = False) -> list[DecodedBatch]:
    """Decode every complete batch in `buf`; a trailing partial batch is ignored."""
    batches = []
    for pos, header, payload in _batches(buf, verify_crc):
        log_append = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
        try:
            records = _decode_records(payload, header.records_count, header.base_offset,
                                      header.base_timestamp, log_append)
        except (IndexError, UnicodeDecodeError) as exc:
            raise CodecError(f"records of batch at byte {pos} overrun or are malformed: {exc}") from exc
        batches.append(DecodedBatch(header, records))
    return batches


def key_values(buf: bytes | bytearray | memoryview, verify_crc: bool = False) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record in every complete data batch of `buf`, nothing else.

    What a loader of a compacted topic needs (the group coordinator replaying
    `__consumer_offsets`): it skips control batches, timestamps, offsets and headers, so
    it is several times cheaper per record than `decode_batches`. It accepts and refuses
    exactly what `_batches` and a per-record walk would (tests/records/
    test_codec_key_values.py checks it against that walk), but is one loop: the header
    fields it needs come from one unpack, varints of one and two bytes (every record
    length under 8 KiB) are read inline, and nothing is built per batch but the payload
    slice. Coordinator loading time is fail-over time, and a partition holds millions
    of these records.
    """
    out: list[tuple[bytes | None, bytes | None]] = []
    append = out.append
    zz = _ZIGZAG1
    read_varint = _read_varint
    unpack_prefix = PREFIX_STRUCT.unpack_from
    unpack_header = HEADER_STRUCT.unpack_from
    crc = crc32c.crc32c
    data = buf if type(buf) is bytes else bytes(buf)  # slices of bytes are bytes
    view = memoryview(data)
    n = len(data)
    pos = 0
    # The checks, and their order, are `_batches`'s: a trailing partial batch ends the
    # scan, anything else malformed raises CodecError.
    while n - pos >= LOG_OVERHEAD:
        batch_length = unpack_prefix(data, pos)[1]
        end = pos + LOG_OVERHEAD + batch_length
        if end > n:
            break  # trailing partial batch
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CodecError(f"batch at byte {pos} declares impossible length {batch_length}")
        _, _, _, magic, stored_crc, attributes, _, _, _, _, _, _, count = unpack_header(data, pos)
        if magic != 2:
            raise CodecError(f"batch at byte {pos} has magic {magic}; only v2 is supported")
        if verify_crc and crc(view[pos + ATTRIBUTES_OFFSET : end]) != stored_crc:
            raise CodecError(f"CRC32C mismatch in batch at byte {pos}")
        if count < 0:
            raise CodecError(f"negative record count {count}")
        compression = attributes & COMPRESSION_MASK
        if compression == NONE:
            payload = data[pos + HEADER_SIZE : end]
        else:
            payload = decompress(compression, view[pos + HEADER_SIZE : end])
        if attributes & CONTROL_MASK:
            pos = end
            continue
        p = 0
        try:
            for _ in range(count):
                b = payload[p]  # record length
                if b < 0x80:
                    length = zz[b]
                    p += 1
                elif payload[p + 1] < 0x80:
                    z = (b & 0x7F) | (payload[p + 1] << 7)
                    length = (z >> 1) ^ -(z & 1)
                    p += 2
                else:
                    length, p = read_varint(payload, p)
                stop = p + length
                # Attributes (one byte), then the timestamp and offset deltas, usually one
                # byte each (deltas under 64).
                if payload[p + 1] < 0x80 and payload[p + 2] < 0x80:
                    p += 3
                else:
                    p += 1
                    while payload[p] & 0x80:  # timestamp delta
                        p += 1
                    p += 1
                    while payload[p] & 0x80:  # offset delta
                        p += 1
                    p += 1
                b = payload[p]  # key length
                if b < 0x80:
                    size = zz[b]
                    p += 1
                else:
                    size, p = read_varint(payload, p)
                if size < 0:
                    key = None
                else:
                    key = payload[p : p + size]
                    p += size
                b = payload[p]  # value length
                if b < 0x80:
                    size = zz[b]
                    p += 1
                else:
                    size, p = read_varint(payload, p)
                append((key, None if size < 0 else payload[p : p + size]))
                p = stop  # headers are skipped
        except IndexError as exc:
            raise CodecError(f"records of batch at byte {pos} overrun: {exc}") from exc
        if p != len(payload):
            raise CodecError(f"records of batch at byte {pos} end at byte {p} of {len(payload)}")
        pos = end
    return out


def _decode_records(data: bytes, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: int | None) -> list[Record]:
    records = []
    append = records.append
    zz = _ZIGZAG1
    read_varint = _read_varint
    new = object.__new__
    builder = _RecordBuilder
    record_type = Record
    pos = 0
    # Varints are read inline when they fit in one byte (two for fields that often
    # need two), else by the helper. Slices never raise, so lengths are checked explicitly against the record length
    # and, at the end, against the payload length; reads past the end raise IndexError.
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            length = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | (data[pos + 1] << 7)
            length = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            length, pos = read_varint(data, pos)
        start = pos
        pos += 1  # record attributes: unused by every Kafka version so far

        b = data[pos]
        if b < 0x80:
            ts_delta = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | (data[pos + 1] << 7)
            ts_delta = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            ts_delta, pos = read_varint(data, pos)

        b = data[pos]
        if b < 0x80:
            offset_delta = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | (data[pos + 1] << 7)
            offset_delta = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            offset_delta, pos = read_varint(data, pos)

        b = data[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = read_varint(data, pos)
        if size >= 0:
            key = data[pos : pos + size]
            pos += size
        elif size == -1:
            key = None
        else:
            raise CodecError(f"negative key length {size}")

        b = data[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | (data[pos + 1] << 7)
            size = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            size, pos = read_varint(data, pos)
        if size >= 0:
            value = data[pos : pos + size]
            pos += size
        elif size == -1:
            value = None
        else:
            raise CodecError(f"negative value length {size}")

        b = data[pos]
        if b == 0:
            headers = ()
            pos += 1
        else:
            headers, pos = _decode_headers(data, pos)

        if pos - start != length:
            raise CodecError(f"record declares {length} bytes but holds {pos - start}")
        record = new(builder)
        record.offset = base_offset + offset_delta
        record.timestamp = base_timestamp + ts_delta if log_append_time is None else log_append_time
        record.key = key
        record.value = value
        record.headers = headers
        record.__class__ = record_type
        append(record)
    if pos != len(data):
        raise CodecError(f"records end at byte {pos} of a {len(data)}-byte payload")
    return records


def _decode_headers(data: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    zz = _ZIGZAG1
    count, pos = _read_varint(data, pos)
    if count < 0:
        raise CodecError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = _read_varint(data, pos)
        if size < 0:
            raise CodecError(f"negative header key length {size}")  # keys are non-null strings
        key = data[pos : pos + size].decode("utf-8")
        pos += size
        b = data[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = _read_varint(data, pos)
        if size >= 0:
            value = data[pos : pos + size]
            pos += size
        elif size == -1:
            value = None
        else:
            raise CodecError(f"negative header value length {size}")
        header = object.__new__(_HeaderBuilder)
        header.key = key
        header.value = value
        header.__class__ = Header
        headers.append(header)
    return tuple(headers), pos


# ---------------------------------------------------------------------------- encode

_RECORD_FIELDS = attrgetter("offset", "timestamp", "key", "value", "headers")


def encode_batch(
    records: Sequence[Record] | Sequence[tuple],
    *,
    base_offset: int = 0,
    compression: int = NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one RecordBatch v2.

    `records` are all Record objects or all tuples (offset, timestamp, key, value[, headers]);
    headers are Header objects or (str, bytes | None) pairs. Offsets are absolute:
    each record's offsetDelta is `offset - base_offset`, so gaps survive (compaction).
    `last_offset_delta` defaults to the largest delta; compaction passes the original,
    larger one. An empty batch (compaction may leave one to keep producer state)
    needs `last_offset_delta` and gets timestamps -1 (NO_TIMESTAMP).
    """
    if compression != NONE and compression not in _COMPRESS:
        raise ValueError(f"unknown compression codec {compression}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"unknown timestamp type {timestamp_type}")
    attributes = compression
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK

    count = len(records)
    if count == 0:
        if last_offset_delta is None:
            raise ValueError("an empty batch needs an explicit last_offset_delta")
        base_ts = max_ts = -1
        rows = ()
        max_delta = -1
    else:
        if type(records[0]) is Record:
            rows = list(map(_RECORD_FIELDS, records))
        else:
            width = len(records[0])
            if width not in (4, 5) or set(map(len, records)) != {width}:
                raise ValueError("record tuples must all be (offset, timestamp, key, value[, headers])")
            rows = records if width == 5 else [(*r, ()) for r in records]
        offsets = list(map(itemgetter(0), rows))
        timestamps = list(map(itemgetter(1), rows))
        base_ts, max_ts = min(timestamps), max(timestamps)
        min_delta = min(offsets) - base_offset
        max_delta = max(offsets) - base_offset
        if min_delta < 0:
            raise ValueError(f"record offset {min_delta + base_offset} precedes base offset {base_offset}")
        if max_delta > _INT32_MAX:
            raise ValueError("offset delta does not fit in int32")
        if max_ts - base_ts > _INT64_MAX:
            raise ValueError("timestamp spread does not fit in int64")
    if last_offset_delta is None:
        last_offset_delta = max_delta
    elif last_offset_delta < max_delta:
        raise ValueError(f"last_offset_delta {last_offset_delta} < largest record delta {max_delta}")

    parts = []
    extend = parts.extend
    table = _UVARINT
    table_n = _UVARINT_N
    slow = _uvarint_slow
    join = b"".join
    # All varints written here are non-negative, so zigzag is just a doubling.
    for offset, timestamp, key, value, headers in rows:
        z = (timestamp - base_ts) << 1
        ts_v = table[z] if z < table_n else slow(z)
        z = (offset - base_offset) << 1
        off_v = table[z] if z < table_n else slow(z)
        if key is None:
            key_v = b"\x01"  # zigzag(-1)
            key = b""
        else:
            z = len(key) << 1
            key_v = table[z] if z < table_n else slow(z)
        if value is None:
            value_v = b"\x01"
            value = b""
        else:
            z = len(value) << 1
            value_v = table[z] if z < table_n else slow(z)
        body = join((b"\x00", ts_v, off_v, key_v, key, value_v, value,
                     _encode_headers(headers) if headers else b"\x00"))
        z = len(body) << 1
        extend((table[z] if z < table_n else slow(z), body))
    payload = join(parts)
    if compression != NONE:
        payload = _COMPRESS[compression](payload)

    out = bytearray(HEADER_SIZE)
    out += payload
    try:
        HEADER_STRUCT.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, 2, 0,
                          attributes, last_offset_delta, base_ts, max_ts, producer_id, producer_epoch,
                          base_sequence, count)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from exc
    CRC_STRUCT.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _encode_headers(headers) -> bytes:
    table = _UVARINT
    parts = [_zigzag(len(headers))]
    append = parts.append
    for header in headers:
        key, value = (header.key, header.value) if type(header) is Header else header
        key = key.encode("utf-8")
        z = len(key) << 1
        append(table[z] if z < _UVARINT_N else _uvarint_slow(z))
        append(key)
        if value is None:
            append(b"\x01")
        else:
            z = len(value) << 1
            append(table[z] if z < _UVARINT_N else _uvarint_slow(z))
            append(value)
    return b"".join(parts)
