"""Exactly-once consume-transform-produce with librdkafka against real broker processes
(KIP-98 transactions, KIP-447 group-metadata fencing, KIP-848 and classic groups).

Workers (eos_worker.py, one subprocess each, so that they can be SIGKILLed and SIGSTOPped)
read an input topic of 6 partitions with `isolation.level=read_committed` and, per batch,
write one record per input record to an output topic of 6 partitions (same partition
number) in a transaction that also commits the input offsets (send_offsets_to_transaction
with the consumer's group metadata). The value of each output record is the identity
`topic/partition/offset` of its input record. A plain idempotent producer writes the input
at a bounded rate while the workers run, so that the faults happen mid-stream.

What must hold at the end, read back from the output topic:

  * read_committed: every input record exactly once -- no duplicate, none missing -- and
    output partition p holds input partition p's records in offset order (a partition
    changes owner only after its owner's transaction ended, and the new owner starts from
    the offset that transaction committed);
  * read_uncommitted: a superset (the records of aborted transactions are there too); a
    worker killed inside a transaction (made deterministic: it writes and flushes its
    records, reports them, then waits to be killed) leaves records that read_committed
    never shows, and read_uncommitted does;
  * the group's committed offsets are the input's end offsets;
  * no worker met a fatal error (a fenced producer), except where the test says so, and
    the broker logged no traceback.

The zombie test pauses a worker (SIGSTOP, sent by the worker to itself right after it
wrote a transaction's records and took its offsets and group metadata) past its session
timeout; another worker takes its partitions over and commits past them; the zombie is
continued and must fail to commit (KIP-447: TxnOffsetCommit with a stale member epoch or
generation, or an unknown member, is refused, which librdkafka makes an abortable error).

The zombie test runs three ways: KIP-848 with the zombie committing as soon as it is
continued (the broker no longer knows the member: UNKNOWN_MEMBER_ID), KIP-848 with the
zombie first joining again under its member id and then committing with its old member
epoch (KIP-1251 refuses it: ILLEGAL_GENERATION up to TxnOffsetCommit v5), and classic.

The cluster test runs the loop on etcd and three brokers (RF 3) and kills -9 the broker
that coordinates one worker's transactional id (the leader of its `__transaction_state`
partition, cross-checked with FindCoordinator key_type 1) while that worker holds a
transaction open (its records written and acknowledged); the worker then commits that
transaction through the coordinator's successor, which must know it from the replicated
`__transaction_state`, and the output must still be exactly-once.

Each test takes 13-20 s (input written at RATE for N / RATE s, plus start and checks).
Run with -s to see what happened (commits, aborts and their errors, per worker).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.net import Client
from odradek.client.versions import Api
from odradek.commands.cluster import LocalCluster
from odradek.coordinator.runtime import partition_for
from tests.interop.group_failover import SteadyProducer

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

WORKER = str(Path(__file__).with_name("eos_worker.py"))
ROOT = Path(__file__).resolve().parents[2]
TXN_STATE = "__transaction_state"
TXN_PARTITIONS = 3
PARTITIONS = 6
N = 3000  # input records
RATE = 200.0  # input records/s: the input takes 15 s to write, the faults happen meanwhile
TXN_TIMEOUT_MS = 10000
SESSION_MS = 3000
FENCE_ERRORS = {"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "STALE_MEMBER_EPOCH",
                "FENCED_MEMBER_EPOCH"}

BROKER_OPTS = [
    "-o", f"transaction.state.log.num.partitions={TXN_PARTITIONS}",
    "-o", "offsets.topic.num.partitions=3",
    # KIP-848 groups: the broker decides heartbeats and session timeouts
    "-o", "group.consumer.heartbeat.interval.ms=200",
    "-o", "group.consumer.min.heartbeat.interval.ms=100",
    "-o", f"group.consumer.session.timeout.ms={SESSION_MS}",
    "-o", "group.consumer.min.session.timeout.ms=1000",
    # classic groups: the members ask for a 4 s session (the minimum is lowered for it)
    "-o", "group.initial.rebalance.delay.ms=0",
    "-o", "group.min.session.timeout.ms=1000",
    "-o", "group.max.session.timeout.ms=60000",
]


# --------------------------------------------------------------------------- workers


class WorkerProc:
    """An eos_worker.py subprocess and the events it printed."""

    def __init__(self, name: str, conf: dict, log_dir: Path) -> None:
        self.name = name
        self.conf = {**conf, "name": name, "tid": conf.get("tid") or f"{conf['group']}-{name}-{uuid.uuid4().hex[:6]}"}
        self.stderr_path = log_dir / f"worker-{name}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen([sys.executable, WORKER, json.dumps(self.conf)], stdout=subprocess.PIPE,
                                     stderr=self._stderr, cwd=ROOT)
        self.lock = threading.Lock()
        self.events: list[dict] = []
        self.killed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def tid(self) -> str:
        return self.conf["tid"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"ev": "garbage", "line": line.decode(errors="replace")}
            with self.lock:
                self.events.append(event)

    def of(self, ev: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["ev"] == ev]

    def wait(self, cond, timeout: float, what: str):
        """Wait until cond(self) is truthy (returned), failing with `what` and the worker's
        recent events after `timeout` s, or as soon as the process exited."""
        deadline = time.monotonic() + timeout
        while True:
            value = cond(self)
            if value:
                return value
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the last lines
                value = cond(self)
                if value:
                    return value
                raise AssertionError(f"worker {self.name} exited ({self.proc.returncode}) before {what}\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.name}: no {what} within {timeout}s\n{self.tail()}")
            time.sleep(0.05)

    def committed_offsets(self) -> dict[int, int]:
        """The highest offset this worker committed per input partition."""
        out: dict[int, int] = {}
        for e in self.of("commit"):
            for p, off in e["offsets"].items():
                out[int(p)] = max(out.get(int(p), -1), off)
        return out

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the worker ends its transaction, leaves the group, exits 0); SIGKILL if it does not end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        self._reader.join(5)
        self._stderr.close()
        return self.proc.returncode

    def stopped_by_signal(self) -> bool:
        """Whether the process is stopped (SIGSTOP): state T in /proc/<pid>/stat."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def tail(self, n: int = 25) -> str:
        with self.lock:
            lines = [json.dumps(e) for e in self.events[-n:]]
        err = self.stderr_path.read_text(errors="replace")[-2000:] if self.stderr_path.exists() else ""
        return f"--- {self.name} events:\n" + "\n".join(lines) + (f"\n--- {self.name} stderr:\n{err}" if err else "")

    def summary(self) -> str:
        with self.lock:
            counts = Counter(e["ev"] for e in self.events)
            aborts = Counter(e["reason"].get("name") for e in self.events if e["ev"] == "abort")
            errors = Counter(e.get("name") for e in self.events if e["ev"] in ("client_error", "retry"))
        return (f"{self.name} (rc {self.proc.returncode}{', killed' if self.killed else ''}): {dict(counts)}"
                + (f" aborts {dict(aborts)}" if aborts else "") + (f" errors {dict(errors)}" if errors else ""))


def has_committed(w: WorkerProc, n: int = 1) -> bool:
    return len(w.of("commit")) >= n


def fatal_exits(workers: list[WorkerProc], allowed: set[str] = frozenset()) -> list[str]:
    out = []
    for w in workers:
        if w.name in allowed or w.killed:
            continue
        if w.of("fatal") or w.proc.returncode not in (0, None):
            out.append(f"{w.name} exited {w.proc.returncode}: {w.of('fatal')}\n{w.tail(10)}")
    return out


# --------------------------------------------------------------------------- topics and reading


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def create_topics(bootstrap: str, names: list[str], partitions: int, rf: int = 1) -> None:
    adm = admin(bootstrap)  # alive until the futures are done
    config = {"min.insync.replicas": "2"} if rf > 1 else {}
    fs = adm.create_topics([NewTopic(n, partitions, rf, config=config) for n in names], operation_timeout=20)
    for f in fs.values():
        f.result(30)


def reader(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-reader-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "enable.partition.eof": True, "fetch.wait.max.ms": 100, "log_level": 0,
                     "topic.metadata.refresh.interval.ms": 1000})


class OutputWatcher:
    """A read_committed consumer of the whole output topic, polled by the test while the
    workers run, counting the distinct input identities it has seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = reader(bootstrap, "read_committed")
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.seen: set[bytes] = set()
        self.records = 0

    def poll(self, seconds: float) -> int:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for m in self.consumer.consume(500, 0.1):
                if m.error() is None:
                    self.seen.add(m.value())
                    self.records += 1
        return len(self.seen)

    def close(self) -> None:
        self.consumer.close()


def wait_resolved(bootstrap: str, topic: str, timeout: float) -> dict[int, int]:
    """Wait until no transaction is open on `topic`: the last stable offset (ListOffsets
    latest, read_committed) equals the high watermark, on every partition. Returns the ends."""
    rc, ru = reader(bootstrap, "read_committed"), reader(bootstrap, "read_uncommitted")
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                lso = {p: rc.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                       for p in range(PARTITIONS)}
                hw = {p: ru.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                      for p in range(PARTITIONS)}
            except KafkaException:
                lso, hw = None, None
            if lso is not None and lso == hw:
                return hw
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: transactions still open after {timeout}s: "
                                     f"last stable offsets {lso}, high watermarks {hw}")
            time.sleep(0.5)
    finally:
        rc.close()
        ru.close()


def read_to_end(bootstrap: str, topic: str, isolation: str, ends: dict[int, int],
                timeout: float = 60.0) -> dict[int, list[bytes]]:
    """Every record value of `topic` as `isolation` sees it, per partition in offset order,
    reading until each partition reported end-of-partition at (or past) `ends`."""
    c = reader(bootstrap, isolation)
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    done: set[int] = {p for p, end in ends.items() if end == 0}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while len(done) < PARTITIONS:
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} read of {topic} did not reach {ends} in {timeout}s; "
                                     f"read {({p: len(v) for p, v in out.items()})}, done {sorted(done)}")
            for m in c.consume(1000, 0.2):
                err = m.error()
                if err is None:
                    out[m.partition()].append(m.value())
                elif err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                else:
                    raise AssertionError(f"{isolation} read of {topic}: {err}")
        return out
    finally:
        c.close()


def group_committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "log_level": 0})
    try:
        return {tp.partition: tp.offset
                for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)}
    finally:
        c.close()


def check_exactly_once(bootstrap: str, in_topic: str, out_topic: str, group: str, acked: dict,
                       problems: list[str], notes: list[str], txn_wait: float = 60.0) -> dict:
    """The end-of-run checks of the module docstring; appends to `problems`, returns counts."""
    in_ends: dict[int, int] = defaultdict(int)
    for p, off in acked:
        in_ends[p] = max(in_ends[p], off + 1)
    expected = {p: [f"{in_topic}/{p}/{o}".encode() for o in range(in_ends[p])] for p in range(PARTITIONS)}
    total = sum(len(v) for v in expected.values())
    if total != len(acked):
        problems.append(f"the input has gaps: {len(acked)} records acknowledged, end offsets {dict(in_ends)}")

    ends = wait_resolved(bootstrap, out_topic, txn_wait)
    committed = read_to_end(bootstrap, out_topic, "read_committed", ends)
    uncommitted = read_to_end(bootstrap, out_topic, "read_uncommitted", ends)
    n_committed = sum(len(v) for v in committed.values())
    n_uncommitted = sum(len(v) for v in uncommitted.values())
    notes.append(f"output: {n_committed} records read_committed, {n_uncommitted} read_uncommitted "
                 f"(high watermarks {ends}), input {total}")

    counts = Counter(v for vs in committed.values() for v in vs)
    duplicates = sorted(v for v, c in counts.items() if c > 1)
    everything = {v for vs in expected.values() for v in vs}
    missing = sorted(everything - set(counts))
    foreign = sorted(set(counts) - everything)
    if duplicates:
        problems.append(f"read_committed: {len(duplicates)} input records output more than once, e.g. "
                        f"{[(v, counts[v]) for v in duplicates[:8]]}")
    if missing:
        problems.append(f"read_committed: {len(missing)} input records never output, e.g. {missing[:8]}")
    if foreign:
        problems.append(f"read_committed: {len(foreign)} records that are no input's, e.g. {foreign[:8]}")
    if not (duplicates or missing or foreign):
        for p in range(PARTITIONS):
            if committed[p] != expected[p]:
                i = next(i for i, (a, b) in enumerate(zip(committed[p], expected[p])) if a != b)
                problems.append(f"read_committed: output partition {p} is out of order at index {i}: "
                                f"{committed[p][max(0, i - 2):i + 3]}")
    if n_uncommitted < n_committed:
        problems.append(f"read_uncommitted shows fewer records ({n_uncommitted}) than read_committed ({n_committed})")
    all_uncommitted = Counter(v for vs in uncommitted.values() for v in vs)
    if any(all_uncommitted[v] < c for v, c in counts.items()):
        problems.append("read_committed shows a record more often than read_uncommitted does")

    offsets = group_committed(bootstrap, group, in_topic)
    want = {p: in_ends[p] for p in range(PARTITIONS)}
    if offsets != want:
        problems.append(f"group {group}: committed offsets {offsets}, the input ends at {want}")
    return {"committed": n_committed, "uncommitted": n_uncommitted, "uncommitted_counts": all_uncommitted}


def log_problems(texts: dict[str, str]) -> list[str]:
    out = []
    for name, text in texts.items():
        if "Traceback" in text:
            i = text.index("Traceback")
            out.append(f"{name} logged a traceback:\n{text[max(0, i - 300):i + 2500]}")
    return out


def report(problems: list[str], notes: list[str], workers: list[WorkerProc]) -> str:
    tails = "\n".join(w.tail(12) for w in workers if w.killed is False and w.proc.returncode not in (0, None))
    return ("\n".join(problems) + "\n\nnotes:\n" + "\n".join(notes) + "\n\nworkers:\n"
            + "\n".join(w.summary() for w in workers) + ("\n\n" + tails if tails else ""))


# --------------------------------------------------------------------------- the run


class Run:
    """Topics, the input feeder, the workers and the watcher of one test."""

    def __init__(self, bootstrap: str, log_dir: Path, protocol: str, tag: str, rf: int = 1,
                 count: int = N, rate: float = RATE, **worker_conf) -> None:
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.input = f"eos-in-{tag}"
        self.output = f"eos-out-{tag}"
        self.group = f"eos-{protocol}-{tag}"
        self.count = count
        create_topics(bootstrap, [self.input, self.output], PARTITIONS, rf)
        self.worker_conf = {"bootstrap": bootstrap, "group": self.group, "protocol": protocol, "input": self.input,
                            "output": self.output, "txn_timeout_ms": TXN_TIMEOUT_MS, "batch": 50, "max_s": 240,
                            **worker_conf}
        self.feeder = SteadyProducer(bootstrap, self.input, PARTITIONS, count, rate=rate, tag=tag)
        self.workers: list[WorkerProc] = []
        self.watcher: OutputWatcher | None = None
        self.problems: list[str] = []
        self.notes: list[str] = []

    def start_worker(self, name: str, **conf) -> WorkerProc:
        w = WorkerProc(name, {**self.worker_conf, **conf}, self.log_dir)
        self.workers.append(w)
        return w

    def wait_output_complete(self, timeout: float) -> None:
        """Until read_committed shows every input record (or `timeout` s): the feeder must
        be done and every record it wrote must have come out."""
        self.watcher = self.watcher or OutputWatcher(self.bootstrap, self.output)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.watcher.poll(0.5)
            if not self.feeder.is_alive() and seen >= len(self.feeder.snapshot()):
                return
            dead = [w for w in self.workers if not w.killed and w.proc.poll() is not None]
            if dead:
                self.problems.append("a worker exited during the run: " + "; ".join(w.summary() for w in dead))
                return
        self.problems.append(f"read_committed showed {len(self.watcher.seen)} of {len(self.feeder.snapshot())} "
                             f"input records after {timeout}s")

    def finish(self, allowed_fatal: set[str] = frozenset(), txn_wait: float = 60.0) -> dict:
        rcs = {w.name: w.stop() for w in self.workers if not w.killed}
        if self.watcher is not None:
            self.watcher.close()
        self.feeder.join(30)
        if self.feeder.crash is not None or self.feeder.failures or self.feeder.unflushed:
            self.problems.append(f"the input feeder failed: {self.feeder.crash} {self.feeder.failures[:3]} "
                                 f"unflushed {self.feeder.unflushed}")
        self.problems += fatal_exits(self.workers, allowed_fatal)
        not_stopped = [n for n, rc in rcs.items() if rc is None]
        if not_stopped:
            self.problems.append(f"workers that did not stop on SIGTERM: {not_stopped}")
        commits = sum(len(w.of("commit")) for w in self.workers)
        aborts = sum(len(w.of("abort")) for w in self.workers)
        self.notes.append(f"{commits} transactions committed, {aborts} aborted by the workers")
        return check_exactly_once(self.bootstrap, self.input, self.output, self.group, self.feeder.snapshot(),
                                  self.problems, self.notes, txn_wait)

    def close(self) -> None:
        print("\n".join(["", *self.notes, *(w.summary() for w in self.workers)]))  # shown with -s
        for w in self.workers:
            if w.proc.poll() is None:
                w.kill()
        if self.watcher is not None:
            try:
                self.watcher.close()
            except RuntimeError:
                pass


@pytest.fixture
def tbroker(broker_factory):
    return broker_factory("data", extra=BROKER_OPTS)


def kill_restart_and_grow(run: Run, names=("w0", "w1", "w2")) -> dict:
    """Start three workers; stall w0 inside a transaction and SIGKILL it; start its
    replacement (a new process, a new transactional id); add a fourth worker; wait for
    the output. Returns w0's stalled event."""
    run.feeder.start()
    first = [run.start_worker(n) for n in names]
    for w in first:
        w.wait(has_committed, 60, "first committed transaction")
    victim = first[0]
    victim.signal(signal.SIGUSR1)
    stalled = victim.wait(lambda w: w.of("stalled"), 30, "stall inside a transaction")[0]
    victim.kill()
    run.notes.append(f"{victim.name} killed inside a transaction of {stalled['records']} records "
                     f"({victim.tid}), after {len(victim.of('commit'))} commits")
    again = run.start_worker(f"{victim.name}b")
    again.wait(lambda w: w.of("ready"), 30, "init_transactions")
    fourth = run.start_worker("w3")
    fourth.wait(lambda w: w.of("ready"), 30, "init_transactions")
    run.wait_output_complete(120)
    idle = [w.name for w in (again, fourth) if not w.of("commit")]
    if idle:
        run.problems.append(f"workers that joined mid-run never committed a transaction: {idle}")
    return stalled


def assert_killed_transaction_aborted(run: Run, stalled: dict, counts: dict) -> None:
    """The stalled transaction's records were written (read_uncommitted shows them) and
    aborted (read_committed shows each once: the copy of whoever processed them again)."""
    assert counts["uncommitted"] >= counts["committed"] + stalled["records"], \
        report([(f"read_uncommitted ({counts['uncommitted']}) lacks the {stalled['records']} records of the killed "
                 f"transaction (read_committed {counts['committed']})")], run.notes, run.workers)
    absent = [i for i in stalled["ids"] if counts["uncommitted_counts"][i.encode()] < 2]
    assert not absent, report([f"records of the killed transaction not in read_uncommitted twice: {absent[:5]}"],
                              run.notes, run.workers)


# --------------------------------------------------------------------------- tests


# 17 s each: the consumer protocol runs by default, the classic one with -m slow (a classic
# group's send_offsets_to_transaction runs by default in test_transactions_python_clients).
@pytest.mark.parametrize("protocol", ["consumer", pytest.param("classic", marks=pytest.mark.slow)])
def test_exactly_once_across_a_killed_worker_a_replacement_and_a_new_member(tbroker, tmp_path, protocol):
    run = Run(tbroker.bootstrap, tmp_path, protocol, uuid.uuid4().hex[:8])
    try:
        stalled = kill_restart_and_grow(run)
        counts = run.finish()
    finally:
        run.close()
    run.problems += log_problems({"broker": tbroker.log_path.read_text(errors="replace")})
    assert not run.problems, report(run.problems, run.notes, run.workers) + f"\nbroker log: {tbroker.log_path}"
    assert_killed_transaction_aborted(run, stalled, counts)


# The KIP-1251 case (a zombie that rejoined commits with its old epoch) runs by default; the
# two where the zombie's membership simply expired are slow (-m slow): 13 s each.
@pytest.mark.parametrize(("protocol", "rejoin"), [
    pytest.param("consumer", False, id="consumer-expired", marks=pytest.mark.slow),
    pytest.param("consumer", True, id="consumer-rejoined"),
    pytest.param("classic", False, id="classic-expired", marks=pytest.mark.slow),
])
def test_a_zombie_worker_cannot_commit_after_its_partitions_moved(tbroker, tmp_path, protocol, rejoin):
    """KIP-447: the zombie's TxnOffsetCommit carries the member id and member epoch
    (generation) it had before the pause; its partitions have since been assigned to the
    other worker, which committed past them. The commit must be refused and the
    transaction aborted. "expired": the zombie commits as soon as it is continued, while
    the broker no longer knows it (its session expired). "rejoined": it first joins again
    (same member id, a newer member epoch), then commits with its old epoch: KIP-1251
    refuses a lower epoch unless every partition is assigned to the member at an
    assignment epoch no newer than the one sent."""
    run = Run(tbroker.bootstrap, tmp_path, protocol, uuid.uuid4().hex[:8], count=1800, rate=150.0)
    try:
        run.feeder.start()
        # The pause must not time the transaction out: that would fence the producer instead.
        zombie = run.start_worker("zombie", txn_timeout_ms=60000, zombie_rejoin=rejoin)
        taker = run.start_worker("taker")
        for w in (zombie, taker):
            w.wait(has_committed, 60, "first committed transaction")
        zombie.signal(signal.SIGUSR2)
        pausing = zombie.wait(lambda w: w.of("pausing"), 30, "pause inside a transaction")[0]
        zombie.wait(lambda w: w.stopped_by_signal(), 10, "SIGSTOP")
        held = {int(p): off for p, off in pausing["offsets"].items()}
        run.notes.append(f"zombie paused with {pausing['records']} records written, offsets {held}")

        def took_over(w: WorkerProc) -> bool:
            mine = w.committed_offsets()
            return all(mine.get(p, -1) >= off for p, off in held.items())

        taker.wait(took_over, 60, f"commits past the zombie's offsets {held}")
        zombie.signal(signal.SIGCONT)
        result = zombie.wait(lambda w: w.of("zombie_result"), 60, "the zombie's commit outcome")[0]
        run.notes.append(f"zombie's commit: {result}")
        run.wait_output_complete(90)
        counts = run.finish(allowed_fatal=set())
    finally:
        run.close()
    run.problems += log_problems({"broker": tbroker.log_path.read_text(errors="replace")})
    assert not result["ok"], report([("the zombie committed its transaction after its partitions moved "
                                      f"({pausing['records']} records)"), *run.problems], run.notes, run.workers)
    assert result["name"] in FENCE_ERRORS and result["abort"] and not result["fatal"], \
        report([f"the zombie's commit failed, but not as a fenced group member: {result}"], run.notes, run.workers)
    if rejoin:
        assert result["rejoined"]["assigned"] is not None and result["rejoined"]["member"] == pausing["member"], \
            report([f"the zombie did not join again under its member id before committing: {result['rejoined']}"],
                   run.notes, run.workers)
    assert not run.problems, report(run.problems, run.notes, run.workers) + f"\nbroker log: {tbroker.log_path}"
    doubled = [i for i in pausing["ids"] if counts["uncommitted_counts"][i.encode()] < 2]
    assert not doubled, report([f"the zombie's records are not in read_uncommitted twice: {doubled[:5]}"],
                               run.notes, run.workers)


# --------------------------------------------------------------------------- three brokers


CLUSTER_SESSION_MS = 3000
HOLD_S = 8.0  # the held transaction stays open this long: past the coordinator's fail-over (~3-4 s)
CLUSTER_OVERRIDES = [
    f"broker.session.timeout.ms={CLUSTER_SESSION_MS}",
    "replica.lag.time.max.ms=4000",
    "offsets.topic.num.partitions=3",
    f"transaction.state.log.num.partitions={TXN_PARTITIONS}",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=100",
    "group.initial.rebalance.delay.ms=0",
]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "cluster", brokers=3, racks=["a", "b", "c"], port=0, overrides=CLUSTER_OVERRIDES)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def find_txn_coordinator(bootstrap: str, tid: str) -> int:
    """FindCoordinator key_type 1 (transaction), through odradek's client."""
    async def ask() -> int:
        client = Client(bootstrap, client_id="eos-test", request_timeout_ms=5000, retries=0)
        try:
            def body(version: int) -> dict:
                return {"key": tid, "key_type": 1, "coordinator_keys": [tid]}
            resp = await client.send_any(Api.FIND_COORDINATOR, body)
            c = resp.coordinators[0] if getattr(resp, "coordinators", None) else resp
            assert int(c.error_code) == 0, f"FindCoordinator({tid!r}, transaction): error {int(c.error_code)}"
            return int(c.node_id)
        finally:
            await client.close()
    return asyncio.run(ask())


def txn_state_leader(bootstrap: str, partition: int) -> int | None:
    md = admin(bootstrap).list_topics(TXN_STATE, timeout=10)
    t = md.topics.get(TXN_STATE)
    if t is None or t.error is not None or partition not in t.partitions:
        return None
    return t.partitions[partition].leader


def test_exactly_once_when_a_transaction_coordinator_is_killed(cluster, tmp_path):
    tag = uuid.uuid4().hex[:8]
    run = Run(cluster.bootstrap, tmp_path, "consumer", tag, rf=3)
    victim_node = moved = partition = held = holding = None
    try:
        run.feeder.start()
        workers = [run.start_worker("w0", hold_s=HOLD_S, txn_timeout_ms=30000)]
        workers += [run.start_worker(f"w{i}") for i in (1, 2)]
        for w in workers:
            w.wait(has_committed, 90, "first committed transaction")
        target = workers[0]
        # The target holds a transaction open (records written, acknowledged by the ISR)
        # across the kill; it then commits it through the coordinator's successor, which
        # must have the transaction from the replicated __transaction_state.
        target.signal(signal.SIGUSR1)
        holding = target.wait(lambda w: w.of("holding"), 30, "a transaction held open")[0]
        partition = partition_for(target.tid, TXN_PARTITIONS)
        leader = txn_state_leader(cluster.bootstrap, partition)
        victim_node = find_txn_coordinator(cluster.bootstrap, target.tid)
        run.notes.append(f"{target.name}'s transactional id {target.tid}: {TXN_STATE}-{partition}, led by broker "
                         f"{leader}; FindCoordinator says broker {victim_node}")
        assert leader == victim_node, report([(f"FindCoordinator names broker {victim_node} as the transaction "
                                               f"coordinator of {target.tid!r}, but {TXN_STATE}-{partition} is led "
                                               f"by {leader}")], run.notes, run.workers)
        commits_before = len(target.of("commit"))
        cluster.kill(victim_node)
        t_kill = time.monotonic()
        run.notes.append(f"killed broker {victim_node} after {commits_before} commits of {target.name}")

        def new_leader():
            try:
                node = txn_state_leader(_live(cluster, victim_node), partition)
            except KafkaException:
                return None
            return node if node not in (None, -1, victim_node) else None

        deadline = time.monotonic() + 60
        while moved is None and time.monotonic() < deadline:
            moved = new_leader()
            time.sleep(0.25)
        run.notes.append(f"{TXN_STATE}-{partition}: new leader {moved} "
                         f"{'' if moved is None else f'{time.monotonic() - t_kill:.1f}s after the kill'}")
        held = target.wait(lambda w: w.of("held_result"), 90, "the held transaction's outcome")[0]
        run.notes.append(f"{target.name}'s transaction of {holding['records']} records held across the kill: "
                         f"{ {k: v for k, v in held.items() if k != 'ids'} }")
        # The target keeps committing through its transaction coordinator's successor.
        target.wait(lambda w: len(w.of("commit")) > commits_before + 1 or not run.feeder.is_alive(), 90,
                    "a commit after the kill")
        after = [e for e in target.of("commit") if e["t"] > t_kill]
        run.notes.append(f"{target.name}: {len(after)} commits after the kill")
        run.wait_output_complete(150)
        counts = run.finish(txn_wait=90)
    finally:
        run.close()
    logs = {f"broker {n}": cluster.log_of(n) for n in sorted(cluster.ports)}
    run.problems += log_problems(logs)
    assert moved is not None, report([f"{TXN_STATE}-{partition} got no new leader after broker {victim_node} died"],
                                     run.notes, run.workers)
    assert held["ok"], report([f"the transaction held open across the coordinator's death did not commit: {held}",
                               *run.problems], run.notes, run.workers) + f"\nbroker logs: {cluster.data_dir}"
    assert not run.problems, report(run.problems, run.notes, run.workers) + f"\nbroker logs: {cluster.data_dir}"
    assert counts["committed"] == N
    once = [i for i in holding["ids"] if counts["uncommitted_counts"][i.encode()] != 1]
    assert not once, report([f"records of the held (committed) transaction written again: {once[:5]}"],
                            run.notes, run.workers)


def _live(cluster, exclude: int) -> str:
    return ",".join(f"127.0.0.1:{cluster.ports[n]}" for n in sorted(cluster.ports) if n != exclude)
