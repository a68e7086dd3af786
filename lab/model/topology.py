"""Spec -> topology: pure and deterministic, so the same spec always yields byte-identical files.

Naming keeps every Linux interface name short (they only need be unique inside one node):
hosts ``s<seg>h<i>`` with ports ``r<rail>p<port>``; ToRs ``s<seg>r<rail><side>``
(side a/b, no letter for single-ToR) with host ports ``h<i>p<port>``; aggs ``agg<plane>-<i>``;
cores ``core<plane>-<i>``. A fabric interface is named after the node at its other end.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Iterator

from hpnlab.model.spec import Spec

IFNAMSIZ = 15


@dataclass(slots=True)
class NIC:
    """One rail NIC: two ports with the same IP and MAC (the paper's dual-ToR NIC)."""

    rail: int
    ip: str
    mac: str
    subnet: str
    gateway: str
    ports: list[str]
    tors: list[str]


@dataclass(slots=True)
class Node:
    name: str
    role: str  # host | tor | agg | core
    segment: int | None = None
    rail: int | None = None
    side: str | None = None  # ToR side a|b (None for single-ToR)
    plane: int | None = None  # tor/agg/core plane; None = all planes
    index: int = 0
    asn: int | None = None
    router_id: str | None = None
    nics: list[NIC] = field(default_factory=list)
    subnet: str | None = None  # ToR: the set's /24
    gateway: str | None = None  # ToR: gateway address on each host port
    lacp_offset: int | None = None  # ToR: port-ID offset of its side


@dataclass(slots=True)
class End:
    node: str
    iface: str
    mac: str


@dataclass(slots=True)
class Link:
    a: End
    b: End
    kind: str  # access | uplink | core | peer (stacked pair's peer link) | oob (its out-of-band link)
    lacp_port: int | None = None  # access: LACP port number the ToR presents (p + offset)
    host_port: int | None = None  # access: which NIC port (0 or 1)


@dataclass(slots=True)
class DualToRSet:
    segment: int
    rail: int
    subnet: str
    gateway: str
    tors: list[str]


@dataclass(slots=True)
class Topology:
    name: str
    spec: Spec
    nodes: list[Node]
    links: list[Link]
    sets: list[DualToRSet]

    def by_role(self, role: str) -> Iterator[Node]:
        return (n for n in self.nodes if n.role == role)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def links_of(self, name: str) -> list[tuple[End, End, Link]]:
        """(local end, remote end, link) for every link touching node ``name``."""
        out = []
        for lk in self.links:
            if lk.a.node == name:
                out.append((lk.a, lk.b, lk))
            elif lk.b.node == name:
                out.append((lk.b, lk.a, lk))
        return out

    def bgp_sessions(self) -> int:
        return sum(1 for lk in self.links if lk.kind in ("uplink", "core"))

    def _new_keys_unused(self) -> dict:
        out: dict = {k: True for k in ("qos", "tcp_reordering") if getattr(self.spec, k) is None}
        mode = self.spec.multipath.mode
        unused = [k for k, m in (("flowlet_gap_ms", "flowlet"), ("dlb_interval_ms", "dlb")) if mode != m]
        if unused:
            out["multipath"] = {k: True for k in unused}
        return out

    def to_dict(self) -> dict:
        def node_dict(n: Node) -> dict:
            d = {k: v for k, v in asdict(n).items() if v is not None and v != []}
            return d

        return {
            "name": self.name,
            # a spec without qos (or tcp_reordering, or a flowlet or dlb mode) renders byte for byte as before
            # the keys existed
            "spec": self.spec.model_dump(mode="json", exclude=self._new_keys_unused() or None),
            "nodes": [node_dict(n) for n in self.nodes],
            "links": [{k: v for k, v in asdict(lk).items() if v is not None} for lk in self.links],
            "sets": [asdict(s) for s in self.sets],
            "summary": summary(self),
        }


def _mac(prefix: int, n: int, tail: int | None = None) -> str:
    """Locally administered MAC: 02:<prefix>:<n as 3 or 4 bytes>[:<tail>]."""
    if tail is None:
        b = [0x02, prefix, (n >> 24) & 0xFF, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF]
    else:
        b = [0x02, prefix, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF, tail]
    return ":".join(f"{x:02x}" for x in b)


def tor_name(seg: int, rail: int, side: str | None) -> str:
    return f"s{seg}r{rail}{side or ''}"


def agg_name(plane: int, i: int) -> str:
    return f"agg{plane}-{i}"


def core_name(plane: int, i: int) -> str:
    return f"core{plane}-{i}"


def host_name(seg: int, i: int) -> str:
    return f"s{seg}h{i}"


def build(spec: Spec) -> Topology:
    """Build the whole fabric. Invariants are checked by tests, not asserted here, to stay fast at Pod scale."""
    nodes: list[Node] = []
    links: list[Link] = []
    sets: list[DualToRSet] = []
    pool = ipaddress.IPv4Network(spec.addressing.hosts)
    loop_base = int(ipaddress.IPv4Network(spec.addressing.loopbacks).network_address)
    subnets = pool.subnets(new_prefix=24)
    sides: list[str | None] = ["a", "b"] if spec.tors_per_set == 2 else [None]
    offsets = {"a": spec.lacp.port_offsets.a, "b": spec.lacp.port_offsets.b, None: spec.lacp.port_offsets.a}
    router_idx = 0

    def router_id() -> str:
        nonlocal router_idx
        router_idx += 1
        return str(ipaddress.IPv4Address(loop_base + router_idx))

    def fabric_link(a: str, b: str, kind: str) -> None:
        i = len(links)
        links.append(Link(End(a, b, _mac(0x1E, i, 0)), End(b, a, _mac(0x1E, i, 1)), kind))

    # Aggs (and cores) first in the node list is not required; keep a readable order: hosts, ToRs, aggs, cores.
    tors_by_set: dict[tuple[int, int], list[Node]] = {}
    tor_index = 0
    tor_nodes: list[Node] = []
    for seg in range(spec.segments):
        for rail in range(spec.rails):
            net = next(subnets)
            gw = str(net.network_address + 1)
            members = []
            for side in sides:
                plane = (0 if side == "a" else 1) if spec.tier2 == "dual-plane" else None
                t = Node(tor_name(seg, rail, side), "tor", segment=seg, rail=rail, side=side, plane=plane,
                         index=tor_index, asn=spec.asn.tor_base + tor_index, router_id=router_id(),
                         subnet=str(net), gateway=gw, lacp_offset=offsets[side])
                tor_index += 1
                members.append(t)
                tor_nodes.append(t)
            tors_by_set[(seg, rail)] = members
            sets.append(DualToRSet(seg, rail, str(net), gw, [t.name for t in members]))
            if spec.stacked:  # the stacked pair's direct link (sync) and its out-of-band link (heartbeat)
                a, b = members
                for kind in ("peer", "oob"):
                    i = len(links)
                    links.append(Link(End(a.name, kind, _mac(0x5E, i, 0)), End(b.name, kind, _mac(0x5E, i, 1)), kind))

    nic_index = 0
    for seg in range(spec.segments):
        for h in range(spec.hosts_per_segment):
            host = Node(host_name(seg, h), "host", segment=seg, index=seg * spec.hosts_per_segment + h)
            for rail in range(spec.rails):
                st = sets[seg * spec.rails + rail]
                net = ipaddress.IPv4Network(st.subnet)
                mac = _mac(0x00, nic_index)
                nic_index += 1
                ip = str(net.network_address + 2 + h)
                members = tors_by_set[(seg, rail)]
                ports = [f"r{rail}p{p}" for p in (0, 1)]
                host.nics.append(NIC(rail, ip, mac, st.subnet, st.gateway, ports, [t.name for t in members]))
                for port in (0, 1):
                    tor = members[port] if len(members) == 2 else members[0]
                    tif = f"h{h}p{port}"
                    # Physical ToR port p: same wiring on both ToRs of a set, so the same p (paper §4.2).
                    p = h + 1 if len(members) == 2 else 2 * h + port + 1
                    links.append(Link(End(host.name, ports[port], mac), End(tor.name, tif, spec.lacp.system_mac),
                                      "access", lacp_port=p + tor.lacp_offset, host_port=port))
            nodes.append(host)
    nodes.extend(tor_nodes)

    aggs: list[Node] = []
    for plane in range(spec.planes):
        for i in range(spec.aggs_per_plane):
            aggs.append(Node(agg_name(plane, i), "agg", plane=plane, index=len(aggs),
                             asn=spec.asn.agg_base + plane, router_id=router_id()))
    nodes.extend(aggs)
    for t in tor_nodes:
        for g in aggs:
            if t.plane is None or g.plane == t.plane:
                fabric_link(t.name, g.name, "uplink")

    if spec.tier3:
        cores: list[Node] = []
        for plane in range(spec.planes):
            for i in range(spec.tier3.cores_per_plane):
                cores.append(Node(core_name(plane, i), "core", plane=plane, index=len(cores),
                                  asn=spec.asn.core_base + plane, router_id=router_id()))
        nodes.extend(cores)
        for g in aggs:
            for c in cores:
                if g.plane == c.plane:
                    fabric_link(g.name, c.name, "core")
    return Topology(spec.name, spec, nodes, links, sets)


def summary(topo: Topology) -> dict:
    counts: dict[str, int] = {}
    for n in topo.nodes:
        counts[n.role] = counts.get(n.role, 0) + 1
    kinds: dict[str, int] = {}
    for lk in topo.links:
        kinds[lk.kind] = kinds.get(lk.kind, 0) + 1
    spec = topo.spec
    return {
        "hosts": counts.get("host", 0),
        "gpus": counts.get("host", 0) * spec.rails,
        "tors": counts.get("tor", 0),
        "aggs": counts.get("agg", 0),
        "cores": counts.get("core", 0),
        "links": len(topo.links),
        "links_by_kind": kinds,
        "bgp_sessions": topo.bgp_sessions(),
        "dual_tor_sets": len(topo.sets),
        "access": spec.access,
        "tier2": spec.tier2,
    }


def check_interface_names(topo: Topology) -> list[str]:
    """Names longer than IFNAMSIZ; empty when the topology can be built by the kernel."""
    bad = []
    for lk in topo.links:
        for e in (lk.a, lk.b):
            if len(e.iface) > IFNAMSIZ:
                bad.append(f"{e.node}:{e.iface}")
    return bad
