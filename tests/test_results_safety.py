"""Results are never silently emptied: re-analysing a folder without every repetition's raw data, or
running into a folder that holds results, is one line (exit 2) and leaves every file as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from hpnlab.cli import main
from tests.conftest import ROOT

# what a clean checkout holds of results/: raw/ is git-ignored (a local re-run leaves one beside them)
SHIPPED = shutil.ignore_patterns("raw")


def _digest(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("shipped", ["link-failure", "load-balance", "ablations"])
def test_reanalysing_shipped_results_without_raw_data_is_refused_and_writes_nothing(shipped, tmp_path, capsys):
    src = ROOT / "results" / shipped
    if not (src / "results.json").exists():
        pytest.skip(f"{src} is not shipped in this checkout")
    out = tmp_path / shipped
    shutil.copytree(src, out, ignore=SHIPPED)
    before = _digest(out)
    assert main(["run", shipped, "--out", str(out), "--reanalyse"]) == 2
    err = capsys.readouterr().err
    assert "no raw/ folder" in err and "nothing was written" in err and err.count("\n") == 1
    assert _digest(out) == before


def test_reanalysing_with_one_repetition_missing_is_refused(tmp_path, capsys):
    out = tmp_path / "lf"
    shutil.copytree(ROOT / "results" / "link-failure", out, ignore=SHIPPED)
    res = json.loads((out / "results.json").read_text())
    name = next(n for n, v in res["variants"].items() if len(v.get("runs", [])) >= 2)
    (out / "raw" / name / "rep1").mkdir(parents=True)
    (out / "raw" / name / "rep1" / "run.json").write_text("{}")
    before = _digest(out)
    assert main(["run", "link-failure", "--out", str(out), "--reanalyse"]) == 2
    err = capsys.readouterr().err
    assert f"variant '{name}' repetition 2" in err and "rep2/run.json is missing" in err
    assert _digest(out) == before


@pytest.mark.root
def test_running_into_a_folder_with_results_needs_force(tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.skip("'hpnlab run' checks for root before its --out")
    out = tmp_path / "lf"
    shutil.copytree(ROOT / "results" / "link-failure", out, ignore=SHIPPED)
    before = _digest(out)
    assert main(["run", "link-failure", "--out", str(out), "-n", "1"]) == 2
    assert "already holds results" in capsys.readouterr().err and _digest(out) == before
    shipped = ROOT / "results" / "link-failure"
    assert main(["run", "link-failure", "--out", str(shipped), "-n", "1"]) == 2
    assert "shipped with hpnlab, tracked by git" in capsys.readouterr().err
