"""The connection policy (broker/connections.py) without sockets or a clock: admission,
idle and request timeouts, the request memory pool, muting. The same behaviour against
real broker processes is tested in test_server.py."""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.connections import (
    BACKLOG_BYTES,
    READ_SIZE,
    ConnectionTable,
    Limits,
    LogThrottle,
    normalize_host,
)
from odradek.config import BrokerConfig, apply_properties
from odradek.protocol.framing import CLOSED, NEED_DATA, RemoteProtocolError, frame


def table(**kw):
    return ConnectionTable(Limits(**kw))


def admit(t, host="10.0.0.1", now=0.0):
    state, why = t.admit(host, now)
    assert state is not None, why
    return state


def feed(state, data, now=0.0):
    """Deliver `data` as the transport would: never more than the allowance at a time.
    Returns the bytes not delivered because reading was refused."""
    pos = 0
    while pos < len(data):
        n = state.read_allowance()
        if n == 0:
            break
        state.received(data[pos : pos + n], now)
        pos += n
    return data[pos:]


# --- admission -------------------------------------------------------------------------


def test_max_connections_refuses_beyond_the_total_and_frees_a_slot_on_close():
    t = table(max_connections=2)
    a, b = admit(t, "10.0.0.1"), admit(t, "10.0.0.2")
    state, why = t.admit("10.0.0.3", 0.0)
    assert state is None and why == "max.connections=2 reached"
    a.close()
    assert admit(t, "10.0.0.3") is not None
    assert len(t) == 2 and b in set(t)


def test_max_connections_per_ip_and_overrides():
    t = table(max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 3, "10.0.0.7": 0})
    admit(t, "10.0.0.1"), admit(t, "10.0.0.1")
    state, why = t.admit("10.0.0.1", 0.0)
    assert state is None and why == "max.connections.per.ip=2 reached for 10.0.0.1"
    assert admit(t, "10.0.0.2") is not None  # another address has its own count
    for _ in range(3):
        admit(t, "10.0.0.9")
    assert t.admit("10.0.0.9", 0.0)[1] == "max.connections.per.ip.overrides=3 reached for 10.0.0.9"
    assert t.admit("10.0.0.7", 0.0)[1] == "max.connections.per.ip.overrides=0 reached for 10.0.0.7"


def test_per_ip_zero_admits_only_overridden_hosts():
    # Kafka: max.connections.per.ip=0 with overrides allows only the listed hosts.
    t = table(max_connections_per_ip=0, per_ip_overrides={"127.0.0.1": 1})
    assert t.admit("10.0.0.1", 0.0)[0] is None
    assert admit(t, "127.0.0.1") is not None


def test_ipv4_mapped_peer_counts_as_its_ipv4_address():
    assert normalize_host("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_host("0:0:0:0:0:0:0:1") == "::1"
    t = table(max_connections_per_ip=1)
    admit(t, "127.0.0.1")
    assert t.admit("::ffff:127.0.0.1", 0.0)[0] is None
    assert t.count("127.0.0.1") == 1


def test_limits_from_config_follow_kafka():
    cfg = apply_properties(BrokerConfig(), {
        "socket.request.max.bytes": "1000", "queued.max.request.bytes": "10",
        "connections.max.idle.ms": "-1", "request.timeout.ms": "2500",
        "max.connections": "5", "max.connections.per.ip": "0",
        "max.connections.per.ip.overrides": "::ffff:127.0.0.1:4",
    })
    limits = Limits.from_config(cfg)
    assert limits.pool_bytes == 1000  # raised to socket.request.max.bytes
    assert limits.idle_s is None  # negative: never expire (Kafka)
    assert limits.request_timeout_s == 2.5
    assert limits.per_ip_limit("127.0.0.1") == 4 and limits.per_ip_limit("10.1.1.1") == 0
    cfg.queued_max_request_bytes = -1
    assert Limits.from_config(cfg).pool_bytes is None  # Kafka: -1 is no limit
    cfg.queued_max_request_bytes = 5000
    assert Limits.from_config(cfg).pool_bytes == 5000
    assert Limits.from_config(BrokerConfig()).idle_s == 600.0  # Kafka's default


def test_refusals_are_logged_at_most_once_a_second_with_a_count():
    throttle = LogThrottle(1.0)
    assert throttle.ready(10.0) == 0
    assert [throttle.ready(10.0 + i / 100) for i in range(1, 50)] == [None] * 49
    assert throttle.ready(11.0) == 49
    assert throttle.ready(11.5) is None
    assert throttle.ready(12.2) == 1


# --- idle and request timeouts ------------------------------------------------------------


def test_idle_connection_expires_after_connections_max_idle_ms():
    t = table(idle_s=10.0)
    s = admit(t, now=0.0)
    assert t.expired(9.9) == []
    [(state, why)] = t.expired(10.0)
    assert state is s and why == "idle for more than connections.max.idle.ms=10000"


def test_reads_writes_and_write_progress_are_activity():
    t = table(idle_s=10.0)
    s = admit(t, now=0.0)
    s.received(frame(b"x"), now=5.0)
    assert t.expired(14.0) == []
    s.wrote(12.0)
    assert t.expired(21.0) == []
    s.note_unsent(1000, 20.0)  # a response was queued
    s.note_unsent(1000, 29.0)  # no progress since: not activity
    assert t.expired(30.0) != []
    s.note_unsent(10, 30.0)  # the peer read some
    assert t.expired(39.0) == []


def test_request_in_flight_is_not_idle_but_a_muted_connection_is():
    t = table(idle_s=1.0)
    s = admit(t, now=0.0)
    s.received(frame(b"long poll"), 0.0)
    assert s.next_frame() == b"long poll"
    assert t.expired(100.0) == []  # the broker is working on it (a long poll, a join)
    s.frame_done(100.0)
    s.set_write_blocked(True)  # its response is not being read
    assert [why for _, why in t.expired(101.0)] == ["idle for more than connections.max.idle.ms=1000"]


def test_idle_expiry_disabled():
    t = table(idle_s=None)
    admit(t, now=0.0)
    assert t.expired(1e9) == []


def test_partial_frame_times_out_after_request_timeout_from_its_first_byte():
    t = table(request_timeout_s=30.0, idle_s=None)
    s = admit(t, now=0.0)
    payload = frame(b"y" * 100)
    s.received(payload[:1], now=100.0)  # first byte: the clock starts
    for i in range(1, 20):
        s.received(payload[i : i + 1], now=100.0 + i)  # trickling keeps it busy, not whole
    assert s.deadline() == 130.0
    assert t.expired(129.9) == []
    [(_, why)] = t.expired(130.0)
    assert why == "request frame incomplete after request.timeout.ms=30000 (20 bytes received)"


def test_each_frame_has_its_own_clock_and_a_whole_frame_stops_it():
    t = table(request_timeout_s=30.0, idle_s=None)
    s = admit(t, now=0.0)
    a, b = frame(b"a" * 10), frame(b"b" * 10)
    s.received(a[:5], now=0.0)
    s.received(a[5:] + b[:3], now=20.0)  # a completes, b starts at 20
    assert s.deadline() == 50.0
    s.received(b[3:], now=25.0)
    assert s.deadline() is None and t.expired(1000.0) == []


def test_request_timeout_clock_stops_while_the_broker_is_not_reading():
    t = table(request_timeout_s=30.0, idle_s=None)
    s = admit(t, now=0.0)
    s.received(frame(b"z" * 100)[:10], now=0.0)
    s.set_reading(False, 10.0)  # e.g. muted, or waiting for pool memory
    assert t.expired(500.0) == []
    s.set_reading(True, 500.0)
    assert s.deadline() == 520.0


# --- framing bounds, backlog and muting -----------------------------------------------


def test_declared_size_is_neither_allocated_nor_charged():
    t = table(max_frame=100 << 20, pool_bytes=200 << 20)
    liars = [admit(t) for _ in range(5)]
    for s in liars:
        s.received(struct.pack(">i", 100 << 20) + b"0123456789", 0.0)
        assert s.framer.buffered == 14 and s.framer.partial_size == 100 << 20
    # Declaring 5 x 100 MB in a 200 MB pool costs 50 bytes and blocks nobody.
    assert t.pool.used == 50 and t.pool.waiting == 0
    other = admit(t)
    assert other.read_allowance() == READ_SIZE


def test_oversized_frame_stops_reading_and_closes():
    t = table(max_frame=1000)
    s = admit(t)
    s.received(struct.pack(">i", 1001) + b"x" * 500, 0.0)
    assert s.framer.buffered == 4 and s.read_allowance() == 0
    with pytest.raises(RemoteProtocolError, match="socket.request.max.bytes=1000"):
        s.next_frame()


def test_backlog_of_whole_frames_stops_reading_until_handled():
    t = table()
    s = admit(t)
    one = frame(b"m" * 100)
    assert feed(s, one * ((BACKLOG_BYTES + READ_SIZE) // len(one) + 10)) != b""  # refused beyond the backlog
    assert not s.wants_read() and BACKLOG_BYTES <= s.framer.complete_bytes < BACKLOG_BYTES + READ_SIZE
    while s.framer.complete_bytes >= BACKLOG_BYTES:
        s.next_frame()
        s.frame_done(0.0)
    assert s.wants_read()


def test_unmuted_into_a_full_pool_waits_for_memory():
    t = table(max_frame=1000, pool_bytes=2000)
    s = admit(t)
    feed(s, struct.pack(">i", 1000) + b"x" * 10)
    s.set_write_blocked(True)
    other = admit(t)
    feed(other, struct.pack(">i", 1000) + b"y" * 990)  # fills the shared part
    assert not s.waiting  # muted, it was not competing for memory
    s.set_write_blocked(False)
    assert s.waiting or s.granted
    assert not s.wants_read() or s.read_allowance() > 0


def test_muted_connection_is_not_read():
    t = table()
    s = admit(t)
    s.set_write_blocked(True)
    assert s.read_allowance() == 0 and not s.wants_read()
    s.set_write_blocked(False)
    assert s.read_allowance() == READ_SIZE


def test_eof_mid_frame_is_an_error_and_eof_at_a_boundary_closes():
    t = table()
    s = admit(t)
    s.received(frame(b"abc") + frame(b"de")[:3], 0.0)
    s.received(b"", 0.0)
    assert not s.wants_read()
    assert s.next_frame() == b"abc"
    with pytest.raises(RemoteProtocolError, match="mid-frame"):
        s.next_frame()
    s2 = admit(t)
    s2.received(b"", 0.0)
    assert s2.next_frame() is CLOSED


# --- the memory pool (queued.max.request.bytes) ---------------------------------------------


def test_pool_full_stops_other_connections_until_memory_is_released():
    t = table(max_frame=1000, pool_bytes=2000)
    hogs = [admit(t) for _ in range(2)]
    assert feed(hogs[0], struct.pack(">i", 1000) + b"h" * 800) == b""
    assert t.pool.used == 800 and not hogs[0].granted  # within the shared part
    # The second fills the shared part: both frames stop being read, then get grants
    # for the rest of their bytes from the headroom, oldest first.
    assert feed(hogs[1], struct.pack(">i", 1000) + b"h" * 800) == b""
    assert t.pool.take_changed() == [hogs[0], hogs[1], hogs[0], hogs[1]]
    assert hogs[0].granted and hogs[1].granted
    assert t.pool.used == 2000 and t.pool.available == 0
    healthy = admit(t)
    request = frame(b"metadata")
    rest = feed(healthy, request)
    assert len(rest) == len(request) - 4  # its size prefix was read, then it waits
    assert healthy.waiting and healthy.read_allowance() == 0 and not healthy.wants_read()
    healthy.set_reading(False, 0.0)  # as the driver does
    # Waiting for memory is the broker's doing: neither idle nor a slow frame.
    assert healthy not in {s for s, _ in t.expired(1e6)}
    t.pool.take_changed()
    hogs[0].close()
    assert t.pool.take_changed() == [healthy] and not healthy.waiting and healthy.wants_read()
    healthy.set_reading(True, 1e6)
    assert feed(healthy, rest) == b""
    assert healthy.next_frame() == b"metadata"
    healthy.frame_done(0.0)
    assert t.pool.used == 1000  # only the other hog's reservation


def test_waiters_are_granted_first_come_first_served():
    t = table(max_frame=1000, pool_bytes=1000)  # no shared part: every frame needs a grant
    hog = admit(t)
    feed(hog, struct.pack(">i", 500) + b"h")
    assert hog.granted and t.pool.used == 500
    big, small = admit(t), admit(t)
    feed(big, struct.pack(">i", 900) + b"b" * 900)
    feed(small, frame(b"s" * 10))
    # small would fit beside the hog, but does not overtake big: a large frame cannot starve.
    assert big.waiting and small.waiting and t.pool.used == 500
    t.pool.take_changed()
    hog.close()
    assert t.pool.take_changed() == [big, small]
    assert t.pool.used == 910


def test_minimal_pool_reads_size_prefix_then_payload_like_kafka():
    t = table(max_frame=1000, pool_bytes=1000)
    s = admit(t)
    assert s.read_allowance() == 4  # no room for bytes of unknown frames
    s.received(struct.pack(">i", 10), 0.0)
    assert s.granted and s.read_allowance() == 10
    s.received(b"0123456789", 0.0)
    assert s.next_frame() == b"0123456789"


def test_unlimited_pool():
    t = table(pool_bytes=None, max_frame=100)
    s = admit(t)
    assert s.read_allowance() == READ_SIZE
    feed(s, frame(b"x" * 100) * 10)
    assert not s.waiting


def _simulate(seed, n_conns, max_frame, pool_bytes, frames_per_conn):
    """Honest clients, random read and handling order, reads sized by the allowance:
    the pool never exceeds its limit, memory held stays within it, and every frame is
    eventually handled (no deadlock)."""
    rng = random.Random(seed)
    t = table(max_frame=max_frame, pool_bytes=pool_bytes)
    conns = []
    for _ in range(n_conns):
        payloads = [bytes([rng.randrange(256)]) * rng.randrange(0, max_frame + 1) for _ in range(frames_per_conn)]
        conns.append([admit(t), b"".join(frame(p) for p in payloads), payloads, []])
    stalled = most_waiting = 0
    while any(len(c[3]) < len(c[2]) for c in conns):
        c = rng.choice(conns)
        state, stream, payloads, got = c
        progressed = False
        if rng.random() < 0.1:
            # The client stops or resumes reading its responses (muted / unmuted).
            state.set_write_blocked(not state.write_blocked and rng.random() < 0.5)
            progressed = True
        elif rng.random() < 0.5 and stream:
            n = min(state.read_allowance(), rng.randrange(1, 3 * max_frame + 2), len(stream))
            if n:
                state.received(stream[:n], 0.0)
                c[1] = stream[n:]
                progressed = True
        elif not state.write_blocked:
            f = state.next_frame()
            if f is not NEED_DATA:
                got.append(f)
                state.frame_done(0.0)
                progressed = True
        t.pool.take_changed()
        # What lets the driver simply pause a transport when wants_read() is False: a
        # connection it reads always has a read allowance (an empty buffer is fatal to a
        # transport, and a larger one would take the pool past its limit).
        for s, *_ in conns:
            assert not s.wants_read() or s.read_allowance() > 0
        pool = t.pool
        most_waiting = max(most_waiting, pool.waiting)
        assert pool.used <= pool_bytes
        # Frames without a grant stay within the shared part: what makes progress certain.
        ungranted = sum(s.framer.partial_bytes - 4 for s, *_ in conns
                        if s.framer.partial_size is not None and not s.granted)
        assert ungranted <= pool_bytes - pool.headroom
        # Payload bytes held (size prefixes are not pooled, as in Kafka) are within what
        # the pool has charged.
        held_payload = sum(
            s.framer.buffered - 4 * (s.framer.frames_received - len(g)) - min(4, s.framer.partial_bytes)
            for s, _, _, g in conns)
        assert held_payload <= pool.used
        stalled = 0 if progressed else stalled + 1
        assert stalled < 10_000, "deadlock: no connection can make progress"
    for state, _, payloads, got in conns:
        assert got == payloads
    assert t.pool.used == 0 and t.pool.waiting == 0
    return most_waiting, t.pool.peak


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 6), st.integers(1, 300), st.integers(0, 3), st.integers(1, 8))
def test_pool_invariants_and_progress(seed, n_conns, max_frame, extra_pool, frames):
    _simulate(seed, n_conns, max_frame, max_frame + extra_pool * max_frame // 2, frames)


@pytest.mark.parametrize("seed", range(3))
def test_pool_invariants_and_progress_many_large_frames(seed):
    most_waiting, peak = _simulate(seed, n_conns=12, max_frame=20_000, pool_bytes=30_000, frames_per_conn=15)
    assert most_waiting >= 3 and peak > 25_000  # the pool was the bottleneck


def test_closing_releases_everything():
    t = table(max_frame=1000, pool_bytes=3000)
    s = admit(t)
    feed(s, frame(b"a" * 500) + frame(b"b" * 500) + struct.pack(">i", 900) + b"c")
    assert s.next_frame() == b"a" * 500  # in flight
    assert t.pool.used == 500 + 500 + 1
    s.close()
    assert t.pool.used == 0 and len(t) == 0
    s.frame_done(1.0)  # the handler finishing after the close changes nothing
    assert t.pool.used == 0
