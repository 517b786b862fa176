"""The client's sans-I/O connection core (`odradek.client.wire.WireConnection`), no sockets.

Requests are checked by reading them back with the broker's own request parser;
responses are produced with the broker's own response encoder and fed to the client
split at every byte boundary.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.registry import supported_versions
from odradek.client.errors import KafkaConnectionError, KafkaError
from odradek.client.wire import WireConnection
from odradek.protocol.messages import Request, encode_response, parse_request
from odradek.records.codec import encode_batch

SUPPORTED = supported_versions()


def _parse(frame: bytes) -> Request:
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    return parse_request(frame[4:], SUPPORTED)


def _response(api_key: int, version: int, correlation_id: int, payload: dict) -> bytes:
    return encode_response(Request(api_key, version, correlation_id, "broker", None, 0), payload)


def _api_versions_payload(error=ErrorCode.none) -> dict:
    return {"error_code": error, "throttle_time": 0,
            "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12},
                         {"api_key": 18, "min_version": 0, "max_version": 3}]}


def _metadata_payload(topic: str = "t") -> dict:
    return {"throttle_time": 0, "cluster_id": "c", "controller_id": 1,
            "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
            "topics": [{"error_code": 0, "name": topic, "topic_id": uuid.UUID(int=7), "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                                        "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}],
                        "topic_authorized_operations": -(2**31)}]}


METADATA_REQ = {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False, "include_cluster_authorized_operations": False}


# ------------------------------------------------------------------ requests


@pytest.mark.parametrize("api_key,version,body,check", [
    (18, 0, {}, lambda b: True),
    (18, 3, {"client_software_name": "odradek", "client_software_version": "0.1.0"},
     lambda b: (b.client_software_name, b.client_software_version) == ("odradek", "0.1.0")),
    (3, 1, METADATA_REQ, lambda b: [t.name for t in b.topics] == ["t"]),
    (3, 12, METADATA_REQ, lambda b: [t.name for t in b.topics] == ["t"] and not b.allow_auto_topic_creation),
    (3, 12, {**METADATA_REQ, "topics": None}, lambda b: b.topics is None),
    (10, 6, {"key": "g", "key_type": 0, "coordinator_keys": ["g"]}, lambda b: list(b.coordinator_keys) == ["g"]),
    (10, 0, {"key": "g", "key_type": 0, "coordinator_keys": ["g"]}, lambda b: b.key == "g"),
    (68, 1, {"group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None, "rack_id": None,
             "rebalance_timeout": 1000, "subscribed_topic_names": ["a", "b"], "subscribed_topic_regex": None,
             "server_assignor": None, "topic_partitions": []},
     lambda b: (b.group_id, b.member_epoch, list(b.subscribed_topic_names)) == ("g", 0, ["a", "b"])),
])
def test_request_is_read_back_by_the_broker_parser(api_key, version, body, check):
    w = WireConnection("my-client")
    cid, frame = w.request(api_key, version, body)
    req = _parse(frame)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (api_key, version, cid, "my-client")
    assert check(req.body)
    assert w.in_flight == 1


def test_produce_request_carries_the_record_batch_unchanged():
    batch = encode_batch([(0, 1_700_000_000_000, b"k", b"v"), (1, 1_700_000_000_001, None, b"w")])
    w = WireConnection()
    _, frame = w.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 3, "records": batch}]}]})
    req = _parse(frame)
    (td,) = req.body.topic_data
    (pd,) = td.partition_data
    assert (td.name, pd.index, bytes(pd.records), req.body.acks) == ("t", 3, batch, -1)


def test_null_client_id_and_correlation_ids_increase():
    w = WireConnection(client_id=None)
    ids = []
    for _ in range(3):
        cid, frame = w.request(18, 3, {"client_software_name": "x", "client_software_version": "1"})
        req = _parse(frame)
        assert req.client_id is None and req.correlation_id == cid
        ids.append(cid)
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert w.in_flight == 3


def test_request_body_may_be_a_kio_entity():
    from odradek.protocol.messages import build, request_class

    w = WireConnection()
    body = build(request_class(10, 6), {"key": "g", "key_type": 0, "coordinator_keys": ["x", "y"]})
    _, frame = w.request(10, 6, body)
    assert list(_parse(frame).body.coordinator_keys) == ["x", "y"]


def test_fields_a_version_lacks_are_dropped():
    # FindCoordinator v0 has no key_type: `build` drops it instead of failing.
    w = WireConnection()
    _, frame = w.request(10, 0, {"key": "g", "key_type": 1, "coordinator_keys": ["g"]})
    req = _parse(frame)
    assert req.body.key == "g" and not hasattr(req.body, "key_type")


# ------------------------------------------------------------------ responses


def _two_requests(w: WireConnection) -> tuple[int, int]:
    a, _ = w.request(18, 3, {"client_software_name": "odradek", "client_software_version": "0.1.0"})
    b, _ = w.request(3, 12, METADATA_REQ)
    return a, b


def _two_responses(a: int, b: int) -> bytes:
    return _response(18, 3, a, _api_versions_payload()) + _response(3, 12, b, _metadata_payload())


def _check_pair(done, a, b):
    assert [cid for cid, _ in done] == [a, b]
    av, md = done[0][1], done[1][1]
    assert av.error_code == ErrorCode.none and {int(k.api_key) for k in av.api_keys} == {3, 18}
    assert [t.name for t in md.topics] == ["t"] and md.brokers[0].port == 9092


def test_responses_split_at_every_byte_boundary():
    w0 = WireConnection()
    a, b = _two_requests(w0)
    data = _two_responses(a, b)
    for cut in range(len(data) + 1):
        w = WireConnection()
        assert _two_requests(w) == (a, b)
        done = w.receive_data(data[:cut]) if cut else []
        done += w.receive_data(data[cut:]) if cut < len(data) else []
        _check_pair(done, a, b)
        assert w.in_flight == 0


def test_responses_fed_one_byte_at_a_time():
    w = WireConnection()
    a, b = _two_requests(w)
    done = []
    for i, byte in enumerate(_two_responses(a, b)):
        got = w.receive_data(bytes([byte]))
        done += got
        assert len(done) <= 2
    _check_pair(done, a, b)


def test_response_with_wrong_correlation_id_is_a_connection_error():
    w = WireConnection()
    cid, _ = w.request(3, 12, METADATA_REQ)
    with pytest.raises(KafkaConnectionError, match="correlation id"):
        w.receive_data(_response(3, 12, cid + 1, _metadata_payload()))


def test_responses_out_of_order_are_a_connection_error():
    w = WireConnection()
    _a, b = _two_requests(w)
    # Kafka answers in order: the answer to the second request first is a violation.
    with pytest.raises(KafkaConnectionError):
        w.receive_data(_response(3, 12, b, _metadata_payload()))


def test_unexpected_response_is_a_connection_error():
    w = WireConnection()
    with pytest.raises(KafkaConnectionError, match="no request outstanding"):
        w.receive_data(_response(3, 12, 1, _metadata_payload()))


def test_extra_response_after_the_expected_one_is_a_connection_error():
    w = WireConnection()
    cid, _ = w.request(3, 12, METADATA_REQ)
    data = _response(3, 12, cid, _metadata_payload())
    with pytest.raises(KafkaConnectionError):
        w.receive_data(data + data)


@pytest.mark.parametrize("body", [
    b"",  # nothing after the size: not even a header
    b"\x00\x00",  # half a correlation id
    b"\x00\x00\x00\x01\x00",  # header, then one byte of a Metadata body
    b"\x00\x00\x00\x01" + b"\xff" * 40,  # header, then garbage lengths
])
def test_garbled_response_body_is_a_connection_error(body):
    w = WireConnection()
    w.request(3, 12, METADATA_REQ)
    with pytest.raises(KafkaConnectionError, match="malformed"):
        w.receive_data(struct.pack(">i", len(body)) + body)


def test_truncated_valid_response_in_a_short_frame_is_a_connection_error():
    w = WireConnection()
    cid, _ = w.request(3, 12, METADATA_REQ)
    good = _response(3, 12, cid, _metadata_payload())
    payload = good[4:-10]  # a frame that declares (and has) fewer bytes than the body needs
    with pytest.raises(KafkaConnectionError):
        w.receive_data(struct.pack(">i", len(payload)) + payload)


def test_negative_frame_size_is_a_connection_error():
    w = WireConnection()
    w.request(3, 12, METADATA_REQ)
    with pytest.raises(KafkaConnectionError, match="framing"):
        w.receive_data(struct.pack(">i", -5))


def test_frame_larger_than_the_limit_is_a_connection_error():
    w = WireConnection(max_frame_size=1000)
    w.request(3, 12, METADATA_REQ)
    with pytest.raises(KafkaConnectionError, match="framing"):
        w.receive_data(struct.pack(">i", 1001))


def test_eof_with_requests_outstanding_is_a_connection_error():
    w = WireConnection()
    a, _b = _two_requests(w)
    # The first answer arrives, then the broker closes before the second.
    done = w.receive_data(_response(18, 3, a, _api_versions_payload()))
    assert [cid for cid, _ in done] == [a]
    with pytest.raises(KafkaConnectionError, match="1 request"):
        w.receive_data(b"")


def test_eof_mid_frame_is_a_connection_error():
    w = WireConnection()
    cid, _ = w.request(3, 12, METADATA_REQ)
    w.receive_data(_response(3, 12, cid, _metadata_payload())[:20])
    with pytest.raises(KafkaConnectionError):
        w.receive_data(b"")


def test_eof_with_nothing_outstanding_is_clean():
    w = WireConnection()
    cid, _ = w.request(3, 12, METADATA_REQ)
    assert len(w.receive_data(_response(3, 12, cid, _metadata_payload()))) == 1
    assert w.receive_data(b"") == []


def test_acks0_requests_are_not_awaited():
    w = WireConnection()
    batch = encode_batch([(0, 1, None, b"v")])
    produce = {"transactional_id": None, "acks": 0, "timeout": 1000,
               "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}
    p1, frame = w.request(0, 9, produce, expect_response=False)
    assert _parse(frame).body.acks == 0
    assert w.in_flight == 0
    m, _ = w.request(3, 12, METADATA_REQ)
    w.request(0, 9, produce, expect_response=False)
    assert w.in_flight == 1 and p1 < m
    # The next response answers the Metadata request, not the Produce sent before it.
    done = w.receive_data(_response(3, 12, m, _metadata_payload()))
    assert [cid for cid, _ in done] == [m]
    assert w.in_flight == 0
    assert w.receive_data(b"") == []  # acks=0 requests outstanding do not make EOF an error


def test_an_answer_to_an_acks0_request_is_a_connection_error():
    w = WireConnection()
    p, _ = w.request(0, 9, {"transactional_id": None, "acks": 0, "timeout": 1000, "topic_data": []},
                     expect_response=False)
    w.request(3, 12, METADATA_REQ)
    with pytest.raises(KafkaConnectionError):
        w.receive_data(_response(0, 9, p, {"responses": [], "throttle_time": 0}))


def test_response_parsed_with_the_version_of_its_request():
    # The same response payload differs on the wire between v1 (non-flexible) and v12
    # (flexible); each is read with the schema of the request it answers.
    w = WireConnection()
    a, _ = w.request(3, 1, METADATA_REQ)
    b, _ = w.request(3, 12, METADATA_REQ)
    data = _response(3, 1, a, _metadata_payload("one")) + _response(3, 12, b, _metadata_payload("twelve"))
    done = w.receive_data(data)
    assert [d[1].topics[0].name for d in done] == ["one", "twelve"]
    assert [type(d[1]).__version__ for d in done] == [1, 12]


def test_unknown_error_code_is_not_a_connection_error():
    w = WireConnection()
    cid, _ = w.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    data = _response(60, 1, cid, {"throttle_time": 0, "error_code": ErrorCode.unknown_server_error,
                                  "error_message": None, "endpoint_type": 1, "cluster_id": "c", "controller_id": 1,
                                  "brokers": [], "cluster_authorized_operations": -(2**31)})
    at = 4 + 4 + 1 + 4  # size, correlation id, header tagged fields, throttle time
    assert struct.unpack_from(">h", data, at) == (-1,)
    data = data[:at] + struct.pack(">h", 250) + data[at + 2:]  # a code from a future Kafka
    ((got_cid, resp),) = w.receive_data(data)
    # Java's Errors.forCode: UNKNOWN_SERVER_ERROR for this request, the connection stays usable
    assert got_cid == cid and isinstance(resp, KafkaError) and resp.name == "UNKNOWN_SERVER_ERROR"
    assert not isinstance(resp, KafkaConnectionError)
    cid2, _ = w.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    ((got_cid2, resp2),) = w.receive_data(_response(60, 1, cid2, {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "endpoint_type": 1,
        "cluster_id": "c", "controller_id": 1, "brokers": [], "cluster_authorized_operations": -(2**31)}))
    assert got_cid2 == cid2 and resp2.cluster_id == "c"
