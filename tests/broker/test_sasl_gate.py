"""Nothing from a client reaches a handler before it authenticated: the broker's frame path
on a SASL listener's connection, fuzzed (hypothesis) with every API and garbage."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.broker.errors import CloseConnection
from odradek.broker.registry import supported_versions
from odradek.security.authentication import Authenticator, SaslConfig, Session
from odradek.security.plain import plain_message
from tests.broker.test_versions import _bodies
from tests.wire import parse_response, request_frame

PRE_AUTH = {17, 18, 36}  # SaslHandshake, ApiVersions, SaslAuthenticate
APIS = sorted(supported_versions())


def _session():
    return Session("SASL_PLAINTEXT", Authenticator(SaslConfig(("PLAIN",), {"alice": "alice-pw"})))


def _drive(inproc, session, frames):
    """Feed frames until the connection closes; the api keys that reached handlers."""
    reached = []
    real = inproc.broker.handle_request

    async def spy(request):
        reached.append((request.api_key, session.auth.authenticated))
        return await real(request)

    inproc.broker.handle_request = spy
    try:
        for frame in frames:
            try:
                inproc.loop.run_until_complete(asyncio.wait_for(inproc.broker.handle_frame(frame, "", session), 5))
            except CloseConnection:
                break
    finally:
        inproc.broker.handle_request = real
    return reached


def _frame(api_key: int, body: dict | None = None, version: int | None = None) -> bytes:
    lo, hi = supported_versions()[api_key]
    return request_frame(api_key, hi if version is None else version, body or {}, correlation_id=5)[4:]


METADATA = _frame(3, {"topics": None, "allow_auto_topic_creation": True, "include_cluster_authorized_operations": False,
                      "include_topic_authorized_operations": False}, 12)


def test_metadata_before_authentication_closes_unanswered(inproc):
    session = _session()
    assert _drive(inproc, session, [METADATA]) == []
    assert not session.auth.authenticated


def test_the_whole_exchange_then_requests_reach_handlers(inproc):
    session = _session()
    frames = [_frame(18, {"client_software_name": "t", "client_software_version": "1"}, 3),
              _frame(17, {"mechanism": "PLAIN"}, 1), _frame(36, {"auth_bytes": plain_message("alice", "alice-pw")}, 2),
              METADATA]
    reached = _drive(inproc, session, frames)
    assert [k for k, _ in reached] == [18, 17, 36, 3]
    assert reached[-1] == (3, True) and session.principal == "User:alice"


def test_a_failed_authentication_is_answered_then_closed(inproc):
    session = _session()
    inproc.loop.run_until_complete(inproc.broker.handle_frame(_frame(17, {"mechanism": "PLAIN"}, 1), "", session))
    with pytest.raises(CloseConnection) as info:
        inproc.loop.run_until_complete(inproc.broker.handle_frame(
            _frame(36, {"auth_bytes": plain_message("alice", "nope")}, 2), "", session))
    assert info.value.delay_s == pytest.approx(0.1)  # connection.failed.authentication.delay.ms
    _cid, resp = parse_response(36, 2, info.value.response)
    assert int(resp.error_code) == 58 and "Invalid username or password" in resp.error_message
    assert _drive(inproc, session, [METADATA]) == []


def test_legacy_handshake_v0_raw_tokens(inproc):
    session = _session()
    inproc.loop.run_until_complete(inproc.broker.handle_frame(_frame(17, {"mechanism": "PLAIN"}, 0), "", session))
    assert session.auth.legacy
    answer = inproc.loop.run_until_complete(
        inproc.broker.handle_frame(plain_message("alice", "alice-pw"), "", session))
    assert answer == b"\x00\x00\x00\x00"  # PLAIN's empty final token, size-prefixed, no header
    assert session.auth.authenticated


def _any_request(api_key: int) -> bytes:
    """A well-formed request of `api_key` at its highest version (test_versions' bodies);
    SaslAuthenticate with a wrong password."""
    member = (1, 0) if api_key in (24, 25, 26, 27, 28) else ("m", 1)  # (producer id, epoch) or (member, generation)
    body = _bodies(uuid.UUID(int=1), supported_versions()[api_key][1], member)[api_key]
    if api_key == 36:
        body = {"auth_bytes": b"\x00alice\x00guess"}
    return _frame(api_key, body)


frames = st.one_of(st.sampled_from(APIS).map(_any_request), st.binary(min_size=0, max_size=64))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(frames, min_size=1, max_size=8))
def test_fuzz_nothing_but_the_sasl_apis_before_authentication(inproc, sequence):
    session = _session()
    reached = _drive(inproc, session, sequence)
    assert all(key in PRE_AUTH for key, authed in reached if not authed), reached
    assert not session.auth.authenticated  # no frame here carries the right password
