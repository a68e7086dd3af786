#!/usr/bin/env python3
"""Benchmark (root): what each priority queue of one shaped ToR port carries (spec qos, htb).

  sudo .venv/bin/python bench/qos.py [--runs 3] [--queues 2] [--json results/qos/qos.json]

A single-ToR lab, K + 1 hosts, 20 Mbit/s access links with qos queues on every ToR port. K TCP flows, one per
class (DSCP ef, af41 -> queues 0, 1; with --queues 3 also af11 -> 2), from different senders to one receiver, so
they meet at the ToR's port to it. Phase "all": every flow sends; phase "top-stopped": the queue-0 flow's
sender is stopped. Per phase, each queue's Mbit/s from the port's per-queue byte counters
(hpnlab.Lab.link_stats) over a window. Each run is its own lab; --json writes every run, the min/median/max
over the runs and the provenance (results/qos/qos.json is the shipped one).
"""

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpnlab.traffic.analysis import queuerates  # noqa: E402

RATE_MBIT = 20
DSCPS = [46, 34, 10]  # ef, af41, af11 -> queue 0, 1, 2
SETTLE_S, WINDOW_S = 1.0, 3.0


def spec(queues: int) -> dict:
    return {"name": "qosb", "segments": 1, "hosts_per_segment": queues + 1, "rails": 1, "access": "single-tor",
            "tier2": "clos", "aggs_per_plane": 1, "links": {"access": {"rate_mbit": RATE_MBIT, "queue_kb": 64}},
            "qos": {"queues": queues, "dscp": {d: k for k, d in enumerate(DSCPS[:queues])}}}


def one_run(queues: int, tmp: Path) -> dict:
    import hpnlab

    procs = []
    with hpnlab.Lab.up(spec(queues)) as lab:
        try:
            rcv = f"s0h{queues}"
            tor = lab.cfgs[rcv].nics[0].tors[0]
            port = queuerates.host_ports(lab, tor, rcv)  # both bond members: see hpnlab.traffic.analysis.queuerates
            ip, py = lab.host_ip(rcv), sys.executable
            senders = {}
            for k in reversed(range(queues)):  # the lowest class first: each higher one then takes its share
                dport, d = 5300 + k, DSCPS[k]
                procs.append(lab.spawn(rcv, [py, "-m", "hpnlab.node.programs.elephant", "serve", "--bind", ip, "--port",
                                             str(dport), "--duration", "60", "--dscp", str(d),
                                             "--out", str(tmp / f"rx{k}.json")], tmp / f"rx{k}.log"))
                time.sleep(0.3)
                src = f"s0h{k}"
                senders[k] = lab.spawn(src, [py, "-m", "hpnlab.node.programs.elephant", "send", "--src", lab.host_ip(src),
                                             "--port", str(dport), "--flows", f"{ip}:{41000 + k}",
                                             "--size", str(400 << 20), "--duration", "50", "--dscp", str(d),
                                             "--out", str(tmp / f"tx{k}.json")], tmp / f"tx{k}.log")
                procs.append(senders[k])
                queuerates.wait_moving(lab, tor, port, k, True)
            time.sleep(SETTLE_S)
            a = queuerates.reading(lab, tor, port)
            time.sleep(WINDOW_S)
            all_ = queuerates.rates(a, queuerates.reading(lab, tor, port))
            senders[0].send_signal(signal.SIGTERM)
            senders[0].wait(timeout=10)
            queuerates.wait_moving(lab, tor, port, 0, False)
            c = queuerates.reading(lab, tor, port)
            time.sleep(WINDOW_S)
            top_stopped = queuerates.rates(c, queuerates.reading(lab, tor, port))
            stats = lab.link_stats(tor)
            drops = {str(k): sum(stats[p]["queues"][k]["drops"] for p in port) for k in range(queues)}
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                p.wait(timeout=10)
    all_, top_stopped = ({str(k): round(v, 3) for k, v in r.items()} for r in (all_, top_stopped))
    total = sum(all_.values())
    return {"all": all_, "top_stopped": top_stopped, "drops": drops,
            "top_share": round(all_["0"] / total, 4) if total else None}


def mmm(xs: list[float]) -> dict:
    return {"min": min(xs), "median": round(statistics.median(xs), 4), "max": max(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queues", type=int, default=2, choices=(2, 3))
    ap.add_argument("--json", help="write every run and the min/median/max here")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    tmp = Path("/tmp/hpnlab-bench-qos")
    tmp.mkdir(exist_ok=True)
    runs = []
    for i in range(a.runs):
        r = one_run(a.queues, tmp)
        runs.append(r)
        print(f"run {i + 1}: all {r['all']} Mbit/s (queue 0's share {r['top_share']}); queue 0 stopped "
              f"{r['top_stopped']}; drops {r['drops']}", flush=True)
    qs = [str(k) for k in range(a.queues)]
    summary = {"top_share": mmm([r["top_share"] for r in runs]),
               "all_mbit": {k: mmm([r["all"][k] for r in runs]) for k in qs},
               "top_stopped_mbit": {k: mmm([r["top_stopped"][k] for r in runs]) for k in qs}}
    print(json.dumps(summary))
    if a.json:
        from hpnlab.instrument import provenance

        out = {"what": "per-queue Mbit/s at one shaped ToR port with qos (htb), one TCP flow per class",
               "provenance": provenance.collect(), "rate_mbit": RATE_MBIT, "queues": a.queues,
               "dscp": DSCPS[:a.queues], "window_s": WINDOW_S, "runs": runs, "summary": summary}
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
