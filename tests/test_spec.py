"""The spec rejects bad input with one line naming the field; good specs load with defaults."""

from __future__ import annotations

import pytest

from hpnlab.errors import SpecError
from hpnlab.spec import load_spec, parse_spec
from tests.conftest import EXAMPLES


def test_default_spec_loads():
    s = load_spec()
    assert (s.segments, s.hosts_per_segment, s.rails, s.aggs_per_plane) == (2, 2, 2, 2)
    assert s.lacp.system_mac == "00:00:5e:00:01:01"
    assert (s.lacp.port_offsets.a, s.lacp.port_offsets.b) == (300, 600)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yml")), ids=lambda p: p.name)
def test_examples_load(path):
    assert load_spec(path).name


# (spec data, substring the one-line error must contain: the field)
BAD = [
    ({"segmentz": 2}, "segmentz"),
    ({"segments": 0}, "segments"),
    ({"segments": "two"}, "segments"),
    ({"hosts_per_segment": 500}, "hosts_per_segment"),
    ({"rails": 9}, "rails"),
    ({"access": "stacked"}, "access"),
    ({"access": "stacked-dual-tor"}, "tier2 'clos'"),  # dual-plane would split the stacked pair
    ({"access": "stacked-dual-tor", "tier2": "clos", "mechanisms": {"lacp": False}}, "single-homed hosts"),
    ({"tier2": "fat-tree"}, "tier2"),
    ({"aggs_per_plane": -1}, "aggs_per_plane"),
    ({"name": "Bad Name!"}, "name"),
    ({"name": "averyveryverylongname"}, "name"),
    ({"lacp": {"port_offsets": {"a": 100, "b": 600}}}, "port_offsets"),
    ({"lacp": {"port_offsets": {"a": 300, "b": 300}}}, "port_offsets"),
    ({"lacp": {"port_offsets": {"a": 300, "b": 400}}}, "port_offsets"),
    ({"lacp": {"system_mac": "zz:00:5e:00:01:01"}}, "system_mac"),
    ({"lacp": {"system_mac": "01:00:5e:00:01:01"}}, "system_mac"),
    ({"lacp": {"key": 0}}, "key"),
    ({"lacp": {"colour": "red"}}, "colour"),
    ({"bgp": {"keepalive": 5, "hold": 6}}, "hold"),
    ({"bfd": {"interval_ms": 1}}, "interval_ms"),
    ({"addressing": {"hosts": "10.0.0.0/33"}}, "addressing.hosts"),
    ({"addressing": {"hosts": "10.0.0.1/24"}}, "addressing.hosts"),
    ({"addressing": {"hosts": "10.0.0.0/25"}}, "addressing.hosts"),
    ({"addressing": {"hosts": "10.0.0.0/23"}, "segments": 2, "rails": 2}, "addressing.hosts"),
    ({"addressing": {"loopbacks": "10.0.0.0/16"}}, "loopbacks"),
    ({"access": "single-tor", "tier2": "dual-plane"}, "tier2"),
    ({"tier3": {"cores_per_plane": 0}}, "cores_per_plane"),
    ({"tier3": {"oversubscription": 0.5}}, "oversubscription"),
    ({"asn": {"tor_base": 65000, "agg_base": 65001}}, "asn"),
    ({"mechanisms": {"lacp": "maybe"}}, "mechanisms.lacp"),
    ({"host_driver": "teamd"}, "host_driver"),
]


@pytest.mark.parametrize("data,field", BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_bad_specs_name_the_field(data, field):
    with pytest.raises(SpecError) as ei:
        parse_spec({"name": "t", **data} if "name" not in data else data)
    msg = str(ei.value)
    assert field in msg, msg
    assert "\n" not in msg


def test_top_level_must_be_mapping():
    with pytest.raises(SpecError, match="mapping"):
        parse_spec([1, 2, 3])


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "nope.yml")


def test_malformed_yaml_reports_line(tmp_path):
    p = tmp_path / "bad.yml"
    p.write_text("name: x\nsegments: [1, 2\n")
    with pytest.raises(SpecError, match="line"):
        load_spec(p)
