"""Certificates for a quick secure start (`odradek broker --secure-defaults`) and for tests:
a certificate authority, and certificates it signs for a broker (with its host names as
subject alternative names, which librdkafka checks by default) or a client (whose subject
becomes its principal on an SSL listener with ssl.client.auth). PEM files, as Kafka's
`ssl.keystore.type=PEM` reads them (KIP-651).

Uses the `cryptography` library (pyca), which the TLS side needs for certificate subjects
in RFC 2253 form as well.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAYS = 825  # within what browsers and OpenSSL accept for a leaf certificate


@dataclass
class Issued:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str, password: str | None = None) -> tuple[Path, Path]:
        """`<stem>.pem` (certificate) and `<stem>-key.pem`; also `<stem>-keystore.pem` (key
        then certificate: one file for ssl.keystore.location). Returns (cert, keystore)."""
        directory.mkdir(parents=True, exist_ok=True)
        cert = directory / f"{stem}.pem"
        cert.write_bytes(self.cert_pem)
        key_pem = self.key_pem
        if password is not None:
            key = serialization.load_pem_private_key(self.key_pem, None)
            key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.BestAvailableEncryption(password.encode()))
        key_path = directory / f"{stem}-key.pem"
        key_path.write_bytes(key_pem)
        key_path.chmod(0o600)
        keystore = directory / f"{stem}-keystore.pem"
        keystore.write_bytes(key_pem + self.cert_pem)
        keystore.chmod(0o600)
        return cert, keystore


def _name(subject: str) -> x509.Name:
    """"CN=alice,OU=eng,O=acme" -> a Name (RFC 4514 order: the most specific first)."""
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME, "C": NameOID.COUNTRY_NAME}
    parts = [p.split("=", 1) for p in subject.split(",") if p.strip()]
    return x509.Name([x509.NameAttribute(oids[k.strip().upper()], v.strip()) for k, v in reversed(parts)])


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class CertificateAuthority:
    def __init__(self, subject: str = "CN=odradek test CA") -> None:
        self.key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        name = _name(subject)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=_DAYS))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                    critical=True)
                     .sign(self.key, hashes.SHA256()))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, subject: str, hosts: list[str] = (), client: bool = False) -> Issued:
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=_DAYS))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client
                                                         else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
        if hosts:
            names = []
            for h in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    names.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def subject_rfc2253(der: bytes) -> str:
    """A certificate's subject as Java's X500Principal.getName() prints it (RFC 2253: the
    most specific attribute first), which Kafka's SSL principal is made of."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


__all__ = ["CertificateAuthority", "Issued", "subject_rfc2253"]
