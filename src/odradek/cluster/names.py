"""Topic name rules, as Kafka's `Topic.validate` applies them."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})


class InvalidTopicName(ValueError):
    pass


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise InvalidTopicName("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicName(f"topic name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicName(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


def collision_key(name: str) -> str:
    """Kafka forbids two topics whose names differ only by '.' versus '_' (metric names collide)."""
    return name.replace(".", "_")
