"""sim/replication.py: a broker's replica of an offsets partition, and a follower's fetch with
the leader epoch truncation protocol."""

from __future__ import annotations

from odradek.sim.replication import Entry, ReplicaLog, follow


def _records(*names: str) -> list[tuple[bytes, bytes]]:
    return [(n.encode(), b"v-" + n.encode()) for n in names]


def _leader(epoch: int, *names: str, log: ReplicaLog | None = None) -> ReplicaLog:
    log = log or ReplicaLog()
    log.become_leader(epoch)
    if names:
        log.append_as_leader(epoch, _records(*names))
    return log


def test_the_leader_appends_at_its_epoch_and_says_the_last_offset():
    log = _leader(3)
    assert log.append_as_leader(3, _records("a", "b")) == 1
    assert log.append_as_leader(3, _records("c")) == 2
    assert log.entries[2] == Entry(3, b"c", b"v-c")
    assert [tuple(e) for e in log.cache.entries()] == [(3, 0)]
    assert log.pairs() == _records("a", "b", "c")


def test_a_follower_copies_the_log_and_takes_the_high_watermark_capped_by_its_end():
    leader = _leader(0, "a", "b", "c")
    follower = ReplicaLog()
    got = follow(follower, leader, leader_hw=2)
    assert (got.truncated, got.copied) == (0, 3)
    assert follower.entries == leader.entries and follower.hw == 2
    assert follow(follower, leader, leader_hw=3) == (0, 0) and follower.hw == 3


def test_a_deposed_leaders_uncopied_appends_are_truncated_when_it_follows_the_new_leader():
    old = _leader(0, "a", "b")
    new = ReplicaLog()
    follow(new, old, 0)  # the new leader had "a" and "b" ...
    old.append_as_leader(0, _records("zombie-1", "zombie-2"))  # ... not what the old one wrote after
    _leader(1, "c", log=new)
    got = follow(old, new, leader_hw=2)
    assert got.truncated == 2 and got.copied == 1
    assert old.pairs() == _records("a", "b", "c")
    assert [tuple(e) for e in old.cache.entries()] == [(0, 0), (1, 2)]


def test_a_follower_that_copied_more_of_the_old_leader_than_the_new_leader_loses_the_extra():
    old = _leader(0, "a", "b", "c")
    ahead, behind = ReplicaLog(), ReplicaLog()
    follow(ahead, old, 0)
    follow(behind, old, 0)
    behind.truncate_to(1)  # as if it had fetched only the first record
    _leader(1, "d", log=behind)  # elected with one record of epoch 0
    got = follow(ahead, behind, leader_hw=1)
    assert got.truncated == 2 and ahead.pairs() == _records("a", "d")


def test_an_epoch_a_leader_never_wrote_in_is_dropped_from_the_cache_as_kafka_does():
    """A broker elected at epoch 1 that appended nothing before epoch 2 began elsewhere keeps
    an empty epoch in its cache; truncating to its own log end must drop it, or the leader
    keeps answering a DivergingEpoch for it (Kafka UnifiedLog.truncateTo: "Always truncate
    epoch cache")."""
    first = _leader(0, "a", "b")
    other = ReplicaLog()
    follow(other, first, 2)
    _leader(1, log=first)  # first leads again at epoch 1, writes nothing
    _leader(2, "c", log=other)  # ... and epoch 2 goes to the other
    got = follow(first, other, leader_hw=3)
    assert got == (0, 1) and first.pairs() == _records("a", "b", "c")
    assert [tuple(e) for e in first.cache.entries()] == [(0, 0), (2, 2)]


def test_truncation_never_raises_the_high_watermark():
    log = _leader(0, "a", "b", "c")
    log.hw = 3
    log.truncate_to(1)
    assert log.end == 1 and log.hw == 1
