"""Request frames for the fuzz tests: seeds built from kio's schemas, and mutations.

Theory of operation: a request body is kept as a plain tree (dicts for structs, lists
for arrays, Python values for leaves) next to its kio request class, so a mutation can
change one field at any depth before encoding. The encoder below follows the Kafka wire
format (KIP-482 flexible versions: compact lengths and tagged fields) but, unlike kio's
writer, will write what the schema forbids: a null where the field is not nullable, a
length prefix that does not match the data, an int out of its field's sensible range.
Those are the frames a broker must answer with an error code or a closed connection.
"""

from __future__ import annotations

import random
import struct
import typing
import uuid
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any

from kio.serial.writers import write_unsigned_varint

from odradek.protocol.messages import request_class

INT_FORMATS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint8": ">B", "uint16": ">H",
               "uint32": ">I", "uint64": ">Q", "timedelta_i32": ">i", "timedelta_i64": ">q", "datetime_i64": ">q"}
STRINGISH = ("string", "bytes", "records")


# --- the schema of a kio request class, as the encoder and the mutator need it ----------


@dataclass(frozen=True)
class Kind:
    """What one field (or one array element) holds on the wire."""

    wire: str  # an INT_FORMATS key, "bool", "float64", "uuid", "string", "bytes", "records", "struct", "array"
    nullable: bool = False
    flexible: bool = False
    entity: Any = None  # the kio class, for "struct"
    elem: Kind | None = None  # for "array"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: Kind
    tag: int | None
    default: Any  # MISSING when the field has no default


def _unwrap(tp):
    """(inner type, nullable) of `X | None`."""
    if typing.get_origin(tp) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        return args[0], True
    return tp, False


@cache
def schema(cls) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    flexible = cls.__flexible__
    out = []
    for f in fields(cls):
        tp, nullable = _unwrap(hints[f.name])
        kafka_type = f.metadata.get("kafka_type")
        if typing.get_origin(tp) is tuple:
            elem_tp = typing.get_args(tp)[0]
            elem = (Kind("struct", False, flexible, elem_tp) if is_dataclass(elem_tp)
                    else Kind(kafka_type, False, flexible))
            kind = Kind("array", nullable, flexible, elem=elem)
        elif is_dataclass(tp):
            kind = Kind("struct", nullable, flexible, tp)
        else:
            kind = Kind(kafka_type, nullable, flexible)
        tag = f.metadata.get("tag")
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        out.append(FieldSpec(f.name, kind, tag, default))
    return tuple(out)


# --- encoding, lenient -------------------------------------------------------------------


@dataclass(frozen=True)
class Length:
    """Write `value` behind the length prefix `n` instead of its true length."""

    n: int
    value: Any


def _length(out: bytearray, kind: Kind, n: int) -> None:
    if kind.flexible:  # compact: unsigned varint of length + 1, 0 meaning null
        buf = _Sink()
        write_unsigned_varint(buf, max(n + 1, 0))
        out += buf.data
    elif kind.wire == "string":
        out += struct.pack(">h", max(min(n, 32767), -32768))
    else:
        out += struct.pack(">i", max(min(n, 2**31 - 1), -(2**31)))


class _Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b) -> None:
        self.data += b


def _to_ms(v) -> int:
    return int(v.total_seconds() * 1000) if hasattr(v, "total_seconds") else int(v)


def encode_value(out: bytearray, kind: Kind, value: Any) -> None:
    n = None
    if isinstance(value, Length):
        n, value = value.n, value.value
    w = kind.wire
    if w == "array":
        if value is None:
            _length(out, kind, -1 if n is None else n)
            return
        _length(out, kind, len(value) if n is None else n)
        for item in value:
            encode_value(out, kind.elem, item)
    elif w in STRINGISH:
        if value is None:
            _length(out, kind, -1 if n is None else n)
            return
        data = value.encode() if isinstance(value, str) else bytes(value)
        _length(out, kind, len(data) if n is None else n)
        out += data
    elif w == "struct":
        if kind.nullable:  # KIP-893: a nullable struct is prefixed by an int8 marker
            out += struct.pack(">b", -1 if value is None else 1)
        if is_dataclass(value):  # a kio default, such as Fetch's ReplicaState()
            value = {f.name: getattr(value, f.name) for f in fields(value)}
        if value is not None:
            encode_entity(out, kind.entity, value)
    elif w == "uuid":
        out += (value or uuid.UUID(int=0)).bytes
    elif w == "bool":
        out += struct.pack(">B", int(value) & 0xFF)
    elif w == "float64":
        out += struct.pack(">d", float(value))
    else:
        fmt = INT_FORMATS[w]
        v = -1 if value is None else _to_ms(value)
        bits = struct.calcsize(fmt) * 8
        v &= (1 << bits) - 1  # wrap, so an out-of-range mutation still encodes
        out += struct.pack(fmt.upper() if fmt[1].islower() else fmt, v)


def encode_entity(out: bytearray, cls, tree: dict) -> None:
    tagged = []
    for spec in schema(cls):
        value = tree.get(spec.name, spec.default)
        if value is MISSING:
            raise KeyError(f"{cls.__qualname__} v{cls.__version__} needs field {spec.name!r}")
        if spec.tag is not None:
            if spec.name in tree and value != spec.default:
                tagged.append((spec.tag, spec.kind, value))
            continue
        encode_value(out, spec.kind, value)
    if cls.__flexible__:
        sink = _Sink()
        write_unsigned_varint(sink, len(tagged))
        out += sink.data
        for tag, kind, value in sorted(tagged, key=lambda t: t[0]):
            body = bytearray()
            encode_value(body, kind, value)
            sink = _Sink()
            write_unsigned_varint(sink, tag)
            write_unsigned_varint(sink, len(body))
            out += sink.data + body


def encode_request(api_key: int, version: int, tree: dict, correlation_id: int = 7, client_id: str = "fuzz") -> bytes:
    """The frame without its size prefix, as `Broker.handle_frame` takes it."""
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    out = bytearray(struct.pack(">hhi", api_key, version, correlation_id))
    if "client_id" in header_cls.__dataclass_fields__:
        # RequestHeader.client_id is a legacy nullable string even in flexible versions.
        data = client_id.encode()
        out += struct.pack(">h", len(data)) + data
    if header_cls.__flexible__:
        out += b"\x00"  # no tagged fields
    encode_entity(out, cls, tree)
    return bytes(out)


# --- seeds -------------------------------------------------------------------------------


@dataclass
class World:
    """Names the seeds use; the fuzz test creates these topics and groups' homes."""

    topic: str  # produced to and fetched from
    topic_id: uuid.UUID
    created: str  # what CreateTopics names
    doomed: str  # what DeleteTopics names
    doomed_id: uuid.UUID
    grow: str  # what CreatePartitions names
    batch: bytes  # a valid record batch
    subscription: bytes  # a valid ConsumerProtocolSubscription
    assignment: bytes  # a valid ConsumerProtocolAssignment
    # Live groups the harness sets up between runs, so requests can name a real member:
    classic_group: str = "fj"  # a stable classic group ...
    classic_member: str = ""  # ... its leader ...
    classic_generation: int = -1  # ... and its generation
    consumer_group: str = "fc"  # a consumer group (KIP-848) ...
    consumer_member: str = "fuzz-member-0000000000000000000000"  # ... one member ...
    consumer_epoch: int = 0  # ... its epoch ...
    consumer_owned: tuple = ()  # ... and what it owns: ({"topic_id":, "partitions":},)


# (api key, field name) -> value, the few fields a generic value would make useless.
# Group ids differ per protocol so classic and consumer groups meet only through mutation.
OVERRIDES: dict[tuple[int | None, str], Any] = {
    (1, "max_wait"): 0,  # never park a fetch
    (1, "min_bytes"): 1,
    (1, "session_epoch"): -1,
    (0, "acks"): 1,
    (0, "transactional_id"): None,
    (2, "timestamp"): -1,
    (10, "key_type"): 0,
    (11, "protocol_type"): "consumer",
    (14, "protocol_type"): "consumer",
    (11, "session_timeout"): 10_000,
    (11, "rebalance_timeout"): 10_000,
    (19, "num_partitions"): 1,
    (19, "replication_factor"): 1,
    (19, "validate_only"): False,
    (22, "transaction_timeout"): 60_000,
    (22, "producer_epoch"): -1,
    (32, "resource_type"): 2,
    (44, "resource_type"): 32,  # odradek alters GROUP configs only
    (44, "name"): "consumer.session.timeout.ms",
    (44, "value"): "45000",
    (44, "config_operation"): 0,
    (60, "endpoint_type"): 1,
    (37, "count"): 2,
    (68, "member_epoch"): 0,
    (68, "rebalance_timeout"): 30_000,
    (68, "server_assignor"): None,
    (68, "instance_id"): None,
    (68, "rack_id"): None,
    (68, "subscribed_topic_regex"): None,
    (68, "topic_partitions"): [],
}
CLASSIC_APIS = (8, 9, 11, 12, 13, 14, 15, 47)  # they name the live classic group and its leader
CONSUMER_APIS = (68, 69)  # they name the live consumer group and its member
# ... and the rest of the group ids: a group of its own for DeleteGroups, FindCoordinator's key.
GROUPS = {42: "fg-doomed", 10: "fg"}


def _string(api_key: int, name: str, world: World, parent: str) -> str | None:
    if name in ("group_id", "group_ids", "groups", "groups_names", "key", "coordinator_keys"):
        if api_key in CLASSIC_APIS:
            return world.classic_group
        return world.consumer_group if api_key in CONSUMER_APIS else GROUPS.get(api_key, "fg")
    if name == "member_id" and api_key != 11:  # JoinGroup asks for a new member
        return world.consumer_member if api_key in CONSUMER_APIS else world.classic_member
    if name in ("topic", "topic_names", "subscribed_topic_names") or (name == "name" and "topic" in parent.lower()):
        return {19: world.created, 20: world.doomed, 37: world.grow}.get(api_key, world.topic)
    if name == "resource_name":
        return world.consumer_group if api_key == 44 else world.topic
    if name == "name" and "config" in parent.lower():
        return "retention.ms"
    if name in ("value",):
        return "3600000"
    if name == "configuration_keys":
        return "cleanup.policy"
    if name == "protocol_type":
        return "consumer"
    if name in ("name", "protocol_name"):
        return "range"
    if name == "member_id":
        return ""
    if name == "client_software_name":
        return "fuzz"
    if name == "client_software_version":
        return "1.0"
    if name == "rack_id":
        return "rack-a"
    if name in ("states_filter",):
        return "Stable"
    if name in ("types_filter",):
        return "consumer"
    if name in ("group_instance_id", "instance_id"):
        return "inst-1"
    if name == "server_assignor":
        return "uniform"
    if name == "subscribed_topic_regex":
        return "f.*"
    if name == "reason":
        return "fuzz"
    return "x"


def _int(api_key: int, name: str, world: World) -> int:
    if name in ("generation_id", "generation_id_or_member_epoch") and api_key in CLASSIC_APIS:
        return world.classic_generation
    if "epoch" in name or name in ("replica_id", "producer_id", "generation_id", "generation_id_or_member_epoch",
                                   "timestamp", "retention_time", "log_start_offset"):
        return -1
    if "timeout" in name:
        return 1000
    if name in ("max_bytes", "partition_max_bytes"):
        return 1 << 20
    if name in ("min_bytes", "num_partitions", "replication_factor", "count", "acks"):
        return 1
    if name == "broker_ids":
        return 1
    if name == "resource_type":
        return 2
    return 0


FILLED, NULLS, NULL_LEAVES = "filled", "nulls", "null leaves"


def seed_tree(api_key: int, cls, world: World, style: str) -> dict:
    """A plausible body for `cls`: every field filled (FILLED), every nullable field null
    (NULLS), or nullable arrays and structs filled but nullable strings, bytes and topic
    ids null or zero (NULL_LEAVES: a null name inside a list of topics, for example)."""
    tree = {}
    for spec in schema(cls):
        key = (api_key, spec.name)
        if key in OVERRIDES:
            tree[spec.name] = OVERRIDES[key]
            continue
        container = spec.kind.wire in ("array", "struct")
        if spec.kind.nullable and (style == NULLS or style == NULL_LEAVES and not container):
            tree[spec.name] = None
            continue
        tree[spec.name] = _seed_value(api_key, spec.name, spec.kind, world, style, cls.__name__)
    return tree


def _seed_value(api_key, name, kind: Kind, world: World, style: str, parent: str):
    w = kind.wire
    fill = style == FILLED
    if w == "array":
        return [_seed_value(api_key, name, kind.elem, world, style, parent)]
    if w == "struct":
        return seed_tree(api_key, kind.entity, world, style)
    if w == "records":
        return world.batch
    if w == "bytes":
        return {"metadata": world.subscription, "assignment": world.assignment}.get(name, b"")
    if w == "string":
        return _string(api_key, name, world, parent)
    if w == "uuid":
        return {20: world.doomed_id}.get(api_key, world.topic_id) if fill else None
    if w == "bool":
        return False
    if w == "float64":
        return 0.0
    return _int(api_key, name, world)


def seeds(api_key: int, version: int, world: World) -> list[tuple[str, dict]]:
    cls = request_class(api_key, version)
    out = [(style, seed_tree(api_key, cls, world, style)) for style in (FILLED, NULLS, NULL_LEAVES)]
    if api_key == 68:
        # A steady-state heartbeat of the live member as well as a join.
        steady = seed_tree(api_key, cls, world, FILLED)
        steady.update(member_epoch=world.consumer_epoch, rebalance_timeout=-1, subscribed_topic_names=None,
                      topic_partitions=[dict(tp) for tp in world.consumer_owned])
        out.append(("steady", steady))
    if api_key == 0:
        out.append(("acks0", {**seed_tree(api_key, cls, world, FILLED), "acks": 0}))
    return out


# --- mutations ---------------------------------------------------------------------------

STRINGS = ("", "fz", "fuzz-m1", "fuzz-m2", "__consumer_offsets", "x" * 250, "a.b", "a_b", "é", "..", "-", "fg", "range", "fc",
           "fuzz-member-0000000000000000000000", "consumer", "(oops", ".*")


def _slots(tree: dict, cls, path=()):
    """Every (container, key, kind, path) of the tree: each field and each array element."""
    for spec in schema(cls):
        if spec.name not in tree:
            continue
        yield from _slots_of(tree, spec.name, spec.kind, path + (spec.name,))


def _slots_of(container, key, kind: Kind, path):
    yield container, key, kind, path
    value = container[key]
    if isinstance(value, Length):
        return
    if kind.wire == "array" and isinstance(value, list):
        for i in range(len(value)):
            yield from _slots_of(value, i, kind.elem, path + (i,))
    elif kind.wire == "struct" and isinstance(value, dict):
        yield from _slots(value, kind.entity, path)


def _int_value(rng: random.Random, kind: Kind) -> int:
    fmt = INT_FORMATS[kind.wire]
    bits = struct.calcsize(fmt) * 8
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return rng.choice([0, -1, -2, 1, 2, 3, 100, lo, hi, hi - 1, lo + 1, rng.randint(lo, hi), rng.randint(-5, 5)])


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


def mutate_tree(rng: random.Random, cls, tree: dict, names: tuple[str, ...] = ()) -> tuple[dict, str] | None:
    """One entity-level change at a random field; (new tree, description) or None if nothing
    fits. `names` are strings worth trying besides STRINGS: live group and member ids."""
    tree = _copy(tree)
    slots = list(_slots(tree, cls))
    if not slots:
        return None
    container, key, kind, path = rng.choice(slots)
    where = ".".join(map(str, path))
    w = kind.wire
    if isinstance(container[key], Length):  # mutated before: mutate what it holds
        container[key] = container[key].value
    op = rng.choice(["null", "length", "value", "value", "value"])
    if op == "null" and w in ("array", *STRINGISH) or (op == "null" and w == "struct" and kind.nullable):
        container[key] = None
        return tree, f"null {where} ({'nullable' if kind.nullable else 'NOT nullable'} {w})"
    if op in ("null", "length") and (w == "array" or w in STRINGISH):
        current = container[key]
        size = 0 if current is None else len(current if not isinstance(current, str) else current.encode())
        n = rng.choice([-2, -1, size + 1, size + 1000, 2**31 - 1, 0x7FFF, max(size - 1, 0)])
        if kind.flexible and n < -1:
            n = 2**31 - 2
        container[key] = Length(n, current)
        return tree, f"length {where} = {n} (holds {size})"
    if w == "array":
        current = container[key] or []
        choice = rng.choice(["empty", "dup", "many"])
        if choice == "empty":
            container[key] = []
        elif choice == "dup" and current:
            container[key] = current + [_copy(current[0])]
        elif current:
            container[key] = [_copy(current[0]) for _ in range(rng.choice([3, 50]))]
        return tree, f"array {where} {choice}"
    if w == "string":
        container[key] = rng.choice(STRINGS + names if names and rng.random() < 0.5 else STRINGS)
    elif w in ("bytes", "records"):
        container[key] = rng.choice([b"", b"\x00" * 7, bytes(rng.randrange(256) for _ in range(rng.randint(1, 80)))])
    elif w == "uuid":
        container[key] = rng.choice([None, uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(int=1)])
    elif w == "bool":
        container[key] = rng.choice([True, False, True, False, 2])  # Kafka reads any non-zero byte as true
    elif w == "struct":
        return None
    elif w == "float64":
        container[key] = rng.choice([float("nan"), -1.0, 1e308])
    else:
        container[key] = _int_value(rng, kind)
    return tree, f"value {where} = {container[key]!r:.60}"


def mutate_bytes(rng: random.Random, frame: bytes) -> tuple[bytes, str]:
    """A byte-level change of the body (the first 8 bytes, api key/version/correlation id, stay)."""
    data = bytearray(frame)
    body = max(len(data) - 8, 1)
    op = rng.choice(["flip", "flip", "cut", "insert", "delete"])
    if op == "flip":
        n = rng.randint(1, 4)
        for _ in range(n):
            data[8 + rng.randrange(body) if len(data) > 8 else rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data), f"flip {n} bytes"
    if op == "cut":
        at = rng.randrange(len(data))
        return bytes(data[:at]), f"cut at {at}/{len(data)}"
    at = 8 + rng.randrange(body)
    if op == "insert":
        extra = bytes(rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)]) for _ in range(rng.randint(1, 4)))
        return bytes(data[:at] + extra + data[at:]), f"insert {extra.hex()} at {at}"
    n = rng.randint(1, 4)
    return bytes(data[:at] + data[at + n:]), f"delete {n} at {at}"
