"""Shard replay from stored bytes: `Shard.replay_offset_commits`, the bulk path start-up
replay takes for offset commits, must leave exactly the state, counts and errors of
replaying every stored record one by one (`replay_offset_bytes`, `replay`)."""

from __future__ import annotations

import gc
import random
import struct

import pytest

from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.offsets import (
    CommitPartition,
    CommitRequest,
    commit,
    delete,
    expire_offsets,
    fetch_group,
)
from odradek.coordinator.records import RecordError
from odradek.coordinator.runtime import (
    CoordinatorRuntime,
    ShardState,
    discarding_writer,
)
from odradek.coordinator.shard import OffsetEntry, Shard

from .harness import FOO, Coord

CFG = CoordinatorConfig(offsets_topic_partitions=1)


def fresh_shard() -> Shard:
    shard = CoordinatorRuntime(CFG, discarding_writer()).new_shard(0)
    shard.loading = True
    return shard


def one_by_one(pairs) -> tuple[Shard, list]:
    """Every stored record in log order, each offset commit decoded: the reference."""
    shard, others = fresh_shard(), []
    for key, value in pairs:
        if key is None:
            continue
        if R.is_offset_commit(key):
            shard.replay_offset_bytes(key, value)
        else:
            others.append((key, value))
            record = R.decode(key, value)
            if record is not None:
                shard.replay(record)
    return shard, others


def bulk(pairs) -> tuple[Shard, list]:
    shard = fresh_shard()
    others = shard.replay_offset_commits(list(pairs))
    for key, value in others:
        record = R.decode(key, value)
        if record is not None:
            shard.replay(record)
    return shard, others


def v0(key: bytes) -> bytes:
    return b"\x00\x00" + key[2:]  # OffsetCommitKey v0: the same layout


def random_log(seed: int, n: int = 3000) -> list[tuple[bytes | None, bytes | None]]:
    """Commits (with and without metadata), rewrites, tombstones before and after commits,
    key versions 0 and 1, other records and keyless ones in between."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        g, t = rng.choice(["g0", "g1", "grøup", "x" * 70]), rng.choice(["t", "tøpic", "y" * 90])
        p = rng.choice([0, 1, 2, 300, 2**31 - 1, -1])
        roll = rng.random()
        if roll < 0.15:
            key, value = R.encode(R.offset_tombstone(g, t, p))
        elif roll < 0.9:
            meta = rng.choice(["", "", "", "m", "ünïcode" * 20])
            key, value = R.encode(R.offset_commit(g, t, p, rng.randrange(-1, 2**62), rng.randrange(-1, 9), meta,
                                                  rng.randrange(0, 2**45)))
        elif roll < 0.97:
            key, value = R.encode(rng.choice([R.group_epoch(g, i), R.group_tombstone(g), R.target_epoch(g, i)]))
        else:
            key, value = None, b"keyless"
        if key is not None and R.is_offset_commit(key) and rng.random() < 0.3:
            key = v0(key)
        pairs.append((key, value))
    return pairs


@pytest.mark.parametrize("seed", range(6))
def test_bulk_replay_leaves_the_state_of_replaying_every_record(seed):
    pairs = random_log(seed)
    want, want_others = one_by_one(pairs)
    got, got_others = bulk(pairs)
    assert got.snapshot() == want.snapshot()
    assert got.records_replayed == want.records_replayed
    assert got_others == want_others  # the other records, in log order
    for entries in got.offsets.values():
        assert entries  # no group is left without offsets
        for entry in entries.values():
            assert type(entry) is OffsetEntry and type(entry.metadata) is str


def test_an_entry_reads_back_as_the_schema_path_reads_it():
    records = [R.offset_commit("g", "t", 0, 2**62, 7, "", 1_700_000_000_123),
               R.offset_commit("g", "t", 1, -1, -1, "meta ✓", 0),
               R.offset_commit("g", "u", -5, 0, 2**31 - 1, "", -1)]
    shard, _ = bulk([R.encode(r) for r in records])
    for r in records:
        v = R.decode(*R.encode(r)).value
        entry = shard.offsets["g"][(r.key[1], r.key[2])]
        assert entry == OffsetEntry(v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])
        assert entry == (v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])


def test_tombstones_after_commits_and_commits_after_tombstones():
    log = [R.offset_commit("a", "t", 0, 1, -1, "", 1), R.offset_commit("a", "t", 1, 2, -1, "", 1),
           R.offset_tombstone("a", "t", 0), R.offset_tombstone("a", "t", 1),  # "a" has nothing left
           R.offset_tombstone("b", "t", 0),                                   # "b" never had anything
           R.offset_commit("c", "t", 0, 5, -1, "", 1), R.offset_tombstone("c", "t", 0),
           R.offset_commit("c", "t", 0, 6, -1, "x", 2)]                       # "c" committed again
    shard, _ = bulk([R.encode(r) for r in log])
    assert shard.offsets == {"c": {("t", 0): OffsetEntry(6, -1, "x", 2)}}
    assert shard.group_ids() == {"c"}
    assert shard.records_replayed == len(log)


def bad_values() -> dict[str, bytes]:
    good = R.encode(R.offset_commit("g", "t", 0, 1, -1, "", 1))[1]
    return {
        "version 2": b"\x00\x02" + good[2:],
        "metadata length 1 in 24 bytes": good[:14] + b"\x00\x01" + good[16:],
        "negative metadata length": good[:14] + b"\xff\xff" + good[16:],
        "truncated": good[:20],
        "a byte too many": good + b"\x00",
        "bad utf-8 metadata": good[:14] + b"\x00\x02\xff\xfe" + good[16:],
    }


@pytest.mark.parametrize("value", list(bad_values().values()), ids=list(bad_values()))
def test_a_corrupt_newest_value_fails_the_load_as_before(value):
    key = R.encode_key(R.OFFSET_COMMIT, ("g", "t", 0))
    pairs = [R.encode(R.offset_commit("g", "t", 1, 1, -1, "", 1)), (key, value)]
    with pytest.raises(RecordError):
        one_by_one(pairs)
    with pytest.raises(RecordError):
        bulk(pairs)
    with pytest.raises(RecordError):
        CoordinatorRuntime(CFG, discarding_writer()).load_bytes(0, pairs, 0)


@pytest.mark.parametrize("key", [
    R.encode_key(R.OFFSET_COMMIT, ("g", "t", 0)) + b"\x00",  # a byte after the partition
    R.encode_key(R.OFFSET_COMMIT, ("g", "t", 0))[:-1],       # a truncated partition
    b"\x00\x01\x00\x09g",                                     # a group longer than the key
    b"\x00\x01\x00",
], ids=["long", "short", "overrun", "tiny"])
def test_a_corrupt_key_fails_the_load_as_before(key):
    good = R.encode(R.offset_commit("g", "t", 1, 1, -1, "", 1))
    for value in (good[1], None):
        for pairs in ([good, (key, value)], [(key, value), good]):
            with pytest.raises(RecordError):
                bulk(pairs)


def test_key_versions_0_and_1_name_the_same_offset():
    """The newest record in the log wins whichever key version each record used, as in a
    replay of every record (the loader collapsed rewrites by key bytes before, so there a
    v0 and a v1 key of one offset were two keys)."""
    key, value = R.encode(R.offset_commit("g", "t", 0, 1, -1, "", 1))
    newer = R.encode_value(R.OFFSET_COMMIT, {"offset": 2, "leader_epoch": -1, "metadata": "", "commit_timestamp": 2})
    for pairs, want in (([(key, value), (v0(key), newer)], 2), ([(v0(key), value), (key, newer)], 2),
                        ([(key, newer), (v0(key), None)], None)):
        for replay in (bulk, one_by_one):
            shard, _ = replay(pairs)
            assert shard.offsets.get("g", {}).get(("t", 0), (None,))[0] == want


def test_a_key_too_short_for_a_type_fails_as_before():
    with pytest.raises(IndexError):  # what the loader's type check has always raised
        CoordinatorRuntime(CFG, discarding_writer()).load_bytes(0, [(b"\x00", b"")], 0)


def test_older_values_of_a_rewritten_offset_are_never_decoded():
    """As before: only the newest value of each offset is read, so a corrupt value that a
    later commit or tombstone replaced does not fail the load."""
    key = R.encode_key(R.OFFSET_COMMIT, ("g", "t", 0))
    other = R.encode_key(R.OFFSET_COMMIT, ("g", "t", 1))
    pairs = [(key, b"garbage"), (other, b"\x00\x02garbage"), R.encode(R.offset_commit("g", "t", 0, 9, -1, "", 1)),
             (other, None)]
    shard = CoordinatorRuntime(CFG, discarding_writer()).load_bytes(0, pairs, 0)
    assert shard.offsets == {"g": {("t", 0): OffsetEntry(9, -1, "", 1)}}
    assert shard.records_replayed == 4


def test_a_corrupt_partition_fails_its_election_and_the_shard_is_not_served():
    key = R.encode_key(R.OFFSET_COMMIT, ("g", "t", 0))
    rt = CoordinatorRuntime(CFG, discarding_writer(), reader=lambda _p: [(key, b"\x00\x03short")])
    with pytest.raises(RecordError):
        rt.on_election(0, 1, 0)
    assert rt.state_of(0) is ShardState.FAILED and 0 not in rt.shards


def test_a_shard_with_offsets_or_a_write_in_flight_replays_one_by_one():
    """Never a load, but the same answer: the newest value per key through `_put_offset`,
    undo entries included while a write is uncommitted."""
    pairs = random_log(7, 500)
    offset_pairs = [p for p in pairs if p[0] is not None and R.is_offset_commit(p[0])]
    shard = fresh_shard()
    shard.replay(R.offset_commit("zz", "t", 0, 1, -1, "", 1))
    others = shard.replay_offset_commits(pairs)
    want, want_others = one_by_one([R.encode(R.offset_commit("zz", "t", 0, 1, -1, "", 1)), *pairs])
    assert shard.snapshot()["offsets"] == want.snapshot()["offsets"]
    assert others == want_others
    writing = fresh_shard()
    writing.writing_offset = 10
    writing.replay_offset_commits(pairs)
    assert writing.offsets == bulk(pairs)[0].offsets
    assert len(writing._uncommitted) == len({k[2:] for k, _ in offset_pairs})  # one undo entry per offset
    assert writing.records_replayed == len(offset_pairs)


def test_a_loaded_coordinator_answers_as_one_replayed_from_records():
    """The byte-level load and the record-level one answer OffsetFetch, expiry and
    KIP-1251 epochs alike."""
    c = Coord(topics=(("foo", FOO, 4),))
    c.hb("g", "A")
    c.converge("g")
    epoch = c.group("g").members["A"].member_epoch
    assert set(c.commit("g", "A", epoch, [("foo", 0, 5), ("foo", 1, 6)]).values()) == {0}
    for i in range(30):
        req = CommitRequest(f"s{i % 3}", topics=(("foo", FOO, tuple(CommitPartition(p, i * 10 + p, 3, "m" * (i % 2))
                                                                  for p in range(4))),))
        c.runtime.run(req.group_id, lambda s, now, req=req: commit(s, req, now), c.now)
        c.now += 1_000
    c.runtime.run("s1", lambda s, now: delete(s, "s1", [("foo", [0, 1, 2, 3])], now), c.now)
    pairs = list(c.log[0])
    by_records = CoordinatorRuntime(c.config, discarding_writer(), c.image).load(0, c.replayed(0), c.now)
    by_bytes = CoordinatorRuntime(c.config, discarding_writer(), c.image).load_bytes(0, pairs, c.now)
    assert by_bytes.snapshot() == by_records.snapshot()
    assert by_bytes.records_replayed == by_records.records_replayed == len(pairs)
    for gid in ("g", "s0", "s1", "s2"):
        assert fetch_group(by_bytes, gid, None) == fetch_group(by_records, gid, None)
    member = by_bytes.consumer_groups["g"].members["A"]
    assert member.assigned == by_records.consumer_groups["g"].members["A"].assigned  # KIP-1251 epochs
    later = c.now + CFG.offsets_retention_ms
    assert expire_offsets(by_bytes, later) == expire_offsets(by_records, later)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_load_leaves_the_collector_as_it_found_it(enabled):
    pairs = [R.encode(R.offset_commit("g", "t", p, p, -1, "", 1)) for p in range(2000)]
    rt = CoordinatorRuntime(CFG, discarding_writer(), reader=lambda _p: pairs)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert rt.on_election(0, 1, 0)
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() == 0
    finally:
        (gc.enable if was else gc.disable)()


def test_objects_frozen_by_someone_else_stay_frozen():
    pairs = [R.encode(R.offset_commit("g", "t", p, p, -1, "", 1)) for p in range(100)]
    kept = [[i] for i in range(10)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        CoordinatorRuntime(CFG, discarding_writer(), reader=lambda _p: pairs).on_election(0, 1, 0)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_failed_load_restores_the_collector_too():
    rt = CoordinatorRuntime(CFG, discarding_writer(), reader=lambda _p: [(b"\x00\x01\x00", b"")])
    assert gc.isenabled()
    with pytest.raises(RecordError):
        rt.on_election(0, 1, 0)
    assert gc.isenabled()


def test_partition_is_the_keys_last_four_bytes():
    key = R.encode_key(R.OFFSET_COMMIT, ("g", "t", -2))
    assert struct.unpack(">i", key[-4:])[0] == -2
    shard, _ = bulk([(key, R.encode_value(R.OFFSET_COMMIT, {"offset": 1, "leader_epoch": -1, "metadata": "",
                                                             "commit_timestamp": 3}))])
    assert shard.offsets == {"g": {("t", -2): OffsetEntry(1, -1, "", 3)}}
