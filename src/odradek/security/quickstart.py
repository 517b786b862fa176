"""`odradek broker --secure-defaults`: a quick secure start.

The broker listens with SASL_SSL only (where --listen says, default 127.0.0.1:9092): TLS
with a certificate from a certificate authority generated for this data directory (kept
in <data-dir>/security and reused by later starts), SASL with SCRAM-SHA-256/512 and
PLAIN, Kafka's authorizer on, and one super user `admin` whose password is generated
once and kept in <data-dir>/security/admin.password (mode 600). A client properties file
with Kafka's names is written next to it, ready for `--command-config`, kcat's `-F`, or
any client. Settings the user gives explicitly (--config, -o) win over these.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from .certs import CertificateAuthority

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _hosts(listen_host: str) -> list[str]:
    hosts = ["localhost", "127.0.0.1"]
    if listen_host not in ("", "0.0.0.0", "::") and listen_host not in hosts:
        hosts.append(listen_host)
    return hosts


def prepare(data_dir: Path, listen_host: str, listen_port: int) -> tuple[dict[str, str], Path, str]:
    """(broker properties, client properties file, admin password), creating the files on first use."""
    d = Path(data_dir) / "security"
    d.mkdir(parents=True, exist_ok=True)
    ca_path, keystore = d / "ca.pem", d / "broker-keystore.pem"
    if not ca_path.exists() or not keystore.exists():
        ca = CertificateAuthority("CN=odradek quick-start CA,O=odradek")
        ca.issue("CN=odradek broker,O=odradek", _hosts(listen_host)).write(d, "broker")
        ca_path.write_bytes(ca.cert_pem)  # the CA's key is not kept: nothing else is ever signed
    password_file = d / "admin.password"
    if not password_file.exists():
        password_file.write_text(secrets.token_urlsafe(18) + "\n")
        password_file.chmod(0o600)
    password = password_file.read_text().strip()
    host = "127.0.0.1" if listen_host in ("", "0.0.0.0", "::") else listen_host
    broker = {
        "listeners": f"SASL_SSL://{listen_host}:{listen_port}",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.type": "PEM",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "plain.sasl.jaas.config": ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                                   f'user_admin="{password}";'),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
    }
    client = d / "client.properties"
    client.write_text(
        "# odradek --secure-defaults: Kafka client properties for the admin user\n"
        f"bootstrap.servers={host}:{listen_port}\n"
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.mechanisms=PLAIN\n"
        f"sasl.username=admin\nsasl.password={password}\n"
        f"ssl.ca.location={ca_path}\nssl.truststore.type=PEM\nssl.truststore.location={ca_path}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{password}";\n')
    client.chmod(0o600)
    return broker, client, password


__all__ = ["prepare"]
