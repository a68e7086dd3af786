"""The ToR hold-down and micro-BFD on a real lab (Clos tier 2, both options on): each test fails when
its mechanism is switched off (the shipped results/tor-failure runs show the figures without them)."""

from __future__ import annotations

import json
import time

import pytest

from tests.lib.labs import owned_lab

LAB = "acc"
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name=LAB, overrides={
    "tier2": "clos", "holddown": {"enabled": True, "max_s": 20},
    "micro_bfd": {"enabled": True, "interval_ms": 100, "multiplier": 3}})]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


def _status(lab, node: str) -> dict:
    return json.loads(lab.runtime.status_path(node).read_text())


def test_micro_bfd_sessions_are_up_on_every_member(lab):
    for h in lab.hosts:
        ports = [p for n in _status(lab, h)["nics"] for p in n["ports"]]
        assert all(p["micro_bfd"]["state"] == "up" for p in ports), (h, ports)
    tor = _status(lab, "s0r0a")
    assert all(p["micro_bfd"]["state"] == "up" and p["micro_bfd"]["rx"] > 0 for p in tor["ports"])


def test_a_hung_tor_leaves_the_hosts_aggregates_in_micro_bfd_time(lab):
    """LACP alone needs three missed 1 s LACPDUs (2.6 s measured); micro-BFD 100 ms x 3."""
    def hang():
        with lab.probes(src="s0h0", dst="s1h0", rail=0, flows=32, rate=250) as p:
            with lab.fault("hang", node="s0r0a"):
                lab.wait_for(lambda: _status(lab, "s0h0")["nics"][0]["nexthops"] == ["r0p1"] or None, timeout=3)
                time.sleep(1.0)
        return p.result

    # Why measure(): a fresh-clone CI run measured 1137.9 ms here, flagged by the lateness meter (the
    # emulator 592 ms late against a 113.8 ms bound): the figure was the machine's, so it is run again
    r = lab.measure(hang, attempts=3)
    assert not r.flagged, ("the emulator was late in every attempt", r.emulator, r.discarded)
    assert r.recovered
    assert r.longest_gap_ms < 700, r.longest_gap_ms  # ~300-400 ms; LACP would be ~2600
    lab.wait_healthy(30)


def test_verify_reports_a_member_whose_micro_bfd_is_down(lab):
    from hpnlab.lifecycle.verify import check_lacp

    with lab.fault("one-way", node="s0r0a", iface="h0p0"):  # the ToR's packets to s0h0 port 0 are lost
        lab.wait_for(lambda: any(not c["ok"] for c in check_lacp(lab.runtime, lab.cfgs)), timeout=5)
        # (on a loaded 2-core machine another host's 300 ms session may blink at the same time: only
        # what this fault must show is asserted)
        bad = {c["name"]: c["detail"] for c in check_lacp(lab.runtime, lab.cfgs) if not c["ok"]}
        assert "r0p0" in bad.get("lacp s0h0", ""), bad
    lab.wait_healthy(30)


def test_a_tor_back_from_power_off_is_held_until_it_has_routes(lab):
    """The boot black hole: without the hold-down, 2.9-4.1 s of upstream loss after the repair."""
    def power_off():
        with lab.probes(src="s0h0", dst="s1h0", rail=0, flows=32, rate=250) as p:
            with lab.fault("power-off", node="s0r0a"):
                lab.wait_for(lambda: _status(lab, "s0r0a")["holddown"]["held"] or None, timeout=5)
                time.sleep(1.0)
            held = _status(lab, "s0r0a")["holddown"]
            assert held["held"] and held["missing"]  # links are back, routes are not yet: still held
            lab.wait_for(lambda: not _status(lab, "s0r0a")["holddown"]["held"] or None, timeout=15)
            time.sleep(2.0)
        return p.result

    # Why measure(): a fresh-clone CI run lost packets after the repair with the emulator 673.4 ms late
    # (flagged): a stall that long loses packets whatever the hold-down does, so that run measured the machine
    # Loss is judged whatever the flag says (a short gap's bound is the 5 ms floor, which a busy machine
    # passes without losing a packet); a flagged attempt is only run again, and is kept in r.discarded
    r = lab.measure(power_off, attempts=3)
    assert r.recovered, r.to_dict()
    assert r.lost_after_repair_1s == 0, r.to_dict()
    st = _status(lab, "s0r0a")["holddown"]
    assert not st["bound_hit"] and st["episodes"] >= 2  # the boot, and this power-off
    lab.wait_healthy(30)


def test_a_hung_tor_that_resumes_causes_no_second_outage(lab):
    """A 3 s hang: the aggs' BFD tears the ToR's sessions down meanwhile, so it resumes with stale routes.
    Before the resume hold, its host ports were back before bgpd had flushed and relearnt them: 397-468
    upstream packets lost after the resume in the shipped tor-hang-holddown runs of that code."""
    def hang_and_resume():
        with lab.probes(src="s0h0", dst="s1h0", rail=0, flows=16, rate=250) as p:
            with lab.fault("hang", node="s0r0a"):
                time.sleep(3.0)
            lab.wait_for(lambda: _status(lab, "s0r0a")["holddown"]["last_resume"] or None, timeout=10)
            lab.wait_for(lambda: not _status(lab, "s0r0a")["holddown"]["held"] or None, timeout=15)
            time.sleep(1.5)  # the hosts take the ports back in and the flows hashed onto them run
        st = _status(lab, "s0r0a")["holddown"]
        assert st["last_resume"]["withdrawn"] == st["last_resume"]["relearnt"] == ["10.0.2.0/24"], st
        assert not st["bound_hit"], st
        return p.result

    r = lab.measure(hang_and_resume, attempts=3)  # a stalled machine loses packets too: see above
    assert r.lost_after_repair == 0, (r.after_repair_gap_ms, r.emulator, r.per_flow)
    assert r.recovered, r.per_flow
    lab.wait_healthy(30)


def test_verify_reports_a_held_tor(lab):
    from hpnlab.lifecycle.verify import check_agents

    with lab.fault("power-off", node="s0r0a"):
        lab.wait_for(lambda: _status(lab, "s0r0a")["holddown"]["held"] or None, timeout=5)
        bad = [c for c in check_agents(lab.runtime, lab.cfgs) if not c["ok"]]
        assert any(c["name"] == "agent s0r0a" and "held down" in c["detail"] for c in bad), bad
    lab.wait_healthy(30)
