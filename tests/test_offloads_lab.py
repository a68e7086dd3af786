"""Impairments act on MTU frames (issue 35, point 5): with the lab's default ``links.offloads: false`` a TCP
stream leaves a host as frames of at most the MTU and crosses the fabric so, so ``impair loss=1`` on one
port drops 1 % of the frames that cross it, as a switch port would, not one 64 KB super-packet (~45 frames)
in a hundred."""

from __future__ import annotations

import json
import subprocess

import pytest

from hpnlab.node.plan import MTU_FRAME
from tests.lib.labs import owned_lab

LAB = "mtul"
SRC, DST, PORT = "s0h0", "s1h0", "r0p0"  # r0p0: rail 0, towards ToR a (plane 0), at both hosts
TCP_PORT = 5233
COUNT = "hpnlab_test_count"  # our counters' table, in the two namespaces that count
# The userspace host driver on every kernel: the host's route is the kernel's multipath route, so ``ip route
# get`` names the port a flow's hash picks (a kernel bond picks its member itself, unseen).
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name=LAB, overrides={"host_driver": "userspace"})]


@pytest.fixture(scope="module")
def lab(request):
    yield from owned_lab(request.getfixturevalue("hpnlab_lab"))


def counters(lab, node: str) -> dict[str, dict]:
    """Every named counter of our table in the node: name -> {packets, bytes}."""
    out = json.loads(lab.exec(node, "nft", "-j", "list", "counters", "table", "netdev", COUNT, check=True).stdout)
    return {c["counter"]["name"]: c["counter"] for c in out["nftables"] if "counter" in c}


def count(lab, node: str, hook: str, dev: str, flow: str) -> None:
    """Counters on one hook of one interface: the stream's frames, and those longer than an MTU frame
    (``meta length`` is the whole frame on egress, the IP packet on ingress: a super-packet exceeds both).
    Priority -500: before the impairment's loss chain (-400) on the same hook."""
    rules = (f"table netdev {COUNT} {{\n  counter frames {{}}\n  counter oversize {{}}\n"
             f"  chain c {{\n    type filter hook {hook} device \"{dev}\" priority -500; policy accept;\n"
             f"    {flow} counter name frames\n    {flow} meta length > {MTU_FRAME} counter name oversize\n  }}\n}}\n")
    subprocess.run(lab.runtime.exec_argv(node, ["nft", "-f", "-"]), input=rules, text=True, check=True,
                   capture_output=True)


def source_port_via(lab, port: str, src_ip: str, dst_ip: str) -> int:
    """A TCP source port whose flow to dst_ip the host's multipath route sends out of ``port`` (the kernel's
    own hash, asked with ``ip route get``; protocol 6 by number: a machine without /etc/protocols knows no
    "tcp")."""
    for sport in range(40000, 40064):
        r = lab.exec(SRC, "ip", "-j", "route", "get", dst_ip, "from", src_ip, "ipproto", "6", "sport", str(sport),
                     "dport", str(TCP_PORT), check=True)
        if json.loads(r.stdout)[0]["dev"] == port:
            return sport
    raise AssertionError(f"no source port in 40000-40063 hashes onto {SRC}:{port}")


def test_one_percent_loss_on_a_port_drops_one_percent_of_its_mtu_frames(lab):
    """``impair loss=1`` on the ToR port facing the receiver (s1r0a's port to s1h0:r0p0) and one TCP stream of
    100 MB through it (about 72,000 frames): s0h0 sends it out of r0p0 (a source port its hash puts there), so
    it crosses ToR a, a plane-0 agg and s1r0a. Counted by nftables: the stream's frames entering the ToR port's
    egress before the loss rule, and those arriving at the receiver's port. The share lost must be 1.0 +- 0.3 %:
    with n >= 20,000 frames the binomial standard deviation is at most 0.07 points, so the band is over 4 of
    them wide each side. No frame may exceed the MTU, and the sender's retransmits must be about the frames
    lost (dropping 64 KB super-packets, it resent ~45 segments per drop)."""
    tor, tor_port = lab.cfgs[DST].iface(PORT).peer, lab.cfgs[DST].iface(PORT).peer_iface
    src_ip, dst_ip = lab.host_ip(SRC, 0), lab.host_ip(DST, 0)
    flow = f"ip saddr {src_ip} ip daddr {dst_ip} tcp dport {TCP_PORT}"
    count(lab, tor, "egress", tor_port, flow)
    count(lab, DST, "ingress", PORT, flow)
    srv = subprocess.Popen(lab.runtime.exec_argv(DST, ["iperf3", "-s", "-1", "-B", dst_ip, "-p", str(TCP_PORT)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lab.impair(tor, tor_port, loss="1")
        lab.wait_for(lambda: lab.exec(DST, "ss", "-Hltn", f"sport = :{TCP_PORT}").stdout.strip(), timeout=10)
        sport = source_port_via(lab, PORT, src_ip, dst_ip)
        r = lab.exec(SRC, "iperf3", "-c", dst_ip, "-B", src_ip, "--cport", str(sport), "-p", str(TCP_PORT),
                     "-C", "cubic", "-n", "100M", "-J", timeout=300, check=True)
        sent, got = counters(lab, tor), counters(lab, DST)
    finally:
        lab.clear_impairments(tor)
        srv.kill()
        srv.wait()
        for node in (tor, DST):
            lab.exec(node, "nft", "delete", "table", "netdev", COUNT)
    retrans = json.loads(r.stdout)["end"]["sum_sent"]["retransmits"]
    n, arrived = sent["frames"]["packets"], got["frames"]["packets"]
    lost = n - arrived
    pct = 100.0 * lost / max(n, 1)
    print(f"{tor}:{tor_port} loss=1: {n} frames of the stream in ({sent['frames']['bytes'] / max(n, 1):.0f} B each "
          f"on average, {sent['oversize']['packets']} above {MTU_FRAME} B), {arrived} arrived at {DST}:{PORT}: "
          f"{lost} lost, {pct:.3f} %; the sender retransmitted {retrans} segments")
    assert n >= 20_000, f"only {n} frames of the stream reached {tor}:{tor_port}: too few for a +-0.3 % bound"
    assert sent["oversize"]["packets"] == 0 and got["oversize"]["packets"] == 0, (sent, got)
    assert 0.7 <= pct <= 1.3, f"{pct:.3f} % of {n} frames lost with loss=1"
    assert 0.5 * lost <= retrans <= 2 * lost, f"{retrans} segments retransmitted for {lost} frames lost"
