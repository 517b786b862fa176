"""Kafka's ConfigDef, the part a broker needs: typed keys, parsing, validators, and the
string form DescribeConfigs reports.

Theory of operation: a `ConfigKey` names a config, its Kafka type (the ConfigDef.Type
that DescribeConfigs reports as config_type), its default and its validator. `parse`
turns what a client or a properties file gave (a string, or an already-typed value)
into odradek's value for that key, exactly where Kafka's ConfigDef.parseType and the
key's Validator would accept it, and raises ConfigError with Kafka's message otherwise.
`to_string` is ConfigDef.convertToString: what DescribeConfigs shows for a value.

odradek's values: BOOLEAN -> bool, INT/SHORT/LONG -> int, DOUBLE -> float, STRING ->
str, LIST -> the comma-joined str (Kafka's convertToString form, so code that asks
`"compact" in config["cleanup.policy"]` keeps working), CLASS/PASSWORD -> str.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# ConfigDef.Type names; DescribeConfigsResponse.ConfigType ids (KIP-226/KIP-336).
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")
CONFIG_TYPE_IDS = {None: 0, BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7, CLASS: 8,
                   PASSWORD: 9}

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
_BOUNDS = {INT: (INT_MIN, INT_MAX), SHORT: (-(1 << 15), (1 << 15) - 1), LONG: (LONG_MIN, LONG_MAX)}

_INTEGER = re.compile(r"[+-]?[0-9]+")  # java.lang.Long.parseLong: no spaces, no underscores
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_COMMA = re.compile(r"\s*,\s*")  # ConfigDef.COMMA_WITH_WHITESPACE


class ConfigError(ValueError):
    """A value Kafka's ConfigDef refuses; str() is Kafka's ConfigException message."""

    def __init__(self, name: str | None, value: Any = None, message: str | None = None) -> None:
        if name is None:  # ConfigException(String message)
            super().__init__(message or "")
        else:  # ConfigException(name, value, message)
            super().__init__(f"Invalid value {_java_str(value)} for configuration {name}"
                             + (f": {message}" if message else ""))


def _java_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_java_str(v) for v in value) + "]"
    return str(value)


def java_double(x: float) -> str:
    """java.lang.Double.toString: 0.5 -> "0.5", 1.0 -> "1.0", 1e-05 -> "1.0E-5"."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        s = repr(float(x))
        return s if "e" not in s else f"{x:.1f}"
    mantissa, _, exponent = f"{x!r}".replace("e", "E").partition("E")
    if not exponent:  # repr gave a plain number outside Java's plain range
        mantissa, exponent = f"{x:.16E}".split("E")
        mantissa = mantissa.rstrip("0")
    if "." not in mantissa:
        mantissa += ".0"
    elif mantissa.endswith("."):
        mantissa += "0"
    return f"{mantissa}E{int(exponent)}"


Validator = Callable[[str, Any], None]  # (name, parsed value) -> None or raise ConfigError


def at_least(minimum: float) -> Validator:
    """ConfigDef.Range.atLeast."""
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ConfigError(name, value, f"Value must be at least {_java_str(minimum)}")
    return check


def between(minimum: float, maximum: float) -> Validator:
    """ConfigDef.Range.between."""
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ConfigError(name, value, f"Value must be at least {_java_str(minimum)}")
        if value > maximum:
            raise ConfigError(name, value, f"Value must be no more than {_java_str(maximum)}")
    return check


def one_of(*valid: str) -> Validator:
    """ConfigDef.ValidString.in (case-sensitive)."""
    def check(name: str, value: Any) -> None:
        if value not in valid:
            raise ConfigError(name, value, "String must be one of: " + ", ".join(valid))
    return check


def each_one_of(*valid: str) -> Validator:
    """ConfigDef.ValidList.in: every element one of `valid` (an empty list passes)."""
    single = one_of(*valid)

    def check(name: str, value: Any) -> None:
        for item in value:
            single(name, item)
    return check


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str
    default: Any  # odradek's value (see the module docstring), None when Kafka has none
    validator: Validator | None = None
    doc: str = ""

    @property
    def config_type(self) -> int:
        return CONFIG_TYPE_IDS[self.type]

    def parse(self, value: Any, name: str | None = None) -> Any:
        """Kafka's ConfigDef.parseValue for this key; `name` replaces the key's name in
        error messages (a broker synonym parsed with its topic key's rules)."""
        return parse_value(name or self.name, value, self.type, self.validator)

    def to_string(self, value: Any) -> str | None:
        return to_string(value, self.type)


def parse_value(name: str, value: Any, type_: str, validator: Validator | None = None) -> Any:
    parsed = _parse_type(name, value, type_)
    if validator is not None:
        validator(name, (parsed.split(",") if parsed else []) if type_ == LIST else parsed)
    return parsed


def _parse_type(name: str, value: Any, type_: str) -> Any:
    """ConfigDef.parseType, returning odradek's value for the type."""
    if value is None:
        return None
    trimmed = value.strip() if isinstance(value, str) else None
    if type_ == BOOLEAN:
        if isinstance(value, bool):
            return value
        if trimmed is not None and trimmed.lower() in ("true", "false"):
            return trimmed.lower() == "true"
        raise ConfigError(name, value, "Expected value to be either true or false")
    if type_ in (STRING, PASSWORD, CLASS):
        if trimmed is None:
            raise ConfigError(name, value, f"Expected value to be a string, but it was a {type(value).__name__}")
        return trimmed
    if type_ in _BOUNDS:
        low, high = _BOUNDS[type_]
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        elif trimmed is not None and _INTEGER.fullmatch(trimmed):
            n = int(trimmed)
        else:
            raise ConfigError(name, value, f"Not a number of type {type_}")
        if not low <= n <= high:
            raise ConfigError(name, value, f"Not a number of type {type_}")
        return n
    if type_ == DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if trimmed is not None and _DOUBLE.fullmatch(trimmed):
            return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))
        raise ConfigError(name, value, f"Not a number of type {type_}")
    if type_ == LIST:
        if isinstance(value, (list, tuple)):
            items = [str(v).strip() for v in value]
        elif trimmed is not None:
            items = _COMMA.split(trimmed) if trimmed else []
        else:
            raise ConfigError(name, value, "Expected a comma separated list.")
        return ",".join(items)
    raise AssertionError(f"unknown config type {type_}")


def to_string(value: Any, type_: str | None) -> str | None:
    """ConfigDef.convertToString."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if type_ == DOUBLE or isinstance(value, float):
        return java_double(float(value))
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def list_items(value: str) -> list[str]:
    """The elements of a LIST value in odradek's form."""
    return [v for v in value.split(",") if v] if value else []


def scala_set(names: Iterable[str]) -> str:
    """How Kafka's Scala code prints a Set of names in its error messages."""
    return "Set(" + ", ".join(sorted(names)) + ")"
