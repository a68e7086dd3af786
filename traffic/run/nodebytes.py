"""The bytes a failed router's peers forward before and during its fault: the load a fault moves onto the
survivors (paper §6.1: lose one of 60 aggs in a plane and the other 59 carry its share).

A router's peers are the routers of its tier and plane (an agg's: every agg of its plane; under a Clos
tier 2 every agg is in the one plane). What a node forwards is the sum of its interfaces' transmitted
bytes (``IFLA_STATS64`` of one ``RTM_GETLINK`` dump through a netlink socket opened in its namespace by a
controller thread): a packet an agg routes leaves it once, and its own BGP/BFD packets are bytes per
second beside the traffic.

The counters are read only at four moments per fault (the edges of the second before it and of the second
before its repair), not sampled throughout: on the paper's segment a plane is 60 aggs, and a steady
sampler would cost the controller CPU the fault's own figures are timed with. ``load`` (pure, unit-tested)
turns the readings into the fault's figures; docs/results.md defines them.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from hpnlab.node import nsenter, rtnl

IFLA_STATS64 = 23
TX_BYTES_OFF = 24  # rtnl_link_stats64: rx_packets, tx_packets, rx_bytes, tx_bytes (u64 each)
WINDOW_S = 1.0  # each window's length
EDGE_S = 0.05  # a window ends this long before the fault or its repair (IN_FLIGHT_S: not yet the fault's)
TIERS = ("agg", "core")  # routers whose peers share their load by ECMP


def peers_of(cfgs: dict, node: str) -> list[str]:
    """The routers that share ``node``'s load: its tier's other routers in its plane (empty for a host, a
    ToR, whose load has nowhere equal to go, or a node the lab lacks)."""
    c = cfgs.get(node)
    if c is None or c.role not in TIERS:
        return []
    # A plane's aggs (and cores) share one ASN, the lab's way of saying which plane they are in.
    return sorted(n for n, o in cfgs.items() if n != node and o.role == c.role and o.asn == c.asn)


def windows(at: float, until: float | None, end: float) -> dict[str, tuple[float, float]]:
    """The two windows of a fault at ``at`` repaired at ``until`` (None: at the run's ``end``), in seconds
    into the run: ``before`` the fault, and ``during`` it, the last second before its repair (the fabric
    has converged by then, where it ever does)."""
    stop = end if until is None else until
    return {"before": (at - EDGE_S - WINDOW_S, at - EDGE_S), "during": (stop - EDGE_S - WINDOW_S, stop - EDGE_S)}


def tx_bytes(msgs: list[tuple[int, bytes]]) -> int:
    """Sum of every interface's transmitted bytes but the loopback's, from one RTM_GETLINK dump."""
    total = 0
    for mtype, payload in msgs:
        if mtype != rtnl.RTM_NEWLINK or len(payload) < 16:
            continue
        name, stats = None, None
        for atype, value in rtnl.rtattrs(payload, 16):
            if atype == rtnl.IFLA_IFNAME:
                name = value.split(b"\0", 1)[0].decode()
            elif atype == IFLA_STATS64 and len(value) >= TX_BYTES_OFF + 8:
                stats = struct.unpack_from("=Q", value, TX_BYTES_OFF)[0]
        if name != "lo" and stats is not None:
            total += stats
    return total


class Reader:
    """Reads the nodes' counters at planned moments on a thread of its own; ``readings`` holds, per moment
    (fault key, window, edge), each node's (time, bytes). Only where the controller can enter the nodes'
    namespaces (netns, containerlab); elsewhere it reads nothing."""

    def __init__(self, rt, moments: list[tuple[float, str, str, int]], nodes: list[str]):
        self.moments = sorted(moments)  # (epoch time, fault key, window, edge)
        self.socks: dict[str, socket.socket] = {}
        for n in nodes:
            path = rt.netns_path(n)
            if path is not None:
                self.socks[n] = nsenter.netlink_socket(path)
        self.readings: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Reader":
        if self.socks and self.moments:
            self._thread.start()
        return self

    def _run(self) -> None:
        body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)
        for at, key, window, edge in self.moments:
            if self._stop.wait(max(0.0, at - time.time())):
                return
            got = {}
            for n, s in self.socks.items():
                try:
                    got[n] = [round(time.time(), 4), tx_bytes(rtnl.dump(rtnl.RTM_GETLINK, body, s))]
                except OSError:  # a node being torn down: no reading, not a wrong one
                    continue
            self.readings.append({"fault": key, "window": window, "edge": edge, "nodes": got})

    def stop(self) -> dict:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for s in self.socks.values():
            s.close()
        return {"window_s": WINDOW_S, "readings": self.readings}


def fault_key(label: str, at: float) -> str:
    return f"{label}@{at:g}"


def plan_moments(faults: list, cfgs: dict, t0: float, duration: float) -> tuple[list[tuple[float, str, str, int]], list[str]]:
    """(the moments to read, the nodes to read) for every fault whose node has peers (``faults``: the
    plan's, with ``label``, ``node``, ``at`` and ``until``)."""
    moments: list[tuple[float, str, str, int]] = []
    nodes: set[str] = set()
    for f in faults:
        peers = peers_of(cfgs, f.node)
        if not peers:
            continue
        nodes |= {f.node, *peers}
        for window, (a, b) in windows(f.at, f.until, duration).items():
            moments += [(t0 + a, fault_key(f.label, f.at), window, 0), (t0 + b, fault_key(f.label, f.at), window, 1)]
    return moments, sorted(nodes)


def rate(readings: list[dict], key: str, window: str, node: str) -> float | None:
    """Bytes/s ``node`` sent over one window of a fault, from the readings at its two edges."""
    edges = {r["edge"]: r["nodes"].get(node) for r in readings if r["fault"] == key and r["window"] == window}
    a, b = edges.get(0), edges.get(1)
    if not a or not b or b[0] <= a[0]:
        return None
    return max(0.0, (b[1] - a[1]) / (b[0] - a[0]))


def load(readings: list[dict], key: str, node: str, peers: list[str]) -> dict | None:
    """The fault's load figures (docs/results.md): the failed node's and each survivor's bytes/s before
    the fault and during it, the survivors' mean, their ratio (%), and each survivor's share (%) of what
    the node and its peers sent together; None without readings of both windows."""
    def rates(window: str) -> dict[str, float]:
        out = {}
        for n in [node, *peers]:
            r = rate(readings, key, window, n)
            if r is not None:
                out[n] = r
        return out

    before, during = rates("before"), rates("during")
    surv = [p for p in peers if p in before and p in during]
    if not surv or node not in before:
        return None

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    sb, sd = mean([before[p] for p in surv]), mean([during[p] for p in surv])
    tot_b, tot_d = sum(before.values()), sum(during.values())
    return {"node": node, "survivors": len(surv),
            "node_before_Bps": round(before[node]), "node_during_Bps": round(during.get(node, 0.0)),
            "survivor_before_Bps": round(sb), "survivor_during_Bps": round(sd),
            # in %: the summaries round a median to 0.1, and 60/59 is 1.017
            "survivor_ratio_pct": round(100 * sd / sb, 1) if sb > 0 else None,
            "even_ratio_pct": round(100 * (len(surv) + 1) / len(surv), 1),
            "survivor_share_before_pct": round(100 * sb / tot_b, 2) if tot_b > 0 else None,
            "survivor_share_during_pct": round(100 * sd / tot_d, 2) if tot_d > 0 else None,
            "survivor_during_max_Bps": round(max(during[p] for p in surv)),
            "survivor_during_min_Bps": round(min(during[p] for p in surv))}
