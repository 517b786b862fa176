"""Soak: one real broker process under a mixed load for ODRADEK_SOAK_SECONDS (default 600).

Concurrently, against one `odradek broker` on loopback:

* a librdkafka pair: an idempotent acks=all producer sends numbered records (unique
  payloads) at a steady bounded rate to a topic of PARTITIONS partitions and records every
  delivery report; one consumer in a KIP-848 group (`group.protocol=consumer`) reads
  everything and commits every second;
* IDLE_CONNECTIONS plain sockets that connect and never send. The broker runs with
  connections.max.idle.ms=IDLE_MS (120 s for a 600 s soak, a fifth of shorter runs): each
  one the broker closes is checked to have lived about IDLE_MS and is re-opened at once,
  so about IDLE_CONNECTIONS idle connections exist throughout;
* a pipeliner that sends Metadata requests back to back on one connection and never reads:
  the broker must mute it (its sends block), and close it once it has been idle for
  IDLE_MS; it then reconnects and starts again;
* the fuzz corpus over TCP: frames built and mutated by the in-process fuzzer's own case
  generator (fuzz_harness.Fuzzer.case over fuzz_frames' seeds and mutations), FUZZ_RATE a
  second on connections that are re-opened whenever the broker closes one. The fuzz world
  (its topics and live groups) is re-formed with well-formed requests every
  PREPARE_EVERY frames. No seed or mutation names the soak's topic or group (their names
  are none the fuzzer produces); frames holding either name or the topic's id would be
  skipped, and are counted;
* a monitor sampling the broker's VmRSS, descriptors and liveness and timing a Metadata
  probe every SAMPLE_S seconds.

At the end: every acknowledged record was consumed (per partition, offsets 0..end-1 hold
exactly the acknowledged values, no record the producer did not acknowledge once), the
group's committed offsets are the log ends; the broker stops on SIGTERM with exit code 0
and, started again, serves the same records from offset 0 and the same committed
offsets; its log holds no traceback and no ERROR line; RSS after the warm-up stays within
1.2 x the baseline taken at the warm-up's end.

Run short while developing: ODRADEK_SOAK_SECONDS=120 pytest -m slow -s tests/broker/test_soak.py
"""

from __future__ import annotations

import os
import random
import re
import resource
import select
import socket
import struct
import threading
import time
import traceback
import uuid
from array import array
from collections import Counter
from types import SimpleNamespace

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.registry import supported_versions
from odradek.coordinator.consumer_protocol import encode_assignment, encode_subscription
from odradek.records.codec import Record, encode_batch
from tests.broker import fuzz_frames as F
from tests.broker.fuzz_harness import Fuzzer
from tests.wire import RawClient, request_frame

SOAK_SECONDS = float(os.environ.get("ODRADEK_SOAK_SECONDS", "600"))
WARMUP_S = min(60.0, 0.2 * SOAK_SECONDS)
SAMPLE_S = 2.0
RSS_FACTOR = 1.2

TOPIC = "soak-records"  # no fuzz seed or mutation produces these names
GROUP = "soak-group"
PARTITIONS = 4
RATE = 2_000  # records a second
VALUE_PAD = b"." * 90  # values are b"%010d" % seq + VALUE_PAD: 100 bytes, unique

IDLE_CONNECTIONS = 2_000
IDLE_MS = int(min(120.0, max(10.0, SOAK_SECONDS / 5)) * 1000)
MIN_DESCRIPTORS = 4_000

FUZZ_RATE = 200  # frames a second
FUZZ_ANSWER_S = 0.2  # a frame unanswered this long (acks=0, a parked request): abandon the connection
PREPARE_EVERY = 2_000  # frames between re-formings of the fuzz world
FIXED_TOPICS = {"fz": 2, "fz-doomed": 1, "fz-grow": 1}
ZERO = uuid.UUID(int=0)

PIPELINE_CHUNK = 200  # Metadata requests per send
PIPELINE_MAX = 20_000_000  # requests over the whole soak: a broker that never mutes fails, not hangs

LOG_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _metadata_frame(cid: int, topics=None) -> bytes:
    return request_frame(3, 12, {"topics": topics, "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False}, correlation_id=cid)


class Worker(threading.Thread):
    """A daemon thread that runs until `stop` is set; an exception it raises is kept as text."""

    def __init__(self, name: str, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.stop = stop
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.work()
        except Exception:  # noqa: BLE001  (reported by the test)
            self.error = traceback.format_exc()

    def work(self) -> None:
        raise NotImplementedError


# --------------------------------------------------------------------------- librdkafka pair


class ProducerWorker(Worker):
    """Numbered records at RATE a second, partition seq % PARTITIONS; every delivery report
    kept as (offset, seq) per partition."""

    def __init__(self, bootstrap: str, stop: threading.Event, max_records: int) -> None:
        super().__init__("soak-producer", stop)
        self.max_records = max_records
        self.produced = 0
        self.acked_off = {p: array("q") for p in range(PARTITIONS)}
        self.acked_seq = {p: array("q") for p in range(PARTITIONS)}
        self.failed: list[tuple[int, str]] = []
        self.client_errors: Counter = Counter()
        self.unflushed = -1
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "log.connection.close": False, "error_cb": self._on_error,
        })

    def _on_error(self, err: KafkaError) -> None:
        self.client_errors[f"{err.name()}{' FATAL' if err.fatal() else ''}"] += 1

    def _on_delivery(self, err, msg) -> None:
        seq = int(msg.value()[:10])
        if err is not None:
            self.failed.append((seq, str(err)))
            return
        p = msg.partition()
        self.acked_off[p].append(msg.offset())
        self.acked_seq[p].append(seq)

    @property
    def acked(self) -> int:
        return sum(len(a) for a in self.acked_off.values())

    def work(self) -> None:
        p = self.producer
        start = time.monotonic()
        while not self.stop.is_set() and self.produced < self.max_records:
            due = min(int((time.monotonic() - start) * RATE), self.max_records)
            while self.produced < due:
                seq = self.produced
                try:
                    p.produce(TOPIC, value=b"%010d" % seq + VALUE_PAD, partition=seq % PARTITIONS,
                              on_delivery=self._on_delivery)
                except BufferError:
                    break
                self.produced += 1
            p.poll(0.005)
        self.unflushed = p.flush(120)


class ConsumerWorker(Worker):
    """One member of GROUP (group.protocol=consumer): reads everything, commits every second.
    `finish(ends)` makes it read up to `ends`, commit synchronously, fetch the committed
    offsets and close."""

    def __init__(self, bootstrap: str, stop: threading.Event) -> None:
        super().__init__("soak-consumer", stop)
        self.off = {p: array("q") for p in range(PARTITIONS)}
        self.seq = {p: array("q") for p in range(PARTITIONS)}
        self.next = dict.fromkeys(range(PARTITIONS), 0)  # highest offset consumed + 1
        self.consumed = 0
        self.message_errors: Counter = Counter()
        self.client_errors: Counter = Counter()
        self.commit_errors: Counter = Counter()
        self.commits = 0
        self.ends: dict[int, int] | None = None
        self.caught_up = False
        self.committed: dict[int, int] | None = None
        self.finished = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 200,
            "log.connection.close": False, "error_cb": self._on_error, "on_commit": self._on_commit,
        })

    def _on_error(self, err: KafkaError) -> None:
        self.client_errors[f"{err.name()}{' FATAL' if err.fatal() else ''}"] += 1

    def _on_commit(self, err, partitions) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            self.commit_errors[err.name()] += 1
        elif err is None:
            self.commits += 1

    def finish(self, ends: dict[int, int]) -> None:
        self.ends = ends

    def _commit(self, sync: bool) -> None:
        try:
            self.consumer.commit(asynchronous=not sync)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def work(self) -> None:
        c = self.consumer
        c.subscribe([TOPIC])
        last_commit = time.monotonic()
        drain_deadline = None
        try:
            while True:
                for m in c.consume(1000, 0.2):
                    if m.error():
                        self.message_errors[m.error().name()] += 1
                        continue
                    p, o = m.partition(), m.offset()
                    self.off[p].append(o)
                    self.seq[p].append(int(m.value()[:10]))
                    self.next[p] = max(self.next[p], o + 1)
                    self.consumed += 1
                now = time.monotonic()
                if now - last_commit >= 1.0:
                    self._commit(sync=False)
                    last_commit = now
                if self.ends is not None:
                    drain_deadline = drain_deadline or now + 180
                    if all(self.next[p] >= self.ends[p] for p in range(PARTITIONS)):
                        self.caught_up = True
                        break
                    if now > drain_deadline:
                        break
                elif self.stop.is_set():  # the test failed early: just close
                    break
            self._commit(sync=True)
            tps = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
            self.committed = {tp.partition: tp.offset for tp in tps}
        finally:
            c.close()
            self.finished.set()


# --------------------------------------------------------------------------- raw connections


class IdleCrowd(Worker):
    """IDLE_CONNECTIONS sockets that connect and never send; one the broker closes is
    re-opened at once (its lifetime is kept)."""

    def __init__(self, port: int, stop: threading.Event, n: int, max_reopens: int) -> None:
        super().__init__("soak-idle", stop)
        self.port, self.n, self.max_reopens = port, n, max_reopens
        self.socks: dict[int, tuple[socket.socket, float]] = {}
        self.poller = select.poll()
        self.lifetimes: list[float] = []
        self.reopened = 0
        self.unsolicited = 0  # bytes the broker sent to a connection that never asked
        self.open_failures: Counter = Counter()

    def _open(self) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        except OSError as exc:
            self.open_failures[type(exc).__name__] += 1
            return
        s.setblocking(False)
        self.socks[s.fileno()] = (s, time.monotonic())
        self.poller.register(s.fileno(), select.POLLIN)

    def open_all(self) -> None:
        for i in range(self.n):
            self._open()
            if i % 100 == 99:
                time.sleep(0.02)  # the listen backlog is 100

    def work(self) -> None:
        while not self.stop.is_set():
            closed = 0
            # All the closes first (a lifetime is measured when its close is seen), then
            # the re-opens: a wave of 2,000 re-opens takes seconds.
            for fd, _ in self.poller.poll(500):
                entry = self.socks.pop(fd, None)
                if entry is None:
                    continue
                s, opened = entry
                try:
                    data = s.recv(1)
                except BlockingIOError:
                    self.socks[fd] = entry
                    continue
                except OSError:
                    data = b""
                if data:
                    self.unsolicited += 1
                self.lifetimes.append(time.monotonic() - opened)
                self.poller.unregister(fd)
                s.close()
                closed += 1
            for i in range(closed):
                if self.reopened < self.max_reopens and not self.stop.is_set():
                    self.reopened += 1
                    self._open()
                    if i % 100 == 99:
                        time.sleep(0.02)  # paced as open_all: a SYN dropped at a full backlog costs 1 s

    def close_all(self) -> None:
        for s, _ in self.socks.values():
            s.close()
        self.socks.clear()


class Pipeliner(Worker):
    """Metadata requests back to back on one connection, responses never read. The broker
    must mute the connection (our sends then block) and close it after IDLE_MS idle; we
    reconnect and start over."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__("soak-pipeliner", stop)
        self.port = port
        self.chunk = b"".join(_metadata_frame(i) for i in range(PIPELINE_CHUNK))
        self.frame_len = len(self.chunk) // PIPELINE_CHUNK
        self.sent_bytes = 0
        self.connections = 0
        self.closed_by_broker = 0
        self.per_connection: list[int] = []  # requests accepted by the socket, per connection
        self.muted_after: list[int] = []  # requests accepted before the first blocked send
        self.closed_after_block: list[float] = []  # seconds from the first blocked send to the close
        self.sock: socket.socket | None = None

    @property
    def requests(self) -> int:
        return self.sent_bytes // self.frame_len

    def work(self) -> None:
        while not self.stop.is_set() and self.requests < PIPELINE_MAX:
            self.sock = s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            s.settimeout(1.0)
            self.connections += 1
            sent = 0
            blocked_at = None
            pos = 0
            while not self.stop.is_set() and self.requests < PIPELINE_MAX:
                try:
                    n = s.send(self.chunk[pos:])
                except TimeoutError:
                    if blocked_at is None:
                        blocked_at = time.monotonic()
                        self.muted_after.append(sent // self.frame_len)
                    continue
                except OSError:  # reset or broken pipe: the broker closed it
                    self.closed_by_broker += 1
                    if blocked_at is not None:
                        self.closed_after_block.append(time.monotonic() - blocked_at)
                    break
                sent += n
                self.sent_bytes += n
                pos = (pos + n) % len(self.chunk)
            self.per_connection.append(sent // self.frame_len)
            if self.stop.is_set():
                return  # the last connection stays open (muted) through the broker's shutdown
            s.close()


class TcpFuzzer(Worker):
    """The fuzz corpus over real TCP. Frames come from the in-process fuzzer's case
    generator (`Fuzzer.case`: a version, a seed body, field and byte mutations), which reads
    only `self.broker.supported`, `self.seeds` and `self.names`; the world the seeds name
    (fixture topics and their ids, a live classic group and consumer group member) is formed
    here with well-formed requests over TCP, every PREPARE_EVERY frames."""

    case = Fuzzer.case

    def __init__(self, bootstrap: str, stop: threading.Event, seed: int, max_frames: int,
                 forbidden: tuple[bytes, ...]) -> None:
        super().__init__("soak-fuzz", stop)
        self.bootstrap = bootstrap
        host, port = bootstrap.rsplit(":", 1)
        self.addr = (host, int(port))
        self.seed, self.max_frames, self.forbidden = seed, max_frames, forbidden
        self.broker = SimpleNamespace(supported=supported_versions())
        self.api_keys = sorted(self.broker.supported)
        self.rng = random.Random(seed)
        self.seeds: dict = {}
        self.names: tuple = ()
        self.world: F.World | None = None
        self.groups = 0
        self.sock: socket.socket | None = None
        self.outcomes: Counter = Counter()
        self.per_api: Counter = Counter()
        self.sent = 0
        self.skipped = 0
        self.connections = 0
        self.misordered: list[str] = []
        self.problems: list[str] = []  # well-formed requests of the world's set-up that failed

    # --- the world the seeds name ----------------------------------------------------------

    def prepare(self) -> None:
        c = RawClient(self.bootstrap, timeout=10)
        try:
            self._topics(c)
            self._groups(c)
        finally:
            c.close()
        w = self.world
        self.names = (w.classic_group, w.consumer_group, w.classic_member, w.consumer_member)
        self.seeds = {(k, v): F.seeds(k, v, w) for k, (lo, hi) in self.broker.supported.items()
                      for v in range(lo, hi + 1)}

    def _describe(self, c: RawClient) -> dict:
        md = c.call(3, 12, {"topics": [{"name": t, "topic_id": None} for t in FIXED_TOPICS],
                            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        return {t.name: t for t in md.topics if t.error_code == 0}

    def _topics(self, c: RawClient) -> None:
        """Re-create what a fuzzed DeleteTopics removed; delete what CreatePartitions grew
        beyond 64 partitions (as the in-process harness does)."""
        have = self._describe(c)
        grown = [t for t in have.values() if len(t.partitions) > 64]
        if grown:
            c.call(20, 6, {"topics": [{"name": t.name, "topic_id": ZERO} for t in grown], "timeout": 5000})
        missing = [n for n in FIXED_TOPICS if n not in have or len(have[n].partitions) > 64]
        if missing:
            c.call(19, 7, {"topics": [{"name": n, "num_partitions": FIXED_TOPICS[n], "replication_factor": 1,
                                       "assignments": [], "configs": []} for n in missing],
                           "timeout": 5000, "validate_only": False})  # errors: retried next time
            have = self._describe(c)
        ids = {n: (have[n].topic_id if n in have else uuid.uuid4()) for n in FIXED_TOPICS}
        batch = encode_batch([Record(i, 1_700_000_000_000 + i, b"k", b"v" * i) for i in range(3)], compression=0)
        old = self.world
        self.world = F.World("fz", ids["fz"], "fz-created", "fz-doomed", ids["fz-doomed"], "fz-grow", batch,
                             encode_subscription(["fz"]), encode_assignment({"fz": [0, 1]}))
        if old is not None:  # keep the live groups until the next ones are formed
            for f in ("classic_group", "classic_member", "classic_generation", "consumer_group",
                      "consumer_member", "consumer_epoch", "consumer_owned"):
                setattr(self.world, f, getattr(old, f))

    def _groups(self, c: RawClient) -> None:
        """A fresh stable classic group and a consumer group member, for seeds to name
        (fuzz_harness.Fuzzer.prepare_groups, over TCP)."""
        w = self.world
        self.groups += 1
        n = self.groups
        join = {"group_id": f"fj{n}", "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": w.subscription}], "reason": None}
        r = c.call(11, 5, join)
        if r.error_code == 79:  # MEMBER_ID_REQUIRED (KIP-394)
            r = c.call(11, 5, {**join, "member_id": r.member_id})
        if r.error_code != 0:
            self.problems.append(f"a well-formed JoinGroup of fj{n} failed: {r}")
            return
        s = c.call(14, 3, {"group_id": f"fj{n}", "generation_id": r.generation_id, "member_id": r.member_id,
                           "group_instance_id": None,
                           "assignments": [{"member_id": r.member_id, "assignment": w.assignment}]})
        if s.error_code != 0:
            self.problems.append(f"a well-formed SyncGroup of fj{n} failed: {s}")
            return
        w.classic_group, w.classic_member, w.classic_generation = f"fj{n}", r.member_id, r.generation_id
        h = c.call(68, 1, {"group_id": f"fc{n}", "member_id": w.consumer_member, "member_epoch": 0,
                           "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
                           "subscribed_topic_names": ["fz"], "subscribed_topic_regex": None,
                           "server_assignor": None, "topic_partitions": []})
        if h.error_code != 0:
            self.problems.append(f"a well-formed ConsumerGroupHeartbeat of fc{n} failed: {h}")
            return
        owned = h.assignment.topic_partitions if h.assignment is not None else ()
        w.consumer_group, w.consumer_epoch = f"fc{n}", h.member_epoch
        w.consumer_owned = tuple({"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in owned)

    # --- frames ----------------------------------------------------------------------------

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _recv_exact(self, n: int, deadline: float) -> bytes | None:
        """n bytes, b"" if the broker closed, None if the deadline passed first."""
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                return None
            except OSError:
                return b""
            if not chunk:
                return b""
            buf += chunk
        return buf

    def send_one(self, api_key: int, version: int, how: str, payload: bytes) -> None:
        if self.sock is None:
            self.sock = socket.create_connection(self.addr, timeout=5)
            self.connections += 1
        try:
            self.sock.settimeout(5)
            self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        except TimeoutError:
            self.outcomes["not read within 5 s"] += 1
            self._drop()
            return
        except OSError:
            self.outcomes["closed by the broker"] += 1  # before this frame was written whole
            self._drop()
            return
        deadline = time.monotonic() + FUZZ_ANSWER_S
        head = self._recv_exact(4, deadline)
        if head == b"":
            self.outcomes["closed by the broker"] += 1
            self._drop()
            return
        if head is None:
            self.outcomes["no answer (abandoned)"] += 1
            self._drop()
            return
        (size,) = struct.unpack(">i", head)
        if not 4 <= size <= 200 << 20:
            self.problems.append(f"response size {size} to api {api_key} v{version} ({how})")
            self._drop()
            return
        body = self._recv_exact(size, time.monotonic() + 10)
        if not body:
            self.outcomes["closed by the broker" if body == b"" else "answer cut short"] += 1
            self._drop()
            return
        self.outcomes["answered"] += 1
        if len(payload) >= 8 and body[:4] != payload[4:8] and len(self.misordered) < 20:
            self.misordered.append(f"api {api_key} v{version} ({how}): correlation id {payload[4:8].hex()}, "
                                   f"answered {body[:4].hex()}")

    def work(self) -> None:
        self.prepare()
        start = time.monotonic()
        while not self.stop.is_set() and self.sent < self.max_frames:
            if self.sent and self.sent % PREPARE_EVERY == 0:
                self.prepare()
            api_key = self.rng.choice(self.api_keys)
            version, seed_name, how, payload = self.case(self.rng, api_key)
            self.sent += 1
            if any(name in payload for name in self.forbidden):
                self.skipped += 1
                continue
            self.per_api[api_key] += 1
            self.send_one(api_key, version, f"seed {seed_name!r}, {how}", payload)
            ahead = start + self.sent / FUZZ_RATE - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        self._drop()


class Monitor(Worker):
    """Every SAMPLE_S: the broker's RSS and descriptors, whether it is alive, and how long a
    Metadata request for the soak topic takes on a connection of its own."""

    def __init__(self, broker, stop: threading.Event, crowd: IdleCrowd, started: float) -> None:
        super().__init__("soak-monitor", stop)
        self.b, self.crowd, self.started = broker, crowd, started
        self.samples: list[tuple[float, float, int, int, float]] = []  # t, rss MB, fds, idle open, probe s
        self.dead_at: float | None = None
        self.probe_failures: list[str] = []
        self.probe = RawClient(broker.bootstrap, timeout=10)

    def work(self) -> None:
        pid = self.b.proc.pid
        cid = 0
        while not self.stop.wait(SAMPLE_S):
            t = time.monotonic() - self.started
            if not self.b.alive():
                self.dead_at = t
                return
            cid += 1
            began = time.monotonic()
            try:
                md = self.probe.call(3, 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, correlation_id=cid)
                took = time.monotonic() - began
                if [(x.error_code, len(x.partitions)) for x in md.topics] != [(0, PARTITIONS)]:
                    self.probe_failures.append(f"t={t:.0f}s: {md}")
            except (OSError, AssertionError) as exc:
                took = time.monotonic() - began
                self.probe_failures.append(f"t={t:.0f}s: {exc!r}")
                self.probe.close()
                self.probe = RawClient(self.b.bootstrap, timeout=10)
            self.samples.append((t, _rss_mb(pid), _fds(pid), len(self.crowd.socks), took))


# --------------------------------------------------------------------------- checking


def _by_offset(offsets: array, seqs: array, end: int) -> tuple[array, Counter]:
    """The seq at each offset 0..end-1 (-1 where none) and what did not fit: offsets out of
    range, offsets seen twice with the same seq (repeats) or a different one (conflicts)."""
    table = array("q", [-1]) * end
    odd: Counter = Counter()
    for o, s in zip(offsets, seqs):
        if not 0 <= o < end:
            odd["out of range"] += 1
        elif table[o] == -1:
            table[o] = s
        elif table[o] == s:
            odd["repeated"] += 1
        else:
            odd["conflicting"] += 1
    return table, odd


def _read_all(bootstrap: str, ends: dict[int, int], timeout: float) -> tuple[dict[int, array], dict[int, array]]:
    """Every record of TOPIC from offset 0 up to `ends`, by partition: (offsets, seqs)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-reread", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "enable.partition.eof": True, "log.connection.close": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    offs = {p: array("q") for p in range(PARTITIONS)}
    seqs = {p: array("q") for p in range(PARTITIONS)}
    done = {p for p in range(PARTITIONS) if ends[p] == 0}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                        continue
                    raise AssertionError(f"re-read: {m.error()}")
                offs[m.partition()].append(m.offset())
                seqs[m.partition()].append(int(m.value()[:10]))
    finally:
        c.close()
    return offs, seqs


def _watermarks(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def _group_offsets(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    adm = AdminClient({"bootstrap.servers": bootstrap, "log.connection.close": False, "log_level": 4})
    req = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    res = adm.list_consumer_group_offsets([req], request_timeout=30)[GROUP].result(60)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def _log_findings(text: str) -> tuple[list[str], list[str], Counter]:
    """(traceback lines, ERROR/CRITICAL lines, WARNING messages counted by their first words)."""
    tracebacks = [line for line in text.splitlines() if "Traceback" in line]
    errors, warnings = [], Counter()
    for line in text.splitlines():
        m = LOG_LEVEL.match(line)
        if not m:
            continue
        if m.group(1) in ("ERROR", "CRITICAL"):
            errors.append(line)
        elif m.group(1) == "WARNING":
            msg = line[m.end():]
            warnings[re.sub(r"\d+", "N", msg)[:100]] += 1
    return tracebacks, errors, warnings


def _socket_buffer_bytes() -> int:
    """The most a muted connection can hold in kernel buffers: our send buffer and the
    broker's receive buffer at their autotuning maxima (16 MB if unreadable)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_rmem") as r, open("/proc/sys/net/ipv4/tcp_wmem") as w:
            return int(r.read().split()[2]) + int(w.read().split()[2])
    except (OSError, ValueError, IndexError):
        return 16 << 20


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


@pytest.mark.slow
@pytest.mark.interop
@pytest.mark.timeout(int(SOAK_SECONDS) + 900)
def test_soak_mixed_load(broker_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < MIN_DESCRIPTORS <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # the broker inherits it
    soft_now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_now < MIN_DESCRIPTORS:
        pytest.skip(f"ulimit -n is {soft_now} (hard {hard}): the soak holds {IDLE_CONNECTIONS} idle connections "
                    f"in this process and in the broker, and needs at least {MIN_DESCRIPTORS} descriptors")
    try:
        _soak(broker_factory)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _soak(broker_factory) -> None:
    fuzz_seed = int(os.environ.get("ODRADEK_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"\nsoak: {SOAK_SECONDS:.0f} s, warm-up {WARMUP_S:.0f} s, connections.max.idle.ms={IDLE_MS}, "
          f"ODRADEK_FUZZ_SEED={fuzz_seed}")
    b = broker_factory("soak", ["-o", f"connections.max.idle.ms={IDLE_MS}",
                                "-o", "group.initial.rebalance.delay.ms=0"])
    adm = AdminClient({"bootstrap.servers": b.bootstrap, "log.connection.close": False, "log_level": 4})
    assert adm.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30) is None
    del adm
    probe = RawClient(b.bootstrap)
    md = probe.call(3, 12, {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})
    topic_id = md.topics[0].topic_id
    probe.close()

    stop = threading.Event()  # the background load: idle crowd, pipeliner, fuzz, monitor
    stop_producing = threading.Event()
    producer = ProducerWorker(b.bootstrap, stop_producing, max_records=int(RATE * SOAK_SECONDS * 1.05) + 1000)
    consumer = ConsumerWorker(b.bootstrap, stop)
    crowd = IdleCrowd(b.port, stop, IDLE_CONNECTIONS,
                      max_reopens=IDLE_CONNECTIONS * (int(SOAK_SECONDS * 1000 / IDLE_MS) + 2))
    pipeliner = Pipeliner(b.port, stop)
    fuzzer = TcpFuzzer(b.bootstrap, stop, fuzz_seed, max_frames=int(FUZZ_RATE * SOAK_SECONDS * 1.05) + 1000,
                       forbidden=(TOPIC.encode(), GROUP.encode(), topic_id.bytes))

    opened_at = time.monotonic()
    crowd.open_all()
    print(f"{len(crowd.socks)} idle connections opened in {time.monotonic() - opened_at:.1f} s; "
          f"broker holds {_fds(b.proc.pid)} descriptors")
    started = time.monotonic()
    monitor = Monitor(b, stop, crowd, started)
    workers = [crowd, monitor, consumer, producer, pipeliner, fuzzer]
    for w in workers:
        w.start()
    deadline = started + SOAK_SECONDS
    next_report = started + 30
    failed_early = None
    try:
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if not b.alive():
                failed_early = f"the broker died {time.monotonic() - started:.0f} s into the soak"
                break
            broken = [w for w in workers if w.error is not None or (not w.is_alive() and w is not fuzzer
                                                                     and w is not pipeliner)]
            if broken:
                failed_early = "; ".join(f"{w.name}: {w.error or 'ended early'}" for w in broken)
                break
            if time.monotonic() >= next_report:
                next_report += 30
                last = monitor.samples[-1] if monitor.samples else (0, 0, 0, 0, 0)
                print(f"t={time.monotonic() - started:4.0f}s produced {producer.produced} acked {producer.acked} "
                      f"consumed {consumer.consumed} | fuzz {fuzzer.sent} {dict(fuzzer.outcomes)} | "
                      f"pipelined {pipeliner.requests} on {pipeliner.connections} | idle open {len(crowd.socks)} "
                      f"closed {len(crowd.lifetimes)} | RSS {last[1]:.1f} MB fds {last[2]} probe {last[4]*1000:.0f} ms",
                      flush=True)
    finally:
        stop_producing.set()
        producer.join(180)
        if failed_early is None and producer.error is None:
            consumer.finish({p: len(producer.acked_off[p]) for p in range(PARTITIONS)})
        stop.set()
        consumer.finished.wait(240)
        for w in (crowd, monitor, pipeliner, fuzzer):
            w.join(30)
    soak_s = time.monotonic() - started
    assert failed_early is None, f"{failed_early}\nbroker log tail:\n{b.log_path.read_text()[-4000:]}"
    for w in workers:
        assert w.error is None, f"{w.name} failed:\n{w.error}"
        assert not w.is_alive(), f"{w.name} did not stop"

    # --- the records, before the restart -------------------------------------------------
    ends = _watermarks(b.bootstrap)
    committed = _group_offsets(b.bootstrap)
    rss_end = _rss_mb(b.proc.pid)
    stop_began = time.monotonic()
    rc = b.stop(60)  # SIGTERM with the idle crowd and the muted pipeliner still connected
    stop_s = time.monotonic() - stop_began
    crowd.close_all()
    if pipeliner.sock is not None:
        pipeliner.sock.close()
    b.start()
    ends_after = _watermarks(b.bootstrap)
    committed_after = _group_offsets(b.bootstrap)
    reread_began = time.monotonic()
    reread_off, reread_seq = _read_all(b.bootstrap, ends_after, timeout=300)
    reread_s = time.monotonic() - reread_began
    assert b.stop(60) == 0

    # --- the summary ---------------------------------------------------------------------
    samples = monitor.samples
    after_warmup = [s for s in samples if s[0] >= WARMUP_S]
    baseline = after_warmup[0][1] if after_warmup else float("nan")
    rss_max = max((s[1] for s in after_warmup), default=float("nan"))
    peak_at = max(after_warmup, key=lambda s: s[1])[0] if after_warmup else float("nan")
    idle_counts = [s[3] for s in samples]
    probes = [s[4] for s in samples]
    log_text = b.log_path.read_text(errors="replace")
    tracebacks, error_lines, warnings = _log_findings(log_text)
    lifetimes = crowd.lifetimes
    summary = [
        f"soak {soak_s:.0f} s (ODRADEK_SOAK_SECONDS={SOAK_SECONDS:.0f}), fuzz seed {fuzz_seed}",
        (f"records: produced {producer.produced}, acknowledged {producer.acked}, failed {len(producer.failed)}, "
         f"unflushed {producer.unflushed}; consumed {consumer.consumed} (caught up: {consumer.caught_up}), "
         f"{consumer.commits} commits, commit errors {dict(consumer.commit_errors)}"),
        (f"log ends {ends} (after restart {ends_after}); committed {committed} (after restart {committed_after}); "
         f"re-read {sum(len(a) for a in reread_off.values())} records in {reread_s:.1f} s"),
        (f"client errors: producer {dict(producer.client_errors)}, consumer {dict(consumer.client_errors)}, "
         f"consumer message errors {dict(consumer.message_errors)}"),
        (f"fuzz: {fuzzer.sent} frames ({fuzzer.skipped} skipped for naming the soak's topic/group) on "
         f"{fuzzer.connections} connections, {dict(fuzzer.outcomes)}; {fuzzer.groups} fuzz worlds formed; "
         f"broker logged {log_text.count('closing connection from')} 'closing connection' lines"),
        (f"idle: {IDLE_CONNECTIONS} opened, {len(lifetimes)} closed by the broker and re-opened "
         f"(lifetime min {min(lifetimes, default=float('nan')):.1f} s, max {max(lifetimes, default=float('nan')):.1f} s), "
         f"open min {min(idle_counts, default=0)} / mean {sum(idle_counts) / max(len(idle_counts), 1):.0f} over samples, "
         f"open failures {dict(crowd.open_failures)}, unsolicited bytes {crowd.unsolicited}"),
        (f"pipeliner: {pipeliner.requests} Metadata requests written on {pipeliner.connections} connections "
         f"(per connection {pipeliner.per_connection}), muted after {pipeliner.muted_after} requests, "
         f"{pipeliner.closed_by_broker} closed by the broker, {[round(x) for x in pipeliner.closed_after_block]} s "
         f"after the first blocked send"),
        (f"RSS: start {samples[0][1] if samples else float('nan'):.1f} MB, baseline (t={WARMUP_S:.0f}s) {baseline:.1f} MB, "
         f"max after warm-up {rss_max:.1f} MB (t={peak_at:.0f}s, {rss_max / baseline:.3f}x), end {rss_end:.1f} MB; "
         f"fds max {max((s[2] for s in samples), default=0)}; {len(samples)} samples"),
        (f"probe latency: median {_pct(probes, 0.5) * 1000:.0f} ms, p99 {_pct(probes, 0.99) * 1000:.0f} ms, "
         f"max {max(probes, default=0) * 1000:.0f} ms, failures {len(monitor.probe_failures)}"),
        (f"shutdown: SIGTERM exit code {rc} in {stop_s:.1f} s; broker log {len(log_text) >> 10} KB, "
         f"{len(tracebacks)} traceback lines, {len(error_lines)} ERROR lines"),
        "warnings logged: " + ("; ".join(f"{n} x {m}" for m, n in warnings.most_common(8)) or "none"),
    ]
    print("\n".join(["--- soak summary ---", *summary]))
    print("RSS samples (t s, MB): " + " ".join(f"{t:.0f}:{r:.1f}" for t, r, *_ in samples[::5]))
    for line in error_lines[:20]:
        print("ERROR LINE:", line)

    # --- the verdict -----------------------------------------------------------------------
    assert not tracebacks, "the broker logged a traceback:\n" + log_text[max(0, log_text.index("Traceback") - 2000):][:6000]
    assert not error_lines, "the broker logged ERROR lines:\n" + "\n".join(error_lines[:20])
    assert monitor.dead_at is None
    assert not monitor.probe_failures, monitor.probe_failures[:10]
    assert not fuzzer.problems, fuzzer.problems[:10]
    assert not fuzzer.misordered, fuzzer.misordered
    assert fuzzer.skipped == 0  # the fuzzer never named the soak's topic or group
    assert fuzzer.sent >= FUZZ_RATE * SOAK_SECONDS * 0.5, f"fuzz ran at under half its rate: {fuzzer.sent} frames"

    assert not producer.failed, f"{len(producer.failed)} records failed: {producer.failed[:5]}"
    assert producer.unflushed == 0
    assert not any("FATAL" in k for k in producer.client_errors), producer.client_errors
    assert producer.acked == producer.produced >= RATE * SOAK_SECONDS * 0.5
    assert consumer.caught_up, f"the consumer did not catch up: at {consumer.next}, log ends {ends}"
    assert not consumer.message_errors, consumer.message_errors
    total = 0
    for p in range(PARTITIONS):
        acked, odd = _by_offset(producer.acked_off[p], producer.acked_seq[p], ends[p])
        assert not odd, f"partition {p}: delivery reports {dict(odd)} (log end {ends[p]})"
        assert acked.count(-1) == 0, (f"partition {p}: {acked.count(-1)} offsets below the log end {ends[p]} "
                                      f"hold records the producer did not acknowledge (duplicates?)")
        assert len(producer.acked_off[p]) == ends[p]
        consumed, odd = _by_offset(consumer.off[p], consumer.seq[p], ends[p])
        assert not odd.get("out of range") and not odd.get("conflicting"), f"partition {p}: consumed {dict(odd)}"
        lost = [o for o in range(ends[p]) if consumed[o] != acked[o]]
        assert not lost, (f"partition {p}: {len(lost)} acknowledged records not consumed as acknowledged, "
                          f"first offsets {lost[:10]}")
        assert all(s % PARTITIONS == p for s in acked)
        total += ends[p]
    all_seqs = sorted(s for p in range(PARTITIONS) for s in producer.acked_seq[p])
    assert all_seqs == list(range(producer.produced)), "some record acknowledged twice or never"
    assert total == producer.produced
    assert committed == ends, f"committed offsets {committed} are not the log ends {ends}"
    assert consumer.committed == ends, f"the consumer's view of its commits {consumer.committed} vs ends {ends}"

    # --- the restart -------------------------------------------------------------------------
    assert rc == 0, f"SIGTERM exit code {rc}"
    assert ends_after == ends, f"log ends {ends} became {ends_after} across the restart"
    assert committed_after == ends, f"committed offsets after the restart: {committed_after}, log ends {ends}"
    for p in range(PARTITIONS):
        again, odd = _by_offset(reread_off[p], reread_seq[p], ends[p])
        assert not odd, f"partition {p}: re-read {dict(odd)}"
        acked, _ = _by_offset(producer.acked_off[p], producer.acked_seq[p], ends[p])
        assert again == acked, f"partition {p}: the records read after the restart differ"

    # --- connections ---------------------------------------------------------------------
    assert not crowd.open_failures, crowd.open_failures
    assert crowd.unsolicited == 0, "the broker sent bytes to connections that never asked"
    idle_s = IDLE_MS / 1000
    if SOAK_SECONDS >= idle_s + 30:
        assert len(lifetimes) >= IDLE_CONNECTIONS, f"only {len(lifetimes)} idle connections were closed"
        assert min(lifetimes) >= idle_s - 0.5, f"an idle connection was closed after {min(lifetimes):.1f} s"
        assert max(lifetimes) <= idle_s + 30, f"an idle connection lived {max(lifetimes):.1f} s"
        assert pipeliner.closed_by_broker >= 1, "the muted pipeliner was never closed as idle"
    steady = [s[3] for s in samples if s[0] > 5]
    assert steady and sum(steady) / len(steady) >= 0.95 * IDLE_CONNECTIONS, "fewer idle connections than meant"
    assert pipeliner.muted_after, "the pipeliner's sends never blocked: it was not muted"
    # Muted, the broker reads nothing more: what one connection writes is bounded by the
    # responses queued before muting plus the kernel's buffers (64 KB of backlog besides).
    # Unmuted, it would be read for the connection's whole life (~10^5 requests a second).
    bound = 4 * _socket_buffer_bytes() // pipeliner.frame_len
    assert max(pipeliner.per_connection) < bound, (
        f"the broker kept reading a client that never reads: {max(pipeliner.per_connection)} requests "
        f"on one connection, more than {bound}")

    # --- memory ----------------------------------------------------------------------------
    assert after_warmup, "no RSS sample after the warm-up"
    assert rss_max <= RSS_FACTOR * baseline, (
        f"RSS grew from {baseline:.1f} MB (t={WARMUP_S:.0f}s) to {rss_max:.1f} MB (t={peak_at:.0f}s): "
        f"more than {RSS_FACTOR}x")
