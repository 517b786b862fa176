"""DescribeUserScramCredentials v0 and AlterUserScramCredentials v0 (KIP-554): the SCRAM
credentials SASL listeners check, kept in the cluster metadata (the file store, or etcd
in a cluster) in Kafka's string form, never as passwords.

The client salts the password itself (Hi(password, salt, iterations)) and sends the salt
and salted password; the broker derives and stores StoredKey and ServerKey (Kafka's
ScramControlManager). Kafka's checks and codes, in its order: a user altered twice in
one request (any mechanisms) DUPLICATE_RESOURCE; an empty name UNACCEPTABLE_CREDENTIAL;
an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations outside 4096-16384
UNACCEPTABLE_CREDENTIAL; deleting what does not exist RESOURCE_NOT_FOUND. The valid
changes are written together, deletions before upsertions.
"""

from __future__ import annotations

from ...protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    DUPLICATE_RESOURCE,
    NONE,
    RESOURCE_NOT_FOUND,
    UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
)
from ...security.acl import Operation
from ...security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    credential_from_salted,
    credential_from_string,
    credential_to_string,
)
from ..registry import api

# org.apache.kafka.clients.admin.ScramMechanism codes
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}


def scram_credential(broker, user: str, mechanism: str):
    """The stored credential of `user` for `mechanism`, or None (the SASL listeners' lookup)."""
    text = broker.metadata.user_scram.get(user, {}).get(mechanism)
    return credential_from_string(text) if text else None


@api(50, "DescribeUserScramCredentials", 0, 0)
def describe_user_scram_credentials(broker, request):
    stored = broker.metadata.user_scram
    users = request.body.users
    if not broker.access(request).cluster(Operation.DESCRIBE):  # Kafka: DESCRIBE on the cluster
        return {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "results": [
            {"user": u.name, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
             "credential_infos": []} for u in users or ()]}
    names = sorted(stored) if not users else [u.name for u in users]
    results, seen = [], set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        if names.count(name) > 1:
            results.append({"user": name, "error_code": DUPLICATE_RESOURCE, "credential_infos": [],
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                             f"single request: {name}"})
        elif name not in stored:
            results.append({"user": name, "error_code": RESOURCE_NOT_FOUND, "credential_infos": [],
                            "error_message": f"Attempt to describe a user credential that does not exist: {name}"})
        else:
            infos = [{"mechanism": CODE_OF[m], "iterations": credential_from_string(text).iterations}
                     for m, text in sorted(stored[name].items()) if m in CODE_OF]
            results.append({"user": name, "error_code": NONE, "error_message": None, "credential_infos": infos})
    return {"throttle_time": 0, "error_code": NONE, "error_message": None, "results": results}


def _check(name: str, mechanism: int) -> tuple[object, str] | None:
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_CODES:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


@api(51, "AlterUserScramCredentials", 0, 0)
async def alter_user_scram_credentials(broker, request):
    body = request.body
    stored = broker.metadata.user_scram
    if not broker.access(request).cluster(Operation.ALTER):  # Kafka: ALTER on the cluster
        names = sorted({c.name for c in (*body.deletions, *body.upsertions)})
        return {"throttle_time": 0, "results": [{"user": n, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                                 "error_message": None} for n in names]}
    counts: dict[str, int] = {}
    for change in (*body.deletions, *body.upsertions):
        counts[change.name] = counts.get(change.name, 0) + 1
    errors: dict[str, tuple[object, str]] = {}
    users: dict[str, dict[str, str]] = {}
    done: list[str] = []
    for d in body.deletions:
        if counts[d.name] > 1:
            errors[d.name] = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
            continue
        problem = _check(d.name, d.mechanism)
        mechanism = MECHANISM_CODES.get(d.mechanism)
        if problem is None and mechanism not in stored.get(d.name, {}):
            problem = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if problem is not None:
            errors[d.name] = problem
            continue
        entry = dict(stored[d.name])
        del entry[mechanism]
        users[d.name] = entry
        done.append(d.name)
    for u in body.upsertions:
        if counts[u.name] > 1:
            errors[u.name] = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
            continue
        problem = _check(u.name, u.mechanism)
        if problem is None and u.iterations < MIN_ITERATIONS:
            problem = (UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        if problem is None and u.iterations > MAX_ITERATIONS:
            problem = (UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if problem is not None:
            errors[u.name] = problem
            continue
        mechanism = MECHANISM_CODES[u.mechanism]
        credential = credential_from_salted(mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations)
        users[u.name] = {**stored.get(u.name, {}), mechanism: credential_to_string(credential)}
        done.append(u.name)
    if users:
        await broker.metadata.set_configs(users=users)
    results = [{"user": name, "error_code": NONE, "error_message": None} for name in done]
    results += [{"user": name, "error_code": code, "error_message": message} for name, (code, message) in errors.items()]
    return {"throttle_time": 0, "results": results}
