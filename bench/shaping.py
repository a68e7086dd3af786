"""The CPU cost of link capacity: packets/s through a shaped lab vs the same lab unshaped, side by side.

    sudo .venv/bin/python bench/shaping.py [--runs 3] [--seconds 5] [--rate-mbit 10000]

Two copies of the default lab run at once ("bunsh" unshaped, "bshap" with every link class shaped by a
tbf at --rate-mbit, high enough that the rate never binds: what is measured is the qdisc's own cost).
Per run and lab, in alternation: iperf3 sends small UDP datagrams (64 bytes, unlimited rate) from s0h0
to s1h0 across the fabric (host -> ToR -> agg -> ToR -> host: 4 shaped link ends on the way); the
figures are packets/s received and packets per CPU-second the machine spent (all cores, from /proc/stat).
Prints median per lab and the ratio shaped/unshaped, and --json writes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from hpnlab import Lab


def cpu_busy() -> float:
    """Seconds of CPU time spent (not idle, not iowait) on all cores since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    ticks = 100.0
    return (sum(v) - v[3] - v[4]) / ticks


def one(lab: Lab, seconds: float) -> dict:
    import subprocess

    dst = lab.host_ip("s1h0")
    srv = subprocess.Popen(lab.runtime.exec_argv("s1h0", ["iperf3", "-s", "-1", "-B", dst, "-p", "5299"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    c0, t0 = cpu_busy(), time.monotonic()
    r = lab.exec("s0h0", "iperf3", "-c", dst, "-B", lab.host_ip("s0h0"), "-p", "5299", "-u", "-b", "0", "-l", "64",
                 "-t", f"{seconds:g}", "-J", timeout=seconds + 30, check=True)
    cpu, wall = cpu_busy() - c0, time.monotonic() - t0
    srv.wait(timeout=10)
    end = json.loads(r.stdout)["end"]["sum"]
    got = end["packets"] - end["lost_packets"]
    return {"pps": got / end["seconds"], "lost_pct": end["lost_percent"], "pkts_per_cpu_s": got / cpu,
            "cpu_s": cpu, "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rate-mbit", type=float, default=10000)
    ap.add_argument("--json", help="write the figures here")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    cls = {"rate_mbit": a.rate_mbit, "queue_kb": 256}
    labs = {}
    try:
        labs["unshaped"] = Lab.up("default", name="bunsh")
        labs["shaped"] = Lab.up("default", name="bshap", overrides={"links": {"access": cls, "uplink": cls}})
        res: dict[str, list[dict]] = {k: [] for k in labs}
        for i in range(a.runs):
            for k, lab in labs.items():
                r = one(lab, a.seconds)
                res[k].append(r)
                print(f"run {i + 1} {k:<9} {r['pps']:>9.0f} packets/s  {r['pkts_per_cpu_s']:>9.0f} packets/CPU-s  "
                      f"loss {r['lost_pct']:.1f} %", file=sys.stderr)
    finally:
        for lab in labs.values():
            lab.down()
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("pps", "pkts_per_cpu_s", "lost_pct")}
           for k, v in res.items()}
    ratio = {m: med["shaped"][m] / med["unshaped"][m] for m in ("pps", "pkts_per_cpu_s")}
    print(f"median over {a.runs} runs of {a.seconds:g} s, 64-byte UDP s0h0 -> s1h0, tbf at {a.rate_mbit:g} Mbit/s:")
    for k, m in med.items():
        print(f"  {k:<9} {m['pps']:>9.0f} packets/s   {m['pkts_per_cpu_s']:>9.0f} packets per CPU-second")
    print(f"  shaped/unshaped: packets/s x{ratio['pps']:.2f}, packets per CPU-second x{ratio['pkts_per_cpu_s']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": res, "median": med, "ratio": ratio, "rate_mbit": a.rate_mbit}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
