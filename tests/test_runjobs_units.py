"""``Lab.run_jobs`` without root: its arguments are the experiment file's ``jobs`` workload, refused in the
same one line naming the key before anything runs (no lab is touched: the fake lab below fails on any use
beyond its configs); the lab's qos as the policies read it; the workload's report as typed figures."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic.run import experiment, runjobs
from hpnlab.traffic.workloads import jobs as jobsmod

REPO = Path(__file__).resolve().parents[1]
GOOD = {"name": "a", "hosts": ["s0h0", "s1h0"]}


@functools.cache
def _cfgs_of(qos: str):
    """Rendering a lab's node configs takes a few seconds: once per qos for the module."""
    p = Path(tempfile.mkdtemp(prefix="runjobs-")) / "x.yml"
    p.write_text(f"name: x\nspec: {REPO}/examples/load-balance.yml\n"
                 f"variants: [{{name: a, spec: {{aggs_per_plane: 1, links: {{uplink: {{rate_mbit: 10}}}}"
                 + (f", qos: {qos}" if qos else "") + "}}]\n")
    try:
        return experiment.load(p).plans[0].cfgs
    finally:
        shutil.rmtree(p.parent)


def _cfgs(_tmp_path, qos: str = "{queues: 2, dscp: {cs5: 0, cs1: 1}, default_queue: 0}"):
    return _cfgs_of(qos)


class _Untouchable:
    """Anything but the configs fails the test: bad input must be refused before the lab is used."""

    def __getattr__(self, name):
        raise AssertionError(f"the lab's {name} was used for input that should have been refused")


def _lab(cfgs):
    lab = _Untouchable()
    object.__setattr__(lab, "cfgs", cfgs)
    return lab


BAD = [
    (dict(jobs=[]), "workload.jobs"),
    (dict(jobs="a"), "workload.jobs"),
    (dict(jobs=[{"name": "a", "hosts": ["s0h0"]}]), "workload.jobs.0.hosts"),
    (dict(jobs=[{"name": "a", "hosts": ["s0h0", "nope"]}]), "workload.jobs.0.hosts"),
    (dict(jobs=[{**GOOD, "size_kb": 0}]), "workload.jobs.0.size_kb"),
    (dict(jobs=[{**GOOD, "colour": "red"}]), "workload.jobs.0.colour"),
    (dict(jobs=[{**GOOD, "collective": "ring"}]), "workload.jobs.0.collective"),
    (dict(jobs=[GOOD, GOOD]), "workload.jobs"),
    (dict(jobs=[GOOD], policy="lottery"), "workload.policy"),
    (dict(jobs=[GOOD], queues=9), "workload.queues"),
    (dict(jobs=[GOOD], queues=3, policy="crux"), "workload.queues"),  # the lab's qos has 2 queues
    (dict(jobs=[GOOD], congestion="No Such"), "workload.congestion"),
    (dict(jobs=[GOOD], duration_s=0), "duration_s"),
    (dict(jobs=[GOOD], duration_s="10"), "duration_s"),
]


@pytest.mark.parametrize("kw,field", BAD, ids=[f for _k, f in BAD])
def test_bad_arguments_are_refused_in_one_line_naming_the_key(tmp_path, kw, field):
    with pytest.raises(SpecError) as e:
        runjobs.run(_lab(_cfgs(tmp_path)), **kw)
    msg = str(e.value)
    assert field in msg and "\n" not in msg and msg.startswith("Lab.run_jobs"), msg


def test_a_priority_policy_on_a_lab_without_switch_queues_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"workload\.policy.*qos"):
        runjobs.run(_lab(_cfgs(tmp_path, qos="")), jobs=[GOOD], policy="crux")


def test_the_labs_qos_as_the_policies_read_it(tmp_path):
    q = runjobs.lab_qos(_cfgs(tmp_path))
    assert (q.queues, q.dscp, q.default_queue) == (2, {40: 0, 8: 1}, 0)
    assert runjobs.lab_qos(_cfgs(tmp_path, qos="")) is None
    # what the runner gets from the spec: the same DSCP per level
    from hpnlab.traffic.policies.base import dscp_for_queue

    assert [dscp_for_queue(q, k) for k in range(2)] == [40, 8]


def test_the_workloads_report_as_typed_figures(tmp_path):
    """Jobs.result on two ranks' reports (3 iterations of 100 ms compute + 50 ms) as JobFigures."""
    import json

    ends, computed = [10.15, 10.3, 10.45], [10.1, 10.25, 10.4]
    for rank in range(2):
        (tmp_path / f"job-a-{rank}.json").write_text(json.dumps(
            {"rank": rank, "ranks": 2, "iterations": ends, "computed": computed, "congestion": "cubic"}))
    plan = SimpleNamespace(workload=jobsmod.JobsParams(jobs=[GOOD], policy="crux"),
                           assignment={"jobs": {"a": {"intensity": 2.5, "priority": 2.5, "level": 0, "queue": 0,
                                                      "dscp": 40, "sports": [30000, 30001, 30002, 30003],
                                                      "paths": ["s0h0>s0r0a>agg0-0>s1r0a>s1h0"] * 4}}})
    res = runjobs.figures(jobsmod.Jobs().result(plan, tmp_path), tmp_path)
    a = res.jobs["a"]
    assert (a.iterations, a.ranks, a.collective, a.level, a.dscp) == (3, 2, "allreduce", 0, 40)
    assert a.gpu_util == pytest.approx(0.3 / 0.45, abs=1e-3) and res.cluster_gpu_util == a.gpu_util
    assert a.exposed_ms["median"] == pytest.approx(50, abs=0.2) and a.ends_s == [0.15, 0.3, 0.45]
    assert a.sports == [30000, 30001, 30002, 30003] and res.congestion == "cubic" and res.policy == "crux"
    assert res.to_dict()["jobs"]["a"]["gpu_util"] == a.gpu_util
