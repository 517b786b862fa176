"""Offset requests shared by the consumer, the admin client and the CLI.

ListOffsets goes to each partition's leader (grouped, one request per broker);
OffsetCommit and OffsetFetch go to the group's coordinator. Each function retries
what Kafka calls retriable (leader or coordinator moved, timeouts, disconnects) through
`Client.call`, and raises the first non-retriable per-partition error.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from .cluster import TopicPartition
from .errors import STALE_METADATA, KafkaError
from .net import Client
from .versions import Api

EARLIEST = -2  # ListOffsets special timestamps
LATEST = -1
MAX_TIMESTAMP = -3


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


def _by_topic(items) -> dict[str, list]:
    out: dict[str, list] = {}
    for tp, value in items:
        out.setdefault(tp.topic, []).append((tp.partition, value))
    return out


async def list_offsets(client: Client, request: dict[TopicPartition, int], *,
                       isolation_level: int = 0) -> dict[TopicPartition, OffsetAndTimestamp]:
    """tp -> timestamp (or EARLIEST/LATEST/MAX_TIMESTAMP) to tp -> (offset, timestamp).
    A timestamp later than every record gives offset -1, as in Kafka."""
    result: dict[TopicPartition, OffsetAndTimestamp] = {}
    todo = dict(request)

    async def attempt():
        await client.ensure_topics(sorted({tp.topic for tp in todo}))
        by_node: dict[int, list[tuple[TopicPartition, int]]] = {}
        for tp, ts in todo.items():
            by_node.setdefault(await client.leader_for(tp), []).append((tp, ts))

        async def one(node: int, items):
            body = {"replica_id": -1, "isolation_level": isolation_level, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": ts,
                                            "max_num_offsets": 1} for p, ts in ps]}
                for t, ps in _by_topic(items).items()]}
            return await client.send(node, Api.LIST_OFFSETS, body)

        responses = await asyncio.gather(*(one(n, items) for n, items in by_node.items()))
        retry: KafkaError | None = None
        for resp in responses:
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if p.error_code == ErrorCode.none:
                        result[tp] = OffsetAndTimestamp(int(p.offset), int(p.timestamp))
                        todo.pop(tp, None)
                        continue
                    err = KafkaError(p.error_code, f"ListOffsets {tp}")
                    if not err.retriable:
                        raise err
                    if p.error_code in STALE_METADATA:
                        await client.refresh_metadata([tp.topic])
                    retry = err
        if retry is not None:
            raise retry

    await client.call(attempt)
    return result


def fetch_committed_body(group_id: str, tps: list[TopicPartition] | None, *, require_stable: bool = False) -> dict:
    """The OffsetFetch (v1-v7) request body (also what the simulator's members send)."""
    topics = None if tps is None else [{"name": t, "partition_indexes": [p for p, _ in ps]}
                                       for t, ps in _by_topic((tp, None) for tp in tps).items()]
    return {"group_id": group_id, "topics": topics, "require_stable": require_stable}


async def fetch_committed(client: Client, group_id: str, tps: list[TopicPartition] | None = None, *,
                          require_stable: bool = False) -> dict[TopicPartition, OffsetAndMetadata]:
    """Committed offsets of a group (every partition it has offsets for when `tps` is None)."""

    body = fetch_committed_body(group_id, tps, require_stable=require_stable)

    async def attempt():
        node = await client.coordinator(group_id)
        resp = await client.send(node, Api.OFFSET_FETCH, body)
        if getattr(resp, "error_code", ErrorCode.none) != ErrorCode.none:
            if resp.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                client.forget_coordinator(group_id)
            raise KafkaError(resp.error_code, f"OffsetFetch {group_id}")
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise KafkaError(p.error_code, f"OffsetFetch {group_id} {t.name}-{p.partition_index}")
                if int(p.committed_offset) >= 0:
                    out[TopicPartition(t.name, int(p.partition_index))] = OffsetAndMetadata(
                        int(p.committed_offset), p.metadata or "", int(getattr(p, "committed_leader_epoch", -1)))
        return out

    return await client.call(attempt)


def commit_body(group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata | int], *, generation: int = -1,
                member_id: str = "", instance_id: str | None = None) -> dict:
    """The OffsetCommit request body (also what the simulator's members send)."""
    topics = [{"name": t, "partitions": [
        {"partition_index": p, "committed_offset": o.offset if isinstance(o, OffsetAndMetadata) else int(o),
         "committed_leader_epoch": o.leader_epoch if isinstance(o, OffsetAndMetadata) else -1,
         "commit_timestamp": -1,
         "committed_metadata": o.metadata if isinstance(o, OffsetAndMetadata) else ""} for p, o in ps]}
        for t, ps in _by_topic(offsets.items()).items()]
    return {"group_id": group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance_id, "retention_time_ms": -1, "topics": topics}


async def commit(client: Client, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata | int], *,
                 generation: int = -1, member_id: str = "", instance_id: str | None = None,
                 retries: int | None = None) -> None:
    """OffsetCommit. The generation/epoch and member id fence zombies (KIP-848, KIP-1251);
    -1 and "" commit as a simple (membership-free) group, as the 0.9 design allows."""
    if not offsets:
        return

    body = commit_body(group_id, offsets, generation=generation, member_id=member_id, instance_id=instance_id)

    async def attempt():
        node = await client.coordinator(group_id)
        resp = await client.send(node, Api.OFFSET_COMMIT, body)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    if p.error_code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                        client.forget_coordinator(group_id)
                    raise KafkaError(p.error_code, f"OffsetCommit {group_id} {t.name}-{p.partition_index}")

    await client.call(attempt, retries=retries)
