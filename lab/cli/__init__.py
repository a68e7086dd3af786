"""hpnlab command line: parses arguments, calls the library, prints. Every user-facing error is one line on stderr with exit code 2 (bad input) or 1."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time

from hpnlab import __version__
from hpnlab.machine import signals
from hpnlab.cli import images, labcmds, trafficcmds
from hpnlab.errors import HpnlabError, SpecError

EPILOG = """\
pipeline: spec (YAML) -> topology -> configs (Jinja2) -> runtime (netns | clab) -> agents -> verify

examples:
  hpnlab generate --out out/hpn            render the default lab's files (no root needed)
  hpnlab generate examples/hpn-pod-15k.yml --out out/pod --summary
  hpnlab calc                              the paper's Table 1 and Table 2 from switch parameters
  sudo hpnlab up                           bring the default lab up on network namespaces, verify it
  sudo hpnlab images build && sudo hpnlab up --runtime clab   the lab on containerlab + Docker
  sudo hpnlab status --json                per-node health for scripts
  sudo hpnlab exec s0r0a -- vtysh -c 'show bgp summary'
  sudo hpnlab probe paths s0h0 s1h0        which ToR/agg each source port takes (scapy TTL probes)
  sudo hpnlab fail link-down s0h0 r0p0 --for 5
  sudo hpnlab capture s0r0a h0p0 --duration 5
  sudo hpnlab run experiments/link-failure.yml --out results/link-failure
  sudo hpnlab down                         remove everything the lab created
"""


class Formatter(argparse.HelpFormatter):
    """Every parser's help: each description and epilog line wrapped on its own (an indented line, an
    example, kept as it is), and an option's default shown where it has one worth showing."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            if not line.strip() or line.startswith(" "):
                out.append(indent + line)
            else:
                out.append(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent + "  "))
        return "\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if "%(default)" in text or "default" in text.lower() or d in (None, False, argparse.SUPPRESS) \
                or (not action.option_strings and action.nargs not in ("?", "*")):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """A usage mistake is one line, like every other user error: what is wrong, and where help is."""

    def error(self, message: str):
        self.exit(2, f"hpnlab: error: {message} (see '{self.prog} --help')\n")


def walk_parsers(parser: argparse.ArgumentParser, path: list[str]):
    """(command words, parser) of a parser and every subcommand under it."""
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from walk_parsers(sp, path + [name])


def _print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=1)
    sys.stdout.write("\n")


def cmd_generate(args: argparse.Namespace) -> int:
    from hpnlab.generate import render
    from hpnlab.model import spec, topology

    t0 = time.monotonic()
    sp = spec.load_spec(args.spec)
    topo = topology.build(sp)
    files = render.render(topo)
    if args.target == "c9s":
        from hpnlab.generate import c9s

        files.update(c9s.export(files, topo, args.c9s_api, args.namespace, force_nodes=args.c9s_nodes,
                                registry=args.registry))
    elif args.c9s_api != "c9s.run" or args.namespace or args.c9s_nodes or args.registry:
        raise SpecError("--c9s-api, --namespace, --c9s-nodes and --registry go with --target c9s")
    if args.hosts is not None or args.host_addrs:
        from hpnlab.generate import multihost

        addrs = [a for a in (args.host_addrs or "").split(",") if a] or None
        files.update(multihost.split(files, topo, args.hosts or len(addrs or []), addrs))
    out = render.write(files, args.out)
    summ = topology.summary(topo)
    summ.update({"out": str(out), "files": len(files), "seconds": round(time.monotonic() - t0, 3)})
    if args.json:
        _print_json(summ)
        return 0
    print(f"hpnlab: wrote {len(files)} files for lab '{topo.name}' to {out} in {summ['seconds']} s")
    if args.summary:
        from hpnlab.model.calc import path_search

        ps = path_search(sp)
        print(f"  {summ['hosts']} hosts ({summ['gpus']} GPUs at {sp.rails} rails), {summ['tors']} ToRs in "
              f"{summ['dual_tor_sets']} sets, {summ['aggs']} aggs, {summ['cores']} cores")
        print(f"  {summ['links']} links {summ['links_by_kind']}, {summ['bgp_sessions']} BGP sessions")
        print(f"  path search per host: O({'x'.join(map(str, ps['factors']))}) = {ps['complexity']}")
    print(f"  topology: {out / 'topology.json'}   containerlab: {out / (topo.name + '.clab.yml')}   "
          f"picture: {out / 'fabric.svg'}")
    if args.hosts or args.host_addrs:
        n = args.hosts or len(args.host_addrs.split(","))
        print(f"  {n} machines: {out / 'hosts'}/h1 .. h{n} (each with its RUN.md)")
    if args.target == "c9s":
        kinds = sorted(f for f in files if f.startswith("c9s/"))
        print(f"  clabernetes: {', '.join(str(out / f) for f in kinds)}  (kubectl apply -f {out / 'c9s'})")
    elif not (args.hosts or args.host_addrs):
        clab = out / f"{topo.name}.clab.yml"
        print(f"next: sudo containerlab deploy -t {clab} && sudo hpnlab attach {clab}   "
              f"(or, without containerlab: sudo hpnlab up {args.spec or 'default'})")
    return 0


def cmd_calc(args: argparse.Namespace) -> int:
    from hpnlab.model import calc

    rep = calc.report()
    if args.json:
        _print_json(rep)
        return 0
    print("Table 2: key mechanisms affecting maximal scale (51.2 Tbps chip, 128x200G down + 60x400G up)")
    print(f"  {'mechanism':<28}{'tier1 GPUs':>12}{'':>7}{'tier2 GPUs':>12}")
    for r in rep["table2"]:
        f1 = f"(x{r['tier1_factor']:g})" if r["tier1_factor"] and r["tier1_factor"] != 1 else ""
        f2 = f"(x{r['tier2_factor']:g})" if r["tier2_factor"] and r["tier2_factor"] != 1 else ""
        print(f"  {r['mechanism']:<28}{r['tier1_gpus']:>12}{f1:>7}{r['tier2_gpus']:>12} {f2}")
    p = rep["hpn_pod"]
    print(f"HPN Pod: {p['gpus_per_segment']} GPUs/segment x {p['segments']} segments = {p['gpus_per_pod']} GPUs; "
          f"{p['tors']} ToRs, {p['aggs']} aggs ({p['aggs_per_plane']} per plane), "
          f"{p['access_links'] + p['tor_agg_links']} links; ToR oversubscription {p['tor_oversubscription']}:1")
    print("Table 1: complexity of path selection")
    for r in rep["table1"]:
        print(f"  {r['architecture']:<18}{r['gpus']:>7} GPUs  {r['tiers']} tiers  {r['switches']:<22}{r['notation']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="hpnlab",
        description="Packet-level testbed for Alibaba HPN's non-stacked dual-ToR, dual-plane AI training fabric.",
        epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"hpnlab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    g = sub.add_parser("generate", help="render topology, FRR/agent/containerlab configs and a picture from a spec",
                       description="Render a lab: topology.json, <name>.clab.yml, <node>/frr.conf, daemons, "
                                   "node.json (agent/host plan) and fabric.svg. Needs no root and no runtime.")
    g.add_argument("spec", nargs="?", help="lab spec YAML (default: examples/default.yml)")
    g.add_argument("--out", "-o", required=True, help="output directory (replaced atomically if it holds an "
                                                      "earlier hpnlab output)")
    g.add_argument("--summary", action="store_true", help="print sizes, BGP sessions and path-search size")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    g.add_argument("--target", choices=("clab", "c9s"), default="clab",
                   help="c9s: also write clabernetes objects to OUT/c9s/ (a Topology, or Node + Link objects "
                        "when one Topology would pass Kubernetes' ~1.5 MB object limit; ConfigMaps either way)")
    g.add_argument("--c9s-api", default="c9s.run", choices=("c9s.run", "clabernetes.containerlab.dev"),
                   help="API group: c9s.run (clabernetes 0.7+) or clabernetes.containerlab.dev (before 0.7)")
    g.add_argument("--c9s-nodes", action="store_true", help="write Node + Link objects even for a small lab")
    g.add_argument("--namespace", help="Kubernetes namespace for the clabernetes objects (default: kubectl's)")
    g.add_argument("--registry", help="with --target c9s: the registry the cluster pulls the node images from, "
                                      "e.g. registry.example:5000/labs (push hpnlab/router and hpnlab/host there "
                                      "first); default: the bare image names")
    g.add_argument("--hosts", type=int, help="also split the lab over N machines with plain containerlab: "
                                             "OUT/hosts/h1..hN, cross-machine links as VXLAN (see RUN.md there)")
    g.add_argument("--host-addrs", help="the machines' addresses, comma-separated (default: 192.0.2.x "
                                        "placeholders to replace)")
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("calc", help="reproduce the paper's Table 2 (scale) and Table 1 (path search)")
    c.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    c.set_defaults(func=cmd_calc)

    labcmds.add_parsers(sub)
    trafficcmds.add_parsers(sub)
    images.add_parsers(sub)
    for _path, parser in walk_parsers(p, ["hpnlab"]):  # one help style everywhere (Formatter)
        parser.formatter_class = Formatter
    return p


def main(argv: list[str] | None = None) -> int:
    signals.handle_termination()  # SIGTERM/SIGHUP roll back like Ctrl-C
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except HpnlabError as e:
        print(f"hpnlab: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        signals.ignore_all()  # everything is rolled back: a late signal must not kill us before we exit
        print(f"hpnlab: interrupted ({str(e) or 'SIGINT'})", file=sys.stderr)
        return signals.exit_code(e)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
