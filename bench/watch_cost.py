#!/usr/bin/env python3
"""What the live view costs, and whether it disturbs what it shows (root).

    sudo .venv/bin/python bench/watch_cost.py                          # default lab, 140 nodes, experiment
    sudo .venv/bin/python bench/watch_cost.py --labs 16 --window 20 --repetitions 1 --duration 8   # a smoke run

1. The server's CPU. Per lab size (``--labs``: 16 is the default lab, larger ones are bench/scale.py's rungs of
   the paper's segment, e.g. 140 nodes): bring the lab up, start ``hpnlab watch`` on it, and read the server
   process's own CPU time (user + system of all its threads, /proc/PID/stat) over ``--window`` seconds, first
   with no page open, then with one headless Chromium page connected (tests/browser.py's). Each figure is %
   of one core; beside it how many polls the window held (one a second) and the machine's load.
2. The lateness meter with and without the page. ``--repetitions`` runs of a short link-failure experiment
   (``--experiment``, by default a one-variant cut of experiments/link-failure.yml on lab wcx0), once with no
   view and once with ``hpnlab watch`` and a page on its first variant's lab from the moment it is up; for each,
   how many figures the lateness meter judged and how many it flagged (results.json's ``emulator``), and
   which repetitions ran with the page connected from their start.

The machine's load average and CPU count are recorded before and after each part: on a busy machine these
figures measure the neighbours too. Results: OUT/results.json and OUT/summary.txt (default results/watch-cost),
and OUT/page-at-the-run-end.png, the page as the first repetition with the view ended.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
OUT = ROOT / "results" / "watch-cost"
HZ = os.sysconf("SC_CLK_TCK")

EXPERIMENT = f"""\
name: watch-cost
description: a link failure and repair with probes and a ring all-reduce (bench/watch_cost.py)
spec: {ROOT / 'examples' / 'default.yml'}
duration: 12
repetitions: 3
lab_prefix: wcx
probes:
  - {{name: upstream, src: s0h0, dst: s1h0, rail: 0, flows: 32, rate: 250}}
  - {{name: downstream, src: s1h0, dst: s0h0, rail: 0, flows: 32, rate: 250}}
workload: {{kind: allreduce, rail: 0, size_kb: 1024, connections: 8, select: least-loaded, placement: disjoint}}
faults:
  - {{kind: link-down, node: s0h0, iface: r0p0, at: 2, until: 6}}
variants:
  - name: dual-tor
    description: HPN, dual-plane
"""


def machine() -> dict:
    return {"load": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(), "t": time.time()}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat fields 14 and 15)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / HZ


class View:
    """``hpnlab watch`` on a lab (a free port), and optionally a headless Chromium page on it."""

    def __init__(self, lab: str):
        self.lab = lab
        self.proc = subprocess.Popen([sys.executable, "-m", "hpnlab", "watch", "--lab", lab, "--port", "0"],
                                     stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT)
        self.url = None
        deadline = time.monotonic() + 120
        while self.url is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise SystemExit(f"bench/watch_cost.py: hpnlab watch --lab {lab} exited {self.proc.returncode}")
            m = re.search(r"(http://\S+)", line)
            self.url = m.group(1) if m else None
        if self.url is None:
            self.stop()
            raise SystemExit(f"bench/watch_cost.py: hpnlab watch --lab {lab} did not listen within 120 s")
        self.page = None

    def open_page(self) -> None:
        from tests.browser import Page, find_browser

        found = find_browser()
        if isinstance(found, str):
            raise SystemExit(f"bench/watch_cost.py: no browser for the page: {found}")
        self.page = Page(*found)
        self.page.open(self.url)
        self.page.wait_for("return window.watch && window.watch.updates >= 2", 60, "the page receiving the state")

    def stop(self) -> None:
        if self.page is not None:
            self.page.close()
            self.page = None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def window(view: View, seconds: float) -> dict:
    m0, c0, t0 = machine(), cpu_s(view.proc.pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_s(view.proc.pid), time.monotonic()
    return {"cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2), "seconds": round(t1 - t0, 1),
            "machine_before": m0, "machine_after": machine()}


def lab_spec(nodes: int):
    from hpnlab.api import resolve_spec

    if nodes == 16:
        return resolve_spec("default", name="wcost16")
    import scale  # bench/scale.py: its rungs of the paper's segment

    if nodes not in scale.RUNGS:
        raise SystemExit(f"bench/watch_cost.py: --labs: no rung of {nodes} nodes (have 16, "
                         f"{', '.join(map(str, scale.RUNGS))})")
    sp = scale.spec_for(nodes, {})
    return resolve_spec(sp, name=f"wcost{nodes}")


def view_cost(nodes: int, seconds: float, settle: float, up_timeout: float) -> dict:
    import hpnlab
    from hpnlab.watch import topology_of

    sp = lab_spec(nodes)
    print(f"lab of {nodes} nodes ('{sp.name}'): bringing it up", flush=True)
    with hpnlab.Lab.up(sp, name=sp.name, timeout=up_timeout) as lab:
        view = View(lab.name)
        try:
            time.sleep(settle)  # the first polls ask every router (the view's start), then it is quiet
            idle = window(view, seconds)
            print(f"  server, no page: {idle['cpu_pct']:.2f} % of a core", flush=True)
            view.open_page()
            time.sleep(settle)
            opened = window(view, seconds)
            print(f"  server, one page open: {opened['cpu_pct']:.2f} % of a core", flush=True)
            return {"nodes": len(lab.nodes), "links": len(topology_of(lab.runtime).links), "no_page": idle,
                    "one_page": opened}
        finally:
            view.stop()


def flags(results: dict) -> dict:
    """Figures the lateness meter judged and flagged, over every variant's faults."""
    judged = flagged = 0
    for v in results["variants"].values():
        for f in v.get("faults", []):
            em = f.get("emulator") or {}
            judged += em.get("judged", 0)
            flagged += em.get("flagged", 0)
    return {"judged": judged, "flagged": flagged}


def first_lab(exp: Path) -> str:
    """The lab the experiment's first variant runs on: <lab_prefix>0."""
    import yaml

    return f"{(yaml.safe_load(exp.read_text()) or {}).get('lab_prefix', 'xp')}0"


def run_experiment(exp: Path, out: Path, reps: int, duration: float | None, with_view: bool,
                   shot: Path | None = None) -> dict:
    argv = [sys.executable, "-m", "hpnlab", "run", str(exp), "--out", str(out), "--force", "-n", str(reps)]
    if duration:
        argv += ["--duration", f"{duration:g}"]
    m0 = machine()
    run = subprocess.Popen(argv, cwd=ROOT)
    opened: list[float] = []
    view: list[View] = []

    lab = first_lab(exp)

    def attach() -> None:  # the page as soon as the variant's lab is up
        state = Path(f"/run/hpnlab/{lab}/state.json")
        while run.poll() is None and not state.exists():
            time.sleep(0.1)
        if run.poll() is not None:
            return
        try:
            v = View(lab)
            view.append(v)
            v.open_page()
            opened.append(time.time())
            while shot is not None and run.poll() is None:  # the page when the first repetition ends
                if v.page.js("const l = window.watch.live; return l.length > 0 && l[l.length - 1].done"):
                    v.page.driver.save_screenshot(str(shot))
                    break
                time.sleep(0.2)
        except SystemExit as e:
            print(e, file=sys.stderr)
        except Exception as e:  # the page closed under it: the run ended first
            print(f"bench/watch_cost.py: no screenshot of the page ({e.__class__.__name__})", file=sys.stderr)

    th = threading.Thread(target=attach, daemon=True) if with_view else None
    if th:
        th.start()
    rc = run.wait()
    if th:
        th.join(timeout=5)
    for v in view:
        v.stop()
    if rc != 0 or not (out / "results.json").exists():  # refused (a busy machine) or failed: say so, keep the rest
        return {"with_view": with_view, "exit": rc, "failed": True, "machine_before": m0, "machine_after": machine()}
    res = json.loads((out / "results.json").read_text())
    t0s = [json.loads((d / "run.json").read_text())["t0"] for d in sorted((out / "raw").glob("*/rep*"))
           if (d / "run.json").exists()]
    return {"with_view": with_view, "exit": rc, **flags(res), "repetitions": len(t0s),
            "page_open_from_start": sum(1 for t in t0s if opened and opened[0] <= t),
            "machine_before": m0, "machine_after": machine()}


LEGEND = {
    "nodes": "the lab's size: 16 is the default lab, larger ones bench/scale.py's rungs of the paper's segment",
    "no page": "the watch server's own CPU (all its threads, user + system) with no page open, % of one core",
    "one page": "the same with one headless Chromium page connected and following it",
    "load": "the machine's 1-min load average when the window began, and its CPUs",
    "flagged": "figures the lateness meter flagged / figures it judged, over the run's repetitions",
    "page open": "repetitions that ran with the page connected from their start",
}


def summary(rec: dict) -> str:
    from hpnlab.traffic.output import report

    lines = ["The live view's cost (bench/watch_cost.py): the server's own CPU, % of one core",
             f"  {'nodes':>5}  {'no page':>8}  {'one page':>8}  window  load"]
    for v in rec.get("view", []):
        before = v["one_page"]["machine_before"]
        lines.append(f"  {v['nodes']:>5}  {v['no_page']['cpu_pct']:>6.2f} %  {v['one_page']['cpu_pct']:>6.2f} %  "
                     f"{v['one_page']['seconds']:>4g} s  {before['load'][0]:g} on {before['cpus']} CPUs")
    if rec.get("experiment"):
        lines.append("The lateness meter, a link failure experiment with and without the page open")
        for e in rec["experiment"]:
            who = f"  {'with' if e['with_view'] else 'without':>7} the view:"
            if e.get("failed"):
                lines.append(f"{who} the run exited {e['exit']} (no figures)")
                continue
            lines.append(f"{who} flagged {e['flagged']}/{e['judged']} over {e['repetitions']} repetitions"
                         + (f", page open {e['page_open_from_start']}" if e["with_view"] else "")
                         + f", load {e['machine_before']['load'][0]:g}")
    lines += report.legend_lines(legend=LEGEND, page="docs/watch.md")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labs", default="16,140", help="lab sizes in nodes: 16 (the default lab) and bench/scale.py's "
                                                     "rungs (32, 48, 78, 140, 264) (default 16,140)")
    ap.add_argument("--window", type=float, default=60, help="seconds each CPU figure is read over (default 60)")
    ap.add_argument("--settle", type=float, default=15, help="seconds before each window (default 15)")
    ap.add_argument("--up-timeout", type=float, default=600, help="seconds a lab may take to come up (default 600)")
    ap.add_argument("--experiment", help="experiment file (default: a link failure, see above); the page watches its first variant")
    ap.add_argument("--repetitions", type=int, default=3, help="repetitions of each experiment run (default 3)")
    ap.add_argument("--duration", type=float, help="override the experiment's duration (seconds)")
    ap.add_argument("--no-experiment", action="store_true", help="only the server's CPU")
    ap.add_argument("--out", default=str(OUT), help="directory for results.json and summary.txt")
    from hpnlab.instrument import machineload, provenance  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/watch_cost.py: needs root (labs)", file=sys.stderr)
        return 2
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    try:
        sizes = [int(x) for x in a.labs.split(",") if x]
    except ValueError:
        print("bench/watch_cost.py: --labs: give node counts separated by commas, e.g. 16,140", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rec: dict = {"provenance": provenance.collect(), "started": time.time(), "machine": machine(),
                 "window_s": a.window, "view": [], "experiment": []}
    for n in sizes:
        rec["view"].append(view_cost(n, a.window, a.settle, a.up_timeout))
        (out / "results.json").write_text(json.dumps(rec, indent=1) + "\n")  # what is measured so far
    if not a.no_experiment:
        with tempfile.TemporaryDirectory(prefix="watch-cost-") as tmp:
            exp = Path(a.experiment) if a.experiment else Path(tmp) / "watch-cost.yml"
            if not a.experiment:
                exp.write_text(EXPERIMENT)
            for with_view in (False, True):
                print(f"experiment {'with' if with_view else 'without'} the view", flush=True)
                rec["experiment"].append(run_experiment(exp, Path(tmp) / ("with" if with_view else "without"),
                                                        a.repetitions, a.duration, with_view,
                                                        out / "page-at-the-run-end.png"))
    rec["finished"] = time.time()
    (out / "results.json").write_text(json.dumps(rec, indent=1) + "\n")
    (out / "summary.txt").write_text(summary(rec))
    print(summary(rec), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
