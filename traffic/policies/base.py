"""What a scheduling policy gets and returns, and the registry. Level i (0 the highest priority) is the
switches' queue i (the spec's qos serves queue 0 first), marked with a DSCP the spec's qos.dscp maps to
that queue (``dscp_for_queue``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hpnlab.errors import SpecError
import hpnlab.traffic.policies.arithmetic as crux

def dscp_for_queue(qos, queue: int) -> int | None:
    """The DSCP that puts a job's packets in ``queue`` of the spec's ``qos``: the smallest code point its map
    sends there, else 0 (unmarked) where that queue is the default and 0 is not mapped elsewhere; None when
    no code point reaches the queue."""
    codes = sorted(c for c, q in qos.dscp.items() if q == queue)
    if codes:
        return codes[0]
    default = qos.queues - 1 if qos.default_queue is None else qos.default_queue
    return 0 if queue == default and 0 not in qos.dscp else None


@dataclass
class Inputs:
    """Everything a policy decides from. ``candidates[job]`` is one list of path-map rows per connection
    (the (src, dst) pair's probed source ports); ``hashed[job]`` the rows the switches' hash would give the
    job's connections (a seeded random pick per repetition, what an application gets)."""

    demands: list[crux.Demand]
    capacity: dict
    candidates: dict[str, list[list[dict]]]
    hashed: dict[str, list[dict]]
    bytes_per_conn: dict[str, float]
    queues: int
    rng: random.Random
    dscps: list[int | None] | None = None  # level i's DSCP (None: a lab without qos; fifo needs none)
    compute_s: dict[str, float] = field(default_factory=dict)  # each job's compute per iteration, seconds


class Policy:
    name = ""
    help = ""
    uses_queues = True  # False: every job in one class (no switch QoS needed)

    def assign(self, x: Inputs) -> dict:
        """{job: {level, dscp, queue, priority, intensity, rows}} plus ``compression`` where it compressed."""
        raise NotImplementedError

    # shared pieces ----------------------------------------------------------------------------------------
    @staticmethod
    def intensities(x: Inputs) -> tuple[dict[str, float], dict[str, float]]:
        """Every job's I_j and P_j on its hash placement (the paths it has before any policy places it)."""
        hashed = [crux.Demand(d.name, d.work_s, crux.flow_link_bytes(x.hashed[d.name], x.bytes_per_conn[d.name]), d.k)
                  for d in x.demands]
        inten = {d.name: crux.intensity(d, x.capacity) for d in hashed}
        return inten, crux.priorities(hashed, x.capacity)

    @staticmethod
    def levels(x: Inputs, prio: dict[str, float], rows: dict[str, list[dict]]) -> tuple[dict[str, int], dict]:
        """Compress ``prio`` onto the queues, contention from the rows the jobs will actually use."""
        placed = [crux.Demand(d.name, d.work_s, crux.flow_link_bytes(rows[d.name], x.bytes_per_conn[d.name]), d.k)
                  for d in x.demands]
        pairs = crux.contention(placed)
        res = crux.compress(prio, pairs, x.queues)
        return res["levels"], {"pairs": sorted(sorted(p) for p in pairs), "kept_weight": res["kept_weight"],
                               "cut_weight": res["cut_weight"], "orders": res["orders"]}

    @staticmethod
    def out(x: Inputs, inten: dict, prio: dict, levels: dict[str, int] | None, rows: dict[str, list[dict]]) -> dict:
        jobs = {}
        for d in x.demands:
            lv = levels.get(d.name) if levels is not None else None
            jobs[d.name] = {"intensity": _num(inten[d.name]), "priority": _num(prio[d.name]), "level": lv,
                            "queue": lv,
                            "dscp": x.dscps[lv] if lv is not None and x.dscps else None,
                            "sports": [r["sport"] for r in rows[d.name]],
                            "paths": [path_of(r) for r in rows[d.name]]}
        return jobs


def path_of(r: dict) -> str:
    """A connection's path as results.json writes it: src>tor>agg>far tor>dst, or src>tor>dst for a local
    pair (both hosts on one ToR set, no agg)."""
    if r["agg"] is None:
        return f"{r['src']}>{r['tor']}>{r['dst']}"
    return f"{r['src']}>{r['tor']}>{r['agg']}>{r['dst_tor']}>{r['dst']}"


def _num(v: float) -> float | None:
    return None if v == float("inf") else round(v, 4)


REGISTRY: dict[str, Policy] = {}


def register(cls: type[Policy]) -> type[Policy]:
    REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> Policy:
    try:
        return REGISTRY[name]
    except KeyError:
        raise SpecError(f"policy '{name}' is not a policy; choose one of {', '.join(REGISTRY)}") from None


def names() -> list[str]:
    return list(REGISTRY)
