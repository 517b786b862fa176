"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them (KIP-84).

Theory of operation: a credential is what the cluster stores for a user and mechanism:
the salt, the iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"), never the password (Kafka's
ScramCredential). `ScramServer` is a sans-I/O exchange for one authentication: two
client messages in, two server messages out, then `username` is authenticated. Its
nonce comes from an injected function, so a test or the simulator can fix it.

Kafka's ScramSaslServer, which real clients are written against:
- the client-first message carries the gs2 header "n,," (channel binding is not
  supported: "y" and "p" are refused), an optional authzid that must equal the user
  name, the user name with "=2C"/"=3D" escapes, the client nonce and optional
  extensions (Kafka reads "tokenauth" for delegation tokens, which odradek has not);
- an unknown user fails at once with "Authentication failed: Invalid user credentials",
  as Kafka does (no fake salt is sent);
- the client-final message's nonce must end with the combined nonce (librdkafka 2.0
  sends its own nonce before it), and its channel binding is not compared, as Kafka
  compares neither more strictly; a wrong proof fails with the same text as an unknown user;
- the server-final message is "v=" + the server signature.

Iterations: Kafka's ScramMechanism accepts 4096 to 16384.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka ScramMechanism.maxIterations
INVALID_CREDENTIALS = "Authentication failed: Invalid user credentials"


class ScramError(Exception):
    """The exchange failed; the text is what the client is told (SaslAuthenticate's error message)."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unsupported SCRAM mechanism {mechanism!r}") from None


def _hmac(algo: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, algo).digest()


def salted_password(mechanism: str, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802 (PBKDF2 with HMAC-H). Kafka's clients do
    not SASLprep the password either: its UTF-8 bytes are used as they are."""
    pw = password.encode() if isinstance(password, str) else password
    return hashlib.pbkdf2_hmac(_hash(mechanism), pw, salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """What the broker stores from what AlterUserScramCredentials carries (salt and salted password)."""
    algo = _hash(mechanism)
    client_key = _hmac(algo, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(algo, client_key).digest(), _hmac(algo, salted, b"Server Key"),
                           iterations)


def new_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def credential_to_string(c: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString: how the cluster metadata keeps one."""
    return (f"salt={_b64(c.salt)},stored_key={_b64(c.stored_key)},server_key={_b64(c.server_key)},"
            f"iterations={c.iterations}")


def credential_from_string(text: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in text.split(","))
    return ScramCredential(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                           base64.b64decode(fields["server_key"]), int(fields["iterations"]))


def escape_name(name: str) -> str:
    # RFC 5802 "saslname": "," and "=" are sent as "=2C" and "=3D".
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(name: str) -> str:
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("Invalid SCRAM user name")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _attributes(text: str) -> dict[str, str]:
    attrs = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"Invalid SCRAM message attribute {part[:16]!r}")
        attrs.setdefault(part[0], part[2:])
    return attrs


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError("Invalid base64 in SCRAM message") from None


def _nonce() -> str:
    return _b64(os.urandom(24)).rstrip("=").replace("+", "-").replace("/", "_")


@dataclass
class ClientFirst:
    gs2_header: str
    authzid: str
    username: str
    nonce: str
    bare: str
    extensions: dict[str, str]


def parse_client_first(message: bytes) -> ClientFirst:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("Invalid SCRAM client first message") from None
    parts = text.split(",", 2)
    if len(parts) != 3:
        raise ScramError("Invalid SCRAM client first message")
    cbind, authz, bare = parts
    if cbind != "n":
        # Kafka's ScramMessages: "y" or "p" (channel binding) are not supported.
        raise ScramError("Invalid SCRAM client first message: channel binding is not supported")
    if authz and not authz.startswith("a="):
        raise ScramError("Invalid SCRAM client first message")
    # Kafka's ScramMessages.ClientFirstMessage: n=<saslname>,r=<nonce>[,<key>=<value>]* (extensions).
    fields = bare.split(",")
    if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r=") or len(fields[1]) < 3 \
            or any("=" not in f or f.startswith("=") for f in fields[2:]):
        raise ScramError("Invalid SCRAM client first message")
    extensions = dict(f.split("=", 1) for f in fields[2:])
    return ClientFirst(f"{cbind},{authz},", unescape_name(authz[2:]) if authz else "",
                       unescape_name(fields[0][2:]), fields[1][2:], bare, extensions)


class ScramServer:
    """One SCRAM exchange, server side: `step(client message) -> server message` twice."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None],
                 nonce: Callable[[], str] = _nonce) -> None:
        self.mechanism = mechanism
        self.algo = _hash(mechanism)
        self.lookup = lookup  # (user, mechanism) -> the stored credential or None
        self.nonce = nonce
        self.username: str | None = None  # set once the exchange succeeded
        self.complete = False
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None

    def step(self, message: bytes) -> bytes:
        if self.complete:
            raise ScramError("SCRAM exchange already complete")
        if self._first is None:
            return self._on_client_first(message)
        return self._on_client_final(message)

    def _on_client_first(self, message: bytes) -> bytes:
        first = parse_client_first(message)
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise ScramError("Authentication failed: delegation tokens are not supported")
        if first.authzid and first.authzid != first.username:
            # Kafka's ScramSaslServer: an authorization id must be the authenticated user.
            raise ScramError("Authentication failed: Client requested an authorization id that is different "
                             "from username")
        credential = self.lookup(first.username, self.mechanism)
        if credential is None:
            raise ScramError(INVALID_CREDENTIALS)
        self._first, self._credential = first, credential
        combined = first.nonce + self.nonce()
        self._server_first = f"r={combined},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def _on_client_final(self, message: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM client final message") from None
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramError("Invalid SCRAM client final message")
        attrs = _attributes(without_proof)
        combined = self._server_first[2:self._server_first.index(",")]
        # Kafka's ScramSaslServer only checks that the nonce ends with the combined one, and
        # librdkafka before 2.2 sends its own nonce twice ("r=" + client nonce + combined):
        # the proof covers what was sent, so such a client authenticates against Kafka.
        # The channel binding ("c=") is not compared either, as in Kafka.
        if not attrs.get("r", "").endswith(combined):
            raise ScramError("Invalid client nonce in the final client message.")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        proof = _unb64(proof_text)
        signature = _hmac(self.algo, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError(INVALID_CREDENTIALS)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), credential.stored_key):
            raise ScramError(INVALID_CREDENTIALS)
        self.complete = True
        self.username = first.username
        return f"v={_b64(_hmac(self.algo, credential.server_key, auth_message))}".encode()


class ScramClient:
    """One SCRAM exchange, client side (odradek's own client)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: Callable[[], str] = _nonce) -> None:
        self.mechanism = mechanism
        self.algo = _hash(mechanism)
        self.password = password
        self._bare = f"n={escape_name(username)},r={nonce()}"
        self._auth_message = b""
        self._salted = b""

    def first_message(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = _attributes(text)
        if "e" in attrs:
            raise ScramError(attrs["e"])
        nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", "")), int(attrs.get("i", "0"))
        if not nonce.startswith(self._bare.split(",r=", 1)[1]) or iterations <= 0:
            raise ScramError("Invalid SCRAM server first message")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._bare},{text},{without_proof}".encode()
        self._salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = _hmac(self.algo, self._salted, b"Client Key")
        signature = _hmac(self.algo, hashlib.new(self.algo, client_key).digest(), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode("utf-8", "replace"))
        if "e" in attrs:
            raise ScramError(attrs["e"])
        expected = _hmac(self.algo, _hmac(self.algo, self._salted, b"Server Key"), self._auth_message)
        if not hmac.compare_digest(_unb64(attrs.get("v", "")), expected):
            raise ScramError("Invalid SCRAM server signature")


__all__ = ["MECHANISMS", "credential_from_string", "credential_to_string", "ScramClient", "ScramCredential", "ScramError", "ScramServer", "credential_from_salted",
           "new_credential", "salted_password"]
