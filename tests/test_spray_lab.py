"""Per-packet spraying on the wire (spec ``multipath.mode: spray``) on a two-path lab: one host per segment,
one ToR each, two aggs (Clos), 20 Mbit/s uplinks and 50 Mbit/s host links, hosts with tcp_reordering 127.

One TCP flow from s0h0 to s1h0: s0r0 sends its packets alternately over agg0-0 and agg0-1 (the uplinks'
packet counters within 10 % of each other), and the flow's goodput exceeds one path's 20 Mbit/s, which
per-flow hashing cannot (one flow, one path). The sender's reordering figures (hpnlab.traffic.analysis.reorder)
are printed, not judged beyond being there: they are what spraying costs, and results/dlb reports them.
Then the per-uplink tables follow BGP: a session shut on s0r0 turns that uplink's routes into throws
(its packets take the main table's surviving next hop) and the session's return brings them back.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from hpnlab.machine.proc import run
from hpnlab.traffic.analysis import reorder
from tests.lib.labs import owned_lab

PATH_MBIT = 20
TWO_PATHS = {"hosts_per_segment": 1, "rails": 1, "access": "single-tor", "tier2": "clos", "aggs_per_plane": 2,
             "links": {"access": {"rate_mbit": 50}, "uplink": {"rate_mbit": PATH_MBIT}},
             "multipath": {"mode": "spray"}, "tcp_reordering": 127}
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name="i40spray", overrides=TWO_PATHS)]
FAR = "10.0.1.0/24"  # segment 1's set, seen from s0r0
NEAR = "10.0.0.0/24"  # segment 0's set, seen from s1r0
SIZE = 12_000_000  # ~2.7 s sprayed, ~4.8 s on one path


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


def tx_packets(lab, node: str, ifaces: list[str]) -> dict[str, int]:
    out = {}
    for i in ifaces:
        r = lab.exec(node, "cat", f"/sys/class/net/{i}/statistics/tx_packets", check=True)
        out[i] = int(r.stdout)
    return out


def table(lab, node: str, t: int) -> str:
    return lab.exec(node, "ip", "-4", "route", "show", "table", str(t), check=True).stdout


def nstat(lab, node: str) -> dict[str, int]:
    return reorder.parse_nstat(lab.exec(node, *reorder.NSTAT_ARGV, check=True).stdout)


def test_one_flow_crosses_both_paths_evenly_and_beats_one_path(lab, tmp_path):
    ups = lab.cfgs["s0r0"].multipath["uplinks"]
    assert ups == ["agg0-0", "agg0-1"]
    # the keeper has filled both uplinks' tables with the far set's route through their own agg
    lab.wait_for(lambda: all(f"{FAR} via" in table(lab, "s0r0", 101 + k) and ups[k] in table(lab, "s0r0", 101 + k)
                             for k in range(2)), timeout=20, what="s0r0's per-uplink tables hold the far set")
    src, dst = lab.host_ip("s0h0"), lab.host_ip("s1h0")
    serve = lab.spawn("s1h0", [sys.executable, "-m", "hpnlab.node.programs.elephant", "serve", "--bind", dst, "--port", "5300",
                               "--duration", "40", "--out", str(tmp_path / "serve.json")], tmp_path / "serve.log")
    try:
        # the receiver listens before the sender connects
        lab.wait_for(lambda: ":5300" in lab.exec("s1h0", "ss", "-Hltn").stdout, timeout=10, what="receiver listening")
        before = tx_packets(lab, "s0r0", ups)
        snd0, rcv0 = nstat(lab, "s0h0"), nstat(lab, "s1h0")
        r = lab.exec("s0h0", sys.executable, "-m", "hpnlab.node.programs.elephant", "send", "--src", src, "--flows", f"{dst}:20001",
                     "--size", str(SIZE), "--duration", "30", "--out", "-", timeout=45, check=True)
        after = tx_packets(lab, "s0r0", ups)
        fig = reorder.figures((snd0, nstat(lab, "s0h0")), (rcv0, nstat(lab, "s1h0")))
    finally:
        serve.terminate()
        serve.wait(10)
    rep = json.loads(r.stdout)
    assert rep["complete"], rep
    mbit = SIZE * 8 / rep["completion_s"] / 1e6
    per = {i: after[i] - before[i] for i in ups}
    skew = abs(per[ups[0]] - per[ups[1]]) / max(per.values())
    print(f"spray: {mbit:.1f} Mbit/s in {rep['completion_s']:.2f} s; s0r0's uplinks sent {per} packets "
          f"(skew {100 * skew:.2f} %); reordering {fig}")
    assert min(per.values()) > SIZE / 1500 / 2 * 0.9, per  # each path carried about half of the flow
    assert skew <= 0.10, per
    assert mbit > PATH_MBIT, f"{mbit:.1f} Mbit/s: no more than one {PATH_MBIT} Mbit/s path"
    assert fig["out"] > SIZE / 1500 * 0.9 and fig["ofo"] > 0, fig  # the receiver saw the spray's reordering


def vtysh(lab, node: str, commands: list[str]) -> None:
    run(lab.runtime.vtysh_argv(node, commands), timeout=20, what=f"{node}: vtysh")


def test_per_uplink_tables_follow_a_withdrawn_next_hop(lab):
    asn = lab.cfgs["s0r0"].asn
    shut = ["configure terminal", f"router bgp {asn}", "neighbor agg0-1 shutdown"]
    vtysh(lab, "s0r0", shut)
    try:
        t = time.monotonic()
        lab.wait_for(lambda: f"throw {FAR}" in table(lab, "s0r0", 102), timeout=15,
                     what="agg0-1's table throws the far set once its session is down")
        print(f"agg0-1's table followed the withdrawal in {time.monotonic() - t:.2f} s (polled); keeper "
              f"{lab.runtime.read_status('s0r0').get('spray')}")
        assert f"{FAR} via" in table(lab, "s0r0", 101)
        # the replies: agg0-1 lost segment 0's routes with the session, and s1r0 learns that from agg0-1's
        # withdrawal (BGP's own convergence, which hashing waits for too); polled, then no packet may be lost
        lab.wait_for(lambda: f"throw {NEAR}" in table(lab, "s1r0", 102), timeout=15,
                     what="s1r0's agg0-1 table throws segment 0's set once agg0-1 withdrew it")
        # every packet reaches the far host: the ones marked for agg0-1 take the main table's agg0-0
        r = lab.exec("s0h0", "ping", "-c", "20", "-i", "0.05", "-W", "1", lab.host_ip("s1h0"))
        assert " 0% packet loss" in r.stdout, r.stdout
    finally:
        vtysh(lab, "s0r0", ["configure terminal", f"router bgp {asn}", "no neighbor agg0-1 shutdown"])
    lab.wait_for(lambda: f"{FAR} via" in table(lab, "s0r0", 102), timeout=30,
                 what="agg0-1's table holds the far set again after the session's return")
    lab.wait_healthy(60)
