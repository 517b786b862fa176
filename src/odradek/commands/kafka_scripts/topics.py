"""kafka-topics.sh: Kafka's TopicCommand options and output on odradek's admin client.

--topic is a regular expression (TopicFilter) for --list, --describe, --alter and
--delete, as in Kafka; --alter and --delete fail unless something matches (or
--if-exists). --describe prints Kafka's tab-separated layout: a line per topic (with
the configs whose source is not DEFAULT_CONFIG, which includes static broker
settings, as Kafka prints them) and one per partition. Errors print
"Error while executing topic command : MESSAGE" and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid

from .. import open_admin
from .common import (
    KafkaParser,
    ToolError,
    TopicFilter,
    admin_config,
    bootstrap_option,
    error_text,
)

TOOL = "kafka-topics.sh"
ACTIONS = ("create", "alter", "list", "describe", "delete")
REPORTS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
           "at_min_isr_partitions")
ALTER_CONFIGS_HINT = " (To alter topic configurations, the kafka-configs tool can be used.)"


def parser() -> KafkaParser:
    p = KafkaParser(TOOL, "Create, delete, describe, or change a topic.")
    bootstrap_option(p)
    p.add_argument("--command-config", metavar="FILE", help="Property file containing configs to be passed to "
                   "Admin Client.")
    for action, text in [("list", "List all available topics."), ("create", "Create a new topic."),
                         ("delete", "Delete a topic."),
                         ("alter", "Alter the number of partitions and replica assignment." + ALTER_CONFIGS_HINT),
                         ("describe", "List details for the given topics.")]:
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--topic", help="The topic to create, alter, describe or delete. It also accepts a regular "
                   "expression, except for --create option.")
    p.add_argument("--topic-id", help="The topic-id to describe.")
    p.add_argument("--config", action="append", metavar="name=value",
                   help="A topic configuration override for the topic being created; repeatable.")
    p.add_argument("--delete-config", action="append", metavar="name", help="No longer supported (Kafka 4.0).")
    p.add_argument("--partitions", type=int, metavar="N", help="The number of partitions for the topic being "
                   "created or altered.")
    p.add_argument("--replication-factor", type=int, metavar="N",
                   help="The replication factor for each partition in the topic being created.")
    p.add_argument("--replica-assignment", metavar="B1:B2,B1:B2,...",
                   help="A list of manual partition-to-broker assignments for the topic being created or altered.")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="If set when describing topics, only show under-replicated partitions.")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose leader is not available.")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is less than the "
                        "configured minimum.")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is equal to the "
                        "configured minimum.")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="If set when describing topics, only show topics that have overridden configs.")
    p.add_argument("--if-exists", action="store_true", help="If set when altering or deleting or describing topics, "
                   "the action will only execute if the topic exists.")
    p.add_argument("--if-not-exists", action="store_true", help="If set when creating topics, the action will only "
                   "execute if the topic does not already exist.")
    p.add_argument("--exclude-internal", action="store_true", help="Exclude internal topics when listing or "
                   "describing topics.")
    p.add_argument("--partition-size-limit-per-response", type=int, metavar="N",
                   help="Accepted for compatibility; odradek describes every partition in one response.")
    return p


# The actions each option may be combined with (TopicCommandOptions.checkInvalidArgs).
ALLOWED = {
    "config": {"alter", "create"},
    "partitions": {"alter", "create"},
    "replication-factor": {"create"},
    "replica-assignment": {"alter", "create"},
    "if-exists": {"alter", "delete", "describe"},
    "if-not-exists": {"create"},
    "exclude-internal": {"list", "describe"},
    "topics-with-overrides": {"describe"},
    **{r.replace("_", "-"): {"describe"} for r in REPORTS},
}


def _check(p: KafkaParser, args: argparse.Namespace) -> str:
    """TopicCommandOptions.checkArgs; returns the action."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        p.error("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = actions[0]
    if args.delete_config:
        print("delete-config option is no longer supported and deprecated since version 4.0. The config will be "
              "fully removed in future releases.", file=sys.stderr)
    if args.bootstrap_server is None:
        p.error("--bootstrap-server must be specified")
    if action == "describe" and args.if_exists and not (args.topic or args.topic_id):
        p.error("--topic or --topic-id is required to describe a topic")
    if action not in ("list", "describe"):
        p.require(args, "topic")
    if action == "alter":
        if args.config:
            p.error('Option combination "[alter],[config]" can\'t be used with option "[alter]"'
                    + ALTER_CONFIGS_HINT)
        p.require(args, "partitions")
    for option, allowed in ALLOWED.items():
        if action not in allowed:
            p.check_invalid(args, option, [action])
    if action == "create":
        p.check_invalid(args, "replica-assignment", ["partitions", "replication-factor"])
    for report in REPORTS:
        p.check_invalid(args, report.replace("_", "-"), ["topics-with-overrides"])
    return action


def run(argv: list[str]) -> int:
    from odradek.client import KafkaError

    p = parser()
    args = p.parse_args(argv)
    action = _check(p, args)
    try:
        config = admin_config(args, tool=TOOL)
        with open_admin(args, **{"client_id": "odradek-kafka-topics", **config}) as admin:
            HANDLERS[action](admin, args)
    except (KafkaError, ToolError) as exc:
        print(f"Error while executing topic command : {error_text(exc)}", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------- actions


def _replica_assignment(text: str) -> dict[int, list[int]]:
    """TopicCommand.parseReplicaAssignment: `b1:b2,b1:b2,...`, one group per partition."""
    out: dict[int, list[int]] = {}
    for i, group in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in group.split(":")]
        except ValueError:
            raise ToolError(f'For input string: "{group}"') from None
        dups = sorted({b for b in brokers if brokers.count(b) > 1})
        if dups:
            raise ToolError(f"Partition replica lists may not contain duplicate entries: {','.join(map(str, dups))}")
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise ToolError(f"Partition {i} has different replication factor: {brokers}")
    return out


def _topic_configs(items: list[str] | None) -> dict[str, str]:
    """TopicCommand.parseTopicConfigsToBeAdded: each `key=val` splits on `\\s*=\\s*` into
    exactly two parts (Java's split drops trailing empty strings, so `key=` fails too)."""
    import re

    out: dict[str, str] = {}
    for item in items or ():
        parts = re.split(r"\s*=\s*", item)
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) != 2:
            raise ToolError('requirement failed: Invalid topic config: all configs to be added must be in the '
                            'format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


def _create(admin, args: argparse.Namespace) -> None:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError, NewTopic

    if "." in args.topic or "_" in args.topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    configs = _topic_configs(args.config)
    if args.replica_assignment:
        topic = NewTopic(args.topic, configs=configs, assignments=_replica_assignment(args.replica_assignment))
    else:
        topic = NewTopic(args.topic, args.partitions or -1, args.replication_factor or -1, configs)
    try:
        admin.create_topics([topic])
    except KafkaError as exc:
        if args.if_not_exists and exc.code == ErrorCode.topic_already_exists:
            return
        raise
    print(f"Created topic {args.topic}.")


def _topics(admin, args: argparse.Namespace) -> list[str]:
    """TopicService.getTopics: every topic (internal ones too unless --exclude-internal),
    sorted, filtered by the --topic regex."""
    infos = admin.describe_topics()
    if args.topic is None:
        return [t for t, info in infos.items() if not (info.internal and args.exclude_internal)]
    include = TopicFilter(args.topic)
    return [t for t, info in infos.items() if include.allows(t, info.internal, args.exclude_internal)]


def _ensure_exists(found: list, requested: str | None, args: argparse.Namespace, what: str = "Topic") -> None:
    if requested and not args.if_exists and not found:
        raise ToolError(f"{what} '{requested}' does not exist as expected")


def _list(admin, args: argparse.Namespace) -> None:
    print("\n".join(_topics(admin, args)))


def _alter(admin, args: argparse.Namespace) -> None:
    topics = _topics(admin, args)
    _ensure_exists(topics, args.topic, args)
    if not topics:
        return
    assignments = None
    if args.replica_assignment:
        # Kafka skips the groups of the partitions that exist already.
        plan = _replica_assignment(args.replica_assignment)
        infos = admin.describe_topics(topics)
        assignments = {t: [ids for p, ids in sorted(plan.items()) if p >= len(infos[t].partitions)] for t in topics}
    admin.create_partitions({t: args.partitions for t in topics}, assignments=assignments)


def _delete(admin, args: argparse.Namespace) -> None:
    topics = _topics(admin, args)
    _ensure_exists(topics, args.topic, args)
    if topics:
        admin.delete_topics(topics)


def parse_topic_id(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString: URL-safe base64 of the 16 bytes, unpadded."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ToolError(f"Unable to parse UUID from {text!r}")
    return uuid.UUID(bytes=raw)


def _describe(admin, args: argparse.Namespace) -> None:
    from odradek.client.admin import ConfigResourceType

    from ..topics import kafka_uuid

    infos = admin.describe_topics()
    topic_id = parse_topic_id(args.topic_id) if args.topic_id else None
    if topic_id is not None and topic_id.int != 0:
        # Kafka: a topic id wins over --topic.
        topics = [t for t, info in infos.items() if info.topic_id == topic_id
                  and not (info.internal and args.exclude_internal)]
        _ensure_exists(topics, args.topic_id, args, "TopicId")
    else:
        topics = _topics(admin, args)
        _ensure_exists(topics, args.topic, args)
    if not topics:
        return
    configs = admin.describe_configs([(ConfigResourceType.TOPIC, t) for t in topics])
    live = {b.node_id for b in admin.describe_cluster()[2]}
    reports = [r for r in REPORTS if getattr(args, r)]
    for name in topics:
        info = infos[name]
        entries = configs[(ConfigResourceType.TOPIC, name)]
        overrides = [e for e in entries if not e.is_default]
        partitions = sorted(info.partitions.values(), key=lambda p: p.partition)
        if not reports and (not args.topics_with_overrides or overrides):
            line = f"Topic: {name}"
            if info.topic_id.int != 0:
                line += f"\tTopicId: {kafka_uuid(info.topic_id)}"
            line += f"\tPartitionCount: {len(partitions)}"
            line += f"\tReplicationFactor: {len(partitions[0].replicas) if partitions else 0}"
            line += "\tConfigs: " + ",".join(f"{e.name}={_java(e.value)}" for e in overrides)
            print(line)
        if args.topics_with_overrides:
            continue
        min_isr = next((int(e.value) for e in entries if e.name == "min.insync.replicas" and e.value), 1)
        for p in partitions:
            if reports and not any(_report(r, p, live, min_isr) for r in reports):
                continue
            print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
                  f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
                  # Kafka 3.7+ prints these; odradek has no eligible leader replicas (KIP-966).
                  "\tElr: N/A\tLastKnownElr: N/A")


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _report(name: str, p, live: set[int], min_isr: int) -> bool:
    """TopicCommand.PartitionDescription's filters."""
    has_leader = p.leader >= 0
    if name == "under_replicated_partitions":
        return len(p.replicas) - len(p.isr) > 0
    if name == "unavailable_partitions":
        return not has_leader or p.leader not in live
    if name == "under_min_isr_partitions":
        return not has_leader or len(p.isr) < min_isr
    return len(p.isr) == min_isr  # at_min_isr_partitions


HANDLERS = {"create": _create, "alter": _alter, "list": _list, "describe": _describe, "delete": _delete}
