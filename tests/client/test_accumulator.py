"""Producer batching (`odradek.client.accumulator.Accumulator`), sans-I/O: time is passed in."""

from __future__ import annotations

from odradek.client.accumulator import RECORD_OVERHEAD, Accumulator
from odradek.client.cluster import TopicPartition

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def _append(acc: Accumulator, tp=A, value=b"v", now=0.0, handle=None, key=None, headers=()) -> bool:
    return acc.append(tp, 1_700_000_000_000, key, value, headers, handle, now)


def _values(batch) -> list:
    return [r[3] for r in batch.records]


def test_nothing_ready_before_linger_then_ready_at_linger():
    acc = Accumulator(linger_ms=10)
    assert not _append(acc, now=100)
    assert acc.ready(100) == ([], 110)
    assert acc.ready(109.9) == ([], 110)
    assert acc.ready(110) == ([A], None)


def test_linger_zero_is_ready_at_once():
    acc = Accumulator(linger_ms=0)
    _append(acc, now=5)
    assert acc.ready(5) == ([A], None)


def test_wake_time_is_the_earliest_linger_deadline():
    acc = Accumulator(linger_ms=10)
    _append(acc, A, now=100)
    _append(acc, B, now=103)
    assert acc.ready(101) == ([], 110)
    ready, wake = acc.ready(111)
    assert ready == [A] and wake == 113


def test_batch_size_splits_batches_and_full_batches_are_ready():
    size = RECORD_OVERHEAD + 10
    acc = Accumulator(batch_size=3 * size, linger_ms=1000)
    values = [b"%010d" % i for i in range(7)]
    became_full = [_append(acc, value=v, now=0) for v in values]
    # The third record fills the first batch; the seventh starts a third batch.
    assert became_full == [False, False, True, False, False, True, False]
    assert acc.ready(0) == ([A], None)  # a full batch does not wait for linger
    b1 = acc.drain(A)
    assert _values(b1) == values[:3] and b1.size == 3 * size
    acc.complete(b1)
    b2 = acc.drain(A)
    assert _values(b2) == values[3:6]
    acc.complete(b2)
    assert acc.ready(0) == ([], 1000)  # the last, partial batch waits for linger
    assert _values(acc.drain(A)) == values[6:]


def test_record_would_overflow_batch_starts_a_new_one():
    size = RECORD_OVERHEAD + 10
    acc = Accumulator(batch_size=2 * size + 5, linger_ms=1000)
    _append(acc, value=b"x" * 10)
    _append(acc, value=b"x" * 10)
    # 2*size fits; a third would not: the open batch becomes full and a new one opens.
    assert _append(acc, value=b"x" * 10) is True
    assert len(_values(acc.drain(A))) == 2


def test_oversized_record_gets_a_batch_of_its_own():
    acc = Accumulator(batch_size=100, linger_ms=1000)
    _append(acc, value=b"small")
    assert _append(acc, value=b"x" * 500) is True
    _append(acc, value=b"after")
    b1 = acc.drain(A)
    acc.complete(b1)
    b2 = acc.drain(A)
    acc.complete(b2)
    assert _values(b1) == [b"small"] and _values(b2) == [b"x" * 500]
    assert _values(acc.drain(A)) == [b"after"]


def test_keys_and_headers_count_towards_batch_size():
    acc = Accumulator(batch_size=10_000)
    _append(acc, key=b"k" * 100, value=b"v" * 200, headers=(("h", b"x" * 50),))
    (batch,) = [acc.drain(A)]
    assert batch.size == RECORD_OVERHEAD + 100 + 200 + 1 + 50 + 4


def test_one_in_flight_batch_per_partition():
    acc = Accumulator(batch_size=RECORD_OVERHEAD + 1, linger_ms=0)
    for v in (b"1", b"2", b"3"):
        _append(acc, A, value=v)
    _append(acc, B, value=b"b")
    assert sorted(acc.ready(0)[0]) == [A, B]
    first = acc.drain(A)
    assert acc.ready(0)[0] == [B]  # A has a batch in flight: its next waits
    acc.drain(B)
    assert acc.ready(0)[0] == []
    acc.complete(first)
    assert acc.ready(0)[0] == [A]
    assert _values(acc.drain(A)) == [b"2"]


def test_drained_batch_takes_no_more_records():
    acc = Accumulator(linger_ms=0)
    _append(acc, value=b"1")
    batch = acc.drain(A)
    _append(acc, value=b"2")
    assert _values(batch) == [b"1"]
    acc.complete(batch)
    assert _values(acc.drain(A)) == [b"2"]


def test_reenqueue_puts_the_batch_back_at_the_head_in_order():
    acc = Accumulator(batch_size=RECORD_OVERHEAD + 1, linger_ms=0)
    for v in (b"1", b"2", b"3"):
        _append(acc, value=v)
    first = acc.drain(A)
    first.encoded = b"ENCODED"
    _append(acc, value=b"4")  # appended while the first batch is in flight
    acc.reenqueue(first)  # retriable failure, no backoff
    assert first.attempts == 1
    order = []
    while True:
        ready, _ = acc.ready(0)
        if not ready:
            break
        b = acc.drain(A)
        order += _values(b)
        acc.complete(b)
    assert order == [b"1", b"2", b"3", b"4"]
    assert first.encoded == b"ENCODED"  # a retry resends the same bytes


def test_reenqueued_batch_accepts_no_appends():
    acc = Accumulator(linger_ms=1000)
    _append(acc, value=b"1")
    acc.flushing = True
    batch = acc.drain(A)
    batch.encoded = b"E"
    acc.flushing = False
    acc.reenqueue(batch)
    _append(acc, value=b"2")
    assert _values(acc.drain(A)) == [b"1"]  # the retried batch is unchanged


def test_reenqueue_respects_retry_backoff():
    acc = Accumulator(linger_ms=0)
    _append(acc, now=0)
    b = acc.drain(A)
    acc.reenqueue(b, retry_at=250)
    assert acc.ready(100) == ([], 250)
    assert acc.ready(249) == ([], 250)
    assert acc.ready(250) == ([A], None)


def test_backoff_of_one_partition_does_not_block_another():
    acc = Accumulator(linger_ms=0)
    _append(acc, A)
    b = acc.drain(A)
    acc.reenqueue(b, retry_at=500)
    _append(acc, B)
    assert acc.ready(10) == ([B], 500)


def test_retried_batch_ignores_linger():
    acc = Accumulator(linger_ms=1000)
    _append(acc, now=0)
    acc.flushing = True
    b = acc.drain(A)
    acc.flushing = False
    acc.reenqueue(b, retry_at=10)
    assert acc.ready(10) == ([A], None)  # a retry does not wait for linger again


def test_expire_removes_old_queued_batches_only():
    acc = Accumulator(batch_size=RECORD_OVERHEAD + 1, linger_ms=0)
    _append(acc, A, value=b"a1", now=0)
    _append(acc, A, value=b"a2", now=50)
    _append(acc, B, value=b"b1", now=0)
    inflight = acc.drain(B)
    assert acc.records == 3
    expired = acc.expire(older_than_ms=10)
    assert [_values(b) for b in expired] == [[b"a1"]]
    assert acc.records == 2  # b1 (in flight) and a2 remain
    assert _values(acc.drain(A)) == [b"a2"]
    acc.complete(inflight)
    assert acc.records == 1


def test_expire_skips_partitions_with_a_batch_in_flight():
    acc = Accumulator(batch_size=RECORD_OVERHEAD + 1, linger_ms=0)
    _append(acc, A, value=b"1", now=0)
    _append(acc, A, value=b"2", now=0)
    acc.drain(A)
    # The queued batch behind the in-flight one must not expire out of order.
    assert acc.expire(older_than_ms=100) == []


def test_flushing_makes_every_partition_ready():
    acc = Accumulator(linger_ms=10_000)
    _append(acc, A, now=0)
    _append(acc, B, now=0)
    assert acc.ready(1) == ([], 10_000)
    acc.flushing = True
    assert sorted(acc.ready(1)[0]) == [A, B]
    acc.flushing = False
    assert acc.ready(1)[0] == []


def test_records_counter_tracks_appended_minus_completed():
    acc = Accumulator(batch_size=RECORD_OVERHEAD + 1, linger_ms=0)
    assert acc.records == 0
    for v in (b"1", b"2", b"3"):
        _append(acc, value=v)
    _append(acc, B, value=b"4")
    assert acc.records == 4
    b = acc.drain(A)
    assert acc.records == 4  # in flight is still outstanding
    acc.reenqueue(b)
    assert acc.records == 4
    b = acc.drain(A)
    acc.complete(b)
    assert acc.records == 3
    aborted = acc.abort_all()
    assert sorted(v for batch in aborted for v in _values(batch)) == [b"2", b"3", b"4"]
    assert acc.records == 0
    assert acc.queued_partitions() == 0


def test_complete_forgets_empty_queues():
    acc = Accumulator(linger_ms=0)
    _append(acc)
    assert acc.queued_partitions() == 1
    b = acc.drain(A)
    assert acc.queued_partitions() == 0
    acc.complete(b)
    assert acc.ready(0) == ([], None)


def test_handles_travel_with_their_records():
    acc = Accumulator(linger_ms=0)
    for i in range(3):
        _append(acc, value=b"%d" % i, handle=f"h{i}")
    b = acc.drain(A)
    assert b.handles == ["h0", "h1", "h2"]
    assert [r[0] for r in b.records] == [0, 1, 2]  # offset deltas
