"""A workload's TCP retransmission timer beside its halts: `ss -tin` samples parsed, the halts between a
workload's iterations, and the RTO, exponential backoff and retransmissions of the connections that
carry data out of (or into) one host while it halted, and what the host waited for each time a flapping
link came back (its LACP, the aggs' BGP route to it). bench/link_flap_sweep.py samples and reports them
for a flapping access link; all of it is pure.

A sample is ``{"t": wall-clock time, "node": where ss ran, "conns": parse_ss(its output)}``.
"""

from __future__ import annotations

import re

RTO = re.compile(r"\brto:([\d.]+)")
BACKOFF = re.compile(r"\bbackoff:(\d+)")
RETRANS = re.compile(r"\bretrans:\d+/(\d+)")


def parse_ss(text: str) -> list[dict]:
    """`ss -tin` (with or without -H) as one record per connection: its local and peer address, RTO (ms,
    backoff included, as the kernel's timer runs it), backoff (0 when ss prints none) and retransmissions
    over its life."""
    out, head = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            words = line.split()
            head = words if len(words) >= 4 and words[0] != "State" and not words[0].startswith("Recv-Q") else None
            continue
        if head is None:
            continue
        rto, back, retr = RTO.search(line), BACKOFF.search(line), RETRANS.search(line)
        out.append({"local": head[-2], "peer": head[-1], "rto_ms": float(rto.group(1)) if rto else None,
                    "backoff": int(back.group(1)) if back else 0, "retrans": int(retr.group(1)) if retr else 0})
        head = None
    return out


def sending(sample: dict, host: str, addr: str, port: int) -> list[dict]:
    """The connections of one sample that send data out of ``host`` or into it (``addr``): on ``host`` those
    to a peer's listening ``port``, elsewhere those to ``addr:port``."""
    if sample["node"] == host:
        return [c for c in sample["conns"] if c["peer"].endswith(f":{port}")]
    return [c for c in sample["conns"] if c["peer"] == f"{addr}:{port}"]


def halts(iterations: list[float], start: float, end: float) -> list[tuple[float, float]]:
    """The intervals between consecutive iterations that overlap [start, end], longest first."""
    its = sorted(iterations)
    return sorted(((a, b) for a, b in zip(its, its[1:]) if b > start and a < end), key=lambda g: g[0] - g[1])


def timer_during(samples: list[dict], a: float, b: float, host: str, addr: str, port: int) -> dict:
    """The largest RTO (ms) and backoff any sending connection had in the samples taken from a to b."""
    inside = [s for s in samples if a <= s["t"] <= b]
    conns = [c for s in inside for c in sending(s, host, addr, port)]
    if not conns:
        return {"samples": len(inside), "max_rto_ms": None, "max_backoff": None}
    return {"samples": len(inside), "max_rto_ms": max(c["rto_ms"] or 0.0 for c in conns),
            "max_backoff": max(c["backoff"] for c in conns)}


def retransmissions(samples: list[dict], a: float, b: float, host: str, addr: str, port: int) -> int:
    """Retransmissions the sending connections made from a to b: per connection, its largest count in
    the window less its last count before it (its first in the window if it had none before)."""
    per: dict[tuple, list[tuple[float, int]]] = {}
    for s in samples:
        for c in sending(s, host, addr, port):
            per.setdefault((s["node"], c["local"], c["peer"]), []).append((s["t"], c["retrans"]))
    total = 0
    for series in per.values():
        series.sort()
        before = [r for t, r in series if t < a]
        within = [r for t, r in series if a <= t <= b]
        if within:
            total += max(within) - (before[-1] if before else min(within))
    return total


def returns(events: list[dict], host: str, ip: str) -> list[dict]:
    """Each time a flapping ``host`` had no port left (from a fault's timeline events: ms since the fault,
    node, kind, what): when it lost its last one (``cut_ms``), when a carrier came back (``up_ms``), how long
    after that the host routed out of a port again (its LACP member Collecting/Distributing, ``host_ms``)
    and an agg had the host's /32 again (BGP, ``agg_ms``); None where it did not happen in the events."""
    out: list[dict] = []
    cut = None  # the current episode: from the host's last port lost until its first back
    for e in sorted(events, key=lambda e: e["t_ms"]):
        mine, what = e["node"] == host, e["what"]
        if mine and e["kind"] == "nexthop" and what.endswith("-> []"):
            cut = {"cut_ms": e["t_ms"], "up_ms": None, "host_ms": None, "agg_ms": None}
            out.append(cut)
        elif cut is None:
            continue
        elif mine and e["kind"] == "carrier" and what.endswith("carrier up") and cut["up_ms"] is None:
            cut["up_ms"] = e["t_ms"]
        elif cut["up_ms"] is None:
            continue
        elif mine and e["kind"] == "nexthop" and "[] ->" in what and cut["host_ms"] is None:
            cut["host_ms"] = round(e["t_ms"] - cut["up_ms"], 1)
        elif e["node"].startswith("agg") and e["kind"] == "fib" and what.startswith(f"add {ip}/32") \
                and cut["agg_ms"] is None:
            cut["agg_ms"] = round(e["t_ms"] - cut["up_ms"], 1)
    return out
