"""``hpnlab watch``: a running lab as a live web page. The fabric's picture (hpnlab.generate.picture) with every
link and node coloured by its state, each node's daemons, sessions, LACP members and host /32s, a list of
what changed and when, and, while an experiment runs on the lab, each probe stream's delivery and the
workload's iterations with the fault windows.

One poll a second (hpnlab.lifecycle.fabricstate.Poller, the state `hpnlab status` and verify read) feeds every
open page over server-sent events: the whole state when a page connects, then only what changed. The
experiment's progress comes from the runner's live.jsonl (hpnlab.traffic.run.live). The server is aiohttp;
the page's charts are uPlot, served from the package (hpnlab.web): nothing is fetched from elsewhere."""

from __future__ import annotations

import asyncio
import errno
import json
import signal
import socket
import sys
import time
from collections import deque
from importlib import resources

from hpnlab import web
from hpnlab.lifecycle import orchestrate
from hpnlab.model import topology
from hpnlab.errors import SpecError
from hpnlab.lifecycle.fabricstate import LINK_STATES, Poller
from hpnlab.generate.picture import fabric_svg
from hpnlab.runtime.base import Runtime
from hpnlab.model.spec import parse_spec
from hpnlab.traffic.run import live

PERIOD_S = 1.0
EVENTS_KEPT = 400
LIVE_KEPT = 3600  # a repetition's lines (one a second)
DEFAULT_PORT = 8765


def topology_of(rt: Runtime) -> topology.Topology:
    """The running lab's topology, built again from the spec it was rendered from (its topology.json)."""
    data = json.loads((rt.config_dir / "topology.json").read_text())
    return topology.build(parse_spec(data["spec"], f"{rt.config_dir / 'topology.json'}"))


def page_file(name: str) -> str:
    return resources.files("hpnlab.web").joinpath(name).read_text(encoding="utf-8")


def node_delta(prev: dict | None, cur: dict, key: str) -> dict:
    """Pure: the entries of ``cur[key]`` that differ from ``prev[key]``."""
    old = (prev or {}).get(key, {})
    return {k: v for k, v in cur.get(key, {}).items() if old.get(k) != v}


class Watch:
    """The view's state and its pages' queues; ``tick()`` polls once (in a worker thread)."""

    def __init__(self, lab: str):
        self.lab = lab
        self.rt, self.cfgs = orchestrate.open_lab(lab)
        self.topo = topology_of(self.rt)
        self.poller = Poller(self.rt, self.cfgs, self.topo)
        self.tail = live.Tail(self.rt.state.dir)
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self.live: deque[dict] = deque(maxlen=LIVE_KEPT)
        self.snap: dict | None = None
        self.clients: set[asyncio.Queue] = set()
        self.polls = 0

    def page(self) -> str:
        """The page, whole: the lab's picture inline, the script, the styles and uPlot inlined."""
        info = {"lab": self.lab, "runtime": self.rt.name, "states": list(LINK_STATES), "period_s": PERIOD_S,
                "nodes": {n: c.role for n, c in self.cfgs.items()}}
        html = page_file("watch.html")
        for key, value in (("{{title}}", f"hpnlab watch: {self.lab}"),
                           ("{{uplot_css}}", web.asset("uPlot.min.css")), ("{{css}}", page_file("watch.css")),
                           ("{{svg}}", fabric_svg(self.topo)), ("{{info}}", json.dumps(info).replace("</", "<\\/")),
                           ("{{uplot_js}}", web.asset("uPlot.iife.min.js")), ("{{js}}", page_file("watch.js"))):
            html = html.replace(key, value)
        return html

    def tick(self) -> dict | None:
        """One poll: the message for the pages (None when nothing changed)."""
        self.polls += 1
        cur = self.poller.snapshot()
        events = cur.pop("events")
        lines = self.tail.read()
        for ln in lines:
            if self.live and self.live[-1].get("rep") != ln.get("rep"):
                self.live.clear()  # a new repetition: its own chart
            self.live.append(ln)
        prev, self.snap = self.snap, cur
        self.events.extend(events)
        msg = {"t": cur["t"], "running": cur["running"], "links": node_delta(prev, cur, "links"),
               "nodes": node_delta(prev, cur, "nodes"), "faults": cur["faults"],
               "impairments": cur["impairments"], "events": events, "live": lines}
        return msg

    def full(self) -> dict:
        s = self.snap or {"t": time.time(), "running": True, "links": {}, "nodes": {}, "faults": [],
                          "impairments": {}}
        return {**s, "events": list(self.events), "live": list(self.live), "full": True}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            msg = await loop.run_in_executor(None, self.tick)
            data = json.dumps(msg)
            for q in list(self.clients):
                if q.qsize() < 30:  # a page that stopped reading is not fed without end
                    q.put_nowait(data)
            next_at = max(next_at + PERIOD_S, loop.time())
            await asyncio.sleep(next_at - loop.time())

    def close(self) -> None:
        self.poller.close()


def make_app(w: Watch):
    from aiohttp import web as aw

    async def index(_req):
        return aw.Response(text=w.page(), content_type="text/html")

    async def state(_req):
        return aw.json_response(w.full())

    async def stream(req):
        resp = aw.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})
        await resp.prepare(req)
        q: asyncio.Queue = asyncio.Queue()
        w.clients.add(q)
        try:
            await resp.write(f"data: {json.dumps(w.full())}\n\n".encode())
            while True:
                try:
                    data = await asyncio.wait_for(q.get(), timeout=15)
                    await resp.write(f"data: {data}\n\n".encode())
                except asyncio.TimeoutError:
                    await resp.write(b": keep-alive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            w.clients.discard(q)
        return resp

    async def start(app):
        app["poll"] = asyncio.get_running_loop().create_task(w.run())

    async def stop(app):
        app["poll"].cancel()
        w.close()

    app = aw.Application()
    app.router.add_get("/", index)
    app.router.add_get("/state", state)
    app.router.add_get("/events", stream)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


def check_bind(bind: str, port: int) -> None:
    """One line naming the flag if the address cannot be listened on (before anything starts)."""
    if not 0 <= port <= 65535:
        raise SpecError(f"--port: {port} is not a port; give 1-65535 (0: any free port)")
    try:
        infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise SpecError(f"--bind: '{bind}' is not an address of this machine; give e.g. 127.0.0.1") from None
    fam, _t, _p, _c, addr = infos[0]
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
    except OSError as e:
        if e.errno == errno.EADDRNOTAVAIL:
            raise SpecError(f"--bind: {bind} is not an address of this machine; give one of its own, "
                            f"e.g. 127.0.0.1") from None
        raise SpecError(f"--port {port} on {bind}: {e.strerror}; choose another with --port (0: any free one)") from None
    finally:
        s.close()


def serve(lab: str, bind: str = "127.0.0.1", port: int = DEFAULT_PORT, ready=None) -> None:
    """Serve the view until Ctrl-C (or SIGTERM). ``ready(url)`` is called once it listens."""
    from aiohttp import web as aw

    check_bind(bind, port)
    w = Watch(lab)

    async def main() -> None:
        runner = aw.AppRunner(make_app(w), access_log=None)
        task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await runner.setup()
        site = aw.TCPSite(runner, bind, port, shutdown_timeout=1.0)
        await site.start()
        host, real = site._server.sockets[0].getsockname()[:2]  # port 0: the one the kernel gave
        url = f"http://{host if ':' not in host else f'[{host}]'}:{real}/"
        (ready or (lambda u: print(f"watching lab '{lab}' at {u} (Ctrl-C to stop)", file=sys.stderr,
                                   flush=True)))(url)
        try:
            while True:
                await asyncio.sleep(3600)
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass

