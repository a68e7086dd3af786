"""One lab on several machines with plain containerlab (its own multi-host recipe): the lab is split into
one self-contained folder per machine, links that cross machines become containerlab ``vxlan`` links,
and each node still configures itself from its node.json (hpnlab.node.agents.boot). Pure: files in, files out.

Placement: a segment (its hosts and all its ToRs, so every dual-ToR set with the hosts under it) is
never split: a host's NICs reach every rail's set of its segment, and the access links carry LACP,
ARP and the micro-BFD that must not cross a tunnel. Segments go to the machine with the least load
so far (largest first), then aggs and cores one by one; load is counted in processes (a router runs
four FRR daemons, a ToR also its agent, a host its agent).
"""

from __future__ import annotations

import ipaddress
import zlib

import yaml

from hpnlab.errors import SpecError
from hpnlab.node.plan import MTU
from hpnlab.model.topology import Topology

VNI_SLOT = 1 << 16  # VNIs are 24 bits: 255 lab slots of 65,536 links each
VXLAN_PORT = 4789
WEIGHT = {"host": 1, "tor": 5, "agg": 4, "core": 4}
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def vni_base(lab: str) -> int:
    """The first VNI of a lab's tunnels, derived from its name: two split labs sharing machines (and so
    UDP 4789) get different VNIs, unless their names fall into the same of 255 slots (check RUN.md's)."""
    return ((zlib.crc32(lab.encode()) % 255) + 1) * VNI_SLOT


def placement(topo: Topology, machines: int) -> dict[str, int]:
    """node -> machine index (0-based)."""
    if machines < 1:
        raise SpecError("--hosts: give 1 or more machines")
    segments = len({n.segment for n in topo.nodes if n.role in ("host", "tor")})
    most = segments + sum(1 for n in topo.nodes if n.role in ("agg", "core"))
    if machines > most:  # a segment is never split: more machines would stay empty
        raise SpecError(f"--hosts {machines}: lab '{topo.name}' can fill at most {most} machines ({segments} "
                        f"segments, each kept whole, and {most - segments} aggs/cores); give at most {most}")
    load = [0] * machines
    out: dict[str, int] = {}
    units: dict[int, list] = {}
    for n in topo.nodes:
        if n.role in ("host", "tor"):
            units.setdefault(n.segment, []).append(n)
    for _seg, members in sorted(units.items(), key=lambda kv: -sum(WEIGHT[m.role] for m in kv[1])):
        m = min(range(machines), key=lambda i: (load[i], i))
        for n in members:
            out[n.name] = m
        load[m] += sum(WEIGHT[n.role] for n in members)
    for n in topo.nodes:
        if n.name not in out:
            m = min(range(machines), key=lambda i: (load[i], i))
            out[n.name] = m
            load[m] += WEIGHT[n.role]
    return out


def split(files: dict[str, str], topo: Topology, machines: int, addrs: list[str] | None = None) -> dict[str, str]:
    """{relative path: text}: hosts/h<i>/<lab>.clab.yml, the bound files of h<i>'s nodes, and RUN.md."""
    if machines < 2:
        raise SpecError("--hosts: give 2 or more machines to split a lab (1 is 'hpnlab generate' as usual)")
    addrs = addrs or [str(ipaddress.IPv4Address("192.0.2.1") + i) for i in range(machines)]  # TEST-NET-1
    if len(addrs) != machines:
        raise SpecError(f"--host-addrs: give {machines} addresses, one per machine (got {len(addrs)})")
    for a in addrs:
        try:
            ipaddress.ip_address(a)
        except ValueError:
            raise SpecError(f"--host-addrs: '{a[:40]}' is not an IP address") from None
    if len(set(addrs)) != machines:
        raise SpecError("--host-addrs: the machines' addresses must differ")
    if len(topo.links) >= VNI_SLOT:
        raise SpecError(f"--hosts: {len(topo.links)} links need more VNIs than a lab's slot holds ({VNI_SLOT - 1}); "
                        f"use the c9s target for a lab this large")
    where = placement(topo, machines)
    full = yaml.load(files[f"{topo.name}.clab.yml"], Loader=_Loader)
    out: dict[str, str] = {}
    for m in range(machines):
        nodes = {n: d for n, d in full["topology"]["nodes"].items() if where[n] == m}
        links, crossing = [], 0
        for i, lk in enumerate(full["topology"]["links"]):
            a, b = lk["endpoints"]
            ma, mb = where[a["node"]], where[b["node"]]
            if ma == mb == m:
                links.append(lk)
            elif m in (ma, mb):
                mine, other = (a, mb) if ma == m else (b, ma)
                # the lab's MTU on the tunnel too (containerlab's default is the parent's MTU - 50)
                links.append({"type": "vxlan", "endpoint": mine, "remote": addrs[other], "vni": vni_base(topo.name) + i,
                              "dst-port": VXLAN_PORT, "mtu": MTU})
                crossing += 1
        doc = {"name": full["name"], "topology": {"groups": full["topology"]["groups"], "nodes": nodes,
                                                   "links": links}}
        folder = f"hosts/h{m + 1}"
        head = (f"# lab '{topo.name}', machine {m + 1} of {machines} ({addrs[m]}): {len(nodes)} nodes, "
                f"{len(links) - crossing} local links, {crossing} VXLAN links to the other machines.\n"
                f"# Generated by hpnlab; see RUN.md beside this file.\n")
        out[f"{folder}/{topo.name}.clab.yml"] = head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)
        for path, text in files.items():
            node = path.split("/", 1)[0]
            if "/" in path and node in nodes:
                out[f"{folder}/{path}"] = text
        out[f"{folder}/RUN.md"] = run_md(topo.name, m, machines, addrs, len(nodes), crossing)
    return out


def run_md(lab: str, m: int, machines: int, addrs: list[str], nodes: int, crossing: int) -> str:
    return f"""# Lab '{lab}', machine {m + 1} of {machines} ({addrs[m]})

This folder is all this machine needs: its {nodes} nodes, their bound files, and a containerlab topology
whose {crossing} links to nodes on other machines are VXLAN tunnels (UDP {VXLAN_PORT}, one VNI per link from
{vni_base(lab)}, derived from the lab's name; the other ends are in the folders of the other machines). Every
lab link, tunnels included, has MTU {MTU}. A tunnel carries no carrier: when a link between two machines
fails, its ends learn it from LACP, BFD or BGP timers, not at once as on a local veth.

1. Images (once per machine), from the hpnlab checkout: `sudo ./bootstrap install && sudo .venv/bin/hpnlab images build`
   (or `docker load -i` images saved elsewhere with `docker save hpnlab/router:... hpnlab/host:...`).
2. The machines must reach each other at {', '.join(addrs)} over UDP {VXLAN_PORT}, with an MTU of at least
   {MTU + 50} on that path (VXLAN adds 50 bytes to the lab's {MTU}).
3. On this machine, in this folder:

       sudo containerlab deploy -t {lab}.clab.yml

   Each node configures itself once its links exist (tunnels included): `cat <node>/run/boot.json`
   shows each node's steps, `<node>/run/status.json` its agent's heartbeat.
4. Deploy every machine's folder; the order does not matter (a node waits for its interfaces).
5. Checks from this machine: `sudo containerlab exec -t {lab}.clab.yml --label clab-node-name=<node> --cmd "vtysh -c 'show bgp summary'"`
   for a router, `... --cmd "ping -c1 <host address>"` between hosts on different machines.
   (`hpnlab attach` verifies a lab that runs on one machine.)
6. Remove: `sudo containerlab destroy -t {lab}.clab.yml --cleanup` on every machine.
"""
