"""Interop: a broker with Kafka's authorizer on a SASL_PLAINTEXT listener; ACLs and SCRAM
users managed with `odradek acls` and `odradek users scram` (as kafka-acls.sh and
kafka-configs.sh would), and librdkafka clients allowed or refused as Kafka refuses them."""

from __future__ import annotations

import subprocess
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.cluster.etcd_process import free_port  # noqa: E402
from tests.conftest import ODRADEK, ROOT, BrokerProcess  # noqa: E402

pytestmark = pytest.mark.interop
TIMEOUT = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" '
        'user_alice="alice-pw" user_bob="bob-pw";')


@pytest.fixture(scope="module")
def authz(tmp_path_factory):
    d = tmp_path_factory.mktemp("acls")
    port = free_port()
    props = [f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
             "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256", f"plain.sasl.jaas.config={JAAS}",
             "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             # The PLAINTEXT listener is the inter-broker one here: its principal is ANONYMOUS.
             "super.users=User:admin;User:ANONYMOUS", "group.initial.rebalance.delay.ms=0",
             "group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=100"]
    b = BrokerProcess(d / "data", [a for p in props for a in ("-o", p)]).start()
    b.sasl = f"127.0.0.1:{port}"
    yield b
    if b.alive():
        assert b.stop() == 0


def conf(authz, user: str, password: str, mechanism: str = "PLAIN", **extra) -> dict:
    return {"bootstrap.servers": authz.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password, **extra}


def cli(authz, *args: str, user: str = "admin", password: str = "admin-pw") -> subprocess.CompletedProcess:
    """`odradek ARGS` as `user` over SASL/PLAIN, with Kafka's client properties (-X)."""
    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "-X", f"sasl.username={user}",
           "-X", f"sasl.password={password}"]
    return subprocess.run([*ODRADEK, *args, "--bootstrap-server", authz.sasl, *sec], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=False)


def test_acls_added_with_the_cli_let_alice_produce_and_consume_and_not_bob(authz, topic_name):
    admin = AdminClient(conf(authz, "admin", "admin-pw"))
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT)
    group = f"g-{topic_name}"
    r = cli(authz, "acls", "add", "--allow-principal", "User:alice", "--producer", "--topic", topic_name)
    assert r.returncode == 0, r.stderr
    r = cli(authz, "acls", "add", "--allow-principal", "User:alice", "--consumer", "--topic", topic_name,
            "--group", group)
    assert r.returncode == 0, r.stderr
    listed = cli(authz, "acls", "list", "--topic", topic_name)
    assert "principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW" in listed.stdout, listed.stdout

    p = Producer(conf(authz, "alice", "alice-pw"))
    for i in range(10):
        p.produce(topic_name, f"v{i}".encode())
    assert p.flush(TIMEOUT) == 0
    c = Consumer(conf(authz, "alice", "alice-pw", **{"group.id": group, "auto.offset.reset": "earliest",
                                                     "enable.auto.commit": False, "group.protocol": "consumer"}))
    try:
        c.subscribe([topic_name])
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 10 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert len(got) == 10
        assert sum(tp.offset for tp in c.commit(asynchronous=False)) == 10
    finally:
        c.close()

    # Bob has no ACL: his produce is refused with TOPIC_AUTHORIZATION_FAILED.
    errors = []
    bob = Producer(conf(authz, "bob", "bob-pw", **{"message.timeout.ms": 5000}))
    bob.produce(topic_name, b"x", on_delivery=lambda err, msg: errors.append(err))
    bob.flush(TIMEOUT)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


def test_a_member_without_read_on_its_group_is_refused(authz, topic_name):
    admin = AdminClient(conf(authz, "admin", "admin-pw"))
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT)
    assert cli(authz, "acls", "add", "--allow-principal", "User:bob", "--operation", "Read", "--topic",
               topic_name).returncode == 0
    errors = []
    c = Consumer(conf(authz, "bob", "bob-pw", **{"group.id": f"g-{topic_name}", "group.protocol": "consumer",
                                                 "error_cb": errors.append}))
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 15
        refused = None
        while refused is None and time.monotonic() < deadline:
            try:
                m = c.poll(0.5)
            except KafkaException as exc:
                refused = exc.args[0]
                break
            if m is not None and m.error():
                refused = m.error()
        assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, (refused, errors)
    finally:
        c.close()


def test_scram_users_with_the_cli(authz):
    r = cli(authz, "users", "scram", "set", "carol", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-pw]")
    assert r.returncode == 0, r.stderr
    listed = cli(authz, "users", "scram", "list")
    assert "carol: SCRAM-SHA-256=iterations=8192" in listed.stdout
    # carol authenticates (no ACLs: Metadata answers, with no topics she may describe).
    md = AdminClient(conf(authz, "carol", "carol-pw", "SCRAM-SHA-256")).list_topics(timeout=10)
    assert not md.topics
    # Only who may ALTER the cluster changes users.
    denied = cli(authz, "users", "scram", "set", "mallory", "--mechanism", "SCRAM-SHA-256", "--password", "x",
                 user="alice", password="alice-pw")
    assert denied.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr
    assert cli(authz, "users", "scram", "delete", "carol", "--mechanism", "SCRAM-SHA-256").returncode == 0
    assert "carol" not in cli(authz, "users", "scram", "list").stdout


def test_kafka_acls_command_line_and_removal(authz, topic_name):
    r = subprocess.run([*ODRADEK, "kafka-acls", "--bootstrap-server", authz.bootstrap, "--add", "--allow-principal",
                        "User:dave", "--operation", "Describe", "--topic", topic_name], capture_output=True,
                       text=True, cwd=ROOT, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert "principal=User:dave" in cli(authz, "acls", "list", "--principal", "User:dave").stdout
    r = cli(authz, "acls", "remove", "--allow-principal", "User:dave", "--operation", "Describe", "--topic",
            topic_name, "--force")
    assert r.returncode == 0, r.stderr
    assert "User:dave" not in cli(authz, "acls", "list", "--principal", "User:dave").stdout


def test_secure_defaults_quick_start(tmp_path):
    """`odradek broker --secure-defaults`: SASL_SSL only, the generated CA and admin password
    work for librdkafka through the written client properties; plain text gets nothing."""
    from odradek.commands.kafka_scripts.common import load_properties

    b = BrokerProcess(tmp_path / "data", ["--secure-defaults"]).start()
    try:
        props = load_properties(str(tmp_path / "data" / "security" / "client.properties"))
        props["bootstrap.servers"] = b.bootstrap
        c = {k: v for k, v in props.items() if k not in ("sasl.mechanism", "sasl.jaas.config",
                                                         "ssl.truststore.type", "ssl.truststore.location")}
        admin = AdminClient(c)
        admin.create_topics([NewTopic("quick", 1, 1)])["quick"].result(TIMEOUT)
        p = Producer(c)
        p.produce("quick", b"hello")
        assert p.flush(TIMEOUT) == 0
        plain = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 3000})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=3)
        # The odradek CLI with the same file.
        r = subprocess.run([*ODRADEK, "topics", "list", "--bootstrap-server", b.bootstrap, "--command-config",
                            str(tmp_path / "data" / "security" / "client.properties")],
                           capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
        assert r.returncode == 0 and "quick" in r.stdout, r.stderr
    finally:
        assert b.stop() == 0
    password = (tmp_path / "data" / "security" / "admin.password").read_text().strip()
    assert oct((tmp_path / "data" / "security" / "admin.password").stat().st_mode & 0o777) == "0o600"
    # A restart keeps the certificate and the password.
    b2 = BrokerProcess(tmp_path / "data", ["--secure-defaults"]).start()
    try:
        assert (tmp_path / "data" / "security" / "admin.password").read_text().strip() == password
    finally:
        b2.stop()


@pytest.mark.parametrize("props,says", [
    (["listeners=SSL://127.0.0.1:0"], "needs ssl.keystore.location"),
    (["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN"], "SASL/PLAIN needs its users"),
    (["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=GSSAPI"], "odradek supports"),
    (["listeners=CLIENT://127.0.0.1:0"], "listener.security.protocol.map"),
    (["authorizer.class.name=com.example.MyAuthorizer"], "StandardAuthorizer"),
])
def test_bad_security_settings_stop_the_broker_with_a_message(tmp_path, props, says):
    r = subprocess.run([*ODRADEK, "broker", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0",
                        *[a for p in props for a in ("-o", p)]], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, check=False)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_librdkafka_reauthenticates_within_the_session_lifetime(tmp_path):
    """KIP-368: connections.max.reauth.ms=2000; librdkafka 2.16 re-authenticates at 90% of the
    lifetime on the same connection, so a producer sending for 7 s sees no error."""
    port = free_port()
    props = [f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
             "sasl.enabled.mechanisms=PLAIN", f"plain.sasl.jaas.config={JAAS}",
             "listener.name.sasl_plaintext.connections.max.reauth.ms=2000"]
    b = BrokerProcess(tmp_path / "data", [a for p in props for a in ("-o", p)]).start()
    try:
        b.sasl = f"127.0.0.1:{port}"
        errors, delivered = [], []
        p = Producer(conf(b, "alice", "alice-pw", **{"error_cb": errors.append}))
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            p.produce("reauth", b"x", on_delivery=lambda err, _m: delivered.append(err))
            p.poll(0.2)
        assert p.flush(TIMEOUT) == 0
        assert errors == [] and len(delivered) >= 20 and not any(delivered), (errors, delivered[:3])
    finally:
        assert b.stop() == 0
