"""The authorizer's decision and the ACL filters, rule by rule (Kafka's StandardAuthorizer)."""

from __future__ import annotations

import pytest

from odradek.security.acl import (
    AclBinding,
    Authorizer,
    BindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    invalid_binding,
    parse_super_users,
)

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
O = Operation
ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(rtype=T, name="orders", pattern=LIT, principal=ALICE, host="*", op=O.READ, perm=ALLOW):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def allowed(acls, op=O.READ, name="orders", rtype=T, principal=ALICE, host=HOST, **kw):
    return Authorizer(acls=acls, **kw).authorize(principal, host, op, rtype, name)


def test_no_acls_denies_by_default_and_allows_when_configured():
    assert not allowed([])
    assert allowed([], allow_if_no_acls=True)


def test_the_no_acl_default_only_applies_when_nobody_has_an_acl_on_the_resource():
    # Bob's ACL on the topic means the topic has ACLs: Alice is denied even with the default on.
    assert not allowed([acl(principal=BOB)], allow_if_no_acls=True)
    # An ACL on another topic leaves this one with none.
    assert allowed([acl(name="other", principal=BOB)], allow_if_no_acls=True)


def test_super_users_are_allowed_everything_even_against_a_deny():
    acls = [acl(op=O.ALL, perm=DENY)]
    assert allowed(acls, op=O.DELETE, super_users=parse_super_users("User:admin; User:alice"))
    assert not allowed(acls, op=O.DELETE, super_users={"User:admin"})


def test_literal_match_is_exact():
    assert allowed([acl(name="orders")])
    assert not allowed([acl(name="orders")], name="orders2")


def test_literal_star_is_the_wildcard_resource():
    assert allowed([acl(name="*")], name="anything")


def test_prefixed_matches_names_starting_with_it():
    acls = [acl(name="ord", pattern=PRE)]
    assert allowed(acls, name="orders") and allowed(acls, name="ord")
    assert not allowed(acls, name="xorders")


def test_prefixed_star_is_not_a_wildcard():
    assert not allowed([acl(name="*", pattern=PRE)], name="orders")
    assert allowed([acl(name="*", pattern=PRE)], name="*orders")


def test_resource_type_must_match():
    assert not allowed([acl(rtype=G)], rtype=T)


def test_principal_wildcard_user_star_matches_anyone():
    assert allowed([acl(principal="User:*")], principal=BOB)
    assert not allowed([acl(principal=BOB)], principal=ALICE)


def test_host_must_match_exactly_or_be_star():
    assert allowed([acl(host="127.0.0.1")])
    assert not allowed([acl(host="10.0.0.1")])


def test_deny_beats_allow():
    assert not allowed([acl(), acl(perm=DENY)])
    assert not allowed([acl(name="*"), acl(name="ord", pattern=PRE, perm=DENY)])


def test_all_operation_allows_and_denies_everything():
    assert allowed([acl(op=O.ALL)], op=O.ALTER_CONFIGS)
    assert not allowed([acl(op=O.WRITE), acl(op=O.ALL, perm=DENY)], op=O.WRITE)


@pytest.mark.parametrize("granted", [O.READ, O.WRITE, O.DELETE, O.ALTER, O.DESCRIBE])
def test_describe_is_implied_by_read_write_delete_alter(granted):
    assert allowed([acl(op=granted)], op=O.DESCRIBE)


@pytest.mark.parametrize("granted", [O.CREATE, O.DESCRIBE_CONFIGS, O.IDEMPOTENT_WRITE])
def test_describe_is_not_implied_by_others(granted):
    assert not allowed([acl(op=granted)], op=O.DESCRIBE)


def test_describe_configs_is_implied_by_alter_configs():
    assert allowed([acl(op=O.ALTER_CONFIGS)], op=O.DESCRIBE_CONFIGS)
    assert not allowed([acl(op=O.DESCRIBE_CONFIGS)], op=O.ALTER_CONFIGS)


def test_a_deny_does_not_imply():
    # DENY READ does not deny DESCRIBE, which the ALLOW WRITE implies.
    assert allowed([acl(op=O.WRITE), acl(op=O.READ, perm=DENY)], op=O.DESCRIBE)


def test_read_does_not_imply_write():
    assert not allowed([acl(op=O.READ)], op=O.WRITE)


def test_authorize_any_write_on_some_topic():
    a = Authorizer(acls=[acl(name="orders", op=O.WRITE)])
    assert a.authorize_any(ALICE, HOST, O.WRITE, T)
    assert not a.authorize_any(BOB, HOST, O.WRITE, T)
    # No implication here: READ gives no WRITE.
    assert not Authorizer(acls=[acl(op=O.READ)]).authorize_any(ALICE, HOST, O.WRITE, T)


def test_authorize_any_is_denied_by_a_covering_deny():
    assert not Authorizer(acls=[acl(op=O.WRITE), acl(op=O.WRITE, perm=DENY)]).authorize_any(ALICE, HOST, O.WRITE, T)
    assert not Authorizer(acls=[acl(op=O.WRITE), acl(name="or", pattern=PRE, op=O.WRITE, perm=DENY)]) \
        .authorize_any(ALICE, HOST, O.WRITE, T)
    assert not Authorizer(acls=[acl(op=O.WRITE), acl(name="*", op=O.WRITE, perm=DENY)]) \
        .authorize_any(ALICE, HOST, O.WRITE, T)
    # A deny of another literal leaves the allowed one.
    assert Authorizer(acls=[acl(op=O.WRITE), acl(name="x", op=O.WRITE, perm=DENY)]).authorize_any(ALICE, HOST,
                                                                                                   O.WRITE, T)


def test_authorize_any_with_the_no_acl_default_and_super_users():
    assert Authorizer(allow_if_no_acls=True).authorize_any(ALICE, HOST, O.WRITE, T)
    assert Authorizer(super_users={ALICE}).authorize_any(ALICE, HOST, O.WRITE, T)


def test_authorized_operations_of_a_resource():
    a = Authorizer(acls=[acl(rtype=G, name="g", op=O.READ)])
    assert a.operations(ALICE, HOST, G, "g", [O.READ, O.DESCRIBE, O.DELETE]) == [O.READ, O.DESCRIBE]


# --- filters (DescribeAcls / DeleteAcls) -----------------------------------------------------

STORED = [acl(), acl(name="ord", pattern=PRE), acl(name="*"), acl(rtype=G, name="g"), acl(principal=BOB, op=O.WRITE)]


@pytest.mark.parametrize("flt,expected", [
    (BindingFilter(), STORED),
    (BindingFilter(resource_type=G), [STORED[3]]),
    (BindingFilter(resource_type=T, resource_name="orders"), [STORED[0], STORED[4]]),
    (BindingFilter(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH), [STORED[0], STORED[1],
                                                                                              STORED[2], STORED[4]]),
    (BindingFilter(pattern_type=PRE), [STORED[1]]),
    (BindingFilter(resource_name="ord", pattern_type=LIT), []),
    (BindingFilter(principal=BOB), [STORED[4]]),
    (BindingFilter(principal="User:*"), []),
    (BindingFilter(operation=O.WRITE), [STORED[4]]),
    (BindingFilter(permission=DENY), []),
    (BindingFilter(host="10.0.0.1"), []),
], ids=["all", "type", "name-any-pattern", "match", "prefixed", "literal-name", "principal", "principal-exact",
        "operation", "permission", "host"])
def test_binding_filters(flt, expected):
    assert Authorizer(acls=STORED).acls(flt) == [b for b in expected]


@pytest.mark.parametrize("binding,why", [
    (acl(rtype=ResourceType.ANY), "resourceType"),
    (acl(pattern=PatternType.MATCH), "patternType"),
    (acl(op=O.ANY), "operation"),
    (acl(perm=Permission.ANY), "permissionType"),
    (acl(name=""), "empty"),
    (acl(rtype=C, name="my-cluster"), "kafka-cluster"),
    (acl(principal="alice"), "principal"),
])
def test_invalid_bindings_are_refused_with_kafkas_reasons(binding, why):
    assert why in invalid_binding(binding)


def test_a_valid_binding_passes():
    assert invalid_binding(acl(rtype=C, name="kafka-cluster", op=O.ALTER)) is None
