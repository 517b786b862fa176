"""odradek's client `metrics()` against what librdkafka (confluent-kafka) actually emits.

Issue 21: the odradek client's statistics take librdkafka's shape where the two overlap. A
confluent-kafka producer and a group consumer run with `statistics.interval.ms` against the
same `odradek broker` as an odradek producer and consumer (both group protocols); every key
odradek emits must exist in librdkafka's object at the same place with a value of the same
JSON type, apart from the "odradek" extras. Broker, topic and partition keys are names, so
each such entry is compared with one of librdkafka's entries of that kind; request names
(brokers' "req") must be names librdkafka uses.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.client import AsyncConsumer, AsyncProducer  # noqa: E402
from odradek.client.stats import API_NAMES  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402
from tests.interop.classic_clients import BROKER_OPTS  # noqa: E402

pytestmark = pytest.mark.interop

TIMEOUT = 20.0
RECORDS = 20
PARTITIONS = 2
NAMED = {"brokers", "topics", "partitions"}  # dicts keyed by a name: compare entries kind with kind
# Requests librdkafka sends but leaves out of its "req" counters (rd_kafka_stats_emit_broker_reqs
# filters them for every client type); odradek counts them under librdkafka's names for them.
UNLISTED_REQ = {"ConsumerGroupHeartbeat", "OffsetForLeaderEpoch"}


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("stats-interop") / "data", BROKER_OPTS).start()
    yield b
    if b.alive():
        assert b.stop() == 0


def json_type(v) -> str:
    # bool before int: in Python a bool is an int, in JSON they differ.
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"), (dict, "object"),
                    (list, "array")):
        if isinstance(v, t):
            return name
    return type(v).__name__


def mismatches(ours: dict, theirs: dict, path: str = "", kind: str = "", req_names=None) -> list[str]:
    """Keys of `ours` that `theirs` lacks, or holds with another JSON type. `kind`: the key
    of the dict being compared (names in "brokers", "topics", "partitions" and "req" are
    data, not field names); `req_names`: the request names librdkafka uses."""
    req_names = set(API_NAMES.values()) if req_names is None else req_names
    out = []
    for key, value in ours.items():
        here = f"{path}.{key}" if path else key
        if not path and key == "odradek":
            continue  # odradek's own extras, under a key of their own
        if kind in NAMED:
            # librdkafka's own partitions include the "-1" unassigned one; compare with a real one.
            peers = [v for k, v in theirs.items() if k != "-1"] or list(theirs.values())
            if not peers:
                out.append(f"{here}: librdkafka has no {kind} entry to compare with")
            else:
                out += mismatches(value, peers[0], here, req_names=req_names)
        elif kind == "req":
            if key not in req_names or json_type(value) != "int":
                out.append(f"{here}: not a librdkafka request counter")
        elif key not in theirs:
            out.append(f"{here}: librdkafka has no such key")
        elif json_type(value) != json_type(theirs[key]):
            out.append(f"{here}: {json_type(value)} here, {json_type(theirs[key])} in librdkafka")
        elif isinstance(value, dict):
            out += mismatches(value, theirs[key], here, key, req_names)
    return out


def librdkafka_stats(bootstrap: str, topic: str) -> tuple[dict, dict]:
    """The last statistics a confluent-kafka producer and group consumer emitted after
    producing and consuming every record of `topic`."""
    emitted: list[str] = []
    # Idempotent, as odradek's producer is by default: librdkafka then emits its "eos" object too.
    p = Producer({"bootstrap.servers": bootstrap, "statistics.interval.ms": 100, "stats_cb": emitted.append,
                  "linger.ms": 5, "enable.idempotence": True})
    for i in range(RECORDS):
        p.produce(topic, b"v" * 100, key=b"k%d" % i, partition=i % PARTITIONS)
    assert p.flush(TIMEOUT) == 0
    deadline = time.monotonic() + TIMEOUT
    while not emitted or json.loads(emitted[-1])["txmsgs"] < RECORDS:
        assert time.monotonic() < deadline, "librdkafka's producer emitted no statistics"
        p.poll(0.05)
    producer = json.loads(emitted[-1])
    emitted.clear()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{topic}", "auto.offset.reset": "earliest",
                  "statistics.interval.ms": 100, "stats_cb": emitted.append, "session.timeout.ms": 6000,
                  "fetch.wait.max.ms": 100})
    try:
        c.subscribe([topic])
        got = 0
        while got < RECORDS:
            assert time.monotonic() < deadline, f"librdkafka consumed {got} of {RECORDS}"
            m = c.poll(0.1)
            if m is not None and not m.error():
                got += 1
        c.commit(asynchronous=False)

        def settled(stats: dict) -> bool:
            # librdkafka updates its toppars' committed offsets asynchronously after a commit.
            parts = stats.get("topics", {}).get(topic, {}).get("partitions", {})
            return "cgrp" in stats and all(parts.get(str(p), {}).get("consumer_lag") == 0 for p in range(PARTITIONS))

        while not emitted or not settled(json.loads(emitted[-1])):
            assert time.monotonic() < deadline, "librdkafka's consumer emitted no statistics with its commit"
            c.poll(0.05)
        consumer = json.loads(emitted[-1])
    finally:
        c.close()
    return producer, consumer


async def odradek_producer_stats(bootstrap: str, topic: str) -> dict:
    async with AsyncProducer(bootstrap, linger_ms=5) as p:
        for i in range(RECORDS):
            await p.send(topic, b"v" * 100, key=b"k%d" % i, partition=i % PARTITIONS)
        await p.flush()
        return p.metrics()


async def odradek_consumer_stats(bootstrap: str, topic: str, protocol: str, records: int) -> dict:
    async with AsyncConsumer(bootstrap, group_id=f"od-{protocol}-{topic}", group_protocol=protocol,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < records:
            assert time.monotonic() < deadline, f"odradek consumed {got} of {records}"
            got += len(await c.poll(100))
        await c.commit()
        return c.metrics()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT * 2))


def test_odradek_metrics_use_librdkafkas_names_and_types(sbroker, topic_name):
    bs = sbroker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])[topic_name].result(TIMEOUT)
    ck_producer, ck_consumer = librdkafka_stats(bs, topic_name)
    assert ck_producer["type"] == "producer" and ck_consumer["type"] == "consumer"
    req_names = {name for stats in (ck_producer, ck_consumer) for b in stats["brokers"].values() for name in b["req"]}
    req_names |= UNLISTED_REQ
    producer = run(odradek_producer_stats(bs, topic_name))
    assert mismatches(producer, ck_producer, req_names=req_names) == []
    assert producer["txmsgs"] == ck_producer["txmsgs"] == RECORDS  # same meaning, not just the same name
    assert "eos" in producer and producer["brokers"] and producer["topics"][topic_name]["partitions"]
    for protocol in ("classic", "consumer"):
        consumer = run(odradek_consumer_stats(bs, topic_name, protocol, 2 * RECORDS))  # librdkafka's and ours
        assert mismatches(consumer, ck_consumer, req_names=req_names) == [], protocol
        assert "cgrp" in consumer and consumer["brokers"] and consumer["topics"][topic_name]["partitions"]
        assert consumer["rxmsgs"] == 2 * RECORDS and ck_consumer["rxmsgs"] == RECORDS
        theirs, ours = ck_consumer["topics"][topic_name]["partitions"], consumer["topics"][topic_name]["partitions"]
        for p in range(PARTITIONS):
            assert theirs[str(p)]["consumer_lag"] == ours[str(p)]["consumer_lag"] == 0
            assert theirs[str(p)]["committed_offset"] == theirs[str(p)]["hi_offset"] == RECORDS // PARTITIONS
            assert ours[str(p)]["committed_offset"] == ours[str(p)]["hi_offset"] == 2 * RECORDS // PARTITIONS


def test_the_comparison_finds_missing_keys_and_other_types():
    theirs = {"tx": 1, "brokers": {"b:1/1": {"state": "UP", "req": {"Fetch": 0}, "rtt": {"p50": 1}}},
              "topics": {"t": {"partitions": {"-1": {"x": 1}, "0": {"leader": 1, "desired": False}}}}}
    ours = {"tx": True, "odradek": {"anything": 1}, "new": 1,
            "brokers": {"other:2/2": {"state": 1, "req": {"Fetch": 1, "Nope": 1}, "rtt": {"p50": 1, "p1": 1}}},
            "topics": {"u": {"partitions": {"3": {"leader": 1, "desired": 0}}}}}
    assert sorted(mismatches(ours, theirs)) == sorted([
        "tx: bool here, int in librdkafka",
        "new: librdkafka has no such key",
        "brokers.other:2/2.state: int here, string in librdkafka",
        "brokers.other:2/2.req.Nope: not a librdkafka request counter",
        "brokers.other:2/2.rtt.p1: librdkafka has no such key",
        "topics.u.partitions.3.desired: int here, bool in librdkafka",
    ])
