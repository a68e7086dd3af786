"""Load balance from the probed path map (paper §6.1, Fig. 13, Appendix B), without bulk traffic.

The switches' hash is deterministic: a 5-tuple takes the same path every time. So one round of TTL
probes per (source host, destination host, source port) gives a map sport -> (host port, ToR, agg, far
ToR), and any set of elephant flows can be laid onto the fabric from it: how many flows each link
carries. From that, per group of equal-cost links (a NIC's two ports, a ToR's uplinks, an agg's links
towards one set, the two ToR ports facing one NIC), the max/min ratio and which links stay idle.

Two ways a sender picks its flows' source ports:
- ``hash``: at random (what an application opening connections gets: the hash decides the path);
- ``disjoint``: HPN's path selection, from the sender's own knowledge only: per peer, each connection
  takes the source port whose path adds least to the links this sender already loads (so the
  connections to one peer spread over distinct planes/uplinks first), ties broken at random.

Pure functions over the map (tested without root); ``probe_map`` fills the map from a running lab.
"""

from __future__ import annotations

import math
import random
import statistics
from concurrent.futures import ThreadPoolExecutor

TIERS = ("host-up", "tor-up", "agg-down", "tor-down")
TIER_TEXT = {"host-up": "a NIC's two ports (sender's choice)", "tor-up": "a ToR's uplinks",
             "agg-down": "an agg's links to one dual-ToR set", "tor-down": "the two ToR ports facing one NIC"}


# --- the map -----------------------------------------------------------------------------------------------
def probe_map(rt, cfgs: dict, rail: int, pool: int, dport: int, proto: str = "tcp",
              sport_base: int = 30000) -> list[dict]:
    """Every host probes ``pool`` source ports to every host in other segments (TTL 1-3, in parallel)."""
    from hpnlab.traffic.run.nodetools import path_map

    hosts = hosts_of(cfgs)
    sports = list(range(sport_base, sport_base + pool))

    def one(src: str) -> list[dict]:
        return path_map(rt, cfgs, src, peers(cfgs, src), rail, sports, dport, proto)

    with ThreadPoolExecutor(max_workers=4) as ex:
        return [r for rows in ex.map(one, hosts) for r in rows]


def hosts_of(cfgs: dict) -> list[str]:
    return sorted(n for n, c in cfgs.items() if c.role == "host")


def peers(cfgs: dict, src: str) -> list[str]:
    """All-to-all across segments: every host of every other segment (the cross-segment traffic of §6.1)."""
    return [h for h in hosts_of(cfgs) if segment(cfgs, h) != segment(cfgs, src)]


def segment(cfgs: dict, host: str) -> int:
    return cfgs[cfgs[host].nics[0].tors[0]].segment


def complete(rows: list[dict]) -> list[dict]:
    """Rows whose every hop answered (a lost ICMP answer leaves '?': such a port is not used)."""
    return [r for r in rows if "?" not in (r["tor"], r["agg"], r["dst_tor"]) and r["port"]]


def links_of(row: dict) -> list[tuple[str, str, str]]:
    """The links one flow loads, as (tier, from, to)."""
    return [("host-up", row["src"], row["tor"]), ("tor-up", row["tor"], row["agg"]),
            ("agg-down", row["agg"], row["dst_tor"]), ("tor-down", row["dst_tor"], row["dst"])]


def groups(cfgs: dict, rail: int = 0) -> dict[tuple[str, str], list[tuple[str, str, str]]]:
    """Equal-cost link groups by (tier, owner), from the topology (not from what flows happened to use)."""
    out: dict[tuple[str, str], list] = {}
    tors = {n: c for n, c in cfgs.items() if c.role == "tor" and c.rail == rail}
    for h in hosts_of(cfgs):
        nic = cfgs[h].nic(rail)
        out[("host-up", h)] = [("host-up", h, t) for t in nic.tors]
        out[("tor-down", h)] = [("tor-down", t, h) for t in nic.tors]
    for t, c in tors.items():
        out[("tor-up", t)] = [("tor-up", t, i.peer) for i in c.interfaces if i.kind == "uplink"]
    for a, c in cfgs.items():
        if c.role != "agg":
            continue
        by_set: dict[str, list] = {}
        for i in c.interfaces:
            if i.peer in tors:
                by_set.setdefault(tors[i.peer].subnet, []).append(("agg-down", a, i.peer))
        for subnet, lks in by_set.items():
            out[("agg-down", f"{a}>{subnet}")] = lks
    return out


# --- choosing flows ----------------------------------------------------------------------------------------
def index(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    by: dict[tuple[str, str], list[dict]] = {}
    for r in complete(rows):
        by.setdefault((r["src"], r["dst"]), []).append(r)
    return by


def choose(by_pair: dict, cfgs: dict, flows_per_peer: int, select: str, rng: random.Random) -> list[dict]:
    """One set of elephant flows: every host sends ``flows_per_peer`` flows to every cross-segment peer."""
    flows = []
    for src in hosts_of(cfgs):
        mine: dict[tuple, int] = {}
        for dst in peers(cfgs, src):
            cands = by_pair.get((src, dst), [])
            if len(cands) < flows_per_peer:
                raise ValueError(f"path map has {len(cands)} answered source ports from {src} to {dst}; "
                                 f"need {flows_per_peer}: probe a larger pool")
            if select == "hash":
                picked = rng.sample(cands, flows_per_peer)
            else:
                picked = []
                left = list(cands)
                for _ in range(flows_per_peer):
                    rng.shuffle(left)
                    best = min(left, key=lambda r: (max(mine.get(lk, 0) for lk in links_of(r)),
                                                    sum(mine.get(lk, 0) for lk in links_of(r))))
                    left.remove(best)
                    picked.append(best)
                    for lk in links_of(best):
                        mine[lk] = mine.get(lk, 0) + 1
            flows += picked
    return flows


def spread(cands: list[dict], n: int, rng: random.Random) -> list[dict]:
    """``n`` of one host pair's probed source ports for one peer's connections, spread over the sender's
    ports (in a dual-plane fabric, its planes) first and over the aggs within a port next, ties broken at
    random: HPN's host-side selection for the connections of one peer. A row needs only its first hop
    (``port``): within a dual-ToR set the path has no agg."""
    rows = [r for r in cands if r.get("port")]
    if len(rows) < n:
        raise ValueError(f"path map has {len(rows)} answered source ports from {cands[0]['src'] if cands else '?'}"
                         f"{' to ' + cands[0]['dst'] if cands else ''}; need {n}: probe a larger pool")
    left = list(rows)
    rng.shuffle(left)
    per_port: dict[str, int] = {}
    per_agg: dict[tuple[str, str], int] = {}
    picked = []
    for _ in range(n):
        best = min(left, key=lambda r: (per_port.get(r["port"], 0), per_agg.get((r["port"], r.get("agg", "?")), 0)))
        left.remove(best)
        picked.append(best)
        per_port[best["port"]] = per_port.get(best["port"], 0) + 1
        per_agg[(best["port"], best.get("agg", "?"))] = per_agg.get((best["port"], best.get("agg", "?")), 0) + 1
    return picked


def loads(flows: list[dict]) -> dict[tuple[str, str, str], int]:
    out: dict[tuple[str, str, str], int] = {}
    for f in flows:
        for lk in links_of(f):
            out[lk] = out.get(lk, 0) + 1
    return out


def ratio(counts: list[int]) -> float:
    """max/min of a group's loads; inf when one link is idle while another carries flows."""
    lo, hi = min(counts), max(counts)
    return hi / lo if lo else math.inf


def measure_set(flows: list[dict], grp: dict) -> dict:
    """Per tier: every group's max/min ratio (groups that carry traffic and offer a choice) and the
    fraction of its links left idle."""
    ld = loads(flows)
    out = {t: {"ratios": [], "links": 0, "idle": 0} for t in TIERS}
    for (tier, _owner), lks in grp.items():
        counts = [ld.get(lk, 0) for lk in lks]
        if len(lks) < 2 or not sum(counts):
            continue
        out[tier]["ratios"].append(ratio(counts))
        out[tier]["links"] += len(lks)
        out[tier]["idle"] += counts.count(0)
    return out


def stats(values: list[float]) -> dict:
    """{median, p90, max}; infinity (an idle link beside a busy one) is written as null."""
    if not values:
        return {"median": None, "p90": None, "max": None, "n": 0}
    v = sorted(values)

    def fin(x: float):
        return None if math.isinf(x) else round(x, 3)

    p90 = v[min(len(v) - 1, math.ceil(0.9 * len(v)) - 1)]
    return {"median": fin(statistics.median(v)), "p90": fin(p90), "max": fin(v[-1]), "n": len(v),
            "infinite": sum(1 for x in v if math.isinf(x))}


def analyse(rows: list[dict], cfgs: dict, sets: int = 100, flows_per_peer: int = 2, select: str = "hash",
            seed: int = 1, rail: int = 0) -> dict:
    """``sets`` random flow sets laid onto the probed map: the ratio and idle-link distributions."""
    rng = random.Random(seed)
    by_pair = index(rows)
    grp = groups(cfgs, rail)
    per_tier: dict[str, dict] = {t: {"ratios": [], "idle_fraction": []} for t in TIERS}
    idle_all = []
    for _ in range(sets):
        m = measure_set(choose(by_pair, cfgs, flows_per_peer, select, rng), grp)
        links = idle = 0
        for t in TIERS:
            per_tier[t]["ratios"] += m[t]["ratios"]
            if m[t]["links"]:
                per_tier[t]["idle_fraction"].append(m[t]["idle"] / m[t]["links"])
            if t != "host-up":  # the fabric's equal-cost links; the sender's own ports are its choice
                links += m[t]["links"]
                idle += m[t]["idle"]
        idle_all.append(idle / links if links else 0.0)
    tiers = {t: {"what": TIER_TEXT[t], "ratio": stats(per_tier[t]["ratios"]),
                 "idle_fraction": stats(per_tier[t]["idle_fraction"])} for t in TIERS}
    answered = len(complete(rows))
    return {"sets": sets, "flows_per_peer": flows_per_peer, "select": select,
            "flows_per_set": sum(len(peers(cfgs, h)) for h in hosts_of(cfgs)) * flows_per_peer,
            "map": {"probed": len(rows), "answered": answered},
            "downlink_ratio": tiers["tor-down"]["ratio"], "idle_link_fraction": stats(idle_all), "tiers": tiers}


def distinct_paths(rows: list[dict]) -> dict:
    """How many distinct (port, agg, far ToR) paths the probed source ports found, per pair (min/max)."""
    by: dict[tuple[str, str], set] = {}
    for r in complete(rows):
        by.setdefault((r["src"], r["dst"]), set()).add((r["tor"], r["agg"], r["dst_tor"]))
    n = [len(v) for v in by.values()] or [0]
    return {"pairs": len(by), "min": min(n), "max": max(n)}


# --- after a failure ---------------------------------------------------------------------------------------
def affected(rows: list[dict], tor: str) -> list[dict]:
    """The 5-tuples whose path can change when a link of ``tor`` fails: those leaving by ``tor`` (its
    ECMP group lost a member) and those arriving at it (their first ToR's group towards ``tor``'s set
    lost the agg that no longer reaches it). Linux hashes by threshold, so any flow of a changed group
    may move, not only those on the failed link. Everything else keeps its path: §6.1's point that a
    re-search only covers one ToR's uplinks."""
    return [r for r in rows if tor in (r["tor"], r["dst_tor"])]


def reprobe(rt, cfgs: dict, rows: list[dict], tor: str, rail: int, dport: int, proto: str = "tcp") -> tuple[list[dict], int]:
    """The map after a failure at ``tor``: only the affected 5-tuples probed again. Returns the new map
    and how many probes that took."""
    from hpnlab.traffic.run.nodetools import path_map

    todo: dict[tuple[str, str], list[int]] = {}
    for r in affected(rows, tor):
        todo.setdefault((r["src"], r["dst"]), []).append(r["sport"])
    by_src: dict[str, dict[str, list[int]]] = {}
    for (src, dst), sports in todo.items():
        by_src.setdefault(src, {})[dst] = sports
    fresh: dict[tuple[str, str, int], dict] = {}

    def one(src: str) -> list[dict]:
        out = []
        sports = sorted({sp for v in by_src[src].values() for sp in v})
        for r in path_map(rt, cfgs, src, sorted(by_src[src]), rail, sports, dport, proto):
            if r["sport"] in by_src[src].get(r["dst"], []):
                out.append(r)
        return out

    with ThreadPoolExecutor(max_workers=4) as ex:
        for rs in ex.map(one, sorted(by_src)):
            for r in rs:
                fresh[(r["src"], r["dst"], r["sport"])] = r
    new = [fresh.get((r["src"], r["dst"], r["sport"]), r) for r in rows]
    return new, sum(len(v) for v in todo.values())
