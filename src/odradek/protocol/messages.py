"""Kafka request/response payloads through kio's generated schemas.

Theory of operation: a frame starts with api key and api version; from those we load
the kio request class of exactly that version, parse its header and body with kio's
native reader, and hand the handler a `Request`. Handlers answer with plain Python
values (dicts and lists keyed by the field names of Kafka's JSON message
definitions); `build` maps such a value onto the kio response class of the request's
version, dropping fields that version does not have and filling the defaults of the
ones it has. One handler therefore serves every version without a hand-written
per-version codec (DESIGN principle 5).

Parse failures are the client's fault: `RequestParseError` -> close the connection.
Before kio reads a body, `malformed_arrays` checks every array's length prefix and
nullability, which kio's native reader does not (see the section below).
An api key or version we do not serve raises `UnsupportedVersionError`; the caller
answers ApiVersions with the KIP-511 fallback and closes otherwise, as Kafka does.
"""

from __future__ import annotations

import datetime
import functools
import struct
import types
import typing
import uuid
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta, i64Timedelta

_API_HEADER = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class RequestParseError(Exception):
    """The frame is not a well-formed request; close the connection."""


class UnsupportedVersionError(Exception):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # a kio request entity
    size: int  # frame size in bytes
    client_host: str = ""  # the peer's address, as Kafka reports it ("/127.0.0.1")

    def field(self, name: str, default: Any = None) -> Any:
        """A request field, or `default` when this version does not carry it."""
        return getattr(self.body, name, default)


@functools.cache
def request_class(api_key: int, version: int):
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int):
    return load_response_schema(api_key, version)


@functools.cache
def _reader(cls):
    return entity_reader(cls)


@functools.cache
def _writer(cls):
    return entity_writer(cls)


def peek_header(data: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, or RequestParseError."""
    if len(data) < _API_HEADER.size:
        raise RequestParseError(f"frame of {len(data)} bytes is shorter than a request header")
    return _API_HEADER.unpack_from(data, 0)


def parse_request(data: bytes, supported: dict[int, tuple[int, int]]) -> Request:
    api_key, api_version, correlation_id = peek_header(data)
    span = supported.get(api_key)
    if span is None or not span[0] <= api_version <= span[1]:
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    cls = request_class(api_key, api_version)
    try:
        header, offset = _reader(cls.__header_schema__)(data, 0)  # no arrays in a request header
        problem = malformed_arrays(cls, data, offset)
        if problem is None:
            body, _size = _reader(cls)(data, offset)
    except Exception as exc:  # kio raises ValueError/UnicodeError/...: all the client's fault
        raise RequestParseError(f"cannot parse {cls.__name__}: {exc}") from exc
    if problem is not None:
        raise RequestParseError(problem)
    # Trailing bytes are tolerated, as Kafka's own request parser does: librdkafka 2.16
    # sends Metadata v13 with 3 bytes past the end of the v13 schema (seen on the wire).
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(data))


# --- array lengths and nulls, checked before kio allocates ------------------------------
#
# kio's native reader reserves room for an array from its length prefix before reading
# a single element (`Vec::with_capacity(n)` in `read_field`, kio 0.6.5 rust/src/schema.rs),
# so a 30-byte frame claiming 2**32 elements makes it allocate tens of gigabytes, and a
# failed allocation aborts the whole process (seen in the fuzz tests: "memory allocation
# of 193256751088 bytes failed"). It also reads a null (length -1) as None where the
# schema forbids one, at any depth. Kafka's generated readers refuse both ("non-nullable
# field X was serialized as null", "Tried to allocate a collection of size N, but there
# are only M bytes remaining.", MessageDataGenerator.java), so the request fails to parse
# and the connection closes. `_skim` walks the body the way kio will read it, looking
# only at length prefixes, and reports those two errors first. Only arrays need it: kio
# refuses null strings and bytes where the schema does, a non-nullable struct has no null
# on the wire, and kio checks a string or bytes length against the buffer before copying.

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


def encode_response(request: Request, payload: Any) -> bytes:
    """Size-prefixed response frame. `payload` is a kio entity or a plain dict."""
    cls = response_class(request.api_key, request.api_version)
    if not is_dataclass(payload):
        payload = build(cls, payload)
    return encode_entity(cls.__header_schema__, request.correlation_id, payload)


def encode_entity(header_cls, correlation_id: int, payload: Any) -> bytes:
    out = _Parts()
    _writer(header_cls)(out, header_cls(correlation_id=correlation_id))
    _writer(type(payload))(out, payload)
    return out.frame()


class _Parts:
    """A write target for kio that keeps large writes (record batches) by reference and
    joins everything once behind the size prefix. io.BytesIO copied a 4 MB Fetch response
    two or three times as it grew; this copies it once."""

    __slots__ = ("parts", "size", "small")
    _LARGE = 1 << 14

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray] = []
        self.small = bytearray()
        self.size = 0

    def write(self, b) -> int:
        n = len(b)
        self.size += n
        if n >= self._LARGE:
            if self.small:
                self.parts.append(self.small)
                self.small = bytearray()
            self.parts.append(b)
        else:
            self.small += b
        return n

    def frame(self) -> bytes:
        return b"".join((_SIZE.pack(self.size), *self.parts, self.small))


# --- building kio entities from plain values -------------------------------------------


def _convert_leaf(tp: Any):
    """A converter for a non-entity, non-union field type, or None when the value passes through."""
    if tp is ErrorCode:
        return lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))
    if isinstance(tp, type) and issubclass(tp, (i32Timedelta, i64Timedelta)) or tp is datetime.timedelta:
        return lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
    if isinstance(tp, type) and issubclass(tp, datetime.datetime):
        # Kafka timestamps are ms since the epoch, -1 meaning "none" (kio: a nullable datetime).
        return lambda v: v if isinstance(v, datetime.datetime) or v is None else (
            None if v < 0 else datetime.datetime.fromtimestamp(v / 1000, tz=datetime.timezone.utc)
        )
    if tp is uuid.UUID:
        return lambda v: v if isinstance(v, uuid.UUID) else uuid.UUID(v)
    return None


def _field_converter(tp: Any):
    origin = typing.get_origin(tp)
    if origin is tuple:
        (elem, *_rest) = typing.get_args(tp)
        inner = _field_converter(elem)
        if inner is None:
            return tuple
        return lambda v: tuple(inner(x) for x in v)
    if is_dataclass(tp):
        return lambda v: v if is_dataclass(v) else build(tp, v)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            inner = _field_converter(args[0])
            if inner is not None:
                return lambda v: None if v is None else inner(v)
        return None
    return _convert_leaf(tp)


@functools.cache
def _plan(cls) -> tuple[tuple[str, Any, bool], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        plan.append((f.name, _field_converter(hints[f.name]), has_default))
    return tuple(plan)


def build(cls, value: dict[str, Any]):
    """Construct kio entity `cls` from a dict, ignoring keys this version lacks."""
    kwargs = {}
    for name, convert, has_default in _plan(cls):
        if name in value:
            v = value[name]
            kwargs[name] = convert(v) if convert is not None and v is not None else v
        elif not has_default:
            raise KeyError(f"{cls.__qualname__} v{cls.__version__} needs field {name!r}")
    return cls(**kwargs)
