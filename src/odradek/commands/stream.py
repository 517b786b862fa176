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

The pieces Kafka's own tools are made of live here and serve kafka-console-producer
and kafka-console-consumer too (commands.kafka_scripts.console): `LineReader` is
Kafka's LineMessageReader (key, headers, null marker), `send_lines` the delivery loop,
`RecordFormatter` Kafka's DefaultMessageFormatter, `run_consumer` the consume loop.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from . import non_negative, note, open_admin, positive, security_props

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


class LineError(Exception):
    """A line LineReader cannot split: `what` is missing ("key separator", ...)."""

    def __init__(self, lineno: int, line: bytes, what: str, separator: bytes, message: str | None = None) -> None:
        super().__init__(message or f"No {what} found on line number {lineno}: '{line.decode(errors='replace')}'")
        self.lineno, self.line, self.what, self.separator = lineno, line, what, separator


@dataclass
class LineReader:
    """Kafka's LineMessageReader on bytes: `[headers DELIM][key SEP]value` per line,
    headers `k:v` pairs split by the headers.separator regex; a field equal to the
    null marker is null. ignore_error: a missing separator leaves that part out."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    def __post_init__(self) -> None:
        seps = {"headers.delimiter": self.headers_delimiter, "headers.separator": self.headers_separator,
                "headers.key.separator": self.headers_key_separator}
        names = list(seps)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if seps[a] == seps[b]:
                    raise ValueError(f"{a} and {b} may not be equal")
        if self.null_marker is not None:
            for name, sep in {"key.separator": self.key_separator, **seps}.items():
                if sep == self.null_marker:
                    raise ValueError(f"null.marker and {name} may not be equal")
        self._headers_split = re.compile(self.headers_separator)

    def _part(self, enabled: bool, line: bytes, start: int, sep: bytes, what: str, lineno: int) -> bytes | None:
        if not enabled:
            return None
        i = line.find(sep, start)
        if i < 0:
            if self.ignore_error:
                return None
            raise LineError(lineno, line, what, sep)
        return line[start:i]

    def _null(self, field: bytes | None) -> bytes | None:
        return None if field is None or field == self.null_marker else field

    def parse(self, line: bytes, lineno: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) for one line (its line break already removed)."""
        headers = self._part(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", lineno)
        start = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._part(self.parse_key, line, start, self.key_separator, "key separator", lineno)
        value = line[start + (0 if key is None else len(key) + len(self.key_separator)):]
        out: list[tuple[str, bytes | None]] = []
        if headers is not None and headers != self.null_marker:
            pairs = self._headers_split.split(headers)
            while len(pairs) > 1 and not pairs[-1]:
                pairs.pop()  # Java's String.split drops trailing empty strings
            for pair in pairs:
                hkey, found, hvalue = pair.partition(self.headers_key_separator)
                if not found:
                    if not self.ignore_error:
                        raise LineError(lineno, line, "header key separator", self.headers_key_separator)
                    out.append((pair.decode(errors="replace"), None))
                    continue
                if hkey == self.null_marker:
                    raise LineError(lineno, line, "header key", self.headers_key_separator,
                                    f"Header keys should not be equal to the null marker "
                                    f"'{self.null_marker.decode(errors='replace')}' as they can't be null")
                out.append((hkey.decode(errors="replace"), self._null(hvalue)))
        return self._null(key), self._null(value), out


def send_lines(producer, topic: str, reader: LineReader, *, partition: int | None = None,
               stop_at_bad_line: bool, bad_line_text: Callable[[LineError], str] = str, sync: bool = False,
               prompt: bool = False) -> _Tally:
    """Send one record per stdin line (the line break stripped, as Java's readLine does)
    and wait for them all. A line the reader cannot split is an error, and the input
    stops there if `stop_at_bad_line`; Ctrl-C ends the input, and what was read is still
    delivered. Closes the producer."""
    tally = _Tally()
    try:
        for lineno, raw in enumerate(_lines(prompt), 1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            try:
                key, value, headers = reader.parse(line, lineno)
            except LineError as exc:
                tally.fail(bad_line_text(exc))
                if stop_at_bad_line:
                    break
                continue
            tally.sending()
            fut = producer.send(topic, value, key, partition=partition, headers=headers or None)
            fut.add_done_callback(tally.done)
            if sync:
                fut.exception()  # one record at a time (kafka-console-producer.sh --sync)
    except KeyboardInterrupt:
        pass
    finally:
        producer.flush()  # bounded by the producer's delivery timeout
        producer.close()
    return tally


def _lines(prompt: bool):
    """stdin's lines as bytes; with `prompt`, Kafka's ">" before each (a terminal on both ends)."""
    if not prompt:
        yield from sys.stdin.buffer
        return
    while True:
        sys.stdout.write(">")
        sys.stdout.flush()
        raw = sys.stdin.buffer.readline()
        if not raw:
            return
        yield raw


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
    reader = LineReader()
    if args.key_separator is not None:
        reader = LineReader(parse_key=True, key_separator=args.key_separator.encode())
    config = {} if args.linger_ms is None else {"linger_ms": args.linger_ms}
    producer = Producer(args.bootstrap_server, acks=args.acks, compression_type=args.compression,
                        client_id="odradek-console-producer", security=security_props(args), **config)

    # A bad line is a failed record: the rest is still sent, the exit status says so.
    tally = send_lines(producer, args.topic, reader, partition=args.partition, stop_at_bad_line=False,
                       bad_line_text=lambda e: f"line {e.lineno}: no {e.what} {e.separator.decode(errors='replace')!r}")
    failed = sum(tally.errors.values())
    for message, n in sorted(tally.errors.items()):
        print(f"odradek: error: {message}" + (f" ({n} records)" if n > 1 else ""), file=sys.stderr)
    note(f"produced {tally.delivered} record(s) to {args.topic}, {failed} error(s)")
    return 1 if failed else 0


# ---------------------------------------------------------------------- consume


@dataclass
class RecordFormatter:
    """Kafka's DefaultMessageFormatter: the chosen fields in its order, joined by the key
    separator, then the line separator; a null key, value or header value prints as
    the null literal. The decoders stand for Kafka's deserializers (bytes -> bytes)."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"
    key_decoder: Callable[[bytes], bytes] | None = None
    value_decoder: Callable[[bytes], bytes] | None = None
    header_decoder: Callable[[bytes], bytes] | None = None

    def _field(self, data: bytes | None, decoder) -> bytes:
        data = self.null_literal if data is None else data
        return data if decoder is None else decoder(data)

    def __call__(self, r) -> bytes:
        fields = []
        if self.print_timestamp:
            kind = "CreateTime" if r.timestamp_type == 0 else "LogAppendTime"
            fields.append(b"NO_TIMESTAMP" if r.timestamp < 0 else f"{kind}:{r.timestamp}".encode())
        if self.print_partition:
            fields.append(f"Partition:{r.partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{r.offset}".encode())
        if self.print_headers:
            fields.append(self.headers_separator.join(k.encode() + b":" + self._field(v, self.header_decoder)
                                                      for k, v in r.headers) if r.headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(self._field(r.key, self.key_decoder))
        if self.print_value:
            fields.append(self._field(r.value, self.value_decoder))
        return self.key_separator.join(fields) + self.line_separator if fields else b""


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops like Ctrl-C: commit, leave the group, summary


def _consume(args: argparse.Namespace) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError, TopicPartition

    if args.offset is not None and args.partition is None:
        args.parser.error("--offset needs --partition")
    # A missing topic is an error here, not an endless wait for it to appear.
    with open_admin(args) as admin:
        tps = admin.partitions_of([args.topic])
    if args.partition is not None and TopicPartition(args.topic, args.partition) not in tps:
        raise KafkaError(ErrorCode.unknown_topic_or_partition,
                         f"{args.topic} has {len(tps)} partition(s), no partition {args.partition}")
    fmt = RecordFormatter(print_timestamp=args.print_timestamp, print_partition=args.print_partition,
                          print_offset=args.print_offset, print_key=args.print_key,
                          key_separator=args.key_separator.encode())
    config = {"group_id": args.group, "group_protocol": args.group_protocol,
              "enable_auto_commit": args.group is not None, "client_id": "odradek-console-consumer",
              "security": security_props(args)}
    return run_consumer(args.bootstrap_server, tps, config, fmt, from_beginning=args.from_beginning,
                        partition=args.partition, offset=args.offset, max_messages=args.max_messages,
                        timeout_ms=args.timeout_ms, summary=lambda n: note(f"Processed a total of {n} messages"))


def run_consumer(bootstrap: str, tps: list, config: dict, fmt: Callable, *, from_beginning: bool = False,
                 partition: int | None = None, offset: str | int | None = None, pattern: str | None = None,
                 max_messages: int | None = None, timeout_ms: int | None = None,
                 summary: Callable[[int], None]) -> int:
    """Print records of `tps` (the partitions of the topics to read) on stdout.

    With `partition`, that partition of the (one) topic is assigned and read from
    `offset` (earliest, latest or a number; default: the end, or the beginning with
    `from_beginning`); else with a group_id in `config` the consumer subscribes to the
    topics (or to `pattern`); else it assigns every partition in `tps`. `config` holds
    Consumer keywords; auto_offset_reset defaults from `from_beginning`. `summary(n)`
    reports the count at the end, however it ends."""
    from odradek.client import Consumer, TopicPartition

    config = {"auto_offset_reset": "earliest" if from_beginning else "latest", **config}
    consumer = Consumer(bootstrap, **config)
    signal.signal(signal.SIGTERM, _terminate)
    count = [0]
    try:
        tp = None
        if partition is not None:
            # As kafka-console-consumer.sh: an explicit partition starts at an explicit
            # place (--offset, else the end, or the beginning with --from-beginning).
            tp = TopicPartition(tps[0].topic, partition)
            consumer.assign([tp])
            start = ("earliest" if from_beginning else "latest") if offset is None else offset
            if start == "earliest":
                consumer.seek_to_beginning([tp])
            elif start == "latest":
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, start)
        elif config.get("group_id") is not None:
            if pattern is not None:
                consumer.subscribe(pattern=pattern)
            else:
                consumer.subscribe(sorted({t.topic for t in tps}))
        else:
            consumer.assign(tps)  # positions come from auto_offset_reset
        if tp is not None or config.get("group_id") is None:
            # Load the partitions' leaders before the first poll: with none known, the
            # client's poll starts a metadata refresh but does not wake when it lands, so
            # the first poll would sleep its whole timeout (enough to end a short
            # --timeout-ms with nothing printed). ListOffsets refreshes the topic's metadata.
            consumer.end_offsets([tp] if tp is not None else tps)
        _poll_loop(consumer, fmt, max_messages, timeout_ms, count)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep the interpreter from
        # complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        try:
            consumer.close()  # commits what was printed (with a group) and leaves the group
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            summary(count[0])
    return 0


def _poll_loop(consumer, fmt: Callable, max_messages: int | None, timeout_ms: int | None, count: list[int]) -> None:
    out = sys.stdout.buffer
    idle_limit = None if timeout_ms is None else timeout_ms / 1000
    last = time.monotonic()
    while max_messages is None or count[0] < max_messages:
        wait = 1.0  # bounded, so --timeout-ms and signals are noticed promptly
        if idle_limit is not None:
            wait = max(0.0, min(wait, idle_limit - (time.monotonic() - last)))
        # Large batches: each synchronous poll costs a thread hand-off (about 10 ms in the
        # facade), which would otherwise cap throughput at ~50k records/s. And never more
        # than --max-messages still allows: the consumer's position (what it commits) must
        # not run ahead of what was printed.
        want = POLL_BATCH if max_messages is None else min(POLL_BATCH, max_messages - count[0])
        records = consumer.poll(wait * 1000, max_records=want)
        if records:
            last = time.monotonic()
            out.write(b"".join(fmt(r) for r in records))
            out.flush()
            count[0] += len(records)
        elif idle_limit is not None and time.monotonic() - last >= idle_limit:
            return
