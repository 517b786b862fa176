"""The group member interface: what a driver may ask of a sans-I/O group member core.

Theory of operation: two cores speak the consumer group protocols,
`membership.ConsumerGroupMember` (KIP-848's ConsumerGroupHeartbeat) and
`classic.ClassicGroupMember` (the 0.9 design's JoinGroup/SyncGroup/Heartbeat). Their drivers
(`consumer.AsyncConsumer` under asyncio, `sim.member.SimMember` under simulated time) and the
shared reconciliation (`reconciler.Reconciler`) use them through one surface, named here as
`typing.Protocol`s so that the seam is a checked type rather than duck typing:

  * requests out, answers in: `next_request(now)`, `on_response` / `on_failure`,
    `next_deadline()`; `in_flight`, `next_heartbeat_ms` (a driver that needs a fresh epoch
    for a commit asks for a heartbeat now) and `epoch_changes` (how many answers arrived);
  * the application's side of reconciliation (KIP-848 "Assignment Reconciliation"; the 0.9
    design's "Consumer rebalance"): `to_revoke()` / `revoked()`, `to_assign()` /
    `assigned()`, `fenced` / `lost()`, and `owned`;
  * the identity an offset commit carries (`commit_identity()`: member epoch or generation);
  * subscription and leaving, `active`, `state`, and `error` (which a driver also sets when a
    request fails for good).

Two capabilities only the classic core has, each its own protocol so a driver tests for the
capability rather than for a class: `LosesPartitions` (`to_lose()`: partitions owned across
a generation the member missed, dropped without a commit) and `AssigningMember` (the leader
assigns on the client, with partition counts the driver gives it).

Time is the caller's: every method that needs it takes `now` in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from .errors import KafkaError


@runtime_checkable
class GroupMember(Protocol):
    """The surface `ConsumerGroupMember` and `ClassicGroupMember` both offer their drivers.

    Partitions are the core's keys: (topic id, partition) for KIP-848 (the protocol names
    topics by id), `TopicPartition` for the classic protocol (by name)."""

    # Set by drivers too: a request that failed for good (e.g. no common API version) is
    # the member's error; a commit that needs a newer epoch asks for a heartbeat now.
    error: KafkaError | None
    next_heartbeat_ms: float

    @property
    def member_id(self) -> str: ...

    @property
    def state(self) -> Enum: ...

    @property
    def owned(self) -> frozenset: ...

    @property
    def in_flight(self) -> Any: ...  # falsy when no request awaits an answer

    @property
    def epoch_changes(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def active(self) -> bool: ...

    def subscribe(self, topics: list[str] | None = None, regex: str | None = None, *, now: float = 0) -> None: ...

    def leave(self, *, now: float = 0) -> None: ...

    def to_revoke(self) -> frozenset: ...

    def to_assign(self) -> frozenset: ...

    def revoked(self, partitions: Iterable, *, now: float = 0) -> None: ...

    def assigned(self, partitions: Iterable, *, now: float = 0) -> None: ...

    def lost(self, *, now: float = 0) -> None: ...

    def next_request(self, now: float) -> tuple[int, dict] | None: ...

    def next_deadline(self) -> float | None: ...

    def on_response(self, api: int, resp: Any, now: float) -> None: ...

    def on_failure(self, api: int, error: KafkaError, now: float) -> None: ...

    def commit_identity(self) -> tuple[int, str, str | None]: ...


@runtime_checkable
class LosesPartitions(Protocol):
    """A member that can report partitions lost without being fenced (the classic core: owned
    across a missed generation); the driver drops them uncommitted, then calls `lost()`."""

    def to_lose(self) -> frozenset: ...


@runtime_checkable
class AssigningMember(Protocol):
    """A member whose group leader assigns on the client (the classic protocol): the driver
    gives it partition counts when it must assign and, for the leader, as metadata changes
    (Java's ConsumerCoordinator metadata snapshot)."""

    @property
    def topics(self) -> list[str] | None: ...

    @property
    def needs_metadata(self) -> list[str] | None: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def group_topics(self) -> frozenset[str]: ...

    def set_metadata(self, partitions: dict[str, int], now: float = 0) -> None: ...
