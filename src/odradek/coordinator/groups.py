"""Group-level admin operations across group types: list, describe, delete.

Theory of operation: a shard knows three kinds of group. Consumer groups (KIP-848,
type "consumer"), classic groups (JoinGroup/SyncGroup, type "classic") and "simple"
groups that exist only through offsets committed without membership (Kafka shows
those as empty classic groups with protocol type ""). ListGroups
filters on type and state case-insensitively (KIP-848 "ListGroups API", KIP-518).
"""

from __future__ import annotations

from ..protocol.errors import GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NONE
from .classic.model import ClassicState
from .consumer.assignment import preferred_assignor
from .consumer.model import ConsumerGroup, GroupState
from .offsets import delete_group_records
from .shard import Result, Shard

CONSUMER = "consumer"
CLASSIC = "classic"


def listed_groups(shard: Shard, states: set[str], types: set[str]) -> list[dict]:
    states = {s.lower() for s in states}
    types = {t.lower() for t in types}
    out = []
    for gid in sorted(shard.group_ids()):
        group = shard.consumer_groups.get(gid)
        classic = shard.classic_groups.get(gid)
        if group is not None:
            row = {"group_id": gid, "protocol_type": CONSUMER, "group_state": group.state.value, "group_type": CONSUMER}
        elif classic is not None:
            row = {"group_id": gid, "protocol_type": classic.protocol_type or "", "group_state": classic.state.value,
                   "group_type": CLASSIC}
        else:
            row = {"group_id": gid, "protocol_type": "", "group_state": GroupState.EMPTY.value, "group_type": CLASSIC}
        if states and row["group_state"].lower() not in states:
            continue
        if types and row["group_type"] not in types:
            continue
        out.append(row)
    return out


def _assignment(shard: Shard, parts) -> dict:
    rows = []
    for tid, ps in sorted(parts.items(), key=lambda kv: str(kv[0])):
        if not ps:
            continue
        meta = shard.image.by_id(tid)
        rows.append({"topic_id": tid, "topic_name": meta.name if meta else "", "partitions": sorted(ps)})
    return {"topic_partitions": rows}


def describe_consumer_group(shard: Shard, group_id: str) -> dict:
    group: ConsumerGroup | None = shard.consumer_groups.get(group_id)
    if group is None:
        return {"error_code": GROUP_ID_NOT_FOUND, "error_message": f"Group {group_id} not found.",
                "group_id": group_id, "group_state": GroupState.DEAD.value, "group_epoch": -1,
                "assignment_epoch": -1, "assignor_name": "", "members": [], "authorized_operations": -2147483648}
    members = []
    for mid, m in sorted(group.members.items()):
        members.append({
            "member_id": mid, "instance_id": m.instance_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
            "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names), "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": _assignment(shard, m.assigned),
            "target_assignment": _assignment(shard, group.target.get(mid, {})),
            # ConsumerGroupDescribe v1: 0 a classic member (online migration), 1 a consumer-protocol member
            "member_type": 0 if m.classic is not None else 1,
        })
    return {
        "error_code": NONE, "error_message": None, "group_id": group_id, "group_state": group.state.value,
        "group_epoch": group.group_epoch, "assignment_epoch": group.target_epoch,
        "assignor_name": preferred_assignor(group.members, shard.config.assignors[0]),
        "members": members, "authorized_operations": -2147483648,
    }


def describe_classic_group(shard: Shard, group_id: str, version: int) -> dict:
    """DescribeGroups (the classic API). Consumer groups are not classic groups: Kafka answers
    Dead, with GROUP_ID_NOT_FOUND from v6."""
    base = {"group_id": group_id, "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": -2147483648, "error_message": None}
    classic = shard.classic_groups.get(group_id)
    if classic is not None:
        # Kafka shows the protocol and each member's metadata only when Stable.
        stable = classic.is_(ClassicState.STABLE)
        members = [{
            "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": (m.metadata(classic.protocol_name) or b"") if stable else b"",
            "member_assignment": m.assignment,  # Kafka shows the current (possibly reset) assignment
        } for m in classic.members.values()]
        return {**base, "error_code": NONE, "group_state": classic.state.value,
                "protocol_type": classic.protocol_type or "",
                "protocol_data": (classic.protocol_name or "") if stable else "", "members": members}
    if group_id in shard.consumer_groups or group_id not in shard.offsets:
        code = GROUP_ID_NOT_FOUND if version >= 6 else NONE
        return {**base, "error_code": code, "group_state": GroupState.DEAD.value}
    return {**base, "error_code": NONE, "group_state": GroupState.EMPTY.value}


def delete_group(shard: Shard, group_id: str, now_ms: int) -> Result:
    group = shard.consumer_groups.get(group_id)
    classic = shard.classic_groups.get(group_id)
    if group is None and classic is None and group_id not in shard.offsets:
        return Result([], GROUP_ID_NOT_FOUND)
    if (group is not None and group.members) or (classic is not None and not classic.is_(ClassicState.EMPTY)):
        return Result([], NON_EMPTY_GROUP)
    return Result(delete_group_records(shard, group_id), NONE)


def unavailable_consumer_group(group_id: str, code) -> dict:
    """ConsumerGroupDescribe's entry for a group whose shard is not served here."""
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": -2147483648}


def unavailable_classic_group(group_id: str, code) -> dict:
    """DescribeGroups' entry for a group whose shard is not served here."""
    return {"group_id": group_id, "error_code": code, "group_state": "", "protocol_type": "", "protocol_data": "",
            "members": [], "authorized_operations": -2147483648, "error_message": None}
