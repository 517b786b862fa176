"""Array lengths and nulls of a kio-encoded message, checked before kio reads it.

kio's native reader reserves room for an array from its length prefix before reading a
single element (`Vec::with_capacity(n)` in `read_field`, kio 0.6.5 rust/src/schema.rs),
so a 30-byte frame claiming 2**32 elements makes it allocate tens of gigabytes, and a
failed allocation aborts the whole process (seen in the fuzz tests: "memory allocation
of 193256751088 bytes failed"). It also reads a null (length -1) as None where the
schema forbids one, at any depth. Kafka's generated readers refuse both ("non-nullable
field X was serialized as null", "Tried to allocate a collection of size N, but there
are only M bytes remaining.", MessageDataGenerator.java), so the request fails to parse
and the connection closes. `_skim` walks the body the way kio will read it, looking
only at length prefixes, and reports those two errors first. Only arrays need it: kio
refuses null strings and bytes where the schema does, a non-nullable struct has no null
on the wire, and kio checks a string or bytes length against the buffer before copying.
"""

from __future__ import annotations

import functools
import struct
import types
import typing
from dataclasses import fields, is_dataclass

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FIXED, _LEGACY_STRING, _LEGACY_BYTES, _COMPACT_BYTES, _ARRAY, _STRUCT = range(6)
_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}


class _Malformed(Exception):
    def __init__(self, name: str | None, message: str) -> None:
        super().__init__(message)
        self.path = [name] if name else []


def _leaf_op(kafka_type: str, flexible: bool) -> tuple:
    if kafka_type in _FIXED_SIZES:
        return (_FIXED, _FIXED_SIZES[kafka_type])
    if flexible:
        return (_COMPACT_BYTES,)  # compact strings and bytes share one encoding
    return (_LEGACY_STRING,) if kafka_type == "string" else (_LEGACY_BYTES,)


def _field_op(f, hint, flexible: bool) -> tuple:
    """How one field of a kio entity lies on the wire, as kio reads it."""
    nullable = False
    if typing.get_origin(hint) is typing.Union or typing.get_origin(hint) is types.UnionType:
        nullable = True
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        (elem, *_rest) = typing.get_args(hint)
        elem_op = (_STRUCT, None, False, _skim_plan(elem)) if is_dataclass(elem) else \
            _leaf_op(f.metadata["kafka_type"], flexible)
        return (_ARRAY, f.name, nullable, flexible, elem_op)
    if is_dataclass(hint):
        return (_STRUCT, f.name, nullable, _skim_plan(hint))  # KIP-893: nullable structs carry a marker
    return _leaf_op(f.metadata["kafka_type"], flexible)


@functools.cache
def _skim_plan(cls) -> tuple[tuple, dict[int, tuple], bool, int | None]:
    """(ops of the untagged fields in order, tag -> op, flexible, size of the untagged
    fields when all are fixed-size) for a kio entity class. Runs of fixed-size fields
    merge into one op, so the common partition structs cost one step each."""
    hints = typing.get_type_hints(cls)
    ops, tagged = [], {}
    for f in fields(cls):
        op = _field_op(f, hints[f.name], cls.__flexible__)
        if "tag" in f.metadata:
            tagged[f.metadata["tag"]] = op
        elif op[0] == _FIXED and ops and ops[-1][0] == _FIXED:
            ops[-1] = (_FIXED, ops[-1][1] + op[1])
        else:
            ops.append(op)
    fixed = sum(op[1] for op in ops) if all(op[0] == _FIXED for op in ops) else None
    return tuple(ops), tagged, cls.__flexible__, fixed


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(5):  # Kafka's ByteUtils.readUnsignedVarint: at most 5 bytes
        b = data[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise _Malformed(None, "varint is too long")


def _skim(plan, data: bytes, pos: int) -> int:
    """The offset after the entity at `pos`; raises _Malformed, struct.error or IndexError."""
    ops, tagged, flexible, _fixed = plan
    for op in ops:
        # The two commonest ops inline: this runs for every partition of a request.
        if op[0] == _FIXED:
            pos += op[1]
        elif op[0] == _COMPACT_BYTES and data[pos] < 0x80:
            pos += data[pos] or 1  # one length byte, then length - 1 bytes of data
        else:
            pos = _skim_op(op, data, pos)
    if not flexible:
        return pos
    return pos + 1 if data[pos] == 0 else _skim_tags(tagged, data, pos)


def _skim_tags(tagged: dict[int, tuple], data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        op = tagged.get(tag)
        pos = pos + size if op is None else _skim_op(op, data, pos)  # kio itself refuses unknown tags
    return pos


def _skim_op(op: tuple, data: bytes, pos: int) -> int:
    kind = op[0]
    if kind == _FIXED:
        return pos + op[1]
    if kind == _COMPACT_BYTES:
        n, pos = _uvarint(data, pos)
        return pos + n - 1 if n else pos
    if kind == _LEGACY_STRING:
        return pos + 2 + max(_I16.unpack_from(data, pos)[0], 0)
    if kind == _LEGACY_BYTES:
        return pos + 4 + max(_I32.unpack_from(data, pos)[0], 0)
    if kind == _STRUCT:
        _, name, nullable, plan = op
        if nullable:
            pos += 1
            if _I8.unpack_from(data, pos - 1)[0] == -1:
                return pos
        try:
            return _skim(plan, data, pos)
        except _Malformed as exc:
            if name:
                exc.path.insert(0, name)
            raise
    _, name, nullable, flexible, elem = op
    if flexible:
        n, pos = _uvarint(data, pos)
        n -= 1
    else:
        n = _I32.unpack_from(data, pos)[0]
        pos += 4
    if n < 0:
        if n < -1:
            raise _Malformed(name, f"negative array length {n}")
        if not nullable:
            raise _Malformed(name, "non-nullable field was serialized as null")
        return pos
    if n > len(data) - pos:
        raise _Malformed(name, f"tried to allocate a collection of size {n}, "
                               f"but there are only {len(data) - pos} bytes remaining")
    if elem[0] == _FIXED:
        return pos + n * elem[1]
    try:
        if elem[0] == _STRUCT and elem[3][3] is not None:  # fixed-size structs, perhaps with tags
            _ops, tagged, flexible, size = elem[3]
            if not flexible:
                return pos + n * size
            for _ in range(n):
                pos += size
                if data[pos]:
                    pos = _skim_tags(tagged, data, pos)
                else:
                    pos += 1  # no tagged fields, the usual case
            return pos
        for _ in range(n):
            pos = _skim_op(elem, data, pos)
    except _Malformed as exc:
        exc.path.insert(0, name)
        raise
    return pos


def malformed_arrays(cls, data: bytes, offset: int) -> str | None:
    """What is wrong with the arrays of the kio entity `cls` encoded at `offset` of `data`
    (a null where the schema forbids one, a length the rest of `data` cannot hold), or
    None. Any kio-parsed message from a peer needs this first: a response too."""
    try:
        _skim(_skim_plan(cls), data, offset)
    except _Malformed as exc:
        return f"{'.'.join([cls.__name__, *exc.path])}: {exc}"
    except (struct.error, IndexError):
        pass  # cut short before any array that could hurt: kio reports it
    return None
