"""The asyncio server: in-order answers per connection, concurrency across connections."""

import threading
import time

import pytest

from tests.wire import RawClient, parse_response, request_frame

pytestmark = pytest.mark.interop


def _metadata(cid):
    return request_frame(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False}, correlation_id=cid)


def test_pipelined_requests_are_answered_in_order(broker):
    c = RawClient(broker.bootstrap)
    c.send(b"".join(_metadata(cid) for cid in range(100, 150)))
    cids = [parse_response(3, 12, c.recv_frame())[0] for _ in range(50)]
    assert cids == list(range(100, 150))


def test_a_parked_long_poll_does_not_block_other_connections(broker, topic_name):
    parked = RawClient(broker.bootstrap)
    assert int(parked.call(19, 7, {"topics": [{"name": topic_name, "num_partitions": 1, "replication_factor": 1,
                                               "assignments": [], "configs": []}],
                                   "timeout": 5000, "validate_only": False}).topics[0].error_code) == 0
    parked.send(request_frame(1, 12, {
        "replica_id": -1, "max_wait": 3000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic_name, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]},
        correlation_id=7))
    other = RawClient(broker.bootstrap)
    start = time.monotonic()
    for cid in range(20):
        other.send(_metadata(cid))
        assert parse_response(3, 12, other.recv_frame())[0] == cid
    assert time.monotonic() - start < 2.5, "metadata calls waited behind another connection's long poll"
    assert parse_response(1, 12, parked.recv_frame())[0] == 7


def test_many_concurrent_connections(broker):
    errors = []

    def worker(n):
        try:
            c = RawClient(broker.bootstrap)
            for cid in range(20):
                c.send(_metadata(n * 1000 + cid))
                assert parse_response(3, 12, c.recv_frame())[0] == n * 1000 + cid
            c.close()
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
