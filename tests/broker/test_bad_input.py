"""Bad input against a real broker process: each gets a clear outcome, and the broker
keeps serving other connections with nothing lost."""

import struct
import uuid

import pytest

from odradek.records.codec import Record, encode_batch
from tests.wire import RawClient, parse_response, request_frame

pytestmark = pytest.mark.interop

ZERO = uuid.UUID(int=0)


def _produce_body(topic, partition, records, acks=1):
    return {"transactional_id": None, "acks": acks, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def _create(client, name, partitions=1):
    resp = client.call(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                           "assignments": [], "configs": []}], "timeout": 5000, "validate_only": False})
    return resp.topics[0]


def _produce(client, topic, partition, records, acks=1):
    resp = client.call(0, 9, _produce_body(topic, partition, records, acks))
    return resp.responses[0].partition_responses[0]


def _latest(client, topic, partition=0):
    resp = client.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return resp.topics[0].partitions[0].offset


def _good_batch(n=3, start=0):
    return encode_batch([Record(i, 1_700_000_000_000 + i, b"k%d" % (start + i), b"v%d" % (start + i)) for i in range(n)])


@pytest.fixture
def seeded(broker, topic_name):
    """A topic holding three records, and a second healthy client to prove nothing was lost."""
    c = RawClient(broker.bootstrap)
    assert _create(c, topic_name).error_code == 0
    assert _produce(c, topic_name, 0, _good_batch()).error_code == 0
    expected = {"end": 3}
    yield topic_name, expected
    # The broker still serves a fresh connection and the earlier data is intact.
    fresh = RawClient(broker.bootstrap)
    assert _latest(fresh, topic_name) == expected["end"]
    fresh.close()
    c.close()


def test_frame_larger_than_socket_request_max_bytes_closes_only_that_connection(broker_factory, tmp_path):
    b = broker_factory("small", ["-o", "socket.request.max.bytes=4096"])
    healthy = RawClient(b.bootstrap)
    assert _create(healthy, "t").error_code == 0
    bad = RawClient(b.bootstrap)
    bad.send(struct.pack(">i", 4097) + b"\x00" * 100)
    assert bad.is_closed()
    assert _produce(healthy, "t", 0, _good_batch()).error_code == 0
    assert _latest(healthy, "t") == 3


def test_garbage_frame_closes_connection(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    c.send(struct.pack(">i", 12) + b"\xde\xad\xbe\xef" * 3)
    assert c.is_closed()


def test_truncated_frame_then_disconnect(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    full = request_frame(0, 9, _produce_body(seeded, 0, _good_batch(5, 100)))
    c.send(full[: len(full) // 2])
    c.close()  # disconnect mid-request: nothing of it may be appended


def test_unknown_api_key_closes_connection(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    c.send(struct.pack(">i", 12) + struct.pack(">hhih", 9999, 0, 5, -1) + b"\x00\x00")
    assert c.is_closed()


def test_unknown_version_of_a_known_api_closes_connection(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    c.send(struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 5, -1))
    assert c.is_closed()


def test_api_versions_too_new_gets_kip511_fallback(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    c.send(struct.pack(">i", 14) + struct.pack(">hhih", 18, 99, 42, -1) + b"\x00\x00\x00\x00")
    cid, resp = parse_response(18, 0, c.recv_frame())
    assert cid == 42
    assert int(resp.error_code) == 35  # UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[18] == (0, 4) and ranges[3] == (0, 13)
    # The connection stays usable: the client retries with a version it knows.
    assert int(c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code) == 0


def test_request_that_fails_to_parse_closes_connection(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    good = request_frame(3, 12, {"topics": [{"name": seeded, "topic_id": None}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
    body = good[4:-6]  # cut into the topic array
    c.send(struct.pack(">i", len(body)) + body)
    assert c.is_closed()


def test_produce_to_unknown_partition(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    assert int(_produce(c, seeded, 7, _good_batch()).error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_produce_to_unknown_topic_without_auto_create(broker_factory):
    b = broker_factory("noauto", ["-o", "auto.create.topics.enable=false"])
    c = RawClient(b.bootstrap)
    assert int(_produce(c, "nope", 0, _good_batch()).error_code) == 3
    md = c.call(3, 12, {"topics": [{"name": "nope", "topic_id": None}], "allow_auto_topic_creation": True,
                        "include_topic_authorized_operations": False})
    assert int(md.topics[0].error_code) == 3


def test_fetch_out_of_range(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    resp = c.call(1, 12, {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                          "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                          "topics": [{"topic": seeded, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                      "fetch_offset": 50, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    p = resp.responses[0].partitions[0]
    assert int(p.error_code) == 1 and p.high_watermark == 3 and p.log_start_offset == 0


def test_fetch_unknown_topic_id(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    resp = c.call(1, 16, {"max_wait": 10, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                          "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                          "topics": [{"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                      "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    assert int(resp.responses[0].partitions[0].error_code) == 100  # UNKNOWN_TOPIC_ID


@pytest.mark.parametrize(
    "name,partitions,expected",
    [("bad/name", 1, 17), ("x" * 250, 1, 17), (".", 1, 17), ("ok-name-zero", 0, 37), ("ok-name-neg", -5, 37)],
)
def test_invalid_topic_names_and_partition_counts(broker, seeded, name, partitions, expected):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    assert int(_create(c, name, partitions).error_code) == expected


def _mutate(batch: bytes, offset: int, value: bytes) -> bytes:
    return batch[:offset] + value + batch[offset + len(value):]


@pytest.mark.parametrize(
    "mutation,expected",
    [
        (lambda b: _mutate(b, len(b) - 1, bytes([b[-1] ^ 0xFF])), 2),  # CRC mismatch -> CORRUPT_MESSAGE
        # Kafka's ProduceRequest.validateRecords: a v0/v1 batch is INVALID_RECORD; a
        # magic byte no format has is CORRUPT_MESSAGE (ByteBufferLogInputStream).
        (lambda b: _mutate(b, 16, b"\x01"), 87),
        (lambda b: _mutate(b, 16, b"\x07"), 2),
        (lambda b: b[:-5], 2),  # truncated batch -> CORRUPT_MESSAGE
        (lambda b: _mutate(b, 0, struct.pack(">q", 7)), 87),  # non-zero base offset -> INVALID_RECORD
        (lambda b: b"", 87),  # no batches -> INVALID_RECORD
    ],
    ids=["crc", "magic-1", "magic-7", "truncated", "base-offset", "empty"],
)
def test_bad_batches_are_rejected_with_nothing_appended(broker, seeded, mutation, expected):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    # Two partitions in one request: a bad batch must not stop nor taint the good one.
    assert int(_produce(c, seeded, 0, mutation(_good_batch())).error_code) == expected
    assert _latest(c, seeded) == 3


def test_record_count_mismatch_is_invalid_record(broker, seeded):
    seeded, _ = seeded
    import crc32c

    b = bytearray(_good_batch())
    struct.pack_into(">i", b, 57, 2)  # records count says 2, last offset delta says 2 (3 records)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    c = RawClient(broker.bootstrap)
    assert int(_produce(c, seeded, 0, bytes(b)).error_code) == 87
    assert _latest(c, seeded) == 3


def test_acks_zero_error_closes_connection(broker, seeded):
    seeded, _ = seeded
    c = RawClient(broker.bootstrap)
    c.send(request_frame(0, 9, _produce_body(seeded, 9, _good_batch(), acks=0)))
    assert c.is_closed()


def test_acks_zero_success_sends_no_response(broker, seeded):
    seeded, expected = seeded
    expected["end"] = 5
    c = RawClient(broker.bootstrap)
    c.send(request_frame(0, 9, _produce_body(seeded, 0, _good_batch(2, 50), acks=0), correlation_id=5))
    # The next response on the wire belongs to the next request.
    assert _latest(c, seeded) == 5
