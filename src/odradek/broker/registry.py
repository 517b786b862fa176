"""The table of APIs the broker serves: api key -> (version range, handler).

A handler is `fn(broker, request) -> response | None | awaitable`, where the response is
a plain dict (see protocol.messages.build) or a kio entity, and None means "send no
response" (Produce with acks=0). The version range is what ApiVersions advertises, so
advertising and serving can never drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    fn: Callable[..., Any]


APIS: dict[int, Api] = {}


def api(key: int, name: str, min_version: int, max_version: int):
    def register(fn):
        if key in APIS:
            raise RuntimeError(f"api key {key} registered twice")
        APIS[key] = Api(key, name, min_version, max_version, fn)
        return fn

    return register


def supported_versions() -> dict[int, tuple[int, int]]:
    from . import handlers  # noqa: F401  (importing registers every handler)

    return {k: (a.min_version, a.max_version) for k, a in sorted(APIS.items())}
