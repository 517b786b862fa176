"""Request parsing: kio reads a -1 array length as None even where the schema forbids null,
and reserves room for an array from its length prefix alone; such a request is the
client's error (RequestParseError: close), never a handler crash or a dead process."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import uuid

import pytest

from odradek.broker.registry import supported_versions
from odradek.protocol.messages import (
    RequestParseError,
    parse_request,
)
from tests.broker.fuzz_frames import Length, encode_request
from tests.wire import request_frame

TOPIC_ID = uuid.UUID(int=5)


def _header_only(api_key: int, version: int) -> bytes:
    frame = request_frame(api_key, version, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": []})
    return frame[4:]


def test_null_required_array_is_a_parse_error():
    good = _header_only(0, 9)
    # Produce v9 body: txn id (compact, null=0x00), acks, timeout, topic_data (compact array), tags.
    body_start = len(good) - (1 + 2 + 4 + 1 + 1)
    null_array = good[:body_start] + b"\x00" + struct.pack(">hi", 1, 1000) + b"\x00" + b"\x00"
    with pytest.raises(RequestParseError, match="topic_data"):
        parse_request(null_array, supported_versions())
    assert parse_request(good, supported_versions()).body.topic_data == ()


def test_null_nested_array_is_a_parse_error():
    # ListOffsets v1 (not flexible): replica id, topics[1] = name, partitions = null (-1).
    frame = request_frame(2, 1, {"replica_id": -1, "topics": [{"name": "t", "partitions": []}]})[4:]
    assert frame.endswith(struct.pack(">i", 0))
    bad = frame[:-4] + struct.pack(">i", -1)
    with pytest.raises(RequestParseError, match="topics.partitions"):
        parse_request(bad, supported_versions())


# --- nulls inside nullable arrays (the audit's cases) ---------------------------------


@pytest.mark.parametrize("version,body,path", [
    # OffsetFetch v7: `topics` may be null (all topics), `partition_indexes` inside may not.
    (7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": None}], "require_stable": False},
     "OffsetFetchRequest.topics.partition_indexes"),
    (10, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                      "topics": [{"topic_id": TOPIC_ID, "partition_indexes": None}]}], "require_stable": False},
     "OffsetFetchRequest.groups.topics.partition_indexes"),
])
def test_offset_fetch_with_null_partition_indexes_is_a_parse_error(version, body, path):
    with pytest.raises(RequestParseError, match=path + ": non-nullable field was serialized as null"):
        parse_request(encode_request(9, version, body), supported_versions())


def test_consumer_group_heartbeat_v0_with_null_partitions_is_a_parse_error():
    body = {"group_id": "g", "member_id": "m", "member_epoch": 1, "topic_partitions": [
        {"topic_id": TOPIC_ID, "partitions": None}]}
    with pytest.raises(RequestParseError, match="topic_partitions.partitions: non-nullable"):
        parse_request(encode_request(68, 0, body), supported_versions())


def test_nulls_where_the_schema_allows_them_still_parse():
    request = parse_request(encode_request(9, 7, {"group_id": "g", "topics": None}), supported_versions())
    assert request.body.topics is None
    request = parse_request(encode_request(68, 0, {"group_id": "g", "member_id": "m", "member_epoch": 1,
                                                   "topic_partitions": None}), supported_versions())
    assert request.body.topic_partitions is None


# --- array lengths that the frame cannot hold -----------------------------------------


def test_negative_array_length_is_a_parse_error():
    frame = encode_request(2, 1, {"replica_id": -1, "topics": [{"name": "t", "partitions": Length(-2, [])}]})
    with pytest.raises(RequestParseError, match="topics.partitions: negative array length -2"):
        parse_request(frame, supported_versions())


# Run apart: without the check, kio asks for tens of gigabytes and the failed allocation
# aborts the interpreter ("memory allocation of 193256751088 bytes failed"), which would
# take the whole test session down with it.
_HUGE = textwrap.dedent("""
    from odradek.broker.registry import supported_versions
    from odradek.protocol.messages import RequestParseError, parse_request
    from tests.broker.fuzz_frames import Length, encode_request
    frames = [
        # Metadata v12 (compact arrays): 2**32 - 2 topics in a 30-byte frame.
        encode_request(3, 12, {"topics": Length(2**32 - 2, []), "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False}),
        # ListOffsets v1 (legacy arrays): 2**31 - 1 partitions.
        encode_request(2, 1, {"replica_id": -1, "topics": [{"name": "t", "partitions": Length(2**31 - 1, [])}]}),
    ]
    for frame in frames:
        try:
            parse_request(frame, supported_versions())
        except RequestParseError as exc:
            print(exc)
""")


def test_array_longer_than_the_frame_is_refused_before_kio_allocates():
    done = subprocess.run([sys.executable, "-c", _HUGE], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert "MetadataRequest.topics: tried to allocate a collection of size 4294967294" in lines[0]
    assert "ListOffsetsRequest.topics.partitions: tried to allocate a collection of size 2147483647" in lines[1]
