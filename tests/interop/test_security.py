"""Interop: real clients over SSL, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256/512) and SASL_SSL
listeners of one `odradek broker` process, next to its PLAINTEXT listener: they connect,
produce, consume and commit in classic and KIP-848 groups; wrong passwords, unknown users
and certificates from another CA are refused with Kafka's errors."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism  # noqa: E402
from confluent_kafka.admin import UserScramCredentialUpsertion  # noqa: E402

from odradek.cluster.etcd_process import free_port  # noqa: E402
from odradek.security.certs import CertificateAuthority  # noqa: E402

pytestmark = pytest.mark.interop
TIMEOUT = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


class Secured:
    """A broker with every kind of listener, and the files its clients need."""

    def __init__(self, broker, ports: dict[str, int], ca: str, client_cert: str, client_key: str,
                 other_cert: str, other_key: str) -> None:
        self.broker, self.ports, self.ca = broker, ports, ca
        self.client_cert, self.client_key = client_cert, client_key
        self.other_cert, self.other_key = other_cert, other_key

    def at(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}" if name != "PLAINTEXT" else self.broker.bootstrap

    def conf(self, protocol: str, mechanism: str | None = None, user: str = "alice", password: str = "alice-secret",
             **extra) -> dict:
        c = {"bootstrap.servers": self.at(protocol), "security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            c["ssl.ca.location"] = self.ca
        if protocol == "SSL":
            c["ssl.certificate.location"], c["ssl.key.location"] = self.client_cert, self.client_key
        if mechanism:
            c.update({"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password})
        c.update(extra)
        return c


@pytest.fixture(scope="module")
def secured(tmp_path_factory, request):
    from tests.conftest import BrokerProcess

    d = tmp_path_factory.mktemp("security")
    ca = CertificateAuthority("CN=odradek test CA")
    ca_path = d / "ca.pem"
    ca_path.write_bytes(ca.cert_pem)
    _, keystore = ca.issue("CN=localhost", ["localhost", "127.0.0.1"]).write(d, "broker")
    client_cert, _ = ca.issue("CN=alice,OU=eng,O=acme", client=True).write(d, "alice")
    other_cert, _ = CertificateAuthority("CN=someone else's CA").issue("CN=mallory", client=True).write(d, "mallory")
    ports = {"SSL": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    listeners = ",".join(["PLAINTEXT://127.0.0.1:0"] + [f"{n}://127.0.0.1:{p}" for n, p in ports.items()])
    props = [f"listeners={listeners}", f"ssl.keystore.location={keystore}", "ssl.keystore.type=PEM",
             f"ssl.truststore.location={ca_path}", "ssl.truststore.type=PEM",
             "listener.name.ssl.ssl.client.auth=required",
             "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", f"plain.sasl.jaas.config={JAAS}",
             "group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=100",
             "group.initial.rebalance.delay.ms=0"]
    extra = [a for p in props for a in ("-o", p)]
    b = BrokerProcess(d / "data", extra).start()
    # SCRAM users are created over PLAINTEXT with Kafka's admin API (the client salts).
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(m, 8192), b"alice-secret")
               for m in (ScramMechanism.SCRAM_SHA_256,)]
    upserts += [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                             b"bob-secret")]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(TIMEOUT)
    yield Secured(b, ports, str(ca_path), str(client_cert), str(d / "alice-key.pem"), str(other_cert),
                  str(d / "mallory-key.pem"))
    if b.alive():
        assert b.stop() == 0


def _round_trip(conf: dict, topic: str, protocol: str = "classic") -> None:
    """Create, produce 20, consume them back in a group and commit, all with `conf`."""
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
    p = Producer(conf)
    for i in range(20):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(TIMEOUT) == 0
    group = f"g-{topic}"
    cconf = {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "consumer":
        cconf["group.protocol"] = "consumer"
    c = Consumer(cconf)
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
        committed = c.commit(asynchronous=False)
        assert sum(tp.offset for tp in committed) == 20
    finally:
        c.close()


@pytest.mark.parametrize("protocol,mechanism,user,password", [
    ("SSL", None, None, None),
    ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-secret"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", "bob-secret"),
    ("SASL_SSL", "PLAIN", "admin", "admin-secret"),
    ("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret"),
], ids=["ssl", "sasl-plain", "scram-256", "scram-512", "sasl-ssl-plain", "sasl-ssl-scram"])
@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_librdkafka_produces_consumes_and_commits(secured, topic_name, protocol, mechanism, user, password,
                                                  group_protocol):
    kw = {"user": user, "password": password} if mechanism else {}
    _round_trip(secured.conf(protocol, mechanism, **kw), topic_name, group_protocol)


def _auth_error(conf: dict, wait: float = 10.0) -> str:
    """What librdkafka reports (error_cb) in its first seconds of failing to connect or
    authenticate; no metadata must be had meanwhile."""
    errors: list = []
    p = Producer({**conf, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + wait
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    p.poll(1.0)  # the reasons that come with the first error
    with pytest.raises(KafkaException):
        p.list_topics(timeout=1)
    return " ".join(str(e) for e in errors)


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "mallory", "x"),
    ("SCRAM-SHA-256", "alice", "wrong"), ("SCRAM-SHA-256", "mallory", "x"),
    ("SCRAM-SHA-512", "alice", "alice-secret"),  # alice has no SHA-512 credential
])
def test_wrong_passwords_and_unknown_users_fail_authentication(secured, mechanism, user, password):
    text = _auth_error(secured.conf("SASL_PLAINTEXT", mechanism, user, password))
    assert "Authentication failed" in text or "SASL authentication error" in text, text
    if mechanism == "PLAIN":
        assert "Invalid username or password" in text
    else:
        assert f"invalid credentials with SASL mechanism {mechanism}" in text


def test_an_unknown_mechanism_is_refused_with_the_enabled_list(secured):
    # librdkafka checks the broker's list before it sends a token.
    text = _auth_error(secured.conf("SASL_PLAINTEXT", "OAUTHBEARER", "alice", "x",
                                    **{"sasl.oauthbearer.config": "principal=alice",
                                       "enable.sasl.oauthbearer.unsecure.jwt": True}))
    assert "Unsupported SASL mechanism" in text
    assert "PLAIN" in text and "SCRAM-SHA-256" in text, text


API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, key, version, correlation id, no client id


def _api_versions_over_tls(secured, cert: str | None, key: str | None) -> bytes:
    """An ApiVersions v0 over the SSL listener: the response's bytes, b"" if the broker
    closed the connection, or an SSLError (TLS 1.3 reports a refused certificate on the
    first read)."""
    ctx = ssl.create_default_context(cafile=secured.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(API_VERSIONS_V0)
            return tls.recv(4)


def _refused(secured, cert, key) -> bool:
    try:
        return _api_versions_over_tls(secured, cert, key) == b""
    except (ssl.SSLError, ConnectionResetError):
        return True


def test_our_own_ca_certificate_is_served(secured):
    assert len(_api_versions_over_tls(secured, secured.client_cert, secured.client_key)) == 4


def test_a_certificate_from_another_ca_is_refused(secured):
    conf = secured.conf("SSL")
    conf["ssl.certificate.location"], conf["ssl.key.location"] = secured.other_cert, secured.other_key
    _auth_error(conf)  # librdkafka gets no metadata
    assert _refused(secured, secured.other_cert, secured.other_key)


def test_ssl_without_a_client_certificate_is_refused_when_required(secured):
    conf = secured.conf("SSL")
    del conf["ssl.certificate.location"], conf["ssl.key.location"]
    _auth_error(conf)
    assert _refused(secured, None, None)


def test_plaintext_client_on_a_sasl_listener_gets_nothing(secured):
    # Nothing is served before authentication: a Metadata request closes the connection.
    text = _auth_error({"bootstrap.servers": secured.at("SASL_PLAINTEXT")})
    assert text


def test_kcat_over_sasl_ssl(secured, topic_name):
    conf = secured.conf("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-secret")
    admin = AdminClient(conf)  # kept alive until the result is in
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT)
    args = []
    for k, v in conf.items():
        if k != "bootstrap.servers":
            args += ["-X", f"{k}={v}"]
    base = ["kcat", "-b", conf["bootstrap.servers"], "-t", topic_name, *args]
    subprocess.run([*base, "-P"], input=b"one\ntwo\n", check=True, timeout=60)
    out = subprocess.run([*base, "-C", "-o", "beginning", "-e", "-q"], capture_output=True, check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two"]


CLIENT_CASES = [("SSL", None, None, None), ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
                ("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-secret"), ("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret")]
CLIENT_IDS = ["ssl", "plain", "sasl-ssl-scram-256", "sasl-ssl-scram-512"]


@pytest.mark.parametrize("protocol,mechanism,user,password", CLIENT_CASES, ids=CLIENT_IDS)
@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_odradek_client_with_kafka_property_names(secured, topic_name, protocol, mechanism, user, password,
                                                  group_protocol):
    import asyncio

    from odradek.client import AsyncAdmin, AsyncConsumer, AsyncProducer, NewTopic

    conf = secured.conf(protocol, mechanism, user or "", password or "")
    bootstrap = conf.pop("bootstrap.servers")

    async def body():
        async with AsyncAdmin(bootstrap, security=conf) as admin:
            await admin.create_topics([NewTopic(topic_name, 2, 1)])
        producer = AsyncProducer(bootstrap, security=conf)
        await producer.start()
        try:
            for f in [await producer.send(topic_name, f"v{i}".encode()) for i in range(20)]:
                await f
        finally:
            await producer.close()
        consumer = AsyncConsumer(bootstrap, group_id=f"g-{topic_name}", group_protocol=group_protocol,
                                 auto_offset_reset="earliest", enable_auto_commit=False, security=conf)
        await consumer.start()
        try:
            consumer.subscribe([topic_name])
            got = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 20 and time.monotonic() < deadline:
                got += await consumer.poll(300)
            assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(20))
            await consumer.commit()
        finally:
            await consumer.close()

    asyncio.run(asyncio.wait_for(body(), 90))


def test_odradek_client_wrong_password_is_an_authentication_error(secured):
    import asyncio

    from odradek.client import AsyncAdmin
    from odradek.client.errors import KafkaError

    conf = secured.conf("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "wrong")
    bootstrap = conf.pop("bootstrap.servers")

    async def body():
        admin = AsyncAdmin(bootstrap, security=conf)
        with pytest.raises(KafkaError) as info:
            await admin.start()
            await admin.list_topics()
        await admin.close()
        return info.value

    err = asyncio.run(asyncio.wait_for(body(), 60))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in str(err)


KAFKA_PYTHON_CASES = [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
                      ("SASL_SSL", "SCRAM-SHA-512")]


def _python_client_conf(secured, protocol, mechanism):
    user, password = ("bob", "bob-secret") if mechanism == "SCRAM-SHA-512" else ("alice", "alice-secret")
    c = {"bootstrap_servers": secured.at(protocol), "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        c["ssl_cafile"] = secured.ca
    if protocol == "SSL":
        c["ssl_certfile"], c["ssl_keyfile"] = secured.client_cert, secured.client_key
    if mechanism:
        c.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password})
    return c


@pytest.mark.parametrize("protocol,mechanism", KAFKA_PYTHON_CASES, ids=[f"{p}-{m}" for p, m in KAFKA_PYTHON_CASES])
def test_kafka_python(secured, topic_name, protocol, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    conf = _python_client_conf(secured, protocol, mechanism)
    admin = AdminClient(secured.conf("PLAINTEXT"))
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT)
    producer = KafkaProducer(**conf)
    for i in range(10):
        producer.send(topic_name, f"v{i}".encode())
    producer.flush(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(topic_name, group_id=f"g-{topic_name}", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000, **conf)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 10:
            break
    consumer.commit()
    consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))


def test_kafka_python_wrong_password(secured, caplog):
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError as KPError

    conf = _python_client_conf(secured, "SASL_PLAINTEXT", "PLAIN")
    conf["sasl_plain_password"] = "wrong"
    with pytest.raises(KPError):  # kafka-python retries, then reports that it could not bootstrap
        KafkaAdminClient(request_timeout_ms=5000, bootstrap_timeout_ms=5000, **conf).list_topics()
    assert "SaslAuthenticationFailedError" in caplog.text and "Invalid username or password" in caplog.text


@pytest.mark.parametrize("protocol,mechanism", KAFKA_PYTHON_CASES, ids=[f"{p}-{m}" for p, m in KAFKA_PYTHON_CASES])
def test_aiokafka(secured, topic_name, protocol, mechanism):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    conf = _python_client_conf(secured, protocol, mechanism)
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        conf.pop(key, None)
    if protocol in ("SSL", "SASL_SSL"):
        ctx = create_ssl_context(cafile=secured.ca, certfile=secured.client_cert if protocol == "SSL" else None,
                                 keyfile=secured.client_key if protocol == "SSL" else None)
        conf["ssl_context"] = ctx
    admin = AdminClient(secured.conf("PLAINTEXT"))
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT)

    async def body():
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic_name, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic_name, group_id=f"g-{topic_name}", auto_offset_reset="earliest",
                                    enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            got = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 10 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                got += [m.value for msgs in batch.values() for m in msgs]
            await consumer.commit()
        finally:
            await consumer.stop()
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))

    asyncio.run(asyncio.wait_for(body(), 90))
