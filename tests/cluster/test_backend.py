"""cluster/backend: the file store behind the MetadataBackend interface, run_now, URLs."""

import asyncio

import pytest

from odradek.cluster.backend import FileBackend, parse_metadata_url, run_now
from odradek.cluster.image import BrokerInfo


def test_file_backend_leads_every_partition_alone_and_publishes_images(tmp_path):
    b = FileBackend(tmp_path, node_id=4)
    seen = []
    b.subscribe(lambda old, new: seen.append((set(old.partitions), set(new.partitions))))
    run_now(b.start(BrokerInfo(4, "h", 1, "r")))
    run_now(b.create_topics([("t", 2, {})]))
    assert seen[-1] == (set(), {("t", 0), ("t", 1)})
    img = b.image()
    assert img.controller == 4 and list(img.brokers) == [4]
    state = img.partition("t", 1)
    assert (state.replicas, state.leader, state.leader_epoch, state.isr) == ((4,), 4, 0, (4,))
    run_now(b.add_partitions({"t": 3}))
    assert ("t", 2) in b.image().partitions
    run_now(b.delete_topic("t"))
    assert not b.image().partitions and b.get("t") is None


def test_file_backend_state_survives_reopening(tmp_path):
    b = FileBackend(tmp_path)
    topic = run_now(b.create_topics([("t", 1, {"retention.ms": "5"})]))[0]
    run_now(b.set_configs(groups={"g": {"k": "v"}}))
    again = FileBackend(tmp_path)
    assert again.get("t").topic_id == topic.topic_id and again.get("t").configs == {"retention.ms": "5"}
    assert again.group_configs == {"g": {"k": "v"}}
    assert again.cluster_id == b.cluster_id


def test_run_now_refuses_a_coroutine_that_suspends():
    async def suspends():
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="event loop"):
        run_now(suspends())


def test_metadata_urls():
    assert parse_metadata_url("etcd://127.0.0.1:2379,[::1]:2380") == [("127.0.0.1", 2379), ("::1", 2380)]
    for bad in ("http://x:1", "etcd://x", "etcd://:12"):
        with pytest.raises(ValueError):
            parse_metadata_url(bad)
