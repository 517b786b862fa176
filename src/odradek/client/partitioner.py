"""The default key partitioner: Kafka's murmur2 hash, bit for bit.

A record with a key must land on the partition every other client would pick for the
same key, or per-key ordering breaks the moment two producers (say a Java service and
a librdkafka one) write the same topic. The Java producer's default partitioner
(``BuiltInPartitioner.partitionForKey``) and librdkafka's ``murmur2_random``
partitioner (the Java-compatible one) both compute::

    partition = (murmur2(key) & 0x7fffffff) % num_partitions

where ``murmur2`` is Kafka's port of Austin Appleby's MurmurHash2 (32-bit, seed
``0x9747b28c``) in ``org.apache.kafka.common.utils.Utils.murmur2``. This module is
that function and nothing else: the choice for null keys (sticky or random) is the
producer's business.

Theory of operation
-------------------
Java does the arithmetic in wrapping signed 32-bit ints; here every product is masked
to 32 unsigned bits, which gives the same bit pattern, and the result is turned back
into a signed int at the end (Java's ``murmur2`` returns ``int``; callers then mask it
with ``toPositive`` rather than taking ``abs``, so ``Integer.MIN_VALUE`` is harmless).

This runs once per keyed record, so the body avoids per-byte Python work: all whole
4-byte little-endian words are decoded by one ``struct.unpack_from`` call, and the
1-3 trailing bytes, which Java folds in with a fall-through ``switch`` (byte 2 << 16,
then byte 1 << 8, then byte 0), are exactly one little-endian ``int.from_bytes`` of
the tail.
"""

from __future__ import annotations

import struct

__all__ = ["key_partition", "murmur2", "to_positive"]

_SEED = 0x9747B28C  # Utils.murmur2: "int seed = 0x9747b28c"
_M = 0x5BD1E995  # mixing constant m
_R = 24  # mixing shift r
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int, as Java returns it."""
    length = len(data)
    h = _SEED ^ length
    words = length >> 2
    if words:
        m = _M
        mask = _MASK
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * m) & mask
            k ^= k >> _R
            # h = h*m ^ k*m: the low 32 bits of an XOR depend only on the operands' low
            # 32 bits, so one mask covers both products.
            h = ((h * m) ^ (k * m)) & mask
    tail = length & 3
    if tail:
        # Java: switch (length % 4) { case 3: h ^= b2 << 16; case 2: h ^= b1 << 8;
        # case 1: h ^= b0; h *= m; } (falling through), i.e. the tail as one
        # little-endian int; with no tail there is no multiply.
        h ^= int.from_bytes(data[length - tail :], "little")
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(x: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows on MIN_VALUE)."""
    return x & 0x7FFFFFFF


def key_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Java's default partitioner and librdkafka's ``murmur2_random`` pick for ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
