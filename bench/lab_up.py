#!/usr/bin/env python3
"""Benchmark (root): wall time from `hpnlab up` to verified, and memory per router and per agent.

  sudo .venv/bin/python bench/lab_up.py [SPEC ...] [--runs N] [--runtime netns,clab] [--json FILE]

With several runtimes, each spec is measured on each in turn, so the figures can be compared side by side
(clab needs containerlab, a Docker engine and 'hpnlab images build'; on a machine without containerlab,
put tests/clabsim.py on PATH as `containerlab` to measure Docker containers).

Targets (issue 3): default lab <= 15 s; FRR daemons <= 50 MB RSS per router; host agent <= 25 MB.
RSS counts shared pages once per process (an upper bound); PSS (shared pages split) is printed beside it.
With --json, every run is written to FILE (results/lab-up/lab-up.json is the shipped one): the command's
wall time (Python's start included) and `up`'s own "up and verified in" figure, with the provenance.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def mem_kb(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def measure(spec: str | None, runs: int, runtime: str) -> dict | None:
    from hpnlab.model.spec import load_spec

    sp = load_spec(spec)
    times, own, memory = [], [], {}
    for i in range(runs):
        argv = [sys.executable, "-m", "hpnlab.cli", "up", "--json", "--timeout", "300", "--runtime", runtime] + \
            ([spec] if spec else [])
        t0 = time.monotonic()
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        dt = time.monotonic() - t0
        if r.returncode:
            print(f"{sp.name} [{runtime}]: up failed: {r.stderr.strip().splitlines()[-1]}")
            return None
        times.append(dt)
        try:
            own.append(json.loads(r.stdout).get("seconds"))
        except ValueError:
            own.append(None)
        if i == runs - 1:
            from hpnlab.lifecycle.orchestrate import open_lab

            rt, _ = open_lab(sp.name)
            per_router: dict[str, list[int]] = {}
            per_daemon: dict[str, list[int]] = {}
            for pid, ns in rt.frr_pids().items():
                r_, p_ = mem_kb(pid)
                try:
                    per_daemon.setdefault(Path(f"/proc/{pid}/comm").read_text().strip(), []).append(p_)
                except OSError:
                    pass
                per_router.setdefault(ns, [0, 0])
                per_router[ns][0] += r_
                per_router[ns][1] += p_
            topo = json.loads((rt.config_dir / "topology.json").read_text())
            agents = {"host": [], "tor": []}
            roles = {n["name"]: n["role"] for n in topo["nodes"]}
            for node, role in roles.items():
                pid = rt.agent_pid(node) if role in agents else None
                if pid:
                    agents[role].append(mem_kb(pid))
            s = topo["summary"]
            rr = [v[0] / 1024 for v in per_router.values()]
            rp = [v[1] / 1024 for v in per_router.values()]
            print(f"lab '{sp.name}' [{runtime}]: {len(topo['nodes'])} nodes ({s['hosts']} hosts, {s['tors']} ToRs, {s['aggs']} aggs), "
                  f"{s['links']} links, {s['bgp_sessions']} BGP sessions")
            print("  up -> verified: " + ", ".join(f"{t:.1f} s" for t in times)
                  + " (command); up's own figure: " + ", ".join(f"{t:.2f} s" for t in own if t is not None))
            print(f"  FRR per router (zebra+bgpd+bfdd): RSS max {max(rr):.1f} MB, PSS max {max(rp):.1f} MB")
            for role, vals in agents.items():
                if vals:
                    print(f"  {role} agent: RSS max {max(v[0] for v in vals) / 1024:.1f} MB, "
                          f"PSS max {max(v[1] for v in vals) / 1024:.1f} MB")
            # PSS, mean per process of each kind (shared pages split between their users), after the last run
            memory = {"pss_mean_mib": {**{d: round(sum(v) / len(v) / 1024, 1) for d, v in sorted(per_daemon.items())},
                                       **{f"{role}_agent": round(sum(p for _, p in v) / len(v) / 1024, 1)
                                          for role, v in agents.items() if v}},
                      "router_pss_mean_mib": round(sum(rp) / len(rp), 1), "routers": len(rp)}
        subprocess.run([sys.executable, "-m", "hpnlab.cli", "down", "--lab", sp.name], cwd=ROOT,
                       capture_output=True)
    ok = [t for t in own if t is not None]
    return {"spec": spec or "default", "runtime": runtime, "runs": len(times),
            "command_s": [round(t, 2) for t in times], "up_verified_s": ok,
            "up_verified_min_s": min(ok, default=None), "up_verified_median_s": round(statistics.median(ok), 3) if ok else None,
            "up_verified_max_s": max(ok, default=None), "memory": memory}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--runtime", default="netns", help="comma-separated: netns, clab (default netns)")
    ap.add_argument("--json", type=Path, help="write every run to this file")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    rows = []
    for spec in a.specs or [None]:
        for runtime in a.runtime.split(","):
            row = measure(spec, a.runs, runtime)
            if row:
                rows.append(row)
    if a.json:
        from hpnlab.instrument import provenance

        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"provenance": provenance.collect(), "measured": rows}, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
