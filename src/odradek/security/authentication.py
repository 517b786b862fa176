"""Authentication of one connection, sans-I/O: what Kafka's SaslServerAuthenticator and
SocketServer decide for each request before and after a client has authenticated.

Theory of operation: a connection on a PLAINTEXT or SSL listener is authenticated from
the start (its principal is User:ANONYMOUS, or the client certificate's subject). On a
SASL listener it moves through `TRANSITIONS`, keyed by (state, what arrived); each entry
gives the next state and the `Admit` decision for the request:

- before authentication a client may send one ApiVersions, then SaslHandshake; anything
  else closes the connection without an answer (Kafka: "Unexpected Kafka request of type
  ... during SASL handshake");
- after a SaslHandshake v1 every token comes in a SaslAuthenticate; another request gets
  ILLEGAL_SASL_STATE in its own response, then the connection closes;
- after a SaslHandshake v0 (legacy) the next frames are raw tokens with no Kafka header;
- a failure (an unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled list; bad
  credentials: SASL_AUTHENTICATION_FAILED) is answered after
  `connection.failed.authentication.delay.ms` and the connection closes;
- once authenticated, requests pass to their handlers. With `connections.max.reauth.ms`
  set (KIP-368), the final SaslAuthenticate tells the client its session lifetime; a
  SaslHandshake after that starts a re-authentication (same mechanism and principal, at
  most one a second), and the first other request after the session expired closes the
  connection without an answer.

The mechanisms' own exchanges are in plain.py and scram.py; `Authenticator` runs them
and words failures as Kafka does (SCRAM's are masked so that whether a user exists does
not leak; PLAIN's are told as they are).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol.errors import (
    NONE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
)
from .plain import PlainError, authenticate_plain
from .scram import MECHANISMS as SCRAM_MECHANISMS
from .scram import ScramCredential, ScramError, ScramServer

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
ANONYMOUS = "User:ANONYMOUS"
MIN_REAUTH_INTERVAL_MS = 1000  # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS



class State(enum.Enum):
    INITIAL = "initial"  # nothing yet: ApiVersions or SaslHandshake
    HANDSHAKE = "handshake"  # after ApiVersions: SaslHandshake only
    AUTHENTICATE = "authenticate"  # after SaslHandshake v1: SaslAuthenticate only
    LEGACY = "legacy"  # after SaslHandshake v0: raw tokens
    COMPLETE = "complete"
    REAUTH = "reauth"  # re-authenticating after SaslHandshake (KIP-368): SaslAuthenticate only
    FAILED = "failed"


# Where an ApiVersions of a version this broker lacks is answered UNSUPPORTED_VERSION
# (KIP-511, so the client retries lower) without moving the state.
ADMITS_API_VERSIONS = frozenset({State.INITIAL, State.COMPLETE})


class Admit(enum.Enum):
    PASS = "pass"  # to its handler
    SASL = "sasl"  # to the SASL handlers, which call this authenticator
    CLOSE = "close"  # close without an answer
    REFUSE = "refuse"  # answer ILLEGAL_SASL_STATE in the request's own response, then close


class Arrived(enum.Enum):
    API_VERSIONS = "api-versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    OTHER = "other"


_ARRIVED = {API_VERSIONS: Arrived.API_VERSIONS, SASL_HANDSHAKE: Arrived.HANDSHAKE,
            SASL_AUTHENTICATE: Arrived.AUTHENTICATE}

# (state, what arrived) -> (next state, decision). Moves made by the exchange itself
# (handshake accepted, tokens, completion, failure) are in the methods below.
TRANSITIONS: dict[tuple[State, Arrived], tuple[State, Admit]] = {
    (State.INITIAL, Arrived.API_VERSIONS): (State.HANDSHAKE, Admit.PASS),
    (State.INITIAL, Arrived.HANDSHAKE): (State.INITIAL, Admit.SASL),
    (State.INITIAL, Arrived.AUTHENTICATE): (State.FAILED, Admit.CLOSE),
    (State.INITIAL, Arrived.OTHER): (State.FAILED, Admit.CLOSE),
    (State.HANDSHAKE, Arrived.API_VERSIONS): (State.FAILED, Admit.CLOSE),  # a second ApiVersions
    (State.HANDSHAKE, Arrived.HANDSHAKE): (State.HANDSHAKE, Admit.SASL),
    (State.HANDSHAKE, Arrived.AUTHENTICATE): (State.FAILED, Admit.CLOSE),
    (State.HANDSHAKE, Arrived.OTHER): (State.FAILED, Admit.CLOSE),
    (State.AUTHENTICATE, Arrived.AUTHENTICATE): (State.AUTHENTICATE, Admit.SASL),
    (State.AUTHENTICATE, Arrived.API_VERSIONS): (State.FAILED, Admit.REFUSE),
    (State.AUTHENTICATE, Arrived.HANDSHAKE): (State.FAILED, Admit.REFUSE),
    (State.AUTHENTICATE, Arrived.OTHER): (State.FAILED, Admit.REFUSE),
    (State.REAUTH, Arrived.AUTHENTICATE): (State.REAUTH, Admit.SASL),
    (State.REAUTH, Arrived.API_VERSIONS): (State.FAILED, Admit.REFUSE),
    (State.REAUTH, Arrived.HANDSHAKE): (State.FAILED, Admit.REFUSE),
    (State.REAUTH, Arrived.OTHER): (State.FAILED, Admit.REFUSE),
    (State.COMPLETE, Arrived.API_VERSIONS): (State.COMPLETE, Admit.PASS),
    (State.COMPLETE, Arrived.AUTHENTICATE): (State.COMPLETE, Admit.PASS),  # its handler answers ILLEGAL_SASL_STATE
    (State.COMPLETE, Arrived.OTHER): (State.COMPLETE, Admit.PASS),
    # (COMPLETE, HANDSHAKE) depends on the session: see admit().
    (State.FAILED, Arrived.API_VERSIONS): (State.FAILED, Admit.CLOSE),
    (State.FAILED, Arrived.HANDSHAKE): (State.FAILED, Admit.CLOSE),
    (State.FAILED, Arrived.AUTHENTICATE): (State.FAILED, Admit.CLOSE),
    (State.FAILED, Arrived.OTHER): (State.FAILED, Admit.CLOSE),
}


@dataclass
class SaslConfig:
    mechanisms: tuple[str, ...]  # sasl.enabled.mechanisms of the listener
    plain_users: dict[str, str] = field(default_factory=dict)  # from the PLAIN JAAS entry
    scram: Callable[[str, str], ScramCredential | None] = lambda user, mechanism: None
    reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions never expire)
    failure_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    nonce: Callable[[], str] | None = None  # SCRAM's server nonce (injected in tests)


DEFAULT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SUPPORTED_MECHANISMS = frozenset(DEFAULT_MECHANISMS)


def sasl_config(props, listener, scram: Callable[[str, str], ScramCredential | None]) -> SaslConfig:
    """A SASL listener's settings, with Kafka's keys (each may be prefixed
    `listener.name.<name>.`; the JAAS entry and re-authentication time by the mechanism
    too). Kafka's default mechanism list is GSSAPI, which odradek does not have: unset, it
    is PLAIN when a PLAIN JAAS entry is configured, and the SCRAM mechanisms."""
    from .listeners import listener_setting
    from .plain import plain_users

    def get(key, default=None):
        return listener_setting(props, listener, key, default)

    jaas = get("plain.sasl.jaas.config")
    given = get("sasl.enabled.mechanisms")
    if given:
        mechanisms = tuple(m.strip().upper() for m in given.split(",") if m.strip())
        unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"sasl.enabled.mechanisms {', '.join(unknown)}: odradek supports "
                             f"{', '.join(DEFAULT_MECHANISMS)}")
    else:
        mechanisms = tuple(m for m in DEFAULT_MECHANISMS if m != "PLAIN" or jaas)
    if "PLAIN" in mechanisms and not jaas:
        raise ValueError("SASL/PLAIN needs its users: set listener.name.<listener>.plain.sasl.jaas.config (or "
                         "plain.sasl.jaas.config) to a PlainLoginModule entry with user_<name>=\"<password>\"")
    reauth = int(get("connections.max.reauth.ms", "0") or 0)
    return SaslConfig(mechanisms, plain_users(jaas) if jaas else {}, scram, max(reauth, 0),
                      int(props.get("connection.failed.authentication.delay.ms", "100")))


@dataclass
class HandshakeAnswer:
    error_code: int
    mechanisms: list[str]
    close: bool = False  # close once answered (after the failure delay)


@dataclass
class TokenAnswer:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0
    close: bool = False


class Authenticator:
    def __init__(self, sasl: SaslConfig | None, principal: str | None = None) -> None:
        self.sasl = sasl
        self.state = State.INITIAL if sasl is not None else State.COMPLETE
        self.principal: str | None = None if sasl is not None else (principal or ANONYMOUS)
        self.mechanism: str | None = None
        self.expires_at_ms: int | None = None  # session expiry (KIP-368), when re-authentication is on
        self._reauth_started_ms: int | None = None
        self._exchange: ScramServer | None = None
        self._reauth_mechanism_ok = True

    @property
    def authenticated(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def legacy(self) -> bool:
        """The next frame is a raw SASL token (after SaslHandshake v0), not a request."""
        return self.state is State.LEGACY

    def _move(self, arrived: Arrived) -> Admit:
        entry = TRANSITIONS.get((self.state, arrived))
        assert entry is not None, f"authentication: no move for {arrived.value} in {self.state.value}"
        self.state, admit = entry
        return admit

    def admit(self, api_key: int, now_ms: int) -> Admit:
        """What to do with a request that arrived (its header parsed)."""
        arrived = _ARRIVED.get(api_key, Arrived.OTHER)
        if self.state is State.COMPLETE:
            if arrived is Arrived.HANDSHAKE and self._may_reauthenticate(now_ms):
                self._reauth_started_ms = now_ms
                self.state = State.REAUTH
                return Admit.SASL
            if self.expires_at_ms is not None and now_ms >= self.expires_at_ms:
                # Kafka's SocketServer: "Disconnecting expired channel", no answer.
                self.state = State.FAILED
                return Admit.CLOSE
            if arrived is Arrived.HANDSHAKE:
                return Admit.PASS  # its handler answers ILLEGAL_SASL_STATE; the connection stays
        return self._move(arrived)

    def _may_reauthenticate(self, now_ms: int) -> bool:
        if self.expires_at_ms is None:
            return False
        return self._reauth_started_ms is None or now_ms - self._reauth_started_ms >= MIN_REAUTH_INTERVAL_MS

    # --- the exchange ----------------------------------------------------------------------

    def handshake(self, version: int, mechanism: str) -> HandshakeAnswer:
        assert self.sasl is not None and self.state in (State.INITIAL, State.HANDSHAKE, State.REAUTH)
        enabled = list(self.sasl.mechanisms)
        if mechanism not in enabled:
            self.state = State.FAILED
            return HandshakeAnswer(UNSUPPORTED_SASL_MECHANISM, enabled, close=True)
        if self.state is State.REAUTH:
            # Kafka answers the handshake, then fails the first token of another mechanism.
            self._reauth_mechanism_ok = mechanism == self.mechanism
        else:
            self.mechanism = mechanism
            self.state = State.LEGACY if version == 0 else State.AUTHENTICATE
        self._exchange = None
        return HandshakeAnswer(NONE, enabled)

    def token(self, auth_bytes: bytes, now_ms: int) -> TokenAnswer:
        """One SASL token (from SaslAuthenticate, or a raw legacy frame)."""
        assert self.sasl is not None and self.state in (State.AUTHENTICATE, State.LEGACY, State.REAUTH)
        reauth = self.state is State.REAUTH
        if reauth and not self._reauth_mechanism_ok:
            return self._fail(f"SASL mechanism '{self.mechanism}' requested by client is not supported for "
                              "re-authentication")
        mechanism = self.mechanism
        try:
            if mechanism == "PLAIN":
                user, reply = authenticate_plain(auth_bytes, self.sasl.plain_users), b""
            elif mechanism in SCRAM_MECHANISMS:
                if self._exchange is None:
                    kw = {"nonce": self.sasl.nonce} if self.sasl.nonce is not None else {}
                    self._exchange = ScramServer(mechanism, self.sasl.scram, **kw)
                reply = self._exchange.step(auth_bytes)
                if not self._exchange.complete:
                    return TokenAnswer(NONE, None, reply)
                user = self._exchange.username
            else:  # pragma: no cover - handshake() admits only the mechanisms above
                raise AssertionError(mechanism)
        except PlainError as exc:
            return self._fail(str(exc))
        except ScramError as exc:
            log.info("SCRAM authentication of a %s client failed: %s", mechanism, exc)  # the client sees less
            if "authorization id" in str(exc):
                return self._fail(str(exc))  # Kafka's SaslAuthenticationException: told as it is
            return self._fail(f"Authentication failed during {'re-' if reauth else ''}authentication due to invalid "
                              f"credentials with SASL mechanism {mechanism}")
        principal = f"User:{user}"
        if reauth and principal != self.principal:
            return self._fail(f"Cannot change principals during re-authentication from {self.principal}: "
                              f"{principal}")
        self.principal = principal
        self.state = State.COMPLETE
        self._exchange = None
        lifetime = 0
        if self.sasl.reauth_ms > 0:
            lifetime = self.sasl.reauth_ms
            self.expires_at_ms = now_ms + lifetime
        return TokenAnswer(NONE, None, reply, lifetime)

    def _fail(self, message: str) -> TokenAnswer:
        self.state = State.FAILED
        self._exchange = None
        return TokenAnswer(SASL_AUTHENTICATION_FAILED, message, b"", close=True)


@dataclass
class Session:
    """One client connection as the broker's handlers see it: the listener it came in on
    and its authentication (None on a PLAINTEXT listener: User:ANONYMOUS, nothing to do)."""

    listener: str = "PLAINTEXT"
    auth: Authenticator | None = None

    @property
    def principal(self) -> str:
        return ANONYMOUS if self.auth is None else (self.auth.principal or ANONYMOUS)


__all__ = ["ANONYMOUS", "Session", "sasl_config", "Admit", "Authenticator", "HandshakeAnswer", "SaslConfig", "State", "TRANSITIONS",
           "TokenAnswer"]
