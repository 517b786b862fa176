"""The broker's metrics as Prometheus metric families, built when /metrics is scraped.

Theory of operation: prometheus-client's custom-collector interface (`collect()` yields
metric families) over two sources: the counters the broker keeps while it serves
(stats.py), and what is read off its state at the moment of the scrape (groups and
their states, coordinator shards, partitions, lag). Nothing here runs on a request's
path. `collect` must run on the broker's event loop thread, where that state lives
(exporter.py marshals the scrape there).

KIP-848 "Broker Metrics" map onto Prometheus names as follows (Kafka's JMX names are
`kafka.server:type=group-coordinator-metrics,name=...`); a Kafka sensor with -avg/-max/
-p50/-p99/-p999 becomes one histogram in seconds (`histogram_quantile` gives the
percentiles, `_sum / _count` the average) plus a `_max_seconds` gauge:

    group-count{protocol}                odradek_group_coordinator_group_count{protocol="consumer"|"classic"}
    consumer-group-count{state}          odradek_group_coordinator_consumer_group_count{state}
    (classic-group-count{state})         odradek_group_coordinator_classic_group_count{state}
    partition-count{state}               odradek_group_coordinator_partition_count{state="loading"|"active"|"failed"}
    event-queue-size                     odradek_group_coordinator_event_queue_size
    consumer-group-rebalance-rate/count  odradek_group_coordinator_consumer_group_rebalances_total (rate())
    (classic-group-completed-rebalance)  odradek_group_coordinator_classic_group_rebalances_total
    partition-load-time-avg/max          odradek_group_coordinator_partition_load_time_seconds (+ _max_seconds)
    thread-idle-ratio-avg                odradek_group_coordinator_thread_idle_ratio
    event-queue-time-ms-*                odradek_group_coordinator_event_queue_time_seconds
    event-processing-time-ms-*           odradek_group_coordinator_event_processing_time_seconds
    event-purgatory-time-ms-*            odradek_group_coordinator_event_purgatory_time_seconds
    batch-flush-time-ms-*                odradek_group_coordinator_batch_flush_time_seconds

What odradek's runtime is differs from Kafka's in one place: it has no event queue and
no threads of its own; operations run on the broker's event loop as their requests
arrive. So event-queue-size counts the requests being handled (started, not answered:
long polls, joins waiting for their group, writes waiting for replication), the queue
time runs from a request's start to its coordinator operation's start, and the idle
ratio is the event loop thread's (1 - its CPU time / wall time since the last scrape).
The KIP names `protocol=generic`; Kafka 3.7 renamed it `classic`, and so does odradek.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from kio.schema.errors import ErrorCode
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ..broker.registry import APIS
from .stats import BrokerStats, Histogram

CG = "odradek_group_coordinator_"
CONSUMER_STATES = ("empty", "assigning", "reconciling", "stable", "dead")
CLASSIC_STATES = ("empty", "preparingrebalance", "completingrebalance", "stable", "dead")
SHARD_STATES = ("loading", "active", "failed")


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _histogram(name: str, doc: str, h: Histogram, labels: dict[str, str] | None = None,
               family: HistogramMetricFamily | None = None) -> HistogramMetricFamily:
    labels = labels or {}
    if family is None:
        family = HistogramMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), h.cumulative(), h.sum)
    return family


class BrokerCollector(Collector):
    def __init__(self, broker) -> None:
        self.broker = broker
        self._idle_mark = (time.monotonic(), time.thread_time())

    def collect(self) -> Iterator:
        broker = self.broker
        stats: BrokerStats | None = broker.stats
        if stats is None:
            return
        yield from self._coordinator(stats)
        yield from self._requests(stats)
        yield from self._topics(stats)
        yield from self._replication(stats)
        yield from self._connections(stats)
        yield from self._lag()

    # --- KIP-848 group-coordinator-metrics ------------------------------------------------

    def _coordinator(self, stats: BrokerStats) -> Iterator:
        c = stats.coordinator
        coordinator = self.broker.coordinator
        runtime = coordinator.runtime if coordinator is not None else None
        consumer = dict.fromkeys(CONSUMER_STATES, 0)
        classic = dict.fromkeys(CLASSIC_STATES, 0)
        shards = dict.fromkeys(SHARD_STATES, 0)
        if runtime is not None:
            for shard in runtime.shards.values():
                for g in shard.consumer_groups.values():
                    consumer[g.state.value.lower()] += 1
                for g in shard.classic_groups.values():
                    classic[g.state.value.lower()] += 1
            for state, _epoch in runtime.states.values():
                if state.value in shards:
                    shards[state.value] += 1
        g = GaugeMetricFamily(CG + "group_count", "Groups by rebalance protocol (KIP-848 group-count)",
                              labels=["protocol"])
        g.add_metric(["consumer"], sum(consumer.values()))
        g.add_metric(["classic"], sum(classic.values()))
        yield g
        g = GaugeMetricFamily(CG + "consumer_group_count", "Consumer groups by state (KIP-848 consumer-group-count)",
                              labels=["state"])
        for state, n in consumer.items():
            g.add_metric([state], n)
        yield g
        g = GaugeMetricFamily(CG + "classic_group_count", "Classic groups by state (Kafka classic-group-count)",
                              labels=["state"])
        for state, n in classic.items():
            g.add_metric([state], n)
        yield g
        g = GaugeMetricFamily(CG + "partition_count",
                              "__consumer_offsets partitions by coordinator state (KIP-848 partition-count)",
                              labels=["state"])
        for state, n in shards.items():
            g.add_metric([state], n)
        yield g
        yield GaugeMetricFamily(CG + "event_queue_size",
                                "Requests being handled now (KIP-848 event-queue-size; see module doc)",
                                value=self.broker.requests_in_flight())
        yield CounterMetricFamily(CG + "consumer_group_rebalances",
                                  "Consumer group epoch bumps written (KIP-848 consumer-group-rebalance-count)",
                                  value=c.consumer_rebalances)
        yield CounterMetricFamily(CG + "classic_group_rebalances",
                                  "Classic group rebalances completed (generations written with members)",
                                  value=c.classic_rebalances)
        now, cpu = time.monotonic(), time.thread_time()
        wall = now - self._idle_mark[0]
        busy = cpu - self._idle_mark[1]
        self._idle_mark = (now, cpu)
        idle = 1.0 - min(1.0, busy / wall) if wall > 0 else 1.0
        yield GaugeMetricFamily(CG + "thread_idle_ratio",
                                "Event loop thread idle ratio since the last scrape (KIP-848 thread-idle-ratio-avg)",
                                value=idle)
        for name, h, doc in (
            ("partition_load_time", c.partition_load_time, "__consumer_offsets partition load time"),
            ("event_queue_time", c.event_queue_time, "Time from a request's start to its coordinator operation"),
            ("event_processing_time", c.event_processing_time, "Coordinator operation time, its write included"),
            ("event_purgatory_time", c.event_purgatory_time, "Time an answer waits for its records to commit"),
            ("batch_flush_time", c.batch_flush_time, "Time to append a coordinator record batch to the log"),
        ):
            yield _histogram(CG + name + "_seconds", doc + " (KIP-848)", h)
            yield GaugeMetricFamily(CG + name + "_max_seconds", doc + ": the largest seen", value=h.max)

    # --- requests --------------------------------------------------------------------------

    def _requests(self, stats: BrokerStats) -> Iterator:
        total = CounterMetricFamily("odradek_requests", "Requests handled (Kafka RequestsPerSec)",
                                    labels=["request", "version"])
        latency = HistogramMetricFamily("odradek_request_latency_seconds",
                                        "Request handling time (Kafka TotalTimeMs, without network time)",
                                        labels=["request", "version"])
        for (key, version), rs in sorted(stats.requests.items()):
            labels = [APIS[key].name if key in APIS else str(key), str(version)]
            h = rs.latency
            total.add_metric(labels, h.count)
            latency.add_metric(labels, h.cumulative(), h.sum)
        yield total
        yield latency
        errors = CounterMetricFamily("odradek_request_errors",
                                     "Error codes answered, NONE included (Kafka ErrorsPerSec)",
                                     labels=["request", "error"])
        for (key, code), n in sorted(stats.errors.items()):
            errors.add_metric([APIS[key].name if key in APIS else str(key), error_name(code)], n)
        yield errors
        purgatory = GaugeMetricFamily("odradek_purgatory_size", "Requests parked (Kafka PurgatorySize)",
                                      labels=["purgatory"])
        parked = self.broker.purgatory.parked
        purgatory.add_metric(["produce"], stats.produce_waiting)
        purgatory.add_metric(["fetch"], max(0, parked - stats.produce_waiting))
        yield purgatory

    # --- topics ----------------------------------------------------------------------------

    def _topics(self, stats: BrokerStats) -> Iterator:
        fams = {
            "bytes_in": CounterMetricFamily("odradek_topic_bytes_in", "Bytes produced (Kafka BytesInPerSec)",
                                            labels=["topic"]),
            "messages_in": CounterMetricFamily("odradek_topic_messages_in",
                                               "Records produced (Kafka MessagesInPerSec)", labels=["topic"]),
            "bytes_out": CounterMetricFamily("odradek_topic_bytes_out",
                                             "Bytes fetched by consumers (Kafka BytesOutPerSec)", labels=["topic"]),
            "messages_out": CounterMetricFamily("odradek_topic_messages_out",
                                                "Records fetched by consumers (from batch headers)",
                                                labels=["topic"]),
            "replication_bytes_out": CounterMetricFamily(
                "odradek_topic_replication_bytes_out", "Bytes fetched by followers (Kafka ReplicationBytesOutPerSec)",
                labels=["topic"]),
        }
        for name, ts in sorted(stats.topics.items()):
            for attr, fam in fams.items():
                fam.add_metric([name], getattr(ts, attr))
        yield from fams.values()

    # --- replication and the log -----------------------------------------------------------

    def _replication(self, stats: BrokerStats) -> Iterator:
        broker = self.broker
        replicas = broker.replicas
        image = replicas.image
        me = broker.config.node_id
        led = under = offline = 0
        for (topic, _p), state in image.partitions.items():
            if state.leader < 0:
                offline += 1
            elif state.leader == me:
                led += 1
                if len(state.isr) < len(state.replicas):
                    under += 1
        yield GaugeMetricFamily("odradek_leader_count", "Partitions led by this broker (Kafka LeaderCount)",
                                value=led)
        yield GaugeMetricFamily("odradek_under_replicated_partitions",
                                "Partitions led here whose ISR is smaller than their replica set "
                                "(Kafka UnderReplicatedPartitions)", value=under)
        yield GaugeMetricFamily("odradek_offline_partitions",
                                "Partitions without a leader in this broker's cluster image "
                                "(Kafka OfflinePartitionsCount, which only the controller reports)", value=offline)
        yield CounterMetricFamily("odradek_isr_shrinks", "ISR shrinks committed by this leader (Kafka IsrShrinksPerSec)",
                                  value=stats.isr_shrinks)
        yield CounterMetricFamily("odradek_isr_expands", "ISR expansions committed by this leader "
                                  "(Kafka IsrExpandsPerSec)", value=stats.isr_expands)
        yield CounterMetricFamily("odradek_leader_elections",
                                  "Partition leaderships this broker took up (a new leader epoch for it)",
                                  value=stats.leaderships_taken)
        yield _histogram("odradek_log_flush_time_seconds",
                         "Log flushes: by flush.messages or flush.ms, and the background fsync of rolled "
                         "segments (Kafka LogFlushRateAndTimeMs)", stats.log_flush)

    def _connections(self, stats: BrokerStats) -> Iterator:
        current = GaugeMetricFamily("odradek_connections", "Open client connections (Kafka connection-count)",
                                    labels=["listener"])
        created = CounterMetricFamily("odradek_connections_created", "Connections accepted "
                                      "(Kafka connection-creation-total)", labels=["listener"])
        closed = CounterMetricFamily("odradek_connections_closed", "Connections closed (Kafka connection-close-total)",
                                     labels=["listener"])
        for listener in sorted(set(stats.connections_created) | set(stats.connections_closed)):
            made, gone = stats.connections_created[listener], stats.connections_closed[listener]
            current.add_metric([listener], made - gone)
            created.add_metric([listener], made)
            closed.add_metric([listener], gone)
        yield current
        yield created
        yield closed
        yield CounterMetricFamily("odradek_connections_refused", "Connections refused over max.connections[.per.ip]",
                                  value=stats.connections_refused)
        for name, counts, doc in (
            ("odradek_authentications_failed", stats.auth_failed, "Failed SASL authentications "
             "(Kafka failed-authentication-total)"),
            ("odradek_authentications_succeeded", stats.auth_succeeded, "Successful SASL authentications "
             "(Kafka successful-authentication-total)"),
        ):
            fam = CounterMetricFamily(name, doc, labels=["listener", "mechanism"])
            for (listener, mechanism), n in sorted(counts.items()):
                fam.add_metric([listener, mechanism], n)
            yield fam

    # --- lag -------------------------------------------------------------------------------

    def _lag(self) -> Iterator:
        """Per group and partition: the high watermark minus the committed offset, for the
        groups this broker coordinates and the partitions whose log it holds."""
        lag = GaugeMetricFamily("odradek_consumer_group_lag",
                                "High watermark minus committed offset (kafka-consumer-groups LAG)",
                                labels=["group", "topic", "partition"])
        committed = GaugeMetricFamily("odradek_consumer_group_committed_offset", "Committed offset",
                                      labels=["group", "topic", "partition"])
        coordinator = self.broker.coordinator
        logs = self.broker.logs
        if coordinator is not None:
            for shard in coordinator.runtime.shards.values():
                for group, offsets in shard.offsets.items():
                    for (topic, p), entry in offsets.items():
                        labels = [group, topic, str(p)]
                        committed.add_metric(labels, entry.offset)
                        plog = logs.opened(topic, p)
                        if plog is not None:
                            lag.add_metric(labels, max(0, plog.high_watermark - entry.offset))
        yield lag
        yield committed
