"""The coordinator runtime: shards, write-then-replay, timers, metadata changes.

Theory of operation (KIP-848 "Group Coordinator": one state machine per
`__consumer_offsets` partition, run as an event loop): a group belongs to partition
`abs(java_hash(group_id)) % offsets.topic.num.partitions`, as in Kafka, so tools that
compute the coordinator partition agree with us. `run(group_id, op, now)` calls the
handler `op(shard, now) -> Result`, hands the records to the injected `writer` (the
broker appends them to the partition log; the simulator keeps them in a list) and only
after that replays them into the shard and returns the response. Loading a partition
is the same replay. Due timers run through the same path.

The runtime is synchronous and touches no socket or clock: callers pass `now_ms`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable

from .classic.join import leaves_partitions_unowned
from .classic.model import ClassicState
from .classic.rebalance import prepare_rebalance, schedule_heartbeat
from .config import CoordinatorConfig
from .consumer.heartbeat import arm_timers, assign_if_needed, refresh_metadata
from .image import MetadataImage
from .offsets import expire_offsets
from .records import CoordinatorRecord, decode
from .shard import Result, Shard, Then, _random_member_id
from .timer import Timer

log = logging.getLogger(__name__)

Writer = Callable[[int, list[CoordinatorRecord], int], None]


class ShardNotLoaded(LookupError):
    """The group's `__consumer_offsets` partition is not loaded here (it failed to load)."""


@functools.lru_cache(maxsize=65536)
def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class CoordinatorRuntime:
    def __init__(
        self,
        config: CoordinatorConfig,
        writer: Writer,
        image: MetadataImage | None = None,
        new_member_id: Callable[[], str] = _random_member_id,
        group_overrides: Callable[[str], dict[str, int]] = lambda _g: {},
    ) -> None:
        self.config = config
        self.writer = writer
        self.image = image or MetadataImage()
        self.new_member_id = new_member_id
        self.group_overrides = group_overrides
        self.shards: dict[int, Shard] = {}
        self.records_written = 0

    # --- shards ---------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_partitions)

    def shard_for(self, group_id: str) -> Shard | None:
        return self.shards.get(self.partition_for(group_id))

    def new_shard(self, partition: int) -> Shard:
        return Shard(partition, self.config, self.image, Timer(), self.new_member_id, self.group_overrides)

    def load(self, partition: int, records: Iterable[CoordinatorRecord], now_ms: int) -> Shard:
        """Replay a partition's records into a fresh shard and take it over (KIP-848 "Fail Over")."""
        shard = self.new_shard(partition)
        shard.loading = True
        for record in records:
            shard.replay(record)
        return self._take_over(shard, now_ms)

    def load_bytes(self, partition: int, pairs: Iterable[tuple[bytes | None, bytes | None]], now_ms: int) -> Shard:
        """`load` from the stored (key, value) bytes, as the broker reads them from the log."""
        shard = self.new_shard(partition)
        shard.loading = True
        # Offset commits are independent of every other record and only the newest value
        # per key matters (exactly what compaction keeps), so an uncompacted log's many
        # rewrites of the same offset are collapsed by key before any of them is decoded.
        newest: dict[bytes, bytes | None] = {}
        rewritten = 0
        for key, value in pairs:
            if key is None:
                continue
            if key[0] == 0 and key[1] < 2:  # OffsetCommitKey v0/v1 (records.is_offset_commit, inlined)
                newest[key] = value
                rewritten += 1
            else:
                record = decode(key, value)
                if record is not None:
                    shard.replay(record)
        for key, value in newest.items():
            shard.replay_offset_bytes(key, value)
        shard.records_replayed += rewritten - len(newest)
        return self._take_over(shard, now_ms)

    def _take_over(self, shard: Shard, now_ms: int) -> Shard:
        shard.loading = False
        self.shards[shard.partition] = shard
        self._on_loaded(shard, now_ms)
        return shard

    def unload(self, partition: int) -> None:
        self.shards.pop(partition, None)

    def _on_loaded(self, shard: Shard, now_ms: int) -> None:
        # KIP-848 "Fail Over": members get a fresh session (static members that left with
        # -2 too: they have a session timeout to return), members mid-revocation a fresh
        # rebalance timeout; groups whose topics changed meanwhile get a new epoch.
        for group in list(shard.consumer_groups.values()):
            for member in group.members.values():
                arm_timers(shard, group.group_id, member, now_ms)
            self._write(shard, refresh_metadata(shard, group) or assign_if_needed(shard, group), now_ms)
        # Classic groups resume as of their last completed rebalance; every member gets a
        # fresh session (consumer-0.9 design "Coordinator failover").
        for cgroup in list(shard.classic_groups.values()):
            for member in cgroup.members.values():
                schedule_heartbeat(shard, cgroup, member, now_ms)
            if len(cgroup.members) > self.config.classic_max_size:
                # group.max.size was lowered: rebalance, and the last to rejoin are refused.
                self._write(shard, prepare_rebalance(shard, cgroup, now_ms), now_ms)
            elif cgroup.is_(ClassicState.STABLE) and leaves_partitions_unowned(shard, cgroup):
                # A rebalance was under way (a downgrade from a consumer group, partitions
                # added) but only completed ones are stored: resume it, or the stored
                # assignment would leave those partitions with nobody.
                self._write(shard, prepare_rebalance(shard, cgroup, now_ms), now_ms)
        self._arm_offset_expiry(shard, now_ms)

    def _arm_offset_expiry(self, shard: Shard, now_ms: int) -> None:
        def op(s: Shard, now: int) -> Result:
            self._arm_offset_expiry(s, now)
            return expire_offsets(s, now)

        shard.timer.schedule(("offset-expiry",), now_ms + self.config.offsets_retention_check_interval_ms, op)

    # --- running operations -----------------------------------------------------------------------

    def _write(self, shard: Shard, records: list[CoordinatorRecord], now_ms: int) -> None:
        if records:
            self.writer(shard.partition, records, now_ms)
            self.records_written += len(records)
            for record in records:
                shard.replay(record)
        if shard.outbox:
            # Answers go out only after the records they depend on are written.
            outbox, shard.outbox = shard.outbox, []
            for reply, response in outbox:
                reply(response)

    def run(self, group_id: str, op: Callable[[Shard, int], Result], now_ms: int):
        shard = self.shard_for(group_id)
        if shard is None:
            raise ShardNotLoaded(f"partition {self.partition_for(group_id)} of group {group_id} is not loaded")
        return self.run_on(shard, op, now_ms)

    def run_on(self, shard: Shard, op: Callable[[Shard, int], Result], now_ms: int):
        result = op(shard, now_ms)
        self._write(shard, result.records, now_ms)
        while isinstance(result.response, Then):
            result = result.response.op(shard, now_ms)
            self._write(shard, result.records, now_ms)
        return result.response

    def tick(self, now_ms: int) -> int:
        """Run every due timer; returns how many ran."""
        ran = 0
        for shard in list(self.shards.values()):
            for _key, op in shard.timer.due(now_ms):
                self.run_on(shard, op, now_ms)
                ran += 1
        return ran

    def next_deadline(self) -> int | None:
        deadlines = [d for s in self.shards.values() if (d := s.timer.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def update_image(self, image: MetadataImage, now_ms: int) -> None:
        """Topics changed: groups whose subscribed partitions changed get a new epoch and target.

        Regexes are not resolved here (consumer/regex.py): a created topic only marks every
        resolution made before it as stale (Kafka's onNewMetadataImage sets
        lastMetadataImageWithNewTopics), and each group's next heartbeat schedules its
        refresh, at most one per REGEX_BATCH_REFRESH_MIN_INTERVAL_MS."""
        old = self.image
        self.image = image
        created = _creates_topics(old, image)
        for shard in self.shards.values():
            shard.image = image
            if created:
                # Callers number images upwards; one that does not still makes resolutions stale.
                shard.new_topics_version = max(image.version, shard.new_topics_version + 1)
            for group in list(shard.consumer_groups.values()):
                self._write(shard, refresh_metadata(shard, group), now_ms)


def _creates_topics(old: MetadataImage, new: MetadataImage) -> bool:
    """Whether `new` has a topic (by id) that `old` lacks: created, or deleted and recreated."""
    if len(new.topics) > len(old.topics):
        return True
    return any(old.by_id(t.topic_id) is None for t in new.topics.values())
