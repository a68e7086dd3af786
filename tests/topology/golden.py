"""Golden files: every renderer output for the specs in input/, kept in expected/<case>/ byte for byte,
so a change to any generated file (FRR config, daemons, node.json, node setup plan, .clab.yml,
topology.json, picture) shows up as a reviewable diff.

    python -m tests.topology.golden          # regenerate expected/ after an intended change

Per case: the whole .clab.yml, topology.json and fabric.svg, and for one node of each kind (the first
of every role, ToR side and plane) its frr.conf, daemons, node.json and plan.txt (sysctls, ``ip -batch``
lines, tc -batch lines and nftables ruleset the runtimes apply; hosts with both drivers).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
INPUT, EXPECTED = HERE / "input", HERE / "expected"


def cases() -> list[str]:
    return sorted(p.stem for p in INPUT.glob("*.yml"))


def plan_text(cfg: dict, nodesetup) -> str:
    drivers = ("userspace", "bond") if cfg["role"] == "host" else ("userspace",)
    out = ["# sysctls"] + [f"{k}={v}" for k, v in nodesetup.sysctls(cfg).items()]
    try:
        from hpnlab.model import capacity
        out += ["# tc -batch (link capacity)", *(capacity.tc_batch(cfg) or ["(none)"])]
    except ImportError:  # an older tree, compared file by file
        pass
    for d in drivers:
        out += [f"# ip -batch (host driver {d})", *nodesetup.ip_batch(cfg, d)]
        rules = nodesetup.nft_ruleset(cfg)  # the same for both drivers: a bond's slaves duplicate ARP too
        out += [f"# nftables (host driver {d})", rules.rstrip("\n") if rules else "(none)"]
    hold = nodesetup.ra_hold_ruleset(cfg)
    if hold:  # the namespace runtime's deploy applies it with the rest and removes it once every bgpd runs
        out += ["# nftables while the lab starts (router advertisements held)", hold.rstrip("\n")]
    return "\n".join(out) + "\n"


def representatives(topology: dict) -> list[str]:
    seen, out = set(), []
    for n in topology["nodes"]:
        key = (n["role"], n.get("side"), n.get("plane"))
        if key not in seen:
            seen.add(key)
            out.append(n["name"])
    return out


def outputs(case: str, spec_mod=None, topology_mod=None, render_mod=None, nodesetup_mod=None) -> dict[str, str]:
    """{relative path: text} of one case (modules injectable, so an older tree can be compared too)."""
    if spec_mod is None:
        from hpnlab.machine import nodesetup as nodesetup_mod
        from hpnlab.generate import render as render_mod
        from hpnlab.model import spec as spec_mod, topology as topology_mod
    sp = spec_mod.load_spec(INPUT / f"{case}.yml")
    files = render_mod.render(topology_mod.build(sp))
    topo = json.loads(files["topology.json"])
    out = {k: files[k] for k in (f"{sp.name}.clab.yml", "topology.json", "fabric.svg")}
    for node in representatives(topo):
        for f in ("frr.conf", "daemons", "node.json"):
            if f"{node}/{f}" in files:
                out[f"{node}/{f}"] = files[f"{node}/{f}"]
        out[f"{node}/plan.txt"] = plan_text(json.loads(files[f"{node}/node.json"]), nodesetup_mod)
    return out


def expected(case: str) -> dict[str, str]:
    root = EXPECTED / case
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def regenerate() -> int:
    shutil.rmtree(EXPECTED, ignore_errors=True)
    n = 0
    for case in cases():
        for rel, text in outputs(case).items():
            p = EXPECTED / case / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            n += 1
    print(f"wrote {n} golden files for {len(cases())} cases to {EXPECTED}")
    return 0


if __name__ == "__main__":
    sys.exit(regenerate())
