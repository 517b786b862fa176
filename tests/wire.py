"""Test helpers that speak raw Kafka: build request frames with kio, read response frames."""

from __future__ import annotations

import io
import socket
import struct

from kio.serial import entity_reader, entity_writer

from odradek.protocol.framing import frame
from odradek.protocol.messages import build, request_class, response_class


def request_frame(api_key: int, version: int, body: dict, correlation_id: int = 1, client_id: str = "test") -> bytes:
    cls = request_class(api_key, version)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    header_kwargs = dict(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id)
    if "client_id" in header_cls.__dataclass_fields__:
        header_kwargs["client_id"] = client_id
    entity_writer(header_cls)(out, header_cls(**header_kwargs))
    entity_writer(cls)(out, build(cls, body))
    return frame(out.getvalue())


def parse_response(api_key: int, version: int, data: bytes):
    """Parse a size-prefixed response frame; returns (correlation_id, entity)."""
    (size,) = struct.unpack_from(">i", data, 0)
    assert size == len(data) - 4, (size, len(data))
    cls = response_class(api_key, version)
    header, offset = entity_reader(cls.__header_schema__)(data, 4)
    body, _ = entity_reader(cls)(data, 4 + offset)
    return header.correlation_id, body


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        head = self._exact(4)
        (size,) = struct.unpack(">i", head)
        return head + self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return buf

    def call(self, api_key: int, version: int, body: dict, correlation_id: int = 1):
        self.send(request_frame(api_key, version, body, correlation_id))
        cid, resp = parse_response(api_key, version, self.recv_frame())
        assert cid == correlation_id
        return resp

    def is_closed(self, wait: float = 5.0) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()
