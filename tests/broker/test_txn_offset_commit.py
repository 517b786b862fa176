"""TxnOffsetCommit over the wire, transaction markers through the group coordinator
(`GroupCoordinator.complete_transaction`), OffsetFetch with require_stable (KIP-447), and
pending offsets surviving a restart of the broker."""

from __future__ import annotations

from odradek.cluster.names import CONSUMER_OFFSETS
from odradek.records.codec import decode_batches
from odradek.records.control import Marker
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame

PID = 7000
UNSTABLE = 88  # UNSTABLE_OFFSET_COMMIT


def txn_commit(b: InProcess, offsets, group="g", pid=PID, epoch=0, version=3, generation=-1, member=""):
    body = {"transactional_id": "tx", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": generation, "member_id": member, "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t, p, o in offsets]}
    _, resp = parse_response(28, version, b.handle(request_frame(28, version, body)))
    return {(t.name, p.partition_index): int(p.error_code) for t in resp.topics for p in t.partitions}


def fetch(b: InProcess, partitions=(0, 1), group="g", stable=False):
    body = {"group_id": group, "topics": [{"name": "t", "partition_indexes": list(partitions)}],
            "require_stable": stable}
    _, resp = parse_response(9, 7, b.handle(request_frame(9, 7, body)))
    assert resp.error_code == 0
    return {p.partition_index: (p.committed_offset, int(p.error_code)) for t in resp.topics for p in t.partitions}


def end(b: InProcess, commit: bool, group="g", pid=PID, epoch=0) -> int:
    coordinator = b.broker.coordinator
    partition = coordinator.partition_for(group)
    code = b.loop.run_until_complete(coordinator.complete_transaction(partition, Marker(pid, epoch, commit, 3), 5_000))
    return int(code)


def test_commit_then_marker_commit_makes_the_offsets_visible(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 2, {})
        assert fetch(b) == {0: (-1, 0), 1: (-1, 0)}
        assert txn_commit(b, [("t", 0, 5), ("t", 1, 6)]) == {("t", 0): 0, ("t", 1): 0}
        assert fetch(b) == {0: (-1, 0), 1: (-1, 0)}
        assert fetch(b, stable=True) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
        assert end(b, commit=True) == 0
        assert fetch(b) == {0: (5, 0), 1: (6, 0)}
        assert fetch(b, stable=True) == {0: (5, 0), 1: (6, 0)}
    finally:
        b.close()


def test_commit_then_marker_abort_drops_them(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 2, {})
        assert txn_commit(b, [("t", 0, 5)]) == {("t", 0): 0}
        assert fetch(b, stable=True) == {0: (-1, UNSTABLE), 1: (-1, 0)}
        assert end(b, commit=False) == 0
        assert fetch(b, stable=True) == {0: (-1, 0), 1: (-1, 0)}
    finally:
        b.close()


def test_the_log_holds_a_transactional_batch_and_a_control_batch(tmp_path):
    b = InProcess(tmp_path / "d", extra={"offsets.topic.num.partitions": "1"})
    try:
        b.broker.create_topic("t", 1, {})
        txn_commit(b, [("t", 0, 5)], epoch=2)
        end(b, commit=True, epoch=2)
        plog = b.broker.logs.get(CONSUMER_OFFSETS, 0)
        batches = [x for seg in plog.segments for x in decode_batches(seg.pread(0, seg.size))]
        data, control = batches[-2], batches[-1]
        assert (data.header.producer_id, data.header.producer_epoch, data.is_transactional, data.is_control) == (
            PID, 2, True, False)
        assert (control.header.producer_id, control.header.producer_epoch, control.is_control) == (PID, 2, True)
    finally:
        b.close()


def test_pending_offsets_survive_a_restart_and_then_commit(tmp_path):
    b = InProcess(tmp_path / "d")
    b.broker.create_topic("t", 2, {})
    assert txn_commit(b, [("t", 0, 5)]) == {("t", 0): 0}
    assert txn_commit(b, [("t", 1, 9)], pid=PID + 1) == {("t", 1): 0}
    assert end(b, commit=False, pid=PID + 1) == 0
    b.close()
    b = InProcess(tmp_path / "d")
    try:
        assert fetch(b, stable=True) == {0: (-1, UNSTABLE), 1: (-1, 0)}
        assert end(b, commit=True) == 0
        assert fetch(b, stable=True) == {0: (5, 0), 1: (-1, 0)}
    finally:
        b.close()
    b = InProcess(tmp_path / "d")
    try:
        assert fetch(b, stable=True) == {0: (5, 0), 1: (-1, 0)}
        shard = b.broker.coordinator.runtime.shard_for("g")
        assert shard.pending == {} and shard.open_txns == {}
    finally:
        b.close()


def test_unknown_topics_and_partitions_and_an_empty_group_id(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 1, {})
        assert txn_commit(b, [("t", 0, 1), ("t", 5, 1), ("nope", 0, 1)]) == {
            ("t", 0): 0, ("t", 5): 3, ("nope", 0): 3}  # UNKNOWN_TOPIC_OR_PARTITION
        assert txn_commit(b, [("t", 0, 1)], group="") == {("t", 0): 24}  # INVALID_GROUP_ID
    finally:
        b.close()


def test_every_version_commits(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 1, {})
        for version in range(5):
            assert txn_commit(b, [("t", 0, version)], pid=PID + version, version=version) == {("t", 0): 0}
        # A classic-group generation that does not exist (v3+): Kafka's ILLEGAL_GENERATION.
        assert txn_commit(b, [("t", 0, 1)], group="nogroup", generation=3, member="m") == {("t", 0): 22}
    finally:
        b.close()


def test_offset_fetch_v8_require_stable_per_group(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 1, {})
        txn_commit(b, [("t", 0, 4)], group="a")
        body = {"groups": [{"group_id": g, "member_id": None, "member_epoch": -1,
                            "topics": [{"name": "t", "partition_indexes": [0]}]} for g in ("a", "b")],
                "require_stable": True}
        _, resp = parse_response(9, 9, b.handle(request_frame(9, 9, body)))
        codes = {g.group_id: [int(p.error_code) for t in g.topics for p in t.partitions] for g in resp.groups}
        assert codes == {"a": [UNSTABLE], "b": [0]}
    finally:
        b.close()


def test_a_marker_for_an_offsets_partition_not_led_here_is_not_coordinator(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        coordinator = b.broker.coordinator
        partition = coordinator.partition_for("g")
        assert partition == coordinator.runtime.partition_for("g")
        coordinator.resign(partition, None)
        assert end(b, commit=True) == 16  # NOT_COORDINATOR
    finally:
        b.close()


def commit(b: InProcess, offsets, group="g"):
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t, p, o in offsets]}
    _, resp = parse_response(8, 8, b.handle(request_frame(8, 8, body)))
    return [int(p.error_code) for t in resp.topics for p in t.partitions]


def test_a_restart_replays_segments_with_and_without_transactions_in_log_order(tmp_path):
    extra = {"offsets.topic.num.partitions": "1"}
    b = InProcess(tmp_path / "d", extra=extra)
    b.broker.create_topic("t", 3, {})
    plog = b.broker.logs.get(CONSUMER_OFFSETS, 0)
    assert commit(b, [("t", 0, 1), ("t", 1, 1)]) == [0, 0]
    plog.roll(b.broker.clock())                                  # a segment without transactions
    txn_commit(b, [("t", 0, 10), ("t", 1, 10)])                  # PID: open at the end
    commit(b, [("t", 1, 20)])                                    # newer than PID's t-1
    plog.roll(b.broker.clock())
    txn_commit(b, [("t", 2, 30)], pid=PID + 1)
    assert end(b, commit=True, pid=PID + 1) == 0
    plog.roll(b.broker.clock())
    commit(b, [("t", 2, 40)], group="other")                     # another plain-only segment
    before = {p: s.snapshot() for p, s in b.broker.coordinator.runtime.shards.items()}
    assert before[0]["pending_offsets"][PID]["g"].keys() == {("t", 0), ("t", 1)}
    b.close()
    b = InProcess(tmp_path / "d", extra=extra)
    try:
        assert {p: s.snapshot() for p, s in b.broker.coordinator.runtime.shards.items()} == before
        assert end(b, commit=True) == 0
        assert fetch(b, partitions=(0, 1, 2), stable=True) == {0: (10, 0), 1: (20, 0), 2: (30, 0)}
    finally:
        b.close()


def test_a_loading_coordinator_is_not_available_to_v0_v1_clients(tmp_path):
    b = InProcess(tmp_path / "d")
    try:
        b.broker.create_topic("t", 1, {})
        runtime = b.broker.coordinator.runtime
        partition = runtime.partition_for("g")
        runtime.on_resignation(partition)
        assert runtime.begin_election(partition, 5)  # loading: COORDINATOR_LOAD_IN_PROGRESS
        assert txn_commit(b, [("t", 0, 1)], version=3) == {("t", 0): 14}
        # KafkaApis: clients before KAFKA-7296 (v0-v1) get COORDINATOR_NOT_AVAILABLE instead.
        assert txn_commit(b, [("t", 0, 1)], version=1) == {("t", 0): 15}
    finally:
        b.close()
