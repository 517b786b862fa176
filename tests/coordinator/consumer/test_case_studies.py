"""KIP-848 "Case Studies", step by step, against the pure coordinator.

Each step asserts the group epoch, the target assignment and every member's
(epoch, assigned, pending revocation, state), as the KIP's tables list them.
"""

from __future__ import annotations

from tests.coordinator.harness import FOO, Coord, member_view, parts


def target(c, gid="g"):
    g = c.group(gid)
    return g.target_epoch, {m: sorted(t.get(FOO, ())) for m, t in sorted(g.target.items())}


def test_basic():
    c = Coord(topics=[("foo", FOO, 3)])
    # A joins: epoch 1, everything assigned to A at once (nothing to revoke).
    r = c.hb(member="A")
    assert (r["member_epoch"], parts(r)) == (1, [0, 1, 2])
    g = c.group()
    assert g.group_epoch == 1 and target(c) == (1, {"A": [0, 1, 2]})
    assert member_view(g, "A") == (1, [0, 1, 2], [], "STABLE")

    # B joins: epoch 2, target A=[0,1] B=[2]; B moves to epoch 2 but foo-2 is still A's.
    r = c.hb(member="B")
    assert (r["member_epoch"], parts(r)) == (2, [])
    assert g.group_epoch == 2 and target(c) == (2, {"A": [0, 1], "B": [2]})
    assert member_view(g, "B") == (2, [], [], "UNRELEASED_PARTITIONS")
    assert g.state.value == "Reconciling"

    # A heartbeats: told to revoke foo-2, stays at epoch 1.
    r = c.hb(member="A", epoch=1)
    assert (r["member_epoch"], parts(r)) == (1, [0, 1])
    assert member_view(g, "A") == (1, [0, 1], [2], "UNREVOKED_PARTITIONS")
    # B heartbeats meanwhile: still waiting, nothing new.
    r = c.hb(member="B", epoch=2)
    assert (r["member_epoch"], parts(r)) == (2, None)

    # A acknowledges: epoch 2, foo-2 released.
    r = c.hb(member="A", epoch=1, owned={FOO: [0, 1]})
    assert r["member_epoch"] == 2
    assert member_view(g, "A") == (2, [0, 1], [], "STABLE")
    assert g.owner(FOO, 2) is None

    # B heartbeats: gets foo-2.
    r = c.hb(member="B", epoch=2)
    assert (r["member_epoch"], parts(r)) == (2, [2])
    assert member_view(g, "B") == (2, [2], [], "STABLE")
    assert g.state.value == "Stable"

    # C joins: epoch 3; A gives one partition to C, B keeps foo-2 (sticky).
    r = c.hb(member="C")
    assert (r["member_epoch"], parts(r)) == (3, [])
    epoch, t = target(c)
    assert epoch == 3 and t["B"] == [2] and len(t["A"]) == 1 and len(t["C"]) == 1
    moved = t["C"][0]
    # B has nothing to revoke: straight to epoch 3.
    r = c.hb(member="B", epoch=2)
    assert r["member_epoch"] == 3 and member_view(g, "B") == (3, [2], [], "STABLE")
    assert member_view(g, "C") == (3, [], [], "UNRELEASED_PARTITIONS")
    r = c.hb(member="A", epoch=2)
    assert (r["member_epoch"], parts(r)) == (2, t["A"])
    assert member_view(g, "A") == (2, t["A"], [moved], "UNREVOKED_PARTITIONS")
    r = c.hb(member="A", epoch=2, owned={FOO: t["A"]})
    assert r["member_epoch"] == 3 and member_view(g, "A") == (3, t["A"], [], "STABLE")
    r = c.hb(member="C", epoch=3)
    assert (r["member_epoch"], parts(r)) == (3, [moved])
    assert [member_view(g, m) for m in "ABC"] == [(3, t["A"], [], "STABLE"), (3, [2], [], "STABLE"),
                                                   (3, [moved], [], "STABLE")]
    assert g.state.value == "Stable"


def _stable_two_members(c, epoch_target=None):
    """A=[0,1,2] B=[3,4,5] at one epoch, reached through the protocol."""
    c.hb(member="A")
    c.hb(member="B")
    g = c.group()
    e = g.group_epoch
    c.hb(member="A", epoch=1)  # revoke
    c.hb(member="A", epoch=1, owned={FOO: g.target["A"][FOO]})
    c.hb(member="B", epoch=e)
    assert g.state.value == "Stable"
    return g


def test_incremental_revocation_and_assignment():
    c = Coord(topics=[("foo", FOO, 6)])
    g = _stable_two_members(c)
    e0 = g.group_epoch
    a0, b0 = sorted(g.members["A"].assigned[FOO]), sorted(g.members["B"].assigned[FOO])
    assert len(a0) == len(b0) == 3

    # C joins: new epoch, target takes one partition from each of A and B.
    r = c.hb(member="C")
    e1 = e0 + 1
    assert g.group_epoch == e1 and r["member_epoch"] == e1 and parts(r) == []
    _, t = target(c)
    assert len(t["A"]) == len(t["B"]) == len(t["C"]) == 2
    assert set(t["A"]) < set(a0) and set(t["B"]) < set(b0)
    from_a = sorted(set(a0) - set(t["A"]))
    from_b = sorted(set(b0) - set(t["B"]))
    assert member_view(g, "C") == (e1, [], [], "UNRELEASED_PARTITIONS")

    # A and B are told to revoke; C gets nothing yet.
    assert parts(c.hb(member="A", epoch=e0)) == t["A"]
    assert parts(c.hb(member="B", epoch=e0)) == t["B"]
    assert c.hb(member="C", epoch=e1)["assignment"] is None
    assert member_view(g, "A") == (e0, t["A"], from_a, "UNREVOKED_PARTITIONS")

    # A acknowledges: A moves to e1 and C gets A's partition but not B's.
    assert c.hb(member="A", epoch=e0, owned={FOO: t["A"]})["member_epoch"] == e1
    r = c.hb(member="C", epoch=e1)
    assert parts(r) == from_a
    assert member_view(g, "C") == (e1, from_a, [], "UNRELEASED_PARTITIONS")

    # B acknowledges, then C gets both.
    assert c.hb(member="B", epoch=e0, owned={FOO: t["B"]})["member_epoch"] == e1
    r = c.hb(member="C", epoch=e1)
    assert parts(r) == sorted(from_a + from_b)
    assert [member_view(g, m)[0] for m in "ABC"] == [e1, e1, e1]
    assert g.state.value == "Stable"


def test_member_failure():
    c = Coord(topics=[("foo", FOO, 6)])
    for m in "ABC":
        c.hb(member=m)
    # converge
    for _ in range(3):
        for m in "ABC":
            mem = c.group().members[m]
            c.hb(member=m, epoch=mem.member_epoch, owned={FOO: sorted(mem.assigned.get(FOO, {}))})
    g = c.group()
    assert g.state.value == "Stable"
    e = g.group_epoch
    before = {m: sorted(g.members[m].assigned[FOO]) for m in "ABC"}

    # A stops heartbeating; B and C keep going; A is removed after the session timeout.
    for _ in range(8):  # 40 s: within the 45 s session timeout
        c.advance(5_000)
        for m in "BC":
            mem = g.members[m]
            c.hb(member=m, epoch=mem.member_epoch, owned={FOO: sorted(mem.assigned.get(FOO, {}))})
    assert "A" in g.members
    c.advance(5_001)
    assert "A" not in g.members
    assert g.group_epoch == e + 1 and g.target_epoch == e + 1
    _, t = target(c)
    assert sorted(t["B"] + t["C"]) == list(range(6))
    assert set(before["B"]) <= set(t["B"]) and set(before["C"]) <= set(t["C"])  # sticky
    # B and C heartbeat and move to the new epoch, picking up A's partitions directly.
    for m in "BC":
        mem = g.members[m]
        r = c.hb(member=m, epoch=e, owned={FOO: sorted(mem.assigned[FOO])})
        assert r["member_epoch"] == e + 1 and parts(r) == t[m]
    assert g.state.value == "Stable"


def test_partition_added():
    c = Coord(topics=[("foo", FOO, 1)])
    c.hb(member="A")
    c.hb(member="B")
    g = c.group()
    for m in "AB":
        mem = g.members[m]
        c.hb(member=m, epoch=mem.member_epoch, owned={FOO: sorted(mem.assigned.get(FOO, {}))})
    e = g.group_epoch
    assert g.state.value == "Stable"
    owner = "A" if g.members["A"].assigned.get(FOO) else "B"
    other = "B" if owner == "A" else "A"

    # foo-1 is created: the coordinator notices, bumps the epoch and computes a target.
    c.set_topics([("foo", FOO, 2)])
    assert g.group_epoch == e + 1 and g.target_epoch == e + 1
    _, t = target(c)
    assert t[owner] == [0] and t[other] == [1]
    assert g.state.value == "Reconciling"
    # Both heartbeat and move to the new epoch; nobody revokes anything.
    r = c.hb(member=owner, epoch=e)
    assert r["member_epoch"] == e + 1 and member_view(g, owner) == (e + 1, [0], [], "STABLE")
    r = c.hb(member=other, epoch=e)
    assert (r["member_epoch"], parts(r)) == (e + 1, [1])
    assert g.state.value == "Stable"
