"""Per-port counters and queue backlog over time, sampled inside a router namespace.

One rtnetlink dump of the root qdiscs (RTM_GETQDISC) per sample gives, for every interface, the bytes
and packets the qdisc sent, its drops, and its backlog in bytes: the queue a switch port would hold
(the tbf of a shaped link). Interfaces without a qdisc of their own fall back to their byte counter.
On a switch port with priority queues (spec qos, hpnlab.node.qos) the same dump gives each queue's bfifo:
its bytes, drops and backlog are sampled too (``queues``, by queue number; queue 0 is served first).
Run as ``python -m hpnlab.node.linkstats --ifaces a,b --interval 0.1 --duration D --out F``.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time

from hpnlab.node.qos import queue_of_handle
from hpnlab.node.reports import StopFlag, write_json

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
TC_H_ROOT = 0xFFFFFFFF
TCMSG = struct.Struct("BxxxiIII")


def _attrs(buf: bytes, off: int = 0):
    while off + 4 <= len(buf):
        ln, typ = struct.unpack_from("HH", buf, off)
        if ln < 4:
            return
        yield typ & 0x3FFF, buf[off + 4:off + ln]
        off += (ln + 3) & ~3


def parse_qdisc(payload: bytes) -> tuple[int, dict] | None:
    """(ifindex, {kind, bytes, packets, drops, backlog, qlen, queue}) of a root qdisc message (queue None) or
    of a qos queue's leaf (queue: its number); None otherwise."""
    _fam, ifindex, handle, parent, _info = TCMSG.unpack_from(payload)
    queue = None if parent == TC_H_ROOT else queue_of_handle(handle >> 16)
    if parent != TC_H_ROOT and queue is None:
        return None
    out = {"kind": "", "bytes": 0, "packets": 0, "drops": 0, "backlog": 0, "qlen": 0, "queue": queue}
    for typ, val in _attrs(payload, TCMSG.size):
        if typ == TCA_KIND:
            out["kind"] = val.rstrip(b"\0").decode()
        elif typ == TCA_STATS2:
            for st, sv in _attrs(val):
                if st == TCA_STATS_BASIC and len(sv) >= 12:
                    out["bytes"], out["packets"] = struct.unpack_from("QI", sv)
                elif st == TCA_STATS_QUEUE and len(sv) >= 20:
                    out["qlen"], out["backlog"], out["drops"], _rq, _ov = struct.unpack_from("IIIII", sv)
    if queue is not None and out["kind"] != "bfifo":
        return None  # a queue's leaf is a bfifo (hpnlab.node.qos); another qdisc with such a handle is not ours
    return ifindex, out


def dump(sock: socket.socket, seq: int) -> dict[int, dict]:
    req = struct.pack("IHHII", 16 + TCMSG.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + \
        TCMSG.pack(0, 0, 0, 0, 0)
    sock.send(req)
    out: dict[int, dict] = {}
    queues: dict[int, dict[int, dict]] = {}  # ifindex -> queue -> its leaf (a dump may list it before the root)
    while True:
        data = sock.recv(1 << 16)
        off = 0
        while off + 16 <= len(data):
            ln, typ, _fl, _seq, _pid = struct.unpack_from("IHHII", data, off)
            if ln < 16 or typ == NLMSG_DONE or typ == NLMSG_ERROR:
                for i, qs in queues.items():
                    if i in out:
                        out[i]["queues"] = qs
                return out
            if typ == RTM_NEWQDISC:
                got = parse_qdisc(data[off + 16:off + ln])
                if got and got[1]["queue"] is None:
                    out[got[0]] = got[1]
                elif got:
                    queues.setdefault(got[0], {})[got[1]["queue"]] = got[1]
            off += (ln + 3) & ~3


def tx_bytes(iface: str) -> int:
    try:
        with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def sample(ifaces: list[str], interval: float, duration: float, start_at: float = 0.0) -> dict:
    stop = StopFlag()
    idx = {name: i for i, name in socket.if_nameindex()}
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    sock.bind((0, 0))
    series = {n: {"bytes": [], "backlog": [], "drops": []} for n in ifaces}
    times: list[float] = []
    if start_at:
        while time.time() < start_at - interval and not stop.flag:
            time.sleep(min(0.2, start_at - time.time()))
    end = time.time() + duration
    seq = 0
    nxt = time.monotonic()
    while not stop.flag and time.time() < end:
        seq += 1
        q = dump(sock, seq)
        times.append(round(time.time(), 4))
        for n in ifaces:
            s = q.get(idx.get(n, -1))
            series[n]["bytes"].append(s["bytes"] if s and s["kind"] not in ("noqueue", "") else tx_bytes(n))
            series[n]["backlog"].append(s["backlog"] if s else 0)
            series[n]["drops"].append(s["drops"] if s else 0)
            for k, leaf in sorted((s or {}).get("queues", {}).items()):
                qs = series[n].setdefault("queues", {}).setdefault(str(k), {"bytes": [], "backlog": [], "drops": []})
                pad = len(times) - 1 - len(qs["bytes"])  # a queue first seen late: zeros before it
                for key in ("bytes", "backlog", "drops"):
                    qs[key] += [0] * pad + [leaf[key]]
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))
    sock.close()
    return {"kind": "linkstats", "interval": interval, "t": times, "ifaces": series}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.linkstats", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ifaces", required=True, help="comma-separated interfaces")
    p.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--start-at", type=float, default=0.0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    rep = sample(a.ifaces.split(","), a.interval, a.duration, a.start_at)
    write_json(rep, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
