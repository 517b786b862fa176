"""How group handlers wait for the coordinator: deferred answers, and what handlers see of the broker.

Theory of operation: the runtime answers an operation with a `Deferred` that settles when
the operation's records are committed (coordinator/deferred.py). `answer` turns it into
the API's response: at once when it has settled (a single broker commits on write, and
the simulator calls handlers synchronously), or as a future the connection awaits (a
cluster completes at the high watermark). A failed operation gets the error code Kafka's
GroupCoordinatorService gives for its cause, in the API's own error shape (`on_error`):
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a shard not served here, never a
closed connection.

`CoordinatorHost` names what the group handlers use of the broker. The broker is one
implementation; the simulator's `SimCoordinator` is the other, on purpose: it runs these
same handlers against the real runtime with a log in memory.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..coordinator.deferred import Deferred
from ..coordinator.errors import error_code_for
from ..coordinator.runtime import CoordinatorRuntime


class TopicView(Protocol):
    name: str
    topic_id: uuid.UUID
    partitions: int


class TopicsView(Protocol):
    def get(self, name: str) -> TopicView | None: ...

    def get_by_id(self, topic_id: uuid.UUID) -> TopicView | None: ...


class GroupCoordinatorView(Protocol):
    runtime: CoordinatorRuntime


@runtime_checkable
class CoordinatorHost(Protocol):
    """The broker as the group handlers see it (consumer_group, classic_group, offsets, groups)."""

    coordinator: GroupCoordinatorView
    metadata: TopicsView

    def clock(self) -> int: ...

    def access(self, request) -> Any:
        """What the request's principal may do (security/acl.Access; OPEN: everything)."""
        ...


def answer(deferred: Deferred, on_error: Callable[[Any], dict], shape: Callable[[Any], Any] = lambda r: r):
    """The response now if `deferred` has settled, else a future of it."""
    if deferred.done:
        return _settle(deferred, on_error, shape)
    future = asyncio.get_running_loop().create_future()

    def settled(d: Deferred) -> None:
        if not future.done():
            future.set_result(_settle(d, on_error, shape))

    deferred.add_done_callback(settled)
    return future


def answer_all(deferreds: list[Deferred], build: Callable[[], dict]):
    """`build()` once every one of `deferreds` has settled: now, or as a future."""
    waiting = [d for d in deferreds if not d.done]
    if not waiting:
        return build()
    future = asyncio.get_running_loop().create_future()
    left = [len(waiting)]

    def settled(_d: Deferred) -> None:
        left[0] -= 1
        if left[0] == 0 and not future.done():
            future.set_result(build())

    for d in waiting:
        d.add_done_callback(settled)
    return future


def _settle(deferred: Deferred, on_error: Callable[[Any], dict], shape: Callable[[Any], Any]):
    if deferred.error is not None:
        return on_error(error_code_for(deferred.error))
    return shape(deferred.response)
