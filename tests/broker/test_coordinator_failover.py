"""Group coordinator fail-over between brokers (issue 18), in process: three brokers on one
event loop with a real etcd; requests go through `handle_frame` (wire codecs included).

What is checked: the offsets topic waits for enough brokers before it is created at its
replication factor; coordinator answers are released only once the high watermark passes
their records, time out COORDINATOR_NOT_AVAILABLE when it does not, and a write refused
for want of in-sync replicas keeps nothing; a KIP-848 group keeps its member epochs,
assignments and committed offsets when its coordinator moves to another broker, and the
deposed coordinator acknowledges nothing; a broker whose etcd lease may have lapsed serves
no coordinator request until etcd answers again.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.cluster.names import CONSUMER_OFFSETS
from tests.broker.inprocess_cluster import call, start_brokers
from tests.cluster.etcd_fixture import etcd_server, eventually

pytestmark = pytest.mark.timeout(120)

COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 15, 16


@pytest.fixture
def etcd(tmp_path):
    yield from etcd_server(tmp_path)


async def _brokers(tmp_path, etcd, n=3, **extra):
    return await start_brokers(tmp_path, etcd, [(node, None) for node in range(1, n + 1)], extra)


_call = call


def _hb_body(member, epoch, topics=("t",), owned=None, group="g", instance_id=None):
    return {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance_id, "rack_id": None,
            "rebalance_timeout": 30_000 if epoch == 0 else -1,
            "subscribed_topic_names": list(topics) if epoch == 0 else None, "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": owned if epoch == 0 or owned is not None else None}


def _commit_body(member, epoch, offsets, group="g"):
    return {"group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member, "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t, p, o in offsets]}


async def _commit(broker, member, epoch, offsets, group="g"):
    resp = await _call(broker, 8, 9, _commit_body(member, epoch, offsets, group))
    return [int(p.error_code) for t in resp.topics for p in t.partitions]


async def _fetch_offsets(broker, group="g", topic="t", partitions=(0, 1)):
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}], "require_stable": False}
    resp = await _call(broker, 9, 7, body)
    assert resp.error_code == 0, resp
    return {p.partition_index: int(p.committed_offset) for t in resp.topics for p in t.partitions}


def _leader(broker) -> int:
    return broker.replicas.image.leader_of(CONSUMER_OFFSETS, 0)


def _run(coro):
    asyncio.run(asyncio.wait_for(coro, 110))


async def _stop(servers):
    for s in servers:
        await s.stop()


async def _ready(tmp_path, etcd, **extra):
    servers = await _brokers(tmp_path, etcd, **extra)
    brokers = [s.broker for s in servers]
    await eventually(lambda: brokers[0].metadata.get(CONSUMER_OFFSETS) is not None, timeout=10.0)
    await eventually(lambda: all(len(b.replicas.image.partition(CONSUMER_OFFSETS, 0).isr) == 3 for b in brokers),
                     timeout=10.0)
    coord = next(b for b in brokers if b.config.node_id == _leader(b))
    await eventually(lambda: 0 in coord.coordinator.runtime.shards, timeout=10.0)
    return servers, brokers, coord


def test_the_offsets_topic_waits_for_enough_brokers_and_gets_its_replication_factor(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd, n=1)
        b1 = servers[0].broker
        try:
            assert b1.metadata.get(CONSUMER_OFFSETS) is None  # one broker of the three it wants
            servers += await start_brokers(tmp_path, etcd, [(2, None), (3, None)])
            await eventually(lambda: b1.metadata.get(CONSUMER_OFFSETS) is not None, timeout=10.0)
            assert len(b1.replicas.image.partition(CONSUMER_OFFSETS, 0).replicas) == 3
        finally:
            await _stop(servers)

    _run(body())


def test_find_coordinator_creates_the_offsets_topic_with_the_brokers_there_are(tmp_path, etcd):
    async def body():
        servers = await _brokers(tmp_path, etcd, n=2)
        b1, b2 = (s.broker for s in servers)
        try:
            assert b1.metadata.get(CONSUMER_OFFSETS) is None
            resp = await _call(b2, 10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            assert resp.coordinators[0].error_code == 0
            assert resp.coordinators[0].node_id == _leader(b2)
            assert len(b2.replicas.image.partition(CONSUMER_OFFSETS, 0).replicas) == 2  # min(3, brokers)
        finally:
            await _stop(servers)

    _run(body())


def test_answers_wait_for_the_high_watermark_and_time_out_when_it_is_stuck(tmp_path, etcd, monkeypatch):
    async def body():
        # The write timeout is long enough for the first stall (0.8 s plus a read) to end
        # before it, under load too; the second stall outlasts it.
        servers, brokers, coord = await _ready(tmp_path, etcd, **{"offsets.commit.timeout.ms": "4000"})
        try:
            await coord.create_topics_async([("t", 2, {})])
            assert await _commit(coord, "", -1, [("t", 0, 5)]) == [0]
            assert (await _fetch_offsets(coord))[0] == 5
            # The followers stop counting: the high watermark of the offsets partition stays.
            stuck = []
            real = coord.replicas.follower_fetched
            monkeypatch.setattr(coord.replicas, "follower_fetched",
                                lambda tp, *a, **k: stuck.append(tp) if tp[0] == CONSUMER_OFFSETS else real(tp, *a, **k))
            pending = asyncio.ensure_future(_commit(coord, "", -1, [("t", 0, 6)]))
            await asyncio.sleep(0.8)
            assert not pending.done(), "answered before the record was committed"
            assert (await _fetch_offsets(coord))[0] == 5  # OffsetFetch reads at the committed offset
            monkeypatch.setattr(coord.replicas, "follower_fetched", real)
            assert await asyncio.wait_for(pending, 5) == [0]
            assert (await _fetch_offsets(coord))[0] == 6
            # Stuck for longer than offsets.commit.timeout.ms: COORDINATOR_NOT_AVAILABLE.
            monkeypatch.setattr(coord.replicas, "follower_fetched",
                                lambda tp, *a, **k: None if tp[0] == CONSUMER_OFFSETS else real(tp, *a, **k))
            assert await asyncio.wait_for(_commit(coord, "", -1, [("t", 1, 9)]), 10) == [COORDINATOR_NOT_AVAILABLE]
        finally:
            await _stop(servers)

    _run(body())


def test_a_write_without_enough_in_sync_replicas_keeps_nothing(tmp_path, etcd):
    async def body():
        servers, brokers, coord = await _ready(tmp_path, etcd)
        try:
            await coord.create_topics_async([("t", 2, {})])
            assert await _commit(coord, "", -1, [("t", 0, 5)]) == [0]
            alter = await _call(coord, 33, 1, {"resources": [{"resource_type": 2, "resource_name": CONSUMER_OFFSETS,
                                                              "configs": [{"name": "min.insync.replicas", "value": "4"}]}],
                                               "validate_only": False})
            assert alter.responses[0].error_code == 0
            await eventually(lambda: coord.replicas.leaders[(CONSUMER_OFFSETS, 0)].min_isr == 4, timeout=10.0)
            assert await _commit(coord, "", -1, [("t", 0, 6)]) == [COORDINATOR_NOT_AVAILABLE]
            assert (await _fetch_offsets(coord))[0] == 5  # rolled back: the shard is what its log says
            assert coord.coordinator.runtime.shards[0].offsets["g"][("t", 0)].offset == 5
        finally:
            await _stop(servers)

    _run(body())


def test_a_consumer_group_keeps_its_epochs_assignments_and_offsets_when_the_coordinator_moves(tmp_path, etcd):
    async def body():
        servers, brokers, coord = await _ready(tmp_path, etcd)
        try:
            await coord.create_topics_async([("t", 4, {})])
            members, state = {}, {}

            def owned_of(r, owned):
                if r.assignment is None:
                    return owned
                return [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
                        for tp in r.assignment.topic_partitions]

            instance = {"A": None, "B": "static-b"}  # B is a static member (KIP-345)
            for m in ("A", "B"):
                r = await _call(coord, 68, 0, _hb_body(m, 0, instance_id=instance[m]))
                assert r.error_code == 0
                members[m] = r.member_id
                state[m] = (r.member_epoch, owned_of(r, []))
            # Heartbeat until both are stable at the same epoch with disjoint assignments.
            for _ in range(20):
                for m, mid in members.items():
                    epoch, owned = state[m]
                    r = await _call(coord, 68, 0, _hb_body(mid, epoch, owned=owned, instance_id=instance[m]))
                    assert r.error_code == 0, r
                    state[m] = (r.member_epoch, owned_of(r, owned))
                if len({e for e, _ in state.values()}) == 1 and sum(len(o[0]["partitions"]) for _, o in state.values()
                                                                    if o) == 4:
                    break
            before = {m: (e, sorted(p for t in o for p in t["partitions"])) for m, (e, o) in state.items()}
            assert sorted(p for _, ps in before.values() for p in ps) == [0, 1, 2, 3]
            epoch_a = before["A"][0]
            assert await _commit(coord, members["A"], epoch_a, [("t", before["A"][1][0], 17)]) == [0]

            # The coordinator's broker goes away without a word; another leads the offsets partition.
            old = coord
            await old.metadata._abandon()
            others = [b for b in brokers if b is not old]
            await eventually(lambda: _leader(others[0]) in {b.config.node_id for b in others}, timeout=15.0)
            new = next(b for b in others if b.config.node_id == _leader(b))
            await eventually(lambda: 0 in new.coordinator.runtime.shards, timeout=10.0)

            # First line of defence: the deposed broker cannot count on its lease any more, so
            # it answers nothing as a coordinator, neither a commit nor a read of stale offsets.
            assert await _commit(old, members["A"], epoch_a, [("t", before["A"][1][0], 98)]) == [NOT_COORDINATOR]
            stale = await _call(old, 9, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
                                            "require_stable": False})
            assert stale.error_code == NOT_COORDINATOR
            found = await _call(old, 10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            assert found.coordinators[0].error_code == COORDINATOR_NOT_AVAILABLE  # it cannot vouch for its view
            # Second line, with the first taken away (say, a clock that misjudged the lease):
            # it acknowledges nothing it writes now, since its followers fetch elsewhere.
            old.metadata.lease_current = lambda: True
            zombie = asyncio.ensure_future(_commit(old, members["A"], epoch_a, [("t", before["A"][1][0], 99)]))
            # The group carries on at the new coordinator: same epochs, same partitions.
            for m, mid in members.items():
                epoch, owned = state[m]
                r = await _call(new, 68, 0, _hb_body(mid, epoch, owned=owned, instance_id=instance[m]))
                assert r.error_code == 0, r
                assert r.member_epoch == before[m][0], "no new epoch after a fail-over"
                if r.assignment is not None:
                    assert sorted(p for tp in r.assignment.topic_partitions for p in tp.partitions) == before[m][1]
            assert (await _fetch_offsets(new, partitions=before["A"][1][:1]))[before["A"][1][0]] == 17
            # The static member keeps its instance at the new coordinator.
            group = new.coordinator.runtime.shards[0].consumer_groups["g"]
            assert group.snapshot()["static_members"] == {"static-b": members["B"]}
            # Never acknowledged: its write times out (offsets.commit.timeout.ms) unanswered by
            # any follower, and the new coordinator never sees it.
            assert await asyncio.wait_for(zombie, 15) == [COORDINATOR_NOT_AVAILABLE]
            assert (await _fetch_offsets(new, partitions=before["A"][1][:1]))[before["A"][1][0]] == 17
        finally:
            await _stop(servers)

    _run(body())


def test_a_new_coordinator_answers_load_in_progress_while_it_reads_its_log(tmp_path, etcd):
    async def body():
        servers, brokers, coord = await _ready(tmp_path, etcd)
        try:
            await coord.create_topics_async([("t", 2, {})])
            r = await _call(coord, 68, 0, _hb_body("A", 0))
            assert r.error_code == 0
            epoch = r.member_epoch
            assert await _commit(coord, "A", epoch, [("t", 0, 3)]) == [0]
            others = [b for b in brokers if b is not coord]
            loading = asyncio.Event()

            def slow_reader(b):
                real = b.coordinator.read_partition

                def read(partition):
                    # Runs in the worker thread (the event loop keeps serving meanwhile).
                    loading.set()
                    import time as _time
                    _time.sleep(1.5)
                    yield from real(partition)
                return read

            for b in others:
                b.coordinator.read_partition = slow_reader(b)
            await coord.metadata._abandon()
            await eventually(lambda: _leader(others[0]) in {b.config.node_id for b in others}, timeout=15.0)
            new = next(b for b in others if b.config.node_id == _leader(b))
            await eventually(lambda: loading.is_set(), timeout=10.0)
            r = await _call(new, 68, 0, _hb_body("A", epoch, owned=[]))
            assert r.error_code == 14  # COORDINATOR_LOAD_IN_PROGRESS, answered while the log is read
            body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": False}
            assert (await _call(new, 9, 7, body)).error_code == 14
            await eventually(lambda: 0 in new.coordinator.runtime.shards, timeout=10.0)
            r = await _call(new, 68, 0, _hb_body("A", epoch, owned=None))
            assert (r.error_code, r.member_epoch) == (0, epoch)
            assert (await _fetch_offsets(new, partitions=[0]))[0] == 3
        finally:
            await _stop(servers)

    _run(body())


def test_a_load_still_reading_when_leadership_is_lost_is_discarded(tmp_path, etcd):
    async def body():
        servers, brokers, coord = await _ready(tmp_path, etcd)
        try:
            runtime = coord.coordinator.runtime
            # A second election (as after losing and regaining the lead) starts a load...
            coord.coordinator.resign(0, None)
            assert runtime.state_of(0).value == "closed"
            coord.coordinator.elect(0, 99, coord.clock())
            assert runtime.state_of(0).value == "loading"
            # ...and the lead is lost again before the log has been read: nothing is loaded.
            coord.coordinator.resign(0, None)
            await asyncio.sleep(0.5)
            assert runtime.state_of(0).value == "closed" and 0 not in runtime.shards
        finally:
            await _stop(servers)

    _run(body())
