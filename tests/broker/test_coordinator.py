"""The broker's coordinator glue: records land in `__consumer_offsets`, a restart (clean or
after compaction) rebuilds exactly the same state, topic changes reach the groups."""

from __future__ import annotations

from odradek.cluster.names import CONSUMER_OFFSETS
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame


def hb(b: InProcess, member, epoch=0, topics=("t",), owned=(), group="g", instance_id=None, regex=None):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance_id, "rack_id": None,
            "rebalance_timeout": 30_000 if epoch == 0 else -1,
            "subscribed_topic_names": list(topics) if epoch == 0 and regex is None else None,
            "subscribed_topic_regex": regex, "server_assignor": None,
            "topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in owned] if epoch == 0 or owned else None}
    _, resp = parse_response(68, 1, b.handle(request_frame(68, 1, body)))
    return resp


def commit(b: InProcess, member, epoch, offsets, group="g"):
    body = {"group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member, "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_leader_epoch": -1, "committed_metadata": "m"}]}
                       for t, p, o in offsets]}
    _, resp = parse_response(8, 9, b.handle(request_frame(8, 9, body)))
    return [int(p.error_code) for t in resp.topics for p in t.partitions]


def snapshot(b: InProcess) -> dict:
    return {p: s.snapshot() for p, s in b.broker.coordinator.runtime.shards.items()}


def test_offsets_topic_is_created_compacted(tmp_path):
    b = InProcess(tmp_path / "d", extra={"offsets.topic.num.partitions": "5"})
    try:
        topic = b.broker.metadata.get(CONSUMER_OFFSETS)
        assert topic.partitions == 5 and topic.configs["cleanup.policy"] == "compact"
        assert sorted(b.broker.coordinator.runtime.shards) == [0, 1, 2, 3, 4]
    finally:
        b.close()


def _scenario(b: InProcess):
    b.broker.create_topic("t", 4, {})
    tid = b.broker.metadata.get("t").topic_id
    hb(b, "A")
    hb(b, "B", instance_id="static-b")
    r = hb(b, "A", epoch=1)
    assert r.error_code == 0
    a = next(tp.partitions for tp in r.assignment.topic_partitions) if r.assignment else ()
    hb(b, "A", epoch=1, owned=[(tid, list(a))])
    hb(b, "B", epoch=2)
    assert commit(b, "A", 2, [("t", a[0], 42)]) == [0]
    assert commit(b, "", -1, [("t", 0, 7)], group="simple") == [0]
    hb(b, "B", epoch=-2, instance_id="static-b")
    b.broker.add_partitions(b.broker.metadata.get("t"), 6)
    hb(b, "C", group="other", regex="t|u")
    return tid


def test_restart_rebuilds_identical_state(tmp_path):
    b = InProcess(tmp_path / "d")
    _scenario(b)
    before = snapshot(b)
    assert before[b.broker.coordinator.runtime.partition_for("g")]["consumer_groups"]["g"]["group_epoch"] >= 3
    b.close()
    b2 = InProcess(tmp_path / "d")
    try:
        assert snapshot(b2) == before
        assert b2.broker.coordinator.records_loaded > 0
    finally:
        b2.close()


def test_state_survives_compaction(tmp_path):
    b = InProcess(tmp_path / "d", extra={"offsets.topic.num.partitions": "1"})
    _scenario(b)
    # Churn: many heartbeats that rewrite the same keys, then compact everything but the active segment.
    for i in range(30):
        assert commit(b, "", -1, [("t", 0, i)], group="simple") == [0]
    plog = b.broker.logs.get(CONSUMER_OFFSETS, 0)
    plog.roll(b.broker.clock())
    before = snapshot(b)
    size_before = plog.size_bytes
    assert b.broker.compact(b.broker.clock() + 10**9) >= 1
    assert plog.size_bytes < size_before
    b.close()
    b2 = InProcess(tmp_path / "d", extra={"offsets.topic.num.partitions": "1"})
    try:
        assert snapshot(b2) == before
    finally:
        b2.close()


def test_topic_changes_reach_groups(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 2, {})
        hb(b, "A")
        group = b.broker.coordinator.runtime.shard_for("g").consumer_groups["g"]
        e = group.group_epoch
        b.broker.add_partitions(b.broker.metadata.get("t"), 3)
        assert group.group_epoch == e + 1
        b.broker.delete_topic(b.broker.metadata.get("t"))
        assert group.group_epoch == e + 2 and group.subscribed_topics == {}
        b.broker.create_topic("t", 1, {})
        assert group.group_epoch == e + 3 and group.subscribed_topics["t"].partitions == 1
        b.broker.create_topic("unrelated", 1, {})
        assert group.group_epoch == e + 3
    finally:
        b.close()


def test_coordinator_tick_expires_sessions(tmp_path):
    b = InProcess(tmp_path / "d", extra={"group.consumer.session.timeout.ms": "45000"})
    try:
        b.broker.create_topic("t", 1, {})
        hb(b, "A")
        group = b.broker.coordinator.runtime.shard_for("g").consumer_groups["g"]
        now = b.broker.clock()
        b.broker.coordinator_tick(now + 44_000)
        assert "A" in group.members
        b.broker.coordinator_tick(now + 46_000)
        assert "A" not in group.members
    finally:
        b.close()


def test_commits_for_unknown_topics_or_partitions_are_refused(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 2, {})
        # As Kafka: UNKNOWN_TOPIC_OR_PARTITION (3) for a missing topic or partition; the rest commit.
        assert commit(b, "", -1, [("t", 1, 5), ("t", 2, 5), ("nope", 0, 5)], group="s") == [0, 3, 3]
        shard = b.broker.coordinator.runtime.shard_for("s")
        assert set(shard.offsets["s"]) == {("t", 1)}
    finally:
        b.close()


# --- a shard not served here, a write the disk refuses (issue 16: never a closed connection) ---


def _join(b: InProcess, group="cg", member=""):
    body = {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": member,
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
            "reason": None}
    return parse_response(11, 9, b.handle(request_frame(11, 9, body)))[1]


def _fetch(b: InProcess, group="g"):
    body = {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
            "require_stable": False}
    return parse_response(9, 9, b.handle(request_frame(9, 9, body)))[1]


def _describe(b: InProcess, group="g"):
    return parse_response(15, 5, b.handle(request_frame(15, 5, {"groups": [group],
                                                                "include_authorized_operations": False})))[1]


def test_a_shard_that_is_not_loaded_answers_not_coordinator_on_every_group_api(tmp_path):
    b = InProcess(tmp_path / "d", extra={"offsets.topic.num.partitions": "1"})
    try:
        b.broker.create_topic("t", 1, {})
        assert hb(b, "A").error_code == 0
        b.broker.coordinator.runtime.on_resignation(0)
        assert hb(b, "A", epoch=1).error_code == 16  # NOT_COORDINATOR
        assert commit(b, "A", 1, [("t", 0, 5)]) == [16]
        assert _fetch(b).groups[0].error_code == 16
        assert _describe(b).groups[0].error_code == 16
        assert _join(b).error_code == 16
        # ListGroups skips a shard not served here (Kafka ignores NOT_COORDINATOR).
        listed = parse_response(16, 4, b.handle(request_frame(16, 4, {"states_filter": []})))[1]
        assert listed.error_code == 0 and list(listed.groups) == []
        # Elected again, it serves what its log holds.
        b.broker.coordinator.runtime.on_election(0, 1, b.broker.clock())
        assert [g.group_id for g in parse_response(16, 4, b.handle(request_frame(16, 4, {"states_filter": []})))[1]
                .groups] == ["g"]
    finally:
        b.close()


def test_a_coordinator_write_the_disk_refuses_answers_not_coordinator_and_keeps_nothing(tmp_path, monkeypatch):
    import errno

    from odradek.log.errors import StorageError

    b = InProcess(tmp_path / "d", extra={"offsets.topic.num.partitions": "1"})
    try:
        b.broker.create_topic("t", 2, {})
        assert hb(b, "A").error_code == 0
        assert commit(b, "A", 1, [("t", 0, 5)]) == [0]
        plog = b.broker.logs.get(CONSUMER_OFFSETS, 0)
        before = snapshot(b)

        def refuse(*_a, **_k):  # a full disk: transient, the directory stays online
            raise StorageError("append", OSError(errno.ENOSPC, "No space left on device"))

        monkeypatch.setattr(plog, "append", refuse)
        assert commit(b, "A", 1, [("t", 0, 9)]) == [16]  # answered, not a closed connection
        assert hb(b, "B").error_code == 16
        assert snapshot(b) == before  # reloaded from the log: neither the commit nor B
        assert _fetch(b).groups[0].topics[0].partitions[0].committed_offset == 5
        monkeypatch.undo()
        assert commit(b, "A", 1, [("t", 0, 9)]) == [0]
        assert _fetch(b).groups[0].topics[0].partitions[0].committed_offset == 9
    finally:
        b.close()
