"""What the Kafka-compatible tools share: a joptsimple-like parser, Java properties,
client properties mapped onto odradek's client, and Kafka's error texts.

Kafka's tools parse with joptsimple and report a bad command line through
CommandLineUtils.printUsageAndExit: the message, then the usage, on stderr, exit 1
(argparse's own convention is exit 2). Client properties (`--command-config`,
`--producer-property`, `--consumer.config` ...) use the Java clients' names; those
odradek's client has an equivalent for are passed on, the others are reported once on
stderr and ignored, as a Java client logs a config "supplied but isn't a known config".
TLS and SASL properties (security.protocol, sasl.*, ssl.*) go to the client as they are.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from .. import bootstrap_servers

if TYPE_CHECKING:
    from odradek.client import KafkaError

# The Kafka release whose tools' options and output these follow (`--version`).
KAFKA_TOOLS_VERSION = "4.0.0"


class ToolError(Exception):
    """An error the tool reports in its own words (not a usage error), exit 1."""


class KafkaParser(argparse.ArgumentParser):
    """argparse with Kafka's usage-error convention: message, usage, exit 1."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description)
        self.add_argument("--version", action="version",
                          version=f"{KAFKA_TOOLS_VERSION} (odradek {_odradek_version()})",
                          help="Display Kafka version.")

    def error(self, message: str) -> NoReturn:
        print(message, file=sys.stderr)
        self.print_usage(sys.stderr)
        raise SystemExit(1)

    def check_invalid(self, args: argparse.Namespace, option: str, invalid: Iterable[str]) -> None:
        """CommandLineUtils.checkInvalidArgs: `option` may not be combined with any of `invalid`."""
        if given(args, option):
            for other in invalid:
                if other != option and given(args, other):
                    self.error(f'Option "[{option}]" can\'t be used with option "[{other}]"')

    def require(self, args: argparse.Namespace, *options: str) -> None:
        for option in options:
            if not given(args, option):
                self.error(f'Missing required argument "[{option}]"')


def given(args: argparse.Namespace, option: str) -> bool:
    """Whether `--option` is on the command line (0 is a value, so not `in (None, False)`)."""
    value = getattr(args, option.replace("-", "_").replace(".", "_"))
    return value is not None and value is not False and value != []


def _odradek_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odradek")
    except PackageNotFoundError:
        return "unknown"


def bootstrap_option(parser: argparse.ArgumentParser, *names: str) -> None:
    parser.add_argument(*(names or ("--bootstrap-server",)), dest="bootstrap_server", metavar="HOST:PORT",
                        type=bootstrap_servers, help="REQUIRED: the server(s) to connect to")


# ---------------------------------------------------------------------- properties


def load_properties(path: str) -> dict[str, str]:
    """A Java properties file (Utils.loadProps)."""
    from odradek.config import parse_properties

    try:
        return parse_properties(Path(path).read_text())
    except OSError as exc:
        raise ToolError(f"{path} (could not read it: {exc.strerror or exc})") from None


def key_values(items: Iterable[str] | None) -> dict[str, str]:
    """CommandLineUtils.parseKeyValueArgs: `key=value`, split at the first '=', a missing
    value is the empty string."""
    out: dict[str, str] = {}
    for item in items or ():
        key, _, value = item.partition("=")
        out[key] = value
    return out


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return v == "true"


_ASSIGNORS = {"RangeAssignor": "range", "RoundRobinAssignor": "roundrobin", "StickyAssignor": "sticky",
              "CooperativeStickyAssignor": "cooperative-sticky"}


def _assignors(value: str) -> list[str]:
    # Java names classes (org.apache.kafka.clients.consumer.RangeAssignor); librdkafka names strategies.
    return [_ASSIGNORS.get(v.strip().rsplit(".", 1)[-1], v.strip()) for v in value.split(",") if v.strip()]


def _acks(value: str) -> str:
    return "all" if value.strip() in ("all", "-1") else value.strip()


# Java client property -> (odradek client keyword, converter).
_COMMON: dict[str, tuple[str, Callable[[str], object]]] = {
    "client.id": ("client_id", str),
    "request.timeout.ms": ("request_timeout_ms", int),
}
_PRODUCER = {
    **_COMMON,
    "acks": ("acks", _acks),
    "linger.ms": ("linger_ms", float),
    "batch.size": ("batch_size", int),
    "compression.type": ("compression_type", str),
    "retries": ("retries", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "max.request.size": ("max_request_size", int),
    "enable.idempotence": ("enable_idempotence", _bool),
}
_CONSUMER = {
    **_COMMON,
    "group.id": ("group_id", str),
    "group.protocol": ("group_protocol", str.lower),
    "group.instance.id": ("group_instance_id", str),
    "group.remote.assignor": ("group_remote_assignor", str),
    "client.rack": ("client_rack", str),
    "auto.offset.reset": ("auto_offset_reset", str),
    "enable.auto.commit": ("enable_auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", int),
    "max.poll.records": ("max_poll_records", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "session.timeout.ms": ("session_timeout_ms", int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", int),
    "max.poll.interval.ms": ("max_poll_interval_ms", int),
    "partition.assignment.strategy": ("partition_assignment_strategy", _assignors),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "isolation.level": ("isolation_level", str),
    "check.crcs": ("check_crcs", _bool),
}
KINDS = {"admin": _COMMON, "producer": _PRODUCER, "consumer": _CONSUMER}

# Set by the tools themselves or meaningless for odradek's client: never worth a warning.
_SILENT = {"bootstrap.servers", "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
           "security.protocol"}


def client_config(props: dict[str, str], kind: str, *, tool: str) -> dict[str, object]:
    """odradek client keywords for the Java client properties `props` (kind: admin,
    producer or consumer); unsupported ones are reported on stderr and left out."""
    table = KINDS[kind]
    out: dict[str, object] = {}
    ignored = []
    security = {k: v for k, v in props.items() if k.startswith(("security.", "sasl.", "ssl.", "enable.ssl"))}
    if security:
        out["security"] = security  # TLS and SASL, with Kafka's names (client/security.py)
    for key, value in props.items():
        if key in security:
            continue
        if key in table:
            name, convert = table[key]
            try:
                out[name] = convert(value)
            except ValueError as exc:
                raise ToolError(f"Invalid value {value} for configuration {key}: {exc}") from None
        elif key not in _SILENT:
            ignored.append(key)
    if ignored:
        print(f"{tool}: ignoring {kind} properties odradek's client does not support: {', '.join(sorted(ignored))}",
              file=sys.stderr)
    return out


def admin_config(args, *, tool: str) -> dict[str, object]:
    """The admin client keywords a tool's `--command-config` file asks for ({} without one)."""
    props = load_properties(args.command_config) if args.command_config else {}
    return client_config(props, "admin", tool=tool)


# ---------------------------------------------------------------------- errors

# Kafka's default messages (org.apache.kafka.common.protocol.Errors) for a response that
# carries none: what the Java tools would print.
_DEFAULT_MESSAGES = {
    "unknown_topic_or_partition": "This server does not host this topic-partition.",
    "topic_already_exists": "Topic with this name already exists.",
    "invalid_partitions": "Number of partitions is below 1.",
    "invalid_replication_factor": "Replication factor is below 1 or larger than the number of available brokers.",
    "invalid_replica_assignment": "Replica assignment is invalid.",
    "invalid_config": "Configuration is invalid.",
    "invalid_topic_exception": "The request attempted to perform an operation on an invalid topic.",
    "policy_violation": "Request parameters do not satisfy the configured policy.",
    "group_id_not_found": "The group id does not exist.",
    "non_empty_group": "The group is not empty.",
    "invalid_group_id": "The configured groupId is invalid.",
    "group_subscribed_to_topic": "Deleting offsets of a topic is forbidden while the consumer group is actively "
                                 "subscribed to it.",
    "unknown_member_id": "The coordinator is not aware of this member.",
    "unsupported_version": "The version of API is not supported.",
    "invalid_request": "This most likely occurs because of a request being malformed by the client library or the "
                       "message was sent to an incompatible broker. See the broker logs for more details.",
    "security_disabled": "Security features are disabled.",
    "request_timed_out": "The request timed out.",
}


def error_text(exc: BaseException) -> str:
    """The text a Kafka tool prints for `exc`: the broker's message, else Kafka's
    default message for the code, else odradek's own description."""
    from odradek.client import KafkaError

    if isinstance(exc, KafkaError):
        server = getattr(exc, "server_message", None)
        if server:
            return server
        return _DEFAULT_MESSAGES.get(exc.code.name, str(exc))
    return str(exc)


def exception_line(exc: KafkaError) -> str:
    """`NAME: message` for a Kafka error, as Java prints an exception with its class."""
    text = error_text(exc)
    return text if text.startswith(exc.name) else f"{exc.name}: {text}"


# ---------------------------------------------------------------------- topics


class TopicFilter:
    """Kafka's TopicFilter.IncludeList: a Java regex where ',' means '|', spaces and
    surrounding quotes are dropped, and a topic must match as a whole."""

    def __init__(self, raw: str) -> None:
        self.regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|").replace(" ", "")))
        try:
            self.pattern = re.compile(self.regex)
        except re.error:
            raise ToolError(f"{self.regex} is an invalid regex.") from None

    def allows(self, topic: str, internal: bool, exclude_internal: bool) -> bool:
        return self.pattern.fullmatch(topic) is not None and not (internal and exclude_internal)
