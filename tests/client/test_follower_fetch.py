"""KIP-392 and KIP-320 in odradek's consumer, against three real brokers.

Three in-process brokers in racks a, b and c with a real etcd and the rack-aware replica
selector; the consumer is `AsyncConsumer` with client_rack="b". Each broker's
`handle_request` is wrapped (`Traffic`) to count the Fetch bytes it serves to consumers
and to see the epochs consumers send: the broker code is not touched.

Shown here: a rack-b consumer reads everything and broker 2 (rack b) serves nearly all of
it; and the consumer goes on, with no record skipped or repeated, through the follower's
crash, an ISR shrink, a leader change and a truncation (an unclean election).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict

import pytest

from odradek.broker.broker import Broker
from odradek.broker.handlers.fetch import replica_of
from odradek.broker.server import BrokerServer
from odradek.client import AsyncConsumer, TopicPartition
from odradek.config import BrokerConfig
from odradek.records.codec import Record, encode_batch
from tests.cluster.etcd_fixture import etcd_server, eventually
from tests.wire import parse_response, request_frame

pytestmark = pytest.mark.timeout(120)

TP = TopicPartition("t", 0)
FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23


@pytest.fixture
def etcd(tmp_path):
    yield from etcd_server(tmp_path)


class Traffic:
    """What each broker served to consumers (replica id -1), seen at `handle_request`."""

    def __init__(self) -> None:
        self.bytes: Counter[int] = Counter()
        self.fetch_epochs: dict[int, list[int]] = defaultdict(list)  # node -> current_leader_epoch of each Fetch
        self.validations: list[tuple[int, int, int]] = []  # (node, current_leader_epoch, leader_epoch)

    def watch(self, broker: Broker) -> None:
        node, handle = broker.config.node_id, broker.handle_request

        async def counted(request):
            out = await handle(request)
            if request.api_key == FETCH and replica_of(request)[0] < 0:
                self.bytes[node] += len(out or b"")
                self.fetch_epochs[node].extend(
                    int(p.current_leader_epoch) for t in request.body.topics for p in t.partitions)
            elif request.api_key == OFFSET_FOR_LEADER_EPOCH and request.field("replica_id", -2) == -1:
                self.validations.extend((node, int(p.current_leader_epoch), int(p.leader_epoch))
                                        for t in request.body.topics for p in t.partitions)
            return out

        broker.handle_request = counted

    def split(self) -> dict[int, float]:
        total = sum(self.bytes.values()) or 1
        return {n: round(self.bytes[n] / total, 3) for n in sorted(self.bytes)}


def _config(tmp_path, etcd, node, rack, **kw) -> BrokerConfig:
    cfg = BrokerConfig(node_id=node, rack=rack, listen_port=0, data_dir=tmp_path / f"b{node}", metadata_url=etcd.url,
                       replica_fetch_wait_max_ms=100, replica_selector_class="rack-aware",
                       **{"broker_session_timeout_ms": 2000, **kw})
    cfg.extra["offsets.topic.num.partitions"] = "1"
    return cfg


async def _cluster(tmp_path, etcd, traffic, replicas=(1, 2, 3), configs=None, **kw):
    servers = []
    for node, rack in ((1, "a"), (2, "b"), (3, "c")):
        server = BrokerServer(Broker(_config(tmp_path, etcd, node, rack, **kw)))
        await server.start()
        traffic.watch(server.broker)
        servers.append(server)
    await servers[0].broker.create_topics_async([("t", 1, dict(configs or {}))], {"t": [replicas]})
    await eventually(lambda: all(("t", 0) in s.broker.replicas.following
                                 for s in servers if s.broker.config.node_id != replicas[0]), timeout=15.0)
    return servers


async def _produce(broker, values, acks=-1, batch=100):
    """Write `values` through `broker` (the leader), `batch` records per batch."""
    for i in range(0, len(values), batch):
        records = encode_batch([Record(j, 1_700_000_000_000, None, v) for j, v in enumerate(values[i:i + batch])])
        body = {"transactional_id": None, "acks": acks, "timeout": 10_000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}
        raw = await broker.handle_frame(request_frame(0, 9, body, correlation_id=7)[4:])
        part = parse_response(0, 9, raw)[1].responses[0].partition_responses[0]
        assert part.error_code == 0, part


def _values(prefix: str, start: int, count: int) -> list[bytes]:
    return [b"%s%05d" % (prefix.encode(), i) + b"." * 90 for i in range(start, start + count)]


async def _hw(brokers, n):
    await eventually(lambda: all(b.logs.get("t", 0).high_watermark == n for b in brokers), timeout=15.0)


def _consumer(servers, **kw) -> AsyncConsumer:
    opts = {"client_rack": "b", "auto_offset_reset": "earliest", "fetch_max_wait_ms": 200,
            "max_partition_fetch_bytes": 16_384, "request_timeout_ms": 10_000, **kw}
    # Every broker bootstraps: in the truncation test all the brokers a metadata answer
    # last named go away, and only a bootstrap address leads to the one that comes back.
    return AsyncConsumer([f"127.0.0.1:{s.port}" for s in servers], **opts)


async def _read(consumer, got: list, until: int, timeout: float = 20.0, max_records: int | None = None) -> None:
    """Poll into `got` ((offset, value) pairs) until it holds `until` records."""
    deadline = time.monotonic() + timeout
    while len(got) < until:
        assert time.monotonic() < deadline, f"read {len(got)} of {until} records in {timeout} s"
        got.extend((r.offset, r.value) for r in await consumer.poll(200, max_records=max_records))


async def _stop(servers):
    for s in servers:
        if not s.broker.closed:
            await s.stop()


def _run(coro):
    asyncio.run(asyncio.wait_for(coro, 110))


def test_a_rack_b_consumer_reads_everything_and_mostly_from_broker_2(tmp_path, etcd):
    async def body():
        traffic = Traffic()
        servers = await _cluster(tmp_path, etcd, traffic)
        try:
            values = _values("v", 0, 2000)
            await _produce(servers[0].broker, values)
            await _hw([s.broker for s in servers], 2000)
            consumer = _consumer(servers)
            async with consumer:
                consumer.assign([TP])
                got: list = []
                await _read(consumer, got, 2000)
            assert got == list(enumerate(values))  # every record once, in order
            rack_aware = traffic.split()
            # The leader answered the first fetch (and each after a lease) with a redirect
            # and no records; broker 2 served the data.
            assert rack_aware.get(2, 0) > 0.9, rack_aware
            # KIP-320: every Fetch names the leader epoch the consumer knows (0), not -1.
            assert {e for es in traffic.fetch_epochs.values() for e in es} == {0}

            rack_aware_bytes = dict(traffic.bytes)
            traffic.bytes.clear()
            async with _consumer(servers, client_rack=None) as plain:  # no rack: the leader serves
                plain.assign([TP])
                got = []
                await _read(plain, got, 2000)
            leader_only = traffic.split()
            assert leader_only.get(1, 0) > 0.99, leader_only
            print(f"\nconsumer Fetch bytes per broker: client_rack='b' {rack_aware} of {rack_aware_bytes}; "
                  f"no rack {leader_only} of {dict(traffic.bytes)}")
        finally:
            await _stop(servers)

    _run(body())


def test_the_followers_crash_sends_the_consumer_back_to_the_leader_at_once(tmp_path, etcd):
    """Broker 2 dies without a word (its registration outlives it by the session timeout,
    during which the leader still names it): the consumer reads the rest from the leader,
    before the cluster even knows broker 2 is gone, with nothing skipped or repeated."""

    async def body():
        traffic = Traffic()
        servers = await _cluster(tmp_path, etcd, traffic, broker_session_timeout_ms=10_000)
        b1, b2, _ = (s.broker for s in servers)
        try:
            values = _values("v", 0, 2000)
            await _produce(b1, values)
            await _hw([s.broker for s in servers], 2000)
            async with _consumer(servers) as consumer:
                consumer.assign([TP])
                got: list = []
                await _read(consumer, got, 500, max_records=100)
                assert traffic.bytes[2] > traffic.bytes[1]  # reading from the rack-b replica
                served_by_leader = traffic.bytes[1]
                await b2.metadata._abandon()  # a crash: the etcd lease is not revoked
                await servers[1].stop()
                await _read(consumer, got, 2000)
                # Read from the leader while broker 2 was still registered (and in the ISR).
                assert 2 in b1.replicas.image.brokers
                assert traffic.bytes[1] - served_by_leader > 100_000
                assert got == list(enumerate(values))
                # Once the cluster drops broker 2, new records flow as before.
                await eventually(lambda: 2 not in b1.replicas.image.partition("t", 0).isr, timeout=30.0)
                more = _values("w", 2000, 200)
                await _produce(b1, more)
                await _read(consumer, got, 2200)
                assert got == list(enumerate(values + more))
        finally:
            await _stop(servers)

    _run(body())


def test_an_isr_shrink_seen_in_metadata_takes_the_consumer_off_the_lagging_follower(tmp_path, etcd):
    """Broker 2 stops replicating (alive, registered, still serving): the leader drops it from
    the ISR; the consumer learns it from its periodic metadata refresh (metadata_max_age_ms)
    long before its lease on broker 2 ends, and reads the new records from the leader."""

    async def body():
        traffic = Traffic()
        servers = await _cluster(tmp_path, etcd, traffic, replica_lag_time_max_ms=1500)
        b1, b2, b3 = (s.broker for s in servers)
        try:
            values = _values("v", 0, 300)
            await _produce(b1, values)
            await _hw([b1, b2, b3], 300)
            async with _consumer(servers, metadata_max_age_ms=1000) as consumer:
                consumer.fetching.replicas.lease_ms = 600_000  # only the ISR change may end it
                consumer.assign([TP])
                got: list = []
                await _read(consumer, got, 300)
                assert consumer.positions.parts[TP].preferred == 2
                b2.replicas._fetchers.fetchers[1]._ready = list  # broker 2's replication stalls
                await asyncio.sleep(0.5)  # once its fetch in flight (a 100 ms long poll) is answered
                more = _values("w", 300, 300)
                await _produce(b1, more, acks=1)
                await eventually(lambda: 2 not in b1.replicas.image.partition("t", 0).isr, timeout=30.0)
                before = dict(traffic.bytes)
                await _read(consumer, got, 600)
                assert got == list(enumerate(values + more))
                assert b2.logs.get("t", 0).log_end_offset == 300  # none of it could come from broker 2
                assert traffic.bytes[1] - before.get(1, 0) > 30_000
        finally:
            await _stop(servers)

    _run(body())


def test_a_leader_change_is_validated_and_the_consumer_returns_to_its_rack(tmp_path, etcd):
    """Leader 1 goes; broker 3 leads at epoch 1. The follower fences the consumer's epoch 0,
    the consumer validates its position with the new leader (OffsetsForLeaderEpoch for epoch
    0, KIP-320) and is sent back to broker 2 by it, fetching with epoch 1."""

    async def body():
        traffic = Traffic()
        servers = await _cluster(tmp_path, etcd, traffic, replicas=(1, 3, 2))
        b1, b2, b3 = (s.broker for s in servers)
        try:
            values = _values("v", 0, 300)
            await _produce(b1, values)
            await _hw([b1, b2, b3], 300)
            async with _consumer(servers) as consumer:
                consumer.assign([TP])
                got: list = []
                await _read(consumer, got, 300)
                await servers[0].stop()
                await eventually(lambda: b3.replicas.image.leader_of("t", 0) == 3, timeout=15.0)
                assert b3.replicas.image.partition("t", 0).leader_epoch == 1
                await eventually(lambda: ("t", 0) in b2.replicas.following, timeout=15.0)
                traffic.bytes.clear()
                more = _values("w", 300, 600)
                await _produce(b3, more)
                await _read(consumer, got, 900)
                assert got == list(enumerate(values + more))
                assert (3, 1, 0) in traffic.validations  # asked the new leader where epoch 0 ends
                assert traffic.fetch_epochs[2][-1] == 1  # broker 2 is fetched from under the new epoch
                assert traffic.bytes[2] > traffic.bytes[3], traffic.split()
        finally:
            await _stop(servers)

    _run(body())


def test_a_truncated_log_moves_the_position_back_to_where_it_diverged(tmp_path, etcd):
    """An unclean election: the consumer read offsets 0-19, of which 10-19 existed only on
    brokers 1 and 2; both go, and broker 3 (which has 0-9) leads at a new epoch. KIP-320: the
    consumer asks broker 3 where epoch 0 ends (10 < its position 20), moves back to 10 and
    reads the new 10-14 there: nothing the log now holds is skipped, nothing read twice but
    the offsets rewritten. Without validation the position 20 is out of range on the new
    leader and the reset policy (earliest) re-reads 0-9."""

    async def body():
        traffic = Traffic()
        servers = await _cluster(tmp_path, etcd, traffic, configs={"unclean.leader.election.enable": "true"})
        b1, b2, b3 = (s.broker for s in servers)
        try:
            old = _values("v", 0, 10)
            await _produce(b1, old)
            await _hw([b1, b2, b3], 10)
            async with _consumer(servers, request_timeout_ms=5000) as consumer:
                consumer.assign([TP])
                got: list = []
                await _read(consumer, got, 10)
                await servers[2].stop()  # broker 3 leaves with offsets 0-9
                await eventually(lambda: b1.replicas.image.partition("t", 0).isr == (1, 2), timeout=15.0)
                lost = _values("v", 10, 10)
                await _produce(b1, lost)
                await _read(consumer, got, 20)
                assert consumer.positions.parts[TP].position == 20
                await servers[1].stop()
                await servers[0].stop()
                # Broker 3 comes back on its old port and, the only one alive, leads uncleanly.
                servers[2] = BrokerServer(Broker(servers[2].broker.config))
                await servers[2].start()
                b3 = servers[2].broker
                traffic.watch(b3)
                await eventually(lambda: b3.replicas.image.leader_of("t", 0) == 3, timeout=20.0)
                epoch = b3.replicas.image.partition("t", 0).leader_epoch
                assert epoch >= 1
                new = _values("w", 10, 5)
                await _produce(b3, new, acks=1)
                await _read(consumer, got, 25, timeout=40.0)
                assert got == list(enumerate(old + lost)) + list(enumerate(new, start=10))
                assert (3, epoch, 0) in traffic.validations
        finally:
            await _stop(servers)

    _run(body())
