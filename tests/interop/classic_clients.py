"""Helpers for the classic-group interop tests (test_classic_groups.py).

One `Journal` per test records every rebalance callback of every consumer, from whatever
thread runs it, and who holds each partition (from an assign callback to a revoke or lost
callback). Three kinds of member feed it:

  * `KPMember`: a kafka-python consumer polled by a thread of its own (kafka-python runs
    JoinGroup/SyncGroup inside poll(), and poll() blocks; its listeners run on its IO
    thread);
  * `CKMember`: a librdkafka (confluent_kafka) consumer polled round-robin by the test's
    thread, as in test_consumer_groups.py (librdkafka runs rebalance callbacks inside
    poll(); its background thread heartbeats whether it is polled or not);
  * `CKChild`: a librdkafka consumer in a subprocess, so that it can be SIGKILLed; it
    reports its callbacks and records as JSON lines and commits when told to on stdin.

aiokafka members are asyncio objects: the test drives them in its own event loop.
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import signal
import subprocess
import sys
import threading
import time

# --------------------------------------------------------------------------- broker and group timing

SESSION_MS = 3000  # every consumer's session timeout (the broker's minimum is lowered to allow it)
HEARTBEAT_MS = 100
MAX_POLL_MS = 10000  # kafka-python's and librdkafka's JoinGroup rebalance timeout
BROKER_OPTS = [
    "-o", "group.initial.rebalance.delay.ms=0",
    "-o", "group.min.session.timeout.ms=1000",
    "-o", "group.max.session.timeout.ms=60000",
]
TIMEOUT = 20.0  # seconds, for any single wait in these tests


def wait_until(cond, timeout: float, what, step: float = 0.02) -> float:
    """Wait (sleeping) until cond() holds; returns the time it held."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return time.monotonic()
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {detail}")
        time.sleep(step)


# --------------------------------------------------------------------------- journal


class Journal:
    """Rebalance callbacks of the consumers of one test, in the order they ran (thread-safe).

    `owner` says who holds each partition now. Being assigned a partition another consumer
    still holds is a violation, and so is consuming a record of a partition one does not hold
    (checked by the members). A consumer that dies without revoking (SIGKILL, fencing) is
    `forget`-ed by the test when it knows it is gone."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, tuple[tuple[str, int], ...]]] = []
        self.owner: dict[tuple[str, int], str] = {}
        self.violations: list[str] = []

    def record(self, who: str, kind: str, parts) -> None:
        parts = tuple(sorted(parts))
        with self.lock:
            t = time.monotonic()
            self.events.append((t, who, kind, parts))
            for tp in parts:
                holder = self.owner.get(tp)
                if kind == "assign":
                    if holder is not None and holder != who:
                        self.violations.append(f"{t:.3f}: {who} assigned {tp} still held by {holder}")
                    self.owner[tp] = who
                elif holder == who:
                    del self.owner[tp]
                # a revoke of what one does not hold is harmless: eager clients revoke
                # their whole (possibly empty or already lost) assignment

    def forget(self, who: str) -> None:
        with self.lock:
            self.events.append((time.monotonic(), who, "gone", ()))
            for tp in [tp for tp, h in self.owner.items() if h == who]:
                del self.owner[tp]

    def held_by(self, who: str) -> set[tuple[str, int]]:
        with self.lock:
            return {tp for tp, h in self.owner.items() if h == who}

    def check_consumed(self, who: str, tp: tuple[str, int], offset: int) -> None:
        with self.lock:
            holder = self.owner.get(tp)
            if holder != who:
                self.violations.append(f"{who} consumed {tp} offset {offset} while it was held by {holder}")

    def since(self, t: float, who: str | None = None) -> list:
        with self.lock:
            return [e for e in self.events if e[0] >= t and (who is None or e[1] == who)]

    def last_event_time(self) -> float:
        with self.lock:
            return self.events[-1][0] if self.events else 0.0


def partition_split(owned: dict[str, set], partitions: set) -> bool:
    """The members' sets are disjoint, cover `partitions`, and differ in size by at most one."""
    seen: set = set()
    sizes = []
    for parts in owned.values():
        if seen & parts:
            return False
        seen |= parts
        sizes.append(len(parts))
    return seen == partitions and max(sizes) - min(sizes) <= 1


# --------------------------------------------------------------------------- kafka-python


class KPMember:
    """A kafka-python group consumer polled by its own thread.

    Everything that touches the consumer runs on that thread (`call`). Records are
    (topic, partition, offset, key) in consumption order; `positions` is the offset after
    the last record consumed of each partition.

    kafka-python 3.0.12 quirk: a JoinGroup+SyncGroup that completes while no poll() is
    waiting for it is thrown away and a new JoinGroup sent (join_group_async starts a new
    task when the cached one `is_done`), so a member sometimes rejoins once more right after
    a rebalance; when it is the leader, that is one more rebalance. Tests wait for a quiet
    group instead of counting rebalances."""

    POLL_MS = 200

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], journal: Journal, **conf) -> None:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.journal.record(member.name, "revoke", [(tp.topic, tp.partition) for tp in revoked])

            def on_partitions_assigned(self, assigned):
                member.journal.record(member.name, "assign", [(tp.topic, tp.partition) for tp in assigned])

            def on_partitions_lost(self, lost):
                member.journal.record(member.name, "lost", [(tp.topic, tp.partition) for tp in lost])

        self.name = name
        self.journal = journal
        self.records: list[tuple[str, int, int, bytes]] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.errors: list[BaseException] = []
        self.commands: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        settings = {
            "bootstrap_servers": bootstrap, "group_id": group, "client_id": f"kp-{name}",
            "session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS,
            "max_poll_interval_ms": MAX_POLL_MS, "auto_offset_reset": "earliest",
            "retry_backoff_ms": 50, "reconnect_backoff_ms": 50,
            # consumed offsets are committed before every rebalance (JoinGroup) and on close:
            # the way kafka-python gives exactly-once across rebalances (its listeners run on
            # the IO thread, where a synchronous commit() would block its own event loop)
            "enable_auto_commit": True, "auto_commit_interval_ms": 600_000,
        }
        settings.update(conf)
        self.consumer = KafkaConsumer(**settings)
        self.consumer.subscribe(topics, listener=Listener())
        self.thread = threading.Thread(target=self._run, name=f"kp-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            while True:
                try:
                    fn, fut = self.commands.get_nowait()
                except queue.Empty:
                    break
                try:
                    fut.set_result(fn(self.consumer))
                except BaseException as exc:  # noqa: BLE001 (handed to the caller)
                    fut.set_exception(exc)
            try:
                batch = self.consumer.poll(timeout_ms=self.POLL_MS)
            except BaseException as exc:  # noqa: BLE001 (recorded, asserted on)
                self.errors.append(exc)
                time.sleep(0.05)
                continue
            for msgs in batch.values():
                for m in msgs:
                    key = (m.topic, m.partition)
                    self.journal.check_consumed(self.name, key, m.offset)
                    self.records.append((m.topic, m.partition, m.offset, m.key))
                    self.positions[key] = m.offset + 1

    def call(self, fn, timeout: float = TIMEOUT):
        """Run fn(consumer) on the polling thread; returns its result."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.commands.put((fn, fut))
        return fut.result(timeout)

    def commit(self) -> dict[tuple[str, int], int]:
        """Commit (synchronously) the position after the last record consumed of each partition held."""
        from kafka import OffsetAndMetadata, TopicPartition

        def op(c):
            held = {(tp.topic, tp.partition) for tp in c.assignment()}
            offsets = {tp: off for tp, off in self.positions.items() if tp in held}
            c.commit({TopicPartition(*tp): OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()})
            return offsets

        return self.call(op)

    def committed(self, parts) -> dict[tuple[str, int], int | None]:
        from kafka import TopicPartition

        return self.call(lambda c: {tp: c.committed(TopicPartition(*tp)) for tp in parts})

    def member_id(self) -> str:
        return self.call(lambda c: c._coordinator._generation.member_id)

    def owned(self) -> set[tuple[str, int]]:
        return self.journal.held_by(self.name)

    def close(self) -> None:
        if self.thread.is_alive():
            self._stop.set()
            self.thread.join(10)
            assert not self.thread.is_alive(), f"{self.name}: the polling thread did not stop"
            self.consumer.close()


# --------------------------------------------------------------------------- librdkafka


def ck_conf(bootstrap: str, group: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "classic",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
        "max.poll.interval.ms": MAX_POLL_MS,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }
    conf.update(extra)
    return conf


class CKMember:
    """A librdkafka group consumer, polled by the test's thread (`poll_all`)."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], journal: Journal,
                 commit_on_revoke: bool = True, **conf) -> None:
        from confluent_kafka import Consumer

        self.name = name
        self.journal = journal
        self.records: list[tuple[str, int, int, bytes]] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.errors: list = []  # KafkaErrors from error_cb and from poll()
        self.commit_retries: list = []  # (when, partitions, error) of revoke commits retried
        self.commit_on_revoke = commit_on_revoke
        self.closed = False
        self.consumer = Consumer(ck_conf(bootstrap, group, error_cb=self._error_cb, **conf))
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _error_cb(self, err) -> None:
        self.errors.append(err)

    def _on_assign(self, _c, partitions) -> None:
        self.journal.record(self.name, "assign", [(tp.topic, tp.partition) for tp in partitions])

    def _on_revoke(self, _c, partitions) -> None:
        parts = [(tp.topic, tp.partition) for tp in partitions]
        if self.commit_on_revoke:
            try:
                self._commit_retrying(parts)  # synchronously, before the revocation is acknowledged
            except BaseException as exc:  # noqa: BLE001 (no exception may escape a librdkafka callback)
                self.errors.append(exc)
        self.journal.record(self.name, "revoke", parts)

    def _commit_retrying(self, parts, attempts: int = 20) -> None:
        """commit(), retried on REBALANCE_IN_PROGRESS as Java's commitSync retries it (a
        RetriableCommitFailedException): a revoke callback can run while the coordinator
        waits for the leader's assignment, when Kafka refuses commits too. Each retry is
        kept in `commit_retries`, so a test can say what happened."""
        from confluent_kafka import KafkaError, KafkaException

        for attempt in range(attempts):
            try:
                self.commit(parts)
                return
            except (KafkaException, AssertionError) as exc:
                codes = {exc.args[0].code()} if isinstance(exc, KafkaException) else \
                    {tp.error.code() for tp in getattr(exc, "failed", ())}
                if codes != {KafkaError.REBALANCE_IN_PROGRESS} or attempt == attempts - 1:
                    raise
                self.commit_retries.append((time.monotonic(), parts, str(exc)))
                time.sleep(0.1)

    def _on_lost(self, _c, partitions) -> None:
        self.journal.record(self.name, "lost", [(tp.topic, tp.partition) for tp in partitions])

    def commit(self, parts=None) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        parts = self.owned() if parts is None else parts
        offsets = {tp: self.positions[tp] for tp in sorted(parts) if tp in self.positions}
        if offsets:
            result = self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                          asynchronous=False)
            failed = [tp for tp in result if tp.error is not None]
            if failed:
                exc = AssertionError(f"{self.name}: commit failed for {failed}")
                exc.failed = failed
                raise exc
        return offsets

    def owned(self) -> set[tuple[str, int]]:
        return self.journal.held_by(self.name)

    def poll(self, timeout: float = 0.02):
        if self.closed:
            return None
        m = self.consumer.poll(timeout)
        if m is None:
            return None
        if m.error() is not None:
            self.errors.append(m.error())
            return m
        tp = (m.topic(), m.partition())
        self.journal.check_consumed(self.name, tp, m.offset())
        self.records.append((m.topic(), m.partition(), m.offset(), m.key()))
        self.positions[tp] = m.offset() + 1
        return m

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()  # runs the revoke callback for what it holds (commits it), then leaves


CHILD = r"""
import json, logging, sys, threading, time
from confluent_kafka import Consumer, TopicPartition
conf = json.loads(sys.argv[1]); topics = json.loads(sys.argv[2])
out_lock = threading.Lock()
def say(**kw):
    with out_lock:
        print(json.dumps(kw), flush=True)
class Heartbeats(logging.Handler):
    # librdkafka's protocol debug log, served from poll(): when each heartbeat response arrived
    def emit(self, record):
        if "Received HeartbeatResponse" in record.getMessage():
            say(event="heartbeat", t=time.monotonic())
log = logging.getLogger("child")
log.setLevel(logging.DEBUG)
log.addHandler(Heartbeats())
log.propagate = False
conf.update({"debug": "protocol", "logger": log})
positions = {}
commands = []
def read_stdin():
    for line in sys.stdin:
        commands.append(line.strip())
threading.Thread(target=read_stdin, daemon=True).start()
def cb(kind):
    return lambda c, ps: say(event=kind, partitions=[[p.topic, p.partition] for p in ps])
conf["error_cb"] = lambda e: say(event="error", code=e.code(), text=str(e))
c = Consumer(conf)
c.subscribe(topics, on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
say(event="subscribed")
while True:
    while commands:
        if commands.pop(0) == "commit":
            offs = [TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())]
            res = c.commit(offsets=offs, asynchronous=False) if offs else []
            say(event="committed", offsets=[[x.topic, x.partition, x.offset] for x in res],
                errors=[str(x.error) for x in res if x.error is not None])
    m = c.poll(0.05)
    if m is None:
        continue
    if m.error() is not None:
        say(event="error", code=m.error().code(), text=str(m.error()))
        continue
    positions[(m.topic(), m.partition())] = m.offset() + 1
    say(event="record", topic=m.topic(), partition=m.partition(), offset=m.offset())
"""


class CKChild:
    """A librdkafka group consumer in a subprocess (so it can be SIGKILLed)."""

    def __init__(self, name: str, conf: dict, topics: list[str], journal: Journal) -> None:
        self.name = name
        self.journal = journal
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(conf), json.dumps(topics)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue = queue.Queue()
        self.records: list[tuple[str, int, int]] = []
        self.committed: list[dict] = []
        self.errors: list[dict] = []
        self.last_heartbeat: float | None = None  # time.monotonic() (system-wide) of the last response
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def drain(self) -> None:
        while True:
            try:
                ev = self.lines.get_nowait()
            except queue.Empty:
                return
            kind = ev["event"]
            if kind == "heartbeat":
                self.last_heartbeat = ev["t"]
            elif kind in ("assign", "revoke", "lost"):
                self.journal.record(self.name, kind, [tuple(x) for x in ev["partitions"]])
            elif kind == "record":
                tp = (ev["topic"], ev["partition"])
                self.journal.check_consumed(self.name, tp, ev["offset"])
                self.records.append((ev["topic"], ev["partition"], ev["offset"]))
            elif kind == "committed":
                self.committed.append(ev)
            elif kind == "error":
                self.errors.append(ev)

    def poll(self, timeout: float = 0.0) -> None:  # so that it can sit in poll_all's list
        self.drain()

    def owned(self) -> set[tuple[str, int]]:
        self.drain()
        return self.journal.held_by(self.name)

    def commit(self, timeout: float = TIMEOUT) -> dict[tuple[str, int], int]:
        """Tell the child to commit its positions; returns what it committed."""
        done = len(self.committed)
        self.proc.stdin.write(b"commit\n")
        self.proc.stdin.flush()
        wait_until(lambda: self.drain() or len(self.committed) > done, timeout, f"{self.name} to commit")
        ev = self.committed[done]
        assert not ev["errors"], f"{self.name}: commit failed: {ev['errors']}"
        return {(t, p): o for t, p, o in ev["offsets"]}

    def kill(self) -> float:
        self.proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        self.proc.wait(10)
        time.sleep(0.05)  # let the reader thread take what the child printed before it died
        self.drain()
        self.journal.forget(self.name)
        return killed_at

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
