"""ListGroups v0-v5, DescribeGroups v0-v6, DeleteGroups v0-v2."""

from __future__ import annotations

from ...coordinator.groups import delete_group, describe_classic_group, listed_groups
from ...protocol.errors import NONE
from ...security.operations import authorized_operations
from ..registry import api


def with_group_operations(described: dict, requested: bool) -> dict:
    """KIP-430: a described group's authorized operations, when asked (Kafka sets them on
    groups described without error)."""
    if requested and described["error_code"] == NONE:
        described["authorized_operations"] = authorized_operations("group", True)
    return described


@api(16, "ListGroups", 0, 5)
def list_groups(broker, request):
    states = set(request.field("states_filter", ()) or ())
    types = set(request.field("types_filter", ()) or ())
    groups = []
    for shard in broker.coordinator.runtime.shards.values():
        groups += listed_groups(shard, states, types)
    groups.sort(key=lambda g: g["group_id"])
    return {"throttle_time": 0, "error_code": NONE, "groups": groups}


@api(15, "DescribeGroups", 0, 6)
def describe_groups(broker, request):
    runtime = broker.coordinator.runtime
    ops = bool(request.field("include_authorized_operations", False))
    return {"throttle_time": 0, "groups": [
        with_group_operations(describe_classic_group(runtime.shard_for(g), g, request.api_version), ops)
        for g in request.body.groups
    ]}


@api(42, "DeleteGroups", 0, 2)
def delete_groups(broker, request):
    runtime = broker.coordinator.runtime
    now = broker.clock()
    results = []
    for gid in request.body.groups_names:
        code = runtime.run(gid, lambda shard, t, gid=gid: delete_group(shard, gid, t), now)
        results.append({"group_id": gid, "error_code": code})
    return {"throttle_time": 0, "results": results}
