"""Concurrent jobs on a real lab through the Python API (``Lab.run_jobs``, the library call ``hpnlab run``'s
``jobs`` workload shares its hooks with): two small ring all-reduce jobs and an all-to-all one, with compute
phases, on a shaped dual-plane lab (one 10 Mbit/s uplink per ToR, two switch queues), scheduled by crux.
Every job completes its iterations, each job's GPU utilisation lies in (0, 1], the cluster's is the
rank-weighted mean of the jobs', and the assignment (per job: intensity, level, queue, DSCP, a source port
and a path per connection) is in the result and is what the ranks ran, the most intensive job on the higher
level."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, leftovers

pytestmark = pytest.mark.root

PREFIX = "jbl"
ITERATIONS = 4
LAB = {"hosts_per_segment": 2, "aggs_per_plane": 1,
       "links": {"access": {"rate_mbit": 40, "queue_kb": 128}, "uplink": {"rate_mbit": 10, "queue_kb": 64}},
       "qos": {"queues": 2, "dscp": {"cs5": 0, "cs1": 1}, "default_queue": 0}}
# Why these jobs: heavy computes 300 ms and exchanges 64 KB (about 50 ms at 10 Mbit/s), light computes
# 20 ms and exchanges 512 KB (about 0.4 s a ring step pair): heavy is the more intensive by far, and both
# finish their 4 iterations in a few seconds even on a busy machine, well inside the 20 s duration. moe, an
# all-to-all over all four hosts (so with pairs inside a segment, which the ToR turns round), sends 64 KB
# to every peer per iteration after 100 ms of compute.
JOBS = [
    {"name": "heavy", "hosts": ["s0h0", "s1h0"], "compute_ms": 300, "size_kb": 64, "iterations": ITERATIONS},
    {"name": "light", "hosts": ["s0h1", "s1h1"], "compute_ms": 20, "size_kb": 512, "iterations": ITERATIONS},
    {"name": "moe", "collective": "alltoall", "hosts": ["s0h0", "s0h1", "s1h0", "s1h1"], "compute_ms": 100,
     "size_kb": 256, "connections": 1, "iterations": ITERATIONS},
]


def test_two_jobs_complete_their_iterations_with_their_utilisation_and_assignment():
    _need_lab_machine()
    import hpnlab
    from hpnlab.errors import SpecError

    t0 = time.monotonic()
    with hpnlab.Lab.up(ROOT / "examples" / "load-balance.yml", name=f"{PREFIX}0", overrides=LAB) as lab:
        # bad input is refused in the experiment file's one line, naming the key, before anything runs
        with pytest.raises(SpecError, match=r"^Lab\.run_jobs: workload\.jobs\.0\.hosts: 'nope' is not a host"):
            lab.run_jobs([{"name": "x", "hosts": ["s0h0", "nope"]}], policy="crux")
        res = lab.run_jobs(JOBS, policy="crux", queues=2, pool=8, duration_s=20)
        # the ranks' own reports: in the lab's state directory, which goes with the lab
        reports = {p.stem: json.loads(p.read_text()) for p in res.report_dir.glob("job-*.json")}
    took = time.monotonic() - t0
    jobs, asg = res.jobs, res.assignment["jobs"]
    print(f"{took:.1f} s; cluster {res.cluster_gpu_util}; "
          + "; ".join(f"{n}: util {j.gpu_util}, {j.iterations} iterations, iteration "
                      f"{j.iteration_ms.get('median')} ms, intensity {j.intensity}, level {j.level}"
                      for n, j in sorted(jobs.items())))
    assert res.policy == "crux" and set(jobs) == {"heavy", "light", "moe"}, res
    ranks = {"heavy": 2, "light": 2, "moe": 4}
    conns = {"heavy": 4, "light": 4, "moe": 12}  # rings: 2 ranks x 2 connections; all-to-all: 4 x 3 peers x 1
    for name, j in jobs.items():
        assert j.iterations == ITERATIONS, (name, j)
        assert 0 < j.gpu_util <= 1, (name, j)
        assert j.ranks == ranks[name] and len(j.ends_s) == ITERATIONS
        assert (j.level, j.dscp, j.sports) == (asg[name]["level"], asg[name]["dscp"], asg[name]["sports"])
    assert jobs["moe"].collective == "alltoall" and jobs["heavy"].collective == "allreduce"
    # the cluster's utilisation is the jobs' weighted by their ranks (rounded to 4 places)
    mean = sum(j.gpu_util * j.ranks for j in jobs.values()) / sum(j.ranks for j in jobs.values())
    assert res.cluster_gpu_util == pytest.approx(mean, abs=1e-4)
    # the assignment: one source port and one probed path per connection, a level, a queue and the DSCP the
    # spec's map sends to that queue; the compute-heavy job above the light one. A pair inside a segment
    # (moe's) is turned round by its ToR: src>tor>dst; every other path crosses an agg
    for name, a in asg.items():
        assert len(a["sports"]) == conns[name] and len(a["paths"]) == conns[name], (name, a)
        for p in a["paths"]:
            local = p.split(">")[0][:2] == p.split(">")[-1][:2]  # s0.. to s0..
            assert p.count(">") == (2 if local else 4), p
        assert a["queue"] == a["level"] and a["level"] in (0, 1)
        assert a["intensity"] > 0
    assert asg["heavy"]["intensity"] > asg["light"]["intensity"]
    assert (asg["heavy"]["level"], asg["heavy"]["dscp"]) == (0, 40)  # cs5 -> queue 0
    assert (asg["light"]["level"], asg["light"]["dscp"]) == (1, 8)  # cs1 -> queue 1
    # what the ranks ran: the assigned DSCP and source ports (each rank's report echoes them)
    for name, a in asg.items():
        per_rank = conns[name] // ranks[name]
        for rank in range(ranks[name]):
            rep = reports[f"job-{name}-{rank}"]
            assert rep["dscp"] == a["dscp"] and rep["sports"] == a["sports"][per_rank * rank:per_rank * (rank + 1)]
    # every all-to-all rank received every peer's part of every iteration: 3 peers x 64 KB x 4
    for rank in range(4):
        rep = reports[f"job-moe-{rank}"]
        assert rep["bytes_received"] == ITERATIONS * 3 * 64 * 1024, rep
    assert leftovers(f"{PREFIX}0") == []
