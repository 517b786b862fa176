"""KIP-430 authorized operations in Metadata, DescribeCluster, DescribeGroups and
ConsumerGroupDescribe (librdkafka 0081: "Expected 8 authorized operations, got 0")."""

from odradek.security.operations import SUPPORTED, AclOperation, to_bitfield
from tests.wire import parse_response, request_frame

NOT_REQUESTED = -(2**31)
TOPIC_OPS = to_bitfield(SUPPORTED["topic"])  # every supported operation: no authorizer configured
GROUP_OPS = to_bitfield(SUPPORTED["group"])
CLUSTER_OPS = to_bitfield(SUPPORTED["cluster"])


def call(inproc, api_key, version, body):
    return parse_response(api_key, version, inproc.handle(request_frame(api_key, version, body)))[1]


def _metadata(inproc, include: bool):
    return call(inproc, 3, 10, {"topics": [{"name": "ops", "topic_id": None}], "allow_auto_topic_creation": True,
                                "include_cluster_authorized_operations": include,
                                "include_topic_authorized_operations": include})


def test_metadata_answers_topic_and_cluster_operations_when_asked(inproc):
    resp = _metadata(inproc, True)
    assert resp.topics[0].topic_authorized_operations == TOPIC_OPS
    assert resp.cluster_authorized_operations == CLUSTER_OPS
    assert TOPIC_OPS & (1 << AclOperation.DESCRIBE_CONFIGS)
    resp = _metadata(inproc, False)
    assert resp.topics[0].topic_authorized_operations == NOT_REQUESTED
    assert resp.cluster_authorized_operations == NOT_REQUESTED


def test_describe_cluster_answers_cluster_operations(inproc):
    resp = call(inproc, 60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
    assert resp.cluster_authorized_operations == CLUSTER_OPS
    resp = call(inproc, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert resp.cluster_authorized_operations == NOT_REQUESTED


def _commit(inproc, group):
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": "ops", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    call(inproc, 8, 8, body)


def test_describe_groups_answers_group_operations_for_described_groups(inproc):
    _metadata(inproc, False)
    inproc.broker.coordinator  # the group exists once it holds offsets
    _commit(inproc, "g-ops")
    resp = call(inproc, 15, 5, {"groups": ["g-ops"], "include_authorized_operations": True})
    assert resp.groups[0].error_code == 0
    assert resp.groups[0].authorized_operations == GROUP_OPS
    resp = call(inproc, 15, 5, {"groups": ["g-ops"], "include_authorized_operations": False})
    assert resp.groups[0].authorized_operations == NOT_REQUESTED


def test_consumer_group_describe_answers_group_operations(inproc):
    _metadata(inproc, False)
    hb = {"group_id": "cg-ops", "member_id": "m1", "member_epoch": 0, "instance_id": None, "rack_id": None,
          "subscribed_topic_names": ["ops"], "server_assignor": None,
          "topic_partitions": [], "rebalance_timeout": 30000}
    resp = call(inproc, 68, 0, hb)
    assert resp.error_code == 0, resp.error_message
    resp = call(inproc, 69, 0, {"group_ids": ["cg-ops", "missing"], "include_authorized_operations": True})
    assert resp.groups[0].authorized_operations == GROUP_OPS
    # A group that cannot be described carries no operations (Kafka sets them on success only).
    assert resp.groups[1].error_code != 0 and resp.groups[1].authorized_operations == NOT_REQUESTED
