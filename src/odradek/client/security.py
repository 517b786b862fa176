"""The client's side of TLS and SASL, configured with Kafka's client property names.

`ClientSecurity.from_properties({...})` reads what librdkafka and the Java client read:
- `security.protocol`: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
- TLS: `ssl.ca.location` (librdkafka) or `ssl.truststore.location` (a PEM file, Java's
  PEM truststore), `ssl.certificate.location` + `ssl.key.location` (librdkafka) or
  `ssl.keystore.location` (one PEM file with key and chain), `ssl.key.password`,
  `enable.ssl.certificate.verification` (default true) and
  `ssl.endpoint.identification.algorithm` (https, the default since librdkafka 2.0 and
  Kafka 2.0, checks the broker's host name; none does not);
- SASL: `sasl.mechanism` (Java) or `sasl.mechanisms` (librdkafka): PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512; `sasl.username` and `sasl.password` (librdkafka), or
  `sasl.jaas.config` with username and password options (Java).

A connection authenticates right after ApiVersions (sasl_exchange): SaslHandshake v1,
then SaslAuthenticate rounds; a failure is a KafkaError with the broker's message, not
retried. KIP-368: when the broker gives a session lifetime, the connection is replaced
at 90% of it (librdkafka re-authenticates at 90% too, in place).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from ..security.listeners import PROTOCOLS, uses_sasl, uses_tls
from ..security.plain import parse_jaas, plain_message
from ..security.scram import MECHANISMS as SCRAM_MECHANISMS
from ..security.scram import ScramClient, ScramError

MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


class SecurityConfigError(ValueError):
    pass


@dataclass
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return uses_tls(self.protocol)

    @property
    def sasl(self) -> bool:
        return uses_sasl(self.protocol)

    @classmethod
    def from_properties(cls, props: Mapping[str, str] | None) -> ClientSecurity:
        props = {k: str(v) for k, v in (props or {}).items()}
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        out = cls(protocol)
        if out.tls:
            out.ssl_context, out.check_hostname = _context(props)
        if out.sasl:
            mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "PLAIN").upper()
            if mechanism not in MECHANISMS:
                raise SecurityConfigError(f"sasl.mechanism {mechanism!r}: odradek's client speaks "
                                          f"{', '.join(MECHANISMS)}")
            user, password = props.get("sasl.username"), props.get("sasl.password")
            if user is None and "sasl.jaas.config" in props:
                options = parse_jaas(props["sasl.jaas.config"])[0].options
                user, password = options.get("username"), options.get("password")
            if not user or password is None:
                raise SecurityConfigError(f"SASL/{mechanism} needs sasl.username and sasl.password "
                                          "(or sasl.jaas.config with username and password)")
            out.mechanism, out.username, out.password = mechanism, user, password
        return out

    def exchange(self) -> SaslExchange:
        return SaslExchange(self.mechanism, self.username, self.password)


def _context(props: Mapping[str, str]) -> tuple[ssl.SSLContext, bool]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ca = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
    try:
        if ca:
            ctx.load_verify_locations(cafile=ca)
        elif props.get("ssl.truststore.certificates"):
            ctx.load_verify_locations(cadata=props["ssl.truststore.certificates"])
        else:
            ctx.load_default_certs()
        cert = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
        if cert:
            ctx.load_cert_chain(cert, props.get("ssl.key.location"), password=props.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"TLS settings: {exc}") from None
    verify = props.get("enable.ssl.certificate.verification", "true").lower() != "false"
    check_hostname = verify and props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
    ctx.check_hostname = check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    return ctx, check_hostname


class SaslExchange:
    """One client authentication: `first()` then `step(server bytes)` until `done`."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.done = False
        self._plain = plain_message(username, password) if mechanism == "PLAIN" else None
        self._scram = ScramClient(mechanism, username, password) if mechanism in SCRAM_MECHANISMS else None
        self._round = 0

    def first(self) -> bytes:
        if self._plain is not None:
            return self._plain
        return self._scram.first_message()

    def step(self, server: bytes) -> bytes | None:
        """The next token to send, or None when the exchange is complete."""
        self._round += 1
        if self._plain is not None:
            self.done = True
            return None
        try:
            if self._round == 1:
                return self._scram.final_message(server)
            self._scram.verify(server)
        except ScramError as exc:
            raise SecurityConfigError(f"SASL/{self.mechanism}: {exc}") from None
        self.done = True
        return None


__all__ = ["ClientSecurity", "SaslExchange", "SecurityConfigError"]
