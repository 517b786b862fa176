"""What the broker counts while it serves: plain integers and bucket arrays, nothing else.

Theory of operation: the request path, the produce and fetch handlers, the connection
driver, the replica manager and the coordinator runtime add to a `BrokerStats` as they
work (an integer add, or one call into the native half in _hist.c: a histogram sample, a
request's latency and error code, a coordinator operation's two times); nothing is
formatted, locked or allocated per event. The Prometheus side (collector.py) turns these into
metric families when /metrics is scraped, together with what is read off the broker's
state at that moment (group counts, under-replicated partitions, lag). Keeping the hot
path free of prometheus-client's per-child locks is what keeps the cost of metrics
under the 5 % the observability issue allows (BENCHMARKS.md "Metrics").

Units are seconds and bytes, as Prometheus names them (`_seconds`, `_bytes`); the
mapping to Kafka's JMX names, which use milliseconds, is in collector.py.

A broker started with `metrics.listener` empty has no BrokerStats (`broker.stats is
None`) and its hot paths skip every count.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import fields, is_dataclass
from time import perf_counter
from types import NoneType, UnionType
from typing import get_args, get_origin

from ..protocol.messages import response_class

# Request latencies, in seconds: from 50 µs (an ApiVersions) to the 30 s of a long poll
# or a join that waits for its group.
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Coordinator event, flush and load times: shorter (KIP-848 reports p50/p99/p999/max in ms).
EVENT_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Reads:
    """What both histograms answer when read (scrape time, tests)."""

    __slots__ = ()

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (upper bound as text, observations at or below it)."""
        out, total = [], 0
        counts = self.counts
        for bound, n in zip(self.bounds, counts):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + counts[-1]))
        return out


class PyHistogram(_Reads):
    """Counts per bucket (not cumulative; the collector accumulates), their sum and the
    largest value seen (KIP-848's `-max` sensors). The pure-Python twin of the native
    `Histogram` (_hist.c), which the tests hold it to; used when the extension is missing."""

    __slots__ = ("bounds", "counts", "sum", "max")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(bounds) + 1)  # the last is +Inf
        self.sum = 0.0
        self.max = 0.0

    def observe(self, value: float) -> None:
        if value != value:
            raise ValueError("NaN observed")
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        if value > self.max:
            self.max = value


class PyEventTimer:
    """The coordinator runtime's timing of one operation into two histograms: the twin of
    the native `EventTimer` (_hist.c)."""

    __slots__ = ("processing", "queue")

    def __init__(self, processing, queue) -> None:
        self.processing, self.queue = processing, queue

    def record(self, started: float, ended: float, queued_at: float | None) -> None:
        if started != started or ended != ended or (queued_at is not None and queued_at != queued_at):
            raise ValueError("NaN observed")
        self.processing.observe(ended - started)
        if queued_at is not None:
            self.queue.observe(started - queued_at if started > queued_at else 0.0)


class PyRequestMeter:
    """Latency buckets and error codes per API key and version: the twin of the native
    `RequestMeter` (_hist.c), which the tests hold it to. `planner(api_key, version)` says
    where a version's responses keep entries (`entry_lists`); `walker(result, lists)` counts
    the codes found there (`entry_codes`)."""

    def __init__(self, bounds: tuple[float, ...], planner, walker) -> None:
        self.bounds = tuple(bounds)
        self._planner, self._walker = planner, walker
        self._slots: dict[tuple[int, int], tuple[PyHistogram, dict, object]] = {}

    def record(self, api_key: int, version: int, seconds: float, result) -> None:
        if not (0 <= api_key < 256 and 0 <= version < 64):
            raise ValueError(f"API key {api_key} version {version} out of range")
        slot = self._slots.get((api_key, version))
        if slot is None:
            slot = self._slots[(api_key, version)] = (PyHistogram(self.bounds), defaultdict(int),
                                                      self._planner(api_key, version))
        latency, errors, lists = slot
        latency.observe(seconds)
        if type(result) is dict:
            code = result.get("error_code")
            if code is not None:
                errors[code] += 1
            if lists is None or lists:
                for code, n in self._walker(result, lists).items():
                    if code is not None:
                        errors[code] += n

    def slots(self) -> list[tuple[int, int, list[int], float, float, dict]]:
        return [(a, v, list(h.counts), h.sum, h.max, {c: n for c, n in e.items() if n})
                for (a, v), (h, e, _) in sorted(self._slots.items())]


try:
    from ._hist import EventTimer as _NativeEventTimer
    from ._hist import Histogram as _NativeHistogram
    from ._hist import RequestMeter as _NativeRequestMeter
except ImportError:  # pragma: no cover - the package build compiles it
    _NativeHistogram = _NativeEventTimer = _NativeRequestMeter = None

if _NativeHistogram is not None:

    class Histogram(_Reads, _NativeHistogram):
        """PyHistogram's behaviour with `observe` in C (_hist.c): a sample costs one method
        call, where binning it in CPython cost about 140 ns, a visible share of a 30 µs
        heartbeat that carries three. (Binning later in bulk was tried twice and dropped: a
        list binned by bisect in C loops cost 157 ns a sample; an array binned by numpy was
        no cheaper within the bench's noise. BENCHMARKS.md "Metrics".)"""

        __slots__ = ()

        def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
            super().__init__(bounds)

    EventTimer = _NativeEventTimer
    RequestMeter = _NativeRequestMeter

else:  # pragma: no cover
    Histogram = PyHistogram  # type: ignore[misc,assignment]
    EventTimer = PyEventTimer  # type: ignore[misc,assignment]
    RequestMeter = PyRequestMeter  # type: ignore[misc,assignment]


class RequestStats:
    """One API version's requests as read off the meter: how many, how long (Kafka's
    RequestsPerSec and TotalTimeMs, per request name and version) and the error codes
    answered (code -> answers carrying it)."""

    __slots__ = ("latency", "errors")

    def __init__(self, latency: PyHistogram, errors: dict[int, int]) -> None:
        self.latency = latency
        self.errors = errors

def entry_lists(api_key: int, version: int) -> tuple[str, ...] | None:
    """The top-level fields of the API version's response schema (kio's) that hold lists
    of entries, the only places besides the top level where `count_errors` finds codes;
    None when the schema cannot be had (then every value of a response is looked at).
    Known once per API version, so a heartbeat's response is not walked key by key."""
    try:
        cls = response_class(api_key, version)
        out = []
        for f in fields(cls):
            t = f.type
            if get_origin(t) is UnionType:  # Optional[tuple[...]]
                t = next((a for a in get_args(t) if a is not NoneType), t)
            args = get_args(t) if get_origin(t) is tuple else ()
            if len(args) == 2 and args[1] is Ellipsis and is_dataclass(args[0]):
                out.append(f.name)
        return tuple(out)
    except Exception:  # an API kio does not describe: walk every value instead
        return None


class TopicStats:
    """Kafka's BrokerTopicMetrics for one topic (BytesInPerSec, MessagesInPerSec,
    BytesOutPerSec) plus the records served, which Kafka does not count."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out", "messages_out", "replication_bytes_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.messages_out = 0
        self.replication_bytes_out = 0


class BrokerStats:
    def __init__(self, clock=perf_counter) -> None:
        self.clock = clock
        # Per API key and version: latency buckets and error codes (Kafka's RequestsPerSec,
        # TotalTimeMs, ErrorsPerSec). `request(api_key, version, seconds, result)` is the
        # meter's own method, in C: no Python frame per request (_hist.c says why).
        self.meter = RequestMeter(LATENCY_BUCKETS, entry_lists, entry_codes)
        self.request = self.meter.record
        self.topics: dict[str, TopicStats] = {}
        # Connections (Kafka's socket-server-metrics, per listener).
        self.connections_created: dict[str, int] = defaultdict(int)
        self.connections_closed: dict[str, int] = defaultdict(int)
        self.connections_refused = 0
        self.auth_succeeded: dict[tuple[str, str], int] = defaultdict(int)  # (listener, mechanism)
        self.auth_failed: dict[tuple[str, str], int] = defaultdict(int)
        # Replication (Kafka's ReplicaManager: IsrShrinksPerSec, IsrExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leaderships_taken = 0
        self.produce_waiting = 0  # acks=all produces parked for the high watermark
        self.log_flush = Histogram(EVENT_BUCKETS)  # Kafka's LogFlushRateAndTimeMs
        self.coordinator = CoordinatorStats(clock)

    # --- the request path ---------------------------------------------------------------

    @property
    def requests(self) -> dict[tuple[int, int], RequestStats]:
        """(api key, version) -> its RequestStats (scrape time, tests)."""
        out = {}
        for api_key, version, counts, total, largest, errors in self.meter.slots():
            latency = PyHistogram(self.meter.bounds)
            latency.counts, latency.sum, latency.max = counts, total, largest
            out[(api_key, version)] = RequestStats(latency, errors)
        return out

    @property
    def errors(self) -> dict[tuple[int, int], int]:
        """(api key, error code) -> answers carrying it, over every version (Kafka's
        ErrorsPerSec is per request name and error)."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for api_key, _version, _counts, _sum, _max, errors in self.meter.slots():
            for code, n in errors.items():
                out[(api_key, code)] += n
        return out

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def produced(self, topic: str, nbytes: int, records: int) -> None:
        stats = self.topic(topic)
        stats.bytes_in += nbytes
        stats.messages_in += records

    def fetched(self, topic: str, nbytes: int, records: int, follower: bool) -> None:
        stats = self.topic(topic)
        if follower:
            stats.replication_bytes_out += nbytes
        else:
            stats.bytes_out += nbytes
            stats.messages_out += records


class CoordinatorStats:
    """KIP-848 "Broker Metrics", group-coordinator-metrics: the sensors the runtime feeds.
    The gauges (group counts by protocol and state, partition counts by state) are read
    off the runtime when scraped."""

    def __init__(self, clock=perf_counter) -> None:
        self.clock = clock
        self.consumer_rebalances = 0  # consumer-group-rebalance-count: group epoch bumps written
        self.classic_rebalances = 0  # classic-group-completed-rebalance-count: generations written
        self.event_queue_time = Histogram(EVENT_BUCKETS)
        self.event_processing_time = Histogram(EVENT_BUCKETS)
        self.event_purgatory_time = Histogram(EVENT_BUCKETS)
        self.batch_flush_time = Histogram(EVENT_BUCKETS)
        self.partition_load_time = Histogram(EVENT_BUCKETS)
        # event(started, ended, queued_at): an operation ran from `started` to `ended`: its
        # processing time, and the time since its request started (`queued_at`) as its queue
        # time (odradek's runtime runs on the event loop, so what an operation waits for is
        # the loop, not a queue of its own; timer-driven operations have no request, None).
        # One native call for both: this runs per heartbeat.
        self.event = EventTimer(self.event_processing_time, self.event_queue_time).record


ENTRY_LISTS = ("partitions", "partition_responses", "partition_results", "results")


def count_errors(errors: dict, result: dict, lists: tuple[str, ...] | None = None) -> None:
    """Add every error code in a response body to `errors[code]`: the top level's and each
    entry's, down to partitions (what Kafka's AbstractResponse.errorCounts counts, NONE
    included). `lists`: the keys that can hold entries (`entry_lists`), None to look at
    every value. Plain loops, not generators: this runs on every request."""
    code = result.get("error_code")
    if code is not None:
        errors[code] += 1
    if lists is None or lists:
        count_entry_errors(errors, result, lists)


def count_entry_errors(errors: dict, result: dict, lists: tuple[str, ...] | None) -> None:
    """`count_errors` below the top level: entries and their partitions."""
    for value in (result.values() if lists is None else [result.get(k) for k in lists]):
        if type(value) is not list or not value or type(value[0]) is not dict:
            continue
        for item in value:
            code = item.get("error_code")
            if code is not None:
                errors[code] += 1
            for key in ENTRY_LISTS:
                parts = item.get(key)
                if type(parts) is list:
                    for p in parts:
                        if type(p) is dict:
                            code = p.get("error_code")
                            if code is not None:
                                errors[code] += 1
                    break


def entry_codes(result: dict, lists: tuple[str, ...] | None) -> dict[int, int]:
    """code -> how many times it appears in `result`'s entries (not its top level): the
    meter's walker, called only for API versions whose responses keep entries."""
    counted: dict = defaultdict(int)
    count_entry_errors(counted, result, lists)
    return counted


def error_codes(result: dict) -> dict[int, int]:
    """code -> how many times `count_errors` counts it in `result` (for tests and tools)."""
    counted: dict = defaultdict(int)
    count_errors(counted, result)
    return dict(counted)
