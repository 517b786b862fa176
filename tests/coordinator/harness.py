"""A pure coordinator driven by hand: runtime + in-memory log + a clock the test moves.

No broker, no sockets: heartbeats and commits go straight to the sans-I/O handlers, the
records they return are kept in `log` (per partition), and `restart()` replays that log
into a fresh runtime, exactly as a broker start-up does.
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
from odradek.coordinator.dispatch import consumer_group_heartbeat as heartbeat
from odradek.coordinator.dispatch import heartbeat as classic_heartbeat
from odradek.coordinator.dispatch import join_group as join
from odradek.coordinator.dispatch import leave_group as leave
from odradek.coordinator.dispatch import sync_group as sync
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.offsets import (
    CommitPartition,
    CommitRequest,
    commit,
    fetch_group,
)
from odradek.coordinator.runtime import CoordinatorRuntime

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA2)


class Coord:
    def __init__(self, topics=(("foo", FOO, 3),), config: CoordinatorConfig | None = None, partitions: int = 1,
                 encode: bool = True):
        self.config = config or CoordinatorConfig(offsets_topic_partitions=partitions)
        self.now = 1_000
        self.log: dict[int, list[bytes]] = {}
        self.encode = encode
        self._ids = (f"member-{i}" for i in itertools.count())
        self.image = MetadataImage.of(list(topics))
        self.runtime = self._new_runtime()
        for p in range(self.config.offsets_topic_partitions):
            self.runtime.load(p, [], self.now)
        self.written: list[R.CoordinatorRecord] = []

    def _new_runtime(self) -> CoordinatorRuntime:
        return CoordinatorRuntime(self.config, self._write, self.image, new_member_id=lambda: next(self._ids),
                                  reader=lambda p: list(self.log.get(p, [])))

    def _write(self, partition, records, now_ms):
        self.written = list(records)
        # Round-trip through the binary form: what replay sees is what the log holds.
        self.log.setdefault(partition, []).extend(R.encode(r) for r in records)
        return len(self.log[partition]) - 1  # the last offset written

    def replayed(self, partition: int = 0) -> list[R.CoordinatorRecord]:
        return [R.decode(k, v) for k, v in self.log.get(partition, [])]

    def restart(self) -> None:
        self.runtime = self._new_runtime()
        for p in range(self.config.offsets_topic_partitions):
            self.runtime.load(p, self.replayed(p), self.now)

    def snapshot(self) -> dict:
        return {p: s.snapshot() for p, s in sorted(self.runtime.shards.items())}

    # --- driving ------------------------------------------------------------------------------

    def hb(self, group="g", member="A", epoch=0, *, owned=None, topics=None, regex=None, rebalance_timeout=-1,
           instance_id=None, rack_id=None, assignor=None, version=1, full=False):
        if epoch == 0:
            rebalance_timeout = 300_000 if rebalance_timeout == -1 else rebalance_timeout
            if topics is None and regex is None:
                topics = ("foo",)
            if owned is None:
                owned = {}
        req = HeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout, subscribed_topic_names=tuple(topics) if topics is not None else None,
            subscribed_topic_regex=regex, server_assignor=assignor,
            owned=None if owned is None else {t: frozenset(ps) for t, ps in owned.items()},
            client_id="client", client_host="/127.0.0.1", version=version,
        )
        self.written = []
        return self.runtime.run(group, lambda shard, now: heartbeat(shard, req, now), self.now)

    def commit(self, group="g", member="", epoch=-1, offsets=(("foo", 0, 10),), version=9, instance_id=None):
        by_topic: dict[str, list] = {}
        for topic, p, off in offsets:
            by_topic.setdefault(topic, []).append(CommitPartition(p, off))
        ids = {n: t.topic_id for n, t in self.image.topics.items()}
        req = CommitRequest(group, member, epoch, instance_id,
                            tuple((t, ids.get(t), tuple(ps)) for t, ps in by_topic.items()), version)
        self.written = []
        resp = self.runtime.run(group, lambda shard, now: commit(shard, req, now), self.now)
        return {(t["name"], p["partition_index"]): int(p["error_code"]) for t in resp["topics"] for p in t["partitions"]}

    def fetch(self, group="g", topics=None):
        shard = self.runtime.shard_for(group)
        out = fetch_group(shard, group, topics)
        return {(t["name"], p["partition_index"]): p["committed_offset"] for t in out["topics"] for p in t["partitions"]}

    def member_hb(self, gid: str, mid: str):
        """A heartbeat from a member that holds exactly what the coordinator gave it."""
        m = self.group(gid).members[mid]
        return self.hb(gid, mid, m.member_epoch, owned={t: sorted(ps) for t, ps in m.assigned.items()},
                       instance_id=m.instance_id)

    def converge(self, gid: str = "g", rounds: int = 4):
        """Heartbeat every present member (not those that left with -2) for a few rounds."""
        for _ in range(rounds):
            for mid in sorted(self.group(gid).members):
                if self.group(gid).members[mid].member_epoch >= 0:
                    self.member_hb(gid, mid)
        return self.group(gid)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.runtime.tick(self.now)

    def set_topics(self, topics) -> None:
        self.image = MetadataImage.of(list(topics), version=self.image.version + 1)
        self.runtime.update_image(self.image, self.now)

    def group(self, gid="g"):
        return self.runtime.shard_for(gid).consumer_groups.get(gid)

    # --- the classic protocol -----------------------------------------------------------------
    # join and sync answer through a reply: they return a list that holds the response once
    # the coordinator sends it (empty while the request is parked).

    def join(self, group="g", member="", *, protocols=(("range", b"m"),), session=10_000, rebalance=30_000,
             instance_id=None, version=5, protocol_type="consumer", client_id="client") -> list:
        box: list = []
        req = JoinRequest(group, member, session, rebalance, protocol_type, tuple(protocols), instance_id, client_id,
                          "/127.0.0.1", None, version)
        self.runtime.run(group, lambda shard, now: join(shard, req, box.append, now), self.now)
        return box

    def sync(self, group="g", member="", generation=1, assignments=(), instance_id=None,
             protocol_type=None, protocol_name=None) -> list:
        box: list = []
        req = SyncRequest(group, member, generation, instance_id, protocol_type, protocol_name, tuple(assignments))
        self.runtime.run(group, lambda shard, now: sync(shard, req, box.append, now), self.now)
        return box

    def cheartbeat(self, group="g", member="", generation=1, instance_id=None) -> int:
        req = ClassicHeartbeat(group, member, generation, instance_id)
        return int(self.runtime.run(group, lambda shard, now: classic_heartbeat(shard, req, now), self.now)["error_code"])

    def leave(self, group="g", *identities: tuple) -> dict:
        ids = tuple(LeaveIdentity(*i) for i in identities)
        return self.runtime.run(group, lambda shard, now: leave(shard, group, ids, now), self.now)

    def classic(self, gid="g"):
        return self.runtime.shard_for(gid).classic_groups.get(gid)

    def join_member(self, group="g", **kw) -> str:
        """The MEMBER_ID_REQUIRED round of a dynamic member (v4+): returns the member id it was given."""
        first = self.join(group, **kw)
        assert int(first[0]["error_code"]) == 79, first  # MEMBER_ID_REQUIRED
        return first[0]["member_id"]


def parts(resp, topic=FOO) -> list[int] | None:
    """Partitions of `topic` in a heartbeat response's assignment (None: no assignment sent)."""
    a = resp["assignment"]
    if a is None:
        return None
    for tp in a["topic_partitions"]:
        if tp["topic_id"] == topic:
            return sorted(tp["partitions"])
    return []


def member_view(group, mid):
    m = group.members[mid]
    return (m.member_epoch, sorted(m.assigned.get(FOO, {})), sorted(m.pending_revocation.get(FOO, {})), m.state.name)
