"""The connection-closing signal; Kafka error codes live in protocol/errors.py."""

from __future__ import annotations


class CloseConnection(Exception):
    """The request cannot be answered; Kafka closes the connection in this case.

    `response`, when given, is sent first, `delay_s` after the request: Kafka answers a
    failed authentication after connection.failed.authentication.delay.ms, then closes."""

    def __init__(self, reason: str = "", response: bytes | None = None, delay_s: float = 0.0) -> None:
        super().__init__(reason)
        self.response = response
        self.delay_s = delay_s
