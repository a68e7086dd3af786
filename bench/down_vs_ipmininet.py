"""`down` of the default lab side by side with IPMininet's `net.stop()` for a network of the same size.

    sudo .venv/bin/python bench/down_vs_ipmininet.py --ipmininet-python PY [--runs 5]

PY is a Python that imports ipmininet; without it the IPMininet half is skipped, saying so. Setting it up
on Debian: the `mininet` package (mnexec, and the mininet module for /usr/bin/python3); a venv made with
--system-site-packages holding IPMininet 1.0's ipmininet/ package copied from its sdist (its setup.py
fetches Mininet from GitHub) and `pip install "mako<1.2"`. IPMininet runs FRR as root, which must then be
in the groups frr and frrvty (gpasswd -a root frrvty; gpasswd -a root frr), or its config check fails.

Both sides are timed in-process, from the teardown call until it returns, alternating A B A B; then each
side checks whether any of its routing daemons is still alive. IPMininet's network: the same 12 routers
(8 ToRs, 4 aggs, dual-plane wiring, FRR zebra + bgpd each) and 4 hosts, single-homed (IPMininet has no
dual-ToR hosts). hpnlab additionally runs bfdd and 12 agents: it stops more processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

IPM = r'''
import json, os, sys, time
from ipmininet.iptopo import IPTopo
from ipmininet.ipnet import IPNet
from ipmininet.router.config import BGP, ebgp_session, RouterConfig

class Fabric(IPTopo):
    def build(self, *a, **kw):
        aggs = [self.addRouter(f"a{p}{i}", config=RouterConfig) for p in (0, 1) for i in (0, 1)]
        for r in aggs:
            r.addDaemon(BGP)
        tors = []
        for s in (0, 1):
            for rail in (0, 1):
                for side, plane in (("a", 0), ("b", 1)):
                    t = self.addRouter(f"t{s}{rail}{side}", config=RouterConfig)
                    t.addDaemon(BGP)
                    tors.append(t)
                    for agg in aggs[2 * plane:2 * plane + 2]:
                        self.addLink(t, agg)
                        ebgp_session(self, t, agg)
        for s in (0, 1):
            for h in (0, 1):
                host = self.addHost(f"h{s}{h}")
                self.addLink(host, tors[4 * s])
        for i, r in enumerate(aggs):
            self.addAS(65000 + i // 2, (r,))
        for i, t in enumerate(tors):
            self.addAS(65100 + i, (t,))
        super().build(*a, **kw)

net = IPNet(topo=Fabric(), use_v6=False, allocate_IPs=True)
net.start()
daemons = [int(p) for p in os.popen("pgrep -x 'zebra|bgpd'").read().split()]
t0 = time.monotonic()
net.stop()
dt = time.monotonic() - t0
def alive(p):
    try:
        return open(f"/proc/{p}/stat").read().split(")")[-1].split()[0] not in "ZX"
    except OSError:
        return False
print(json.dumps({"stop_s": dt, "daemons": len(daemons), "alive_after": sum(alive(p) for p in daemons)}))
'''


def hpnlab_once() -> dict:
    from hpnlab.lifecycle.orchestrate import bring_up, leftovers, tear_down
    from hpnlab.machine.proc import pid_alive
    from hpnlab.model.spec import load_spec

    sp = load_spec("default")
    rt, _cfgs, _ = bring_up(sp)
    pids = [pid for pid in rt.frr_pids()] + list(rt.state.data.agents.values())
    t0 = time.monotonic()
    tear_down(sp.name)
    dt = time.monotonic() - t0
    return {"stop_s": dt, "processes": len(pids), "alive_after": sum(pid_alive(p) for p in pids),
            "leftovers": len(leftovers(sp.name))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipmininet-python", help="a Python that imports ipmininet")
    ap.add_argument("--runs", type=int, default=5)
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    args = ap.parse_args()
    machineload.settle_or_exit(args.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    if subprocess.run(["pgrep", "-x", "zebra|bgpd"], capture_output=True).stdout.strip():
        print("some zebra/bgpd already runs on this machine: the IPMininet half counts daemons by name; stop them")
        return 2
    a, b = [], []
    for _ in range(args.runs):
        a.append(hpnlab_once())
        if args.ipmininet_python:
            env = {**os.environ, "PATH": f"/usr/lib/frr:{os.environ.get('PATH', '')}"}  # where Debian puts FRR
            r = subprocess.run([args.ipmininet_python, "-c", IPM], capture_output=True, text=True, timeout=300,
                               env=env)
            if r.returncode:
                print(f"IPMininet failed: {r.stderr.strip().splitlines()[-1:]}")
                return 1
            b.append(json.loads(r.stdout.strip().splitlines()[-1]))
            subprocess.run(["mn", "-c"], capture_output=True)  # Mininet's own cleanup of its leftovers
    med = lambda rows: round(statistics.median(r["stop_s"] for r in rows), 3)
    rng = lambda rows: f"{min(r['stop_s'] for r in rows):.3f}-{max(r['stop_s'] for r in rows):.3f}"
    print(f"hpnlab tear_down (default lab, {a[0]['processes']} processes): median {med(a)} s ({rng(a)}), "
          f"alive after return: {sum(r['alive_after'] for r in a)}, leftovers: {sum(r['leftovers'] for r in a)}")
    if b:
        print(f"IPMininet net.stop() ({b[0]['daemons']} FRR daemons): median {med(b)} s ({rng(b)}), "
              f"alive after return: {sum(r['alive_after'] for r in b)}")
        ratios = [x["stop_s"] / y["stop_s"] for x, y in zip(a, b)]
        print(f"ratio hpnlab/IPMininet per pair: median {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
    else:
        print("IPMininet: skipped (no --ipmininet-python)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
