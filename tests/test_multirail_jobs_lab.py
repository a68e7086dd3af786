"""A job on two rails beside a job on one, on a real lab through ``Lab.run_jobs``: the shaped dual-plane lab of
tests/test_jobs_lab.py with two rails (one 10 Mbit/s uplink per ToR, two switch queues), scheduled by crux.
Both jobs complete their iterations; the two-rail job's bytes cross the agg tier on both rails' ToRs (the
uplinks' counters, read before and after); the results name both rails (its assignment, its per-rail
iteration counts, its ranks' reports one set per rail); a rank's two rails keep one compute phase."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, leftovers

pytestmark = pytest.mark.root

PREFIX = "mrj"
ITERATIONS = 4
SIZE_KB = 256
LAB = {"rails": 2, "hosts_per_segment": 2, "aggs_per_plane": 1,
       "links": {"access": {"rate_mbit": 40, "queue_kb": 128}, "uplink": {"rate_mbit": 10, "queue_kb": 64}},
       "qos": {"queues": 2, "dscp": {"cs5": 0, "cs1": 1}, "default_queue": 0}}
# Why these jobs: wide all-reduces 256 KB over two rails (128 KB a rail: 128 KB a rank per iteration, about
# 0.1 s at 10 Mbit/s) after 100 ms of compute; narrow, on rail 1 only, 256 KB after 50 ms. Both finish their
# 4 iterations in a few seconds even on a busy machine, well inside the 20 s duration. Their hosts are in
# different segments, so every byte crosses the agg tier on the rail that carries it.
JOBS = [
    {"name": "wide", "hosts": ["s0h0", "s1h0"], "rails": [0, 1], "compute_ms": 100, "size_kb": SIZE_KB,
     "iterations": ITERATIONS},
    {"name": "narrow", "hosts": ["s0h1", "s1h1"], "rail": 1, "compute_ms": 50, "size_kb": SIZE_KB,
     "iterations": ITERATIONS},
]


def _uplink_bytes(lab) -> dict[int, int]:
    """Bytes the ToRs of each rail have sent into the agg tier so far."""
    out: dict[int, int] = {}
    for n, c in lab.cfgs.items():
        if c.role != "tor":
            continue
        st = lab.link_stats(n)
        out[c.rail] = out.get(c.rail, 0) + sum(st[i.name]["bytes"] for i in c.interfaces if i.kind == "uplink")
    return out


def test_a_two_rail_job_beside_a_one_rail_job_runs_on_both_rails():
    _need_lab_machine()
    import hpnlab
    from hpnlab.errors import SpecError
    import hpnlab.traffic.policies.arithmetic as crux

    t0 = time.monotonic()
    with hpnlab.Lab.up(ROOT / "examples" / "load-balance.yml", name=f"{PREFIX}0", overrides=LAB) as lab:
        with pytest.raises(SpecError, match=r"^Lab\.run_jobs: .*workload\.jobs\.0\.rails.*listed twice"):
            lab.run_jobs([{"name": "x", "hosts": ["s0h0", "s1h0"], "rails": [1, 1]}])
        before = _uplink_bytes(lab)
        res = lab.run_jobs(JOBS, policy="crux", queues=2, pool=8, duration_s=20)
        after = _uplink_bytes(lab)
        reports = {p.stem: json.loads(p.read_text()) for p in res.report_dir.glob("job-*.json")}
    took = time.monotonic() - t0
    sent = {r: after[r] - before.get(r, 0) for r in after}
    jobs, asg = res.jobs, res.assignment["jobs"]
    print(f"{took:.1f} s; uplink bytes per rail {sent}; "
          + "; ".join(f"{n}: util {j.gpu_util}, {j.iterations} iterations, rails {j.rails}, intensity {j.intensity}, "
                      f"level {j.level}" for n, j in sorted(jobs.items())))
    for name, j in jobs.items():
        assert j.iterations == ITERATIONS and 0 < j.gpu_util <= 1, (name, j)
    # the results name both rails: the assignment, the per-rail iteration counts, one report per rail and rank
    assert asg["wide"]["rails"] == [0, 1] and "rails" not in asg["narrow"]
    assert jobs["wide"].rails == {"0": ITERATIONS, "1": ITERATIONS} and jobs["narrow"].rails == {}
    assert sorted(k for k in reports if k.startswith("job-wide")) == \
        [f"job-wide-r{r}-{k}" for r in (0, 1) for k in (0, 1)]
    for r in (0, 1):
        for k in (0, 1):
            rep = reports[f"job-wide-r{r}-{k}"]
            assert rep["addr"] == lab.cfgs[["s0h0", "s1h0"][k]].nic(r).ip and len(rep["iterations"]) == ITERATIONS
            assert rep["bytes_per_iteration"] == 2 * (SIZE_KB * 1024 // 2 // 2)  # ring of 2: 2 steps of size/2
    # one compute phase per rank: neither rail's next compute ends before 100 ms after both rails ended the
    # iteration (the rank's rail processes join between iterations)
    for k in (0, 1):
        ends = [reports[f"job-wide-r{r}-{k}"]["iterations"] for r in (0, 1)]
        for r in (0, 1):
            computed = reports[f"job-wide-r{r}-{k}"]["computed"]
            for i in range(ITERATIONS - 1):
                assert computed[i + 1] >= max(ends[0][i], ends[1][i]) + 0.095, (k, r, i, computed, ends)
    # wide's paths: two connections a rank on each rail, on that rail's ToRs
    tors = {r: {t for h in ("s0h0", "s1h0") for t in lab.cfgs[h].nic(r).tors} for r in (0, 1)}
    assert len(asg["wide"]["paths"]) == 8
    for i, p in enumerate(asg["wide"]["paths"]):
        assert p.split(">")[1] in tors[i // 4], (i, p)
    # its bytes crossed the agg tier on both rails: each rail's ring sends its half of the buffer's ring traffic
    # from both ranks every iteration (rail 0 carries only wide; rail 1 wide and narrow). A lower bound only:
    # the path map's probes and TCP's headers and retransmissions add to the counters
    per_rail = ITERATIONS * 2 * crux.ring_bytes_per_rank(SIZE_KB * 1024 // 2, 2)
    assert sent[0] >= per_rail, sent
    assert sent[1] >= per_rail + ITERATIONS * 2 * crux.ring_bytes_per_rank(SIZE_KB * 1024, 2), sent
    assert leftovers(f"{PREFIX}0") == []
