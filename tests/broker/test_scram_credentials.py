"""AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554) against the broker's
cluster metadata, and what a SASL listener then accepts."""

from __future__ import annotations

from odradek.security.authentication import Authenticator, SaslConfig
from odradek.security.scram import ScramClient, salted_password
from tests.broker.conftest import InProcess
from tests.wire import parse_response, request_frame

SHA256, SHA512 = 1, 2


def call(inproc, api_key, body):
    return parse_response(api_key, 0, inproc.handle(request_frame(api_key, 0, body)))[1]


def upsert(name, mechanism=SHA256, iterations=4096, password="pw", salt=b"0123456789abcdef"):
    mech = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-256")
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": salted_password(mech, password, salt, max(iterations, 1))}


def alter(inproc, deletions=(), upsertions=()):
    resp = call(inproc, 51, {"deletions": list(deletions), "upsertions": list(upsertions)})
    return {r.user: (int(r.error_code), r.error_message) for r in resp.results}


def describe(inproc, users=None):
    resp = call(inproc, 50, {"users": None if users is None else [{"name": u} for u in users]})
    return {r.user: (int(r.error_code), sorted((int(c.mechanism), c.iterations) for c in r.credential_infos))
            for r in resp.results}


def authenticates(broker, user, password, mechanism="SCRAM-SHA-256") -> bool:
    auth = Authenticator(SaslConfig((mechanism,), scram=broker.scram_credential))
    auth.admit(17, 0)
    auth.handshake(1, mechanism)
    client = ScramClient(mechanism, user, password)
    first = auth.token(client.first_message(), 0)
    if first.error_code:
        return False
    return auth.token(client.final_message(first.auth_bytes), 0).error_code == 0 and auth.authenticated


def test_upsert_describe_authenticate_and_delete(inproc):
    assert alter(inproc, upsertions=[upsert("alice", iterations=8192, password="alice-pw")]) == {"alice": (0, None)}
    assert alter(inproc, upsertions=[upsert("bob", SHA512, password="bob-pw")]) == {"bob": (0, None)}
    assert describe(inproc) == {"alice": (0, [(SHA256, 8192)]), "bob": (0, [(SHA512, 4096)])}
    assert authenticates(inproc.broker, "alice", "alice-pw")
    assert not authenticates(inproc.broker, "alice", "wrong")
    assert authenticates(inproc.broker, "bob", "bob-pw", "SCRAM-SHA-512")
    # Never the password: only Kafka's credential string is kept.
    stored = inproc.broker.metadata.user_scram["alice"]["SCRAM-SHA-256"]
    assert stored.startswith("salt=") and "alice-pw" not in stored
    assert alter(inproc, deletions=[{"name": "alice", "mechanism": SHA256}]) == {"alice": (0, None)}
    assert not authenticates(inproc.broker, "alice", "alice-pw")
    assert describe(inproc, ["alice"]) == {"alice": (91, [])}  # RESOURCE_NOT_FOUND


def test_kafkas_refusals(inproc):
    alter(inproc, upsertions=[upsert("carol")])
    got = alter(inproc, deletions=[{"name": "dave", "mechanism": SHA256}],
                upsertions=[upsert(""), upsert("erin", mechanism=7), upsert("frank", iterations=100),
                            upsert("gina", iterations=20000), upsert("carol", SHA512),
                            upsert("carol", SHA256)])
    assert got["dave"][0] == 91  # RESOURCE_NOT_FOUND: nothing to delete
    assert got[""][0] == 93  # UNACCEPTABLE_CREDENTIAL: empty name
    assert got["erin"][0] == 33  # UNSUPPORTED_SASL_MECHANISM
    assert got["frank"] == (93, "Too few iterations")
    assert got["gina"] == (93, "Too many iterations")
    assert got["carol"][0] == 92  # DUPLICATE_RESOURCE: one user twice in a request
    assert describe(inproc, ["carol", "carol"]) == {"carol": (92, [])}
    assert describe(inproc, ["carol"]) == {"carol": (0, [(SHA256, 4096)])}  # unchanged


def test_credentials_survive_a_restart(tmp_path):
    first = InProcess(tmp_path / "data")
    try:
        alter(first, upsertions=[upsert("alice", password="alice-pw")])
    finally:
        first.close()
    again = InProcess(tmp_path / "data")
    try:
        assert describe(again) == {"alice": (0, [(SHA256, 4096)])}
        assert authenticates(again.broker, "alice", "alice-pw")
    finally:
        again.close()
