"""The access design with the hosts on the kernel's own 802.3ad bond (``host_driver: bond``), and netem
delay: what stock kernels (Debian 12, Ubuntu) have and this project's CI kernel lacks. These run in the
VMs (vm/run.py, ``-m kernel``); on a kernel without bonding or netem they skip, saying so."""

from __future__ import annotations

import statistics

import pytest

from hpnlab.machine import kernel
from hpnlab.machine.nodesetup import parse_bonding
from tests.lib.labs import owned_lab, settle

LAB = "kb"
VMAC = "00:00:5e:00:01:01"
pytestmark = [pytest.mark.root, pytest.mark.kernel,
              pytest.mark.hpnlab(spec="default", name=LAB, overrides={"host_driver": "bond"})]


def _need(feature: str) -> None:
    if not kernel.probe(feature):
        why = f"this kernel ({kernel.release()}) has no {kernel.FEATURES[feature].what}; the VMs (vm/run.py) run this"
        print(f"SKIP: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def lab(request):
    _need("bonding")  # before the plugin's lab: its spec asks for the bond, which this kernel would refuse
    yield from owned_lab(request.getfixturevalue("hpnlab_lab"))


def bonding(lab, host: str, rail: int) -> list[dict]:
    r = lab.exec(host, "cat", f"/proc/net/bonding/bond{rail}", check=True)
    return parse_bonding(r.stdout)


def tor_neighbours(lab, tor: str) -> set[str]:
    r = lab.exec(tor, "ip", "-4", "neigh", "show", "nud", "reachable", "nud", "stale", "nud", "delay", "nud", "probe")
    return {ln.split()[0] for ln in r.stdout.splitlines() if ln.strip()}


def test_each_bond_aggregates_both_tors_of_its_set_as_one_partner(lab):
    assert lab.runtime.state.data.host_driver == "bond"
    for h in lab.hosts:
        for rail in range(2):
            slaves = bonding(lab, h, rail)
            assert len(slaves) == 2, slaves
            assert {s["partner_system"] for s in slaves} == {VMAC}, slaves
            assert len({s["aggregator"] for s in slaves}) == 1, f"{h} bond{rail}: two aggregators {slaves}"
            ports = sorted(s["partner_port"] for s in slaves)
            assert ports[0] != ports[1] and ports[0] > 256, ports  # port + the ToR's offset (300 / 600)


def test_both_tors_of_a_set_learn_every_host_and_every_agg_has_every_host_route(lab):
    """The bond path used to send a host's ARP out of one port: the other ToR never learnt it.

    Polled, not read once: the first test of this module can end within a second of the lab's bring-up, and
    under the VM's emulated CPU (QEMU TCG) the agents' once-a-second announcements run seconds late. What a
    ToR lacked and which checks failed before all held is printed (-rP shows it), so a transient stays
    visible; a ToR that never learns a host, or a check that never passes, fails the test."""
    def tors_lacking() -> dict:
        miss = {f"s{seg}r{rail}{side}": sorted(want - tor_neighbours(lab, f"s{seg}r{rail}{side}"))
                for seg in range(2) for rail in range(2)
                for want in [{lab.host_ip(f"s{seg}h{i}", rail) for i in range(2)}] for side in "ab"}
        return {t: m for t, m in miss.items() if m}

    settle(tors_lacking, 30, "both ToRs of every set know its hosts")
    settle(lambda: {c["name"]: c["detail"] for c in lab.verify() if not c["ok"]}, 60, "every verify check passes",
           interval=1)


def test_a_dead_bond_member_withdraws_its_host_route_and_the_repair_restores_it(lab):
    ip = lab.host_ip("s0h1", 0)
    assert lab.wait_for(lambda: f"{ip}/32" in lab.routes("agg0-0"), timeout=10)
    lab.exec("s0h1", "ip", "link", "set", "r0p0", "down", check=True)
    try:
        assert lab.wait_for(lambda: f"{ip}/32" not in lab.routes("agg0-0"), timeout=5), "/32 not withdrawn from plane 0"
        assert f"{ip}/32" in lab.routes("agg1-0"), "plane 1 keeps it via ToR b"
        slaves = {s["slave"]: s for s in bonding(lab, "s0h1", 0)}
        assert slaves["r0p0"]["mii"] == "down" and slaves["r0p1"]["mii"] == "up", slaves
    finally:
        lab.exec("s0h1", "ip", "link", "set", "r0p0", "up", check=True)
    assert lab.wait_for(lambda: f"{ip}/32" in lab.routes("agg0-0"), timeout=30), "/32 not back after the repair"
    lab.wait_healthy(60)


def _rtt_ms(lab, src: str, dst_ip: str, src_ip: str) -> float:
    r = lab.exec(src, "ping", "-n", "-q", "-c", "10", "-i", "0.2", "-I", src_ip, dst_ip, timeout=30)
    rtts = [float(x) for x in r.stdout.rsplit("=", 1)[-1].split("/")[:3]] if "min/avg" in r.stdout else []
    assert rtts, r.stdout + r.stderr
    return rtts[1]  # avg


def test_impair_delay_adds_netem_delay_on_both_members(lab):
    """`impair delay=10ms` on both ports of a NIC: every packet the host sends waits 10 ms."""
    _need("netem")
    src, dst = "s0h0", "s1h0"
    src_ip, dst_ip = lab.host_ip(src, 0), lab.host_ip(dst, 0)
    before = statistics.median(_rtt_ms(lab, src, dst_ip, src_ip) for _ in range(3))
    try:
        for port in ("r0p0", "r0p1"):
            lab.impair(src, port, delay="10ms")
        after = statistics.median(_rtt_ms(lab, src, dst_ip, src_ip) for _ in range(3))
        qd = lab.exec(src, "tc", "qdisc", "show", "dev", "r0p0").stdout
        assert "netem" in qd and "delay 10ms" in qd, qd
    finally:
        lab.clear_impairments(src)
    print(f"ping {src} -> {dst}: {before:.2f} ms, with delay=10ms {after:.2f} ms")
    assert 7.0 <= after - before <= 25.0, (before, after)
    assert "netem" not in lab.exec(src, "tc", "qdisc", "show", "dev", "r0p0").stdout
