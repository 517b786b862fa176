"""One connection's authentication, request by request (Kafka's SaslServerAuthenticator)."""

from __future__ import annotations

import itertools

import pytest

from odradek.security.authentication import (
    ANONYMOUS,
    TRANSITIONS,
    Admit,
    Authenticator,
    SaslConfig,
    State,
)
from odradek.security.plain import plain_message
from odradek.security.scram import ScramClient, new_credential

API_VERSIONS, HANDSHAKE, AUTHENTICATE, METADATA, PRODUCE = 18, 17, 36, 3, 0
CREDS = {("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "alice-pw"),
         ("alice", "SCRAM-SHA-512"): new_credential("SCRAM-SHA-512", "alice-pw"),
         ("bob", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "bob-pw")}


def config(**kw):
    defaults = dict(mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                    plain_users={"alice": "alice-pw", "bob": "bob-pw"}, scram=lambda u, m: CREDS.get((u, m)))
    defaults.update(kw)
    return SaslConfig(**defaults)


def plain_login(auth, user="alice", password="alice-pw", now=0, version=1):
    assert auth.admit(HANDSHAKE, now) is Admit.SASL
    assert auth.handshake(version, "PLAIN").error_code == 0
    if version:
        assert auth.admit(AUTHENTICATE, now) is Admit.SASL
    return auth.token(plain_message(user, password), now)


def test_plaintext_and_ssl_connections_are_authenticated_from_the_start():
    assert Authenticator(None).principal == ANONYMOUS
    auth = Authenticator(None, principal="User:CN=alice,O=acme")
    assert auth.authenticated and auth.principal == "User:CN=alice,O=acme"
    assert auth.admit(METADATA, 0) is Admit.PASS


def test_api_versions_then_plain():
    auth = Authenticator(config())
    assert auth.admit(API_VERSIONS, 0) is Admit.PASS
    answer = plain_login(auth)
    assert (answer.error_code, answer.auth_bytes, answer.session_lifetime_ms) == (0, b"", 0)
    assert auth.authenticated and auth.principal == "User:alice"
    assert auth.admit(METADATA, 0) is Admit.PASS


@pytest.mark.parametrize("api", [METADATA, PRODUCE, AUTHENTICATE])
def test_nothing_but_api_versions_and_handshake_before_authenticating(api):
    auth = Authenticator(config())
    assert auth.admit(api, 0) is Admit.CLOSE
    assert auth.state is State.FAILED and auth.principal is None
    auth = Authenticator(config())
    auth.admit(API_VERSIONS, 0)
    assert auth.admit(api, 0) is Admit.CLOSE


def test_a_second_api_versions_closes():
    auth = Authenticator(config())
    auth.admit(API_VERSIONS, 0)
    assert auth.admit(API_VERSIONS, 0) is Admit.CLOSE


def test_after_handshake_v1_other_requests_are_refused_with_illegal_sasl_state():
    auth = Authenticator(config())
    auth.admit(HANDSHAKE, 0)
    auth.handshake(1, "PLAIN")
    assert auth.admit(METADATA, 0) is Admit.REFUSE
    assert auth.state is State.FAILED


def test_unknown_mechanism_lists_the_enabled_ones_and_closes():
    auth = Authenticator(config(mechanisms=("SCRAM-SHA-512",)))
    auth.admit(HANDSHAKE, 0)
    answer = auth.handshake(1, "PLAIN")
    assert (answer.error_code, answer.mechanisms, answer.close) == (33, ["SCRAM-SHA-512"], True)
    assert auth.admit(AUTHENTICATE, 0) is Admit.CLOSE


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "x")])
def test_plain_failure_is_told_verbatim_and_closes(user, password):
    auth = Authenticator(config())
    answer = plain_login(auth, user, password)
    assert (answer.error_code, answer.close) == (58, True)
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert not auth.authenticated and auth.principal is None
    assert auth.admit(METADATA, 0) is Admit.CLOSE


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange(mechanism):
    auth = Authenticator(config())
    auth.admit(HANDSHAKE, 0)
    auth.handshake(1, mechanism)
    client = ScramClient(mechanism, "alice", "alice-pw")
    auth.admit(AUTHENTICATE, 0)
    first = auth.token(client.first_message(), 0)
    assert first.error_code == 0 and not auth.authenticated
    auth.admit(AUTHENTICATE, 0)
    final = auth.token(client.final_message(first.auth_bytes), 0)
    client.verify(final.auth_bytes)
    assert auth.authenticated and auth.principal == "User:alice"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "x")])
def test_scram_failures_are_masked_so_users_do_not_leak(user, password):
    auth = Authenticator(config())
    auth.admit(HANDSHAKE, 0)
    auth.handshake(1, "SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", user, password)
    answer = auth.token(client.first_message(), 0)
    if answer.error_code == 0:
        answer = auth.token(client.final_message(answer.auth_bytes), 0)
    assert answer.error_code == 58 and answer.close
    assert answer.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                    "SASL mechanism SCRAM-SHA-256")


def test_legacy_handshake_v0_takes_raw_tokens():
    auth = Authenticator(config())
    auth.admit(HANDSHAKE, 0)
    auth.handshake(0, "PLAIN")
    assert auth.legacy
    assert auth.token(plain_message("bob", "bob-pw"), 0).error_code == 0
    assert auth.principal == "User:bob" and not auth.legacy


def test_after_authentication_sasl_requests_reach_their_handlers():
    auth = Authenticator(config())
    plain_login(auth)
    # No re-authentication configured: SaslHandshake and SaslAuthenticate are answered
    # ILLEGAL_SASL_STATE by their handlers and the connection stays.
    assert auth.admit(HANDSHAKE, 0) is Admit.PASS
    assert auth.admit(AUTHENTICATE, 0) is Admit.PASS
    assert auth.authenticated


def test_session_lifetime_and_expiry_with_connections_max_reauth_ms():
    auth = Authenticator(config(reauth_ms=10_000))
    answer = plain_login(auth, now=1_000)
    assert answer.session_lifetime_ms == 10_000
    assert auth.admit(METADATA, 10_999) is Admit.PASS
    # The first request after the session expired closes the connection unanswered.
    assert auth.admit(METADATA, 11_000) is Admit.CLOSE


def test_reauthentication_renews_the_session():
    auth = Authenticator(config(reauth_ms=10_000))
    plain_login(auth, now=0)
    answer = plain_login(auth, now=9_000)  # a client re-authenticates at 90% (librdkafka)
    assert answer.error_code == 0 and answer.session_lifetime_ms == 10_000
    assert auth.admit(METADATA, 15_000) is Admit.PASS
    # A handshake after expiry still starts a re-authentication (Kafka checks it first).
    assert plain_login(auth, now=30_000).error_code == 0


def test_reauthentication_at_most_once_a_second():
    auth = Authenticator(config(reauth_ms=10_000))
    plain_login(auth, now=0)
    plain_login(auth, now=5_000)
    assert auth.admit(HANDSHAKE, 5_500) is Admit.PASS  # its handler answers ILLEGAL_SASL_STATE


def test_reauthentication_may_not_change_the_principal():
    auth = Authenticator(config(reauth_ms=10_000))
    plain_login(auth, now=0)
    answer = plain_login(auth, "bob", "bob-pw", now=5_000)
    assert answer.error_code == 58 and answer.close
    assert "Cannot change principals during re-authentication from User:alice: User:bob" == answer.error_message


def test_reauthentication_may_not_change_the_mechanism():
    auth = Authenticator(config(reauth_ms=10_000))
    plain_login(auth, now=0)
    assert auth.admit(HANDSHAKE, 5_000) is Admit.SASL
    assert auth.handshake(1, "SCRAM-SHA-256").error_code == 0  # answered, then the token fails
    auth.admit(AUTHENTICATE, 5_000)
    answer = auth.token(ScramClient("SCRAM-SHA-256", "alice", "alice-pw").first_message(), 5_000)
    assert answer.error_code == 58 and answer.close


def test_during_reauthentication_other_requests_are_refused():
    auth = Authenticator(config(reauth_ms=10_000))
    plain_login(auth, now=0)
    auth.admit(HANDSHAKE, 5_000)
    auth.handshake(1, "PLAIN")
    assert auth.admit(METADATA, 5_000) is Admit.REFUSE


def test_every_state_and_request_kind_has_a_decision():
    # Transitions as data: an input with no entry would be a bug (COMPLETE+handshake and
    # LEGACY are decided in code: legacy frames are not requests).
    arrivals = {a for _s, a in TRANSITIONS}
    for state, arrived in itertools.product(State, arrivals):
        if state is State.LEGACY or (state is State.COMPLETE and arrived.value == "handshake"):
            continue
        assert (state, arrived) in TRANSITIONS, (state, arrived)
