"""A timer change keeps failover under a bound: BGP keepalive 1 s / hold 3 s with BFD off, Clos tier 2.
The access link of s0h0's port 0 fails; no flow towards s0h0 may stall for more than a second."""

import time

import pytest

pytestmark = pytest.mark.hpnlab(spec="default", overrides={"tier2": "clos", "bfd": {"enabled": False},
                                                           "bgp": {"keepalive": 1, "hold": 3}})


def test_access_link_failure_stays_under_one_second(hpnlab_lab):
    lab = hpnlab_lab
    with lab.probes(src="s1h0", dst="s0h0", rail=0, flows=32, rate=250) as p:
        with lab.fault("link-down", node="s0h0", iface="r0p0"):
            # ToR a's agent drops the host's /32 from its host table (10); the aggs then use ToR b
            lab.wait_for(lambda: "10.0.0.2 " not in lab.exec("s0r0a", "ip", "route", "show", "table", "10").stdout,
                         timeout=5)
            time.sleep(1.0)  # the rest of the outage window
    assert p.result.recovered and p.result.blackholed_flows == 0
    p.result.assert_disruption(max_gap_ms=1000, allowed_disruptions=1)
