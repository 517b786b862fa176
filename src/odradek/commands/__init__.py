"""Client-side `odradek` subcommands: `topics`, `produce`/`consume`, `groups`.

They mirror Kafka's shell tools (kafka-topics.sh, kafka-console-producer.sh,
kafka-console-consumer.sh, kafka-consumer-groups.sh) on top of odradek's own client,
through its synchronous facade. Each module registers its argparse subtree with
`register(sub, common)` and sets `func` on every leaf; this package holds what they
share: the --bootstrap-server option, error reporting and table output.

Conventions, as in Kafka's tools: data goes to stdout (records, tables), progress and
summaries to stderr; a Kafka error exits 1 with `odradek: error: NAME: message`, a bad
command line exits 2 (argparse). The client is imported inside the handlers, so
`odradek --help` and `odradek broker` do not pay for loading it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.client import Admin, TopicPartition

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
ENV_BOOTSTRAP = "ODRADEK_BOOTSTRAP"


class CommandError(Exception):
    """A problem found after parsing that is not a Kafka error (exit 1)."""


def bootstrap_servers(value: str) -> str:
    """argparse type: a comma-separated HOST:PORT list, checked here so a typo exits 2
    instead of surfacing later as a client ValueError."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected HOST:PORT[,HOST:PORT...]")
    for item in items:
        host, _, port = item.split("://", 1)[-1].rpartition(":")
        if not host or not port.isdigit():
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {item!r}")
    return ",".join(items)


def common_parser() -> argparse.ArgumentParser:
    """The options every client command takes (used as an argparse parent)."""
    common = argparse.ArgumentParser(add_help=False)
    default = os.environ.get(ENV_BOOTSTRAP) or DEFAULT_BOOTSTRAP
    common.add_argument("--bootstrap-server", metavar="HOST:PORT", type=bootstrap_servers, default=default,
                        help=f"broker(s) to bootstrap from (default ${ENV_BOOTSTRAP} or {DEFAULT_BOOTSTRAP})")
    common.add_argument("--command-config", metavar="FILE",
                        help="client properties file (Kafka's names: security.protocol, sasl.*, ssl.*)")
    common.add_argument("-X", dest="client_props", metavar="KEY=VALUE", action="append", default=[],
                        help="a client property (Kafka's names, as kcat -X), e.g. -X security.protocol=SASL_SSL")
    return common


def security_props(args: argparse.Namespace) -> dict[str, str] | None:
    """The TLS/SASL client properties of --command-config and -X (None: PLAINTEXT)."""
    from odradek.config import parse_properties

    props: dict[str, str] = {}
    path = getattr(args, "command_config", None)
    if path:
        try:
            props.update(parse_properties(open(path).read()))
        except OSError as exc:
            raise CommandError(f"--command-config {path}: {exc.strerror or exc}") from None
    for item in getattr(args, "client_props", None) or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"-X {item!r}: expected KEY=VALUE")
        props[key.strip()] = value
    picked = {k: v for k, v in props.items() if k.startswith(("security.", "sasl.", "ssl.", "enable.ssl"))}
    return picked or None


def non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return n


def positive(value: str) -> int:
    n = int(value)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got {value}")
    return n


def topic_spec(value: str) -> tuple[str, list[int] | None]:
    """argparse type for kafka-consumer-groups.sh's --topic: `TOPIC` or `TOPIC:P[,P...]`."""
    topic, sep, parts = value.rpartition(":") if ":" in value else (value, "", "")
    if not topic:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P[,P...], got {value!r}")
    if not sep:
        return topic, None
    try:
        partitions = sorted({non_negative(p) for p in parts.split(",") if p.strip()})
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"expected TOPIC:P[,P...] with partition numbers, got {value!r}") from None
    if not partitions:
        raise argparse.ArgumentTypeError(f"no partitions in {value!r}")
    return topic, partitions


def resolve_partitions(admin: Admin, specs: Iterable[tuple[str, list[int] | None]]) -> list[TopicPartition]:
    """Expand `topic_spec` values: a bare topic means all its partitions; listed
    partitions must exist (the broker would otherwise answer per partition, later)."""
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError, TopicPartition

    out: list[TopicPartition] = []
    for topic, partitions in specs:
        existing = admin.partitions_of([topic])
        if partitions is None:
            out.extend(existing)
            continue
        missing = [p for p in partitions if TopicPartition(topic, p) not in existing]
        if missing:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"{topic} has {len(existing)} partition(s), no partition {missing[0]}")
        out.extend(TopicPartition(topic, p) for p in partitions)
    return sorted(set(out))


def open_admin(args: argparse.Namespace, **config) -> Admin:
    """An admin client for `--bootstrap-server`; `config` overrides AsyncAdmin's keywords."""
    from odradek.client import Admin

    return Admin(args.bootstrap_server, **{"client_id": "odradek-cli", "security": security_props(args), **config})


def format_tps(tps: Iterable[TopicPartition] | None) -> str:
    """kafka-consumer-groups.sh's assignment format: `topic(0,1),other(2)`, `-` if none."""
    if tps is None:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "-"
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))


def cell(value: object) -> str:
    """Table cells are never empty, so `awk`/`split()` keep the columns aligned."""
    return "-" if value is None or value == "" else str(value)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A rich table in Kafka's tools' style: a header row and space-separated columns,
    no borders, so the output stays greppable."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold", show_edge=False)
    for name in columns:
        table.add_column(name, no_wrap=True)
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    console = Console(highlight=False)
    # Never crop or wrap a cell to fit the terminal (or rich's 80 columns when piped):
    # ids and assignments must come out whole, one row per line. Too wide a table then
    # wraps at the terminal, as Kafka's tools' output does.
    natural = console.measure(table, options=console.options.update_width(1_000_000)).maximum
    console.width = max(console.width, natural)
    console.print(table)


def note(message: str) -> None:
    """Progress and summaries go to stderr so stdout stays data."""
    print(f"odradek: {message}", file=sys.stderr, flush=True)


def dispatch(args: argparse.Namespace) -> int:
    """Run a client command, turning the errors a user can cause into one line and exit 1."""
    from odradek.client import IllegalStateError, KafkaError
    from odradek.client.security import SecurityConfigError

    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KafkaError as exc:
        # str(KafkaError) is "NAME: message" already.
        print(f"odradek: error: {exc}", file=sys.stderr)
        return 1
    except (CommandError, IllegalStateError, SecurityConfigError) as exc:
        print(f"odradek: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
