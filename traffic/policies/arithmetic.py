"""Crux's scheduling arithmetic (Cao et al., SIGCOMM 2024), pure: a job's GPU intensity from the path map
and the links' capacities, its priority, and the compression of priorities onto the K queues switches have.

- **Intensity** I_j = W_j / t_j. W_j is the job's GPU work per iteration: here its compute time per
  iteration times its ranks (GPU-seconds; the emulator's GPUs are all alike, so time stands for FLOPs).
  t_j is the time the iteration's traffic needs on the job's most loaded link: per link, the bytes the
  job puts on it in one iteration over the link's capacity, and the largest of those. An iteration's
  traffic is its collective's: a ring all-reduce rank sends 2(n-1)/n of its buffer to the next rank, an
  all-to-all rank 1/n of it to every other rank, each on the paths its connections take. A job that computes
  much and sends little is intensive: every second its traffic waits idles many GPU-seconds.
- **Priority** P_j = k_j * I_j, k_j the job's correction factor (1 unless the job says otherwise; Crux
  uses it for what intensity misses, such as how much of a job's communication overlaps its compute).
- **Compression**: the jobs' contention graph has an edge between two jobs that share a link. Ordered by
  priority it is a DAG (the higher job's edge points at the lower). Cutting a topological order of it into
  at most K contiguous levels keeps every edge's direction (a higher job is never below a job it contends
  with); an edge whose two jobs end in one level is precedence lost. ``compress`` searches topological
  orders, every one when there are few (up to ``ORDERS``), a seeded sample of them otherwise, and cuts each
  optimally by dynamic programming (this search is hpnlab's reading of the paper's cut, not its code).

  Choices the description leaves open, made here: an edge's weight is the priority it loses when merged,
  P_high - P_low (two jobs of equal priority lose nothing by sharing a queue; a job far above another
  loses much); ties in priority are broken by name, so a policy is reproducible; a job that contends with
  nobody goes wherever the cut puts it (any level serves it alike).

Links are (tier, from, to) as in hpnlab.traffic.run.balance; capacities are bits per second.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from hpnlab.traffic.run import balance

Link = tuple[str, str, str]
ORDERS = 5000  # topological orders searched exhaustively up to this many; a seeded sample beyond


@dataclass
class Demand:
    """One job's per-iteration demand: GPU work (GPU-seconds) and bytes per link."""

    name: str
    work_s: float
    link_bytes: dict[Link, float] = field(default_factory=dict)
    k: float = 1.0


# --- traffic and intensity ---------------------------------------------------------------------------------
def links_of(row: dict) -> list[Link]:
    """The links one connection's path-map row loads. A row without an agg is a local pair (both hosts on one
    ToR set: the ToR turns the packet round to the other host's port), which loads only the two access
    links; every other row crosses an agg (hpnlab.traffic.run.balance.links_of)."""
    if row.get("agg") is None:
        return [("host-up", row["src"], row["tor"]), ("tor-down", row["tor"], row["dst"])]
    return balance.links_of(row)


def ring_bytes_per_rank(size_bytes: int, ranks: int) -> float:
    """What one rank of a ring all-reduce sends its next rank per iteration: 2(n-1) steps of size/n."""
    return 2 * (ranks - 1) * (size_bytes // ranks) if ranks > 1 else 0.0


def alltoall_bytes_per_peer(size_bytes: int, ranks: int) -> float:
    """What one rank of an all-to-all sends each other rank per iteration: its buffer's 1/n part for that
    rank (its own part stays local), so (n-1)/n of the buffer in all."""
    return size_bytes // ranks if ranks > 1 else 0.0


def flow_link_bytes(flows: list[dict], bytes_per_flow: float) -> dict[Link, float]:
    """Bytes per link when each path-map row in ``flows`` (one connection) carries ``bytes_per_flow``."""
    out: dict[Link, float] = {}
    for f in flows:
        for lk in links_of(f):
            out[lk] = out.get(lk, 0.0) + bytes_per_flow
    return out


def comm_time_s(link_bytes: dict[Link, float], capacity_bps: dict[Link, float]) -> tuple[float, Link | None]:
    """t_j: the longest any link needs for the job's bytes (bits over bits/s), and which link that is. A link
    missing from ``capacity_bps`` is unshaped: it is not the bottleneck and is left out."""
    best, which = 0.0, None
    for lk, b in sorted(link_bytes.items()):
        cap = capacity_bps.get(lk)
        if not cap or b <= 0:
            continue
        t = 8 * b / cap
        if t > best:
            best, which = t, lk
    return best, which


def intensity(d: Demand, capacity_bps: dict[Link, float]) -> float:
    """I_j = W_j / t_j (GPU-seconds of work per second of traffic on the most loaded link); a job whose
    traffic meets no shaped link never waits for the network: infinite."""
    t, _ = comm_time_s(d.link_bytes, capacity_bps)
    return d.work_s / t if t > 0 else float("inf")


def priorities(demands: list[Demand], capacity_bps: dict[Link, float]) -> dict[str, float]:
    """P_j = k_j * I_j for every job."""
    return {d.name: d.k * intensity(d, capacity_bps) for d in demands}


def order(prio: dict[str, float]) -> list[str]:
    """Jobs from the highest priority down; equal priorities by name (a reproducible order)."""
    return sorted(prio, key=lambda j: (-prio[j], j))


# --- contention and compression ----------------------------------------------------------------------------
def contention(demands: list[Demand]) -> set[frozenset[str]]:
    """Pairs of jobs that put bytes on one link."""
    on: dict[Link, list[str]] = {}
    for d in demands:
        for lk, b in d.link_bytes.items():
            if b > 0:
                on.setdefault(lk, []).append(d.name)
    pairs = set()
    for names in on.values():
        for a, b in itertools.combinations(sorted(set(names)), 2):
            pairs.add(frozenset((a, b)))
    return pairs


def dag(prio: dict[str, float], pairs: set[frozenset[str]]) -> dict[tuple[str, str], float]:
    """The contention DAG: (higher, lower) -> the weight lost if they share a level, P_high - P_low."""
    rank = {j: i for i, j in enumerate(order(prio))}
    out = {}
    for p in pairs:
        hi, lo = sorted(p, key=rank.__getitem__)
        w = prio[hi] - prio[lo]
        out[(hi, lo)] = w if w == w and w != float("inf") else 1e18  # an unbounded job above a bounded one
    return out


def best_cut(seq: list[str], edges: dict[tuple[str, str], float], k: int) -> tuple[float, list[list[str]]]:
    """Cut ``seq`` into at most k contiguous levels so that the edges within a level weigh least: dynamic
    programming over (prefix, levels). Returns (weight kept within levels, the levels, highest first)."""
    n = len(seq)
    pos = {j: i for i, j in enumerate(seq)}
    w = [[0.0] * n for _ in range(n)]  # w[i][j]: weight of edges between seq[i] and seq[j], i < j
    for (a, b), x in edges.items():
        i, j = sorted((pos[a], pos[b]))
        w[i][j] += x
    # inner[i][j]: weight of edges inside seq[i:j]
    inner = [[0.0] * (n + 1) for _ in range(n + 1)]
    for i in range(n):
        acc = 0.0
        for j in range(i + 1, n + 1):
            acc += sum(w[m][j - 1] for m in range(i, j - 1))
            inner[i][j] = acc
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    back = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for lv in range(1, k + 1):
        for j in range(1, n + 1):
            for i in range(lv - 1, j):
                c = best[lv - 1][i] + inner[i][j]
                if c < best[lv][j]:
                    best[lv][j], back[lv][j] = c, i
    lv = min(range(1, min(k, n) + 1), key=lambda x: (best[x][n], x)) if n else 0
    kept = best[lv][n] if n else 0.0
    levels, j = [], n
    while lv > 0:
        i = back[lv][j]
        levels.append(seq[i:j])
        j, lv = i, lv - 1
    return kept, levels[::-1]


def topological_orders(names: list[str], edges: dict[tuple[str, str], float], limit: int, rng: random.Random):
    """Topological orders of the DAG: all of them (in a fixed order) if there are at most ``limit``, else
    ``limit`` random ones; the priority order itself always first."""
    preds = {j: {a for (a, b) in edges if b == j} for j in names}
    first = list(names)
    yield first
    seen = {tuple(first)}

    def all_orders(done: list[str], left: set[str]):
        if not left:
            yield list(done)
            return
        for j in sorted(left, key=names.index):
            if preds[j] <= set(done):
                yield from all_orders(done + [j], left - {j})

    found = list(itertools.islice(all_orders([], set(names)), limit + 1))
    if len(found) <= limit:
        for o in found:
            if tuple(o) not in seen:
                yield o
        return
    for _ in range(limit):
        done: list[str] = []
        left = set(names)
        while left:
            ready = sorted((j for j in left if preds[j] <= set(done)), key=names.index)
            j = rng.choice(ready)
            done.append(j)
            left.discard(j)
        if tuple(done) not in seen:
            seen.add(tuple(done))
            yield done


def compress(prio: dict[str, float], pairs: set[frozenset[str]], k: int, seed: int = 1,
             limit: int = ORDERS) -> dict:
    """Priorities onto ``k`` levels (0 the highest). Returns {levels: {job: level}, kept_weight (precedence
    lost: the weight of contention edges inside a level), cut_weight, orders (how many were searched)}."""
    if k < 1:
        raise ValueError("k: give at least one level")
    names = order(prio)
    edges = dag(prio, pairs)
    total = sum(edges.values())
    best: tuple[float, list[list[str]]] | None = None
    searched = 0
    for seq in topological_orders(names, edges, limit, random.Random(seed)):
        searched += 1
        kept, lv = best_cut(seq, edges, k)
        if best is None or kept < best[0] - 1e-12:
            best = (kept, lv)
    kept, levels = best if best else (0.0, [])
    return {"levels": {j: i for i, lv in enumerate(levels) for j in lv}, "kept_weight": kept,
            "cut_weight": total - kept, "orders": searched}


# --- placement ---------------------------------------------------------------------------------------------
def place(jobs: list[tuple[str, list[list[dict]], float]], capacity_bps: dict[Link, float]) -> dict[str, list[dict]]:
    """Least-congested path placement, jobs in priority order: ``jobs`` is [(name, candidates per connection,
    bytes per connection)], a connection's candidates the path-map rows of its (src, dst) pair. Each
    connection takes the row whose most loaded link (bits already placed there, by this job and the jobs
    before it, over capacity) would be least loaded, then the least total; ties by source port. Returns
    {job: the rows chosen, one per connection}."""
    placed: dict[Link, float] = {}
    out: dict[str, list[dict]] = {}

    def cost(row: dict, b: float) -> tuple[float, float, int]:
        t = [8 * (placed.get(lk, 0.0) + b) / capacity_bps[lk] for lk in links_of(row) if capacity_bps.get(lk)]
        return (max(t, default=0.0), sum(t), row["sport"])

    for name, conns, b in jobs:
        chosen = []
        for cands in conns:
            used = {(r["src"], r["dst"], r["sport"]) for r in chosen}
            free = [r for r in cands if (r["src"], r["dst"], r["sport"]) not in used] or cands
            row = min(free, key=lambda r: cost(r, b))
            chosen.append(row)
            for lk in links_of(row):
                placed[lk] = placed.get(lk, 0.0) + b
        out[name] = chosen
    return out


def capacities(cfgs: dict, rail: int = 0) -> dict[Link, float]:
    """Every shaped link of the rail as (tier, from, to) -> bits/s, from the nodes' interface shapes (the
    sending end's tbf is what limits a direction)."""
    out: dict[Link, float] = {}
    role = {n: c.role for n, c in cfgs.items()}
    hosts = set(balance.hosts_of(cfgs))
    for n, c in cfgs.items():
        for i in c.interfaces:
            if not i.shape or i.peer not in role:
                continue
            bps = i.shape["rate_kbit"] * 1000.0
            if c.role == "host" and role[i.peer] == "tor":
                nic = c.nic(rail)
                if nic and i.name in nic.ports:
                    out[("host-up", n, i.peer)] = bps
            elif c.role == "tor" and i.peer in hosts:
                out[("tor-down", n, i.peer)] = bps
            elif c.role == "tor" and role[i.peer] == "agg":
                out[("tor-up", n, i.peer)] = bps
            elif c.role == "agg" and role[i.peer] == "tor":
                out[("agg-down", n, i.peer)] = bps
    return out
