"""Every generated file, byte for byte, against tests/topology/expected (``python -m tests.topology.golden``
regenerates them after an intended change; the diff is then the review)."""

from __future__ import annotations

import pytest

from tests.topology import golden

REGEN = "python -m tests.topology.golden"


@pytest.mark.parametrize("case", golden.cases())
def test_generated_files_match_golden(case):
    got, want = golden.outputs(case), golden.expected(case)
    assert sorted(got) == sorted(want), f"files differ from tests/topology/expected/{case}; {REGEN} if intended"
    changed = [rel for rel in got if got[rel] != want[rel]]
    assert changed == [], f"{case}: {changed} differ from the golden files; review, then {REGEN}"


def test_golden_cases_cover_every_kind_of_output():
    cases = golden.cases()
    assert {"default", "single-tor", "clos", "tier3", "no-lacp", "no-arp-proxy", "no-host-routes",
            "no-arp-duplication"} <= set(cases)
    files = {rel.split("/")[-1] for c in cases for rel in golden.expected(c)}
    assert {"frr.conf", "daemons", "node.json", "plan.txt", "topology.json", "fabric.svg"} <= files
    roles = {rel.split("/")[0] for rel in golden.expected("tier3")}
    assert {"s0h0", "s0r0a", "s0r0b", "agg0-0", "agg1-0", "core0-0", "core1-0"} <= roles


def test_a_template_change_is_caught(monkeypatch):
    from hpnlab.generate import render

    real = render.node_config

    def tweaked(topo, node, adj, rates=None):
        cfg = real(topo, node, adj, rates)
        cfg["table"] = 11 if cfg.get("table") else cfg.get("table")
        return cfg

    monkeypatch.setattr(render, "node_config", tweaked)
    got, want = golden.outputs("default"), golden.expected("default")
    assert got["s0r0a/node.json"] != want["s0r0a/node.json"]
