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


# --- connection limits (broker/connections.py), against real broker processes --------------
#
# Every wait below is bounded in count and time; timings asserted are generous (the
# limits under test are set to about a second).

import socket
import struct

from tests.polling import wait_until


def _rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _client(broker, source="127.0.0.1", timeout=10.0):
    """A RawClient connected from `source` (any 127.x.y.z is loopback on Linux)."""
    c = RawClient.__new__(RawClient)
    c.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout, source_address=(source, 0))
    return c


def _answers(c, cid=1):
    c.send(_metadata(cid))
    return parse_response(3, 12, c.recv_frame())[0] == cid


def _offer(sock, data, seconds):
    """Send as much of `data` as the peer accepts within `seconds`; the bytes sent."""
    sock.settimeout(0.05)
    sent, deadline = 0, time.monotonic() + seconds
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += sock.send(data[sent : sent + 65536])
        except TimeoutError:
            continue
        except OSError:
            break
    return sent


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory):
    b = broker_factory("idle", ["-o", "connections.max.idle.ms=1000"])
    used, silent, busy = RawClient(b.bootstrap), RawClient(b.bootstrap), RawClient(b.bootstrap)
    assert _answers(used)
    start = time.monotonic()
    assert not used.is_closed(wait=0.3) and not silent.is_closed(wait=0.01)
    for cid in range(8):  # 2.4 s of requests every 0.3 s: never idle for a second
        assert _answers(busy, cid)
        time.sleep(0.3)
    assert used.is_closed(wait=2.0) and silent.is_closed(wait=2.0)
    assert _answers(busy, 99), "an active connection was closed as idle"
    assert time.monotonic() - start < 10


def test_frame_trickling_slower_than_request_timeout_is_closed(broker_factory):
    # slowloris: one byte every 0.1 s is activity (not idle) but the frame never completes.
    b = broker_factory("slowloris", ["-o", "request.timeout.ms=1000"])
    healthy = RawClient(b.bootstrap)
    slow = RawClient(b.bootstrap)
    data = struct.pack(">i", 200) + b"\x00" * 200
    start, closed_after = time.monotonic(), None
    for i in range(60):  # at most ~6 s
        try:
            slow.send(data[i : i + 1])
        except OSError:
            closed_after = time.monotonic() - start
            break
        if slow.is_closed(wait=0.1):
            closed_after = time.monotonic() - start
            break
    assert closed_after is not None, "a frame trickling for 6 s was never closed"
    assert 0.8 < closed_after < 4.0
    assert _answers(healthy)
    assert "request.timeout.ms=1000" in b.log_path.read_text()


def test_request_bytes_are_bounded_by_queued_max_request_bytes(broker_factory):
    b = broker_factory("pool", ["-o", "socket.request.max.bytes=524288", "-o", "queued.max.request.bytes=1048576"])
    healthy = RawClient(b.bootstrap)
    for cid in range(3):
        assert _answers(healthy, cid)
    base = _rss_mb(b.proc.pid)
    # Two clients declare the largest frame allowed and send most of it: their
    # reservations fill the pool (1 MB).
    hogs = [RawClient(b.bootstrap) for _ in range(2)]
    for h in hogs:
        h.send(struct.pack(">i", 524288) + b"\x00" * 400_000)
    time.sleep(0.5)
    # Another connection is not read (beyond its size prefix) while the pool is full...
    healthy.send(_metadata(7))
    healthy.sock.settimeout(1.0)
    with pytest.raises(TimeoutError):
        healthy.sock.recv(1)
    # ...and is answered once a hog is gone and its memory released.
    hogs[0].close()
    healthy.sock.settimeout(10.0)
    assert parse_response(3, 12, healthy.recv_frame())[0] == 7
    assert _answers(healthy, 8)
    # Forty more clients offer 500 KB partial frames each (20 MB): what the broker holds
    # stays within the 1 MB pool, plus its bookkeeping.
    many = [RawClient(b.bootstrap) for _ in range(40)]
    for c in many:
        _offer(c.sock, struct.pack(">i", 524288) + b"\x00" * 500_000, 0.1)
    time.sleep(1.0)
    grown = _rss_mb(b.proc.pid) - base
    assert grown < 8, f"broker RSS grew by {grown:.1f} MB with a 1 MB request pool"
    hogs[1].close()
    for c in many:
        c.close()
    healthy.sock.settimeout(10.0)
    for cid in range(20, 25):
        assert _answers(healthy, cid)


def test_large_requests_from_many_clients_all_complete_through_a_small_pool(broker_factory):
    # Eight producers send 300 KB batches at once through a 1 MB pool: partial frames
    # must not fill the pool with none able to complete (the pool's grants prevent it).
    from odradek.records.codec import Record, encode_batch

    b = broker_factory("crowd", ["-o", "socket.request.max.bytes=524288", "-o", "queued.max.request.bytes=1048576"])
    admin = RawClient(b.bootstrap)
    assert admin.call(19, 7, {"topics": [{"name": "big", "num_partitions": 1, "replication_factor": 1,
                                          "assignments": [], "configs": []}],
                              "timeout": 5000, "validate_only": False}).topics[0].error_code == 0
    errors = []

    def producer(n):
        try:
            c = RawClient(b.bootstrap, timeout=20)
            frames = [request_frame(0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                {"name": "big", "partition_data": [{"index": 0, "records": encode_batch(
                    [Record(0, 1_700_000_000_000, b"k", bytes([n]) * 300_000)])}]}]}, correlation_id=i)
                for i in range(3)]
            c.send(b"".join(frames))  # pipelined: up to 900 KB in flight per client
            for i in range(3):
                cid, resp = parse_response(0, 9, c.recv_frame())
                assert cid == i and resp.responses[0].partition_responses[0].error_code == 0
            c.close()
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert time.monotonic() - start < 20
    resp = admin.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "big", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert resp.topics[0].partitions[0].offset == 24


def test_huge_declared_frame_costs_only_the_bytes_received(broker_factory):
    b = broker_factory("declared")  # socket.request.max.bytes: 100 MB (Kafka's default)
    healthy = RawClient(b.bootstrap)
    assert _answers(healthy)
    base = _rss_mb(b.proc.pid)
    liar = RawClient(b.bootstrap)
    liar.send(struct.pack(">i", 100 << 20) + b"\x00" * 10)  # declares 100 MB, sends 10 bytes
    time.sleep(0.5)
    assert _answers(healthy, 2)
    assert _rss_mb(b.proc.pid) - base < 5
    partial = RawClient(b.bootstrap)
    partial.send(struct.pack(">i", 100 << 20) + b"\x00" * (20 << 20))  # sends 20 MB of it
    wait_until(lambda: _rss_mb(b.proc.pid) - base > 15, timeout=10, what="the 20 MB to be received")
    partial.close()
    liar.close()
    # The memory goes back when the connection closes (not at the next GC cycle).
    wait_until(lambda: _rss_mb(b.proc.pid) - base < 5, timeout=10,
               what=lambda: f"RSS back near {base:.1f} MB, now {_rss_mb(b.proc.pid):.1f}")
    assert _answers(healthy, 3)


def test_clients_that_pipeline_without_reading_are_muted(broker_factory):
    b = broker_factory("pipeline")
    probe = RawClient(b.bootstrap)
    resp = probe.call(19, 7, {"topics": [{"name": f"t{i:02d}", "num_partitions": 4, "replication_factor": 1,
                                          "assignments": [], "configs": []} for i in range(20)],
                              "timeout": 5000, "validate_only": False})
    assert all(t.error_code == 0 for t in resp.topics)
    for cid in range(5):
        assert _answers(probe, cid)  # responses of ~3 KB: 20 topics x 4 partitions
    base = _rss_mb(b.proc.pid)
    # Ten clients pipeline 5,000 Metadata requests each (about 15 MB of responses each) and
    # never read. Unmuted, the broker would queue ~150 MB of responses and answer nobody
    # else until it had handled all 50,000 requests.
    payload = b"".join(_metadata(i) for i in range(5000))
    greedy = [RawClient(b.bootstrap) for _ in range(10)]
    threads = [threading.Thread(target=_offer, args=(g.sock, payload, 8.0)) for g in greedy]
    for t in threads:
        t.start()
    worst, peak = 0.0, base
    for cid in range(100, 130):  # ~30 probes over a few seconds
        start = time.monotonic()
        assert _answers(probe, cid)
        worst = max(worst, time.monotonic() - start)
        peak = max(peak, _rss_mb(b.proc.pid))
        time.sleep(0.1)
    for t in threads:
        t.join(15)
    assert worst < 2.0, f"a Metadata request took {worst:.2f} s while others pipelined"
    assert peak - base < 30, f"broker RSS grew by {peak - base:.1f} MB"
    for g in greedy:
        g.close()
    assert _answers(probe, 999)


def test_max_connections_refuses_extra_connections(broker_factory):
    b = broker_factory("maxconn", ["-o", "max.connections=3"])
    allowed = [RawClient(b.bootstrap) for _ in range(3)]
    for i, c in enumerate(allowed):
        assert _answers(c, i)
    extra = RawClient(b.bootstrap)
    assert extra.is_closed(wait=5.0)
    for i, c in enumerate(allowed):
        assert _answers(c, 10 + i)
    allowed.pop().close()

    def admitted():
        c = RawClient(b.bootstrap)
        try:
            return _answers(c, 42)
        except OSError:
            return False
        finally:
            c.close()

    wait_until(admitted, timeout=5, what="a slot freed by a closed connection")
    assert "refusing connection" in b.log_path.read_text()


def test_max_connections_per_ip_and_overrides(broker_factory):
    b = broker_factory("perip", ["-o", "max.connections.per.ip=2",
                                 "-o", "max.connections.per.ip.overrides=127.0.0.2:4,127.0.0.3:0"])
    ones = [_client(b, "127.0.0.1") for _ in range(2)]
    twos = [_client(b, "127.0.0.2") for _ in range(4)]
    for i, c in enumerate(ones + twos):
        assert _answers(c, i)
    assert _client(b, "127.0.0.1").is_closed(wait=5.0)
    assert _client(b, "127.0.0.2").is_closed(wait=5.0)
    assert _client(b, "127.0.0.3").is_closed(wait=5.0)
    assert _client(b, "127.0.0.4") is not None and _answers(_client(b, "127.0.0.4"))
    for i, c in enumerate(ones + twos):
        assert _answers(c, 100 + i)
    # A storm of refused connections is logged at most about once a second.
    for _ in range(50):
        _client(b, "127.0.0.1").close()
    time.sleep(0.2)
    refusals = b.log_path.read_text().count("refusing connection")
    assert 1 <= refusals <= 6, refusals


def test_answer_to_a_peer_that_has_gone_logs_no_traceback(broker_factory, topic_name):
    b = broker_factory("gone")
    c = RawClient(b.bootstrap)
    assert c.call(19, 7, {"topics": [{"name": topic_name, "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}],
                          "timeout": 5000, "validate_only": False}).topics[0].error_code == 0
    fetch = request_frame(1, 12, {
        "replica_id": -1, "max_wait": 300, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic_name, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    for _ in range(10):
        # A long poll, then the peer resets the connection before the answer is due; and a
        # burst of requests whose answers meet a reset connection.
        s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        s.sendall(fetch + _metadata(1) * 50)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    time.sleep(0.8)  # the long polls expire and are answered into closed connections
    assert _answers(c, 5)
    assert "Traceback" not in b.log_path.read_text()
