"""Consumer positions and fetches, sans-I/O (the 0.9 design's "Consumer state").

Theory of operation: `Positions` holds, for every assigned partition, the offset of
the next record the application will see, whether it is paused, and whether its
position still has to be found (committed offset, else `auto_offset_reset`). A fetch
is planned per leader for partitions that have a position, are not paused and have at
most one chunk buffered (`plan`; the fetch then starts after that chunk, so the next
fetch is in flight while the application works through the current one); its response is turned into `Completed` chunks, each tagged
with the position it was fetched from. `take` hands the application records only from
a chunk whose fetch position still equals the partition's position and whose partition
is still assigned and not paused, so a seek, a pause or a rebalance in between makes
stale data vanish instead of surfacing (Java's CompletedFetch check). Positions advance
only as records are handed out, which is what makes auto-commit at-least-once.

Each position also remembers the leader epoch of the record before it (`position_epoch`,
Java's FetchPosition.offsetEpoch), which KIP-320 validation checks against a new leader, and
the leader (node and epoch) it is fetched under, which every Fetch names as
`current_leader_epoch` so that a stale broker answers FENCED_LEADER_EPOCH instead of data. A
partition whose position awaits validation (`validating`) is neither fetched nor handed
out. Which replica a partition is read from (KIP-392) is `readreplica`'s business; its
state lives here too so that it goes when the partition goes.

With read_committed (isolation_level 1, KIP-98) the response's aborted transactions say
which transactional batches to drop (`aborted.AbortedTransactions`); control batches
(transaction markers) are dropped in both isolation levels. Both still move the position:
a chunk's `next_offset` is past its last batch, so a fetch that brought only markers or
aborted records advances the position without handing anything out, as Java's consumer does.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from odradek.records.codec import CodecError, decode_batches
from odradek.records.control import control_type

from .aborted import AbortedTransactions
from .cluster import TopicPartition
from .errors import KafkaError


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple  # ((key str, value bytes | None), ...)
    leader_epoch: int


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    paused: bool = False
    leader_epoch: int = -1  # of `leader`: what Fetch and OffsetsForLeaderEpoch send as current_leader_epoch
    high_watermark: int = -1
    reset: str | None = None  # a pending seek_to_beginning/end ("earliest"/"latest")
    leader: int = -1  # the partition's leader as metadata last named it (-1: not yet looked at)
    # KIP-320: the leader epoch of the record before `epoch_of`; it means something only
    # while the position is still `epoch_of` (a seek or reset makes it moot without a word).
    offset_epoch: int = -1
    epoch_of: int | None = None
    validate_at: int | None = None  # KIP-320: the position awaiting OffsetsForLeaderEpoch
    # KIP-392: the replica the leader prefers for this consumer, until the lease ends.
    preferred: int = -1
    preferred_until_ms: float = 0.0
    # Until then the leader is asked without the client's rack: the replica it would name
    # is unreachable from here (readreplica.ReadReplicas.unreachable).
    rackless_until_ms: float = 0.0

    @property
    def position_epoch(self) -> int:
        """The leader epoch of the record before the position, -1 when unknown."""
        return self.offset_epoch if self.epoch_of is not None and self.epoch_of == self.position else -1

    @property
    def validating(self) -> bool:
        """KIP-320: the position must be checked with the leader before it is fetched from."""
        return self.validate_at is not None and self.validate_at == self.position


@dataclass(slots=True)
class Completed:
    tp: TopicPartition
    fetch_offset: int
    records: deque  # ConsumerRecord, offsets >= fetch_offset
    next_offset: int  # position after the whole chunk (skips control records and gaps)
    high_watermark: int
    last_epoch: int = -1  # leader epoch of the chunk's last batch: the epoch of position next_offset


def fetch_body(offsets: dict[TopicPartition, int], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
               partition_max_bytes: int, isolation_level: int = 0, rack: str | None = None,
               epochs: dict[TopicPartition, int] | None = None) -> dict:
    """A Fetch request (v4-12 fields; no incremental session) for `offsets`, tp -> fetch offset.
    `epochs`: tp -> the leader epoch the client knows (KIP-320 `current_leader_epoch`: a broker
    with a newer one answers FENCED_LEADER_EPOCH, one with an older UNKNOWN_LEADER_EPOCH)."""
    topics: dict[str, list[dict]] = {}
    for tp, offset in offsets.items():
        epoch = epochs.get(tp, -1) if epochs else -1
        topics.setdefault(tp.topic, []).append({
            "partition": tp.partition, "current_leader_epoch": epoch, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes})
    return {"cluster_id": None, "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": rack or ""}


class Positions:
    def __init__(self, check_crcs: bool = True) -> None:
        self.parts: dict[TopicPartition, PartitionState] = {}
        self.buffer: deque[Completed] = deque()
        # The Java consumer's check.crcs (default true): a batch whose CRC32C fails is
        # corruption on the way or on the broker's disk, never records to hand out.
        self.check_crcs = check_crcs

    # -------------------------------------------------------------- assignment

    # Partitions are kept in (topic, partition) order, not in the hash order of the sets
    # callers pass: fetch plans must not depend on PYTHONHASHSEED (the simulator replays them).

    def set(self, tps) -> None:
        keep = set(tps)
        self.remove([tp for tp in self.parts if tp not in keep])
        for tp in sorted(keep):
            self.parts.setdefault(tp, PartitionState())

    def add(self, tps) -> None:
        for tp in sorted(tps):
            self.parts.setdefault(tp, PartitionState())

    def remove(self, tps) -> None:
        """Forget partitions, and whatever was fetched for them."""
        tps = set(tps)
        for tp in tps:
            self.parts.pop(tp, None)
        if tps and self.buffer:
            self.drop_buffered(tps)

    def needing_position(self) -> list[TopicPartition]:
        return [tp for tp, s in self.parts.items() if s.position is None]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        s = self.parts.get(tp)
        if s is None:
            raise KeyError(tp)
        s.position = offset
        s.reset = None
        # Java seek(): a position with no epoch, so nothing to validate (even at the same offset).
        s.epoch_of = s.validate_at = None

    # -------------------------------------------------------------- fetching

    # Chunks a partition may have buffered and still be fetched: one, so the next fetch is
    # in flight while the application works through the current chunk.
    PREFETCH = 1

    def _buffered(self) -> dict[TopicPartition, tuple[int, int]]:
        """tp -> (buffered chunks, offset after the last one)."""
        out: dict[TopicPartition, tuple[int, int]] = {}
        for c in self.buffer:
            n, _ = out.get(c.tp, (0, 0))
            out[c.tp] = (n + 1, c.next_offset)
        return out

    def next_fetch_offset(self, tp: TopicPartition) -> int | None:
        """Where the next fetch of `tp` starts: after its buffered data, else its position."""
        s = self.parts.get(tp)
        if s is None or s.position is None:
            return None
        ahead = self._buffered().get(tp)
        return ahead[1] if ahead else s.position

    def fetchable(self) -> list[TopicPartition]:
        buffered = self._buffered()
        return [tp for tp, s in self.parts.items()
                if s.position is not None and not s.paused and not s.validating
                and buffered.get(tp, (0, 0))[0] <= self.PREFETCH]

    def plan(self, leaders: dict[TopicPartition, int]) -> dict[int, list[tuple[TopicPartition, int, int]]]:
        """node -> [(tp, fetch offset, leader epoch)] for every fetchable partition with a known
        node to fetch from (`leaders`: tp -> its leader, or the replica it is read from)."""
        out: dict[int, list[tuple[TopicPartition, int, int]]] = {}
        buffered = self._buffered()
        for tp in self.fetchable():
            node = leaders.get(tp)
            if node is not None:
                s = self.parts[tp]
                ahead = buffered.get(tp)
                out.setdefault(node, []).append((tp, ahead[1] if ahead else s.position, s.leader_epoch))
        return out

    def on_partition(self, tp: TopicPartition, fetch_offset: int, records_bytes: bytes | None,
                     high_watermark: int, aborted: list | None = None) -> Completed | None:
        """A partition's data from a Fetch response with no error. `aborted`: the
        response's aborted transactions, for read_committed (None for read_uncommitted).
        Returns the chunk buffered, if any (the driver counts it for the statistics)."""
        s = self.parts.get(tp)
        if s is None or s.validating or self.next_fetch_offset(tp) != fetch_offset:
            # Revoked or sought meanwhile (the 0.9 design: stale fetches are discarded), or
            # fetched before a leader change whose validation is pending (KIP-320).
            return None
        s.high_watermark = high_watermark
        if not records_bytes:
            return None
        try:
            batches = decode_batches(records_bytes, verify_crc=self.check_crcs)
        except CodecError as exc:
            raise KafkaError(ErrorCode.corrupt_message, f"{tp} at offset {fetch_offset}: {exc}",
                             retriable=False) from exc
        out: deque = deque()
        append = out.append
        topic, partition = tp
        next_offset = fetch_offset
        last_epoch = -1
        txns = AbortedTransactions(aborted) if aborted else None
        for b in batches:
            h = b.header
            last = h.base_offset + h.last_offset_delta
            # Every batch goes through the filter, in order, even one before the fetch
            # offset: its ABORT marker closes an aborted transaction (Java does the same).
            dropped = txns is not None and txns.skip(h, lambda b=b: _marker_type(b))
            if last < fetch_offset:
                continue
            next_offset = last + 1
            last_epoch = h.partition_leader_epoch
            if b.is_control or dropped:
                continue  # markers and aborted records are never shown to the application
            ts_type = b.timestamp_type
            epoch = h.partition_leader_epoch
            for r in b.records:
                if r.offset >= fetch_offset:
                    append(ConsumerRecord(topic, partition, r.offset, r.timestamp, ts_type, r.key, r.value,
                                          tuple((x.key, x.value) for x in r.headers) if r.headers else (), epoch))
        if next_offset > fetch_offset:
            chunk = Completed(tp, fetch_offset, out, next_offset, high_watermark, last_epoch)
            self.buffer.append(chunk)
            return chunk
        return None

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` records, advancing positions as they are handed out."""
        taken: list[ConsumerRecord] = []
        while self.buffer and len(taken) < max_records:
            c = self.buffer[0]
            s = self.parts.get(c.tp)
            if s is None or s.paused or s.validating or s.position != c.fetch_offset:
                self.buffer.popleft()  # stale: revoked, paused, sought or validating since it was fetched
                continue
            room = max_records - len(taken)
            recs = c.records
            if len(recs) <= room:
                taken.extend(recs)
                s.position = c.next_offset
                if c.last_epoch >= 0:
                    s.offset_epoch, s.epoch_of = c.last_epoch, c.next_offset
                self.buffer.popleft()
            else:
                chunk = [recs.popleft() for _ in range(room)]
                taken.extend(chunk)
                s.position = c.fetch_offset = chunk[-1].offset + 1
                s.offset_epoch, s.epoch_of = chunk[-1].leader_epoch, s.position
        return taken

    def buffered_records(self) -> dict[TopicPartition, int]:
        """tp -> records fetched and not yet handed out (statistics: fetchq_cnt)."""
        out: dict[TopicPartition, int] = {}
        for c in self.buffer:
            out[c.tp] = out.get(c.tp, 0) + len(c.records)
        return out

    def drop_buffered(self, tps=None) -> None:
        if tps is None:
            self.buffer.clear()
        else:
            drop = set(tps)
            self.buffer = deque(c for c in self.buffer if c.tp not in drop)


def _marker_type(b) -> int | None:
    """The control type of a decoded control batch (ABORT or COMMIT for a marker)."""
    if not b.records:
        return None
    try:
        return control_type(b.records[0].key)
    except CodecError:
        return None
