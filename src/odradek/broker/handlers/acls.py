"""DescribeAcls, CreateAcls and DeleteAcls v1-3 (KIP-11, KIP-140, KIP-290 prefixed
patterns): the ACLs the authorizer enforces, kept in the cluster metadata.

Kafka's rules (AclApis, AclControlManager): without an authorizer every answer is
SECURITY_DISABLED; DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls
ALTER on it (else CLUSTER_AUTHORIZATION_FAILED); a binding CreateAcls cannot take
(security/acl.invalid_binding) is INVALID_REQUEST; creating one that exists succeeds.
Filters (ANY, MATCH, null fields) select as security/acl.BindingFilter does.
"""

from __future__ import annotations

from ...protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    NONE,
    SECURITY_DISABLED,
)
from ...security.acl import (
    AclBinding,
    BindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    entry_key,
    invalid_binding,
    pattern_key,
)
from ..registry import api


def _enum(cls, value: int):
    try:
        return cls(int(value))
    except ValueError:
        return cls(0)  # UNKNOWN, as Kafka's fromCode


def _filter(f) -> BindingFilter:
    return BindingFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                         _enum(PatternType, f.pattern_type_filter),
                         f.principal_filter, f.host_filter, _enum(Operation, f.operation),
                         _enum(Permission, f.permission_type))


@api(29, "DescribeAcls", 1, 3)
def describe_acls(broker, request):
    def answer(code, message=None, resources=()):
        return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": list(resources)}

    if broker.authorizer is None:
        return answer(SECURITY_DISABLED, "No Authorizer is configured on the broker")
    access = broker.access(request)
    if not access.cluster(Operation.DESCRIBE):
        return answer(CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    by_resource: dict[tuple, list] = {}
    for b in broker.authorizer.acls(_filter(request.body)):
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": int(b.operation),
             "permission_type": int(b.permission)})
    return answer(NONE, None, [{"resource_type": int(t), "resource_name": n, "pattern_type": int(p), "acls": acls}
                               for (t, n, p), acls in by_resource.items()])


@api(30, "CreateAcls", 1, 3)
async def create_acls(broker, request):
    creations = request.body.creations
    if broker.authorizer is None:
        return {"throttle_time": 0, "results": [{"error_code": SECURITY_DISABLED, "error_message":
                                                 "No Authorizer is configured on the broker"} for _ in creations]}
    if not broker.access(request).cluster(Operation.ALTER):
        return {"throttle_time": 0, "results": [{"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message":
                                                 "Cluster authorization failed."} for _ in creations]}
    results, changes = [], {}
    stored = broker.metadata.acls
    for c in creations:
        b = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                       _enum(PatternType, c.resource_pattern_type), c.principal, c.host,
                       _enum(Operation, c.operation), _enum(Permission, c.permission_type))
        why = invalid_binding(b)
        if why is not None:
            results.append({"error_code": INVALID_REQUEST, "error_message": why})
            continue
        key = pattern_key(b)
        entries = changes.setdefault(key, dict(stored.get(key, {})))
        entries[entry_key(b)] = "1"
        results.append({"error_code": NONE, "error_message": None})
    if changes:
        await broker.metadata.set_configs(acls=changes)
    return {"throttle_time": 0, "results": results}


@api(31, "DeleteAcls", 1, 3)
async def delete_acls(broker, request):
    filters = request.body.filters
    access = broker.access(request)  # also brings the authorizer's index up to date
    if broker.authorizer is None or not access.cluster(Operation.ALTER):
        code, message = (SECURITY_DISABLED, "No Authorizer is configured on the broker") \
            if broker.authorizer is None else (CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        return {"throttle_time": 0, "filter_results": [{"error_code": code, "error_message": message,
                                                        "matching_acls": []} for _ in filters]}
    stored = broker.metadata.acls
    changes: dict[str, dict[str, str]] = {}
    results = []
    for f in filters:
        matched = broker.authorizer.acls(_filter(f))
        for b in matched:
            entries = changes.setdefault(pattern_key(b), dict(stored.get(pattern_key(b), {})))
            entries.pop(entry_key(b), None)
        results.append({"error_code": NONE, "error_message": None, "matching_acls": [
            {"error_code": NONE, "error_message": None, "resource_type": int(b.resource_type),
             "resource_name": b.resource_name, "pattern_type": int(b.pattern_type), "principal": b.principal,
             "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)} for b in matched]})
    if changes:
        await broker.metadata.set_configs(acls=changes)
    return {"throttle_time": 0, "filter_results": results}
