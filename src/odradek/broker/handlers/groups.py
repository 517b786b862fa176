"""ListGroups v0-v5, DescribeGroups v0-v6, DeleteGroups v0-v2."""

from __future__ import annotations

from ...coordinator.errors import CoordinatorUnavailable, error_code_for
from ...coordinator.groups import (
    delete_group,
    describe_classic_group,
    listed_groups,
    unavailable_classic_group,
)
from ...coordinator.runtime import ShardState
from ...protocol.errors import COORDINATOR_LOAD_IN_PROGRESS, NONE
from ...security.operations import authorized_operations
from ..coordinated import answer_all
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
    runtime = broker.coordinator.runtime
    groups = []
    for shard in runtime.shards.values():
        groups += listed_groups(shard, states, types)
    groups.sort(key=lambda g: g["group_id"])
    # Shards not served here are skipped (Kafka ignores NOT_COORDINATOR); while one is
    # loading the list is incomplete, and Kafka says so.
    loading = any(state is ShardState.LOADING for state, _epoch in runtime.states.values())
    return {"throttle_time": 0, "error_code": COORDINATOR_LOAD_IN_PROGRESS if loading else NONE, "groups": groups}


def _describe_classic(runtime, group_id: str, version: int) -> dict:
    try:
        return describe_classic_group(runtime.read(group_id), group_id, version)
    except CoordinatorUnavailable as exc:
        return unavailable_classic_group(group_id, exc.code)


@api(15, "DescribeGroups", 0, 6)
def describe_groups(broker, request):
    runtime = broker.coordinator.runtime
    ops = bool(request.field("include_authorized_operations", False))
    return {"throttle_time": 0, "groups": [
        with_group_operations(_describe_classic(runtime, g, request.api_version), ops)
        for g in request.body.groups
    ]}


@api(42, "DeleteGroups", 0, 2)
def delete_groups(broker, request):
    runtime = broker.coordinator.runtime
    now = broker.clock()
    pending = [(gid, runtime.submit(gid, lambda shard, t, gid=gid: delete_group(shard, gid, t), now))
               for gid in request.body.groups_names]

    def build() -> dict:
        return {"throttle_time": 0, "results": [
            {"group_id": gid, "error_code": d.response if d.error is None else error_code_for(d.error)}
            for gid, d in pending]}

    return answer_all([d for _gid, d in pending], build)
