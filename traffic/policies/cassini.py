"""cassini: CASSINI's time offsets between jobs' communication phases (Rajasekaran, Ghobadi and Akella,
"CASSINI: Network-Aware Job Scheduling in Machine Learning Clusters", NSDI 2024), a baseline the Crux paper
compares with.

CASSINI puts each job's iteration on a circle whose perimeter is the iteration time, its communication an
arc of it; for jobs that share a link it rotates their circles (a time shift per job) so that their arcs
overlap least, scoring a rotation by the link's excess demand over its capacity through the period (its
compatibility score); an affinity graph of jobs and links carries the shifts from link to link, and each
job's start is delayed by its shift. Jobs then interleave their communication on the shared links instead
of colliding. It does not prioritise (one class) and takes paths as they are.

In hpnlab each job's iteration is its compute (``compute_ms``) then its communication, which alone would
take t_j, the time its bytes need on its most loaded link (Crux's t_j: hpnlab.traffic.policies.arithmetic); while it
communicates it loads each of its links at that link's bytes over t_j. What is simplified:
- The shifts are chosen greedily: jobs in order of their communication time (longest first, ties by name),
  the first unshifted, each next one at the shift (searched in ``STEPS`` steps of its period) whose
  overlap with the jobs already placed, summed over the shared links as excess demand over capacity
  through ``PERIODS`` periods of the longest iteration, is least. CASSINI traverses its affinity graph
  instead; on a contention graph without loops (the shipped experiment's) the two agree link by link.
- The circle is that horizon, not the least common multiple of the iteration times (which for iteration
  times like 0.45 s and 0.89 s is minutes long).
- A shift delays a job's start once (its first compute begins that much later; the window its GPU
  utilisation is measured over still begins at the run's start); CASSINI re-adjusts when jobs drift, this
  does not.
- The iteration times are the demand's on the hash placement with nothing else on the links, not
  measured profiles; paths are the switches' hash (CASSINI chooses among a placement scheduler's
  candidates; here every job's hosts are given).
"""

from __future__ import annotations

import hpnlab.traffic.policies.arithmetic as crux
from hpnlab.traffic.policies.base import Inputs, Policy, register

STEPS = 100  # shifts tried per job: its period in this many steps
PERIODS = 4  # the horizon the overlap is summed over: this many of the longest iteration
SAMPLES = 800  # points in time over the horizon


def _busy(t: float, shift: float, compute: float, period: float) -> bool:
    """Whether a job (compute first, then communication) communicates at time t when started ``shift`` late."""
    if t < shift or period <= 0:
        return False
    return (t - shift) % period >= compute


def offsets(jobs: dict[str, dict], capacity: dict) -> dict[str, float]:
    """{job: shift in seconds}. ``jobs[j]``: {compute_s, comm_s (t_j), rate_bps: {link: bits/s while it
    communicates}}. Jobs with no communication, or no shaped link shared with another, are not shifted."""
    period = {j: v["compute_s"] + v["comm_s"] for j, v in jobs.items()}
    longest = max(period.values(), default=0.0)
    if longest <= 0:
        return {j: 0.0 for j in jobs}
    horizon = PERIODS * longest
    times = [horizon * (i + 0.5) / SAMPLES for i in range(SAMPLES)]
    order = sorted(jobs, key=lambda j: (-jobs[j]["comm_s"], j))
    placed: dict[str, float] = {}
    # per link, the demand the placed jobs put on it at each sample
    load: dict = {lk: [0.0] * SAMPLES for v in jobs.values() for lk in v["rate_bps"]}

    def excess(j: str, shift: float) -> float:
        v, tot = jobs[j], 0.0
        for i, t in enumerate(times):
            if _busy(t, shift, v["compute_s"], period[j]):
                for lk, r in v["rate_bps"].items():
                    cap = capacity.get(lk)
                    if cap:
                        tot += max(0.0, load[lk][i] + r - cap) - max(0.0, load[lk][i] - cap)
        return tot

    for j in order:
        v = jobs[j]
        shared = any(any(load[lk]) for lk in v["rate_bps"])
        if v["comm_s"] <= 0 or not shared:
            best = 0.0
        else:
            cands = [period[j] * s / STEPS for s in range(STEPS)]
            best = min(cands, key=lambda s: (round(excess(j, s), 6), s))
        placed[j] = best
        for i, t in enumerate(times):
            if _busy(t, best, v["compute_s"], period[j]):
                for lk, r in v["rate_bps"].items():
                    load[lk][i] += r
    return {j: round(placed[j], 4) for j in jobs}


def timelines(x: Inputs) -> dict[str, dict]:
    """Each job's compute, t_j and per-link rate while communicating, on its hash placement."""
    out = {}
    for d in x.demands:
        lb = crux.flow_link_bytes(x.hashed[d.name], x.bytes_per_conn[d.name])
        t, _ = crux.comm_time_s(lb, x.capacity)
        rate = {lk: 8 * b / t for lk, b in lb.items() if x.capacity.get(lk) and b > 0} if t > 0 else {}
        out[d.name] = {"compute_s": x.compute_s.get(d.name, 0.0), "comm_s": t, "rate_bps": rate}
    return out


@register
class Cassini(Policy):
    name = "cassini"
    help = "baseline: CASSINI's time shifts so jobs' communication interleaves on shared links; one class, hash paths"
    uses_queues = False

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        jobs = self.out(x, inten, prio, None, x.hashed)
        for j, s in offsets(timelines(x), x.capacity).items():
            jobs[j]["offset_s"] = s
        return {"jobs": jobs}
