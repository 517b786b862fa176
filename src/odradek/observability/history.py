"""A group's past, from successive snapshots: epoch bumps with their triggers, lag over time.

Theory of operation: `GroupHistory.observe(view, topics, now)` compares a group's view
(view.py) with the one before. KIP-848 "Group Epoch": the group epoch is bumped when a
member joins or leaves, when a member's subscription (topics or regex) changes, or when
the metadata of a subscribed topic changes (its partition count), and the assignment
(target) epoch follows once the assignor ran. So a bump is explained by what differs
between the two views: members joined, members gone, subscriptions changed, partition
counts of subscribed topics changed. A member whose epoch reaches the target epoch has
reconciled. Bumps between two snapshots merge into one entry that names them all (the
entry says from which epoch to which); nothing here is guessed beyond the diff.

Pure: no I/O, time passed in; bounded (the last MAX_EVENTS entries, MAX_POINTS lag samples).
"""

from __future__ import annotations

from collections import deque

MAX_EVENTS = 200
MAX_POINTS = 600  # ten minutes at one snapshot a second


def triggers(before: dict, after: dict, partitions_before: dict[str, int], partitions_after: dict[str, int]
             ) -> list[str]:
    """Why a group's epoch moved between two views (KIP-848 "Group Epoch")."""
    out = []
    old = {m["member_id"]: m for m in before["members"]}
    new = {m["member_id"]: m for m in after["members"]}
    for mid in sorted(new.keys() - old.keys()):
        m = new[mid]
        who = f"{mid}" + (f" (static {m['instance_id']})" if m.get("instance_id") else "")
        out.append(f"member {who} joined")
    for mid in sorted(old.keys() - new.keys()):
        out.append(f"member {mid} left")
    for mid in sorted(new.keys() & old.keys()):
        if new[mid]["subscription"] != old[mid]["subscription"] or new[mid].get("regex") != old[mid].get("regex"):
            out.append(f"member {mid} changed its subscription to {_subscription(new[mid])}")
    subscribed = {t for m in after["members"] for t in m["subscription"]}
    for topic in sorted(subscribed):
        a, b = partitions_before.get(topic), partitions_after.get(topic)
        if a != b and b is not None:
            out.append(f"topic {topic} now has {b} partitions" + (f" (was {a})" if a is not None else ""))
    return out or ["metadata or assignor change not visible in the group's description"]


def _subscription(m: dict) -> str:
    parts = list(m["subscription"])
    if m.get("regex"):
        parts.append(f"/{m['regex']}/")
    return ", ".join(parts) or "nothing"


class GroupHistory:
    def __init__(self) -> None:
        self.events: deque[dict] = deque(maxlen=MAX_EVENTS)
        self.lag: deque[tuple[float, int]] = deque(maxlen=MAX_POINTS)
        self.partition_lag: dict[str, deque[tuple[float, int]]] = {}
        self._last: dict | None = None
        self._partitions: dict[str, int] = {}

    def observe(self, view: dict, partitions: dict[str, int], now: float) -> list[dict]:
        """Take the group's next view; returns the entries it added."""
        added = []
        last = self._last
        if view["type"] == "consumer":
            epoch = view["group_epoch"]
            if last is None:
                added.append({"time": now, "kind": "observed", "from": None, "to": epoch,
                              "triggers": [f"first seen at group epoch {epoch}"]})
            elif epoch != last["group_epoch"]:
                added.append({"time": now, "kind": "group-epoch", "from": last["group_epoch"], "to": epoch,
                              "triggers": triggers(last, view, self._partitions, partitions)})
            if last is not None and view["target_epoch"] != last["target_epoch"]:
                added.append({"time": now, "kind": "target-epoch", "from": last["target_epoch"],
                              "to": view["target_epoch"], "triggers": [f"assignor {view['assignor']} ran"]})
            if last is not None and view["members"] and all(
                    m["member_epoch"] == view["target_epoch"] and m["reconciliation"] == "stable"
                    for m in view["members"]) and not all(
                    m.get("member_epoch") == last["target_epoch"] and m.get("reconciliation") == "stable"
                    for m in last["members"]):
                added.append({"time": now, "kind": "reconciled", "from": None, "to": view["target_epoch"],
                              "triggers": [f"every member at epoch {view['target_epoch']}"]})
        elif last is None or view.get("generation") != last.get("generation") or view["state"] != last["state"]:
            added.append({"time": now, "kind": "classic", "from": last.get("state") if last else None,
                          "to": view["state"], "triggers": [f"generation {view.get('generation')}"]
                          if view.get("generation") is not None else ["state change"]})
        self.events.extend(added)
        self.lag.append((now, view["total_lag"]))
        for row in view["lag"]:
            key = f"{row['topic']}-{row['partition']}"
            series = self.partition_lag.get(key)
            if series is None:
                series = self.partition_lag[key] = deque(maxlen=MAX_POINTS)
            series.append((now, row["lag"] or 0))
        self._last = view
        self._partitions = dict(partitions)
        return added
