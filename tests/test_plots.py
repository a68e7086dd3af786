"""Plots that do not mislead: every stream is in the picture and its legend (one that delivered nothing
as a flat 0 line), the repetition shown is named, bins are labelled, and an infinite ratio is drawn."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT

plt = pytest.importorskip("matplotlib.pyplot")


def _figure(monkeypatch, fn, results, tmp_path):
    seen = []
    monkeypatch.setattr(plt, "close", lambda fig=None: seen.append(fig))
    assert fn(results, tmp_path / "p.png") == tmp_path / "p.png"
    return seen[0]


def test_failover_plot_draws_every_stream_and_names_the_repetition(monkeypatch, tmp_path):
    from hpnlab.traffic import report

    res = json.loads((ROOT / "results" / "ablations" / "results.json").read_text())
    fig = _figure(monkeypatch, report.plot, res, tmp_path)
    variants = [n for n, v in res["variants"].items() if v.get("runs")]
    for ax, name in zip(fig.axes, variants):
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        streams = res["variants"][name]["runs"][0]["probes"]
        assert len([lb for lb in labels if lb.startswith("probe ")]) == len(streams), (name, labels)
        assert "repetition 1 of" in ax.get_title(loc="left") and "ms" in ax.get_ylabel()
    proxy = fig.axes[variants.index("no-arp-proxy")]
    assert any("nothing delivered" in t.get_text() for t in proxy.get_legend().get_texts())


def test_load_balance_plot_draws_an_infinite_ratio(monkeypatch, tmp_path):
    from hpnlab.traffic import bulk

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
