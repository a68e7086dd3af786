"""Multi-host without Kubernetes: one folder per machine, each a valid containerlab topology whose
cross-machine links are VXLAN with matching ends, a dual-ToR set never apart from its hosts, routers
balanced, every bound file inside the folder."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from hpnlab.generate import multihost, render
from hpnlab.model import topology
from hpnlab.errors import SpecError
from hpnlab.model.spec import load_spec, parse_spec
from tests.conftest import EXAMPLES


def _split(spec, n, addrs=None):
    topo = topology.build(spec)
    files = render.render(topo)
    return topo, multihost.split(files, topo, n, addrs)


@pytest.mark.parametrize("spec, n", [("default", 2), ("segment", 3), ("stacked", 2), ("load-balance", 2)])
def test_each_machine_gets_a_valid_self_contained_folder(spec, n, clab_schema):
    topo, out = _split(load_spec(EXAMPLES / f"{spec}.yml"), n)
    v = jsonschema.Draft7Validator(clab_schema)
    ends: dict[int, list] = {}
    placed: dict[str, int] = {}
    for m in range(n):
        folder = f"hosts/h{m + 1}"
        doc = yaml.safe_load(out[f"{folder}/{topo.name}.clab.yml"])
        errors = list(v.iter_errors(doc))
        assert not errors, errors[0].message
        for name, node in doc["topology"]["nodes"].items():
            placed[name] = m
            for b in node["binds"]:
                src = b.split(":")[0]
                # every bind's source ships with the folder (containerlab refuses a missing one), run/ too
                assert f"{folder}/{src}" in out or f"{folder}/{src}/README" in out, (folder, src)
        for lk in doc["topology"]["links"]:
            if lk.get("type") == "vxlan":
                ends.setdefault(lk["vni"], []).append((m, lk["endpoint"]["node"], lk["remote"]))
        assert f"{folder}/RUN.md" in out and "containerlab deploy" in out[f"{folder}/RUN.md"]
    assert set(placed) == {nd.name for nd in topo.nodes}  # every node exactly once
    addrs = [f"192.0.2.{i + 1}" for i in range(n)]
    for vni, pair in ends.items():  # a tunnel has its two ends on two machines, each pointing at the other
        assert len(pair) == 2 and pair[0][0] != pair[1][0]
        assert pair[0][2] == addrs[pair[1][0]] and pair[1][2] == addrs[pair[0][0]]
    for st in topo.sets:  # a set stays with the hosts under it
        hosts = {nd.name for nd in topo.nodes if nd.role == "host" and nd.segment == st.segment}
        assert len({placed[x] for x in [*st.tors, *hosts]}) == 1
    assert all(lk.kind in ("uplink", "core") for lk in topo.links
               if placed[lk.a.node] != placed[lk.b.node])  # only fabric links cross machines


def test_routers_are_balanced():
    topo = topology.build(parse_spec({"name": "b", "segments": 4, "aggs_per_plane": 3}))
    where = multihost.placement(topo, 3)
    load = [sum(multihost.WEIGHT[nd.role] for nd in topo.nodes if where[nd.name] == m) for m in range(3)]
    heaviest_unit = max(sum(multihost.WEIGHT[nd.role] for nd in topo.nodes
                            if nd.role in ("host", "tor") and nd.segment == s) for s in range(4))
    assert max(load) - min(load) <= heaviest_unit


@pytest.mark.parametrize("n, addrs, words", [(1, None, "2 or more"), (2, ["10.0.0.1"], "give 2 addresses"),
                                             (2, ["10.0.0.1", "nope"], "not an IP"),
                                             (2, ["10.0.0.1", "10.0.0.1"], "must differ")])
def test_bad_machine_counts_and_addresses_are_one_line(n, addrs, words):
    with pytest.raises(SpecError, match=words):
        _split(load_spec(EXAMPLES / "default.yml"), n, addrs)


def test_tunnels_carry_the_lab_mtu_and_vnis_follow_the_lab_name(tmp_path):
    """containerlab gives a vxlan link its parent's MTU less 50 unless mtu: is set; two split labs on the
    same machines (UDP 4789) must not share VNIs."""
    from hpnlab.node.plan import MTU

    vnis = {}
    for name in ("hpn", "other"):
        topo, out = _split(parse_spec({"name": name}), 2)
        doc = yaml.safe_load(out[f"hosts/h1/{name}.clab.yml"])
        tunnels = [lk for lk in doc["topology"]["links"] if lk.get("type") == "vxlan"]
        assert tunnels and {lk["mtu"] for lk in tunnels} == {MTU}
        vnis[name] = {lk["vni"] for lk in tunnels}
        assert all(0 < v < 1 << 24 for v in vnis[name])
        assert f"MTU of at least\n   {MTU + 50}" in out["hosts/h1/RUN.md"] and "no carrier" in out["hosts/h1/RUN.md"]
    assert not vnis["hpn"] & vnis["other"]


def test_each_machine_folder_deploys_as_written_by_the_strict_stand_in(tmp_path):
    """What containerlab checks before it creates anything (tests/clabsim.py mirrors it): strict fields,
    every bind source present. The folders are written to disk exactly as 'generate --hosts' writes them."""
    import sys

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "tests"))
    import clabsim

    topo, out = _split(load_spec(EXAMPLES / "default.yml"), 2)
    render.write(out, tmp_path / "o")
    for m in (1, 2):
        path = tmp_path / "o" / "hosts" / f"h{m}" / "hpn.clab.yml"
        clabsim.check_binds(clabsim.load(path), path)


def test_more_machines_than_the_lab_can_fill_is_one_line():
    topo = topology.build(load_spec(EXAMPLES / "default.yml"))
    with pytest.raises(SpecError, match="--hosts 99: lab 'hpn' can fill at most 6 machines"):
        multihost.split(render.render(topo), topo, 99)
