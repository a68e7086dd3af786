"""A lab with its timers dilated (spec time_dilation 10) runs them on the wire: FRR's BGP and BFD timers
ten times the production ones, and the agents' LACP speaking ten times less often, while the lab comes up
and verifies as a 1:1 one does. results/time-dilation reads figures back from such labs; this checks that
the factor is what ran, not only what was rendered (tests/topology/expected/dilated)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpnlab.model.spec import load_spec
from tests.lib.labs import owned_lab

LAB = "dila"
K = 10
# kernel: the stock-kernel VM runs it too, where the kernel has bonding and host_driver auto would take the
# bond; dilated, it must take the userspace agent (the bond's LACP timers are fixed)
pytestmark = [pytest.mark.root, pytest.mark.kernel, pytest.mark.hpnlab(spec="default", name=LAB, overrides={
    "segments": 1, "hosts_per_segment": 1, "aggs_per_plane": 1, "time_dilation": K})]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


def test_frr_runs_bgp_and_bfd_timers_k_times_the_production_ones(lab):
    assert lab.runtime.state.data.host_driver == "userspace"  # also where the kernel has bonding
    # the spec's timers as this lab read them: examples/default.yml (1 s / 3 s, BFD 100 ms x 3), or what
    # HPNLAB_SPEC_OVERRIDES made of them (the VMs under TCG run BFD at 1000 ms)
    sp = load_spec()
    peers = lab.vtysh("s0r0a", "show bgp neighbors json") or {}
    assert peers, "s0r0a's bgpd gave no neighbours"
    for name, p in peers.items():
        assert (p["bgpTimerKeepAliveIntervalMsecs"], p["bgpTimerHoldTimeMsecs"]) == \
            (1000 * sp.bgp.keepalive * K, 1000 * sp.bgp.hold * K), name
    bfd = lab.wait_for(lambda: [p for p in lab.vtysh("s0r0a", "show bfd peers json") or [] if p.get("status") == "up"]
                       or None, timeout=30, what="s0r0a's BFD sessions up")
    ms = sp.bfd.interval_ms * K
    assert {(p["transmit-interval"], p["receive-interval"], p["detect-multiplier"]) for p in bfd} == \
        {(ms, ms, sp.bfd.multiplier)}


def test_the_agents_lacp_speaks_k_times_less_often_and_the_ports_stay_in(lab):
    """LACP fast at 1:1 sends a PDU a second on every port; dilated by 10, one every 10 s. Over 12 s each
    port sends one or two (an NTT, a change to announce, may add one), where 1:1 would have sent ~12, and
    every port stays collecting and distributing: the 30 s timeout holds a partner heard every 10 s."""
    def tx() -> dict[str, tuple[int, str]]:
        out = {}
        for node in ("s0h0", "s0r0a", "s0r0b"):
            st = lab.runtime.read_status(node) or {}
            for p in st.get("ports") or [q for nic in st.get("nics", []) for q in nic["ports"]]:
                out[f"{node}:{p['iface']}"] = (p["tx_count"], p["mux"])
        return out

    before = tx()
    assert len(before) == 6, before  # the host's 2 rails x 2 ports, and their ToR ends on rail 0's pair
    time.sleep(12.0)
    after = tx()
    sent = {port: after[port][0] - before[port][0] for port in before}
    assert all(1 <= n <= 3 for n in sent.values()), sent
    assert {mux for _, mux in after.values()} == {"collecting_distributing"}, after


NEIGH = ("base_reachable_time_ms", "retrans_time_ms", "delay_first_probe_time", "gc_stale_time")


def _undilated(family: str) -> list[int]:
    """What a k = 1 lab's interfaces have: each new device copies the first namespace's neigh.default."""
    return [int(Path(f"/proc/sys/net/{family}/neigh/default/{key}").read_text()) for key in NEIGH]


def _rto_ms(text: str) -> float:
    value = text.split()[0]
    return float(value[:-2]) if value.endswith("ms") else float(value[:-1]) * 1000


def test_the_kernels_neighbour_timers_and_the_hosts_rto_run_k_times_the_undilated_ones(lab):
    """Read back from the namespaces: every interface's ARP timers (and NDP's on a ToR's uplinks) k times
    what a k = 1 lab's interfaces have, and each of the host's routes carrying TCP's minimum RTO k times the
    kernel's 200 ms, locked (so it holds whatever tcp_rto_min_us says)."""
    for node, family, ifaces in (("s0h0", "ipv4", ("r0p0", "r0p1", "r1p0", "r1p1")),
                                 ("s0r0a", "ipv4", ("h0p0", "agg0-0")), ("s0r0a", "ipv6", ("agg0-0",))):
        want = [K * v for v in _undilated(family)]
        for ifc in ifaces:
            keys = [f"net.{family}.neigh.{ifc}.{key}" for key in NEIGH]
            have = [int(x) for x in lab.exec(node, "sysctl", "-n", *keys, check=True).stdout.split()]
            assert have == want, (node, ifc, dict(zip(NEIGH, have)))
    sysctl = lab.exec("s0h0", "sysctl", "-n", "net.ipv4.tcp_rto_min_us").stdout.strip()
    undilated = int(sysctl) / 1000 if sysctl else 200.0  # the kernel's TCP_RTO_MIN where it has no sysctl (< 6.11)
    routes = lab.wait_for(lambda: [r for r in lab.exec("s0h0", "ip", "route", "show", check=True).stdout.splitlines()
                                   if "proto static" in r] or None, timeout=30, what="s0h0's routes")
    assert routes and all(" rto_min lock " in r for r in routes), routes
    assert {_rto_ms(r.split(" rto_min lock ", 1)[1]) for r in routes} == {K * undilated}, routes


def test_the_slip_guard_watches_the_tors_bfd_sessions_both_ways_and_its_lacp_ports(lab):
    """The ToR's agent sees bfdd's packets on its uplink (a capture: both directions) and its host port's
    LACPDUs, with the threshold half the detection time in force (the spec's BFD x 10: 3 x 1 s; LACP 30 s at k = 10)."""
    def watched():
        g = (lab.runtime.read_status("s0r0a") or {}).get("packet_gaps") or {}
        th = g.get("threshold_ms", {})
        return g if {"bfd agg0-0 rx", "bfd agg0-0 tx", "lacp h0p0"} <= set(th) else None

    g = lab.wait_for(watched, timeout=30, what="s0r0a's slip guard watching its BFD session and LACP port")
    sp = load_spec()  # as the lab read it: BFD 100 ms x 3, or HPNLAB_SPEC_OVERRIDES' (1000 ms in the VMs under TCG)
    bfd_half = sp.bfd.interval_ms * sp.bfd.multiplier * K / 2
    assert g["threshold_ms"]["bfd agg0-0 rx"] == g["threshold_ms"]["bfd agg0-0 tx"] == bfd_half
    assert g["threshold_ms"]["lacp h0p0"] == 15000.0
    assert g["packets"] > 0 and all(len(x) == 3 for x in g["long"] + g["open"])
