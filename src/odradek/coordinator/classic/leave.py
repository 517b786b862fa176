"""LeaveGroup for classic groups: one member (v0-v2) or a batch of member identities (v3+, KIP-345).

Theory of operation: a dynamic member leaves by member id. A static member does not
leave on shutdown (KIP-345): an admin removes it by naming its group.instance.id, with
an empty member id (or the matching one; another id is FENCED_INSTANCE_ID). Each
identity gets its own error code; the group rebalances once for the whole batch.

This handles classic groups only: classic members leaving a consumer group (KIP-848
"Online Migration") go to migration.py; coordinator/dispatch.py picks which.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.errors import (
    FENCED_INSTANCE_ID,
    INVALID_GROUP_ID,
    NONE,
    UNKNOWN_MEMBER_ID,
)
from ..shard import Result, Shard
from .rebalance import maybe_complete_join, remove_members


@dataclass(frozen=True, slots=True)
class LeaveIdentity:
    member_id: str
    instance_id: str | None = None
    reason: str | None = None


def leave(shard: Shard, group_id: str, identities: tuple[LeaveIdentity, ...], now_ms: int) -> Result:
    """Response: {"error_code", "members": [{"member_id", "group_instance_id", "error_code"}]}."""
    if not group_id:
        return Result([], {"error_code": INVALID_GROUP_ID, "members": []})
    group = shard.classic_groups.get(group_id)
    if group is None:
        # Kafka: every named member is unknown; the request itself succeeded.
        return Result([], {"error_code": NONE, "members": [
            {"member_id": i.member_id, "group_instance_id": i.instance_id, "error_code": UNKNOWN_MEMBER_ID}
            for i in identities]})
    rows = []
    leaving = []
    pending_left = False
    for ident in identities:
        code = NONE
        mid = ident.member_id
        if ident.instance_id:
            member = group.member_by_instance(ident.instance_id)
            if member is None:
                code = UNKNOWN_MEMBER_ID
            elif mid and mid != member.member_id:
                code = FENCED_INSTANCE_ID
            else:
                leaving.append(member.member_id)
        elif mid in group.pending_members:
            group.pending_members.discard(mid)
            shard.timer.cancel(("classic-pending", group_id, mid))
            pending_left = True
        elif mid in group.members:
            leaving.append(mid)
        else:
            code = UNKNOWN_MEMBER_ID
        rows.append({"member_id": mid, "group_instance_id": ident.instance_id, "error_code": code})
    records = remove_members(shard, group, leaving, now_ms)
    if pending_left and not records:
        records = maybe_complete_join(shard, group, now_ms)
    return Result(records, {"error_code": NONE, "members": rows})
