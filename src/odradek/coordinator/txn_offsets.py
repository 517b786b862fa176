"""TxnOffsetCommit: offsets committed inside a producer's transaction (KIP-98, KIP-447).

Theory of operation (Kafka's OffsetMetadataManager.commitTransactionalOffset): a
transactional producer sends the offsets its transaction consumed to the group's
coordinator. They are written as ordinary OffsetCommit records, but in one transactional
batch carrying the producer id and epoch (the Result's `transactional` tag), so replay
holds them pending for that producer (shard.py) until the transaction coordinator writes
the producer's marker to this partition (`CoordinatorRuntime.complete_transaction`): a
commit makes them the group's committed offsets, an abort drops them. Until then
OffsetFetch returns the previous committed offset, or, asked with require_stable,
UNSTABLE_OFFSET_COMMIT for those partitions (KIP-447).

Who may commit (Kafka's Group.validateOffsetCommit with isTransactional = true):
  * a group that does not exist: only without a generation (-1), which makes it a
    "simple" group; otherwise ILLEGAL_GENERATION;
  * a classic group (a simple one included): generation -1 into an empty group commits
    freely; a request naming a member, an instance id or a generation must name a current
    member (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) at the current generation
    (ILLEGAL_GENERATION); generation -1 without member or instance id commits even into
    a non-empty group (TxnOffsetCommit v0-v2 carry no member fields at all). Unlike
    OffsetCommit, a rebalance in progress does not refuse it;
  * a consumer group (KIP-848): epoch -1 commits only into a group without members, else
    the member must exist (UNKNOWN_MEMBER_ID); a classic-protocol member must use its
    epoch exactly; a consumer-protocol member is fenced per partition by KIP-1251:
        assignment epoch <= client epoch <= broker epoch
    (offsets._partition_allowed). A stale epoch, on any partition, fails the whole
    request with ILLEGAL_GENERATION and writes nothing: TxnOffsetCommit up to v5 has no
    STALE_MEMBER_EPOCH (Kafka throws ILLEGAL_GENERATION from the partition loop).
Per partition, metadata over offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE and
the rest commit (unknown topics and partitions are answered by the broker handler).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..protocol.errors import (
    COORDINATOR_NOT_AVAILABLE,
    ILLEGAL_GENERATION,
    INVALID_PRODUCER_ID_MAPPING,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_MEMBER_ID,
)
from . import records as R
from .classic.model import ClassicGroup, ClassicState
from .classic.sync import check_member
from .consumer.model import ConsumerGroup, ConsumerMember
from .errors import CoordinatorError
from .offsets import MAX_METADATA_BYTES, CommitPartition, _partition_allowed
from .shard import Result, Shard


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int = -1  # v3+: the group generation (classic) or member epoch (consumer)
    member_id: str = ""
    instance_id: str | None = None
    # topic name -> (topic id or None when unknown, partitions); Kafka resolves the id by name
    topics: tuple[tuple[str, uuid.UUID | None, tuple[CommitPartition, ...]], ...] = ()
    version: int = 3


def _check_classic(group: ClassicGroup, req: TxnCommitRequest) -> None:
    if group.is_(ClassicState.DEAD):
        raise CoordinatorError(COORDINATOR_NOT_AVAILABLE, f"Group {group.group_id} is dead.")
    if req.generation_id < 0 and group.is_(ClassicState.EMPTY):
        return
    if req.generation_id >= 0 or req.member_id or req.instance_id is not None:
        check_member(group, req.member_id, req.instance_id)
        if req.generation_id != group.generation:
            raise CoordinatorError(ILLEGAL_GENERATION, f"Generation {req.generation_id} is not the group's "
                                   f"{group.generation}.")
    # Else a request without membership: Kafka accepts it into a non-empty group when it
    # is transactional (older TxnOffsetCommit versions have no member id or generation).


def _check_consumer(group: ConsumerGroup, req: TxnCommitRequest) -> ConsumerMember | None:
    """The committing member (None: a membership-free commit into a group without members)."""
    if req.generation_id < 0 and not group.members:
        return None  # KIP-1251 "Handling of commits without generation ID / member epoch"
    member = group.members.get(req.member_id)
    if member is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {group.group_id}.")
    if member.classic is not None:
        # A classic member of a consumer group commits with its generation = member epoch.
        if req.generation_id != member.member_epoch:
            raise CoordinatorError(ILLEGAL_GENERATION, f"Generation {req.generation_id} is not the member's "
                                   f"epoch {member.member_epoch}.")
        return member
    if req.generation_id > member.member_epoch:
        # Kafka's STALE_MEMBER_EPOCH, answered ILLEGAL_GENERATION by TxnOffsetCommit.
        raise CoordinatorError(ILLEGAL_GENERATION, f"The member epoch {req.generation_id} is newer than the "
                               f"broker's {member.member_epoch}.")
    return member


def commit_transactional(shard: Shard, req: TxnCommitRequest, now_ms: int) -> Result:
    """TxnOffsetCommit: the pending offsets of `req.producer_id`'s transaction, as records
    tagged transactional, and the per-partition answer."""

    def answer(code_for):
        return [{"name": name, "partitions": [{"partition_index": p.partition, "error_code": code_for(tid, p)}
                                              for p in parts]}
                for name, tid, parts in req.topics]

    group = shard.consumer_groups.get(req.group_id)
    classic = shard.classic_groups.get(req.group_id) if group is None else None
    member = None
    try:
        if req.producer_id < 0:
            # Not a transaction at all (Kafka would write it as a plain commit, unfenced).
            raise CoordinatorError(INVALID_PRODUCER_ID_MAPPING, "TxnOffsetCommit without a producer id.")
        if classic is not None:
            _check_classic(classic, req)
        elif group is not None:
            member = _check_consumer(group, req)
        elif req.generation_id >= 0:
            if req.group_id in shard.offsets or req.group_id in shard.open_txns:
                # A simple group: an empty classic group in Kafka, with no member to name.
                raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no member {req.member_id}.")
            # Kafka's validateTransactionalOffsetCommit: ILLEGAL_GENERATION at every version.
            raise CoordinatorError(ILLEGAL_GENERATION, f"Group {req.group_id} not found.")
        # (A group that does not exist, committed to without a generation, becomes a simple group.)

        def code_for(tid, p: CommitPartition):
            if p.metadata is not None and len(p.metadata.encode()) > MAX_METADATA_BYTES:
                return OFFSET_METADATA_TOO_LARGE
            if member is not None and not _partition_allowed(member, tid, p.partition, req.generation_id):
                # KIP-1251, TxnOffsetCommit <= v5: one stale partition fails the request.
                raise CoordinatorError(ILLEGAL_GENERATION, f"Member {req.member_id} may not commit partition "
                                       f"{p.partition} at epoch {req.generation_id}.")
            return NONE

        topics = answer(code_for)
    except CoordinatorError as exc:
        code = exc.code
        return Result([], {"topics": answer(lambda _t, _p: code)})

    records = []
    for (name, _tid, parts), out in zip(req.topics, topics):
        for p, res in zip(parts, out["partitions"]):
            if res["error_code"] == NONE:
                records.append(R.offset_commit(req.group_id, name, p.partition, p.offset, p.leader_epoch,
                                               p.metadata or "", now_ms))
    return Result(records, {"topics": topics}, R.Transactional(req.producer_id, req.producer_epoch))
