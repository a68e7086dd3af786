"""On a real lab, the issue's "done when": `hpnlab run --baseline` fails a deliberately worse configuration
of link-failure's Clos variant (no host /32s in BGP: the aggs keep sending to the ToR that lost the host,
a black hole for the whole fault) and passes the same configuration. One variant, the file's 12 s (a
shorter run cuts the workload's window after the repair short).

The worse configuration is judged against the shipped results/link-failure: its black hole is no matter of
machine speed. The same configuration is judged against a baseline this test records first, on the machine
that runs it (3 repetitions), as docs/baselines.md tells a user to: the timed figures follow the machine's
speed, and a CI runner slower than the one that made the shipped file moved the converged gap past the
shipped limit (162.2 ms against 140.89) while the fabric did what it always does. A candidate whose worse
figures all belong to faults the lateness meter flagged is run again (at most 3 times), as docs/baselines.md
tells a user to.

The all-reduce's figures are reported here and not judged (--ignore 'workload.*'): they follow the CPU
share the all-reduce gets, which the lateness meter does not bound, and on this shared 2-core machine
unmodified runs moved them past the shipped runs' spread while every probe figure stayed within it
(bench/baseline_gate.py; results/baseline-gate/summary.txt)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, leftovers

pytestmark = pytest.mark.root
VARIANT = "dual-tor-clos"
BASELINE = ROOT / "results" / "link-failure"


def _experiment(tmp_path, prefix: str, extra_spec: dict | None = None):
    """link-failure.yml as shipped, its labs named <prefix><i>; ``extra_spec`` merged into the Clos variant."""
    doc = yaml.safe_load((ROOT / "experiments" / "link-failure.yml").read_text())
    doc["spec"] = str(ROOT / "experiments" / doc["spec"])
    doc["lab_prefix"] = prefix
    if extra_spec:
        [v] = [v for v in doc["variants"] if v["name"] == VARIANT]
        v["spec"] = {**v.get("spec", {}), **extra_spec}
    path = tmp_path / f"{prefix}.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(tmp_path, exp, name: str, baseline=BASELINE):
    out, junit = tmp_path / name, tmp_path / f"{name}.xml"
    p = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(exp), "--out", str(out), "--variants", VARIANT,
                        "--repetitions", "1", "--baseline", str(baseline), "--ignore", "workload.*",
                        "--junit", str(junit), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr[-3000:]  # 2 would be bad input, anything else a crash
    doc = json.loads(p.stdout)
    assert not doc["variants"][VARIANT]["error"], doc["variants"][VARIANT]["error"]
    return p.returncode, doc["comparison"], ET.parse(junit).getroot()


def _worse(cmp: dict) -> set[tuple[str, str]]:
    return {(r["stream"], r["figure"]) for r in cmp["rows"] if r["verdict"] == "worse"}


def _worse_only_where_late(cmp: dict) -> bool:
    """Some row is worse, and every worse row says the meter flagged it, or its fault's window, in the candidate."""
    worse = [r for r in cmp["rows"] if r["verdict"] == "worse"]
    return bool(worse) and all("candidate flagged" in r["note"] or "candidate's fault window flagged" in r["note"]
                               for r in worse)


def test_a_worse_row_is_run_again_only_where_its_fault_was_flagged():
    def row(stream, verdict, note=""):
        return {"variant": "dual-tor-clos", "fault": "link-down s0h0:r0p0", "stream": stream, "figure": "converged_gap_ms",
                "verdict": verdict, "note": note}
    flagged = "candidate flagged in 1 of 1; baseline flagged in 3 of 3; the machine was late"
    window = "candidate's fault window flagged in 1 of 1; the machine was late"
    assert _worse_only_where_late({"rows": [row("all", "worse", flagged), row("in-set", "worse", window)]})
    assert _worse_only_where_late({"rows": [row("all", "within", flagged), row("in-set", "worse", window)]})
    assert not _worse_only_where_late({"rows": [row("all", "worse", flagged), row("in-set", "worse")]})  # fails
    assert not _worse_only_where_late({"rows": [row("in-set", "worse", "baseline's fault window flagged in 1 of 3")]})
    assert not _worse_only_where_late({"rows": [row("all", "within", flagged)]})  # nothing worse: done


def test_a_worse_configuration_fails_the_shipped_baseline(tmp_path):
    _need_lab_machine()
    code, cmp, junit = _run(tmp_path, _experiment(tmp_path, "bgw", {"mechanisms": {"host_routes": False}}), "worse")
    print(json.dumps([r for r in cmp["rows"] if r["verdict"] == "worse"], indent=1))
    assert code == 1 and not cmp["ok"]
    # the flows to the host that lost a port: silent for the whole fault, where the baseline lost none
    assert {("all", "blackholed_flows"), ("downstream", "blackholed_flows"), ("in-set", "blackholed_flows"),
            ("all", "longest_gap_ms")} <= _worse(cmp)
    failures = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert "link-down s0h0:r0p0 / all / blackholed_flows" in failures
    assert int(junit.get("failures")) == cmp["regressions"] == len(failures)
    assert leftovers("bgw2") == []


def _record_baseline(tmp_path, exp) -> Path:
    out = tmp_path / "baseline"
    p = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(exp), "--out", str(out), "--variants", VARIANT,
                        "--repetitions", "3", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_the_same_configuration_passes_a_baseline_recorded_on_this_machine(tmp_path):
    _need_lab_machine()
    exp = _experiment(tmp_path, "bgs")
    baseline = _record_baseline(tmp_path, exp)
    # Run again while every worse row is of a fault the lateness meter flagged in the candidate, as
    # docs/baselines.md tells a user to ("run it again on a quieter machine before believing it"): a
    # fresh-clone CI run judged routes_last_ms worse, 179.4 ms against a limit of 172.16, with the emulator
    # 39.9 ms late in it. A stream's rows (in-set, 160.4 ms against 148.12 in a run here) share the fault's
    # window and say when it was flagged. A worse row the meter did not flag in the candidate fails at once.
    for attempt in range(3):
        code, cmp, junit = _run(tmp_path, exp, f"same{attempt}", baseline=baseline)
        worse = [r for r in cmp["rows"] if r["verdict"] == "worse"]
        if not _worse_only_where_late(cmp):
            break
        print(f"attempt {attempt + 1}: worse only where the machine was late, run again:",
              [(r["stream"], r["figure"], r["candidate"], r["limit"], r["note"]) for r in worse])
    judged = [r for r in cmp["rows"] if r["verdict"] in ("worse", "within", "better")]
    print("\n".join(f"{r['stream']} {r['figure']}: {r['candidate']} (limit {r['limit']}) {r['verdict']}" for r in judged))
    assert code == 0 and cmp["ok"], [r for r in cmp["rows"] if r["verdict"] == "worse"]
    # every probe figure of every stream was judged, not skipped
    assert {(r["stream"], r["figure"]) for r in judged} >= {
        (s, f) for s in ("all", "upstream", "downstream", "in-set")
        for f in ("converged_gap_ms", "blackholed_flows", "lost_packets", "recovery_after_repair_ms")}
    assert {r["figure"] for r in cmp["rows"] if r["verdict"] == "ignored"} >= {"workload.throughput_pct"}
    assert junit.get("failures") == "0"
    assert leftovers("bgs2") == []
