"""A hung ToR that resumes after its hosts' ARP entries failed (paper's segment, on a small lab).

On the paper's segment a rail's hosts all sit under one dual-ToR set, so a resumed ToR has no fabric route
to wait for; what it lacks is its hosts: while it was stopped with all ingress dropped, the kernel's ARP
probes of the entries in use went unanswered, those entries failed, and the /32 host routes made from them
went too. Its host ports came back (LACP) before the entries were relearnt, so the hosts sent to it traffic
for hosts it could not reach: 890-1,783 packets lost after the resume in the shipped tor-hang-segment run of
that code. The hold-down now ARPs for its hosts at the resume and holds its ports until it can deliver to
every one of them. This lab is one set on one rail with the segment's timers (LACP fast, BGP 3/9, BFD off);
the test flushes the ToR's ARP entries during the hang, so every entry is gone at the resume whatever state
the kernel's timers left them in."""

from __future__ import annotations

import json
import time

import pytest

from tests.lib.labs import owned_lab

LAB = "rsm"
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name=LAB, overrides={
    "segments": 1, "hosts_per_segment": 4, "rails": 1, "bfd": {"enabled": False},
    "bgp": {"keepalive": 3, "hold": 9}, "lacp": {"fast_rate": True}, "holddown": {"enabled": True, "max_s": 20}})]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


def _holddown(lab) -> dict:
    return json.loads(lab.runtime.status_path("s0r0a").read_text())["holddown"]


def _log(lab, node: str) -> list[tuple[str, str]]:
    """(HH:MM:SS.mmm, message) of every line of a node's agent log (one clock: the machine's)."""
    return [(ln[:12], ln[13:]) for ln in lab.runtime.agent_log(node).read_text().splitlines() if ln[2:3] == ":"]


def _route_back(tor: list[tuple[str, str]], resumed: str, ip: str) -> str:
    """When the ToR's /32 to ``ip`` was back after the resume. Usually the agent withdraws it (the entry
    failed) and adds it again once the hold-down's ARP is answered. But the agent reads the kernel's
    neighbour events only when it runs again, and if the entry was relearnt by then, it reads "failed"
    and "learned" in one batch and never withdraws the route: it was there all along (seen in CI, where
    the entries were back 21 ms after the resume)."""
    mine = [(t, m) for t, m in tor if t >= resumed and m.startswith(f"host route {ip}/32 ")]
    if not mine:
        return resumed
    assert mine[-1][1].endswith("added"), (ip, mine)  # withdrawn and never added again: no route
    return mine[-1][0]


def test_a_resumed_tor_is_held_until_it_can_reach_its_hosts_again(lab):
    def hang_flush_resume():
        with lab.probes(src="s0h0", dst="s0h1", rail=0, flows=16, rate=250) as up, \
                lab.probes(src="s0h1", dst="s0h0", rail=0, flows=16, rate=250) as down:
            with lab.fault("hang", node="s0r0a"):
                time.sleep(3.5)  # past the hosts' LACP timeout (3 s): they have left the ToR
                with lab.fault("arp-flush", node="s0r0a"):  # its hosts' entries gone (here at once)
                    pass
                time.sleep(0.5)
            lab.wait_for(lambda: (_holddown(lab)["last_resume"] or {}).get("held_s") is not None or None,
                         timeout=10)
            time.sleep(2.0)  # the hosts take the ToR back and the flows hashed onto it run
        return up.result, down.result

    # measured again while flagged: a machine stalled for hundreds of ms loses packets whatever the
    # hold-down does (a fresh-clone CI run of the power-off test in test_access_lab did, 673.4 ms late);
    # the loss is judged whatever the flag says, a flagged attempt only run again
    for r in lab.measure(hang_flush_resume, attempts=3):
        assert r.recovered, (r.emulator, r.per_flow)
        assert r.lost_after_repair == 0, (r.after_repair_gap_ms, r.emulator, r.per_flow)
    # the order that makes it so: the ToR's route to each host was back before the other host put the ToR
    # back among its next hops (before, the ToR let its ports in when it heard the hosts' LACPDUs, and the
    # hosts sent to it while it still had no route to their peers)
    tor = _log(lab, "s0r0a")
    resumed = [t for t, m in tor if m.startswith("hold-down: loop stopped")][-1]
    added = {ip: _route_back(tor, resumed, ip) for ip in ("10.0.0.2", "10.0.0.3")}
    for host, peer in (("s0h0", "10.0.0.3"), ("s0h1", "10.0.0.2")):
        back = min(t for t, m in _log(lab, host) if t >= resumed and "nexthops" in m and "'r0p0'" in m.split("->")[1])
        assert added[peer] <= back, (host, peer, added, back)
    st = _holddown(lab)
    assert {"10.0.0.2", "10.0.0.3"} <= set(st["last_resume"]["hosts_waited"]), st  # it waited for them
    assert not st["bound_hit"], st
    lab.wait_healthy(30)
