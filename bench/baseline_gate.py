#!/usr/bin/env python3
"""Does `hpnlab run --baseline` tell a worse configuration from the same one? Runs link-failure's Clos
variant (dual-tor-clos) as shipped and with a deliberately worse configuration (no host /32s in BGP, so
the aggs keep sending to the ToR that lost the host), one repetition each time, several times, compares
every run with the shipped results/link-failure and writes results/baseline-gate/ (root):

    sudo .venv/bin/python bench/baseline_gate.py                 # 6 unmodified runs, 2 worse ones
    sudo .venv/bin/python bench/baseline_gate.py --same 3 --worse 1 --out /tmp/gate

gate.json has, per run, its verdicts (every figure worse, with the stream), the figures the gate turns
on and the machine's CPU pressure over the run; summary.txt the same as a table. It is the evidence
docs/baselines.md quotes for the tolerance rule (which figures a busy 2-core machine moves past the
shipped baseline's spread and which it does not).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VARIANT = "dual-tor-clos"
WORSE = {"mechanisms": {"host_routes": False}}  # the variant's spec gains this
FIGURES = ("converged_gap_ms", "blackholed_flows", "lost_packets", "recovery_after_repair_ms",
           "workload.throughput_pct", "workload.recovery_ms")


def experiment_file(dest: Path, prefix: str, worse: bool) -> Path:
    """link-failure.yml as shipped (its spec path made absolute), its labs named <prefix><i>; ``worse``:
    the Clos variant without host routes."""
    doc = yaml.safe_load((ROOT / "experiments" / "link-failure.yml").read_text())
    doc["spec"] = str(ROOT / "experiments" / doc["spec"])
    doc["lab_prefix"] = prefix
    if worse:
        [v] = [v for v in doc["variants"] if v["name"] == VARIANT]
        v["spec"] = {**v.get("spec", {}), **WORSE}
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def _fig(fault: dict, name: str):
    x = fault
    for part in name.split("."):
        x = (x or {}).get(part)
    return (x or {}).get("median")


def one(kind: str, k: int, out: Path, baseline: Path) -> dict:
    from hpnlab.traffic.analysis import compare

    exp = experiment_file(out / "raw" / f"{kind}.yml", "bgw" if kind == "worse" else "bgs", kind == "worse")
    run_dir = out / "raw" / f"{kind}{k}"
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(exp), "--out", str(run_dir), "--force",
                        "--variants", VARIANT, "--repetitions", "1", "--baseline", str(baseline)],
                       cwd=ROOT, capture_output=True, text=True)
    rec = {"config": kind, "run": k, "exit": p.returncode, "seconds": round(time.monotonic() - t)}
    if not (run_dir / "results.json").exists():
        return {**rec, "error": p.stderr.strip().splitlines()[-1:] or ["no results.json"]}
    res = json.loads((run_dir / "results.json").read_text())
    v = res["variants"][VARIANT]
    if v.get("error"):
        rec["error"] = v["error"]
    cmp = compare.compare(baseline, run_dir)
    worse = [f"{r.stream}:{r.figure}" for r in cmp.regressions]
    probes_worse = [w for w in worse if not w.split(":", 1)[1].startswith("workload.")]
    fault = (v.get("faults") or [{}])[0]
    em = (v.get("runs") or [{}])[0].get("emulator") or {}
    return {**rec, "passed": cmp.ok, "worse": worse, "probe_figures_worse": len(probes_worse),
            "workload_figures_worse": len(worse) - len(probes_worse),
            "figures": {f: _fig(fault, f) for f in FIGURES},
            "flagged": (fault.get("emulator") or {}).get("flagged"),
            "psi_some_pct": em.get("psi_some_pct")}


LEGEND = {
    "config": "same: the configuration as shipped; worse: the worse one (WORSE)",
    "run": "the run of its configuration, from 1",
    "exit": "hpnlab compare's exit status (0: no figure worse than the baseline)",
    "worse p/w": "figures worse than the baseline: the probes' / the workload's",
    "converged ms": "the fault's converged gap, all streams",
    "black-holed": "flows silent from the fault until its repair",
    "workload %": "the workload's throughput during the fault, % of its baseline",
    "back ms": "from the repair until the workload ran at 90 % of its baseline",
    "PSI %": "CPU pressure 'some' over the run",
    "worse:": "(the line under a run) the figures compare found worse, or the run's error",
}


def summary(doc: dict) -> str:
    """A row per run, the figures compare found worse on a line under it, the totals, the legend of every
    column last; at most 100 columns."""
    from hpnlab.traffic.output import report

    lines = [f"baseline gate: link-failure's {VARIANT}, 1 repetition per run, each compared with "
             f"{doc['baseline']} (exit 0 = no figure worse)", "",
             "config  run  exit  worse p/w  converged ms  black-holed  workload %  back ms  PSI %"]
    for r in doc["runs"]:
        f = r.get("figures", {})
        pw = f"{r.get('probe_figures_worse', '-')} / {r.get('workload_figures_worse', '-')}"
        lines.append(f"{r['config']:<7} {r['run']:>3}  {r['exit']:>4}  {pw:>9}  {f.get('converged_gap_ms')!s:>12}  "
                     f"{f.get('blackholed_flows')!s:>11}  {f.get('workload.throughput_pct')!s:>10}  "
                     f"{f.get('workload.recovery_ms')!s:>7}  {r.get('psi_some_pct')!s:>5}")
        lines.append("    worse: " + (", ".join(r.get("worse", [])) or r.get("error", "") or "-"))
    lines.append("")
    for kind, t in doc["totals"].items():
        lines.append(f"{kind}: {t['runs']} runs, {t['passed']} passed; probe figures worse in {t['probe_worse_runs']}, "
                     f"workload figures worse in {t['workload_worse_runs']}")
    return "\n".join(report.wrap(lines) + report.legend_lines(None, LEGEND, "bench/baseline_gate.py")) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--same", type=int, default=6, help="runs of the configuration as shipped")
    ap.add_argument("--worse", type=int, default=2, help="runs of the worse configuration")
    ap.add_argument("--out", default=str(ROOT / "results" / "baseline-gate"))
    ap.add_argument("--baseline", default=str(ROOT / "results" / "link-failure"))
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args(argv)
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    from hpnlab.instrument import provenance

    out = Path(a.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)  # the runs and their experiment files (git-ignored)
    doc = {"baseline": str(Path(a.baseline).relative_to(ROOT)) if Path(a.baseline).is_relative_to(ROOT) else a.baseline,
           "variant": VARIANT, "worse_spec": WORSE, "provenance": provenance.collect(), "runs": []}
    # alternating, so a busy spell of the machine falls on both configurations
    order = [("same", k + 1) for k in range(a.same)]
    for j in range(a.worse):
        order.insert(min(len(order), 3 * j + 1), ("worse", j + 1))
    for kind, k in order:
        print(f"== {kind} {k}", flush=True)
        rec = one(kind, k, out, Path(a.baseline))
        print(json.dumps(rec), flush=True)
        doc["runs"].append(rec)
    doc["totals"] = {kind: {"runs": len(rs), "passed": sum(bool(r.get("passed")) for r in rs),
                            "probe_worse_runs": sum(bool(r.get("probe_figures_worse")) for r in rs),
                            "workload_worse_runs": sum(bool(r.get("workload_figures_worse")) for r in rs)}
                     for kind in ("same", "worse") if (rs := [r for r in doc["runs"] if r["config"] == kind])}
    (out / "gate.json").write_text(json.dumps(doc, indent=1))
    (out / "summary.txt").write_text(summary(doc))
    print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
