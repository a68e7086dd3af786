"""traffic.bulk's figures of one elephant repetition, from synthetic reports (no root, no lab)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpnlab.model.spec import parse_spec
from hpnlab.traffic.run import bulk
from hpnlab.traffic.run.experiment import node_configs


def _plan(access: str) -> SimpleNamespace:
    tier2 = {"tier2": "clos"} if access == "single-tor" else {}
    cfgs = node_configs(parse_spec({"name": "b", "access": access, **tier2, "segments": 2, "hosts_per_segment": 1,
                                    "rails": 1, "aggs_per_plane": 2,
                                    "links": {"access": {"rate_mbit": 50}, "uplink": {"rate_mbit": 20}}}))
    return SimpleNamespace(cfgs=cfgs, workload=SimpleNamespace(rail=0, select="hash"))


def _write_run(run: Path, plan: SimpleNamespace, port_bytes: dict[tuple[str, str], int]) -> None:
    """One repetition's reports: s0h0 -> s1h0 (one flow), every router's ports counted twice, 0.5 s apart
    (``port_bytes`` gives a port's bytes over the run; the rest carried nothing)."""
    cfgs = plan.cfgs
    src, dst = "s0h0", "s1h0"
    tor, dst_tor = cfgs[src].nic(0).tors[0], cfgs[dst].nic(0).tors[0]
    (run / "flows.json").write_text(json.dumps([{"src": src, "dst": dst, "sport": 30000, "port": "r0p0",
                                                 "tor": tor, "agg": "agg0-0", "dst_tor": dst_tor}]))
    (run / f"elephant-tx-{src}.json").write_text(json.dumps({"start": 100.0, "completion_s": 2.5, "complete": True}))
    (run / f"elephant-rx-{dst}.json").write_text(json.dumps({}))
    for node, c in cfgs.items():
        if c.role == "host":
            continue
        ifaces = {i.name: {"bytes": [0, port_bytes.get((node, i.name), 0)], "backlog": [0, 1024]}
                  for i in c.interfaces}
        (run / f"linkstats-{node}.json").write_text(json.dumps({"t": [100.0, 100.5], "ifaces": ifaces}))


def test_single_tor_nic_figures_come_from_both_of_its_tors_ports(tmp_path):
    """Single-ToR: a NIC's two ports end on one ToR (its bond's two members, h0p0 and h0p1). result() took
    only the first of them and called _ratio with one value (TypeError: the repetition's figures were lost)."""
    plan = _plan("single-tor")
    _write_run(tmp_path, plan, {("s1r0", "h0p0"): 3_000_000, ("s1r0", "h0p1"): 1_000_000,
                                ("s0r0", "agg0-0"): 4_000_000})
    w = bulk.result(plan, tmp_path)
    nic = w["nics"]["s1h0"]
    assert nic["bytes"] == [3_000_000, 1_000_000] and nic["ratio"] == 3.0
    # the path map names the ToR, not which member of its bond: no prediction, and none compared
    assert nic["ratio_predicted"] is None and w["predicted_matches"] == 0
    assert w["nics"]["s0h0"]["ratio"] is None  # nothing came down to s0h0: no ratio, not a division by 0
    assert w["uplinks"]["s0r0"]["ratio"] == math.inf and w["uplinks"]["s0r0"]["idle"] == 1
    assert set(w["port_series"]) == {"s1r0:h0p0", "s1r0:h0p1"} and w["hot_nic"] == "s1h0"
    agg = bulk.aggregate([{"workload": w}])
    assert agg["downlink_ratio"]["median"] == 3.0 and agg["completion_s"]["median"] == 2.5


def test_dual_tor_nic_figures_are_one_port_on_each_tor(tmp_path):
    plan = _plan("dual-tor")
    _write_run(tmp_path, plan, {("s1r0a", "h0p0"): 2_000_000, ("s1r0b", "h0p1"): 1_000_000})
    w = bulk.result(plan, tmp_path)
    nic = w["nics"]["s1h0"]
    assert nic["bytes"] == [2_000_000, 1_000_000] and nic["ratio"] == 2.0
    assert nic["flows_predicted"] == [1, 0] and nic["ratio_predicted"] == math.inf and w["predicted_matches"] == 1
    assert set(w["port_series"]) == {"s1r0a:h0p0", "s1r0b:h0p1"}


@pytest.mark.parametrize("values, want", [([3, 1], 3.0), ([1, 3], 3.0), ([2, 0], math.inf), ([0, 0], None),
                                          ([5], None), ([], None), ([4, 2, 1], 4.0)])
def test_ratio_of_a_group(values, want):
    assert bulk._ratio(values) == want
