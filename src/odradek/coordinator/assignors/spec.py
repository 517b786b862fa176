"""What a server-side assignor is given and what it returns (KIP-848 "Server Side Mode").

An assignor is a pure function ``assign(spec: AssignmentSpec) -> Assignment``. The spec
is a snapshot the coordinator builds: the members (subscriptions, racks, and each
member's *current target* assignment, which the assignors use to stay sticky) and the
topics that exist. Anything a member names that is not in ``spec.topics`` (a deleted
topic, a partition past the partition count, a topic it no longer subscribes to) is
ignored. The result has an entry for every member, possibly empty; a topic appears in
a member's entry only when the member gets at least one of its partitions.

Besides the types, this module holds the two steps both assignors start with:
`check` (reject a malformed spec with `AssignorError`) and `group_members` (sort the
members and group them by *effective* subscription: the subscribed ids that exist).

Cost note: grouping looks subscription sets up in a dict, so members that share one
frozenset object (the coordinator interns them) cost O(1) each; equal but distinct
sets are compared element by element, which is correct but O(topics) per member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

Assignment = dict[str, dict[UUID, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[UUID]
    # The member's current target assignment (for stickiness); entries naming topics or
    # partitions that no longer exist, or topics it no longer subscribes to, are ignored.
    current: Mapping[UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    topic_id: UUID
    name: str
    partitions: int
    # Racks of the replicas of each partition, or None when unknown.
    partition_racks: tuple[frozenset[str], ...] | None = None


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    members: Mapping[str, MemberSpec]
    topics: Mapping[UUID, TopicSpec]  # only topics that exist


class AssignorError(Exception):
    """The spec is inconsistent (the coordinator built it wrong); no assignment is possible."""


def check(spec: AssignmentSpec) -> None:
    """Reject specs whose keys disagree with their values or whose topics are malformed."""
    for tid, t in spec.topics.items():
        if t.topic_id is not tid and t.topic_id != tid:  # UUID.__eq__ is Python code
            raise AssignorError(f"topic {t.name!r} is filed under id {tid}, but its id is {t.topic_id}")
        if t.partitions < 0:
            raise AssignorError(f"topic {t.name!r} has {t.partitions} partitions")
        if t.partition_racks is not None and len(t.partition_racks) != t.partitions:
            raise AssignorError(
                f"topic {t.name!r} has {t.partitions} partitions but racks for {len(t.partition_racks)}"
            )
    for mid, m in spec.members.items():
        if m.member_id != mid:
            raise AssignorError(f"member {m.member_id!r} is filed under id {mid!r}")


def group_members(spec: AssignmentSpec) -> tuple[list[str], list[int], list[frozenset[UUID]]]:
    """Sorted member ids, each member's class index (-1: subscribes to nothing that exists)
    and the classes: distinct non-empty effective subscriptions, in order of first member.

    Sorting is what makes the assignors independent of the members mapping's order.
    """
    members = spec.members
    order = sorted(members)
    # Set-vs-set operations use the element hashes stored in the sets; looking UUIDs up
    # one by one would call UUID.__hash__ (Python code) per element.
    existing = frozenset(spec.topics)
    by_raw: dict[frozenset[UUID], int] = {}
    by_effective: dict[frozenset[UUID], int] = {}
    classes: list[frozenset[UUID]] = []
    member_class: list[int] = []
    for mid in order:
        raw = members[mid].subscribed_topic_ids
        if type(raw) is not frozenset:  # a set or list would not be hashable / comparable
            raw = frozenset(raw)
        c = by_raw.get(raw)
        if c is None:
            eff = raw if raw <= existing else raw & existing
            if not eff:
                c = -1
            else:
                c = by_effective.get(eff)
                if c is None:
                    c = by_effective[eff] = len(classes)
                    classes.append(eff)
            by_raw[raw] = c
        member_class.append(c)
    return order, member_class, classes


def topic_order(topic_ids) -> list[UUID]:
    """Topic ids in a fixed order (by their 128-bit value) whatever order they came in."""
    return sorted(topic_ids, key=_uuid_int)


def _uuid_int(u: UUID) -> int:
    return u.int
