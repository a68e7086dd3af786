"""What results record of a lab's time dilation (hpnlab.model.dilation): the timers in force beside the spec's, what is
not dilated, and which part of each fault's split a dilated timer took. No root."""

from __future__ import annotations

from pathlib import Path

from hpnlab.model import dilation
from hpnlab.model.spec import parse_spec
from hpnlab.traffic import runner
from hpnlab.traffic.run import experiment

ROOT = Path(__file__).resolve().parents[1]


def test_the_timers_in_force_are_k_times_the_specs_save_tcps_maximum_rto():
    rec = dilation.timers(parse_spec({"name": "x", "time_dilation": 10}))
    t = rec["timers"]
    assert rec["time_dilation"] == 10
    assert t["bfd.interval"] == {"spec": 100, "in_force": 1000, "unit": "ms"}  # not the spec's 100 ms alone
    assert t["bfd.detection"]["in_force"] == 3000
    assert (t["bgp.keepalive"]["in_force"], t["bgp.hold"]["in_force"]) == (10, 30)
    assert (t["lacp.period"]["in_force"], t["lacp.timeout"]["in_force"]) == (10.0, 30.0)
    assert t["neigh.base_reachable_time"] == {"spec": 30000, "in_force": 300000, "unit": "ms"}
    assert t["neigh.delay_first_probe_time"]["in_force"] == 50
    assert t["tcp.rto_min"] == {"spec": 200, "in_force": 2000, "unit": "ms"}
    assert t["tcp.rto_max"]["in_force"] == t["tcp.rto_max"]["spec"] == 120000
    assert "micro_bfd.interval" not in t  # off in the default spec
    assert any(x.startswith("carrier") for x in rec["not_dilated"])
    assert any(x.startswith("link rates") and "queueing" in x for x in rec["not_dilated"])
    one = dilation.timers(parse_spec({"name": "x", "micro_bfd": {"enabled": True}}))["timers"]
    assert all(v["spec"] == v["in_force"] for v in one.values()) and "micro_bfd.detection" in one


def test_each_detector_and_which_part_of_the_split_is_dilated():
    s = parse_spec({"name": "x", "time_dilation": 10})
    off = parse_spec({"name": "x", "time_dilation": 10, "bfd": {"enabled": False}})
    mb = parse_spec({"name": "x", "time_dilation": 10, "micro_bfd": {"enabled": True}})
    assert dilation.detector("hang", "agg", None, s) == "bfd"
    assert dilation.detector("hang", "agg", None, off) == "bgp-hold"
    assert dilation.detector("one-way", "host", "access", s) == "lacp"
    assert dilation.detector("one-way", "host", "access", mb) == "micro-bfd"
    assert dilation.detector("lacp-drop", "host", "access", mb) == "lacp"  # micro-BFD stays up
    assert dilation.detector("one-way", "tor", "uplink", s) == "bfd"
    assert dilation.detector("link-down", "host", "access", s) == "carrier"
    assert dilation.detector("degrade", "tor", "uplink", s) is None
    bfd = dilation.split_parts("bfd", s)
    assert bfd["detection_bound_ms"] == 3000 and bfd["dilated"] == {"detection_ms": True, "protocol_ms": False,
                                                                     "delivery_ms": False}
    assert dilation.split_parts("bgp-hold", off)["detection_bound_ms"] == 30000
    assert dilation.split_parts("lacp", s)["detection_bound_ms"] == 30000
    assert dilation.split_parts("micro-bfd", mb)["detection_bound_ms"] == 3000
    carrier = dilation.split_parts("carrier", s)
    assert carrier["detection_bound_ms"] is None and not any(carrier["dilated"].values())


def test_every_variant_of_an_experiment_records_the_timers_in_force():
    exp = experiment.load(ROOT / "experiments" / "time-dilation.yml")
    for plan in exp.plans:
        v = runner.variant_record(plan)
        k = plan.spec.time_dilation
        assert v["dilation"]["time_dilation"] == k
        for name, t in v["dilation"]["timers"].items():
            assert t["in_force"] == (t["spec"] if name == "tcp.rto_max" else round(t["spec"] * k, 3)), (plan.name, name)
        assert v["dilation"]["not_dilated"]


def test_each_aggregated_fault_says_its_detector_and_what_is_dilated():
    exp = experiment.load(ROOT / "experiments" / "time-dilation.yml")
    plan = next(p for p in exp.plans if p.spec.time_dilation > 1 and p.faults[0].kind == "hang" and p.spec.bfd.enabled)
    f = plan.faults[0]
    agg = dilation.annotate([{"fault": f.label}, {"fault": "not planned"}], plan.faults, plan.cfgs, plan.spec)
    assert agg[0]["dilation"]["detector"] == "bfd"
    assert agg[0]["dilation"]["detection_bound_ms"] == 300 * plan.spec.time_dilation
    assert "dilation" not in agg[1]


def test_the_error_model_fit_recovers_the_timer_share_and_the_undilated_work():
    """R(k) = T + W / k: a BFD-found fault (T 300 ms, W 60 ms) and a carrier-found one (T 0, W 180 ms)."""
    from hpnlab.traffic.analysis import dilationfit

    def variant(det: str, k: int, gaps: list[float]) -> dict:
        return {"time_dilation": k, "faults": [{"dilation": {"detector": det}}],
                "runs": [{"faults": [{"converged_gap_ms": g, "routes_last_ms": g}], "slip": {"flagged": g > 9e3}}
                         for g in gaps]}

    res = {"variants": {}}
    for k in (1, 5, 10, 20, 40):
        res["variants"][f"hang-x{k}"] = variant("bfd", k, [300 * k + 60 + e for e in (-4.0, 0.0, 4.0)])
        res["variants"][f"link-down-x{k}"] = variant("carrier", k, [180.0, 180.0])
    a = dilationfit.analyse(res)["converged_gap_ms"]
    bfd, carrier = a["bfd"], a["carrier"]
    assert (bfd["fit"]["timer_share_ms"], bfd["fit"]["undilated_ms"]) == (300.0, 60.0)
    # the noise is ±4 ms on the gap, so ±4/k on the reading: rms sqrt(2/3 x 16 x mean(1/k²)) = 1.5 ms
    assert (bfd["fit"]["residual_rms_ms"], bfd["fit"]["residual_max_ms"], bfd["fit"]["n"]) == (1.5, 4.0, 15)
    assert bfd["by_k"]["10"]["median_ms"] == 306.0 and bfd["by_k"]["10"]["error_vs_1to1_ms"] == -54.0
    assert bfd["by_k"]["1"]["flagged"] == 0
    assert carrier["fit"]["timer_share_ms"] == 0.0 and carrier["fit"]["undilated_ms"] == 180.0
    assert carrier["by_k"]["40"]["median_ms"] == 4.5 and carrier["by_k"]["40"]["error_vs_1to1_pct"] == -97.5
    lines = dilationfit.table({"converged_gap_ms": a})
    assert any(line.startswith("bfd: k=1 360 ms, k=5 312 ms (-48)") for line in lines), lines
    assert dilationfit.fit([(10, 1.0), (10, 2.0)]) is None  # one k: nothing to fit


def test_a_variant_runs_its_own_duration_and_the_faults_must_fit_it(tmp_path):
    exp = experiment.load(ROOT / "experiments" / "time-dilation.yml")
    by = {p.name: p for p in exp.plans}
    assert by["hang-x1"].duration == 14 and by["hold-x40"].duration == 186
    assert all(f.until < p.duration for p in exp.plans for f in p.faults)
    assert runner.variant_record(by["hold-x40"])["duration"] == 186
    assert {p.duration for p in experiment.load(ROOT / "experiments" / "time-dilation.yml", duration=200).plans} == {200}
    bad = tmp_path / "x.yml"
    bad.write_text("name: x\nspec: " + str(ROOT / "examples" / "default.yml") + "\nduration: 20\nvariants:\n"
                   "  - {name: a, duration: 8, faults: [{kind: link-down, node: s0h0, iface: r0p0, at: 2, until: 9}]}\n")
    import pytest
    from hpnlab.errors import SpecError
    with pytest.raises(SpecError, match=r"variants.0 \(a\) faults.0: at/until must lie within duration \(8 s\)"):
        experiment.load(bad)
