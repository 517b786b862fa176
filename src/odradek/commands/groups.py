"""`odradek groups`: kafka-consumer-groups.sh for both group types.

Consumer groups (KIP-848) and classic groups are described through the same admin
call; the tables show what both have, and for consumer groups also what only they
have: each member's epoch and target assignment next to its current one, which is how
one sees a rebalance still in progress (current != target), and the group and
assignment epochs.

reset-offsets computes a plan (earliest, latest, an offset, a time, a shift; clamped
to each log's range) and only commits it with --execute, as Kafka's tool does. Like
Kafka it refuses a group with members: their positions would overwrite the reset on
the next commit, and the coordinator rejects membership-free commits to such a group
anyway.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from . import (
    CommandError,
    format_tps,
    non_negative,
    note,
    open_admin,
    print_table,
    resolve_partitions,
    security_props,
    topic_spec,
)

TYPES = ["consumer", "classic"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of, delete groups (kafka-consumer-groups.sh)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    ls = actions.add_parser("list", parents=[common], help="groups with their type and state")
    ls.add_argument("--type", choices=TYPES, help="only groups of this type")
    ls.add_argument("--state", action="append", default=[], metavar="STATE",
                    help="only groups in this state (Stable, Empty, ...); repeatable or comma-separated")
    ls.set_defaults(func=_list)

    d = actions.add_parser("describe", parents=[common], help="offsets and lag (default), members, or state")
    d.add_argument("groups", nargs="*", metavar="GROUP")
    d.add_argument("--all-groups", action="store_true", help="describe every group")
    view = d.add_mutually_exclusive_group()
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets",
                      help="committed offset, log end offset and lag per partition (the default)")
    view.add_argument("--members", dest="view", action="store_const", const="members",
                      help="members with their assignments (and target assignments for consumer groups)")
    view.add_argument("--state", dest="view", action="store_const", const="state",
                      help="type, state, assignor, epochs and member count")
    d.add_argument("--type", choices=TYPES, help="fail unless the group is of this type")
    d.add_argument("--watch", action="store_true",
                   help="a live view (epochs, each member's current/target/pending partitions, lag, epoch history) "
                        "until Ctrl-C")
    d.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="--watch refresh period")
    d.add_argument("--iterations", type=int, metavar="N", help=argparse.SUPPRESS)  # tests: stop after N refreshes
    d.set_defaults(func=_describe, parser=d, view="offsets")

    r = actions.add_parser("reset-offsets", parents=[common],
                           help="plan (default) or --execute a reset of a group's committed offsets")
    r.add_argument("group")
    r.add_argument("--topic", action="append", default=[], type=topic_spec, metavar="TOPIC[:P,...]",
                   help="topic, or topic:partitions, to reset; repeatable")
    r.add_argument("--all-topics", action="store_true", help="every partition the group has offsets for")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=non_negative, metavar="N")
    to.add_argument("--to-datetime", type=datetime_ms, metavar="ISO",
                    help="first offset at or after this time (YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]; UTC without an "
                         "offset, as in Kafka)")
    to.add_argument("--shift-by", type=int, metavar="N", help="move each committed offset by N (may be negative)")
    r.add_argument("--execute", action="store_true", help="commit the plan (without it: only print it)")
    r.set_defaults(func=_reset_offsets, parser=r)

    rm = actions.add_parser("delete", parents=[common], help="delete empty groups and their offsets")
    rm.add_argument("groups", nargs="+", metavar="GROUP")
    rm.set_defaults(func=_delete)

    do = actions.add_parser("delete-offsets", parents=[common], help="delete a group's committed offsets")
    do.add_argument("group")
    do.add_argument("--topic", action="append", required=True, type=topic_spec, metavar="TOPIC[:P,...]",
                    help="topic, or topic:partitions; repeatable")
    do.set_defaults(func=_delete_offsets)

    mm = actions.add_parser("remove-members", parents=[common], help="remove static members (KIP-345)")
    mm.add_argument("group")
    mm.add_argument("--instance-id", action="append", required=True, metavar="ID",
                    help="group.instance.id of a member to remove; repeatable")
    mm.set_defaults(func=_remove_members)


def datetime_ms(value: str) -> int:
    """argparse type for --to-datetime: epoch milliseconds."""
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM], got {value!r}") from None
    if dt.tzinfo is None:
        # Kafka's Utils.getDateTime appends "Z" to a time without a zone: it is UTC.
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def group_exists(admin, d) -> bool:
    """DescribeGroups below v6 answers an unknown group with state Dead and no error;
    a group that only has committed offsets (a "simple" group) still exists."""
    return not (d.state.lower() == "dead" and not d.members and not admin.list_group_offsets(d.group_id))


def _list(args: argparse.Namespace) -> int:
    states = [s.strip() for item in args.state for s in item.split(",") if s.strip()]
    with open_admin(args) as admin:
        listings = admin.list_groups(types=[args.type] if args.type else None, states=states or None)
    print_table(["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
                ([g.group_id, g.type, g.state, g.protocol_type] for g in listings))
    return 0


def _describe_checked(admin, group_ids: list[str], want_type: str | None) -> dict:
    """Descriptions, with a missing group (or one of the wrong --type) as an error."""
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError

    descs = admin.describe_groups(group_ids)
    for gid in group_ids:
        d = descs[gid]
        if not group_exists(admin, d):
            raise KafkaError(ErrorCode.group_id_not_found, f"consumer group '{gid}' does not exist")
        if want_type is not None and d.type != want_type:
            raise KafkaError(ErrorCode.group_id_not_found, f"group '{gid}' is a {d.type} group, not a {want_type} group")
    return descs


def _describe(args: argparse.Namespace) -> int:
    if bool(args.groups) == args.all_groups:
        args.parser.error("name the groups to describe, or give --all-groups")
    if args.watch:
        return _watch(args)
    with open_admin(args) as admin:
        group_ids = args.groups or [g.group_id for g in admin.list_groups(types=[args.type] if args.type else None)]
        descs = _describe_checked(admin, group_ids, args.type)
        if args.view == "state":
            _print_state(descs)
        elif args.view == "members":
            _print_members(descs)
        else:
            _print_offsets(admin, descs)
    return 0


def _watch(args: argparse.Namespace) -> int:
    import asyncio

    from odradek.client.admin import AsyncAdmin
    from odradek.observability.watch import watch

    async def run() -> int:
        async with AsyncAdmin(args.bootstrap_server, client_id="odradek-cli", security=security_props(args)) as admin:
            ids = args.groups or [g.group_id for g in await admin.list_groups(types=[args.type] if args.type else None)]
            return await watch(admin, ids, max(0.1, args.interval), args.iterations)

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:
        return 0


def _print_state(descs: dict) -> None:
    print_table(["GROUP", "TYPE", "STATE", "ASSIGNOR", "EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"],
                ([d.group_id, d.type, d.state, d.protocol, d.epoch, d.assignment_epoch, len(d.members)]
                 for d in descs.values()))


def _print_members(descs: dict) -> None:
    consumer = any(d.type == "consumer" for d in descs.values())
    columns = ["GROUP", "MEMBER-ID", "INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    if consumer:
        columns += ["TARGET-ASSIGNMENT", "MEMBER-EPOCH"]
    rows = []
    for d in descs.values():
        if not d.members:
            note(f"Consumer group '{d.group_id}' has no active members.")
        for m in sorted(d.members, key=lambda m: (m.client_id, m.member_id)):
            row = [d.group_id, m.member_id, m.instance_id, m.host, m.client_id, len(m.assignment),
                   format_tps(m.assignment)]
            if consumer:
                row += [format_tps(m.target) if m.target is not None else None, m.epoch]
            rows.append(row)
    print_table(columns, rows)


def _print_offsets(admin, descs: dict) -> None:
    rows = []
    for d in descs.values():
        if not d.members:
            note(f"Consumer group '{d.group_id}' has no active members.")
        owner = {tp: m for m in d.members for tp in m.assignment}
        for tp, (current, end) in admin.group_lag(d.group_id).items():
            m = owner.get(tp)
            rows.append([d.group_id, tp.topic, tp.partition, current, end,
                         None if current is None else max(0, end - current),
                         m and m.member_id, m and m.host, m and m.client_id])
        # Members with nothing assigned still get a row, as in kafka-consumer-groups.sh.
        rows += [[d.group_id, None, None, None, None, None, m.member_id, m.host, m.client_id]
                 for m in d.members if not m.assignment]
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID"], rows)


def _reset_offsets(args: argparse.Namespace) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError

    if bool(args.topic) == args.all_topics:
        args.parser.error("give --topic (repeatable) or --all-topics")
    if args.to_earliest:
        to, value = "earliest", None
    elif args.to_latest:
        to, value = "latest", None
    elif args.to_offset is not None:
        to, value = "offset", args.to_offset
    elif args.to_datetime is not None:
        to, value = "datetime", args.to_datetime
    else:
        to, value = "shift", args.shift_by
    with open_admin(args) as admin:
        d = admin.describe_groups([args.group])[args.group]
        if d.members:
            raise KafkaError(ErrorCode.non_empty_group,
                             f"offsets can only be reset if group '{args.group}' is inactive, but it is {d.state} "
                             f"with {len(d.members)} member(s)")
        if args.all_topics:
            tps = sorted(admin.list_group_offsets(args.group))
            if not tps:
                raise CommandError(f"group '{args.group}' has no committed offsets; name topics with --topic")
        else:
            tps = resolve_partitions(admin, args.topic)
        current = admin.list_group_offsets(args.group, tps)
        plan = admin.plan_offset_reset(args.group, tps, to=to, value=value)
        if args.execute:
            admin.alter_group_offsets(args.group, plan)
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                ([args.group, tp.topic, tp.partition, current[tp].offset if tp in current else None, off]
                 for tp, off in sorted(plan.items())))
    if not args.execute:
        note("dry run: nothing was committed; add --execute to apply this plan")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        for gid in args.groups:  # one by one, so the output says how far it got
            admin.delete_groups([gid])
            print(f"Deleted group {gid}.")
    return 0


def _delete_offsets(args: argparse.Namespace) -> int:
    from odradek.client import TopicPartition

    with open_admin(args) as admin:
        # A bare topic means the partitions the group has offsets for, looked up in the
        # group rather than the topic: the topic may be gone, a common reason to clean up.
        committed = admin.list_group_offsets(args.group)
        tps: list[TopicPartition] = []
        for topic, partitions in args.topic:
            if partitions is None:
                found = sorted(tp for tp in committed if tp.topic == topic)
                if not found:
                    raise CommandError(f"group '{args.group}' has no committed offsets for topic {topic}")
                tps += found
            else:
                tps += [TopicPartition(topic, p) for p in partitions]
        admin.delete_group_offsets(args.group, tps)
    print_table(["TOPIC", "PARTITION", "STATUS"], ([tp.topic, tp.partition, "Successful"] for tp in sorted(set(tps))))
    return 0


def _remove_members(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.remove_members(args.group, args.instance_id)
    print(f"Removed {len(args.instance_id)} member(s) from group {args.group}: {', '.join(args.instance_id)}.")
    return 0
