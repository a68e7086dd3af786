"""Plots that do not mislead: every stream is in the picture and its legend (one that delivered nothing
as a flat 0 line), the repetition shown is named, bins are labelled, and an infinite ratio is drawn."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import ROOT

plt = pytest.importorskip("matplotlib.pyplot")


def _figure(monkeypatch, fn, results, tmp_path):
    seen = []
    monkeypatch.setattr(plt, "close", lambda fig=None: seen.append(fig))
    assert fn(results, tmp_path / "p.png") == tmp_path / "p.png"
    return seen[0]


def test_failover_plot_draws_every_stream_and_names_the_repetition(monkeypatch, tmp_path):
    from hpnlab.traffic.output import report

    res = json.loads((ROOT / "results" / "ablations" / "results.json").read_text())
    fig = _figure(monkeypatch, report.plot, res, tmp_path)
    variants = [n for n, v in res["variants"].items() if v.get("runs")]
    for ax, name in zip(fig.axes, variants):
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        streams = res["variants"][name]["runs"][0]["probes"]
        assert len([lb for lb in labels if lb.startswith("probe ")]) == len(streams), (name, labels)
        assert "repetitions" in ax.get_title(loc="left") and "ms" in ax.get_ylabel()
    proxy = fig.axes[variants.index("no-arp-proxy")]
    assert any("nothing delivered" in t.get_text() for t in proxy.get_legend().get_texts())


def test_failover_plot_draws_every_repetition(monkeypatch, tmp_path):
    """A stalled repetition cannot hide: each repetition's workload is a line of its own, and the probes'
    band spans the repetitions (here the third delivered nothing in the fault)."""
    from hpnlab.traffic.output import report

    def run(k: int) -> dict:
        iters = [(t / 10, 40.0 if (k < 2 or not 2 <= t / 10 < 6) else 0.0) for t in range(100)]
        bins = [(t / 100, 250.0 if (k < 2 or not 2 <= t / 100 < 6) else 0.0) for t in range(1000)]
        return {"workload": {"kind": "allreduce", "series": iters, "baseline": {"baseline_rate": 40.0}},
                "probes": {"up": {"requested_pps": 250.0, "series": bins}},
                "faults": [{"fault": "hang s0r0a", "applied_s": 2.0, "reverted_s": 6.0}]}

    res = {"experiment": "x", "duration": 10, "variants": {"v": {"description": "d", "runs": [run(k) for k in range(3)]}}}
    fig = _figure(monkeypatch, report.plot, res, tmp_path)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("repetition" in lb for lb in labels) == 3 and "every one drawn" in ax.get_title(loc="left")
    assert any("median of 3, band min-max" in lb for lb in labels)
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == 0.0 and band[:, 1].max() == 100.0  # the stalled run is the band's floor


def test_load_balance_plot_draws_an_infinite_ratio(monkeypatch, tmp_path):
    from hpnlab.traffic.run import bulk

    res = json.loads((ROOT / "results" / "load-balance" / "results.json").read_text())
    fig = _figure(monkeypatch, bulk.plot, res, tmp_path)
    ratio_axes = [ax for ax in fig.axes if "downlink ratio" in ax.get_title()]
    assert ratio_axes
    for ax in ratio_axes:
        texts = [t.get_text() for t in ax.texts]
        for bar, text in zip(ax.patches, texts):
            assert bar.get_height() > 0, text  # no zero-height bar for 'inf'
        if "inf" in texts:
            assert any(b.get_hatch() for b in ax.patches)


def test_timeline_plot_of_a_critical_path_past_the_kept_events(monkeypatch, tmp_path):
    """results.json keeps a fault's first 400 events: a long flapping's longest gap can come after them, its
    critical path on a node with no row in the picture (the plot raised KeyError and the run exited 1)."""
    from hpnlab.traffic.analysis import timeline

    kept = [{"t_ms": float(t), "node": "s0h0", "kind": "carrier", "what": "r0p0: carrier down"} for t in range(5)]
    path = [{"t_ms": 1759.0, "node": "s0r0", "kind": "carrier", "what": "h0p0: carrier down"},
            {"t_ms": 1892.0, "node": "s0r0", "kind": "fib", "what": "add 10.0.0.2/32 via h0p0"}]
    tl = {"fault": "link-flap s0h0:r0p0,r0p1", "events": kept, "events_total": 537,
          "split": {"gap_ms": 139.4, "began_ms": 1759.0, "gap_closed_ms": 139.4, "path": path, "detection_ms": 0.0,
                    "protocol_ms": 133.0, "delivery_ms": 6.4, "cpu_ms": 2.0}}
    res = {"experiment": "x", "variants": {"single-tor": {"runs": [{"faults": [{"timeline": tl}]}]}}}
    fig = _figure(monkeypatch, timeline.plot, res, tmp_path)
    assert "critical path" not in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_without_matplotlib_run_names_the_extra_that_installs_it(monkeypatch):
    from hpnlab.traffic import runner

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    why = runner.no_plot_reason()
    assert "pip install 'hpnlab[plot]'" in why and "./bootstrap install" in why and "--reanalyse" in why
