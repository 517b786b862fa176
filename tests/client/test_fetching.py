"""The consumer's fetch driver (`odradek.client.fetching`) against scripted fake brokers.

Two fakes: node 1 leads partition t-0 (replicas 1 and 2, racks a and b), node 2 follows.
Each fake answers from a script, so a test can say exactly what the leader and the
follower answer and check what the consumer sends next, and to whom: the KIP-392 and
KIP-320 decisions with real requests on real sockets, with no cluster behind them.
"""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import AsyncConsumer, LogTruncationError, TopicPartition
from odradek.records.codec import encode_batch

from .fakes import ALL_APIS, NO_OPS, FakeBroker

pytestmark = pytest.mark.timeout(30)

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000
VERSIONS = {**ALL_APIS, 23: (3, 4)}


def records(first: int, n: int, epoch: int = 0, prefix: bytes = b"v") -> bytes:
    return encode_batch([(o, TS + o, None, prefix + b"%d" % o) for o in range(first, first + n)], base_offset=first,
                        partition_leader_epoch=epoch)


class Cluster:
    """What the fakes' Metadata says: who is listed, the leader epoch."""

    def __init__(self) -> None:
        self.fakes: list[FakeBroker] = []
        self.listed = {1, 2}
        self.epoch = 0

    def metadata(self, fake, req) -> dict:
        return {"throttle_time": 0, "cluster_id": "fake", "controller_id": 1, "cluster_authorized_operations": NO_OPS,
                "brokers": [{"node_id": f.node_id, "host": f.host, "port": f.port, "rack": "ab"[f.node_id - 1]}
                            for f in self.fakes if f.node_id in self.listed],
                "topics": [{"error_code": 0, "name": "t", "topic_id": fake.topic_id("t"), "is_internal": False,
                            "topic_authorized_operations": NO_OPS,
                            "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1,
                                            "leader_epoch": self.epoch, "replica_nodes": [1, 2], "isr_nodes": [1, 2],
                                            "offline_replicas": []}]}]}


def fetch_answer(req, *, error=ErrorCode.none, data=None, hw=100, preferred=-1) -> dict:
    p = req.body.topics[0].partitions[0]
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": p.partition, "error_code": error, "high_watermark": hw, "last_stable_offset": hw,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": preferred,
         "records": data}]}]}


def fetched(fake) -> list[tuple[int, int, str]]:
    """(fetch offset, current leader epoch, rack) of each Fetch the fake got."""
    return [(int(r.body.topics[0].partitions[0].fetch_offset),
             int(r.body.topics[0].partitions[0].current_leader_epoch), r.body.rack_id) for r in fake.of(1)]


async def start(cluster: Cluster, leader_fetch, follower_fetch, extra=None):
    leader = FakeBroker({3: cluster.metadata, 1: leader_fetch, **(extra or {})}, versions=VERSIONS, node_id=1)
    follower = FakeBroker({3: cluster.metadata, 1: follower_fetch}, versions=VERSIONS, node_id=2)
    cluster.fakes = [leader, follower]
    await leader.start()
    await follower.start()
    return leader, follower


async def read(consumer, n: int, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    got: list = []
    async with asyncio.timeout(timeout):
        while len(got) < n:
            got.extend((r.offset, r.value) for r in await consumer.poll(100))
    return got


def test_offset_out_of_range_from_the_follower_is_retried_at_the_leader_without_a_reset():
    """KIP-392 "Out of range handling" as Java ships it: no ListOffsets, the leader answers."""

    async def body():
        cluster = Cluster()
        redirects = []

        def leader_fetch(fake, req):
            if not redirects:  # the first fetch: read from broker 2
                redirects.append(1)
                return fetch_answer(req, preferred=2)
            return fetch_answer(req, data=records(5, 3), hw=8)

        leader, follower = await start(
            cluster, leader_fetch, lambda fake, req: fetch_answer(req, error=ErrorCode.offset_out_of_range, hw=3))
        try:
            async with AsyncConsumer(leader.bootstrap, client_rack="b", auto_offset_reset="earliest",
                                     fetch_max_wait_ms=50) as consumer:
                consumer.assign([TP])
                consumer.seek(TP, 5)
                assert await read(consumer, 3) == [(5, b"v5"), (6, b"v6"), (7, b"v7")]
            assert fetched(follower) == [(5, 0, "b")]
            assert fetched(leader)[:2] == [(5, 0, "b"), (5, 0, "b")]  # the same offset, at the leader
            assert leader.count(2) == follower.count(2) == 0  # no ListOffsets: no reset
        finally:
            await leader.stop()
            await follower.stop()

    asyncio.run(body())


def test_a_preferred_replica_missing_from_metadata_is_found_by_a_refresh():
    async def body():
        cluster = Cluster()
        cluster.listed = {1}  # metadata does not list broker 2 yet

        def leader_fetch(fake, req):
            cluster.listed = {1, 2}  # by the next Metadata it does
            return fetch_answer(req, preferred=2)

        leader, follower = await start(
            cluster, leader_fetch, lambda fake, req: fetch_answer(req, data=records(0, 2), hw=2))
        try:
            async with AsyncConsumer(leader.bootstrap, client_rack="b", auto_offset_reset="earliest",
                                     fetch_max_wait_ms=50) as consumer:
                consumer.assign([TP])
                consumer.seek(TP, 0)
                metadata_before = leader.count(3) + follower.count(3)
                assert await read(consumer, 2) == [(0, b"v0"), (1, b"v1")]
                assert leader.count(3) + follower.count(3) > metadata_before
            assert fetched(follower)[0] == (0, 0, "b")
        finally:
            await leader.stop()
            await follower.stop()

    asyncio.run(body())


@pytest.mark.parametrize("policy", ["none", "earliest"])
def test_a_new_leader_epoch_is_validated_and_a_truncation_found(policy):
    """KIP-320: records 0-4 read in epoch 0; metadata then says epoch 1 and the leader fences
    epoch 0; OffsetsForLeaderEpoch says epoch 0 ends at 3. With no reset policy poll raises
    LogTruncationError (Java's LogTruncationException); with one the position moves to 3."""

    async def body():
        cluster = Cluster()
        asked = []

        def leader_fetch(fake, req):
            offset, epoch, _ = fetched(fake)[-1]
            if epoch < cluster.epoch:
                return fetch_answer(req, error=ErrorCode.fenced_leader_epoch)
            if offset == 0:
                return fetch_answer(req, data=records(0, 5, epoch=0), hw=5)
            if offset == 3:
                return fetch_answer(req, data=records(3, 2, epoch=1, prefix=b"w"), hw=5)
            return fetch_answer(req, hw=5)

        def offsets_for_leader_epoch(fake, req):
            p = req.body.topics[0].partitions[0]
            asked.append((int(req.body.replica_id), int(p.current_leader_epoch), int(p.leader_epoch)))
            return {"throttle_time": 0, "topics": [{"topic": "t", "partitions": [
                {"error_code": 0, "partition": 0, "leader_epoch": 0, "end_offset": 3}]}]}

        leader, follower = await start(cluster, leader_fetch, lambda fake, req: fetch_answer(req),
                                       extra={23: offsets_for_leader_epoch})
        try:
            async with AsyncConsumer(leader.bootstrap, auto_offset_reset=policy, fetch_max_wait_ms=50) as consumer:
                consumer.assign([TP])
                consumer.seek(TP, 0)
                assert [o for o, _ in await read(consumer, 5)] == [0, 1, 2, 3, 4]
                cluster.epoch = 1  # a new leader epoch (the same node, for the fakes' sake)
                if policy == "none":
                    with pytest.raises(LogTruncationError) as info:
                        await read(consumer, 1)
                    assert info.value.divergent_offsets == {TP: 3}
                    assert await consumer.position(TP) == 5  # left where it was
                    consumer.seek(TP, 3)
                got = await read(consumer, 2)
                assert got == [(3, b"w3"), (4, b"w4")]
            assert asked[0] == (-1, 1, 0)  # a consumer's question: where does epoch 0 end, under epoch 1
            assert (3, 1, "") in fetched(leader)
        finally:
            await leader.stop()
            await follower.stop()

    asyncio.run(body())


@pytest.mark.parametrize("code", [ErrorCode.not_leader_or_follower, ErrorCode.offset_not_available,
                                  ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch],
                         ids=lambda c: c.name)
def test_a_follower_that_cannot_serve_sends_the_consumer_back_to_the_leader(code):
    """Java and librdkafka: back to the leader, with a metadata refresh (here the metadata
    does not change, so only going back to the leader gets the records)."""

    async def body():
        cluster = Cluster()

        def leader_fetch(fake, req):
            if len(fake.of(1)) == 1:
                return fetch_answer(req, preferred=2)
            return fetch_answer(req, data=records(0, 2), hw=2)

        leader, follower = await start(cluster, leader_fetch, lambda fake, req: fetch_answer(req, error=code))
        try:
            async with AsyncConsumer(leader.bootstrap, client_rack="b", fetch_max_wait_ms=50) as consumer:
                consumer.assign([TP])
                consumer.seek(TP, 0)
                metadata_before = leader.count(3) + follower.count(3)
                assert await read(consumer, 2) == [(0, b"v0"), (1, b"v1")]
                assert leader.count(3) + follower.count(3) > metadata_before
            assert len(fetched(follower)) == 1
        finally:
            await leader.stop()
            await follower.stop()

    asyncio.run(body())


def test_offset_past_the_followers_high_watermark_is_validated_with_the_leader():
    """KIP-392 case 4 ("offset too large"): the consumer read 0-4 from the follower; the
    follower then says 5 is out of range with a high watermark of 3 (it is out of sync). The
    position is checked with the leader by OffsetsForLeaderEpoch (KIP-320), metadata is
    refreshed, and the leader serves 5 onwards: no reset, nothing skipped."""

    async def body():
        cluster = Cluster()
        asked = []

        def leader_fetch(fake, req):
            offset = fetched(fake)[-1][0]
            if offset == 0:
                return fetch_answer(req, preferred=2)
            return fetch_answer(req, data=records(5, 2), hw=7)

        def follower_fetch(fake, req):
            if fetched(fake)[-1][0] == 0:
                return fetch_answer(req, data=records(0, 5), hw=5)
            return fetch_answer(req, error=ErrorCode.offset_out_of_range, hw=3)

        def offsets_for_leader_epoch(fake, req):
            p = req.body.topics[0].partitions[0]
            asked.append((int(p.current_leader_epoch), int(p.leader_epoch)))
            return {"throttle_time": 0, "topics": [{"topic": "t", "partitions": [
                {"error_code": 0, "partition": 0, "leader_epoch": 0, "end_offset": 7}]}]}

        leader, follower = await start(cluster, leader_fetch, follower_fetch, extra={23: offsets_for_leader_epoch})
        try:
            async with AsyncConsumer(leader.bootstrap, client_rack="b", auto_offset_reset="earliest",
                                     fetch_max_wait_ms=50) as consumer:
                consumer.assign([TP])
                consumer.seek(TP, 0)
                assert [o for o, _ in await read(consumer, 7)] == list(range(7))
            assert [f[0] for f in fetched(follower)][:2] == [0, 5]
            assert asked == [(0, 0)]  # where does epoch 0 end? (7: offset 5 is valid)
            assert (5, 0, "b") in fetched(leader)
            assert leader.count(2) == follower.count(2) == 0  # no reset
        finally:
            await leader.stop()
            await follower.stop()

    asyncio.run(body())
