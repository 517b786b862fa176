"""KIP-392 on the broker: the leader's preferred read replica, followers serving consumers up
to their own high watermark, the seed's four out-of-range cases as shipped Kafka answers
them, OffsetsForLeaderEpoch capped for consumers, and high watermarks reaching followers
without waiting for new records.

Three brokers (racks a, b, c) on one event loop with a real etcd; requests go through
`handle_frame`, so the wire codecs are part of every check.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.records.codec import Record, encode_batch
from tests.broker.inprocess_cluster import call, start_brokers
from tests.cluster.etcd_fixture import etcd_server, eventually

pytestmark = pytest.mark.timeout(90)

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER = 1, 6


@pytest.fixture
def etcd(tmp_path):
    yield from etcd_server(tmp_path)


async def _brokers(tmp_path, etcd, selector=RACK_AWARE, wait_max_ms=100):
    return await start_brokers(tmp_path, etcd, [(1, "a"), (2, "b"), (3, "c")],
                               replica_fetch_wait_max_ms=wait_max_ms, replica_selector_class=selector)


_call = call


def _produce(topic, value, acks=-1):
    batch = encode_batch([Record(0, 1_700_000_000_000, None, value)])
    return {"transactional_id": None, "acks": acks, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def _fetch(topic, offset, rack="", max_wait_ms=0, replica_id=-1):
    return {"cluster_id": None, "replica_id": replica_id, "max_wait": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": rack}


def _offsets(records: bytes | None) -> list[int]:
    from odradek.records.batch import iter_headers

    return [o for h in iter_headers(records or b"") for o in range(h.base_offset, h.last_offset + 1)]


async def _setup(tmp_path, etcd, records=3, **kw):
    servers = await _brokers(tmp_path, etcd, **kw)
    b1, b2, b3 = (s.broker for s in servers)
    await b1.create_topics_async([("t", 1, {})], {"t": [(1, 2, 3)]})
    await eventually(lambda: all(("t", 0) in b.replicas.following for b in (b2, b3)), timeout=10.0)
    for i in range(records):
        resp = await _call(b1, 0, 9, _produce("t", b"v%d" % i))
        assert resp.responses[0].partition_responses[0].error_code == 0
    await eventually(lambda: all(b.logs.get("t", 0).high_watermark == records for b in (b2, b3)), timeout=10.0)
    return servers, (b1, b2, b3)


def _run(coro):
    asyncio.run(asyncio.wait_for(coro, 80))


async def _stop(servers):
    for s in servers:
        await s.stop()


def test_the_leader_sends_a_consumer_to_the_replica_in_its_rack(tmp_path, etcd):
    async def body():
        servers, (b1, b2, b3) = await _setup(tmp_path, etcd)
        try:
            started = time.monotonic()
            resp = await _call(b1, 1, 11, _fetch("t", 0, rack="b", max_wait_ms=5000))
            part = resp.responses[0].partitions[0]
            # No records, the offsets, and the replica to read from; answered without the long poll.
            assert (part.error_code, part.preferred_read_replica, part.records or b"") == (0, 2, b"")
            assert (part.high_watermark, part.log_start_offset) == (3, 0)
            assert time.monotonic() - started < 2.5
            assert (await _call(b1, 1, 12, _fetch("t", 0, rack="c"))).responses[0].partitions[0].preferred_read_replica == 3
            for rack in ("a", "", "z"):  # the leader's own rack, none, a rack nobody is in: stay
                part = (await _call(b1, 1, 12, _fetch("t", 0, rack=rack))).responses[0].partitions[0]
                assert part.preferred_read_replica == -1 and _offsets(part.records) == [0, 1, 2]
            # Before v11 there is no client metadata: the leader serves it.
            part = (await _call(b1, 1, 10, _fetch("t", 0))).responses[0].partitions[0]
            assert _offsets(part.records) == [0, 1, 2]
            # The follower in rack b serves the consumer it was sent, and never redirects.
            part = (await _call(b2, 1, 11, _fetch("t", 0, rack="b"))).responses[0].partitions[0]
            assert (part.error_code, part.preferred_read_replica, _offsets(part.records)) == (0, -1, [0, 1, 2])
            # An offset no follower holds yet is not redirected: the leader answers it itself.
            part = (await _call(b1, 1, 12, _fetch("t", 3, rack="b"))).responses[0].partitions[0]
            assert part.preferred_read_replica == 2  # 3 == every follower's log end: still held
            part = (await _call(b1, 1, 12, _fetch("t", 4, rack="b"))).responses[0].partitions[0]
            assert (part.error_code, part.preferred_read_replica) == (OFFSET_OUT_OF_RANGE, -1)
        finally:
            await _stop(servers)

    _run(body())


def test_an_out_of_sync_follower_is_never_preferred_and_no_selector_means_the_leader(tmp_path, etcd):
    async def body():
        servers, (b1, b2, b3) = await _setup(tmp_path, etcd)
        try:
            # Broker 2 leaves: the ISR shrinks to {1, 3} and rack b's consumer stays with the leader.
            await servers[1].stop()
            await eventually(lambda: 2 not in b1.replicas.image.partition("t", 0).isr, timeout=15.0)
            await eventually(lambda: 2 not in b1.replicas.leaders[("t", 0)].isr, timeout=15.0)
            part = (await _call(b1, 1, 12, _fetch("t", 0, rack="b"))).responses[0].partitions[0]
            assert part.preferred_read_replica == -1 and _offsets(part.records) == [0, 1, 2]
            assert (await _call(b1, 1, 12, _fetch("t", 0, rack="c"))).responses[0].partitions[0].preferred_read_replica == 3
            b1.replicas.selector = None  # replica.selector.class unset (Kafka's default)
            part = (await _call(b1, 1, 12, _fetch("t", 0, rack="c"))).responses[0].partitions[0]
            assert part.preferred_read_replica == -1 and _offsets(part.records) == [0, 1, 2]
        finally:
            await servers[0].stop()
            await servers[2].stop()

    _run(body())


def test_the_seeds_four_cases_on_a_follower(tmp_path, etcd):
    """KIP-392 "Out of range handling", as shipped Kafka answers them (README, KIP-392)."""

    async def body():
        servers, (b1, b2, b3) = await _setup(tmp_path, etcd, records=4)
        try:
            follower = b2.logs.get("t", 0)
            # Case 1, uncommitted offset: the follower has records its high watermark does not
            # cover yet (here: it learnt only 2 of 4). Served up to its own high watermark; an
            # offset in [HW, LEO] is answered empty with no error, as Kafka does (the seed's
            # OFFSET_NOT_AVAILABLE was not shipped for Fetch).
            follower.update_high_watermark(2)
            part = (await _call(b2, 1, 12, _fetch("t", 0, rack="b"))).responses[0].partitions[0]
            assert (part.error_code, _offsets(part.records), part.high_watermark) == (0, [0, 1], 2)
            part = (await _call(b2, 1, 12, _fetch("t", 3, rack="b"))).responses[0].partitions[0]
            assert (part.error_code, part.records or b"") == (0, b"")
            # Case 2 / case 4, an offset past the follower's log end (unavailable here, or past
            # everything): OFFSET_OUT_OF_RANGE with its log start and high watermark, which
            # sends librdkafka and the Java consumer back to the leader.
            part = (await _call(b2, 1, 12, _fetch("t", 5, rack="b"))).responses[0].partitions[0]
            assert (part.error_code, part.log_start_offset, part.high_watermark) == (OFFSET_OUT_OF_RANGE, 0, 2)
            # Case 3, offset too small: records deleted up to 3 on the leader; the follower
            # follows the leader's log start, and an offset below it is out of range there too.
            deleted = await _call(b1, 21, 2, {"topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "offset": 3}]}], "timeout": 5000})
            assert deleted.topics[0].partitions[0].error_code == 0
            await eventually(lambda: follower.log_start_offset == 3, timeout=10.0)
            part = (await _call(b2, 1, 12, _fetch("t", 1, rack="b"))).responses[0].partitions[0]
            assert (part.error_code, part.log_start_offset) == (OFFSET_OUT_OF_RANGE, 3)
            # ListOffsets and OffsetsForLeaderEpoch stay the leader's.
            lo = await _call(b2, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            assert lo.topics[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER
        finally:
            await _stop(servers)

    _run(body())


def test_offsets_for_leader_epoch_is_capped_at_the_high_watermark_for_consumers(tmp_path, etcd):
    async def body():
        servers, (b1, b2, b3) = await _setup(tmp_path, etcd)
        try:
            # Stop both followers before their absence shrinks the ISR: an acks=1 record is then
            # on the leader but not committed (LEO 4, HW 3).
            await servers[1].stop()
            await servers[2].stop()
            resp = await _call(b1, 0, 9, _produce("t", b"uncommitted", acks=1))
            assert resp.responses[0].partition_responses[0].error_code == 0
            plog = b1.logs.get("t", 0)
            assert (plog.log_end_offset, plog.high_watermark) == (4, 3)

            async def ask(replica_id):
                answer = await _call(b1, 23, 4, {"replica_id": replica_id, "topics": [{"topic": "t", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
                return answer.topics[0].partitions[0].end_offset

            assert await ask(-1) == 3  # a consumer never learns of offsets beyond the high watermark
            assert await ask(2) == 4  # a follower learns the log end
        finally:
            await servers[0].stop()

    _run(body())


def test_a_followers_high_watermark_does_not_wait_for_new_records(tmp_path, etcd):
    """KIP-392 "High watermark propagation": with replica.fetch.wait.max.ms at 5 s, a follower
    that fetched the records learns the high watermark they made at once, not at its next
    fetch that finds data (which, with no more produce, would be 5 s later)."""

    async def body():
        servers, (b1, b2, b3) = await _setup(tmp_path, etcd, records=1, wait_max_ms=5000)
        try:
            await asyncio.sleep(0.5)  # both followers parked in a long poll at the log end
            resp = await _call(b1, 0, 9, _produce("t", b"more", acks=1))
            assert resp.responses[0].partition_responses[0].error_code == 0
            started = time.monotonic()
            await eventually(lambda: all(b.logs.get("t", 0).high_watermark == 2 for b in (b2, b3)), timeout=4.0)
            assert time.monotonic() - started < 4.0
        finally:
            await _stop(servers)

    _run(body())
