"""The ARP broadcast module, on the wire: with ``mechanisms.arp_duplication`` off a host's own ARPs leave
one port only, so the ToR on its other port never hears them. This is what the ablation
(experiments/ablations.yml, ``no-arp-duplication``) rests on, checked where it is deterministic: the
ablation's outcome (how long ToR b black-holes a quiet host after its port comes back) also depends on
whether the host's kernel ARPs out that port on its own, which it does only when it sends IP traffic
there; one fresh-clone CI run saw ToR b relearn the host within 1 s, 15 runs here never did."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.lib.labs import owned_lab

LAB = "arpd"
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name=LAB,
                                                   overrides={"mechanisms": {"arp_duplication": False}})]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


def _arp_requests_from(lab, tor: str, iface: str, ip: str, seconds: float) -> int:
    """ARP requests with sender ``ip`` that arrive on the ToR's port within ``seconds`` (tcpdump in the
    ToR's namespace)."""
    argv = lab.runtime.exec_argv(tor, ["timeout", "-s", "INT", f"{seconds:g}", "tcpdump", "-l", "-n", "-i", iface,
                                      "arp and arp[6:2] = 1"])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 10).stdout
    return sum(1 for line in out.splitlines() if re.search(rf"tell {re.escape(ip)}\b", line))


def test_a_hosts_arps_reach_only_the_tor_on_its_first_port(lab):
    """The host agent re-announces itself every second (hpnlab.node.agents.host.ARP_REFRESH): over 3.5 s ToR a
    hears at least two of s1h1's ARPs, ToR b none (with the module on, both hear them: the default lab's
    verify checks that every ToR has every host's /32)."""
    host = "s1h1"
    nic = lab.cfgs[host].nic(0)
    ends = [(lab.cfgs[host].iface(p).peer, lab.cfgs[host].iface(p).peer_iface) for p in nic.ports]
    heard = [_arp_requests_from(lab, tor, ifc, nic.ip, 3.5) for tor, ifc in ends]
    assert heard[0] >= 2 and heard[1] == 0, (ends, heard)
