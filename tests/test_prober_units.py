"""The black-box prober's root-free cores: probe-path selection from a path map (every directed access
and fabric link on >= 2 probed paths) and tomography (per-link loss bounds, the suspect and its
confidence), on a synthetic path map of the default lab's rail 0 built from its topology."""

from __future__ import annotations

import itertools
import random

import pytest

from hpnlab import probeplan, tomography
from hpnlab.tomography import PathStat
from hpnlab.traffic import experiment
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def cfgs():
    return experiment.load(ROOT / "experiments" / "link-failure.yml").plans[0].cfgs


def _rows(cfgs, rails=(0, 1), sports: int = 16, seed: int = 1, cross_rail: bool = True) -> list[dict]:
    """A path map as the hash would give it: per NIC pair through the aggs (another segment or another
    rail) and source port, a random port (ToR), agg of that ToR's plane, and the far ToR of that plane."""
    rng = random.Random(seed)
    hosts = sorted(n for n, c in cfgs.items() if c.role == "host")
    seg = {h: cfgs[cfgs[h].nic(0).tors[0]].segment for h in hosts}
    rows = []
    for (s, rs), (d, rd) in itertools.permutations([(h, r) for h in hosts for r in rails], 2):
        if (seg[s] == seg[d] and rs == rd) or (rs != rd and not cross_rail) or s == d:
            continue
        for sp in range(20000, 20000 + sports):
            tor = rng.choice(cfgs[s].nic(rs).tors)
            agg = rng.choice([i.peer for i in cfgs[tor].interfaces if i.kind == "uplink"])
            far = next(t for t in cfgs[d].nic(rd).tors if cfgs[t].plane == cfgs[tor].plane)
            rows.append({"src": s, "dst": d, "sport": sp, "port": "p", "tor": tor, "agg": agg, "dst_tor": far})
    return rows


def test_choice_covers_every_link_twice_with_few_paths(cfgs):
    rows = _rows(cfgs)
    want = probeplan.fabric_links(cfgs)
    chosen, have = probeplan.choose(rows, 2, want)
    assert probeplan.short(have) == [] and len(want) == 64  # 16 access + 16 uplinks, both ways
    assert all(n >= 2 for n in have.values()) and probeplan.alike(chosen, want) == []
    assert len(chosen) < len(rows) / 10, len(chosen)  # far fewer than the map's source ports


def test_one_rail_of_two_segments_cannot_tell_uplink_from_downlink(cfgs):
    """Within a rail, every path up s0r0a>agg0-0 comes down agg0-0>s1r0a: the choice says so."""
    chosen, have = probeplan.choose(_rows(cfgs, rails=(0,), cross_rail=False), 2, probeplan.fabric_links(cfgs, [0]))
    assert ["agg0-0>s1r0a", "s0r0a>agg0-0"] in probeplan.alike(chosen, list(have))


def test_choice_reports_links_no_candidate_crosses(cfgs):
    rows = [r for r in _rows(cfgs) if r["agg"] != "agg0-1"]
    chosen, have = probeplan.choose(rows, 2, probeplan.fabric_links(cfgs))
    assert "s0r0a>agg0-1" in probeplan.short(have) and have["s0r0a>agg0-1"] == 0


def _stats(chosen, bad: dict[str, float], n: int = 1000, seed: int = 2) -> list[PathStat]:
    rng = random.Random(seed)
    out = []
    for r in chosen:
        links = probeplan.links_of(r)
        ok = 1.0
        for lk in links:
            ok *= 1 - bad.get(lk, 0.0)
        out.append(PathStat(links, n, sum(rng.random() > ok for _ in range(n))))
    return out


@pytest.mark.parametrize("victim", ["s0r0a>agg0-0", "agg1-1>s1r0b", "s0h1>s0r0b", "s1r0a>s1h0"])
def test_one_lossy_link_is_named_alone(cfgs, victim):
    chosen, _ = probeplan.choose(_rows(cfgs), 2, probeplan.fabric_links(cfgs))
    sus = tomography.suspects(_stats(chosen, {victim: 0.01}))
    assert [s["link"] for s in sus] == [victim], sus
    assert sus[0]["confidence"] > 0.9 and 0.003 < sus[0]["loss"] < 0.03


def test_fault_free_names_nothing_and_two_faults_name_both(cfgs):
    chosen, _ = probeplan.choose(_rows(cfgs), 2, probeplan.fabric_links(cfgs))
    assert tomography.suspects(_stats(chosen, {})) == []
    sus = tomography.suspects(_stats(chosen, {"s0r0a>agg0-0": 0.05, "agg1-0>s1r0b": 0.05}))
    assert {s["link"] for s in sus} == {"s0r0a>agg0-0", "agg1-0>s1r0b"}


def test_a_link_cleared_by_one_clean_path():
    a = PathStat(["x>y", "y>z"], 1000, 50)
    b = PathStat(["x>y", "y>w"], 1000, 0)
    c = PathStat(["q>y", "y>z"], 1000, 48)
    bounds = tomography.link_bounds([a, b, c])
    assert bounds["x>y"]["loss"] == 0 and bounds["y>z"]["loss"] == 0.048
    assert [s["link"] for s in tomography.suspects([a, b, c])] == ["y>z"]


def test_background_loss_lowers_the_confidence():
    p = [PathStat(["a>b"], 1000, 3), PathStat(["a>b", "b>c"], 1000, 4)]
    quiet = tomography.suspects(p, background=1e-5)[0]["confidence"]
    noisy = tomography.suspects(p, background=3e-3)[0]["confidence"]
    assert quiet > 0.99 and noisy < 0.6


def test_binomial_tail():
    assert tomography.binom_tail(10, 0.5, 0) == 1.0
    assert abs(tomography.binom_tail(10, 0.5, 10) - 0.5 ** 10) < 1e-12
    assert abs(tomography.binom_tail(1000, 0.01, 10) - 0.5421) < 0.01
