#!/usr/bin/env python3
"""Flapping examined (the paper's Fig. 18b): sweep a flapping access link's period and count, and measure
what halts the all-reduce each time: the longest halt between two iterations, and the TCP retransmission
timer (RTO, exponential backoff, retransmissions) of the ring's connections at that moment.

    sudo .venv/bin/python bench/link_flap_sweep.py                       # the shipped points (about 8 min)
    sudo .venv/bin/python bench/link_flap_sweep.py --periods 1 --counts 4 --variants single-tor
    .venv/bin/python bench/link_flap_sweep.py --analyse                  # sweep.json, summary, plot from raw/

Each point (period, count, variant) is its own `hpnlab run` of a generated experiment file (one
repetition by default: the sweep is the survey, link-flap's 3 repetitions are what docs quote), written
to OUT/raw/<point>/. While it runs, a thread samples `ss -tin` inside the flapping host and inside the
rank that sends to it (the connections whose retransmissions the flap hits) every --sample-ms; the
samples go to OUT/raw/<point>/tcp.json. OUT/sweep.json holds every point's figures (points.<variant>-p<period ms>ms-c<count>)
and the provenance,
OUT/summary.txt the table, OUT/plot.png the longest halt against the period.

Nothing else should run meanwhile (the figures are timings on a 2-core machine): run it under the lab
lock. Sampling costs one `ss` per node per interval; the lateness meter's flags say what the machine moved.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from hpnlab.instrument import provenance
from hpnlab.api import Lab
from hpnlab.traffic.analysis.retransmit import halts, parse_ss, retransmissions, returns, timer_during

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "link-flap-sweep"
PREFIX = "lfs"  # the sweep's labs are lfs0 (one variant per run)
AT = 2.0  # the flapping starts 2 s in (a baseline for the workload's rate before it)
TAIL = 4.0  # seconds after the last flap: the recovery
PORT = 17000  # the all-reduce's port (hpnlab.node.programs.allreduce)
# name: (spec overrides, the host's ports that flap: single-ToR's one cable carries both NIC ports)
VARIANTS = {
    "single-tor": ({"access": "single-tor", "tier2": "clos"}, ["r0p0", "r0p1"]),
    "dual-tor": ({}, ["r0p0"]),
    "single-tor-rto1s": ({"access": "single-tor", "tier2": "clos", "tcp_rto_min_ms": 1000}, ["r0p0", "r0p1"]),
    "dual-tor-rto1s": ({"tcp_rto_min_ms": 1000}, ["r0p0"]),
}
FLAPPING = "s0h0"
# results/link-flap-sweep: every period at 3 and 10 flaps with the kernel's RTO floor, the middle periods
# with a 1 s floor, dual-ToR where single-ToR halted longest
SHIPPED = ([("single-tor", p, c) for c in (3, 10) for p in (0.2, 0.5, 1, 2, 4)]
           + [("single-tor-rto1s", p, c) for c in (3, 10) for p in (0.5, 1, 2)]
           + [("dual-tor", 0.5, 10), ("dual-tor", 1, 10), ("dual-tor-rto1s", 1, 10)])


def experiment(period: float, count: int, variant: str, reps: int) -> dict:
    spec, ifaces = VARIANTS[variant]
    return {"name": "link-flap-sweep", "description": f"flap period {period:g} s x {count}, {variant}",
            "spec": str(ROOT / "examples" / "default.yml"), "duration": AT + period * count + TAIL,
            "repetitions": reps, "lab_prefix": PREFIX,
            "probes": [{"name": "upstream", "src": FLAPPING, "dst": "s1h0", "rail": 0, "flows": 16, "rate": 250},
                       {"name": "downstream", "src": "s1h0", "dst": FLAPPING, "rail": 0, "flows": 16, "rate": 250}],
            "workload": {"kind": "allreduce", "rail": 0, "size_kb": 1024, "connections": 8, "select": "least-loaded"},
            "faults": [{"kind": "link-flap", "node": FLAPPING, "iface": ifaces, "period": period, "count": count,
                        "at": AT, "until": AT + period * count}],
            "variants": [{"name": variant, "spec": spec}]}


class Sampler(threading.Thread):
    """`ss -tin` in ``nodes`` of lab ``lab`` every ``interval`` s until stopped; samples as (time, node, conns)."""

    def __init__(self, lab: str, nodes: list[str], interval: float):
        super().__init__(daemon=True)
        self.lab_name, self.nodes, self.interval = lab, nodes, interval
        self.samples: list[dict] = []
        self.stop = threading.Event()

    def run(self) -> None:
        lab = None
        while not self.stop.is_set():
            t = time.time()
            try:
                lab = lab or Lab.attach(self.lab_name)
                for node in self.nodes:
                    r = lab.exec(node, "ss", "-tinH", "state", "established",
                                 f"( sport = :{PORT} or dport = :{PORT} )", timeout=5)
                    self.samples.append({"t": t, "node": node, "conns": parse_ss(r.stdout)})
            except (Exception, SystemExit):  # not up yet, or down at the run's end (the run owns the lab): try again
                lab = None
                self.stop.wait(0.5)
                continue
            self.stop.wait(max(0.0, self.interval - (time.time() - t)))


def analyse_point(d: Path) -> dict | None:
    res = json.loads((d / "run" / "results.json").read_text()) if (d / "run" / "results.json").exists() else None
    if res is None:
        return None
    (vname, v), = res["variants"].items()
    tcp = json.loads((d / "tcp.json").read_text()) if (d / "tcp.json").exists() else {"samples": []}
    fault = v["faults_planned"][0]
    out = {"point": d.name, "variant": vname, "period_s": fault["period"], "count": fault["count"],
           "error": v.get("error"), "runs": []}
    for k, run in enumerate(v["runs"]):
        rep = d / "run" / "raw" / vname / f"rep{k + 1}"
        ranks = [json.loads(p.read_text()) for p in sorted(rep.glob("allreduce-*.json"))]
        r0 = min(ranks, key=lambda r: r["rank"]) if ranks else None
        addr = dict(zip(tcp.get("ring", []), tcp.get("addrs", []))).get(FLAPPING)
        f = run["faults"][0]
        start, end = run["t0"] + f["applied_s"], run["t0"] + f["reverted_s"]
        w = f.get("workload") or {}
        gaps = halts(r0["iterations"], start, end + 1.0) if r0 else []
        samples = [s for s in tcp["samples"] if run["t0"] <= s["t"] <= run["t0"] + res["duration"] + 1]
        timer = (lambda a, b: timer_during(samples, a, b, FLAPPING, addr, PORT)) if addr else None
        out["runs"].append({
            "throughput_pct": w.get("throughput_pct"), "longest_halt_ms": w.get("longest_halt_ms"),
            "recovery_ms": w.get("recovery_ms"), "longest_gap_ms": f.get("longest_gap_ms"),
            "flagged": bool((f.get("emulator") or {}).get("flagged")),
            # the longest interval between two iterations from the first flap to 1 s after the last
            "halt": ({"from_s": round(gaps[0][0] - start, 3), "ms": round((gaps[0][1] - gaps[0][0]) * 1000, 1),
                      **timer(*gaps[0])} if gaps and timer else None),
            "fault_tcp": timer(start, end + 1.0) if timer else None,
            "retransmissions": retransmissions(samples, start, end + 1.0, FLAPPING, addr, PORT) if addr else None,
            # each time the host had no port left: how long after a carrier came back it sent, and the aggs
            # routed to it, again (the network's own share of a halt)
            "returns": returns((f.get("timeline") or {}).get("events", []), FLAPPING, addr) if addr else None,
            "timeline_events_kept": len((f.get("timeline") or {}).get("events", [])),
            "timeline_events_total": (f.get("timeline") or {}).get("events_total")})
    return out


def run_point(period: float, count: int, variant: str, reps: int, out: Path, sample_s: float) -> int:
    d = out / "raw" / f"{variant}-p{period:g}-c{count}"
    d.mkdir(parents=True, exist_ok=True)
    exp = experiment(period, count, variant, reps)
    (d / "experiment.yml").write_text(yaml.safe_dump(exp, sort_keys=False))
    ring = ["s0h0", "s0h1", "s1h0", "s1h1"]  # the default lab's hosts, sorted: the ring's order
    prev = ring[ring.index(FLAPPING) - 1]
    sampler = Sampler(f"{PREFIX}0", [FLAPPING, prev], sample_s)
    sampler.start()
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(d / "experiment.yml"), "--out", str(d / "run"),
                        "--force"],
                       cwd=ROOT)
    sampler.stop.set()
    sampler.join(10)
    addrs = []
    if (d / "run" / "results.json").exists():
        from hpnlab.traffic.run.experiment import load  # the addresses the ring ran on, as the run resolved them
        plan = load(d / "experiment.yml").plans[0]
        addrs = [plan.host_ip(h, 0) for h in ring]
    (d / "tcp.json").write_text(json.dumps({"ring": ring, "addrs": addrs, "interval_s": sample_s,
                                            "samples": sampler.samples}))
    return r.returncode


def worst(rets: list[dict] | None, key: str) -> str:
    vals = [r[key] for r in rets or [] if r[key] is not None]
    return f"{max(vals):g}" if vals else "-"


LEGEND = {
    "variant": "the link-flap experiment's variant",
    "period s": "the flap period (down half of it, up the other half)",
    "count": "how many flaps",
    "workload %": "the all-reduce's throughput during the flapping, % of its baseline",
    "halt ms": "the workload's longest halt in the flapping (results.json's workload.longest_halt_ms)",
    "gap ms": "the probes' longest gap",
    "flagged": "FLAG: the lateness meter flagged the run",
    "RTO ms at halt": "the largest RTO of the connections into or out of the flapping host, during that halt",
    "backoff": "their largest backoff during that halt (ss -tin)",
    "retrans": "their retransmissions from the first flap to 1 s after the last",
    "max RTO ms": "their largest RTO over the whole fault",
    "host back ms": "the longest, over the times the host had no port left, from a carrier back to the host "
                    "routing out of it again (LACP); - where it never lost both",
    "agg back ms": "the same, to an agg's route to the host's /32 again (BGP)",
}


def summarise(points: list[dict]) -> str:
    """Two tables, a row per run (the workload and the probes; TCP and the routes), the legend of every column
    last; at most 100 columns."""
    from hpnlab.traffic.output import report

    key = f"{'variant':<18}{'period s':>9}{'count':>6}"
    lines = [f"{key}  {'workload %':>11}{'halt ms':>9}{'gap ms':>8}  flagged"]
    tcp = [f"{key}{'RTO ms at halt':>15}{'backoff':>8}{'retrans':>8}{'max RTO ms':>11}{'host back ms':>13}"
           f"{'agg back ms':>12}"]
    for p in points:
        for r in p["runs"]:
            h, ft = r["halt"] or {}, r["fault_tcp"] or {}
            row = f"{p['variant']:<18}{p['period_s']:>9g}{p['count']:>6}"
            lines.append(f"{row}  {str(r['throughput_pct']):>11}{str(r['longest_halt_ms']):>9}"
                         f"{str(r['longest_gap_ms']):>8}  {'FLAG' if r['flagged'] else ''}".rstrip())
            tcp.append(f"{row}{str(h.get('max_rto_ms')):>15}{str(h.get('max_backoff')):>8}"
                       f"{str(r['retransmissions']):>8}"
                       f"{str(ft.get('max_rto_ms')):>11}{worst(r['returns'], 'host_ms'):>13}"
                       f"{worst(r['returns'], 'agg_ms'):>12}")
        if p.get("error"):
            lines.append(f"{p['variant']:<18}{p['period_s']:>9g}{p['count']:>6}  FAILED: {p['error']}")
    lines += ["", "TCP of the flapping host, and the routes back to it:"] + tcp
    return "\n".join(report.wrap(lines) + report.legend_lines(None, LEGEND, "bench/link_flap_sweep.py")) + "\n"


def plot(points: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot.png", file=sys.stderr)
        return
    fig_, ax = plt.subplots(figsize=(8, 4.5))
    keys = sorted({(p["variant"], p["count"]) for p in points})
    for variant, count in keys:
        pts = sorted((p["period_s"], r["longest_halt_ms"]) for p in points if (p["variant"], p["count"]) == (variant, count)
                     for r in p["runs"] if r["longest_halt_ms"] is not None)
        if pts:
            ax.plot([x for x, _ in pts], [y / 1000 for _, y in pts], marker="o", label=f"{variant}, {count} flaps")
    ax.axhline(9, color="grey", ls=":", label="the paper's single-ToR halt (> 9 s)")
    ax.set_xscale("log")
    periods = sorted({p["period_s"] for p in points})
    ax.set_xticks(periods, [f"{x:g}" for x in periods])
    ax.minorticks_off()
    ax.set_xlabel("flap period, s (down half of it, up the other half)")
    ax.set_ylabel("the all-reduce's longest halt, s")
    ax.legend(fontsize=7)
    fig_.tight_layout()
    fig_.savefig(path, dpi=110)


def analyse(out: Path) -> None:
    points = [p for d in sorted((out / "raw").glob("*-p*-c*")) if (p := analyse_point(d))]
    points.sort(key=lambda p: (p["variant"], p["count"], p["period_s"]))
    prov = None
    for d in sorted((out / "raw").glob("*-p*-c*")):
        if (d / "run" / "results.json").exists():
            prov = json.loads((d / "run" / "results.json").read_text()).get("provenance")
            break
    # keyed without dots (a docs tag's key path is dotted): single-tor-p200ms-c10
    keyed = {f"{p['variant']}-p{round(p['period_s'] * 1000)}ms-c{p['count']}": p for p in points}
    rets = [x for p in points for r in p["runs"] for x in r["returns"] or []]
    # over every point: the longest the network took to carry the host again after a carrier came back
    network = {k: max((x[k] for x in rets if x[k] is not None), default=None) for k in ("host_ms", "agg_ms")}
    (out / "sweep.json").write_text(json.dumps({"experiment": "link-flap-sweep", "provenance": prov or provenance.collect(),
                                                "at_s": AT, "returns_longest": {**network, "n": len(rets)},
                                                "points": keyed}, indent=1) + "\n")
    text = summarise(points)
    (out / "summary.txt").write_text(text)
    plot(points, out / "plot.png")
    print(text, end="")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--periods", type=float, nargs="+", default=[0.2, 0.5, 1, 2, 4])
    ap.add_argument("--counts", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                    help="variants x --counts x --periods (default, with neither this nor --points: the shipped points)")
    ap.add_argument("--points", nargs="+", metavar="VARIANT:PERIOD:COUNT",
                    help="instead of variants x counts x periods, these points (e.g. single-tor-rto1s:1:10)")
    ap.add_argument("--repetitions", type=int, default=1)
    ap.add_argument("--sample-ms", type=float, default=100)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--analyse", action="store_true", help="only recompute sweep.json, summary.txt, plot.png from raw/")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args(argv)
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    a.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    todo = [(v, float(p), int(c)) for v, p, c in (x.split(":") for x in a.points)] if a.points else \
        [(v, p, c) for v in a.variants for c in a.counts for p in a.periods] if a.variants else SHIPPED
    bad = [v for v, _p, _c in todo if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {', '.join(bad)}; known: {', '.join(VARIANTS)}")
    if not a.analyse:
        for variant, period, count in todo:
            t = time.monotonic()
            print(f"== {variant} period {period:g} s x {count}", flush=True)
            rc = run_point(period, count, variant, a.repetitions, a.out, a.sample_ms / 1000)
            print(f"== exit {rc} in {time.monotonic() - t:.0f} s", flush=True)
            failed += rc != 0
    analyse(a.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
