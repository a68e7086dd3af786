"""bench/segment_timers.py's counting and verdict, without a lab (root-free)."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
_spec = importlib.util.spec_from_file_location("segment_timers_bench", ROOT / "bench" / "segment_timers.py")
st = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(st)


def _peer(state="Established", est=1, dropped=0):
    return {"bgpState": state, "connectionsEstablished": est, "connectionsDropped": dropped}


def test_bgp_counts_sums_connections_and_skips_non_peer_keys():
    got = st.bgp_counts({"10.1.0.1": _peer(), "10.1.0.3": _peer("Active", 2, 2), "vrfName": "default"})
    # the Active one was established twice: once re-established
    assert got == {"sessions": 2, "up": 1, "established": 3, "reestablished": 1, "dropped": 2}


def test_bfd_counts_tell_a_silent_bfdd_from_one_without_sessions():
    assert st.bfd_counts(None) == {"answered": 0, "sessions": 0, "ups": 0, "downs": 0}
    assert st.bfd_counts([]) == {"answered": 1, "sessions": 0, "ups": 0, "downs": 0}
    assert st.bfd_counts([{"session-up": 2, "session-down": 1}, {"session-up": 1}]) == \
        {"answered": 1, "sessions": 2, "ups": 3, "downs": 1}


def _run(**kw):
    run = {"verified": True, "up_s": 120.0,
           "bgp_at_verified": {"sessions": 960, "up": 960, "established": 960, "reestablished": 0, "dropped": 0},
           "bgp_at_end": {"sessions": 960, "up": 960, "established": 960, "dropped": 0},
           "bfd_at_verified": None, "bfd_at_end": None,
           "verify_at_end": {"ok": True, "failing": ""},
           "cpu": {"pct_lab": 80.0, "pct_core": {}, "psi_some_pct": 10.0, "agent_timers_late": {"worst_ms": 5.0}}}
    run.update(kw)
    return run


def test_a_quiet_verified_run_within_budget_holds():
    assert st.verdict(_run(), 300) == {"holds": True, "why_not": []}


def test_each_reason_not_to_hold_is_named():
    v = st.verdict(_run(bgp_at_end={"sessions": 960, "up": 959, "established": 962, "dropped": 2},
                        tors=16, bfd_at_verified={"answered": 16, "downs": 0},
                        bfd_at_end={"answered": 16, "downs": 4},
                        verify_at_end={"ok": False, "failing": "bgp s0r0a: 59/60"},
                        cpu={"pct_lab": 130.0}), 300)
    assert not v["holds"]
    assert v["why_not"] == ["2 BGP sessions re-established in the hold", "1 BGP sessions not Established at the end",
                            "4 BFD session downs in the hold", "verify failed at the end (bgp s0r0a: 59/60)",
                            "lab 130.0 % of a core > 100"]


def test_a_run_that_never_verified_does_not_hold():
    v = st.verdict(_run(verified=False, cpu={"pct_lab": 20.0}), 300)
    assert v == {"holds": False, "why_not": ["not verified within 300 s"]}


def test_case_summary_counts_reestablished_during_up_and_hold():
    a = _run()
    b = _run(bgp_at_verified={"sessions": 960, "up": 960, "established": 965, "reestablished": 5, "dropped": 5},
             bgp_at_end={"sessions": 960, "up": 960, "established": 966, "dropped": 6})
    for r in (a, b):
        r["verdict"] = st.verdict(r, 300)
    s = st.case_summary([a, b])
    assert s["reestablished_in_up"] == {"min": 0, "median": 2.5, "max": 5, "n": 2}
    assert s["reestablished_in_hold"] == {"min": 0, "median": 0.5, "max": 1, "n": 2}
    assert s["held"] == 1 and s["pct_of_two_cores"]["median"] == 40.0 and s["verify_ok_at_end"] == 2
    b["verify_at_end"] = {"ok": False, "failing": "agent s0h1: no heartbeat"}
    assert st.case_summary([a, b])["verify_ok_at_end"] == 1


def test_a_bfdd_that_did_not_answer_is_no_proof_of_no_downs():
    v = st.verdict(_run(tors=16, bfd_at_verified={"answered": 16, "downs": 0},
                        bfd_at_end={"answered": 15, "downs": 0}), 300)
    assert v == {"holds": False, "why_not": ["bfdd answered on 15 of 16 ToRs: its session downs are not known"]}


def test_bfd_per_end_divides_by_the_ends_and_multiplies_out_to_the_segment():
    cases = {"production": {"pct_core": {"bfdd": 16.0}}, "bfd-1s": {"pct_core": {"bfdd": 1.6}}}
    got = st.bfd_per_end(cases, 32, 1920)
    assert set(got) == {"100ms", "1000ms"}
    assert got["100ms"]["pct_core_per_end"] == 0.5 and got["100ms"]["segment_pct_core"] == 960.0
    assert got["1000ms"]["segment_pct_core"] == 96.0


def test_session_ends_are_two_per_bgp_session():
    assert st.session_ends("default") == 32
    assert st.session_ends(str(st.SPEC)) == 1920
