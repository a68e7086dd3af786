"""Rendered files: containerlab topology valid against containerlab's schema, frr.conf accepted by FRR."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest
import yaml

from hpnlab.generate.render import render, write
from hpnlab.model.spec import load_spec, parse_spec
from hpnlab.model.topology import build
from tests.conftest import EXAMPLES

SPECS = {
    "default": load_spec,
    "single-tor": lambda: load_spec(EXAMPLES / "single-tor.yml"),
    "clos": lambda: load_spec(EXAMPLES / "clos.yml"),
    "segment": lambda: load_spec(EXAMPLES / "segment.yml"),
    "tier3": lambda: parse_spec({"name": "t3", "tier3": {"cores_per_plane": 2}}),
    "ablation": lambda: parse_spec({"name": "abl", "bfd": {"enabled": False},
                                    "mechanisms": {"host_routes": False, "arp_proxy": False}}),
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def rendered(request):
    topo = build(SPECS[request.param]())
    return topo, render(topo)


def test_contract_files(rendered):
    topo, files = rendered
    assert "topology.json" in files and f"{topo.name}.clab.yml" in files and "fabric.svg" in files
    for n in topo.nodes:
        if n.role != "host":
            assert f"{n.name}/frr.conf" in files
    data = json.loads(files["topology.json"])
    assert data["name"] == topo.name
    for n in data["nodes"]:
        assert {"name", "role"} <= n.keys()
    for lk in data["links"]:
        assert {"node", "iface"} <= lk["a"].keys() and {"node", "iface"} <= lk["b"].keys()
    assert files["fabric.svg"].startswith("<svg") and "plane" in files["fabric.svg"]


def test_clab_validates_against_shared_schema(rendered, clab_schema):
    topo, files = rendered
    doc = yaml.safe_load(files[f"{topo.name}.clab.yml"])
    # Draft7Validator directly: the schema's \p{..} patterns (ECMAScript) are unused by our files
    # and make Python's check_schema fail.
    errors = list(jsonschema.Draft7Validator(clab_schema).iter_errors(doc))
    assert errors == [], [e.message for e in errors[:3]]
    assert len(doc["topology"]["links"]) == len(topo.links)
    assert doc["topology"]["groups"]["router"]["restart-policy"] == "no"
    ends = doc["topology"]["links"][0]["endpoints"]
    assert all("mac" in e for e in ends)


def test_schema_check_is_not_vacuous(clab_schema):
    topo = build(load_spec())
    doc = yaml.safe_load(render(topo)[f"{topo.name}.clab.yml"])
    doc["topology"]["nodes"]["s0h0"]["restart-policy"] = "sometimes"
    assert list(jsonschema.Draft7Validator(clab_schema).iter_errors(doc))


def test_frr_parser_accepts_every_config(rendered, vtysh, tmp_path):
    topo, files = rendered
    confs = [k for k in files if k.endswith("/frr.conf")]
    # one per role is representative, all of the small labs are cheap enough to check fully
    for rel in confs:
        p = tmp_path / rel.replace("/", "_")
        p.write_text(files[rel])
        r = subprocess.run([vtysh, "--dryrun", "-f", str(p)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "Unknown command" not in r.stdout + r.stderr, (rel, r.stdout, r.stderr)


def test_frr_parser_rejects_a_broken_config(vtysh, tmp_path):
    topo = build(load_spec())
    text = render(topo)["s0r0a/frr.conf"].replace("timers bgp 1 3", "timers bgp one 3")
    p = tmp_path / "bad.conf"
    p.write_text(text)
    r = subprocess.run([vtysh, "--dryrun", "-f", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0


def test_tor_config_has_hpn_mechanisms():
    files = render(build(load_spec()))
    tor, agg = files["s0r0a/frr.conf"], files["agg0-0/frr.conf"]
    for line in ("ip import-table 10", "redistribute table 10", "network 10.0.0.0/24", "no zebra nexthop kernel enable",
                 "bgp bestpath as-path multipath-relax", "timers bgp 1 3", "bgp route-map delay-timer 0",
                 "coalesce-time 0", "neighbor fabric bfd profile hpn", "neighbor agg0-0 interface peer-group fabric"):
        assert line in tor, line
    assert "neighbor agg1-0" not in tor, "ToR a peers only with plane 0"
    assert "addpath-tx-all-paths" in agg and "import-table" not in agg
    agent = json.loads(files["s0r0b/node.json"])
    assert agent["lacp"]["system_mac"] == "00:00:5e:00:01:01" and agent["lacp"]["port_offset"] == 600
    assert [p["port_id"] for p in agent["host_ports"]] == [601, 602]


def test_ablation_switches_reach_the_configs():
    files = render(build(SPECS["ablation"]()))
    assert "import-table" not in files["s0r0a/frr.conf"] and "bfd" not in files["s0r0a/frr.conf"]
    assert json.loads(files["s0h0/node.json"])["mechanisms"]["arp_proxy"] is False


def test_render_is_deterministic():
    assert render(build(load_spec())) == render(build(load_spec()))


def test_write_refuses_foreign_dir(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    from hpnlab.errors import SpecError

    with pytest.raises(SpecError, match="not made by hpnlab"):
        write({"topology.json": "{}"}, tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_write_replaces_previous_output(tmp_path):
    out = tmp_path / "o"
    write({"topology.json": "1", "a/x": "1"}, out)
    write({"topology.json": "2"}, out)
    assert (out / "topology.json").read_text() == "2" and not (out / "a").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"], "no temp dirs left behind"


def test_update_delay_bounds_every_routers_start_unless_turned_off():
    """bgp.update_delay renders FRR's update-delay on every router, 10 s by default (a starting bgpd installs
    each route once with all its paths); 0 leaves it out. Only bgpd's start is affected: no fault restarts
    bgpd, so the failover figures are the same either way."""
    default = render(build(load_spec()))
    on = render(build(parse_spec({"name": "ud", "bgp": {"update_delay": 45}})))
    off = render(build(parse_spec({"name": "ud", "bgp": {"update_delay": 0}})))
    for node in ("s0r0a", "agg0-0"):
        assert " update-delay 10\n" in default[f"{node}/frr.conf"]
        assert " update-delay 45\n" in on[f"{node}/frr.conf"]
        assert "update-delay" not in off[f"{node}/frr.conf"]
