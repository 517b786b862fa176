"""`odradek produce` and `odradek consume`: kafka-console-producer.sh and
kafka-console-consumer.sh.

produce: one record per stdin line (the newline stripped, as Java's readLine does);
with --key-separator each line is split at the first separator into key and value
(parse.key=true, key.separator=SEP). Records are sent asynchronously and counted as
their futures resolve; the exit status says whether every one was delivered, so a
script can trust `odradek produce ... < file && next-step`.

consume: records as lines on stdout (value, optionally prefixed by timestamp,
partition, offset and key, joined by the key separator; null key or value print as
`null`, as Kafka's DefaultMessageFormatter does). With --group the consumer joins the
group and commits what it printed when it stops; without one it assigns every
partition itself rather than joining a made-up group as Kafka's tool does, so a
one-off look at a topic leaves no group behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections import Counter

from . import non_negative, note, open_admin, positive

COMPRESSION = ["none", "gzip", "snappy", "lz4", "zstd"]
POLL_BATCH = 10_000


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[common], help="send stdin lines as records (kafka-console-producer.sh)")
    p.add_argument("topic")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value (parse.key=true, key.separator=SEP)")
    p.add_argument("--partition", type=non_negative, help="send every record to this partition")
    p.add_argument("--compression", choices=COMPRESSION, default="none", help="compression.type (default none)")
    p.add_argument("--acks", choices=["all", "-1", "0", "1"], default="all", help="acks (default all)")
    p.add_argument("--linger-ms", type=non_negative, help="linger.ms (default: the client's, 5)")
    p.set_defaults(func=_produce)

    c = sub.add_parser("consume", parents=[common], help="print records as lines (kafka-console-consumer.sh)")
    c.add_argument("topic")
    c.add_argument("--group", help="consumer group to join and commit to")
    c.add_argument("--group-protocol", choices=["consumer", "classic"], default="consumer",
                   help="group protocol with --group: KIP-848 consumer (default) or classic")
    c.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset where there is no committed offset")
    c.add_argument("--max-messages", type=positive, metavar="N", help="exit after N records")
    c.add_argument("--timeout-ms", type=non_negative, metavar="T", help="exit after T ms without records")
    c.add_argument("--partition", type=non_negative, help="consume only this partition (manual assignment)")
    c.add_argument("--offset", type=_offset, metavar="earliest|latest|N",
                   help="with --partition: where to start (default latest, or earliest with --from-beginning)")
    c.add_argument("--print-key", action="store_true", help="print KEY SEP VALUE")
    c.add_argument("--key-separator", default="\t", metavar="SEP", help="separator between fields (default tab)")
    c.add_argument("--print-partition", action="store_true", help="prefix Partition:P")
    c.add_argument("--print-offset", action="store_true", help="prefix Offset:O")
    c.add_argument("--print-timestamp", action="store_true", help="prefix CreateTime:MS or LogAppendTime:MS")
    c.set_defaults(func=_consume, parser=c)


def _offset(value: str) -> str | int:
    if value in ("earliest", "latest"):
        return value
    try:
        return non_negative(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected earliest, latest or an offset >= 0, got {value!r}") from None


# ---------------------------------------------------------------------- produce


class _Tally:
    """Delivery outcomes; futures resolve on the client's loop thread, hence the lock.

    It also bounds the records sent but not yet resolved: the facade's send never
    blocks (there is no buffer.memory/max.block.ms), so a large file piped in would
    otherwise be read into memory faster than it is delivered."""

    def __init__(self, max_pending: int = 10_000) -> None:
        self.cond = threading.Condition()
        self.max_pending = max_pending
        self.sent = 0
        self.delivered = 0
        self.resolved = 0
        self.waiting = False
        self.errors: Counter[str] = Counter()

    def sending(self) -> None:
        with self.cond:
            if self.sent - self.resolved >= self.max_pending:
                # Resume at half the limit, not at one below it: waking per delivered
                # record would ping-pong the reader and the client's threads.
                self.waiting = True
                while self.sent - self.resolved > self.max_pending // 2:
                    self.cond.wait()
                self.waiting = False
            self.sent += 1

    def done(self, fut) -> None:
        exc = fut.exception()
        with self.cond:
            self.resolved += 1
            if exc is None:
                self.delivered += 1
            else:
                self.errors[str(exc)] += 1
            if self.waiting and self.sent - self.resolved <= self.max_pending // 2:
                self.cond.notify()

    def fail(self, message: str) -> None:
        with self.cond:
            self.errors[message] += 1


def _produce(args: argparse.Namespace) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError, Producer

    # Fail fast on a missing topic or partition: the producer would otherwise fail each
    # line separately (topics are never auto-created by this client).
    with open_admin(args) as admin:
        info = admin.describe_topics([args.topic])[args.topic]
    if args.partition is not None and args.partition not in info.partitions:
        raise KafkaError(ErrorCode.unknown_topic_or_partition,
                         f"{args.topic} has {len(info.partitions)} partition(s), no partition {args.partition}")
    sep = args.key_separator.encode() if args.key_separator is not None else None
    config = {} if args.linger_ms is None else {"linger_ms": args.linger_ms}
    tally = _Tally()
    producer = Producer(args.bootstrap_server, acks=args.acks, compression_type=args.compression,
                        client_id="odradek-console-producer", **config)
    try:
        for lineno, raw in enumerate(sys.stdin.buffer, 1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            key = None
            if sep is not None:
                key, found, line = line.partition(sep)
                if not found:
                    tally.fail(f"line {lineno}: no key separator {args.key_separator!r}")
                    continue
            tally.sending()
            producer.send(args.topic, line, key, partition=args.partition).add_done_callback(tally.done)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the input; what was read is still delivered
    finally:
        producer.flush()  # bounded by the producer's delivery timeout
        producer.close()
    failed = sum(tally.errors.values())
    for message, n in sorted(tally.errors.items()):
        print(f"odradek: error: {message}" + (f" ({n} records)" if n > 1 else ""), file=sys.stderr)
    note(f"produced {tally.delivered} record(s) to {args.topic}, {failed} error(s)")
    return 1 if failed else 0


# ---------------------------------------------------------------------- consume


def _formatter(args: argparse.Namespace):
    sep = args.key_separator.encode()

    def fmt(r) -> bytes:
        fields = []
        if args.print_timestamp:
            kind = "CreateTime" if r.timestamp_type == 0 else "LogAppendTime"
            fields.append(b"NO_TIMESTAMP" if r.timestamp < 0 else f"{kind}:{r.timestamp}".encode())
        if args.print_partition:
            fields.append(f"Partition:{r.partition}".encode())
        if args.print_offset:
            fields.append(f"Offset:{r.offset}".encode())
        if args.print_key:
            fields.append(b"null" if r.key is None else r.key)
        fields.append(b"null" if r.value is None else r.value)
        return sep.join(fields) + b"\n"
    return fmt


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops like Ctrl-C: commit, leave the group, summary


def _consume(args: argparse.Namespace) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import Consumer, KafkaError, TopicPartition

    if args.offset is not None and args.partition is None:
        args.parser.error("--offset needs --partition")
    # A missing topic is an error here, not an endless wait for it to appear.
    with open_admin(args) as admin:
        tps = admin.partitions_of([args.topic])
    tp = None
    if args.partition is not None:
        tp = TopicPartition(args.topic, args.partition)
        if tp not in tps:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"{args.topic} has {len(tps)} partition(s), no partition {args.partition}")
    reset = "earliest" if args.from_beginning else "latest"
    consumer = Consumer(args.bootstrap_server, group_id=args.group, group_protocol=args.group_protocol,
                        auto_offset_reset=reset, enable_auto_commit=args.group is not None,
                        client_id="odradek-console-consumer")
    signal.signal(signal.SIGTERM, _terminate)
    count = [0]
    try:
        if tp is not None:
            # As kafka-console-consumer.sh: an explicit partition starts at an explicit
            # place (--offset, else the end, or the beginning with --from-beginning).
            consumer.assign([tp])
            start = reset if args.offset is None else args.offset
            if start == "earliest":
                consumer.seek_to_beginning([tp])
            elif start == "latest":
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, start)
        elif args.group is not None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(tps)  # positions come from auto_offset_reset
        if args.group is None or tp is not None:
            # Load the partitions' leaders before the first poll: with none known, the
            # client's poll starts a metadata refresh but does not wake when it lands, so
            # the first poll would sleep its whole timeout (enough to end a short
            # --timeout-ms with nothing printed). ListOffsets refreshes the topic's metadata.
            consumer.end_offsets([tp] if tp is not None else tps)
        _poll_loop(consumer, args, count)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep the interpreter from
        # complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        try:
            consumer.close()  # commits what was printed (with --group) and leaves the group
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            note(f"Processed a total of {count[0]} messages")
    return 0


def _poll_loop(consumer, args: argparse.Namespace, count: list[int]) -> None:
    out = sys.stdout.buffer
    fmt = _formatter(args)
    idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000
    last = time.monotonic()
    while args.max_messages is None or count[0] < args.max_messages:
        wait = 1.0  # bounded, so --timeout-ms and signals are noticed promptly
        if idle_limit is not None:
            wait = max(0.0, min(wait, idle_limit - (time.monotonic() - last)))
        # Large batches: each synchronous poll costs a thread hand-off (about 10 ms in the
        # facade), which would otherwise cap throughput at ~50k records/s. And never more
        # than --max-messages still allows: the consumer's position (what it commits) must
        # not run ahead of what was printed.
        want = POLL_BATCH if args.max_messages is None else min(POLL_BATCH, args.max_messages - count[0])
        records = consumer.poll(wait * 1000, max_records=want)
        if records:
            last = time.monotonic()
            out.write(b"".join(fmt(r) for r in records))
            out.flush()
            count[0] += len(records)
        elif idle_limit is not None and time.monotonic() - last >= idle_limit:
            return

