"""The odradek admin client (`AsyncAdmin`, sync `Admin`) against a real broker process.

Topics: create (with configs, checked through librdkafka's DescribeConfigs), list,
describe, delete, grow. Groups of both kinds: a KIP-848 consumer group formed by odradek
consumers and a classic group formed by librdkafka consumers (`group.protocol=classic`),
listed, described (members and their assignments), their offsets listed, altered, reset
and deleted, the groups deleted, and a static classic member removed by instance id.

The group tests share one broker with fast group timings (module scope): heartbeats every
200 ms, short session timeouts and no initial rebalance delay.
"""

from __future__ import annotations

import asyncio
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from odradek.client import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    KafkaError,
    NewTopic,
    TopicPartition,
)
from odradek.client.cluster import BrokerInfo

from ..conftest import BrokerProcess
from .test_producer import TIMEOUT, arun, create_topic

pytestmark = pytest.mark.interop

GROUP_OPTS = [
    "-o", "group.initial.rebalance.delay.ms=0",
    "-o", "group.min.session.timeout.ms=1000",
    "-o", "group.consumer.heartbeat.interval.ms=200",
    "-o", "group.consumer.min.heartbeat.interval.ms=100",
    "-o", "group.consumer.session.timeout.ms=3000",
    "-o", "group.consumer.min.session.timeout.ms=1000",
]


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    """A broker with fast group timings, shared by this module's group tests."""
    b = BrokerProcess(tmp_path_factory.mktemp("admin-groups") / "data", GROUP_OPTS).start()
    yield b
    if b.alive():
        assert b.stop() == 0
    log = b.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]


async def admin_error(coro) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        await coro
    return info.value


def wait_until(cond, what: str, timeout: float = TIMEOUT, step=None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        if step is not None:
            step()
        else:
            time.sleep(0.02)


# --------------------------------------------------------------------------- topics


def describe_configs(bootstrap: str, topic: str) -> dict:
    ck = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    [fut] = ck.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return fut.result(TIMEOUT)


def test_create_list_describe_delete_topics(broker, topic_name):
    a, b, c = topic_name + "-a", topic_name + "-b", topic_name + "-c"

    async def main():
        async with AsyncAdmin(broker.bootstrap) as admin:
            await admin.create_topics([
                NewTopic(a, 3, 1, {"cleanup.policy": "compact", "retention.ms": "12345"}),
                NewTopic(b, 1),
            ])
            topics = await admin.list_topics()
            assert {a, b} <= set(topics) and topics == sorted(topics)
            assert not any(t.startswith("__") for t in topics)
            assert "__consumer_offsets" in await admin.list_topics(internal=True)

            described = await admin.describe_topics([a, b])
            assert sorted(described[a].partitions) == [0, 1, 2] and sorted(described[b].partitions) == [0]
            for info in described.values():
                assert not info.internal and info.topic_id.int != 0
                for p in info.partitions.values():
                    assert (p.leader, p.replicas, p.isr) == (1, (1,), (1,))
            assert described[a].topic_id != described[b].topic_id
            everything = await admin.describe_topics()
            assert everything[a].topic_id == described[a].topic_id

            configs = describe_configs(broker.bootstrap, a)
            assert configs["cleanup.policy"].value == "compact"
            assert configs["retention.ms"].value == "12345"
            assert not configs["cleanup.policy"].is_default
            assert configs["segment.bytes"].is_default
            assert describe_configs(broker.bootstrap, b)["cleanup.policy"].value == "delete"

            err = await admin_error(admin.create_topics([NewTopic(a, 3, 1)]))
            assert err.name == "TOPIC_ALREADY_EXISTS"
            for bad in (0, -2):
                err = await admin_error(admin.create_topics([NewTopic(c, bad, 1)]))
                assert err.name == "INVALID_PARTITIONS", bad
            err = await admin_error(admin.create_topics([NewTopic(c, 1, 3)]))  # one broker only
            assert err.name == "INVALID_REPLICATION_FACTOR"
            err = await admin_error(admin.create_topics([NewTopic(c, 1, 1, {"cleanup.policy": "bogus"})]))
            assert err.name == "INVALID_CONFIG"
            await admin.create_topics([NewTopic(c, 2, 1)], validate_only=True)
            assert c not in await admin.list_topics()
            # one failure in a batch does not stop the others
            err = await admin_error(admin.create_topics([NewTopic(a, 1, 1), NewTopic(c, 2, 1)]))
            assert err.name == "TOPIC_ALREADY_EXISTS"
            assert c in await admin.list_topics()

            await admin.delete_topics([b, c])
            topics = await admin.list_topics()
            assert a in topics and b not in topics and c not in topics
            err = await admin_error(admin.describe_topics([b]))
            assert err.name == "UNKNOWN_TOPIC_OR_PARTITION"
            err = await admin_error(admin.delete_topics([b]))
            assert err.name == "UNKNOWN_TOPIC_OR_PARTITION"
        async with AsyncProducer(broker.bootstrap) as p:
            with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await p.send(b, b"gone")

    arun(main())


def test_create_partitions(broker, topic_name):
    async def main():
        async with AsyncAdmin(broker.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 2, 1)])
            await admin.create_partitions({topic_name: 5}, validate_only=True)
            assert len((await admin.describe_topics([topic_name]))[topic_name].partitions) == 2
            await admin.create_partitions({topic_name: 5})
            info = (await admin.describe_topics([topic_name]))[topic_name]
            assert sorted(info.partitions) == [0, 1, 2, 3, 4]
            err = await admin_error(admin.create_partitions({topic_name: 3}))
            assert err.name == "INVALID_PARTITIONS"
            err = await admin_error(admin.create_partitions({topic_name: 5}))
            assert err.name == "INVALID_PARTITIONS"
            err = await admin_error(admin.create_partitions({topic_name + "-missing": 3}))
            assert err.name == "UNKNOWN_TOPIC_OR_PARTITION"
        async with AsyncProducer(broker.bootstrap) as p:
            assert (await p.send_and_wait(topic_name, b"new", partition=4)).offset == 0

    arun(main())


def test_describe_cluster(broker):
    async def main():
        async with AsyncAdmin(broker.bootstrap) as admin:
            cluster_id, controller, brokers = await admin.describe_cluster()
            assert brokers == [BrokerInfo(1, "127.0.0.1", broker.port, None)]
            assert controller == 1
            assert isinstance(cluster_id, str) and cluster_id == admin.client.cluster.cluster_id
            return cluster_id

    cluster_id = arun(main())
    # librdkafka sees the same cluster
    ck = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert ck.list_topics(timeout=TIMEOUT).cluster_id == cluster_id
    # and so does the sync facade
    with Admin(broker.bootstrap) as admin:
        assert admin.describe_cluster()[0] == cluster_id


# --------------------------------------------------------------------------- groups: helpers


async def form_consumer_group(bootstrap: str, group: str, topic: str, n: int, partitions: int):
    """n odradek consumers (KIP-848) in `group`, polled until they split the topic's partitions."""
    consumers = [await AsyncConsumer(bootstrap, group_id=group, client_id=f"odradek-{i}", enable_auto_commit=False,
                                     auto_offset_reset="earliest", fetch_max_wait_ms=100).start() for i in range(n)]
    for c in consumers:
        c.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT
    while True:
        await asyncio.gather(*(c.poll(50) for c in consumers))
        owned = [c.assignment() for c in consumers]
        if all(owned) and sum(len(o) for o in owned) == partitions and \
                set().union(*owned) == {TopicPartition(topic, p) for p in range(partitions)}:
            return consumers
        assert time.monotonic() < deadline, f"group did not settle: {owned}"


class CKMember:
    """A librdkafka classic group consumer whose assignment is tracked through its callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str, **conf) -> None:
        self.assigned: set[TopicPartition] = set()
        self.consumer = CKConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
            "client.id": client_id, "session.timeout.ms": 6000, "heartbeat.interval.ms": 100,
            "max.poll.interval.ms": 30000, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100, **conf})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _c, parts) -> None:
        self.assigned |= {TopicPartition(p.topic, p.partition) for p in parts}

    def _on_revoke(self, _c, parts) -> None:
        self.assigned -= {TopicPartition(p.topic, p.partition) for p in parts}

    def poll(self) -> None:
        m = self.consumer.poll(0.02)
        assert m is None or m.error() is None or m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, \
            m.error()

    def member_id(self) -> str:
        return self.consumer.memberid()

    def close(self) -> None:
        self.consumer.close()


def form_classic_group(members: list[CKMember], partitions: int, topic: str) -> None:
    def settled() -> bool:
        owned = [m.assigned for m in members]
        return all(owned) and sum(len(o) for o in owned) == partitions and \
            set().union(*owned) == {TopicPartition(topic, p) for p in range(partitions)}

    def step() -> None:
        for m in members:
            m.poll()

    wait_until(settled, "the classic group to settle", step=step)


# --------------------------------------------------------------------------- groups: consumer protocol


def test_consumer_group_list_describe_offsets_delete(gbroker, topic_name):
    group = f"cg-{topic_name}"
    topic = topic_name
    tps = [TopicPartition(topic, p) for p in range(4)]

    async def main():
        await create_topic(gbroker.bootstrap, topic, 4)
        async with AsyncAdmin(gbroker.bootstrap) as admin:
            consumers = await form_consumer_group(gbroker.bootstrap, group, topic, 2, 4)
            try:
                listed = {g.group_id: g for g in await admin.list_groups()}
                g = listed[group]
                assert (g.type, g.protocol_type, g.state) == ("consumer", "consumer", "Stable")
                assert group in {g.group_id for g in await admin.list_groups(types=["consumer"])}
                assert group not in {g.group_id for g in await admin.list_groups(types=["classic"])}
                assert group in {g.group_id for g in await admin.list_groups(states=["Stable"])}
                assert group not in {g.group_id for g in await admin.list_groups(states=["Empty"])}

                desc = (await admin.describe_groups([group]))[group]
                assert (desc.group_id, desc.type, desc.state, desc.protocol_type) == (group, "consumer", "Stable",
                                                                                      "consumer")
                assert desc.protocol == "uniform"  # the coordinator's default server assignor
                assert desc.epoch is not None and desc.epoch == desc.assignment_epoch >= 1
                members = {m.client_id: m for m in desc.members}
                assert sorted(members) == ["odradek-0", "odradek-1"]
                for i, c in enumerate(consumers):
                    m = members[f"odradek-{i}"]
                    assert m.member_id == c.member.member_id
                    assert m.assignment == c.assignment() == m.target
                    assert len(m.assignment) == 2
                    assert m.subscription == [topic] and m.regex is None
                    assert m.member_type == "consumer" and m.instance_id is None
                    assert m.epoch == desc.epoch
                    assert m.host.lstrip("/") == "127.0.0.1"

                # offsets of an active group: a member commits; admin changes are refused
                await consumers[0].commit({tp: 1 for tp in consumers[0].assignment()})
                listed = await admin.list_group_offsets(group)
                assert {tp: o.offset for tp, o in listed.items()} == {tp: 1 for tp in consumers[0].assignment()}
                err = await admin_error(admin.alter_group_offsets(group, {tps[0]: 0}))
                assert err.name == "UNKNOWN_MEMBER_ID"
                err = await admin_error(admin.delete_group_offsets(group, [tps[0]]))
                assert err.name == "GROUP_SUBSCRIBED_TO_TOPIC"
                err = await admin_error(admin.delete_groups([group]))
                assert err.name == "NON_EMPTY_GROUP"
            finally:
                for c in consumers:
                    await c.close()

            desc = (await admin.describe_groups([group]))[group]
            assert (desc.type, desc.state, desc.members) == ("consumer", "Empty", []), desc
            # empty now: admin may rewrite and delete offsets, then delete the group
            await admin.alter_group_offsets(group, {tps[0]: 0, tps[1]: 0})
            await admin.delete_group_offsets(group, [tps[1]])
            assert {tp: o.offset for tp, o in (await admin.list_group_offsets(group, [tps[0], tps[1]])).items()} \
                == {tps[0]: 0}
            await admin.delete_groups([group])
            assert group not in {g.group_id for g in await admin.list_groups()}
            assert await admin.list_group_offsets(group) == {}
            err = await admin_error(admin.delete_groups([group]))
            assert err.name == "GROUP_ID_NOT_FOUND"

    arun(main())


# --------------------------------------------------------------------------- groups: classic protocol


def test_classic_group_list_describe_delete(gbroker, topic_name):
    group = f"classic-{topic_name}"
    topic = topic_name
    arun(create_topic(gbroker.bootstrap, topic, 4))
    members = [CKMember(gbroker.bootstrap, group, topic, f"rdkafka-{i}") for i in range(2)]
    try:
        form_classic_group(members, 4, topic)

        async def check_active():
            async with AsyncAdmin(gbroker.bootstrap) as admin:
                listed = {g.group_id: g for g in await admin.list_groups()}
                g = listed[group]
                assert (g.type, g.protocol_type, g.state) == ("classic", "consumer", "Stable")
                assert group in {g.group_id for g in await admin.list_groups(types=["classic"])}
                assert group not in {g.group_id for g in await admin.list_groups(types=["consumer"])}

                desc = (await admin.describe_groups([group]))[group]
                assert (desc.type, desc.state, desc.protocol_type) == ("classic", "Stable", "consumer")
                assert desc.protocol == "range"  # librdkafka's first partition.assignment.strategy
                assert desc.epoch is None and desc.assignment_epoch is None
                by_client = {m.client_id: m for m in desc.members}
                assert sorted(by_client) == ["rdkafka-0", "rdkafka-1"]
                for i, ck in enumerate(members):
                    m = by_client[f"rdkafka-{i}"]
                    assert m.member_id == ck.member_id()
                    assert m.assignment == ck.assigned and len(m.assignment) == 2
                    assert m.subscription == [topic]
                    assert (m.member_type, m.instance_id, m.target, m.epoch) == ("classic", None, None, None)
                err = await admin_error(admin.delete_groups([group]))
                assert err.name == "NON_EMPTY_GROUP"

        arun(check_active())
    finally:
        for m in members:
            m.close()

    async def check_empty():
        async with AsyncAdmin(gbroker.bootstrap) as admin:
            desc = (await admin.describe_groups([group]))[group]
            assert (desc.type, desc.state, desc.members) == ("classic", "Empty", [])
            await admin.delete_groups([group])
            assert group not in {g.group_id for g in await admin.list_groups()}

    arun(check_empty())


def test_remove_static_classic_member(gbroker, topic_name):
    group = f"static-{topic_name}"
    topic = topic_name
    arun(create_topic(gbroker.bootstrap, topic, 4))
    # a heartbeats only every 3 s, so it does not rejoin (with a new member id) before we look
    a = CKMember(gbroker.bootstrap, group, topic, "static-a", **{"group.instance.id": "instance-a",
                                                                 "heartbeat.interval.ms": 3000,
                                                                 "session.timeout.ms": 10000})
    b = CKMember(gbroker.bootstrap, group, topic, "static-b", **{"group.instance.id": "instance-b"})
    try:
        form_classic_group([a, b], 4, topic)
        a_member_id = a.member_id()

        async def main():
            async with AsyncAdmin(gbroker.bootstrap) as admin:
                desc = (await admin.describe_groups([group]))[group]
                assert {m.instance_id: m.member_id for m in desc.members} == {
                    "instance-a": a_member_id, "instance-b": b.member_id()}
                await admin.remove_members(group, ["instance-a"], reason="test")
                desc = (await admin.describe_groups([group]))[group]
                assert [m.instance_id for m in desc.members] == ["instance-b"]
                assert a_member_id not in {m.member_id for m in desc.members}
                err = await admin_error(admin.remove_members(group, ["instance-nobody"]))
                assert err.name == "UNKNOWN_MEMBER_ID"

        arun(main())
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------- group offsets


def test_group_offsets_list_alter_reset_delete(broker, topic_name):
    group = f"offsets-{topic_name}"
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    base = int(time.time() * 1000) - 3_600_000

    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        async with AsyncProducer(broker.bootstrap, linger_ms=5) as p:
            futs = [await p.send(topic_name, b"v", partition=part, timestamp_ms=base + 100 * i)
                    for part in (0, 1) for i in range(10)]
            await asyncio.gather(*futs)
        async with AsyncAdmin(broker.bootstrap) as admin:
            assert await admin.list_group_offsets(group) == {}
            await admin.alter_group_offsets(group, {tp0: 5, (topic_name, 1): 7})

            def offsets(listed) -> dict:
                return {tp: o.offset for tp, o in listed.items()}

            assert offsets(await admin.list_group_offsets(group)) == {tp0: 5, tp1: 7}
            assert offsets(await admin.list_group_offsets(group, [tp1])) == {tp1: 7}

            async def plan(to, value=None):
                return await admin.plan_offset_reset(group, [tp0, tp1], to=to, value=value)

            assert await plan("earliest") == {tp0: 0, tp1: 0}
            assert await plan("latest") == {tp0: 10, tp1: 10}
            assert await plan("offset", 3) == {tp0: 3, tp1: 3}
            assert await plan("offset", 1000) == {tp0: 10, tp1: 10}  # clamped to the log
            assert await plan("datetime", base + 250) == {tp0: 3, tp1: 3}  # first record at or after
            assert await plan("datetime", base) == {tp0: 0, tp1: 0}
            assert await plan("datetime", base + 10_000) == {tp0: 10, tp1: 10}  # after every record
            assert await plan("shift", -2) == {tp0: 3, tp1: 5}  # from the committed offsets
            assert await plan("shift", -100) == {tp0: 0, tp1: 0}
            assert await plan("shift", 4) == {tp0: 9, tp1: 10}
            with pytest.raises(ValueError):
                await plan("sideways")
            # planning changes nothing; committing the plan does
            assert offsets(await admin.list_group_offsets(group)) == {tp0: 5, tp1: 7}
            await admin.alter_group_offsets(group, await plan("shift", -2))
            assert offsets(await admin.list_group_offsets(group)) == {tp0: 3, tp1: 5}

            await admin.delete_group_offsets(group, [tp0])
            assert offsets(await admin.list_group_offsets(group)) == {tp1: 5}
            # no committed offset: a shift counts from the log end
            assert await plan("shift", -4) == {tp0: 6, tp1: 1}

        # a consumer of the group starts where the offsets say
        c = await AsyncConsumer(broker.bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest").start()
        try:
            c.assign([tp0, tp1])
            assert (await c.position(tp0), await c.position(tp1)) == (0, 5)
        finally:
            await c.close()

    arun(main())


def test_sync_admin(broker, topic_name):
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic_name, 3, 1)])
        assert topic_name in admin.list_topics()
        assert sorted(admin.describe_topics([topic_name])[topic_name].partitions) == [0, 1, 2]
        admin.alter_group_offsets(f"g-{topic_name}", {(topic_name, 2): 0})
        assert admin.list_group_offsets(f"g-{topic_name}")[TopicPartition(topic_name, 2)].offset == 0
        with pytest.raises(KafkaError, match="TOPIC_ALREADY_EXISTS"):
            admin.create_topics([NewTopic(topic_name, 3, 1)])
        admin.delete_topics([topic_name])
        assert topic_name not in admin.list_topics()
