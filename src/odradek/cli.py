"""`odradek` command line: builds the argparse tree and dispatches.

`broker` runs a broker in the foreground; `topics`, `produce`, `consume` and `groups`
are Kafka's shell tools on odradek's own client, one module per family in
`odradek.commands`; `pipeline demo` runs a Spark streaming job on odradek end to end;
`sim run|sweep` runs the deterministic simulator of the group protocols. `kafka-topics`,
`kafka-configs`, `kafka-consumer-groups`, `kafka-console-producer|consumer` and
`kafka-acls` take Kafka's own command lines (odradek.commands.kafka_scripts), and
`kafka-scripts DIR` writes DIR/bin/kafka-*.sh wrappers around them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from . import commands
from .commands import acls, cluster, console, groups, kafka_scripts, pipeline, sim, stream, topics


def _hostport(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {s!r}")
    return host.strip("[]"), int(port)


def _broker(args: argparse.Namespace) -> int:
    from .broker.broker import Broker
    from .broker.server import run_broker
    from .config import load_config

    overrides = {
        "data_dir": Path(args.data_dir) if args.data_dir else None,
        "node_id": args.node_id,
        "rack": args.rack,
        "metadata_url": args.metadata,
    }
    from .config import apply_properties, parse_properties

    try:
        config = load_config(args.config, overrides)
        if args.listen:
            config.listen_host, config.listen_port = args.listen
        if args.advertise:
            config.advertise_host, config.advertise_port = args.advertise
        for item in args.override or []:
            apply_properties(config, parse_properties(item))
        if args.secure_defaults:
            from .security.quickstart import prepare

            defaults, client_file, password = prepare(config.data_dir, config.listen_host, config.listen_port)
            # What the user set (--config, -o) wins over the quick start's settings.
            apply_properties(config, {k: v for k, v in defaults.items() if k not in config.static_keys})
            print(f"odradek: --secure-defaults: SASL_SSL on {config.listen_host}:{config.listen_port}, authorizer on; "
                  f"super user admin, password {password}", flush=True)
            print(f"odradek: clients: --command-config {client_file} (CA certificate {client_file.parent / 'ca.pem'})",
                  flush=True)
    except ValueError as exc:
        print(f"odradek: invalid configuration: {exc}", file=sys.stderr)
        return 2
    from .coordinator.config import CoordinatorConfig

    try:
        CoordinatorConfig.from_properties(config.extra)  # fail before opening anything
    except ValueError as exc:
        print(f"odradek: invalid group coordinator configuration: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from .cluster.backend import MetadataUnavailable

    try:
        broker = Broker(config)
    except ValueError as exc:  # authorizer.class.name and the like
        print(f"odradek: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run_broker(broker))
    except MetadataUnavailable as exc:
        print(f"odradek: cannot join the cluster: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a listener's keystore, JAAS entry or SASL mechanisms, found at start-up
        print(f"odradek: invalid security configuration: {exc}", file=sys.stderr)
        return 2
    finally:
        broker.close()
    return 0


def _kafka_tool(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """(log level, Kafka tool, its arguments) if argv runs one of Kafka's tools."""
    level = None
    if argv[:1] == ["--log-level"] and len(argv) > 1:
        level, argv = argv[1], argv[2:]
    elif argv and argv[0].startswith("--log-level="):
        level, argv = argv[0].split("=", 1)[1], argv[1:]
    if argv and argv[0] in kafka_scripts.TOOLS:
        return level, argv[0], argv[1:]
    return None, None, argv


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    level, tool, tool_args = _kafka_tool(argv)
    if tool is not None:
        # Kafka's options, not odradek's: the tool parses its command line itself.
        logging.basicConfig(level=(level or "WARNING").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return kafka_scripts.run(tool, tool_args)
    parser = argparse.ArgumentParser(prog="odradek", description="Kafka-wire-compatible broker in Python")
    # Default: INFO for the broker (its startup line is what tests wait for), WARNING for
    # the client commands, whose stdout/stderr are data and a one-line summary.
    parser.add_argument("--log-level", help="logging level (default INFO for broker, WARNING otherwise)")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run a broker in the foreground (SIGTERM/SIGINT stop it cleanly)")
    b.add_argument("--config", help="Java properties file with Kafka key names (log.dirs, num.partitions, ...)")
    b.add_argument("--data-dir", help="data directory (default ./data, or log.dirs from --config)")
    b.add_argument("--listen", type=_hostport, help="HOST:PORT to listen on (default 127.0.0.1:9092)")
    b.add_argument("--advertise", type=_hostport, help="HOST:PORT advertised to clients (default: --listen)")
    b.add_argument("--node-id", type=int)
    b.add_argument("--rack", help="broker.rack: this broker's rack (rack-aware placement, KIP-392)")
    b.add_argument("--metadata", metavar="etcd://HOST:PORT[,HOST:PORT...]",
                   help="join a cluster whose metadata lives in etcd (default: a single broker with its own store)")
    b.add_argument("-o", "--override", action="append", metavar="KEY=VALUE", help="set one broker property")
    b.add_argument("--secure-defaults", action="store_true",
                   help="SASL_SSL only, a generated certificate, SCRAM and PLAIN, the authorizer on, and a generated "
                        "admin password (kept in DATA_DIR/security)")
    b.set_defaults(func=_broker)
    common = commands.common_parser()
    topics.register(sub, common)
    stream.register(sub, common)
    groups.register(sub, common)
    pipeline.register(sub, common)
    sim.register(sub, common)
    cluster.register(sub, common)
    kafka_scripts.register(sub, common)
    acls.register(sub, common)
    console.register(sub, common)
    args = parser.parse_args(argv)
    level = args.log_level or ("INFO" if args.command in ("broker", "cluster") else "WARNING")
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in ("broker", "cluster"):
        return args.func(args)
    return commands.dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
