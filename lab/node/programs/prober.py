"""The black-box prober's node side, one process per host (``python -m hpnlab.node.programs.prober``): it sends
its share of the probe paths (one UDP socket per path, bound to the source port that picks it) at a
fixed rate per path, answers nothing, and counts the probes it receives from the other hosts' paths.

Every ``--interval`` it appends one JSON line to ``--out``: the probes sent and received since the last
line, per path id and per send-time bucket of ``--bucket`` seconds ({"t", "sent": {id: {bucket: n}},
"recv": {id: {bucket: n}}, "cpu_s"}). The controller (hpnlab.traffic.run.prober) sums every host's lines, so a
path's loss in a bucket is its sender's count minus its receiver's, once the bucket is old enough for
every probe of it to have arrived. Clocks: every namespace of one machine shares time.time().
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import time

from hpnlab.node.inet import receive_buffer
from hpnlab.node.reports import StopFlag

HEADER = struct.Struct("!4sIId")  # magic, path id, seq, send time (s since the epoch)
MAGIC = b"HPNG"
SIZE = 64


def _bucket(t: float, width: float) -> str:
    return str(int(t // width))


def run(paths: list[dict], listen: list[str], port: int, rate: float, out: str, interval: float,
        bucket: float, duration: float) -> None:
    stop = StopFlag()
    socks = []
    for p in paths:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((p["src_ip"], p["sport"]))
        s.setblocking(False)
        socks.append((p, s))
    rx = []
    for ip in listen:
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # a busy machine may not run us for a while: the probes wait in a large buffer, not lost to us
        receive_buffer(r, 4 << 20)
        r.bind((ip, port))
        r.setblocking(False)
        rx.append(r)
    sent: dict[str, dict[str, int]] = {}
    recv: dict[str, dict[str, int]] = {}
    unreach: dict[str, int] = {}
    seq = 0
    t0 = time.time()
    step = 1.0 / (rate * max(1, len(socks))) if socks else interval  # round-robin over the paths
    due = t0
    flush = t0 + interval
    end = t0 + duration if duration > 0 else float("inf")
    with open(out, "a", buffering=1) as fh:
        while not stop.flag and time.time() < end:
            now = time.time()
            # send what is due (late probes go out late, never skipped: a lost one must be the network's)
            while socks and due <= now:
                p, s = socks[seq % len(socks)]
                try:
                    s.sendto(HEADER.pack(MAGIC, p["id"], seq, now).ljust(SIZE, b"\0"), (p["dst_ip"], port))
                    b = sent.setdefault(str(p["id"]), {})
                    k = _bucket(now, bucket)
                    b[k] = b.get(k, 0) + 1
                except BlockingIOError:
                    pass  # a full socket buffer here is ours, not the network's: not counted as sent
                except OSError:
                    # no route (an agg whose only link to a ToR was isolated): not sent, and the prober goes on
                    unreach[str(p["id"])] = unreach.get(str(p["id"]), 0) + 1
                seq += 1
                due += step
            ready, _, _ = select.select(rx, [], [], max(0.0, min(due, flush) - time.time()))
            for r in ready:
                while True:
                    try:
                        data = r.recv(256)
                    except BlockingIOError:
                        break
                    if len(data) >= HEADER.size and data[:4] == MAGIC:
                        _m, pid, _seq, tx = HEADER.unpack_from(data)
                        b = recv.setdefault(str(pid), {})
                        k = _bucket(tx, bucket)
                        b[k] = b.get(k, 0) + 1
            if time.time() >= flush:
                _line(fh, sent, recv, unreach)
                sent, recv, unreach = {}, {}, {}
                flush += interval
        _line(fh, sent, recv, unreach)  # stopped: what the last interval counted


def _line(fh, sent: dict, recv: dict, unreach: dict) -> None:
    cpu = os.times()
    fh.write(json.dumps({"t": round(time.time(), 3), "sent": sent, "recv": recv, "unreachable": unreach,
                         "cpu_s": round(cpu.user + cpu.system, 3)}) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hpnlab.node.programs.prober")
    ap.add_argument("--paths", required=True, help="JSON file: [{id, src_ip, sport, dst_ip}] this host sends")
    ap.add_argument("--listen", required=True, help="comma-separated addresses of this host to receive on")
    ap.add_argument("--port", type=int, default=9450)
    ap.add_argument("--rate", type=float, default=100.0, help="probes per second per path")
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--bucket", type=float, default=0.5)
    ap.add_argument("--duration", type=float, default=0.0, help="seconds; 0: until SIGTERM")
    a = ap.parse_args(argv)
    with open(a.paths) as fh:
        paths = json.load(fh)
    run(paths, [x for x in a.listen.split(",") if x], a.port, a.rate, a.out, a.interval, a.bucket, a.duration)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
