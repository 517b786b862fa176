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

from .shape import malformed_arrays

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
    session: Any = None  # the connection's listener and principal (security/authentication.Session)
    result: Any = None  # the handler's response body, kept for metrics (observability/stats.py)
    # When handling started, on the metrics clock (None with metrics off): handlers pass it to
    # the coordinator runtime, whose event queue time runs from here (KIP-848 metrics).
    started: float | None = None

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
