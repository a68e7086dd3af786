"""FARE's weights as the controller sees them: what each ToR's kernel uses, what FARE prescribes for the
capacities in force, and the comparison that ``verify`` makes (spec ``multipath.mode: fare``).

Prescribed: for ToR L1 and the subnet of another set, each agg S that L1 reaches gets the sum over the
set's ToRs L2 that S reaches of min(capacity L1-S, capacity S-L2) (a Clos agg carries one path per ToR of
the set; dual-plane, one) — the capacities are the rates the aggs' ports run at now (tc), so a degraded
link is seen as the aggs see it. Installed: the ``weight`` of each nexthop of the kernel's route, summed
per outgoing port (a ToR names each uplink after its agg).

FRR 8.4 rounds: bgpd gives each path floor(100 x bandwidth / total), at least 1 (hpnlab.generate.frr84). So the
check holds the kernel's shares against FARE's shares as 8.4 rounds them (``frr_share``), within
``TOLERANCE``; ``fare_share`` is the exact prescription, and the difference between the two is what 8.4
costs (on the paper's 60 aggs, all of it: every weight rounds to 1).
"""

from __future__ import annotations

import ipaddress
import json

from hpnlab.generate import frr84
from hpnlab.model.models import NodeConfig
from hpnlab.node.agents import fare
from hpnlab.runtime.base import Runtime

TOLERANCE = 0.02


def enabled(cfgs: dict[str, NodeConfig]) -> bool:
    return any(c.multipath for c in cfgs.values() if c.role == "agg")  # a spraying ToR carries one too


def agg_rates(rt: Runtime, cfgs: dict[str, NodeConfig]) -> dict[str, dict[str, int]]:
    """agg -> its ToR-facing port -> kbit/s in force (the root tbf; none on an unshaped lab)."""
    out = {}
    for n, c in cfgs.items():
        if c.role == "agg":
            r = rt.run(n, ["tc", "-j", "qdisc", "show"], check=False, timeout=10)
            try:
                out[n] = fare.tbf_rates(r.stdout)
            except ValueError:
                out[n] = {}
    return out


def prescribed(cfgs: dict[str, NodeConfig], tor: str, rates: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """subnet of every other set of the ToR's rail -> agg -> the share of that destination's traffic FARE
    gives the agg (bandwidths normalised to 1)."""
    return {s: v["fare"] for s, v in path_shares(cfgs, tor, rates).items()}


def path_shares(cfgs: dict[str, NodeConfig], tor: str, rates: dict[str, dict[str, int]]) -> dict[str, dict]:
    """subnet -> {"fare": agg -> exact share, "frr": agg -> share once FRR 8.4 rounded each path}."""
    me = cfgs[tor]
    sets: dict[str, list[str]] = {}
    for n, c in cfgs.items():
        if c.role == "tor" and c.rail == me.rail and c.subnet != me.subnet:
            sets.setdefault(c.subnet, []).append(n)
    out = {}
    for subnet, tors in sorted(sets.items()):
        paths: list[tuple[str, int]] = []  # (agg, Mbit/s): one path per ToR of the set that the agg reaches
        for agg in [i.peer for i in me.interfaces if i.kind == "uplink"]:
            ports = rates.get(agg, {})
            if tor in ports:
                paths += [(agg, fare.mbit(min(ports[tor], ports[l2]))) for l2 in tors if l2 in ports]
        out[subnet] = {"fare": _per_agg(paths, [b for _a, b in paths]),
                       "frr": _per_agg(paths, frr84.weights([b for _a, b in paths]))}
    return out


def _per_agg(paths: list[tuple[str, int]], values: list[float]) -> dict[str, float]:
    total = sum(values)
    out: dict[str, float] = {}
    for (agg, _b), v in zip(paths, values):
        out[agg] = out.get(agg, 0) + v / total
    return dict(sorted(out.items())) if total else {}


def kernel_weights(routes_json: str, subnets: list[str]) -> dict[str, dict[str, int]]:
    """``ip -j route show`` -> subnet -> outgoing port -> summed nexthop weight (a single path: weight 1)."""
    want = {str(ipaddress.ip_network(s)) for s in subnets}
    out: dict[str, dict[str, int]] = {}
    for r in json.loads(routes_json or "[]"):
        dst = r.get("dst", "")
        dst = dst if "/" in dst else f"{dst}/32"
        if dst not in want:
            continue
        hops = r.get("nexthops") or [{"dev": r.get("dev"), "weight": 1}]
        w: dict[str, int] = {}
        for h in hops:
            if h.get("dev"):
                w[h["dev"]] = w.get(h["dev"], 0) + int(h.get("weight", 1))
        out[dst] = w
    return out


def weights(rt: Runtime, cfgs: dict[str, NodeConfig], tor: str,
            rates: dict[str, dict[str, int]] | None = None) -> dict[str, dict]:
    """Per destination subnet of the ToR: the kernel's weights, their shares, and FARE's shares."""
    rates = agg_rates(rt, cfgs) if rates is None else rates
    want = path_shares(cfgs, tor, rates)
    r = rt.run(tor, ["ip", "-4", "-j", "route", "show"], check=False, timeout=10)
    have = kernel_weights(r.stdout, list(want))
    out = {}
    for subnet, shares in want.items():
        k = have.get(subnet, {})
        total = sum(k.values())
        out[subnet] = {"kernel": k, "kernel_share": {a: round(v / total, 4) for a, v in k.items()} if total else {},
                       "fare_share": {a: round(v, 4) for a, v in shares["fare"].items()},
                       "frr_share": {a: round(v, 4) for a, v in shares["frr"].items()}}
    return out


def problems(w: dict[str, dict]) -> list[str]:
    """Where the kernel's shares differ from FARE's (as FRR 8.4 rounds them) by more than ``TOLERANCE``."""
    bad = []
    for subnet, x in w.items():
        ks, fs = x["kernel_share"], x.get("frr_share", x["fare_share"])
        if not ks:
            bad.append(f"{subnet}: no route")
            continue
        off = {a: abs(ks.get(a, 0) - fs.get(a, 0)) for a in set(ks) | set(fs)}
        worst = max(off, key=off.get)
        if off[worst] > TOLERANCE:
            bad.append(f"{subnet} via {worst}: kernel share {ks.get(worst, 0):.2f}, FARE {fs.get(worst, 0):.2f} "
                       f"(as FRR 8.4 rounds it)")
    return bad
