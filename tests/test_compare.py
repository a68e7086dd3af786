"""Baselines without a lab: the comparison of two results.json on synthetic figures (a regression is
found, a figure within its tolerance passes, the baseline's spread widens it, each figure's direction,
figures one side lacks are reported and not failed), bad input is one line with exit 2, and the reports
(JUnit XML parsed back, Markdown, JSON) say the same."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from hpnlab.cli import main
from hpnlab.errors import SpecError
from hpnlab.traffic.analysis import compare
from tests.conftest import ROOT

FAULT = "link-down s0h0:r0p0"


def s(*values: float) -> dict:
    """A figure over repetitions, as report.aggregate writes it."""
    v = sorted(values)
    mid = len(v) // 2
    return {"n": len(v), "min": v[0], "median": v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2, "max": v[-1]}


def results(gap=(130.0,), blackholed=(0,), lost=(880,), throughput=(97.0,), recovered_runs=None,
            workload_back=None, flagged=None, variant="clos", extra_stream=False, pps=8000.0) -> dict:
    n = len(gap)
    stream = {"converged_gap_ms": s(*gap), "blackholed_flows": s(*blackholed), "lost_packets": s(*lost),
              "recovered": True, "recovered_runs": n}
    streams = {"downstream": stream}
    if extra_stream:
        streams["extra"] = copy.deepcopy(stream)
    fault = {"fault": FAULT, "kind": "link-down", "repetitions": n,
             "recovered": recovered_runs in (None, n), "recovered_runs": n if recovered_runs is None else recovered_runs,
             "converged_gap_ms": s(*gap), "blackholed_flows": s(*blackholed), "lost_packets": s(*lost),
             "routes_first_ms": s(*(10.0 + k for k in range(n))), "streams": streams,
             "workload": {"throughput_pct": s(*throughput), "recovered_runs": n if workload_back is None else workload_back,
                          "judged": n},
             "emulator": {"flagged": 1 if flagged else 0, "judged": n,
                          "flagged_figures": {flagged: 1} if flagged else {}}}
    runs = [{"probes": {"downstream": {"requested_pps": pps}}, "faults": []} for _ in range(n)]
    return {"experiment": "link-failure", "repetitions": n, "duration": 12.0,
            "variants": {variant: {"faults": [fault], "runs": runs}}}


def row(cmp: compare.Comparison, figure: str, stream: str = "all", variant: str = "clos") -> compare.Row:
    [r] = [r for r in cmp.rows if (r.variant, r.stream, r.figure) == (variant, stream, figure)]
    return r


def test_identical_runs_have_no_regression():
    base = results(gap=(124.4, 130.1, 132.5))
    cmp = compare.compare(base, copy.deepcopy(base))
    assert cmp.ok and cmp.regressions == []
    assert {r.verdict for r in cmp.rows} <= {"within", "info"}


def test_a_longer_gap_is_a_regression_and_names_the_figure():
    cmp = compare.compare(results(gap=(130.0,)), results(gap=(300.0,)))
    assert not cmp.ok
    r = row(cmp, "converged_gap_ms")
    assert r.verdict == "worse" and r.worse == "higher"
    assert r.limit == 143.0  # 130 + 0 spread + 10 % of 130 (the meter's bound)
    assert row(cmp, "converged_gap_ms", "downstream").verdict == "worse"
    assert "converged_gap_ms" in cmp.table() and "worse" in cmp.table()
    with pytest.raises(compare.Regression, match="converged_gap_ms"):
        cmp.assert_no_regression()


def test_within_the_meters_bound_passes_and_its_floor_is_5_ms():
    assert row(compare.compare(results(gap=(130.0,)), results(gap=(142.9,))), "converged_gap_ms").verdict == "within"
    assert row(compare.compare(results(gap=(130.0,)), results(gap=(143.1,))), "converged_gap_ms").verdict == "worse"
    # a figure near 0: 10 % of it is less than 5 ms, the floor applies
    assert row(compare.compare(results(gap=(1.0,)), results(gap=(5.9,))), "converged_gap_ms").verdict == "within"
    assert row(compare.compare(results(gap=(1.0,)), results(gap=(6.1,))), "converged_gap_ms").verdict == "worse"


def test_the_baselines_spread_widens_the_tolerance():
    cand = results(gap=(160.0,))
    tight = compare.compare(results(gap=(129.0, 130.0, 131.0)), cand)
    wide = compare.compare(results(gap=(110.0, 130.0, 150.0)), cand)
    assert row(tight, "converged_gap_ms").verdict == "worse"  # limit 130 + 2 + 13 = 145
    r = row(wide, "converged_gap_ms")
    assert r.verdict == "within" and r.tolerance == 53.0 and r.limit == 183.0  # 130 + 40 + 13


def test_the_candidates_median_is_judged_not_its_worst_repetition():
    cand = results(gap=(128.0, 131.0, 400.0))  # one slow repetition of three
    assert row(compare.compare(results(gap=(130.0,)), cand), "converged_gap_ms").verdict == "within"
    cand = results(gap=(128.0, 400.0, 410.0))
    assert row(compare.compare(results(gap=(130.0,)), cand), "converged_gap_ms").verdict == "worse"


def test_direction_per_figure():
    # lower is worse for the workload's throughput; higher is better there
    cmp = compare.compare(results(throughput=(97.0,)), results(throughput=(60.0,)))
    r = row(cmp, "workload.throughput_pct")
    assert r.worse == "lower" and r.verdict == "worse" and r.limit == pytest.approx(87.3)
    assert row(compare.compare(results(throughput=(60.0,)), results(throughput=(97.0,))),
               "workload.throughput_pct").verdict == "better"
    # a shorter gap is better, not a regression
    assert row(compare.compare(results(gap=(300.0,)), results(gap=(130.0,))), "converged_gap_ms").verdict == "better"
    # when the first route changed is information, never judged
    r = row(compare.compare(results(), results()), "routes_first_ms")
    assert r.worse == "info" and r.verdict == "info"
    assert compare.kind_of("blackholed_flows") == ("higher", "count")
    assert compare.kind_of("a_new_workloads_figure") == ("info", None)


def test_counts_are_compared_as_counts():
    # flows black-holed: the spread alone, no meter bound (one more flow is a regression)
    cmp = compare.compare(results(blackholed=(0, 0, 0), gap=(1, 2, 3)), results(blackholed=(1,), gap=(2,)))
    r = row(cmp, "blackholed_flows")
    assert r.verdict == "worse" and r.limit == 0
    cmp = compare.compare(results(blackholed=(16, 18, 18), gap=(1, 2, 3)), results(blackholed=(20,), gap=(2,)))
    assert row(cmp, "blackholed_flows").verdict == "within"  # 18 + spread 2
    # repetitions that did not recover: worse only when the baseline recovered in every one
    assert row(compare.compare(results(gap=(1, 2, 3)), results(gap=(2,), recovered_runs=0)), "recovered").verdict == "worse"
    assert row(compare.compare(results(gap=(1, 2, 3), recovered_runs=1), results(gap=(2,), recovered_runs=0)),
               "recovered").verdict == "within"
    r = row(compare.compare(results(gap=(1, 2, 3)), results(gap=(1, 2, 3), workload_back=2)), "workload.back")
    assert r.verdict == "worse" and "2 of 3 repetitions" in r.note


def test_lost_packets_bound_is_5_ms_of_the_streams_packets():
    # 8000 packets/s: 5 ms is 40 packets, more than 10 % of a baseline of 0
    assert row(compare.compare(results(lost=(0,)), results(lost=(40,))), "lost_packets", "downstream").verdict == "within"
    assert row(compare.compare(results(lost=(0,)), results(lost=(41,))), "lost_packets", "downstream").verdict == "worse"
    assert row(compare.compare(results(lost=(1000,)), results(lost=(1100,))), "lost_packets", "downstream").verdict == "within"


def test_flows_affected_gets_the_packets_bound_and_black_holed_flows_the_spread_alone():
    """A flow with any gap counts as affected: a busy machine that may cost 5 ms of a stream's packets may
    hit a flow per packet (a fresh-clone CI run lost 2 upstream packets in a 3.6 ms gap and failed on 2
    flows against the baseline's 0). A black-holed flow is silent for the whole fault: no machine does that."""
    def with_flows(affected, blackholed=0):
        r = results(blackholed=(blackholed,), pps=400.0)  # 5 ms of 400 packets/s: 2 packets
        r["variants"]["clos"]["faults"][0]["streams"]["downstream"]["flows_affected"] = s(affected)
        return r

    def verdict(base, cand, figure):
        return row(compare.compare(base, cand), figure, "downstream").verdict

    assert verdict(with_flows(0), with_flows(2), "flows_affected") == "within"
    assert verdict(with_flows(0), with_flows(3), "flows_affected") == "worse"
    assert verdict(with_flows(0), with_flows(0, blackholed=1), "blackholed_flows") == "worse"


def test_figures_in_one_side_only_are_reported_not_failed():
    base = results()
    cand = results(extra_stream=True)
    cand["variants"]["other"] = copy.deepcopy(cand["variants"]["clos"])
    cmp = compare.compare(base, cand)
    assert cmp.ok
    only = [r for r in cmp.rows if r.verdict == "candidate only"]
    assert only and {r.stream for r in only} == {"extra"}
    assert cmp.variants_only == {"candidate": ["other"]}
    assert "extra" in cmp.table() and "variants only in the candidate" in cmp.table()
    cmp = compare.compare(cand, base)
    assert cmp.ok and {r.stream for r in cmp.rows if r.verdict == "baseline only"} == {"extra"}


def test_a_flagged_figure_says_the_machine_was_late():
    cmp = compare.compare(results(), results(gap=(300.0,), flagged="converged_gap_ms"))
    r = row(cmp, "converged_gap_ms")
    assert r.verdict == "worse" and "candidate flagged in 1 of 1" in r.note


def test_a_streams_row_says_its_faults_window_was_flagged():
    # a stream's figures share the fault's window, which the meter judges; its own figures are not judged
    cmp = compare.compare(results(), results(gap=(300.0,), flagged="converged_gap_ms"))
    r = row(cmp, "converged_gap_ms", stream="downstream")
    assert r.verdict == "worse" and "candidate's fault window flagged in 1 of 1" in r.note
    assert "the machine was late" in r.note and "candidate flagged" not in r.note
    quiet = row(compare.compare(results(), results(gap=(300.0,))), "converged_gap_ms", stream="downstream")
    assert quiet.verdict == "worse" and "flagged" not in quiet.note


def test_a_failed_candidate_variant_is_a_regression():
    cand = results()
    cand["variants"]["clos"]["error"] = "lab did not come up"
    cmp = compare.compare(results(), cand)
    assert [r.figure for r in cmp.regressions] == ["error"] and "did not come up" in cmp.regressions[0].note


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(SpecError, match="^experiment: the baseline is 'link-failure', the candidate 'other'"):
        compare.compare(results(), {**results(), "experiment": "other"})
    with pytest.raises(SpecError, match=r"^variants: none in common \(baseline: clos; candidate: x\)"):
        compare.compare(results(), results(variant="x"))
    with pytest.raises(SpecError, match="^baseline: '.*nothing' not found"):
        compare.compare(tmp_path / "nothing", results())
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="^candidate: '.*empty' holds no results.json"):
        compare.compare(results(), tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{not json")
    with pytest.raises(SpecError, match="^baseline: '.*results.json' is not readable JSON"):
        compare.compare(tmp_path / "bad", results())
    (tmp_path / "bad" / "results.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="is not an hpnlab results.json"):
        compare.compare(tmp_path / "bad", results())


def _write(tmp_path, name: str, res: dict):
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps(res))
    return d


def test_cli_exit_codes_and_reports(tmp_path, capsys):
    base = _write(tmp_path, "base", results(gap=(124.4, 130.1, 132.5)))
    same = _write(tmp_path, "same", results(gap=(128.0,)))
    worse = _write(tmp_path, "worse", results(gap=(400.0,), blackholed=(3,)))
    assert main(["compare", str(base), str(same)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    assert main(["compare", str(base), str(worse), "--junit", str(junit), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert "converged_gap_ms" in out and "blackholed_flows" in out and "worse" in out
    # JUnit XML, parsed back: one testcase per figure, a failure per regression
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    cmp = compare.compare(base, worse)
    assert len(cases) == len(cmp.rows) == int(suite.get("tests"))
    assert len(failed) == len(cmp.regressions) == int(suite.get("failures")) == int(root.get("failures")) > 0
    assert any(c.get("name") == f"{FAULT} / all / converged_gap_ms" and c.get("classname") == "link-failure.clos"
               for c in failed)
    [gap] = [c for c in failed if c.get("name") == f"{FAULT} / all / converged_gap_ms"]
    assert "limit 151.21" in gap.find("failure").get("message")  # 130.1 + spread 8.1 + 13.01
    text = md.read_text()
    assert text.startswith("### hpnlab compare `link-failure`: ") and "| `converged_gap_ms` |" in text
    assert "**worse**" in text and "<details>" in text
    assert main(["compare", str(base), str(worse), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["regressions"] == len(cmp.regressions)
    assert {r["figure"] for r in doc["rows"] if r["verdict"] == "worse"} >= {"converged_gap_ms", "blackholed_flows"}


def test_cli_bad_input_exit_2_one_line_no_traceback(tmp_path):
    base = _write(tmp_path, "base", results())
    other = _write(tmp_path, "other", {**results(), "experiment": "tor-failure"})
    for args, want in ((["compare", str(base), str(tmp_path / "missing")], "candidate: "),
                       (["compare", str(base), str(other)], "experiment: "),
                       (["compare", str(base), str(_write(tmp_path, "x", results(variant="x")))], "variants: none"),
                       (["run", "link-failure", "--out", str(tmp_path / "o"), "--baseline", str(other)], "experiment: "),
                       (["run", "link-failure", "--out", str(tmp_path / "o"), "--baseline", str(tmp_path / "no")],
                        "--baseline: "),
                       (["run", "link-failure", "--out", str(tmp_path / "o"), "--junit", "x.xml"], "--junit: ")):
        p = subprocess.run([sys.executable, "-m", "hpnlab.cli", *args], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith(f"hpnlab: error: {want}") and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / "o").exists()  # refused before anything ran or was written


def test_the_shipped_link_failure_results_compare_clean_with_themselves():
    cmp = compare.compare(ROOT / "results" / "link-failure", ROOT / "results" / "link-failure")
    assert cmp.ok
    variants = {r.variant for r in cmp.rows}
    assert variants == {"dual-tor", "dual-tor-1conn", "dual-tor-clos", "single-tor"}
    figures = {r.figure for r in cmp.rows}
    assert {"converged_gap_ms", "blackholed_flows", "silent_at_repair_flows", "lost_packets", "recovered",
            "recovery_after_repair_ms", "lost_after_repair", "workload.throughput_pct", "workload.recovery_ms",
            "workload.back"} <= figures


def test_ignored_figures_are_reported_not_judged(tmp_path, capsys):
    base, cand = results(throughput=(97.0,)), results(throughput=(50.0,), gap=(300.0,))
    cmp = compare.compare(base, cand, ["workload.*"])
    r = row(cmp, "workload.throughput_pct")
    assert r.verdict == "ignored" and r.candidate["median"] == 50.0
    assert [x.figure for x in cmp.regressions if x.stream == "all"] == ["converged_gap_ms"]  # the rest still judged
    assert "not judged (--ignore): workload.*" in cmp.table()
    b, c = _write(tmp_path, "b", base), _write(tmp_path, "c", results(throughput=(50.0,)))
    assert main(["compare", str(b), str(c)]) == 1
    junit = tmp_path / "r.xml"
    assert main(["compare", str(b), str(c), "--ignore", "workload.*", "--junit", str(junit)]) == 0
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "0" and int(suite.get("skipped")) >= 1
    capsys.readouterr()


def test_a_workload_that_died_where_the_baseline_lived_is_worse():
    base, cand = results(gap=(1, 2, 3)), results(gap=(1, 2, 3))
    base["variants"]["clos"]["faults"][0]["workload"]["dead_runs"] = 0
    cand["variants"]["clos"]["faults"][0]["workload"]["dead_runs"] = 1
    r = row(compare.compare(base, cand), "workload.alive")
    assert r.verdict == "worse" and r.worse == "fewer" and "2 of 3 repetitions" in r.note
    assert row(compare.compare(cand, base), "workload.alive").verdict == "within"


def _two_variants(tmp_path):
    run = results(gap=(120.0, 125.0, 130.0), variant="bfd-on")
    off = results(gap=(900.0, 950.0, 1000.0), variant="bfd-off")
    off["variants"]["bfd-off"]["faults"][0]["fault"] = "hang s0r0a"  # another label at the same place
    run["variants"].update(off["variants"])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(run))
    return run, tmp_path / "run"


def test_two_variants_of_one_run_are_compared_fault_by_fault(tmp_path, capsys):
    run, folder = _two_variants(tmp_path)
    cmp = compare.compare(run, variants=("bfd-on", "bfd-off"))
    gap = row(cmp, "converged_gap_ms", variant="bfd-on vs bfd-off")
    assert gap.verdict == "worse" and gap.baseline["median"] == 125.0 and gap.candidate["median"] == 950.0
    assert gap.key == "variants.bfd-on.faults.0.converged_gap_ms" and gap.fault == FAULT
    assert any("'hang s0r0a' is compared with the baseline's" in n for n in cmp.notes)
    assert not any(r.verdict in ("baseline only", "candidate only") for r in cmp.rows)
    back = compare.compare(run, variants=("bfd-off", "bfd-on"))  # the other way round: better
    assert back.ok and row(back, "converged_gap_ms", variant="bfd-off vs bfd-on").verdict == "better"
    # the CLI: --variants on one folder, and FOLDER:VARIANT on each side, say the same
    assert main(["compare", str(folder), "--variants", "bfd-on,bfd-off", "--json"]) == 1
    by_flag = json.loads(capsys.readouterr().out)
    assert main(["compare", f"{folder}:bfd-on", f"{folder}:bfd-off", "--json"]) == 1
    by_colon = json.loads(capsys.readouterr().out)
    assert by_flag["rows"] == by_colon["rows"] and by_flag["baseline"] == f"{folder}:bfd-on"
    assert main(["compare", f"{folder}:bfd-on", f"{folder}:bfd-on"]) == 0  # a variant against itself


@pytest.mark.parametrize("argv,msg", [
    (["{run}", "--variants", "bfd-on,nope"], "candidate: the run has no variant 'nope'; it has bfd-on, bfd-off"),
    (["{run}", "--variants", "bfd-on"], "--variants 'bfd-on': give two, BASELINE,CANDIDATE"),
    (["{run}"], "give a candidate folder, or --variants A,B"),
    (["{run}:bfd-on", "{run}"], "candidate: give a variant on both sides"),
    (["{run}:bfd-on", "{run}:bfd-off", "--variants", "a,b"], "not both"),
])
def test_variant_comparisons_refuse_bad_input_in_one_line(tmp_path, capsys, argv, msg):
    _run, folder = _two_variants(tmp_path)
    assert main(["compare", *(a.format(run=folder) for a in argv)]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and err.count("\n") == 0, err
