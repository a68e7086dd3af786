"""elephant: bulk TCP flows from every host to every host of the other segments, placed on a path map
the variant probes first (paper §6.1, Fig. 13/14): by the switches' hash, or by HPN's disjoint selection."""

import json
import random
import sys
import time
from typing import Literal

from pydantic import Field

from hpnlab.errors import SpecError
from hpnlab.traffic.workloads.base import WorkloadKind, WorkloadParams, dscp_args, register, senders_done


class ElephantParams(WorkloadParams):
    flows_per_peer: int = Field(2, ge=1, le=64, description="flows from every host to each host of the other segments")
    size_kb: int = Field(1024, ge=1, le=1 << 20, description="bytes per flow, KB")
    select: Literal["hash", "disjoint"] = Field("hash", description=(
        "hash: the switches' hash places each flow; disjoint: HPN's path selection on the path map"))
    pool: int = Field(64, ge=2, le=1024, description="source ports probed per host pair for the path map")
    sets: int = Field(100, ge=1, le=100000, description="random flow sets laid onto the map")
    sample_ms: int = Field(100, ge=10, le=10000, description="port counter / queue sampling interval")


def analyse_map(rows: list[dict], plan) -> dict:
    from hpnlab.traffic.run import balance

    w = plan.workload
    res = {"distinct_paths": balance.distinct_paths(rows)}
    for sel in ("hash", "disjoint"):
        res[sel] = balance.analyse(rows, plan.cfgs, w.sets, w.flows_per_peer, sel, rail=w.rail)
    return res


def _fmt(st: dict) -> str:
    return "/".join("inf" if st[k] is None else f"{st[k]:g}" for k in ("median", "p90"))


@register
class Elephant(WorkloadKind):
    kind = "elephant"
    help = "bulk flows between segments, placed on a probed path map by hash or disjoint selection"
    Params = ElephantParams
    marks = True

    def check(self, w, spec, cfgs, where):
        if w.pool < w.flows_per_peer:
            raise SpecError(f"{where} workload.pool: probe at least flows_per_peer ({w.flows_per_peer}) "
                            f"source ports per pair")
        if spec.segments < 2:
            raise SpecError(f"{where} spec.segments: elephant flows cross segments; give segments >= 2")

    def prepare_variant(self, lab, plan, raw, progress):
        """Probe the variant's path map once (the lab does not change between repetitions) and lay
        ``sets`` random flow sets onto it, with each way of choosing source ports."""
        from hpnlab.traffic.run import balance, bulk

        w = plan.workload
        progress(f"{plan.name}: probing the path map ({w.pool} source ports per host pair, TCP dport {bulk.PORT})")
        t = time.monotonic()
        rows = balance.probe_map(lab.runtime, lab.cfgs, w.rail, w.pool, bulk.PORT, "tcp")
        raw.mkdir(parents=True, exist_ok=True)
        (raw / "pathmap.json").write_text(json.dumps(rows))
        res = {"probe_s": round(time.monotonic() - t, 2), **analyse_map(rows, plan)}
        progress(f"{plan.name}: {len(balance.complete(rows))}/{len(rows)} probes answered; downlink ratio "
                 f"(median/p90) hash {_fmt(res['hash']['downlink_ratio'])}, disjoint "
                 f"{_fmt(res['disjoint']['downlink_ratio'])}")
        return {"balance": res}

    def prepare_repetition(self, plan, raw, run_dir, k):
        """Repetition k's flow set (seeded by k, so a re-run picks the same flows), kept beside its reports."""
        from hpnlab.traffic.run import balance

        rows = json.loads((raw / "pathmap.json").read_text())
        w = plan.workload
        plan.flows = balance.choose(balance.index(rows), plan.cfgs, w.flows_per_peer, w.select, random.Random(1000 + k))
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "flows.json").write_text(json.dumps(plan.flows))

    def launch(self, plan, run_dir, t0, duration):
        """Per host a receiver and (for its flows) a sender, per switch a port sampler (pure)."""
        from hpnlab.traffic.run import balance
        from hpnlab.traffic.run.bulk import PORT

        py = sys.executable
        w, cfgs, flows = plan.workload, plan.cfgs, plan.flows
        out = []
        ip = {h: plan.host_ip(h, w.rail) for h in balance.hosts_of(cfgs)}
        for h in balance.hosts_of(cfgs):
            f = str(run_dir / f"elephant-rx-{h}.json")
            out.append({"role": "elephant-rx", "node": h, "out": f,
                        "argv": [py, "-m", "hpnlab.node.programs.elephant", "serve", "--bind", ip[h], "--port", str(PORT),
                                 "--duration", f"{duration + 1:g}", "--start-at", f"{t0 - 1:.3f}",
                                 "--congestion", w.congestion, "--out", f] + dscp_args(w)})
        for h in balance.hosts_of(cfgs):
            mine = [r for r in flows if r["src"] == h]
            if not mine:
                continue
            f = str(run_dir / f"elephant-tx-{h}.json")
            out.append({"role": "elephant-tx", "node": h, "out": f,
                        "argv": [py, "-m", "hpnlab.node.programs.elephant", "send", "--src", ip[h], "--port", str(PORT),
                                 "--flows", ",".join(f"{ip[r['dst']]}:{r['sport']}" for r in mine),
                                 "--size", str(w.size_kb * 1024), "--select", w.select,
                                 "--duration", f"{duration:g}", "--start-at", f"{t0:.3f}",
                                 "--congestion", w.congestion, "--out", f] + dscp_args(w)})
        for n, c in sorted(cfgs.items()):
            if c.role == "host":
                continue
            f = str(run_dir / f"linkstats-{n}.json")
            out.append({"role": "linkstats", "node": n, "out": f,
                        "argv": [py, "-m", "hpnlab.node.linkstats", "--ifaces",
                                 ",".join(c.iface_names), "--interval", f"{w.sample_ms / 1000:g}",
                                 "--duration", f"{duration + 0.5:g}", "--start-at", f"{t0:.3f}", "--out", f]})
        return out

    def done(self, procs):
        """Elephant runs end when every sender has finished (its flows delivered), not at the duration:
        the receivers and samplers are then told to stop and write their reports."""
        if not senders_done(procs, "elephant-tx", ()):
            return False
        time.sleep(0.3)  # the samplers see the ports go idle
        return senders_done(procs, "elephant-tx", ("elephant-rx", "linkstats"))

    def after_repetition(self, lab, plan, run_dir):
        """Per-flow multipath: every flow's 5-tuple re-probed beside the path the variant's map predicted for
        it, and the ToRs' FARE weights (hpnlab.traffic.run.pathcheck)."""
        from hpnlab.traffic.run import bulk, pathcheck

        if not pathcheck.wanted(plan) or not (run_dir / "flows.json").exists():
            return
        flows = json.loads((run_dir / "flows.json").read_text())
        pathcheck.record(lab, plan, run_dir, [
            {"src": f["src"], "dst": f["dst"], "sport": f["sport"], "dport": bulk.PORT, "rail": plan.workload.rail,
             "predicted_tor": f.get("tor"), "predicted_agg": f.get("agg")} for f in flows])

    def result(self, plan, run_dir):
        from hpnlab.traffic.run import bulk, pathcheck

        out = bulk.result(plan, run_dir)
        check = pathcheck.read(run_dir)
        if out is not None and check is not None:
            out["pathcheck"] = check
        return out

    def aggregate(self, runs):
        from hpnlab.traffic.run import bulk, pathcheck

        return {"bulk": bulk.aggregate(runs), **pathcheck.aggregate(runs)}

    own_report = True  # the path-map and bulk figures (and the load-balance plot) replace the probes' table

    @property
    def legend(self):
        from hpnlab.traffic.run import bulk

        return bulk.LEGEND

    def summary_table(self, results):
        from hpnlab.traffic.run import bulk

        return bulk.summary_table(results)

    def plot(self, results, path):
        from hpnlab.traffic.run import bulk

        return bulk.plot(results, path)

    def raw_needed(self, raw):
        return [raw / "pathmap.json"]

    def reanalyse(self, v, raw, plan, runs):
        rows = json.loads((raw / "pathmap.json").read_text())
        return {"balance": {"probe_s": v.get("balance", {}).get("probe_s"), **analyse_map(rows, plan)},
                **self.aggregate(runs), "select": plan.workload.select}
