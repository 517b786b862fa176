"""The leader epoch cache and its checkpoint file (Kafka's LeaderEpochFileCache).

Most cases mirror Kafka's LeaderEpochFileCacheTest, so a difference in semantics
shows up here first.
"""

import errno
import logging
import os
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.log import epochs as E
from odradek.log.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from odradek.log.errors import StorageError

NO_ANSWER = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_with(*entries: tuple[int, int], path=None) -> LeaderEpochCache:
    cache = LeaderEpochCache(path)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [tuple(e) for e in cache.entries()]


# --- assign -------------------------------------------------------------------------


def test_assign_records_the_first_offset_of_an_epoch():
    cache = cache_with((2, 10))
    assert cache.latest_epoch() == 2
    assert cache.entries() == [EpochEntry(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_the_same_epoch_at_a_later_or_equal_offset_changes_nothing():
    cache = cache_with((2, 6))
    assert cache.assign(2, 10) is False
    assert cache.assign(2, 6) is False
    assert pairs(cache) == [(2, 6)]


def test_the_same_epoch_at_an_earlier_offset_moves_its_start_down():
    # Kafka's assign only ignores the latest epoch at the same or a *later* offset; an
    # earlier one replaces it (shouldTruncateIfMatchingEpochButEarlierStartingOffset).
    cache = cache_with((5, 11), (6, 12), (7, 13))
    assert cache.assign(7, 12) is True
    assert pairs(cache) == [(5, 11), (7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_a_lower_epoch_removes_the_higher_ones():
    cache = cache_with((1, 5), (2, 6))
    cache.assign(1, 7)  # epoch 1 already starts at 5: entries >= epoch 1 go first
    assert pairs(cache) == [(1, 7)]
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == NO_ANSWER


def test_a_higher_epoch_at_a_lower_offset_removes_the_entries_at_or_after_it():
    cache = cache_with((1, 0), (2, 6), (3, 9))
    cache.assign(4, 6)
    assert pairs(cache) == [(1, 0), (4, 6)]
    cache.assign(5, 0)
    assert pairs(cache) == [(5, 0)]


def test_a_new_epoch_at_the_same_offset_replaces_the_empty_one_quietly(caplog):
    cache = cache_with((2, 9))
    with caplog.at_level(logging.WARNING, logger=E.__name__):
        cache.assign(3, 9)
    assert pairs(cache) == [(3, 9)]
    assert caplog.records == []  # the replaced epoch held no data


def test_truncating_entries_that_held_data_is_logged(caplog):
    cache = cache_with((1, 0), (2, 6), (3, 9))
    with caplog.at_level(logging.WARNING, logger=E.__name__):
        cache.assign(2, 4)
    assert pairs(cache) == [(1, 0), (2, 4)]
    assert "truncated conflicting entries" in caplog.text


def test_truncating_a_later_epoch_with_data_is_logged_even_at_the_same_offset(caplog):
    cache = cache_with((1, 0), (2, 5), (3, 9))
    with caplog.at_level(logging.WARNING, logger=E.__name__):
        cache.assign(4, 5)  # epoch 2 held no data past 5, but epoch 3 did
    assert pairs(cache) == [(1, 0), (4, 5)]
    assert "truncated conflicting entries" in caplog.text


def test_a_batch_without_a_leader_epoch_is_ignored(tmp_path):
    cache = LeaderEpochCache.load(tmp_path)
    assert cache.assign(-1, 0) is False
    assert len(cache) == 0
    assert not cache.path.exists()


@pytest.mark.parametrize("epoch, start", [(0, -1), (1 << 31, 0), (0, 1 << 63)])
def test_an_entry_the_file_could_not_hold_is_refused(epoch, start):
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(epoch, start)


# --- lookups ------------------------------------------------------------------------


def test_an_empty_cache_has_no_entries_to_report():
    cache = LeaderEpochCache()
    assert cache.latest_epoch() is None
    assert cache.latest_entry() is None
    assert cache.earliest_entry() is None
    assert cache.epoch_for_offset(0) is None


def test_earliest_and_latest_entries():
    cache = cache_with((0, 10), (1, 20), (5, 30))
    assert cache.earliest_entry() == EpochEntry(0, 10)
    assert cache.latest_entry() == EpochEntry(5, 30)
    assert cache.latest_epoch() == 5


@pytest.mark.parametrize("offset, epoch", [(25, 1), (20, 1), (30, 5), (50, 5), (10, 0), (5, None)])
def test_epoch_for_offset_is_the_epoch_of_the_covering_entry(offset, epoch):
    assert cache_with((0, 10), (1, 20), (5, 30)).epoch_for_offset(offset) == epoch


# --- end_offset_for (Kafka's LeaderEpochFileCacheTest) -------------------------------


@pytest.mark.parametrize(
    "requested, log_end, expected",
    [
        (4, 17, (4, 17)),  # the latest epoch ends at the log end
        (1, 17, (0, 13)),  # no epoch 1: the one before it, ending where epoch 2 starts
        (2, 0, (2, 17)),  # an earlier epoch ends where the next one starts
        (3, 0, (2, 17)),
        (0, 0, (0, 13)),
        (5, 17, NO_ANSWER),  # above the latest epoch
        (UNDEFINED_EPOCH, 17, NO_ANSWER),
    ],
)
def test_end_offset_for(requested, log_end, expected):
    cache = cache_with((0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(requested, log_end) == expected


def test_below_the_first_epoch_the_answer_is_the_requested_epoch_and_the_first_start():
    # Kafka shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch: not UNDEFINED,
    # so a follower replicates from the leader's earliest known epoch boundary.
    cache = cache_with((5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, 0) == (4, 11)


@pytest.mark.parametrize("requested", [UNDEFINED_EPOCH, 0, 7])
def test_an_empty_cache_answers_undefined(requested):
    assert LeaderEpochCache().end_offset_for(requested, 73) == NO_ANSWER


def test_end_offsets_as_a_follower_receives_batches_of_several_epochs():
    cache = LeaderEpochCache()
    for epoch, offsets in [(0, range(3)), (1, range(3, 6)), (2, range(6, 9))]:
        for offset in offsets:
            cache.assign(epoch, offset)
    assert pairs(cache) == [(0, 0), (1, 3), (2, 6)]
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(1, 9) == (1, 6)
    assert cache.end_offset_for(0, 9) == (0, 3)


# --- truncation ---------------------------------------------------------------------

THREE = ((2, 6), (3, 8), (4, 11))


@pytest.mark.parametrize(
    "end_offset, left",
    [
        (8, [(2, 6)]),  # an epoch starting at the new end goes
        (9, [(2, 6), (3, 8)]),  # one starting before it stays
        (11, [(2, 6), (3, 8)]),
        (12, [(2, 6), (3, 8), (4, 11)]),
        (6, []),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_end(end_offset, left):
    cache = cache_with(*THREE)
    assert cache.truncate_from_end(end_offset) is (left != list(THREE))
    assert pairs(cache) == left


@pytest.mark.parametrize(
    "start_offset, left",
    [
        (8, [(3, 8), (4, 11)]),  # epochs ending before the start go
        (9, [(3, 9), (4, 11)]),  # the covering epoch now starts at the log start
        (11, [(4, 11)]),
        (15, [(4, 15)]),  # the latest epoch stays, moved up
        (6, [(2, 6), (3, 8), (4, 11)]),
        (1, [(2, 6), (3, 8), (4, 11)]),  # before the first entry: nothing to do
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(start_offset, left):
    cache = cache_with(*THREE)
    assert cache.truncate_from_start(start_offset) is (left != list(THREE))
    assert pairs(cache) == left


def test_truncate_from_start_inside_the_first_entry():
    cache = cache_with((0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert pairs(cache) == [(0, 5), (1, 7), (2, 10)]


def test_truncating_an_empty_cache_does_nothing():
    cache = LeaderEpochCache()
    assert cache.truncate_from_start(7) is False
    assert cache.truncate_from_end(7) is False
    assert len(cache) == 0


def test_clear_forgets_everything_and_writes_an_empty_file(tmp_path):
    cache = cache_with(*THREE, path=tmp_path / E.LEADER_EPOCH_FILE)
    cache.clear()
    assert len(cache) == 0
    assert cache.path.read_text() == "0\n0\n"


def test_clear_replaces_a_malformed_file_even_when_the_cache_is_empty(tmp_path):
    (tmp_path / E.LEADER_EPOCH_FILE).write_text("0\n5\n")
    cache = LeaderEpochCache.load(tmp_path)
    cache.clear()
    assert cache.path.read_text() == "0\n0\n"


# --- the checkpoint file ------------------------------------------------------------


def test_the_file_is_in_kafkas_layout(tmp_path):
    cache = LeaderEpochCache.load(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 120)
    assert cache.path == tmp_path / "leader-epoch-checkpoint"
    assert cache.path.read_bytes() == b"0\n2\n0 0\n3 120\n"


def test_every_change_is_written_and_no_op_is(tmp_path, epoch_file_writes):
    cache = LeaderEpochCache.load(tmp_path)
    cache.assign(2, 6)
    cache.assign(2, 7)  # no-op
    cache.assign(3, 8)
    cache.assign(4, 11)
    cache.truncate_from_end(11)
    cache.truncate_from_end(20)  # no-op
    cache.truncate_from_start(8)
    cache.truncate_from_start(8)  # no-op
    cache.truncate_from_start(1)  # no-op
    assert epoch_file_writes == [
        "0\n1\n2 6\n",
        "0\n2\n2 6\n3 8\n",
        "0\n3\n2 6\n3 8\n4 11\n",
        "0\n2\n2 6\n3 8\n",
        "0\n1\n3 8\n",
    ]
    assert LeaderEpochCache.load(tmp_path).entries() == [EpochEntry(3, 8)]


def test_a_cache_survives_a_restart(tmp_path):
    cache = cache_with((0, 0), (1, 7), (5, 100), (6, 2_000_000_000_000), path=tmp_path / E.LEADER_EPOCH_FILE)
    again = LeaderEpochCache.load(tmp_path)
    assert again.entries() == cache.entries()
    assert again.end_offset_for(1, 0) == (1, 100)


@pytest.mark.parametrize("text", ["", "0\n"])
def test_a_missing_or_empty_file_is_an_empty_cache(tmp_path, caplog, text):
    # Kafka creates the file empty, and reads one without a count line as empty.
    assert len(LeaderEpochCache.load(tmp_path)) == 0
    (tmp_path / E.LEADER_EPOCH_FILE).write_text(text)
    assert len(LeaderEpochCache.load(tmp_path)) == 0
    assert caplog.records == []


@pytest.mark.parametrize(
    "content",
    [
        b"1\n0\n",  # unknown version
        b"x\n0\n",
        b"0\nx\n",  # count not a number
        b"0\n2\n0 0\n",  # fewer entries than counted
        b"0\n1\n0 0\n1 5\n",  # more entries than counted
        b"0\n1\n0 zero\n",  # not an integer
        b"0\n1\n0 1_0\n",  # Python's int() would take it, Java's parseLong does not
        b"0\n1\n0 0 0\n",  # three fields
        b"0\n1\n0\n",
        b"0\n1\n0 0\n\n",  # a blank line is an entry, and a malformed one
        b"0\n2\n3 0\n2 10\n",  # epochs going down
        b"0\n2\n1 10\n2 5\n",  # offsets going down
        b"0\n2\n1 5\n1 7\n",  # an epoch twice
        b"0\n2\n1 5\n2 5\n",  # two epochs at one offset: no cache writes that
        b"0\n1\n-1 0\n",  # negative epoch
        b"0\n1\n2147483648 0\n",  # epoch beyond int32
        b"0\n1\n0 -5\n",
        b"\xff\xfe\n",  # not text
    ],
)
def test_a_malformed_file_loads_empty_with_a_warning(tmp_path, caplog, content):
    path = tmp_path / E.LEADER_EPOCH_FILE
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger=E.__name__):
        cache = LeaderEpochCache.load(tmp_path)
    assert len(cache) == 0
    assert "rebuilt from the log" in caplog.text
    cache.assign(1, 0)  # the next change replaces the bad file
    assert path.read_text() == "0\n1\n1 0\n"


def test_a_failed_write_leaves_the_cache_and_the_file_as_they_were(tmp_path, monkeypatch):
    cache = cache_with((1, 0), path=tmp_path / E.LEADER_EPOCH_FILE)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError) as failure:
        cache.assign(2, 10)
    assert failure.value.transient
    with pytest.raises(StorageError):
        cache.truncate_from_end(0)
    assert pairs(cache) == [(1, 0)]
    assert cache.path.read_text() == "0\n1\n1 0\n"
    assert [p.name for p in tmp_path.iterdir()] == [E.LEADER_EPOCH_FILE]


def test_an_in_memory_cache_writes_nothing(tmp_path, monkeypatch, epoch_file_writes):
    monkeypatch.chdir(tmp_path)
    cache = cache_with(*THREE)
    cache.truncate_from_start(9)
    cache.truncate_from_end(10)
    cache.clear()
    assert cache.path is None
    assert epoch_file_writes == []
    assert list(tmp_path.iterdir()) == []


# --- properties ---------------------------------------------------------------------


def reference_end_offset(entries: list[EpochEntry], requested: int, log_end: int) -> tuple[int, int]:
    """Kafka's endOffsetFor, spelled out over the list."""
    if requested == UNDEFINED_EPOCH or not entries or requested > entries[-1].epoch:
        return NO_ANSWER
    if requested == entries[-1].epoch:
        return requested, log_end
    floor = [e.epoch for e in entries if e.epoch <= requested]
    higher = next(e for e in entries if e.epoch > requested)
    return (floor[-1] if floor else requested), higher.start_offset


def reference_epoch_for(entries: list[EpochEntry], offset: int) -> int | None:
    covering = [e.epoch for e in entries if e.start_offset <= offset]
    return covering[-1] if covering else None


operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(-1, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 70)),
        st.tuples(st.just("start"), st.integers(-1, 70)),
        st.tuples(st.just("clear")),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_any_history_keeps_the_cache_monotonic_and_answers_like_kafka(ops):
    cache = LeaderEpochCache()
    for op, *args in ops:
        if op == "assign":
            epoch, start = args
            cache.assign(epoch, start)
            if epoch >= 0:  # the new epoch is the latest, and covers its start
                assert cache.latest_epoch() == epoch
                assert cache.epoch_for_offset(start) == epoch
        elif op == "end":
            cache.truncate_from_end(args[0])
            if args[0] >= 0:
                assert all(e.start_offset < args[0] for e in cache.entries())
        elif op == "start":
            before = cache.entries()
            cache.truncate_from_start(args[0])
            if before and before[0].start_offset <= args[0]:
                assert cache.earliest_entry() == (reference_epoch_for(before, args[0]), args[0])
        else:
            cache.clear()
        entries = cache.entries()
        for a, b in pairwise(entries):
            assert a.epoch < b.epoch
            assert a.start_offset < b.start_offset
        for requested in range(-1, 14):
            assert cache.end_offset_for(requested, 99) == reference_end_offset(entries, requested, 99)
        for offset in range(0, 70, 7):
            assert cache.epoch_for_offset(offset) == reference_epoch_for(entries, offset)
