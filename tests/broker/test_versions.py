"""Every advertised version of every API answers a well-formed request with a parseable response."""

import asyncio
import uuid

import pytest

from odradek.broker.registry import supported_versions
from odradek.records.codec import Record, encode_batch
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)


def _bodies(topic_id, v, member=("", -1)):
    mid, generation = member  # the classic member _make_group made, for 11-14
    batch = encode_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
    fetch_topic = {
        "topic": "vt",
        "topic_id": topic_id,
        "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        ],
    }
    return {
        0: {"transactional_id": None, "acks": 1, "timeout": 1000,
            "topic_data": [{"name": "vt", "partition_data": [{"index": 0, "records": batch}]}]},
        1: {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [fetch_topic], "forgotten_topics_data": [], "rack_id": ""},
        2: {"replica_id": -1, "isolation_level": 0, "timeout": 1000,
            "topics": [{"name": "vt", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
        3: {"topics": [{"name": "vt", "topic_id": None}], "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False},
        18: {"client_software_name": "odradek-test", "client_software_version": "1.0"},
        19: {"topics": [{"name": f"created-{v}", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
             "timeout": 5000, "validate_only": False},
        20: {"topic_names": [f"created-{v}"], "topics": [{"name": f"created-{v}", "topic_id": ZERO}], "timeout": 5000},
        21: {"topics": [{"name": "vt", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout": 1000},
        33: {"resources": [{"resource_type": 2, "resource_name": "vt", "configs": [{"name": "retention.ms", "value": "60000"}]}],
             "validate_only": False},
        23: {"replica_id": -1, "topics": [{"topic": "vt", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        22: {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
        32: {"resources": [{"resource_type": 2, "resource_name": "vt", "configuration_keys": None}],
             "include_synonyms": True, "include_documentation": True},
        37: {"topics": [{"name": "vt", "count": 8, "assignments": None}], "timeout": 5000, "validate_only": True},
        60: {"include_cluster_authorized_operations": False, "endpoint_type": 1, "include_fenced_brokers": False},
        8: {"group_id": "vg", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time": -1, "topics": [{"name": "vt", "topic_id": topic_id, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        9: {"group_id": "vg", "topics": [{"name": "vt", "partition_indexes": [0]}], "require_stable": False,
            "groups": [{"group_id": "vg", "member_id": "", "member_epoch": -1,
                        "topics": [{"name": "vt", "topic_id": topic_id, "partition_indexes": [0]}]}]},
        10: {"key": "vg", "key_type": 0, "coordinator_keys": ["vg", "other"]},
        15: {"groups": ["vg"], "include_authorized_operations": False},
        16: {"states_filter": [], "types_filter": []},
        42: {"groups_names": ["vg"]},
        44: {"resources": [{"resource_type": 32, "resource_name": "vg", "configs": [
            {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}], "validate_only": False},
        47: {"group_id": "vg", "topics": [{"name": "vt", "partitions": [{"partition_index": 0}]}]},
        68: {"group_id": "vg", "member_id": "" if v == 0 else f"member-{v}", "member_epoch": 0, "instance_id": None,
             "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": ["vt"], "subscribed_topic_regex": None,
             "server_assignor": None, "topic_partitions": []},
        69: {"group_ids": ["vg"], "include_authorized_operations": False},
        # Classic group APIs, as the only member of the Stable group "vg": its JoinGroup is a
        # leader rejoin (a rebalance that completes at once), its SyncGroup in Stable gets the
        # stored assignment, its LeaveGroup empties the group.
        11: {"group_id": "vg", "session_timeout": 30000, "rebalance_timeout": 30000, "member_id": mid,
             "group_instance_id": None, "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"vm"}], "reason": None},
        12: {"group_id": "vg", "generation_id": generation, "member_id": mid, "group_instance_id": None},
        13: {"group_id": "vg", "member_id": mid, "members": [{"member_id": mid, "group_instance_id": None, "reason": None}]},
        14: {"group_id": "vg", "generation_id": generation, "member_id": mid, "group_instance_id": None,
             "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
        # Transactions, for the producer `_make_txn` initialised (pid = mid, epoch = generation).
        24: {"v3_and_below_transactional_id": "vtx", "v3_and_below_producer_id": mid,
             "v3_and_below_producer_epoch": generation,
             "v3_and_below_topics": [{"name": "vt", "partitions": [0]}]},
        25: {"transactional_id": "vtx", "producer_id": mid, "producer_epoch": generation, "group_id": "vg"},
        26: {"transactional_id": "vtx", "producer_id": mid, "producer_epoch": generation, "committed": True},
        27: {"markers": [{"producer_id": mid, "producer_epoch": generation, "transaction_result": True,
                          "coordinator_epoch": 0, "topics": [{"name": "vt", "partition_indexes": [0]}]}]},
        28: {"transactional_id": "vtx", "group_id": "vg", "producer_id": mid, "producer_epoch": generation,
             "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                 {"name": "vt", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        65: {"transactional_ids": ["vtx"]},
        66: {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1},
        # SASL: on a SASL listener's connection (_session), a handshake then PLAIN's one token.
        17: {"mechanism": "PLAIN"},
        36: {"auth_bytes": b"\x00vu\x00vu-pw"},
        50: {"users": None},
        # ACLs: on a broker with an authorizer (_make_group gives it one).
        29: dict(ACL_FILTER),
        30: {"creations": [{"resource_type": 2, "resource_name": "vt", "resource_pattern_type": 3,
                            "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]},
        31: {"filters": [dict(ACL_FILTER)]},
        51: {"deletions": [], "upsertions": [{"name": "vu", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16,
                                              "salted_password": b"p" * 32}]},
    }


ACL_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


def _session(api_key, version):
    """A SASL_PLAINTEXT connection at the step where `api_key` is due (None: no listener)."""
    if api_key not in (17, 36):
        return None
    from odradek.security.authentication import Authenticator, SaslConfig, Session

    auth = Authenticator(SaslConfig(("PLAIN",), {"vu": "vu-pw"}))
    if api_key == 36:
        auth.admit(17, 0)
        auth.handshake(1, "PLAIN")
    return Session("SASL_PLAINTEXT", auth)


def _make_group(broker, api_key):
    """Groups some APIs need to exist: offsets-only for 15/42/47, a member for 69, and for the
    classic group APIs (11-14) a Stable classic group with one member: (member id, generation)."""
    from odradek.coordinator.consumer.heartbeat import HeartbeatRequest, heartbeat
    from odradek.coordinator.offsets import CommitPartition, CommitRequest, commit

    runtime = broker.coordinator.runtime
    if api_key in (29, 30, 31):
        from odradek.security.acl import Authorizer

        broker.authorizer = Authorizer(super_users={"User:ANONYMOUS"})
    if api_key in (15, 42, 47):
        req = CommitRequest("vg", topics=(("vt", None, (CommitPartition(0, 1),)),))
        runtime.run("vg", lambda s, now: commit(s, req, now), broker.clock())
    if api_key == 69:
        req = HeartbeatRequest("vg", "m1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("vt",), owned={})
        runtime.run("vg", lambda s, now: heartbeat(s, req, now), broker.clock())
    if api_key in (11, 12, 13, 14):
        return _classic_member(broker)
    if api_key in (24, 25, 26, 27, 28, 65, 66):
        return _txn_producer(broker)
    return ("", -1)


def _txn_producer(broker):
    """An initialised transactional producer "vtx" with a transaction open on vt-0 (EndTxn
    needs one; DescribeTransactions of an Empty id answers start time -1, which kio cannot
    read): (producer id, epoch)."""
    from odradek.broker.broker import run_now
    from odradek.transactions import coordinator as C

    run_now(broker.txn_coordinator.log.create())  # the file store never suspends
    runtime = broker.txn_coordinator.runtime
    resp = runtime.submit("vtx", lambda s, now: C.init_producer_id(s, "vtx", 60000, -1, -1, 1000, now),
                          broker.clock()).result()
    pid, epoch = resp["producer_id"], resp["producer_epoch"]
    runtime.submit("vtx", lambda s, now: C.add_partitions(s, "vtx", pid, epoch, [("vt", 0)], now),
                   broker.clock()).result()
    return pid, epoch


def _classic_member(broker):
    from odradek.coordinator.classic.join import JoinRequest, join
    from odradek.coordinator.classic.sync import SyncRequest, sync

    runtime = broker.coordinator.runtime
    now = broker.clock()
    answers = []
    req = JoinRequest("vg", "", 30000, 30000, "consumer", (("range", b"vm"),), client_id="vc", version=3)
    runtime.run("vg", lambda s, t: join(s, req, answers.append, t), now)
    runtime.tick(now + runtime.config.initial_rebalance_delay_ms)  # a new group waits out the initial delay
    assert answers and answers[0]["error_code"] == 0, answers
    mid, generation = answers[0]["member_id"], answers[0]["generation_id"]
    sreq = SyncRequest("vg", mid, generation, assignments=((mid, b"va"),))
    runtime.run("vg", lambda s, t: sync(s, sreq, answers.append, t), now)
    assert answers[1]["error_code"] == 0, answers
    return mid, generation


CASES = [(k, v) for k, (lo, hi) in supported_versions().items() for v in range(lo, hi + 1)]


@pytest.mark.parametrize("api_key,version", CASES, ids=[f"api{k}-v{v}" for k, v in CASES])
def test_every_advertised_version_round_trips(inproc, api_key, version):
    inproc.broker.create_topic("vt", 1, {})
    topic_id = inproc.broker.metadata.get("vt").topic_id
    member = _make_group(inproc.broker, api_key)
    body = _bodies(topic_id, version, member)[api_key]
    if api_key == 20:  # delete needs the topic this version's CreateTopics case would make
        inproc.broker.create_topic(f"created-{version}", 1, {})
    # JoinGroup/SyncGroup can be parked until a rebalance completes: a parked answer fails fast.
    frame = request_frame(api_key, version, body, correlation_id=77)
    response = inproc.loop.run_until_complete(
        asyncio.wait_for(inproc.broker.handle_frame(frame[4:], "", _session(api_key, version)), 10))
    cid, parsed = parse_response(api_key, version, response)
    assert cid == 77
    errors = _error_codes(parsed)
    assert errors and all(e == 0 for e in errors), (api_key, version, parsed)


def _error_codes(entity):
    """Every error_code field in the response, recursively."""
    out = []
    if hasattr(entity, "__dataclass_fields__"):
        for name in entity.__dataclass_fields__:
            value = getattr(entity, name)
            if name.endswith("error_code"):
                out.append(int(value))
            else:
                out.extend(_error_codes(value))
    elif isinstance(entity, tuple):
        for x in entity:
            out.extend(_error_codes(x))
    return out


def test_advertised_ranges_match_what_kio_can_parse():
    from odradek.protocol.messages import request_class, response_class

    for key, (lo, hi) in supported_versions().items():
        for v in range(lo, hi + 1):
            assert request_class(key, v) and response_class(key, v)
