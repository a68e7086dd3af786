"""Gray failures' per-fault figures (hpnlab.traffic.analysis.grayfigures), root-free, against a synthetic repetition
whose answers are known: when the prober suspected, confirmed and isolated, which link, whether the control
plane reacted before the isolation, the training rate before / during / isolated / after, false positives;
their aggregation and summary lines; and the experiment file's prober and isolation keys."""

from __future__ import annotations

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic.run import experiment
from hpnlab.traffic.analysis import grayfigures
from tests.conftest import ROOT

T0 = 1000.0


@pytest.fixture(scope="module")
def cfgs():
    return experiment.load(ROOT / "experiments" / "gray-failure.yml", ["isolate-uplink"]).plans[0].cfgs


def _its(a: float, b: float, rate: float) -> list[float]:
    """Iterations at ``rate`` per second in [a, b), off the whole tenths so no one sits on a boundary."""
    n = int(round((b - a) * rate))
    return [a + (k + 0.5) / rate for k in range(n)]


def _rep():
    """Two gray faults on s0r0a>agg0-0: 1 % loss at 5-13 s, caught corruption at 20-28 s, run of 40 s."""
    tl = [{"label": "silent-loss s0r0a:agg0-0 rate=1 both=0", "kind": "silent-loss", "node": "s0r0a",
           "iface": "agg0-0", "at": 5, "until": 13, "applied": T0 + 5, "reverted": T0 + 13},
          {"label": "corrupt s0r0a:agg0-0 rate=1 both=0", "kind": "corrupt", "node": "s0r0a",
           "iface": "agg0-0", "at": 20, "until": 28, "applied": T0 + 20, "reverted": T0 + 28}]
    rep = {"t0": T0, "duration": 40.0, "timeline": tl}
    # the all-reduce: 10 it/s, 2 it/s from the first fault until its isolation at 8.7 s, 10 it/s again
    its = _its(T0, T0 + 5, 10) + _its(T0 + 5, T0 + 8.7, 2) + _its(T0 + 8.7, T0 + 40, 10)
    workload = {"kind": "allreduce", "iterations": its}
    gray = {"events": [
        {"t": T0 + 2.0, "event": "confirmed", "link": "s1r0a>s1h1"},       # before any fault: a false positive
        {"t": T0 + 8.0, "event": "suspected", "link": "s0r0a>agg0-0"},
        {"t": T0 + 8.5, "event": "confirmed", "link": "s0r0a>agg0-0"},
        {"t": T0 + 23.0, "event": "confirmed", "link": "agg0-0>s1r0a"},    # the wrong link first
        {"t": T0 + 24.0, "event": "confirmed", "link": "s0r0a>agg0-0"}],
        "isolation": [{"t": T0 + 8.7, "action": "isolated (bgp-shutdown)", "link": "s0r0a>agg0-0"},
                      {"t": T0 + 13.0, "action": "restored", "link": "s0r0a>agg0-0"},
                      {"t": T0 + 23.1, "action": "refused", "link": "agg0-0>s1r0a"}],
        "report": {"paths": 57, "probes_per_s": 5600.0, "probe_bytes_per_s": 358400, "node_cpu_s_per_s": 0.6,
                   "judge_cpu_s_per_s": 0.01}}
    # what report.repetition_result had already put in the entries: the workload window and the timeline
    res = {"faults": [
        {"fault": tl[0]["label"], "workload": {"baseline_rate": 10.0, "throughput_pct": 59.0},
         "timeline": {"events": [{"t_ms": 3900.0, "kind": "fib", "node": "s0r0a"},     # the isolation's own
                                 {"t_ms": 3680.0, "kind": "lacp", "node": "s0h0"},   # so is this, before its log
                                 {"t_ms": 300.0, "kind": "carrier", "node": "s0r0a"}]}},  # not a detector
        {"fault": tl[1]["label"], "workload": {"baseline_rate": 10.0, "throughput_pct": 100.0},
         "timeline": {"events": [{"t_ms": 1500.0, "kind": "micro-bfd", "node": "s0r0a"}]}}]}
    return rep, res, gray, workload


def test_times_link_and_isolation_of_each_fault(cfgs):
    rep, res, gray, wl = _rep()
    grayfigures.add_to_run(res, rep, gray, wl, cfgs)
    a, b = res["faults"][0]["gray"], res["faults"][1]["gray"]
    assert a["link"] == b["link"] == "s0r0a>agg0-0"
    assert (a["detect_s"], a["localise_s"], a["isolate_s"]) == (3.0, 3.5, 3.7)
    assert a["right_link"] is True and a["localised_link"] == "s0r0a>agg0-0" and a["wrong_confirmed"] == 0
    # the FIB change came after the isolation and the LACP one just before its log entry (both its own
    # doing: APPLY_S), and a carrier event is no detector's
    assert a["control_plane_s"] is None and a["control_plane_events"] == 0
    # an isolator that logs when its action began is cut there: an LACP event 10 ms before it is counted
    gray["isolation"][0]["begun"] = T0 + 8.69
    rep2, res2, _g, _w = _rep()
    grayfigures.add_to_run(res2, rep2, gray, wl, cfgs)
    assert res2["faults"][0]["gray"]["control_plane_s"] == 3.68
    # the second fault: the first confirmation named the wrong link; nothing isolated, one refusal
    assert b["localise_s"] == 3.0 and b["localised_link"] == "agg0-0>s1r0a" and b["right_link"] is False
    assert b["wrong_confirmed"] == 1 and b["named"] == ["agg0-0>s1r0a", "s0r0a>agg0-0"]
    assert b["isolate_s"] is None and b["refused"] == 1
    assert b["control_plane_s"] == 1.5
    # one wrong link in a fault's window and one confirmation before any fault
    assert res["prober"]["false_positives"] == 2 and res["prober"]["confirmed_outside_faults"] == 1
    assert res["prober"]["node_cpu_s_per_s"] == 0.6


def test_training_rate_during_the_isolation_and_after_the_repair(cfgs):
    rep, res, gray, wl = _rep()
    grayfigures.add_to_run(res, rep, gray, wl, cfgs)
    a = res["faults"][0]["gray"]
    assert a["baseline_rate"] == 10.0 and a["during_pct"] == 59.0  # the entry's own, carried over
    assert a["isolated_pct"] == pytest.approx(100, abs=3)  # 8.7 -> 13 s at 10 it/s
    assert a["after_pct"] == pytest.approx(100, abs=3)  # 13 -> 20 s
    assert "isolated_pct" not in res["faults"][1]["gray"]  # never isolated


def test_without_the_prober_only_the_control_plane_and_rates(cfgs):
    rep, res, _gray, wl = _rep()
    grayfigures.add_to_run(res, rep, {}, wl, cfgs)
    a = res["faults"][0]["gray"]
    assert "detect_s" not in a and "isolate_s" not in a and "prober" not in res
    assert res["faults"][1]["gray"]["control_plane_s"] == 1.5 and a["after_pct"] == pytest.approx(100, abs=3)


def test_no_gray_fault_and_no_prober_adds_nothing(cfgs):
    rep, res, _gray, wl = _rep()
    for f in rep["timeline"]:
        f["kind"] = "link-down"
    grayfigures.add_to_run(res, rep, {}, wl, cfgs)
    assert all("gray" not in e for e in res["faults"]) and "prober" not in res


def test_aggregate_and_summary_lines(cfgs):
    runs = []
    for shift in (0.0, 1.0):  # the second repetition confirms a second later
        rep, res, gray, wl = _rep()
        for e in gray["events"] + gray["isolation"]:
            e["t"] += shift if e["t"] < T0 + 13 and e["t"] > T0 + 5 else 0
        grayfigures.add_to_run(res, rep, gray, wl, cfgs)
        runs.append(res)
    v = {"runs": runs, "faults": [{"fault": runs[0]["faults"][k]["fault"]} for k in range(2)]}
    grayfigures.aggregate_into(v)
    g = v["faults"][0]["gray"]
    assert g["runs"] == 2 and g["localise_s"] == {"n": 2, "min": 3.5, "median": 4.0, "max": 4.5}
    assert g["right_link_runs"] == 2 and g["isolated_runs"] == 2 and g["isolated_links"] == ["s0r0a>agg0-0"]
    assert v["faults"][1]["gray"]["right_link_runs"] == 0 and v["faults"][1]["gray"]["wrong_confirmed"] == 2
    assert v["prober_runs"]["false_positives"] == 4 and v["prober_runs"]["paths"]["median"] == 57
    lines = grayfigures.summary_lines({"variants": {"iso": v}})
    # the second repetition isolated at 9.7 s: its LACP event at 8.68 s came more than APPLY_S before the log
    # entry and counts, the FIB change at 8.9 s does not
    assert lines[0].startswith("gray iso / silent-loss s0r0a:agg0-0 rate=1 both=0: control plane reacted 1/2")
    assert "confirmed 2/2 (3.5/4.0/4.5 s), right link 2/2" in lines[0] and "isolated 2/2" in lines[0]
    assert lines[-1].startswith("prober iso: 57 paths, 5600.0 probes/s, node programs 0.6 CPU s/s, judge 0.01")


def test_experiment_keys_are_checked_before_a_lab(tmp_path):
    base = "name: x\nduration: 10\nvariants:\n  - name: a\n"
    for extra, msg in (("    prober: {rates: 5}\n", "a) prober.rates: unknown setting"),
                       ("    prober: {}\n    isolation: {hold: 3}\n", "a) isolation.hold: unknown setting"),
                       ("    isolation: {}\n", "isolation: isolates what the prober confirms")):
        p = tmp_path / "x.yml"
        p.write_text(base + extra)
        with pytest.raises(SpecError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            experiment.load(p)
    p.write_text(base)
    assert experiment.load(p).plans[0].prober is None  # off unless given


def test_merging_a_run_made_in_parts():
    """bench/merge_results.py: every part's variants, each part's provenance kept; one experiment only."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("merge_results_bench", ROOT / "bench" / "merge_results.py")
    mr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mr)
    a = {"experiment": "gray-failure", "started": 10.0, "finished": 20.0, "provenance": {"commit": "c1", "dirty": False},
         "variants": {"bfd-uplink": {"runs": []}}}
    b = {"experiment": "gray-failure", "started": 30.0, "finished": 45.0, "provenance": {"commit": "c2", "dirty": True},
         "variants": {"fault-free": {"runs": []}}}
    m = mr.merge([a, b], ["A", "B"])
    assert list(m["variants"]) == ["bfd-uplink", "fault-free"] and (m["started"], m["finished"]) == (10.0, 45.0)
    assert [(p["from"], p["commit"], p["dirty"]) for p in m["parts"]] == [("A", "c1", False), ("B", "c2", True)]
    # the merged provenance names every part's commit, and is dirty when one part was
    assert m["provenance"]["commits"] == ["c1", "c2"] and m["provenance"]["commit"] == "several"
    assert m["provenance"]["dirty"] is True and m["provenance"]["parts_dirty"] == [False, True]
    clean = mr.merge([a, {**b, "provenance": {"commit": "c1", "dirty": False, "dirty_paths": []}}], ["A", "B"])
    assert clean["provenance"]["commit"] == "c1" and clean["provenance"]["dirty"] is False
    assert clean["provenance"]["dirty_paths"] == "unknown"  # part A could not tell
    with pytest.raises(SystemExit, match="different experiments"):
        mr.merge([a, {**b, "experiment": "dlb"}], ["A", "B"])
    with pytest.raises(SystemExit, match="in more than one part"):
        mr.merge([a, a], ["A", "A2"])
