"""The exception coordinator handlers raise; the codes are protocol/errors.py's.

A `CoordinatorError` is the client's fault (DESIGN principle 8): handlers catch it and
answer with its code and message; anything else escaping a handler is our bug.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class CoordinatorError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
