"""All-reduce rings and the fabric: the order of the ranks (topology-aware, interleaved, random), which ring
edges cross the aggregation tier, and the bytes that crossed it per iteration, measured on the ToRs'
uplinks against what a ring must send. Pure.

A ring all-reduce of S bytes over n ranks sends, on every edge (rank i -> rank i+1, and the last back to
the first), 2(n-1)/n x S bytes per iteration (n-1 reduce-scatter and n-1 all-gather steps of S/n). An
edge whose two hosts hang off different ToR sets (on the ring's rail) crosses the agg tier: its bytes go
up one ToR's uplinks and down another's; an edge inside a set turns at the ToR. So the bytes a ring
pushes into the agg tier per iteration are ``crossing edges x 2(n-1)/n x S``: a topology-aware order
(each set's ranks next to each other) has one crossing edge per set, an interleaved order (every
neighbour in another set) n. Measured on the wire this is more: each frame carries 66 bytes of headers
per 1448 of payload (Ethernet, IP, TCP with timestamps) and the receivers' ACKs go up the other way.
"""

from __future__ import annotations

import random

ORDERS = ("listed", "topology", "interleaved", "random")


def order_ring(hosts: list[str], set_of: dict[str, str], order: str, seed: int = 1) -> list[str]:
    """The ranks' ring order. ``listed``: as given; ``topology``: each ToR set's hosts together, the sets one
    after another (set_of: host -> its set on the ring's rail, e.g. its subnet); ``interleaved``: one host
    of each set in turn, so neighbours sit in different sets wherever there are two; ``random``: shuffled
    (seeded, the same ring on every repetition)."""
    if order == "listed":
        return list(hosts)
    if order == "random":
        out = list(hosts)
        random.Random(seed).shuffle(out)
        return out
    groups: dict[str, list[str]] = {}
    for h in hosts:
        groups.setdefault(set_of[h], []).append(h)
    sets = [sorted(groups[s]) for s in sorted(groups)]
    if order == "topology":
        return [h for g in sets for h in g]
    if order == "interleaved":
        return [g[k] for k in range(max(len(g) for g in sets)) for g in sets if k < len(g)]
    raise ValueError(f"ring order '{order}': choose one of {', '.join(ORDERS)}")


def crossing_edges(ring: list[str], set_of: dict[str, str]) -> int:
    """Ring edges (the wrap-around included) whose ends are in different ToR sets."""
    n = len(ring)
    if n < 2:
        return 0
    return sum(set_of[ring[i]] != set_of[ring[(i + 1) % n]] for i in range(n))


def expected_bytes(ring: list[str], set_of: dict[str, str], size: int) -> int:
    """Payload bytes one iteration of an all-reduce of ``size`` bytes pushes into the agg tier."""
    n = len(ring)
    return round(crossing_edges(ring, set_of) * 2 * (n - 1) / n * size) if n > 1 else 0


def uplink_bytes(stats: dict[str, dict], uplinks: dict[str, list[str]], a: float, b: float) -> tuple[int, float, float]:
    """The bytes the ToRs sent up their uplinks between the samples nearest after ``a`` and before ``b``
    (linkstats reports: node -> {t, ifaces: {iface: {bytes}}}), and the span actually measured
    (first and last sample time, the widest over the ToRs)."""
    total, t_a, t_b = 0, None, None
    for tor, ifaces in uplinks.items():
        s = stats.get(tor) or {}
        ts = s.get("t") or []
        idx = [k for k, t in enumerate(ts) if a <= t <= b]
        if len(idx) < 2:
            continue
        i, j = idx[0], idx[-1]
        for ifc in ifaces:
            by = (s.get("ifaces") or {}).get(ifc, {}).get("bytes") or []
            if len(by) > j:
                total += by[j] - by[i]
        t_a = ts[i] if t_a is None else min(t_a, ts[i])
        t_b = ts[j] if t_b is None else max(t_b, ts[j])
    return total, t_a or a, t_b or b


def per_iteration(stats: dict[str, dict], uplinks: dict[str, list[str]], iterations: list[float], a: float,
                  b: float, expected: int) -> dict:
    """Bytes into the agg tier per iteration over [a, b]: measured (uplink bytes / iterations completed in
    the span the samples cover) beside the ring's payload (``expected``), and measured as % of it."""
    got, t_a, t_b = uplink_bytes(stats, uplinks, a, b)
    its = sum(t_a < t <= t_b for t in iterations)
    measured = round(got / its) if its else None
    return {"iterations": its, "measured_bytes": measured, "expected_bytes": expected,
            "measured_pct": round(100 * got / its / expected, 1) if its and expected else None}
