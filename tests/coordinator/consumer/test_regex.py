"""Regex subscriptions resolved off the request path (consumer/regex.py; Kafka 4.0's
GroupMetadataManager.maybeUpdateRegularExpressions / refreshRegularExpressions /
handleRegularExpressionsResult), driven with injected time."""

from __future__ import annotations

import uuid

from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer.model import ResolvedRegex
from odradek.coordinator.consumer.regex import (
    REGEX_BATCH_REFRESH_MIN_INTERVAL_MS,
    REGEX_REFRESH_INTERVAL_MS_DEFAULT,
    refresh_key,
)
from tests.coordinator.harness import BAR, FOO, Coord, parts
from tests.coordinator.test_migration import _classic_pair, _coord
from tests.coordinator.test_runtime import compact

BAZ = uuid.UUID(int=0xBA3)
QUX = uuid.UUID(int=0xC0C)
MIN = REGEX_BATCH_REFRESH_MIN_INTERVAL_MS


def types(records) -> list[int]:
    return [r.type for r in records]


def regex_records(c: Coord, partition: int = 0) -> list[R.CoordinatorRecord]:
    return [r for r in c.replayed(partition) if r.type == R.REGULAR_EXPRESSION]


def assigned(resp) -> dict:
    return {tp["topic_id"]: sorted(tp["partitions"]) for tp in resp["assignment"]["topic_partitions"]}


def hold(c: Coord, mid: str, gid: str = "g"):
    """A heartbeat from a member that owns exactly what it was assigned."""
    m = c.group(gid).members[mid]
    return c.hb(gid, mid, m.member_epoch, owned={t: sorted(ps) for t, ps in m.assigned.items()})


def tick(c: Coord, ms: int) -> list[R.CoordinatorRecord]:
    """Move the clock; the records the timers wrote meanwhile."""
    c.written = []
    c.advance(ms)
    return c.written


def wait(c: Coord, ms: int, *mids: str) -> None:
    """Let `ms` pass with the members heartbeating every 5 s (the default interval)."""
    end = c.now + ms
    while c.now < end:
        tick(c, min(5_000, end - c.now))
        for mid in mids:
            hold(c, mid)


# --- the heartbeat path uses resolved regexes only ------------------------------------------------


def test_names_are_assigned_at_once_and_the_regex_topics_after_the_resolution_with_one_bump():
    # librdkafka 0045 do_test_resubscribe_with_regex: "KIP-848 broker is assigning literal
    # topics first in 1 HB call and all the matched ones in later HB call".
    c = Coord(topics=[("foo", FOO, 2), ("bar", BAR, 4), ("baz", BAZ, 4)])
    r = c.hb(member="A", topics=["foo"], regex="ba.*")
    g = c.group()
    assert assigned(r) == {FOO: [0, 1]}
    assert R.REGULAR_EXPRESSION not in types(c.written)  # nothing resolved on the request path
    assert g.resolved_regexes == {} and list(g.subscribed_topics) == ["foo"]
    epoch = g.group_epoch
    assert c.runtime.shard_for("g").timer.deadline(refresh_key("g")) == c.now  # resolution pending

    c.advance(0)  # the runtime runs the resolution
    assert types(c.written)[:3] == [R.REGULAR_EXPRESSION, R.PARTITION_METADATA, R.GROUP_METADATA]
    assert c.written[0] == R.regular_expression("g", "ba.*", {"bar", "baz"}, 0, c.now)
    assert [r.value["epoch"] for r in c.written if r.type == R.GROUP_METADATA] == [epoch + 1]  # one bump
    assert g.group_epoch == g.target_epoch == epoch + 1
    assert g.resolved_regexes == {"ba.*": ResolvedRegex(frozenset({"bar", "baz"}), 0, c.now)}

    r = hold(c, "A")
    assert assigned(r) == {FOO: [0, 1], BAR: [0, 1, 2, 3], BAZ: [0, 1, 2, 3]}
    assert r["member_epoch"] == epoch + 1
    c.advance(MIN * 3)
    hold(c, "A")
    assert g.group_epoch == epoch + 1  # nothing changed since: no refresh, no bump


def test_a_regex_that_matches_nothing_yet_resolves_without_a_bump():
    c = Coord(topics=[("foo", FOO, 2)])
    c.hb(member="A", regex="ba.*")
    epoch = c.group().group_epoch
    c.advance(0)
    assert types(c.written) == [R.REGULAR_EXPRESSION]
    assert c.group().group_epoch == epoch and c.group().resolved_regexes["ba.*"].topics == frozenset()


def test_a_second_member_with_a_resolved_regex_gets_its_topics_in_its_join():
    c = Coord(topics=[("bar", BAR, 4)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    r = c.hb(member="B", regex="ba.*")
    assert R.REGULAR_EXPRESSION not in types(c.written)  # already resolved: nothing to schedule
    assert refresh_key("g") not in c.runtime.shard_for("g").timer
    t = c.group().target
    assert sorted(t["A"][BAR]) + sorted(t["B"][BAR]) and len(t["A"][BAR]) == len(t["B"][BAR]) == 2
    assert r["member_epoch"] == c.group().group_epoch


def test_changing_to_an_unresolved_regex_keeps_the_target_until_it_is_resolved():
    c = Coord(topics=[("bar", BAR, 2), ("qux", QUX, 2)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    g = c.group()
    epoch = g.group_epoch
    c.advance(1_000)
    r = c.hb(member="A", epoch=epoch, regex="qu.*")
    # Kafka bumps for a regex change only once the new regex is resolved; the old one's
    # resolution goes with its last member.
    assert g.group_epoch == epoch and r["assignment"] is None
    assert R.regular_expression_tombstone("g", "ba.*") in c.written
    assert g.resolved_regexes == {} and g.target["A"] == {BAR: frozenset({0, 1})}
    c.advance(0)
    assert g.group_epoch == epoch + 1 and g.target["A"] == {QUX: frozenset({0, 1})}


# --- metadata changes: coalesced, not more often than the batch interval ---------------------------


def test_two_topics_created_back_to_back_bump_the_epoch_once():
    c = Coord(topics=[("foo", FOO, 1)])
    c.hb(member="A", regex="ba.*")
    c.hb(member="B", regex="ba.*")
    c.advance(0)
    joined = c.now
    for mid in ("A", "B"):
        hold(c, mid)
    g = c.group()
    epoch = g.group_epoch
    c.advance(500)
    c.set_topics([("foo", FOO, 1), ("bar", BAR, 2)])
    for mid in ("A", "B"):
        hold(c, mid)  # the resolution is stale: the heartbeat asks for a refresh...
    shard = c.runtime.shard_for("g")
    assert shard.timer.deadline(refresh_key("g")) == joined + MIN + 1  # ...10 s after the last one
    c.advance(300)
    c.set_topics([("foo", FOO, 1), ("bar", BAR, 2), ("baz", BAZ, 2)])
    for mid in ("A", "B"):
        hold(c, mid)
    assert g.group_epoch == epoch  # nothing yet
    bumps = []
    while c.now < joined + MIN + 5_000:
        written = tick(c, 100)
        if R.GROUP_METADATA in types(written):
            bumps.append((c.now, [r.value["epoch"] for r in written if r.type == R.GROUP_METADATA]))
    assert [epochs for _, epochs in bumps] == [[epoch + 1]]  # one bump for both topics
    assert joined + MIN < bumps[0][0] <= joined + MIN + 100
    assert g.group_epoch == epoch + 1
    assert g.resolved_regexes["ba.*"].topics == frozenset({"bar", "baz"})
    got = {}
    for mid in ("A", "B"):
        r = hold(c, mid)
        got[mid] = assigned(r)
    assert sorted(got["A"].get(BAR, []) + got["B"].get(BAR, [])) == [0, 1]
    assert sorted(got["A"].get(BAZ, []) + got["B"].get(BAZ, [])) == [0, 1]


def test_topics_created_between_heartbeats_long_after_the_last_refresh_bump_once():
    c = Coord(topics=[("foo", FOO, 1)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    wait(c, MIN * 5, "A")
    epoch = c.group().group_epoch
    c.set_topics([("foo", FOO, 1), ("bar", BAR, 1)])
    c.set_topics([("foo", FOO, 1), ("bar", BAR, 1), ("baz", BAZ, 1)])
    c.advance(10)
    assert c.group().group_epoch == epoch  # creation alone refreshes nothing
    hold(c, "A")  # the next heartbeat asks for the refresh
    c.advance(0)  # the interval is long over: resolved at once
    assert c.group().group_epoch == epoch + 1
    assert c.group().resolved_regexes["ba.*"].topics == frozenset({"bar", "baz"})


def test_a_topic_unrelated_to_the_regex_writes_a_refresh_but_no_bump():
    c = Coord(topics=[("foo", FOO, 1)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    epoch = c.group().group_epoch
    c.advance(MIN + 1)
    c.set_topics([("foo", FOO, 1), ("other", QUX, 1)])
    hold(c, "A")
    c.advance(0)
    assert types(c.written) == [R.REGULAR_EXPRESSION]  # a newer version, the same topics
    assert c.group().group_epoch == epoch
    assert c.group().resolved_regexes["ba.*"].version == c.image.version


def test_a_deleted_topic_leaves_the_assignment_at_once_and_the_resolution_later():
    c = Coord(topics=[("bar", BAR, 2), ("baz", BAZ, 2)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    g = c.group()
    epoch = g.group_epoch
    c.set_topics([("baz", BAZ, 2)])
    assert g.group_epoch == epoch + 1 and list(g.subscribed_topics) == ["baz"]
    assert BAR not in g.target["A"]
    assert g.resolved_regexes["ba.*"].topics == frozenset({"bar", "baz"})  # Kafka cleans it up on the next refresh


def test_a_resolution_older_than_the_refresh_interval_is_refreshed_by_a_heartbeat():
    c = Coord(topics=[("bar", BAR, 1)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    shard = c.runtime.shard_for("g")
    last = c.group().resolved_regexes["ba.*"].timestamp_ms
    while c.now < last + REGEX_REFRESH_INTERVAL_MS_DEFAULT:
        wait(c, 5_000, "A")
        assert refresh_key("g") not in shard.timer  # not older than the interval yet
    tick(c, 1)
    hold(c, "A")
    assert shard.timer.deadline(refresh_key("g")) == c.now
    assert types(tick(c, 0)) == [R.REGULAR_EXPRESSION]  # the same topics, newly stamped: no bump


def test_the_refresh_interval_comes_from_the_config():
    # group.consumer.regex.refresh.interval.ms (Kafka 4.1+)
    c = Coord(topics=[("bar", BAR, 1)], config=CoordinatorConfig(offsets_topic_partitions=1,
                                                                  regex_refresh_interval_ms=60_000))
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    wait(c, 60_000, "A")
    assert refresh_key("g") not in c.runtime.shard_for("g").timer
    tick(c, 1)
    hold(c, "A")
    assert refresh_key("g") in c.runtime.shard_for("g").timer


# --- records: tombstones and replay ----------------------------------------------------------------


def test_resolutions_replay_after_a_restart():
    c = Coord(topics=[("foo", FOO, 2), ("bar", BAR, 2)])
    c.hb(member="A", topics=["foo"], regex="ba.*")
    c.hb(member="B", regex="b.*")
    c.advance(0)
    for mid in ("A", "B"):
        hold(c, mid)
    before = c.snapshot()
    resolved = dict(c.group().resolved_regexes)
    assert set(resolved) == {"ba.*", "b.*"}
    c.restart()
    assert c.snapshot() == before
    assert c.group().resolved_regexes == resolved and c.group().regex_counts == {"ba.*": 1, "b.*": 1}
    hold(c, "A")
    assert refresh_key("g") not in c.runtime.shard_for("g").timer  # same image: nothing stale


def test_a_compacted_log_after_every_step_replays_to_the_same_snapshot():
    c = Coord(topics=[("foo", FOO, 2), ("bar", BAR, 2)])
    steps = [
        lambda: c.hb(member="A", topics=["foo"], regex="ba.*"),
        lambda: c.hb(member="B", regex="ba.*"),
        lambda: c.advance(0),
        lambda: hold(c, "A"),
        lambda: c.set_topics([("foo", FOO, 2), ("bar", BAR, 2), ("baz", BAZ, 1)]),
        lambda: wait(c, MIN + 1, "A", "B"),
        lambda: c.hb(member="B", epoch=c.group().members["B"].member_epoch, regex="fo+"),
        lambda: c.advance(MIN + 1),
        lambda: c.hb(member="A", epoch=-1),
        lambda: c.hb(member="B", epoch=-1),
    ]
    for step in steps:
        step()
        before = c.snapshot()
        full_log = {p: list(v) for p, v in c.log.items()}
        c.log = {p: compact(v) for p, v in full_log.items()}
        c.restart()
        assert c.snapshot() == before
        c.log = full_log
        c.restart()
        assert c.snapshot() == before
    assert c.group().resolved_regexes == {}
    assert regex_records(c)[-1].value is None


def test_a_pending_resolution_lost_in_a_crash_is_scheduled_again_by_the_next_heartbeat():
    c = Coord(topics=[("foo", FOO, 2), ("bar", BAR, 2)])
    r = c.hb(member="A", topics=["foo"], regex="ba.*")
    c.restart()  # before the timer ran
    assert c.group().resolved_regexes == {}
    epoch = c.group().group_epoch
    c.hb(member="A", epoch=r["member_epoch"], owned={FOO: [0, 1]})
    c.advance(0)
    assert c.group().group_epoch == epoch + 1 and "bar" in c.group().subscribed_topics


def test_a_restart_after_topics_were_created_refreshes_the_resolutions():
    c = Coord(topics=[("foo", FOO, 1)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    hold(c, "A")
    c.image = type(c.image).of([("foo", FOO, 1), ("bar", BAR, 2)], version=5)  # created while down
    c.restart()
    hold(c, "A")  # within 10 s of the last refresh: scheduled for when they are over
    assert types(tick(c, MIN)) == []
    c.advance(1)
    assert c.group().resolved_regexes["ba.*"] == ResolvedRegex(frozenset({"bar"}), 5, c.now)
    assert "bar" in c.group().subscribed_topics


def test_the_last_member_of_a_regex_takes_its_resolution_with_it():
    c = Coord(topics=[("bar", BAR, 2)])
    c.hb(member="A", regex="ba.*")
    c.hb(member="B", regex="ba.*")
    c.advance(0)
    c.hb(member="A", epoch=-1)
    assert R.REGULAR_EXPRESSION not in types(c.written)  # B still uses it
    c.hb(member="B", epoch=-1)
    assert R.regular_expression_tombstone("g", "ba.*") in c.written
    assert c.group().resolved_regexes == {} and c.group().regex_counts == {}
    c.restart()
    assert c.group().resolved_regexes == {}


def test_a_member_expiring_tombstones_its_regex():
    c = Coord(topics=[("bar", BAR, 2)])
    c.hb(member="A", regex="ba.*")
    c.advance(0)
    c.advance(45_001)  # the session runs out
    assert "A" not in c.group().members
    assert R.regular_expression_tombstone("g", "ba.*") in c.written
    assert c.group().resolved_regexes == {}


def test_a_downgrade_tombstones_the_resolutions_first():
    c = _coord()
    _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",), regex="fo.*")
    c.advance(0)
    assert set(c.group().resolved_regexes) == {"fo.*"}
    c.hb(member="C", epoch=-1)
    assert c.written[0] == R.regular_expression_tombstone("g", "fo.*")
    assert c.group() is None and c.classic() is not None
    c.restart()
    assert c.group() is None and c.classic() is not None  # no consumer group brought back by a record


def test_a_refresh_for_a_group_that_went_away_does_nothing():
    c = Coord(topics=[("bar", BAR, 2)])
    c.hb(member="A", regex="ba.*")
    c.hb(member="A", epoch=-1)
    c.written = []
    c.advance(0)
    assert c.written == []
    assert c.group().resolved_regexes == {}


def test_classic_members_subscribe_to_names_only():
    c = _coord()
    a, b, _gen = _classic_pair(c)
    c.hb(member="C", epoch=0, topics=("foo",))
    g = c.group()
    assert g.regex_counts == {} and refresh_key("g") not in c.runtime.shard_for("g").timer
    assert set(g.members) == {a, b, "C"}


def test_assignment_response_for_an_unresolved_regex_only_member_is_empty():
    c = Coord(topics=[("bar", BAR, 2)])
    r = c.hb(member="A", regex="ba.*")
    assert parts(r, BAR) == []
