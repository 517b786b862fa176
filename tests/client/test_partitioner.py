"""The key partitioner: Kafka's murmur2 vectors, librdkafka's, and a literal port to compare against."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.client.partitioner import key_partition, murmur2, to_positive

# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka's unittest_murmur2 (src/rdmurmur2.c), given there as int32 hex: they cover
# every tail length (0-3) and the empty key.
_UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    _UNALIGNED: 0x78424F1C,
    _UNALIGNED[1:]: 0x4A62B377,
    _UNALIGNED[2:]: 0xE0E4E09E,
    _UNALIGNED[3:]: 0x62B8B43F,
    b"": 0x106E08D9,
}


def signed32(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def java_murmur2(data: bytes) -> int:
    """A line-by-line port of Utils.murmur2 (per byte, emulating int overflow), as an oracle."""

    def i32(x: int) -> int:
        return signed32(x & 0xFFFFFFFF)

    def ushr(x: int, n: int) -> int:  # Java's >>> on an int
        return (x & 0xFFFFFFFF) >> n

    length = len(data)
    m, r = 0x5BD1E995, 24
    h = i32(0x9747B28C ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = i32(data[i4] + (data[i4 + 1] << 8) + (data[i4 + 2] << 16) + (data[i4 + 3] << 24))
        k = i32(k * m)
        k = i32(k ^ ushr(k, r))
        k = i32(k * m)
        h = i32(h * m)
        h = i32(h ^ k)
    rem = length % 4
    base = length & ~3
    if rem == 3:
        h = i32(h ^ (data[base + 2] << 16))
    if rem >= 2:
        h = i32(h ^ (data[base + 1] << 8))
    if rem >= 1:
        h = i32(h ^ data[base])
        h = i32(h * m)
    h = i32(h ^ ushr(h, 13))
    h = i32(h * m)
    h = i32(h ^ ushr(h, 15))
    return h


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items(), ids=[k.decode() for k in JAVA_VECTORS])
def test_kafka_utils_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_VECTORS.items(), ids=[k.decode() or "empty" for k in LIBRDKAFKA_VECTORS])
def test_librdkafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == signed32(expected)


def test_result_is_a_signed_32_bit_int() -> None:
    values = [murmur2(str(i).encode()) for i in range(2000)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values) and any(v >= 0 for v in values)


def test_accepts_bytes_like() -> None:
    key = b"a-little-bit-longer-string"
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == murmur2(key)
    # A memoryview slice: the tail comes from the slice, not the underlying buffer.
    assert murmur2(memoryview(b"xx" + key + b"yy")[2:-2]) == murmur2(key)


@given(st.binary(max_size=64))
def test_matches_literal_java_port(data: bytes) -> None:
    assert murmur2(data) == java_murmur2(data)


def test_to_positive() -> None:
    assert to_positive(-(2**31)) == 0  # Math.abs would overflow here; toPositive does not
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(12345) == 12345


def test_key_partition() -> None:
    # (murmur2 & 0x7fffffff) % n, e.g. "foobar" -> -790332482 -> 1357151166 -> 16 of 50
    assert key_partition(b"foobar", 50) == 1357151166 % 50 == 16
    assert key_partition(b"21", 1) == 0
    for key, h in JAVA_VECTORS.items():
        for n in (1, 2, 3, 7, 12, 100, 1000):
            assert key_partition(key, n) == (h & 0x7FFFFFFF) % n


@given(st.binary(max_size=40), st.integers(min_value=1, max_value=10_000))
def test_key_partition_in_range(key: bytes, n: int) -> None:
    assert 0 <= key_partition(key, n) < n


@pytest.mark.parametrize("n", [0, -3])
def test_key_partition_rejects_no_partitions(n: int) -> None:
    with pytest.raises(ValueError):
        key_partition(b"k", n)
