"""KIP-320 position validation in the consumer (`odradek.client.validation`, and the
position epochs `fetcher.Positions` keeps for it), sans-I/O."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.client.cluster import TopicPartition
from odradek.client.errors import LogTruncationError
from odradek.client.fetcher import PartitionState, Positions, fetch_body
from odradek.client.validation import (
    Outcome,
    observe_leader,
    on_answer,
    request_body,
    require,
)
from odradek.records.codec import encode_batch

A = TopicPartition("t", 0)
B = TopicPartition("u", 3)
TS = 1_700_000_000_000


def batch(first: int, n: int, epoch: int) -> bytes:
    return encode_batch([(o, TS + o, None, b"v%d" % o) for o in range(first, first + n)], base_offset=first,
                        partition_leader_epoch=epoch)


def read(position: int = 20, epoch: int = 0, leader: int = 1, leader_epoch: int = 0) -> PartitionState:
    """A partition whose records up to `position` were read in `epoch`, under leader `leader`."""
    s = PartitionState(position=position)
    observe_leader(s, leader, leader_epoch)
    s.offset_epoch, s.epoch_of = epoch, position
    return s


# ---------------------------------------------------------------- the position's epoch


def test_positions_remember_the_epoch_of_the_last_record_handed_out():
    p = Positions()
    p.set([A])
    p.seek(A, 0)
    assert p.parts[A].position_epoch == -1  # sought: no epoch
    p.on_partition(A, 0, batch(0, 3, epoch=2) + batch(3, 2, epoch=5), 5)
    p.take(4)
    assert (p.parts[A].position, p.parts[A].position_epoch) == (4, 5)  # record 3 was written in epoch 5
    p.take(10)
    assert (p.parts[A].position, p.parts[A].position_epoch) == (5, 5)
    p.seek(A, 2)  # a seek makes the epoch moot: nothing to validate
    assert p.parts[A].position_epoch == -1


def test_a_partition_awaiting_validation_is_neither_fetched_nor_handed_out():
    p = Positions()
    p.set([A, B])
    p.seek(A, 0)
    p.seek(B, 0)
    p.on_partition(A, 0, batch(0, 2, epoch=0), 2)
    p.take(10)
    s = p.parts[A]
    assert observe_leader(s, 1, 0) is False  # first look at the leader: nothing to compare
    assert observe_leader(s, 2, 1) is True  # a new leader, newer than the records' epoch
    assert s.validating and p.fetchable() == [B]
    assert p.plan({A: 2, B: 2}) == {2: [(B, 0, -1)]}
    p.on_partition(A, 2, batch(2, 2, epoch=0), 4)  # a fetch that was in flight: dropped
    assert p.take(10) == [] and not p.buffer
    p.seek(A, 2)  # a seek ends the validation
    assert not s.validating and p.fetchable() == [A, B]
    assert p.plan({A: 2})[2] == [(A, 2, 1)]  # fetched under the new leader's epoch


def test_fetch_requests_carry_the_current_leader_epoch():
    body = fetch_body({A: 7, B: 0}, max_wait_ms=1, min_bytes=1, max_bytes=1, partition_max_bytes=1,
                      epochs={A: 4}, rack="b")
    parts = {(t["topic"], p["partition"]): p["current_leader_epoch"] for t in body["topics"] for p in t["partitions"]}
    assert parts == {("t", 0): 4, ("u", 3): -1}
    assert body["rack_id"] == "b"


# ---------------------------------------------------------------- when to validate


def test_a_leader_change_past_the_positions_epoch_starts_a_validation():
    s = read(position=20, epoch=0)
    assert observe_leader(s, 1, 0) is False  # nothing changed
    assert observe_leader(s, 3, 1) is True and s.validate_at == 20
    assert (s.leader, s.leader_epoch) == (3, 1)


def test_no_validation_when_the_records_are_the_new_epochs_or_have_none():
    s = read(position=20, epoch=1)
    assert observe_leader(s, 3, 1) is False  # read from this very epoch already
    s = read(position=20, epoch=-1)
    assert observe_leader(s, 3, 1) is False  # no epoch to compare (old message format)
    s = read(position=20, epoch=0)
    assert observe_leader(s, 3, -1) is False  # a broker that does not report epochs
    s = read(position=20, epoch=0)
    s.position = 25  # moved since (seek): the epoch belongs to another position
    assert observe_leader(s, 3, 1) is False


def test_require_validates_only_a_position_with_an_epoch():
    assert require(read(position=20, epoch=0)) is True
    s = read(position=20, epoch=0)
    s.epoch_of = 3
    assert require(s) is False and not s.validating


def test_the_request_names_the_positions_epoch_and_the_current_leader_epoch():
    a, b = read(position=20, epoch=0, leader_epoch=2), read(position=5, epoch=1, leader_epoch=3)
    assert request_body([(A, a), (B, b)]) == {"replica_id": -1, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 2, "leader_epoch": 0}]},
        {"topic": "u", "partitions": [{"partition": 3, "current_leader_epoch": 3, "leader_epoch": 1}]}]}


# ---------------------------------------------------------------- the leader's answer


def validating(position: int = 20) -> PartitionState:
    s = read(position=position, epoch=0)
    observe_leader(s, 3, 1)
    assert s.validating
    return s


def test_an_end_offset_at_or_past_the_position_keeps_it():
    for end in (20, 35):
        s = validating()
        assert on_answer(A, s, 20, ErrorCode.none, 0, end, "earliest").outcome is Outcome.VALID
        assert not s.validating and s.position == 20


def test_a_diverged_log_moves_the_position_to_the_end_offset_with_a_reset_policy():
    s = validating()
    verdict = on_answer(A, s, 20, ErrorCode.none, 0, 10, "latest")
    assert verdict.outcome is Outcome.TRUNCATED and verdict.error is None
    assert (s.position, s.position_epoch, s.validating, s.reset) == (10, 0, False, None)


def test_a_diverged_log_with_no_reset_policy_is_a_log_truncation_error():
    s = validating()
    verdict = on_answer(A, s, 20, ErrorCode.none, 0, 10, "none")
    assert verdict.outcome is Outcome.ERROR and isinstance(verdict.error, LogTruncationError)
    assert verdict.error.divergent_offsets == {A: 10} and verdict.error.code == ErrorCode.offset_out_of_range
    assert not verdict.error.retriable
    assert s.position == 20 and s.validating  # left for the application to seek


def test_an_undefined_answer_applies_the_reset_policy_or_raises():
    s = validating()
    assert on_answer(A, s, 20, ErrorCode.none, -1, -1, "earliest").outcome is Outcome.RESET
    assert (s.position, s.reset, s.validating) == (None, "earliest", False)
    s = validating()
    verdict = on_answer(A, s, 20, ErrorCode.none, -1, -1, "none")
    assert isinstance(verdict.error, LogTruncationError) and verdict.error.divergent_offsets == {A: None}


def test_errors_refresh_or_retry_and_stale_answers_are_ignored():
    s = validating()
    for code in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower):
        assert on_answer(A, s, 20, code, -1, -1, "earliest").outcome is Outcome.REFRESH
        assert s.validating
    assert on_answer(A, s, 20, ErrorCode.request_timed_out, -1, -1, "earliest").outcome is Outcome.RETRY
    verdict = on_answer(A, s, 20, ErrorCode.topic_authorization_failed, -1, -1, "earliest")
    assert verdict.outcome is Outcome.ERROR and verdict.error.code == ErrorCode.topic_authorization_failed
    s.position = 30  # sought while the request was out
    assert on_answer(A, s, 20, ErrorCode.none, 0, 10, "earliest").outcome is Outcome.STALE
    assert s.position == 30
