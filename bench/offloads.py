"""What MTU-sized packets cost: one TCP stream across the default lab with GSO capped at one segment (the
default, ``links.offloads: false``) and with the kernel's offloads (``links.offloads: true``), unshaped and
with every access and uplink shaped, side by side.

    sudo .venv/bin/python bench/offloads.py [--runs 5] [--seconds 5] [--rates 500] [--json results/offloads/offloads.json [--append]]

Copies of the default lab run at once, one per (offloads, shaping) pair: "bmtu"/"bgso" unshaped, and for
the i-th --rates value R "bmtu<i>"/"bgso<i>" with links.access and links.uplink at R Mbit/s. Per run, in alternation over
the labs: an idle window of --seconds (the machine's CPU with every lab up and nothing sent: the BFD,
agents and anyone else's work), then one iperf3 TCP stream (--congestion, cubic as the workloads use)
from s0h0 to s1h0 across the fabric (host -> ToR -> agg -> ToR -> host) for --seconds. Figures per run:
the receiver's Gbit/s, the sender's retransmits, CPU-seconds of the whole machine (all cores, /proc/stat)
during the stream less the idle window's, that CPU per GB delivered, and the mean size of what left the
sender's ports (tx bytes / tx packets of its rail-0 ports: one count per skb, so a super-packet shows).
Prints the medians and the ratios MTU/offloads, and --json writes every run (with the machine's load
average at the start: the CPU figures are the whole machine's, so other work on it is noise) and the
provenance. With --append the runs already in the --json file are kept and these added to them (same
--seconds, --rates and --congestion), the medians taken over all: more runs than one sitting allows, in
parts; "invocations" says how the file was split (each part's runs, start, load average and provenance).
"idle_busy_cores" is how many cores' worth the idle windows kept busy (median): near all the machine's
cores, the CPU figures cannot be read, and the bench warns.

Whether MTU frames change the failover figures or the emulator's timing is an experiment beside this file:
``hpnlab run bench/offloads-failover.yml --out results/offloads/failover``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from hpnlab import Lab

PORT = 5298
PORTS = ("r0p0", "r0p1")  # s0h0's rail-0 ports


def cpu_busy() -> float:
    """Seconds of CPU time spent (not idle, not iowait) on all cores since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def tx(lab: Lab, node: str) -> tuple[int, int]:
    """(bytes, packets) sent through the node's rail-0 ports so far."""
    links = json.loads(lab.exec(node, "ip", "-s", "-j", "link", "show", check=True).stdout)
    st = [ln["stats64"]["tx"] for ln in links if ln["ifname"] in PORTS]
    return sum(s["bytes"] for s in st), sum(s["packets"] for s in st)


def one(lab: Lab, seconds: float, congestion: str) -> dict:
    dst, src = lab.host_ip("s1h0"), lab.host_ip("s0h0")
    c0 = cpu_busy()
    time.sleep(seconds)
    idle = cpu_busy() - c0
    srv = subprocess.Popen(lab.runtime.exec_argv("s1h0", ["iperf3", "-s", "-1", "-B", dst, "-p", str(PORT)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    b0, p0 = tx(lab, "s0h0")
    c0 = cpu_busy()
    r = lab.exec("s0h0", "iperf3", "-c", dst, "-B", src, "-p", str(PORT), "-C", congestion, "-t", f"{seconds:g}",
                 "-J", timeout=seconds + 30, check=True)
    cpu = cpu_busy() - c0
    b1, p1 = tx(lab, "s0h0")
    srv.wait(timeout=10)
    end = json.loads(r.stdout)["end"]
    recv = end["sum_received"]
    gbytes = recv["bytes"] / 1e9
    net_cpu = max(cpu - idle * recv["seconds"] / seconds, 1e-9)
    return {"gbit_s": recv["bits_per_second"] / 1e9, "retransmits": end["sum_sent"].get("retransmits", 0),
            "cpu_s": cpu, "idle_cpu_s": idle, "net_cpu_s": net_cpu, "cpu_s_per_gb": net_cpu / gbytes,
            "mean_skb_bytes": (b1 - b0) / max(1, p1 - p0), "skbs": p1 - p0, "gbytes": gbytes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rates", default="500", help="comma-separated Mbit/s for the shaped pairs ('' for none)")
    ap.add_argument("--congestion", default="cubic")
    ap.add_argument("--json", help="write every run and the medians here")
    ap.add_argument("--append", action="store_true", help="add these runs to those already in --json")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    rates = [float(r) for r in a.rates.split(",") if r.strip()]
    load = os.getloadavg()
    before = {"invocations": [], "runs": {}}
    if a.append and a.json and Path(a.json).exists():
        try:
            before = json.loads(Path(a.json).read_text())
        except ValueError:
            before = {}
        same = {"seconds": a.seconds, "rates_mbit": rates, "congestion": a.congestion}
        if not isinstance(before, dict) or "invocations" not in before or \
                any(before.get(k) != v for k, v in same.items()):
            print(f"bench/offloads.py: --append: {a.json} is not this bench's file with these settings {same}",
                  file=sys.stderr)
            return 2
    setups = {"unshaped": {}}
    for r in rates:
        cls = {"rate_mbit": r, "queue_kb": 256}
        setups[f"shaped_{r:g}mbit"] = {"links": {"access": cls, "uplink": cls}}
    labs: dict[tuple[str, str], Lab] = {}
    started = time.time()
    res: dict[str, dict[str, list[dict]]] = {s: {"mtu": [], "offloads": []} for s in setups}
    try:
        for i, (setup, over) in enumerate(setups.items()):
            for mode, on in (("mtu", False), ("offloads", True)):
                name = f"b{'gso' if on else 'mtu'}{i or ''}"
                links = {**over.get("links", {}), "offloads": on}
                labs[(setup, mode)] = Lab.up("default", name=name, overrides={"links": links})
        for i in range(a.runs):
            for (setup, mode), lab in labs.items():
                r = one(lab, a.seconds, a.congestion)
                res[setup][mode].append(r)
                print(f"run {i + 1} {setup:<16} {mode:<8} {r['gbit_s']:6.2f} Gbit/s  {r['cpu_s_per_gb']:6.2f} CPU-s/GB  "
                      f"retr {r['retransmits']:>5}  mean skb {r['mean_skb_bytes']:>7.0f} B", file=sys.stderr)
    finally:
        for lab in labs.values():
            lab.down()
    for s, v in before["runs"].items():  # --append: the file's runs first, then these
        for m, runs in v.items():
            res.setdefault(s, {}).setdefault(m, [])[:0] = runs
    total = len(res["unshaped"]["mtu"])
    keys = ("gbit_s", "cpu_s_per_gb", "net_cpu_s", "retransmits", "mean_skb_bytes")
    med = {s: {m: {k: statistics.median(x[k] for x in runs) for k in keys} for m, runs in v.items()}
           for s, v in res.items()}
    ratio = {s: {k: v["mtu"][k] / v["offloads"][k] for k in ("gbit_s", "cpu_s_per_gb")} for s, v in med.items()}
    # How busy the machine was with nothing sent (cores' worth, median of the idle windows): the CPU figures
    # are what a stream added to that, so on a machine near all its cores busy they cannot be read (the
    # stream had no idle CPU to add).
    idle_busy = statistics.median(x["idle_cpu_s"] / a.seconds for v in res.values() for runs in v.values() for x in runs)
    cores = os.cpu_count() or 1
    if idle_busy > 0.75 * cores:
        print(f"warning: the idle windows kept {idle_busy:.2f} of {cores} cores busy (median): the machine was busy "
              "with other work, and the CPU figures cannot be read", file=sys.stderr)
    print(f"median of {total} runs of {a.seconds:g} s, one {a.congestion} TCP stream s0h0 -> s1h0 "
          f"(host -> ToR -> agg -> ToR -> host):")
    for s, v in med.items():
        for m, x in v.items():
            print(f"  {s:<16} {m:<8} {x['gbit_s']:6.2f} Gbit/s  {x['cpu_s_per_gb']:6.2f} CPU-s per GB  "
                  f"mean skb {x['mean_skb_bytes']:>6.0f} B  retransmits {x['retransmits']:g}")
        print(f"  {s:<16} MTU/offloads: throughput x{ratio[s]['gbit_s']:.2f}, CPU per GB x{ratio[s]['cpu_s_per_gb']:.2f}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        with open(a.json, "w") as f:
            from hpnlab.instrument import provenance

            # the code and machine of these runs; with --append, of the latest part (each part's in invocations)
            prov = provenance.collect()
            parts = [*before["invocations"], {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                                              "runs": a.runs, "loadavg_at_start": load, "provenance": prov}]
            json.dump({"what": "one TCP stream s0h0 -> s1h0 of the default lab, links.offloads false (mtu) vs true",
                       "provenance": prov, "invocations": parts,
                       "kernel": platform.release(), "cpus": os.cpu_count(), "congestion": a.congestion,
                       "seconds": a.seconds, "rates_mbit": rates, "idle_busy_cores": idle_busy, "runs": res, "median": med,
                       "ratio_mtu_over_offloads": ratio},
                      f, indent=1)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
