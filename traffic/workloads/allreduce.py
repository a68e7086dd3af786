"""allreduce: a ring all-reduce over every host (or workload.hosts), the training of the paper's Fig. 18:
2(n-1) synchronised steps per iteration, on one connection per peer or on the least-loaded of several.
With ``timeout_s`` it is a job that dies, as one on NCCL or gloo does: a rank whose all-reduce has not
completed that long after it began aborts, and from the first abort on the job is dead (its figures after
that say "dead", not "not back yet")."""

import json
import sys
from typing import Literal

from pydantic import Field

from hpnlab.traffic.workloads.base import (WorkloadKind, WorkloadParams, check_hosts, congestion_of, dscp_args, recovered_at,
                                            register)


class AllReduceParams(WorkloadParams):
    hosts: list[str] | None = Field(None, description="the ring's order (default: every host)")
    size_kb: int = Field(1024, ge=1, le=1 << 20, description="bytes each iteration reduces, KB")
    connections: int = Field(4, ge=1, le=64, description="connections per peer")
    select: Literal["one", "least-loaded"] = Field("least-loaded", description=(
        "one connection per peer, or each segment on the least-loaded of several (HPN App. B)"))
    timeout_s: float | None = Field(None, gt=0, le=3600, description=(
        "collective timeout: a rank whose all-reduce (one iteration) has not completed this many seconds after "
        "it began aborts and the job is dead, as with NCCL's or gloo's timeout (default: none, it waits)"))


@register
class AllReduce(WorkloadKind):
    kind = "allreduce"
    help = "a ring all-reduce; iterations/s is the training throughput"
    series_label = "all-reduce iterations"
    Params = AllReduceParams
    marks = True

    def check(self, w, spec, cfgs, where):
        check_hosts(f"{where} workload.hosts", list(w.hosts or []), cfgs, w.rail)

    def launch(self, plan, run_dir, t0, duration):
        w = plan.workload
        ring = plan.ring()
        addrs = ",".join(plan.host_ip(h, w.rail) for h in ring)
        procs = []
        for rank, h in enumerate(ring):
            out = str(run_dir / f"allreduce-{rank}.json")
            procs.append({"role": "allreduce", "node": h, "out": out,
                          "argv": [sys.executable, "-m", "hpnlab.node.allreduce", "--rank", str(rank), "--addrs", addrs,
                                   "--size", str(w.size_kb * 1024), "--conns", str(w.connections),
                                   "--select", w.select, "--duration", f"{duration:g}", "--start-at", f"{t0:.3f}",
                                   "--congestion", w.congestion, "--out", out]
                          + (["--timeout", f"{w.timeout_s:g}"] if w.timeout_s is not None else []) + dscp_args(w)})
        return procs

    def result(self, plan, run_dir):
        reps = [json.loads(p.read_text()) for p in sorted(run_dir.glob("allreduce-*.json"))]
        if not reps:
            return None
        r0 = min(reps, key=lambda r: r["rank"])
        return {"kind": "allreduce", "select": plan.workload.select, "connections": r0["connections"],
                "ranks": r0["ranks"], "bytes_per_iteration": r0["bytes_per_iteration"], "iterations": r0["iterations"],
                "resent_segments": sum(r["resent_segments"] for r in reps),
                "duplicate_segments": sum(r["duplicate_segments"] for r in reps), "congestion": congestion_of(reps),
                "timeout_s": plan.workload.timeout_s, **deaths(reps)}

    def rate_series(self, w, t0, bin_s=0.25):
        its = w["iterations"]
        if not its:
            return []
        n = int((max(its) - t0) / bin_s) + 1
        counts = [0] * max(n, 1)
        for t in its:
            k = int((t - t0) / bin_s)
            if 0 <= k < len(counts):
                counts[k] += 1
        return [(round((k + 0.5) * bin_s, 3), c / bin_s) for k, c in enumerate(counts)]

    def window(self, w, t0, base_end, start, end):
        """Iterations/s during the fault against before it, and the longest halt between iterations (until
        the job died, if it died in the window: ``died_ms`` after the fault's start)."""
        its = w["iterations"]
        base = [t for t in its if t0 + 0.5 <= t < base_end]
        base_rate = len(base) / max(1e-9, base_end - t0 - 0.5)
        during = [t for t in its if start <= t < end]
        rate = len(during) / max(1e-9, end - start)
        died = dead_at(w)
        marks = [start] + during + [min(end, died) if died is not None and died >= start else end]
        halt = max(b - a for a, b in zip(marks, marks[1:]))
        out = {"baseline_rate": round(base_rate, 2), "rate_during": round(rate, 2),
               "throughput_pct": round(100 * rate / base_rate, 1) if base_rate else None,
               "longest_halt_ms": round(halt * 1000, 1)}
        if died is not None and start <= died < end:
            out["died_ms"] = round((died - start) * 1000, 1)
        return out

    def recovery(self, w, t0, base_end, repair, window_end):
        """Iterations after the repair: when the ring ran at 90 % of its pre-fault rate again. A job that
        died before it was back (before the repair, or after it but still short of its rate) is ``dead``,
        not slow: no recovery_ms and no halt after the repair, since nothing was left to come back."""
        its = w["iterations"]
        base = [t for t in its if t0 + 0.5 <= t < base_end]
        out = recovered_at(its, len(base) / max(1e-9, base_end - t0 - 0.5), repair, window_end)
        died = dead_at(w)
        if died is None or died >= window_end:
            return out
        if out.get("recovered") and died >= repair + out["recovery_ms"] / 1000:
            return out  # back first, dead later: a later fault's doing, not this one's
        return {"dead": True, "recovered": False, "recovery_ms": None, "halt_after_repair_ms": None,
                "died_after_repair_ms": round((died - repair) * 1000, 1)}


def deaths(reps: list[dict]) -> dict:
    """The ranks that aborted on the collective timeout (``deaths``, in order) and the job's death: the first
    abort (``died``: its rank, wall-clock time and how long its all-reduce had blocked). A job whose rank
    aborted is dead from then on, whatever the other ranks did: the library tears the job down."""
    out = sorted(({"rank": r["rank"], **r["aborted"]} for r in reps if r.get("aborted")), key=lambda d: d["at"])
    return {"deaths": out, "died": out[0] if out else None}


def dead_at(w: dict) -> float | None:
    """When the job died (wall clock), or None: it ran to the end."""
    return (w.get("died") or {}).get("at")
