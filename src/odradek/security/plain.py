"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer checks it, and the JAAS-style
configuration its users come from.

PLAIN: the client's one message is `authzid NUL authcid NUL password` (librdkafka sends
an empty authzid, kafka-python and aiokafka the user name again; both are accepted).
Kafka's checks, in order, each failing with a message the client is told as it is:
exactly three tokens, a user name, a password, the password of `user_<name>`, and an
authzid, when given, equal to the user name.

JAAS (Kafka's JaasConfig, a java.io.StreamTokenizer grammar): one or more
`<LoginModule class> <required|requisite|sufficient|optional> (key=value)* ;`. A value
is a word (letters, digits, `.`, `-`, `_`, `$`, starting with a letter, `_` or `$`) or a
string in double or single quotes with Java escapes; `//` and `/* */` comments are
skipped; a later duplicate key wins. The broker reads it from
`listener.name.<listener>.plain.sasl.jaas.config` (or `plain.sasl.jaas.config`), as Kafka
does; each `user_<name>="<password>"` option is a user.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")


class PlainError(Exception):
    """PLAIN refused; the text is what the client is told (Kafka's SaslAuthenticationException)."""


class JaasError(ValueError):
    pass


@dataclass
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _is_word_start(c: str) -> bool:
    return c.isalpha() or c in "_$" or "\u00a0" <= c <= "\u00ff"


def _is_word_char(c: str) -> bool:
    return _is_word_start(c) or c.isdigit() or c in ".-"


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


def _tokens(text: str):
    """StreamTokenizer's tokens: ("word", s), ("str", s), ("num", s) or ("char", c)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return
            i = end + 2
        elif c in "\"'":
            i += 1
            out = []
            while i < n and text[i] != c:
                if text[i] == "\n":
                    raise JaasError("Unterminated string in JAAS config")
                if text[i] == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":
                        j = i + 1
                        while j < n and j < i + 4 and text[j] in "01234567":
                            j += 1
                        out.append(chr(int(text[i + 1:j], 8)))
                        i = j
                        continue
                    out.append(_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                out.append(text[i])
                i += 1
            if i >= n:
                raise JaasError("Unterminated string in JAAS config")
            i += 1
            yield "str", "".join(out)
        elif _is_word_start(c):
            j = i
            while j < n and _is_word_char(text[j]):
                j += 1
            yield "word", text[i:j]
            i = j
        elif c.isdigit() or (c in "-." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n and (text[j].isdigit() or text[j] == "."):
                j += 1
            yield "num", text[i:j]
            i = j
        else:
            yield "char", c
            i += 1


def parse_jaas(text: str) -> list[LoginModule]:
    tokens = list(_tokens(text))
    modules: list[LoginModule] = []
    i = 0

    def take():
        nonlocal i
        if i >= len(tokens):
            return None, None
        i += 1
        return tokens[i - 1]

    while i < len(tokens):
        kind, name = take()
        if kind not in ("word", "str"):
            raise JaasError("Login module not specified in JAAS config")
        kind, flag = take()
        if kind != "word" or flag.lower() not in _FLAGS:
            raise JaasError(f"Invalid login module control flag '{flag}' in JAAS config")
        module = LoginModule(name, flag.lower())
        while True:
            kind, key = take()
            if kind == "char" and key == ";":
                break
            if kind not in ("word", "str"):
                raise JaasError("JAAS config entry not terminated by semi-colon")
            eq = take()
            if eq != ("char", "="):
                raise JaasError(f"Value not specified for key '{key}' in JAAS config")
            kind, value = take()
            if kind not in ("word", "str"):
                raise JaasError(f"Value not specified for key '{key}' in JAAS config")
            module.options[key] = value
        modules.append(module)
    if not modules:
        raise JaasError("Login module not specified in JAAS config")
    return modules


def plain_users(jaas: str) -> dict[str, str]:
    """The users (name -> password) of a PlainLoginModule entry (Kafka wants exactly one module)."""
    modules = parse_jaas(jaas)
    if len(modules) != 1:
        raise JaasError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return {k[5:]: v for k, v in modules[0].options.items() if k.startswith("user_")}


def authenticate_plain(message: bytes, users: dict[str, str]) -> str:
    """The user a PLAIN message authenticates, or PlainError with Kafka's words."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\x00", 3)
    if len(tokens) != 3:
        raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authzid, username, password = tokens
    if not username:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    expected = users.get(username)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        raise PlainError("Authentication failed: Invalid username or password")
    if authzid and authzid != username:
        raise PlainError("Authentication failed: Client requested an authorization id that is different from "
                         "username")
    return username


def plain_message(username: str, password: str) -> bytes:
    """What odradek's client sends (an empty authzid, as librdkafka)."""
    return f"\x00{username}\x00{password}".encode()


__all__ = ["PLAIN_LOGIN_MODULE", "JaasError", "LoginModule", "PlainError", "authenticate_plain", "parse_jaas",
           "plain_message", "plain_users"]
