"""TLS settings with Kafka's keys (PEM, PKCS#12, inline), client authentication, and the
principal of an SSL connection, over in-memory TLS (no sockets)."""

from __future__ import annotations

import ssl

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from odradek.security.certs import CertificateAuthority
from odradek.security.listeners import parse_listeners
from odradek.security.tls import TlsConfigError, peer_principal, server_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    (d / "ca.pem").write_bytes(ca.cert_pem)
    server = ca.issue("CN=localhost", ["localhost", "127.0.0.1"])
    server.write(d, "broker")
    server.write(d / "enc", "broker", password="key-pw")
    client = ca.issue("CN=alice,OU=eng,O=acme", client=True)
    client.write(d, "alice")
    CertificateAuthority("CN=other CA").issue("CN=mallory", client=True).write(d, "mallory")
    return d, ca, server


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext):
    """A TLS handshake between two in-memory ends; the server's SSLObject."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, end in (("c", client), ("s", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server's verdict on the client certificate arrives after.
            client.write(b"ping")
            s_in.write(c_out.read())
            assert server.read(4) == b"ping"
            return server
    raise AssertionError("handshake did not finish")


def _client(d, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(d / f"{cert}.pem"), str(d / f"{cert}-key.pem"))
    return ctx


def test_pem_keystore_file_and_the_ssl_principal(pki):
    d, _ca, _server = pki
    props = {"ssl.keystore.location": str(d / "broker-keystore.pem"), "ssl.keystore.type": "PEM",
             "ssl.truststore.location": str(d / "ca.pem"), "ssl.client.auth": "required"}
    ctx = server_context(props)
    conn = _handshake(ctx, _client(d, "alice"))
    # Kafka's principal: the subject in RFC 2253 form, most specific first.
    assert peer_principal(conn) == "User:CN=alice,OU=eng,O=acme"


def test_required_client_auth_refuses_another_ca_and_no_certificate(pki):
    d, _ca, _server = pki
    props = {"ssl.keystore.location": str(d / "broker-keystore.pem"), "ssl.truststore.location": str(d / "ca.pem"),
             "ssl.client.auth": "required"}
    for cert in ("mallory", None):
        with pytest.raises(ssl.SSLError):
            _handshake(server_context(props), _client(d, cert))


def test_requested_client_auth_takes_a_connection_without_a_certificate_as_anonymous(pki):
    d, _ca, _server = pki
    props = {"ssl.keystore.location": str(d / "broker-keystore.pem"), "ssl.truststore.location": str(d / "ca.pem"),
             "ssl.client.auth": "requested"}
    assert peer_principal(_handshake(server_context(props), _client(d))) == "User:ANONYMOUS"
    assert peer_principal(_handshake(server_context(props), _client(d, "alice"))).startswith("User:CN=alice")


def test_inline_pem_and_an_encrypted_key(pki):
    d, _ca, server = pki
    inline = {"ssl.keystore.certificate.chain": server.cert_pem.decode(), "ssl.keystore.key": server.key_pem.decode()}
    _handshake(server_context(inline), _client(d))
    enc = {"ssl.keystore.location": str(d / "enc" / "broker-keystore.pem"), "ssl.key.password": "key-pw"}
    _handshake(server_context(enc), _client(d))
    with pytest.raises(TlsConfigError, match="keystore"):
        server_context({**enc, "ssl.key.password": "wrong"})


def test_pkcs12_keystore(pki, tmp_path):
    d, ca, server = pki
    key = serialization.load_pem_private_key(server.key_pem, None)
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(server.cert_pem)
    p12 = tmp_path / "broker.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(b"broker", key, cert, None,
                                                          serialization.BestAvailableEncryption(b"store-pw")))
    props = {"ssl.keystore.location": str(p12), "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "store-pw"}
    _handshake(server_context(props), _client(d))


@pytest.mark.parametrize("props,why", [
    ({}, "needs ssl.keystore.location"),
    ({"ssl.keystore.location": "/nonexistent.pem"}, "No such file"),
    ({"ssl.keystore.client.auth": "x"}, "needs ssl.keystore.location"),
    ({"ssl.client.auth": "sometimes"}, "expected none, requested or required"),
    ({"ssl.client.auth": "required"}, "needs ssl.truststore"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2 and TLSv1.3"),
], ids=["no-keystore", "missing-file", "no-keystore-2", "bad-client-auth", "no-truststore", "old-tls"])
def test_bad_settings_say_what_is_wrong(pki, props, why):
    d, _ca, _server = pki
    base = {"ssl.keystore.location": str(d / "broker-keystore.pem")} if props.get("ssl.client.auth") or \
        "ssl.enabled.protocols" in props else {}
    with pytest.raises(TlsConfigError, match=why):
        server_context({**base, **props})


def test_a_jks_keystore_is_refused_with_the_way_out(pki, tmp_path):
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 64)
    with pytest.raises(TlsConfigError, match="keytool"):
        server_context({"ssl.keystore.location": str(jks), "ssl.keystore.type": "JKS"})


def test_on_sasl_ssl_only_the_listeners_own_client_auth_counts(pki):
    d, _ca, _server = pki
    [lst] = parse_listeners({"listeners": "SASL_SSL://:9093"})
    props = {"ssl.keystore.location": str(d / "broker-keystore.pem"), "ssl.client.auth": "required"}
    assert server_context(props, lst).verify_mode == ssl.CERT_NONE  # Kafka ignores the unprefixed one here
    props["listener.name.sasl_ssl.ssl.client.auth"] = "required"
    props["ssl.truststore.location"] = str(d / "ca.pem")
    assert server_context(props, lst).verify_mode == ssl.CERT_REQUIRED
