"""The command workload on a lab (root, network namespaces, FRR): a user's own program, one rank per host,
through `hpnlab run`. A plain-Python job (tests/fixtures/echo_job.py: ranks talk to rank 0 over the fabric,
one rank crashes on purpose) exercises it without torch; the shipped torch example
(examples/jobs/torch_allreduce.py) runs where torch is installed and skips, saying why, where it is not."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, hpnlab, leftovers

pytestmark = pytest.mark.root


def _run(tmp_path: Path, name: str, prefix: str, duration: float, workload: dict, faults: list[dict]) -> dict:
    """A one-variant (Clos tier 2) experiment on the default lab: one probe stream, the workload, the faults."""
    exp = tmp_path / f"{name}.yml"
    exp.write_text(json.dumps({
        "name": name, "spec": str(ROOT / "examples" / "default.yml"), "duration": duration, "repetitions": 1,
        "lab_prefix": prefix, "probes": [{"name": "up", "src": "s0h0", "dst": "s1h0", "flows": 8, "rate": 100}],
        "workload": workload, "faults": faults, "variants": [{"name": "clos", "spec": {"tier2": "clos"}}]}))
    out = tmp_path / "out"
    r = hpnlab("run", str(exp), "--out", str(out), timeout=600)
    print(r.stdout)
    res = json.loads((out / "results.json").read_text())
    v = res["variants"]["clos"]
    assert not v.get("error"), v.get("error")
    assert leftovers(f"{prefix}0") == []
    return res


def _no_process_runs(needle: str) -> list[int]:
    """PIDs whose command line holds ``needle`` (the job's ranks and anything they left)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                out.append(int(pid))
        except OSError:
            pass
    return out


def test_a_plain_job_runs_across_the_fabric_and_a_crashed_rank_is_a_result(tmp_path):
    _need_lab_machine()
    job = ROOT / "tests" / "fixtures" / "echo_job.py"
    res = _run(tmp_path, "command-check", "cmd", 7, {
        "kind": "command", "hosts": ["s1h0", "s0h0", "s0h1", "s1h1"], "report_rank": 1, "port": 29555,
        "argv": ["{python}", str(job), "--crash-rank", "3", "--crash-after", "3"]},
        [{"kind": "link-down", "node": "s0h0", "iface": "r0p1", "at": 2, "until": 4}])
    v = res["variants"]["clos"]
    run = v["runs"][0]
    w = run["workload"]
    assert w["kind"] == "command" and w["world"] == 4 and w["report_rank"] == 1
    status = {r["rank"]: r for r in w["ranks"]}
    # rank 1 (on s0h0, the failed link's host) crossed the fabric for the whole run and was stopped at its end
    assert status[1]["status"] in ("stopped", "killed") and status[1]["iterations"] > 50, status[1]
    assert status[0]["status"] in ("stopped", "killed") and status[2]["status"] in ("stopped", "killed")
    # rank 3 crashed on purpose 3 s after it started: a result, with its exit code and last line
    assert status[3]["status"] == "crashed" and status[3]["exit_code"] == 7, status[3]
    assert status[3]["stderr_tail"][-1] == "rank 3: crashing on purpose" and w["crashed"] == [3]
    assert v["command"]["crashed_runs"] == 1 and v["command"]["crashed_ranks"][0]["rank"] == 3
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "repetition 1 rank 3 on s1h1: crashed, exit 7: rank 3: crashing on purpose" in summary
    # its per-iteration lines are the workload's figures: a baseline, a series, the fault's throughput
    assert w["baseline"]["baseline_rate"] > 5 and len(w["series"]) >= 20 and w["iteration_ms"] > 0
    f = run["faults"][0]
    assert f["workload"]["throughput_pct"] is not None and f["workload"]["longest_halt_ms"] > 0
    assert "recovery_ms" in f["workload"]
    raw = tmp_path / "out" / "raw" / "clos" / "rep1"
    assert (raw / "command-3.stderr").read_text().endswith("rank 3: crashing on purpose\n")
    assert (raw / "command-1.stdout").read_text().count('"dur"') == status[1]["iterations"]
    assert _no_process_runs(str(job)) == []  # every rank's process group is gone


def test_the_torch_example_through_the_command_workload(tmp_path):
    _need_lab_machine()
    try:
        import torch.distributed as dist
    except ImportError as e:
        why = f"needs torch ({e}); ./bootstrap test installs the CPU build: pip install -e .[torch]"
        print(f"SKIP: {why}", file=sys.stderr)
        pytest.skip(why)
    assert dist.is_gloo_available()
    res = _run(tmp_path, "torch-check", "tch", 8, {
        "kind": "command", "warmup": 8, "env": {"OMP_NUM_THREADS": "1"},
        "argv": ["{python}", str(ROOT / "examples" / "jobs" / "torch_allreduce.py"), "--size-kb", "256"]},
        [{"kind": "link-down", "node": "s0h0", "iface": "r0p1", "at": 3, "until": 5}])
    run = res["variants"]["clos"]["runs"][0]
    w = run["workload"]
    assert [r["status"] for r in w["ranks"]] == ["stopped"] * 4, w["ranks"]  # SIGTERM ends it cleanly
    assert all(r["exit_code"] == 0 for r in w["ranks"]), w["ranks"]
    # every rank printed the same iterations (an all-reduce completes on all ranks); rank 0's are the figures
    counts = {r["iterations"] for r in w["ranks"]}
    assert max(counts) - min(counts) <= 1 and min(counts) > 20, w["ranks"]
    assert w["iteration_ms"] > 0 and w["baseline"]["baseline_rate"] > 1, w
    f = run["faults"][0]["workload"]
    assert f["throughput_pct"] is not None and f["longest_halt_ms"] > 0 and "recovery_ms" in f, f
    assert _no_process_runs("torch_allreduce.py") == []
