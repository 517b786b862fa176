"""AsyncConsumer._reconcile on its own: what the application's positions become."""

from __future__ import annotations

import asyncio
import uuid

from odradek.client import AsyncConsumer, TopicPartition
from odradek.client.membership import ConsumerGroupMember, Event, State

OLD, NEW = uuid.UUID(int=1), uuid.UUID(int=2)


def test_a_deleted_topic_is_revoked_under_the_name_it_was_assigned_with():
    """Metadata may forget a deleted topic's id before the coordinator revokes its partitions;
    the revocation must still drop the position it was consumed with, or the recreated topic
    of the same name would be read (and committed) from the old topic's offset."""

    async def main():
        c = AsyncConsumer("127.0.0.1:1", group_id="g", enable_auto_commit=False)
        m = c.member = ConsumerGroupMember("g", member_id="m")
        c._mode = "subscribe"
        c._group_wake = asyncio.Event()
        c.client.cluster.by_id[OLD] = "t"
        m._fire(Event.JOIN)
        m.target = frozenset({(OLD, 0)})
        m._fire(Event.TARGET_CHANGED)
        assert m.state is State.RECONCILING
        await c._reconcile()  # assigned: t-0 of the old topic
        assert set(c.positions.parts) == {TopicPartition("t", 0)}
        c.positions.parts[TopicPartition("t", 0)].position = 6
        c.client.cluster.by_id.clear()  # a metadata refresh after the deletion...
        c.client.cluster.by_id[NEW] = "t"  # ...and the recreation under the same name
        m.target = frozenset()
        await c._reconcile()  # the coordinator revokes the old topic's partition
        assert not c.positions.parts and m.owned == frozenset()
        m.target = frozenset({(NEW, 0)})
        await c._reconcile()
        assert c.positions.parts[TopicPartition("t", 0)].position is None  # looked up afresh, not 6
        await c.client.close()

    asyncio.run(main())
