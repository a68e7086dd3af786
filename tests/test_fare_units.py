"""FARE (capacity-weighted ECMP) without root: the spec's one-line errors, the weights each agg
advertises (min of the two links of a path), the configuration and updates it renders, and the
controller's comparison of kernel weights with FARE's prescription."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from hpnlab.lifecycle import fare
from hpnlab.errors import SpecError
from hpnlab.node.agents import fare as node_fare
from hpnlab.model.spec import parse_spec
from hpnlab.traffic.run.experiment import node_configs

BASE = {"name": "f", "segments": 2, "hosts_per_segment": 2, "rails": 1, "links": {"uplink": {"rate_mbit": 20}},
        "multipath": {"mode": "fare"}}


def _cfgs(**over):
    return node_configs(parse_spec({**BASE, **over}))


@pytest.mark.parametrize("over, field", [
    ({"links": {}}, "multipath.mode"),
    ({"tier3": {"cores_per_plane": 1}}, "multipath.mode"),
    ({"links": {"uplink": {"rate_mbit": 0.5}}}, "links.uplink.rate_mbit"),
    ({"links": {"uplink": {"rate_mbit": 40000}}}, "links.uplink.rate_mbit"),
    ({"multipath": {"mode": "weighted"}}, "multipath.mode"),
    ({"multipath": {"mode": "fare", "interval_s": 0}}, "multipath.interval_s"),
    ({"links": {"uplink": {"rate_mbit": 20}, "per_link": [{"node": "s0r0a", "iface": "agg0-1"}]}},
     "links.per_link.0.rate_mbit"),
    ({"links": {"uplink": {"rate_mbit": 20}, "per_link": [{"node": "s0r0a", "iface": "agg0-1", "rate_mbit": 5,
                                                           "queue_kb": 1}]}}, "links.per_link.0.queue_kb"),
])
def test_spec_refuses_what_cannot_work_in_one_line(over, field):
    with pytest.raises(SpecError) as e:
        parse_spec({**BASE, **over})
    assert f"'{field}'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("link, why", [({"node": "s0r0a", "iface": "agg7-0"}, "not a link end"),
                                       ({"node": "nobody", "iface": "x"}, "no node 'nobody'"),
                                       ({"node": "s0r0a", "iface": "h0p0"}, None)])
def test_per_link_names_a_link_end_of_the_lab(link, why):
    data = {**BASE, "links": {"uplink": {"rate_mbit": 20}, "per_link": [{**link, "rate_mbit": 10}]}}
    if why is None:  # an access link may run at its own rate too: both ends get it
        c = _cfgs(links=data["links"])
        assert c["s0r0a"].iface("h0p0").shape == {"rate_kbit": 10000, "queue_bytes": 262144}
        assert c["s0h0"].iface("r0p0").shape["rate_kbit"] == 10000
        return
    with pytest.raises(SpecError, match=why) as e:
        _cfgs(links=data["links"])
    assert "links.per_link.0" in str(e.value)


def test_a_degraded_link_lowers_every_path_through_it_and_no_other():
    c = _cfgs(links={"uplink": {"rate_mbit": 20}, "per_link": [{"node": "s0r0a", "iface": "agg0-1", "rate_mbit": 10}]})
    assert c["s0r0a"].iface("agg0-1").shape["rate_kbit"] == 10000 == c["agg0-1"].iface("s0r0a").shape["rate_kbit"]
    agg = c["agg0-1"].plain()
    caps = node_fare.capacities(agg)
    bw = node_fare.bandwidths(agg, caps, caps)
    assert bw == {("s0r0a", "s1r0a"): 10, ("s1r0a", "s0r0a"): 10}  # min(up, down): both directions of the path
    healthy = c["agg0-0"].plain()
    assert set(node_fare.bandwidths(healthy, node_fare.capacities(healthy), node_fare.capacities(healthy)).values()) == {20}


def test_a_degraded_link_keeps_its_class_queue_unless_the_entry_gives_one():
    # a bundle that lost 3 of 4 members keeps each member's buffer: its queue in time stays the class's
    cls = {"uplink": {"rate_mbit": 20, "queue_kb": 256}}
    kept = _cfgs(links={**cls, "per_link": [{"node": "s0r0a", "iface": "agg0-1", "rate_mbit": 5}]})
    assert kept["s0r0a"].iface("agg0-1").shape == {"rate_kbit": 5000, "queue_bytes": 256 * 1024}
    own = _cfgs(links={**cls, "per_link": [{"node": "s0r0a", "iface": "agg0-1", "rate_mbit": 5, "queue_kb": 64}]})
    for node, iface in (("s0r0a", "agg0-1"), ("agg0-1", "s0r0a")):  # both ends
        assert own[node].iface(iface).shape == {"rate_kbit": 5000, "queue_bytes": 64 * 1024}
    assert own["s0r0a"].iface("agg0-0").shape["queue_bytes"] == 256 * 1024  # no other link


def test_only_fare_aggs_carry_the_policy_and_run_the_agent():
    from hpnlab.node.plan import agent_module

    ecmp = node_configs(parse_spec({**BASE, "multipath": {"mode": "ecmp"}}))
    assert all(c.multipath is None for c in ecmp.values())
    assert agent_module(ecmp["agg0-0"].plain()) is None
    c = _cfgs()
    assert c["agg0-0"].multipath["tors"] == {"s0r0a": c["s0r0a"].asn, "s1r0a": c["s1r0a"].asn}
    assert agent_module(c["agg0-0"].plain()) == "hpnlab.node.agents.fare"
    assert c["s0r0a"].multipath is None and agent_module(c["s0r0a"].plain()) == "hpnlab.node.agents.tor"


def test_rendered_route_maps_match_each_destination_tor_by_its_asn():
    agg = _cfgs()["agg0-0"].plain()
    bw = {("s0r0a", "s1r0a"): 20, ("s1r0a", "s0r0a"): 7}
    lines = node_fare.config_lines(agg, bw)
    asn = agg["multipath"]["tors"]
    assert f"bgp as-path access-list FARE-AS{asn['s1r0a']} seq 5 permit ^{asn['s1r0a']}$" in lines
    i = lines.index("route-map FARE-s1r0a permit 10")
    assert lines[i + 1:i + 3] == [f" match as-path FARE-AS{asn['s0r0a']}", " set extcommunity bandwidth 7"]
    assert "route-map FARE-s1r0a permit 65000" in lines  # everything else passes unchanged
    assert node_fare.neighbor_lines(agg) == ["  neighbor s0r0a route-map FARE-s0r0a out",
                                             "  neighbor s1r0a route-map FARE-s1r0a out"]


def test_an_update_rewrites_only_the_entries_that_changed():
    agg = _cfgs()["agg0-0"].plain()
    old = {("s0r0a", "s1r0a"): 20, ("s1r0a", "s0r0a"): 20}
    cmds, touched = node_fare.update_commands(agg, old, dict(old))
    assert (cmds, touched) == ([], [])
    cmds, touched = node_fare.update_commands(agg, old, {**old, ("s1r0a", "s0r0a"): 5})
    assert touched == ["s1r0a"]
    assert cmds == ["configure terminal", "route-map FARE-s1r0a permit 10", "set extcommunity bandwidth 5", "exit",
                    "end"]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["s0r0a", "s1r0a"]), st.floats(0, 1e8), min_size=2),
       st.dictionaries(st.sampled_from(["s0r0a", "s1r0a"]), st.floats(0, 1e8), min_size=2))
def test_bandwidths_stay_in_frr_range_and_never_exceed_either_link(up, down):
    agg = _cfgs()["agg0-0"].plain()
    for (a, b), v in node_fare.bandwidths(agg, up, down).items():
        assert node_fare.MIN_MBIT <= v <= node_fare.MAX_MBIT
        assert v <= max(1, round(min(up[a], down[b]) / 1000))


def test_tc_rates_are_read_in_kbit():
    text = json.dumps([{"kind": "tbf", "dev": "s0r0a", "root": True, "options": {"rate": 2500000}},
                       {"kind": "noqueue", "dev": "lo", "root": True},
                       {"kind": "tbf", "dev": "s1r0a", "root": False, "options": {"rate": 1}}])
    assert node_fare.tbf_rates(text) == {"s0r0a": 20000}


def test_prescribed_shares_follow_the_capacities_in_force():
    c = _cfgs()
    rates = {"agg0-0": {"s0r0a": 20000, "s1r0a": 20000}, "agg0-1": {"s0r0a": 20000, "s1r0a": 20000}}
    assert fare.prescribed(c, "s0r0a", rates) == {"10.0.1.0/24": {"agg0-0": 0.5, "agg0-1": 0.5}}
    rates["agg0-1"]["s1r0a"] = 5000  # the far side of agg0-1 at a quarter: 20 vs 5
    assert fare.prescribed(c, "s0r0a", rates) == {"10.0.1.0/24": {"agg0-0": 0.8, "agg0-1": 0.2}}


def test_kernel_weights_against_prescription():
    routes = json.dumps([{"dst": "10.0.1.0/24", "nexthops": [{"dev": "agg0-0", "weight": 66}, {"dev": "agg0-1", "weight": 33}]},
                         {"dst": "10.0.0.0/24", "dev": "h0p0"}])
    k = fare.kernel_weights(routes, ["10.0.1.0/24"])
    assert k == {"10.0.1.0/24": {"agg0-0": 66, "agg0-1": 33}}
    w = {"10.0.1.0/24": {"kernel": k["10.0.1.0/24"], "kernel_share": {"agg0-0": 0.6667, "agg0-1": 0.3333},
                         "fare_share": {"agg0-0": 0.6667, "agg0-1": 0.3333}}}
    assert fare.problems(w) == []
    w["10.0.1.0/24"]["kernel_share"] = {"agg0-0": 0.5, "agg0-1": 0.5}  # plain ECMP where FARE says 2:1
    assert fare.problems(w) and "agg0-" in fare.problems(w)[0]
    w["10.0.1.0/24"]["kernel_share"] = {}
    assert fare.problems(w) == ["10.0.1.0/24: no route"]


def test_the_agent_module_imports_light():
    r = subprocess.run([sys.executable, "-c", "import sys, hpnlab.node.agents.fare; "
                        "print(sorted(m for m in sys.modules if m.startswith('hpnlab.') and not m.startswith('hpnlab.node')))"],
                       capture_output=True, text=True, cwd="/", timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


@pytest.mark.parametrize("d, field", [
    ({"kind": "degrade", "node": "s0r0a", "iface": "agg0-1", "fraction": 1.5}, "fault.fraction"),
    ({"kind": "degrade", "node": "s0r0a", "iface": "agg0-1", "fraction": "half"}, "fault.fraction"),
    ({"kind": "degrade", "node": "s0r0a", "iface": "h0p0"}, "fault.iface"),  # access links are unshaped here
    ({"kind": "degrade", "node": "s0r0a", "iface": "agg0-0,agg0-1"}, "fault.iface"),
    ({"kind": "link-down", "node": "s0r0a", "iface": "agg0-1", "fraction": 0.5}, "fault.fraction"),
])
def test_degrade_fault_input_is_one_line(d, field):
    from hpnlab.traffic import faults

    with pytest.raises(SpecError) as e:
        faults.parse(d, "fault", _cfgs())
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_degrade_records_both_ends_at_the_spec_rate_and_lowers_them():
    """Applied against a recording runtime: both ends get a tbf at the fraction, the undo recipe (in
    state.json before it acts) holds the spec's shape, and the revert puts that back."""
    from hpnlab.traffic import faults

    calls = []

    class RT:
        class state:
            class data:
                faults = []
            save = staticmethod(lambda: None)
            path = None

        @staticmethod
        def run(node, argv, **kw):
            calls.append((node, argv))

    cfgs = _cfgs()
    f = faults.parse({"kind": "degrade", "node": "s0r0a", "iface": "agg0-1", "fraction": 0.25}, "fault", cfgs)
    assert f.label == "degrade s0r0a:agg0-1 fraction=0.25"
    inj = faults.Injector(RT, cfgs)
    inj.apply(f)
    assert [(n, a[a.index("rate") + 1]) for n, a in calls] == [("s0r0a", "5000kbit"), ("agg0-1", "5000kbit")]
    assert RT.state.data.faults[0].undo["ends"][1][:2] == ["agg0-1", "s0r0a"]
    calls.clear()
    inj.revert(f)
    assert [(n, a[a.index("rate") + 1]) for n, a in calls] == [("s0r0a", "20000kbit"), ("agg0-1", "20000kbit")]


def test_frr84_rounding_as_measured_and_what_it_costs_on_wide_ecmp():
    from hpnlab.generate import frr84

    assert frr84.weights([20, 10]) == [66, 33]  # measured on the default lab with one uplink at half rate
    assert frr84.weights([20, 20, 20, 10]) == [28, 28, 28, 14]
    # the paper's 60 aggs with one link at half rate: every weight rounds to 1, FARE's difference is gone
    assert set(frr84.weights([20] * 59 + [10])) == {1}
    assert frr84.shares([20] * 59 + [10])[-1] == pytest.approx(1 / 60)
    assert frr84.weights([0, 0]) == [1, 1]


RATE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 40000), st.text(max_size=5), st.none())


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({
    "multipath": st.one_of(st.none(), st.fixed_dictionaries({
        "mode": st.one_of(st.sampled_from(["ecmp", "fare", "fare-adaptive"]), st.text(max_size=6)),
        "interval_s": RATE})),
    "links": st.fixed_dictionaries({
        "uplink": st.one_of(st.none(), st.fixed_dictionaries({"rate_mbit": RATE})),
        "per_link": st.lists(st.fixed_dictionaries({
            "node": st.sampled_from(["s0r0a", "agg0-1", "s1h0", "x", ""]),
            "iface": st.sampled_from(["agg0-1", "s0r0a", "r0p0", "h0p0", "peer", "nope"]),
            "rate_mbit": RATE}), max_size=3)}),
}))
def test_fuzzed_fare_specs_are_one_line_spec_errors_or_render(doc):
    """Whatever multipath and per-link values a user writes: a lab that renders, or one SpecError line."""
    from hpnlab.generate.render import render
    from hpnlab.model.topology import build

    data = {"name": "fz", "segments": 2, "hosts_per_segment": 1, "rails": 1,
            **{k: v for k, v in doc.items() if v is not None}}
    try:
        files = render(build(parse_spec(data)))
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) < 400 and "spec" in str(e)
    else:
        assert "agg0-0/frr.conf" in files


def test_bad_fare_input_on_the_command_line_is_exit_2(tmp_path):
    p = tmp_path / "f.yml"
    p.write_text("name: f\nlinks: {uplink: {rate_mbit: 20}, per_link: [{node: s0r0a, iface: agg9-9, rate_mbit: 10}]}\n"
                 "multipath: {mode: fare}\n")
    r = subprocess.run([sys.executable, "-m", "hpnlab", "generate", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "links.per_link.0" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_per_link_rates_outside_bgp_range_are_refused_only_on_uplinks():
    """FARE carries uplink rates in BGP (1..25600 Mbit/s); a slow access link is no concern of it."""
    from hpnlab.generate.render import render
    from hpnlab.model.topology import build

    def with_link(iface):
        links = {"uplink": {"rate_mbit": 20}, "access": {"rate_mbit": 20},
                 "per_link": [{"node": "s0r0a", "iface": iface, "rate_mbit": 0.5}]}
        return render(build(parse_spec({**BASE, "links": links})))

    assert "s0r0a/node.json" in with_link("h0p0")
    with pytest.raises(SpecError, match=r"'links.per_link.0.rate_mbit': 0.5 .*1..25600"):
        with_link("agg0-1")
