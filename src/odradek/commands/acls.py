"""`odradek acls add|list|remove` (and `odradek kafka-acls`) with kafka-acls.sh's options,
and `odradek users scram set|list|delete` (kafka-configs.sh --entity-type users).

ACLs: `--allow-principal`/`--deny-principal` (repeatable), `--allow-host`/`--deny-host`
(default *), `--operation` (repeatable, default All), resources `--topic`, `--group`,
`--transactional-id` (repeatable) and `--cluster`, `--resource-pattern-type` (LITERAL or
PREFIXED to add and remove; ANY, MATCH, LITERAL or PREFIXED to list), `--principal` to
list one principal's, and the conveniences `--producer` (WRITE, DESCRIBE and CREATE on
the topics, plus IDEMPOTENT_WRITE on the cluster) and `--consumer` (READ and DESCRIBE on
the topics, READ on the groups). `--list` prints as AclCommand prints.

SCRAM users: the password is salted by the client (Kafka's admin client does the same);
`--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]'` is taken as kafka-configs
takes it, or `--mechanism` and `--password`.
"""

from __future__ import annotations

import argparse
import re

from . import CommandError, note, open_admin

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite")


def _operation(name: str):
    from odradek.security.acl import Operation

    key = re.sub(r"(?<!^)(?=[A-Z])", "_", name.strip()).upper().replace("__", "_")
    try:
        return Operation[key]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown operation {name!r} (one of {', '.join(OPERATIONS)})") from None


def _acl_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--operation", action="append", default=[], type=_operation, metavar="OPERATION",
                   help=f"one of {', '.join(OPERATIONS)} (default All)")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default=None, type=str.upper,
                   choices=["ANY", "MATCH", "LITERAL", "PREFIXED"])
    p.add_argument("--principal", help="--list: only this principal's ACLs")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs on --topic")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs on --topic and --group")
    p.add_argument("--force", action="store_true", help="accepted as kafka-acls.sh takes it (odradek never asks)")


def register(sub, common) -> None:
    acls = sub.add_parser("acls", help="add, list or remove ACLs (kafka-acls.sh's options)")
    acl_sub = acls.add_subparsers(dest="action", required=True)
    for action in ("add", "list", "remove"):
        p = acl_sub.add_parser(action, parents=[common], help=f"{action} ACLs")
        _acl_options(p)
        p.set_defaults(func=run_acls, action=action)
    users = sub.add_parser("users", help="SASL/SCRAM users (kafka-configs.sh --entity-type users)")
    users_sub = users.add_subparsers(dest="kind", required=True)
    scram = users_sub.add_parser("scram", help="SCRAM-SHA-256/512 credentials")
    scram_sub = scram.add_subparsers(dest="action", required=True)
    s = scram_sub.add_parser("set", parents=[common], help="create or change a user's credential")
    s.add_argument("user")
    s.add_argument("--mechanism", type=str.upper, choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    s.add_argument("--password")
    s.add_argument("--iterations", type=int, default=4096)
    s.add_argument("--add-config", metavar="'SCRAM-SHA-256=[iterations=N,password=P]'",
                   help="kafka-configs.sh's form (one or both mechanisms, comma-separated)")
    s.set_defaults(func=_scram_set)
    ls = scram_sub.add_parser("list", parents=[common], help="users and their mechanisms (never passwords)")
    ls.add_argument("users", nargs="*")
    ls.set_defaults(func=_scram_list)
    d = scram_sub.add_parser("delete", parents=[common], help="remove a user's credential")
    d.add_argument("user")
    d.add_argument("--mechanism", type=str.upper, choices=["SCRAM-SHA-256", "SCRAM-SHA-512"], required=True)
    d.set_defaults(func=_scram_delete)


# --- ACLs ------------------------------------------------------------------------------------


def _resources(args) -> list[tuple]:
    from odradek.security.acl import CLUSTER_NAME, ResourceType

    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def bindings(args) -> list:
    """The ACLs --add or --remove name (AclCommand.getResourceToAcls)."""
    from odradek.security.acl import CLUSTER_NAME, AclBinding, Operation, PatternType, Permission, ResourceType

    pattern = PatternType[args.resource_pattern_type or "LITERAL"]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CommandError("--resource-pattern-type must be LITERAL or PREFIXED to add or remove ACLs")
    entries = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, Permission.ALLOW),
                                          (args.deny_principal, args.deny_host, Permission.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                entries.append((principal, host, permission))
    if not entries:
        raise CommandError("no principal given: use --allow-principal or --deny-principal")
    out = []
    if args.producer or args.consumer:
        topics = [(ResourceType.TOPIC, t) for t in args.topic]
        if not topics:
            raise CommandError("--producer and --consumer need --topic")
        wanted = []
        if args.producer:
            wanted += [(r, op) for r in topics for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]
            wanted += [((ResourceType.CLUSTER, CLUSTER_NAME), Operation.IDEMPOTENT_WRITE)]
            wanted += [((ResourceType.TRANSACTIONAL_ID, x), op) for x in args.transactional_id
                       for op in (Operation.WRITE, Operation.DESCRIBE)]
        if args.consumer:
            if not args.group:
                raise CommandError("--consumer needs --group")
            wanted += [(r, op) for r in topics for op in (Operation.READ, Operation.DESCRIBE)]
            wanted += [((ResourceType.GROUP, g), Operation.READ) for g in args.group]
    else:
        resources = _resources(args)
        if not resources:
            raise CommandError("no resource given: use --topic, --group, --transactional-id or --cluster")
        wanted = [(r, op) for r in resources for op in (args.operation or [Operation.ALL])]
    for (rtype, name), op in wanted:
        for principal, host, permission in entries:
            out.append(AclBinding(rtype, name, pattern, principal, host, op, permission))
    return list(dict.fromkeys(out))


def _filters(args) -> list:
    from odradek.security.acl import BindingFilter, PatternType

    pattern = PatternType[args.resource_pattern_type or "ANY"]
    resources = _resources(args)
    if not resources:
        return [BindingFilter(pattern_type=pattern, principal=args.principal)]
    return [BindingFilter(rtype, name, pattern, principal=args.principal) for rtype, name in resources]


def print_acls(found: list) -> None:
    """AclCommand's listing: per resource pattern, its entries."""
    by_resource: dict[tuple, list] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (rtype, name, pattern), entries in by_resource.items():
        print(f"Current ACLs for resource `ResourcePattern(resourceType={rtype.name}, name={name}, "
              f"patternType={pattern.name})`: ")
        for b in entries:
            print(f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                  f"permissionType={b.permission.name})")
        print()


def run_acls(args) -> int:
    with open_admin(args) as admin:
        if args.action == "add":
            wanted = bindings(args)
            admin.create_acls(wanted)
            note(f"added {len(wanted)} ACL(s)")
            print_acls(wanted)
        elif args.action == "remove":
            wanted = bindings(args)
            from odradek.security.acl import BindingFilter

            removed = admin.delete_acls([BindingFilter(b.resource_type, b.resource_name, b.pattern_type, b.principal,
                                                       b.host, b.operation, b.permission) for b in wanted])
            note(f"removed {sum(len(r) for r in removed)} ACL(s)")
        else:
            found = []
            for flt in _filters(args):
                found += [b for b in admin.describe_acls(flt) if b not in found]
            print_acls(found)
    return 0


def kafka_acls(argv: list[str]) -> int:
    """`odradek kafka-acls`: kafka-acls.sh's command line (--add, --remove or --list)."""
    from . import common_parser, dispatch

    p = argparse.ArgumentParser(prog="kafka-acls.sh", parents=[common_parser()])
    mode = p.add_mutually_exclusive_group(required=True)
    for action in ("add", "remove", "list"):
        mode.add_argument(f"--{action}", dest="action", action="store_const", const=action)
    _acl_options(p)
    args = p.parse_args(argv)
    args.func = run_acls
    return dispatch(args)


# --- SCRAM users -------------------------------------------------------------------------------


def _add_config(text: str) -> list[tuple[str, str, int]]:
    """kafka-configs.sh's `SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[...]`."""
    out = []
    for mechanism, body in re.findall(r"(SCRAM-SHA-(?:256|512))=\[([^\]]*)\]", text):
        m = re.fullmatch(r"(?:iterations=(-?\d*),)?password=(.*)", body)
        if not m:
            raise CommandError(f"cannot read {mechanism}=[{body}]: expected [iterations=N,]password=P")
        iterations = int(m.group(1)) if m.group(1) and int(m.group(1)) != -1 else 4096
        out.append((mechanism, m.group(2), iterations))
    if not out:
        raise CommandError(f"--add-config {text!r}: expected SCRAM-SHA-256=[...] or SCRAM-SHA-512=[...]")
    return out


def _scram_set(args) -> int:
    if args.add_config:
        wanted = _add_config(args.add_config)
    elif args.mechanism and args.password is not None:
        wanted = [(args.mechanism, args.password, args.iterations)]
    else:
        raise CommandError("give --mechanism and --password, or --add-config")
    with open_admin(args) as admin:
        # Kafka's controller takes one change per user per request.
        for mechanism, password, iterations in wanted:
            admin.alter_user_scram_credentials(upsertions=[(args.user, mechanism, password, iterations)])
    note(f"{args.user}: {', '.join(m for m, _, _ in wanted)} set")
    return 0


def _scram_list(args) -> int:
    with open_admin(args) as admin:
        found = admin.describe_user_scram_credentials(args.users or None)
    for user, creds in sorted(found.items()):
        print(f"{user}: " + ", ".join(f"{m}=iterations={n}" for m, n in creds))
    return 0


def _scram_delete(args) -> int:
    with open_admin(args) as admin:
        admin.alter_user_scram_credentials(deletions=[(args.user, args.mechanism)])
    note(f"{args.user}: {args.mechanism} deleted")
    return 0
