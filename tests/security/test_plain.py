"""SASL/PLAIN and the JAAS configuration of its users (Kafka's PlainSaslServer and JaasConfig)."""

from __future__ import annotations

import pytest

from odradek.security.plain import (
    JaasError,
    PlainError,
    authenticate_plain,
    parse_jaas,
    plain_message,
    plain_users,
)

KAFKA_DOCS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def test_the_kafka_documentation_example():
    modules = parse_jaas(KAFKA_DOCS)
    assert [(m.name, m.flag) for m in modules] == [("org.apache.kafka.common.security.plain.PlainLoginModule",
                                                     "required")]
    assert plain_users(KAFKA_DOCS) == USERS


def test_quoting_escapes_comments_and_unquoted_words():
    text = """org.x.Mod REQUIRED // a comment
      user_bob='p;w=,x' /* another */ user_carol=admin-secret.v2 "user_dave@corp"="a\\"b\\\\c\\101";"""
    assert plain_users(text) == {"bob": "p;w=,x", "carol": "admin-secret.v2", "dave@corp": 'a"b\\cA'}


def test_a_later_duplicate_key_wins():
    assert plain_users('M required user_a="1" user_a="2";') == {"a": "2"}


@pytest.mark.parametrize("text,why", [
    ("", "Login module not specified"),
    ("M required user_a=\"x\"", "not terminated by semi-colon"),
    ("M always user_a=\"x\";", "control flag"),
    ("M required user_a=123;", "Value not specified"),
    ("M required user_a=-x;", "Value not specified"),
    ("M required user_a;", "Value not specified"),
    ("M required user_a=\"x\n\";", "Unterminated"),
])
def test_jaas_errors_as_kafka_words_them(text, why):
    with pytest.raises(JaasError, match=why):
        plain_users(text)


def test_plain_users_wants_one_module():
    with pytest.raises(JaasError, match="should be 1 module"):
        plain_users('A required; B required;')


@pytest.mark.parametrize("message", [b"\x00alice\x00alice-secret", b"alice\x00alice\x00alice-secret"])
def test_both_authzid_forms_are_accepted(message):
    # librdkafka sends an empty authzid, kafka-python and aiokafka the user name.
    assert authenticate_plain(message, USERS) == "alice"


@pytest.mark.parametrize("message,why", [
    (b"alice\x00alice-secret", "expected 3 tokens, got 2"),
    (b"\x00alice\x00alice\x00secret", "expected 3 tokens, got 4"),
    (b"\x00\x00pw", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"\x00alice\x00wrong", "Invalid username or password"),
    (b"\x00mallory\x00alice-secret", "Invalid username or password"),
    (b"admin\x00alice\x00alice-secret", "authorization id that is different"),
    (b"\xff\x00alice\x00x", "not UTF-8"),
])
def test_plain_failures_say_what_kafka_says(message, why):
    with pytest.raises(PlainError, match=why):
        authenticate_plain(message, USERS)


def test_our_client_message_round_trips():
    assert authenticate_plain(plain_message("admin", "admin-secret"), USERS) == "admin"
