"""Coordinator records: what the group coordinator writes to `__consumer_offsets`.

Theory of operation: every change of coordinator state is a record (key, value) in the
group's `__consumer_offsets` partition; replaying the partition from the start rebuilds
the state (KIP-848 "Records", "Persistence"). The key's first int16 is the record type
(Kafka calls it the key version), so compaction keeps exactly the newest value per
entity, and a tombstone (value None) deletes it. Types and layouts follow Apache Kafka's
group-coordinator record definitions, so the bytes read the same way:

    type 1  OffsetCommitKey(group, topic, partition)  -> OffsetCommitValue v3
    type 2  GroupMetadataKey(group)                   -> a classic group's stable snapshot (v3)
    type 3  ConsumerGroupMetadataKey(group)           -> {epoch}
    type 4  ConsumerGroupPartitionMetadataKey(group)  -> {topics: [{topic_id, topic_name, num_partitions}]}
    type 5  ConsumerGroupMemberMetadataKey(group, m)  -> subscription and client facts of member m
    type 6  ConsumerGroupTargetAssignmentMetadataKey  -> {assignment_epoch}
    type 7  ConsumerGroupTargetAssignmentMemberKey    -> {topic_partitions}
    type 8  ConsumerGroupCurrentMemberAssignmentKey   -> {member_epoch, previous_member_epoch, state,
                                                         assigned_partitions, partitions_pending_revocation}
    type 16 ConsumerGroupRegularExpressionKey(g, rx)  -> {topics, version, timestamp}: what regex rx of
                                                         group g resolved to (Kafka 4.0, KIP-848
                                                         "Regex Based Subscription"), written by the
                                                         asynchronous resolution, tombstoned when no
                                                         member subscribes to rx any more

Where the seed's draft schemas and shipped Kafka differ (the current-assignment value
carries the previous epoch, the member state and the pending-revocation partitions
instead of one partition list; the member metadata carries the rebalance timeout and
server assignor), the shipped layout is used because replay needs those fields.
KIP-1251 adds `assignment_epochs` to each TopicPartitions as tagged field 0, aligned
with `partitions`; a record without it replays with every epoch = the member epoch.

A consumer-group member driven by the classic protocol (KIP-848 "Online Migration")
carries `classic_member_metadata` (session timeout and supported protocols), tagged
field 0 of the member metadata value, as in Kafka.

Keys are non-flexible (int16-length strings); values use Kafka's flexible encoding
(compact strings, varint array lengths, tagged fields), except OffsetCommitValue v3.
One small schema interpreter does both; no per-record hand-written codecs.

Transactions (KIP-98, KIP-447). A TxnOffsetCommit's OffsetCommit records are written in
one transactional batch carrying the producer id and epoch (the Result says so with a
`Transactional` tag); they stay pending until the producer's transaction ends. The end
is a transaction marker, a control batch rather than a keyed record: the runtime carries
it as a pseudo record of type TXN_MARKER (`txn_marker`) so that it is written and
replayed like any other write, and the writer turns it into the control batch. A load
that meets transactional or control batches reads the partition as a `StoredLog`, whose
items keep each batch's kind in log order.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

OFFSET_COMMIT = 1
CLASSIC_GROUP = 2
GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
# Kafka's ConsumerGroupRegularExpressionKey is "validVersions": "16" (the key version is the
# record type); types 9-15 are share-group records odradek does not write.
REGULAR_EXPRESSION = 16
# Not a type stored as a key: a transaction marker (KIP-98), stored as a control batch.
TXN_MARKER = -1


class RecordError(ValueError):
    """A coordinator record that cannot be decoded: the log is corrupt or not ours."""


class CoordinatorRecord(NamedTuple):
    # A NamedTuple, not a frozen dataclass: replay at start-up builds one per record and
    # a frozen dataclass's __init__ costs several times more.
    type: int
    key: tuple
    value: dict[str, Any] | None  # None: tombstone

    @property
    def group_id(self) -> str:
        return self.key[0]


class Transactional(NamedTuple):
    """The producer whose transaction a Result's records belong to (TxnOffsetCommit): they
    are written as one transactional batch carrying this id and epoch (Kafka's
    scheduleTransactionalWriteOperation), and replay into that producer's pending offsets."""

    producer_id: int
    producer_epoch: int


class TransactionalPairs(NamedTuple):
    """The stored (key, value) pairs of one transactional data batch, as a load reads them."""

    producer_id: int
    producer_epoch: int
    pairs: list[tuple[bytes | None, bytes | None]]


class StoredLog(list):
    """A partition's stored contents in log order when some batches are transactional or
    control batches: items are runs of plain (key, value) pairs (lists), TransactionalPairs,
    and TXN_MARKER records. A partition without either is read as a plain list of pairs."""


# --- schema interpreter ---------------------------------------------------------------
# A schema is a tuple of (name, type); a type is a primitive name, ("array", T) or
# ("struct", schema, tagged) where tagged maps tag -> (name, type) for optional tagged fields.

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise RecordError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise RecordError("varint too long")


class _Codec:
    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible

    def write(self, out: bytearray, tp, v) -> None:
        flex = self.flexible
        if tp == "i8":
            out += _I8.pack(v)
        elif tp == "i16":
            out += _I16.pack(v)
        elif tp == "i32":
            out += _I32.pack(v)
        elif tp == "i64":
            out += _I64.pack(v)
        elif tp == "uuid":
            out += v.bytes
        elif tp in ("str", "str?"):
            if v is None:
                if tp == "str":
                    raise ValueError("non-nullable string is None")
                out += b"\x00" if flex else _I16.pack(-1)
            else:
                b = v.encode()
                out += _uvarint(len(b) + 1) if flex else _I16.pack(len(b))
                out += b
        elif tp in ("bytes", "bytes?"):
            if v is None:
                if tp == "bytes":
                    raise ValueError("non-nullable bytes is None")
                out += b"\x00" if flex else _I32.pack(-1)
                return
            out += _uvarint(len(v) + 1) if flex else _I32.pack(len(v))
            out += v
        elif tp[0] in ("array", "array?"):
            if v is None:
                out += b"\x00" if flex else _I32.pack(-1)
                return
            out += _uvarint(len(v) + 1) if flex else _I32.pack(len(v))
            for item in v:
                self.write(out, tp[1], item)
        elif tp[0] == "struct":
            self.write_struct(out, tp[1], tp[2], v)
        else:  # pragma: no cover - schema bug
            raise AssertionError(tp)

    def write_struct(self, out: bytearray, schema, tagged, v: dict) -> None:
        for name, ftp in schema:
            self.write(out, ftp, v[name])
        if self.flexible:
            present = [(tag, name, ftp) for tag, (name, ftp) in sorted(tagged.items()) if v.get(name) is not None]
            out += _uvarint(len(present))
            for tag, name, ftp in present:
                body = bytearray()
                self.write(body, ftp, v[name])
                out += _uvarint(tag) + _uvarint(len(body)) + body

    def read(self, buf: bytes, pos: int, tp) -> tuple[Any, int]:
        flex = self.flexible
        if tp == "i32":
            return _I32.unpack_from(buf, pos)[0], pos + 4
        if tp == "i64":
            return _I64.unpack_from(buf, pos)[0], pos + 8
        if tp == "i16":
            return _I16.unpack_from(buf, pos)[0], pos + 2
        if tp == "i8":
            return _I8.unpack_from(buf, pos)[0], pos + 1
        if tp == "uuid":
            if pos + 16 > len(buf):
                raise RecordError("truncated uuid")
            return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16
        if tp in ("str", "str?", "bytes", "bytes?"):
            if flex:
                n, pos = _read_uvarint(buf, pos)
                n -= 1
            elif tp[0] == "b":
                n, pos = _I32.unpack_from(buf, pos)[0], pos + 4
            else:
                n, pos = _I16.unpack_from(buf, pos)[0], pos + 2
            if n < 0:
                if tp[-1] != "?":
                    raise RecordError("null in a non-nullable field")
                return None, pos
            if pos + n > len(buf):
                raise RecordError("truncated string")
            raw = bytes(buf[pos:pos + n])
            return (raw if tp[0] == "b" else raw.decode()), pos + n
        if tp[0] in ("array", "array?"):
            if flex:
                n, pos = _read_uvarint(buf, pos)
                n -= 1
            else:
                n, pos = _I32.unpack_from(buf, pos)[0], pos + 4
            if n < 0:
                if tp[0] != "array?":
                    raise RecordError("null array in a non-nullable field")
                return None, pos
            elem = tp[1]
            if elem == "i32" and pos + 4 * n <= len(buf):
                return list(struct.unpack_from(f">{n}i", buf, pos)), pos + 4 * n
            items = []
            for _ in range(n):
                item, pos = self.read(buf, pos, elem)
                items.append(item)
            return items, pos
        if tp[0] == "struct":
            return self.read_struct(buf, pos, tp[1], tp[2])
        raise AssertionError(tp)  # pragma: no cover - schema bug

    def read_struct(self, buf: bytes, pos: int, schema, tagged) -> tuple[dict, int]:
        out: dict[str, Any] = {}
        for name, ftp in schema:
            out[name], pos = self.read(buf, pos, ftp)
        for name, _ftp in tagged.values():
            out[name] = None
        if self.flexible:
            count, pos = _read_uvarint(buf, pos)
            for _ in range(count):
                tag, pos = _read_uvarint(buf, pos)
                size, pos = _read_uvarint(buf, pos)
                if tag in tagged:  # unknown tags are skipped: newer writers stay readable
                    name, ftp = tagged[tag]
                    out[name], _ = self.read(buf, pos, ftp)
                pos += size
        return out, pos


_KEYS = _Codec(flexible=False)
_FLEX = _Codec(flexible=True)

# KIP-1251: assignment epochs are tagged field 0 of TopicPartitions, aligned with partitions.
_TOPIC_PARTITIONS = ("struct", (("topic_id", "uuid"), ("partitions", ("array", "i32"))), {0: ("assignment_epochs", ("array?", "i32"))})
_TARGET_PARTITIONS = ("struct", (("topic_id", "uuid"), ("partitions", ("array", "i32"))), {})

KEY_SCHEMAS: dict[int, tuple] = {
    OFFSET_COMMIT: (("group", "str"), ("topic", "str"), ("partition", "i32")),
    CLASSIC_GROUP: (("group", "str"),),
    GROUP_METADATA: (("group", "str"),),
    PARTITION_METADATA: (("group", "str"),),
    MEMBER_METADATA: (("group", "str"), ("member_id", "str")),
    TARGET_METADATA: (("group", "str"),),
    TARGET_MEMBER: (("group", "str"), ("member_id", "str")),
    CURRENT_ASSIGNMENT: (("group", "str"), ("member_id", "str")),
    REGULAR_EXPRESSION: (("group", "str"), ("regular_expression", "str")),
}

# (value version, flexible, schema)
VALUE_SCHEMAS: dict[int, tuple[int, bool, tuple]] = {
    OFFSET_COMMIT: (3, False, (("offset", "i64"), ("leader_epoch", "i32"), ("metadata", "str"), ("commit_timestamp", "i64"))),
    # GroupMetadataValue v3: the classic group as of its last completed rebalance.
    CLASSIC_GROUP: (3, False, (
        ("protocol_type", "str"), ("generation", "i32"), ("protocol", "str?"), ("leader", "str?"),
        ("current_state_timestamp", "i64"),
        ("members", ("array", ("struct", (
            ("member_id", "str"), ("group_instance_id", "str?"), ("client_id", "str"), ("client_host", "str"),
            ("rebalance_timeout", "i32"), ("session_timeout", "i32"), ("subscription", "bytes"), ("assignment", "bytes"),
        ), {}))),
    )),
    GROUP_METADATA: (0, True, (("epoch", "i32"),)),
    PARTITION_METADATA: (0, True, (("topics", ("array", ("struct", (("topic_id", "uuid"), ("topic_name", "str"), ("num_partitions", "i32")), {}))),)),
    MEMBER_METADATA: (0, True, (
        ("instance_id", "str?"), ("rack_id", "str?"), ("client_id", "str"), ("client_host", "str"),
        ("subscribed_topic_names", ("array", "str")), ("subscribed_topic_regex", "str?"),
        ("server_assignor", "str?"), ("rebalance_timeout_ms", "i32"),
    )),
    TARGET_METADATA: (0, True, (("assignment_epoch", "i32"),)),
    TARGET_MEMBER: (0, True, (("topic_partitions", ("array", _TARGET_PARTITIONS)),)),
    CURRENT_ASSIGNMENT: (0, True, (
        ("member_epoch", "i32"), ("previous_member_epoch", "i32"), ("state", "i8"),
        ("assigned_partitions", ("array", _TOPIC_PARTITIONS)),
        ("partitions_pending_revocation", ("array", _TOPIC_PARTITIONS)),
    )),
    # ConsumerGroupRegularExpressionValue v0 (flexible): Topics []string, Version int64 (the
    # metadata image the resolution used), Timestamp int64 (when it ran).
    REGULAR_EXPRESSION: (0, True, (("topics", ("array", "str")), ("version", "i64"), ("timestamp", "i64"))),
}


_PROTOCOLS = ("array", ("struct", (("name", "str"), ("metadata", "bytes")), {}))
# Top-level tagged fields of flexible values.
VALUE_TAGS: dict[int, dict[int, tuple]] = {
    MEMBER_METADATA: {0: ("classic_member_metadata", ("struct", (
        ("session_timeout_ms", "i32"), ("supported_protocols", _PROTOCOLS)), {}))},
}


def encode_key(rtype: int, key: tuple) -> bytes:
    out = bytearray(_I16.pack(rtype))
    for (_, tp), v in zip(KEY_SCHEMAS[rtype], key, strict=True):
        _KEYS.write(out, tp, v)
    return bytes(out)


def encode_value(rtype: int, value: dict | None) -> bytes | None:
    if value is None:
        return None
    version, flexible, schema = VALUE_SCHEMAS[rtype]
    out = bytearray(_I16.pack(version))
    if flexible:
        _FLEX.write_struct(out, schema, VALUE_TAGS.get(rtype, {}), value)
    else:
        for name, tp in schema:
            _KEYS.write(out, tp, value[name])
    return bytes(out)


def encode(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    if record.type == TXN_MARKER:
        raise ValueError("a transaction marker is written as a control batch, not as a keyed record")
    return encode_key(record.type, record.key), encode_value(record.type, record.value)


_OFFSET_VALUE = struct.Struct(">hqih")
# OffsetCommitValue v3 with empty metadata, the usual commit (clients send metadata only
# when the application sets some): (version 3, offset, leader epoch, metadata length 0,
# commit timestamp) in 24 bytes, one unpack. Start-up replay reads these inline
# (Shard.replay_offset_commits); anything else goes through offset_commit_fields.
OFFSET_VALUE_NO_METADATA = struct.Struct(">hqihq")


def offset_commit_fields(key: bytes, value: bytes | None) -> tuple:
    """An OffsetCommit record as a flat tuple, without the schema interpreter:
    (group, topic, partition, offset, leader epoch, metadata, commit timestamp), or
    (group, topic, partition, None) for a tombstone.

    Offset commits are by far the most common records and start-up replay speed depends
    on this path; tests check it agrees with the schema path byte for byte.
    """
    try:
        n = (key[2] << 8) | key[3]
        p = 4 + n
        group = key[4:p].decode()
        m = (key[p] << 8) | key[p + 1]
        topic = key[p + 2:p + 2 + m].decode()
        if len(key) != p + 6 + m:
            raise RecordError("offset commit key has a wrong length")
        partition = _I32.unpack_from(key, p + 2 + m)[0]
        if value is None:
            return (group, topic, partition, None)
        version, offset, leader_epoch, mlen = _OFFSET_VALUE.unpack_from(value, 0)
        if version != 3 or mlen < 0 or len(value) != 24 + mlen:
            raise RecordError(f"offset commit value version {version} or length is not what odradek writes")
        return (group, topic, partition, offset, leader_epoch, value[16:16 + mlen].decode(),
                _I64.unpack_from(value, 16 + mlen)[0])
    except (struct.error, IndexError) as exc:
        raise RecordError(f"truncated offset commit record: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordError(f"bad string in offset commit record: {exc}") from exc


def is_offset_commit(key: bytes) -> bool:
    return len(key) >= 2 and key[0] == 0 and key[1] in (0, 1)


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """Decode one record; None for a record type this coordinator does not know."""
    try:
        if is_offset_commit(key):
            f = offset_commit_fields(key, value)
            if f[3] is None:
                return CoordinatorRecord(OFFSET_COMMIT, f[:3], None)
            return CoordinatorRecord(OFFSET_COMMIT, f[:3], {
                "offset": f[3], "leader_epoch": f[4], "metadata": f[5], "commit_timestamp": f[6],
            })
        rtype = _I16.unpack_from(key, 0)[0]
        if rtype == 0:  # OffsetCommitKey v0 has the same layout as v1
            rtype_schema = OFFSET_COMMIT
        else:
            rtype_schema = rtype
        schema = KEY_SCHEMAS.get(rtype_schema)
        if schema is None:
            return None
        pos = 2
        fields = []
        for _, tp in schema:
            v, pos = _KEYS.read(key, pos, tp)
            fields.append(v)
        if value is None:
            return CoordinatorRecord(rtype_schema, tuple(fields), None)
        version, flexible, vschema = VALUE_SCHEMAS[rtype_schema]
        if _I16.unpack_from(value, 0)[0] != version:
            raise RecordError(f"record type {rtype} value version {_I16.unpack_from(value, 0)[0]} is not {version}")
        decoded, _ = (_FLEX if flexible else _KEYS).read_struct(value, 2, vschema, VALUE_TAGS.get(rtype_schema, {}))
        return CoordinatorRecord(rtype_schema, tuple(fields), decoded)
    except (struct.error, IndexError) as exc:
        raise RecordError(f"truncated coordinator record: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordError(f"bad string in coordinator record: {exc}") from exc


# --- constructors: the only way handlers make records -----------------------------------


def offset_commit(group: str, topic: str, partition: int, offset: int, leader_epoch: int, metadata: str, commit_ts: int) -> CoordinatorRecord:
    return CoordinatorRecord(OFFSET_COMMIT, (group, topic, partition), {
        "offset": offset, "leader_epoch": leader_epoch, "metadata": metadata or "", "commit_timestamp": commit_ts,
    })


def offset_tombstone(group: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OFFSET_COMMIT, (group, topic, partition), None)


def txn_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> CoordinatorRecord:
    """The end of a producer's transaction in this partition (KIP-98 WriteTxnMarkers): its
    pending offsets become committed offsets (commit) or are dropped (abort)."""
    return CoordinatorRecord(TXN_MARKER, (producer_id, producer_epoch), {
        "commit": commit, "coordinator_epoch": coordinator_epoch,
    })


def group_epoch(group: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, (group,), {"epoch": epoch})


def group_tombstone(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, (group,), None)


def partition_metadata(group: str, topics: list[tuple[uuid.UUID, str, int]]) -> CoordinatorRecord:
    return CoordinatorRecord(PARTITION_METADATA, (group,), {
        "topics": [{"topic_id": i, "topic_name": n, "num_partitions": p} for i, n, p in topics],
    })


def partition_metadata_tombstone(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(PARTITION_METADATA, (group,), None)


def member_metadata(group: str, member) -> CoordinatorRecord:
    return CoordinatorRecord(MEMBER_METADATA, (group, member.member_id), {
        "instance_id": member.instance_id, "rack_id": member.rack_id,
        "client_id": member.client_id, "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "server_assignor": member.server_assignor, "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "classic_member_metadata": None if member.classic is None else {
            "session_timeout_ms": member.classic.session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": m} for n, m in member.classic.protocols],
        },
    })


def member_tombstone(group: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(MEMBER_METADATA, (group, member_id), None)


def target_epoch(group: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_METADATA, (group,), {"assignment_epoch": epoch})


def target_epoch_tombstone(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_METADATA, (group,), None)


def target_member(group: str, member_id: str, partitions) -> CoordinatorRecord:
    """`partitions`: topic id -> iterable of partition numbers."""
    return CoordinatorRecord(TARGET_MEMBER, (group, member_id), {
        "topic_partitions": [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(partitions.items()) if ps],
    })


def target_member_tombstone(group: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_MEMBER, (group, member_id), None)


def _with_epochs(parts) -> list[dict]:
    out = []
    for t, ps in sorted(parts.items()):
        if ps:
            order = sorted(ps)
            out.append({"topic_id": t, "partitions": order, "assignment_epochs": [ps[p] for p in order]})
    return out


def current_assignment(group: str, member) -> CoordinatorRecord:
    return CoordinatorRecord(CURRENT_ASSIGNMENT, (group, member.member_id), {
        "member_epoch": member.member_epoch, "previous_member_epoch": member.previous_member_epoch,
        "state": int(member.state),
        "assigned_partitions": _with_epochs(member.assigned),
        "partitions_pending_revocation": _with_epochs(member.pending_revocation),
    })


def current_assignment_tombstone(group: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(CURRENT_ASSIGNMENT, (group, member_id), None)


def regular_expression(group: str, regex: str, topics, version: int, timestamp_ms: int) -> CoordinatorRecord:
    """What `regex` of `group` resolved to (Kafka's newConsumerGroupRegularExpressionRecord)."""
    return CoordinatorRecord(REGULAR_EXPRESSION, (group, regex), {
        "topics": sorted(topics), "version": version, "timestamp": timestamp_ms,
    })


def regular_expression_tombstone(group: str, regex: str) -> CoordinatorRecord:
    return CoordinatorRecord(REGULAR_EXPRESSION, (group, regex), None)


def read_partitions(items: list[dict], default_epoch: int) -> dict[uuid.UUID, dict[int, int]]:
    """TopicPartitions with KIP-1251 epochs -> {topic id: {partition: assignment epoch}}.

    KIP-1251 "Handling of legacy record members": missing epochs are the member epoch.
    """
    out: dict[uuid.UUID, dict[int, int]] = {}
    for item in items:
        epochs = item.get("assignment_epochs")
        parts = item["partitions"]
        if epochs is None or len(epochs) != len(parts):
            out[item["topic_id"]] = dict.fromkeys(parts, default_epoch)
        else:
            out[item["topic_id"]] = dict(zip(parts, epochs))
    return out


def classic_group(group) -> CoordinatorRecord:
    """A classic group's snapshot (Kafka's GroupMetadataValue): written when a rebalance
    completes, when the group empties and when a static member is replaced."""
    protocol = group.protocol_name
    return CoordinatorRecord(CLASSIC_GROUP, (group.group_id,), {
        "protocol_type": group.protocol_type or "", "generation": group.generation, "protocol": protocol,
        "leader": group.leader_id, "current_state_timestamp": group.state_timestamp,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout_ms,
            "session_timeout": m.session_timeout_ms, "subscription": m.metadata(protocol) or b"",
            "assignment": m.assignment,
        } for m in group.members.values()],
    })


def classic_group_tombstone(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(CLASSIC_GROUP, (group,), None)
