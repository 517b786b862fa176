"""Subscriptions and target assignments: from members and metadata to records.

Theory of operation (KIP-848 "Group Epoch", "Assignment Epoch"): the group's assignment
input is its members' subscriptions resolved against the cluster's topics: topic names
as they are in the metadata image, and regexes as the group last resolved them (RE2,
full match, internal topics excluded: KIP-848 "Regex Based Subscription"). Resolving a
regex is not done here: it runs later, off the request path, and its result arrives as
ConsumerGroupRegularExpression records (regex.py, Kafka 4.0's
GroupMetadataManager.refreshRegularExpressions); until then a regex adds no topic.
When the input changes the group epoch is bumped, and whenever the group epoch is ahead
of the target assignment epoch a new target is computed by the server-side assignor and
written as records: only members whose target changed get a record, then the target
epoch (KIP-848 "Target Assignment").
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping

import re2

from .. import records as R
from ..assignors import ASSIGNORS, AssignmentSpec, MemberSpec, TopicSpec
from ..image import MetadataImage
from .model import (
    ConsumerGroup,
    ConsumerMember,
    ResolvedRegex,
    TargetPartitions,
    TopicMeta,
)

Resolved = Mapping[str, ResolvedRegex]

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is its error, not our log noise


class InvalidRegex(ValueError):
    pass


@functools.lru_cache(maxsize=4096)
def compile_regex(pattern: str):
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        raise InvalidRegex(f"invalid regular expression {pattern!r}: {exc}") from None


def resolve_regex(pattern: str, image: MetadataImage) -> frozenset[str]:
    """The topics of `image` that `pattern` fully matches (Kafka: RE2/J `matcher().matches()`)."""
    rx = compile_regex(pattern)
    return frozenset(n for n in image.topics if rx.fullmatch(n))


def member_topics(member: ConsumerMember, image: MetadataImage, resolved: Resolved | None = None) -> set[str]:
    """The existing topic names a member subscribes to: its names, and what its regex
    resolved to in `resolved` (nothing while it is unresolved)."""
    topics = image.topics
    names = {n for n in member.subscribed_topic_names if n in topics}
    rx = resolved.get(member.subscribed_topic_regex) if member.subscribed_topic_regex and resolved else None
    if rx is not None:
        names.update(n for n in rx.topics if n in topics)
    return names


def subscribed_topics(members: Iterable[ConsumerMember], image: MetadataImage,
                      resolved: Resolved | None = None) -> dict[str, TopicMeta]:
    """KIP-848 "Partitions Metadata": every topic some member subscribes to, as it is now
    (Kafka's computeSubscribedTopicNames: names, plus the resolved regexes' topics)."""
    names: set[str] = set()
    regexes: set[str] = set()
    topics = image.topics
    for m in members:
        for n in m.subscribed_topic_names:
            if n in topics:
                names.add(n)
        if m.subscribed_topic_regex:
            regexes.add(m.subscribed_topic_regex)
    for pattern in regexes:
        rx = resolved.get(pattern) if resolved else None
        if rx is not None:
            names.update(n for n in rx.topics if n in topics)
    return {n: topics[n] for n in sorted(names)}


def preferred_assignor(members: Mapping[str, ConsumerMember], default: str) -> str:
    """KIP-848 "Assignor Selection": the most common server assignor among members, else the default."""
    counts: dict[str, int] = {}
    for m in members.values():
        if m.server_assignor:
            counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
    if not counts:
        return default
    return max(sorted(counts), key=lambda n: counts[n])


def compute_target(
    group: ConsumerGroup,
    members: Mapping[str, ConsumerMember],
    topics: Mapping[str, TopicMeta],
    image: MetadataImage,
    default_assignor: str,
    inherited: Mapping[str, str] | None = None,
    resolved: Resolved | None = None,
) -> dict[str, TargetPartitions]:
    """Run the members' preferred assignor over `members` (the group as it will be after
    this request); `default_assignor` when no member names one.

    `inherited` maps a new member id to an old one whose target it takes over (a static
    member rejoining under a new id keeps its partitions: KIP-848 "Static Membership").
    `resolved`: the regex resolutions to use, the group's own by default.
    """
    inherited = inherited or {}
    resolved = group.resolved_regexes if resolved is None else resolved
    by_id = {t.topic_id: t for t in topics.values()}
    racks = tuple(sorted(image.racks))
    rack_sets = frozenset(racks) if racks else None
    topic_specs = {
        t.topic_id: TopicSpec(t.topic_id, t.name, t.partitions, (rack_sets,) * t.partitions if rack_sets else None)
        for t in topics.values()
    }
    # Members with the same subscription share one frozenset of ids (homogeneous groups are common).
    cache: dict[tuple, frozenset[uuid.UUID]] = {}
    specs = {}
    for mid, m in members.items():
        key = (m.subscribed_topic_names, m.subscribed_topic_regex)
        ids = cache.get(key)
        if ids is None:
            ids = cache[key] = frozenset(topics[n].topic_id for n in member_topics(m, image, resolved) if n in topics)
        current = group.target.get(inherited.get(mid, mid), {})
        specs[mid] = MemberSpec(mid, m.instance_id, m.rack_id, ids, {t: ps for t, ps in current.items() if t in by_id})
    assignor = ASSIGNORS[preferred_assignor(members, default_assignor)]
    result = assignor.assign(AssignmentSpec(specs, topic_specs))
    return {mid: {t: frozenset(ps) for t, ps in result.get(mid, {}).items() if ps} for mid in members}


def target_records(
    group_id: str,
    old: Mapping[str, TargetPartitions],
    new: Mapping[str, TargetPartitions],
    epoch: int,
) -> list[R.CoordinatorRecord]:
    """Only the members whose target changed, then the epoch (KIP-848 "Target Assignment")."""
    out = [R.target_member(group_id, mid, parts) for mid, parts in sorted(new.items()) if old.get(mid) != parts]
    out.append(R.target_epoch(group_id, epoch))
    return out


def partition_metadata_record(group_id: str, topics: Mapping[str, TopicMeta]) -> R.CoordinatorRecord:
    return R.partition_metadata(group_id, [(t.topic_id, t.name, t.partitions) for t in topics.values()])
