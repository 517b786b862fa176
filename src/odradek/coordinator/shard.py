"""One coordinator shard: the state of the groups mapped to one `__consumer_offsets` partition.

Theory of operation (DESIGN principle 2, Kafka's GroupMetadataManager.replay): the shard
holds consumer groups and committed offsets, and `replay(record)` is the only way either
changes. Handlers (heartbeat, offsets, admin) read the shard and return
`Result(records, response)`; the runtime writes the records to the partition and then
replays them. Loading the partition at start-up replays the same records, so the state
after a restart equals the state before it (`snapshot()` makes that comparable).

Side effects other than state (timers) are scheduled by handlers on the injected timer,
as Kafka's coordinator does; after a load, `on_loaded` re-arms them.

Transactional offsets (KIP-98, KIP-447; Kafka's OffsetMetadataManager): OffsetCommit
records written in a producer's transactional batch (`replay_transactional`) are held
pending per producer id, invisible to OffsetFetch, until that producer's transaction
marker is replayed: a commit moves them into the committed offsets, an abort drops them.
As in Kafka the newest record in the log wins, whichever way it was committed: a pending
offset is materialized only if no committed write of its partition came after it in the
log (positions are `records_replayed` at replay). A tombstone of a partition deletes its
pending offsets too. `open_txns` (group -> partition -> producer ids) keeps a group with
open transactions alive and, with the partitions of markers not yet committed, answers
KIP-447's "is this partition's offset unstable" (`unstable`).

Classic groups are the exception, as in Kafka: their rebalance is transient state that
the classic handlers change directly, and their GroupMetadata record is a snapshot of the
group that only loading replays (classic/model.py). Classic requests that wait (JoinGroup,
SyncGroup) are answered through reply callbacks queued in `outbox`, which the runtime
drains once the records of the same operation are written.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from . import records as R
from .classic.model import ClassicGroup, ClassicMember, ClassicState, Reply
from .config import CoordinatorConfig
from .consumer.model import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    ResolvedRegex,
    TopicMeta,
)
from .image import MetadataImage
from .timer import Timer


class Result(NamedTuple):
    records: list[R.CoordinatorRecord]
    response: Any
    # Set when the records belong to a producer's transaction (TxnOffsetCommit): the writer
    # writes them as one transactional batch, replay holds them pending.
    transactional: R.Transactional | None = None


class Then(NamedTuple):
    """A Result's response that says: once these records are written and replayed, run
    `op` (KIP-848 online upgrade: the group converts, then the heartbeat runs on it)."""

    op: Any


def answering(result: Result, response: Any) -> Result:
    """`result`'s records and what it chains, answered with `response` once all are written
    (a leave whose removal converts the group: the conversion, its rebalance, then the answer)."""
    if isinstance(result.response, Then):
        then = result.response.op
        return Result(result.records, Then(lambda s, now: answering(then(s, now), response)), result.transactional)
    return Result(result.records, response, result.transactional)


_I32 = struct.Struct(">i")  # an OffsetCommitKey ends with its partition


class OffsetEntry(NamedTuple):  # a NamedTuple: one per committed offset, built fast at replay
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


class PendingOffset(NamedTuple):
    """A transactional offset waiting for its producer's marker, and where its record is
    in the log (replay order; Kafka keeps the record offset)."""

    entry: OffsetEntry
    position: int


def _random_member_id() -> str:
    return str(uuid.uuid4())


class Shard:
    def __init__(
        self,
        partition: int,
        config: CoordinatorConfig,
        image: MetadataImage | None = None,
        timer: Timer | None = None,
        new_member_id: Callable[[], str] = _random_member_id,
        group_overrides: Callable[[str], dict[str, int]] = lambda _g: {},
    ) -> None:
        self.partition = partition
        self.config = config
        self.image = image or MetadataImage()
        self.timer = timer or Timer()
        self.new_member_id = new_member_id
        self.group_overrides = group_overrides
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.classic_groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetEntry]] = {}
        # KIP-98 transactional offsets: producer id -> group -> (topic, partition) -> pending
        # offset, and the other way round group -> (topic, partition) -> producer ids.
        self.pending: dict[int, dict[str, dict[tuple[str, int], PendingOffset]]] = {}
        self.open_txns: dict[str, dict[tuple[str, int], set[int]]] = {}
        # Where the committed offset of a partition with pending offsets was last written
        # (kept only while it has some: a materialization compares against it).
        self._committed_at: dict[tuple[str, tuple[str, int]], int] = {}
        self.records_replayed = 0
        self.loading = False
        # Kafka's lastMetadataImageWithNewTopics: the version of the last metadata image that
        # created a topic (initialised to the image the shard starts with, as Kafka does on
        # its first image), so a regex resolved against an older image is resolved again.
        self.new_topics_version = self.image.version
        # Answers to classic requests, sent by the runtime once the records of the
        # operation that produced them are committed (Kafka answers after the append too).
        self.outbox: list[tuple[Reply, dict]] = []
        # Offsets in the log, kept by the runtime: the last one written and the last one
        # committed (on a single node the same after every write; in a cluster the high
        # watermark trails). `writing_offset` is the last offset of the batch being replayed.
        self.last_written_offset = -1
        self.last_committed_offset = -1
        self.writing_offset: int | None = None
        # What committed offsets were before each uncommitted write: (batch's last offset,
        # group, (topic, partition), previous entry or None), oldest first. OffsetFetch reads
        # at the committed offset (Kafka reads its timeline maps at the committed offset).
        self._uncommitted: list[tuple[int, str, tuple[str, int], OffsetEntry | None]] = []
        # Partitions whose pending offsets a marker not yet committed ended: (marker's
        # offset, group, (topic, partition)). Still unstable for KIP-447 until it commits.
        self._unsettled: list[tuple[int, str, tuple[str, int]]] = []

    def reset(self) -> None:
        """Forget every group and offset (and timer) before the same partition is replayed
        again: reloading from the log is how a failed write is reverted."""
        self.consumer_groups.clear()
        self.classic_groups.clear()
        self.offsets.clear()
        self.pending.clear()
        self.open_txns.clear()
        self._committed_at.clear()
        self.outbox.clear()
        self._uncommitted.clear()
        self._unsettled.clear()
        self.timer.cancel_all()
        self.records_replayed = 0
        self.writing_offset = None

    def respond(self, reply: Reply, response: dict) -> None:
        self.outbox.append((reply, response))

    # --- per-group settings -------------------------------------------------------------------

    def session_timeout_ms(self, group_id: str) -> int:
        return self.group_overrides(group_id).get("consumer.session.timeout.ms", self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.group_overrides(group_id).get("consumer.heartbeat.interval.ms", self.config.heartbeat_interval_ms)

    # --- lookups ------------------------------------------------------------------------------

    def group_ids(self) -> set[str]:
        # A group with only pending transactional offsets exists too (Kafka creates a simple
        # group when it replays one).
        return set(self.consumer_groups) | set(self.classic_groups) | set(self.offsets) | set(self.open_txns)

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Some open transaction holds an offset of this partition for the group."""
        opened = self.open_txns.get(group_id)
        return opened is not None and (topic, partition) in opened

    def unstable(self, group_id: str) -> set[tuple[str, int]]:
        """KIP-447: the group's partitions whose committed offset a transaction may still
        change: some open transaction holds an offset of it, or the marker that ended one
        is written but not yet committed (Kafka's classic coordinator kept such offsets
        pending until the marker's append completed)."""
        out = set(self.open_txns.get(group_id, ()))
        if self._unsettled:
            out.update(tp for _offset, g, tp in self._unsettled if g == group_id)
        return out

    # --- replay ---------------------------------------------------------------------------------

    def replay(self, record: R.CoordinatorRecord) -> None:
        self.records_replayed += 1
        t = record.type
        if t == R.OFFSET_COMMIT:
            self._replay_offset(record)
            return
        if t == R.TXN_MARKER:
            self._replay_marker(record)
            return
        if t == R.CLASSIC_GROUP:
            self._replay_classic(record)
            return
        group_id = record.key[0]
        group = self.consumer_groups.get(group_id)
        v = record.value
        if group is None:
            if v is None:
                return  # tombstone for a group already gone (compaction keeps these for a while)
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        if t == R.GROUP_METADATA:
            if v is None:
                assert not group.members, f"group {group_id} deleted with members"
                group.dead = True
                group.refresh_state()
                del self.consumer_groups[group_id]
                return
            group.group_epoch = v["epoch"]
        elif t == R.PARTITION_METADATA:
            group.subscribed_topics = {} if v is None else {
                x["topic_name"]: TopicMeta(x["topic_id"], x["topic_name"], x["num_partitions"]) for x in v["topics"]
            }
        elif t == R.MEMBER_METADATA:
            member_id = record.key[1]
            if v is None:
                group.remove_member(member_id)
            else:
                old = group.members.get(member_id) or ConsumerMember(member_id)
                group.put_member(old.with_(
                    instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
                    client_host=v["client_host"], subscribed_topic_names=tuple(v["subscribed_topic_names"]),
                    subscribed_topic_regex=v["subscribed_topic_regex"], server_assignor=v["server_assignor"],
                    rebalance_timeout_ms=v["rebalance_timeout_ms"], classic=_classic_meta(v["classic_member_metadata"]),
                ))
        elif t == R.TARGET_METADATA:
            group.set_target_epoch(0 if v is None else v["assignment_epoch"])
        elif t == R.TARGET_MEMBER:
            member_id = record.key[1]
            if v is None:
                group.target.pop(member_id, None)
            else:
                group.target[member_id] = {x["topic_id"]: frozenset(x["partitions"]) for x in v["topic_partitions"]}
        elif t == R.REGULAR_EXPRESSION:
            group.put_resolved_regex(record.key[1], None if v is None else ResolvedRegex(
                frozenset(v["topics"]), v["version"], v["timestamp"]))
        elif t == R.CURRENT_ASSIGNMENT:
            member_id = record.key[1]
            old = group.members.get(member_id)
            if v is None:
                if old is not None:
                    group.put_member(old.with_(member_epoch=0, previous_member_epoch=-1, state=MemberState.STABLE,
                                               assigned={}, pending_revocation={}))
            else:
                epoch = v["member_epoch"]
                group.put_member((old or ConsumerMember(member_id)).with_(
                    member_epoch=epoch,
                    previous_member_epoch=v["previous_member_epoch"],
                    state=MemberState(v["state"]),
                    assigned=R.read_partitions(v["assigned_partitions"], epoch),
                    pending_revocation=R.read_partitions(v["partitions_pending_revocation"], epoch),
                ))
        group.refresh_state()

    def _replay_classic(self, record: R.CoordinatorRecord) -> None:
        gid = record.key[0]
        v = record.value
        if v is None:
            group = self.classic_groups.pop(gid, None)
            if group is not None and not group.is_(ClassicState.DEAD):
                group.mark_deleted(group.state_timestamp)
            return
        if not self.loading and gid in self.classic_groups:
            return  # a snapshot of the in-memory group that wrote it (classic/model.py)
        # Loading, or a consumer group converting to this one (migration._to_classic: the
        # records before this one removed it). Either way the group is what the record says.
        group = ClassicGroup(gid, v["current_state_timestamp"])
        group.protocol_type = v["protocol_type"] or None  # Kafka writes "" for a group that never formed
        group.generation = v["generation"]
        group.protocol_name = v["protocol"]
        for m in v["members"]:
            group.add(ClassicMember(
                member_id=m["member_id"], instance_id=m["group_instance_id"], client_id=m["client_id"],
                client_host=m["client_host"], rebalance_timeout_ms=m["rebalance_timeout"],
                session_timeout_ms=m["session_timeout"], protocol_type=v["protocol_type"],
                protocols=((v["protocol"], m["subscription"]),) if v["protocol"] else (), assignment=m["assignment"],
            ))
        group.leader_id = v["leader"] if v["leader"] in group.members else None
        # Kafka loads a group with members as Stable (its last completed rebalance).
        group.state = ClassicState.STABLE if group.members else ClassicState.EMPTY
        self.classic_groups[gid] = group

    def replay_offset_bytes(self, key: bytes, value: bytes | None) -> None:
        """Replay a stored OffsetCommit record without building record objects: offset
        commits are most of a partition, so start-up replay takes this path for them."""
        self.records_replayed += 1
        f = R.offset_commit_fields(key, value)
        self._put_offset(f[0], f[1], f[2], None if f[3] is None else OffsetEntry(f[3], f[4], f[5], f[6]))

    def replay_offset_commits(self, pairs: list[tuple[bytes | None, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
        """Replay the OffsetCommit records among a partition's stored (key, value) pairs
        (log order), as `replay_offset_bytes` would one by one; return the other keyed
        records, in log order, for `replay` (they never touch offsets, so the order
        between the two does not matter). Keyless records are skipped.

        Only the newest value of each offset counts (exactly what compaction keeps), so
        the pairs are read newest first and an older record of an offset already seen is
        skipped without decoding its value: an uncompacted log's rewrites cost a lookup.

        Start-up replay is mostly this, and its time is fail-over time, so the common
        record is read here with no call per record: a key's group and topic are decoded
        and checked once per distinct (group, topic) key prefix, its partition is its last
        four bytes, and a value with empty metadata is one unpack. Any other record (with
        metadata, a version or length odradek does not write, corrupt) goes through
        `offset_commit_fields`, so it is read, or refused (RecordError), as before.
        """
        others: list[tuple[bytes, bytes | None]] = []
        if self.writing_offset is not None or self.offsets or self.open_txns:
            # Not a load into an empty shard (loads and reverts are, until a transactional
            # batch was replayed): the newest record per offset (key versions 0 and 1 name
            # the same one), then one by one through `_put_offset` and its undo and
            # pending-offset bookkeeping.
            newest: dict[bytes, tuple[bytes, bytes | None]] = {}
            count = 0
            for key, value in pairs:
                if key is None:
                    continue
                if key[0] == 0 and key[1] < 2:
                    newest[key[2:]] = (key, value)
                    count += 1
                else:
                    others.append((key, value))
            for key, value in newest.values():
                self.replay_offset_bytes(key, value)
            self.records_replayed += count - len(newest)
            return others
        offsets = self.offsets
        prefixes: dict[bytes, tuple[str, str, dict[tuple[str, int], OffsetEntry | None]]] = {}
        tombstoned: list[tuple[dict, tuple[str, int]]] = []
        partition_at = _I32.unpack_from
        unpack_value = R.OFFSET_VALUE_NO_METADATA.unpack
        new_entry = tuple.__new__  # OffsetEntry(...) runs the NamedTuple's Python __new__
        entry_type = OffsetEntry
        count = 0
        last = topic = entries = None
        for key, value in reversed(pairs):
            if key is None:
                continue
            if key[0] != 0 or key[1] > 1:  # not an OffsetCommitKey v0/v1 (records.is_offset_commit)
                others.append((key, value))
                continue
            count += 1
            n = len(key) - 4
            prefix = key[:n]
            if prefix != last:  # the keys of one commit share it: looked up once per run of them
                slot = prefixes.get(prefix)
                if slot is None:
                    group, topic = R.offset_commit_fields(key, None)[:2]  # checks the whole key's layout
                    # Every key with these bytes before its last four has the same layout.
                    slot = prefixes[prefix] = (group, topic, offsets.setdefault(group, {}))
                _, topic, entries = slot
                last = prefix
            tp = (topic, partition_at(key, n)[0])
            if tp in entries:
                continue  # rewritten later in the log
            if value is None:  # tombstone: held as None until the end, so older values stay skipped
                entries[tp] = None
                tombstoned.append((entries, tp))
                continue
            if len(value) == 24:
                version, offset, leader_epoch, metadata_length, timestamp = unpack_value(value)
                if version == 3 and metadata_length == 0:
                    entries[tp] = new_entry(entry_type, (offset, leader_epoch, "", timestamp))
                    continue
            f = R.offset_commit_fields(key, value)
            entries[tp] = entry_type(f[3], f[4], f[5], f[6])
        for entries, tp in tombstoned:
            del entries[tp]
        # A group is in `offsets` only while it has some.
        for group, _, entries in prefixes.values():
            if not entries and offsets.get(group) is entries:
                del offsets[group]
        self.records_replayed += count
        others.reverse()
        return others

    def _replay_offset(self, record: R.CoordinatorRecord) -> None:
        group_id, topic, partition = record.key
        v = record.value
        self._put_offset(group_id, topic, partition, None if v is None else OffsetEntry(
            v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"]))

    def replay_transactional(self, record: R.CoordinatorRecord, producer_id: int) -> None:
        """Replay a record of `producer_id`'s transactional batch: an offset commit is held
        pending until the producer's marker (Kafka's OffsetMetadataManager.replay with a
        producer id); anything else, a tombstone included, replays as usual, as in Kafka."""
        if record.type != R.OFFSET_COMMIT or record.value is None:
            self.replay(record)
            return
        self.records_replayed += 1
        group_id, topic, partition = record.key
        v = record.value
        tp = (topic, partition)
        entry = OffsetEntry(v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])
        self.pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = PendingOffset(entry, self.records_replayed)
        self.open_txns.setdefault(group_id, {}).setdefault(tp, set()).add(producer_id)

    def _replay_marker(self, record: R.CoordinatorRecord) -> None:
        """A producer's transaction ended (Kafka's replayEndTransactionMarker): on commit its
        pending offsets become committed ones, each unless a newer committed write of the
        partition came after it in the log; on abort they are dropped. A marker for a
        producer with nothing pending changes nothing."""
        producer_id = record.key[0]
        mine = self.pending.pop(producer_id, None)
        if mine is None:
            return
        commit = record.value["commit"]
        unsettled = self.writing_offset is not None and self.writing_offset > self.last_committed_offset
        for group_id, entries in mine.items():
            opened = self.open_txns[group_id]
            for tp, pending in entries.items():
                if unsettled:
                    self._unsettled.append((self.writing_offset, group_id, tp))
                slot = (group_id, tp)
                newest = self._committed_at.get(slot, -1)
                others = opened[tp]
                others.discard(producer_id)
                if not others:
                    del opened[tp]
                    self._committed_at.pop(slot, None)
                if commit and pending.position > newest:
                    self._store_offset(group_id, tp[0], tp[1], pending.entry)
                    if others:
                        self._committed_at[slot] = pending.position
            if not opened:
                del self.open_txns[group_id]

    def _put_offset(self, group_id: str, topic: str, partition: int, entry: OffsetEntry | None) -> None:
        """A committed offset written (or a tombstone), outside any transaction."""
        opened = self.open_txns.get(group_id) if self.open_txns else None
        if opened is not None and (topic, partition) in opened:
            tp = (topic, partition)
            if entry is None:
                # Kafka: a tombstone deletes the partition's pending offsets too (DeleteGroups,
                # OffsetDelete, expiry and topic deletion all end in tombstones).
                for producer_id in opened.pop(tp):
                    groups = self.pending[producer_id]
                    del groups[group_id][tp]
                    if not groups[group_id]:
                        del groups[group_id]
                        if not groups:
                            del self.pending[producer_id]
                if not opened:
                    del self.open_txns[group_id]
                self._committed_at.pop((group_id, tp), None)
            else:
                self._committed_at[(group_id, tp)] = self.records_replayed
        self._store_offset(group_id, topic, partition, entry)

    def _store_offset(self, group_id: str, topic: str, partition: int, entry: OffsetEntry | None) -> None:
        offsets = self.offsets.get(group_id)
        if self.writing_offset is not None and self.writing_offset > self.last_committed_offset:
            old = offsets.get((topic, partition)) if offsets is not None else None
            self._uncommitted.append((self.writing_offset, group_id, (topic, partition), old))
        if entry is None:  # tombstone
            if offsets is not None:
                offsets.pop((topic, partition), None)
                if not offsets:
                    del self.offsets[group_id]
            return
        if offsets is None:
            offsets = self.offsets[group_id] = {}
        offsets[(topic, partition)] = entry

    # --- the committed view ------------------------------------------------------------------

    def commit_up_to(self, offset: int) -> None:
        """Records up to `offset` are committed: their offsets are what OffsetFetch reads."""
        self.last_committed_offset = max(self.last_committed_offset, offset)
        if self._uncommitted:
            self._uncommitted = [u for u in self._uncommitted if u[0] > self.last_committed_offset]
        if self._unsettled:
            self._unsettled = [u for u in self._unsettled if u[0] > self.last_committed_offset]

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetEntry]:
        """A group's offsets as of the committed offset: uncommitted commits undone, newest first."""
        offsets = self.offsets.get(group_id, {})
        mine = [u for u in self._uncommitted if u[1] == group_id]
        if not mine:
            return offsets
        view = dict(offsets)
        for _offset, _gid, tp, old in reversed(mine):
            if old is None:
                view.pop(tp, None)
            else:
                view[tp] = old
        return view

    def snapshot(self) -> dict:
        return {
            "consumer_groups": {g: grp.snapshot() for g, grp in sorted(self.consumer_groups.items())},
            "classic_groups": {g: grp.snapshot() for g, grp in sorted(self.classic_groups.items())},
            "offsets": {g: dict(sorted(o.items())) for g, o in sorted(self.offsets.items())},
            # Only when there are some: snapshots of shards without transactions stay as they were.
            **({"pending_offsets": {pid: {g: {tp: p.entry for tp, p in sorted(tps.items())}
                                          for g, tps in sorted(groups.items())}
                                    for pid, groups in sorted(self.pending.items())}} if self.pending else {}),
        }


def _classic_meta(v: dict | None) -> ClassicMeta | None:
    if v is None:
        return None
    return ClassicMeta(v["session_timeout_ms"], tuple((p["name"], p["metadata"]) for p in v["supported_protocols"]))
