"""Sans-I/O client side of one Kafka connection: requests out, responses in.

Theory of operation (after h11, like `protocol.framing` on the broker side): the object
owns a correlation-id counter, the table of requests awaiting an answer, and a receive
buffer. `request` encodes a request (kio schema of the chosen version, header v1 or v2)
and returns the frame to write; `receive_data` consumes bytes and returns every
response completed by them, parsed with the schema of the request it answers. Kafka
answers in order on a connection, so a response whose correlation id is not the oldest
outstanding one is a protocol violation. Nothing here touches a socket or a clock.
"""

from __future__ import annotations

import io
import itertools
from collections import deque
from dataclasses import is_dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.protocol.framing import NEED_DATA, FrameReader, RemoteProtocolError, frame
from odradek.protocol.messages import build, request_class, response_class

from .errors import KafkaConnectionError, KafkaError

_readers: dict[type, Any] = {}
_writers: dict[type, Any] = {}


def _reader(cls):
    r = _readers.get(cls)
    if r is None:
        r = _readers[cls] = entity_reader(cls)
    return r


def _writer(cls):
    w = _writers.get(cls)
    if w is None:
        w = _writers[cls] = entity_writer(cls)
    return w


class WireConnection:
    """Encodes requests and decodes in-order responses for one broker connection."""

    def __init__(self, client_id: str | None = "odradek", max_frame_size: int = 1 << 30) -> None:
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: deque[tuple[int, int, int]] = deque()  # (correlation id, api key, version)
        self._frames = FrameReader(max_frame_size)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def request(self, api_key: int, version: int, body: Any, *, expect_response: bool = True) -> tuple[int, bytes]:
        """(correlation id, frame). `body` is a kio entity or a dict for `build`."""
        cls = request_class(api_key, version)
        if not is_dataclass(body):
            body = build(cls, body)
        correlation_id = next(self._ids) & 0x7FFFFFFF
        header_cls = cls.__header_schema__
        kwargs = {"request_api_key": api_key, "request_api_version": version, "correlation_id": correlation_id}
        if "client_id" in header_cls.__dataclass_fields__:
            kwargs["client_id"] = self.client_id
        out = io.BytesIO()
        _writer(header_cls)(out, header_cls(**kwargs))
        _writer(cls)(out, body)
        if expect_response:  # Produce with acks=0 is never answered
            self._pending.append((correlation_id, api_key, version))
        return correlation_id, frame(out.getvalue())

    def receive_data(self, data: bytes) -> list[tuple[int, Any]]:
        """Feed bytes (b"" = peer closed); return completed (correlation id, response) pairs.

        A response whose error code this client cannot name comes back as a KafkaError
        in place of the response.

        Raises KafkaConnectionError on a malformed or unexpected response, or when the
        peer closed with requests outstanding; the connection is then unusable.
        """
        self._frames.receive_data(data)
        done = []
        while True:
            try:
                payload = self._frames.next_frame()
            except RemoteProtocolError as exc:
                raise KafkaConnectionError(f"bad response framing: {exc}") from exc
            if payload is NEED_DATA:
                return done
            if not isinstance(payload, bytes):  # CLOSED
                if self._pending:
                    raise KafkaConnectionError(f"connection closed with {len(self._pending)} request(s) in flight")
                return done
            if not self._pending:
                raise KafkaConnectionError("response received with no request outstanding")
            correlation_id, api_key, version = self._pending.popleft()
            cls = response_class(api_key, version)
            try:
                header, offset = _reader(cls.__header_schema__)(payload, 0)
                if header.correlation_id != correlation_id:
                    raise ValueError(f"correlation id {header.correlation_id}, expected {correlation_id}")
                body, _ = _reader(cls)(payload, offset)
            except ValueError as exc:
                if "is not a valid ErrorCode" not in str(exc):
                    raise KafkaConnectionError(f"malformed {cls.__name__} v{version}: {exc}") from exc
                # A code from a newer broker that kio cannot name. The frame was whole, so
                # the connection is fine; this one request fails with UNKNOWN_SERVER_ERROR,
                # as Java's Errors.forCode maps unknown codes.
                done.append((correlation_id, KafkaError(ErrorCode.unknown_server_error,
                                                        f"{cls.__name__} v{version}: {exc}", retriable=False)))
                continue
            except Exception as exc:  # kio raises assorted errors on truncated/garbled input
                raise KafkaConnectionError(f"malformed {cls.__name__} v{version}: {exc}") from exc
            done.append((correlation_id, body))
