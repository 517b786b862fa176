"""The client's statistics (client/stats.py): windows and rendering from hand-made counters,
the accumulator's queue gauges, and end to end against a real broker: a producer sends N
records of known size, a consumer in a group reads them (both group protocols), and the
counters, offsets and lags in `metrics()` must be exactly what happened."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.client import AsyncAdmin, AsyncConsumer, AsyncProducer, NewTopic, TopicPartition
from odradek.client.accumulator import Accumulator
from odradek.client.stats import (
    API_NAMES,
    OFFSET_INVALID,
    BrokerStats,
    ClientStats,
    Snapshot,
    Window,
    render,
)
from tests.conftest import BrokerProcess
from tests.interop.classic_clients import BROKER_OPTS

WINDOW_KEYS = ["min", "max", "avg", "sum", "stddev", "p50", "p75", "p90", "p95", "p99", "p99_99", "cnt"]


# --------------------------------------------------------------------------- windows


def test_window_summarises_its_samples_and_starts_again_on_rollover():
    w = Window()
    for v in range(100, 0, -1):  # order must not matter
        w.add(v)
    out = w.rollover()
    assert list(out) == WINDOW_KEYS
    assert (out["min"], out["max"], out["sum"], out["cnt"], out["avg"]) == (1, 100, 5050, 100, 50)
    # Nearest rank over 1..100: the p-th percentile is p itself.
    assert (out["p50"], out["p75"], out["p90"], out["p95"], out["p99"], out["p99_99"]) == (50, 75, 90, 95, 99, 100)
    assert out["stddev"] == int(((sum((v - 50.5) ** 2 for v in range(1, 101))) / 100) ** 0.5)
    assert w.rollover() == dict.fromkeys(WINDOW_KEYS, 0)  # librdkafka: every emit starts a new window


def test_window_counts_exactly_beyond_the_samples_it_keeps():
    w = Window()
    n = Window.KEEP * 3
    for v in range(n):
        w.add(v)
    out = w.peek()
    assert (out["cnt"], out["sum"], out["min"], out["max"]) == (n, n * (n - 1) // 2, 0, n - 1)
    # Percentiles come from the most recent KEEP samples only.
    assert out["p50"] >= n - Window.KEEP
    assert w.peek() == out  # peek does not reset


def test_window_of_one_sample():
    w = Window()
    w.add(7)
    out = w.rollover()
    assert {k: out[k] for k in ("min", "max", "avg", "sum", "p50", "p99_99", "cnt", "stddev")} == {
        "min": 7, "max": 7, "avg": 7, "sum": 7, "p50": 7, "p99_99": 7, "cnt": 1, "stddev": 0}


# --------------------------------------------------------------------------- rendering


class FakeWire:
    def __init__(self, in_flight: int) -> None:
        self.in_flight = in_flight


def make_stats() -> ClientStats:
    stats = ClientStats("app", now=100.0)
    stats.set_type("consumer")
    b = stats.broker(1, "h1", 9092)
    b.set_state("UP", 101.0)
    b.tx, b.txbytes, b.rx, b.rxbytes = 5, 500, 4, 4000
    b.last_tx, b.last_rx = 104.0, 104.5
    b.req = {1: 3, 3: 1, 18: 1}
    b.wire = FakeWire(1)
    b.rtt.add(1000)
    b.rtt.add(3000)
    boot = stats.broker(("bootstrap", 0), "h0", 9092)
    boot.tx, boot.rx = 2, 2
    boot.set_state("DOWN", 102.0)
    boot.last_tx = 101.0
    c1 = stats.broker(("coordinator", 1), "h1", 9092)
    c1.tx, c1.rx = 3, 3
    c1.set_state("DOWN", 102.0)
    c2 = stats.broker(("coordinator", 2), "h2", 9093)  # the coordinator moved: the same logical entry
    assert c2 is c1
    c2.tx += 1
    c2.set_state("UP", 103.0)
    p0 = stats.partition("t", 0, now=100.5)
    p0.rxmsgs, p0.rxbytes = 10, 1100
    p0.hi_offset, p0.ls_offset, p0.lo_offset, p0.committed_offset = 12, 11, 0, 8
    p1 = stats.partition("t", 1, now=100.5)
    p1.rxmsgs, p1.rxbytes = 5, 600
    p1.hi_offset = p1.ls_offset = 5  # nothing committed yet
    stats.metadata_at["t"] = 104.0
    stats.rebalanced("partitions assigned", 102.5)
    return stats


def snapshot(**kw) -> Snapshot:
    parts = {("t", 0): {"leader": 1, "desired": True, "unknown": False, "fetchq_cnt": 1, "fetch_state": "active",
                        "next_offset": 12, "app_offset": 10, "stored_offset": 10, "leader_epoch": 3},
             ("t", 1): {"leader": 1, "desired": True, "unknown": False, "fetchq_cnt": 0, "fetch_state": "active",
                        "next_offset": 5, "app_offset": 5, "stored_offset": 5, "leader_epoch": 3},
             ("t", 2): {"leader": 1, "desired": False, "unknown": False, "fetchq_cnt": 0, "fetch_state": "none",
                        "next_offset": OFFSET_INVALID, "app_offset": OFFSET_INVALID,
                        "stored_offset": OFFSET_INVALID, "leader_epoch": 3}}
    args = dict(now=105.0, wall=1_700_000_000.7, metadata_cache_cnt=4, partitions=parts, consumer=True,
                read_committed=True, cgrp={"state": "up", "join_state": "steady", "assignment_size": 2},
                extra={"group_protocol": "consumer"})
    args.update(kw)
    return Snapshot(**args)


def test_render_top_level_sums_brokers_and_partitions():
    out = render(make_stats(), snapshot())
    assert out["name"].startswith("app#consumer-") and out["client_id"] == "app" and out["type"] == "consumer"
    assert (out["ts"], out["time"], out["age"]) == (105_000_000, 1_700_000_000, 5_000_000)
    assert out["metadata_cache_cnt"] == 4
    # tx/rx: sums over broker entries, the logical coordinator counted once.
    assert (out["tx"], out["rx"]) == (5 + 2 + 4, 4 + 2 + 3)
    assert (out["tx_bytes"], out["rx_bytes"]) == (500, 4000)
    assert (out["rxmsgs"], out["rxmsg_bytes"], out["txmsgs"], out["txmsg_bytes"]) == (15, 1700, 0, 0)
    assert out["odradek"] == {"group_protocol": "consumer"}
    assert "msg_cnt" not in out  # a consumer has no producer queue


def test_render_brokers():
    brokers = render(make_stats(), snapshot())["brokers"]
    assert set(brokers) == {"h1:9092/1", "h0:9092/bootstrap", "GroupCoordinator"}
    b = brokers["h1:9092/1"]
    assert (b["name"], b["nodeid"], b["nodename"], b["source"], b["state"]) == ("h1:9092/1", 1, "h1:9092", "learned",
                                                                             "UP")
    assert (b["stateage"], b["txidle"], b["rxidle"], b["waitresp_cnt"]) == (4_000_000, 1_000_000, 500_000, 1)
    assert b["req"] == {"Fetch": 3, "Metadata": 1, "ApiVersion": 1}
    assert (b["rtt"]["cnt"], b["rtt"]["avg"], b["rtt"]["min"], b["rtt"]["max"]) == (2, 2000, 1000, 3000)
    boot = brokers["h0:9092/bootstrap"]
    assert (boot["nodeid"], boot["source"], boot["state"]) == (-1, "configured", "DOWN")
    assert (boot["txidle"], boot["rxidle"], boot["waitresp_cnt"]) == (-1, -1, 0)  # only for a connection that is UP
    coord = brokers["GroupCoordinator"]
    assert (coord["nodeid"], coord["source"], coord["nodename"], coord["tx"], coord["state"]) == (
        -1, "logical", "h2:9093", 4, "UP")


def test_render_windows_roll_over_between_renders():
    stats = make_stats()
    assert render(stats, snapshot())["brokers"]["h1:9092/1"]["rtt"]["cnt"] == 2
    assert render(stats, snapshot())["brokers"]["h1:9092/1"]["rtt"]["cnt"] == 0


def test_render_partitions_and_lag():
    out = render(make_stats(), snapshot())
    t = out["topics"]["t"]
    assert (t["topic"], t["age"], t["metadata_age"]) == ("t", 4500, 1000)
    p0, p1, p2 = (t["partitions"][k] for k in ("0", "1", "2"))
    assert (p0["hi_offset"], p0["ls_offset"], p0["lo_offset"], p0["committed_offset"]) == (12, 11, 0, 8)
    # read_committed: the end is the last stable offset (librdkafka).
    assert (p0["consumer_lag"], p0["consumer_lag_stored"]) == (11 - 8, 11 - 10)
    assert (p0["rxmsgs"], p0["rxbytes"], p0["fetchq_cnt"], p0["leader_epoch"]) == (10, 1100, 1, 3)
    assert (p1["committed_offset"], p1["consumer_lag"], p1["consumer_lag_stored"]) == (OFFSET_INVALID, -1, 0)
    assert (p2["hi_offset"], p2["consumer_lag"], p2["rxmsgs"], p2["desired"]) == (OFFSET_INVALID, -1, 0, False)
    uncommitted = render(make_stats(), snapshot(read_committed=False))["topics"]["t"]["partitions"]["0"]
    assert (uncommitted["consumer_lag"], uncommitted["consumer_lag_stored"]) == (12 - 8, 12 - 10)


def test_render_lag_is_unknown_when_the_offset_is_past_the_end():
    stats = make_stats()
    stats.topics["t"].partitions[0].committed_offset = 20  # the log was truncated under it
    assert render(stats, snapshot())["topics"]["t"]["partitions"]["0"]["consumer_lag"] == -1


def test_render_cgrp():
    cgrp = render(make_stats(), snapshot())["cgrp"]
    assert list(cgrp) == ["state", "join_state", "rebalance_age", "rebalance_cnt", "rebalance_reason",
                          "assignment_size"]
    assert cgrp == {"state": "up", "join_state": "steady", "rebalance_age": 2500, "rebalance_cnt": 1,
                    "rebalance_reason": "partitions assigned", "assignment_size": 2}
    assert "cgrp" not in render(make_stats(), snapshot(cgrp=None))


def test_render_producer_partitions_leave_consumer_fields_out():
    stats = ClientStats("p", now=0.0)
    stats.set_type("producer")
    ps = stats.partition("t", 0, now=0.0)
    ps.txmsgs, ps.txbytes = 7, 700
    snap = Snapshot(now=1.0, wall=0.0, top={"msg_cnt": 3, "msg_size": 30, "msg_max": 100},
                    partitions={("t", 0): {"leader": 1, "unknown": False, "msgq_cnt": 3, "msgq_bytes": 30,
                                           "leader_epoch": 0, "msgs_inflight": 0}},
                    eos={"idemp_state": "Assigned", "producer_id": 5, "producer_epoch": 0})
    out = render(stats, snap)
    assert (out["msg_cnt"], out["msg_size"], out["msg_max"], out["txmsgs"], out["txmsg_bytes"]) == (3, 30, 100, 7, 700)
    assert out["eos"] == {"idemp_state": "Assigned", "producer_id": 5, "producer_epoch": 0}
    p = out["topics"]["t"]["partitions"]["0"]
    assert list(p) == ["partition", "leader", "unknown", "msgq_cnt", "msgq_bytes", "leader_epoch", "txmsgs",
                       "txbytes", "rxmsgs", "rxbytes", "msgs_inflight"]
    assert "cgrp" not in out and "odradek" not in out


def test_instances_are_numbered_per_type_like_librdkafka():
    a, b = ClientStats("x", 0.0), ClientStats("x", 0.0)
    a.set_type("producer")
    b.set_type("producer")
    na, nb = (int(s.name.rsplit("-", 1)[1]) for s in (a, b))
    assert a.name.startswith("x#producer-") and nb == na + 1


def test_api_names_are_librdkafkas():
    assert (API_NAMES[0], API_NAMES[1], API_NAMES[18], API_NAMES[68]) == (
        "Produce", "Fetch", "ApiVersion", "ConsumerGroupHeartbeat")
    b = BrokerStats("n")
    b.req = {99: 1}
    assert render_broker_req(b) == {"Unknown-99?": 1}


def render_broker_req(b: BrokerStats) -> dict:
    stats = ClientStats("x", 0.0)
    stats.brokers[1] = b
    return render(stats, Snapshot(now=0.0, wall=0.0))["brokers"]["n"]["req"]


# --------------------------------------------------------------------------- accumulator gauges


def test_accumulator_gauges_count_queued_and_in_flight_records():
    acc = Accumulator(batch_size=120, linger_ms=0)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    for _ in range(3):
        acc.append(t0, 0, b"k", b"v" * 40, (), object(), now=0)  # 41 payload bytes each: batches of 2 and 1
    acc.append(t1, 0, None, b"x" * 10, (("h", b"header"),), object(), now=0)  # headers are not payload
    assert acc.gauges() == (3 * 41 + 10, {t0: (3, 123, 0), t1: (1, 10, 0)})
    first = acc.drain(t0)
    assert len(first.records) == 2 and first.payload == 82
    assert acc.gauges() == (133, {t0: (1, 41, 2), t1: (1, 10, 0)})
    acc.complete(first)
    assert acc.gauges() == (51, {t0: (1, 41, 0), t1: (1, 10, 0)})


def test_accumulator_split_keeps_payload():
    acc = Accumulator(batch_size=10_000, linger_ms=0)
    tp = TopicPartition("t", 0)
    for n in (1, 2, 3, 4):
        acc.append(tp, 0, None, b"v" * n, (), object(), now=0)
    batch = acc.drain(tp)
    acc.split(batch)
    assert [b.payload for b in acc.queued(tp)] == [3, 7]
    assert acc.gauges()[0] == 10


# --------------------------------------------------------------------------- end to end

N = 60  # records, spread over P partitions
P = 3
SIZE = 100  # value bytes
K = 4  # records produced later, to partition 0
WAIT = 20.0


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    """One broker for this module's end-to-end tests, with no initial rebalance delay."""
    b = BrokerProcess(tmp_path_factory.mktemp("stats") / "data", BROKER_OPTS).start()
    yield b
    if b.alive():
        assert b.stop() == 0


def arun(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async with AsyncAdmin(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1)])


async def poll_until(consumer: AsyncConsumer, n: int, **kw) -> list:
    got: list = []
    deadline = time.monotonic() + WAIT
    while len(got) < n:
        assert time.monotonic() < deadline, f"{len(got)} of {n} records after {WAIT}s"
        got += await consumer.poll(100, **kw)
    return got


def check_brokers(m: dict, *, first: bool) -> None:
    """What holds of every broker entry: requests counted per API add up, answers <= requests,
    and (in the first metrics() of a client, whose windows start at its creation) one rtt
    sample per answer."""
    assert m["brokers"]
    for b in m["brokers"].values():
        assert sum(b["req"].values()) == b["tx"] and b["rx"] <= b["tx"], b
        assert b["txerrs"] == b["rxerrs"] == b["req_timeouts"] == b["disconnects"] == 0, b
        if first:
            assert b["rtt"]["cnt"] == b["rx"], b
            assert b["rx"] == 0 or 0 < b["rtt"]["min"] <= b["rtt"]["p50"] <= b["rtt"]["max"], b
    assert m["tx"] == sum(b["tx"] for b in m["brokers"].values())
    assert m["rx_bytes"] == sum(b["rxbytes"] for b in m["brokers"].values())


@pytest.mark.interop
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_producer_and_group_consumer_metrics_are_exact(gbroker, topic_name, protocol):
    async def main():
        bs = gbroker.bootstrap
        await create_topic(bs, topic_name, P)
        async with AsyncProducer(bs, linger_ms=5) as producer:
            for i in range(N):
                await producer.send(topic_name, bytes(SIZE), partition=i % P)
            await producer.flush()
            pm = producer.metrics()
            assert pm["type"] == "producer" and pm["msg_cnt"] == pm["msg_size"] == 0
            assert pm["txmsgs"] == N and pm["rxmsgs"] == 0
            # Batches as sent: every value byte plus the v2 framing.
            assert pm["txmsg_bytes"] > N * SIZE and pm["tx_bytes"] > pm["txmsg_bytes"] and pm["rx_bytes"] > 0
            parts = pm["topics"][topic_name]["partitions"]
            assert sorted(parts) == [str(p) for p in range(P)]
            assert [parts[str(p)]["txmsgs"] for p in range(P)] == [N // P] * P
            assert sum(p["txbytes"] for p in parts.values()) == pm["txmsg_bytes"]
            assert all(p["msgq_cnt"] == p["msgs_inflight"] == 0 for p in parts.values())
            batches = pm["topics"][topic_name]["batchcnt"]
            assert batches["sum"] == N and batches["cnt"] >= P
            assert pm["eos"]["idemp_state"] == "Assigned" and pm["eos"]["producer_id"] >= 0
            check_brokers(pm, first=True)
            assert sum(b["req"].get("Produce", 0) for b in pm["brokers"].values()) >= 1

            consumer = AsyncConsumer(bs, group_id=f"g-{topic_name}", group_protocol=protocol,
                                     auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100)
            await consumer.start()
            try:
                consumer.subscribe([topic_name])
                got = await poll_until(consumer, N)
                assert len(got) == N
                await consumer.commit()
                m = consumer.metrics()
                check_brokers(m, first=True)
                assert m["type"] == "consumer" and m["rxmsgs"] == N and m["txmsgs"] == 0
                assert m["rxmsg_bytes"] > N * SIZE and m["rx_bytes"] > m["rxmsg_bytes"] and m["tx_bytes"] > 0
                parts = m["topics"][topic_name]["partitions"]
                for p in range(P):
                    d = parts[str(p)]
                    assert (d["rxmsgs"], d["hi_offset"], d["ls_offset"], d["committed_offset"], d["app_offset"]) == (
                        N // P, N // P, N // P, N // P, N // P), d
                    assert (d["consumer_lag"], d["consumer_lag_stored"], d["desired"], d["fetch_state"]) == (
                        0, 0, True, "active"), d
                cgrp = m["cgrp"]
                assert cgrp["state"] == "up" and cgrp["rebalance_cnt"] >= 1 and cgrp["assignment_size"] == P
                assert m["odradek"]["group_protocol"] == protocol

                # K more records to partition 0, not yet consumed: the lag is K once a fetch
                # has seen the new high watermark; one record handed out makes the stored lag K-1.
                for _ in range(K):
                    await producer.send(topic_name, bytes(SIZE), partition=0)
                await producer.flush()
                first = await poll_until(consumer, 1, max_records=1)
                assert len(first) == 1
                m = consumer.metrics()
                d = m["topics"][topic_name]["partitions"]["0"]
                assert (d["hi_offset"], d["committed_offset"], d["app_offset"]) == (N // P + K, N // P, N // P + 1)
                assert (d["consumer_lag"], d["consumer_lag_stored"], d["fetchq_cnt"]) == (K, K - 1, K - 1), d
                assert m["rxmsgs"] == N + K
                rest = await poll_until(consumer, K - 1)
                assert len(rest) == K - 1
                d = consumer.metrics()["topics"][topic_name]["partitions"]["0"]
                assert (d["consumer_lag"], d["consumer_lag_stored"]) == (K, 0)
                await consumer.commit()
                d = consumer.metrics()["topics"][topic_name]["partitions"]["0"]
                assert (d["consumer_lag"], d["consumer_lag_stored"], d["committed_offset"]) == (0, 0, N // P + K)
                for p in range(1, P):
                    assert m["topics"][topic_name]["partitions"][str(p)]["consumer_lag"] == 0
            finally:
                await consumer.close()
            assert consumer.metrics()["cgrp"]["rebalance_cnt"] >= 2  # the revocation on leaving counts too

    arun(main())


@pytest.mark.interop
def test_join_state_reaches_steady(gbroker, topic_name):
    async def main():
        await create_topic(gbroker.bootstrap, topic_name, 2)
        async with AsyncConsumer(gbroker.bootstrap, group_id=f"g-{topic_name}", group_protocol="consumer",
                                 fetch_max_wait_ms=100) as consumer:
            assert consumer.metrics()["cgrp"]["join_state"] == "init"
            consumer.subscribe([topic_name])
            deadline = time.monotonic() + WAIT
            while consumer.metrics()["cgrp"]["join_state"] != "steady":
                assert time.monotonic() < deadline, consumer.metrics()["cgrp"]
                await consumer.poll(50)
            cgrp = consumer.metrics()["cgrp"]
            assert cgrp["assignment_size"] == 2 and cgrp["rebalance_cnt"] == 1 and cgrp["state"] == "up"

    arun(main())


@pytest.mark.interop
def test_sync_facade_metrics(gbroker, topic_name):
    from odradek.client import Consumer, Producer

    arun(create_topic(gbroker.bootstrap, topic_name, 1))
    with Producer(gbroker.bootstrap, linger_ms=1) as p:
        for _ in range(10):
            p.send(topic_name, b"v" * SIZE)
        p.flush()
        m = p.metrics()
    assert (m["txmsgs"], m["msg_cnt"], m["msg_size"]) == (10, 0, 0)
    with Consumer(gbroker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([(topic_name, 0)])
        got: list = []
        deadline = time.monotonic() + WAIT
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(100)
        m = c.metrics()
    assert len(got) == 10 and m["rxmsgs"] == 10 and "cgrp" not in m
    d = m["topics"][topic_name]["partitions"]["0"]
    # No group: nothing committed, so librdkafka's consumer_lag is unknown; the stored lag is not.
    assert (d["hi_offset"], d["committed_offset"], d["consumer_lag"], d["consumer_lag_stored"]) == (
        10, OFFSET_INVALID, -1, 0)


@pytest.mark.interop
def test_transactional_producer_reports_its_transaction_and_coordinator(gbroker, topic_name):
    async def main():
        await create_topic(gbroker.bootstrap, topic_name, 1)
        async with AsyncProducer(gbroker.bootstrap, transactional_id=f"tx-{topic_name}", linger_ms=1) as p:
            assert p.metrics()["eos"]["txn_state"] == "Init"
            await p.init_transactions()
            p.begin_transaction()
            await p.send(topic_name, b"v")
            m = p.metrics()
            assert (m["eos"]["txn_state"], m["eos"]["txn_may_enq"]) == ("InTransaction", True)
            await p.commit_transaction()
            m = p.metrics()
            eos = m["eos"]
            assert (eos["idemp_state"], eos["txn_state"], eos["txn_may_enq"]) == ("Assigned", "Ready", False)
            assert eos["producer_id"] >= 0 and eos["producer_epoch"] >= 0
            coordinator = m["brokers"]["TxnCoordinator"]
            assert (coordinator["nodeid"], coordinator["source"], coordinator["state"]) == (-1, "logical", "UP")
            assert {"InitProducerId", "AddPartitionsToTxn", "EndTxn"} <= set(coordinator["req"])
            assert m["txmsgs"] == 1

    arun(main())
