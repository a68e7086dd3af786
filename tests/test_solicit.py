"""Router Solicitations as the lab sends them (hpnlab.node.agents.solicit): the bytes as scapy decodes them, and,
as root, one sent from a namespace as it arrives at the other end of a veth; and the deploy's wait for the
ToRs to learn their aggs' addresses before it lets the aggs learn theirs (Runtime.open_fabric)."""

import os
import select
import socket
import subprocess
import time
import uuid

import pytest
from scapy.layers.inet6 import ICMPv6ND_RS, IPv6
from scapy.layers.l2 import Ether

from hpnlab.node.agents import solicit


def test_the_solicitation_is_an_icmpv6_router_solicitation():
    rs = ICMPv6ND_RS(solicit.RS)
    assert rs.type == 133 and rs.code == 0 and rs.res == 0 and len(solicit.RS) == 8


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_a_solicitation_leaves_the_namespace_for_all_routers_with_hop_limit_255():
    from hpnlab.node import nsenter

    a, b = f"rs{uuid.uuid4().hex[:6]}a", f"rs{uuid.uuid4().hex[:6]}b"
    try:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "link", "add", "x0", "netns", a, "type", "veth", "peer", "name", "y0", "netns", b],
                       check=True)
        for ns, ifc in ((a, "x0"), (b, "y0")):
            # routers, as in a lab: the kernel sends no solicitation of its own
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{ifc}.accept_dad=0",
                            "net.ipv6.conf.all.forwarding=1"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", ifc, "up"], check=True)
        time.sleep(0.2)  # the link-local address the solicitation leaves from
        with nsenter.entered(f"/run/netns/{b}"):  # every frame that arrives at the far end
            rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86DD))
            rx.bind(("y0", 0))
        with rx:
            assert list(solicit.solicit(f"/run/netns/{a}", ["x0", "nosuch0"])) == ["nosuch0"]
            got = None
            while got is None and select.select([rx], [], [], 2)[0]:
                frame, (_ifc, _proto, pkttype, *_rest) = rx.recvfrom(2048)
                pkt = Ether(frame)
                if pkttype != socket.PACKET_OUTGOING and pkt.haslayer(ICMPv6ND_RS):
                    got = pkt
        assert got is not None, "no Router Solicitation arrived at the other end"
        ip6 = got[IPv6]
        assert ip6.dst == solicit.ALL_ROUTERS and ip6.hlim == 255 and ip6.src.startswith("fe80::")
        assert len(bytes(got[ICMPv6ND_RS])) == len(solicit.RS)  # ours: no options
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_the_wait_for_tors_to_learn_their_aggs_ends_when_they_know_or_at_its_deadline():
    from hpnlab.runtime.base import Runtime

    class Fake:
        fabric_learn_timeout = 0.2
        asked = 0

        def daemon_json(self, node, daemon, command, timeout=20):
            self.asked += 1
            known = {"agg0-0": {"bgpNeighborAddr": "fe80::1"}, "agg0-1": {"bgpState": "Idle"}}
            if node == "t1" and self.asked > 3:
                known["agg0-1"]["bgpNeighborAddr"] = "fe80::2"
            return known

    fake = Fake()
    t0 = time.monotonic()
    late = Runtime.wait_learnt(fake, ["t1", "t2"], {"t1": ["agg0-0", "agg0-1"], "t2": ["agg0-0", "agg0-1"]})
    assert late == ["t2"] and 0.2 <= time.monotonic() - t0 < 2
    assert Runtime.wait_learnt(fake, ["t1"], {"t1": ["agg0-0"]}) == []
