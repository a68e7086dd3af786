"""What results record of a lab's time dilation (hpnlab.dilation): the timers in force beside the spec's, what is
not dilated, and which part of each fault's split a dilated timer took. No root."""

from __future__ import annotations

from pathlib import Path

from hpnlab import dilation
from hpnlab.spec import parse_spec
from hpnlab.traffic import experiment, runner

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
