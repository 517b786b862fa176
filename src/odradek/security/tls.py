"""TLS for SSL and SASL_SSL listeners with Python's ssl module, configured with Kafka's keys.

Keystore (this broker's key and certificate chain), as Kafka reads it (KIP-651 PEM):
- `ssl.keystore.location`: a PEM file holding the private key and the chain
  (`ssl.keystore.type=PEM`), or a PKCS#12 file (`ssl.keystore.type=PKCS12`, with
  `ssl.keystore.password`); Kafka's default type JKS is a Java format odradek cannot read,
  so a PEM file is taken whatever the type says and a JKS file is refused with a message;
- or inline: `ssl.keystore.certificate.chain` and `ssl.keystore.key` (PEM text);
- `ssl.key.password`: the password of an encrypted PEM key.
Truststore (who may present a client certificate): `ssl.truststore.location` (PEM or
PKCS#12) or inline `ssl.truststore.certificates`.

`ssl.client.auth`: none (default), requested (a certificate is asked for and checked when
given) or required. `ssl.enabled.protocols` may narrow TLSv1.2,TLSv1.3. Every key may be
set per listener as `listener.name.<name>.<key>`.

The principal of an SSL connection is "User:" + the client certificate's subject in RFC
2253 form (Kafka's DefaultKafkaPrincipalBuilder without ssl.principal.mapping.rules), or
User:ANONYMOUS without one; on SASL_SSL it is the SASL user.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .authentication import ANONYMOUS
from .certs import subject_rfc2253
from .listeners import Listener, listener_setting

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    pass


def _pem_from_pkcs12(data: bytes, password: str | None, with_key: bool) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    out = b""
    if with_key and key is not None:
        out += key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    for c in ([cert] if cert is not None else []) + list(extra or []):
        out += c.public_bytes(serialization.Encoding.PEM)
    return out


def _read_store(get, prefix: str, with_key: bool) -> tuple[bytes | None, str | None]:
    """(PEM bytes, the key's password) of a keystore or truststore, or (None, None)."""
    location = get(f"ssl.{prefix}.location")
    if not location:
        return None, None
    try:
        data = Path(location).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"ssl.{prefix}.location {location}: {exc.strerror}") from None
    kind = (get(f"ssl.{prefix}.type") or "").upper()
    if b"-----BEGIN" in data:
        return data, get("ssl.key.password")
    if kind == "PKCS12" or location.endswith((".p12", ".pfx")):
        try:
            return _pem_from_pkcs12(data, get(f"ssl.{prefix}.password"), with_key), None
        except ValueError as exc:
            raise TlsConfigError(f"ssl.{prefix}.location {location}: cannot read PKCS#12: {exc}") from None
    raise TlsConfigError(f"ssl.{prefix}.location {location}: odradek reads PEM (ssl.{prefix}.type=PEM) and PKCS12 "
                         "stores; convert a JKS store with keytool -importkeystore -deststoretype PKCS12")


def server_context(props: Mapping[str, str], listener: Listener | None = None) -> ssl.SSLContext:
    def get(key: str, default: str | None = None) -> str | None:
        return listener_setting(props, listener, key, default)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v.strip() for v in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if v.strip()]
    known = [_VERSIONS[v] for v in versions if v in _VERSIONS]
    if not known:
        raise TlsConfigError(f"ssl.enabled.protocols {versions}: odradek speaks TLSv1.2 and TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = min(known), max(known)

    keystore, password = _read_store(get, "keystore", with_key=True)
    if keystore is None:
        chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
        if not chain or not key:
            name = listener.name if listener else "this"
            raise TlsConfigError(f"the {name} listener needs ssl.keystore.location (a PEM file with the key and "
                                 "certificate chain) or ssl.keystore.certificate.chain and ssl.keystore.key")
        keystore, password = (key.strip() + "\n" + chain.strip() + "\n").encode(), get("ssl.key.password")
    _load_chain(ctx, keystore, password)

    mode = (get("ssl.client.auth") or "none").strip().lower()
    if listener is not None and listener.sasl and listener.prefix() + "ssl.client.auth" not in props:
        mode = "none"  # Kafka (ChannelBuilders.create): on SASL_SSL only the listener's own setting counts
    if mode not in _CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth {mode!r}: expected none, requested or required")
    if mode != "none":
        trust, _ = _read_store(get, "truststore", with_key=False)
        if trust is None and get("ssl.truststore.certificates"):
            trust = get("ssl.truststore.certificates").encode()
        if trust is None:
            raise TlsConfigError(f"ssl.client.auth={mode} needs ssl.truststore.location or "
                                 "ssl.truststore.certificates (the CA of the clients' certificates)")
        ctx.load_verify_locations(cadata=trust.decode())
        ctx.verify_mode = _CLIENT_AUTH[mode]
    return ctx


def _load_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None) -> None:
    # SSLContext reads a key and chain from files only: a private temporary file, removed at once.
    fd, path = tempfile.mkstemp(prefix="odradek-keystore-", suffix=".pem")
    try:
        os.write(fd, pem)
        os.close(fd)
        ctx.load_cert_chain(path, password=password)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot load the keystore (key and certificate chain): {exc.reason or exc}") from None
    finally:
        os.unlink(path)


def peer_principal(ssl_object) -> str:
    """User:<subject> of the client's certificate, or User:ANONYMOUS."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return f"User:{subject_rfc2253(der)}" if der else ANONYMOUS


__all__ = ["TlsConfigError", "peer_principal", "server_context"]
