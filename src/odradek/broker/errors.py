"""The connection-closing signal; Kafka error codes live in protocol/errors.py."""

from __future__ import annotations


class CloseConnection(Exception):
    """The request cannot be answered; Kafka closes the connection in this case."""
