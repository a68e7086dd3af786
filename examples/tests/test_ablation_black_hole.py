"""An ablation shows the black hole it should: without ARP -> /32 host routes in BGP (Clos tier 2), the
aggs keep sending s0h0's traffic to ToR a after its link to s0h0 died, and ToR a drops it."""

import time

import pytest

pytestmark = pytest.mark.hpnlab(spec="default", overrides={"tier2": "clos", "mechanisms": {"host_routes": False}})


def test_without_host_routes_a_dead_port_black_holes_flows(hpnlab_lab):
    lab = hpnlab_lab
    with lab.probes(src="s1h0", dst="s0h0", rail=0, flows=32, rate=250) as p:
        with lab.fault("link-down", node="s0h0", iface="r0p0"):
            time.sleep(2.0)  # the fault's duration: long enough for any routing to have reacted
    # the flows the aggs hash onto ToR a stay silent until the repair
    assert p.result.blackholed_flows > 0, p.result.to_dict()
    with pytest.raises(AssertionError):
        p.result.assert_disruption(max_gap_ms=1000)
