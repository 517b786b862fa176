"""kafka-consumer-groups.sh: Kafka's ConsumerGroupCommand on odradek's admin client.

--list, --describe (--offsets, the default; --members [--verbose]; --state), --delete,
--reset-offsets and --delete-offsets, with Kafka's option checks and its fixed-width
output (printf formats copied from ConsumerGroupCommand), for consumer groups of both
protocols. --reset-offsets plans with the admin client's plan_offset_reset, the same
code as `odradek groups reset-offsets`, and commits only with --execute; it refuses
a group that is not Empty (or Dead), as Kafka does.

Kafka prints its errors ("Error: ...") on stdout and exits 0; here they go to stderr
and the exit status is 1, so a script can tell.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import timedelta
from pathlib import Path

from .. import format_tps, open_admin, topic_spec
from ..groups import datetime_ms, group_exists
from .common import (
    KafkaParser,
    ToolError,
    admin_config,
    bootstrap_option,
    exception_line,
    given,
)

TOOL = "kafka-consumer-groups.sh"
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "to_datetime", "by_duration", "to_earliest", "to_latest", "to_current", "shift_by",
             "from_file")
# ConsumerGroupState and GroupType names, as Kafka prints and parses them (case-insensitively).
STATES = ["PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling"]
TYPES = ["Consumer", "Classic", "Share"]
REBALANCING = {"preparingrebalance", "completingrebalance", "assigning", "reconciling"}
MISSING = "-"


def parser() -> KafkaParser:
    p = KafkaParser(TOOL, "This tool helps to list all consumer groups, describe a consumer group, delete consumer "
                          "group info, or reset consumer group offsets.")
    bootstrap_option(p)
    p.add_argument("--group", action="append", default=[], help="The consumer group we wish to act on.")
    p.add_argument("--topic", action="append", default=[], help="The topic whose consumer group information should "
                   "be deleted or included in the reset offset process (topic or topic:0,1,2).")
    p.add_argument("--all-topics", action="store_true",
                   help="Consider all topics assigned to a group in the `reset-offsets` process.")
    p.add_argument("--list", action="store_true", help="List all consumer groups.")
    p.add_argument("--describe", action="store_true", help="Describe consumer group and list offset lag.")
    p.add_argument("--all-groups", action="store_true", help="Apply to all consumer groups.")
    p.add_argument("--delete", action="store_true", help="Pass in groups to delete topic partition offsets and "
                   "ownership information over the entire consumer group.")
    p.add_argument("--timeout", type=int, metavar="MS", help="The timeout for the admin requests (default 5000).")
    p.add_argument("--command-config", metavar="FILE", help="Property file containing configs to be passed to "
                   "Admin Client and Consumer.")
    p.add_argument("--reset-offsets", action="store_true", help="Reset offsets of consumer group.")
    p.add_argument("--delete-offsets", action="store_true", help="Delete offsets of consumer group.")
    p.add_argument("--dry-run", action="store_true", help="Only show results without executing changes.")
    p.add_argument("--execute", action="store_true", help="Execute operation.")
    p.add_argument("--export", action="store_true", help="Export operation execution to a CSV format.")
    p.add_argument("--to-offset", type=int, metavar="OFFSET", help="Reset offsets to a specific offset.")
    p.add_argument("--from-file", metavar="CSV", help="Reset offsets to values defined in CSV file.")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                   help="Reset offsets to offset from datetime.")
    p.add_argument("--by-duration", metavar="PnDTnHnMnS",
                   help="Reset offsets to offset by duration from current timestamp.")
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    p.add_argument("--shift-by", type=int, metavar="N",
                   help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.")
    p.add_argument("--members", action="store_true", help="Describe members of the group.")
    p.add_argument("--verbose", action="store_true", help="Provide additional information when describing.")
    p.add_argument("--offsets", action="store_true", help="Describe the group and its partitions' offset lag.")
    p.add_argument("--state", nargs="?", const="", metavar="STATES",
                   help="With --describe the state of the group; with --list the state of each group, or only "
                        "groups in these states (comma-separated).")
    p.add_argument("--type", nargs="?", const="", metavar="TYPES",
                   help="With --list the type of each group, or only groups of these types (comma-separated).")
    return p


def _check(p: KafkaParser, args: argparse.Namespace) -> str:
    """ConsumerGroupCommandOptions.checkArgs, then the one-action rule; returns the action."""
    if args.bootstrap_server is None:
        p.error('Missing required argument "[bootstrap-server]"')
    for option, allowed in [("members", "describe"), ("verbose", "describe"), ("offsets", "describe"),
                            ("type", "list")]:
        if given(args, option) and not getattr(args, allowed):
            p.error(f"Option(s) [{option}] are unavailable given other options on the command line")
    if args.state is not None and not (args.describe or args.list):
        p.error("Option(s) [state] are unavailable given other options on the command line")
    if args.describe:
        if not args.group and not args.all_groups:
            p.error("Option [describe] takes one of these options: [all-groups], [group]")
        if sum(given(args, x) for x in ("members", "offsets", "state")) > 1:
            p.error("Option [describe] takes at most one of these options: [members], [offsets], [state]")
        if args.state:
            p.error("Option [describe] does not take a value for [state]")
    if args.delete:
        if not args.group and not args.all_groups:
            p.error("Option [delete] takes one of these options: [all-groups], [group]")
        if args.topic:
            p.error("The consumer does not support topic-specific offset deletion from a consumer group.")
    if args.delete_offsets and (len(args.group) != 1 or not args.topic):
        p.error("Option [delete-offsets] takes the following options: [group], [topic]")
    if args.reset_offsets:
        if args.dry_run and args.execute:
            p.error("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not args.dry_run and not args.execute:
            print("WARN: No action will be performed as the --execute option is missing.In a future major release, "
                  "the default behavior of this command will be to prompt the user before executing the reset rather "
                  "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
                  "command and want to keep the current default behavior without prompting.", file=sys.stderr)
        if not args.group and not args.all_groups:
            p.error("Option [reset-offsets] takes one of these options: [all-groups], [group]")
        for scenario in SCENARIOS:
            p.check_invalid(args, scenario.replace("_", "-"), [s.replace("_", "-") for s in SCENARIOS])
    p.check_invalid(args, "group", ["all-groups"])
    p.check_invalid(args, "group", ["list"])
    p.check_invalid(args, "topic", ["list", "describe"])
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        p.error("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                "--delete-offsets")
    return actions[0]


def run(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    action = _check(p, args)
    from odradek.client import KafkaError

    try:
        config = admin_config(args, tool=TOOL)
        if args.timeout is not None:
            config["request_timeout_ms"] = args.timeout
        with open_admin(args, **{"client_id": "odradek-kafka-consumer-groups", **config}) as admin:
            return HANDLERS[action](admin, args, p)
    except UsageError as exc:
        p.error(str(exc))
    except (KafkaError, ToolError) as exc:
        text = exception_line(exc) if isinstance(exc, KafkaError) else str(exc)
        _error(f"Executing consumer group command failed due to {text}")
        return 1


class UsageError(Exception):
    """Kafka's IllegalArgumentException path: message and usage, exit 1."""


def _error(message: str) -> None:
    print(f"\nError: {message}", file=sys.stderr)


def _consumer_groups(admin) -> list:
    """listConsumerGroups: groups of the consumer protocol type (classic ones with an
    embedded consumer protocol, and KIP-848 consumer groups), not connect or other groups."""
    return [g for g in admin.list_groups() if g.protocol_type in ("consumer", "")]


def _group_ids(admin, args: argparse.Namespace) -> list[str]:
    return [g.group_id for g in _consumer_groups(admin)] if args.all_groups else list(dict.fromkeys(args.group))


# ---------------------------------------------------------------------- --list


def _parse_names(value: str, valid: list[str], what: str) -> list[str]:
    by_lower = {v.lower(): v for v in valid}
    out = []
    for item in value.split(","):
        name = by_lower.get(item.strip().lower())
        if name is None:
            raise UsageError(f"Invalid {what} list '{value}'. Valid {what}s are: {', '.join(valid)}")
        out.append(name)
    return out


def _list(admin, args: argparse.Namespace, p: KafkaParser) -> int:
    if args.state is None and args.type is None:
        for g in _consumer_groups(admin):
            print(g.group_id)
        return 0
    states = _parse_names(args.state, STATES, "state") if args.state else []
    types = _parse_names(args.type, TYPES, "type") if args.type else []
    listings = [g for g in admin.list_groups(types=[t.lower() for t in types] or None, states=states or None)
                if g.protocol_type in ("consumer", "")]
    width = max([15, *(len(g.group_id) for g in listings)]) + 10
    columns = [("GROUP", lambda g: g.group_id, width)]
    if args.type is not None:
        columns.append(("TYPE", lambda g: g.type.capitalize(), 20))
    if args.state is not None:
        columns.append(("STATE", lambda g: g.state or "Unknown", 20))
    print(" ".join(f"{name:<{w}}" for name, _, w in columns))
    for g in listings:
        print(" ".join(f"{get(g):<{w}}" for _, get, w in columns))
    return 0


# ---------------------------------------------------------------------- --describe


def _state_ok(admin, gid: str, d) -> bool:
    """ConsumerGroupService.shouldPrintMemberState, less the row count."""
    if d is None or not group_exists(admin, d):
        _error(f"Consumer group '{gid}' does not exist.")
        return False
    state = d.state.lower()
    if state in ("empty", "dead"):
        print(f"\nConsumer group '{gid}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{gid}' is rebalancing.", file=sys.stderr)
    return True


def _describe(admin, args: argparse.Namespace, p: KafkaParser) -> int:
    ids = sorted(_group_ids(admin, args))
    descs = admin.describe_groups(ids) if ids else {}
    failed = False
    for gid in ids:
        d = descs.get(gid)
        if not _state_ok(admin, gid, d):
            failed = True
        elif args.members:
            _print_members(gid, d, args.verbose)
        elif args.state is not None:
            _print_state(admin, gid, d)
        else:
            _print_offsets(admin, gid, d)
    return 1 if failed else 0


def _print_offsets(admin, gid: str, d) -> None:
    committed = {tp: om.offset for tp, om in admin.list_group_offsets(gid).items()}
    rows: list[tuple] = []  # (tp, consumer id, host, client id)
    assigned: set = set()
    for m in sorted((m for m in d.members if m.assignment), key=lambda m: -len(m.assignment)):
        for tp in sorted(m.assignment, key=lambda tp: tp.partition):
            rows.append((tp, m.member_id, m.host, m.client_id))
        assigned |= m.assignment
    rows += [(tp, MISSING, MISSING, MISSING) for tp in sorted(committed, key=lambda tp: tp.partition)
             if tp not in assigned]
    if not rows:
        return
    ends = _log_ends(admin, [tp for tp, *_ in rows])
    table = []
    for tp, member, host, client in rows:
        offset, end = committed.get(tp), ends.get(tp)
        lag = end - offset if offset is not None and offset != -1 and end is not None else None
        table.append([gid, tp.topic, tp.partition, offset, end, lag, member, host, client])
    cells = [[MISSING if v is None else str(v) for v in row] for row in table]
    g, t, c, h = (max(15, *(len(r[i]) for r in cells)) for i in (0, 1, 6, 7))
    fmt = f"\n%-{g}s %-{t}s %-10s %-15s %-15s %-15s %-{c}s %-{h}s %s"
    sys.stdout.write(fmt % ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                            "HOST", "CLIENT-ID"))
    for row in cells:
        sys.stdout.write(fmt % tuple(row))
    print()


def _log_ends(admin, tps: list) -> dict:
    """Log end offsets. A partition that no longer exists (its topic deleted since the
    group committed) is left out, and shows as '-' as in Kafka; it is not asked for,
    since the client would retry UNKNOWN_TOPIC_OR_PARTITION until it gives up."""
    from odradek.client.offsets import LATEST

    known = admin.describe_topics()
    live = [tp for tp in tps if tp.topic in known and tp.partition in known[tp.topic].partitions]
    return {tp: ot.offset for tp, ot in admin.list_offsets(dict.fromkeys(live, LATEST)).items()} if live else {}


def _assignment(tps) -> str:
    """`topic(0,1), other(2)`, or '-' (ConsumerGroupCommand's verbose --members)."""
    return MISSING if not tps else format_tps(tps).replace("),", "), ")


def _print_members(gid: str, d, verbose: bool) -> None:
    members = d.members
    g = max([15, *(len(gid) for _ in members)])
    c = max([15, *(len(m.member_id) for m in members)])
    i = max([17, *(len(m.instance_id or "") for m in members)])
    h = max([15, *(len(m.host) for m in members)])
    cl = max([15, *(len(m.client_id) for m in members)])
    with_instance = any(m.instance_id for m in members)
    if with_instance:
        fmt = f"%-{g}s %-{c}s %-{i}s %-{h}s %-{cl}s %-15s "
        header = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    else:
        fmt = f"%-{g}s %-{c}s %-{h}s %-{cl}s %-15s "
        header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    sys.stdout.write("\n" + fmt % header + ("ASSIGNMENT" if verbose else "") + "\n")
    for m in members:
        values = (gid, m.member_id, *((m.instance_id or "",) if with_instance else ()), m.host, m.client_id,
                  str(len(m.assignment)))
        sys.stdout.write(fmt % values + (_assignment(m.assignment) if verbose else "") + "\n")


def _print_state(admin, gid: str, d) -> None:
    coordinator = admin.find_coordinator(gid)
    where = f"{coordinator.host}:{coordinator.port}  ({coordinator.node_id})"
    fmt = f"\n%-{max(25, len(where))}s %-25s %-20s %-15s %s"
    # Kafka's format pads GROUP to the coordinator column's width.
    sys.stdout.write(fmt % ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"))
    sys.stdout.write(fmt % (gid, where, d.protocol or "", d.state, len(d.members)))
    print()


# ---------------------------------------------------------------------- --delete


def _delete(admin, args: argparse.Namespace, p: KafkaParser) -> int:
    from odradek.client import KafkaError

    ids = _group_ids(admin, args)
    deleted, failed = [], {}
    for gid in ids:
        try:
            admin.delete_groups([gid])
            deleted.append(gid)
        except KafkaError as exc:
            failed[gid] = exc
    if not failed:
        print(f"Deletion of requested consumer groups ('{', '.join(deleted)}') was successful.")
        return 0
    _error("Deletion of some consumer groups failed:")
    for gid, exc in failed.items():
        print(f"* Group '{gid}' could not be deleted due to: {exception_line(exc)}", file=sys.stderr)
    if deleted:
        print("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted))
    return 1


# ---------------------------------------------------------------------- --delete-offsets


def _partitions(admin, specs: list[str]) -> list:
    """Kafka's --topic for reset/delete offsets: `topic` (all its partitions) or
    `topic:0,1,2` (those, unchecked)."""
    from odradek.client import TopicPartition

    out = []
    for spec in specs:
        try:
            topic, parts = topic_spec(spec)
        except argparse.ArgumentTypeError:
            raise UsageError(f"Invalid topic arg '{spec}', expected topic name and partitions") from None
        if parts is None:
            out += admin.partitions_of([topic])
        else:
            out += [TopicPartition(topic, p) for p in parts]
    return list(dict.fromkeys(out))


_DELETE_OFFSETS_ERRORS = {
    "invalid_group_id": "'{g}' is not valid.",
    "group_id_not_found": "'{g}' does not exist.",
    "group_authorization_failed": "Access to '{g}' is not authorized.",
    "non_empty_group": "Deleting offsets of a consumer group '{g}' is forbidden if the group is not empty.",
    "group_subscribed_to_topic": "Encounter some partition level error, see the follow-up details:",
    "topic_authorization_failed": "Encounter some partition level error, see the follow-up details:",
    "unknown_topic_or_partition": "Encounter some partition level error, see the follow-up details:",
}


def _delete_offsets(admin, args: argparse.Namespace, p: KafkaParser) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError

    gid = args.group[0]
    tps = _partitions(admin, args.topic)
    top, results = admin.delete_group_offsets_results(gid, tps)
    if top == ErrorCode.none:
        # Java's all() fails with the first partition's error.
        top = next((code for code in results.values() if code != ErrorCode.none), ErrorCode.none)
    if top == ErrorCode.none:
        print(f"Request succeed for deleting offsets with topic {', '.join(args.topic)} group {gid}")
    else:
        _error(_DELETE_OFFSETS_ERRORS.get(top.name, "Encounter some unknown error: {e}").format(g=gid,
                                                                                                e=top.name.upper()))
    fmt = "\n%-30s %-15s %-15s"
    sys.stdout.write(fmt % ("TOPIC", "PARTITION", "STATUS"))
    for tp in sorted(tps, key=lambda tp: tp.topic + str(tp.partition)):
        code = results.get(tp, top)
        status = "Successful" if code == ErrorCode.none else f"Error: :{exception_line(KafkaError(code))}"
        sys.stdout.write(fmt % (tp.topic, tp.partition, status))
    print()
    return 0 if top == ErrorCode.none else 1


# ---------------------------------------------------------------------- --reset-offsets


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
                       re.IGNORECASE)


def duration(text: str) -> timedelta:
    """java.time.Duration.parse: PnDTnHnMn.nS."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.group(i) for i in range(2, 6)) or text.strip().upper().endswith("T"):
        raise UsageError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    secs = int(seconds or 0)
    frac = int((fraction or "0").ljust(9, "0")) / 1e9
    value = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                      seconds=secs + (-frac if secs < 0 or (seconds or "").startswith("-") else frac))
    return -value if sign == "-" else value


def _read_plan(path: str, groups: list[str]) -> dict[str, dict]:
    """--from-file: `topic,partition,offset` lines for one group, or
    `group,topic,partition,offset` (what --export writes)."""
    from odradek.client import TopicPartition

    try:
        lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as exc:
        raise ToolError(f"{path}: {exc.strerror or exc}") from None
    plan: dict[str, dict] = {}
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) == 3 and len(groups) == 1:
                group, (topic, part, off) = groups[0], fields
            elif len(fields) == 4:
                group, topic, part, off = fields
            else:
                raise ValueError
            plan.setdefault(group, {})[TopicPartition(topic, int(part))] = int(off)
        except ValueError:
            raise ToolError(f"{path}: cannot read reset plan line {line!r}") from None
    return plan


def _reset_offsets(admin, args: argparse.Namespace, p: KafkaParser) -> int:
    ids = _group_ids(admin, args)
    file_plan = _read_plan(args.from_file, ids) if args.from_file else None
    if not args.all_topics and not args.topic and file_plan is None:
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    if not any(given(args, s) for s in SCENARIOS):
        raise UsageError("Option '[reset-offsets]' requires one of the following scenarios: "
                         "[to-offset, to-datetime, by-duration, to-earliest, to-latest, to-current, shift-by, "
                         "from-file]")
    execute = args.execute and not args.dry_run
    descs = admin.describe_groups(ids) if ids else {}
    plans: dict[str, dict] = {}
    failed = False
    for gid in ids:
        state = descs[gid].state
        if state.lower() not in ("empty", "dead"):
            _error(f"Assignments can only be reset if the group '{gid}' is inactive, but the current state is "
                   f"{state}.")
            plans[gid], failed = {}, True
            continue
        plan = _plan(admin, args, gid, file_plan)
        if plan is None:
            failed = True
            continue
        if execute and plan:
            admin.alter_group_offsets(gid, plan)
        plans[gid] = plan
    if args.export:
        single = len(args.group) == 1
        print("".join(f"{'' if single else g + ','}{tp.topic},{tp.partition},{off}\n"
                      for g, plan in sorted(plans.items()) for tp, off in sorted(plan.items())))
    else:
        fmt = "\n%-30s %-30s %-10s %-15s"
        if plans:
            sys.stdout.write(fmt % ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
        for gid, plan in sorted(plans.items()):
            for tp, off in sorted(plan.items()):
                sys.stdout.write(fmt % (gid, tp.topic, tp.partition, off))
        print()
    return 1 if failed else 0


def _plan(admin, args: argparse.Namespace, gid: str, file_plan: dict | None) -> dict | None:
    """The new offsets for one group (ConsumerGroupService.prepareOffsetsToReset)."""
    if file_plan is not None:
        targets = file_plan.get(gid)
        if targets is None:
            _error(f"No reset plan for group {gid} found")
            return {}
        return admin.plan_offset_reset(gid, sorted(targets), to="offset", value=targets)
    if args.all_topics:
        tps = sorted(admin.list_group_offsets(gid))
    else:
        tps = sorted(_partitions(admin, args.topic))
    if not tps:
        return {}
    if args.to_offset is not None:
        return admin.plan_offset_reset(gid, tps, to="offset", value=args.to_offset)
    if args.to_earliest:
        return admin.plan_offset_reset(gid, tps, to="earliest")
    if args.to_latest:
        return admin.plan_offset_reset(gid, tps, to="latest")
    if args.shift_by is not None:
        committed = admin.list_group_offsets(gid, tps)
        missing = [tp for tp in tps if tp not in committed]
        if missing:
            raise UsageError(f"Cannot shift offset for partition {missing[0]} since there is no current committed "
                             "offset")
        return admin.plan_offset_reset(gid, tps, to="shift", value=args.shift_by)
    if args.to_current:
        # The committed offset, or the log end for a partition without one.
        return admin.plan_offset_reset(gid, tps, to="shift", value=0)
    if args.to_datetime is not None:
        try:
            ms = datetime_ms(args.to_datetime)
        except argparse.ArgumentTypeError as exc:
            raise ToolError(f"Error parsing timestamp: {exc}") from None
    else:
        ms = int((time.time() - duration(args.by_duration).total_seconds()) * 1000)
    return admin.plan_offset_reset(gid, tps, to="datetime", value=ms)


HANDLERS = {"list": _list, "describe": _describe, "delete": _delete, "reset_offsets": _reset_offsets,
            "delete_offsets": _delete_offsets}
