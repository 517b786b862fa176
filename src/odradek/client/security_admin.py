"""The admin client's ACL and SCRAM-user requests (CreateAcls, DescribeAcls, DeleteAcls,
DescribeUserScramCredentials, AlterUserScramCredentials), in their own module so admin.py
stays about topics, groups and configs. ACLs are security/acl.AclBinding values; a SCRAM
password is salted here (Hi(password, salt, iterations), as Kafka's admin client does) and
never sent.
"""

from __future__ import annotations

import os

from kio.schema.errors import ErrorCode

from ..security.acl import AclBinding, BindingFilter, Operation, PatternType, Permission, ResourceType
from ..security.scram import MIN_ITERATIONS, salted_password
from .errors import KafkaError

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_USER_SCRAM, ALTER_USER_SCRAM = 29, 30, 31, 50, 51
SCRAM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_NAMES = {v: k for k, v in SCRAM_CODES.items()}


def _raise(code, context: str, message: str | None) -> None:
    if code != ErrorCode.none:
        exc = KafkaError(code, f"{context}: {message}" if message else context)
        exc.server_message = message
        raise exc


async def _request(admin, api: int, body: dict):
    node, _ = await admin.client.any_connection()
    return await admin._admin_request(node, api, body)


def _filter_body(f: BindingFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.resource_name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission)}


def _binding(resource_type, name, pattern, a) -> AclBinding:
    return AclBinding(ResourceType(int(resource_type)), name, PatternType(int(pattern)), a.principal, a.host,
                      Operation(int(a.operation)), Permission(int(a.permission_type)))


async def create_acls(admin, bindings: list[AclBinding]) -> None:
    resp = await _request(admin, CREATE_ACLS, {"creations": [
        {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
         "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
         "operation": int(b.operation), "permission_type": int(b.permission)} for b in bindings]})
    for b, r in zip(bindings, resp.results):
        _raise(r.error_code, f"CreateAcls {b.principal} {b.operation.name} {b.resource_type.name}:{b.resource_name}",
               r.error_message)


async def describe_acls(admin, flt: BindingFilter | None = None) -> list[AclBinding]:
    resp = await _request(admin, DESCRIBE_ACLS, _filter_body(flt or BindingFilter()))
    _raise(resp.error_code, "DescribeAcls", resp.error_message)
    return [_binding(r.resource_type, r.resource_name, r.pattern_type, a) for r in resp.resources for a in r.acls]


async def delete_acls(admin, filters: list[BindingFilter]) -> list[list[AclBinding]]:
    resp = await _request(admin, DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
    out = []
    for r in resp.filter_results:
        _raise(r.error_code, "DeleteAcls", r.error_message)
        out.append([_binding(m.resource_type, m.resource_name, m.pattern_type, m) for m in r.matching_acls])
    return out


async def describe_user_scram_credentials(admin, users: list[str] | None = None) -> dict[str, list]:
    """user -> [(mechanism name, iterations)]."""
    resp = await _request(admin, DESCRIBE_USER_SCRAM, {"users": None if users is None else [{"name": u} for u in users]})
    _raise(resp.error_code, "DescribeUserScramCredentials", resp.error_message)
    out = {}
    for r in resp.results:
        _raise(r.error_code, f"DescribeUserScramCredentials {r.user}", r.error_message)
        out[r.user] = [(SCRAM_NAMES.get(int(c.mechanism), str(c.mechanism)), int(c.iterations))
                       for c in r.credential_infos]
    return out


async def alter_user_scram_credentials(admin, upsertions=(), deletions=()) -> None:
    """upsertions: (user, mechanism, password, iterations); deletions: (user, mechanism)."""
    ups = []
    for user, mechanism, password, iterations in upsertions:
        salt = os.urandom(32)
        ups.append({"name": user, "mechanism": SCRAM_CODES[mechanism], "iterations": iterations or MIN_ITERATIONS,
                    "salt": salt, "salted_password": salted_password(mechanism, password, salt,
                                                                      iterations or MIN_ITERATIONS)})
    dels = [{"name": user, "mechanism": SCRAM_CODES[mechanism]} for user, mechanism in deletions]
    resp = await _request(admin, ALTER_USER_SCRAM, {"deletions": dels, "upsertions": ups})
    for r in resp.results:
        _raise(r.error_code, f"AlterUserScramCredentials {r.user}", r.error_message)
