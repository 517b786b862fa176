"""`odradek groups describe --watch`: the console's group page in a terminal, with rich.

Theory of operation: every `interval` seconds a Snapshotter (view.py) describes the
groups named, each group's GroupHistory (history.py) explains what changed, and
`render` draws one panel per group: epochs, members with their partitions coloured as
the console colours them (owned, to revoke, arriving at the next heartbeat, pending
revocation by another member), lag, and the latest epoch bumps with their triggers.
`render` is pure (views in, a rich renderable out), so tests print it to a recording
rich Console; `watch` is the loop, bounded by `iterations` when given.
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .history import GroupHistory
from .view import Snapshotter

STYLES = {"owned": "green", "revoking": "red strike", "assigning": "blue", "pending": "dim"}
EVENTS_SHOWN = 8


def _partitions(member: dict) -> Text:
    text = Text()
    revoking = {tuple(tp) for tp in member.get("revoking", [])}
    for tp in member["current"]:
        text.append(f"{tp[0]}-{tp[1]} ", style=STYLES["revoking" if tuple(tp) in revoking else "owned"])
    for kind in ("assigning", "pending"):
        for tp in member.get(kind, []):
            text.append(f"{tp[0]}-{tp[1]} ", style=STYLES[kind])
    return text


def render(view: dict | None, events: list[dict], group_id: str = "") -> Panel:
    if view is None:
        return Panel(Text(f"group {group_id} not found (yet)"), title=group_id)
    consumer = view["type"] == "consumer"
    if consumer:
        facts = (f"state [bold]{view['state']}[/]  group epoch [bold]{view['group_epoch']}[/]  "
                 f"target epoch [bold]{view['target_epoch']}[/]  assignor {view['assignor']}")
    else:
        generation = view.get("generation")
        facts = (f"state [bold]{view['state']}[/]  protocol {view['protocol_type']}/{view['assignor'] or '-'}"
                 + (f"  generation {generation}  leader {view.get('leader')}" if generation is not None else ""))
    facts += f"  members {len(view['members'])} (static {view['static_members']})  lag [bold]{view['total_lag']}[/]"
    members = Table(box=None, pad_edge=False)
    for col in ("MEMBER", "INSTANCE", "CLIENT") + (("EPOCH", "RECONCILIATION") if consumer else ()) + ("PARTITIONS",):
        members.add_column(col)
    for m in view["members"]:
        row = [m["member_id"][:12], m["instance_id"] or "-", m["client_id"]]
        if consumer:
            row += [str(m["member_epoch"]), m["reconciliation"]]
        members.add_row(*row, _partitions(m))
    lag = Table(box=None, pad_edge=False)
    for col in ("TOPIC", "PARTITION", "COMMITTED", "END", "LAG"):
        lag.add_column(col)
    for r in view["lag"]:
        lag.add_row(r["topic"], str(r["partition"]), "-" if r["committed"] is None else str(r["committed"]),
                    str(r["end"]), "-" if r["lag"] is None else str(r["lag"]))
    history = Table(box=None, pad_edge=False)
    for col in ("TIME", "WHAT", "EPOCH", "WHY"):
        history.add_column(col)
    for e in events[-EVENTS_SHOWN:][::-1]:
        epochs = f"{e['from']} -> {e['to']}" if e["from"] is not None else str(e["to"])
        history.add_row(time.strftime("%H:%M:%S", time.localtime(e["time"])), e["kind"], epochs,
                        "; ".join(e["triggers"]))
    legend = Text.assemble(("owned ", STYLES["owned"]), ("to-revoke ", STYLES["revoking"]),
                           ("arriving ", STYLES["assigning"]), ("pending-revocation", STYLES["pending"]))
    parts = [Text.from_markup(facts), members]
    if consumer:
        parts.append(legend)
    parts += [Text("lag", style="bold"), lag, Text("history", style="bold"), history]
    return Panel(Group(*parts), title=f"{view['type']} group {view['group_id']}")


async def watch(admin, group_ids: list[str], interval_s: float = 1.0, iterations: int | None = None,
                console=None) -> int:
    """Redraw the groups until interrupted (or `iterations` refreshes)."""
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    snapshotter = Snapshotter(admin)
    histories = {gid: GroupHistory() for gid in group_ids}
    done = 0
    with Live(console=console, auto_refresh=False, transient=False) as live:
        while iterations is None or done < iterations:
            snap = await snapshotter.take(only=group_ids)
            partitions = {t["name"]: len(t["partitions"]) for t in snap["cluster"]["topics"]}
            panels = []
            for gid in group_ids:
                view = snap["described"].get(gid)
                if view is not None and view["state"] != "Dead":
                    histories[gid].observe(view, partitions, snap["time"])
                else:
                    view = None
                panels.append(render(view, list(histories[gid].events), gid))
            live.update(Group(*panels), refresh=True)
            done += 1
            if iterations is None or done < iterations:
                await asyncio.sleep(interval_s)
    return 0
