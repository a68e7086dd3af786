"""The Python API (hpnlab.Lab) and its pytest plugin: the pure parts without root, then a real lab that
comes from the plugin's hpnlab_lab fixture, the way users' tests get theirs."""

from __future__ import annotations

import subprocess
import time

import pytest

from hpnlab.api import EmulatorLate, Lab, ProbeResult, probe_result, resolve_spec
from hpnlab.errors import SpecError
from hpnlab.pytest_plugin import lab_name
from hpnlab.model.spec import NAME_RE

pytestmark = pytest.mark.hpnlab(spec="default", name="api", overrides={"tier2": "clos"})
NS = 1_000_000_000


def _reports(gaps_flow1=(), tail_missing=0):
    """A sender (2 flows x 100 packets/s for 2 s from t=100) and what a receiver saw of it."""
    sender = {"src": "10.0.2.2", "dst": "10.0.0.2", "sport_base": 30000, "flows": 2, "rate_per_flow": 100.0,
              "start": 100.0, "end": 102.0, "sent": [200, 200]}
    flows = [{"flow": 0, "src": "10.0.2.2", "received": 200, "max_seq": 199, "dups": 0, "reordered": 0,
              "last_tx": int(101.99 * NS), "gaps": []}]
    lost = sum(b - a - 1 for a, b in gaps_flow1)
    max_seq = 199 - tail_missing
    flows.append({"flow": 1, "src": "10.0.2.2", "received": 200 - lost - tail_missing, "max_seq": max_seq,
                  "dups": 0, "reordered": 0, "last_tx": int((100 + max_seq / 100) * NS),
                  "gaps": [[a, b, int((100 + a / 100) * NS), int((100 + b / 100) * NS), 0, 0] for a, b in gaps_flow1]})
    return sender, {"flows": flows}


def test_probe_result_counts_as_results_json_does():
    sender, receiver = _reports(gaps_flow1=[(49, 70)])  # 20 packets lost: a 200 ms gap
    r = probe_result(sender, receiver, [{"label": "link-down s0h0:r0p0", "applied": 100.45, "reverted": 101.0}])
    assert (r.lost_packets, r.flows_affected, r.blackholed_flows, r.recovered) == (20, 1, 0, True)
    assert r.longest_gap_ms == pytest.approx(200, abs=1)
    assert [f["sport"] for f in r.per_flow] == [30000, 30001] and r.per_flow[1]["gaps_ms"] == [pytest.approx(200, abs=1)]
    r.assert_disruption(max_gap_ms=300, allowed_disruptions=1)
    with pytest.raises(AssertionError, match=r"1/2 flows .* flow 1 \(sport 30001\): 1 gap\(s\), longest 200 ms"):
        r.assert_disruption(max_gap_ms=100)
    two = probe_result(*_reports(gaps_flow1=[(10, 20), (49, 70)]), [])
    with pytest.raises(AssertionError, match="2 gap"):
        two.assert_disruption(max_gap_ms=300, allowed_disruptions=1)
    two.assert_disruption(max_gap_ms=300, allowed_disruptions=2)


def test_a_flow_silent_until_the_repair_is_black_holed_and_one_silent_at_the_end_never_recovered():
    hole = probe_result(*_reports(gaps_flow1=[(49, 110)]), [{"label": "f", "applied": 100.45, "reverted": 101.05}])
    assert hole.blackholed_flows == 1 and hole.recovered
    dead = probe_result(*_reports(tail_missing=100), [{"label": "f", "applied": 101.0, "reverted": None}])
    assert not dead.recovered and dead.per_flow[1]["resumed"] is False
    with pytest.raises(AssertionError, match="never resumed"):
        dead.assert_disruption(max_gap_ms=10_000)
    assert isinstance(dead, ProbeResult) and dead.to_dict()["lost_packets"] == 100


def test_a_run_the_emulator_was_late_in_is_flagged_and_can_be_required_unflagged():
    fault = [{"label": "f", "applied": 100.45, "reverted": 101.0}]
    sender, receiver = _reports(gaps_flow1=[(49, 70)])  # a 200 ms gap from 100.49
    quiet = probe_result(sender, receiver, fault, agents={"s0r0a": {"bins": [[100.5, 3.0]]}})
    assert not quiet.flagged and quiet.emulator["bound_ms"] == 20.0 and quiet.emulator["late_ms"] == 3.0
    quiet.assert_disruption(max_gap_ms=300, require_unflagged=True)
    # an agent's timer 45 ms late inside the gap, the sender 60 ms late after it ended (not this figure's)
    sender = {**sender, "late": {"bins": [[101.5, 60.0]]}}
    late = probe_result(sender, receiver, fault, agents={"s0r0a": {"bins": [[100.6, 45.0]]}})
    assert late.flagged and late.emulator["timer_late_node"] == "s0r0a" and late.emulator["sender_late_ms"] == 0.0
    late.assert_disruption(max_gap_ms=300)  # unflagged not required: the figure alone is judged
    with pytest.raises(EmulatorLate, match=r"45 ms late .* on s0r0a\), more than the 20 ms this 200 ms gap allows"):
        late.assert_disruption(max_gap_ms=300, require_unflagged=True)
    assert late.to_dict()["emulator"]["flagged"] is True


def test_measure_retries_a_flagged_run_and_returns_the_first_unflagged(monkeypatch):
    lab = Lab.__new__(Lab)  # no lab needed for the retry logic; health is waited for between attempts
    waits = []
    monkeypatch.setattr(Lab, "wait_healthy", lambda self, timeout=60: waits.append(timeout))
    results = iter([ProbeResult(1, 0, 0, 0, True, 0, 1, 1, emulator={"flagged": True}),
                    ProbeResult(2, 0, 0, 0, True, 0, 1, 1, emulator={"flagged": False}),
                    ProbeResult(3, 0, 0, 0, True, 0, 1, 1)])
    first = lab.measure(lambda: next(results), attempts=3)
    assert first.longest_gap_ms == 2 and waits == [60]
    assert [d["longest_gap_ms"] for d in first.discarded] == [1]  # the flagged attempt is kept, not lost
    always = lab.measure(lambda: ProbeResult(9, 0, 0, 0, True, 0, 1, 1, emulator={"flagged": True}), attempts=2)
    assert always.flagged and waits == [60, 60] and len(always.discarded) == 1
    assert always.to_dict()["discarded"][0]["emulator"]["flagged"] is True
    with pytest.raises(SpecError, match="attempts"):
        lab.measure(lambda: None, attempts=0)


def test_measure_retries_a_pair_while_either_is_flagged(monkeypatch):
    lab = Lab.__new__(Lab)
    monkeypatch.setattr(Lab, "wait_healthy", lambda self, timeout=60: None)
    pairs = iter([(ProbeResult(1, 0, 0, 0, True, 0, 1, 1), ProbeResult(2, 0, 0, 0, True, 0, 1, 1, emulator={"flagged": True})),
                  (ProbeResult(3, 0, 0, 0, True, 0, 1, 1), ProbeResult(4, 0, 0, 0, True, 0, 1, 1))])
    up, down = lab.measure(lambda: next(pairs), attempts=3)
    assert (up.longest_gap_ms, down.longest_gap_ms) == (3, 4)
    # each result keeps its own direction's discarded attempt
    assert [d["longest_gap_ms"] for d in up.discarded] == [1] and [d["longest_gap_ms"] for d in down.discarded] == [2]


def test_lab_names_are_unique_per_module_and_xdist_worker():
    a, b = lab_name("tests/a.py", None, None), lab_name("tests/b.py", None, None)
    assert a != b and all(NAME_RE.fullmatch(x) for x in (a, b))
    w = [lab_name("tests/a.py", None, f"gw{i}") for i in (0, 1, 12, 123)]
    assert len(set(w)) == 4 and all(NAME_RE.fullmatch(x) for x in w), w
    assert lab_name("t.py", "hpn", "gw3") == "hpnw3" and lab_name("t.py", "abcdefghij", "gw45") == "abcdefgw45"


def test_resolve_spec_merges_overrides_and_names_bad_fields():
    sp = resolve_spec("default", "t1", {"tier2": "clos", "bfd": {"enabled": False}})
    assert (sp.name, sp.tier2, sp.bfd.enabled, sp.bfd.interval_ms) == ("t1", "clos", False, 100)
    assert resolve_spec({"segments": 1}, "t2").segments == 1
    with pytest.raises(SpecError, match="spec field 'bfd.enable'"):
        resolve_spec("default", "t1", {"bfd": {"enable": False}})
    with pytest.raises(SpecError, match="name '../x'"):
        resolve_spec("default", "../x")
    with pytest.raises(SpecError, match="not found"):
        resolve_spec("no/such/spec.yml")


# --- on a real lab, from the plugin ------------------------------------------------------------------------
@pytest.mark.root
def test_lab_names_exec_vtysh_verify(hpnlab_lab):
    lab = hpnlab_lab
    assert lab.name == "api" and sorted(lab.hosts) == ["s0h0", "s0h1", "s1h0", "s1h1"] and len(lab.routers) == 10  # 8 ToRs, 2 aggs (Clos: one plane)
    r = lab.exec("s0r0a", "ip", "route")
    assert isinstance(r, subprocess.CompletedProcess) and r.returncode == 0 and "10.0.0.0/24" in r.stdout
    assert lab.exec("s0h0", "echo", "$HOME;", "true").stdout == "$HOME; true\n"  # never a shell
    summ = lab.vtysh("agg0-0", "show bgp summary json")
    assert summ["ipv4Unicast"]["peerCount"] == 8  # Clos: every ToR to every agg
    assert "BGP router identifier" in lab.vtysh("agg0-0", "show bgp summary")
    checks = lab.verify()
    assert checks and all(c["ok"] for c in checks) and {"name", "ok", "detail"} == set(checks[0])
    with pytest.raises(SpecError, match="node 'nosuch' is not in lab 'api'"):
        lab.exec("nosuch", "true")
    with pytest.raises(SpecError, match="give hosts"):
        lab.probes(src="s0r0a", dst="s0h0")
    with pytest.raises(AssertionError, match="never within 0.2 s|not met within 0.2 s"):
        lab.wait_for(lambda: False, timeout=0.2, what="never")


@pytest.mark.root
def test_probes_and_fault_measure_a_failover(hpnlab_lab):
    lab = hpnlab_lab
    with lab.probes(src="s1h0", dst="s0h0", rail=0, flows=16, rate=250) as p:
        with lab.fault("link-down", node="s0h0", iface="r0p0") as rec:
            lab.wait_for(lambda: "10.0.0.2 " not in lab.exec("s0r0a", "ip", "route", "show", "table", "10").stdout,
                         timeout=5)
            time.sleep(1.0)
    res = p.result
    assert rec["reverted"] > rec["applied"] and res.faults[0]["label"] == "link-down s0h0:r0p0"
    assert res.sent > 16 * 250 and res.received + res.lost_packets == res.sent
    # Clos: the /32 via ToR b takes over - generous bounds, the figures are in results/
    assert res.recovered and res.blackholed_flows == 0 and res.longest_gap_ms < 2000, res.to_dict()
    res.assert_disruption(max_gap_ms=2000, allowed_disruptions=1)
    if res.flows_affected:
        with pytest.raises(AssertionError):
            res.assert_disruption(max_gap_ms=0.001)
    assert (p.dir / "tx.json").exists() and (p.dir / "result.json").exists()
    lab.wait_healthy(60)


@pytest.mark.root
def test_attach_sees_the_same_lab_and_leaves_it_up(hpnlab_lab):
    import hpnlab

    with hpnlab.Lab.attach("api") as other:
        assert other.hosts == hpnlab_lab.hosts and other.runtime.name == "netns"
    assert hpnlab_lab.healthy()  # leaving an attached lab's block did not take it down


@pytest.mark.root
def test_nested_faults_are_each_recorded_until_reverted(hpnlab_lab):
    """state.json holds every active fault's undo recipe (what `hpnlab fail --clear` and `down` use after
    a crash): a fault applied inside another's block must not drop the outer one's record."""
    from hpnlab.runtime.base import State

    lab = hpnlab_lab

    def recorded():
        return sorted(f"{f.node}:{f.iface}" for f in State.load(lab.name).data.faults)

    with lab.fault("link-down", node="s0h0", iface="r0p0"):
        with lab.fault("link-down", node="s1h0", iface="r0p1"):
            assert recorded() == ["s0h0:r0p0", "s1h0:r0p1"]
        assert recorded() == ["s0h0:r0p0"]
    assert recorded() == []
    lab.wait_healthy(60)
