"""Lab subcommands: up, down, status, verify, exec, shell. Each parses, calls hpnlab.lifecycle.orchestrate, prints."""

from __future__ import annotations

import argparse
import json
import os
import sys

from hpnlab import runtime as runtimes
from hpnlab.model import addresses
from hpnlab.lifecycle import nodestate, verify
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.model.models import NodeConfig
from hpnlab.lifecycle.orchestrate import adopt, bring_up, need_root, open_lab, resolve_lab, tear_down, wait_healthy
from hpnlab.machine.progress import Progress
from hpnlab.runtime.base import Runtime, running_labs, state_dir
from hpnlab.model.spec import load_spec


def print_checks(checks: list[dict], out=sys.stdout) -> None:
    w = max([len(c["name"]) for c in checks] + [5])
    print(f"{'check':<{w}}  {'':4}  detail", file=out)
    for c in checks:
        print(f"{c['name']:<{w}}  {'ok' if c['ok'] else 'FAIL':4}  {c['detail']}", file=out)


# --- commands ------------------------------------------------------------------------------------------
def report_health(lab: str, checks: list[dict], args, extra: dict | None = None) -> None:
    """Print the checks (or JSON) and raise one line if the lab is not healthy (up and attach alike)."""
    ok = verify.complete(checks)
    if args.json:
        json.dump({"lab": lab, "ok": ok, **(extra or {}), "checks": checks}, sys.stdout, indent=1)
        print()
    else:
        print_checks(checks)
    if not ok:
        failing = next(c for c in checks if not c["ok"])
        raise RuntimeFailure(f"lab '{lab}' not healthy after {args.timeout:g} s: {failing['name']}: "
                             f"{failing['detail']}")


def up(args) -> int:
    spec = load_spec(args.spec)
    need_root("hpnlab up")
    progress = Progress(args.json)
    rt, cfgs, checks = bring_up(spec, args.runtime, args.timeout, progress, keep=args.keep)
    st = rt.state.data
    report_health(spec.name, checks, args, {"seconds": round(progress.elapsed, 2), "kernel": st.kernel,
                                            "kernel_notes": st.kernel_notes, "host_driver": st.host_driver})
    progress(f"lab '{spec.name}' is up and verified in {progress.elapsed:.1f} s "
             f"(hpnlab status / hpnlab exec NODE -- CMD / hpnlab down)")
    return 0


def doctor(args) -> int:
    """What this kernel offers a lab: every feature, and for the spec what the lab would do without it."""
    from hpnlab.machine import kernel

    spec = load_spec(args.spec)
    need_root("hpnlab doctor")  # the qdisc and nftables probes create them in a throw-away namespace
    have = kernel.probe_all()
    rows = kernel.report(have)
    from hpnlab.model import netdefaults

    found = kernel.assess(spec, have, shared=netdefaults.read_shared(), held=kernel.lab_held())
    if args.json:
        json.dump({"kernel": found.release, "features": rows, "lab": spec.name, "notes": found.details,
                   "refusal": found.refusal}, sys.stdout, indent=1)
        print()
    else:
        print(f"kernel {found.release}")
        w = max(len(r["feature"]) for r in rows)
        for r in rows:
            print(f"  {r['feature']:<{w}}  {'ok' if r['ok'] else 'MISSING':7}  {r['what']} (Linux {r['since']}+)"
                  + ("" if r["ok"] else f"\n  {'':<{w}}           without it: {r['without']}"))
        print(f"lab '{spec.name}': " + ("cannot run here: " + found.refusal if found.refusal else
                                       "runs here" + ("" if not found.notes else ", with:")))
        for n in found.details:
            print(f"  note: {n}")
    return 2 if found.refusal else 0


def down(args) -> int:
    lab = load_spec(args.spec).name if args.spec else resolve_lab(args.lab)
    need_root("hpnlab down")
    progress = Progress()
    if not tear_down(lab, progress):
        progress(f"lab '{lab}' is not running: nothing to do")
        return 0
    progress(f"lab '{lab}' removed")
    return 0


def attach(args) -> int:
    need_root("hpnlab attach")
    progress = Progress(args.json)
    rt, cfgs = adopt(args.topology, progress)
    report_health(rt.lab, wait_healthy(rt, cfgs, args.timeout, progress), args)
    progress(f"lab '{rt.lab}' attached and verified (hpnlab status / run / down --lab {rt.lab})")
    return 0


def verify_cmd(args) -> int:
    need_root("hpnlab verify")
    rt, cfgs = open_lab(resolve_lab(args.lab))
    if args.wait:  # poll until every check passes or the deadline (a lab that is still converging)
        checks = wait_healthy(rt, cfgs, args.wait, Progress(args.json))
    else:
        checks = verify.verify(rt, cfgs, stop_at_failure=False)
    ok = verify.complete(checks)
    if args.json:
        json.dump(checks, sys.stdout, indent=1)
        print()
    else:
        print_checks(checks)
    return 0 if ok else 1


def status(args) -> int:
    need_root("hpnlab status")
    lab = resolve_lab(args.lab)
    if not (state_dir(lab) / "state.json").exists():
        if args.json:
            json.dump({"lab": lab, "running": False, "running_labs": running_labs()}, sys.stdout)
            print()
            return 2
        open_lab(lab)  # one line: not running, and which labs are
    rt, cfgs = open_lab(lab)
    daemons = nodestate.daemons_alive(rt)
    containers = rt.inspect()  # the container engine's own view of the nodes, where there is one
    rows = [nodestate.node_row(rt, n, c, daemons, containers) for n, c in cfgs.items()]
    for r in rows:  # the live view's counts and events stay out of the table and the JSON
        for k in [k for k in r if k.startswith("_")]:
            del r[k]
    healthy = all(r["ok"] for r in rows)
    if args.json:
        json.dump({"lab": lab, "running": True, "runtime": rt.name, "healthy": healthy, "nodes": rows,
                   "subnets": addresses.subnets(cfgs)},
                  sys.stdout, indent=1)
        print()
        return 0 if healthy else 1
    # the measured columns (fare, late) last: a row reads the same from one status to the next up to them, so
    # docs/tutorial.md can show a host's row with its addresses
    cols = ["node", "role"] + (["container"] if containers is not None else []) + \
        ["frr", "bgp", "agent", "lacp", "host_routes", "addresses"] + \
        (["fare"] if any("fare" in r for r in rows) else []) + ["late"]
    for r in rows:
        r["role"] = r["role"] if r["ok"] else f"{r['role']} !"
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in cols}
    print(f"lab '{lab}' ({rt.name} runtime)")
    print("  ".join(f"{k:<{widths[k]}}" for k in cols))
    for r in rows:
        print("  ".join(f"{str(r.get(k, '')):<{widths[k]}}" for k in cols).rstrip())
    print("subnets (one per dual-ToR set; a host's address on a rail is in its set's subnet):")
    for s in addresses.subnets(cfgs):
        where = f"segment {s['segment']} rail {s['rail']}" if s["segment"] is not None else f"rail {s['rail']}"
        print(f"  {where}: {s['subnet']} gateway {s['gateway']} (ToRs {', '.join(s['tors']) or '-'}; "
              f"{len(s['hosts'])} host(s))")
    return 0 if healthy else 1


def watch_cmd(args) -> int:
    from hpnlab import watch

    need_root("hpnlab watch")  # the poll enters the nodes' namespaces
    lab = resolve_lab(args.lab)
    open_lab(lab)  # one line if it is not running
    watch.check_bind(args.bind, args.port)  # one line naming the flag, before anything is said or started
    if args.bind not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: the view of lab '{lab}' is open to every machine that reaches {args.bind}:{args.port} "
              f"(no password); 'ssh -L {args.port}:127.0.0.1:{args.port}' keeps it private", file=sys.stderr)
    watch.serve(lab, args.bind, args.port)
    return 0


def _open_node(args, what: str) -> tuple[Runtime, dict[str, NodeConfig]]:
    need_root(what)
    rt, cfgs = open_lab(resolve_lab(args.lab))
    if args.node not in cfgs:
        raise SpecError(f"node '{args.node}' is not in lab '{rt.lab}'; nodes: {', '.join(sorted(cfgs))}")
    return rt, cfgs


def _node_argv(args, argv: list[str]) -> list[str]:
    rt, cfgs = _open_node(args, "hpnlab exec")
    if argv and argv[0] == "vtysh":
        if cfgs[args.node].role == "host":
            raise SpecError(f"node '{args.node}' is a host: it runs no FRR")
        return rt.vtysh_argv(args.node, [], tty=sys.stdin.isatty()) + argv[1:]
    return rt.exec_argv(args.node, argv)


def exec_cmd(args) -> int:
    argv = list(args.cmd)
    while argv[:1] == ["--lab"] or (argv[:1] and argv[0].startswith("--lab=")):  # hpnlab exec NODE --lab X -- CMD
        if argv[0] == "--lab":
            if len(argv) < 2:
                raise SpecError("--lab: give the lab name, e.g. hpnlab exec s0r0a --lab hpn -- ip route")
            args.lab, argv = argv[1], argv[2:]
        else:
            args.lab, argv = argv[0].split("=", 1)[1], argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise SpecError("give a command after the node, e.g. hpnlab exec s0r0a -- vtysh -c 'show bgp summary'")
    full = _node_argv(args, argv)  # vtysh reaches the node's daemons through their sockets
    os.execvp(full[0], full)
    return 0


def shell(args) -> int:
    rt, _ = _open_node(args, "hpnlab shell")
    full = rt.shell_argv(args.node, os.environ.get("SHELL", "/bin/bash"))
    os.environ["PS1"] = f"[{args.node}] \\w# "
    print(f"shell in node {args.node} (exit to leave)", file=sys.stderr)
    os.execvp(full[0], full)
    return 0


def add_parsers(sub) -> None:
    u = sub.add_parser("up", help="bring a lab up (network namespaces by default) and verify it",
                       description="Render the spec, create the nodes and links, start FRR and the agents, "
                                   "and poll until every check passes (LACP, BGP, host routes, reachability). "
                                   "Any error or Ctrl-C rolls everything back.")
    u.add_argument("spec", nargs="?", help="lab spec YAML (default: examples/default.yml)")
    u.add_argument("--runtime", default="netns", choices=runtimes.names(),
                   help="netns (default: network namespaces, no Docker), clab (containerlab + Docker, images "
                        "from 'hpnlab images build'; HPNLAB_CLAB_TIMEOUT bounds the deploy, default 600 s) or c9s "
                        "(Kubernetes with clabernetes through kubectl; HPNLAB_K8S_NAMESPACE, HPNLAB_C9S_TIMEOUT)")
    u.add_argument("--timeout", type=float, default=90.0,
                   help="seconds the lab has to come up healthy, its deploy included (with clab and c9s: after "
                        "their deploy); past it up rolls back and exits 1, the rollback taking ~1 s more on the default "
                        "lab, ~23 s on the paper's loaded segment (docs/scale.md) (default 90)")
    u.add_argument("--keep", action="store_true", help="leave an unhealthy lab up for debugging")
    u.add_argument("--json", action="store_true", help="print the verify result as JSON")
    u.set_defaults(func=up)

    a = sub.add_parser("attach", help="take a lab 'containerlab deploy' brought up by itself into hpnlab's care",
                       description="For a lab deployed with 'containerlab deploy -t OUT/<lab>.clab.yml' (from "
                                   "'hpnlab generate'): wait until its nodes have configured themselves, record it "
                                   "so that verify, status, fail, probe, run and down work on it, and verify it.")
    a.add_argument("topology", help="the <lab>.clab.yml that containerlab deployed (its folder is hpnlab's output)")
    a.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for health (default 90)")
    a.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    a.set_defaults(func=attach)

    k = sub.add_parser("doctor", help="check what this kernel offers a lab, before bringing one up",
                       description="Probe every kernel feature a lab may use (hash-seed and hash-fields sysctls, "
                                   "the nftables netdev egress hook and ip6 family, tbf and netem qdiscs, bonding) "
                                   "and say, for the spec, whether the lab runs here, runs with a note, or is refused. The qdisc "
                                   "and nftables probes run in a throw-away network namespace. Exit 2 if the spec "
                                   "cannot run on this kernel. 'hpnlab up' makes the same check first.")
    k.add_argument("spec", nargs="?", help="lab spec YAML (default: examples/default.yml)")
    k.add_argument("--json", action="store_true", help="machine-readable output")
    k.set_defaults(func=doctor)

    d = sub.add_parser("down", help="remove a lab and everything it created (idempotent)")
    d.add_argument("spec", nargs="?", help="spec of the lab to remove (or use --lab)")
    d.add_argument("--lab", help="lab name (default: the only running lab)")
    d.set_defaults(func=down)

    for name, fn, hlp in (("status", status, "per-node health table (FRR, BGP, agents, LACP, and how late each agent's "
                                              "timers fired over the last minute)"),
                          ("verify", verify_cmd, "run every health check once; exit 1 if any fails")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("--lab", help="lab name (default: the only running lab)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "verify":
            p.add_argument("--wait", type=float, metavar="S", help="poll until every check passes, at most S "
                                                                   "seconds (a lab still converging), then report")
        p.set_defaults(func=fn)

    w = sub.add_parser("watch", help="a live web page of the lab: links, sessions, LACP, host routes, events",
                       description="Serve a page that shows the lab's fabric with every link and node coloured by "
                                   "its state (carrier, faults, impairments; FRR daemons, BGP and BFD sessions, LACP "
                                   "members, host /32s), a list of what changed and when, and, while an experiment "
                                   "runs on the lab, each probe stream's delivery and the workload's iterations with "
                                   "the fault windows. Updated every second; Ctrl-C stops it.")
    w.add_argument("--lab", help="lab name (default: the only running lab)")
    w.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0: any free port)")
    w.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; from another machine use "
                        "ssh -L 8765:127.0.0.1:8765)")
    w.set_defaults(func=watch_cmd)

    e = sub.add_parser("exec", help="run a command inside a node (vtysh reaches that node's FRR)",
                       description="Example: hpnlab exec s0r0a -- vtysh -c 'show bgp summary'")
    e.add_argument("node", help="the node to run it in (hpnlab status lists them), e.g. s0r0a")
    e.add_argument("cmd", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    e.add_argument("--lab", help="lab name (default: the only running lab)")
    e.set_defaults(func=exec_cmd)

    s = sub.add_parser("shell", help="interactive shell inside a node's namespace")
    s.add_argument("node", help="the node to open a shell in, e.g. agg0-0")
    s.add_argument("--lab", help="lab name (default: the only running lab)")
    s.set_defaults(func=shell)
