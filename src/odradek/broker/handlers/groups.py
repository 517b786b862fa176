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
from ...protocol.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    GROUP_AUTHORIZATION_FAILED,
    NONE,
)
from ...security.acl import OPEN, Access, Operation, ResourceType
from ...security.operations import SUPPORTED, to_bitfield
from ..coordinated import answer_all
from ..registry import api


def with_group_operations(described: dict, requested: bool, access: Access = OPEN) -> dict:
    """KIP-430: a described group's authorized operations, when asked (Kafka sets them on
    groups described without error): what the principal may do to it."""
    if requested and described["error_code"] == NONE:
        described["authorized_operations"] = to_bitfield(
            access.operations(ResourceType.GROUP, described["group_id"], SUPPORTED["group"]))
    return described


def denied_group(described: dict) -> dict:
    """A described group the principal may not DESCRIBE: GROUP_AUTHORIZATION_FAILED, nothing else."""
    return {**described, "error_code": GROUP_AUTHORIZATION_FAILED, "members": []}


@api(16, "ListGroups", 0, 5)
def list_groups(broker, request):
    states = set(request.field("states_filter", ()) or ())
    types = set(request.field("types_filter", ()) or ())
    runtime = broker.coordinator.runtime
    groups = []
    for shard in runtime.shards.values():
        groups += listed_groups(shard, states, types)
    access = broker.access(request)
    if not access.cluster(Operation.DESCRIBE):  # Kafka: DESCRIBE on the cluster lists all; else each group's
        groups = [g for g in groups if access.group(Operation.DESCRIBE, g["group_id"])]
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
    access = broker.access(request)
    groups = []
    for g in request.body.groups:
        if not access.group(Operation.DESCRIBE, g):
            groups.append(denied_group(unavailable_classic_group(g, GROUP_AUTHORIZATION_FAILED)))
        else:
            groups.append(with_group_operations(_describe_classic(runtime, g, request.api_version), ops, access))
    return {"throttle_time": 0, "groups": groups}


@api(42, "DeleteGroups", 0, 2)
def delete_groups(broker, request):
    runtime = broker.coordinator.runtime
    now = broker.clock()
    access = broker.access(request)
    names = list(dict.fromkeys(request.body.groups_names))  # Kafka removes duplicates first
    denied = [gid for gid in names if not access.group(Operation.DELETE, gid)]
    pending = [(gid, runtime.submit(gid, lambda shard, t, gid=gid: delete_group(shard, gid, t), now, request.started))
               for gid in names if gid not in denied]

    def build() -> dict:
        return {"throttle_time": 0, "results": [
            {"group_id": gid, "error_code": d.response if d.error is None else error_code_for(d.error)}
            for gid, d in pending] + [{"group_id": gid, "error_code": GROUP_AUTHORIZATION_FAILED} for gid in denied]}

    return answer_all([d for _gid, d in pending], build)
