"""kafka-configs.sh: Kafka's ConfigCommand for topics, brokers and groups.

--describe prints, per entity, "Dynamic configs for topic T are:" (or "All configs"
with --all, "Default configs for brokers in the cluster are:" for --entity-default)
and one line per config, `  name=value sensitive=false synonyms={SOURCE:name=value,
...}`, sorted by name; without --all only the entity's own dynamic configs are listed.
--alter sends IncrementalAlterConfigs SET for --add-config / --add-config-file and
DELETE for --delete-config, after checking that every config to delete is set on the
entity, as Kafka does. Users, clients, IPs, client metrics and broker loggers are
Kafka entity types odradek has no configs for: they are refused with a clear error.

Errors in the command line's meaning print the bare message (Kafka's
IllegalArgumentException path); failed requests print "Error while executing config
command with args '...'" and the error; both exit 1.
"""

from __future__ import annotations

import argparse
import re
import sys

from .. import open_admin
from .common import (
    KafkaParser,
    ToolError,
    admin_config,
    bootstrap_option,
    exception_line,
    load_properties,
)

TOOL = "kafka-configs.sh"
SUPPORTED = {"topics": 2, "brokers": 4, "groups": 32}  # entity type -> ConfigResourceType
# Kafka's BrokerSupportedConfigTypes, in its order.
KAFKA_TYPES = ["topics", "clients", "users", "brokers", "ips", "client-metrics", "broker-loggers", "groups"]
# The source of an entity's own dynamic configs (ConfigCommand.getResourceConfig).
DYNAMIC = {"topics": "DYNAMIC_TOPIC_CONFIG", "brokers": "DYNAMIC_BROKER_CONFIG", "groups": "DYNAMIC_GROUP_CONFIG"}

# shorthand flag -> entity type; and the *-defaults flags
ENTITY_FLAGS = {"topic": "topics", "client": "clients", "user": "users", "broker": "brokers",
                "broker_logger": "broker-loggers", "ip": "ips", "client_metrics": "client-metrics", "group": "groups"}
DEFAULT_FLAGS = {"client_defaults": "clients", "user_defaults": "users", "broker_defaults": "brokers",
                 "ip_defaults": "ips"}


def parser() -> KafkaParser:
    p = KafkaParser(TOOL, "This tool helps to manipulate and describe entity config for a topic, client, user, "
                          "broker, ip, client-metrics or group")
    bootstrap_option(p)
    p.add_argument("--bootstrap-controller", metavar="HOST:PORT",
                   help="The Kafka controllers to connect to (odradek's brokers answer as controllers).")
    p.add_argument("--zookeeper", metavar="URLS", help="Not supported: odradek has no ZooKeeper.")
    p.add_argument("--command-config", metavar="FILE",
                   help="Property file containing configs to be passed to Admin Client.")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--all", action="store_true",
                   help="List all configs for the given entity, including static configs if available.")
    p.add_argument("--entity-type", action="append", default=[], metavar="TYPE",
                   help="Type of entity (topics/clients/users/brokers/broker-loggers/ips/client-metrics/groups)")
    p.add_argument("--entity-name", action="append", default=[], metavar="NAME",
                   help="Name of entity (topic name/broker id/group id)")
    p.add_argument("--entity-default", action="store_true",
                   help="Default entity name for clients/users/brokers/ips (applies to corresponding entity type)")
    p.add_argument("--add-config", metavar="k1=v1,k2=[v1,v2,v2],k3=v3",
                   help="Key Value pairs of configs to add. Square brackets can be used to group values which "
                        "contain commas.")
    p.add_argument("--add-config-file", metavar="FILE", help="Path to a properties file with configs to add.")
    p.add_argument("--delete-config", action="append", default=[], metavar="k1,k2", help="config keys to remove")
    p.add_argument("--force", action="store_true", help="Suppress console prompts")
    for flag, what in [("topic", "The topic's name."), ("client", "The client's ID."),
                       ("user", "The user's principal name."), ("broker", "The broker's ID."),
                       ("broker-logger", "The broker's ID for its logger config."), ("ip", "The IP address."),
                       ("group", "The group's ID."), ("client-metrics", "The client metrics config resource name.")]:
        p.add_argument(f"--{flag}", metavar="NAME", help=what)
    for flag, what in [("client-defaults", "clients"), ("user-defaults", "users"), ("broker-defaults", "brokers"),
                       ("ip-defaults", "IPs")]:
        p.add_argument(f"--{flag}", action="store_true", help=f"The config defaults for all {what}.")
    return p


def _entities(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(entity types, entity names), names "" for a default entity (ConfigCommandOptions)."""
    types = list(args.entity_type)
    names = list(args.entity_name) + ([""] if args.entity_default else [])
    for flag, etype in ENTITY_FLAGS.items():
        if getattr(args, flag) is not None:
            types.append(etype)
            names.append(getattr(args, flag))
    for flag, etype in DEFAULT_FLAGS.items():
        if getattr(args, flag):
            types.append(etype)
            names.append("")
    return types, names


def _check(p: KafkaParser, args: argparse.Namespace) -> tuple[str, str | None]:
    """ConfigCommandOptions.checkArgs; returns (entity type, entity name or None)."""
    if int(args.alter) + int(args.describe) != 1:
        p.error("Command must include exactly one action: --describe, --alter")
    if args.describe:
        for option in ("add-config", "delete-config", "add-config-file"):
            p.check_invalid(args, "describe", [option])
    types, names = _entities(args)
    dups = sorted({t for t in types if types.count(t) > 1})
    if dups:
        raise ToolError(f"Duplicate entity type(s) specified: {','.join(dups)}")
    if args.zookeeper:
        raise ToolError("odradek has no ZooKeeper: use --bootstrap-server")
    for t in types:
        if t not in KAFKA_TYPES:
            raise ToolError(f"Invalid entity type {t}, the entity type must be one of {', '.join(KAFKA_TYPES)} with a "
                            "--bootstrap-server or --bootstrap-controller argument")
    if not types:
        raise ToolError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise ToolError("Only 'users' and 'clients' entity types may be specified together")
    shorthand = any(getattr(args, f) not in (None, False) for f in (*ENTITY_FLAGS, *DEFAULT_FLAGS))
    if (args.entity_name or args.entity_type or args.entity_default) and shorthand:
        raise ToolError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if (args.bootstrap_server is None) == (args.bootstrap_controller is None):
        raise ToolError("One of the required --bootstrap-server, --boostrap-controller, or --zookeeper arguments "
                        "must be specified" if args.bootstrap_server is None else
                        "Only one of --bootstrap-server, --boostrap-controller, and --zookeeper can be specified")
    etype = types[0]
    unsupported = sorted(set(types) - set(SUPPORTED))
    if unsupported:
        raise ToolError(f"odradek has no {', '.join(unsupported)} configs: kafka-configs.sh on odradek manages "
                        "topics, brokers and groups")
    has_name = any(names)
    if has_name and etype == "brokers":
        for name in names:
            if not name.lstrip("-").isdigit():
                raise ToolError(f"The entity name for brokers must be a valid integer broker id, but it is: {name}")
    if args.describe and args.entity_default and etype != "brokers":
        raise ToolError(f"--entity-default must not be specified with --describe of {etype}")
    if args.alter:
        if etype == "brokers":
            if not names:
                raise ToolError("An entity-name or default entity must be specified with --alter of users, clients, "
                                "brokers or ips")
        elif not has_name:
            raise ToolError(f"An entity name must be specified with --alter of {etype}")
        if args.add_config is not None and args.add_config_file is not None:
            raise ToolError("Only one of --add-config or --add-config-file must be specified")
        if args.add_config is None and args.add_config_file is None and not args.delete_config:
            raise ToolError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                            "with --alter")
        if len(types) != len(names):
            raise ToolError("An entity name must be specified for every entity type")
    return etype, (names[0] if names else None)


def run(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.bootstrap_controller is not None:
        from .. import bootstrap_servers

        try:
            args.bootstrap_controller = bootstrap_servers(args.bootstrap_controller)
        except argparse.ArgumentTypeError as exc:
            p.error(f"argument --bootstrap-controller: {exc}")
    try:
        etype, name = _check(p, args)
        adds = _configs_to_add(args) if args.alter else {}
        deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
        config = admin_config(args, tool=TOOL)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    from odradek.client import KafkaError

    try:
        args.bootstrap_server = args.bootstrap_server or args.bootstrap_controller
        with open_admin(args, **{"client_id": "odradek-kafka-configs", **config}) as admin:
            if args.alter:
                _alter(admin, etype, name or "", adds, deletes)
            else:
                _describe(admin, etype, name, args.all)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"Error while executing config command with args '{' '.join(argv)}'", file=sys.stderr)
        print(exception_line(exc), file=sys.stderr)
        return 1
    return 0


# Split at commas that are not inside [...] (ConfigCommand.parseConfigsToBeAdded).
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def _configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if args.add_config_file is not None:
        props.update(load_properties(args.add_config_file))
    if args.add_config is not None:
        pairs = [re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item) for item in
                 re.split("," + _OUTSIDE_BRACKETS, args.add_config)]
        if not all(len(pair) == 2 for pair in pairs):
            raise ToolError('Invalid entity config: all configs to be added must be in the format "key=val".')
        for key, value in pairs:
            props[key.strip()] = re.sub(r"[\[\]]", "", value).strip()
    for key in props:
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", key):
            raise ToolError(f"Invalid character found for config key: {key}")
    return props


def _resource(etype: str, name: str) -> tuple[int, str]:
    return SUPPORTED[etype], name


def _entries(admin, etype: str, name: str, *, synonyms: bool, everything: bool) -> list:
    """ConfigCommand.getResourceConfig: the entity's configs sorted by name, only its
    own dynamic ones unless `everything`."""
    resource = _resource(etype, name)
    entries = admin.describe_configs([resource], include_synonyms=synonyms)[resource]
    if not everything:
        source = "DYNAMIC_DEFAULT_BROKER_CONFIG" if etype == "brokers" and not name else DYNAMIC[etype]
        entries = [e for e in entries if e.source == source]
    return sorted(entries, key=lambda e: e.name)


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _describe(admin, etype: str, name: str | None, everything: bool) -> None:
    if name is not None:
        names = [name]
    elif etype == "topics":
        names = admin.list_topics(internal=True)
    elif etype == "brokers":
        names = [str(b.node_id) for b in admin.describe_cluster()[2]] + [""]
    else:
        names = [g.group_id for g in admin.list_groups() if g.protocol_type in ("consumer", "")]
    for entity in names:
        if entity == "" and etype == "brokers":
            print(f"Default configs for {etype} in the cluster are:")
        else:
            print(f"{'All' if everything else 'Dynamic'} configs for {etype[:-1]} {entity} are:")
        for e in _entries(admin, etype, entity, synonyms=True, everything=everything):
            syn = ", ".join(f"{s.source}:{s.name}={_java(s.value)}" for s in e.synonyms)
            print(f"  {e.name}={_java(e.value)} sensitive={str(e.is_sensitive).lower()} synonyms={{{syn}}}")


def _alter(admin, etype: str, name: str, adds: dict[str, str], deletes: list[str]) -> None:
    from odradek.client.admin import ConfigOp

    current = {e.name for e in _entries(admin, etype, name, synonyms=False, everything=False)}
    invalid = [k for k in deletes if k not in current]
    if invalid:
        raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    ops = [(k, ConfigOp.SET, v) for k, v in adds.items()] + [(k, ConfigOp.DELETE, None) for k in deletes]
    admin.incremental_alter_configs({_resource(etype, name): ops})
    if name:
        print(f"Completed updating config for {etype[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {etype} in the cluster.")
