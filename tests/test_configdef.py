"""Tests for odradek.configdef: Kafka's ConfigDef parsing, validators, messages, strings."""

from __future__ import annotations

import pytest

from odradek.configdef import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    STRING,
    ConfigError,
    ConfigKey,
    at_least,
    between,
    each_one_of,
    java_double,
    one_of,
    parse_value,
    scala_set,
    to_string,
)


@pytest.mark.parametrize("raw, type_, parsed", [
    (" true ", BOOLEAN, True), ("FALSE", BOOLEAN, False), (" 7 ", INT, 7), ("+7", LONG, 7), ("-9", LONG, -9),
    (str((1 << 63) - 1), LONG, (1 << 63) - 1), ("0.5", DOUBLE, 0.5), ("1e-2", DOUBLE, 0.01), ("3", DOUBLE, 3.0),
    ("a, b ,c", LIST, "a,b,c"), ("", LIST, ""), (" x ", STRING, "x"), (5, LONG, 5), (True, BOOLEAN, True),
])
def test_parse_like_configdef_parse_type(raw, type_, parsed):
    assert parse_value("k", raw, type_) == parsed


@pytest.mark.parametrize("raw, type_, message", [
    ("yes", BOOLEAN, "Invalid value yes for configuration k: Expected value to be either true or false"),
    ("1.0", INT, "Invalid value 1.0 for configuration k: Not a number of type INT"),
    ("2147483648", INT, "Invalid value 2147483648 for configuration k: Not a number of type INT"),
    ("1_000", LONG, "Invalid value 1_000 for configuration k: Not a number of type LONG"),
    ("", LONG, "Invalid value  for configuration k: Not a number of type LONG"),
    ("half", DOUBLE, "Invalid value half for configuration k: Not a number of type DOUBLE"),
])
def test_bad_values_get_kafkas_messages(raw, type_, message):
    with pytest.raises(ConfigError) as e:
        parse_value("k", raw, type_)
    assert str(e.value) == message


def test_validators():
    with pytest.raises(ConfigError, match="Value must be at least 1$"):
        parse_value("k", "0", LONG, at_least(1))
    with pytest.raises(ConfigError, match="Value must be no more than 1$"):
        parse_value("k", "1.5", DOUBLE, between(0, 1))
    with pytest.raises(ConfigError, match="String must be one of: a, b$"):
        parse_value("k", "c", STRING, one_of("a", "b"))
    with pytest.raises(ConfigError, match="Invalid value c for configuration k"):
        parse_value("k", "a,c", LIST, each_one_of("a", "b"))
    assert parse_value("k", "", LIST, each_one_of("a")) == ""  # ValidList: an empty list passes


def test_to_string_like_convert_to_string():
    assert to_string(True, BOOLEAN) == "true"
    assert to_string(0.5, DOUBLE) == "0.5"
    assert to_string(1.0, DOUBLE) == "1.0"
    assert to_string(5, LONG) == "5"
    assert to_string(None, LONG) is None
    assert [java_double(x) for x in (1e-5, 1.5e10, 0.001, 1234567.0)] == ["1.0E-5", "1.5E10", "0.001", "1234567.0"]


def test_config_key_and_scala_set():
    key = ConfigKey("x.ms", LONG, 5, at_least(0))
    assert key.parse("7") == 7 and key.config_type == 5
    with pytest.raises(ConfigError, match="configuration log.x.ms"):
        key.parse("-1", name="log.x.ms")
    assert scala_set(["b", "a"]) == "Set(a, b)"
