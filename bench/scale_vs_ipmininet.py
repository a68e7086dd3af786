#!/usr/bin/env python3
"""Scale-ladder rungs side by side with IPMininet building the same switches (root).

    sudo .venv/bin/python bench/scale_vs_ipmininet.py --ipmininet-python PY [--rungs 32,48] [--runs 1] [--append]

PY is a Python that imports ipmininet (bench/down_vs_ipmininet.py says how to set one up on Debian).

Per rung and run, alternating: hpnlab brings the rung up (examples/segment-full.yml with that many hosts
and aggs, bench/scale.py's spec) until verified; IPMininet builds the same 16 ToRs and aggs with the same
eBGP sessions (FRR zebra + bgpd) and starts them, and is timed until every plane-0 ToR's FIB holds every
host link's subnet. The two measure different amounts of work, which the figures must be read with:
IPMininet has no dual-ToR hosts (each host NIC is a single-homed Mininet host on its rail's ToR a), no
LACP agents, no ARP-to-/32 routes and no reachability check; hpnlab's "verified" includes all of those.
Memory: PSS of zebra + bgpd per router, mean, taken when each side is up.

Results: results/scale/vs-ipmininet.json: {"provenance", "invocations", "runs"}. `--append` adds this
invocation's runs to the file's, numbered after the runs each rung already has, so a ladder too long for one
sitting is run in parts (a rung or a run each) into one file; "invocations" says how it was split (each
one's rungs, runs, start, load average and provenance) and "provenance" is the latest one's. `--table`
prints the runs as docs/scale.md's side-by-side table (tests/test_docs.py checks that the page holds it as
generated).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

IPM = r'''
import ipaddress, json, os, sys, time
from ipmininet.iptopo import IPTopo
from ipmininet.ipnet import IPNet
from ipmininet.router.config import AF_INET, BGP, ebgp_session, RouterConfig

HOSTS, AGGS, RAILS = int(sys.argv[1]), int(sys.argv[2]), 8

class Segment(IPTopo):
    def build(self, *a, **kw):
        aggs = {p: [self.addRouter(f"a{p}x{i}", config=RouterConfig) for i in range(AGGS)] for p in (0, 1)}
        for p in (0, 1):
            for r in aggs[p]:
                r.addDaemon(BGP)
            self.addAS(65000 + p, aggs[p])
        self.tor_a = []
        for rail in range(RAILS):
            for side, plane in (("a", 0), ("b", 1)):
                t = self.addRouter(f"t{rail}{side}", config=RouterConfig)
                # a ToR advertises its host links (IPMininet's BGP advertises nothing unless told)
                t.addDaemon(BGP, address_families=(AF_INET(redistribute=("connected",)),))
                self.addAS(65100 + 2 * rail + plane, (t,))
                for agg in aggs[plane]:
                    self.addLink(t, agg)
                    ebgp_session(self, t, agg)
                if side == "a":
                    self.tor_a.append(t)
                    for h in range(HOSTS):
                        self.addLink(self.addHost(f"h{h}r{rail}"), t)
        super().build(*a, **kw)

def pss(pid):
    try:
        for ln in open(f"/proc/{pid}/smaps_rollup"):
            if ln.startswith("Pss:"):
                return int(ln.split()[1])
    except OSError:
        return 0

topo = Segment()
net = IPNet(topo=topo, use_v6=False, allocate_IPs=True, ipBase="10.0.0.0/8")  # 192.168/16 runs out at 48 nodes
t0 = time.monotonic()
try:
    net.start()
    started = time.monotonic() - t0
    want = set()
    for h in net.hosts:
        for itf in h.intfList():
            if itf.ip:
                want.add(str(ipaddress.ip_interface(f"{itf.ip}/{itf.prefixLen}").network))
    tors = [net[f"t{r}a"] for r in range(RAILS)]
    deadline = time.monotonic() + 600
    missing = len(want)
    while time.monotonic() < deadline:
        missing = 0
        for t in tors:
            have = {r.get("dst") for r in json.loads(t.cmd("ip -4 -j route show") or "[]")}
            missing += len(want - have)
        if not missing:
            break
        time.sleep(0.5)
    converged = time.monotonic() - t0
    daemons = {}
    for name in ("zebra", "bgpd"):
        pids = [int(p) for p in os.popen(f"pgrep -x {name}").read().split()]
        daemons[name] = sum(pss(p) for p in pids) / max(1, len(pids)) / 1024
finally:
    net.stop()
print(json.dumps({"start_s": round(started, 2), "converged_s": round(converged, 2), "missing": missing,
                  "routers": len(net.routers), "hosts": len(net.hosts), "zebra_pss_mib": round(daemons["zebra"], 1),
                  "bgpd_pss_mib": round(daemons["bgpd"], 1)}))
'''


def hpnlab_once(nodes: int) -> dict:
    import scale  # bench/scale.py: the same rung spec and memory figures as the ladder

    rec = scale.run_rung(nodes, {}, timeout=600, idle=0)
    ph = rec["phases"]
    m = rec.get("memory", {})
    return {"verified": rec.get("verified"),
            "up_s": round(sum(p["wall_s"] for k, p in ph.items() if k not in ("idle", "down", "-")), 2),
            "zebra_pss_mib": m.get("frr_daemon_mean_mib", {}).get("zebra"),
            "bgpd_pss_mib": m.get("frr_daemon_mean_mib", {}).get("bgpd"), "timers": rec.get("timers")}


def table(data: dict) -> str:
    """The file's runs as a Markdown table, one row per rung: medians, then every run (the ratio per run from
    the two times, to three places, so that runs the file rounds alike stay apart)."""
    records = data["runs"]
    rows = ["| nodes | hpnlab up → verified, median (each run) | IPMininet start → every route, median (each run) | "
            "ratio, median | ratio, each run | zebra + bgpd PSS ratio, median |", "|" + "---|" * 6]
    for n in sorted({r["nodes"] for r in records}):
        rs = sorted((r for r in records if r["nodes"] == n), key=lambda r: r["run"])
        up = [r["hpnlab"]["up_s"] for r in rs]
        ipm = [r["ipmininet"]["converged_s"] for r in rs]
        ratio = [u / i for u, i in zip(up, ipm)]
        pss = [r["router_pss_ratio"] for r in rs if r.get("router_pss_ratio")]
        rows.append(f"| {n} | {statistics.median(up):.1f} s ({' / '.join(f'{x:.2f}' for x in up)}) | "
                    f"{statistics.median(ipm):.1f} s ({' / '.join(f'{x:.2f}' for x in ipm)}) | "
                    f"{statistics.median(ratio):.3f}× | {' / '.join(f'{x:.3f}' for x in ratio)} | "
                    f"{f'{statistics.median(pss):.2f}×' if pss else '-'} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipmininet-python", help="a Python that imports ipmininet (required unless --table)")
    ap.add_argument("--table", action="store_true", help="print --out's runs as a Markdown table and exit")
    ap.add_argument("--rungs", default="32,48", help="node counts from bench/scale.py (default 32,48)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "results" / "scale" / "vs-ipmininet.json"))
    ap.add_argument("--append", action="store_true", help="keep --out's runs and add these after them "
                                                          "(a ladder run in parts)")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    if not a.table:  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
        machineload.settle_or_exit(a.busy_ok)
    if a.table:
        print(table(json.loads(Path(a.out).read_text())))
        return 0
    if not a.ipmininet_python:
        ap.error("--ipmininet-python is required (a Python that imports ipmininet)")
    import scale

    if os.geteuid() != 0:
        print("bench/scale_vs_ipmininet.py: needs root (it runs labs)", file=sys.stderr)
        return 2
    try:
        rungs = [int(x) for x in a.rungs.split(",")]
        bad = [n for n in rungs if n not in scale.RUNGS]
    except ValueError:
        bad = [a.rungs]
    if bad:
        print(f"bench/scale_vs_ipmininet.py: --rungs: no rung {bad[0]} (have {', '.join(map(str, scale.RUNGS))})",
              file=sys.stderr)
        return 2
    if subprocess.run(["pgrep", "-x", "zebra|bgpd"], capture_output=True).stdout.strip():
        print("some zebra/bgpd already runs on this machine: IPMininet's memory is counted by daemon name; stop them",
              file=sys.stderr)
        return 2
    from hpnlab.instrument import provenance

    path = Path(a.out)
    data = {"provenance": None, "invocations": [], "runs": []}
    if a.append and path.exists():
        try:
            data = json.loads(path.read_text())
        except ValueError as e:
            data = {"error": str(e)}
        if not (isinstance(data, dict) and isinstance(data.get("invocations"), list)
                and isinstance(data.get("runs"), list)):
            print(f"bench/scale_vs_ipmininet.py: --append: {a.out} is not this bench's file", file=sys.stderr)
            return 2
    path.parent.mkdir(parents=True, exist_ok=True)
    # which code and machine made these runs, and how the file was split into invocations
    prov = provenance.collect()
    data["provenance"] = prov
    data["invocations"].append({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rungs": rungs, "runs": a.runs,
                                "loadavg_at_start": os.getloadavg(), "provenance": prov})
    out = data["runs"]
    env = {**os.environ, "PATH": f"/usr/lib/frr:{os.environ.get('PATH', '')}"}  # where Debian puts FRR
    for n in rungs:
        hosts, aggs = scale.RUNGS[n]
        done = max((r["run"] for r in out if r["nodes"] == n), default=0)
        for k in range(done, done + a.runs):
            print(f"rung {n}, run {k + 1}: hpnlab", flush=True)
            h = hpnlab_once(n)
            print(f"rung {n}, run {k + 1}: IPMininet", flush=True)
            # IPMininet checks FRR's config as root, which must be in FRR's groups (extra_groups: for this
            # process, whatever groups the caller's login gave it)
            r = subprocess.run([a.ipmininet_python, "-c", IPM, str(hosts), str(aggs)], capture_output=True,
                               text=True, timeout=900, env=env, extra_groups=["frr", "frrvty"])
            if r.returncode:
                print(f"IPMininet failed: {r.stderr.strip().splitlines()[-3:]}", file=sys.stderr)
                return 1
            i = json.loads(r.stdout.strip().splitlines()[-1])
            row = {"nodes": n, "run": k + 1, "invocation": len(data["invocations"]), "hpnlab": h, "ipmininet": i,
                   "time_ratio": round(h["up_s"] / i["converged_s"], 2) if i["converged_s"] else None}
            if h["zebra_pss_mib"] and h["bgpd_pss_mib"]:
                row["router_pss_ratio"] = round((h["zebra_pss_mib"] + h["bgpd_pss_mib"])
                                                / (i["zebra_pss_mib"] + i["bgpd_pss_mib"]), 2)
            out.append(row)
            print(json.dumps(row), flush=True)
            path.write_text(json.dumps(data, indent=1) + "\n")  # each run kept as it ends
    for n in rungs:
        rows = [r for r in out if r["nodes"] == n]
        med = lambda f: statistics.median(f(r) for r in rows)
        print(f"{n} nodes: hpnlab up -> verified {med(lambda r: r['hpnlab']['up_s']):.1f} s, IPMininet start -> "
              f"every route {med(lambda r: r['ipmininet']['converged_s']):.1f} s, ratio "
              f"{med(lambda r: r['time_ratio']):.2f}; zebra+bgpd PSS ratio "
              f"{med(lambda r: r.get('router_pss_ratio') or 0):.2f}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
