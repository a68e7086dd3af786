"""report.html (hpnlab.traffic.output.htmlreport, `hpnlab report`): made from results.json, self-contained, and it
works in a real browser: charts with data, the summary table, the replay colouring the failed link at the
fault. Root-free but for the one real run at the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import page, serve_file_url  # noqa: F401
from tests.conftest import ROOT

from hpnlab.traffic.output import htmlreport, report

RESULTS = ROOT / "results"
SHIPPED = RESULTS / "link-failure"  # 4 variants x 3 repetitions, one access link down at 2 s, repaired at 6 s
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I)


def _data(page_text: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page_text, re.S)
    assert m, "the page holds no data block"
    return json.loads(m.group(1))


def _experiment_results() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("results.json") if htmlreport.is_experiment(json.loads(p.read_text())))


# --- root-free ------------------------------------------------------------------------------------------------------
def test_a_report_holds_its_data_and_nothing_from_outside(tmp_path):
    res = json.loads((SHIPPED / "results.json").read_text())
    (tmp_path / "results.json").write_text(json.dumps(res))
    out = htmlreport.write(tmp_path)
    text = out.read_text()
    assert not EXTERNAL.findall(text), EXTERNAL.findall(text)[:3]
    assert "<script src" not in text and "<link" not in text
    d = _data(text)
    assert [v["name"] for v in d["variants"]] == list(res["variants"])
    for v, (name, rv) in zip(d["variants"], res["variants"].items()):
        assert len(v["runs"]) == len(rv["runs"]) == 3
        for run, rrun in zip(v["runs"], rv["runs"]):
            for stream, ys in run["delivery"].items():
                assert ys and max(ys) > 50, (name, stream)  # delivered, in % of the sending rate
            assert [f["label"] for f in run["faults"]] == [f["fault"] for f in rrun["faults"]]
        assert v["picture"] and "data-link=" in v["picture"]
    # summary.txt's blocks, a block per variant and fault, its cells as summary.txt prints them
    blocks = d["summary"]["blocks"]
    assert [b["variant"] for b in blocks] == list(res["variants"])  # one fault each
    f = res["variants"]["dual-tor"]["faults"][0]
    assert blocks[0]["cells"]["longest gap ms"][0] == report._cells(f, f, 3)["longest gap ms"]
    assert blocks[0]["cells"]["longest gap ms"][0] in d["summary"]["text"]
    assert {x["name"]: x["legend"] for x in d["summary"]["figures"]} == \
        {k: t for k, t in report.LEGEND.items() if k not in ("variant", "fault", "stream", "n")}
    assert d["provenance"]["commit"] == res["provenance"]["commit"]
    size = out.stat().st_size
    assert f"{size / 1e3:.0f} kB" in text or f"{size / 1e6:.2f} MB" in text  # the footer says its size


def test_every_run_writes_its_report(tmp_path):
    """write_results (the end of every run, and --reanalyse) puts report.html beside results.json."""
    from hpnlab.traffic import runner

    res = json.loads((RESULTS / "one-way-failure" / "results.json").read_text())
    runner.write_results(res, tmp_path)
    d = _data((tmp_path / "report.html").read_text())
    assert [v["name"] for v in d["variants"]] == list(res["variants"])
    assert (tmp_path / "summary.txt").read_text() == d["summary"]["text"] + "\n"


def test_series_fit_a_screen():
    assert htmlreport.bin_width(12) == 0.01
    for duration in (12, 60, 300, 600):
        w = htmlreport.bin_width(duration)
        assert (duration - htmlreport.TAIL_S) / w <= htmlreport.MAX_POINTS
    run = {"probes": {"p": {"requested_pps": 100.0, "series": [(k * 0.01, 100.0) for k in range(60000)]}}}
    ys = htmlreport.delivery(run, 600, htmlreport.bin_width(600))["p"]
    assert len(ys) <= htmlreport.MAX_POINTS and ys[10] == 100.0


def test_the_replay_follows_the_faults_and_what_the_agents_saw():
    res = json.loads((SHIPPED / "results.json").read_text())
    v = res["variants"]["dual-tor"]
    topo, why = htmlreport.variant_topology(res, "dual-tor", SHIPPED / "results.json")
    assert topo is not None, why
    run = v["runs"][0]
    f = run["faults"][0]
    links, nodes = htmlreport.link_changes(v, run, topo, res["duration"])
    failed = "s0h0:r0p0|s0r0a:h0p0"
    mine = [c for c in links if c[1] == failed]
    assert mine[0] == [round(f["applied_s"], 3), failed, "down"]
    assert mine[-1][2] == "up" and mine[-1][0] >= f["reverted_s"]  # up once carrier and LACP are back
    assert {c[1] for c in links} == {failed} and nodes == []
    # a flap: its downs and ups from its period and count; a hang: the node, not its links
    flap = {**run, "faults": [{**f, "kind": "link-flap", "timeline": None}]}
    vf = {**v, "faults_planned": [{**v["faults_planned"][0], "kind": "link-flap", "period": 1.0, "count": 3}]}
    states = [c[2] for c in htmlreport.link_changes(vf, flap, topo, res["duration"])[0]]
    assert states == ["down", "up"] * 3
    hang = {**run, "faults": [{**f, "kind": "hang", "node": "agg0-0", "timeline": None}]}
    vh = {**v, "faults_planned": [{**v["faults_planned"][0], "kind": "hang", "node": "agg0-0", "iface": None}]}
    assert htmlreport.link_changes(vh, hang, topo, res["duration"]) == \
        ([], [[f["applied_s"], "agg0-0", "hung"], [f["reverted_s"], "agg0-0", "up"]])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpnlab.cli", *args], capture_output=True, text=True, timeout=120)


def test_report_command_refuses_what_holds_no_results(tmp_path):
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "nothing", tmp_path / "empty"):
        r = _cli("report", str(target))
        assert r.returncode == 2 and "no results.json" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "empty" / "report.html").exists()


def test_a_bench_folder_gets_a_plain_page(tmp_path):
    """A bench's result (no experiment's results.json): its provenance, summaries, pictures and JSON on one
    self-contained page, no script."""
    import shutil

    d = tmp_path / "idle-cpu"
    shutil.copytree(RESULTS / "idle-cpu", d, ignore=shutil.ignore_patterns("report.html"))
    r = _cli("report", str(d))
    assert r.returncode == 0, r.stderr
    text = (d / "report.html").read_text()
    assert not EXTERNAL.search(text) and "<script" not in text
    for s in d.rglob("summary.txt"):
        first = s.read_text().splitlines()[0]
        assert report_escape(first) in text, (s, first)
    assert "no provenance recorded" in text or "clean" in text or "dirty" in text


def report_escape(line: str) -> str:
    from html import escape

    return escape(line)


def test_every_shipped_result_folder_has_its_report():
    """Every results/<name>/ holds a report.html: a run's interactive one, or a bench's plain page."""
    missing = [p.name for p in sorted(RESULTS.iterdir()) if p.is_dir() and not (p / "report.html").exists()]
    assert not missing, f"no report.html (hpnlab report results/NAME): {missing}"


def test_every_shipped_experiment_result_has_its_report():
    found = _experiment_results()
    assert len(found) >= 20
    for res in found:
        page_ = res.parent / "report.html"
        assert page_.exists(), f"{page_} is missing: hpnlab report {res.parent.relative_to(ROOT)}"
        d = _data(page_.read_text())
        r = json.loads(res.read_text())
        assert d["experiment"] == r["experiment"] and [v["name"] for v in d["variants"]] == list(r["variants"])
        assert page_.stat().st_size < 3_000_000, f"{page_}: {page_.stat().st_size} bytes"


# --- in the browser -----------------------------------------------------------------------------------------------
READY = "return window.hpnlabReport && window.hpnlabReport.ready"


def _charts_have_data(page) -> list[int]:
    lengths = page.js("return hpnlabReport.plots.map(u => u.data.length > 1 ? "
                      "Math.min(u.data[0].length, Math.max(...u.data.slice(1).map(s => s.filter(y => y != null).length))) : 0)")
    assert lengths and all(n > 0 for n in lengths), lengths
    return lengths


def _slide(page, t: float) -> None:
    """Move the replay's slider as a user does: its value, then its input event."""
    page.js("const s = hpnlabReport.replay.slider; s.value = arguments[0]; s.dispatchEvent(new Event('input'));", t)


def test_a_shipped_report_in_the_browser(page):
    path = SHIPPED / "report.html"
    page.open(serve_file_url(path))
    page.wait_for(READY, 20, "the report drawn")
    assert page.console_errors() == []
    assert page.js("return performance.getEntriesByType('resource').map(e => e.name)") == []  # nothing fetched
    names = list(json.loads((SHIPPED / "results.json").read_text())["variants"])
    _charts_have_data(page)
    assert page.js("return hpnlabReport.plots.length") >= len(names)
    blocks = page.js("return [...document.querySelectorAll('#summary-blocks .block')].map(b => b.dataset.variant)")
    assert blocks == names  # a block per variant (one fault each)
    tips = page.js("return [...document.querySelectorAll('#summary-blocks th.fig')].map(th => th.title)")
    assert tips and all(": " in t and len(t) > 20 for t in tips), tips[:3]
    page.screenshot("report-link-failure")
    # zoom into the fault's window: the receivers' own 10 ms bins; over the whole run, wider ones
    step = "return hpnlabReport.plots[0].binS"
    assert page.js(step) > 0.01
    page.js("hpnlabReport.plots[0].setScale('x', {min: 1.8, max: 2.6})")
    page.wait_for("return hpnlabReport.plots[0].binS === 0.01", 5, "10 ms bins in the zoomed window")
    assert page.js("const u = hpnlabReport.plots[0]; return [u.scales.x.min, u.scales.x.max]") == [1.8, 2.6]
    assert page.js("const u = hpnlabReport.plots[0]; return u.data[1].filter((y, i) => y != null && "
                   "u.data[0][i] >= 1.8 && u.data[0][i] <= 2.6).length") >= 70  # every 10 ms bin drawn
    # switch repetition 2 off: its series hidden, the others shown
    page.js("document.querySelector('#v-dual-tor input[data-rep=\"2\"]').click()")
    shown = page.js("return hpnlabReport.plots[0].series.slice(1).map(s => [s.label, s.show])")
    assert shown and all(on == ("rep 2" not in label) for label, on in shown), shown
    # the replay: the failed access link before the fault, during it, after its repair
    page.js("hpnlabReport.replay.select('dual-tor', 0)")
    d = page.js("return hpnlabReport.data.variants.find(v => v.name === 'dual-tor').runs[0].faults[0]")
    link, down = "s0h0:r0p0|s0r0a:h0p0", page.js("return hpnlabReport.colours.down")
    for t, is_down in ((d["a"] - 0.5, False), (d["a"] + 0.5, True), (d["b"] + 1.0, False)):
        _slide(page, t)
        colour = page.js("return hpnlabReport.replay.linkColour(arguments[0])", link)
        assert (colour == down) is is_down, (t, colour)
    _slide(page, d["a"] + 0.5)
    page.js("document.getElementById('replay').scrollIntoView()")
    page.screenshot("report-link-failure-replay")
    assert page.console_errors() == []


# --- a real run (root) -------------------------------------------------------------------------------------------
SMOKE = """name: report-smoke
description: one access link down and up; the report of a real run
duration: 5
repetitions: 1
lab_prefix: rpt
probes:
  - {name: upstream, src: s0h0, dst: s1h0, flows: 16, rate: 250}
  - {name: downstream, src: s1h0, dst: s0h0, flows: 16, rate: 250}
faults:
  - {kind: link-down, node: s0h0, iface: r0p0, at: 1.5, until: 3}
variants:
  - {name: clos, spec: {tier2: clos}}
"""


@pytest.mark.root
def test_the_report_of_a_real_run(tmp_path, page):
    from tests.lib.labs import _need_lab_machine, hpnlab

    _need_lab_machine()
    exp = tmp_path / "smoke.yml"
    exp.write_text(SMOKE)
    out = tmp_path / "out"
    hpnlab("run", str(exp), "--out", str(out), timeout=600)
    assert (out / "report.html").exists(), "hpnlab run wrote no report.html"
    page.open(serve_file_url(out / "report.html"))
    page.wait_for(READY, 20, "the report drawn")
    assert page.console_errors() == []
    _charts_have_data(page)
    d = page.js("return hpnlabReport.data.variants[0].runs[0].faults[0]")
    link, down = "s0h0:r0p0|s0r0a:h0p0", page.js("return hpnlabReport.colours.down")
    _slide(page, d["a"] + 0.4)
    assert page.js("return hpnlabReport.replay.linkColour(arguments[0])", link) == down
    _slide(page, d["b"] + 1.2)
    assert page.js("return hpnlabReport.replay.linkColour(arguments[0])", link) != down
    page.screenshot("report-real-run")
