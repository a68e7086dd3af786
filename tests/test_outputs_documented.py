"""Every file `hpnlab run` writes into its --out folder (hpnlab.traffic.output.outputs.OUTPUTS: the names the runner
writes by) is named in `hpnlab run --help` and in docs/results.md's table of outputs, and the runner writes
nothing there that the list leaves out. Root-free: the files are written from a shipped results.json."""

from __future__ import annotations

import json
import re

from tests.conftest import ROOT

from hpnlab.cli import build_parser, walk_parsers
from hpnlab.traffic import runner
from hpnlab.traffic.output import outputs

PAGE = ROOT / "docs" / "results.md"
ROW = re.compile(r"^\| `DIR/([^`]+)` \|", re.M)  # docs/results.md's outputs table: | `DIR/summary.txt` | ... |


def run_help() -> str:
    return next(p for path, p in walk_parsers(build_parser(), ["hpnlab"]) if path == ["hpnlab", "run"]).format_help()


def documented(name: str, rows: list[str]) -> bool:
    """Whether a row of the outputs table names ``name`` (a folder, ``raw/``: a row under it)."""
    return any(r == name or (name.endswith("/") and r.startswith(name)) for r in rows)


def undocumented(names: tuple[str, ...], help_text: str, page_text: str) -> list[str]:
    """The outputs that `run --help` or the results page's table leaves out, one line each."""
    rows = ROW.findall(page_text)
    out = [f"`hpnlab run --help` does not name {n}" for n in names
           if not re.search(r"(?<![\w.-])" + re.escape(n) + r"(?![\w-])", help_text)]
    out += [f"docs/results.md's table of outputs has no row for DIR/{n}" for n in names if not documented(n, rows)]
    return out


def test_every_output_is_named_in_run_help_and_the_results_page():
    bad = undocumented(outputs.OUTPUTS, run_help(), PAGE.read_text())
    assert not bad, "\n".join(bad)


def test_a_page_or_help_that_omits_an_output_fails():
    page = PAGE.read_text()
    row = next(ln for ln in page.splitlines() if ln.startswith("| `DIR/timeline.png` |"))
    assert undocumented(outputs.OUTPUTS, run_help(), page.replace(row + "\n", "")) == [
        "docs/results.md's table of outputs has no row for DIR/timeline.png"]
    raw = next(ln for ln in page.splitlines() if ln.startswith("| `DIR/raw/"))
    assert undocumented(outputs.OUTPUTS, run_help(), page.replace(raw + "\n", "")) == [
        "docs/results.md's table of outputs has no row for DIR/raw/"]
    short_help = run_help().replace("DIR/report.html", "DIR/report")
    assert undocumented(outputs.OUTPUTS, short_help, page) == ["`hpnlab run --help` does not name report.html"]


def test_the_runner_writes_only_the_listed_outputs(tmp_path):
    """write_results (the end of every run and of --reanalyse) into an empty folder: every file it leaves is
    in OUTPUTS (raw/ is the run's own, written while it runs, under outputs.RAW)."""
    res = json.loads((ROOT / "results" / "one-way-failure" / "results.json").read_text())
    runner.write_results(res, tmp_path)
    written = {p.name + ("/" if p.is_dir() else "") for p in tmp_path.iterdir()}
    assert written <= set(outputs.OUTPUTS), sorted(written - set(outputs.OUTPUTS))
    assert {outputs.RESULTS, outputs.SUMMARY, outputs.REPORT} <= written
