"""alltoall: one all-to-all round, the exchange a mixture-of-experts layer makes: every host of the rail
sends workload.size_kb to every other host of it at once (on workload.connections connections each, the
switches' hash placing them), and the round is done when the last byte has arrived. The figure is the
round's completion time (per host and overall), with or without a fault during it. It runs the elephant
node program (hpnlab.node.programs.elephant); nothing else in hpnlab changed to add it."""

import json
import sys

from pydantic import Field

from hpnlab.errors import SpecError
from hpnlab.traffic.workloads.base import WorkloadKind, WorkloadParams, congestion_of, dscp_args, register, senders_done

PORT = 5400
SPORT_BASE = 40000  # this host's connections to its peers: 40000 + peer index x connections + i


class AllToAllParams(WorkloadParams):
    size_kb: int = Field(1024, ge=1, le=1 << 20, description="bytes each host sends each other host, KB")
    connections: int = Field(4, ge=1, le=64, description="connections from each host to each other host")


@register
class AllToAll(WorkloadKind):
    kind = "alltoall"
    help = "one all-to-all round between every host of the rail (MoE); its completion time"
    Params = AllToAllParams
    marks = True

    def check(self, w, spec, cfgs, where):
        hosts = [n for n, c in cfgs.items() if c.role == "host"]
        if len(hosts) < 2:
            raise SpecError(f"{where} workload: alltoall needs at least two hosts")
        if len(hosts) * w.connections > 20000:
            raise SpecError(f"{where} workload.connections: {len(hosts)} hosts x {w.connections} connections "
                            f"need more source ports than there are; give fewer connections")

    def launch(self, plan, run_dir, t0, duration):
        w = plan.workload
        hosts = sorted(n for n, c in plan.cfgs.items() if c.role == "host")
        ip = {h: plan.host_ip(h, w.rail) for h in hosts}
        py = sys.executable
        procs = []
        for h in hosts:
            out = str(run_dir / f"alltoall-rx-{h}.json")
            procs.append({"role": "alltoall-rx", "node": h, "out": out,
                          "argv": [py, "-m", "hpnlab.node.programs.elephant", "serve", "--bind", ip[h], "--port", str(PORT),
                                   "--duration", f"{duration + 1:g}", "--start-at", f"{t0 - 1:.3f}",
                                   "--congestion", w.congestion, "--out", out] + dscp_args(w)})
        for h in hosts:
            flows = [f"{ip[p]}:{SPORT_BASE + j * w.connections + i}" for j, p in enumerate(hosts) if p != h
                     for i in range(w.connections)]
            out = str(run_dir / f"alltoall-tx-{h}.json")
            procs.append({"role": "alltoall-tx", "node": h, "out": out,
                          "argv": [py, "-m", "hpnlab.node.programs.elephant", "send", "--src", ip[h], "--port", str(PORT),
                                   "--flows", ",".join(flows), "--size", str(w.size_kb * 1024 // w.connections),
                                   "--select", "hash", "--duration", f"{duration:g}", "--start-at", f"{t0:.3f}",
                                   "--congestion", w.congestion, "--out", out] + dscp_args(w)})
        return procs

    def done(self, procs):
        """The round is over when every sender has delivered; the receivers are then told to stop."""
        return senders_done(procs, "alltoall-tx", ("alltoall-rx",))

    def result(self, plan, run_dir):
        senders = {p.stem.removeprefix("alltoall-tx-"): json.loads(p.read_text())
                   for p in sorted(run_dir.glob("alltoall-tx-*.json"))}
        if not senders:
            return None
        receivers = [json.loads(p.read_text()) for p in sorted(run_dir.glob("alltoall-rx-*.json"))]
        per_host = {h: s.get("completion_s") for h, s in senders.items()}
        complete = all(s.get("complete") for s in senders.values())
        return {"kind": "alltoall", "hosts": len(senders), "bytes_per_peer": plan.workload.size_kb * 1024,
                "complete": complete, "completion_s": max(per_host.values()) if complete else None,
                "per_host_s": per_host, "congestion": congestion_of([*senders.values(), *receivers])}
