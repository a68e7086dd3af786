"""multipath.mode spray without root: the spec's checks, what a spraying ToR is rendered with (marks, rules,
tables), the keeper's tables from a main table as ``ip -j route`` prints it, the kernel check, and the
reordering figures from nstat's counters."""

from __future__ import annotations

import json

import pytest

from hpnlab.machine import kernel
from hpnlab.generate import render
from hpnlab.errors import SpecError
from hpnlab.node import plan
from hpnlab.node.agents import spray
from hpnlab.model.spec import parse_spec
from hpnlab.model.topology import build
from hpnlab.traffic.analysis import reorder

TWO_PATHS = {"name": "sp", "hosts_per_segment": 1, "rails": 1, "access": "single-tor", "tier2": "clos",
             "aggs_per_plane": 2, "links": {"uplink": {"rate_mbit": 20}}, "multipath": {"mode": "spray"},
             "tcp_reordering": 127}
# s0r0's main table as FRR 8.4 installs it (an IPv4 route over an IPv6 link-local next hop: zebra's
# 169.254.0.1 onlink), read from a running lab of TWO_PATHS
MAIN = [{"type": "blackhole", "dst": "10.0.0.0/24", "flags": []},
        {"dst": "10.0.0.2", "dev": "h0p0", "protocol": "zebra", "metric": 20, "flags": []},
        {"dst": "10.0.1.0/24", "protocol": "bgp", "metric": 20, "flags": [], "nexthops": [
            {"gateway": "169.254.0.1", "dev": "agg0-0", "weight": 1, "flags": ["onlink"]},
            {"gateway": "169.254.0.1", "dev": "agg0-1", "weight": 1, "flags": ["onlink"]}]},
        {"dst": "10.0.1.2", "protocol": "bgp", "metric": 20, "flags": [], "nexthops": [
            {"gateway": "169.254.0.1", "dev": "agg0-0", "weight": 1, "flags": ["onlink"]},
            {"gateway": "169.254.0.1", "dev": "agg0-1", "weight": 1, "flags": ["onlink"]}]},
        {"dst": "10.255.0.3", "gateway": "169.254.0.1", "dev": "agg0-0", "protocol": "bgp", "metric": 20,
         "flags": ["onlink"]}]


def cfgs(data: dict) -> dict[str, dict]:
    files = render.render(build(parse_spec(data)))
    return {k.split("/")[0]: json.loads(v) for k, v in files.items() if k.endswith("/node.json")}


def test_a_spraying_tor_marks_host_packets_per_uplink_and_looks_them_up_in_that_uplinks_table():
    c = cfgs(TWO_PATHS)
    tor = c["s0r0"]
    assert tor["multipath"] == {"mode": "spray", "uplinks": ["agg0-0", "agg0-1"]}
    assert plan.spray_rules(tor) == ["rule add pref 110 fwmark 101 lookup 101", "rule add pref 111 fwmark 102 lookup 102"]
    lines = plan.ip_batch(tor)
    assert lines.index("rule add pref 100 lookup 10") < lines.index("rule add pref 110 fwmark 101 lookup 101")
    rules = plan.nft_ruleset(tor)
    assert "hook prerouting priority mangle" in rules
    assert 'iifname { "h0p0", "h0p1" } meta mark set numgen inc mod 2 map { 0 : 101, 1 : 102 }' in rules
    # the aggs run no FARE agent and carry no route-maps; the hosts get the reorder tolerance
    assert "multipath" not in c["agg0-0"] and plan.agent_module(c["agg0-0"]) is None
    assert c["s0h0"]["sysctls"]["net.ipv4.tcp_reordering"] == 127


def test_without_the_new_keys_nothing_changes():
    c = cfgs({k: v for k, v in TWO_PATHS.items() if k not in ("multipath", "tcp_reordering")})
    assert "multipath" not in c["s0r0"] and plan.nft_ruleset(c["s0r0"]) is None and plan.spray_rules(c["s0r0"]) == []
    assert "net.ipv4.tcp_reordering" not in c["s0h0"]["sysctls"]


@pytest.mark.parametrize("over, field, words", [
    ({"links": {"offloads": True}}, "links.offloads", "must be an MTU frame"),
    ({"tier3": {}}, "multipath.mode", "two tiers"),
    ({"tcp_reordering": 2}, "tcp_reordering", "greater than or equal to 3"),
])
def test_the_spec_refuses_what_spraying_cannot_mean(over, field, words):
    with pytest.raises(SpecError) as e:
        parse_spec({**TWO_PATHS, **over})
    assert f"'{field}'" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_the_keeper_gives_each_uplink_its_own_next_hop_and_throws_what_it_lacks():
    want = spray.wanted(MAIN, ["agg0-0", "agg0-1"])
    assert want[101]["10.0.1.0/24"] == "10.0.1.0/24 via 169.254.0.1 dev agg0-0 onlink"
    assert want[102]["10.0.1.2/32"] == "10.0.1.2/32 via 169.254.0.1 dev agg0-1 onlink"
    # a prefix bgpd installed through agg0-0 only: agg0-1's table throws it back to the main table
    assert want[101]["10.255.0.3/32"].endswith("dev agg0-0 onlink") and want[102]["10.255.0.3/32"] == "throw 10.255.0.3/32"
    assert "10.0.0.2/32" not in want[101] and "10.0.0.0/24" not in want[101]  # not BGP's: the ToR's own
    # an IPv6 next hop given as RTA_VIA (a kernel route FRR installs without the 169.254.0.1 trick)
    via = [{"dst": "10.0.9.0/24", "protocol": "bgp", "via": {"family": "inet6", "host": "fe80::1"}, "dev": "agg0-1",
            "flags": []}]
    assert spray.wanted(via, ["agg0-0", "agg0-1"])[102]["10.0.9.0/24"] == "10.0.9.0/24 via inet6 fe80::1 dev agg0-1"


def test_a_withdrawn_next_hop_rewrites_only_what_changed():
    ups = ["agg0-0", "agg0-1"]
    have = spray.wanted(MAIN, ups)
    assert spray.batch(have, have) == []
    withdrawn = json.loads(json.dumps(MAIN))
    withdrawn[2]["nexthops"] = withdrawn[2]["nexthops"][:1]  # the far set through agg0-0 only
    gone = [r for r in MAIN if r["dst"] != "10.255.0.3"]
    assert spray.batch(have, spray.wanted(withdrawn, ups)) == ["route replace throw 10.0.1.0/24 table 102"]
    assert spray.batch(have, spray.wanted(gone, ups)) == ["route del 10.255.0.3/32 table 101",
                                                           "route del 10.255.0.3/32 table 102"]


def test_the_kernel_check_refuses_spray_and_reorder_tolerance_where_the_kernel_lacks_them():
    sp = parse_spec(TWO_PATHS)
    have = {k: True for k in kernel.FEATURES}
    assert kernel.assess(sp, have).refusal is None
    a = kernel.assess(sp, {**have, "nft-spray": False})
    assert a.refusal.startswith("spec field 'multipath.mode': 'spray' needs nftables numgen")
    a = kernel.assess(sp, {**have, "tcp-reordering": False})
    assert a.refusal.startswith("spec field 'tcp_reordering'")
    plain = parse_spec({k: v for k, v in TWO_PATHS.items() if k not in ("multipath", "tcp_reordering")})
    assert kernel.assess(plain, {**have, "nft-spray": False, "tcp-reordering": False}).refusal is None


def test_reordering_figures_from_nstat():
    before = reorder.parse_nstat("#kernel\nTcpOutSegs 100 0.0\nTcpRetransSegs 1 0.0\n")
    after = reorder.parse_nstat("#kernel\nTcpOutSegs 10506 0.0\nTcpRetransSegs 669 0.0\nTcpExtTCPDSACKRecv 668 0.0\n"
                                "TcpExtTCPSACKReorder 469 0.0\nTcpExtTCPTSReorder 681 0.0\n")
    rx = ({}, reorder.parse_nstat("TcpExtTCPOFOQueue 1158 0.0\nTcpExtTCPDSACKOldSent 668 0.0\n"))
    f = reorder.figures((before, after), rx)
    assert f == {"out": 10406, "retrans": 668, "spurious": 668, "reorder_events": 1150, "spurious_rtos": 0,
                 "retrans_ppm": 64194, "spurious_pct": 100.0, "ofo": 1158, "dsack_sent": 668}


def test_spray_weighted_sprays_each_destination_in_the_shares_of_fares_weights():
    c = cfgs({**TWO_PATHS, "multipath": {"mode": "spray-weighted"}})
    assert c["s0r0"]["multipath"]["mode"] == "spray-weighted"
    assert c["agg0-0"]["multipath"]["mode"] == "fare" and plan.agent_module(c["agg0-0"]) == "hpnlab.node.agents.fare"
    main = json.loads(json.dumps(MAIN))
    main[2]["nexthops"][0]["weight"], main[2]["nexthops"][1]["weight"] = 80, 20  # FRR 8.4: 20 vs 5 Mbit/s
    rules = spray.weighted_rules(main, ["agg0-0", "agg0-1"], ["h0p0", "h0p1"])
    assert rules == ['iifname { "h0p0", "h0p1" } ip daddr 10.0.1.0/24 meta mark set numgen inc mod 5 '
                     'map { 0-3 : 101, 4 : 102 } accept',
                     'iifname { "h0p0", "h0p1" } meta mark set numgen inc mod 2 map { 0 : 101, 1 : 102 }']
    # equal weights need no rule of their own; the plain rule is the one the node plan installs
    assert spray.weighted_rules(MAIN, ["agg0-0", "agg0-1"], ["h0p0", "h0p1"]) == [rules[-1]]
    assert rules[-1] in plan.nft_ruleset(c["s0r0"])
    with pytest.raises(SpecError) as e:
        parse_spec({**TWO_PATHS, "multipath": {"mode": "spray-weighted"}, "links": {}})
    assert "links.uplink" in str(e.value)


def test_reordering_figures_of_a_run_sum_every_host():
    b = {"h1": {"TcpOutSegs": 10}, "h2": {"TcpOutSegs": 5, "TcpExtTCPOFOQueue": 1}}
    a = {"h1": {"TcpOutSegs": 110, "TcpRetransSegs": 2, "TcpExtTCPDSACKRecv": 1},
         "h2": {"TcpOutSegs": 105, "TcpExtTCPOFOQueue": 9, "TcpExtTCPTSReorder": 3}}
    f = reorder.of_run({"before": b, "after": a})
    assert f["out"] == 200 and f["retrans"] == 2 and f["spurious"] == 1 and f["ofo"] == 8
    assert f["reorder_events"] == 3 and f["retrans_ppm"] == 10000 and f["hosts"] == 2
    assert reorder.of_run({}) is None
    agg = reorder.aggregate([{"tcp": f}, {"tcp": {**f, "retrans": 4}}, {}])
    assert agg["retrans"] == {"n": 2, "min": 2, "median": 3.0, "max": 4}


def test_flowlet_keeps_a_flow_on_its_uplink_until_a_gap_and_nft_takes_the_ruleset():
    c = cfgs({**TWO_PATHS, "multipath": {"mode": "flowlet", "flowlet_gap_ms": 8}})
    assert c["s0r0"]["multipath"]["flowlet_gap_ms"] == 8
    rules = plan.nft_ruleset(c["s0r0"])
    assert rules.count("flags dynamic, timeout; timeout 8ms;") == 2
    # a known flow keeps its uplink (and refreshes its timeout) before the turn-taking rule sees it
    keep = rules.index("@flowlet1 update @flowlet1")
    turn = rules.index("meta mark set numgen inc mod 2")
    join = rules.index("meta mark 102 add @flowlet1")
    assert keep < turn < join


def test_dlb_shares_follow_the_queues_and_never_starve_a_live_uplink():
    lim = [262144, 262144]
    assert spray.dlb_shares([20, 20], [0, 0], lim, [True, True]) == [10, 10]
    assert spray.dlb_shares([20, 5], [0, 0], lim, [True, True]) == [16, 4]  # by capacity when idle
    assert spray.dlb_shares([20, 20], [0, 196608], lim, [True, True]) == [16, 4]  # 3/4 full: a quarter
    assert spray.dlb_shares([20, 20], [0, 262144], lim, [True, True]) == [19, 1]  # full: one slot still
    assert spray.dlb_shares([20, 20], [0, 0], lim, [True, False]) == [20, 0]  # no carrier: none
    c = cfgs({**TWO_PATHS, "multipath": {"mode": "dlb"}})
    assert c["s0r0"]["multipath"]["dlb_interval_ms"] == 50
