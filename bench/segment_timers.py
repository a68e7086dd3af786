#!/usr/bin/env python3
"""The paper's segment with production timers, mechanism by mechanism: does it come up, does it hold, what
does it cost idle (root).

    sudo .venv/bin/python bench/segment_timers.py --case lacp-fast-bgp-1-3   # one run of one case
    sudo .venv/bin/python bench/segment_timers.py --case production --hold 120
    sudo .venv/bin/python bench/segment_timers.py --case production-x20      # every timer 20 times slower
    sudo .venv/bin/python bench/segment_timers.py --summary                  # rewrite summary.txt

The segment is examples/segment-full.yml (264 nodes, 960 BGP sessions, 4,096 LACP ports) with its relaxed
timers overridden: LACP fast in every case; BGP 1/3 with BFD off, at 1 s x 3, 300 ms x 3 or 100 ms x 3 (the
production setting every small lab uses); the same BFD ladder with BGP at 3/9 (bgp-3-9*), for where BGP
1/3 does not come up; and the production setting with every timer k times slower (production-xK, spec
time_dilation). One invocation is one run of one case (one lab-lock hold): up with
a 300 s timeout, keeping the lab when it is not healthy by then (so a case that does not come up is measured
too: what verify says, and what each process kind burns meanwhile); then a hold (default 120 s) in which
the idle CPU of every process kind is measured as bench/idle_cpu.py does (after a settle, to the end of the
hold); then verify once more, and every ToR's BGP and BFD counters again. Every BGP session has a ToR at one
end, so the ToRs' counters cover all 960: ``connectionsEstablished`` above 1 is a session re-established
(at verified: during the bring-up; its growth over the hold: during the hold), ``session-down`` a BFD
session that went down.

A case holds when it verified within the timeout, no session was re-established and no BFD session went
down over the hold, verify passed at its end, and the lab used at most half of the machine's two cores.
Runs append to results/segment-timers/results.json (per case, a list); summary.txt is rewritten from it.
bfdd's cost per session end comes from the default lab at each interval,

    sudo .venv/bin/python bench/idle_cpu.py --cases production,bfd-300ms,bfd-1s --out results/segment-timers/bfd-default-lab

and is multiplied out to the segment's 1,920 ends in results.json (bfd_per_end) whenever this script writes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import idle_cpu  # noqa: E402  (bench/ is no package: its modules import each other by path)

OUT = ROOT / "results" / "segment-timers"
SPEC = ROOT / "examples" / "segment-full.yml"
LAB_NAME = "segtim"
BASE = {"lacp": {"fast_rate": True}, "bgp": {"keepalive": 1, "hold": 3}}
CASES = {"lacp-fast-bgp-1-3": {**BASE, "bfd": {"enabled": False}},
         "bfd-1s": {**BASE, "bfd": {"enabled": True, "interval_ms": 1000, "multiplier": 3}},
         "bfd-300ms": {**BASE, "bfd": {"enabled": True, "interval_ms": 300, "multiplier": 3}},
         "production": {**BASE, "bfd": {"enabled": True, "interval_ms": 100, "multiplier": 3}}}
# BGP at keepalive 3 / hold 9 (the segment's relaxed setting) with LACP fast and each BFD interval: where
# BGP 1/3 does not come up, what holds with BFD carrying the fast detection
SLOW_BGP = {"lacp": {"fast_rate": True}, "bgp": {"keepalive": 3, "hold": 9}}
for _name, _ms in (("bgp-3-9", 0), ("bgp-3-9-bfd-1s", 1000), ("bgp-3-9-bfd-300ms", 300), ("bgp-3-9-bfd-100ms", 100)):
    CASES[_name] = {**SLOW_BGP, "bfd": {"enabled": True, "interval_ms": _ms, "multiplier": 3} if _ms
                    else {"enabled": False}}
# The production setting with every protocol timer k times slower (spec time_dilation): where no timer of it
# holds at 1:1, the same ratios between the timers, each figure read back divided by k (docs/scale.md)
for _k in (10, 20, 30):
    CASES[f"production-x{_k}"] = {**CASES["production"], "time_dilation": _k}
# the done-when's budget: half of the machine's two cores, i.e. one core (figures are % of one core)
BUDGET_PCT_CORE = 100.0


# --- pure (tests/test_segment_timers.py) -------------------------------------------------------------------
def bgp_counts(neighbors: dict) -> dict:
    """From one router's ``show bgp neighbors json``: its sessions, how many are Established, and over all
    of them the connections established and dropped so far (1 and 0 each for a session never reset)."""
    peers = [p for p in neighbors.values() if isinstance(p, dict)]
    est = [int(p.get("connectionsEstablished", 0)) for p in peers]
    return {"sessions": len(peers), "up": sum(p.get("bgpState") == "Established" for p in peers),
            "established": sum(est), "reestablished": sum(max(0, e - 1) for e in est),
            "dropped": sum(int(p.get("connectionsDropped", 0)) for p in peers)}


def bfd_counts(peers: list | None) -> dict:
    """From one router's ``show bfd peers counters json``: its BFD sessions and their up/down events
    (answered 0: bfdd did not answer in time, as a starved one does not; before the vty client entered the
    enable node for bfdd, where FRR 8.4 has its show commands, every run read 0)."""
    answered = int(peers is not None)
    peers = peers or []
    return {"answered": answered, "sessions": len(peers), "ups": sum(int(p.get("session-up", 0)) for p in peers),
            "downs": sum(int(p.get("session-down", 0)) for p in peers)}


def total(rows: dict[str, dict]) -> dict:
    """node -> counts into the sums over every node."""
    out: dict[str, int] = {}
    for row in rows.values():
        for k, v in row.items():
            out[k] = out.get(k, 0) + v
    return out


def verdict(run: dict, timeout: float, budget: float = BUDGET_PCT_CORE) -> dict:
    """Whether one run held, and each reason it did not."""
    why = []
    if not run["verified"]:
        why.append(f"not verified within {timeout:g} s")
    else:
        if run["up_s"] > timeout:
            why.append(f"verified after {run['up_s']} s > {timeout:g} s")
        b0, b1 = run["bgp_at_verified"], run["bgp_at_end"]
        if b1["established"] - b0["established"]:
            why.append(f"{b1['established'] - b0['established']} BGP sessions re-established in the hold")
        if b1["up"] < b1["sessions"]:
            why.append(f"{b1['sessions'] - b1['up']} BGP sessions not Established at the end")
        d0, d1 = run.get("bfd_at_verified") or {}, run.get("bfd_at_end") or {}
        if d1.get("downs", 0) - d0.get("downs", 0):
            why.append(f"{d1['downs'] - d0['downs']} BFD session downs in the hold")
        if d1 and min(d0.get("answered", 0), d1.get("answered", 0)) < run.get("tors", 0):
            why.append(f"bfdd answered on {min(d0.get('answered', 0), d1.get('answered', 0))} of {run['tors']} ToRs: "
                       f"its session downs are not known")
        if not run["verify_at_end"]["ok"]:
            why.append(f"verify failed at the end ({run['verify_at_end']['failing']})")
    if run["cpu"]["pct_lab"] > budget:
        why.append(f"lab {run['cpu']['pct_lab']} % of a core > {budget:g}")
    return {"holds": not why, "why_not": why}


def bfd_per_end(default_cases: dict[str, dict], ends: int, segment_ends: int) -> dict:
    """bfdd's idle CPU on the default lab at each BFD interval (bench/idle_cpu.py's production, bfd-300ms and
    bfd-1s cases), per session end, and that times the segment's session ends: what bfdd would need there if
    its cost stays per end (each end sends and receives one packet per interval)."""
    out = {}
    for case, interval in (("production", 100), ("bfd-300ms", 300), ("bfd-1s", 1000)):
        if case not in default_cases:
            continue
        pct = default_cases[case]["pct_core"].get("bfdd", 0.0)
        out[f"{interval}ms"] = {"interval_ms": interval, "bfdd_pct_core": pct, "ends": ends,
                                "pct_core_per_end": round(pct / ends, 4),
                                "segment_ends": segment_ends,
                                "segment_pct_core": round(pct / ends * segment_ends, 1)}
    return out


def spread(xs: list[float]) -> dict | None:
    xs = [x for x in xs if x is not None]
    return {"min": round(min(xs), 2), "median": round(statistics.median(xs), 2), "max": round(max(xs), 2),
            "n": len(xs)} if xs else None


def case_summary(runs: list[dict]) -> dict:
    """Per case over its runs: how many held, up to verified, the re-established sessions, and the idle CPU
    per kind, each {min, median, max, n}."""
    kinds = sorted({k for r in runs for k in r["cpu"]["pct_core"]})
    return {"runs": len(runs), "held": sum(r["verdict"]["holds"] for r in runs),
            "verified": sum(r["verified"] for r in runs),
            "verify_ok_at_end": sum(bool(r.get("verify_at_end", {}).get("ok")) for r in runs),
            "up_s": spread([r["up_s"] for r in runs if r["verified"]]),
            "reestablished_in_up": spread([r["bgp_at_verified"].get("reestablished") for r in runs]),
            "reestablished_in_hold": spread([r["bgp_at_end"]["established"] - r["bgp_at_verified"]["established"]
                                             for r in runs if r["verified"]]),
            "pct_lab": spread([r["cpu"]["pct_lab"] for r in runs]),
            "pct_of_two_cores": spread([r["cpu"]["pct_lab"] / 2 for r in runs]),
            "psi_some_pct": spread([r["cpu"]["psi_some_pct"] for r in runs]),
            "agent_late_ms": spread([r["cpu"]["agent_timers_late"]["worst_ms"] for r in runs]),
            "pct_core": {k: spread([r["cpu"]["pct_core"].get(k, 0.0) for r in runs]) for k in kinds}}


def session_ends(spec: str) -> int:
    """BFD session ends of a spec: two per BGP session (one bfdd peer at each router)."""
    from hpnlab.model import topology
    from hpnlab.api import resolve_spec

    return 2 * topology.summary(topology.build(resolve_spec(spec)))["bgp_sessions"]


# --- measuring (root) ---------------------------------------------------------------------------------------
def counters(rt, tors: list[str], bfd: bool) -> tuple[dict, dict | None]:
    # every ToR at once, with a short timeout: a starved bfdd does not answer, and 16 ToRs in turn at 60 s
    # each kept one run past the lab lock's hold
    def one(n):
        b = bgp_counts(rt.daemon_json(n, "bgpd", "show bgp neighbors json", timeout=30) or {})
        d = bfd_counts(rt.daemon_json(n, "bfdd", "show bfd peers counters json", timeout=15)) if bfd else None
        return n, b, d

    with ThreadPoolExecutor(max_workers=len(tors)) as ex:
        rows = list(ex.map(one, tors))
    return total({n: b for n, b, _ in rows}), (total({n: d for n, _, d in rows}) if bfd else None)


def cpu_window(lab, seconds: float) -> dict:
    hz = os.sysconf("SC_CLK_TCK")
    p0, b0, s0, m0, e0 = idle_cpu.snapshot(lab)
    late: dict[str, dict] = {}
    end = m0 + seconds
    while True:  # the agents keep 60 s of late bins: read them at least every 50 s
        time.sleep(max(0.0, min(50.0, end - time.monotonic())))
        for node, rep in lab.timers_late().items():
            bins = {tuple(b) for b in late.get(node, {}).get("bins", [])} | {tuple(b) for b in rep.get("bins", [])}
            late[node] = {"bins": sorted(bins)}
        if time.monotonic() >= end:
            break
    p1, b1, s1, m1, e1 = idle_cpu.snapshot(lab)
    wall = m1 - m0
    kinds = idle_cpu.pct_by_kind(p0[0], p1[0], wall, hz)
    return {"window_s": round(wall, 1), "processes": len(p1[0]), "pct_core": kinds,
            "pct_core_system": idle_cpu.pct_by_kind(p0[1], p1[1], wall, hz),
            "pct_lab": round(sum(kinds.values()), 2),
            "pct_machine": round(100.0 * (b1[0] - b0[0]) / hz / wall, 2),
            "pct_softirq": round(100.0 * (b1[1] - b0[1]) / hz / wall, 2),
            "psi_some_pct": round(100.0 * (s1 - s0) / 1e6 / wall, 2),
            "agent_timers_late": idle_cpu.late_in_window(late, e0, e1)}


def failing(checks: list[dict]) -> dict:
    bad = [c for c in checks if not c["ok"]]
    return {"ok": bool(checks) and not bad and any(c["name"].startswith("reach") for c in checks),
            "checks": len(checks), "failing_checks": len(bad),
            "failing": "; ".join(f"{c['name']}: {c['detail']}" for c in bad[:6])}


def run_case(case: str, timeout: float, hold: float, settle: float, window_unhealthy: float) -> dict:
    from hpnlab.lifecycle import orchestrate, verify
    from hpnlab.api import Lab, resolve_spec
    from hpnlab.machine.progress import Progress

    sp = resolve_spec(str(SPEC), LAB_NAME, CASES[case])
    t0 = time.monotonic()
    rt, cfgs, checks = orchestrate.bring_up(sp, "netns", timeout, Progress(), keep=True)
    up_s = round(time.monotonic() - t0, 1)
    lab = Lab(rt, cfgs, owned=True)
    tors = sorted(n for n, c in cfgs.items() if c.role == "tor")
    bfd = bool(CASES[case]["bfd"]["enabled"])
    verified = verify.complete(checks)
    run = {"case": case, "overrides": CASES[case], "verified": verified, "up_s": up_s, "tors": len(tors),
           "at_up": failing(checks), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"segment_timers: {case}: {'verified' if verified else 'NOT verified'} after {up_s} s", file=sys.stderr,
          flush=True)
    try:
        run["bgp_at_verified"], run["bfd_at_verified"] = counters(rt, tors, bfd)
        if verified:
            time.sleep(settle)
            run["cpu"] = cpu_window(lab, hold - settle)
        else:  # what an unhealthy lab costs and says, before it goes
            run["cpu"] = cpu_window(lab, window_unhealthy)
        run["bgp_at_end"], run["bfd_at_end"] = counters(rt, tors, bfd)
        if verified:  # one that did not verify has its checks from the timeout (a starved lab's verify
            # waits out every router's vty timeout: 271 s once, past the lab lock's hold)
            t1 = time.monotonic()
            run["verify_at_end"] = failing(verify.verify(rt, cfgs, stop_at_failure=False))
            run["verify_at_end"]["took_s"] = round(time.monotonic() - t1, 1)
        run["nodes"] = len(cfgs)
    finally:
        lab.down()
    run["verdict"] = verdict(run, timeout)
    print(json.dumps(run), file=sys.stderr, flush=True)
    return run


def bfd_col(run: dict) -> str:
    d0, d1 = run.get("bfd_at_verified"), run.get("bfd_at_end")
    if not d1:
        return "-"
    if min(d0.get("answered", 0), d1.get("answered", 0)) < run.get("tors", 16):
        return "?"  # a bfdd that did not answer: its downs are not known
    return str(d1["downs"] - d0["downs"])


def verify_col(run: dict) -> str:
    if "verify_at_end" not in run:
        return "-"
    return "ok" if run["verify_at_end"]["ok"] else "FAIL"


# --- the file -------------------------------------------------------------------------------------------------
LEGEND = {
    "case": "the case's timers (CASES)",
    "run": "the run of the case, from 0",
    "up": "s to verified ('no': not verified within up's timeout)",
    "re-est": "BGP sessions re-established during up / during the hold",
    "bfd-down": "BFD session downs in the hold",
    "verify": "verify at the hold's end",
    "lab": "the lab's processes, % of ONE core over the hold's window (budget: 100, half of two cores)",
    "psi": "CPU pressure 'some' %",
    "late": "the agents' worst timer lateness (ms)",
    "kinds": "the lab's processes by kind, % of a core (those at 0.05 or more)",
}


def summary(doc: dict) -> str:
    """A row per run of each case, its processes' CPU by kind under it, each case's tally; the legend of every
    column last; at most 100 columns."""
    from hpnlab.traffic.output import report

    lines = ["The paper's segment (examples/segment-full.yml, 264 nodes, 960 BGP sessions) with LACP fast; BGP 3/9",
             "in the bgp-3-9* cases, else 1/3; BFD as each case names (bench/segment_timers.py, CASES).",
             "up's timeout %s s." % doc.get("timeout_s", "?"), ""]
    hdr = (f"{'case':<18} {'run':>3} {'up':>6} {'re-est':>9} {'bfd-down':>8} {'verify':>6} {'lab':>7} {'psi':>6} "
           f"{'late':>7}")
    lines.append(hdr)
    for case, c in doc.get("cases", {}).items():
        for i, r in enumerate(c["runs"]):
            b0, b1 = r["bgp_at_verified"], r["bgp_at_end"]
            d0, d1 = r.get("bfd_at_verified") or {}, r.get("bfd_at_end") or {}
            cpu = r["cpu"]
            kinds = ", ".join(f"{k} {v:.1f}" for k, v in cpu["pct_core"].items() if v >= 0.05)
            lines.append(f"{case:<18} {i:>3} {r['up_s'] if r['verified'] else 'no':>6} "
                         f"{b0.get('reestablished', '?'):>4}/{b1['established'] - b0['established']:<4} "
                         f"{bfd_col(r):>8} "
                         f"{verify_col(r):>6} {cpu['pct_lab']:>7.2f} "
                         f"{cpu['psi_some_pct']:>6.2f} {cpu['agent_timers_late']['worst_ms']:>7.1f}")
            lines.append(f"    kinds: {kinds}")
            if not r["verdict"]["holds"]:
                lines.append(f"    does not hold: {'; '.join(r['verdict']['why_not'])}")
            if not r["verified"]:
                lines.append(f"    at the timeout: BGP sessions Established {b1['up']} of {b1['sessions']} "
                             f"(connections established {b1['established']}, dropped {b1['dropped']}); "
                             f"{r['at_up']['failing_checks']} of {r['at_up']['checks']} checks "
                             f"failing: {r['at_up']['failing'][:300]}")
        s = c["summary"]
        lines.append(f"  {case}: held {s['held']} of {s['runs']}, verified {s['verified']} of {s['runs']}, "
                     f"verify ok at the end {s.get('verify_ok_at_end', '?')} of {s['runs']}"
                     + (f", up {s['up_s']['min']}-{s['up_s']['max']} s" if s["up_s"] else "")
                     + f", lab {s['pct_lab']['min']}-{s['pct_lab']['max']} % of a core")
        lines.append("")
    per = doc.get("bfd_per_end")
    if per:
        lines.append("bfdd idle on the default lab (bench/idle_cpu.py, bfd-default-lab/), per BFD session end, and that")
        lines.append("times the segment's session ends:")
        for k, v in per.items():
            lines.append(f"  {v['interval_ms']:>5} ms x 3: bfdd {v['bfdd_pct_core']:.2f} % of a core for {v['ends']} ends = "
                         f"{v['pct_core_per_end']:.4f} per end; x {v['segment_ends']} = {v['segment_pct_core']:.1f} % of a core")
        lines.append("")
    return "\n".join(report.wrap(lines[:-1]) + report.legend_lines(None, LEGEND, "bench/segment_timers.py")) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--timeout", type=float, default=300.0, help="up's timeout (default 300: the issue's bound)")
    ap.add_argument("--hold", type=float, default=120.0, help="seconds held after verified (default 120)")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds of the hold before the CPU window")
    ap.add_argument("--window-unhealthy", type=float, default=30.0,
                    help="seconds of CPU measured on a lab that did not verify, before it goes (default 30)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summary", action="store_true", help="only rewrite summary.txt from results.json")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "results.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    if not a.summary:
        if not a.case:
            ap.error("--case or --summary")
        sys.path.insert(0, str(ROOT))
        from hpnlab.instrument import provenance

        run = run_case(a.case, a.timeout, a.hold, a.settle, a.window_unhealthy)
        run["provenance"] = provenance.collect()
        entry = doc.setdefault("cases", {}).setdefault(a.case, {"runs": []})
        entry["runs"].append(run)
        entry["summary"] = case_summary(entry["runs"])
        doc["timeout_s"], doc["hold_s"] = a.timeout, a.hold
        doc["provenance"] = run["provenance"]
        path.write_text(json.dumps(doc, indent=1) + "\n")
    for entry in doc.get("cases", {}).values():  # a summary of the code at hand, also for earlier runs
        entry["summary"] = case_summary(entry["runs"])
    small = a.out / "bfd-default-lab" / "results.json"  # bench/idle_cpu.py --out there (see the docstring)
    if small.exists():
        cases = json.loads(small.read_text())["labs"]["default"]["current"]["cases"]
        doc["bfd_per_end"] = bfd_per_end(cases, session_ends("default"), session_ends(str(SPEC)))
        path.write_text(json.dumps(doc, indent=1) + "\n")
    (a.out / "summary.txt").write_text(summary(doc))
    print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
