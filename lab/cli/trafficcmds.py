"""Traffic subcommands: run (experiments), compare (two runs' figures), fail (one fault on a running lab), capture
(pcap), probe (scapy)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from hpnlab.instrument import machineload
from hpnlab import runtime as runtimes
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.lifecycle.orchestrate import need_root, open_lab, resolve_lab
from hpnlab.machine.progress import Progress
from hpnlab.machine.signals import shielded
from hpnlab.traffic import faults, runner
from hpnlab.traffic.analysis import compare
from hpnlab.traffic.run import experiment, faultwatch, impair, nodetools
from hpnlab.traffic.output import htmlreport


HEAL_WATCH_S = 30.0  # fail --watch: how long after the revert it waits for the lab's state from before the fault


def _lab(args):
    lab = resolve_lab(args.lab)
    need_root(f"hpnlab {args.command}")
    return open_lab(lab)


# --- run ---------------------------------------------------------------------------------------------------
def run_cmd(args) -> int:
    path = experiment.find(args.experiment)
    only = [v for v in args.variants.split(",") if v] if args.variants else None
    exp = experiment.load(path, only, args.repetitions, args.duration)  # validates before anything runs
    runtimes.get(args.runtime)  # an unknown runtime is refused before --out is created
    baseline = _baseline(args, exp)  # a bad --baseline is refused before anything runs
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out: '{out}' is a file; give a new or empty directory")
    if not args.reanalyse:
        need_root("hpnlab run")
    if not args.reanalyse and out.exists() and any(out.iterdir()) and not (out / "results.json").exists():
        raise SpecError(f"--out: '{out}' exists and is not an earlier hpnlab run (no results.json); "
                        f"give a new or empty directory")
    if not args.reanalyse and (out / "results.json").exists() and not args.force:
        shipped = " (results shipped with hpnlab, tracked by git)" if runner.tracked(out / "results.json") else ""
        raise SpecError(f"--out: '{out}' already holds results{shipped}; give a new directory, or add --force "
                        f"to replace them")
    if args.reanalyse:
        if not (out / "results.json").exists():
            raise SpecError(f"--reanalyse: no results.json in '{out}'; run the experiment first")
        runner.check_raw(exp, out)  # every repetition's raw data, or nothing is written
        results = runner.reanalyse(exp, out)
    else:
        runner.refuse_on_this_kernel(exp, args.runtime)  # one line, before anything is printed or created
        bar = Progress(quiet=args.json)
        # a quiet machine first (bounded wait), or one line and exit 2 unless --busy-ok: results.json's
        # provenance.machine_load holds the readings
        machineload.settle(args.busy_ok, progress=bar.phase)
        durs = sorted({p.duration for p in exp.plans}) or [exp.doc.duration]
        each = f"{durs[0]:g}" if len(durs) == 1 else f"{durs[0]:g}-{durs[-1]:g}"
        bar.phase(f"experiment {exp.name}: {len(exp.plans)} variant(s) x {exp.doc.repetitions} repetition(s) x "
                  f"{each} s -> {out}")
        results = runner.run_experiment(exp, out, args.runtime, bar)
    png, table = runner.write_results(results, out)
    cmp = None
    if baseline is not None:
        cmp = compare.compare(baseline, out, args.ignore or ())
        compare.write_reports(cmp, args.junit, args.markdown)
    if args.json:
        tl = out / "timeline.png"
        json.dump({"results": str(out / "results.json"), "plot": str(png) if png else None,
                   "timeline": str(tl) if tl.exists() else None, "report": str(out / htmlreport.NAME),
                   "variants": {n: {"error": v.get("error"), "faults": v["faults"]} for n, v in
                                results["variants"].items()},
                   **({"comparison": cmp.to_dict()} if cmp else {})}, sys.stdout, indent=1)
        print()
    else:
        print(table)
        print(f"results: {out / 'results.json'}" + (f"   plot: {png}" if png else f"   (no plot: {runner.no_plot_reason()})")
              + (f"   timeline: {out / 'timeline.png'}" if (out / "timeline.png").exists() else "")
              + f"   report: {out / htmlreport.NAME}")
        if cmp:
            print(cmp.table())
    failed = [n for n, v in results["variants"].items() if v.get("error")]
    if failed:
        raise RuntimeFailure(f"variant(s) {', '.join(failed)} failed: " +
                             results["variants"][failed[0]]["error"])
    return 0 if cmp is None or cmp.ok else 1


def _baseline(args, exp: experiment.Experiment):
    """--baseline's results, checked against the experiment about to run (one line, exit 2, before any lab);
    --junit and --markdown are its reports."""
    if args.baseline is None:
        for flag, given in (("--junit", args.junit), ("--markdown", args.markdown), ("--ignore", args.ignore)):
            if given:
                raise SpecError(f"{flag}: goes with --baseline (it is about the comparison)")
        return None
    base, _ = compare.load(args.baseline, "--baseline")
    compare.check_pair(base, {"experiment": exp.name}, [p.name for p in exp.plans])
    return base


# --- compare ---------------------------------------------------------------------------------------------------
def compare_cmd(args) -> int:
    variants = None
    if args.variants is not None:
        variants = tuple(v.strip() for v in args.variants.split(","))
        if len(variants) != 2 or not all(variants):
            raise SpecError(f"--variants '{args.variants[:60]}': give two, BASELINE,CANDIDATE, e.g. --variants "
                            f"bfd-on,bfd-off")
    elif args.candidate is None and ":" not in args.baseline:
        raise SpecError("compare: give a candidate folder, or --variants A,B to compare two variants of this run")
    cmp = compare.compare(args.baseline, args.candidate, args.ignore or (), variants)
    compare.write_reports(cmp, args.junit, args.markdown)
    if args.json:
        json.dump(cmp.to_dict(), sys.stdout, indent=1)
        print()
    else:
        print(cmp.table(every=args.all))
    return 0 if cmp.ok else 1


# --- report ----------------------------------------------------------------------------------------------------
def report_cmd(args) -> int:
    path = htmlreport.write(Path(args.dir))
    size = path.stat().st_size
    print(f"report: {path} ({size / 1e6:.2f} MB; opens offline in a browser)")
    return 0


# --- health ------------------------------------------------------------------------------------------------
def health_cmd(args) -> int:
    """Probe the running lab for --for seconds with the black-box prober; per link: its loss bound, how
    many probed paths cross it; the suspects; with --isolate, the isolations made (and undone at the end)."""
    from hpnlab.api import Lab
    from hpnlab.traffic.run.isolation import Isolator

    if not 2 <= args.hold <= 3600:
        raise SpecError("health --for: give 2 to 3600 seconds")
    lab = Lab.attach(resolve_lab(args.lab))
    need_root("hpnlab health")
    p = lab.prober(rate=args.rate)
    plan = p.plan()
    iso = Isolator(lab, p) if args.isolate else None
    with shielded("stopping the prober"):
        with p:
            if iso:
                with iso:
                    time.sleep(args.hold)
            else:
                time.sleep(args.hold)
    out = {"plan": plan, "links": p.health(), "events": p.events, "isolation": iso.log if iso else [],
           "report": p.report()}
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'link':<22} {'end':<16} {'loss<=':>7} {'paths':>5} {'sent':>7} {'lost':>5}  suspect")
    for r in out["links"]:
        print(f"{r['link']:<22} {r['node'] + ':' + r['iface']:<16} {100 * r['loss']:>6.2f}% {r['paths']:>5} "
              f"{r['sent']:>7} {r['lost']:>5}  {'SUSPECT' if r['suspect'] else ''}")
    for e in out["events"] + out["isolation"]:
        what = e.get("event") or e.get("action")
        print(f"{time.strftime('%H:%M:%S', time.localtime(e['t']))}.{int(e['t'] % 1 * 1000):03d} {what} {e['link']}"
              + (f" confidence {e['confidence']}" if "confidence" in e else "") + (f" ({e['why']})" if e.get("why") else ""))
    rep = out["report"]
    print(f"prober: {rep['paths']} paths at {rep['rate_per_path']:g}/s, {rep['probes_per_s']:g} probes/s, node CPU "
          f"{rep['node_cpu_s_per_s']:.3f} s/s; short of 2 paths: {', '.join(plan['short']) or 'none'}")
    return 0


# --- fail --------------------------------------------------------------------------------------------------
def _fault_params(items: list[str]) -> dict[str, float]:
    """['rate=1', 'both=1'] -> {"rate": 1.0, "both": 1.0}; faults.parse then names an unknown key."""
    out = {}
    for it in items:
        key, sep, val = it.partition("=")
        try:
            out[key] = float(val)
        except ValueError:
            sep = ""
        if not sep or not key:
            raise SpecError(f"fail --param '{it[:40]}': give KEY=NUMBER, e.g. --param rate=1 (hpnlab fail --list "
                            f"names each kind's keys)")
    return out


def _clock(t: float) -> str:
    """Wall-clock time with milliseconds: 10:42:07.318."""
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


def _watch_until(watch, t_applied: float, deadline: float, stop_when_healed: bool = False) -> None:
    """Once a second until ``deadline`` (time.monotonic), print what changed since the last poll."""
    tick = time.monotonic()
    while True:
        tick += 1.0
        if tick > deadline:
            break
        time.sleep(max(0.0, tick - time.monotonic()))
        lines = watch.poll()
        stamp = f"{_clock(time.time())} +{time.time() - t_applied:5.1f} s"
        for ln in lines or ["no change"]:
            print(f"{stamp}  {ln}", flush=True)
        if stop_when_healed and watch.healed():
            return


def fail_cmd(args) -> int:
    if args.list:
        width = max(map(len, faults.KINDS)) + 2
        for k, v in faults.KINDS.items():
            print(f"{k:<{width}}{v}")
        return 0
    params = _fault_params(args.param or [])  # before the lab: a typo fails without one
    if args.watch and args.clear:
        raise SpecError("fail --watch: watches a fault it applies; not with --clear")
    rt, cfgs = _lab(args)
    if args.clear:
        n = faults.revert_state(rt, cfgs)
        print(f"reverted {n} recorded fault(s) in lab '{rt.lab}'")
        return 0
    if not args.kind or not args.node:
        raise SpecError("give a fault: hpnlab fail KIND NODE [IFACE] (hpnlab fail --list shows the kinds)")
    own = {"fraction": args.fraction} if args.fraction is not None else {}  # a kind's own parameters
    own.update(params)
    f = faults.parse({"kind": args.kind, "node": args.node, "iface": args.iface, "period": args.period,
                      "count": args.count, **own}, "fault", cfgs)
    inj = faults.Injector(rt, cfgs)
    if args.hold is None:
        args.hold = faults.get(f.kind).duration(f)  # a fault that ends by itself is held until it has
    if args.watch and args.hold is None:
        raise SpecError("fail --watch: give --for SECONDS (the watch runs while the fault is on and until the lab "
                        "is back)")
    watch = faultwatch.Watch(rt, cfgs) if args.watch else None
    t_applied = time.time()
    try:
        inj.apply(f)
        t_applied, m_applied = time.time(), time.monotonic()
        print(f"applied: {f.label} at {_clock(t_applied)}", file=sys.stderr, flush=True)
        if args.hold is None:
            inj.active.clear()  # stays recorded in state.json for --clear
            print(f"it stays until 'hpnlab fail --clear --lab {rt.lab}' (or hpnlab down)", file=sys.stderr)
            return 0
        deadline = m_applied + args.hold
        if watch is not None:
            _watch_until(watch, t_applied, deadline)
        while time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if inj.active:
            with shielded("reverting the fault"):
                inj.revert_all()
                t = time.time()
                print(f"reverted: {f.label} at {_clock(t)}, {t - t_applied:.2f} s after applied", file=sys.stderr,
                      flush=True)
    if watch is not None:
        m_reverted = time.monotonic()
        _watch_until(watch, t_applied, m_reverted + HEAL_WATCH_S, stop_when_healed=True)
        if watch.healed():
            print(f"back to the state before the fault {time.monotonic() - m_reverted:.1f} s after the revert "
                  f"(to within a poll, 1 s)")
        else:
            print(f"not back {HEAL_WATCH_S:g} s after the revert: " + "; ".join(watch.left()))
    return 0


# --- capture -----------------------------------------------------------------------------------------------
def capture_cmd(args) -> int:
    rt, cfgs = _lab(args)
    out = Path(args.out or f"{args.node}-{args.iface}.pcap")
    if out.exists() and not args.force:
        raise SpecError(f"--out '{out}' exists; choose another file or add --force to overwrite it")
    cap = nodetools.Capture(rt, cfgs, args.node, args.iface, out, args.count, args.filter)
    print(f"capturing on {args.node}:{args.iface} -> {cap.out}" +
          (f" for {args.duration:g} s" if args.duration else " (Ctrl-C to stop)"), file=sys.stderr)
    try:
        cap.wait(args.duration)
    except KeyboardInterrupt:
        pass
    path = cap.stop()
    print(f"wrote {path}" + (f" ({cap.summary})" if cap.summary else ""), file=sys.stderr)
    return 0


# --- impair ------------------------------------------------------------------------------------------------
def impair_cmd(args) -> int:
    if args.clear:
        if args.settings:
            raise SpecError("impair --clear takes no KEY=VALUE settings")
        rt, cfgs = _lab(args)
        done = impair.clear(rt, cfgs, args.node, args.iface)
        print(f"cleared {len(done)} impairment(s)" + (f": {', '.join(done)}" if done else "") +
              "; the spec's capacity is back")
        return 0
    if not args.node or not args.iface:
        raise SpecError("impair: give NODE IFACE and settings, e.g. hpnlab impair s0r0a h0p0 rate=5mbit loss=1")
    settings = impair.parse(args.settings)  # bad input fails before the lab is touched
    rt, cfgs = _lab(args)
    now = impair.apply(rt, cfgs, args.node, args.iface, settings)
    if args.json:
        json.dump({"link": f"{args.node}:{args.iface}", "impairment": now}, sys.stdout)
        print()
    else:
        print(f"{args.node}:{args.iface} now " + ", ".join(f"{k}={v:g}" for k, v in now.items()) +
              f" (hpnlab impair --clear {args.node} {args.iface} undoes it)")
    return 0


# --- probe (scapy) -----------------------------------------------------------------------------------------
def probe_cmd(args) -> int:
    rt, cfgs = _lab(args)
    if args.mode == "paths":
        sports = list(range(args.sport, args.sport + args.flows))
        res = nodetools.paths(rt, cfgs, args.src, args.dst, args.rail, sports, args.dport, args.proto)
        if args.json:
            json.dump(res, sys.stdout, indent=1)
            print()
            return 0
        rows = res["paths"]
        print(f"{res['src']} -> {res['dst']} {res['proto']} dport {res['dport']}: hops per source port")
        print(f"{'sport':>6}  {'tor':<8} {'agg':<8} far tor")
        for r in rows:
            print(f"{r['sport']:>6}  {r['tor']:<8} {r['agg']:<8} {r['dst_tor']}")
        by: dict = {}
        for r in rows:
            key = (r["tor"], r["agg"], r["dst_tor"])
            by[key] = by.get(key, 0) + 1
        print("spread: " + ", ".join(f"{'/'.join(k)}: {n}" for k, n in sorted(by.items())))
        for tor, aggs in res["shares"].items():  # what the hash did against the weights it hashes by
            print(f"{tor}: share of source ports / of the kernel's weight per agg: " + ", ".join(
                f"{a} {x['ports']:.2f}/{'-' if x['weight'] is None else format(x['weight'], '.2f')}"
                for a, x in aggs.items()))
        return 0
    if args.mode == "arp":
        res = nodetools.arp(rt, cfgs, args.node, args.iface, args.target)
    else:
        res = nodetools.lacp(rt, cfgs, args.node, args.iface, args.wait)
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


def add_parsers(sub) -> None:
    r = sub.add_parser("run", help="run a failover experiment: labs, traffic, fault timeline -> results.json + plot",
                       description="Run an experiment YAML (see experiments/). Per variant: bring a lab up, run the "
                                   "probes and workload, play the fault timeline, repeat, take the lab down. "
                                   "Writes DIR/results.json, DIR/summary.txt, DIR/plot.png, DIR/timeline.png (the first "
                                   "converged fault's convergence timeline), DIR/report.html (all of it as one "
                                   "interactive page, as hpnlab report) and raw reports (DIR/raw/).",
                       epilog="examples:\n  sudo hpnlab run experiments/link-failure.yml --out results/link-failure\n"
                              "  sudo hpnlab run link-flap --out /tmp/flap --repetitions 1 --variants dual-tor")
    r.add_argument("experiment", help="experiment YAML (or the name of one in experiments/)")
    r.add_argument("--out", "-o", required=True, help="output directory")
    r.add_argument("--repetitions", "-n", type=int, help="override the file's repetitions")
    r.add_argument("--duration", type=float, help="override the file's and every variant's duration (seconds)")
    r.add_argument("--variants", help="comma-separated subset of variants to run")
    r.add_argument("--runtime", default="netns", choices=runtimes.names(),
                   help="where each variant's lab runs (as for 'hpnlab up')")
    r.add_argument("--json", action="store_true", help="print a JSON digest instead of the table")
    r.add_argument("--force", action="store_true", help="replace the results an --out folder already holds "
                                                        "(refused without it, shipped results included)")
    machineload.add_argument(r)
    r.add_argument("--reanalyse", action="store_true",
                   help="recompute results.json, plot and summary from DIR/raw without running anything")
    r.add_argument("--baseline", metavar="BASEDIR",
                   help="compare every figure with an earlier run's folder (as 'hpnlab compare BASEDIR DIR'); "
                        "exit 1 when a figure got worse beyond its tolerance")
    r.add_argument("--junit", metavar="FILE", help="with --baseline: JUnit XML, one testcase per figure")
    r.add_argument("--markdown", metavar="FILE", help="with --baseline: a Markdown report (a PR comment)")
    r.add_argument("--ignore", metavar="FIGURE", action="append",
                   help="with --baseline: report this figure (a name or pattern, e.g. 'workload.*') without "
                        "judging it; repeatable")
    r.set_defaults(func=run_cmd)

    cp = sub.add_parser("compare", help="compare every figure of two result folders; exit 1 on a regression",
                        description="Compare a candidate run of an experiment with a baseline run of it: every "
                                    "figure of every variant, fault and stream both hold; or two variants, of one "
                                    "run or two (--variants, or FOLDER:VARIANT on each side). The candidate's median "
                                    "is worse when it lies beyond the baseline's median by more than the "
                                    "baseline's spread (max - min over its repetitions) plus the lateness meter's "
                                    "bound (10 % of the figure or 5 ms; counts of flows: the spread alone). Exit 0: "
                                    "no regression; 1: a regression (the table lists it); 2: bad input. "
                                    "docs/baselines.md has the rule per figure and a CI recipe.",
                        epilog="examples:\n  hpnlab compare results/link-failure /tmp/lf\n"
                               "  hpnlab compare /tmp/hang --variants bfd-on,bfd-off   (two variants of one run)\n"
                               "  hpnlab compare results/link-failure:dual-tor /tmp/lf:single-tor\n"
                               "  hpnlab compare base/ new/ --junit report.xml --markdown report.md")
    cp.add_argument("baseline", help="the baseline's folder (or its results.json); FOLDER:VARIANT for one variant")
    cp.add_argument("candidate", nargs="?", help="the candidate's folder (or its results.json); FOLDER:VARIANT for "
                                                 "one variant; left out with --variants: the baseline's folder")
    cp.add_argument("--variants", metavar="BASE,CAND",
                    help="compare the baseline's variant BASE with the candidate's variant CAND (two variants of one "
                         "run when the candidate is left out), e.g. --variants bfd-on,bfd-off")
    cp.add_argument("--all", action="store_true", help="list every figure, not only the ones worse, better or "
                                                       "in one side only")
    cp.add_argument("--junit", metavar="FILE", help="write JUnit XML: one testcase per figure, a failure per "
                                                    "regression")
    cp.add_argument("--markdown", metavar="FILE", help="write a Markdown report (a PR comment)")
    cp.add_argument("--ignore", metavar="FIGURE", action="append",
                    help="report this figure (a name or pattern, e.g. 'workload.*') without judging it; repeatable")
    cp.add_argument("--json", action="store_true", help="print every figure's comparison as JSON for scripts")
    cp.set_defaults(func=compare_cmd)

    rp = sub.add_parser("report", help="write DIR/report.html: an experiment's results as one interactive, offline page",
                        description="Make report.html from an experiment's results.json (every 'hpnlab run' writes "
                                    "one; this makes it for an existing result): the summary table with each "
                                    "column's definition, per variant the probes' delivery and the workload's rate "
                                    "over time for every repetition (zoom, hover, toggle), the convergence "
                                    "timelines, a replay of the fabric at any instant, the lateness flags and the "
                                    "provenance. Self-contained: it opens from the file with no network. A bench's "
                                    "result folder (no experiment's results.json) gets a plain page instead: its "
                                    "files' provenance, summaries, pictures, notes and JSON.",
                        epilog="examples:\n  hpnlab report results/link-failure\n  hpnlab report /tmp/lf")
    rp.add_argument("dir", help="the folder of an 'hpnlab run' (or its results.json), or of a bench's results")
    rp.set_defaults(func=report_cmd)

    f = sub.add_parser("fail", help="inject one fault into a running lab (reverted after --for, on Ctrl-C, or by --clear)",
                       description="Kinds:\n" + "\n".join(f"{k}: {v}" for k, v in faults.KINDS.items()),
                       epilog="examples:\n  sudo hpnlab fail link-down s0h0 r0p0 --for 5\n"
                              "  sudo hpnlab fail hang s0r0a            (stays until: hpnlab fail --clear)\n"
                              "  sudo hpnlab fail link-flap s0h0 r0p0 --period 1 --count 5\n"
                              "  sudo hpnlab fail degrade s0r0a agg0-1 --fraction 0.25 --for 30   (a shaped link)\n"
                              "  sudo hpnlab fail silent-loss s0r0a agg0-0 --param rate=1 --for 30   (a gray failure)")
    f.add_argument("kind", nargs="?", help="the fault (--list shows every kind and what it does)")
    f.add_argument("node", nargs="?", help="the node it hits, e.g. s0h0 or s0r0a")
    f.add_argument("iface", nargs="?", help="for link faults (comma-separated for a multi-port cable)")
    f.add_argument("--for", dest="hold", type=float, help="seconds to hold it, then revert")
    f.add_argument("--period", type=float, default=1.0, help="link-flap period (s)")
    f.add_argument("--count", type=int, default=3, help="link-flap count")
    f.add_argument("--fraction", type=float, help="degrade: the share of the link's capacity left (default 0.5)")
    f.add_argument("--param", metavar="KEY=NUMBER", action="append",
                   help="a kind's own parameter, repeatable, e.g. silent-loss --param rate=1 --param both=1")
    f.add_argument("--watch", action="store_true",
                   help="with --for: print once a second what changed (BGP sessions per router, LACP members and "
                        "host routes per ToR and host, agents without a heartbeat), during the fault and after it "
                        "until the lab is back as before (at most 30 s)")
    f.add_argument("--clear", action="store_true", help="revert every fault recorded for the lab")
    f.add_argument("--list", action="store_true", help="list fault kinds")
    f.add_argument("--lab", help="lab name (default: the only running lab)")
    f.set_defaults(func=fail_cmd)

    hl = sub.add_parser("health", help="black-box link health: probe every link, name a lossy one (--isolate: take it out)",
                        description="Probe the running lab's access and ToR-agg links with the black-box prober for "
                                    "--for seconds: paths chosen so every directed link lies on >= 2 of them and any two links "
                                    "sharing a path differ in >= 2, per-link "
                                    "loss bounds from per-path loss, a suspect with a confidence. --isolate takes a "
                                    "confirmed suspect out of service (guarded; put back at the end).",
                        epilog="examples:\n  sudo hpnlab health --for 10\n  sudo hpnlab health --for 30 --isolate --json")
    hl.add_argument("--for", dest="hold", type=float, default=10.0, help="seconds to probe (default 10)")
    hl.add_argument("--rate", type=float, default=100.0, help="probes per second per path (default 100)")
    hl.add_argument("--isolate", action="store_true", help="isolate a confirmed suspect (guarded), undone at the end")
    hl.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    hl.add_argument("--lab", help="lab name (default: the only running lab)")
    hl.set_defaults(func=health_cmd, command="health")

    c = sub.add_parser("capture", help="write a pcap of one node interface (tcpdump inside the node)")
    c.add_argument("node", help="the node to capture in, e.g. s0r0a")
    c.add_argument("iface", help="its interface, e.g. h0p0")
    c.add_argument("--out", "-o", help="pcap file (default NODE-IFACE.pcap); an existing file is kept unless --force")
    c.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    c.add_argument("--duration", type=float, help="seconds (default: until Ctrl-C or --count)")
    c.add_argument("--count", type=int, help="stop after this many packets")
    c.add_argument("--filter", help="tcpdump filter expression, e.g. 'ether proto 0x8809'")
    c.add_argument("--lab", help="lab name (default: the only running lab)")
    c.set_defaults(func=capture_cmd)

    im = sub.add_parser("impair", help="change one link end at runtime: rate, queue, loss, delay (--clear undoes)",
                        description="Change one link end of a running lab. Settings: " +
                        "; ".join(f"{k}=... {v}" for k, v in impair.KEYS.items()) +
                        ". The change stays until --clear (all, or one NODE [IFACE]) or 'hpnlab down'.")
    im.add_argument("node", nargs="?", help="the node whose link end changes, e.g. s0h0")
    im.add_argument("iface", nargs="?", help="its interface, e.g. r0p0")
    im.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="rate=, queue=, loss=, delay= (above)")
    im.add_argument("--clear", action="store_true", help="undo impairments (all, or of NODE [IFACE])")
    im.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    im.add_argument("--lab", help="lab name (default: the only running lab)")
    im.set_defaults(func=impair_cmd, command="impair")

    p = sub.add_parser("probe", help="crafted packets with scapy: ECMP paths (TTL probes), ARP, LACP")
    psub = p.add_subparsers(dest="mode", required=True, metavar="MODE")
    a = psub.add_parser("paths", help="which ToR, agg and far ToR each source port takes from SRC to DST")
    a.add_argument("src", help="the sending host, e.g. s0h0")
    a.add_argument("dst", help="the receiving host, e.g. s1h0")
    a.add_argument("--rail", type=int, default=0, help="which rail (NIC) of the hosts")
    a.add_argument("--flows", type=int, default=16, help="how many source ports (5-tuples) to probe")
    a.add_argument("--sport", type=int, default=20000, help="first source port")
    a.add_argument("--dport", type=int, default=33434, help="destination port (part of the L4 hash)")
    a.add_argument("--proto", choices=("udp", "tcp"), default="udp",
                   help="protocol of the 5-tuple (part of the L4 hash): tcp probes with a SYN")
    a.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    b = psub.add_parser("arp", help="ARP request out of one host port; show who answers with which MAC")
    b.add_argument("node", help="the host that asks, e.g. s0h0")
    b.add_argument("iface", help="the port it asks on, e.g. r0p0")
    b.add_argument("target", help="IP to ask for")
    lp = psub.add_parser("lacp", help="decode the LACPDUs heard on a node port")
    lp.add_argument("node", help="the node whose LACPDUs to decode, e.g. s0r0a")
    lp.add_argument("iface", help="its interface, e.g. h0p0")
    lp.add_argument("--wait", type=float, default=3.0, help="seconds to listen")
    for x in (a, b, lp):
        x.add_argument("--lab", help="lab name (default: the only running lab)")
        x.set_defaults(func=probe_cmd, command="probe")
