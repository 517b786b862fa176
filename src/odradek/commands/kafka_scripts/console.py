"""kafka-console-producer.sh and kafka-console-consumer.sh on odradek's client.

Both run on the loops of `odradek produce`/`odradek consume` (commands.stream): the
producer reads stdin lines with Kafka's LineMessageReader properties (--property
parse.key=true key.separator=: parse.headers=true null.marker=...), the consumer prints
with Kafka's DefaultMessageFormatter properties (--property print.key=true
print.timestamp=true key.separator=... line.separator=... null.literal=...). Client
properties (--producer-property, --producer.config, --consumer-property,
--consumer.config) are mapped onto odradek's client; Kafka's option defaults apply
only where odradek's client has no better one (unset --timeout / --request-timeout-ms
/ --message-send-max-retries keep its own, more patient defaults).

As Java's clients do on a broker with auto.create.topics.enable, a missing topic is
created by the first metadata request; where the broker does not create it the tools
fail at once instead of waiting for it. Without --group the consumer assigns itself
every partition rather than joining a made-up console-consumer-NNNNN group, so a
one-off look at a topic leaves no group behind; with --group it uses the classic
protocol unless group.protocol=consumer is given, as Kafka's consumer does.
"""

from __future__ import annotations

import argparse
import struct
import sys

from .. import open_admin
from .common import (
    KafkaParser,
    ToolError,
    bootstrap_option,
    client_config,
    exception_line,
    key_values,
    load_properties,
)

COMPRESSION = ["none", "gzip", "snappy", "lz4", "zstd"]
LINE_READERS = {"kafka.tools.LineMessageReader", "org.apache.kafka.tools.LineMessageReader",
                "kafka.common.MessageReader"}
FORMATTERS = {"kafka.tools.DefaultMessageFormatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter"}


def run(tool: str, argv: list[str]) -> int:
    return _produce(argv) if tool == "kafka-console-producer" else _consume(argv)


def _bool(props: dict[str, str], key: str, default: bool = False) -> bool:
    return props[key].strip().lower() == "true" if key in props else default


# ---------------------------------------------------------------------- producer

PRODUCER = "kafka-console-producer.sh"


def producer_parser() -> KafkaParser:
    p = KafkaParser(PRODUCER, "This tool helps to read data from standard input and publish it to Kafka.")
    bootstrap_option(p, "--bootstrap-server", "--broker-list")
    p.add_argument("--topic", help="REQUIRED: The topic name to produce messages to.")
    p.add_argument("--sync", action="store_true", help="Send each message and wait for it before the next.")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                   help="none, gzip (the default without a value), snappy, lz4 or zstd")
    p.add_argument("--batch-size", type=int, help="batch.size")
    p.add_argument("--message-send-max-retries", type=int, help="retries")
    p.add_argument("--retry-backoff-ms", type=int, help="retry.backoff.ms")
    p.add_argument("--timeout", type=int, metavar="MS", help="linger.ms")
    p.add_argument("--request-required-acks", help="acks (default -1)")
    p.add_argument("--request-timeout-ms", type=int, help="request.timeout.ms")
    for option in ("--metadata-expiry-ms", "--max-block-ms", "--max-memory-bytes", "--max-partition-memory-bytes",
                   "--socket-buffer-size"):
        p.add_argument(option, type=int, help="accepted; odradek's producer has no such setting")
    p.add_argument("--line-reader", default="org.apache.kafka.tools.LineMessageReader",
                   help="Only Kafka's LineMessageReader is available.")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="Line reader properties: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--reader-config", metavar="FILE", help="Config properties file for the message reader.")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="A producer property; repeatable.")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                   help="Producer config properties file (--producer-property takes precedence).")
    return p


def _reader(props: dict[str, str]):
    from ..stream import LineReader

    def sep(key: str, default: str) -> bytes:
        return props.get(key, default).encode()

    try:
        return LineReader(parse_key=_bool(props, "parse.key"), key_separator=sep("key.separator", "\t"),
                          parse_headers=_bool(props, "parse.headers"),
                          headers_delimiter=sep("headers.delimiter", "\t"),
                          headers_separator=sep("headers.separator", ","),
                          headers_key_separator=sep("headers.key.separator", ":"),
                          ignore_error=_bool(props, "ignore.error"),
                          null_marker=props["null.marker"].encode() if "null.marker" in props else None)
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def _producer_config(args: argparse.Namespace) -> dict[str, object]:
    """ConsoleProducerOptions.producerProps: the file, then --producer-property, then the
    explicit options."""
    props = load_properties(args.producer_config) if args.producer_config else {}
    props.update(key_values(args.producer_property))
    props.setdefault("client.id", "console-producer")
    props.setdefault("acks", "-1")
    codec = args.compression_codec if args.compression_codec is not None else props.get("compression.type", "none")
    if codec not in COMPRESSION:
        raise ToolError(f"Invalid value {codec} for configuration compression.type: String must be one of: "
                        f"{', '.join(COMPRESSION)}")
    props["compression.type"] = codec
    for option, key in [("timeout", "linger.ms"), ("request_required_acks", "acks"),
                        ("request_timeout_ms", "request.timeout.ms"), ("message_send_max_retries", "retries"),
                        ("retry_backoff_ms", "retry.backoff.ms"), ("batch_size", "batch.size")]:
        if getattr(args, option) is not None:
            props[key] = str(getattr(args, option))
    for key in ("buffer.memory", "max.block.ms", "metadata.max.age.ms", "send.buffer.bytes"):
        props.pop(key, None)  # set by the options odradek accepts and ignores
    return client_config(props, "producer", tool=PRODUCER)


def _produce(argv: list[str]) -> int:
    from odradek.client import KafkaError, Producer

    from ..stream import send_lines

    p = producer_parser()
    args = p.parse_args(argv)
    p.require(args, "topic")
    if args.bootstrap_server is None:
        p.error('Missing required argument "[bootstrap-server]"')
    if args.line_reader not in LINE_READERS:
        p.error(f"odradek's console producer has no line reader {args.line_reader}: only LineMessageReader")
    try:
        props = load_properties(args.reader_config) if args.reader_config else {}
        props.update(key_values(args.property))
        reader = _reader(props)
        config = _producer_config(args)
        with open_admin(args, client_id="console-producer-admin") as admin:
            admin.auto_create_topics([args.topic])
        producer = Producer(args.bootstrap_server, **config)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"ERROR {exception_line(exc)}", file=sys.stderr)
        return 1
    # Kafka's reader stops at a line it cannot split (unless ignore.error=true).
    tally = send_lines(producer, args.topic, reader, stop_at_bad_line=True, sync=args.sync,
                       prompt=sys.stdin.isatty() and sys.stdout.isatty())
    for message, n in sorted(tally.errors.items()):
        print(f"ERROR Error when sending message to topic {args.topic}: {message}"
              + (f" ({n} records)" if n > 1 else ""), file=sys.stderr)
    return 1 if tally.errors else 0


# ---------------------------------------------------------------------- consumer

CONSUMER = "kafka-console-consumer.sh"


def consumer_parser() -> KafkaParser:
    p = KafkaParser(CONSUMER, "This tool helps to read data from Kafka topics and outputs it to standard output.")
    bootstrap_option(p)
    p.add_argument("--topic", help="The topic to consume on.")
    p.add_argument("--include", metavar="REGEX", help="Regular expression specifying list of topics to include.")
    p.add_argument("--whitelist", dest="include", help=argparse.SUPPRESS)  # its name before Kafka 3.0
    p.add_argument("--partition", type=int, help="The partition to consume from.")
    p.add_argument("--offset", help="The offset to consume from: a non-negative number, earliest or latest.")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="A consumer property; repeatable.")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="Consumer config properties file (--consumer-property takes precedence).")
    p.add_argument("--formatter", default="org.apache.kafka.tools.consumer.DefaultMessageFormatter",
                   help="Only Kafka's DefaultMessageFormatter is available.")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="Formatter properties: print.timestamp, print.key, print.offset, print.partition, "
                        "print.headers, print.value, key.separator, line.separator, headers.separator, null.literal, "
                        "key.deserializer, value.deserializer, headers.deserializer")
    p.add_argument("--formatter-config", metavar="FILE", help="Config properties file for the formatter.")
    p.add_argument("--from-beginning", action="store_true",
                   help="Start with the earliest message if the consumer has no committed offset.")
    p.add_argument("--max-messages", type=int, help="The maximum number of messages to consume before exiting.")
    p.add_argument("--timeout-ms", type=int, help="Exit if no message is available for this long.")
    p.add_argument("--skip-message-on-error", action="store_true",
                   help="If a message cannot be printed, skip it instead of halting.")
    p.add_argument("--key-deserializer", help="Deserializer class for keys.")
    p.add_argument("--value-deserializer", help="Deserializer class for values.")
    p.add_argument("--enable-systest-events", action="store_true", help="Accepted; no system test events.")
    p.add_argument("--isolation-level", help="read_committed or read_uncommitted (default).")
    p.add_argument("--group", help="The consumer group id of the consumer.")
    return p


def _number(fmt: str, size: int, name: str):
    def decode(data: bytes) -> bytes:
        if len(data) != size:
            raise ValueError(f"Size of data received by {name} is not {size}")
        value = struct.unpack(fmt, data)[0]
        return (repr(value) if isinstance(value, float) else str(value)).encode()
    return decode


# Kafka's deserializers, by simple class name, as bytes -> printed bytes.
DESERIALIZERS = {
    "StringDeserializer": None, "ByteArrayDeserializer": None, "ByteBufferDeserializer": None,
    "BytesDeserializer": None, "UUIDDeserializer": None, "VoidDeserializer": None,
    "LongDeserializer": _number(">q", 8, "LongDeserializer"),
    "IntegerDeserializer": _number(">i", 4, "IntegerDeserializer"),
    "ShortDeserializer": _number(">h", 2, "ShortDeserializer"),
    "DoubleDeserializer": _number(">d", 8, "DoubleDeserializer"),
    "FloatDeserializer": _number(">f", 4, "FloatDeserializer"),
}


def _deserializer(name: str | None):
    if not name:
        return None
    simple = name.rsplit(".", 1)[-1]
    if simple not in DESERIALIZERS:
        raise ToolError(f"odradek's console consumer has no deserializer {name}: it has "
                        f"{', '.join(sorted(DESERIALIZERS))}")
    return DESERIALIZERS[simple]


def _formatter(args: argparse.Namespace):
    from ..stream import RecordFormatter

    props = load_properties(args.formatter_config) if args.formatter_config else {}
    if args.key_deserializer:
        props["key.deserializer"] = args.key_deserializer
    if args.value_deserializer:
        props["value.deserializer"] = args.value_deserializer
    props.update(key_values(args.property))

    def raw(key: str, default: str) -> bytes:
        return props.get(key, default).encode()

    return RecordFormatter(
        print_timestamp=_bool(props, "print.timestamp"), print_partition=_bool(props, "print.partition"),
        print_offset=_bool(props, "print.offset"), print_headers=_bool(props, "print.headers"),
        print_key=_bool(props, "print.key"), print_value=_bool(props, "print.value", True),
        key_separator=raw("key.separator", "\t"), line_separator=raw("line.separator", "\n"),
        headers_separator=raw("headers.separator", ","), null_literal=raw("null.literal", "null"),
        key_decoder=_deserializer(props.get("key.deserializer")),
        value_decoder=_deserializer(props.get("value.deserializer")),
        header_decoder=_deserializer(props.get("headers.deserializer")))


def _check_consumer(p: KafkaParser, args: argparse.Namespace, props: dict[str, str]) -> None:
    """ConsoleConsumerOptions' checks."""
    if (args.topic is None) == (args.include is None):
        p.error("Exactly one of --include/--topic is required. ")
    if args.partition is not None:
        if args.topic is None:
            p.error("The topic is required when partition is specified.")
        if args.from_beginning and args.offset is not None:
            p.error("Options from-beginning and offset cannot be specified together.")
    elif args.offset is not None:
        p.error("The partition is required when offset is specified.")
    if args.bootstrap_server is None:
        p.error('Missing required argument "[bootstrap-server]"')
    groups = {g for g in (args.group, props.get("group.id")) if g is not None}
    if len(groups) > 1:
        p.error("The group ids provided in different places (directly using '--group', via '--consumer-property', "
                "or via '--consumer.config') do not match. Detected group ids: "
                + ", ".join(f"'{g}'" for g in sorted(groups)))
    if groups and args.partition is not None:
        p.error("Options group and partition cannot be specified together.")
    reset = props.get("auto.offset.reset")
    if reset is not None and args.from_beginning and reset != "earliest":
        print(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', please remove one "
              "option", file=sys.stderr)
        raise SystemExit(1)
    if args.offset is not None and args.offset.lower() not in ("earliest", "latest") and not args.offset.isdigit():
        p.error(f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', 'latest', "
                "or a non-negative long.")
    if args.formatter not in FORMATTERS:
        p.error(f"odradek's console consumer has no formatter {args.formatter}: only DefaultMessageFormatter")


def _consume(argv: list[str]) -> int:
    from odradek.client import KafkaError

    from ..stream import run_consumer
    from .common import TopicFilter

    p = consumer_parser()
    args = p.parse_args(argv)
    try:
        props = load_properties(args.consumer_config) if args.consumer_config else {}
        props.update(key_values(args.consumer_property))
        _check_consumer(p, args, props)
        if args.group is not None:
            props["group.id"] = args.group
        if args.isolation_level is not None:
            props["isolation.level"] = args.isolation_level
        props.setdefault("client.id", "console-consumer")
        props.setdefault("group.protocol", "classic")  # the Java consumer's default
        if "group.id" not in props:
            props.setdefault("enable.auto.commit", "false")
        config = client_config(props, "consumer", tool=CONSUMER)
        fmt = _formatter(args)
        with open_admin(args, client_id="console-consumer-admin") as admin:
            if args.topic is not None:
                admin.auto_create_topics([args.topic])
                tps = admin.partitions_of([args.topic])
                if args.partition is not None and args.partition >= len(tps):
                    raise ToolError(f"Partition {args.partition} of topic {args.topic} does not exist: it has "
                                    f"{len(tps)} partition(s)")
            else:
                include = TopicFilter(args.include)
                topics = [t for t, info in admin.describe_topics().items()
                          if include.allows(t, info.internal, exclude_internal=False)]
                tps = admin.partitions_of(topics) if topics else []
                if not tps and "group.id" not in props:
                    raise ToolError(f"No topic matches --include {args.include}")
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"ERROR {exception_line(exc)}", file=sys.stderr)
        return 1
    offset = None
    if args.offset is not None:
        offset = args.offset.lower() if args.offset.lower() in ("earliest", "latest") else int(args.offset)

    def guarded(record) -> bytes:
        try:
            return fmt(record)
        except ValueError as exc:
            if not args.skip_message_on_error:
                raise
            print(f"ERROR Error processing message, skipping this message: {exc}", file=sys.stderr)
            return b""

    try:
        return run_consumer(args.bootstrap_server, tps, config, guarded, from_beginning=args.from_beginning,
                            partition=args.partition, offset=offset,
                            pattern=None if args.topic is not None else TopicFilter(args.include).regex,
                            max_messages=args.max_messages, timeout_ms=args.timeout_ms,
                            summary=lambda n: print(f"Processed a total of {n} messages", file=sys.stderr))
    except (KafkaError, ValueError) as exc:
        text = exception_line(exc) if isinstance(exc, KafkaError) else str(exc)
        print(f"ERROR Error processing message, terminating consumer process: {text}", file=sys.stderr)
        return 1
