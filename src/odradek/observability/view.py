"""What the console and `groups describe --watch` show: a cluster's state as plain values.

Theory of operation: `Snapshotter.take()` asks any Kafka cluster, through odradek's admin
client and only the public protocol (DescribeCluster, Metadata, ListGroups,
ConsumerGroupDescribe, DescribeGroups, OffsetFetch, ListOffsets), for brokers, topics,
groups and lag, and returns JSON-ready dicts; the console renders them, the watch view
prints them. The same code serves the console embedded in a broker (it connects to its
own listener) and `odradek console` against any bootstrap server.

The reconciliation picture of a KIP-848 member comes from what ConsumerGroupDescribe
tells (KIP-848 "Assignment Reconciliation"): its current assignment and its target.
Partitions in the current assignment but not the target are being revoked; partitions
in the target that another member still owns are pending revocation by that member
(the member cannot get them before); the rest of the target that it does not own yet
is what its next heartbeat will bring.

`annotate_classic` lets a broker add what DescribeGroups does not carry (a classic
group's generation and leader) for the groups it coordinates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

MAX_GROUPS = 200  # groups described per refresh; more are listed, not described


def _tps(tps: Iterable) -> list[list]:
    return sorted([tp[0], tp[1]] for tp in tps)


def member_view(m, owners: dict[tuple[str, int], str]) -> dict:
    """One KIP-848 member as the console draws it (see module doc)."""
    current = {(tp[0], tp[1]) for tp in m.assignment}
    target = {(tp[0], tp[1]) for tp in (m.target if m.target is not None else m.assignment)}
    revoking = current - target
    pending = {tp for tp in target - current if owners.get(tp, m.member_id) != m.member_id}
    assigning = target - current - pending
    if revoking:
        state = "revoking"
    elif pending:
        state = "waiting"
    elif assigning:
        state = "assigning"
    else:
        state = "stable"
    return {
        "member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "host": m.host,
        "member_epoch": m.epoch, "member_type": m.member_type, "subscription": sorted(m.subscription),
        "regex": m.regex, "current": _tps(current), "target": _tps(target), "revoking": _tps(revoking),
        "pending": _tps(pending), "assigning": _tps(assigning), "reconciliation": state,
        "pending_owners": {f"{t}-{p}": owners[(t, p)] for t, p in pending},
    }


def group_view(desc, lag: dict | None = None) -> dict:
    """A GroupDescription (client/admin.py) and its lag as plain values."""
    owners: dict[tuple[str, int], str] = {}
    for m in desc.members:
        for tp in m.assignment:
            owners[(tp[0], tp[1])] = m.member_id
    consumer = desc.type == "consumer"
    members = [member_view(m, owners) if consumer else {
        "member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "host": m.host,
        "member_type": "classic", "subscription": sorted(m.subscription), "current": _tps(m.assignment),
    } for m in desc.members]
    members.sort(key=lambda m: m["member_id"])
    rows = []
    for (t, p), (committed, end) in sorted((lag or {}).items()):
        rows.append({"topic": t, "partition": p, "committed": committed, "end": end,
                     "lag": None if committed is None else max(0, end - committed)})
    return {
        "group_id": desc.group_id, "type": desc.type, "state": desc.state, "protocol_type": desc.protocol_type,
        "assignor": desc.protocol, "group_epoch": desc.epoch, "target_epoch": desc.assignment_epoch,
        "members": members, "static_members": sum(1 for m in members if m["instance_id"]),
        "lag": rows, "total_lag": sum(r["lag"] or 0 for r in rows),
        "generation": None, "leader": None,
    }


def cluster_view(cluster_id, controller: int, brokers, topics: dict) -> dict:
    leaders: dict[int, int] = {}
    out_topics = []
    for name, info in topics.items():
        parts = []
        for p in sorted(info.partitions.values(), key=lambda p: p.partition):
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
            parts.append({"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                          "isr": list(p.isr), "under_replicated": len(p.isr) < len(p.replicas),
                          "offline": p.leader < 0})
        out_topics.append({"name": name, "internal": info.internal, "partitions": parts,
                           "under_replicated": sum(p["under_replicated"] for p in parts),
                           "offline": sum(p["offline"] for p in parts)})
    return {
        "cluster_id": cluster_id, "controller": controller,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                     "leaders": leaders.get(b.node_id, 0)} for b in brokers],
        "topics": out_topics,
    }


class Snapshotter:
    """Takes snapshots of one cluster through an AsyncAdmin."""

    def __init__(self, admin, annotate_classic: Callable[[dict], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.admin = admin
        self.annotate_classic = annotate_classic
        self.clock = clock

    async def take(self, only: list[str] | None = None) -> dict:
        """{"time", "cluster", "groups": [listing], "described": {group id: group view}};
        `only`: describe just these groups (the watch view)."""
        admin = self.admin
        cluster_id, controller, brokers = await admin.describe_cluster()
        topics = await admin.describe_topics()
        listings = await admin.list_groups()
        ids = list(only) if only is not None else [g.group_id for g in listings][:MAX_GROUPS]
        described: dict[str, dict] = {}
        if ids:
            descs = await admin.describe_groups(ids)
            lags = await asyncio.gather(*(self._lag(gid) for gid in descs), return_exceptions=True)
            for (gid, desc), lag in zip(descs.items(), lags):
                view = group_view(desc, lag if isinstance(lag, dict) else None)
                if desc.type == "classic" and self.annotate_classic is not None:
                    self.annotate_classic(view)
                described[gid] = view
        return {
            "time": self.clock(),
            "cluster": cluster_view(cluster_id, controller, brokers, topics),
            "groups": [{"group_id": g.group_id, "type": g.type, "state": g.state,
                        "members": len(described[g.group_id]["members"]) if g.group_id in described else None,
                        "group_epoch": described.get(g.group_id, {}).get("group_epoch"),
                        "total_lag": described.get(g.group_id, {}).get("total_lag")}
                       for g in listings],
            "described": described,
        }

    async def _lag(self, group_id: str) -> dict:
        return await self.admin.group_lag(group_id)
