#!/usr/bin/env python3
"""Benchmark: the black-box prober against gray failures on the default lab (issue 39).

1. Fault-free: the prober (and the isolator) run --quiet-s seconds (default 300) on an idle lab; figures:
   suspects and confirmations named, isolations made (the issue's "isolates nothing"), probe overhead
   (probes/s, bytes/s, the node programs' CPU seconds per second).
2. Faults, one at a time, each --reps times: silent loss of 0.1 %, 1 % and 5 % and caught corruption of 1 %
   on a ToR-agg link (s0r0a:agg0-0, the ToR's direction) and on an access link (s0r0a:h0p0, toward the
   host); with isolation on: time from the fault to the first suspicion, to the confirmation, to the
   isolation; whether the named link is the faulty one; BFD session downs on the ToR during the fault
   (bfdd's counters: the control-plane detector beside it); each fault held at most --hold-s seconds.
   BFD's blindness is also computed: at 100 ms x 3 a session goes down only after 3 losses in a row,
   p^3 per interval, so its expected time to notice is interval / p^3.

Needs root and the lab lock (one acquisition for the whole run). Usage:
  flock /tmp/hpnlab-lab.lock .venv/bin/python bench/gray_prober.py --json results/gray-prober/gray.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOR, UPLINK, ACCESS = "s0r0a", "agg0-0", "h0p0"
CASES = [("silent-loss", UPLINK, 0.1), ("silent-loss", UPLINK, 1.0), ("silent-loss", UPLINK, 5.0),
         ("corrupt", UPLINK, 1.0), ("silent-loss", ACCESS, 0.1), ("silent-loss", ACCESS, 1.0),
         ("silent-loss", ACCESS, 5.0), ("corrupt", ACCESS, 1.0)]


def pct(rate: float) -> str:
    """1 -> '1pct', 0.1 -> '0p1pct': keys without dots (the docs address figures by dotted paths)."""
    return f"{rate:g}".replace(".", "p") + "pct"


def summary(xs: list[float]) -> dict | None:
    xs = [x for x in xs if x is not None]
    return {"min": round(min(xs), 2), "median": round(statistics.median(xs), 2), "max": round(max(xs), 2),
            "n": len(xs)} if xs else None


def bfd_downs(lab, node: str) -> int:
    peers = lab.vtysh(node, "show bfd peers counters json") or []
    return sum(int(p.get("session-down", 0)) for p in peers)


def one(lab, prober, iso, kind: str, iface: str, rate: float, hold: float) -> dict:
    peer = lab.cfgs[TOR].iface(iface).peer
    truth = f"{TOR}>{peer}"
    n_ev, n_log = len(prober.events), len(iso.log)
    downs = bfd_downs(lab, TOR)
    with lab.fault(kind, TOR, iface, rate=rate) as rec:
        t0 = rec["applied"]
        deadline = time.time() + hold
        while time.time() < deadline and not any(x["action"].startswith("isolated") for x in iso.log[n_log:]):
            time.sleep(0.1)
    bfd = bfd_downs(lab, TOR) - downs
    ev, log = prober.events[n_ev:], iso.log[n_log:]
    for lk in {x["link"] for x in log if x["action"].startswith("isolated")}:
        iso.repaired(lk)  # the fault is gone: put it back now, not after the hold time
    lab.wait_healthy(60)  # BGP and LACP back before the next fault: the probe paths are the planned ones again
    first = {w: next((e for e in ev if e["event"] == w), None) for w in ("suspected", "confirmed")}
    isol = next((x for x in log if x["action"].startswith("isolated")), None)
    return {"kind": kind, "link": truth, "rate_pct": rate,
            "suspect_s": round(first["suspected"]["t"] - t0, 2) if first["suspected"] else None,
            "confirm_s": round(first["confirmed"]["t"] - t0, 2) if first["confirmed"] else None,
            "isolate_s": round(isol["t"] - t0, 2) if isol else None,
            "right_link": bool(first["confirmed"] and first["confirmed"]["link"] == truth),
            "named": sorted({e["link"] for e in ev}), "isolation_log": log, "bfd_session_downs": bfd}


def fault_free_case(prober, iso, seconds: float, bfd_session_downs: int) -> dict:
    """The fault-free case's figures, as they stand when it ends. Its events and isolation counts are
    copies: the prober and the isolator go on appending to their live lists during the fault cases, which
    must not show up here."""
    events = [dict(e) for e in prober.events]
    return {"seconds": round(seconds, 1), "suspected": len(events),
            "confirmed": len(prober.confirmed()),
            "isolations": sum(1 for x in iso.log if x["action"].startswith("isolated")),
            "events": events, "report": copy.deepcopy(prober.report()),
            "bfd_session_downs": bfd_session_downs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiet-s", type=float, default=300.0, help="fault-free seconds (>= 300 for the issue)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hold-s", type=float, default=30.0, help="longest a fault is held waiting for isolation")
    ap.add_argument("--cases", default="all", help="'all' or comma-separated indices into the case list "
                                                   "(1,3,5,7: the 1 %% ones)")
    ap.add_argument("--json", type=Path, required=True)
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    sys.path.insert(0, str(ROOT))
    from hpnlab.instrument import provenance
    from hpnlab.api import Lab
    from hpnlab.traffic.run.isolation import Isolator

    cases = CASES if a.cases == "all" else [CASES[int(i)] for i in a.cases.split(",")]
    out: dict = {"provenance": provenance.collect(), "settings": {}, "fault_free": {}, "cases": {}}
    bfd = {"interval_ms": 100, "multiplier": 3}
    out["bfd_blindness"] = {pct(100 * p): {"p3_per_interval": p ** 3, "expected_s_to_notice": round(0.1 / p ** 3, 1),
                                           "expected_h_to_notice": round(0.1 / p ** 3 / 3600, 2)}
                            for p in (0.001, 0.01, 0.05)}
    with Lab.up("default", name="gpb") as lab:
        prober = lab.prober()
        t = time.time()
        out["plan"] = {**prober.plan(), "plan_s": round(time.time() - t, 1)}
        out["settings"] = {"prober": prober.s, "bfd": bfd}
        with prober:
            # fault-free, with the isolator armed: anything it did would be a false positive
            iso = Isolator(lab, prober, hold_s=20.0, max_isolations=1, window_s=60.0)
            out["settings"]["isolation"] = iso.s
            with iso:
                t0 = time.time()
                downs = bfd_downs(lab, TOR)
                time.sleep(a.quiet_s)
                out["fault_free"] = fault_free_case(prober, iso, time.time() - t0, bfd_downs(lab, TOR) - downs)
                print(json.dumps(out["fault_free"]), flush=True)
                for kind, iface, rate in cases:
                    key = f"{kind}-{'uplink' if iface == UPLINK else 'access'}-{pct(rate)}"
                    runs = []
                    for _ in range(a.reps):
                        time.sleep(prober.s["window_s"] + prober.s["grace_s"])  # the last fault out of the window
                        runs.append(one(lab, prober, iso, kind, iface, rate, a.hold_s))
                        print(key, json.dumps({k: v for k, v in runs[-1].items() if k != "isolation_log"}), flush=True)
                    out["cases"][key] = {"runs": runs, **{f: summary([r[f] for r in runs])
                                                          for f in ("suspect_s", "confirm_s", "isolate_s")},
                                         "right_link": sum(r["right_link"] for r in runs), "reps": len(runs),
                                         "bfd_session_downs": sum(r["bfd_session_downs"] for r in runs)}
        out["overhead"] = prober.report()
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1))
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
