"""Every shipped summary.txt (results/*/summary.txt, results/*/*/summary.txt) fits a terminal: no line wider
than report.WIDTH, and it ends with a one-line legend of every column or figure name. NOT_YET lists, each
with why, the shipped ones that do not yet; the test fails as well when a listed one has been fixed (take it
off the list). Root-free."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

from hpnlab.traffic.output import report

RESULTS = ROOT / "results"
NOT_YET: dict[str, str] = {
    "agg-failure/trial-8-rails": "its results.json predates the load figures runner.summary reads "
                                 "(survivor_ratio_pct): only a re-run can remake it",
}
HEAD = re.compile(rf"^{report.LEGEND_HEAD} \(.+ says more\):$")
ENTRY = re.compile(r"^  \S.*?: +\S")  # "  name: what it is"
MORE = re.compile(r"^ {3,}\S")  # a legend line's continuation, indented under its text


def shipped() -> list[str]:
    return sorted(p.parent.relative_to(RESULTS).as_posix()
                  for p in [*RESULTS.glob("*/summary.txt"), *RESULTS.glob("*/*/summary.txt")])


def problems(text: str) -> list[str]:
    """What keeps a summary.txt from fitting a terminal with its legend at its end ([] : nothing)."""
    lines = text.rstrip("\n").splitlines()
    out = [f"line {k + 1} is {len(ln)} columns wide (at most {report.WIDTH})"
           for k, ln in enumerate(lines) if len(ln) > report.WIDTH][:3]
    heads = [k for k, ln in enumerate(lines) if HEAD.match(ln)]
    if not heads:
        return out + ["no legend ('legend (PAGE says more):' and a line per name) at its end"]
    tail = lines[heads[-1] + 1:]
    if not tail or not ENTRY.match(tail[0]):
        out.append("its legend names nothing")
    out += [f"after the legend: {ln[:60]!r}" for ln in tail if not (ENTRY.match(ln) or MORE.match(ln))][:3]
    return out


@pytest.mark.parametrize("name", shipped())
def test_a_shipped_summary_fits_a_terminal_and_ends_with_its_legend(name):
    bad = problems((RESULTS / name / "summary.txt").read_text())
    if name in NOT_YET:
        assert bad, f"results/{name}/summary.txt fits now: take it off NOT_YET"
        return
    assert not bad, f"results/{name}/summary.txt: " + "; ".join(bad)


def test_not_yet_names_shipped_summaries_only():
    assert set(NOT_YET) <= set(shipped()), sorted(set(NOT_YET) - set(shipped()))


def test_a_wide_line_or_a_missing_legend_is_caught():
    good = "experiment x\n\nv / f / n 1\n           all\nlost       0\n" + "\n".join(report.legend_lines(["lost"]))
    assert problems(good) == []
    assert problems(good.replace("lost       0", "lost       0" + " " * 95 + "x")) == [
        "line 5 is 108 columns wide (at most 100)"]
    assert problems("experiment x\nlost 0\n") == [
        "no legend ('legend (PAGE says more):' and a line per name) at its end"]
    assert problems(good + "\nemulator: late 3 ms\n") == ["after the legend: 'emulator: late 3 ms'"]
