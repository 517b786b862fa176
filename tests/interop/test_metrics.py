"""/metrics after a scripted workload, scraped from a real broker process and parsed with
prometheus-client's own parser: librdkafka produces and consumes, a KIP-848 group grows
from one member to two and shrinks back to one, and one SASL client fails to
authenticate while another succeeds. Counts are compared with what the workload did;
histograms must hold the requests that were made."""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from odradek.cluster.etcd_process import free_port
from tests.polling import wait_until
from tests.wire import RawClient

TIMEOUT = 30
RECORDS = 120
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, frozenset], float] = {}
        self.families = {}
        for family in text_string_to_metric_families(text):
            self.families[family.name] = family
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def get(self, name: str, **labels) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def total(self, name: str, **labels) -> float:
        """Sum over every sample of `name` whose labels include `labels`."""
        return sum(v for (n, ls), v in self.samples.items() if n == name and set(labels.items()) <= ls)


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    from tests.conftest import BrokerProcess

    d = tmp_path_factory.mktemp("metrics")
    sasl_port = free_port()
    props = [f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
             "sasl.enabled.mechanisms=PLAIN", f"plain.sasl.jaas.config={JAAS}",
             "metrics.listener=127.0.0.1:0",  # the broker says which port it took
             "group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=100"]
    b = BrokerProcess(d / "data", [a for p in props for a in ("-o", p)]).start()
    assert b.metrics_port is not None
    yield b, sasl_port, f"http://127.0.0.1:{b.metrics_port}/metrics"
    if b.alive():
        assert b.stop() == 0


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return Scrape(resp.read().decode())


def _sasl_attempt(port: int, password: str) -> bool:
    """One PLAIN exchange on a raw connection: True if it authenticated."""
    c = RawClient(f"127.0.0.1:{port}")
    try:
        assert c.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        answer = c.call(36, 2, {"auth_bytes": b"\0alice\0" + password.encode()}, correlation_id=2)
        return answer.error_code == 0
    finally:
        c.close()


def _members(admin: AdminClient, group: str):
    d = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    return d


def test_scraped_values_match_the_workload(observed):
    broker, sasl_port, url = observed
    topic, group = "metered", "metered-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(TIMEOUT)

    before = scrape(url)
    assert before.get("odradek_group_coordinator_group_count", protocol="consumer") == 0
    assert before.get("odradek_group_coordinator_partition_count", state="active") == 50  # __consumer_offsets

    # Produce: exactly RECORDS records, acknowledged.
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(RECORDS):
        p.produce(topic, key=str(i).encode(), value=b"x" * 100)
    assert p.flush(TIMEOUT) == 0

    # A KIP-848 group of one member that reads everything and commits.
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    c1 = Consumer(conf)
    c1.subscribe([topic])
    got = 0
    deadline = time.monotonic() + TIMEOUT
    while got < RECORDS and time.monotonic() < deadline:
        m = c1.poll(0.5)
        if m is not None and not m.error():
            got += 1
    assert got == RECORDS
    c1.commit(asynchronous=False)

    # The group grows to two members, then shrinks back to one.
    c2 = Consumer(conf)
    c2.subscribe([topic])

    def both_assigned():
        c1.poll(0.1)
        c2.poll(0.1)
        d = _members(admin, group)
        return len(d.members) == 2 and all(len(m.assignment.topic_partitions) == 2 for m in d.members)

    wait_until(both_assigned, TIMEOUT, what="two members with two partitions each")
    c2.close()

    def one_left():
        c1.poll(0.1)
        d = _members(admin, group)
        return len(d.members) == 1 and len(d.members[0].assignment.topic_partitions) == 4 and \
            str(d.state).endswith("STABLE")

    wait_until(one_left, TIMEOUT, what="one member owning all four partitions")
    final_epoch = _kip848_epoch(broker.bootstrap, group)

    # Authentication: one failure, one success, on the SASL listener.
    assert not _sasl_attempt(sasl_port, "wrong")
    assert _sasl_attempt(sasl_port, "alice-secret")

    s = scrape(url)
    # Bytes and messages in and out per topic.
    assert s.get("odradek_topic_messages_in_total", topic=topic) == RECORDS
    assert s.get("odradek_topic_bytes_in_total", topic=topic) > RECORDS * 100
    assert s.get("odradek_topic_messages_out_total", topic=topic) >= RECORDS
    assert s.get("odradek_topic_bytes_out_total", topic=topic) > RECORDS * 100
    # KIP-848 coordinator metrics: one consumer group, stable, and one rebalance counted per
    # group epoch bump (the group went 0 -> final_epoch).
    assert s.get("odradek_group_coordinator_group_count", protocol="consumer") == 1
    assert s.get("odradek_group_coordinator_consumer_group_count", state="stable") == 1
    assert s.get("odradek_group_coordinator_consumer_group_rebalances_total") == final_epoch
    assert final_epoch >= 3  # joined, joined, left
    for h in ("event_processing_time", "batch_flush_time", "event_queue_time", "event_purgatory_time"):
        assert s.get(f"odradek_group_coordinator_{h}_seconds_count") > 0, h
        assert s.get(f"odradek_group_coordinator_{h}_seconds_bucket", le="+Inf") == \
            s.get(f"odradek_group_coordinator_{h}_seconds_count")
    assert s.get("odradek_group_coordinator_partition_load_time_seconds_count") == 50
    assert 0 <= s.get("odradek_group_coordinator_thread_idle_ratio") <= 1
    # Requests per API: the produce requests' latency histogram is non-empty and consistent.
    produced = s.total("odradek_request_latency_seconds_count", request="Produce")
    assert produced >= 1
    assert s.total("odradek_requests_total", request="Produce") == produced
    assert s.total("odradek_request_latency_seconds_count", request="ConsumerGroupHeartbeat") >= 3
    assert s.total("odradek_request_errors_total", request="Produce", error="NONE") >= RECORDS // 100
    assert s.total("odradek_request_errors_total", request="CreateTopics", error="NONE") == 1
    assert s.total("odradek_request_errors_total", request="SaslAuthenticate", error="SASL_AUTHENTICATION_FAILED") == 1
    # Authentication, exactly what was attempted.
    assert s.get("odradek_authentications_failed_total", listener="SASL_PLAINTEXT", mechanism="PLAIN") == 1
    assert s.get("odradek_authentications_succeeded_total", listener="SASL_PLAINTEXT", mechanism="PLAIN") == 1
    # Lag: everything was consumed and committed.
    for partition in range(4):
        assert s.get("odradek_consumer_group_lag", group=group, topic=topic, partition=str(partition)) == 0
    assert s.total("odradek_consumer_group_committed_offset", group=group, topic=topic) == RECORDS
    # One broker: nothing under-replicated or offline; it leads its topic and the offsets topic.
    assert s.get("odradek_under_replicated_partitions") == 0
    assert s.get("odradek_offline_partitions") == 0
    assert s.get("odradek_leader_count") == 54
    assert s.total("odradek_connections_created_total") >= 4
    assert s.get("odradek_purgatory_size", purgatory="produce") == 0
    assert "process_cpu_seconds_total" in s.text

    # Lag shows new records that nobody consumed yet.
    p.produce(topic, value=b"late", partition=1)
    assert p.flush(TIMEOUT) == 0
    c1.close()
    s = scrape(url)
    assert s.get("odradek_consumer_group_lag", group=group, topic=topic, partition="1") == 1
    assert s.get("odradek_topic_messages_in_total", topic=topic) == RECORDS + 1


def _kip848_epoch(bootstrap: str, group: str) -> int:
    from odradek.client import Admin

    with Admin(bootstrap) as admin:
        return admin.describe_groups([group])[group].epoch
