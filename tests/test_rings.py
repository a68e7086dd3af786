"""All-reduce ring order and the agg tier without root: the orders, the crossing edges and the payload a ring
pushes into the agg tier, the bytes measured from ToR uplink samples, and the all-reduce workload's
concurrent per-rail rings and figures (experiments/ring-order.yml, planned, not run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic import workloads
from hpnlab.traffic.run import experiment
from hpnlab.traffic.analysis import reorder, rings
from hpnlab.traffic.runner import launch_plan
from tests.conftest import ROOT

SETS = {"s0h0": "10.0.0.0/24", "s0h1": "10.0.0.0/24", "s1h0": "10.0.2.0/24", "s1h1": "10.0.2.0/24"}
HOSTS = sorted(SETS)


def test_topology_aware_order_crosses_the_agg_tier_once_per_set_and_interleaved_on_every_edge():
    topo = rings.order_ring(HOSTS, SETS, "topology")
    inter = rings.order_ring(HOSTS, SETS, "interleaved")
    assert topo == ["s0h0", "s0h1", "s1h0", "s1h1"] and inter == ["s0h0", "s1h0", "s0h1", "s1h1"]
    assert rings.crossing_edges(topo, SETS) == 2 and rings.crossing_edges(inter, SETS) == 4
    # 2(n-1)/n x S per crossing edge: n = 4, S = 1 MiB -> 1.5 MiB per edge
    assert rings.expected_bytes(topo, SETS, 1 << 20) == 3 * (1 << 20)
    assert rings.expected_bytes(inter, SETS, 1 << 20) == 6 * (1 << 20)
    assert rings.order_ring(["s1h1", "s0h0"], SETS, "listed") == ["s1h1", "s0h0"]
    shuffled = rings.order_ring(HOSTS, SETS, "random", seed=1)
    assert sorted(shuffled) == HOSTS and shuffled == rings.order_ring(HOSTS, SETS, "random", seed=1)


def test_bytes_per_iteration_from_uplink_samples():
    stats = {"s0r0a": {"t": [10.0, 10.5, 11.0, 11.5], "ifaces": {"agg0-0": {"bytes": [0, 100, 300, 700]}}},
             "s1r0a": {"t": [10.1, 10.6, 11.1, 11.6], "ifaces": {"agg0-0": {"bytes": [5, 105, 205, 305]}}}}
    ups = {"s0r0a": ["agg0-0"], "s1r0a": ["agg0-0"]}
    got, a, b = rings.uplink_bytes(stats, ups, 10.4, 11.7)
    assert (got, a, b) == (600 + 200, 10.5, 11.6)
    fig = rings.per_iteration(stats, ups, [10.2, 10.8, 11.2, 11.55, 11.9], 10.4, 11.7, 400)
    assert fig == {"iterations": 3, "measured_bytes": 267, "expected_bytes": 400, "measured_pct": 66.7}


def plans():
    return {p.name: p for p in experiment.load(ROOT / "experiments" / "ring-order.yml").plans}


def test_ring_order_experiment_plans_one_ring_per_rail_and_samples_every_tors_uplinks():
    p = plans()
    kind = workloads.get("allreduce")
    assert kind.rings(p["topology"]) == {0: ["s0h0", "s0h1", "s1h0", "s1h1"]}
    two = kind.rings(p["topology-2rails"])
    assert set(two) == {0, 1}
    procs = launch_plan(p["topology-2rails"], Path("/run"), 100.0, 20)
    ar = [x for x in procs if x["role"] == "allreduce"]
    assert len(ar) == 8 and {x["out"] for x in ar} == {f"/run/allreduce-r{r}-{k}.json" for r in (0, 1) for k in range(4)}
    # each rail's ring reduces half of the 1 MiB, on its own port, between its own NICs
    assert all(x["argv"][x["argv"].index("--size") + 1] == str(512 * 1024) for x in ar)
    assert {x["argv"][x["argv"].index("--port") + 1] for x in ar} == {"17100", "17110"}
    r1 = next(x for x in ar if x["out"].endswith("r1-0.json"))
    assert r1["argv"][r1["argv"].index("--addrs") + 1].split(",")[0] == p["topology-2rails"].host_ip("s0h0", 1)
    ls = [x for x in procs if x["role"] == "linkstats"]
    assert len(ls) == 8 and all(x["node"][-1] in "ab" for x in ls)  # every ToR of both rails
    # a one-ring all-reduce without the new keys is launched exactly as before: no --port, no samplers
    one = launch_plan(experiment.load(ROOT / "experiments" / "link-failure.yml").plans[0], Path("/run"), 100.0, 12)
    assert all("--port" not in x["argv"] for x in one if x["role"] == "allreduce") and not [x for x in one if x["role"] == "linkstats"]
    assert workloads.get("allreduce").aggregate([{"workload": {"baseline": {"baseline_rate": 2.0}}}]) == {}


def test_a_rail_the_lab_lacks_is_refused_in_one_line(tmp_path):
    text = (ROOT / "experiments" / "ring-order.yml").read_text().replace("rails: [0, 1]", "rails: [0, 2]")
    f = tmp_path / "bad.yml"
    f.write_text(text.replace("../examples/default.yml", str(ROOT / "examples" / "default.yml")))
    with pytest.raises(SpecError) as e:
        experiment.load(f)
    assert "workload.rails" in str(e.value) and "\n" not in str(e.value)


def test_the_variant_figures_and_summary_lines():
    kind = workloads.get("allreduce")
    runs = [{"workload": {"iteration_ms": round(1000 / r, 1), "rings": {"0": HOSTS},
                          "fabric": {"crossing_edges": {"0": 2}, "measured_bytes": m, "expected_bytes": 3145728,
                                     "measured_pct": round(100 * m / 3145728, 1)}},
             "tcp": {"out": 1000, "retrans": 10, "spurious": 4, "reorder_events": 7, "retrans_ppm": 10000,
                     "spurious_pct": 40.0, "ofo": 3, "dsack_sent": 4}}
            for r, m in ((1.4, 3400000), (1.5, 3500000), (1.3, 3300000))]
    a = kind.aggregate(runs)["allreduce"]
    assert a["iteration_ms"] == {"n": 3, "min": 666.7, "median": 714.3, "max": 769.2}
    assert a["measured_pct"]["median"] == 108.1
    v = {"allreduce": a, "tcp": reorder.aggregate(runs)}
    lines = kind.summary_lines("topology", v)
    assert lines[0].startswith("topology: all-reduce 714.3 [666.7-769.2] ms per iteration")
    assert "3.40 [3.30-3.50] MB measured" in lines[1] and "3.15 [3.15-3.15] MB of ring payload" in lines[1]
    tl = reorder.summary_lines({"variants": {"topology": v}})
    assert "retrans 10 [10-10] (10000 [10000-10000] ppm), spurious 4 [4-4]" in tl[-1]
