"""The client's own statistics: cheap counters, rendered on demand in librdkafka's shape.

Theory of operation (issue 21). The drivers bump plain integer attributes as work
happens -- per request and per response (net.py), per produced batch (producer.py), per
fetched partition chunk (fetching.py), per rebalance callback (consumer.py) -- never per
record, never under a lock (one event loop owns a client). `metrics()` on a producer or
consumer takes a `Snapshot` of its gauges (queue lengths, positions, group state) and
`render` merges counters and gauges into the dict librdkafka hands its `stats_cb` as
JSON (STATISTICS.md; `rd_kafka_stats_emit_all` in rdkafka.c), with librdkafka's key names
and types wherever the two overlap. Nothing here touches a socket or reads a clock: the
callers pass times in, so tests render from hand-made counters.

Windows (`Window`: "rtt", "throttle", "batchsize", "batchcnt") are librdkafka's rd_avg:
the samples since the previous render, which resets them (librdkafka rolls over at every
stats emit). min/max/avg/sum/cnt are exact over the window; the percentiles and stddev
come from its most recent `Window.KEEP` samples.

Offsets that are not known are -1001 (librdkafka's RD_KAFKA_OFFSET_INVALID), lags that
cannot be computed -1, as librdkafka prints them.

What is filled, and what differs from librdkafka:
  * top level: name ("<client_id>#<type>-<n>"), client_id, type, ts (monotonic us), time,
    age (us), metadata_cache_cnt; tx/tx_bytes/rx/rx_bytes (sums over brokers),
    txmsgs/txmsg_bytes/rxmsgs/rxmsg_bytes (sums over partitions); producers add msg_cnt
    (records appended and not yet delivered or failed, in flight included, as librdkafka's
    curr_msgs), msg_size (their key+value bytes) and msg_max (max_buffered_records).
  * brokers, keyed and named "host:port/<node id>", "host:port/bootstrap" (nodeid -1,
    source "configured") and, for the separate connection to a group or transaction
    coordinator, the logical "GroupCoordinator" / "TxnCoordinator" (nodeid -1, source
    "logical", nodename the coordinator's host:port; a coordinator that moves keeps the
    entry, as librdkafka re-points its logical broker): name, nodeid, nodename, source,
    state (CONNECT, APIVERSION_QUERY, AUTH_HANDSHAKE, UP, DOWN), stateage, waitresp_cnt,
    tx, txbytes, txerrs, txidle, req_timeouts, rx, rxbytes, rxerrs, rxidle, connects,
    disconnects (connections lost while UP, not the client's own closes), rtt (us),
    throttle (ms, every response that carries throttle_time_ms), req (requests sent per
    API, librdkafka's names, only APIs sent at least once).
  * topics: topic, age (ms since this client first counted it), metadata_age (ms),
    batchsize/batchcnt (producer batches delivered: bytes as sent, records), partitions.
  * partitions: partition, leader, leader_epoch, unknown, txmsgs, txbytes, rxmsgs,
    rxbytes; producers add msgq_cnt/msgq_bytes (queued, not in flight) and msgs_inflight;
    consumers add desired, fetchq_cnt, fetch_state, next_offset, app_offset,
    stored_offset (= the position: what commit() with no offsets commits), committed_offset
    (the last one committed or fetched by this consumer), lo_offset, hi_offset, ls_offset
    (from the last Fetch answer), consumer_lag (end - committed_offset) and
    consumer_lag_stored (end - stored_offset), where end is ls_offset with read_committed
    and hi_offset otherwise -- librdkafka's definitions, not hi_offset - position.
  * txmsgs/rxmsgs count records: acknowledged by the broker (acks=0: written), and
    received in a Fetch answer whose data was kept (prefetched records count before the
    application polls them, as librdkafka counts its fetch queue; control records,
    aborted records and records below the fetch offset do not). txbytes/rxbytes count
    record-batch bytes as they crossed the wire (v2 framing included, after compression):
    STATISTICS.md's "message bytes (including framing)". librdkafka itself adds up key+value
    lengths there, which would cost a step per record here.
  * cgrp (consumers with a group_id): state ("init" before the coordinator is looked up,
    "query-coord" while it is, "up" with a live connection to it, "wait-broker-transport"
    while that connection is down), join_state (librdkafka's name where a
    member state means the same: init, wait-unassign-call, wait-join, wait-metadata,
    wait-sync, wait-assign-call, steady; else the odradek member state's own name),
    rebalance_cnt (rebalance callbacks run: lost, revoked, assigned, as librdkafka counts
    its assign/revoke ops), rebalance_reason, rebalance_age (ms), assignment_size.
  * eos (idempotent producers): idemp_state ("Assigned" once a producer id is held, else
    "Init"), producer_id, producer_epoch; transactional ones add txn_state and txn_may_enq.
  * "odradek": what librdkafka has no key for (consumers: group_protocol, member_id,
    member_epoch or generation_id, member_state).

Left out, because odradek has no such thing or does not count it: replyq, msg_size_max,
simple_cnt; brokers' outbuf_cnt/outbuf_msg_cnt (a request is written to the transport at
once, never queued), waitresp_msg_cnt, txretries (retries are decided above the
connection), rxcorriderrs (a mismatched correlation id closes the connection: an rxerr),
rxpartial, zbuf_grow, buf_grow, wakeups, int_latency, outbuf_latency, toppars; windows'
hdrsize and outofrange (no HDR histogram); partitions' broker, xmit_msgq_cnt/bytes,
fetchq_size, query_offset, eof_offset, stored/committed_leader_epoch, msgs, rx_ver_drops,
next_ack_seq, next_err_seq, acked_msgid, the "-1" unassigned partition; cgrp's stateage;
eos' stateages and epoch_cnt; fatal.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

OFFSET_INVALID = -1001  # librdkafka's RD_KAFKA_OFFSET_INVALID: an offset not known

# librdkafka's request names (rd_kafka_ApiKey2str) for the APIs this client sends.
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersion", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 33: "AlterConfigs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups",
    43: "ElectLeadersRequest", 44: "IncrementalAlterConfigsRequest", 47: "OffsetDeleteRequest",
    50: "DescribeUserScramCredentialsRequest", 51: "AlterUserScramCredentialsRequest",
    60: "DescribeCluster", 61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe",
}

# Per client type, as librdkafka numbers its handles ("rdkafka#producer-1").
_instances = {"producer": itertools.count(1), "consumer": itertools.count(1), "admin": itertools.count(1)}


class Window:
    """A window of integer samples (librdkafka's rd_avg_t), reset by `rollover`."""

    __slots__ = ("cnt", "max", "min", "samples", "sum")
    KEEP = 1024  # samples kept for percentiles and stddev

    def __init__(self) -> None:
        self.cnt = self.sum = self.min = self.max = 0
        self.samples: deque[int] = deque(maxlen=self.KEEP)

    def add(self, v: int) -> None:
        if not self.cnt or v < self.min:
            self.min = v
        if v > self.max:
            self.max = v
        self.cnt += 1
        self.sum += v
        self.samples.append(v)

    def rollover(self) -> dict[str, int]:
        """The window as librdkafka prints it; starts a new one."""
        out = self.peek()
        self.cnt = self.sum = self.min = self.max = 0
        self.samples.clear()
        return out

    def peek(self) -> dict[str, int]:
        cnt = self.cnt
        s = sorted(self.samples)
        n = len(s)
        if n:
            mean = sum(s) / n
            stddev = int((sum((x - mean) ** 2 for x in s) / n) ** 0.5)
        else:
            stddev = 0

        def pct(q: float) -> int:
            # Nearest rank: the smallest sample with at least q% of the samples at or below it.
            return s[min(n - 1, max(1, math.ceil(n * q / 100)) - 1)] if n else 0

        return {"min": self.min, "max": self.max, "avg": self.sum // cnt if cnt else 0, "sum": self.sum,
                "stddev": stddev, "p50": pct(50), "p75": pct(75), "p90": pct(90), "p95": pct(95),
                "p99": pct(99), "p99_99": pct(99.99), "cnt": cnt}


class BrokerStats:
    """Counters of one broker entry; the connection (net.BrokerConnection) bumps them."""

    __slots__ = ("connects", "disconnects", "last_rx", "last_tx", "name", "nodeid", "nodename", "req",
                 "req_timeouts", "rtt", "rx", "rxbytes", "rxerrs", "source", "state", "state_at", "throttle",
                 "tx", "txbytes", "txerrs", "wire")

    def __init__(self, name: str = "", nodeid: int = -1, nodename: str = "", source: str = "learned") -> None:
        self.name, self.nodeid, self.nodename, self.source = name, nodeid, nodename, source
        self.state = "INIT"
        self.state_at = 0.0  # monotonic seconds of the last state change
        self.tx = self.txbytes = self.txerrs = self.req_timeouts = 0
        self.rx = self.rxbytes = self.rxerrs = 0
        self.connects = self.disconnects = 0
        self.last_tx = self.last_rx = 0.0  # monotonic seconds, 0: nothing on this connection yet
        self.req: dict[int, int] = {}  # api key -> requests sent
        self.rtt = Window()  # microseconds
        self.throttle = Window()  # milliseconds
        self.wire: Any = None  # the live connection's WireConnection (requests awaiting an answer)

    def set_state(self, state: str, now: float) -> None:
        self.state = state
        self.state_at = now


@dataclass(slots=True)
class PartitionStats:
    txmsgs: int = 0
    txbytes: int = 0
    rxmsgs: int = 0
    rxbytes: int = 0
    lo_offset: int = OFFSET_INVALID
    hi_offset: int = OFFSET_INVALID
    ls_offset: int = OFFSET_INVALID
    committed_offset: int = OFFSET_INVALID


@dataclass(slots=True)
class TopicStats:
    created: float  # monotonic seconds
    partitions: dict[int, PartitionStats] = field(default_factory=dict)
    batchsize: Window = field(default_factory=Window)
    batchcnt: Window = field(default_factory=Window)


@dataclass(slots=True)
class GroupStats:
    rebalance_cnt: int = 0
    rebalance_reason: str = ""
    rebalance_at: float = 0.0  # monotonic seconds, 0: none yet


class ClientStats:
    """Every counter of one client (one `net.Client`)."""

    def __init__(self, client_id: str, now: float) -> None:
        self.client_id = client_id
        self.created = now
        self.type = "admin"  # until a producer or consumer takes the client (set_type)
        self.name = ""  # numbered when first needed, so that only rendered instances take a number
        self.brokers: dict[Any, BrokerStats] = {}  # connection key -> entry
        self.topics: dict[str, TopicStats] = {}
        self.metadata_at: dict[str, float] = {}  # topic -> monotonic seconds of its last Metadata answer
        self.group = GroupStats()

    def set_type(self, type_: str) -> None:
        """Called by the producer or consumer that owns the client: names the instance."""
        self.type = type_
        self.name = f"{self.client_id}#{type_}-{next(_instances.setdefault(type_, itertools.count(1)))}"

    def broker(self, key: Any, host: str, port: int) -> BrokerStats:
        """The entry counting the connection `key` (net.Client's connection keys)."""
        if isinstance(key, tuple) and key[0] == "coordinator":
            # One logical entry per client, as librdkafka's GroupCoordinator/TxnCoordinator:
            # a coordinator that moves keeps it, with its new address.
            name = "TxnCoordinator" if self.type == "producer" else "GroupCoordinator"
            b = self.brokers.get(name)
            if b is None:
                b = self.brokers[name] = BrokerStats(name, -1, f"{host}:{port}", "logical")
            b.nodename = f"{host}:{port}"
            self.brokers[key] = b
            return b
        b = self.brokers.get(key)
        if b is None:
            if isinstance(key, tuple):  # ("bootstrap", i)
                b = BrokerStats(f"{host}:{port}/bootstrap", -1, f"{host}:{port}", "configured")
            else:
                b = BrokerStats(f"{host}:{port}/{key}", int(key), f"{host}:{port}", "learned")
            self.brokers[key] = b
        return b

    def partition(self, topic: str, partition: int, now: float) -> PartitionStats:
        t = self.topics.get(topic)
        if t is None:
            t = self.topics[topic] = TopicStats(now)
        p = t.partitions.get(partition)
        if p is None:
            p = t.partitions[partition] = PartitionStats()
        return p

    def rebalanced(self, reason: str, now: float) -> None:
        g = self.group
        g.rebalance_cnt += 1
        g.rebalance_reason = reason
        g.rebalance_at = now


@dataclass
class Snapshot:
    """The gauges of a producer or consumer at one moment, for `render`.

    `partitions`: (topic, partition) -> gauge fields of that partition, by librdkafka name
    (leader, leader_epoch, unknown, msgq_cnt, msgq_bytes, msgs_inflight, desired,
    fetchq_cnt, fetch_state, next_offset, app_offset, stored_offset); every topic named
    there is rendered, with the topics that have counters. `top`: extra top-level gauges
    (msg_cnt, msg_size, msg_max)."""

    now: float  # monotonic seconds
    wall: float  # epoch seconds
    metadata_cache_cnt: int = 0
    top: dict[str, int] = field(default_factory=dict)
    partitions: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    consumer: bool = False
    read_committed: bool = False
    cgrp: dict[str, Any] | None = None
    eos: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None


_HEAD = ("leader", "desired", "unknown", "msgq_cnt", "msgq_bytes", "fetchq_cnt", "fetch_state", "next_offset",
         "app_offset", "stored_offset")


def _lag(end: int, offset: int) -> int:
    """librdkafka's consumer_lag: end - offset when both are known and offset <= end, else -1."""
    return end - offset if end != OFFSET_INVALID and 0 <= offset <= end else -1


def _partition(p: int, ps: PartitionStats | None, g: dict[str, Any], snap: Snapshot) -> dict[str, Any]:
    ps = ps or PartitionStats()
    out: dict[str, Any] = {"partition": p}
    for k in _HEAD:
        if k in g:
            out[k] = g[k]
    if snap.consumer:
        out["committed_offset"] = ps.committed_offset
        out["lo_offset"] = ps.lo_offset
        out["hi_offset"] = ps.hi_offset
        out["ls_offset"] = ps.ls_offset
        end = ps.ls_offset if snap.read_committed else ps.hi_offset
        out["consumer_lag"] = _lag(end, ps.committed_offset)
        out["consumer_lag_stored"] = _lag(end, g.get("stored_offset", OFFSET_INVALID))
    out["leader_epoch"] = g.get("leader_epoch", -1)
    out["txmsgs"], out["txbytes"] = ps.txmsgs, ps.txbytes
    out["rxmsgs"], out["rxbytes"] = ps.rxmsgs, ps.rxbytes
    if "msgs_inflight" in g:
        out["msgs_inflight"] = g["msgs_inflight"]
    return out


def _broker(b: BrokerStats, now: float) -> dict[str, Any]:
    up = b.state == "UP"
    wire = b.wire
    return {
        "name": b.name, "nodeid": b.nodeid, "nodename": b.nodename, "source": b.source, "state": b.state,
        "stateage": int((now - b.state_at) * 1e6) if b.state_at else 0,
        "waitresp_cnt": wire.in_flight if up and wire is not None else 0,
        "tx": b.tx, "txbytes": b.txbytes, "txerrs": b.txerrs,
        "txidle": int((now - b.last_tx) * 1e6) if up and b.last_tx else -1,
        "req_timeouts": b.req_timeouts, "rx": b.rx, "rxbytes": b.rxbytes, "rxerrs": b.rxerrs,
        "rxidle": int((now - b.last_rx) * 1e6) if up and b.last_rx else -1,
        "connects": b.connects, "disconnects": b.disconnects,
        "rtt": b.rtt.rollover(), "throttle": b.throttle.rollover(),
        "req": {API_NAMES.get(api, f"Unknown-{api}?"): n for api, n in sorted(b.req.items())},
    }


def render(stats: ClientStats, snap: Snapshot) -> dict[str, Any]:
    """librdkafka's statistics object from `stats` and `snap` (resets the windows)."""
    now = snap.now
    if not stats.name:
        stats.set_type(stats.type)
    out: dict[str, Any] = {"name": stats.name, "client_id": stats.client_id, "type": stats.type,
                           "ts": int(now * 1e6), "time": int(snap.wall), "age": int((now - stats.created) * 1e6)}
    out.update(snap.top)
    out["metadata_cache_cnt"] = snap.metadata_cache_cnt
    brokers: dict[str, Any] = {}
    tx = tx_bytes = rx = rx_bytes = 0
    seen: set[int] = set()
    for b in stats.brokers.values():
        if id(b) in seen:  # a logical coordinator entry is reachable from several keys
            continue
        seen.add(id(b))
        brokers[b.name] = _broker(b, now)
        tx, tx_bytes, rx, rx_bytes = tx + b.tx, tx_bytes + b.txbytes, rx + b.rx, rx_bytes + b.rxbytes
    out["brokers"] = brokers
    by_topic: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in stats.topics}
    for (t, p), g in snap.partitions.items():
        by_topic.setdefault(t, {})[p] = g
    topics: dict[str, Any] = {}
    txmsgs = txmsg_bytes = rxmsgs = rxmsg_bytes = 0
    for t in sorted(by_topic):
        ts = stats.topics.get(t)
        counted = ts.partitions if ts is not None else {}
        parts: dict[str, Any] = {}
        for p in sorted(set(by_topic[t]) | set(counted)):
            d = _partition(p, counted.get(p), by_topic[t].get(p, {}), snap)
            parts[str(p)] = d
            txmsgs, txmsg_bytes = txmsgs + d["txmsgs"], txmsg_bytes + d["txbytes"]
            rxmsgs, rxmsg_bytes = rxmsgs + d["rxmsgs"], rxmsg_bytes + d["rxbytes"]
        meta_at = stats.metadata_at.get(t)
        topics[t] = {"topic": t, "age": int((now - ts.created) * 1000) if ts is not None else 0,
                     "metadata_age": int((now - meta_at) * 1000) if meta_at is not None else 0,
                     "batchsize": ts.batchsize.rollover() if ts is not None else Window().peek(),
                     "batchcnt": ts.batchcnt.rollover() if ts is not None else Window().peek(),
                     "partitions": parts}
    out["topics"] = topics
    if snap.cgrp is not None:
        g = stats.group
        cgrp = dict(snap.cgrp)
        cgrp.update({"rebalance_age": int((now - g.rebalance_at) * 1000) if g.rebalance_at else 0,
                     "rebalance_cnt": g.rebalance_cnt, "rebalance_reason": g.rebalance_reason})
        # librdkafka's order: state, join_state, rebalance_*, assignment_size.
        size = cgrp.pop("assignment_size", None)
        if size is not None:
            cgrp["assignment_size"] = size
        out["cgrp"] = cgrp
    if snap.eos is not None:
        out["eos"] = dict(snap.eos)
    out.update({"tx": tx, "tx_bytes": tx_bytes, "rx": rx, "rx_bytes": rx_bytes, "txmsgs": txmsgs,
                "txmsg_bytes": txmsg_bytes, "rxmsgs": rxmsgs, "rxmsg_bytes": rxmsg_bytes})
    if snap.extra:
        out["odradek"] = dict(snap.extra)
    return out
