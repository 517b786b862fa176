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
