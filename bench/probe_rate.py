#!/usr/bin/env python3
"""Benchmark: does the probe sender hold its requested rate? (target: within 2 % up to 20k packets/s)

Two throw-away namespaces joined by one veth (no lab, no FRR), sender and receiver from hpnlab.node.programs.probe at
several total rates; prints requested vs achieved rate, the worst lag behind schedule, and loss.
Needs root. Usage: sudo .venv/bin/python bench/probe_rate.py [--seconds 5] [--rates 5000,10000,20000]
[--json results/probe-rate/probe-rate.json] (the rows with the provenance; the shipped file is named here)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NS = ("hpnbench-tx", "hpnbench-rx")


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def setup() -> None:
    for ns in NS:
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", "bx0", "netns", NS[0], "type", "veth", "peer", "name", "bx1", "netns", NS[1])
    for ns, ifc, ip in ((NS[0], "bx0", "192.0.2.1"), (NS[1], "bx1", "192.0.2.2")):
        sh("ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", ifc)
        sh("ip", "-n", ns, "link", "set", ifc, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def teardown() -> None:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def one(rate_total: int, flows: int, seconds: float, tmp: Path) -> dict:
    t0 = time.time() + 0.8
    rx = subprocess.Popen(["ip", "netns", "exec", NS[1], sys.executable, "-m", "hpnlab.node.programs.probe", "recv", "--bind",
                           "192.0.2.2", "--port", "9999", "--duration", str(seconds + 1.5), "--start-at", str(t0),
                           "--out", str(tmp / "rx.json")], cwd=ROOT)
    subprocess.run(["ip", "netns", "exec", NS[0], sys.executable, "-m", "hpnlab.node.programs.probe", "send", "--src", "192.0.2.1",
                    "--dst", "192.0.2.2", "--dport", "9999", "--flows", str(flows), "--rate",
                    str(rate_total / flows), "--duration", str(seconds), "--start-at", str(t0),
                    "--out", str(tmp / "tx.json")], cwd=ROOT, check=True)
    rx.wait()
    tx = json.loads((tmp / "tx.json").read_text())
    rxr = json.loads((tmp / "rx.json").read_text())
    got = sum(f["received"] for f in rxr["flows"])
    return {"requested_pps": rate_total, "flows": flows, "achieved_pps": tx["achieved_pps"],
            "error_pct": round(100 * (tx["achieved_pps"] - rate_total) / rate_total, 2),
            "max_lag_ms": tx["max_lag_ms"], "sent": tx["sent_total"], "received": got}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rates", default="2000,5000,10000,20000")
    p.add_argument("--flows", type=int, default=64)
    p.add_argument("--json", type=Path, help="write the rows to this file")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(p)
    a = p.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    teardown()
    setup()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for r in (int(x) for x in a.rates.split(",")):
                rows.append(one(r, a.flows, a.seconds, Path(d)))
                x = rows[-1]
                print(f"{x['requested_pps']:>7} pps requested  {x['achieved_pps']:>9.1f} achieved  "
                      f"{x['error_pct']:+6.2f} %  max lag {x['max_lag_ms']:7.2f} ms  "
                      f"received {x['received']}/{x['sent']}", flush=True)
    finally:
        teardown()
    print(json.dumps({"probe_rate": rows}))
    if a.json:
        from hpnlab.instrument import provenance

        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"provenance": provenance.collect(), "seconds": a.seconds,
                                      "probe_rate": rows}, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
