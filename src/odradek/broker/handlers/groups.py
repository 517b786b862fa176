"""ListGroups v0-v5, DescribeGroups v0-v6, DeleteGroups v0-v2."""

from __future__ import annotations

from ...coordinator.groups import delete_group, describe_classic_group, listed_groups
from ..errors import NONE
from ..registry import api


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
    return {"throttle_time": 0, "groups": [
        describe_classic_group(runtime.shard_for(g), g, request.api_version) for g in request.body.groups
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
