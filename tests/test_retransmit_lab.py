"""The hosts' TCP minimum RTO (spec tcp_rto_min_ms) on a real lab: set on every host and on no router, and
it changes what a short loss costs. A 0.15 s drop of everything a host sends (one-way, the links stay up,
so no LACP or route churn) stalls a TCP stream until its first retransmission gets through: with the
kernel's 200 ms floor that is 0.2-0.6 s after the drop began, with tcp_rto_min_ms: 1000 it cannot be less
than 1 s (the timer is at least the floor)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from hpnlab.traffic.analysis.retransmit import parse_ss
from tests.lib.labs import owned_lab

LAB = "rto"
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name=LAB, overrides={
    "access": "single-tor", "tier2": "clos", "tcp_rto_min_ms": 1000})]
PORT = 18100

# Runs in the receiving host: every chunk's arrival time, written as JSON when the sender closes.
RECEIVER = """
import json, socket, sys, time
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(1); ls.settimeout(30)
c, _ = ls.accept(); c.settimeout(30); times = []
while True:
    d = c.recv(65536)
    if not d:
        break
    times.append(time.time())
json.dump(times, sys.stdout)
"""
# Runs in the sending host: 1000 bytes every 5 ms for the given seconds.
SENDER = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    s.sendall(b"x" * 1000); time.sleep(0.005)
s.close()
"""


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


def _sysctl(lab, node: str) -> int:
    return int(lab.exec(node, "cat", "/proc/sys/net/ipv4/tcp_rto_min_us", check=True).stdout)


def test_every_host_has_the_floor_and_no_router_does(lab):
    assert {h: _sysctl(lab, h) for h in lab.hosts} == {h: 1_000_000 for h in lab.hosts}
    assert _sysctl(lab, "s0r0") == 200_000 and _sysctl(lab, "agg0-0") == 200_000


def test_a_short_loss_stalls_the_stream_for_at_least_the_floor(lab, tmp_path):
    dst = lab.cfgs["s1h0"].nic(0).ip
    rx = lab.spawn("s1h0", [sys.executable, "-c", RECEIVER, dst, str(PORT)], tmp_path / "rx.log", tmp_path / "rx.json")
    lab.wait_for(lambda: f":{PORT}" in lab.exec("s1h0", "ss", "-ltnH").stdout, timeout=10)
    tx = lab.spawn("s0h0", [sys.executable, "-c", SENDER, dst, str(PORT), "4"], tmp_path / "tx.log")
    time.sleep(1.5)  # a steady stream first (its RTT is well under a millisecond: the RTO is the floor)
    rto = lab.exec("s0h0", "ss", "-tinH", "state", "established", f"( dport = :{PORT} )").stdout
    with lab.fault("one-way", node="s0h0", iface=["r0p0", "r0p1"]) as rec:
        time.sleep(0.15)
    assert tx.wait(30) == 0, (tmp_path / "tx.log").read_text()
    assert rx.wait(30) == 0, (tmp_path / "rx.log").read_text()
    times = json.loads((tmp_path / "rx.json").read_text())
    gaps = sorted(((b - a, a) for a, b in zip(times, times[1:])), reverse=True)
    longest, began = gaps[0]
    print(f"ss before the drop: {rto.strip()}; drop {rec['applied']:.3f}-{rec['reverted']:.3f}; "
          f"longest gap {longest * 1000:.0f} ms from {began - rec['applied']:+.3f} s")
    conns = parse_ss(rto)
    assert conns and all(c["rto_ms"] >= 1000 for c in conns), rto
    # the stall is the drop's: it began within the drop (the last chunk through before it)
    assert rec["applied"] - 0.5 <= began <= rec["reverted"], (began, rec)
    # with the kernel's 200 ms floor this gap is 0.2-0.6 s; the first retransmission waits >= 1 s here
    assert longest >= 0.9, f"longest gap {longest:.3f} s: the 1 s RTO floor did not hold the retransmission back"
