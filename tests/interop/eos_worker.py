"""One exactly-once consume-transform-produce worker (librdkafka), run as a subprocess by
test_eos_loop.py so that it can be SIGKILLed, SIGSTOPped and restarted.

    python tests/interop/eos_worker.py '<json config>'

It follows librdkafka's EOS example (examples/transactions.c, after KIP-447): one
consumer (`isolation.level=read_committed`, no auto commit) subscribed to the input topic,
one transactional producer (a transactional id of its own: KIP-447 fences zombies through
the consumer group metadata, not through the transactional id), and a loop

    consume a batch -> begin_transaction -> produce one output record per input record
    -> send_offsets_to_transaction(position(assignment()), consumer_group_metadata())
    -> commit_transaction

Each output record's value is the input record's identity `topic/partition/offset`
(its key is the worker's name), so that the test finds duplicates and gaps. Errors are
handled as the example does: an abortable error (`txn_requires_abort`) aborts the
transaction and rewinds the consumer to the group's committed offsets; a retriable error
retries the same call (a bounded number of times); a fatal error (a fenced producer)
ends the process with exit code 2. Rebalance callbacks run only inside consume(), that is
between two transactions: a revoke or loss there drops the batch that came with it and
rewinds what is still assigned, so that no output is made for a partition no longer held.

What the worker does is reported on stdout, one JSON object a line ("ev" names the event).
Signals: SIGTERM stops it (the current transaction is finished first; exit code 0);
SIGUSR1 makes the next transaction stall after its records were written and flushed
("stalled"), until the process is killed (the test's SIGKILL-inside-a-transaction), or,
with `hold_s` in the config, hold it open that long ("holding") and then commit it
("held_result"; the test kills a broker meanwhile); SIGUSR2 makes the next transaction,
after its records were written and its offsets and group metadata taken, report
"pausing" and SIGSTOP itself (the test's zombie), then, once continued (and, with
`zombie_rejoin`, once its consumer joined the group again), try to commit with what it
took before the pause and report the outcome ("zombie_result").
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

RETRIES = 10  # for a retriable error of one transactional call
CALL_TIMEOUT = 30.0  # seconds, for each transactional call


def emit(**event) -> None:
    event["t"] = time.monotonic()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def describe(err: KafkaError) -> dict:
    return {"code": err.code(), "name": err.name(), "str": err.str(), "fatal": err.fatal(),
            "retriable": err.retriable(), "abort": err.txn_requires_abort()}


class Fatal(Exception):
    pass


class Worker:
    def __init__(self, conf: dict) -> None:
        self.conf = conf
        self.name = conf["name"]
        self.input = conf["input"]
        self.output = conf["output"]
        self.batch = int(conf.get("batch", 50))
        self.deadline = time.monotonic() + float(conf.get("max_s", 240))
        self.stop = False
        self.stall = False
        self.zombie = False
        self.rebalanced = False
        self._on_assign_hook = None
        self.consumed_from: set[int] = set()  # input partitions a record was consumed from
        self.commits = 0
        self.aborts = 0
        self.records_committed = 0
        cconf = {
            "bootstrap.servers": conf["bootstrap"],
            "group.id": conf["group"],
            "group.protocol": conf.get("protocol", "consumer"),
            "client.id": self.name,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": self._on_error,
            "log_level": 3,
        }
        if cconf["group.protocol"] == "classic":
            cconf.update({"partition.assignment.strategy": "cooperative-sticky",
                          "session.timeout.ms": int(conf.get("session_timeout_ms", 4000)),
                          "heartbeat.interval.ms": int(conf.get("heartbeat_ms", 300))})
        cconf.update(conf.get("consumer", {}))
        pconf = {
            "bootstrap.servers": conf["bootstrap"],
            "client.id": self.name,
            "transactional.id": conf["tid"],
            "transaction.timeout.ms": int(conf.get("txn_timeout_ms", 10000)),
            "linger.ms": 5,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": self._on_error,
            "log_level": 3,
        }
        pconf.update(conf.get("producer", {}))
        self.consumer = Consumer(cconf)
        self.producer = Producer(pconf)

    # ------------------------------------------------------------------ callbacks

    def _on_error(self, err: KafkaError) -> None:
        emit(ev="client_error", **describe(err))

    def _on_assign(self, consumer, parts) -> None:
        emit(ev="assign", parts=[tp.partition for tp in parts], member=consumer.memberid())
        if self._on_assign_hook is not None:
            self._on_assign_hook([tp.partition for tp in parts])

    def _on_revoke(self, consumer, parts) -> None:
        self.rebalanced = True
        emit(ev="revoke", parts=[tp.partition for tp in parts])

    def _on_lost(self, consumer, parts) -> None:
        self.rebalanced = True
        emit(ev="lost", parts=[tp.partition for tp in parts])

    # ------------------------------------------------------------------ transactions

    def _call(self, what: str, fn, *args):
        """A transactional call, retried while its error is retriable (and only that)."""
        for attempt in range(RETRIES):
            try:
                return fn(*args)
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    raise Fatal(f"{what}: {err}") from exc
                if err.retriable() and not err.txn_requires_abort() and attempt + 1 < RETRIES:
                    emit(ev="retry", call=what, **describe(err))
                    time.sleep(0.2)
                    continue
                raise
        raise AssertionError("unreachable")

    def _abort(self, reason: dict) -> None:
        self.aborts += 1
        emit(ev="abort", reason=reason, n=self.aborts)
        self._call("abort_transaction", self.producer.abort_transaction, CALL_TIMEOUT)
        self._rewind()

    def _rewind(self) -> None:
        """Seek every partition still assigned back to the group's committed offset: what
        was consumed since then went with the aborted transaction (or a dropped batch)."""
        parts = self.consumer.assignment()
        if not parts:
            return
        committed = None
        for _ in range(RETRIES):
            try:
                committed = self.consumer.committed(parts, timeout=10)
                break
            except KafkaException as exc:
                emit(ev="retry", call="committed", **describe(exc.args[0]))
                time.sleep(0.2)
        if committed is None:
            raise Fatal("cannot read the committed offsets to rewind to")
        sought = {}
        for tp in committed:
            target = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            try:
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, target))
                sought[tp.partition] = tp.offset
            except KafkaException as exc:
                # A partition assigned a moment ago and never fetched from starts at the
                # committed offset anyway; one consumed from must be rewound.
                if tp.partition in self.consumed_from:
                    raise Fatal(f"cannot rewind partition {tp.partition}: {exc}") from exc
                emit(ev="seek_skipped", partition=tp.partition, error=str(exc))
        emit(ev="rewind", offsets=sought)

    def _produce(self, value: bytes, partition: int) -> None:
        for _ in range(1000):
            try:
                self.producer.produce(self.output, key=self.name.encode(), value=value, partition=partition)
                return
            except BufferError:
                self.producer.poll(0.05)
        raise Fatal("the producer queue stayed full")

    def _transact(self, msgs) -> None:
        ids = [f"{m.topic()}/{m.partition()}/{m.offset()}" for m in msgs]
        self._call("begin_transaction", self.producer.begin_transaction)
        for m, ident in zip(msgs, ids):
            self._produce(ident.encode(), m.partition())
            self.consumed_from.add(m.partition())
        held = False
        if self.stall:
            self.stall = False
            self.producer.flush(CALL_TIMEOUT)
            hold_s = float(self.conf.get("hold_s", 0))
            if hold_s <= 0:
                emit(ev="stalled", records=len(ids), ids=ids)
                end = time.monotonic() + 300
                while time.monotonic() < end:  # until the test kills this process
                    time.sleep(0.1)
                sys.exit(3)
            emit(ev="holding", records=len(ids), ids=ids)
            time.sleep(hold_s)  # the transaction stays open meanwhile (the test kills a broker)
            held = True
        offsets = self.consumer.position(self.consumer.assignment())
        cgmd = self.consumer.consumer_group_metadata()
        if self.zombie:
            self.zombie = False
            self._zombie(ids, offsets, cgmd)
            return
        try:
            self._call("send_offsets_to_transaction", self.producer.send_offsets_to_transaction, offsets, cgmd,
                       CALL_TIMEOUT)
            self._call("commit_transaction", self.producer.commit_transaction, CALL_TIMEOUT)
        except KafkaException as exc:
            if held:
                emit(ev="held_result", ok=False, **describe(exc.args[0]))
            self._abort(describe(exc.args[0]))
            return
        self.commits += 1
        self.records_committed += len(ids)
        emit(ev="commit", n=self.commits, records=len(ids),
             offsets={tp.partition: tp.offset for tp in offsets if tp.offset >= 0})
        if held:
            emit(ev="held_result", ok=True, records=len(ids), ids=ids)

    def _zombie(self, ids, offsets, cgmd) -> None:
        """Pause (SIGSTOP) with the transaction open and its offsets and group metadata
        taken; once continued, commit them as they were (what a zombie does)."""
        self.producer.flush(CALL_TIMEOUT)
        member = self.consumer.memberid()
        emit(ev="pausing", records=len(ids), ids=ids, member=member,
             offsets={tp.partition: tp.offset for tp in offsets if tp.offset >= 0})
        os.kill(os.getpid(), signal.SIGSTOP)
        emit(ev="resumed")
        rejoined = None
        if self.conf.get("zombie_rejoin"):
            # Let the consumer learn it was fenced and join again (a new member epoch) before
            # the stale commit: the broker then knows the member, at a newer epoch. Records
            # polled meanwhile are dropped: the consumer is rewound after this transaction.
            seen = []
            self._on_assign_hook = lambda parts: seen.append(parts)
            end = time.monotonic() + 20
            while not seen and time.monotonic() < end:
                self.consumer.poll(0.1)
            self._on_assign_hook = None
            rejoined = {"assigned": seen[0] if seen else None, "member": self.consumer.memberid()}
        try:
            self.producer.send_offsets_to_transaction(offsets, cgmd, CALL_TIMEOUT)
            self.producer.commit_transaction(CALL_TIMEOUT)
        except KafkaException as exc:
            emit(ev="zombie_result", ok=False, rejoined=rejoined, **describe(exc.args[0]))
            if exc.args[0].fatal():
                raise Fatal(f"zombie: {exc.args[0]}") from exc
            self._abort(describe(exc.args[0]))
            return
        emit(ev="zombie_result", ok=True, rejoined=rejoined, records=len(ids), ids=ids)
        self.commits += 1
        self.records_committed += len(ids)
        self._rewind()

    # ------------------------------------------------------------------ loop

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop", True))
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "stall", True))
        signal.signal(signal.SIGUSR2, lambda *_: setattr(self, "zombie", True))
        try:
            self._call("init_transactions", self.producer.init_transactions, CALL_TIMEOUT)
            emit(ev="ready", pid=os.getpid(), tid=self.conf["tid"])
            self.consumer.subscribe([self.input], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                    on_lost=self._on_lost)
            while not self.stop and time.monotonic() < self.deadline:
                msgs = self.consumer.consume(self.batch, 0.2)
                if self.rebalanced:
                    # No transaction is open here: drop what came with the revoke and rewind.
                    self.rebalanced = False
                    self._rewind()
                    continue
                good = []
                for m in msgs:
                    if m.error() is not None:
                        emit(ev="consume_error", **describe(m.error()))
                    else:
                        good.append(m)
                if good:
                    try:
                        self._transact(good)
                    except KafkaException as exc:  # produce/begin in an abortable state
                        err = exc.args[0]
                        if err.fatal():
                            raise Fatal(str(err)) from exc
                        self._abort(describe(err))
        except Fatal as exc:
            emit(ev="fatal", error=str(exc), commits=self.commits, aborts=self.aborts)
            os._exit(2)  # no clean shutdown: a fenced producer is done
        emit(ev="stopping", commits=self.commits, aborts=self.aborts, records=self.records_committed,
             timed_out=not self.stop)
        self.consumer.close()
        self.producer.flush(CALL_TIMEOUT)
        emit(ev="stopped")
        return 0 if self.stop else 4


if __name__ == "__main__":
    sys.exit(Worker(json.loads(sys.argv[1])).run())
