"""Every API under an authorizer, table-driven (security/rules.py): a principal without ACLs
gets Kafka's refusal, one granted the rows' ACLs is served, and targeted cases for the
rows that refuse part of a request. In process: the broker's frame path with a session
whose principal is fixed (as an SSL or SASL listener would fix it)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from odradek.broker.broker import run_now
from odradek.broker.registry import APIS, supported_versions
from odradek.security.acl import (
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    entry_key,
    pattern_key,
)
from odradek.security.authentication import Authenticator, Session
from odradek.security.rules import RULES
from tests.broker.test_versions import _bodies, _error_codes, _make_group
from tests.wire import parse_response, request_frame

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
AUTH_CODES = {29, 30, 31, 53}
FILTERED = {16, 60, 66}  # answered without refusals, with less in them

# API key -> the code a principal with no ACLs gets first (test_versions' requests).
REFUSED = {0: 29, 1: 29, 2: 29, 3: 29, 8: 30, 9: 30, 10: 30, 11: 30, 12: 30, 13: 30, 14: 30, 15: 30, 19: 29,
           20: 29, 21: 29, 22: 31, 23: 29, 24: 53, 25: 53, 26: 53, 27: 31, 28: 53, 29: 31, 30: 31, 31: 31, 32: 29,
           33: 29, 37: 29, 42: 30, 44: 30, 47: 30, 50: 31, 51: 31, 65: 53, 68: 30, 69: 30}


def grant(broker, *bindings: AclBinding) -> None:
    changes: dict[str, dict[str, str]] = {}
    for b in bindings:
        changes.setdefault(pattern_key(b), dict(broker.metadata.acls.get(pattern_key(b), {})))[entry_key(b)] = "1"
    run_now(broker.metadata.set_configs(acls=changes))


def allow(principal: str, rtype: ResourceType, name: str, op: Operation = Operation.ALL,
          pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, Permission.ALLOW)


def session(principal: str) -> Session:
    return Session("SASL_PLAINTEXT", Authenticator(None, principal=principal))


def send(inproc, api_key: int, version: int, body: dict, principal: str):
    frame = request_frame(api_key, version, body, correlation_id=9)
    raw = inproc.loop.run_until_complete(
        asyncio.wait_for(inproc.broker.handle_frame(frame[4:], "/127.0.0.1", session(principal)), 10))
    return parse_response(api_key, version, raw)[1]


@pytest.fixture
def secured(inproc):
    inproc.broker.authorizer = Authorizer(super_users={"User:admin"})
    inproc.broker.create_topic("vt", 1, {})
    return inproc


CASES = [(k, supported_versions()[k][1]) for k in sorted(REFUSED) + sorted(FILTERED)]


def _request(broker, api_key, version):
    member = _make_group(broker, api_key)
    if api_key == 20:
        broker.create_topic(f"created-{version}", 1, {})
    return _bodies(broker.metadata.get("vt").topic_id, version, member)[api_key]


@pytest.mark.parametrize("api_key,version", CASES, ids=[APIS[k].name for k, _ in CASES])
def test_without_acls_kafkas_refusal(secured, api_key, version):
    body = _request(secured.broker, api_key, version)
    if api_key == 65:
        # A refused id answers start time -1 as Kafka does, which kio's reader refuses to
        # parse (a negative timestamp): read the handler's answer instead.
        from odradek.broker.handlers.transactions import _describe_one
        from odradek.security.acl import Access

        refused = _describe_one(secured.broker, "vtx", Access(secured.broker.authorizer, "User:bob", "127.0.0.1"))
        assert refused["error_code"] == REFUSED[65]
        return
    resp = send(secured, api_key, version, body, "User:bob")
    codes = set(_error_codes(resp))
    if api_key in FILTERED:
        assert not codes & AUTH_CODES
        if api_key == 16:
            assert resp.groups == ()
        if api_key == 66:
            assert resp.transaction_states == ()
        return
    assert REFUSED[api_key] in codes, (APIS[api_key].name, codes)


@pytest.mark.parametrize("api_key,version", CASES, ids=[APIS[k].name for k, _ in CASES])
def test_with_the_rows_acls_served(secured, api_key, version):
    bob = "User:bob"
    name = APIS[api_key].name
    grants = []
    for rule in RULES[name]:
        rname = "kafka-cluster" if rule.resource is C else "*"
        grants.append(allow(bob, rule.resource, rname, rule.operation))
    # Alternatives and the rows' companions (the requests also touch these resources).
    grants += [allow(bob, T, "*", Operation.ALL), allow(bob, G, "*", Operation.ALL), allow(bob, X, "*", Operation.ALL),
               allow(bob, C, "kafka-cluster", Operation.ALL)]
    grant(secured.broker, *grants)
    body = _request(secured.broker, api_key, version)
    resp = send(secured, api_key, version, body, bob)
    assert not set(_error_codes(resp)) & AUTH_CODES, (name, _error_codes(resp))


def test_super_users_need_no_acls(secured):
    resp = send(secured, 3, 12, _request(secured.broker, 3, 12), "User:admin")
    assert resp.topics[0].error_code == 0


def test_every_api_served_has_a_row():
    assert {a.name for a in APIS.values()} <= set(RULES), set(a.name for a in APIS.values()) - set(RULES)


# --- rows that refuse part of a request -----------------------------------------------------------


def _metadata(secured, principal, topics=None, include_ops=False):
    body = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": True, "include_cluster_authorized_operations": include_ops,
            "include_topic_authorized_operations": include_ops}
    return send(secured, 3, 10, body, principal)


def test_metadata_shows_only_describable_topics(secured):
    secured.broker.create_topic("secret", 1, {})
    grant(secured.broker, allow("User:bob", T, "vt", Operation.READ))
    resp = _metadata(secured, "User:bob")
    assert [t.name for t in resp.topics] == ["vt"]
    # Asked by name, a topic it may not describe is refused whether or not it exists.
    named = {t.name: int(t.error_code) for t in _metadata(secured, "User:bob", ["secret", "nothing-here"]).topics}
    assert named == {"secret": 29, "nothing-here": 29}
    assert not secured.broker.metadata.get("nothing-here")  # not auto-created either


def test_metadata_authorized_operations_are_the_principals(secured):
    grant(secured.broker, allow("User:bob", T, "vt", Operation.READ))
    resp = _metadata(secured, "User:bob", ["vt"], include_ops=True)
    ops = resp.topics[0].topic_authorized_operations
    assert ops == (1 << Operation.READ) | (1 << Operation.DESCRIBE)
    assert resp.cluster_authorized_operations == 0  # no DESCRIBE on the cluster


def test_auto_creation_needs_create(secured):
    grant(secured.broker, allow("User:bob", T, "auto-", Operation.DESCRIBE, PatternType.PREFIXED))
    assert int(_metadata(secured, "User:bob", ["auto-1"]).topics[0].error_code) == 3  # not created
    grant(secured.broker, allow("User:bob", T, "auto-", Operation.CREATE, PatternType.PREFIXED))
    _metadata(secured, "User:bob", ["auto-2"])
    assert secured.broker.metadata.get("auto-2") is not None


def test_a_denied_commit_leaves_offsets_untouched(secured):
    broker = secured.broker
    body = _request(broker, 8, 9)
    grant(broker, allow("User:alice", G, "vg", Operation.READ), allow("User:alice", T, "vt", Operation.READ))
    body["topics"][0]["partitions"][0]["committed_offset"] = 5
    assert _error_codes(send(secured, 8, 9, body, "User:alice")) == [0]
    body["topics"][0]["partitions"][0]["committed_offset"] = 99
    assert _error_codes(send(secured, 8, 9, body, "User:bob")) == [30]  # no READ on the group
    grant(broker, allow("User:bob", G, "vg", Operation.READ))
    assert _error_codes(send(secured, 8, 9, body, "User:bob")) == [29]  # no READ on the topic
    fetched = send(secured, 9, 7, {"group_id": "vg", "topics": [{"name": "vt", "partition_indexes": [0]}],
                                   "require_stable": False}, "User:alice")
    assert fetched.topics[0].partitions[0].committed_offset == 5


def test_a_kip848_member_without_read_on_its_group_is_refused(secured):
    body = _bodies(uuid.UUID(int=0), 1)[68]
    grant(secured.broker, allow("User:bob", T, "vt", Operation.DESCRIBE))
    resp = send(secured, 68, 1, body, "User:bob")
    assert int(resp.error_code) == 30 and resp.member_epoch == 0
    assert not secured.broker.coordinator.runtime.shards[
        secured.broker.coordinator.partition_for("vg")].consumer_groups.get("vg")


def test_a_kip848_member_naming_an_undescribable_topic_is_refused(secured):
    secured.broker.create_topic("secret", 1, {})
    body = {**_bodies(uuid.UUID(int=0), 1)[68], "subscribed_topic_names": ["vt", "secret"]}
    grant(secured.broker, allow("User:bob", G, "vg", Operation.READ), allow("User:bob", T, "vt", Operation.READ))
    assert int(send(secured, 68, 1, body, "User:bob").error_code) == 29


def test_txn_offset_commit_rows_in_order(secured):
    broker = secured.broker
    body = _request(broker, 28, 4)
    grant(broker, allow("User:bob", X, "vtx", Operation.WRITE))
    assert _error_codes(send(secured, 28, 4, body, "User:bob")) == [30]
    grant(broker, allow("User:bob", G, "vg", Operation.READ))
    assert _error_codes(send(secured, 28, 4, body, "User:bob")) == [29]


def test_add_partitions_to_txn_refuses_the_topic_and_attempts_nothing(secured):
    broker = secured.broker
    broker.create_topic("secret", 1, {})
    body = _request(broker, 24, 3)
    body["v3_and_below_topics"].append({"name": "secret", "partitions": [0]})
    grant(broker, allow("User:bob", X, "vtx", Operation.WRITE), allow("User:bob", T, "vt", Operation.WRITE))
    resp = send(secured, 24, 3, body, "User:bob")
    by_topic = {t.name: int(t.results_by_partition[0].partition_error_code) for t in resp.results_by_topic_v3_and_below}
    assert by_topic == {"vt": 55, "secret": 29}


def test_describe_groups_per_group_and_list_groups_filter(secured):
    broker = secured.broker
    _make_group(broker, 15)
    grant(broker, allow("User:bob", G, "vg", Operation.DESCRIBE))
    resp = send(secured, 15, 5, {"groups": ["vg", "other"], "include_authorized_operations": True}, "User:bob")
    assert {g.group_id: int(g.error_code) for g in resp.groups} == {"vg": 0, "other": 30}
    assert resp.groups[0].authorized_operations == 1 << Operation.DESCRIBE
    listed = send(secured, 16, 4, {"states_filter": [], "types_filter": []}, "User:bob")
    assert [g.group_id for g in listed.groups] == ["vg"]
    assert send(secured, 16, 4, {"states_filter": [], "types_filter": []}, "User:carol").groups == ()


def test_prefixed_and_deny_acls_through_the_broker(secured):
    broker = secured.broker
    broker.create_topic("team-a.orders", 1, {})
    broker.create_topic("team-a.secret", 1, {})
    grant(broker, allow("User:bob", T, "team-a.", Operation.DESCRIBE, PatternType.PREFIXED),
          AclBinding(T, "team-a.secret", PatternType.LITERAL, "User:bob", "*", Operation.ALL, Permission.DENY))
    assert sorted(t.name for t in _metadata(secured, "User:bob").topics) == ["team-a.orders"]


def test_host_bound_acls(secured):
    grant(secured.broker, AclBinding(T, "vt", PatternType.LITERAL, "User:bob", "10.0.0.1", Operation.READ,
                                     Permission.ALLOW))
    assert _metadata(secured, "User:bob").topics == ()  # the request came from 127.0.0.1


def test_a_regex_subscription_does_not_reveal_topics_the_member_may_not_describe(secured):
    broker = secured.broker
    for name in ("rx-public", "rx-secret"):
        broker.create_topic(name, 1, {})
    grant(broker, allow("User:bob", G, "rg", Operation.READ),
          allow("User:bob", T, "rx-public", Operation.READ))  # READ implies DESCRIBE; rx-secret: nothing
    body = {"group_id": "rg", "member_id": "m-regex", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000, "subscribed_topic_names": None, "subscribed_topic_regex": "rx-.*",
            "server_assignor": None, "topic_partitions": []}
    first = send(secured, 68, 1, body, "User:bob")
    assert int(first.error_code) == 0
    epoch = first.member_epoch
    assigned = set()
    for _ in range(20):  # the regex resolves on the coordinator's timer, then the member reconciles
        broker.coordinator_tick(broker.clock() + 200)
        resp = send(secured, 68, 1, {**body, "member_epoch": epoch, "subscribed_topic_regex": None,
                                     "topic_partitions": None}, "User:bob")
        epoch = resp.member_epoch
        if resp.assignment is not None:
            assigned = {broker.metadata.get_by_id(tp.topic_id).name for tp in resp.assignment.topic_partitions}
        if assigned:
            break
    assert assigned == {"rx-public"}
    group = broker.coordinator.runtime.shards[broker.coordinator.partition_for("rg")].consumer_groups["rg"]
    assert group.resolved_regexes["rx-.*"].topics == frozenset({"rx-public"})
