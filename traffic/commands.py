"""Traffic subcommands: run (experiments), fail (one fault on a running lab), capture (pcap), probe (scapy)."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from lab.errors import RuntimeFailure, SpecError

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _lab(args):
    from lab.commands import load_cfgs, need_root, open_runtime, resolve_lab

    need_root(f"hpnlab {args.command}")
    rt = open_runtime(resolve_lab(args))
    return rt, load_cfgs(rt)


def _node(cfgs: dict, node: str, role: str | None = None) -> dict:
    if node not in cfgs:
        raise SpecError(f"node '{node}' is not in the lab; nodes: {', '.join(sorted(cfgs))}")
    if role and cfgs[node]["role"] != role:
        raise SpecError(f"node '{node}' is a {cfgs[node]['role']}; give a {role}")
    return cfgs[node]


# --- run ---------------------------------------------------------------------------------------------------
def run_cmd(args) -> int:
    from lab.commands import need_root
    from traffic import experiment, report, runner

    path = Path(args.experiment)
    if not path.exists() and (EXPERIMENTS / args.experiment).exists():
        path = EXPERIMENTS / args.experiment
    elif not path.exists() and (EXPERIMENTS / f"{args.experiment}.yml").exists():
        path = EXPERIMENTS / f"{args.experiment}.yml"
    only = [v for v in args.variants.split(",") if v] if args.variants else None
    exp = experiment.load(path, only, args.repetitions, args.duration)  # validates before anything runs
    out = Path(args.out)
    if not args.reanalyse:
        need_root("hpnlab run")
    if not args.reanalyse and out.exists() and any(out.iterdir()) and not (out / "results.json").exists():
        raise SpecError(f"--out: '{out}' exists and is not an earlier hpnlab run (no results.json); "
                        f"give a new or empty directory")
    if args.reanalyse:
        if not (out / "results.json").exists():
            raise SpecError(f"--reanalyse: no results.json in '{out}'; run the experiment first")
        results = runner.reanalyse(exp, out)
    else:
        bar = runner.Bar(quiet=args.json)
        bar.phase(f"experiment {exp.name}: {len(exp.plans)} variant(s) x {exp.doc.repetitions} repetition(s) x "
                  f"{exp.doc.duration:g} s -> {out}")
        results = runner.run_experiment(exp, out, args.runtime, bar)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(out / "results.json")
    png = report.plot(results, out / "plot.png")
    table = report.summary_table(results)
    (out / "summary.txt").write_text(table + "\n")
    if args.json:
        json.dump({"results": str(out / "results.json"), "plot": str(png) if png else None,
                   "variants": {n: {"error": v.get("error"), "faults": v["faults"]} for n, v in
                                results["variants"].items()}}, sys.stdout, indent=1)
        print()
    else:
        print(table)
        print(f"results: {out / 'results.json'}" + (f"   plot: {png}" if png else "   (plot: pip install matplotlib)"))
    failed = [n for n, v in results["variants"].items() if v.get("error")]
    if failed:
        raise RuntimeFailure(f"variant(s) {', '.join(failed)} failed: " +
                             results["variants"][failed[0]]["error"])
    return 0


# --- fail --------------------------------------------------------------------------------------------------
def fail_cmd(args) -> int:
    from traffic import faults

    if args.list:
        for k, v in faults.KINDS.items():
            print(f"{k:<13} {v}")
        return 0
    rt, cfgs = _lab(args)
    if args.clear:
        n = faults.revert_state(rt, cfgs)
        print(f"reverted {n} recorded fault(s) in lab '{rt.lab}'")
        return 0
    if not args.kind or not args.node:
        raise SpecError("give a fault: hpnlab fail KIND NODE [IFACE] (hpnlab fail --list shows the kinds)")
    f = faults.parse({"kind": args.kind, "node": args.node, "iface": args.iface, "period": args.period,
                      "count": args.count}, "fault", cfgs)
    inj = faults.Injector(rt, cfgs)
    if args.hold is None and args.kind == "link-flap":
        args.hold = args.period * args.count
    try:
        inj.apply(f)
        print(f"applied: {f.label}", file=sys.stderr)
        if args.hold is None:
            inj.active.clear()  # stays recorded in state.json for --clear
            print(f"it stays until 'hpnlab fail --clear --lab {rt.lab}' (or hpnlab down)", file=sys.stderr)
            return 0
        deadline = time.monotonic() + args.hold
        while time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if inj.active:
            inj.revert_all()
            print(f"reverted: {f.label}", file=sys.stderr)
    return 0


# --- capture -----------------------------------------------------------------------------------------------
def capture_cmd(args) -> int:
    import shutil

    rt, cfgs = _lab(args)
    node = _node(cfgs, args.node)
    ifaces = [i["name"] for i in node["interfaces"]]
    if args.iface not in ifaces:
        raise SpecError(f"iface '{args.iface}' is not an interface of {args.node}; it has {', '.join(ifaces)}")
    if not shutil.which("tcpdump"):
        raise RuntimeFailure("tcpdump not found: install Debian's tcpdump (sudo ./bootstrap install)")
    out = Path(args.out or f"{args.node}-{args.iface}.pcap").resolve()
    argv = ["tcpdump", "-i", args.iface, "-w", str(out), "-U", "-n", "-s", "256"]
    if args.count:
        argv += ["-c", str(args.count)]
    if args.filter:
        argv += [args.filter]  # one argument: tcpdump parses it, no shell involved
    p = subprocess.Popen(rt.exec_argv(args.node, argv), stderr=subprocess.PIPE, text=True, start_new_session=True)
    print(f"capturing on {args.node}:{args.iface} -> {out}" +
          (f" for {args.duration:g} s" if args.duration else " (Ctrl-C to stop)"), file=sys.stderr)
    try:
        p.wait(timeout=args.duration)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
    except KeyboardInterrupt:
        p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    if not out.exists():
        raise RuntimeFailure(f"tcpdump wrote nothing: {(err or '').strip().splitlines()[-1:]}")
    tail = [ln for ln in (err or "").splitlines() if "captured" in ln]
    print(f"wrote {out}" + (f" ({tail[0]})" if tail else ""), file=sys.stderr)
    return 0


# --- probe (scapy) -----------------------------------------------------------------------------------------
def _craft(rt, node: str, argv: list[str]) -> dict:
    from lab.runtime.base import run
    from traffic.runner import PKG_ROOT

    r = run(rt.exec_argv(node, ["env", f"PYTHONPATH={PKG_ROOT}", sys.executable, "-m", "traffic.craft", *argv]),
            timeout=60, what=f"{node}: scapy probe")
    return json.loads(r.stdout)


def probe_cmd(args) -> int:
    rt, cfgs = _lab(args)
    if args.mode == "paths":
        src, dst = _node(cfgs, args.src, "host"), _node(cfgs, args.dst, "host")
        snic = next((n for n in src["nics"] if n["rail"] == args.rail), None)
        dnic = next((n for n in dst["nics"] if n["rail"] == args.rail), None)
        if not snic or not dnic:
            raise SpecError(f"--rail: {args.rail} is not a rail of both hosts")
        sports = list(range(args.sport, args.sport + args.flows))
        res = _craft(rt, args.src, ["paths", "--src", snic["ip"], "--dst", dnic["ip"], "--gateway", snic["gateway"],
                                    "--sports", ",".join(map(str, sports)), "--ifaces", ",".join(snic["ports"])])
        loop = {c["router_id"]: n for n, c in cfgs.items() if c["role"] != "host"}
        port_tor = dict(zip(snic["ports"], snic["tors"]))
        rows = []
        for sp in sports:
            h = res["paths"].get(str(sp), {})
            tor = port_tor.get(h.get("tor", {}).get("iface"), "?")
            agg = loop.get(h.get("agg", {}).get("src"), h.get("agg", {}).get("src", "?"))
            rows.append({"sport": sp, "tor": tor, "agg": agg})
        if args.json:
            json.dump({"src": snic["ip"], "dst": dnic["ip"], "dport": res["dport"], "paths": rows}, sys.stdout, indent=1)
            print()
            return 0
        print(f"{snic['ip']} -> {dnic['ip']} udp dport {res['dport']}: first two hops per source port")
        print(f"{'sport':>6}  {'tor':<8} agg")
        for r in rows:
            print(f"{r['sport']:>6}  {r['tor']:<8} {r['agg']}")
        by = {}
        for r in rows:
            by[(r["tor"], r["agg"])] = by.get((r["tor"], r["agg"]), 0) + 1
        print("spread: " + ", ".join(f"{t}/{a}: {n}" for (t, a), n in sorted(by.items())))
        return 0
    node = _node(cfgs, args.node)
    ifaces = [i["name"] for i in node["interfaces"]]
    if args.iface not in ifaces:
        raise SpecError(f"iface '{args.iface}' is not an interface of {args.node}; it has {', '.join(ifaces)}")
    if args.mode == "arp":
        if node["role"] != "host":
            raise SpecError("probe arp is sent from a host port; give a host node")
        nic = next(n for n in node["nics"] if args.iface in n["ports"])
        res = _craft(rt, args.node, ["arp", "--iface", args.iface, "--src-ip", nic["ip"], "--target", args.target])
    else:
        res = _craft(rt, args.node, ["lacp", "--iface", args.iface, "--wait", str(args.wait)])
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


def add_parsers(sub, wrap) -> None:
    r = sub.add_parser("run", help="run a failover experiment: labs, traffic, fault timeline -> results.json + plot",
                       description="Run an experiment YAML (see experiments/). Per variant: bring a lab up, run the "
                                   "probes and workload, play the fault timeline, repeat, take the lab down. "
                                   "Writes DIR/results.json, DIR/plot.png, DIR/summary.txt and raw reports.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  sudo hpnlab run experiments/link-failure.yml --out results/link-failure\n"
                              "  sudo hpnlab run link-flap --out /tmp/flap --repetitions 1 --variants dual-tor")
    r.add_argument("experiment", help="experiment YAML (or the name of one in experiments/)")
    r.add_argument("--out", "-o", required=True, help="output directory")
    r.add_argument("--repetitions", "-n", type=int, help="override the file's repetitions")
    r.add_argument("--duration", type=float, help="override the file's duration (seconds)")
    r.add_argument("--variants", help="comma-separated subset of variants to run")
    r.add_argument("--runtime", default="netns", help="netns (default) or clab")
    r.add_argument("--json", action="store_true", help="print a JSON digest instead of the table")
    r.add_argument("--reanalyse", action="store_true",
                   help="recompute results.json, plot and summary from DIR/raw without running anything")
    r.set_defaults(func=wrap(run_cmd))

    f = sub.add_parser("fail", help="inject one fault into a running lab (reverted after --for, on Ctrl-C, or by --clear)",
                       description="Kinds: " + "; ".join(f"{k}: {v}" for k, v in __import__(
                           "traffic.faults", fromlist=["KINDS"]).KINDS.items()),
                       epilog="examples:\n  sudo hpnlab fail link-down s0h0 r0p0 --for 5\n"
                              "  sudo hpnlab fail hang s0r0a            (stays until: hpnlab fail --clear)\n"
                              "  sudo hpnlab fail link-flap s0h0 r0p0 --period 1 --count 5",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("kind", nargs="?")
    f.add_argument("node", nargs="?")
    f.add_argument("iface", nargs="?", help="for link faults (comma-separated for a multi-port cable)")
    f.add_argument("--for", dest="hold", type=float, help="seconds to hold it, then revert")
    f.add_argument("--period", type=float, default=1.0, help="link-flap period (s)")
    f.add_argument("--count", type=int, default=3, help="link-flap count")
    f.add_argument("--clear", action="store_true", help="revert every fault recorded for the lab")
    f.add_argument("--list", action="store_true", help="list fault kinds")
    f.add_argument("--lab", help="lab name (default: the only running lab)")
    f.set_defaults(func=wrap(fail_cmd))

    c = sub.add_parser("capture", help="write a pcap of one node interface (tcpdump inside the node)")
    c.add_argument("node")
    c.add_argument("iface")
    c.add_argument("--out", "-o", help="pcap file (default NODE-IFACE.pcap)")
    c.add_argument("--duration", type=float, help="seconds (default: until Ctrl-C or --count)")
    c.add_argument("--count", type=int, help="stop after this many packets")
    c.add_argument("--filter", help="tcpdump filter expression, e.g. 'ether proto 0x8809'")
    c.add_argument("--lab", help="lab name (default: the only running lab)")
    c.set_defaults(func=wrap(capture_cmd))

    p = sub.add_parser("probe", help="crafted packets with scapy: ECMP paths (TTL probes), ARP, LACP")
    psub = p.add_subparsers(dest="mode", required=True, metavar="MODE")
    a = psub.add_parser("paths", help="which ToR and agg each source port takes from SRC to DST")
    a.add_argument("src")
    a.add_argument("dst")
    a.add_argument("--rail", type=int, default=0)
    a.add_argument("--flows", type=int, default=16)
    a.add_argument("--sport", type=int, default=20000, help="first source port")
    a.add_argument("--json", action="store_true")
    b = psub.add_parser("arp", help="ARP request out of one host port; show who answers with which MAC")
    b.add_argument("node")
    b.add_argument("iface")
    b.add_argument("target", help="IP to ask for")
    lp = psub.add_parser("lacp", help="decode the LACPDUs heard on a node port")
    lp.add_argument("node")
    lp.add_argument("iface")
    lp.add_argument("--wait", type=float, default=3.0)
    for x in (a, b, lp):
        x.add_argument("--lab", help="lab name (default: the only running lab)")
        x.set_defaults(func=wrap(probe_cmd), command="probe")
