"""Drive the coordinator's handlers and capture, per request, the exact records written.

Every import of a handler entry point used by the record-pinning tests
(test_records_consumer, test_records_classic, test_records_offsets,
test_records_migration) lives here, so that moving the entry points (for example into
coordinator/dispatch.py) means editing this one module.

`Driver` wraps a `CoordinatorRuntime` whose writer keeps every batch it is handed: a
request's records are the batches written while it ran (one batch per write; a request
that writes nothing leaves none). `replay()` feeds everything written so far, through the
binary form the log holds, into a fresh shard, as a coordinator loading the partition
does, so a test can compare the state the records rebuild with the live state.
"""

from __future__ import annotations

import itertools
import uuid

from odradek.coordinator import records as R
from odradek.coordinator.classic.join import JoinRequest
from odradek.coordinator.classic.leave import LeaveIdentity
from odradek.coordinator.classic.sync import ClassicHeartbeat, SyncRequest
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer.heartbeat import HeartbeatRequest
from odradek.coordinator.dispatch import consumer_group_heartbeat as _consumer_heartbeat
from odradek.coordinator.dispatch import heartbeat as _classic_heartbeat
from odradek.coordinator.dispatch import join_group as _classic_join
from odradek.coordinator.dispatch import leave_group as _classic_leave
from odradek.coordinator.dispatch import sync_group as _classic_sync
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.offsets import CommitPartition, CommitRequest
from odradek.coordinator.offsets import commit as _commit
from odradek.coordinator.offsets import delete as _delete_offsets
from odradek.coordinator.runtime import CoordinatorRuntime
from odradek.coordinator.shard import Shard
from odradek.coordinator.timer import Timer

__all__ = ["BAR", "CLIENT_HOST", "CLIENT_ID", "FOO", "CommitPartition", "Driver", "assert_records_equal"]

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA2)

CLIENT_ID = "client"
CLIENT_HOST = "/127.0.0.1"

_TYPE_NAMES = {
    R.OFFSET_COMMIT: "OffsetCommit", R.CLASSIC_GROUP: "GroupMetadata(classic)", R.GROUP_METADATA: "ConsumerGroupMetadata",
    R.PARTITION_METADATA: "PartitionMetadata", R.MEMBER_METADATA: "MemberMetadata",
    R.TARGET_METADATA: "TargetAssignmentMetadata", R.TARGET_MEMBER: "TargetAssignmentMember",
    R.CURRENT_ASSIGNMENT: "CurrentMemberAssignment", R.REGULAR_EXPRESSION: "RegularExpression",
}


def _show(record: R.CoordinatorRecord | None) -> str:
    if record is None:
        return "<none>"
    name = _TYPE_NAMES.get(record.type, f"type {record.type}")
    value = "TOMBSTONE" if record.value is None else repr(record.value)
    return f"{name}{record.key!r} = {value}"


def assert_records_equal(expected: list[R.CoordinatorRecord], actual: list[R.CoordinatorRecord]) -> None:
    """`expected == actual`, order included; on failure a record-by-record diff."""
    expected, actual = list(expected), list(actual)
    if expected == actual:
        return
    lines = [f"records differ: expected {len(expected)}, got {len(actual)}"]
    for i, (e, a) in enumerate(itertools.zip_longest(expected, actual)):
        if e == a:
            lines.append(f"  [{i}]   {_show(a)}")
            continue
        lines.append(f"  [{i}] - {_show(e)}")
        lines.append(f"  [{i}] + {_show(a)}")
        if e is not None and a is not None and e.type == a.type and e.key == a.key and e.value and a.value:
            for field in sorted(set(e.value) | set(a.value)):
                if e.value.get(field, "<missing>") != a.value.get(field, "<missing>"):
                    lines.append(f"        {field}: expected {e.value.get(field, '<missing>')!r}, "
                                 f"got {a.value.get(field, '<missing>')!r}")
    raise AssertionError("\n".join(lines))


class Driver:
    """A one-partition coordinator driven by hand, with a clock the test moves."""

    def __init__(self, topics=(("foo", FOO, 4),), config: CoordinatorConfig | None = None, now: int = 1_000):
        self.config = config or CoordinatorConfig(offsets_topic_partitions=1, initial_rebalance_delay_ms=0)
        assert self.config.offsets_topic_partitions == 1
        self.now = now
        self.image = MetadataImage.of(list(topics))
        self._ids = (f"id{i}" for i in itertools.count())
        self.log: list[R.CoordinatorRecord] = []  # every record written, in order
        self.batches: list[list[R.CoordinatorRecord]] = []  # the batches of the last call
        self.runtime = CoordinatorRuntime(self.config, self._write, self.image, new_member_id=lambda: next(self._ids))
        self.runtime.load(0, [], self.now)

    def _write(self, partition: int, records, now_ms: int) -> int:
        assert partition == 0 and now_ms == self.now
        batch = list(records)
        self.batches.append(batch)
        self.log.extend(batch)
        return len(self.log) - 1  # the offset of the last record written

    @property
    def shard(self) -> Shard:
        return self.runtime.shards[0]

    @property
    def written(self) -> list[R.CoordinatorRecord]:
        """The records of the last call, which must have written at most one batch."""
        assert len(self.batches) <= 1, f"expected one batch, got {len(self.batches)}: {self.batches!r}"
        return self.batches[0] if self.batches else []

    def _run(self, group: str, op):
        self.batches = []
        return self.runtime.run(group, op, self.now)

    def advance(self, ms: int) -> None:
        """Move the clock and run the timers that fell due (their records are `batches`)."""
        self.batches = []
        self.now += ms
        self.runtime.tick(self.now)

    def set_topics(self, topics) -> None:
        """A new metadata image (the runtime's metadata-change path; its records are `batches`)."""
        self.batches = []
        self.image = MetadataImage.of(list(topics), version=self.image.version + 1)
        self.runtime.update_image(self.image, self.now)

    # --- KIP-848 ConsumerGroupHeartbeat ---------------------------------------------------------

    def hb(self, member: str, epoch: int, group: str = "g", *, topics=None, owned=None, instance_id=None,
           rebalance_timeout=-1, assignor=None, rack_id=None) -> dict:
        if epoch == 0:
            rebalance_timeout = 300_000 if rebalance_timeout == -1 else rebalance_timeout
            topics = ("foo",) if topics is None else topics
            owned = {} if owned is None else owned
        req = HeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout, subscribed_topic_names=None if topics is None else tuple(topics),
            server_assignor=assignor, owned=None if owned is None else {t: frozenset(ps) for t, ps in owned.items()},
            client_id=CLIENT_ID, client_host=CLIENT_HOST, version=1,
        )
        return self._run(group, lambda shard, now: _consumer_heartbeat(shard, req, now))

    # --- classic JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------

    def join(self, member: str = "", group: str = "g", *, protocols=(("range", b"m"),), session=10_000,
             rebalance=30_000, instance_id=None, version=5, client_id=CLIENT_ID) -> list:
        """The JoinGroup response once sent: a list holding it, empty while the request is parked."""
        box: list = []
        req = JoinRequest(group, member, session, rebalance, "consumer", tuple(protocols), instance_id, client_id,
                          CLIENT_HOST, None, version)
        self._run(group, lambda shard, now: _classic_join(shard, req, box.append, now))
        return box

    def sync(self, member: str, generation: int, group: str = "g", *, assignments=(), instance_id=None) -> list:
        box: list = []
        req = SyncRequest(group, member, generation, instance_id, None, None, tuple(assignments))
        self._run(group, lambda shard, now: _classic_sync(shard, req, box.append, now))
        return box

    def cheartbeat(self, member: str, generation: int, group: str = "g", *, instance_id=None) -> int:
        req = ClassicHeartbeat(group, member, generation, instance_id)
        return int(self._run(group, lambda shard, now: _classic_heartbeat(shard, req, now))["error_code"])

    def leave(self, *identities: tuple, group: str = "g") -> dict:
        ids = tuple(LeaveIdentity(*i) for i in identities)
        return self._run(group, lambda shard, now: _classic_leave(shard, group, ids, now))

    # --- offsets ----------------------------------------------------------------------------------

    def commit(self, topics, group: str = "g", *, member: str = "", epoch: int = -1, version: int = 9) -> dict:
        """`topics`: [(topic name, [CommitPartition, ...])]; returns {(topic, partition): error code}."""
        ids = {n: t.topic_id for n, t in self.image.topics.items()}
        req = CommitRequest(group, member, epoch, None, tuple((n, ids.get(n), tuple(ps)) for n, ps in topics), version)
        resp = self._run(group, lambda shard, now: _commit(shard, req, now))
        return {(t["name"], p["partition_index"]): int(p["error_code"]) for t in resp["topics"] for p in t["partitions"]}

    def delete_offsets(self, topics, group: str = "g") -> dict:
        """OffsetDelete; `topics`: [(topic name, [partition, ...])]."""
        return self._run(group, lambda shard, now: _delete_offsets(shard, group, [(n, list(ps)) for n, ps in topics], now))

    # --- replay -----------------------------------------------------------------------------------

    def replay(self) -> dict:
        """The snapshot of a fresh shard that replayed every record written so far (through
        their binary form), as a coordinator loading the partition does."""
        shard = Shard(0, self.config, self.image, Timer())
        shard.loading = True
        for record in self.log:
            decoded = R.decode(*R.encode(record))
            assert decoded is not None
            shard.replay(decoded)
        shard.loading = False
        return shard.snapshot()
