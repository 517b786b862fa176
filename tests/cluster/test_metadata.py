"""Tests for odradek.cluster.metadata.MetadataStore: topic ids, persistence, collisions, producer ids."""

from __future__ import annotations

import base64
import errno
import itertools
import json
import uuid

import pytest

from odradek.cluster import metadata as metadata_mod
from odradek.cluster.metadata import JOURNAL_FILE, METADATA_FILE, MetadataStore, Topic, TopicCollision, TopicExists
from odradek.log.errors import StorageError


def counter_ids(start: int = 1):
    """A deterministic id generator: UUID(int=start), UUID(int=start+1), ..."""
    it = itertools.count(start)
    return lambda: uuid.UUID(int=next(it))


def test_new_store_has_cluster_id_and_file(tmp_path):
    store = MetadataStore(tmp_path / "data")
    assert (tmp_path / "data" / METADATA_FILE).exists()
    assert len(store.cluster_id) == 22
    # URL-safe base64 of 16 bytes, padding stripped (Kafka's cluster id format).
    assert len(base64.urlsafe_b64decode(store.cluster_id + "==")) == 16
    assert store.topics == {}


def test_topic_ids_are_never_zero(tmp_path, monkeypatch):
    seq = iter([uuid.UUID(int=0), uuid.UUID(int=0), uuid.UUID(int=5), uuid.UUID(int=0), uuid.UUID(int=9)])
    monkeypatch.setattr(metadata_mod.uuid, "uuid4", lambda: next(seq))
    store = MetadataStore(tmp_path)  # cluster id takes UUID 5
    t = store.create("orders", 1, {})
    assert t.topic_id == uuid.UUID(int=9)
    assert t.topic_id.int != 0


def test_random_topic_ids_are_distinct_and_non_zero(tmp_path):
    store = MetadataStore(tmp_path)
    ids = {store.create(f"t{i}", 1, {}).topic_id for i in range(50)}
    assert len(ids) == 50
    assert all(i.int != 0 for i in ids)


def test_topics_stable_across_reload(tmp_path):
    store = MetadataStore(tmp_path)
    a = store.create("orders", 3, {"retention.ms": "1000", "cleanup.policy": "compact"})
    b = store.create("audit", 1, {})
    cluster = store.cluster_id
    again = MetadataStore(tmp_path)
    assert again.cluster_id == cluster
    assert set(again.topics) == {"orders", "audit"}
    ra = again.get("orders")
    assert (ra.topic_id, ra.partitions, ra.configs) == (a.topic_id, 3, {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert again.get_by_id(b.topic_id).name == "audit"
    assert again.get_by_id(uuid.uuid4()) is None


def test_new_id_after_delete_and_recreate(tmp_path):
    store = MetadataStore(tmp_path)
    first = store.create("orders", 1, {})
    deleted = store.delete("orders")
    assert deleted.topic_id == first.topic_id
    assert store.get("orders") is None
    assert store.get_by_id(first.topic_id) is None
    second = store.create("orders", 2, {})
    assert second.topic_id != first.topic_id
    again = MetadataStore(tmp_path)
    assert again.get("orders").topic_id == second.topic_id
    assert again.get_by_id(first.topic_id) is None


def test_new_id_after_delete_recreate_with_deterministic_generator(tmp_path):
    store = MetadataStore(tmp_path, new_id=counter_ids())
    first = store.create("x", 1, {})
    store.delete("x")
    second = store.create("x", 1, {})
    assert first.topic_id != second.topic_id


def test_delete_persists(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("a", 1, {})
    store.create("b", 1, {})
    store.delete("a")
    again = MetadataStore(tmp_path)
    assert set(again.topics) == {"b"}


def test_delete_unknown_topic_raises(tmp_path):
    store = MetadataStore(tmp_path)
    with pytest.raises(KeyError):
        store.delete("missing")


def test_create_existing_name_rejected(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("orders", 1, {})
    with pytest.raises(TopicExists):
        store.create("orders", 5, {})
    assert store.get("orders").partitions == 1


@pytest.mark.parametrize(
    "existing, new",
    [("my.topic", "my_topic"), ("my_topic", "my.topic"), ("a.b_c", "a_b.c"), ("a..b", "a__b")],
)
def test_dot_underscore_collision_rejected(tmp_path, existing, new):
    store = MetadataStore(tmp_path)
    store.create(existing, 1, {})
    with pytest.raises(TopicCollision):
        store.create(new, 1, {})
    assert new not in store.topics
    assert new not in MetadataStore(tmp_path).topics
    # Once the colliding topic is gone, the name is free.
    store.delete(existing)
    store.create(new, 1, {})


def test_names_differing_otherwise_do_not_collide(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("my.topic", 1, {})
    store.create("my-topic", 1, {})
    store.create("My_topic", 1, {})
    assert len(store.topics) == 3


def test_set_partitions_persists(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("t", 1, {})
    store.set_partitions("t", 6)
    assert MetadataStore(tmp_path).get("t").partitions == 6


def test_metadata_files_are_valid_json_without_temp_leftovers(tmp_path):
    store = MetadataStore(tmp_path)
    t = store.create("t", 2, {"a": "b"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([METADATA_FILE, JOURNAL_FILE])
    (entry,) = [json.loads(line) for line in (tmp_path / JOURNAL_FILE).read_text().splitlines()]
    assert entry["ops"] == [["create", "t", str(t.topic_id), 2, {"a": "b"}]]
    store.compact()
    doc = json.loads((tmp_path / METADATA_FILE).read_text())
    assert doc["topics"] == [{"name": "t", "id": str(t.topic_id), "partitions": 2, "configs": {"a": "b"}}]
    assert (tmp_path / JOURNAL_FILE).read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([METADATA_FILE, JOURNAL_FILE])
    assert MetadataStore(tmp_path).get("t").topic_id == t.topic_id


# ----------------------------------------------------------------------------- journal


def test_one_request_is_one_journal_write_whatever_its_size(tmp_path, monkeypatch):
    store = MetadataStore(tmp_path)
    fsyncs = []
    real = metadata_mod.os.fsync
    monkeypatch.setattr(metadata_mod.os, "fsync", lambda fd: fsyncs.append(fd) or real(fd))
    topics = store.create_many([(f"t{i}", 1, {}) for i in range(10_000)])
    assert len(fsyncs) == 1 and len(topics) == 10_000
    # ... and one topic at a time appends a line, never rewrites the whole document.
    before = (tmp_path / METADATA_FILE).stat().st_mtime_ns
    for i in range(50):
        store.create(f"more{i}", 1, {})
    assert (tmp_path / METADATA_FILE).stat().st_mtime_ns == before
    again = MetadataStore(tmp_path)
    assert len(again.topics) == 10_050 and again.get("t9999").topic_id == topics[-1].topic_id


def test_create_many_is_all_or_nothing(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("a.b", 1, {})
    with pytest.raises(TopicCollision):
        store.create_many([("x", 1, {}), ("a_b", 1, {})])
    with pytest.raises(TopicCollision):
        store.create_many([("y.z", 1, {}), ("y_z", 1, {})])
    with pytest.raises(TopicExists):
        store.create_many([("q", 1, {}), ("q", 2, {})])
    assert set(store.topics) == {"a.b"}
    assert set(MetadataStore(tmp_path).topics) == {"a.b"}


def test_a_torn_last_journal_line_is_dropped(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("kept", 1, {})
    with open(tmp_path / JOURNAL_FILE, "ab") as f:
        f.write(b'{"seq":2,"ops":[["create","lost"')  # a crash mid-append: never acknowledged
    again = MetadataStore(tmp_path)
    assert set(again.topics) == {"kept"}
    again.create("next", 1, {})
    assert set(MetadataStore(tmp_path).topics) == {"kept", "next"}


def test_journal_entries_already_in_the_snapshot_are_not_applied_twice(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("a", 1, {})
    store.create("b", 1, {})
    journal = (tmp_path / JOURNAL_FILE).read_bytes()
    store.compact()
    # A crash between writing the snapshot and emptying the journal.
    (tmp_path / JOURNAL_FILE).write_bytes(journal)
    again = MetadataStore(tmp_path)
    assert set(again.topics) == {"a", "b"}


def test_the_journal_is_folded_into_the_snapshot_as_it_grows(tmp_path, monkeypatch):
    monkeypatch.setattr(metadata_mod, "MIN_COMPACT_BYTES", 2000)
    store = MetadataStore(tmp_path)
    for i in range(200):
        store.create(f"topic-{i}", 1, {})
    assert (tmp_path / JOURNAL_FILE).stat().st_size <= max(2000, (tmp_path / METADATA_FILE).stat().st_size) + 200
    assert len(MetadataStore(tmp_path).topics) == 200


def test_a_failed_write_changes_nothing(tmp_path, monkeypatch):
    store = MetadataStore(tmp_path)
    store.create("before", 1, {})
    size = (tmp_path / JOURNAL_FILE).stat().st_size

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(metadata_mod.os, "fsync", full)
    with pytest.raises(StorageError) as err:
        store.create("during", 1, {})
    assert err.value.transient
    assert store.get("during") is None and "during" not in {t for t in store.topics}
    assert (tmp_path / JOURNAL_FILE).stat().st_size == size  # no torn line left behind
    monkeypatch.undo()
    store.create("after", 1, {})
    assert set(MetadataStore(tmp_path).topics) == {"before", "after"}


def test_internal_topics():
    assert Topic("__consumer_offsets", uuid.uuid4(), 50).is_internal
    assert Topic("__transaction_state", uuid.uuid4(), 50).is_internal
    assert not Topic("__other", uuid.uuid4(), 1).is_internal


# ----------------------------------------------------------------------------- producer ids


def test_producer_ids_unique_within_a_run(tmp_path):
    store = MetadataStore(tmp_path)
    ids = [store.allocate_producer_id(block=10) for _ in range(35)]
    assert ids == sorted(set(ids))
    assert ids[0] >= 0


def test_producer_ids_never_reused_across_reloads(tmp_path):
    seen: list[int] = []
    for restart in range(6):
        store = MetadataStore(tmp_path)
        for _ in range(restart * 3 + 1):
            seen.append(store.allocate_producer_id(block=4))
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)


def test_producer_id_block_reserved_on_disk_before_use(tmp_path):
    store = MetadataStore(tmp_path)
    pid = store.allocate_producer_id(block=100)
    ops = [op for line in (tmp_path / JOURNAL_FILE).read_text().splitlines() for op in json.loads(line)["ops"]]
    assert ops == [["producer_block", 100]] and pid < 100
    # A crash right now (no further save) must not lead to reuse.
    again = MetadataStore(tmp_path)
    assert again.allocate_producer_id(block=100) > pid


def test_producer_ids_survive_topic_changes(tmp_path):
    store = MetadataStore(tmp_path)
    a = store.allocate_producer_id(block=2)
    store.create("t", 1, {})
    store.delete("t")
    again = MetadataStore(tmp_path)
    assert again.allocate_producer_id(block=2) > a


# ----------------------------------------------------------------------------- configs


def test_set_configs_replaces_topic_overrides_and_broker_configs_and_persists(tmp_path):
    store = MetadataStore(tmp_path)
    store.create("t", 1, {"retention.ms": "1000"})
    attached = store.broker_configs
    store.set_configs(topics={"t": {"segment.ms": "5"}}, brokers={"": {"log.retention.ms": "7"}, "1": {"x": "y"}},
                      groups={"g": {"consumer.session.timeout.ms": "50000"}})
    assert store.get("t").configs == {"segment.ms": "5"}
    assert store.broker_configs is attached  # changed in place: an attached BrokerConfig sees it
    assert attached == {"": {"log.retention.ms": "7"}, "1": {"x": "y"}}
    store.set_configs(brokers={"1": {}})  # an empty set removes the resource
    for again in (MetadataStore(tmp_path), _compacted(tmp_path)):
        assert again.get("t").configs == {"segment.ms": "5"}
        assert again.broker_configs == {"": {"log.retention.ms": "7"}}
        assert again.group_configs == {"g": {"consumer.session.timeout.ms": "50000"}}


def _compacted(path):
    store = MetadataStore(path)
    store.compact()  # the snapshot, not the journal, holds them now
    return MetadataStore(path)


def test_set_configs_is_one_journal_write_and_checks_topics_first(tmp_path, monkeypatch):
    store = MetadataStore(tmp_path)
    store.create("a", 1, {})
    store.create("b", 1, {})
    writes = []
    real = store._commit
    monkeypatch.setattr(store, "_commit", lambda ops: (writes.append(ops), real(ops)))
    store.set_configs(topics={"a": {"retention.ms": "1"}, "b": {"retention.ms": "2"}}, brokers={"": {"k": "v"}})
    assert len(writes) == 1
    with pytest.raises(KeyError):
        store.set_configs(topics={"a": {}, "missing": {}})
    assert len(writes) == 1 and store.get("a").configs == {"retention.ms": "1"}
