#!/usr/bin/env python3
"""Benchmark: does the lateness meter tell a fabric's figure from the machine's? The default lab's access
link failure (link-failure.yml: dual-plane and Clos tier 2) in one run under three conditions:

- idle: the machine as it is;
- hog: a CPU hog (one busy process) in its own cgroup, held to one core's worth of CPU;
- 1-core: the whole run (controller, FRR, agents, probes) pinned to one CPU by a cpuset cgroup.

For each: the longest gap (median/max over repetitions), the meter's lateness in the fault's window,
how many repetitions it flagged, and CPU pressure; then whether the loaded figures agree with the idle
ones within the meter's bound or are flagged. Last, the meter's own cost. Writes DIR/fidelity.json.
Needs root. Usage:
    sudo .venv/bin/python bench/fidelity.py --out results/fidelity [-n 3] [--conditions idle,hog,1-core] [--rejudge]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = "dual-tor,dual-tor-clos"
CG = "hpnlab-fidelity"


class Cgroup:
    """One cgroup of our own, v2 (unified) or v1 (a controller's own hierarchy); removed by ``remove``."""

    def __init__(self, controller: str, name: str) -> None:
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        self.v2 = v2.exists()
        self.path = Path("/sys/fs/cgroup") / name if self.v2 else Path("/sys/fs/cgroup") / controller / name
        if self.v2:
            sub = Path("/sys/fs/cgroup/cgroup.subtree_control")
            if controller not in sub.read_text().split():
                sub.write_text(f"+{controller}")
        self.path.mkdir(exist_ok=True)

    def write(self, v1: str, v2: str, value: str) -> None:
        (self.path / (v2 if self.v2 else v1)).write_text(value)

    def add(self, pid: int) -> None:
        (self.path / ("cgroup.procs" if self.v2 else "tasks")).write_text(str(pid))

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)  # its last process is still exiting


def hog() -> tuple[subprocess.Popen, Cgroup]:
    """A busy loop held to one core's worth of CPU (cpu quota = period) in its own cgroup."""
    cg = Cgroup("cpu", CG + "-hog")
    cg.write("cpu.cfs_period_us", "cpu.max", "100000")
    if not cg.v2:
        cg.write("cpu.cfs_quota_us", "cpu.max", "100000")
    else:
        cg.write("", "cpu.max", "100000 100000")
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    cg.add(p.pid)
    return p, cg


def one_core() -> Cgroup:
    cg = Cgroup("cpuset", CG + "-1core")
    cg.write("cpuset.mems", "cpuset.mems", "0")
    cg.write("cpuset.cpus", "cpuset.cpus", "0")
    return cg


def run(condition: str, out: Path, reps: int) -> dict:
    """One `hpnlab run` of the two variants under the condition; its results.json figures."""
    d = out / "runs" / condition
    if d.exists():
        shutil.rmtree(d)
    argv = [sys.executable, "-m", "hpnlab", "run", str(ROOT / "experiments/link-failure.yml"), "--out", str(d),
            "-n", str(reps), "--variants", VARIANTS]
    extra: list = []
    pre = None
    if condition == "hog":
        extra = list(hog())
    elif condition == "1-core":
        cg = one_core()
        extra = [cg]
        pre = lambda: cg.add(os.getpid())  # noqa: E731 (the child joins before it execs: all it starts is in)
    t = time.monotonic()
    try:
        r = subprocess.run(argv, cwd=ROOT, preexec_fn=pre, capture_output=True, text=True)
    finally:
        for x in extra:
            if isinstance(x, subprocess.Popen):
                x.kill()
                x.wait()
        for x in extra:
            if isinstance(x, Cgroup):
                x.remove()
    if r.returncode != 0:
        raise SystemExit(f"{condition}: hpnlab run exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return {**figures(d), "condition": condition, "seconds": round(time.monotonic() - t, 1)}


def figures(d: Path) -> dict:
    """One condition's figures from its results.json. A repetition's ``flagged`` is the longest gap's own
    verdict (the figure ``confusion`` compares); ``frr_flagged`` what the verdict would be with the worst FRR
    daemon's run-queue wait in the window counted as lateness."""
    res = json.loads((d / "results.json").read_text())
    rows: dict = {}
    for vname, v in res["variants"].items():
        f = v["faults"][0]
        per_rep = [x["faults"][0] for x in v["runs"]]
        rows[vname] = {"longest_gap_ms": f["longest_gap_ms"], "converged_gap_ms": f["converged_gap_ms"],
                       "emulator": f.get("emulator"),
                       "per_rep": [{"gap_ms": x["longest_gap_ms"], **{k: x["emulator"].get(k) for k in (
                           "late_ms", "sender_late_ms", "timer_late_ms", "timer_late_node", "frr_wait_ms",
                           "frr_wait_daemon", "controller_wait_ms", "psi_some_ms", "bound_ms")},
                                    "flagged": (x["emulator"].get("figures", {}).get("longest_gap_ms")
                                                or x["emulator"])["flagged"],
                                    "any_figure_flagged": x["emulator"]["flagged"],
                                    "frr_flagged": max(x["emulator"]["late_ms"], x["emulator"].get("frr_wait_ms") or 0)
                                    > x["emulator"]["bound_ms"]}
                                   for x in per_rep],
                       "run": [x["emulator"] for x in v["runs"]]}
    return {"variants": rows, "provenance": res.get("provenance")}


def judge(idle: dict, other: dict) -> dict:
    """Per variant: does the loaded run agree with the idle one within the meter's bound, or was it flagged?"""
    out = {}
    for v, row in other["variants"].items():
        base = idle["variants"][v]["longest_gap_ms"]["median"]
        med = row["longest_gap_ms"]["median"]
        bound = max(r["bound_ms"] for r in row["per_rep"]) + max(r["bound_ms"] for r in idle["variants"][v]["per_rep"])
        flagged = sum(r["flagged"] for r in row["per_rep"])
        agree = abs(med - base) <= bound
        out[v] = {"idle_ms": base, "loaded_ms": med, "diff_ms": round(med - base, 1), "bound_ms": round(bound, 1),
                  "agree": agree, "flagged": flagged, "reps": len(row["per_rep"]),
                  "verdict": "agrees" if agree else ("flagged" if flagged else "DISAGREES UNFLAGGED")}
    return out


def confusion(runs: list[dict]) -> dict:
    """Every repetition of every condition against the idle median of its variant: did its figure move by
    more than its own bound, and was it flagged? The meter is right where the two agree; an unflagged
    repetition that moved is the error that matters (a wrong reading passed as good)."""
    idle = next((r for r in runs if r["condition"] == "idle"), None)
    if not idle:
        return {}
    out = {"flagged_moved": 0, "flagged_still": 0, "unflagged_moved": 0, "unflagged_still": 0,
           "with_frr_wait": {"flagged_moved": 0, "flagged_still": 0, "unflagged_moved": 0, "unflagged_still": 0},
           "cases": []}
    for r in runs:
        for v, row in r["variants"].items():
            base = idle["variants"][v]["longest_gap_ms"]["median"]
            for x in row["per_rep"]:
                moved = abs(x["gap_ms"] - base) > x["bound_ms"]
                key = ("flagged_" if x["flagged"] else "unflagged_") + ("moved" if moved else "still")
                out[key] += 1
                out["with_frr_wait"][("flagged_" if x["frr_flagged"] else "unflagged_") + ("moved" if moved else "still")] += 1
                out["cases"].append({"condition": r["condition"], "variant": v, "gap_ms": x["gap_ms"],
                                     "idle_median_ms": base, "bound_ms": x["bound_ms"], "late_ms": x["late_ms"],
                                     "flagged": x["flagged"], "moved": moved})
    return out


def kept_cost(out: Path) -> dict:
    """--rejudge measures nothing: the meter's cost stays the one measured with the runs."""
    try:
        return json.loads((out / "fidelity.json").read_text())["meter_cost"]
    except (OSError, ValueError, KeyError):
        return {}


def meter_cost(results: list[dict]) -> dict:
    """CPU cost of the meter: each witness's per-call cost here, times how often it runs."""
    from hpnlab.instrument import lateness
    from hpnlab.node.lateness import LateBins

    n = 2000
    t = time.process_time()
    for _ in range(n):
        lateness.read_cpu()
    sampler_us = (time.process_time() - t) / n * 1e6
    b = LateBins()
    t = time.process_time()
    for i in range(200_000):
        b.record(1e9 + i * 0.001, 0.0002 if i % 10 else 0.003)
    record_us = (time.process_time() - t) / 200_000 * 1e6
    full = LateBins(keep=600)
    for i in range(600):
        full.record(1e9 + i * 0.1, 0.002)
    t = time.process_time()
    for _ in range(200):
        json.dumps(full.report())
    status_us = (time.process_time() - t) / 200 * 1e6
    # rates on the default lab: agents' timer wake-ups per minute (from their status), one status write per
    # agent per second, senders' sends per minute (link-failure: 80 flows x 250/s)
    agents = 12
    t = time.process_time()
    for _ in range(n):
        lateness.run_queue_wait_ns(os.getpid())
    task_us = (time.process_time() - t) / n * 1e6
    tasks = 37  # the default lab's FRR daemons (12 routers: zebra, bgpd, staticd; bfdd where BFD is on) + controller
    return {"sampler_us_per_read": round(sampler_us, 1), "sampler_cpu_s_per_min": round(sampler_us * 600 / 1e6, 4),
            "task_us_per_read": round(task_us, 2),
            "default_lab_tasks_cpu_s_per_min": round(task_us * tasks * 600 / 1e6, 4),
            "record_us_per_timer": round(record_us, 2),
            "status_json_us_worst": round(status_us, 1),
            "default_lab_agents_cpu_s_per_min_worst": round(agents * 60 * status_us / 1e6, 4),
            "note": "the agents' record() runs once per timer wake-up; the worst status cost is every one of "
                    "600 bins late (a machine late all the time), the quiet case writes an empty list"}


LEGEND = {
    "condition": "idle, hog (a CPU hog beside the lab) or 1-core (the lab on one core)",
    "variant": "the link-failure variant",
    "gap ms med/max": "the longest gap, median/max over the repetitions",
    "late ms med/max": "the lateness meter's worst lateness in the fault's window, median/max",
    "flagged": "repetitions flagged / judged by the lateness meter",
    "PSI some ms": "CPU pressure 'some' in the run, median over the repetitions",
    "verdict vs idle": "(under a row) whether its gap moved from idle's by more than its bound: by, bound",
}


def summary(doc: dict) -> str:
    """summary.txt from fidelity.json: a row per condition and variant, the confusion of moved against flagged,
    the legend of every column last; at most 100 columns."""
    from hpnlab.traffic.output import report

    lines = [f"{'condition':<8} {'variant':<14} {'gap ms med/max':>15} {'late ms med/max':>16} {'flagged':>8} "
             f"{'PSI some ms':>12}"]
    runs, verdicts = doc["runs"], doc["verdicts"]
    for r in runs:
        for v, row in r["variants"].items():
            g, e = row["longest_gap_ms"], row["emulator"] or {}
            ver = verdicts.get(r["condition"], {}).get(v)
            lines.append(f"{r['condition']:<8} {v:<14} {g['median']:>7}/{g['max']:<7} "
                         f"{e.get('late_ms', {}).get('median')!s:>7}/{e.get('late_ms', {}).get('max')!s:<8} "
                         f"{e.get('flagged', '-')!s:>4}/{e.get('judged', '-')!s:<3} "
                         f"{e.get('psi_some_ms', {}).get('median')!s:>12}")
            if ver:
                lines.append(f"    verdict vs idle: {ver['verdict']} ({ver['diff_ms']:+g} ms, "
                             f"bound {ver['bound_ms']:g})")
    cf = doc["confusion"]
    if cf:
        n = sum(cf[k] for k in ("flagged_moved", "flagged_still", "unflagged_moved", "unflagged_still"))
        lines += ["", f"every repetition against its variant's idle median ({n}): moved by more than its own bound "
                      f"and flagged {cf['flagged_moved']}, flagged but within its bound {cf['flagged_still']}, "
                      f"moved but NOT flagged {cf['unflagged_moved']}, within its bound and not flagged "
                      f"{cf['unflagged_still']}",
                  "the same with the worst FRR daemon's run-queue wait counted as lateness: " + ", ".join(
                      f"{k.replace('_', ' ')} {n}" for k, n in cf["with_frr_wait"].items())]
    return "\n".join(report.wrap(lines) + report.legend_lines(None, LEGEND, "bench/fidelity.py")) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("-n", "--repetitions", type=int, default=3)
    ap.add_argument("--conditions", default="idle,hog,1-core")
    ap.add_argument("--rejudge", action="store_true", help="judge the runs already in OUT/runs again, run nothing")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    if os.geteuid() != 0:
        print("bench/fidelity.py: needs root (it brings labs up and makes cgroups)", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    conds = a.conditions.split(",")
    runs = []
    for c in conds:
        if a.rejudge:  # the runs already made: judge them again (a changed verdict rule), run nothing
            runs.append({**figures(a.out / "runs" / c), "condition": c, "seconds": None})
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {c}: hpnlab run link-failure ({VARIANTS}) -n {a.repetitions}", flush=True)
        runs.append(run(c, a.out, a.repetitions))
    idle = next((r for r in runs if r["condition"] == "idle"), None)
    verdicts = {r["condition"]: judge(idle, r) for r in runs if idle and r is not idle}
    doc = {"provenance": next((r["provenance"] for r in runs if r.get("provenance")), None),  # the runs' own
           "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release, "load_at_start": os.getloadavg()},
           "runs": runs, "verdicts": verdicts, "confusion": confusion(runs), "meter_cost": kept_cost(a.out) if a.rejudge else meter_cost(runs),
           "finished": time.time()}
    (a.out / "fidelity.json").write_text(json.dumps(doc, indent=1))
    text = summary(doc)
    (a.out / "summary.txt").write_text(text)
    print("\n" + text)
    print("\nmeter cost:", json.dumps(doc["meter_cost"]))
    print(f"wrote {a.out / 'fidelity.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
