import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.framing import CLOSED, NEED_DATA, FrameReader, RemoteProtocolError, frame


def test_frames_split_across_arbitrary_chunks():
    payloads = [b"a" * 10, b"", b"xyz" * 1000]
    stream = b"".join(frame(p) for p in payloads)
    r = FrameReader(1 << 20)
    out = []
    for i in range(0, len(stream), 7):
        r.receive_data(stream[i : i + 7])
        while (f := r.next_frame()) is not NEED_DATA:
            out.append(f)
    assert out == payloads
    r.receive_data(b"")
    assert r.next_frame() is CLOSED


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 50))
def test_any_chunking_yields_the_same_frames(payloads, chunk):
    stream = b"".join(frame(p) for p in payloads)
    r = FrameReader(1 << 20)
    out = []
    for i in range(0, len(stream), chunk):
        r.receive_data(stream[i : i + chunk])
        while (f := r.next_frame()) is not NEED_DATA:
            out.append(f)
    assert out == payloads


def test_oversized_frame_is_rejected_before_buffering_it():
    r = FrameReader(100)
    r.receive_data(struct.pack(">i", 101))
    with pytest.raises(RemoteProtocolError, match="socket.request.max.bytes"):
        r.next_frame()


def test_negative_size_is_rejected():
    r = FrameReader(100)
    r.receive_data(struct.pack(">i", -5))
    with pytest.raises(RemoteProtocolError, match="negative"):
        r.next_frame()


def test_eof_mid_frame_is_the_peers_fault():
    r = FrameReader(100)
    r.receive_data(struct.pack(">i", 10) + b"abc")
    assert r.next_frame() is NEED_DATA
    r.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="mid-frame"):
        r.next_frame()


def test_state_reports_whole_frames_and_the_partial_one():
    r = FrameReader(1 << 20)
    assert (r.buffered, r.complete_bytes, r.partial_bytes, r.partial_size, r.frames_received) == (0, 0, 0, None, 0)
    r.receive_data(frame(b"abc") + frame(b"defg") + struct.pack(">i", 1000)[:2])
    assert r.frames_received == 2 and r.complete_bytes == 15 and r.complete_payload == 7
    assert r.partial_bytes == 2 and r.partial_size is None  # size prefix not whole yet
    r.receive_data(struct.pack(">i", 1000)[2:] + b"x" * 10)
    assert r.partial_size == 1000 and r.partial_bytes == 14 and r.buffered == 29
    assert r.next_frame() == b"abc"
    assert r.complete_bytes == 8 and r.complete_payload == 4 and r.buffered == 22


def test_declared_size_is_not_allocated():
    r = FrameReader(100 << 20)
    r.receive_data(struct.pack(">i", 100 << 20) + b"0123456789")
    assert r.buffered == 14 and r.partial_size == 100 << 20
    assert r.next_frame() is NEED_DATA


def test_frames_before_an_oversized_one_are_delivered_and_nothing_after_it_is_kept():
    r = FrameReader(100)
    r.receive_data(frame(b"ok") + struct.pack(">i", 5000) + b"z" * 50)
    assert r.failed and r.buffered == 6 + 4  # the bad frame's payload is not buffered
    r.receive_data(b"z" * 1000)
    assert r.buffered == 10
    assert r.next_frame() == b"ok"
    with pytest.raises(RemoteProtocolError, match="socket.request.max.bytes=100"):
        r.next_frame()


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 50))
def test_state_is_consistent_under_any_chunking(payloads, chunk):
    stream = b"".join(frame(p) for p in payloads)
    r = FrameReader(1 << 20)
    taken = 0
    for i in range(0, len(stream), chunk):
        r.receive_data(stream[i : i + chunk])
        received = min(len(stream), i + chunk)
        assert r.buffered == received - sum(4 + len(p) for p in payloads[:taken])
        assert r.complete_bytes + r.partial_bytes == r.buffered
        whole = sum(1 for n in range(len(payloads)) if sum(4 + len(p) for p in payloads[: n + 1]) <= received)
        assert r.frames_received == whole
        if r.next_frame() is not NEED_DATA:
            taken += 1
