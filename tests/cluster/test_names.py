"""Tests for odradek.cluster.names: Kafka's topic name rules."""

from __future__ import annotations

import pytest

from odradek.cluster.names import (
    INTERNAL_TOPICS,
    MAX_NAME_LENGTH,
    InvalidTopicName,
    collision_key,
    validate_topic_name,
)


@pytest.mark.parametrize(
    "name",
    [
        "orders",
        "a",
        "A-Z_0.9",
        "my.topic",
        "my_topic",
        "-leading-dash",
        "...",
        ".hidden",
        "__consumer_offsets",
        "x" * 249,
    ],
)
def test_legal_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        None,
        ".",
        "..",
        "x" * 250,
        "has space",
        "slash/name",
        "back\\slash",
        "colon:name",
        "star*",
        "tab\tname",
        "newline\n",
        "trailing-newline\n",
        "ümlaut",
        "emoji-🙂",
        "full-width-ａ",
        "arabic-digit-٣",
    ],
)
def test_illegal_names(name):
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)


def test_length_limit_is_249():
    assert MAX_NAME_LENGTH == 249
    validate_topic_name("a" * 249)
    with pytest.raises(InvalidTopicName, match="250"):
        validate_topic_name("a" * 250)


def test_invalid_topic_name_is_a_value_error():
    assert issubclass(InvalidTopicName, ValueError)


def test_collision_key():
    assert collision_key("a.b") == collision_key("a_b") == "a_b"
    assert collision_key("a-b") != collision_key("a_b")
    assert collision_key("plain") == "plain"


def test_internal_topics():
    assert INTERNAL_TOPICS == {"__consumer_offsets", "__transaction_state"}
