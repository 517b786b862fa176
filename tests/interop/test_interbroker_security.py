"""Interop: a two-broker cluster (etcd) whose only listener is SASL_SSL, with the authorizer
on: the brokers replicate to each other as SASL/PLAIN clients over TLS (their own
credentials from the listener's JAAS entry, the CA from the truststore), so acks=all
writes with min.insync.replicas=2 succeed only if the follower's fetches get through."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.commands.cluster import LocalCluster  # noqa: E402
from odradek.security.certs import CertificateAuthority  # noqa: E402

pytestmark = pytest.mark.interop
TIMEOUT = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-pw" '
        'user_broker="broker-pw" user_alice="alice-pw";')


class SecureCluster(LocalCluster):
    def command(self, node_id: int) -> list[str]:
        # Each broker's one listener, on the port the cluster picked for it.
        return super().command(node_id) + ["-o", f"listeners=SASL_SSL://127.0.0.1:{self.ports[node_id]}"]


@pytest.fixture
def cluster(tmp_path):
    ca = CertificateAuthority()
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    _, keystore = ca.issue("CN=localhost", ["localhost", "127.0.0.1"]).write(tmp_path, "broker")
    overrides = [f"ssl.keystore.location={keystore}", f"ssl.truststore.location={tmp_path / 'ca.pem'}",
                 "sasl.enabled.mechanisms=PLAIN", "sasl.mechanism.inter.broker.protocol=PLAIN",
                 f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
                 "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users=User:broker;User:alice", "offsets.topic.replication.factor=2",
                 "transaction.state.log.replication.factor=2", "group.initial.rebalance.delay.ms=0"]
    c = SecureCluster(tmp_path / "cluster", brokers=2, port=0, overrides=overrides, log_level="WARNING")
    c.start()
    c.ca = str(tmp_path / "ca.pem")
    yield c
    c.stop()


def test_replication_between_brokers_over_sasl_ssl(cluster, topic_name):
    conf = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-pw", "ssl.ca.location": cluster.ca}
    admin = AdminClient(conf)
    deadline = time.monotonic() + TIMEOUT
    while len(admin.list_topics(timeout=10).brokers) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    admin.create_topics([NewTopic(topic_name, 1, 2, config={"min.insync.replicas": "2"})])[topic_name].result(TIMEOUT)
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
    errors = []
    for i in range(100):
        p.produce(topic_name, f"v{i}".encode(), on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(TIMEOUT) == 0 and not errors, errors  # the follower is in the ISR: it fetched over SASL_SSL
    c = Consumer({**conf, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        while len(got) < 100 and time.monotonic() < deadline + TIMEOUT:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert len(got) == 100
    finally:
        c.close()
    for n in cluster.procs:
        assert "Traceback" not in cluster.log_of(n)
