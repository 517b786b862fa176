"""Bad group-coordinator input over the wire, against a real broker process: every
KIP-848 INVALID_REQUEST rule and the fencing errors come back as error codes, the
connection stays usable, and the group's other members are not disturbed."""

from __future__ import annotations

import uuid

import pytest

from tests.wire import RawClient

pytestmark = pytest.mark.interop


def _hb(client, group, member, epoch, **over):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30_000 if epoch == 0 else -1,
            "subscribed_topic_names": ["gt"] if epoch == 0 else None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": [] if epoch == 0 else None}
    body.update(over)
    return client.call(68, 1, body)


@pytest.fixture
def group(broker):
    client = RawClient(broker.bootstrap)
    client.call(19, 7, {"topics": [{"name": "gt", "num_partitions": 2, "replication_factor": 1, "assignments": [],
                                    "configs": []}], "timeout": 5000, "validate_only": False})
    gid = f"bad-{uuid.uuid4().hex[:8]}"
    r = _hb(client, gid, "good-member", 0)
    assert r.error_code == 0 and r.member_epoch >= 1
    yield client, gid, r.member_epoch
    client.close()


@pytest.mark.parametrize("over,code", [
    ({"group_id": ""}, 42),                                     # GroupId must be non-empty
    ({"member_id": ""}, 42),                                    # MemberId must be non-empty (v1)
    ({"member_epoch": -5}, 42),                                 # MemberEpoch >= -1 (-2 for static members)
    ({"instance_id": ""}, 42),                                  # InstanceId, if provided, non-empty
    ({"rebalance_timeout": 0}, 42),                             # RebalanceTimeoutMs > 0 when joining
    ({"subscribed_topic_names": None}, 42),                     # a subscription when joining
    ({"subscribed_topic_regex": "(oops"}, 128),                 # INVALID_REGULAR_EXPRESSION
    ({"server_assignor": "no-such-assignor"}, 112),             # UNSUPPORTED_ASSIGNOR
])
def test_invalid_joins_get_error_codes(group, over, code):
    client, gid, _ = group
    r = _hb(client, gid, "bad-member", 0, **over)
    assert int(r.error_code) == code and r.error_message
    # The same connection keeps working, and the good member is undisturbed.
    ok = _hb(client, gid, "good-member", group[2])
    assert ok.error_code == 0 and ok.member_epoch == group[2]


def test_fencing_errors(group):
    client, gid, epoch = group
    assert int(_hb(client, gid, "stranger", epoch).error_code) == 25             # UNKNOWN_MEMBER_ID
    assert int(_hb(client, gid, "good-member", epoch + 5).error_code) == 110     # FENCED_MEMBER_EPOCH
    assert int(_hb(client, "never-made-" + gid, "m", 3).error_code) == 69        # GROUP_ID_NOT_FOUND
    # Commits: unknown member and a newer epoch than the broker's.
    body = {"group_id": gid, "generation_id_or_member_epoch": epoch + 1, "member_id": "good-member",
            "group_instance_id": None, "topics": [{"name": "gt", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    r = client.call(8, 9, body)
    assert int(r.topics[0].partitions[0].error_code) == 113                       # STALE_MEMBER_EPOCH
    r = client.call(8, 9, {**body, "member_id": "stranger", "generation_id_or_member_epoch": 1})
    assert int(r.topics[0].partitions[0].error_code) == 25
    ok = _hb(client, gid, "good-member", epoch)
    assert ok.error_code == 0
