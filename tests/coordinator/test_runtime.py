"""The coordinator runtime: group placement, write-then-replay, load/fail-over, timers,
metadata changes, and restart/compaction equivalence."""

from __future__ import annotations

import uuid

import pytest

from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.offsets import CommitPartition, CommitRequest, commit
from odradek.coordinator.runtime import (
    CoordinatorRuntime,
    java_string_hash,
    partition_for,
)
from odradek.coordinator.shard import Result
from odradek.protocol.errors import NONE
from tests.coordinator.harness import BAR, FOO, Coord

# --- partition_for: Kafka's Utils.abs(groupId.hashCode()) % n ------------------------------------


def reference_java_hash(s: str) -> int:
    """String.hashCode, computed over code points split into UTF-16 surrogates by hand."""
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for u in units:
            h = (h * 31 + u) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize("s, expected", [
    ("hello", 99162322),
    ("", 0),
    ("a", 97),
    ("Aa", 2112),
    ("BB", 2112),                          # the classic collision
    ("polygenelubricants", -(2**31)),      # Integer.MIN_VALUE
    ("consumer-group-123", -2736947),      # negative
    ("日本", 835047),                       # BMP, non-ASCII
    ("grüße", 98768023),
    ("😀", 1772899),                        # outside the BMP: a surrogate pair in UTF-16
])
def test_java_string_hash_known_values(s, expected):
    assert java_string_hash(s) == expected
    assert reference_java_hash(s) == expected


@pytest.mark.parametrize("s", ["x" * 100, "ü" * 77, "🚀-group-" * 9, "group.with.dots_and-dashes", "\u0000\uffff"])
def test_java_string_hash_matches_the_reference(s):
    assert java_string_hash(s) == reference_java_hash(s)
    assert -(2**31) <= java_string_hash(s) < 2**31


@pytest.mark.parametrize("gid, n, expected", [
    ("hello", 50, 99162322 % 50),          # 22
    ("hello", 1, 0),
    ("hello", 7, 99162322 % 7),
    ("consumer-group-123", 50, 2736947 % 50),  # abs of a negative hash: 47, not Python's -2736947 % 50 == 3
    ("consumer-group-123", 7, 2736947 % 7),
    ("polygenelubricants", 50, 0),        # Utils.abs(MIN_VALUE) == 0
    ("polygenelubricants", 7, 0),
    ("日本", 50, 835047 % 50),
    ("😀", 50, 1772899 % 50),
])
def test_partition_for_matches_kafka(gid, n, expected):
    assert partition_for(gid, n) == expected


def test_runtime_places_groups_by_the_configured_partition_count():
    c = Coord(partitions=50)
    assert c.runtime.partition_for("hello") == 22
    assert c.runtime.shard_for("hello").partition == 22
    assert c.runtime.partition_for("consumer-group-123") == 47
    c.commit("hello", offsets=(("foo", 0, 1),))
    assert "hello" in c.runtime.shards[22].offsets
    assert all("hello" not in s.offsets for p, s in c.runtime.shards.items() if p != 22)
    assert list(c.log) == [22]


def test_run_on_an_unloaded_partition_raises_lookup_error():
    c = Coord(partitions=3)
    p = c.runtime.partition_for("g")
    c.runtime.unload(p)
    assert c.runtime.shard_for("g") is None
    with pytest.raises(LookupError):
        c.hb("g", "A")


# --- write, then replay ---------------------------------------------------------------------


class FailingWriter:
    def __init__(self):
        self.fail = False
        self.log: dict[int, list] = {}

    def __call__(self, partition, records, now_ms):
        if self.fail:
            raise OSError("disk full")
        self.log.setdefault(partition, []).extend(records)
        return len(self.log[partition]) - 1

    def read(self, partition):
        return [R.encode(r) for r in self.log.get(partition, [])]


def test_records_are_written_before_they_are_replayed():
    c = Coord()
    seen = []
    inner = c.runtime.writer

    def writer(partition, records, now_ms):
        shard = c.runtime.shards[partition]
        seen.append((shard.records_replayed, len(records), "g" in shard.consumer_groups))
        return inner(partition, records, now_ms)

    c.runtime.writer = writer
    before = c.runtime.records_written
    c.hb("g", "A")
    ((replayed_then, n, group_existed),) = seen
    assert not group_existed  # the writer ran before any record reached the shard
    assert c.runtime.shards[0].records_replayed == replayed_then + n
    assert c.runtime.records_written == before + n
    assert c.group("g").members["A"].member_epoch == 1


def test_a_failing_writer_leaves_state_unchanged_and_propagates():
    w = FailingWriter()
    image = MetadataImage.of([("foo", FOO, 3)])
    cfg = CoordinatorConfig(offsets_topic_partitions=1)
    rt = CoordinatorRuntime(cfg, w, image, new_member_id=lambda: "gen", reader=w.read)
    rt.load(0, [], 0)
    req = CommitRequest("g", topics=(("foo", FOO, (CommitPartition(0, 5),)),))
    assert rt.run("g", lambda s, now: commit(s, req, now), 10)["topics"][0]["partitions"][0]["error_code"] == NONE
    shard = rt.shards[0]
    before = shard.snapshot()
    written, replayed = rt.records_written, shard.records_replayed

    w.fail = True
    req2 = CommitRequest("g", topics=(("foo", FOO, (CommitPartition(0, 99), CommitPartition(1, 7))),))
    with pytest.raises(OSError, match="disk full"):
        rt.run("g", lambda s, now: commit(s, req2, now), 20)
    with pytest.raises(OSError):
        rt.run("g", lambda s, now: Result([R.group_epoch("g", 1)], "ok"), 20)
    assert shard.snapshot() == before
    assert (rt.records_written, shard.records_replayed) == (written, replayed)
    assert shard.offsets["g"][("foo", 0)].offset == 5

    w.fail = False
    rt.run("g", lambda s, now: commit(s, req2, now), 30)
    assert shard.offsets["g"][("foo", 0)].offset == 99
    # what was replayed is exactly what was written
    fresh = CoordinatorRuntime(cfg, w, image).load(0, w.log[0], 30)
    assert fresh.snapshot() == shard.snapshot()


def test_a_failing_writer_during_a_join_leaves_no_member():
    c = Coord()
    c.hb("g", "A")
    before = c.snapshot()

    def broken(partition, records, now_ms):
        raise RuntimeError("log closed")

    c.runtime.writer = broken
    with pytest.raises(RuntimeError):
        c.hb("g", "B")
    assert c.snapshot() == before
    assert "B" not in c.group().members


def test_run_returns_the_response_and_writes_nothing_for_no_records():
    c = Coord()
    calls = []
    c.runtime.writer = lambda *a: calls.append(a)
    assert c.runtime.run("g", lambda s, now: Result([], {"x": now}), 1234) == {"x": 1234}
    assert calls == []


# --- load and fail-over ---------------------------------------------------------------------


def test_load_replays_the_log():
    c = Coord()
    c.hb("g", "A")
    c.hb("g", "B")
    c.commit("s", offsets=(("foo", 1, 42),))
    before = c.snapshot()
    c.restart()
    assert c.snapshot() == before
    assert c.fetch("s") == {("foo", 1): 42}
    assert c.group("g").group_epoch == 2


def test_load_rearms_session_timers():
    c = Coord()
    c.hb("g", "A")
    c.hb("g", "B")
    c.advance(30_000)  # B and A last heard of 30 s ago
    c.restart()
    session = c.config.session_timeout_ms
    # Fresh sessions from the load: the old deadline (15 s from now) passes without effect.
    c.advance(session - 1)
    assert set(c.group().members) == {"A", "B"}
    c.hb("g", "B", c.group().members["B"].member_epoch)  # B heartbeats; A never does again
    c.advance(1)
    assert set(c.group().members) == {"B"}
    assert c.group().group_epoch == 3  # the removal bumped the epoch
    c.restart()
    assert set(c.group().members) == {"B"}  # the removal was written, not just applied


def test_load_rearms_static_member_session():
    c = Coord()
    c.hb("g", "A", instance_id="i-1")
    c.hb("g", "A", -2, instance_id="i-1")
    assert c.group().members["A"].member_epoch == -2
    c.restart()
    c.advance(c.config.session_timeout_ms - 1)
    assert "A" in c.group().members
    c.advance(1)
    assert "A" not in c.group().members


def test_load_rearms_rebalance_timers():
    c = Coord()
    c.hb("g", "A", rebalance_timeout=10_000)
    c.hb("g", "B")
    c.hb("g", "A", 1)  # A is asked to revoke and does not
    assert c.group().members["A"].state.name == "UNREVOKED_PARTITIONS"
    c.restart()
    c.advance(9_999)
    assert "A" in c.group().members
    c.advance(1)
    assert "A" not in c.group().members  # rebalance timeout, well before the session timeout


def test_load_bumps_groups_whose_topics_changed_while_unloaded():
    c = Coord()
    c.hb("g", "A")
    assert c.group().group_epoch == 1
    c.image = MetadataImage.of([("foo", FOO, 5)], version=1)  # the topic grew meanwhile
    c.restart()
    g = c.group()
    assert g.group_epoch == 2 and g.target_epoch == 2
    assert g.subscribed_topics["foo"].partitions == 5
    assert sorted(g.target["A"][FOO]) == [0, 1, 2, 3, 4]


def test_load_arms_offset_expiry():
    cfg = CoordinatorConfig(offsets_topic_partitions=1, offsets_retention_ms=60_000,
                            offsets_retention_check_interval_ms=10_000)
    c = Coord(config=cfg)
    c.commit("s", offsets=(("foo", 0, 1),))
    c.restart()
    assert c.runtime.next_deadline() == c.now + 10_000
    c.advance(59_999)
    assert c.fetch("s") == {("foo", 0): 1}
    c.advance(10_000)
    assert c.fetch("s") == {}


# --- timers through the runtime -------------------------------------------------------------


def test_tick_runs_due_timers_through_write_then_replay():
    c = Coord(partitions=3)
    for gid in ("g1", "g2", "g3", "g4"):
        c.hb(gid, "A")
    deadline = c.runtime.next_deadline()
    assert deadline == c.now + c.config.session_timeout_ms
    n_before = c.runtime.records_written
    assert c.runtime.tick(deadline - 1) == 0
    ran = c.runtime.tick(deadline)
    assert ran == 4
    assert c.runtime.records_written > n_before
    for gid in ("g1", "g2", "g3", "g4"):
        assert c.group(gid).members == {}
    c.restart()
    for gid in ("g1", "g2", "g3", "g4"):
        assert c.group(gid).members == {}


# --- metadata changes -------------------------------------------------------------------------


@pytest.fixture
def two_groups():
    c = Coord(topics=[("foo", FOO, 3), ("bar", BAR, 2)], partitions=3)
    c.hb("g", "A", topics=("foo",))
    c.hb("h", "B", topics=("bar",))
    return c


def epochs(c, gid):
    g = c.group(gid)
    return g.group_epoch, g.target_epoch


def test_update_image_bumps_only_groups_whose_topic_changed(two_groups):
    c = two_groups
    assert epochs(c, "g") == epochs(c, "h") == (1, 1)
    c.set_topics([("foo", FOO, 6), ("bar", BAR, 2)])
    assert epochs(c, "g") == (2, 2)
    assert epochs(c, "h") == (1, 1)
    assert c.group("g").subscribed_topics["foo"].partitions == 6
    assert sorted(c.group("g").target["A"][FOO]) == list(range(6))
    assert all(s.image is c.image for s in c.runtime.shards.values())


def test_update_image_without_change_writes_nothing(two_groups):
    c = two_groups
    n = c.runtime.records_written
    c.set_topics([("foo", FOO, 3), ("bar", BAR, 2), ("other", uuid.uuid4(), 9)])
    assert c.runtime.records_written == n
    assert epochs(c, "g") == epochs(c, "h") == (1, 1)


def test_deleted_topic_bumps(two_groups):
    c = two_groups
    c.set_topics([("bar", BAR, 2)])
    assert epochs(c, "g") == (2, 2)
    assert epochs(c, "h") == (1, 1)
    assert c.group("g").subscribed_topics == {}
    assert c.group("g").target["A"] == {}


def test_recreated_topic_bumps(two_groups):
    c = two_groups
    new_id = uuid.UUID(int=0xF01)
    c.set_topics([("foo", new_id, 3), ("bar", BAR, 2)])  # same name and size, new id
    assert epochs(c, "g") == (2, 2)
    assert epochs(c, "h") == (1, 1)
    assert c.group("g").subscribed_topics["foo"].topic_id == new_id
    assert sorted(c.group("g").target["A"][new_id]) == [0, 1, 2]
    assert FOO not in c.group("g").target["A"]


def test_regex_group_bumps_when_a_matching_topic_appears():
    # The regex learns of the topic at its next refresh (consumer/regex.py): scheduled by the
    # next heartbeat, run by the runtime's timer, with its own epoch bump and target.
    c = Coord(topics=[("foo", FOO, 3)])
    c.hb("g", "A", topics=None, regex="ba.*")
    c.advance(0)
    assert epochs(c, "g") == (1, 1) and c.group("g").subscribed_topics == {}
    c.set_topics([("foo", FOO, 3), ("baz", BAR, 2)])
    assert epochs(c, "g") == (1, 1)
    c.advance(10_000)
    c.member_hb("g", "A")
    c.advance(1)
    assert epochs(c, "g") == (2, 2)
    assert sorted(c.group("g").target["A"][BAR]) == [0, 1]


def test_metadata_change_survives_restart(two_groups):
    c = two_groups
    c.set_topics([("foo", FOO, 6), ("bar", BAR, 2)])
    before = c.snapshot()
    c.restart()
    assert c.snapshot() == before


# --- restart and compaction equivalence -------------------------------------------------------




def long_scenario(c: Coord) -> None:
    """Joins, leaves, commits, a static leave and return, topic growth, a timeout, a deletion."""
    c.hb("g", "A", topics=("foo", "bar"))
    c.hb("g", "B", topics=("foo",), rack_id="r1")
    c.hb("g", "C", topics=("bar",), instance_id="inst-c", assignor="range")
    c.converge("g")
    assert c.commit("g", "A", c.group("g").members["A"].member_epoch, offsets=(("foo", 0, 10),))[("foo", 0)] == 0
    c.commit("simple", offsets=(("foo", 1, 5), ("bar", 0, 6)))
    c.commit("simple", offsets=(("foo", 1, 8),))  # overwrite
    c.advance(2_000)
    c.hb("g", "D", topics=("foo",))
    c.member_hb("g", "A")  # revocations under way
    c.hb("g", "C", c.group("g").members["C"].member_epoch, instance_id="inst-c")
    c.hb("g", "C", -2, instance_id="inst-c")  # static leave: keeps its assignment
    c.hb("g", "B", -1)  # dynamic leave
    c.set_topics([("foo", FOO, 5), ("bar", BAR, 4)])  # topic growth
    c.converge("g")
    c.hb("g", "C2", topics=("bar",), instance_id="inst-c")  # the static member returns as C2
    c.converge("g")
    # another group that empties, and one that is deleted
    c.hb("e", "E", topics=("bar",))
    c.commit("e", "E", 1, offsets=(("bar", 1, 3),))
    c.hb("e", "E", -1)
    c.hb("x", "X", topics=("foo",))
    c.hb("x", "X", -1)
    c.runtime.run("x", lambda s, now: __import__("odradek.coordinator.groups", fromlist=["delete_group"])
                  .delete_group(s, "x", now), c.now)
    # a member that times out
    c.hb("t", "T1", topics=("foo",))
    c.hb("t", "T2", topics=("foo",))
    for _ in range(10):
        c.advance(5_000)
        c.member_hb("t", "T2")
        for mid in list(c.group("g").members):
            if c.group("g").members[mid].member_epoch >= 0:
                c.member_hb("g", mid)
    assert "T1" not in c.group("t").members
    # one more static leave left pending at the end, and a member mid-reconciliation
    c.hb("g", "S", topics=("foo", "bar"), instance_id="inst-s")
    c.hb("g", "S", c.group("g").members["S"].member_epoch, instance_id="inst-s")
    c.hb("g", "S", -2, instance_id="inst-s")


def _sanity(c: Coord) -> None:
    g = c.group("g")
    assert set(g.members) == {"A", "C2", "D", "S"}
    assert g.members["S"].member_epoch == -2
    assert g.static_members == {"inst-c": "C2", "inst-s": "S"}
    assert c.group("x") is None and c.group("e").members == {}
    assert c.fetch("simple") == {("bar", 0): 6, ("foo", 1): 8}
    assert c.fetch("e") == {("bar", 1): 3}


@pytest.mark.parametrize("partitions", [1, 4])
def test_restart_after_a_long_scenario_gives_the_same_snapshot(partitions):
    c = Coord(topics=[("foo", FOO, 3), ("bar", BAR, 2)], partitions=partitions)
    long_scenario(c)
    _sanity(c)
    before = c.snapshot()
    written = c.runtime.records_written
    c.restart()
    assert c.snapshot() == before
    _sanity(c)
    assert c.runtime.records_written == 0  # nothing changed meanwhile: loading writes nothing
    c.restart()
    assert c.snapshot() == before
    assert written > 50


def compact(entries: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """Kafka log compaction (after delete.retention.ms): the last record per key, at its
    position; keys whose last record is a tombstone disappear."""
    last = {key: i for i, (key, _) in enumerate(entries)}
    return [(k, v) for i, (k, v) in enumerate(entries) if last[k] == i and v is not None]


def test_compact_helper():
    log = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", None), (b"c", b"4")]
    assert compact(log) == [(b"a", b"3"), (b"c", b"4")]


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_compacted_log_replays_to_the_same_snapshot(partitions):
    c = Coord(topics=[("foo", FOO, 3), ("bar", BAR, 2)], partitions=partitions)
    long_scenario(c)
    before = c.snapshot()
    full = sum(len(v) for v in c.log.values())
    c.log = {p: compact(entries) for p, entries in c.log.items()}
    assert sum(len(v) for v in c.log.values()) < full / 2
    c.restart()
    assert c.snapshot() == before
    _sanity(c)
    # and the compacted coordinator keeps working: the static member's session still runs out
    c.advance(c.config.session_timeout_ms)
    assert "S" not in c.group("g").members


def test_compacted_log_after_every_step_replays_to_the_same_snapshot():
    """Compaction may happen at any point, not only at the end."""
    c = Coord(topics=[("foo", FOO, 3), ("bar", BAR, 2)])
    steps = [
        lambda: c.hb("g", "A"),
        lambda: c.hb("g", "B"),
        lambda: c.member_hb("g", "A"),
        lambda: c.member_hb("g", "A"),
        lambda: c.member_hb("g", "B"),
        lambda: c.commit("g", "A", c.group("g").members["A"].member_epoch, offsets=(("foo", 0, 1),)),
        lambda: c.hb("g", "A", -1),
        lambda: c.member_hb("g", "B"),
        lambda: c.set_topics([("foo", FOO, 4), ("bar", BAR, 2)]),
        lambda: c.member_hb("g", "B"),
        lambda: c.hb("g", "B", -1),
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


@pytest.mark.parametrize("seed", range(8))
def test_random_histories_restart_and_compact_to_the_same_snapshot(seed):
    """Random joins, heartbeats, leaves, commits, timeouts, topic changes and deletions; at
    random points the coordinator restarts from the compacted and from the full log."""
    import random

    from odradek.coordinator.groups import delete_group

    rng = random.Random(seed)
    c = Coord(topics=[("foo", FOO, 3), ("bar", BAR, 2)], partitions=rng.choice([1, 2]))
    topics = {"foo": [FOO, 3], "bar": [BAR, 2]}
    restarts = 0
    for _ in range(150):
        gid, mid = rng.choice(["g", "h"]), rng.choice("ABCD")
        inst = {"C": "ic", "D": "id"}.get(mid)
        g = c.group(gid)
        m = g.members.get(mid) if g else None
        r = rng.random()
        if r < 0.2:
            c.hb(gid, mid, 0, topics=rng.choice([("foo",), ("bar",), ("foo", "bar")]), instance_id=inst)
        elif r < 0.5 and m is not None and m.member_epoch >= 0:
            owned = {t: sorted(ps) for t, ps in m.assigned.items()}
            if rng.random() < 0.3:  # has not finished revoking yet
                owned = {t: ps + sorted(m.pending_revocation.get(t, {})) for t, ps in owned.items()}
            c.hb(gid, mid, m.member_epoch, owned=owned, instance_id=inst)
        elif r < 0.58 and m is not None:
            c.hb(gid, mid, rng.choice([-1, -2]) if inst else -1, instance_id=inst)
        elif r < 0.68:
            c.commit(gid, mid if m is not None else "", m.member_epoch if m is not None else -1,
                     offsets=((rng.choice(["foo", "bar"]), rng.randrange(2), rng.randrange(100)),))
        elif r < 0.74:
            c.commit(f"s{rng.randrange(2)}", offsets=(("foo", 0, rng.randrange(100)),))
        elif r < 0.8:
            c.advance(rng.choice([1_000, 10_000, 30_000, 50_000]))
        elif r < 0.85:
            t = rng.choice(["foo", "bar"])
            if rng.random() < 0.5:
                topics[t][1] += 1
            else:
                topics[t][0] = uuid.UUID(int=rng.getrandbits(128))
            c.set_topics([(n, i, p) for n, (i, p) in topics.items()])
        elif r < 0.88:
            x = rng.choice(["g", "h", "s0", "s1"])
            c.runtime.run(x, lambda s, now, x=x: delete_group(s, x, now), c.now)
        elif r < 0.93:
            restarts += 1
            before = c.snapshot()
            full = {p: list(v) for p, v in c.log.items()}
            c.log = {p: compact(v) for p, v in full.items()}
            c.restart()
            assert c.snapshot() == before
            c.log = full
            c.restart()
            assert c.snapshot() == before
    assert restarts >= 2
    assert sum(len(v) for v in c.log.values()) > 50  # the history did something
    before = c.snapshot()
    c.restart()
    assert c.snapshot() == before


def test_load_bytes_collapses_offset_rewrites_to_the_same_state():
    """load_bytes keeps only the newest value per offset key before decoding; the result must
    equal replaying every record in order (rewrites, tombstones, group deletion)."""
    import random



    rng = random.Random(11)
    recs = []
    for _ in range(3000):
        g, t, p = f"g{rng.randrange(5)}", f"t{rng.randrange(3)}", rng.randrange(4)
        if rng.random() < 0.15:
            recs.append(R.offset_tombstone(g, t, p))
        else:
            recs.append(R.offset_commit(g, t, p, rng.randrange(10**6), -1, rng.choice(["", "m"]), rng.randrange(10**9)))
    recs.append(R.group_epoch("g1", 3))
    cfg = CoordinatorConfig(offsets_topic_partitions=1)
    a = CoordinatorRuntime(cfg, lambda *_: None)
    b = CoordinatorRuntime(cfg, lambda *_: None)
    sa = a.load(0, recs, 0)
    sb = b.load_bytes(0, [R.encode(r) for r in recs], 0)
    assert sa.snapshot() == sb.snapshot()
    assert sb.records_replayed == len(recs)


def test_a_classic_group_over_group_max_size_after_a_restart_rebalances():
    # Kafka's onLoaded: a group bigger than group.max.size (lowered meanwhile) rebalances
    # at once, and the members that rejoin last are refused.
    import dataclasses

    from odradek.coordinator.classic.model import ClassicState

    from .classic.helpers import form

    c = Coord()
    mids, _leader, gen = form(c, 3)
    assert c.classic().state is ClassicState.STABLE
    c.config = dataclasses.replace(c.config, classic_max_size=2)
    c.restart()
    assert c.classic().state is ClassicState.PREPARING_REBALANCE
    answers = [c.join(member=m) for m in mids]
    assert [a[0]["error_code"] for a in answers[2:]] == [81]  # GROUP_MAX_SIZE_REACHED
    c.advance(30_000)  # the join phase ends at the rebalance timeout, as in Kafka
    assert all(a and a[0]["error_code"] == 0 for a in answers[:2])
    assert len(c.classic().members) == 2 and c.classic().generation == gen + 1


def test_a_discarding_writer_numbers_what_it_drops_as_a_log_would():
    from odradek.coordinator.runtime import discarding_writer

    write = discarding_writer()
    assert write(0, [object(), object()], 0) == 1 and write(3, [], 0) == 1 and write(1, [object()], 0) == 2
