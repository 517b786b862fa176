"""`odradek topics`: kafka-topics.sh's create, list, describe, delete, and --alter --partitions.

Topic ids are shown as Kafka prints them (`Uuid.toString()`: URL-safe base64 of the
16 bytes, unpadded), so they can be compared with what Kafka's tools and logs show.
"""

from __future__ import annotations

import argparse
import base64
import uuid

from . import note, open_admin, positive, print_table


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("topics", help="create, list, describe and delete topics, add partitions")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    c = actions.add_parser("create", parents=[common], help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", type=positive, help="partition count (default: the broker's num.partitions)")
    c.add_argument("--replication-factor", type=positive,
                   help="replicas per partition (default: the broker's default.replication.factor)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", type=_config,
                   help="a topic config override; repeatable")
    c.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    c.set_defaults(func=_create)

    ls = actions.add_parser("list", parents=[common], help="list topic names, one per line")
    ls.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    ls.set_defaults(func=_list)

    d = actions.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISR, topic ids")
    d.add_argument("names", nargs="*", metavar="NAME", help="topics to describe (default: all)")
    d.add_argument("--exclude-internal", action="store_true", help="leave out internal topics (when listing all)")
    d.set_defaults(func=_describe)

    rm = actions.add_parser("delete", parents=[common], help="delete topics")
    rm.add_argument("names", nargs="+", metavar="NAME")
    rm.add_argument("--if-exists", action="store_true", help="succeed if a topic does not exist")
    rm.set_defaults(func=_delete)

    ap = actions.add_parser("add-partitions", parents=[common],
                            help="grow a topic to a total partition count (kafka-topics.sh --alter --partitions)")
    ap.add_argument("name")
    ap.add_argument("--partitions", type=positive, required=True, metavar="TOTAL",
                    help="the new total number of partitions")
    ap.set_defaults(func=_add_partitions)



def _config(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key.strip(), val.strip()


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString()."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def _create(args: argparse.Namespace) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError, NewTopic

    topic = NewTopic(args.name, args.partitions or -1, args.replication_factor or -1, dict(args.config))
    with open_admin(args) as admin:
        try:
            admin.create_topics([topic])
        except KafkaError as exc:
            if args.if_not_exists and exc.code == ErrorCode.topic_already_exists:
                return 0
            raise
    print(f"Created topic {args.name}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        names = admin.list_topics(internal=not args.exclude_internal)
    for name in names:
        print(name)
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        infos = admin.describe_topics(args.names or None)
    rows = []
    for name, info in infos.items():
        if not args.names and args.exclude_internal and info.internal:
            continue
        tid = kafka_uuid(info.topic_id)
        for p in sorted(info.partitions.values(), key=lambda p: p.partition):
            rows.append([name, tid, p.partition, p.leader if p.leader >= 0 else "none",
                         ",".join(map(str, p.replicas)), ",".join(map(str, p.isr))])
    print_table(["TOPIC", "TOPIC-ID", "PARTITION", "LEADER", "REPLICAS", "ISR"], rows)
    return 0


def _delete(args: argparse.Namespace) -> int:
    from kio.schema.errors import ErrorCode

    from odradek.client import KafkaError

    with open_admin(args) as admin:
        # One request per topic, so --if-exists can skip the missing ones and still
        # delete the rest (DeleteTopics reports per topic but the client raises on the first).
        for name in args.names:
            try:
                admin.delete_topics([name])
            except KafkaError as exc:
                if args.if_exists and exc.code == ErrorCode.unknown_topic_or_partition:
                    note(f"topic {name} does not exist")
                    continue
                raise
            print(f"Deleted topic {name}.")
    return 0


def _add_partitions(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.create_partitions({args.name: args.partitions})
    print(f"Topic {args.name} now has {args.partitions} partitions.")
    return 0
