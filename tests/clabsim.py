#!/usr/bin/env python3
"""A stand-in for the ``containerlab`` CLI, for tests on machines with a Docker engine but no containerlab.

It implements only what hpnlab calls (deploy / destroy --cleanup / inspect --format json, each with -t)
and only for the linux-kind topologies hpnlab generates, the way containerlab does it: one container
per node named clab-<lab>-<node>, its network namespace linked as /run/netns/clab-<lab>-<node>, and a
veth pair per link with the topology's names and MACs. Two differences, both because of this machine:
containers get NET_ADMIN/NET_RAW/SYS_ADMIN instead of --privileged (privileged containers fail here),
and no management network (hpnlab never uses it). It is never installed for users; tests put it on PATH
as ``containerlab`` so the real ``hpnlab up --runtime clab`` code runs end to end on real containers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

NETNS = Path("/run/netns")
CAPS = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN")


def sh(*argv: str, input: str | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, input=input)
    if r.returncode != 0:
        sys.stderr.write(f"Error: {' '.join(argv[:3])}: {r.stderr.strip()}\n")
        sys.exit(1)
    return r.stdout


def load(topo: Path) -> dict:
    return yaml.safe_load(topo.read_text())


def node_settings(t: dict, name: str) -> dict:
    n = t["topology"]["nodes"][name] or {}
    g = t["topology"].get("groups", {}).get(n.get("group"), {})
    merged = {**g, **n}
    merged["sysctls"] = {**g.get("sysctls", {}), **n.get("sysctls", {})}
    merged["labels"] = {**g.get("labels", {}), **n.get("labels", {})}
    merged["binds"] = n.get("binds", g.get("binds", []))
    return merged


def deploy(topo: Path) -> None:
    t = load(topo)
    lab = t["name"]
    NETNS.mkdir(parents=True, exist_ok=True)
    for name in t["topology"]["nodes"]:
        s = node_settings(t, name)
        cname = f"clab-{lab}-{name}"
        argv = ["docker", "run", "-d", "--name", cname, "--hostname", name, "--network", "none",
                "--restart", s.get("restart-policy", "no"), "--label", f"containerlab={lab}",
                "--label", f"clab-node-name={name}", "--label", f"clab-topo-file={topo}"]
        argv += [x for c in CAPS for x in ("--cap-add", c)]
        for k, v in s["labels"].items():
            argv += ["--label", f"{k}={v}"]
        for k, v in s["sysctls"].items():
            argv += ["--sysctl", f"{k}={v}"]
        for b in s["binds"]:
            src, rest = b.split(":", 1)
            argv += ["-v", f"{(topo.parent / src).resolve()}:{rest}"]
        sh(*argv, s["image"])
        pid = sh("docker", "inspect", "-f", "{{.State.Pid}}", cname).strip()
        link = NETNS / cname
        link.unlink(missing_ok=True)
        link.symlink_to(f"/proc/{pid}/ns/net")
    # containerlab makes each pair in the root namespace and moves the ends, so they keep distinct
    # ifindexes; created straight in the namespaces, give them distinct ones (equal ones make the kernel
    # delay carrier-down events up to 1 s, see lab/runtime/netns.py).
    batch = []
    for i, lk in enumerate(t["topology"]["links"]):
        a, b = lk["endpoints"]
        na, nb = f"clab-{lab}-{a['node']}", f"clab-{lab}-{b['node']}"
        batch.append(f"link add {a['interface']} netns {na} index {1000 + 2 * i} address {a['mac']} type veth "
                     f"peer name {b['interface']} netns {nb} index {1001 + 2 * i} address {b['mac']}")
    sh("ip", "-batch", "-", input="\n".join(batch) + "\n")
    for lk in t["topology"]["links"]:
        for e in lk["endpoints"]:
            sh("ip", "-n", f"clab-{lab}-{e['node']}", "link", "set", e["interface"], "up")


def containers(lab: str) -> list[dict]:
    out = sh("docker", "ps", "-a", "--filter", f"label=containerlab={lab}", "--format", "{{json .}}")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def destroy(topo: Path) -> None:
    lab = load(topo)["name"]
    ids = [c["ID"] for c in containers(lab)]
    if ids:
        sh("docker", "rm", "-f", *ids)
    for link in NETNS.glob(f"clab-{lab}-*"):
        link.unlink(missing_ok=True)


def inspect(topo: Path) -> None:
    lab = load(topo)["name"]
    rows = [{"lab_name": lab, "name": c["Names"], "container_id": c["ID"], "image": c["Image"], "kind": "linux",
             "state": c["State"], "status": c["Status"]} for c in containers(lab)]
    print(json.dumps({lab: rows}, indent=2))


def main(argv: list[str]) -> int:
    if not argv or "-t" not in argv:
        sys.stderr.write("clabsim: usage: containerlab deploy|destroy|inspect -t TOPO\n")
        return 2
    topo = Path(argv[argv.index("-t") + 1]).resolve()
    {"deploy": deploy, "destroy": destroy, "inspect": inspect}[argv[0]](topo)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
