"""The hot-path counters (observability/stats.py) and what a broker counts in process."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

from kio.schema.errors import ErrorCode

from odradek.broker.broker import Broker
from odradek.config import BrokerConfig
from odradek.observability.stats import Histogram, error_codes
from tests.wire import request_frame


def test_histogram_buckets_sum_and_max():
    h = Histogram((0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.005, 0.5, 0.05):
        h.observe(v)
    assert h.count == 5
    assert abs(h.sum - 0.5565) < 1e-12
    assert h.max == 0.5
    # Prometheus buckets are cumulative and "le": a value on a bound falls in that bucket.
    assert h.cumulative() == [("0.001", 2), ("0.01", 3), ("0.1", 4), ("+Inf", 5)]


def test_error_codes_walks_top_level_entries_and_partitions():
    produce = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0},
                                                                    {"index": 1, "error_code": 6}]}]}
    assert error_codes(produce) == {0: 1, 6: 1}
    heartbeat = {"error_code": ErrorCode.fenced_member_epoch, "member_id": "m"}
    assert error_codes(heartbeat) == {ErrorCode.fenced_member_epoch: 1}
    offsets = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}], "error_code": 0}
    assert error_codes(offsets) == {0: 2}
    assert error_codes({"throttle_time_ms": 0}) == {}


def _broker(tmp_path: Path, metrics: str) -> Broker:
    return Broker(BrokerConfig(data_dir=tmp_path, metrics_listener=metrics))


def test_a_broker_with_metrics_off_counts_nothing(tmp_path):
    broker = _broker(tmp_path, "")
    assert broker.stats is None
    assert broker.coordinator.runtime.stats is None
    frame = request_frame(18, 3, {"client_software_name": "t", "client_software_version": "1"})[4:]
    assert asyncio.run(broker.handle_frame(frame)) is not None
    broker.close()


def test_a_broker_with_metrics_on_counts_requests_and_their_errors(tmp_path):
    broker = _broker(tmp_path, "127.0.0.1:0")
    broker.create_topic("t", 2, {})
    frame = request_frame(3, 9, {"topics": [{"name": "t"}, {"name": "missing-topic"}],
                                 "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                                 "include_topic_authorized_operations": False})[4:]
    for _ in range(3):
        asyncio.run(broker.handle_frame(frame))
    stats = broker.stats
    assert stats.requests[(3, 9)].latency.count == 3
    # Per request: the response's top-level code, topic t's and its two partitions' are NONE.
    assert stats.errors[(3, ErrorCode.none)] == 3 * 4
    assert stats.errors[(3, ErrorCode.unknown_topic_or_partition)] == 3
    assert stats.coordinator.partition_load_time.count == 50  # every offsets shard loaded once
    broker.close()


def test_coordinator_sensors_count_writes_not_read_only_operations():
    from odradek.coordinator import records as R
    from odradek.coordinator.config import CoordinatorConfig
    from odradek.coordinator.runtime import CoordinatorRuntime, discarding_writer
    from odradek.coordinator.shard import Result
    from odradek.observability.stats import CoordinatorStats

    stats = CoordinatorStats()
    rt = CoordinatorRuntime(CoordinatorConfig(), discarding_writer(), stats=stats)
    rt.load(0, [], 0)
    partition_of = rt.partition_for
    group = next(g for g in (f"g{i}" for i in range(1000)) if partition_of(g) == 0)
    # An operation that writes nothing (a steady heartbeat) never enters the purgatory.
    assert rt.run(group, lambda _s, _now: Result([], "read"), 1) == "read"
    assert stats.event_processing_time.count == 1
    assert stats.event_purgatory_time.count == 0 and stats.batch_flush_time.count == 0
    # A write (a group epoch bump) is flushed, counted as a rebalance, and committed at once here.
    assert rt.run(group, lambda _s, _now: Result([R.group_epoch(group, 1)], "bumped"), 2) == "bumped"
    assert stats.event_processing_time.count == 2
    assert stats.batch_flush_time.count == 1
    assert stats.event_purgatory_time.count == 1 and stats.event_purgatory_time.max == 0.0
    assert stats.consumer_rebalances == 1


def test_responses_are_walked_only_where_their_schema_keeps_entries():
    from odradek.observability.stats import count_errors, entry_lists

    assert entry_lists(68, 1) == ()  # ConsumerGroupHeartbeat: a top-level code only
    assert entry_lists(0, 9) == ("responses",)  # Produce: topics, then partitions
    assert entry_lists(999, 0) is None  # unknown to kio: every value is looked at
    produce = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0},
                                                                    {"index": 1, "error_code": 6}]}],
               "throttle_time_ms": 0}
    planned, walked = defaultdict(int), defaultdict(int)
    count_errors(planned, produce, entry_lists(0, 9))
    count_errors(walked, produce)
    assert planned == walked == {0: 1, 6: 1}


def test_log_flushes_are_timed_whether_by_flush_messages_or_by_flush_ms(tmp_path):
    from odradek.records.codec import Record, encode_batch

    broker = _broker(tmp_path, "127.0.0.1:0")
    broker.create_topic("every", 1, {"flush.messages": "1"})  # each append carries its fsync
    broker.create_topic("timed", 1, {"flush.ms": "1000"})
    flushes = broker.stats.log_flush

    def produce(topic: str) -> None:
        batch = encode_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
        frame = request_frame(0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})[4:]
        assert asyncio.run(broker.handle_frame(frame)) is not None

    before = flushes.count
    produce("every")
    produce("every")
    assert flushes.count == before + 2
    produce("timed")
    assert flushes.count == before + 2  # not yet due
    broker.tick(broker.clock() + 60_000)  # flush.ms has passed: the tick flushes it
    assert flushes.count == before + 3
    assert flushes.sum > 0
    broker.close()


def test_the_native_histogram_bins_as_its_python_twin():
    import math
    import random

    import pytest

    from odradek.observability import _hist
    from odradek.observability.stats import EVENT_BUCKETS, PyHistogram

    assert issubclass(Histogram, _hist.Histogram)  # the package build compiled it
    rng = random.Random(7)
    values = [0.0, 1e-9, 30.0, 1e6] + list(EVENT_BUCKETS) + [rng.lognormvariate(-9, 3) for _ in range(5000)]
    native, twin = Histogram(EVENT_BUCKETS), PyHistogram(EVENT_BUCKETS)
    for v in values:
        native.observe(v)
        twin.observe(v)
    assert native.counts == twin.counts and native.count == len(values)
    assert native.cumulative() == twin.cumulative()
    assert math.isclose(native.sum, twin.sum, rel_tol=1e-12) and native.max == twin.max == 1e6
    for h in (native, twin):
        with pytest.raises(ValueError):
            h.observe(float("nan"))
    with pytest.raises(ValueError):
        Histogram((0.1, 0.01))  # bounds must ascend
    with pytest.raises(TypeError):
        native.observe("1")
    assert native.count == len(values)  # refusals count nothing


def test_the_native_request_meter_counts_as_its_python_twin():
    """The per-request accounting in C (_hist.RequestMeter) against PyRequestMeter: the same
    buckets, sums and error codes for a mix of API versions and response shapes, codes
    outside the meter's in-place range included; refusals count nothing."""
    import math
    import random

    import pytest

    from odradek.observability import _hist
    from odradek.observability.stats import (
        LATENCY_BUCKETS,
        PyRequestMeter,
        RequestMeter,
        entry_codes,
        entry_lists,
    )

    assert RequestMeter is _hist.RequestMeter  # the package build compiled it
    rng = random.Random(11)
    produce = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0},
                                                                    {"index": 1, "error_code": 6}]}],
               "throttle_time_ms": 0}
    answers = [
        (68, 1, {"error_code": ErrorCode.fenced_member_epoch, "member_id": "m"}),  # top level only
        (68, 0, {"error_code": 0, "assignment": None}),
        (0, 9, produce),  # entries and their partitions
        (0, 9, {"responses": [], "error_code": None}),
        (18, 3, {"error_code": 35}),
        (18, 3, {"error_code": 300}),  # outside the in-place range: kept by value
        (18, 3, {"error_code": -1}),
        (999 % 256, 0, {"error_code": 1, "x": [{"error_code": 2}]}),  # unknown to kio: every value walked
        (3, 12, None),  # no body (an answer-less request): latency only
        (3, 12, b"raw"),
    ]
    native = RequestMeter(LATENCY_BUCKETS, entry_lists, entry_codes)
    twin = PyRequestMeter(LATENCY_BUCKETS, entry_lists, entry_codes)
    for _ in range(2000):
        api_key, version, result = rng.choice(answers)
        seconds = rng.lognormvariate(-9, 3)
        native.record(api_key, version, seconds, result)
        twin.record(api_key, version, seconds, result)
    ns, ts = native.slots(), twin.slots()
    assert [s[:3] for s in ns] == [s[:3] for s in ts] and len(ns) == 6
    for n, t in zip(ns, ts):
        assert math.isclose(n[3], t[3], rel_tol=1e-12) and n[4] == t[4]
        assert n[5] == t[5]
    by_key = {(a, v): errors for a, v, _c, _s, _m, errors in ns}
    assert set(by_key[(0, 9)]) == {0, 6} and by_key[(18, 3)].keys() == {35, 300, -1}
    assert by_key[(3, 12)] == {}
    before = native.slots()
    for meter in (native, twin):
        with pytest.raises(ValueError):
            meter.record(68, 1, float("nan"), {})
        with pytest.raises(ValueError):
            meter.record(256, 0, 0.001, {})
        with pytest.raises(ValueError):
            meter.record(68, 64, 0.001, {})
    with pytest.raises(TypeError):
        native.record(68, 1, "1", {})
    assert native.slots() == before


def test_the_native_event_timer_times_as_its_python_twin():
    import pytest

    from odradek.observability.stats import EVENT_BUCKETS, EventTimer, PyEventTimer, PyHistogram

    native = EventTimer(Histogram(EVENT_BUCKETS), Histogram(EVENT_BUCKETS))
    twin = PyEventTimer(PyHistogram(EVENT_BUCKETS), PyHistogram(EVENT_BUCKETS))
    for started, ended, queued_at in ((1.0, 1.00002, 0.9999), (2.0, 2.5, None), (3.0, 3.001, 3.5)):
        native.record(started, ended, queued_at)
        twin.record(started, ended, queued_at)
    for a, b in ((native.processing, twin.processing), (native.queue, twin.queue)):
        assert a.counts == b.counts and a.max == b.max
    assert native.processing.count == 3
    assert native.queue.count == 2  # a timer's operation (queued_at None) has no queue time
    assert native.queue.max == 1.0 - 0.9999  # the clock going backwards (3.0 < 3.5) counts 0
    for timer in (native, twin):
        with pytest.raises(ValueError):
            timer.record(1.0, float("nan"), None)
    with pytest.raises(TypeError):
        EventTimer(PyHistogram(), PyHistogram())  # the native timer writes native histograms only
