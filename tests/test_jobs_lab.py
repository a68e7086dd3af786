"""The ``jobs`` workload on a real lab: two small ring all-reduce jobs and an all-to-all one, with compute
phases, on a shaped dual-plane lab (one 10 Mbit/s uplink per ToR, two switch queues), scheduled by crux,
through ``hpnlab run``. Every job completes its iterations, each job's GPU utilisation lies in (0, 1], the
cluster's is the rank-weighted mean of the jobs', and the assignment (per job: intensity, level, queue,
DSCP, a source port and a path per connection) is in the results and is what the ranks ran, the most
intensive job on the higher level."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, hpnlab, leftovers

pytestmark = pytest.mark.root

PREFIX = "jbl"
ITERATIONS = 4
# Why these jobs: heavy computes 300 ms and exchanges 64 KB (about 50 ms at 10 Mbit/s), light computes
# 20 ms and exchanges 512 KB (about 0.4 s a ring step pair): heavy is the more intensive by far, and both
# finish their 4 iterations in a few seconds even on a busy machine, well inside the 20 s duration. moe, an
# all-to-all over all four hosts (so with pairs inside a segment, which the ToR turns round), sends 64 KB
# to every peer per iteration after 100 ms of compute.
EXPERIMENT = f"""name: jobs-check
spec: {ROOT / 'examples' / 'load-balance.yml'}
duration: 20
repetitions: 1
lab_prefix: {PREFIX}
workload:
  kind: jobs
  policy: crux
  queues: 2
  pool: 8
  jobs:
    - {{name: heavy, hosts: [s0h0, s1h0], compute_ms: 300, size_kb: 64, iterations: {ITERATIONS}}}
    - {{name: light, hosts: [s0h1, s1h1], compute_ms: 20, size_kb: 512, iterations: {ITERATIONS}}}
    - {{name: moe, collective: alltoall, hosts: [s0h0, s0h1, s1h0, s1h1], compute_ms: 100, size_kb: 256,
       connections: 1, iterations: {ITERATIONS}}}
variants:
  - name: crux
    spec:
      hosts_per_segment: 2
      aggs_per_plane: 1
      links: {{access: {{rate_mbit: 40, queue_kb: 128}}, uplink: {{rate_mbit: 10, queue_kb: 64}}}}
      qos: {{queues: 2, dscp: {{cs5: 0, cs1: 1}}, default_queue: 0}}
"""


def test_two_jobs_complete_their_iterations_with_their_utilisation_and_assignment(tmp_path):
    _need_lab_machine()
    exp = tmp_path / "jobs-check.yml"
    exp.write_text(EXPERIMENT)
    t0 = time.monotonic()
    r = hpnlab("run", str(exp), "--out", str(tmp_path / "out"), timeout=300)
    took = time.monotonic() - t0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    v = res["variants"]["crux"]
    assert not v.get("error"), v.get("error")
    wl = v["runs"][0]["workload"]
    jobs, asg = wl["jobs"], wl["assignment"]["jobs"]
    print(f"{took:.1f} s; cluster {wl['cluster_gpu_util']}; "
          + "; ".join(f"{n}: util {j['gpu_util']}, {j['iterations']} iterations, iteration "
                      f"{j.get('iteration_ms', {}).get('median')} ms, intensity {j['intensity']}, level {j['level']}"
                      for n, j in sorted(jobs.items())))
    assert set(jobs) == {"heavy", "light", "moe"}, r.stdout[-2000:]
    ranks = {"heavy": 2, "light": 2, "moe": 4}
    conns = {"heavy": 4, "light": 4, "moe": 12}  # rings: 2 ranks x 2 connections; all-to-all: 4 x 3 peers x 1
    for name, j in jobs.items():
        assert j["iterations"] == ITERATIONS, (name, j)
        assert 0 < j["gpu_util"] <= 1, (name, j)
        assert j["ranks"] == ranks[name] and len(j["ends_s"]) == ITERATIONS
    assert jobs["moe"]["collective"] == "alltoall" and jobs["heavy"]["collective"] == "allreduce"
    # the cluster's utilisation is the jobs' weighted by their ranks (rounded to 4 places in the file)
    mean = sum(j["gpu_util"] * j["ranks"] for j in jobs.values()) / sum(j["ranks"] for j in jobs.values())
    assert wl["cluster_gpu_util"] == pytest.approx(mean, abs=1e-4)
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
    raw = tmp_path / "out" / "raw" / "crux" / "rep1"
    for name, a in asg.items():
        per_rank = conns[name] // ranks[name]
        for rank in range(ranks[name]):
            rep = json.loads((raw / f"job-{name}-{rank}.json").read_text())
            assert rep["dscp"] == a["dscp"] and rep["sports"] == a["sports"][per_rank * rank:per_rank * (rank + 1)]
    # every all-to-all rank received every peer's part of every iteration: 3 peers x 64 KB x 4
    for rank in range(4):
        rep = json.loads((raw / f"job-moe-{rank}.json").read_text())
        assert rep["bytes_received"] == ITERATIONS * 3 * 64 * 1024, rep
    assert leftovers(f"{PREFIX}0") == []
