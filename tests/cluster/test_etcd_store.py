"""EtcdBackend against a real etcd: registration and broker epochs, leases, controller
election and fencing, topics, partition compare-and-set, configs, producer ids, and an
etcd that stops answering for a while."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aetcd
import pytest

from odradek.cluster.backend import Fenced, MetadataUnavailable, open_backend, parse_metadata_url
from odradek.cluster.etcd_process import EtcdNotFound, EtcdProcess, EtcdStartError, find_etcd
from odradek.cluster.etcd_store import EtcdBackend, _decode_name, _encode_name, lease_seconds
from odradek.cluster.image import NO_LEADER, ClusterImage
from odradek.cluster.metadata import TopicCollision, TopicExists

from .etcd_fixture import broker_info, close_all, controller_of, eventually, make_backend, run, started

pytestmark = pytest.mark.timeout(30)


# --- pure helpers ---------------------------------------------------------------------------


def test_lease_rounding_and_name_encoding():
    assert [lease_seconds(ms) for ms in (1, 999, 1000, 1001, 6000)] == [1, 1, 1, 2, 6]
    for name in ["", "-default", "7", "a/b", "g 1", "%", "-x"]:
        assert _decode_name(_encode_name(name)) == name
        assert "/" not in _encode_name(name)
    assert _encode_name("") == "-default" != _encode_name("-default")


def test_find_etcd_names_the_debian_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("ODRADEK_ETCD", raising=False)
    monkeypatch.setattr("odradek.cluster.etcd_process.DEFAULT_PATHS", ())
    with pytest.raises(EtcdNotFound, match="etcd-server"):
        find_etcd()


def test_etcd_process_url_and_a_start_that_fails(etcd, tmp_path):
    assert etcd.url == f"etcd://127.0.0.1:{etcd.client_port}" and etcd.healthy()
    assert parse_metadata_url(etcd.url) == [etcd.endpoint]
    clash = EtcdProcess(tmp_path / "second", client_port=etcd.client_port)  # the port is taken
    with pytest.raises(EtcdStartError, match="in use"):
        clash.start(timeout=5)
    assert not clash.running
    broken = EtcdProcess(tmp_path / "broken", extra_args=["--no-such-flag"])
    with pytest.raises(EtcdStartError, match="no-such-flag"):  # its log's tail is in the message
        broken.start(timeout=5)


def test_open_backend_picks_etcd(tmp_path):
    backend = open_backend(tmp_path, "etcd://127.0.0.1:1,localhost:2", 3, lease_ttl_ms=1500)
    assert isinstance(backend, EtcdBackend)
    assert backend.endpoints == [("127.0.0.1", 1), ("localhost", 2)] and backend.lease_ttl_s == 2


# --- registration ---------------------------------------------------------------------------


def test_brokers_see_each_other_with_rack_and_distinct_epochs(etcd):
    async def body():
        b1 = await started(etcd, 1, "rack-a")
        b2 = await started(etcd, 2, "rack-b")
        await eventually(lambda: set(b1.image().brokers) == {1, 2} == set(b2.image().brokers))
        assert b1.cluster_id == b2.cluster_id and len(base64.urlsafe_b64decode(b1.cluster_id + "==")) == 16
        one, two = b2.image().brokers[1], b1.image().brokers[2]
        assert (one.host, one.port, one.rack) == ("127.0.0.1", 9091, "rack-a")
        assert two.rack == "rack-b" and one.epoch > 0 and two.epoch > one.epoch
        assert b1.image().brokers == b2.image().brokers
        await b2.close()
        await b2.close()  # idempotent
        # A clean close revokes the lease: the registration vanishes at once, not after the TTL.
        await eventually(lambda: set(b1.image().brokers) == {1}, timeout=1.0)
        await b1.close()

    run(body())


def test_restarted_node_id_gets_a_new_epoch_without_waiting_for_its_old_lease(etcd):
    async def body():
        observer = await started(etcd, 2)
        b1 = await started(etcd, 1, lease_ttl_ms=20_000)
        first = b1.image().brokers[1].epoch
        await b1._abandon()  # a crash: the old lease still has 20 s to live
        t0 = time.monotonic()
        again = await started(etcd, 1, lease_ttl_ms=20_000)
        assert time.monotonic() - t0 < 3
        second = again.image().brokers[1].epoch
        assert second > first
        await eventually(lambda: observer.image().brokers.get(1) and observer.image().brokers[1].epoch == second)
        await close_all(observer, again)

    run(body())


@pytest.mark.timeout(40)
def test_crashed_node_expires_and_the_controller_moves_its_partitions(etcd):
    async def body():
        nodes = [await started(etcd, n, lease_ttl_ms=1000) for n in (1, 2, 3)]
        assert nodes[0].lease_ttl_s == 1  # etcd raises a 1 s lease to its 2 s minimum
        await eventually(lambda: all(len(b.image().brokers) == 3 for b in nodes))
        ctl = await controller_of(*nodes)
        victim, other = [b for b in nodes if b is not ctl]
        v, o, c = victim.node_id, other.node_id, ctl.node_id
        await ctl.create_topics([("t", 3, {})], {"t": [(v, o, c), (v, c, o), (o, v, c)]})
        await eventually(lambda: len(other.image().partitions) == 3)
        first = other.image().partition("t", 0)
        assert first.leader == v
        await victim._abandon()
        t0 = time.monotonic()

        def moved():
            img = other.image()
            return v not in img.brokers and all(v not in s.isr for s in img.partitions.values()) and img
        img = await eventually(moved, timeout=10)
        assert time.monotonic() - t0 < 8
        p0, p1, p2 = (img.partition("t", i) for i in range(3))
        assert (p0.leader, p0.leader_epoch, p0.isr) == (o, 1, (o, c))
        assert (p1.leader, p1.leader_epoch, p1.isr) == (c, 1, (c, o))
        assert (p2.leader, p2.leader_epoch, p2.isr) == (o, 0, (o, c))  # ISR shrink only: same leader epoch
        assert p0.partition_epoch > first.partition_epoch and p0.replicas == first.replicas
        await eventually(lambda: ctl.image() == other.image())
        await close_all(ctl, other)

    run(body(), timeout=35)


def test_controller_election_and_failover(etcd):
    async def body():
        b1, b2, b3 = [await started(etcd, n) for n in (1, 2, 3)]
        first = await controller_of(b1, b2, b3)
        epoch = first.image().controller_epoch
        rest = [b for b in (b1, b2, b3) if b is not first]
        await first.close()  # its lease is revoked: the controller key goes at once
        second = await controller_of(*rest)
        assert second is not first and second.image().controller_epoch > epoch
        assert all(b.image().controller == second.node_id for b in rest)
        # The new controller acts: the old one's partitions get a new leader.
        survivor = next(b for b in rest if b is not second)
        await second.create_topics([("x", 1, {})], {"x": [(survivor.node_id, second.node_id)]})
        await survivor.close()
        state = await eventually(lambda: (s := second.image().partition("x", 0)) and s.leader == second.node_id and s)
        assert state.leader_epoch == 1 and state.isr == (second.node_id,)
        await second.close()

    run(body())


def test_a_stale_controller_epoch_is_refused_by_etcd(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        ctl = await controller_of(b1, b2)
        other = b2 if ctl is b1 else b1
        await ctl.create_topics([("s", 1, {})], {"s": [(other.node_id, ctl.node_id)]})
        await eventually(lambda: other.image().partition("s", 0))
        old_epoch = ctl.image().controller_epoch
        await ctl.close()
        new_ctl = await controller_of(other)
        assert new_ctl.image().controller_epoch > old_epoch
        me = other.node_id
        before = await eventually(lambda: (s := other.image().partition("s", 0)).isr == (me,) and s)
        states = []
        other.subscribe(lambda old, new: states.append(new.partition("s", 0)))
        # A deposed controller that believes `other` is dead, acting on its old epoch.
        doctored = ClusterImage.of(other.cluster_id, [], ctl.node_id, old_epoch, other.image().partitions)
        await other._control(doctored, old_epoch)
        await asyncio.sleep(0.3)
        assert other.image().partition("s", 0) == before and not states
        # The same decision with the current epoch goes through (the mechanism, not the data, refused it);
        # the real controller then sees its broker alive and elects it again.
        await other._control(doctored, other.image().controller_epoch)
        await eventually(lambda: other.image().partition("s", 0).leader_epoch == before.leader_epoch + 2)
        assert [(s.leader, s.leader_epoch) for s in states] == [
            (NO_LEADER, before.leader_epoch + 1), (me, before.leader_epoch + 2)]
        await other.close()

    run(body())


# --- topics ---------------------------------------------------------------------------------


def test_create_topics_visible_in_other_mirrors(etcd):
    async def body():
        b1, b2 = await started(etcd, 1, "a"), await started(etcd, 2, "b")
        await eventually(lambda: len(b1.image().brokers) == 2)
        [topic] = await b1.create_topics([("orders", 3, {"retention.ms": "1000"})],
                                          {"orders": [(1, 2), (2, 1), (3, 1)]})
        assert b1.get("orders") is topic and b1.get_by_id(topic.topic_id) is topic  # own write, at once
        assert topic.partitions == 3 and topic.configs == {"retention.ms": "1000"}
        assert [b1.image().partition("orders", i).leader for i in range(3)] == [1, 2, 1]
        p2 = b1.image().partition("orders", 2)
        assert (p2.replicas, p2.isr, p2.leader_epoch) == ((3, 1), (1,), 0)  # broker 3 is not alive
        seen = await eventually(lambda: b2.get("orders"))
        assert (seen.topic_id, seen.partitions, seen.configs) == (topic.topic_id, 3, topic.configs)
        await eventually(lambda: b2.image().partitions == b1.image().partitions)
        with pytest.raises(TopicExists):
            await b2.create_topics([("orders", 1, {})], {"orders": [(1,)]})
        await b2.create_topics([("my.topic", 1, {})], {"my.topic": [(1,)]})
        with pytest.raises(TopicCollision):
            await b2.create_topics([("my_topic", 1, {})], {"my_topic": [(1,)]})
        with pytest.raises(ValueError):
            await b2.create_topics([("noplace", 1, {})])
        with pytest.raises(ValueError):
            await b2.create_topics([("short", 2, {})], {"short": [(1,)]})
        await close_all(b1, b2)

    run(body())


def test_create_race_one_wins_the_other_gets_topic_exists(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        results = await asyncio.gather(b1.create_topics([("race", 1, {})], {"race": [(1,)]}),
                                       b2.create_topics([("race", 2, {})], {"race": [(2,), (2,)]}),
                                       return_exceptions=True)
        won = [r for r in results if isinstance(r, list)]
        lost = [r for r in results if isinstance(r, Exception)]
        assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], TopicExists)
        topic = won[0][0]
        await eventually(lambda: b1.get("race") and b2.get("race"))
        assert b1.get("race").topic_id == b2.get("race").topic_id == topic.topic_id
        await close_all(b1, b2)

    run(body())


def test_many_topics_and_partitions_over_several_transactions(etcd):
    async def body():
        b1 = await started(etcd, 1, max_txn_ops=8)
        specs = [(f"m{i}", 5, {}) for i in range(7)]
        topics = await b1.create_topics(specs, {n: [(1,)] * 5 for n, _, _ in specs})
        assert [t.name for t in topics] == [n for n, _, _ in specs]
        assert len(b1.image().partitions) == 35
        await b1.add_partitions({"m0": 17}, {"m0": [(1,)] * 12})
        assert b1.get("m0").partitions == 17 and len(b1.image().partitions) == 47
        await b1.set_configs(topics={f"m{i}": {"k": str(i)} for i in range(7)},
                             groups={f"g{i}": {"k": "v"} for i in range(10)})
        assert b1.get("m6").configs == {"k": "6"} and len(b1.group_configs) == 10
        # A later transaction that loses undoes the earlier ones: all or none.
        await b1.create_topics([("z", 1, {})], {"z": [(1,)]})
        more = [(f"n{i}", 1, {}) for i in range(6)] + [("z", 1, {})]
        with pytest.raises(TopicExists):
            await b1.create_topics(more, {n: [(1,)] for n, _, _ in more})
        await eventually(lambda: not any(n.startswith("n") for n in b1.topics))
        await b1.close()

    run(body())


def test_the_controller_recreates_a_missing_partition_state(etcd):
    async def body():
        b1 = await started(etcd, 1)
        await controller_of(b1)
        await b1.create_topics([("r", 2, {})], {"r": [(1,), (1,)]})
        async with aetcd.Client("127.0.0.1", etcd.client_port) as raw:  # a creator that died half-way
            await raw.delete(b"/odradek/partitions/r/1")
        state = await eventually(lambda: b1.image().partition("r", 1))
        assert (state.leader, state.isr) == (1, (1,))
        await b1.close()

    run(body())


def test_delete_and_add_partitions(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        [t] = await b1.create_topics([("d", 1, {})], {"d": [(1, 2)]})
        await b1.add_partitions({"d": 3}, {"d": [(2, 1), (1, 2)]})
        assert t.partitions == 3 and b1.get("d") is t  # the same Topic object, changed in place
        assert b1.image().partition("d", 2).replicas == (1, 2)
        await eventually(lambda: len(b2.image().partitions) == 3 and b2.get("d").partitions == 3)
        await b1.add_partitions({"d": 4}, {"d": [(2, 1), (1, 2), (1, 2), (2,)]})  # the whole list: its tail
        assert b1.image().partition("d", 3).replicas == (2,)
        with pytest.raises(KeyError):
            await b1.add_partitions({"nope": 2}, {"nope": [(1,)]})
        with pytest.raises(ValueError):
            await b1.add_partitions({"d": 5})
        gone = await b2.delete_topic("d")
        assert gone.topic_id == t.topic_id and b2.get("d") is None
        assert not b2.image().partitions
        await eventually(lambda: b1.get("d") is None and not b1.image().partitions)
        with pytest.raises(KeyError):
            await b1.delete_topic("d")
        [again] = await b1.create_topics([("d", 1, {})], {"d": [(1,)]})
        assert again.topic_id != t.topic_id
        await eventually(lambda: b2.get("d") and b2.get("d").topic_id == again.topic_id)
        await close_all(b1, b2)

    run(body())


# --- partition state ---------------------------------------------------------------------------


def test_alter_partition_compare_and_set(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        await eventually(lambda: len(b1.image().brokers) == 2)
        await b1.create_topics([("a", 1, {})], {"a": [(1, 2)]})
        start = b1.image().partition("a", 0)
        assert start.isr == (1, 2)
        shrunk = await b1.alter_partition(("a", 0), start, start.with_changes(isr=(1,)))
        assert shrunk.isr == (1,) and shrunk.partition_epoch > start.partition_epoch
        assert b1.image().partition("a", 0) == shrunk
        await eventually(lambda: b2.image().partition("a", 0) == shrunk)
        # b2 acts on what it read before: fenced, and afterwards its mirror shows the newer state.
        with pytest.raises(Fenced):
            await b2.alter_partition(("a", 0), start, start.with_changes(isr=(2,)))
        assert b2.image().partition("a", 0) == shrunk
        grown = await b2.alter_partition(("a", 0), shrunk, shrunk.with_changes(isr=(1, 2)))
        assert grown.isr == (1, 2) and grown.partition_epoch > shrunk.partition_epoch
        await close_all(b1, b2)

    run(body())


# --- configs and producer ids ----------------------------------------------------------------------


def test_set_configs_round_trip(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        live = b2.broker_configs
        groups = b2.group_configs
        await b1.create_topics([("c", 1, {"a": "1"})], {"c": [(1,)]})
        topic = b1.get("c")
        await b1.set_configs(topics={"c": {"cleanup.policy": "compact"}},
                             brokers={"": {"log.retention.ms": "5"}, "2": {"x": "y"}},
                             groups={"g/1": {"consumer.session.timeout.ms": "45000"}})
        assert b1.get("c") is topic and topic.configs == {"cleanup.policy": "compact"}
        assert b1.broker_configs == {"": {"log.retention.ms": "5"}, "2": {"x": "y"}}
        await eventually(lambda: live == {"": {"log.retention.ms": "5"}, "2": {"x": "y"}})
        assert b2.broker_configs is live and b2.group_configs is groups
        assert groups == {"g/1": {"consumer.session.timeout.ms": "45000"}}
        assert b2.get("c").configs == {"cleanup.policy": "compact"} and b2.get("c").partitions == 1
        await b2.set_configs(brokers={"": {}}, groups={"g/1": {}, "never": {}})
        assert live == {"2": {"x": "y"}} and groups == {}
        await eventually(lambda: b1.broker_configs == {"2": {"x": "y"}})
        with pytest.raises(KeyError):
            await b1.set_configs(topics={"unknown": {}}, groups={"h": {"k": "v"}})
        await asyncio.sleep(0.1)
        assert "h" not in b1.group_configs and "h" not in b2.group_configs
        await b1.set_configs()  # nothing to do
        await close_all(b1, b2)

    run(body())



def test_scram_credentials_and_acls_reach_every_broker(etcd):
    """Security lives in the cluster metadata (issue 20): SCRAM credentials and ACLs written by
    one broker are seen by the others, and the ACL version moves so authorizers rebuild."""
    from odradek.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType, entry_key, \
        pattern_key

    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        binding = AclBinding(ResourceType.TOPIC, "orders/eu", PatternType.PREFIXED, "User:alice", "*",
                             Operation.READ, Permission.ALLOW)
        before = b2.acl_version
        await b1.set_configs(users={"alice": {"SCRAM-SHA-256": "salt=AA==,stored_key=AA==,server_key=AA==,"
                                                                "iterations=4096"}},
                             acls={pattern_key(binding): {entry_key(binding): "1"}})
        await eventually(lambda: "alice" in b2.user_scram and b2.acls)
        assert b2.acls == {pattern_key(binding): {entry_key(binding): "1"}} and b2.acl_version > before
        await b2.set_configs(users={"alice": {}}, acls={pattern_key(binding): {}})
        await eventually(lambda: not b1.user_scram and not b1.acls)
        await close_all(b1, b2)

    run(body())


def test_producer_ids_unique_across_brokers_and_restarts(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)

        async def take(b, n):
            return [await b.allocate_producer_id() for _ in range(n)]
        got1, got2 = await asyncio.gather(take(b1, 1200), take(b2, 300))
        assert len(set(got1) | set(got2)) == 1500
        await b1.close()
        again = await started(etcd, 1)
        after = await take(again, 10)
        assert min(after) > max(got1 + got2) and not set(after) & set(got1 + got2)
        await close_all(again, b2)

    run(body())


# --- failures of etcd and of subscribers ------------------------------------------------------


def test_listener_errors_do_not_stop_the_watch(etcd, caplog):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        seen = []

        def bad(old, new):
            raise RuntimeError("subscriber bug")
        b2.subscribe(bad)
        b2.subscribe(lambda old, new: seen.append(new))
        await b1.create_topics([("l", 1, {})], {"l": [(1,)]})
        await eventually(lambda: b2.image().partition("l", 0))
        await b1.create_topics([("l2", 1, {})], {"l2": [(1,)]})
        await eventually(lambda: b2.image().partition("l2", 0))
        assert seen and seen[-1] is b2.image()
        await close_all(b1, b2)

    run(body())
    assert "subscriber bug" in caplog.text


def test_compacted_watch_reloads_and_publishes_the_difference(etcd):
    async def body():
        b1, b2 = await started(etcd, 1), await started(etcd, 2)
        await b1.create_topics([("old", 1, {})], {"old": [(1,)]})
        await eventually(lambda: b2.get("old"))
        changes = []
        b2.subscribe(lambda old, new: changes.append((set(old.partitions), set(new.partitions))))
        watch = b2._tasks[0]  # the watch: stop it while etcd compacts its history away
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await b1.delete_topic("old")
        await b1.create_topics([("new", 1, {})], {"new": [(1,)]})
        await b1.set_configs(groups={"g": {"k": "v"}})
        async with aetcd.Client("127.0.0.1", etcd.client_port) as raw:
            await raw.compact((await raw.get_prefix(b"/odradek/")).header.revision, physical=True)
        b2._tasks[0] = asyncio.ensure_future(b2._forever("watch", b2._watch_step))
        await eventually(lambda: b2.get("new") and b2.get("old") is None)
        assert b2.group_configs == {"g": {"k": "v"}}
        assert changes[-1] == ({("old", 0)}, {("new", 0)})
        await b2.set_configs(groups={"g2": {"k": "v"}})  # and the watch goes on from there
        await eventually(lambda: "g2" in b1.group_configs)
        await close_all(b1, b2)

    run(body())


def test_etcd_paused_then_resumed(etcd):
    async def body():
        b1 = await started(etcd, 1, request_timeout_ms=800)
        b2 = await started(etcd, 2, request_timeout_ms=800)
        await b1.create_topics([("p", 1, {})], {"p": [(1,)]})
        await eventually(lambda: b2.get("p"))
        image = b1.image()
        etcd.pause()
        try:
            t0 = time.monotonic()
            with pytest.raises(MetadataUnavailable):
                await b1.set_configs(groups={"during": {"k": "v"}})
            with pytest.raises(MetadataUnavailable):
                await b2.create_topics([("q", 1, {})], {"q": [(2,)]})
            with pytest.raises(MetadataUnavailable):
                await b1.allocate_producer_id()
            assert time.monotonic() - t0 < 4
            assert b1.get("p") is not None and b1.image() is image  # the mirror keeps serving
            await asyncio.sleep(0.5)
        finally:
            etcd.resume()
        await b2.create_topics([("after", 1, {})], {"after": [(2,)]})
        await eventually(lambda: b1.get("after"), timeout=5)
        assert b1.image().partition("after", 0).leader == 2
        assert set(b1.image().brokers) == {1, 2}
        await close_all(b1, b2)

    run(body())


def test_etcd_killed_and_restarted(etcd):
    async def body():
        b1 = await started(etcd, 1, request_timeout_ms=800, lease_ttl_ms=6000)
        b2 = await started(etcd, 2, request_timeout_ms=800, lease_ttl_ms=6000)
        await b1.create_topics([("k", 1, {})], {"k": [(1, 2)]})
        # b1's write returns once b1's own watch applied it; b2's watch may still be on its
        # way (under load it was, once), and what is checked is that b2 keeps what it has.
        await eventually(lambda: b2.get("k") is not None, timeout=10)
        etcd.kill()
        with pytest.raises(MetadataUnavailable):
            await b1.set_configs(groups={"g": {"k": "v"}})
        assert b2.get("k") is not None  # its mirror serves reads with etcd gone
        await asyncio.sleep(1)
        etcd.start()
        await b2.create_topics([("k2", 1, {})], {"k2": [(2,)]})
        await eventually(lambda: b1.get("k2"), timeout=10)
        await eventually(lambda: set(b1.image().brokers) == {1, 2}, timeout=10)
        await close_all(b1, b2)

    run(body(), timeout=25)


def test_writes_before_start_or_after_close_are_unavailable(etcd):
    async def body():
        b = make_backend(etcd, 1)
        with pytest.raises(MetadataUnavailable):
            await b.set_configs(groups={"g": {"k": "v"}})
        await b.start(broker_info(1))
        await b.close()
        with pytest.raises(MetadataUnavailable):
            await b.allocate_producer_id()
        dead = EtcdBackend([("127.0.0.1", 1)], 1, request_timeout_ms=500)
        with pytest.raises(MetadataUnavailable):
            await dead.start(broker_info(1))

    run(body())


def test_the_stored_layout(etcd):
    async def body():
        b1 = await started(etcd, 1, "r1")
        await b1.create_topics([("lay", 1, {"k": "v"})], {"lay": [(1,)]})
        await b1.set_configs(brokers={"": {"a": "b"}})
        async with aetcd.Client("127.0.0.1", etcd.client_port) as raw:
            kvs = {kv.key.decode(): json.loads(kv.value) for kv in await raw.get_prefix(b"/odradek/")}
        assert kvs["/odradek/brokers/1"] == {"host": "127.0.0.1", "port": 9091, "rack": "r1", "endpoints": [
            ["PLAINTEXT", "127.0.0.1", 9091], ["SASL_SSL", "localhost", 9191]]}
        # Every listener's address reaches the image: Metadata answers each listener's clients with its own.
        me = b1.image().brokers[1]
        assert me.on("SASL_SSL").port == 9191 and me.on("PLAINTEXT").port == 9091 and me.on("SSL") is None
        assert kvs["/odradek/topics/lay"] == {"id": str(b1.get("lay").topic_id), "partitions": [[1]],
                                              "configs": {"k": "v"}}
        assert kvs["/odradek/partitions/lay/0"] == {"leader": 1, "leader_epoch": 0, "isr": [1]}
        assert kvs["/odradek/broker_configs/-default"] == {"a": "b"}
        assert kvs["/odradek/cluster_id"] == {"id": b1.cluster_id}
        await b1.close()

    run(body())


def test_a_broker_stalled_past_its_ttl_registers_again_with_a_new_epoch(etcd):
    async def body():
        b1, b2 = await started(etcd, 1, lease_ttl_ms=1000), await started(etcd, 2, lease_ttl_ms=1000)
        await controller_of(b1, b2)
        before = {n: b.epoch for n, b in b1.image().brokers.items()}
        assert b1.lease_current() and b2.lease_current()
        time.sleep(3.5)  # the whole process stalls (a long GC pause, SIGSTOP): both leases expire
        # Before anything else runs, each knows it cannot count on its lease: it may have
        # been replaced while it stood still.
        assert not b1.lease_current() and not b2.lease_current()

        def again():
            brokers = b1.image().brokers
            return set(brokers) == {1, 2} and all(brokers[n].epoch > before[n] for n in (1, 2))
        await eventually(again, timeout=8)
        # Registered again, and the watch has applied it: it counts on the new lease.
        await eventually(lambda: b1.lease_current() and b2.lease_current(), timeout=8)
        assert b1._revision >= b1._lease_revision > 0
        await controller_of(b1, b2)
        await eventually(lambda: b1.image() == b2.image())
        await close_all(b1, b2)

    run(body())


def test_a_broker_counts_on_its_lease_for_its_ttl_from_the_last_refresh_it_sent(etcd):
    now = [1000.0]  # the broker's clock, injected; etcd's runs on its own

    async def body():
        b = await started(etcd, 1, lease_ttl_ms=3000, clock=lambda: now[0])
        ttl = b._granted_ttl
        assert ttl >= 3 and b.lease_current()
        now[0] += ttl * 0.85  # within the part of the TTL it counts on
        assert b.lease_current()
        now[0] += ttl * 0.1  # past it, with no refresh answered meanwhile
        assert not b.lease_current()
        # The next keepalive (every TTL/3 of real time) refreshes the lease; counted from
        # when that refresh was sent on this clock.
        sent_at = now[0]
        await eventually(lambda: b.lease_current(), timeout=ttl)
        assert b._lease_deadline == pytest.approx(sent_at + ttl * 0.9)
        await b.close()
        assert not b.lease_current()  # closed: no lease at all

    run(body())


def test_endpoints_are_tried_in_order(etcd):
    async def body():
        from odradek.cluster.etcd_process import free_port
        b = EtcdBackend([("127.0.0.1", free_port()), etcd.endpoint], 1, request_timeout_ms=1000)
        await b.start(broker_info(1))
        assert set(b.image().brokers) == {1} and b.endpoints[b._ep] == etcd.endpoint
        await b.close()

    run(body())
