"""The consumer embedded protocol: what consumers put in JoinGroup metadata and SyncGroup assignments.

Theory of operation (consumer-0.9-rewrite-design "Embedded protocol"; Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment): the coordinator of a
classic group treats these bytes as opaque, but KIP-848's online migration reads them:
a classic group becomes a consumer group from its members' subscriptions and
assignments, and a classic member of a consumer group joins with a subscription (topics,
owned partitions, rack) and is handed its assignment in the same encoding. Both are a
version int16 followed by a non-flexible struct; newer versions only append fields, so
we read the fields we know and ignore the rest, as Kafka does.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .records import _KEYS, RecordError

_TOPIC_PARTITIONS = ("array", ("struct", (("topic", "str"), ("partitions", ("array", "i32"))), {}))
_SUBSCRIPTION = [
    (0, ("topics", ("array", "str"))),
    (0, ("user_data", "bytes?")),
    (1, ("owned_partitions", _TOPIC_PARTITIONS)),
    (2, ("generation_id", "i32")),
    (3, ("rack_id", "str?")),
]
_ASSIGNMENT = (("assigned_partitions", _TOPIC_PARTITIONS), ("user_data", "bytes?"))
MAX_VERSION = 3


class Subscription(NamedTuple):
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None
    version: int
    generation: int = -1  # v2+: the generation the owned partitions are from (KIP-792)


def decode_subscription(data: bytes) -> Subscription:
    """Raises RecordError for bytes that are not a consumer subscription."""
    try:
        version = struct.unpack_from(">h", data, 0)[0]
        if version < 0:
            raise RecordError(f"subscription version {version}")
        pos = 2
        fields: dict = {}
        for since, (name, tp) in _SUBSCRIPTION:
            if version < since:
                break
            fields[name], pos = _KEYS.read(data, pos, tp)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordError(f"malformed consumer subscription: {exc}") from exc
    owned: dict[str, set[int]] = {}
    for tp in fields.get("owned_partitions", []):
        owned.setdefault(tp["topic"], set()).update(tp["partitions"])
    return Subscription(tuple(fields["topics"]), {t: frozenset(ps) for t, ps in owned.items()}, fields.get("rack_id"),
                        version, fields.get("generation_id", -1))


def encode_subscription(topics, owned: dict[str, list[int]] | None = None, version: int = 1, *,
                        generation: int = -1, rack_id: str | None = None) -> bytes:
    out = bytearray(struct.pack(">h", version))
    values = {"topics": list(topics), "user_data": None, "generation_id": generation, "rack_id": rack_id,
              "owned_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted((owned or {}).items())]}
    for since, (name, tp) in _SUBSCRIPTION:
        if version >= since:
            _KEYS.write(out, tp, values[name])
    return bytes(out)


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    try:
        struct.unpack_from(">h", data, 0)
        fields, _ = _KEYS.read_struct(data, 2, _ASSIGNMENT[:1], {})
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordError(f"malformed consumer assignment: {exc}") from exc
    out: dict[str, set[int]] = {}
    for tp in fields["assigned_partitions"]:
        out.setdefault(tp["topic"], set()).update(tp["partitions"])
    return {t: frozenset(ps) for t, ps in out.items()}


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """Assignment versions 0-3 share one layout; the version echoes the member's subscription."""
    out = bytearray(struct.pack(">h", max(0, min(version, MAX_VERSION))))
    _KEYS.write(out, _ASSIGNMENT[0][1], [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(partitions.items()) if ps])
    _KEYS.write(out, "bytes?", None)
    return bytes(out)


def metadata_version(metadata: bytes | None) -> int:
    if not metadata or len(metadata) < 2:
        return 0
    return max(0, min(struct.unpack_from(">h", metadata, 0)[0], MAX_VERSION))
