"""Sequence-numbered UDP probes: the sonic-mgmt dual-ToR way of measuring a disruption.

A sender runs many flows (one UDP socket per source port, so every ECMP path is covered) at a fixed
rate per flow; each packet carries (flow, seq, send time). The receiver records per flow every gap,
duplicate and reordering with the send times around it, each late packet's reorder distance (how many
sequence numbers below the flow's highest so far it arrived), and a 10 ms delivery histogram for plots.
Both run inside host namespaces (``python -m hpnlab.node.programs.probe send|recv ...``) and write one JSON report.
Clocks: time.time_ns() is the same clock in every namespace of one machine, so sender, receiver and
the route monitor's timestamps compare directly.
"""

from __future__ import annotations

import argparse
import errno
import socket
import struct
import sys
import time

from hpnlab.node.inet import receive_buffer
from hpnlab.node.lateness import LateBins
from hpnlab.node.reports import Live, StopFlag, wait_until, write_json

MAGIC = b"HPNP"
HEADER = struct.Struct("!4sIIQ")  # magic, flow, seq, tx time (ns since the epoch)
BIN_MS = 10


def encode(flow: int, seq: int, tx_ns: int, size: int = 64) -> bytes:
    return HEADER.pack(MAGIC, flow, seq, tx_ns).ljust(size, b"\0")


def decode(data: bytes) -> tuple[int, int, int] | None:
    if len(data) < HEADER.size or data[:4] != MAGIC:
        return None
    _, flow, seq, tx = HEADER.unpack_from(data)
    return flow, seq, tx


# --- sender --------------------------------------------------------------------------------------------
LATE_GRACE_S = 1.0


def send(src: str, dst: str, dport: int, flows: int, rate: float, duration: float, sport_base: int,
         size: int = 64, start_at: float = 0.0, live: Live | None = None) -> dict:
    """Send ``flows`` x ``rate`` packets/s round-robin on an absolute schedule (no drift); if the CPU
    falls behind, packets go out late rather than being skipped, and the lag is reported. Never past
    ``duration`` + LATE_GRACE_S: the receivers listen 1.5 s longer than the senders' window, so a packet
    sent later could only count as lost; what was still due then is reported as ``unsent`` instead (a
    machine that far behind is flagged by the lateness meter anyway). Measured: under an emulated CPU
    (QEMU TCG) a sender ran 19 s past its 9 s window and the experiment's wait for it gave up. ``live``: the
    count sent so far, for the live view (at most once a second)."""
    stop = StopFlag()
    socks = []
    for i in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((src, sport_base + i))
        s.setblocking(False)
        socks.append(s)
    wait_until(start_at)
    total_rate = flows * rate
    n_total = int(duration * total_rate)
    seq = [0] * flows
    errors = [0] * flows
    max_lag = 0.0
    late = LateBins()  # how late each send was against its schedule, per 100 ms (the emulator's lateness)
    t0m = time.monotonic()
    t0 = time.time()
    k = 0
    dst_addr = (dst, dport)
    cutoff = t0m + duration + LATE_GRACE_S
    while k < n_total and not stop.flag:
        due = t0m + k / total_rate
        now = time.monotonic()
        if now > cutoff:
            break
        if due - now > 0.0005:
            time.sleep(due - now)
            now = time.monotonic()
        lag = now - due
        max_lag = max(max_lag, lag)
        late.record(t0 + (due - t0m), lag)
        f = k % flows
        try:
            socks[f].sendto(encode(f, seq[f], time.time_ns(), size), dst_addr)
        except OSError as e:  # no route (e.g. single-ToR host with its link down): the packet is lost here
            if e.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EINVAL, errno.ENOBUFS,
                               errno.EAGAIN, errno.EPERM):
                raise
            errors[f] += 1
        seq[f] += 1
        k += 1
        if live is not None:
            live.tick(k)
    elapsed = time.monotonic() - t0m
    for s in socks:
        s.close()
    return {"kind": "sender", "src": src, "dst": dst, "dport": dport, "sport_base": sport_base,
            "flows": flows, "rate_per_flow": rate, "requested_pps": total_rate, "start": t0,
            "end": t0 + elapsed, "sent": seq, "send_errors": errors, "sent_total": sum(seq),
            "achieved_pps": round(sum(seq) / elapsed, 1) if elapsed > 0 else 0.0,
            "max_lag_ms": round(max_lag * 1000, 2), "late": late.report(), "interrupted": stop.flag,
            "unsent": n_total - k if not stop.flag else 0}


# --- receiver ------------------------------------------------------------------------------------------
class FlowRx:
    __slots__ = ("seen", "max_seq", "last_tx", "last_rx", "received", "dups", "reordered", "late", "gaps")

    def __init__(self) -> None:
        self.seen = bytearray()
        self.max_seq = -1
        self.last_tx = 0
        self.last_rx = 0
        self.received = 0
        self.dups = 0
        self.reordered = 0
        self.late: dict[int, int] = {}  # reorder distance -> packets: how many sequence numbers behind the highest
        self.gaps: list[list[int]] = []  # [after_seq, before_seq, tx_from_ns, tx_to_ns, rx_from_ns, rx_to_ns]

    def add(self, seq: int, tx: int, rx: int) -> None:
        if seq >= len(self.seen):
            self.seen.extend(b"\0" * max(seq + 1 - len(self.seen), 4096))
        if self.seen[seq]:
            self.dups += 1
            return
        self.seen[seq] = 1
        self.received += 1
        if seq < self.max_seq:
            self.reordered += 1
            d = self.max_seq - seq  # a later packet of the flow overtook this one by d sequence numbers
            self.late[d] = self.late.get(d, 0) + 1
            return
        if seq > self.max_seq + 1 and self.max_seq >= 0:
            self.gaps.append([self.max_seq, seq, self.last_tx, tx, self.last_rx, rx])
        elif seq > 0 and self.max_seq < 0:  # the first packets never arrived
            self.gaps.append([-1, seq, 0, tx, 0, rx])
        self.max_seq, self.last_tx, self.last_rx = seq, tx, rx

    def final_gaps(self) -> list[list[int]]:
        """Every gap with a 7th value: how many of its packets never arrived. 0: all of them came late, overtaken
        by the packet that opened the gap (spraying does this): reordering, not loss."""
        return [g + [sum(1 for q in range(g[0] + 1, g[1]) if not self.seen[q])] for g in self.gaps]


def receive(bind: str, port: int, duration: float, start_at: float = 0.0, live: Live | None = None) -> dict:
    """``live``: the count of packets received so far, for the live view (at most once a second)."""
    stop = StopFlag()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receive_buffer(s, 8 << 20)
    s.bind((bind, port))
    s.settimeout(0.2)
    flows: dict[tuple[str, int], FlowRx] = {}
    bins: dict[str, dict[int, int]] = {}
    buf = bytearray(2048)
    end = (start_at or time.time()) + duration
    t_first = None
    received = 0
    while not stop.flag and time.time() < end:
        if live is not None:
            live.tick(received)
        try:
            n, (addr, sport) = s.recvfrom_into(buf)
        except socket.timeout:
            continue
        rx = time.time_ns()
        d = decode(bytes(buf[:HEADER.size])) if n >= HEADER.size else None
        if d is None:
            continue
        flow, seq, tx = d
        key = (addr, flow)
        fr = flows.get(key)
        if fr is None:
            fr = flows[key] = FlowRx()
        fr.add(seq, tx, rx)
        received += 1
        b = bins.setdefault(addr, {})
        k = rx // (BIN_MS * 1_000_000)
        b[k] = b.get(k, 0) + 1
        t_first = t_first or rx
    s.close()
    return {"kind": "receiver", "bind": bind, "port": port, "bin_ms": BIN_MS,
            "flows": [{"src": a, "flow": f, "received": fr.received, "max_seq": fr.max_seq, "dups": fr.dups,
                       "reordered": fr.reordered, "reorder_distances": sorted(fr.late.items()),
                       "last_tx": fr.last_tx, "gaps": fr.final_gaps()}
                      for (a, f), fr in sorted(flows.items())],
            "bins": {a: sorted(b.items()) for a, b in bins.items()}, "interrupted": stop.flag}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--src", required=True)
    s.add_argument("--dst", required=True)
    s.add_argument("--dport", type=int, required=True)
    s.add_argument("--flows", type=int, default=16)
    s.add_argument("--rate", type=float, default=200.0, help="packets/s per flow")
    s.add_argument("--sport-base", type=int, default=20000)
    s.add_argument("--size", type=int, default=64)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    for x in (s, r):
        x.add_argument("--duration", type=float, required=True)
        x.add_argument("--start-at", type=float, default=0.0, help="epoch seconds to start at")
        x.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.mode == "send":
        rep = send(a.src, a.dst, a.dport, a.flows, a.rate, a.duration, a.sport_base, a.size, a.start_at,
                   Live(a.out))
    else:
        rep = receive(a.bind, a.port, a.duration, a.start_at, Live(a.out))
    write_json(rep, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
