"""The spec rejects bad input with one line naming the field; good specs load with defaults."""

from __future__ import annotations

import pytest

from hpnlab.errors import SpecError
from hpnlab.model.spec import load_spec, parse_spec
from tests.conftest import EXAMPLES
from tests.lib.specs import BAD


def test_default_spec_loads():
    s = load_spec()
    assert (s.segments, s.hosts_per_segment, s.rails, s.aggs_per_plane) == (2, 2, 2, 2)
    assert s.lacp.system_mac == "00:00:5e:00:01:01"
    assert (s.lacp.port_offsets.a, s.lacp.port_offsets.b) == (300, 600)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yml")), ids=lambda p: p.name)
def test_examples_load(path):
    assert load_spec(path).name


# (spec data, substring the one-line error must contain: the field)


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


def test_time_dilation_scales_every_protocol_timer_and_keeps_its_factor():
    s = parse_spec({"name": "t", "time_dilation": 10, "bfd": {"interval_ms": 100, "multiplier": 3},
                    "bgp": {"keepalive": 1, "hold": 3}, "micro_bfd": {"enabled": True, "interval_ms": 50},
                    "holddown": {"enabled": True, "max_s": 15}})
    d = s.dilated()
    assert (d.bgp.keepalive, d.bgp.hold, d.bfd.interval_ms, d.bfd.multiplier) == (10, 30, 1000, 3)
    assert (d.micro_bfd.interval_ms, d.holddown.max_s, d.time_dilation) == (500, 150.0, 10)
    assert (s.bgp.keepalive, s.bfd.interval_ms) == (1, 100)  # the user's spec is left as written
    one = parse_spec({"name": "t"})
    assert one.dilated() is one


def test_time_dilation_refuses_the_kernel_bond():
    with pytest.raises(SpecError) as ei:
        parse_spec({"name": "t", "time_dilation": 3, "host_driver": "bond"})
    assert "time_dilation" in str(ei.value) and "host_driver userspace" in str(ei.value)


def test_spec_overrides_from_the_environment_reach_every_spec_read(monkeypatch, tmp_path):
    """HPNLAB_SPEC_OVERRIDES (a JSON mapping) is merged into a lab spec and into an experiment's base spec,
    before a variant's own overrides; a value that is no JSON mapping is one line naming the variable."""
    from hpnlab.model.spec import load_spec
    from hpnlab.traffic.run import experiment

    monkeypatch.setenv("HPNLAB_SPEC_OVERRIDES", '{"bfd": {"interval_ms": 1000}}')
    sp = load_spec()
    assert sp.bfd.interval_ms == 1000 and sp.bfd.multiplier == 3 and sp.name == "hpn"
    exp = experiment.load(experiment.find("host-drivers"))
    assert {p.spec.bfd.interval_ms for p in exp.plans} == {1000}
    assert {p.spec.host_driver for p in exp.plans} == {"bond", "userspace"}  # the variants' own still apply
    for bad, says in (("{bfd", "not JSON"), ("[1, 2]", "JSON mapping")):
        monkeypatch.setenv("HPNLAB_SPEC_OVERRIDES", bad)
        with pytest.raises(SpecError) as e:
            load_spec()
        assert str(e.value).startswith("HPNLAB_SPEC_OVERRIDES:") and says in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("HPNLAB_SPEC_OVERRIDES", '{"bfd": {"interval_ms": 5}}')
    with pytest.raises(SpecError) as e:  # the merged spec is validated as any spec is
        load_spec()
    assert "HPNLAB_SPEC_OVERRIDES" in str(e.value) and "interval_ms" in str(e.value)
