"""Client input that once logged a traceback (or did worse), through the whole broker.

Each case is one the audit or the fuzz tests (test_fuzz.py) found. The outcome must be
an error code in the response, or a closed connection for a frame that does not parse,
with nothing logged at ERROR, no handler error counted, and the broker still serving.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from odradek.broker.errors import CloseConnection
from odradek.cluster.names import CONSUMER_OFFSETS
from odradek.records.codec import Record, encode_batch
from tests.broker.fuzz_frames import encode_request
from tests.wire import parse_response, request_frame

TOPIC_ID = uuid.UUID(int=5)
INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 17, 42


@pytest.fixture
def quiet(inproc, caplog):
    """The in-process broker; after the test, no traceback was logged and no handler failed."""
    caplog.set_level(logging.INFO)
    yield inproc
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert inproc.broker.internal_errors == 0


def _call(b, api_key: int, version: int, body: dict):
    return parse_response(api_key, version, b.handle(request_frame(api_key, version, body)))[1]


def _join_consumer_group(b, group: str):
    return _call(b, 68, 1, {"group_id": group, "member_id": "m-1", "member_epoch": 0, "instance_id": None,
                            "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"],
                            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})


# --- the audit's cases: a null inside a nullable array closes the connection ----------


@pytest.mark.parametrize("version,body", [
    (7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": None}], "require_stable": False}),
    (10, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                      "topics": [{"topic_id": TOPIC_ID, "partition_indexes": None}]}], "require_stable": False}),
])
def test_offset_fetch_with_null_partition_indexes_closes_the_connection(quiet, version, body):
    with pytest.raises(CloseConnection):
        quiet.loop.run_until_complete(quiet.broker.handle_frame(encode_request(9, version, body)))
    ok = _call(quiet, 9, 7, {"group_id": "g", "topics": None, "require_stable": False})
    assert ok.error_code == 0


def test_consumer_group_heartbeat_v0_with_null_partitions_closes_the_connection(quiet):
    quiet.broker.create_topic("t", 1, {})
    body = {"group_id": "g", "member_id": "m", "member_epoch": 1, "topic_partitions": [
        {"topic_id": TOPIC_ID, "partitions": None}]}
    with pytest.raises(CloseConnection):
        quiet.loop.run_until_complete(quiet.broker.handle_frame(encode_request(68, 0, body)))
    assert _join_consumer_group(quiet, "g").error_code == 0


# --- Metadata v10-11: topic ids are in the schema but not usable ----------------------


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_11_with_a_null_topic_name_is_invalid_request(quiet, version):
    # KafkaApis.handleTopicMetadataRequest refuses it (InvalidRequestException) and
    # MetadataRequest.getErrorResponse answers each topic with the error, null names as "".
    md = _call(quiet, 3, version, {"topics": [{"name": None, "topic_id": None}], "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": False,
                                   "include_topic_authorized_operations": False})
    assert [(t.name, t.error_code) for t in md.topics] == [("", INVALID_REQUEST)]


def test_metadata_v11_with_a_topic_id_is_invalid_request(quiet):
    quiet.broker.create_topic("t", 1, {})
    md = _call(quiet, 3, 11, {"topics": [{"name": "t", "topic_id": TOPIC_ID}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
    assert [(t.name, t.error_code) for t in md.topics] == [("t", INVALID_REQUEST)]


# --- the group coordinator's topic is not the clients' to change ----------------------


@pytest.mark.parametrize("version", [1, 6])
def test_delete_topics_refuses_consumer_offsets(quiet, version):
    quiet.broker.create_topic("t", 1, {})
    body = ({"topics": [{"name": CONSUMER_OFFSETS, "topic_id": None}], "timeout": 1000} if version >= 6
            else {"topic_names": [CONSUMER_OFFSETS], "timeout": 1000})
    r = _call(quiet, 20, version, body)
    assert [x.name for x in r.responses] == [CONSUMER_OFFSETS] and r.responses[0].error_code != 0
    assert quiet.broker.metadata.get(CONSUMER_OFFSETS) is not None
    assert _join_consumer_group(quiet, "g").error_code == 0  # raised AttributeError after the delete


def test_create_partitions_refuses_consumer_offsets(quiet):
    before = quiet.broker.metadata.get(CONSUMER_OFFSETS).partitions
    r = _call(quiet, 37, 3, {"topics": [{"name": CONSUMER_OFFSETS, "count": before + 1, "assignments": None}],
                             "timeout": 1000, "validate_only": False})
    assert [x.name for x in r.results] == [CONSUMER_OFFSETS] and r.results[0].error_code != 0
    # GroupCoordinator.ensure_topic refuses to start with any other count.
    assert quiet.broker.metadata.get(CONSUMER_OFFSETS).partitions == before


def test_produce_refuses_consumer_offsets(quiet):
    batch = encode_batch([Record(0, 1_700_000_000_000, b"k", b"v")], compression=0)
    r = _call(quiet, 0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": CONSUMER_OFFSETS, "partition_data": [{"index": 0, "records": batch}]}]})
    # ReplicaManager.appendToLocalLog: "Cannot append to internal topic".
    assert r.responses[0].partition_responses[0].error_code == INVALID_TOPIC_EXCEPTION
    assert quiet.broker.logs.get(CONSUMER_OFFSETS, 0).log_end_offset == 0
