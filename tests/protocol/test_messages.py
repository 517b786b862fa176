"""Request parsing: kio reads a -1 array length as None even where the schema forbids null;
such a request is the client's error (RequestParseError: close), never a handler crash."""

from __future__ import annotations

import struct

import pytest

from odradek.broker.registry import supported_versions
from odradek.protocol.messages import RequestParseError, parse_request
from tests.wire import request_frame


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
