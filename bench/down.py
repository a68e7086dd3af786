"""How fast `hpnlab down` removes a lab, and that every process is gone when it returns.

    sudo .venv/bin/python bench/down.py [--runs 5] [SPEC ...]      (default: the default lab)

Per run: `hpnlab up` (not timed), then `hpnlab down` timed as a whole command; right after it returns,
every PID the lab had (agents, FRR daemons, anything in its namespaces) is checked. Prints min/median/max.

    sudo .venv/bin/python bench/down.py --deployed-only --runs 1 SPEC

deploys without waiting for health (for labs too large to converge here, e.g. the paper's full segment),
lets it run --settle seconds, then times `down` the same way. With --json FILE the rows are written there
with the provenance (results/down/ holds the shipped ones: down-default.json, down-segment.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HPN = [sys.executable, "-m", "hpnlab.cli"]


def lab_pids(lab: str) -> list[int]:
    out = []
    for ln in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines():
        ns = ln.split()[0] if ln.strip() else ""
        if ns.startswith(f"{lab}-"):
            out += [int(p) for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                                   text=True).stdout.split()]
    return out


def alive(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for t in tasks:
        try:
            if Path(f"/proc/{pid}/task/{t}/stat").read_text().split(")")[-1].split()[0] not in "ZX":
                return True
        except OSError:
            pass
    return False


def deploy(sp) -> None:
    """Render and deploy (namespaces, links, FRR, agents) without the health wait of `hpnlab up`."""
    from hpnlab import runtime
    from hpnlab.generate import render
    from hpnlab.model import topology
    from hpnlab.model.models import LabState
    from hpnlab.runtime.base import State

    rt = runtime.get("netns")(sp.name, State(sp.name, LabState(lab=sp.name)))
    rt.state.save()
    render.write(render.render(topology.build(sp)), rt.config_dir)
    t0 = time.monotonic()
    rt.deploy(lambda m: print(f"[{time.monotonic() - t0:6.1f}s] {m}", file=sys.stderr, flush=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="*", default=["default"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--deployed-only", action="store_true", help="deploy without waiting for health")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds a --deployed-only lab runs before down")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    args = ap.parse_args()
    machineload.settle_or_exit(args.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    report = []
    for spec in args.specs:
        from hpnlab.model.spec import load_spec

        sp = load_spec(spec)
        times, left = [], 0
        for _ in range(args.runs):
            if args.deployed_only:
                deploy(sp)
                time.sleep(args.settle)
            else:
                r = subprocess.run([*HPN, "up", spec, "--json"], capture_output=True, text=True)
                if r.returncode:
                    print(f"{sp.name}: up failed: {r.stderr.strip().splitlines()[-1:]}")
                    return 1
            pids = lab_pids(sp.name)
            t0 = time.monotonic()
            subprocess.run([*HPN, "down", "--lab", sp.name], capture_output=True, check=True)
            times.append(time.monotonic() - t0)
            left += sum(alive(p) for p in pids)
        row = {"lab": sp.name, "processes": len(pids), "runs": args.runs, "down_s_min": round(min(times), 3),
               "down_s_median": round(statistics.median(times), 3), "down_s_max": round(max(times), 3),
               "alive_after_return": left}
        report.append(row)
        print(f"{sp.name}: {len(pids)} processes; down {row['down_s_min']}/{row['down_s_median']}/{row['down_s_max']} s "
              f"(min/median/max of {args.runs}, whole command incl. Python start); alive after return: {left}")
    print(json.dumps(report))
    if args.json:
        from hpnlab.instrument import provenance

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"provenance": provenance.collect(), "measured": report}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
