"""Elephant flows: few long TCP flows per NIC, each as fast as the links let it (LLM training's
cross-segment traffic), and the time the whole batch takes to arrive.

- ``serve``: accept connections on one port, count each one's bytes until the sender closes, then close.
- ``send``: per peer, a budget of bytes and its connections (source ports given, so each takes the path
  the probed map says). ``hash``: every connection carries an equal share, as an application whose
  connections the hash placed. ``disjoint``: the peer's bytes go in chunks to whichever of its connections
  has the fewest unacknowledged bytes (SIOCOUTQ), HPN's least-loaded sending over disjoint paths.
  A flow is done when the receiver has closed after reading everything (so the time counts delivery).

Every socket runs ``--congestion`` (default cubic; hpnlab.node.programs.tcpcc: set per socket, a refusal exits 1)
and the report says which algorithm the connections ran (``congestion``). ``--dscp`` marks every socket
(hpnlab.node.programs.dscp): give it to both ``send`` and ``serve``, so the receiver's ACKs carry the class too.

Run inside a host namespace: ``python -m hpnlab.node.programs.elephant send|serve ...``; one JSON report.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import selectors
import socket
import struct
import sys
import time

from hpnlab.node.programs import dscp, jobrun, tcpcc
from hpnlab.node.reports import StopFlag, wait_until, write_json

SIOCOUTQ = 0x5411
CHUNK = 64 * 1024
HIGH_WATER = 2 * CHUNK  # keep at most this much unacknowledged per connection (least-loaded needs a choice)


def outq(sock: socket.socket) -> int:
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def serve(bind: str, port: int, duration: float, start_at: float = 0.0, congestion: str = tcpcc.DEFAULT,
          mark: int | None = None) -> dict:
    stop = StopFlag()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ran = {tcpcc.use(ls, congestion)}  # accepted connections inherit it
    dscp.mark(ls, mark)  # and its TOS: the receiver's ACKs carry the sender's class (no reflection in Linux)
    ls.bind((bind, port))
    ls.listen(256)
    ls.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ, None)
    conns: dict[int, dict] = {}
    end = (start_at or time.time()) + duration
    buf = bytearray(1 << 16)
    while not stop.flag and time.time() < end:
        for key, _ev in sel.select(timeout=0.2):
            if key.data is None:
                try:
                    c, (addr, sport) = ls.accept()
                except BlockingIOError:
                    continue
                ran.add(tcpcc.use(c, congestion))  # a check: it has the listener's already
                dscp.mark(c, mark)
                c.setblocking(False)
                rec = {"src": addr, "sport": sport, "bytes": 0, "first": None, "last": None, "closed": None}
                conns[c.fileno()] = rec
                sel.register(c, selectors.EVENT_READ, rec)
                continue
            rec, c = key.data, key.fileobj
            try:
                n = c.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                n = 0
            now = time.time()
            if n:
                rec["bytes"] += n
                rec["first"] = rec["first"] or now
                rec["last"] = now
            else:
                rec["closed"] = now
                sel.unregister(c)
                c.close()
    ls.close()
    return {"kind": "elephant-receiver", "bind": bind, "port": port, "flows": list(conns.values()),
            "congestion": tcpcc.summary(ran), "interrupted": stop.flag, "dscp": mark}


class Flow:
    __slots__ = ("sock", "dst", "sport", "budget", "sent", "done_at", "eof", "error", "peer")

    def __init__(self, dst: str, sport: int, peer: "Peer"):
        self.dst, self.sport, self.peer = dst, sport, peer
        self.sock: socket.socket | None = None
        self.budget = 0  # hash: this connection's own share; disjoint: unused (the peer's budget counts)
        self.sent = 0
        self.done_at: float | None = None
        self.eof = False  # our side shut down
        self.error: str | None = None


class Peer:
    def __init__(self, dst: str, budget: int):
        self.dst, self.budget, self.flows = dst, budget, []


def send(src: str, port: int, flows: list[tuple[str, int]], size: int, select: str, duration: float,
         start_at: float = 0.0, congestion: str = tcpcc.DEFAULT, mark: int | None = None) -> dict:
    """``flows``: (dst, sport) pairs; ``size`` bytes per flow (a peer's budget is size x its flows)."""
    stop = StopFlag()
    peers: dict[str, Peer] = {}
    for dst, sport in flows:
        p = peers.setdefault(dst, Peer(dst, 0))
        p.budget += size
        f = Flow(dst, sport, p)
        f.budget = size
        p.flows.append(f)
    wait_until(start_at)
    t0 = time.time()
    every = [f for p in peers.values() for f in p.flows]
    for f in every:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcpcc.use(s, congestion)
        dscp.mark(s, mark)
        s.bind((src, f.sport))  # the source port decides the path: bound before connect
        s.setblocking(False)
        s.connect_ex((f.dst, port))
        f.sock = s
    payload = memoryview(b"\0" * CHUNK)
    end = t0 + duration
    pending = list(every)
    sel = selectors.DefaultSelector()
    for f in every:
        sel.register(f.sock, selectors.EVENT_READ, f)  # EOF from the receiver = delivered
    while pending and not stop.flag and time.time() < end:
        for p in peers.values():
            live = [f for f in p.flows if not f.eof and f.error is None]
            if select == "disjoint":
                while p.budget > 0 and live:
                    f = min(live, key=lambda x: outq(x.sock))
                    if outq(f.sock) >= HIGH_WATER or not _push(f, payload[:min(CHUNK, p.budget)], stop):
                        break
                    p.budget -= min(CHUNK, p.budget)
                if p.budget <= 0:
                    for f in live:
                        _close(f)
            else:
                for f in live:
                    while f.budget > 0 and outq(f.sock) < HIGH_WATER:
                        n = min(CHUNK, f.budget)
                        if not _push(f, payload[:n], stop):
                            break
                        f.budget -= n
                    if f.budget <= 0:
                        _close(f)
        for key, _ev in sel.select(timeout=0.005):
            f = key.data
            try:
                data = f.sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                f.error = e.strerror or str(e)
                data = b""
            if not data:  # the receiver closed: after our EOF that means delivered
                if not f.eof and f.error is None:
                    f.error = "closed by the receiver before all was sent"
                f.done_at = time.time()
                sel.unregister(f.sock)
                pending.remove(f)
    done = [f.done_at for f in every if f.done_at]
    report = {"kind": "elephant-sender", "src": src, "port": port, "select": select, "size": size, "start": t0,
              "flows": [{"dst": f.dst, "sport": f.sport, "sent": f.sent, "done": f.done_at, "error": f.error}
                        for f in every],
              "complete": not pending, "completion_s": round(max(done) - t0, 4) if not pending and done else None,
              "congestion": tcpcc.summary(tcpcc.of(f.sock) for f in every), "interrupted": stop.flag, "dscp": mark}
    for f in every:
        f.sock.close()
    return report


def _push(f: Flow, data: memoryview, stop: StopFlag) -> bool:
    """Queue ``data`` whole on the connection (blocking briefly if the socket buffer is full). A stop while
    part of it waits for room ends the wait (the bytes already queued count as sent): a connection whose
    peer stopped reading, or whose path is gone, would otherwise hold a stopped sender until TCP gives up."""
    off = 0
    while off < len(data):
        try:
            off += f.sock.send(data[off:])
        except BlockingIOError:
            if off == 0:
                return False
            if stop.flag:
                f.sent += off
                return False
            time.sleep(0.001)
        except OSError as e:
            if e.errno == errno.ENOTCONN:  # still connecting
                if stop.flag:
                    return False
                time.sleep(0.001)
                continue
            f.error = e.strerror or str(e)
            return False
    f.sent += len(data)
    return True


def _close(f: Flow) -> None:
    if not f.eof:
        try:
            f.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        f.eof = True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.elephant", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--src", required=True)
    s.add_argument("--flows", required=True, help="comma-separated DST:SPORT")
    s.add_argument("--size", type=int, required=True, help="bytes per flow")
    s.add_argument("--select", choices=("hash", "disjoint"), default="hash")
    r = sub.add_parser("serve")
    r.add_argument("--bind", required=True)
    for x in (s, r):
        x.add_argument("--port", type=int, default=5300)
        jobrun.add_common_args(x, marks="every socket's packets")
    a = p.parse_args(argv)
    if a.mode == "send":
        flows = [(d, int(sp)) for d, sp in (x.rsplit(":", 1) for x in a.flows.split(","))]
        rep = send(a.src, a.port, flows, a.size, a.select, a.duration, a.start_at, a.congestion, a.dscp)
    else:
        rep = serve(a.bind, a.port, a.duration, a.start_at, a.congestion, a.dscp)
    write_json(rep, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
