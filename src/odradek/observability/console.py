"""The live console: server-rendered pages, updated in place by server-sent events.

Theory of operation: one `Console` polls its cluster every `interval` seconds through a
Snapshotter (view.py), keeps each group's history (history.py), and pushes to every open
page the fragments that page shows, rendered by the same Jinja2 templates that rendered
the page (`data: {"html": {element id: fragment}, ...}`), so a page's first render and
its live updates can never disagree. The browser's JavaScript (static/console.js) only
swaps fragments in and redraws the lag chart with Plotly.

Pages: `/` (brokers with racks and leader counts, topics with leaders and ISR, groups),
`/groups/{id}` (a group: epochs, assignor, members with their current, target and
pending-revocation partitions as a picture, static members, the history of epoch bumps
with their triggers, lag per partition over time), their JSON at `/api/overview` and
`/api/groups/{id}`, and the event streams at `/events/overview` and `/events/groups/{id}`.

Libraries (README "Observability"): aiohttp serves HTTP and the event streams on the
broker's own event loop (asyncio-native, no thread, StreamResponse for SSE); Jinja2
renders with autoescaping; Plotly draws the chart, its JavaScript served from the
plotly package installed from PyPI, so nothing is fetched from the internet.
"""

from __future__ import annotations

import asyncio
import json
import logging
from importlib.resources import files
from pathlib import Path

from .history import GroupHistory
from .view import Snapshotter

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
DEFAULT_INTERVAL_S = 1.0


def _plotly_js() -> Path:
    return Path(str(files("plotly") / "package_data" / "plotly.min.js"))


def _templates():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["tp"] = lambda tp: f"{tp[0]}-{tp[1]}"
    env.filters["clock"] = _clock
    return env


def _clock(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]


class Console:
    def __init__(self, snapshotter: Snapshotter, interval_s: float = DEFAULT_INTERVAL_S, title: str = "odradek") -> None:
        self.snapshotter = snapshotter
        self.interval_s = interval_s
        self.title = title
        self.snapshot: dict | None = None
        self.error: str | None = None
        self.histories: dict[str, GroupHistory] = {}
        self.seq = 0
        self._subscribers: set[asyncio.Queue] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._runner = None
        self.url = ""
        self.env = _templates()

    # --- polling ---------------------------------------------------------------------------

    async def refresh(self) -> None:
        try:
            snap = await self.snapshotter.take()
        except Exception as exc:  # noqa: BLE001 - the cluster may be down; the page says so and retries
            self.error = f"{type(exc).__name__}: {exc}"
            log.debug("console refresh failed: %s", self.error)
            self._publish()
            return
        self.error = None
        partitions = {t["name"]: len(t["partitions"]) for t in snap["cluster"]["topics"]}
        for gid, view in snap["described"].items():
            history = self.histories.get(gid)
            if history is None:
                history = self.histories[gid] = GroupHistory()
            history.observe(view, partitions, snap["time"])
        self.snapshot = snap
        self._publish()

    def _publish(self) -> None:
        self.seq += 1
        for q in list(self._subscribers):
            if q.empty():  # a slow page skips to the newest state rather than queueing all
                q.put_nowait(self.seq)

    async def _poll(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval_s)

    # --- rendering -------------------------------------------------------------------------

    def overview_fragments(self) -> dict[str, str]:
        return {"overview": self.env.get_template("_overview.html").render(
            snap=self.snapshot, error=self.error, histories=self.histories)}

    def group_model(self, gid: str) -> dict:
        snap = self.snapshot or {}
        view = snap.get("described", {}).get(gid)
        history = self.histories.get(gid)
        return {"group": view, "events": list(reversed(history.events)) if history else [], "error": self.error,
                "time": snap.get("time")}

    def group_fragments(self, gid: str) -> dict[str, str]:
        return {"group-body": self.env.get_template("_group.html").render(**self.group_model(gid))}

    def lag_series(self, gid: str) -> dict:
        history = self.histories.get(gid)
        if history is None:
            return {"total": [], "partitions": {}}
        return {"total": [[t * 1000, v] for t, v in history.lag],
                "partitions": {k: [[t * 1000, v] for t, v in s] for k, s in sorted(history.partition_lag.items())}}

    def page(self, template: str, **model) -> str:
        return self.env.get_template(template).render(title=self.title, seq=self.seq, **model)

    # --- HTTP ------------------------------------------------------------------------------

    def app(self):
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/", self._overview)
        app.router.add_get("/groups/{gid}", self._group)
        app.router.add_get("/api/overview", self._api_overview)
        app.router.add_get("/api/groups/{gid}", self._api_group)
        app.router.add_get("/events/overview", self._events_overview)
        app.router.add_get("/events/groups/{gid}", self._events_group)
        app.router.add_get("/static/plotly.min.js", self._plotly)
        app.router.add_static("/static/", str(HERE / "static"))
        return app

    async def _overview(self, request):
        from aiohttp import web

        return web.Response(text=self.page("overview.html", events="/events/overview",
                                           fragments=self.overview_fragments()), content_type="text/html")

    async def _group(self, request):
        from aiohttp import web

        gid = request.match_info["gid"]
        return web.Response(text=self.page("group.html", gid=gid, events=f"/events/groups/{gid}",
                                           fragments=self.group_fragments(gid), lag=json.dumps(self.lag_series(gid))),
                            content_type="text/html")

    async def _api_overview(self, request):
        from aiohttp import web

        snap = self.snapshot or {}
        return web.json_response({"time": snap.get("time"), "cluster": snap.get("cluster"),
                                  "groups": snap.get("groups", []), "error": self.error})

    async def _api_group(self, request):
        from aiohttp import web

        gid = request.match_info["gid"]
        model = self.group_model(gid)
        if model["group"] is None:
            return web.json_response({"error": f"group {gid} not known", **model}, status=404)
        return web.json_response({**model, "lag_series": self.lag_series(gid)})

    async def _plotly(self, request):
        from aiohttp import web

        return web.FileResponse(_plotly_js(), headers={"Cache-Control": "max-age=86400"})

    async def _stream(self, request, render):
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        q: asyncio.Queue = asyncio.Queue(maxsize=1)
        self._subscribers.add(q)
        try:
            await resp.write(b"retry: 2000\n\n")
            while True:
                seq = await q.get()
                await resp.write(f"data: {json.dumps({'seq': seq, **render()})}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._subscribers.discard(q)
        return resp

    async def _events_overview(self, request):
        return await self._stream(request, lambda: {"html": self.overview_fragments()})

    async def _events_group(self, request):
        gid = request.match_info["gid"]
        return await self._stream(request, lambda: {"html": self.group_fragments(gid), "lag": self.lag_series(gid)})

    # --- life ------------------------------------------------------------------------------

    async def start(self, listener: str) -> None:
        from aiohttp import web

        host, _, port = listener.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        self._runner = web.AppRunner(self.app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, int(port), shutdown_timeout=0.5)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # port 0: the one the OS chose
        self.url = f"http://{host}:{bound}/"
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.snapshotter.admin.close()


def classic_annotator(broker):
    """What DescribeGroups does not tell, for the classic groups this broker coordinates:
    the generation and the leader (Kafka's GroupMetadata)."""
    def annotate(view: dict) -> None:
        coordinator = broker.coordinator
        shard = coordinator.runtime.shard_for(view["group_id"]) if coordinator is not None else None
        group = shard.classic_groups.get(view["group_id"]) if shard is not None else None
        if group is not None:
            view["generation"] = group.generation
            view["leader"] = group.leader_id
    return annotate


async def start_console(listener: str, broker, interval_s: float = DEFAULT_INTERVAL_S) -> Console | None:
    """The console of a running broker: a client of its own first listener, with the
    inter-broker listener's security (a broker with an authorizer needs its own
    principal among super.users for the console to see everything)."""
    from ..client.admin import AsyncAdmin
    from ..security.interbroker import client_security

    cfg = broker.config
    first = cfg.effective_listeners()[0]
    security = client_security({**cfg.extra, **cfg.listener_props}, first) if first.protocol != "PLAINTEXT" else None
    host, port = first.advertised
    admin = AsyncAdmin(f"{host}:{port}", client_id=f"odradek-console-{cfg.node_id}", security=security)
    console = Console(Snapshotter(admin, classic_annotator(broker)), interval_s,
                      title=f"odradek broker {cfg.node_id}")
    try:
        await console.start(listener)
    except OSError as exc:
        log.warning("console.listener %s: %s; serving without the console", listener, exc)
        await admin.close()
        return None
    return console


async def run_console(bootstrap: str, listener: str, security: dict | None = None,
                      interval_s: float = DEFAULT_INTERVAL_S, ready=None) -> None:
    """`odradek console`: the console for any Kafka cluster, until cancelled."""
    from ..client.admin import AsyncAdmin

    admin = AsyncAdmin(bootstrap, client_id="odradek-console", security=security)
    console = Console(Snapshotter(admin), interval_s, title=f"odradek console: {bootstrap}")
    await console.start(listener)
    print(f"odradek console on {console.url}", flush=True)
    if ready is not None:
        ready(console)
    try:
        await asyncio.Event().wait()
    finally:
        await console.stop()
