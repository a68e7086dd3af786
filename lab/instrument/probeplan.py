"""Which probe paths a black-box prober sends along: chosen from the path map so that every directed
fabric link and access link of the probed rails lies on at least ``cover`` probed paths.

The switches hash the 5-tuple deterministically, so a source port picks a path: one round of the path
map (TTL probes, hpnlab.traffic.run.nodetools.path_map) tells which ToR, agg and far ToR each source port of
each host pair takes, and a probe flow sent with that source port keeps taking it while the fabric does
not change. Links are directed (a gray fault may hit one direction only): a path from s0h0 to s1h0 covers
s0h0>s0r0a, s0r0a>agg0-0, agg0-0>s1r0a and s1r0a>s1h0, and the way back needs paths the other way.

At least two paths per link, because one path cannot tell its own links apart: with two, a link whose
every path loses is the suspect, and a link with one clean path is cleared (hpnlab.instrument.tomography). The
choice is greedy (set multicover): each step takes the candidate path covering the most links still
short of ``cover``, so few paths suffice (the probe rate is spent on few flows); then paths are added
while two links sharing a path are told apart by fewer than ``apart`` paths (``close``: the paths that
cross one and not the other) and a candidate crosses one of them and not the other. Two links crossed
by the same paths look alike to tomography; one whose paths all cross the other is told apart only by
the other's remaining paths, and one such path is not enough: in a window where it lost no probe (1 %
loss, 500 probes: e^-5 for a full window, more often in the first windows of a fault) the inner link
explains the loss as well. The default lab's plan once put an access link's only two paths both
through an uplink with one more path, and a CI run confirmed the access link for a 1 % loss on the
uplink (bench/prober_rules.py measures how often each rule set does so). Paths
that end or start at a switch matter here: between the hosts of a two-segment lab's rail, every path up
s0r0a>agg0-0 comes down agg0-0>s1r0a (a host reaches another rail's NIC through its own rail's port,
not the fabric), and only a path from a host to agg0-0 itself, or from agg0-0 to a host, tells the two
apart (NetBouncer bounces its probes off the switches for the same reason).
"""

from __future__ import annotations

Link = str  # "a>b": the direction from node a to node b


def link(a: str, b: str) -> Link:
    return f"{a}>{b}"


def links_of(row: dict) -> list[Link]:
    """The directed links one path-map row crosses: its ``hops`` (a path to or from a switch, e.g. host,
    ToR, agg) or a host-to-host row's src, tor, agg, dst_tor, dst."""
    hops = row.get("hops") or [row["src"], row["tor"], row["agg"], row["dst_tor"], row["dst"]]
    return [link(a, b) for a, b in zip(hops, hops[1:])]


def complete(rows: list[dict]) -> list[dict]:
    """Rows whose every hop answered (a lost TTL answer leaves '?')."""
    return [r for r in rows if ("?" not in r["hops"] if r.get("hops") else
                                "?" not in (r["tor"], r["agg"], r["dst_tor"]) and r.get("port"))]


def fabric_links(cfgs: dict, rails: list[int] | None = None) -> list[Link]:
    """Every directed access and uplink of the lab (of the given rails: a ToR's rail; aggs serve every
    rail their ToRs are on), both directions, sorted."""
    tors = {n for n, c in cfgs.items() if c.role == "tor" and (rails is None or c.rail in rails)}
    out = set()
    for t in tors:
        for i in cfgs[t].interfaces:
            if i.kind in ("access", "uplink"):
                out |= {link(t, i.peer), link(i.peer, t)}
    return sorted(out)


def choose(rows: list[dict], cover: int = 2, links: list[Link] | None = None,
           apart: int | None = None) -> tuple[list[dict], dict[Link, int]]:
    """The probe paths: (chosen rows, links -> how many chosen paths cross each). Links in ``links``
    (default: every link the rows cross) that no candidate crosses keep 0 (the caller reports them)."""
    cands = complete(rows)
    want = set(links) if links is not None else {lk for r in cands for lk in links_of(r)}
    have = {lk: 0 for lk in sorted(want)}
    chosen: list[dict] = []
    left = list(cands)

    def take(r: dict) -> None:
        left.remove(r)
        chosen.append(r)
        for lk in set(links_of(r)):
            if lk in have:
                have[lk] += 1

    while left:
        def gain(r: dict) -> int:
            return sum(1 for lk in set(links_of(r)) if lk in have and have[lk] < cover)
        best = max(left, key=lambda r: (gain(r), -r["sport"]))  # ties: the lowest source port (stable)
        if gain(best) == 0:
            break
        take(best)
    # then tell links apart: while two links sharing a path differ in fewer than ``apart`` (default ``cover``)
    # paths, add the candidate crossing one and not the other for the most such pairs (a pair no candidate
    # can split stays, and close() names it)
    while left:
        pairs = close(chosen, list(have), cover if apart is None else apart)
        def splits(r: dict) -> int:
            ls = set(links_of(r))
            return sum(1 for a, b in pairs if (a in ls) != (b in ls))
        best = max(left, key=lambda r: (splits(r), -r["sport"])) if pairs else None
        if best is None or splits(best) == 0:
            break
        take(best)
    return chosen, have


def _paths_of(chosen: list[dict], links: list[Link]) -> dict[Link, frozenset]:
    crossed = [set(links_of(r)) for r in chosen]
    return {lk: frozenset(i for i, ls in enumerate(crossed) if lk in ls) for lk in links}


def close(chosen: list[dict], links: list[Link], apart: int = 2) -> list[tuple[Link, Link]]:
    """Pairs (a, b), a < b, of probed links that share a path and are told apart by fewer than ``apart``
    paths: the paths crossing one and not the other are what tells a loss on a from a loss on b (those
    of the lossy one lose, those of the other stay clean). Sorted."""
    of = {lk: s for lk, s in _paths_of(chosen, links).items() if s}
    return sorted((a, b) for a in of for b in of if a < b and of[a] & of[b] and len(of[a] ^ of[b]) < apart)


def alike(chosen: list[dict], links: list[Link]) -> list[list[Link]]:
    """Groups of links crossed by exactly the same chosen paths (tomography cannot tell them apart)."""
    sets: dict[frozenset, list[Link]] = {}
    for lk, s in _paths_of(chosen, links).items():
        sets.setdefault(s, []).append(lk)
    return [sorted(g) for k, g in sets.items() if k and len(g) > 1]


def short(have: dict[Link, int], cover: int = 2) -> list[Link]:
    """The links on fewer than ``cover`` chosen paths."""
    return sorted(lk for lk, n in have.items() if n < cover)
