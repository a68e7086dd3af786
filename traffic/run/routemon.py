"""Route monitor: the routers' own timestamps of each route change, to set beside the measured gap.

Where a router's network namespace is reachable from this machine (``/run/netns/<name>``: the netns
runtime's namespaces, and the names containerlab gives its containers' namespaces), one watcher process
opens a netlink socket inside each router's namespace, reads them all in one loop, and decodes the
messages with pyroute2: one process, not one per router (136 ``ip monitor`` processes on the paper's
segment). Elsewhere (c9s: the nodes run in a cluster) ``ip -ts -o monitor route`` runs inside each
node. Either way each router's events land in its own file, stamped with the wall clock (the clock the
probes use) as they are read; ``parse`` reads both formats, so raw results recorded before still
re-analyse.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from hpnlab.errors import RuntimeFailure
from hpnlab.node import rtnl
from hpnlab.node.inet import receive_buffer
from hpnlab.runtime.base import Runtime

NETNS_DIR = Path("/run/netns")
RTMGRP_IPV4_ROUTE = 0x40
CLONE_NEWNET = 0x40000000
RT_TABLE_LOCAL = 255
LINE = re.compile(r"^\[(?P<ts>[0-9T:.\-]+)\]\s+(?P<del>Deleted\s+)?(?P<type>blackhole\s+|unreachable\s+)?(?P<dst>[0-9./]+)\s(?P<rest>.*)$")


def start(rt: Runtime, node: str, out: Path) -> subprocess.Popen:
    """``ip monitor`` inside one node (runtimes whose namespaces this machine cannot enter)."""
    f = open(out, "w")
    try:
        return subprocess.Popen(rt.exec_argv(node, ["ip", "-ts", "-o", "monitor", "route"]), stdout=f,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        f.close()


def event_lines(ts: float, data: bytes, ifnames: dict[int, str], rtmsg) -> list[str]:
    """The IPv4 route changes in one read from a route socket, as JSON lines (``rtmsg``: pyroute2's
    decoder, passed in so that its import is paid before watching starts)."""
    out, off = [], 0
    while off + 16 <= len(data):
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if mtype in (rtnl.RTM_NEWROUTE, rtnl.RTM_DELROUTE):
            msg = rtmsg(data[off:off + length])
            msg.decode()
            if msg["family"] == socket.AF_INET:
                dst = msg.get_attr("RTA_DST") or "0.0.0.0"
                devs = [msg.get_attr("RTA_OIF")] + [nh.get("oif") for nh in msg.get_attr("RTA_MULTIPATH") or []]
                out.append(json.dumps({"ts": ts, "event": "del" if mtype == rtnl.RTM_DELROUTE else "add",
                                       "prefix": f"{dst}/{msg['dst_len']}",
                                       "table": msg.get_attr("RTA_TABLE") or msg["table"], "type": msg["type"],
                                       "via": " ".join(ifnames.get(i, str(i)) for i in devs if i)}))
        off += (length + 3) & ~3
    return out


def netns_socket(name: str) -> socket.socket:
    """A NETLINK_ROUTE socket that lives in namespace ``/run/netns/<name>``: made by a short-lived thread
    that enters the namespace (setns moves only the calling thread), so nothing forks. (pyroute2's own
    netns sockets fork a copy of this process, which inherits the experiment's signal handlers: a
    SIGTERM to that copy ran the experiment's rollback in it and took the lab down.)"""
    box: dict = {}

    def enter_and_open() -> None:
        try:
            fd = os.open(NETNS_DIR / name, os.O_RDONLY)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {name}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["sock"] = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=enter_and_open, name=f"netns-{name}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["sock"]


class Watcher:
    """Route sockets inside many routers' namespaces, all read by one loop (``run``)."""

    def __init__(self) -> None:
        # imported here, before any socket is read: imported at the first route change, it stamped the
        # changes after it ~170 ms late (ip monitor beside it: 9 ms)
        from pyroute2.netlink.rtnl.rtmsg import rtmsg

        self._rtmsg = rtmsg
        self._socks: dict[int, tuple] = {}  # fd -> (socket, file, ifindex -> name)

    def add(self, netns: str, out: Path) -> None:
        sock = netns_socket(netns)
        try:
            # a ToR of the paper's segment gets ~900 route messages of 60 nexthops each in one burst;
            receive_buffer(sock, 1 << 22)
            sock.bind((0, RTMGRP_IPV4_ROUTE))
            sock.setblocking(False)
            # ifindexes are lab-wide unique and a failed link keeps its own, so the names are read once
            with netns_socket(netns) as dumper:
                names = rtnl.link_names(dumper)
            f = open(out, "w")
        except BaseException:
            sock.close()
            raise
        self._socks[sock.fileno()] = (sock, f, names)

    def run(self) -> None:
        while self._socks:
            ready, _, _ = select.select(list(self._socks), [], [])
            ts = time.time()  # when the kernel's messages were there to read, before any parsing
            for fd in ready:
                sock, f, names = self._socks[fd]
                try:
                    data = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:  # ENOBUFS: the kernel dropped messages; say so in the file
                    f.write(json.dumps({"ts": ts, "overrun": True}) + "\n")
                    continue
                for line in event_lines(ts, data, names, self._rtmsg):
                    f.write(line + "\n")
                f.flush()

    def close(self) -> None:
        for sock, f, _names in self._socks.values():
            f.close()
            sock.close()
        self._socks.clear()


def watch(rt: Runtime, nodes: list[str], out_dir: Path, ready_s: float = 30.0) -> list[tuple[str, subprocess.Popen]]:
    """Start watching ``nodes``: routes-<node>.log in ``out_dir`` each. One watcher process for every node
    whose namespace this machine can enter (``python -m hpnlab.traffic.run.routemon``, returned under the name
    'route-watcher'), ``ip monitor`` inside each other node. Returns when every socket is bound. A process
    of its own, so that the experiment's own work (spawning, reading reports) never delays a stamp."""
    procs: list[tuple[str, subprocess.Popen]] = []
    try:
        pairs = []
        for n in nodes:
            out = out_dir / f"routes-{n}.log"
            if (NETNS_DIR / rt.netns(n)).exists():
                pairs.append(f"{rt.netns(n)}={out}")
            else:
                procs.append((n, start(rt, n, out)))
        if pairs:
            p = subprocess.Popen([sys.executable, "-m", "hpnlab.traffic.run.routemon", *pairs], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True, text=True)
            procs.append(("route-watcher", p))
            ready, _, _ = select.select([p.stdout], [], [], ready_s)
            line = p.stdout.readline().strip() if ready else ""
            if line != "ready":
                p.kill()
                err = (p.communicate(timeout=5)[1] or "").strip().splitlines()[-1:]
                raise RuntimeFailure(f"route watcher did not start: {err or 'no answer in %g s' % ready_s}")
            p.stdout.close()  # it only ever says 'ready'; an error after that ends it, and the run's figures show it
            p.stderr.close()
    except BaseException:
        for _n, p in procs:
            p.kill()
            p.wait()
        raise
    return procs


def main(argv: list[str] | None = None) -> int:
    """``python -m hpnlab.traffic.run.routemon NETNS=FILE...``: watch until SIGTERM; prints 'ready' once bound."""
    args = sys.argv[1:] if argv is None else argv
    w = Watcher()

    def stop(_sig, _frm):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        for pair in args:
            netns, _, out = pair.partition("=")
            w.add(netns, Path(out))
        print("ready", flush=True)
        w.run()
    finally:
        w.close()
    return 0


def parse(text: str, node: str, prefixes: set[str] | None = None) -> list[dict]:
    """Route add/delete events for the given prefixes, from the watcher's JSON lines or ``ip monitor``'s
    text (host /32s written without the /32 by ip); the local table is left out."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("table") == RT_TABLE_LOCAL or "prefix" not in d:
                continue
            ev = {"ts": d["ts"], "prefix": d["prefix"], "event": d["event"], "via": d.get("via", "")}
        else:
            m = LINE.match(line)
            if not m or "table local" in m["rest"]:
                continue
            ev = {"ts": datetime.fromisoformat(m["ts"]).timestamp(),
                  "prefix": m["dst"] if "/" in m["dst"] else f"{m['dst']}/32", "event": "del" if m["del"] else "add",
                  "via": " ".join(re.findall(r"dev (\S+)", m["rest"]))}
        if prefixes is not None and ev["prefix"] not in prefixes:
            continue
        events.append({"ts": ev["ts"], "node": node, "prefix": ev["prefix"], "event": ev["event"], "via": ev["via"]})
    return events


if __name__ == "__main__":
    raise SystemExit(main())
