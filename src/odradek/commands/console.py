"""`odradek console`: the live console (observability/console.py) for any Kafka cluster,
standalone: it only speaks the public protocol, so it works against Kafka too (a classic
group's generation and leader, which DescribeGroups does not carry, are then not shown)."""

from __future__ import annotations

import argparse
import asyncio

from . import security_props


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("console", parents=[common],
                       help="serve the live console (groups, epochs, assignments, lag) for a cluster")
    p.add_argument("--listen", default="127.0.0.1:9405", metavar="HOST:PORT",
                   help="where the console listens (default 127.0.0.1:9405; port 0: any free port)")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="refresh period (default 1 s)")
    p.set_defaults(func=_console)


def _console(args: argparse.Namespace) -> int:
    from odradek.observability.console import run_console

    try:
        asyncio.run(run_console(args.bootstrap_server, args.listen, security_props(args), max(0.1, args.interval)))
    except KeyboardInterrupt:
        pass
    return 0
