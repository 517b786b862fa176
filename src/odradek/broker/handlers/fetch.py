"""Fetch v4-v16: stored bytes out, long-poll through the purgatory.

Replication (Kafka's ReplicaManager.fetchMessages): a Fetch naming a replica id (v15+: in
`replica_state`) comes from a follower. It is served by the leader only, up to the log
end; with v12+ its `last_fetched_epoch` is checked against the leader epoch cache first,
and a log that diverged gets `diverging_epoch` (the end of the follower's last epoch as
this leader knows it) and no records; otherwise the fetch tells the leader the follower's
log end (LeaderPartition.follower_fetched), which moves the ISR and the high watermark.
Consumers (replica id -1) read committed data only: up to the high watermark; an offset
between it and the log end is answered empty, past the log end OFFSET_OUT_OF_RANGE.
Before v11 only the leader serves them. From v11 (KIP-392, client metadata with the
consumer's `rack_id`) any replica hosted here does, up to its own high watermark, and the
leader, when `replica.selector.class` is set, may answer with no records and a
`preferred_read_replica` (replication/selector.py) that the consumer then fetches from.
`current_leader_epoch` (v9+) older than this broker's is FENCED_LEADER_EPOCH, newer
UNKNOWN_LEADER_EPOCH; a broker that cannot serve the partition answers
NOT_LEADER_OR_FOLLOWER with the leader it knows (v12+ `current_leader`). A follower's
fetch is answered at once when the high watermark moved since its previous answer, so
followers serving consumers are not a replica.fetch.wait.max.ms behind (the seed's
"needless delay").

Transactions (KIP-98, Kafka's FetchIsolation): a consumer fetching with isolation_level 1
(READ_COMMITTED) reads up to the last stable offset instead of the high watermark, and
gets `aborted_transactions`, the (producer id, first offset) of every aborted transaction
overlapping the records returned (an empty list when none are), so it can drop their
records; READ_UNCOMMITTED gets null there, as Kafka answers. `last_stable_offset` is the
partition's LSO whatever the isolation level. A parked read_committed fetch re-reads
when the partition changes, which includes a marker moving the LSO (an append) and the
high watermark passing one. Followers read to the log end regardless.

Sessions: odradek does not create incremental fetch sessions (an empty session is what
the issue allows for now): a request with session id 0 is a full fetch and the response
says session id 0, which tells clients no session exists, so they keep sending full
requests. A non-zero session id gets FETCH_SESSION_ID_NOT_FOUND, and the client resets.
"""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode

from ...log.errors import CorruptBatch, StorageError
from ...log.partition import OffsetOutOfRange
from ...protocol.errors import (
    CORRUPT_MESSAGE,
    FETCH_SESSION_ID_NOT_FOUND,
    KAFKA_STORAGE_ERROR,
    NONE,
    OFFSET_OUT_OF_RANGE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...records.batch import iter_headers
from ...replication.follower import OffsetOutOfRange as CannotPlaceFetch
from ...replication.follower import diverging_epoch
from ...replication.selector import NO_PREFERENCE, ClientMetadata
from ...security.acl import Operation
from ..registry import api
from ..replica_manager import NotServable

ZERO_UUID = uuid.UUID(int=0)
UNSUPPORTED_COMPRESSION_TYPE = ErrorCode.unsupported_compression_type
ZSTD_FETCH_VERSION = 10  # KIP-110: the first Fetch version whose clients read zstd
CLIENT_METADATA_VERSION = 11  # KIP-392: rack_id in the request, preferred_read_replica in the answer
READ_COMMITTED = 1


def _partition(index, code, hw=-1, log_start=-1, records=b"", preferred_read_replica=NO_PREFERENCE, lso=None,
               aborted=None, **extra):
    return {**extra,
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": hw if lso is None else lso,
        "log_start_offset": log_start,
        "aborted_transactions": aborted,
        "preferred_read_replica": preferred_read_replica,
        "records": records,
    }


def _resolve(broker, t, by_id: bool):
    if by_id:
        topic = broker.metadata.get_by_id(t.topic_id)
        return topic, (UNKNOWN_TOPIC_ID if topic is None else NONE)
    topic = broker.metadata.get(t.topic)
    return topic, (UNKNOWN_TOPIC_OR_PARTITION if topic is None else NONE)


def _end_of(data: bytes, default: int) -> int:
    """The offset after the last whole batch of `data` (`default` when there is none):
    the upper bound of the aborted transactions a read_committed answer names (Kafka's
    LogSegment.fetchUpperBoundOffset, at batch precision)."""
    end = default
    for h in iter_headers(data):
        end = h.next_offset
    return end


def _aborted(plog, fetch_offset: int, data: bytes) -> list[dict]:
    if not data:
        return []  # Kafka answers an empty read with an empty list
    return [{"producer_id": pid, "first_offset": first}
            for pid, first in plog.aborted_transactions(fetch_offset, _end_of(data, fetch_offset))]


def replica_of(request) -> tuple[int, int]:
    """(replica id, broker epoch): -1 for a consumer (v15+ moved it into ReplicaState)."""
    state = request.field("replica_state", None)
    if state is not None:
        return int(state.replica_id), int(state.replica_epoch)
    return int(request.field("replica_id", -1)), -1


def _serving_check(broker, tp, p, any_replica: bool):
    """(refusal, leads): refusal is None when this broker may serve `p`, else the
    partition's error response; `any_replica`: a consumer Fetch v11+ (KIP-392), which a
    follower serves too."""
    epoch = int(getattr(p, "current_leader_epoch", -1))
    try:
        if any_replica:
            return None, broker.replicas.replica_for_serving(tp, epoch)
        broker.replicas.leader_for_serving(tp, epoch)
        return None, True
    except NotServable as exc:
        leader = broker.replicas.current_leader(tp)
        return _partition(p.partition, exc.code, **({"current_leader": leader} if leader else {})), False


def _read_all(broker, body, by_id, version=ZSTD_FETCH_VERSION, replica=(-1, -1), first_pass=True, client=None,
              denied=frozenset()):
    """One pass over the requested partitions. Returns (responses, bytes, answer_now,
    served): answer_now when a partition's answer must not wait (an error, a preferred
    read replica, a high watermark a follower has not been sent); served: topic -> [bytes,
    records] of the data read, for the bytes/messages-out metrics (records come from the
    read's own CRC walk, so counting them costs no second pass over the batches)."""
    replica_id, replica_epoch = replica
    # KIP-98: a consumer's READ_COMMITTED reads below the last stable offset (followers never).
    read_committed = replica_id < 0 and int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
    # KIP-392: a consumer naming itself (`client`: Fetch v11+ client metadata) may read from
    # a follower, and the leader may send it to one.
    any_replica = client is not None
    selecting = any_replica and broker.replicas.selector is not None
    budget = body.max_bytes
    total = 0
    had_error = False
    first_data = True
    responses = []
    served: dict[str, list[int]] = {}
    for t in body.topics:
        topic, topic_error = _resolve(broker, t, by_id)
        parts = []
        if topic is not None and topic.name in denied:
            parts = [_partition(p.partition, TOPIC_AUTHORIZATION_FAILED) for p in t.partitions]
            had_error = True
            responses.append({"topic": getattr(t, "topic", None), "topic_id": getattr(t, "topic_id", ZERO_UUID),
                              "partitions": parts})
            continue
        for p in t.partitions:
            try:
                plog = broker.logs.get(topic.name, p.partition) if topic is not None else None
            except StorageError:
                parts.append(_partition(p.partition, KAFKA_STORAGE_ERROR))
                had_error = True
                continue
            if plog is None:
                parts.append(_partition(p.partition, topic_error if topic is None else UNKNOWN_TOPIC_OR_PARTITION))
                had_error = True
                continue
            if version < ZSTD_FETCH_VERSION and plog.config.get("compression.type") == "zstd":
                # Kafka's KafkaApis.maybeConvertFetchedData: a topic stored as zstd is not
                # served to a Fetch older than v10 (its client could not read it).
                parts.append(_partition(p.partition, UNSUPPORTED_COMPRESSION_TYPE))
                continue
            tp = (topic.name, p.partition)
            refused, leads = _serving_check(broker, tp, p, any_replica)
            if refused is not None:
                parts.append(refused)
                had_error = True
                continue
            if selecting and leads:
                preferred = broker.replicas.preferred_read_replica(tp, p.fetch_offset, client)
                if preferred != NO_PREFERENCE:
                    # Kafka ReplicaManager.readFromLocalLog: with a preferred read replica the
                    # read is skipped; the answer carries the offsets and the replica, at once.
                    parts.append(_partition(p.partition, NONE, plog.high_watermark, plog.log_start_offset,
                                            preferred_read_replica=preferred, lso=plog.last_stable_offset,
                                            aborted=[] if read_committed else None))
                    had_error = True
                    continue
            if replica_id >= 0:
                last_fetched = int(getattr(p, "last_fetched_epoch", -1))
                try:
                    diverged = diverging_epoch(plog.epochs, plog.log_end_offset, plog.log_start_offset,
                                               last_fetched, p.fetch_offset)
                except CannotPlaceFetch:
                    parts.append(_partition(p.partition, OFFSET_OUT_OF_RANGE, plog.high_watermark,
                                            plog.log_start_offset))
                    had_error = True
                    continue
                if diverged is not None:
                    # Kafka: the follower truncates to the end of its last common epoch first.
                    parts.append(_partition(p.partition, NONE, plog.high_watermark, plog.log_start_offset,
                                            diverging_epoch={"epoch": diverged.epoch,
                                                             "end_offset": diverged.end_offset}))
                    had_error = True
                    continue
            limit = min(p.partition_max_bytes, max(budget - total, 0))
            # Consumers read committed data only: up to the high watermark, or with
            # READ_COMMITTED up to the last stable offset (Kafka's FetchIsolation.TXN_COMMITTED).
            if read_committed:
                bound = plog.last_stable_offset
            else:
                bound = None if replica_id >= 0 or not plog.replicated else plog.high_watermark
            try:
                # KIP-74: the first partition with data returns at least one whole batch,
                # even past max_bytes, so a large batch can never block a consumer.
                result = plog.read(p.fetch_offset, limit, min_one=first_data, max_offset=bound)
                aborted = _aborted(plog, p.fetch_offset, result.data) if read_committed else None
            except OffsetOutOfRange:
                parts.append(_partition(p.partition, OFFSET_OUT_OF_RANGE, plog.high_watermark, plog.log_start_offset))
                had_error = True
                continue
            except CorruptBatch:
                # Item 8 of the hardening issue: a stored batch that fails its CRC is never
                # served as if it were fine; the consumer sees CORRUPT_MESSAGE at this offset.
                parts.append(_partition(p.partition, CORRUPT_MESSAGE, plog.high_watermark, plog.log_start_offset))
                had_error = True
                continue
            except StorageError as exc:
                broker.storage_failed(exc)
                parts.append(_partition(p.partition, KAFKA_STORAGE_ERROR, plog.high_watermark, plog.log_start_offset))
                had_error = True
                continue
            hw = result.high_watermark
            if replica_id >= 0:
                if first_pass:
                    broker.replicas.follower_fetched(tp, replica_id, p.fetch_offset,
                                                     int(getattr(p, "log_start_offset", -1)), replica_epoch)
                    # Kafka answers the high watermark read before this fetch counted; when the
                    # fetch itself moved it, odradek answers the new one (the records read do not
                    # depend on it), so the follower is not a round behind, or a long poll
                    # behind when nothing else is written.
                    hw = plog.high_watermark
                if broker.replicas.high_watermark_news(tp, replica_id, hw):
                    # KIP-392 "the follower's high watermark lags": a follower that would wait
                    # replica.fetch.wait.max.ms for records before learning the new high
                    # watermark serves its consumers stale data meanwhile; answer it now.
                    had_error = True
            if result.data:
                first_data = False
                total += len(result.data)
                counts = served.get(topic.name)
                if counts is None:
                    served[topic.name] = [len(result.data), result.records]
                else:
                    counts[0] += len(result.data)
                    counts[1] += result.records
            parts.append(_partition(p.partition, NONE, hw, result.log_start_offset, result.data,
                                    lso=min(plog.last_stable_offset, hw), aborted=aborted))
        responses.append({"topic": getattr(t, "topic", None), "topic_id": getattr(t, "topic_id", ZERO_UUID), "partitions": parts})
    return responses, total, had_error, served


def _keys(broker, body, by_id):
    keys = []
    for t in body.topics:
        topic, _ = _resolve(broker, t, by_id)
        if topic is not None:
            keys.extend((topic.name, p.partition) for p in t.partitions)
    return keys


def _response(responses, error=NONE):
    return {"throttle_time": 0, "error_code": error, "session_id": 0, "responses": responses, "node_endpoints": []}


def _denied(broker, request, body, by_id, follower: bool) -> frozenset:
    """The topics this fetch may not read (Kafka: READ on each topic for a consumer;
    CLUSTER_ACTION for a follower, whose every partition is refused without it)."""
    access = broker.access(request)
    if not access.enforced:
        return frozenset()
    names = {topic.name for topic in (_resolve(broker, t, by_id)[0] for t in body.topics) if topic is not None}
    if follower:
        return frozenset() if access.cluster(Operation.CLUSTER_ACTION) else frozenset(names)
    return frozenset(n for n in names if not access.topic(Operation.READ, n))


@api(1, "Fetch", 4, 16)
async def fetch(broker, request):
    body = request.body
    by_id = request.api_version >= 13
    session_id = request.field("session_id", 0)
    if session_id != 0:
        return _response([], FETCH_SESSION_ID_NOT_FOUND)
    max_wait_ms = body.max_wait.total_seconds() * 1000
    deadline = broker.clock() + max_wait_ms
    await broker.open_partitions(_keys(broker, body, by_id))
    replica = replica_of(request)
    client = None
    if request.api_version >= CLIENT_METADATA_VERSION and replica[0] < 0:
        client = ClientMetadata(body.rack_id or None, request.client_id or "", request.client_host)
    denied = _denied(broker, request, body, by_id, replica[0] >= 0)
    first_pass = True
    while True:
        responses, total, had_error, served = _read_all(broker, body, by_id, request.api_version, replica,
                                                        first_pass, client, denied)
        first_pass = False
        remaining_ms = deadline - broker.clock()
        if total >= body.min_bytes or had_error or remaining_ms <= 0:
            if total and broker.stats is not None:
                # Bytes and records served per topic (Kafka's BytesOutPerSec, and its
                # ReplicationBytesOutPerSec for followers).
                for name, (nbytes, records) in served.items():
                    broker.stats.fetched(name, nbytes, records, replica[0] >= 0)
            return _response(responses)
        keys = _keys(broker, body, by_id)
        if not keys:
            # Nothing to wait on (an empty fetch): Kafka still holds it for max_wait_ms,
            # which keeps a client with nothing assigned from spinning.
            await asyncio.sleep(remaining_ms / 1000)
            return _response(responses)
        await broker.purgatory.wait(keys, remaining_ms / 1000)
