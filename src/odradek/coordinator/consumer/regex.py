"""Regex subscriptions, resolved off the request path (KIP-848 "Regex Based Subscription",
as shipped in Kafka 4.0's GroupMetadataManager: maybeUpdateRegularExpressions,
refreshRegularExpressions, handleRegularExpressionsResult).

Theory of operation:
  * A heartbeat never evaluates a regex against the topics. The group counts how many
    members use each regex (`ConsumerGroup.regex_counts`); a member whose regex nobody else
    used brings a new regex, and the resolution of a regex its last member dropped is
    tombstoned in the same write (`regex_update`, `dropped_regexes`). Until a regex is
    resolved it adds no topic, so a member subscribing to names and a regex is first
    assigned what its names give.
  * The resolution is a coordinator operation on the shard's timer, keyed per group
    (Kafka schedules it on its CoordinatorExecutor under `<group>-regex`). The runtime
    runs it like any timer, through write-then-replay: it resolves every regex the group
    uses against the metadata image as it is then, writes a ConsumerGroupRegularExpression
    record for each (topics, metadata version, timestamp), and bumps the group epoch once
    if any regex's topics or the subscribed topics changed, with the new target assignment
    in the same write (odradek computes targets eagerly; Kafka waits for a heartbeat).
  * When a refresh is scheduled is Kafka's rule, checked on every heartbeat
    (`maybe_schedule_refresh`): (0) the group uses a regex, (1) no refresh is pending,
    (2) the last refresh is more than REGEX_BATCH_REFRESH_MIN_INTERVAL_MS old, and
    (3) a regex is unresolved, or a topic was created after the metadata version of the
    resolutions (the shard's `new_topics_version`, Kafka's lastMetadataImageWithNewTopics),
    or the last refresh is older than `group.consumer.regex.refresh.interval.ms`. Where
    Kafka drops a request that (2) refuses and waits for a later heartbeat, odradek
    schedules the refresh for the moment the interval ends.
  * Creating a topic refreshes nothing by itself: it makes the resolutions stale and the
    next heartbeat asks for a refresh, at most one per interval, so topics created in quick
    succession arrive in one epoch bump. A deleted topic leaves the subscribed topics (and
    the assignment) at once through the partition metadata refresh (heartbeat.refresh_metadata);
    the resolution forgets it at its next refresh, as in Kafka.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from .. import records as R
from ..shard import Result, Shard
from .assignment import (
    InvalidRegex,
    compute_target,
    partition_metadata_record,
    resolve_regex,
    subscribed_topics,
    target_records,
)
from .model import ConsumerGroup, ConsumerMember, ResolvedRegex

log = logging.getLogger(__name__)

# Kafka GroupMetadataManager.REGEX_BATCH_REFRESH_MIN_INTERVAL_MS (REGEX_BATCH_REFRESH_INTERVAL_MS
# in 4.0): "The minimum amount of time between two consecutive refreshes of the regular
# expressions within a single group." A constant in Kafka, with no configuration key.
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000
# Kafka 4.1+ GroupCoordinatorConfig CONSUMER_GROUP_REGEX_REFRESH_INTERVAL_MS_DEFAULT
# (`group.consumer.regex.refresh.interval.ms`): a resolution older than this is refreshed at
# the next heartbeat even if no topic was created.
REGEX_REFRESH_INTERVAL_MS_DEFAULT = 10 * 60 * 1000  # CoordinatorConfig.regex_refresh_interval_ms


def refresh_interval_ms(shard: Shard) -> int:
    """`group.consumer.regex.refresh.interval.ms`, never below the batch minimum (Kafka's lower bound)."""
    return max(shard.config.regex_refresh_interval_ms, REGEX_BATCH_REFRESH_MIN_INTERVAL_MS)


def refresh_key(group_id: str) -> tuple:
    return ("regex-refresh", group_id)


# --- on the request path: bookkeeping only ---------------------------------------------------


def regex_update(group: ConsumerGroup, old: str | None, new: str | None) -> tuple[list[R.CoordinatorRecord], bool]:
    """A member's regex goes from `old` to `new` (Kafka's maybeUpdateRegularExpressions, first
    half): (the tombstone of `old` if that member was its last user, whether `new` is a regex
    no member used before and so must be resolved)."""
    if old == new:
        return [], False
    records = []
    if old and group.regex_counts.get(old, 0) == 1:
        # "If the member was the last one subscribed to the regex, we delete the resolved
        # regular expression."
        records.append(R.regular_expression_tombstone(group.group_id, old))
    return records, bool(new) and group.regex_counts.get(new, 0) == 0


def dropped_regexes(group: ConsumerGroup, removed: Iterable[ConsumerMember]) -> list[R.CoordinatorRecord]:
    """Tombstones of the regexes only `removed` used (Kafka's maybeDeleteResolvedRegularExpression,
    on a member's removal)."""
    leaving = Counter(m.subscribed_topic_regex for m in removed if m.subscribed_topic_regex)
    return [R.regular_expression_tombstone(group.group_id, rx)
            for rx, n in sorted(leaving.items()) if group.regex_counts.get(rx, 0) <= n]


def maybe_schedule_refresh(shard: Shard, group: ConsumerGroup, now_ms: int,
                           counts: Mapping[str, int] | None = None, new_regex: bool = False,
                           can_describe: Callable[[str], bool] | None = None) -> None:
    """Kafka's maybeUpdateRegularExpressions, second half: schedule the group's refresh when
    one is due. `counts`: the regexes in use once the current request is applied."""
    counts = group.regex_counts if counts is None else counts
    if not counts:  # 0. the group subscribes to no regex
        return
    key = refresh_key(group.group_id)
    if key in shard.timer:  # 1. a refresh is already pending; it resolves whatever is in use then
        return
    # Only the resolutions still in use count: one this request tombstones no longer holds
    # the next refresh back (Kafka sees it gone from the following heartbeat on).
    in_use = [r for rx, r in group.resolved_regexes.items() if rx in counts]
    last = max((r.timestamp_ms for r in in_use), default=None)
    need = new_regex or len(in_use) < len(counts)  # 3. an unresolved regex
    if not need:
        # 3. topics created since the oldest resolution's metadata version
        need = min(r.version for r in in_use) < shard.new_topics_version
    if not need and last is not None:
        need = now_ms > last + refresh_interval_ms(shard)  # 3. the resolutions are old
    if not need:
        return
    # 2. "The last refresh is older than 10s": Kafka refreshes when now > last + 10 s.
    due = now_ms if last is None else max(now_ms, last + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    gid = group.group_id
    shard.timer.schedule(key, due, lambda s, now: refresh_regexes(s, gid, now, can_describe))


# --- off the request path: the resolution ----------------------------------------------------


def refresh_regexes(shard: Shard, group_id: str, now_ms: int,
                    can_describe: Callable[[str], bool] | None = None) -> Result:
    """Resolve every regex `group_id` uses and install the result (Kafka's
    refreshRegularExpressions + handleRegularExpressionsResult, run as one operation).
    `can_describe`: the triggering member's DESCRIBE permission on a topic (Kafka's
    filterTopicDescribeAuthorizedTopics); a topic it may not describe is left out."""
    group = shard.consumer_groups.get(group_id)
    if group is None or not group.regex_counts:
        return Result([], None)  # the group went away, or stopped using regexes, meanwhile
    image = shard.image
    # The image in hand contains every topic created so far, so the resolution is as new as both.
    version = max(image.version, shard.new_topics_version)
    resolved = dict(group.resolved_regexes)
    records: list[R.CoordinatorRecord] = []
    bump = False
    for regex in sorted(group.regex_counts):
        try:
            topics = resolve_regex(regex, image)
            if can_describe is not None:
                topics = frozenset(t for t in topics if can_describe(t))
        except InvalidRegex as exc:  # validated on the way in; Kafka logs and resolves to nothing
            log.error("group %s: cannot resolve regular expression %r: %s", group_id, regex, exc)
            topics = frozenset()
        old = resolved.get(regex)
        if (old.topics if old is not None else frozenset()) != topics:
            bump = True
        resolved[regex] = ResolvedRegex(topics, version, now_ms)
        records.append(R.regular_expression(group_id, regex, topics, version, now_ms))
    for regex in sorted(set(resolved) - set(group.regex_counts)):
        del resolved[regex]  # left behind by nobody's regex; tombstoned here so it cannot linger
        records.append(R.regular_expression_tombstone(group_id, regex))
    topics = subscribed_topics(group.members.values(), image, resolved)
    if topics != group.subscribed_topics:
        records.append(partition_metadata_record(group_id, topics))
        bump = True
    if bump:
        # One bump for the whole batch of regexes (handleRegularExpressionsResult).
        epoch = group.group_epoch + 1
        records.append(R.group_epoch(group_id, epoch))
        target = compute_target(group, group.members, topics, image, shard.config.assignors[0], resolved=resolved)
        records += target_records(group_id, group.target, target, epoch)
    return Result(records, None)
