"""Runtime subcommands: up, down, status, verify, exec, shell."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from lab.errors import RuntimeFailure, SpecError
from lab.runtime.base import Runtime, State, running_labs, state_dir

RUNTIMES = {"netns": "lab.runtime.netns:NetnsRuntime", "clab": "lab.runtime.clab:ClabRuntime"}


def runtime_class(name: str):
    if name not in RUNTIMES:
        raise SpecError(f"--runtime '{name}': choose one of {', '.join(RUNTIMES)}")
    mod, cls = RUNTIMES[name].split(":")
    import importlib

    return getattr(importlib.import_module(mod), cls)


def open_runtime(lab: str) -> Runtime:
    st = State(lab)
    return runtime_class(st.data.get("runtime", "netns"))(lab)


class Progress:
    """Progress lines on stderr with elapsed time, so stdout stays clean for --json."""

    def __init__(self, quiet: bool = False):
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise RuntimeFailure(f"'{what}' needs root (network namespaces, FRR): run it with sudo")


def preflight(spec) -> None:
    from lab.runtime.netns import FRR_BIN

    for tool, pkg in (("ip", "iproute2"), ("nft", "nftables"), ("sysctl", "procps"), ("ping", "iputils-ping")):
        if not shutil.which(tool):
            raise RuntimeFailure(f"'{tool}' not found: install Debian's {pkg} (sudo ./bootstrap install)")
    for d in ("zebra", "bgpd", "staticd", "bfdd"):
        if not (FRR_BIN / d).exists():
            raise RuntimeFailure(f"FRR not found ({FRR_BIN / d}): install Debian's frr (sudo ./bootstrap install)")
    if not shutil.which("vtysh"):
        raise RuntimeFailure("vtysh not found: install Debian's frr (sudo ./bootstrap install)")
    from lab.nodesetup import bonding_available

    if spec.host_driver == "bond" and not bonding_available():
        raise RuntimeFailure("spec field 'host_driver': 'bond' needs kernel bonding, which this kernel lacks; "
                             "use 'auto' or 'userspace' (the userspace LACP host agent)")


def resolve_lab(args) -> str:
    if getattr(args, "lab", None):
        return args.lab
    labs = running_labs()
    if len(labs) == 1:
        return labs[0]
    if len(labs) > 1:
        raise SpecError(f"several labs are running ({', '.join(labs)}): choose one with --lab NAME")
    from lab.spec import load_spec

    return load_spec().name


def load_cfgs(rt: Runtime) -> dict[str, dict]:
    from lab.runtime.base import load_nodes

    if not (rt.config_dir / "topology.json").exists():
        raise RuntimeFailure(f"lab '{rt.lab}' is not running (no {rt.config_dir / 'topology.json'})")
    return load_nodes(rt.config_dir)[1]


def print_checks(checks: list[dict], out=sys.stdout) -> None:
    w = max([len(c["name"]) for c in checks] + [5])
    print(f"{'check':<{w}}  {'':4}  detail", file=out)
    for c in checks:
        print(f"{c['name']:<{w}}  {'ok' if c['ok'] else 'FAIL':4}  {c['detail']}", file=out)


def wait_healthy(rt: Runtime, cfgs: dict[str, dict], timeout: float, progress: Progress) -> list[dict]:
    """Poll verify until every check passes or the deadline; report progress when it changes."""
    from lab import verify

    deadline = time.monotonic() + timeout
    last = None
    while True:
        checks = verify.verify(rt, cfgs)
        if verify.complete(checks):
            return checks
        failing = next(c for c in checks if not c["ok"])
        line = f"waiting: {sum(c['ok'] for c in checks)} checks ok; {failing['name']}: {failing['detail']}"
        if line != last:
            progress(line)
            last = line
        if time.monotonic() > deadline:
            return verify.verify(rt, cfgs, stop_at_failure=False)
        time.sleep(0.5)


# --- commands ------------------------------------------------------------------------------------------
def bring_up(spec, runtime: str, timeout: float, progress: Progress, keep: bool = False) -> tuple[Runtime, dict, list]:
    """Render, deploy and wait until healthy; roll everything back on error, Ctrl-C or (unless keep)
    an unhealthy lab. Shared by ``up`` and ``run``."""
    from lab import render, topology
    from lab.verify import complete

    if runtime == "netns":
        preflight(spec)
    elif runtime == "clab":
        from lab.runtime import clab

        clab.preflight()
    lab = spec.name
    if (state_dir(lab) / "state.json").exists():
        raise RuntimeFailure(f"lab '{lab}' is already running (or left over): 'hpnlab down --lab {lab}' first, "
                             f"or give the new lab another name")
    topo = topology.build(spec)
    rt = runtime_class(runtime)(lab)
    try:
        rt.state.save()
        render.write(render.render(topo), rt.config_dir)
        progress(f"lab '{lab}': {topology.summary(topo)['links']} links, rendered to {rt.config_dir}")
        rt.deploy(rt.config_dir, progress)
        cfgs = load_cfgs(rt)
        progress("waiting for LACP, BGP, host routes and reachability")
        checks = wait_healthy(rt, cfgs, timeout, progress)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            progress("interrupted: rolling back")
        else:
            progress(f"failed: rolling back ({e})")
        try:
            rt.destroy(progress)
        except RuntimeFailure as undo:  # report both; the first error is what the user must fix
            progress(f"rollback incomplete: {undo}")
        raise
    if not complete(checks) and not keep:
        progress("not healthy by the deadline: rolling back (use --keep to leave it up for debugging)")
        rt.destroy(progress)
    return rt, cfgs, checks


def up(args) -> int:
    from lab.spec import load_spec
    from lab.verify import complete

    spec = load_spec(args.spec)
    need_root("hpnlab up")
    progress = Progress(args.json)
    rt, cfgs, checks = bring_up(spec, args.runtime, args.timeout, progress, keep=args.keep)
    lab = spec.name
    ok = complete(checks)
    if args.json:
        json.dump({"lab": lab, "ok": ok, "seconds": round(progress.elapsed, 2), "checks": checks}, sys.stdout,
                  indent=1)
        print()
    else:
        print_checks(checks)
    if not ok:
        failing = next(c for c in checks if not c["ok"])
        raise RuntimeFailure(f"lab '{lab}' not healthy after {args.timeout:g} s: {failing['name']}: "
                             f"{failing['detail']}")
    progress(f"lab '{lab}' is up and verified in {progress.elapsed:.1f} s "
             f"(hpnlab status / hpnlab exec NODE -- CMD / hpnlab down)")
    return 0


def down(args) -> int:
    need_root("hpnlab down")
    if args.spec:
        from lab.spec import load_spec

        lab = load_spec(args.spec).name
    else:
        lab = resolve_lab(args)
    progress = Progress()
    if not state_dir(lab).exists():
        progress(f"lab '{lab}' is not running: nothing to do")
        return 0
    rt = open_runtime(lab)
    rt.destroy(progress)
    progress(f"lab '{lab}' removed")
    return 0


def verify_cmd(args) -> int:
    from lab import verify

    need_root("hpnlab verify")
    rt = open_runtime(resolve_lab(args))
    cfgs = load_cfgs(rt)
    checks = verify.verify(rt, cfgs, stop_at_failure=False)
    ok = verify.complete(checks)
    if args.json:
        json.dump(checks, sys.stdout, indent=1)
        print()
    else:
        print_checks(checks)
    return 0 if ok else 1


def status(args) -> int:
    from lab import verify
    from lab.runtime.base import pid_alive
    from lab.runtime.base import FRR_DAEMONS

    need_root("hpnlab status")
    lab = resolve_lab(args)
    if not (state_dir(lab) / "state.json").exists():
        if args.json:
            json.dump({"lab": lab, "running": False}, sys.stdout)
            print()
        else:
            print(f"lab '{lab}' is not running")
        return 1
    rt = open_runtime(lab)
    cfgs = load_cfgs(rt)
    frr: dict[str, list[bool]] = {}
    for pid, ns in rt.frr_pids().items():
        frr.setdefault(ns, []).append(pid_alive(pid))
    containers = rt.inspect()  # the container engine's own view of the nodes, where there is one
    rows = []
    for n, c in cfgs.items():
        row: dict = {"node": n, "role": c["role"], "netns": rt.netns(n)}
        oks = []
        if containers is not None:
            row["container"] = containers.get(n, {}).get("state", "missing")
            oks.append(row["container"] == "running")
        if c["role"] != "host":
            alive, want = frr.get(rt.netns(n), []), len(FRR_DAEMONS) - (0 if c["bfd"] else 1)
            row["frr"] = f"{sum(alive)}/{want} daemons"
            bgp = verify.check_bgp(rt, {n: c})[0]
            row["bgp"] = bgp["detail"]
            oks += [sum(alive) == want, bgp["ok"]]
        for ag in verify.check_agents(rt, {n: c}):  # none for routers and kernel-bonded hosts
            row["agent"] = "ok" if ag["ok"] else ag["detail"]
            oks.append(ag["ok"])
        st = verify.read_status(rt, n) or {}
        ports = st.get("ports", []) if c["role"] == "tor" else [p for nic in st.get("nics", []) for p in nic["ports"]]
        if "agent" in row and c["mechanisms"]["lacp"]:
            cd = sum(p["mux"] == "collecting_distributing" for p in ports)
            row["lacp"] = f"{cd}/{len(ports)} ports C/D"
            oks.append(bool(ports) and cd == len(ports))
        if c["role"] == "tor":
            row["host_routes"] = len(st.get("host_routes", {}))
        row["ok"] = all(oks)
        rows.append(row)
    healthy = all(r["ok"] for r in rows)
    if args.json:
        json.dump({"lab": lab, "running": True, "runtime": rt.name, "healthy": healthy, "nodes": rows},
                  sys.stdout, indent=1)
        print()
        return 0 if healthy else 1
    cols = ["node", "role"] + (["container"] if containers is not None else []) + \
        ["frr", "bgp", "agent", "lacp", "host_routes"]
    for r in rows:
        r["role"] = r["role"] if r["ok"] else f"{r['role']} !"
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in cols}
    print(f"lab '{lab}' ({rt.name} runtime)")
    print("  ".join(f"{k:<{widths[k]}}" for k in cols))
    for r in rows:
        print("  ".join(f"{str(r.get(k, '')):<{widths[k]}}" for k in cols))
    return 0 if healthy else 1


def _open_node(args, what: str) -> tuple[Runtime, dict[str, dict]]:
    need_root(what)
    rt = open_runtime(resolve_lab(args))
    cfgs = load_cfgs(rt)
    if args.node not in cfgs:
        raise SpecError(f"node '{args.node}' is not in lab '{rt.lab}'; nodes: {', '.join(sorted(cfgs))}")
    return rt, cfgs


def _node_argv(args, argv: list[str]) -> list[str]:
    rt, cfgs = _open_node(args, "hpnlab exec")
    if argv and argv[0] == "vtysh":
        if cfgs[args.node]["role"] == "host":
            raise SpecError(f"node '{args.node}' is a host: it runs no FRR")
        return rt.vtysh_argv(args.node, [], tty=sys.stdin.isatty()) + argv[1:]
    return rt.exec_argv(args.node, argv)


def exec_cmd(args) -> int:
    argv = [a for a in args.cmd if a != "--"] if args.cmd[:1] == ["--"] else args.cmd
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


def add_parsers(sub, wrap) -> None:
    u = sub.add_parser("up", help="bring a lab up (network namespaces by default) and verify it",
                       description="Render the spec, create the nodes and links, start FRR and the agents, "
                                   "and poll until every check passes (LACP, BGP, host routes, reachability). "
                                   "Any error or Ctrl-C rolls everything back.")
    u.add_argument("spec", nargs="?", help="lab spec YAML (default: examples/default.yml)")
    u.add_argument("--runtime", default="netns", choices=sorted(RUNTIMES),
                   help="netns (default: network namespaces, no Docker) or clab (containerlab + Docker, images "
                        "from 'hpnlab images build'; HPNLAB_CLAB_TIMEOUT bounds the deploy, default 600 s)")
    u.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for health (default 90)")
    u.add_argument("--keep", action="store_true", help="leave an unhealthy lab up for debugging")
    u.add_argument("--json", action="store_true", help="print the verify result as JSON")
    u.set_defaults(func=wrap("up"))

    d = sub.add_parser("down", help="remove a lab and everything it created (idempotent)")
    d.add_argument("spec", nargs="?", help="spec of the lab to remove (or use --lab)")
    d.add_argument("--lab", help="lab name (default: the only running lab)")
    d.set_defaults(func=wrap("down"))

    for name, fn, hlp in (("status", "status", "per-node health table (FRR, BGP, agents, LACP)"),
                          ("verify", "verify_cmd", "run every health check once; exit 1 if any fails")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("--lab", help="lab name (default: the only running lab)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=wrap(fn))

    e = sub.add_parser("exec", help="run a command inside a node (vtysh reaches that node's FRR)",
                       description="Example: hpnlab exec s0r0a -- vtysh -c 'show bgp summary'")
    e.add_argument("node")
    e.add_argument("cmd", nargs=argparse.REMAINDER)
    e.add_argument("--lab", help="lab name (default: the only running lab)")
    e.set_defaults(func=wrap("exec_cmd"))

    s = sub.add_parser("shell", help="interactive shell inside a node's namespace")
    s.add_argument("node")
    s.add_argument("--lab", help="lab name (default: the only running lab)")
    s.set_defaults(func=wrap("shell"))
