"""sincronia: Sincronia's bottleneck-ordered coflow priorities (Agarwal, Rajakrishnan, Narayan, Agarwal,
Shmoys and Vahdat, "Sincronia: Near-Optimal Network Design for Coflows", SIGCOMM 2018), a baseline the Crux
paper compares with.

Sincronia orders coflows with its Bottleneck-Select-Scale-Iterate algorithm (BSSI, the paper's Algorithm
1), filling the order from the last place forward: find the most bottlenecked port (the most bytes still
to send, over the coflows not yet ordered); of the coflows on it, put last the one with the largest bytes
there per unit of weight; scale the other coflows' weights down by what that one's bytes there cost them
(w_c -= w_last * d_bc / d_b,last); drop it and repeat. Coflows are then served strictly in that order
(any order-preserving rate allocation is near-optimal), which leaves small-bottleneck coflows first.

In hpnlab a coflow is one iteration's traffic of one job (its collective's bytes on every link its
connections take, as Crux's intensity counts them: hpnlab.traffic.policies.arithmetic). What is simplified:
- Ports are the lab's shaped links, each weighed by its capacity (seconds of traffic, not bytes): the
  paper's model is a non-blocking "big switch" whose ports are the hosts' links, all of one speed; here the
  ToR-agg uplinks are where the jobs meet, so they are ports too.
- Every job has weight 1 (the paper's unweighted case); the order is computed once, from the jobs' per-
  iteration demand on their hash placement, not re-computed online as coflows arrive and finish (the
  jobs repeat the same coflow every iteration, so the order would not change).
- Paths are the switches' hash (Sincronia schedules, it does not route), as fifo's.
- The order goes onto the switches' K strict-priority queues: the first K-1 jobs of the order one queue
  each, every later job the last queue (the paper's end-host implementation has as many priorities as it
  needs; switches here have K).
"""

from __future__ import annotations

import hpnlab.traffic.policies.arithmetic as crux
from hpnlab.traffic.policies.base import Inputs, Policy, register


def bssi_order(demand_s: dict[str, dict], weights: dict[str, float] | None = None) -> list[str]:
    """Sincronia's BSSI order, first served first: ``demand_s[job][port]`` is the job's demand on that port
    (here seconds of traffic on a link); ``weights`` 1 each unless given. Ties go by name (reproducible)."""
    left = sorted(demand_s)
    w = {j: float((weights or {}).get(j, 1.0)) for j in left}
    out: list[str] = []
    while left:
        load: dict = {}
        for j in left:
            for port, d in demand_s[j].items():
                if d > 0:
                    load[port] = load.get(port, 0.0) + d
        if not load:  # what is left sends nothing on a shaped link: it waits for nobody, first by name
            out = left + out
            break
        b = max(sorted(load), key=lambda p: load[p])  # the most bottlenecked port (ties: the first by sort)
        on_b = [j for j in left if demand_s[j].get(b, 0.0) > 0]
        last = max(on_b, key=lambda j: (demand_s[j][b] / w[j] if w[j] > 0 else float("inf"), j))
        for j in on_b:
            if j != last:
                w[j] = max(0.0, w[j] - w[last] * demand_s[j][b] / demand_s[last][b])
        out.insert(0, last)
        left.remove(last)
    return out


def levels_of(order: list[str], queues: int) -> dict[str, int]:
    """The first queues-1 jobs of the order a queue each (0 the highest), every later one the last queue."""
    return {j: min(i, queues - 1) for i, j in enumerate(order)}


def demands_s(x: Inputs) -> dict[str, dict]:
    """Each job's seconds of traffic per iteration on every shaped link of its hash placement."""
    out = {}
    for d in x.demands:
        lb = crux.flow_link_bytes(x.hashed[d.name], x.bytes_per_conn[d.name])
        out[d.name] = {lk: 8 * b / x.capacity[lk] for lk, b in lb.items() if x.capacity.get(lk) and b > 0}
    return out


@register
class Sincronia(Policy):
    name = "sincronia"
    help = "baseline: Sincronia's bottleneck-ordered coflow priorities (BSSI) on the queues, paths by the hash"

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        order = bssi_order(demands_s(x))
        levels = levels_of(order, x.queues)
        return {"jobs": self.out(x, inten, prio, levels, x.hashed), "order": order}
