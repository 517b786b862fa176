"""SaslHandshake v0-1 and SaslAuthenticate v0-2: the broker's side of a connection's
SASL exchange, which security/authentication.py decides.

Before authentication the connection's Authenticator admitted the request (broker.py);
these handlers carry it out. A failure is answered after
connection.failed.authentication.delay.ms and the connection closes (Kafka's
SaslServerAuthenticator). On a connection that is authenticated (or needs no
authentication: PLAINTEXT, SSL), Kafka's KafkaApis answers both with ILLEGAL_SASL_STATE
and keeps the connection.
"""

from __future__ import annotations

from ...protocol.errors import ILLEGAL_SASL_STATE
from ...protocol.messages import encode_response
from ...security.authentication import State
from ..errors import CloseConnection
from ..registry import api

_IN_EXCHANGE = {State.INITIAL, State.HANDSHAKE, State.AUTHENTICATE, State.REAUTH}


def _exchange(request):
    session = request.session
    auth = session.auth if session is not None else None
    return auth if auth is not None and auth.state in _IN_EXCHANGE else None


def _count(broker, request, auth, failed: bool) -> None:
    """Kafka's failed-authentication-total / successful-authentication-total, per listener
    and mechanism (observability/collector.py)."""
    stats = broker.stats
    if stats is not None:
        key = (request.session.listener, auth.mechanism or request.field("mechanism", "") or "")
        (stats.auth_failed if failed else stats.auth_succeeded)[key] += 1


def _fail(request, response: dict, reason: str, auth):
    request.result = response  # answered, then closed: its error code is counted too (observability/stats.py)
    delay = auth.sasl.failure_delay_ms / 1000 if auth.sasl is not None else 0.0
    raise CloseConnection(reason, encode_response(request, response), delay)


@api(17, "SaslHandshake", 0, 1)
def sasl_handshake(broker, request):
    auth = _exchange(request)
    if auth is None:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
    answer = auth.handshake(request.api_version, request.body.mechanism)
    response = {"error_code": answer.error_code, "mechanisms": answer.mechanisms}
    if answer.close:
        _count(broker, request, auth, True)
        _fail(request, response, f"unsupported SASL mechanism {request.body.mechanism!r}", auth)
    return response


@api(36, "SaslAuthenticate", 0, 2)
def sasl_authenticate(broker, request):
    auth = _exchange(request)
    if auth is None:
        return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0,
                "error_message": "SaslAuthenticate request received after successful authentication"}
    answer = auth.token(bytes(request.body.auth_bytes), broker.clock())
    response = {"error_code": answer.error_code, "error_message": answer.error_message,
                "auth_bytes": answer.auth_bytes, "session_lifetime": answer.session_lifetime_ms}
    if auth.authenticated:
        _count(broker, request, auth, False)
    if answer.close:
        _count(broker, request, auth, True)
        _fail(request, response, f"SASL authentication failed: {answer.error_message}", auth)
    return response
