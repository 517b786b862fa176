"""ACLs and the authorizer's decision, as Kafka's StandardAuthorizer makes it (KIP-11,
KIP-290 prefixed patterns).

Theory of operation: an `AclBinding` is a resource pattern (type, name, LITERAL or
PREFIXED) and an entry (principal, host, operation, ALLOW or DENY). `Authorizer` holds
the bindings and answers `authorize(principal, host, operation, resource type, name)`
for one concrete resource, pure and without I/O (the bindings come from the cluster
metadata; a change replaces them with `set_acls`):

1. a super user (`super.users`, exact "Type:name" strings) is allowed everything;
2. the bindings on a matching resource pattern are those LITERAL with the same name,
   LITERAL "*" (the wildcard resource), and PREFIXED with a prefix of the name;
3. of those, an entry applies when its principal is the caller's or "User:*", its host
   is the caller's address or "*", and its operation is the one asked, ALL, or (ALLOW
   entries only) one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE, and
   ALTER_CONFIGS implies DESCRIBE_CONFIGS;
4. any applicable DENY wins; else any applicable ALLOW allows;
5. when no binding at all is on a matching pattern (for anyone, any operation),
   `allow.everyone.if.no.acl.found` decides (Kafka's default: false); else denied.

`authorize_any(principal, host, operation, type)` is Kafka's authorizeByResourceType,
which InitProducerId's idempotent path asks ("WRITE on some topic"). `BindingFilter` is
what DescribeAcls and DeleteAcls match bindings with (ANY and MATCH patterns, null
fields matching anything).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

CLUSTER_NAME = "kafka-cluster"  # Kafka's Resource.CLUSTER_NAME
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(IntEnum):
    # org.apache.kafka.common.resource.ResourceType codes
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14



class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# StandardAuthorizerData: what an ALLOW entry of each operation also allows.
IMPLIED_BY = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies(self, principal: str, host: str, operation: Operation) -> bool:
        if self.principal != principal and self.principal != WILDCARD_PRINCIPAL:
            return False
        if self.host != host and self.host != WILDCARD_HOST:
            return False
        if self.operation is Operation.ALL or self.operation == operation:
            return True
        return self.permission is Permission.ALLOW and self.operation in IMPLIED_BY.get(operation, ())


def invalid_binding(b: AclBinding) -> str | None:
    """Why CreateAcls refuses the binding (Kafka's AclControlManager.validateNewAcl and
    AclApis: INVALID_REQUEST), or None."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resourceType " + b.resource_type.name
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + b.pattern_type.name
    if b.operation in (Operation.UNKNOWN, Operation.ANY):
        return "Invalid operation " + b.operation.name
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        return "Invalid permissionType " + b.permission.name
    if not b.resource_name:
        return "Resource name should not be empty"
    if b.resource_type is ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
    if ":" not in b.principal:
        return f"Could not parse principal from `{b.principal}`"
    return None


@dataclass(frozen=True)
class BindingFilter:
    """A DescribeAcls/DeleteAcls filter: None (a null string) and ANY match anything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        # Kafka's ResourcePatternFilter.matches and AccessControlEntryFilter.matches.
        if self.resource_type is not ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type is PatternType.MATCH:
                # Every binding that would apply to this concrete resource.
                if b.pattern_type is PatternType.LITERAL:
                    if b.resource_name not in (self.resource_name, WILDCARD_RESOURCE):
                        return False
                elif not self.resource_name.startswith(b.resource_name):
                    return False
            elif self.resource_name != b.resource_name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not Operation.ANY and self.operation != b.operation:
            return False
        return self.permission is Permission.ANY or self.permission == b.permission


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: "User:admin;User:broker" (Kafka splits on ";")."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class Authorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acls: bool = False,
                 acls: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acls = allow_if_no_acls
        self._by_type: dict[ResourceType, tuple[AclBinding, ...]] = {}
        self.set_acls(acls)

    def set_acls(self, acls: Iterable[AclBinding]) -> None:
        self._all = tuple(acls)  # in the order they were created
        by_type: dict[ResourceType, list[AclBinding]] = {}
        # Indexed as Kafka's StandardAuthorizerData is (a decision must not scan every ACL):
        # (type, literal name) -> bindings, "*" included as a name; (type, prefix) -> bindings.
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        for b in self._all:
            by_type.setdefault(b.resource_type, []).append(b)
            index = literal if b.pattern_type is PatternType.LITERAL else prefixed
            index.setdefault((b.resource_type, b.resource_name), []).append(b)
        self._by_type = {t: tuple(bs) for t, bs in by_type.items()}
        self._literal = {k: tuple(v) for k, v in literal.items()}
        self._prefixed = {k: tuple(v) for k, v in prefixed.items()}
        self._prefix_lengths = {t: sorted({len(n) for tt, n in prefixed if tt == t}) for t in by_type}

    def _on_resource(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers (type, name): the literal name, "*", and every
        prefix of the name that has PREFIXED bindings."""
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            out += self._literal.get((resource_type, WILDCARD_RESOURCE), ())
        for n in self._prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            out += self._prefixed.get((resource_type, name[:n]), ())
        return out

    def acls(self, flt: BindingFilter = BindingFilter()) -> list[AclBinding]:
        return [b for b in self._all if flt.matches(b)]

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = self._on_resource(resource_type, name)
        if not matching:
            return self.allow_if_no_acls  # no ACL names the resource at all
        allowed = False
        for b in matching:
            if b.applies(principal, host, operation):
                if b.permission is Permission.DENY:
                    return False  # DENY wins
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: whether `operation` is allowed on at
        least one resource of the type (no implied operations here, as in Kafka)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True  # super users, the no-ACL default, "*" and ALL bindings
        mine = [b for b in self._by_type.get(resource_type, ())
                if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD_HOST)
                and b.operation in (operation, Operation.ALL)]
        denied = [b for b in mine if b.permission is Permission.DENY]
        if any(b.pattern_type is PatternType.LITERAL and b.resource_name == WILDCARD_RESOURCE for b in denied):
            return False

        def is_denied(name: str, prefixed: bool) -> bool:
            for d in denied:
                if d.pattern_type is PatternType.PREFIXED and name.startswith(d.resource_name):
                    return True
                if not prefixed and d.pattern_type is PatternType.LITERAL and d.resource_name == name:
                    return True
            return False

        return any(b.permission is Permission.ALLOW and not is_denied(b.resource_name,
                                                                      b.pattern_type is PatternType.PREFIXED)
                   for b in mine)

    def operations(self, principal: str, host: str, resource_type: ResourceType, name: str,
                   supported: Iterable[int]) -> list[int]:
        """The supported operations allowed on one resource (KIP-430 authorized operations)."""
        return [op for op in supported if self.authorize(principal, host, Operation(op), resource_type, name)]


# --- how the cluster metadata keeps them -----------------------------------------------------
# One entry per resource pattern ("TOPIC:LITERAL:orders"), each holding its ACL entries as
# JSON keys ([principal, host, operation, permission]), as Kafka keeps one ACL set per pattern.


def pattern_key(b: AclBinding) -> str:
    return f"{b.resource_type.name}:{b.pattern_type.name}:{b.resource_name}"


def entry_key(b: AclBinding) -> str:
    return json.dumps([b.principal, b.host, b.operation.name, b.permission.name], separators=(",", ":"))


def bindings_from_store(stored: dict[str, dict[str, str]]) -> list[AclBinding]:
    out = []
    for pattern, entries in stored.items():
        rtype, ptype, name = pattern.split(":", 2)
        for entry in entries:
            principal, host, op, perm = json.loads(entry)
            out.append(AclBinding(ResourceType[rtype], name, PatternType[ptype], principal, host, Operation[op],
                                  Permission[perm]))
    return out


KNOWN_AUTHORIZERS = frozenset({"org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                               "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"})


def authorizer_from_properties(props) -> Authorizer | None:
    """Kafka's `authorizer.class.name` (unset: no authorizer, everything allowed, as
    Kafka without one), `super.users` and `allow.everyone.if.no.acl.found`."""
    name = (props.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in KNOWN_AUTHORIZERS:
        raise ValueError(f"authorizer.class.name {name}: odradek's authorizer is Kafka's StandardAuthorizer "
                         "(org.apache.kafka.metadata.authorizer.StandardAuthorizer)")
    allow = str(props.get("allow.everyone.if.no.acl.found", "false")).strip().lower() == "true"
    return Authorizer(parse_super_users(props.get("super.users", "")), allow)


class Access:
    """What one connection's principal may do: the handlers' questions to the authorizer
    (None: no authorizer configured, everything is allowed)."""

    __slots__ = ("authorizer", "principal", "host")

    def __init__(self, authorizer: Authorizer | None, principal: str, host: str) -> None:
        self.authorizer, self.principal, self.host = authorizer, principal, host

    @property
    def enforced(self) -> bool:
        return self.authorizer is not None

    def allows(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        a = self.authorizer
        return a is None or a.authorize(self.principal, self.host, operation, resource_type, name)

    def cluster(self, operation: Operation) -> bool:
        return self.allows(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def topic(self, operation: Operation, name: str) -> bool:
        return self.allows(operation, ResourceType.TOPIC, name)

    def group(self, operation: Operation, name: str) -> bool:
        return self.allows(operation, ResourceType.GROUP, name)

    def transactional_id(self, operation: Operation, name: str) -> bool:
        return self.allows(operation, ResourceType.TRANSACTIONAL_ID, name)

    def any_of_type(self, operation: Operation, resource_type: ResourceType) -> bool:
        a = self.authorizer
        return a is None or a.authorize_any(self.principal, self.host, operation, resource_type)

    def operations(self, resource_type: ResourceType, name: str, supported) -> list[int]:
        a = self.authorizer
        return list(supported) if a is None else a.operations(self.principal, self.host, resource_type, name, supported)


OPEN = Access(None, "User:ANONYMOUS", "")

# ConfigResource types (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) -> what Kafka
# authorizes them on: a topic or group by name; a broker (or the cluster default) as the cluster.
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_GROUP = 2, 4, 32


def config_resource_allowed(access: Access, config_type: int, name: str, operation: Operation) -> tuple[bool, str]:
    """(allowed, which of TOPIC/GROUP/CLUSTER refused) for DESCRIBE_CONFIGS or ALTER_CONFIGS."""
    if config_type == CONFIG_TOPIC:
        return access.topic(operation, name), "TOPIC"
    if config_type == CONFIG_GROUP:
        return access.group(operation, name), "GROUP"
    return access.cluster(operation), "CLUSTER"  # in-process callers and brokers without an authorizer


__all__ = ["CLUSTER_NAME", "OPEN", "config_resource_allowed", "Access", "authorizer_from_properties", "bindings_from_store", "entry_key",
           "pattern_key", "AclBinding", "Authorizer", "BindingFilter", "Operation", "PatternType", "Permission",
           "ResourceType", "invalid_binding", "parse_super_users"]
