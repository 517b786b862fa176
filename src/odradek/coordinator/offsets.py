"""Committed offsets: commit, fetch, delete, expire, with KIP-848/KIP-1251 fencing.

Theory of operation: an offset is an OffsetCommit record keyed (group, topic, partition);
the newest value wins and a tombstone deletes it. Who may commit:
  * a request without membership (epoch/generation -1: admin tools and manually assigned
    consumers, with or without a member id) when the group is empty or does not exist; a
    group that does not exist becomes a "simple" group holding only offsets, as in Kafka;
  * a classic-group member, checked against the generation (Kafka's ClassicGroup
    validateOffsetCommit): FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
    and REBALANCE_IN_PROGRESS while the group waits for the leader's assignment;
    a commit without membership into a non-empty classic group is UNKNOWN_MEMBER_ID;
  * a consumer-group member, fenced per KIP-1251 partition by partition:
        assignment epoch <= client epoch <= broker epoch
    for partitions it holds (assigned or pending revocation), and client epoch == broker
    epoch for partitions it does not hold; STALE_MEMBER_EPOCH otherwise, UNKNOWN_MEMBER_ID
    for unknown members.
Offsets of empty groups expire `offsets.retention.minutes` after their commit, and an
empty consumer group whose last offset expired is deleted.

Transactional offsets (txn_offsets.py, KIP-447) touch these as Kafka's
OffsetMetadataManager does: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT
for each partition a transaction may still change (`Shard.unstable`); an offset with a
pending transactional one does not expire, nor does a group with open transactions;
OffsetDelete and group deletion tombstone pending offsets too.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..protocol.errors import (
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    NON_EMPTY_GROUP,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNSTABLE_OFFSET_COMMIT,
    UNSUPPORTED_VERSION,
)
from . import records as R
from .classic.model import ClassicGroup, ClassicState
from .classic.sync import check_member
from .consumer.model import ConsumerGroup, ConsumerMember
from .consumer_protocol import decode_subscription
from .errors import CoordinatorError
from .records import RecordError
from .shard import Result, Shard

MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


@dataclass(frozen=True, slots=True)
class CommitPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = -1  # GenerationIdOrMemberEpoch
    instance_id: str | None = None
    # topic name -> (topic id or None, partitions)
    topics: tuple[tuple[str, uuid.UUID | None, tuple[CommitPartition, ...]], ...] = ()
    version: int = 9


def _member_check(group: ConsumerGroup, req: CommitRequest) -> ConsumerMember | None:
    """Group-level checks; returns the committing member (None: a membership-free commit)."""
    if req.member_epoch < 0 and not group.members:
        return None  # KIP-1251 "Handling of commits without generation ID / member epoch"
    member = group.members.get(req.member_id)
    if member is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {group.group_id}.")
    if member.classic is not None:
        # A classic member of a consumer group commits with its generation = member epoch,
        # at any version (KIP-848 "Online Migration").
        if req.member_epoch != member.member_epoch:
            raise CoordinatorError(ILLEGAL_GENERATION, f"Generation {req.member_epoch} is not the member's "
                                   f"epoch {member.member_epoch}.")
        return member
    if req.version < 9:
        # Kafka: consumer-protocol members must commit with OffsetCommit v9+.
        raise CoordinatorError(UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members "
                               "using the consumer group protocol")
    if req.member_epoch > member.member_epoch:
        raise CoordinatorError(STALE_MEMBER_EPOCH, f"The member epoch {req.member_epoch} is newer than the "
                               f"broker's {member.member_epoch}.")
    return member


def _classic_check(group: ClassicGroup, req: CommitRequest) -> None:
    if req.member_epoch < 0 and group.is_(ClassicState.EMPTY):
        return  # an admin or manually assigned consumer committing for an idle group
    if req.member_epoch >= 0 or req.member_id or req.instance_id:
        check_member(group, req.member_id, req.instance_id)
        if req.member_epoch != group.generation:
            raise CoordinatorError(ILLEGAL_GENERATION, f"Generation {req.member_epoch} is not the group's "
                                   f"{group.generation}.")
    elif not group.is_(ClassicState.EMPTY):
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Group {group.group_id} has members: commit as one of them.")
    if group.is_(ClassicState.COMPLETING_REBALANCE):
        # The assignment of this generation is not known yet.
        raise CoordinatorError(REBALANCE_IN_PROGRESS, "The group is completing a rebalance.")


def _partition_allowed(member: ConsumerMember, topic_id: uuid.UUID | None, partition: int, client_epoch: int) -> bool:
    """KIP-1251: assignment epoch <= client epoch <= broker epoch (the upper bound is checked once)."""
    if client_epoch == member.member_epoch:
        return True  # the member's latest epoch: KIP-848 guarantees nobody else owns it at it
    if topic_id is not None:
        for parts in (member.assigned, member.pending_revocation):
            epoch = parts.get(topic_id, {}).get(partition)
            if epoch is not None:
                return epoch <= client_epoch
    return False  # not held: only the current epoch may commit it


def commit(shard: Shard, req: CommitRequest, now_ms: int) -> Result:
    def answer(code_for):
        return [
            {"name": name, "topic_id": tid, "partitions": [{"partition_index": p.partition, "error_code": code_for(tid, p)}
                                                            for p in parts]}
            for name, tid, parts in req.topics
        ]

    group = shard.consumer_groups.get(req.group_id)
    classic = shard.classic_groups.get(req.group_id) if group is None else None
    try:
        if classic is not None:
            _classic_check(classic, req)
            member = None
        elif group is None:
            # Kafka's OffsetMetadataManager.validateOffsetCommit: a negative generation/epoch
            # into a group that does not exist creates a simple group, whatever member id the
            # request carries (librdkafka's consumer-protocol consumers commit after assign()
            # with their client-generated member id and epoch -1).
            if req.member_epoch >= 0:
                if req.group_id in shard.offsets or req.group_id in shard.open_txns:
                    # An offsets-only ("simple") group has no members to commit as.
                    raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
                if req.version >= 9:
                    raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
                raise CoordinatorError(ILLEGAL_GENERATION, f"Group {req.group_id} not found.")
            member = None
        else:
            member = _member_check(group, req)
    except CoordinatorError as exc:
        code = exc.code
        return Result([], {"topics": answer(lambda _t, _p: code)})

    records = []

    def code_for(tid, p: CommitPartition):
        if p.metadata is not None and len(p.metadata.encode()) > MAX_METADATA_BYTES:
            return OFFSET_METADATA_TOO_LARGE
        if member is not None and not _partition_allowed(member, tid, p.partition, req.member_epoch):
            return STALE_MEMBER_EPOCH
        return NONE

    topics = answer(code_for)
    for (name, _tid, parts), out in zip(req.topics, topics):
        for p, res in zip(parts, out["partitions"]):
            if res["error_code"] == NONE:
                records.append(R.offset_commit(req.group_id, name, p.partition, p.offset, p.leader_epoch,
                                               p.metadata or "", now_ms))
    return Result(records, {"topics": topics})


def fetch_group(shard: Shard, group_id: str, topics: list[tuple[str, list[int]]] | None,
                member_id: str | None = None, member_epoch: int = -1, require_stable: bool = False) -> dict:
    """One group's committed offsets. `topics` None means every committed offset of the group.

    `require_stable` (OffsetFetch v7+, KIP-447): a partition some transaction may still
    move (an open one holds an offset of it, or its marker is not committed yet) gets
    UNSTABLE_OFFSET_COMMIT, and the consumer retries rather than start from an offset about
    to change. Still a read of the committed view: Kafka 4.x runs it as a write that waits
    for the high watermark instead, but its classic coordinator answered at once as this
    does, which keeps OffsetFetch free of waits (and a group without transactions answers
    exactly as without the flag)."""
    group = shard.consumer_groups.get(group_id)
    if member_id or member_epoch >= 0:
        # OffsetFetch v9: a member fetching must be current (KIP-848 "OffsetFetch API").
        member = group.members.get(member_id) if group else None
        if member is None:
            return {"group_id": group_id, "error_code": UNKNOWN_MEMBER_ID, "topics": []}
        if member_epoch != member.member_epoch:
            return {"group_id": group_id, "error_code": STALE_MEMBER_EPOCH, "topics": []}
    # Read at the committed offset: a commit whose record is not yet committed is not
    # visible (Kafka's OffsetFetch reads its timeline maps at the last committed offset).
    offsets = shard.committed_offsets(group_id)
    unstable = shard.unstable(group_id) if require_stable else ()
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        for (t, p) in sorted(offsets):
            by_topic.setdefault(t, []).append(p)
        topics = list(by_topic.items())
    out = []
    for name, parts in topics:
        rows = []
        for p in parts:
            e = offsets.get((name, p))
            if (name, p) in unstable:
                rows.append({"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                             "metadata": "", "error_code": UNSTABLE_OFFSET_COMMIT})
            elif e is None:
                rows.append({"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                             "metadata": "", "error_code": NONE})
            else:
                rows.append({"partition_index": p, "committed_offset": e.offset, "committed_leader_epoch": e.leader_epoch,
                             "metadata": e.metadata, "error_code": NONE})
        out.append({"name": name, "partitions": rows})
    return {"group_id": group_id, "error_code": NONE, "topics": out}


def delete(shard: Shard, group_id: str, topics: list[tuple[str, list[int]]], now_ms: int) -> Result:
    """OffsetDelete: refused for topics a non-empty consumer group subscribes to."""
    group = shard.consumer_groups.get(group_id)
    classic = shard.classic_groups.get(group_id)
    if group is None and classic is None and group_id not in shard.offsets and group_id not in shard.open_txns:
        return Result([], {"error_code": GROUP_ID_NOT_FOUND, "topics": []})
    subscribed = set(group.subscribed_topics) if group is not None and group.members else set()
    if classic is not None and not classic.is_(ClassicState.EMPTY):
        if classic.protocol_type != "consumer":
            return Result([], {"error_code": NON_EMPTY_GROUP, "topics": []})
        subscribed = _classic_subscribed(classic)
    records = []
    out = []
    for name, parts in topics:
        rows = []
        for p in parts:
            if name in subscribed:
                rows.append({"partition_index": p, "error_code": GROUP_SUBSCRIBED_TO_TOPIC})
                continue
            # Kafka: a committed or a pending transactional offset gets a tombstone.
            if (name, p) in shard.offsets.get(group_id, {}) or shard.has_pending(group_id, name, p):
                records.append(R.offset_tombstone(group_id, name, p))
            rows.append({"partition_index": p, "error_code": NONE})
        out.append({"name": name, "partitions": rows})
    return Result(records, {"error_code": NONE, "topics": out})


def _classic_subscribed(group: ClassicGroup) -> set[str]:
    """The topics a classic consumer group's members subscribe to (their embedded protocol metadata)."""
    topics: set[str] = set()
    for m in group.members.values():
        try:
            topics.update(decode_subscription(m.metadata(group.protocol_name) or b"").topics)
        except RecordError:
            continue
    return topics


def delete_group_records(shard: Shard, group_id: str) -> list[R.CoordinatorRecord]:
    """Tombstones for everything a (empty) group left behind: offsets, pending transactional
    ones included (Kafka's deleteAllOffsets; one tombstone per partition deletes both), and
    consumer-group records."""
    partitions = set(shard.offsets.get(group_id, {})) | set(shard.open_txns.get(group_id, {}))
    out = [R.offset_tombstone(group_id, t, p) for (t, p) in sorted(partitions)]
    if group_id in shard.classic_groups:
        out.append(R.classic_group_tombstone(group_id))
    group = shard.consumer_groups.get(group_id)
    if group is not None:
        for mid in sorted(group.target):
            out.append(R.target_member_tombstone(group_id, mid))
        out += [R.target_epoch_tombstone(group_id), R.partition_metadata_tombstone(group_id), R.group_tombstone(group_id)]
    return out


def expire_offsets(shard: Shard, now_ms: int) -> Result:
    retention = shard.config.offsets_retention_ms
    records = []
    for group_id in sorted(shard.group_ids()):
        group = shard.consumer_groups.get(group_id) or shard.classic_groups.get(group_id)
        if group is not None and group.members:
            continue  # offsets of live groups never expire
        if isinstance(group, ClassicGroup) and (not group.is_(ClassicState.EMPTY) or group.pending_members):
            continue  # rebalancing
        offsets = shard.offsets.get(group_id, {})
        # Kafka's cleanupExpiredOffsets: an offset a transaction is about to replace stays,
        # and so does a group with open transactions.
        expired = [(t, p) for (t, p), e in sorted(offsets.items())
                   if e.commit_timestamp + retention <= now_ms and not shard.has_pending(group_id, t, p)]
        if group is not None and len(expired) == len(offsets) and group_id not in shard.open_txns:
            records += delete_group_records(shard, group_id)  # the group is gone with its last offset
        else:
            records += [R.offset_tombstone(group_id, t, p) for t, p in expired]
    return Result(records, None)
