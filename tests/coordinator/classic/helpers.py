"""Small helpers for the classic-group tests, on top of tests/coordinator/harness.Coord.

Every helper drives the coordinator only through the harness (join/sync/cheartbeat/leave,
advance, restart), so the tests stay sans-I/O and in-memory.
"""

from __future__ import annotations

from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.groups import (
    delete_group,
    describe_classic_group,
    listed_groups,
)
from odradek.coordinator.offsets import expire_offsets
from odradek.protocol.errors import MEMBER_ID_REQUIRED, NONE
from tests.coordinator.harness import Coord

DELAY = 3_000  # CoordinatorConfig.initial_rebalance_delay_ms default


def cfg(**kw) -> CoordinatorConfig:
    """A one-partition config (the harness default) with classic overrides."""
    kw.setdefault("offsets_topic_partitions", 1)
    return CoordinatorConfig(**kw)


def code(box: list) -> int:
    """The error code of a join/sync box that has been answered."""
    assert len(box) == 1, f"expected exactly one answer, got {box!r}"
    return int(box[0]["error_code"])


def join_dynamic(c: Coord, group: str = "g", **kw) -> tuple[str, list]:
    """A v4+ dynamic member: the MEMBER_ID_REQUIRED round, then the real join.
    Returns (member id, box of the second join: empty while parked)."""
    first = c.join(group, **kw)
    assert code(first) == MEMBER_ID_REQUIRED, first
    mid = first[0]["member_id"]
    assert mid
    return mid, c.join(group, mid, **kw)


def form(c: Coord, n: int = 2, group: str = "g", *, static=(), assign=None, delay: int = DELAY, **kw):
    """Form a Stable group of n members from scratch (the group must be new or Empty).

    `static` names the group.instance.ids of the first len(static) members; `assign`
    maps member index -> assignment bytes (default b"a<i>"). Returns (member ids in join
    order, leader id, generation)."""
    mids, boxes = [], []
    for i in range(n):
        if i < len(static):
            box = c.join(group, instance_id=static[i], **kw)
            assert box == [], box  # parked in the initial delay
            mid = c.classic(group).static_members[static[i]]
        else:
            mid, box = join_dynamic(c, group, **kw)
            assert box == [], box
        mids.append(mid)
        boxes.append(box)
    # Joins that arrive during the initial delay extend it (by one delay per expiry).
    for _ in range(20):
        if all(boxes):
            break
        c.advance(delay)
    for box in boxes:
        assert code(box) == NONE, box
    gen = boxes[0][0]["generation_id"]
    leader = boxes[0][0]["leader"]
    assignments = [(m, (assign or {}).get(i, b"a%d" % i)) for i, m in enumerate(mids)]
    for m in mids:
        if m != leader:
            assert c.sync(group, m, gen) == []  # parked until the leader's assignment
    done = c.sync(group, leader, gen, assignments)
    assert code(done) == NONE, done
    return mids, leader, gen


def state(c: Coord, group: str = "g") -> str:
    g = c.classic(group)
    return "<none>" if g is None else g.state.value


def run_delete(c: Coord, group: str = "g") -> int:
    return int(c.runtime.run(group, lambda shard, now: delete_group(shard, group, now), c.now))


def run_expire(c: Coord, group: str = "g") -> None:
    c.runtime.run(group, lambda shard, now: expire_offsets(shard, now), c.now)


def describe(c: Coord, group: str = "g", version: int = 5) -> dict:
    return describe_classic_group(c.runtime.shard_for(group), group, version)


def listed(c: Coord, group: str = "g", states=(), types=()) -> list[dict]:
    return [r for r in listed_groups(c.runtime.shard_for(group), set(states), set(types)) if r["group_id"] == group]


def classic_records(c: Coord, group: str = "g", partition: int = 0) -> list:
    """The CLASSIC_GROUP (type 2) records in the log for `group`, decoded."""
    from odradek.coordinator import records as R
    return [r for r in c.replayed(partition) if r.type == R.CLASSIC_GROUP and r.key[0] == group]


def log_len(c: Coord, partition: int = 0) -> int:
    """How many records the coordinator has written to `partition`."""
    return len(c.log.get(partition, []))


def followers(mids, leader) -> list[str]:
    return [m for m in mids if m != leader]


def tick(c: Coord, ms: int, step: int = 100) -> None:
    """Move the clock by `ms` in steps, so that timers re-armed by timers fire on time
    (Coord.advance runs each due timer once, at the new time)."""
    while ms > 0:
        c.advance(min(step, ms))
        ms -= step
