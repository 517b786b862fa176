"""Records of `__transaction_state`: TransactionLogKey -> TransactionLogValue.

Theory of operation: every change to a transactional id's metadata is one record keyed by
the id (compaction keeps the newest); a tombstone (value None) is an expired id. Layouts
are Kafka's (transaction-coordinator TransactionLogKey v0, TransactionLogValue v0), so the
bytes read the same as Kafka's:

    key   = version int16 (0), transactional_id string
    value = version int16 (0), producer_id int64, producer_epoch int16,
            transaction_timeout_ms int32, transaction_status int8,
            transaction_partitions [topic string, partition_ids [int32]] (nullable),
            transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64

Kafka 4 writes value v1 (flexible, with the previous/next producer ids of KIP-890 as
tagged fields); odradek does not implement KIP-890's second part and writes v0, which
Kafka still reads. A v1 value is read too (its tagged fields are skipped). The encoding
is the group coordinator's schema interpreter (coordinator/records.py), not a
hand-written codec.
"""

from __future__ import annotations

import struct

from ..coordinator.records import RecordError, _Codec
from .model import TxnMetadata, TxnState

_I16 = struct.Struct(">h")
_PLAIN = _Codec(flexible=False)
_FLEX = _Codec(flexible=True)

KEY_SCHEMA = (("transactional_id", "str"),)
_PARTITIONS = ("array?", ("struct", (("topic", "str"), ("partition_ids", ("array", "i32"))), {}))
VALUE_SCHEMA = (
    ("producer_id", "i64"), ("producer_epoch", "i16"), ("transaction_timeout_ms", "i32"),
    ("transaction_status", "i8"), ("transaction_partitions", _PARTITIONS),
    ("transaction_last_update_timestamp_ms", "i64"), ("transaction_start_timestamp_ms", "i64"),
)
# TransactionLogValue v1's tagged fields (KIP-890): read and ignored.
_V1_TAGS = {0: ("previous_producer_id", "i64"), 1: ("next_producer_id", "i64"),
            2: ("client_transaction_version", "i16"), 3: ("next_producer_epoch", "i16")}


def encode_key(transactional_id: str) -> bytes:
    out = bytearray(_I16.pack(0))
    _PLAIN.write(out, "str", transactional_id)
    return bytes(out)


def encode_value(txn: TxnMetadata | None) -> bytes | None:
    if txn is None:
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(p)
    value = {
        "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
        "transaction_timeout_ms": txn.timeout_ms, "transaction_status": int(txn.state),
        "transaction_partitions": [{"topic": t, "partition_ids": ps} for t, ps in by_topic.items()],
        "transaction_last_update_timestamp_ms": txn.last_update_ms,
        "transaction_start_timestamp_ms": txn.start_ms,
    }
    out = bytearray(_I16.pack(0))
    for name, tp in VALUE_SCHEMA:
        _PLAIN.write(out, tp, value[name])
    return bytes(out)


def decode_key(key: bytes) -> str:
    try:
        version = _I16.unpack_from(key, 0)[0]
        if version != 0:
            raise RecordError(f"TransactionLogKey version {version} is unknown")
        return _PLAIN.read(key, 2, "str")[0]
    except struct.error as exc:
        raise RecordError(f"truncated TransactionLogKey: {exc}") from exc


def decode_value(transactional_id: str, value: bytes | None) -> TxnMetadata | None:
    if value is None:
        return None
    try:
        version = _I16.unpack_from(value, 0)[0]
        if version == 0:
            fields, _ = _PLAIN.read_struct(value, 2, VALUE_SCHEMA, {})
        elif version == 1:
            fields, _ = _FLEX.read_struct(value, 2, VALUE_SCHEMA, _V1_TAGS)
        else:
            raise RecordError(f"TransactionLogValue version {version} is unknown")
        state = TxnState(fields["transaction_status"])
    except (struct.error, ValueError) as exc:
        raise RecordError(f"cannot read the TransactionLogValue of {transactional_id!r}: {exc}") from exc
    partitions = frozenset((t["topic"], p) for t in fields["transaction_partitions"] or () for p in t["partition_ids"])
    return TxnMetadata(transactional_id, fields["producer_id"], fields["producer_epoch"],
                       fields["transaction_timeout_ms"], state, partitions,
                       fields["transaction_last_update_timestamp_ms"], fields["transaction_start_timestamp_ms"])


def encode(transactional_id: str, txn: TxnMetadata | None) -> tuple[bytes, bytes | None]:
    return encode_key(transactional_id), encode_value(txn)


def decode(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    tid = decode_key(key)
    return tid, decode_value(tid, value)
