"""allreduce: a ring all-reduce over every host (or workload.hosts), the training of the paper's Fig. 18:
2(n-1) synchronised steps per iteration, on one connection per peer or on the least-loaded of several."""

import json
import sys
from typing import Literal

from pydantic import Field

from hpnlab.traffic.workloads.base import WorkloadKind, WorkloadParams, check_hosts, congestion_of, recovered_at, register


class AllReduceParams(WorkloadParams):
    hosts: list[str] | None = Field(None, description="the ring's order (default: every host)")
    size_kb: int = Field(1024, ge=1, le=1 << 20, description="bytes each iteration reduces, KB")
    connections: int = Field(4, ge=1, le=64, description="connections per peer")
    select: Literal["one", "least-loaded"] = Field("least-loaded", description=(
        "one connection per peer, or each segment on the least-loaded of several (HPN App. B)"))


@register
class AllReduce(WorkloadKind):
    kind = "allreduce"
    help = "a ring all-reduce; iterations/s is the training throughput"
    series_label = "all-reduce iterations"
    Params = AllReduceParams

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
                                   "--congestion", w.congestion, "--out", out]})
        return procs

    def result(self, plan, run_dir):
        reps = [json.loads(p.read_text()) for p in sorted(run_dir.glob("allreduce-*.json"))]
        if not reps:
            return None
        r0 = min(reps, key=lambda r: r["rank"])
        return {"kind": "allreduce", "select": plan.workload.select, "connections": r0["connections"],
                "ranks": r0["ranks"], "bytes_per_iteration": r0["bytes_per_iteration"], "iterations": r0["iterations"],
                "resent_segments": sum(r["resent_segments"] for r in reps),
                "duplicate_segments": sum(r["duplicate_segments"] for r in reps), "congestion": congestion_of(reps)}

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
        """Iterations/s during the fault against before it, and the longest halt between iterations."""
        its = w["iterations"]
        base = [t for t in its if t0 + 0.5 <= t < base_end]
        base_rate = len(base) / max(1e-9, base_end - t0 - 0.5)
        during = [t for t in its if start <= t < end]
        rate = len(during) / max(1e-9, end - start)
        marks = [start] + during + [end]
        halt = max(b - a for a, b in zip(marks, marks[1:]))
        return {"baseline_rate": round(base_rate, 2), "rate_during": round(rate, 2),
                "throughput_pct": round(100 * rate / base_rate, 1) if base_rate else None,
                "longest_halt_ms": round(halt * 1000, 1)}

    def recovery(self, w, t0, base_end, repair, window_end):
        """Iterations after the repair: when the ring ran at 90 % of its pre-fault rate again."""
        its = w["iterations"]
        base = [t for t in its if t0 + 0.5 <= t < base_end]
        return recovered_at(its, len(base) / max(1e-9, base_end - t0 - 0.5), repair, window_end)
