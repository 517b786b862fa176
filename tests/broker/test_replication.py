"""The broker's replication drivers (replica_manager, replica_fetcher) and the handlers'
cluster paths, with two brokers on one event loop, a real etcd and loopback sockets.

Each test drives requests through `handle_frame` (the wire codecs included) and checks
outcomes: where records are, what the high watermark is, which error a client gets.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.records.codec import Record, encode_batch
from tests.broker.inprocess_cluster import call, start_brokers
from tests.cluster.etcd_fixture import etcd_server, eventually

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def etcd(tmp_path):
    yield from etcd_server(tmp_path)


async def _brokers(tmp_path, etcd, n=2, **config):
    return await start_brokers(tmp_path, etcd, [(node, None) for node in range(1, n + 1)], **config)


_call = call


def _produce_body(topic, records, acks=-1, timeout_ms=5000):
    batch = encode_batch([Record(i, 1_700_000_000_000 + i, None, v) for i, v in enumerate(records)])
    return {"transactional_id": None, "acks": acks, "timeout": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def _fetch_body(topic, offset, epoch=-1, replica_id=-1):
    return {"cluster_id": None, "replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": epoch,
                                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _run(coro):
    asyncio.run(asyncio.wait_for(coro, 50))


def test_acks_all_is_answered_once_the_follower_has_the_batch(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd)
        b1, b2 = (s.broker for s in servers)
        try:
            await b1.create_topics_async([("r", 1, {"min.insync.replicas": "2"})], {"r": [(1, 2)]})
            await eventually(lambda: ("r", 0) in b2.replicas.following, timeout=10.0)
            resp = await _call(b1, 0, 9, _produce_body("r", [b"a", b"b", b"c"]))
            part = resp.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, 0)
            # Answered only after the high watermark passed the batch: the follower has it.
            follower = b2.logs.get("r", 0)
            assert follower.log_end_offset == 3
            leader = b1.logs.get("r", 0)
            assert leader.high_watermark == 3
            assert leader.read(0, 1 << 20).data == follower.read(0, 1 << 20, max_offset=3).data
            await eventually(lambda: follower.high_watermark == 3, timeout=10.0)  # learnt from the next fetch response
        finally:
            for s in servers:
                await s.stop()

    _run(body())


def test_followers_refuse_producers_and_old_fetchers_and_epochs_are_checked(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd)
        b1, b2 = (s.broker for s in servers)
        try:
            await b1.create_topics_async([("e", 1, {})], {"e": [(1, 2)]})
            await eventually(lambda: ("e", 0) in b2.replicas.following, timeout=10.0)
            resp = await _call(b2, 0, 10, _produce_body("e", [b"x"]))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == 6  # NOT_LEADER_OR_FOLLOWER
            assert part.current_leader.leader_id == 1  # v10 tells the client where to go
            assert [e.node_id for e in resp.node_endpoints] == [1]
            # A consumer Fetch before v11 (no client metadata) is the leader's alone (KIP-392);
            # from v11 the follower serves it (tests/broker/test_follower_fetch.py).
            fetch = await _call(b2, 1, 10, _fetch_body("e", 0))
            assert fetch.responses[0].partitions[0].error_code == 6
            current = await _call(b1, 1, 12, _fetch_body("e", 0, epoch=0))
            assert current.responses[0].partitions[0].error_code == 0
            future = await _call(b1, 1, 12, _fetch_body("e", 0, epoch=5))
            assert future.responses[0].partitions[0].error_code == 75  # UNKNOWN_LEADER_EPOCH
        finally:
            for s in servers:
                await s.stop()

    _run(body())


def test_a_new_leader_fences_the_old_epoch_and_answers_offsets_for_leader_epoch(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd)
        b1, b2 = (s.broker for s in servers)
        try:
            await b1.create_topics_async([("f", 1, {})], {"f": [(1, 2)]})
            await eventually(lambda: ("f", 0) in b2.replicas.following, timeout=10.0)
            for _ in range(2):
                await _call(b1, 0, 9, _produce_body("f", [b"1", b"2"]))
            await eventually(lambda: b2.logs.get("f", 0).log_end_offset == 4, timeout=10.0)
            # Broker 1 goes away without a word: its lease expires, the controller moves the lead.
            await servers[0].broker.metadata._abandon()
            await eventually(lambda: b2.replicas.image.leader_of("f", 0) == 2, timeout=15)
            assert b2.replicas.image.partition("f", 0).leader_epoch == 1
            old = await _call(b2, 1, 12, _fetch_body("f", 0, epoch=0))
            assert old.responses[0].partitions[0].error_code == 74  # FENCED_LEADER_EPOCH
            await _call(b2, 0, 9, _produce_body("f", [b"3"], acks=1))
            answer = await _call(b2, 23, 4, {"replica_id": -1, "topics": [{"topic": "f", "partitions": [
                {"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0}]}]})
            p = answer.topics[0].partitions[0]
            assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 4)  # epoch 0 ended where epoch 1 began
            lo = await _call(b2, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "f", "partitions": [{"partition_index": 0, "current_leader_epoch": 1, "timestamp": -1}]}]})
            part = lo.topics[0].partitions[0]
            assert (part.error_code, part.offset, part.leader_epoch) == (0, 5, 1)
        finally:
            for s in servers[1:]:
                await s.stop()
            servers[0].broker.close()

    _run(body())


def test_not_enough_replicas_before_the_append(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd)
        b1, b2 = (s.broker for s in servers)
        try:
            await b1.create_topics_async([("m", 1, {"min.insync.replicas": "2"})], {"m": [(1, 2)]})
            await eventually(lambda: ("m", 0) in b2.replicas.following, timeout=10.0)
            await servers[1].stop()  # a clean stop revokes the lease: the ISR shrinks to the leader
            await eventually(lambda: b1.replicas.image.partition("m", 0).isr == (1,), timeout=15)
            resp = await _call(b1, 0, 9, _produce_body("m", [b"x"]))
            assert resp.responses[0].partition_responses[0].error_code == 19  # NOT_ENOUGH_REPLICAS
            assert b1.logs.get("m", 0).log_end_offset == 0  # refused before the append
            ok = await _call(b1, 0, 9, _produce_body("m", [b"y"], acks=1))
            assert ok.responses[0].partition_responses[0].error_code == 0
        finally:
            await servers[0].stop()

    _run(body())


def test_a_v15_follower_fetch_names_itself_in_replica_state_and_min_isr_changes_apply(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd, n=3)
        b1 = servers[0].broker
        try:
            await b1.create_topics_async([("v", 1, {"min.insync.replicas": "3"})], {"v": [(1, 2, 3)]})
            await eventually(lambda: all(("v", 0) in s.broker.replicas.following for s in servers[1:]), timeout=10.0)
            await _call(b1, 0, 9, _produce_body("v", [b"a", b"b"], acks=1))
            await eventually(lambda: b1.logs.get("v", 0).high_watermark == 2, timeout=10.0)
            # Broker 3 leaves (its own fetcher stops); then a Fetch v15 naming replica 3 in
            # ReplicaState (KIP-903) is the only thing that can move its log end on the leader.
            await servers[2].stop()
            await eventually(lambda: b1.replicas.image.partition("v", 0).isr == (1, 2), timeout=15)
            assert b1.replicas.leaders[("v", 0)].followers[3].log_end_offset != 1
            body = _fetch_body("v", 1, epoch=0)
            del body["replica_id"]
            body["replica_state"] = {"replica_id": 3, "replica_epoch": -1}
            body["topics"][0]["topic_id"] = b1.metadata.get("v").topic_id
            await _call(b1, 1, 15, body)
            assert b1.replicas.leaders[("v", 0)].followers[3].log_end_offset == 1
            # min.insync.replicas lowered by IncrementalAlterConfigs: the leader applies it at once.
            refused = await _call(b1, 0, 9, _produce_body("v", [b"c"]))
            assert refused.responses[0].partition_responses[0].error_code == 19
            await _call(b1, 44, 1, {"validate_only": False, "resources": [{"resource_type": 2, "resource_name": "v",
                        "configs": [{"name": "min.insync.replicas", "config_operation": 0, "value": "2"}]}]})
            assert b1.replicas.leaders[("v", 0)].min_isr == 2
            ok = await _call(b1, 0, 9, _produce_body("v", [b"c"]))
            assert ok.responses[0].partition_responses[0].error_code == 0
        finally:
            for s in servers[:2]:
                await s.stop()

    _run(body())


def test_auto_creation_beyond_the_brokers_is_refused_without_a_traceback(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd, default_replication_factor=3)
        b1 = servers[0].broker
        try:
            await eventually(lambda: len(b1.replicas.image.brokers) == 2, timeout=10.0)
            md = await _call(b1, 3, 12, {"topics": [{"name": "auto3", "topic_id": None}],
                                         "allow_auto_topic_creation": True,
                                         "include_topic_authorized_operations": False})
            assert md.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: nothing was created
            assert b1.metadata.get("auto3") is None and b1.internal_errors == 0
        finally:
            for s in servers:
                await s.stop()

    _run(body())
