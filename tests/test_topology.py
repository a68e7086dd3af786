"""Topology invariants and counts, from the scaled lab to the paper's full Pod, and the baselines."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from hpnlab.model.spec import load_spec, parse_spec
from hpnlab.model.topology import IFNAMSIZ, build, check_interface_names, summary
from tests.conftest import EXAMPLES


def _roles(topo):
    return {n.name: n for n in topo.nodes}


def _check_invariants(topo):
    spec = topo.spec
    nodes = _roles(topo)
    names = [n.name for n in topo.nodes]
    assert len(names) == len(set(names))
    per_node_ifaces = defaultdict(list)
    for lk in topo.links:
        for e in (lk.a, lk.b):
            per_node_ifaces[e.node].append(e.iface)
            assert len(e.iface) <= IFNAMSIZ
        roles = {nodes[lk.a.node].role, nodes[lk.b.node].role}
        assert roles != {"tor"}, "no ToR-ToR (peer) link in non-stacked mode"
        if lk.kind == "access":
            host, tor = nodes[lk.a.node], nodes[lk.b.node]
            assert (host.role, tor.role) == ("host", "tor")
            nic = next(n for n in host.nics if lk.a.iface in n.ports)
            assert tor.rail == nic.rail, "rail-optimised: NIC r goes to rail r's set"
            assert tor.segment == host.segment
            if spec.access == "dual-tor":
                assert tor.side == ("a" if lk.host_port == 0 else "b"), "port 0 -> ToR a, port 1 -> ToR b"
                assert lk.lacp_port > 256
            assert lk.a.mac == nic.mac, "both NIC ports share the NIC's MAC"
        if lk.kind == "uplink":
            tor, agg = nodes[lk.a.node], nodes[lk.b.node]
            assert (tor.role, agg.role) == ("tor", "agg")
            if spec.tier2 == "dual-plane":
                assert tor.plane == agg.plane == (0 if tor.side == "a" else 1), "a ToR links only to its plane"
        if lk.kind == "core":
            assert nodes[lk.a.node].plane == nodes[lk.b.node].plane
    for node, ifs in per_node_ifaces.items():
        assert len(ifs) == len(set(ifs)), f"duplicate interface on {node}"
    # same IP+MAC on both ports of a NIC; per-set LACP port IDs distinct between the two ToRs
    for s in topo.sets:
        ids = defaultdict(set)
        for lk in topo.links:
            if lk.kind == "access" and lk.b.node in s.tors:
                ids[lk.b.node].add(lk.lacp_port)
        if len(s.tors) == 2:
            assert not (ids[s.tors[0]] & ids[s.tors[1]]), "two ToRs of a set never present the same port ID"
    asns = Counter(n.asn for n in topo.nodes if n.role == "tor")
    assert all(c == 1 for c in asns.values()), "unique ASN per ToR"
    for plane in range(spec.planes):
        assert len({n.asn for n in topo.nodes if n.role == "agg" and n.plane == plane}) == 1


@pytest.mark.parametrize("path,expect", [
    ("default.yml", dict(hosts=4, tors=8, aggs=4, links=32, bgp_sessions=16)),
    ("single-tor.yml", dict(hosts=4, tors=4, aggs=2, links=24, bgp_sessions=8)),
    ("clos.yml", dict(hosts=4, tors=8, aggs=2, links=32, bgp_sessions=16)),
    ("segment.yml", dict(hosts=2, tors=16, aggs=4, links=64, bgp_sessions=32)),
])
def test_scaled_labs(path, expect):
    topo = build(load_spec(EXAMPLES / path))
    s = summary(topo)
    assert {k: s[k] for k in expect} == expect
    _check_invariants(topo)


def test_full_pod_counts():
    topo = build(load_spec(EXAMPLES / "hpn-pod-15k.yml"))
    s = summary(topo)
    assert s["gpus"] == 15360 and s["hosts"] == 1920
    assert (s["tors"], s["aggs"]) == (240, 120)
    assert s["links_by_kind"] == {"access": 30720, "uplink": 14400}
    assert s["links"] == 45120 and s["bgp_sessions"] == 14400
    assert check_interface_names(topo) == []
    _check_invariants(topo)


def test_tier3_cores_are_dual_plane():
    topo = build(parse_spec({"name": "t3", "tier3": {"cores_per_plane": 2}}))
    s = summary(topo)
    assert s["cores"] == 4 and s["links_by_kind"]["core"] == 2 * 2 * 2
    _check_invariants(topo)


def test_clos_tor_reaches_every_agg():
    topo = build(load_spec(EXAMPLES / "clos.yml"))
    ups = defaultdict(set)
    for lk in topo.links:
        if lk.kind == "uplink":
            ups[lk.a.node].add(lk.b.node)
    assert all(len(v) == 2 for v in ups.values())


def test_dual_tor_lacp_ports_are_p_plus_offset():
    topo = build(load_spec())
    by = {(lk.b.node, lk.b.iface): lk.lacp_port for lk in topo.links if lk.kind == "access"}
    assert by[("s0r0a", "h0p0")] == 1 + 300 and by[("s0r0b", "h0p1")] == 1 + 600
    assert by[("s0r0a", "h1p0")] == 2 + 300


def test_deterministic():
    a, b = build(load_spec()).to_dict(), build(load_spec()).to_dict()
    assert a == b


def test_addressing_one_subnet_per_set():
    topo = build(load_spec())
    subnets = [s.subnet for s in topo.sets]
    assert len(set(subnets)) == len(subnets) == 4
    host = topo.node("s0h1")
    assert host.nics[0].ip == "10.0.0.3" and host.nics[0].gateway == "10.0.0.1"
    assert host.nics[1].subnet == "10.0.1.0/24"
