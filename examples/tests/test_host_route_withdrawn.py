"""The /32 of a host with one dead port is withdrawn everywhere it must be, and comes back.

Dual-plane: port 0 of s0h0 goes to ToR s0r0a (plane 0). With that link down, ToR a withdraws 10.0.0.2/32
and no plane-0 agg may keep it; plane 1 still reaches the host through ToR b."""

import pytest

pytestmark = pytest.mark.hpnlab(spec="default")
HOST = "10.0.0.2/32"


def test_dead_port_withdraws_the_host_route(hpnlab_lab):
    lab = hpnlab_lab
    plane0 = [r for r in lab.routers if r.startswith("agg0-")]
    plane1 = [r for r in lab.routers if r.startswith("agg1-")]
    assert all(HOST in lab.routes(a) for a in plane0 + plane1)
    with lab.fault("link-down", node="s0h0", iface="r0p0"):
        lab.wait_for(lambda: all(HOST not in lab.routes(a) for a in plane0), timeout=5, what="plane 0 withdrawn")
        bgp = lab.vtysh("s0r0a", "show bgp ipv4 unicast json")["routes"]
        assert HOST not in bgp  # not in ToR a's BGP table either
        assert all(HOST in lab.routes(a) for a in plane1)
    lab.wait_for(lambda: all(HOST in lab.routes(a) for a in plane0), timeout=10, what="plane 0 relearned")
