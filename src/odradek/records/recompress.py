"""Broker-side recompression: a topic's `compression.type` decides how batches are stored.

Theory of operation (Kafka's LogValidator.validateMessagesAndAssignOffsetsCompressed):
the target codec is BrokerCompressionType.targetCompression, the topic's codec unless it
is `producer`, which keeps whatever the producer sent. When the produced batch's codec
already is the target, the batch is stored as sent (Kafka's in-place assignment) and
nothing here runs. Otherwise Kafka rebuilds the batch (buildRecordsAndAssignOffsets) with
the target codec and the producer's id, epoch, base sequence and transactional flag;
`uncompressed` stores it uncompressed.

A v2 batch's records do not depend on the codec: the records blob is the same bytes
compressed or not, and every field of the 61-byte header except the batch length, the
attributes' codec bits and the CRC stays as it was. So the rebuild here is: take the
records already decompressed (and checked) by the produce validation (validate.py, into
its bounded buffer), compress them with the target codec, and write a new header with
the new length, codec and CRC32C. Offsets are assigned afterwards by the log, as for any
batch; LogAppendTime, when the topic uses it, is stamped then too.

Kafka then checks the rebuilt batch against `max.message.bytes` again
(UnifiedLog.append: "re-validate message sizes if there's a possibility that they have
changed (due to re-compression ...)"), RecordTooLargeException -> MESSAGE_TOO_LARGE.

Levels (KIP-390): `compression.gzip.level` (-1 = the deflate default, 6),
`compression.lz4.level` (9 = Kafka's default, which uses lz4's fast compressor; any
other level the high-compression one) and `compression.zstd.level` (default 3), read
from the topic config when present.
"""

from __future__ import annotations

import struct

import crc32c

from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    CRC_STRUCT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchError,
    BatchHeader,
    read_header,
)
from .codec import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress

PRODUCER = "producer"
# Kafka's BrokerCompressionType names -> record batch codec ids.
CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_NAMES = {v: k for k, v in CODECS.items()}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

GZIP_DEFAULT_LEVEL = -1  # java.util.zip.Deflater.DEFAULT_COMPRESSION
LZ4_DEFAULT_LEVEL = 9  # Kafka's CompressionType.LZ4.defaultLevel()
ZSTD_DEFAULT_LEVEL = 3  # Kafka's CompressionType.ZSTD.defaultLevel()
LZ4_HC_MAX_LEVEL = 12  # lz4's LZ4HC_CLEVEL_MAX: lz4-java clamps Kafka's 10-17 there too


def target_codec(compression_type: str, source: int) -> int:
    """Kafka's BrokerCompressionType.targetCompression: the codec a batch is stored with."""
    if compression_type == PRODUCER:
        return source
    return CODECS[compression_type]


def codec_level(codec: int, config: dict) -> int | None:
    """The library level for `codec` from the topic's compression.<codec>.level."""
    if codec == GZIP:
        level = int(config.get("compression.gzip.level", GZIP_DEFAULT_LEVEL))
        return 6 if level == GZIP_DEFAULT_LEVEL else level
    if codec == LZ4:
        # Kafka's Lz4BlockOutputStream: the default level means lz4's fast compressor.
        level = int(config.get("compression.lz4.level", LZ4_DEFAULT_LEVEL))
        return 0 if level == LZ4_DEFAULT_LEVEL else min(level, LZ4_HC_MAX_LEVEL)
    if codec == ZSTD:
        return int(config.get("compression.zstd.level", ZSTD_DEFAULT_LEVEL))
    return None


def recompress(buf: bytearray, header: BatchHeader, records: memoryview, compression_type: str,
               config: dict, max_message_bytes: int) -> tuple[bytearray, BatchHeader]:
    """The produced batch in `buf` stored as the topic wants it.

    `records` is the batch's records blob uncompressed (validate_produce_records).
    Returns (`buf`, `header`) unchanged when the batch already has the target codec, else
    a new buffer holding the rebuilt batch and its header. Raises BatchError
    (message_too_large) when the rebuilt batch exceeds `max_message_bytes`.
    """
    source = header.compression
    target = target_codec(compression_type, source)
    if target == source:
        return buf, header
    payload = compress(target, records, codec_level(target, config))
    out = bytearray(HEADER_SIZE + len(payload))
    out[:HEADER_SIZE] = memoryview(buf)[header.position : header.position + HEADER_SIZE]
    out[HEADER_SIZE:] = payload
    _I32.pack_into(out, 8, len(out) - LOG_OVERHEAD)  # batchLength
    _I16.pack_into(out, ATTRIBUTES_OFFSET, (header.attributes & ~COMPRESSION_MASK) | target)
    CRC_STRUCT.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    rebuilt = read_header(out, 0)
    if rebuilt.size > max_message_bytes:
        raise BatchError("message_too_large",
                         f"Message batch size is {rebuilt.size} bytes after recompression to "
                         f"{_NAMES[target]}, which exceeds the maximum configured size of {max_message_bytes}.")
    return out, rebuilt
