"""Which member a request speaks for, in either kind of group (Kafka's validateMember).

A static member is named by its group.instance.id: an instance the group does not know
is UNKNOWN_MEMBER_ID, and an instance that now maps to another member id means the
request comes from a fenced incarnation (FENCED_INSTANCE_ID, KIP-345). Otherwise the
member id must be known (UNKNOWN_MEMBER_ID). Consumer and classic groups both offer
`members` and `member_by_instance`, so one lookup serves both.
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID
from .errors import CoordinatorError


def known_member(group: Any, member_id: str, instance_id: str | None) -> Any:
    if instance_id:
        member = group.member_by_instance(instance_id)
        if member is None:
            raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member.member_id != member_id:
            raise CoordinatorError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                   f"was fenced by member {member.member_id}.")
        return member
    member = group.members.get(member_id)
    if member is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
    return member
