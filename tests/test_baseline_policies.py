"""The published baselines beside fifo and Crux, without root: Sincronia's BSSI order and its queues,
CASSINI's time shifts, what the jobs workload does with a shift, and Crux's paired differences against
each other policy."""

import random

import pytest

from hpnlab.traffic import policies
import hpnlab.traffic.policies.arithmetic as crux
from hpnlab.traffic.policies import cassini, sincronia
from hpnlab.traffic.policies.base import Inputs
from hpnlab.traffic.workloads import jobs as jobsmod

UP = ("tor-up", "t", "a0")


def row(src, dst, sport, agg="a0"):
    return {"src": src, "dst": dst, "sport": sport, "port": "p", "tor": "t", "agg": agg, "dst_tor": "far"}


# --- sincronia ---------------------------------------------------------------------------------------------
def test_bssi_puts_the_largest_coflow_on_the_most_bottlenecked_port_last():
    # A spreads 6 over three ports, B puts 5 on one: port 1 (7) is the bottleneck and B is largest there, so
    # B goes last although A sends more in all (smallest-total-first would put B first)
    d = {"A": {"p1": 2, "p2": 2, "p3": 2}, "B": {"p1": 5}}
    assert sincronia.bssi_order(d) == ["A", "B"]
    # three coflows: port 2 (6) first, B last there; then port 1, A; C first
    d = {"A": {"p1": 3}, "B": {"p1": 1, "p2": 5}, "C": {"p2": 1}}
    assert sincronia.bssi_order(d) == ["C", "A", "B"]


def test_bssi_weighs_bytes_by_weight_and_scales_the_weights():
    # on one port: A 2 bytes at weight 1 (2 per weight), B 3 at weight 3 (1 per weight): A last
    assert sincronia.bssi_order({"A": {"p": 2}, "B": {"p": 3}}, {"A": 1, "B": 3}) == ["B", "A"]
    assert sincronia.bssi_order({"A": {"p": 2}, "B": {"p": 3}}) == ["A", "B"]  # equal weights: the smaller first
    # a coflow on no shaped port waits for nobody
    assert sincronia.bssi_order({"A": {"p": 2}, "Z": {}})[0] == "Z"


def test_sincronia_levels_give_the_first_jobs_a_queue_each_and_the_rest_the_last():
    assert sincronia.levels_of(["c", "a", "b", "d"], 2) == {"c": 0, "a": 1, "b": 1, "d": 1}
    assert sincronia.levels_of(["c", "a", "b"], 6) == {"c": 0, "a": 1, "b": 2}


def _inputs(jobs: dict[str, tuple[float, float, list[dict]]], queues=2) -> Inputs:
    """jobs: name -> (compute per iteration s, bytes per connection, its hashed rows); 2 ranks each."""
    cap = {UP: 10e6, ("tor-up", "t", "a1"): 10e6}
    return Inputs([crux.Demand(n, c * 2, {}) for n, (c, _b, _r) in jobs.items()], cap,
                  {n: [r] * 1 for n, (_c, _b, r) in jobs.items()}, {n: r for n, (_c, _b, r) in jobs.items()},
                  {n: b for n, (_c, b, _r) in jobs.items()}, queues, random.Random(1), [40, 8],
                  {n: c for n, (c, _b, _r) in jobs.items()})


def test_sincronia_serves_the_smaller_bottleneck_first_on_the_hash_paths():
    x = _inputs({"big": (2.0, 1e6, [row("h0", "h1", 1)]), "small": (0.05, 1e5, [row("h2", "h3", 2)])})
    a = policies.get("sincronia").assign(x)
    assert a["order"] == ["small", "big"]
    assert a["jobs"]["small"]["level"] == 0 and a["jobs"]["small"]["dscp"] == 40
    assert a["jobs"]["big"]["level"] == 1 and a["jobs"]["big"]["dscp"] == 8
    assert a["jobs"]["big"]["sports"] == [1] and a["jobs"]["small"]["sports"] == [2]  # the hash's paths
    # Crux orders by intensity (big: 4 GPU-s over 0.8 s of traffic, small: 0.1 over 0.08), not by size
    assert policies.get("crux-priority-only").assign(x)["jobs"]["big"]["level"] == 0


# --- cassini -----------------------------------------------------------------------------------------------
def test_cassini_shifts_a_job_so_the_communication_phases_interleave():
    # two identical jobs on one 10 Mbit/s link: 0.5 s compute, then 0.5 s at the full link
    j = {"compute_s": 0.5, "comm_s": 0.5, "rate_bps": {UP: 10e6}}
    off = cassini.offsets({"a": dict(j), "b": dict(j)}, {UP: 10e6})
    assert off["a"] == 0.0 and off["b"] == pytest.approx(0.5, abs=0.011)  # b communicates while a computes
    # on different links nothing is shifted
    off = cassini.offsets({"a": dict(j), "b": {**j, "rate_bps": {("tor-up", "t", "a1"): 10e6}}},
                          {UP: 10e6, ("tor-up", "t", "a1"): 10e6})
    assert off == {"a": 0.0, "b": 0.0}


def test_cassini_policy_is_one_class_on_the_hash_paths_with_a_shift_per_job():
    # each job: 0.2 s of compute, then 125000 B (1 Mbit) on the shared 10 Mbit/s uplink: 0.1 s
    x = _inputs({"a": (0.2, 125000, [row("h0", "h1", 1)]), "b": (0.2, 125000, [row("h2", "h3", 2)])})
    p = policies.get("cassini")
    assert not p.uses_queues
    a = p.assign(x)["jobs"]
    assert a["a"]["level"] is None and a["a"]["dscp"] is None and a["a"]["sports"] == [1]
    # a unshifted; b's 0.1 s of traffic must fall inside a's 0.2 s of compute: a shift of 0.1 to 0.2 s
    assert a["a"]["offset_s"] == 0.0 and 0.1 <= a["b"]["offset_s"] <= 0.2


def _plan(tmp_path, policy):
    from pathlib import Path

    from hpnlab.traffic.run import experiment

    repo = Path(__file__).resolve().parents[1]
    p = tmp_path / "x.yml"
    p.write_text(f"name: x\nspec: {repo}/examples/load-balance.yml\n"
                 f"workload: {{kind: jobs, policy: {policy}, jobs: [{{name: heavy, hosts: [s0h0, s1h0], compute_ms: 400,"
                 f" size_kb: 128}}, {{name: chatty, hosts: [s0h1, s1h1], compute_ms: 50, size_kb: 1024}}]}}\n"
                 "variants: [{name: a, spec: {aggs_per_plane: 1, links: {access: {rate_mbit: 40}, uplink: {rate_mbit: 10}}}}]\n")
    return experiment.load(p).plans[0]


def test_a_shifted_job_starts_late_ends_with_the_run_and_counts_the_shift_as_idle(tmp_path):
    plan = _plan(tmp_path, "cassini")
    plan.assignment = {"jobs": {n: {"sports": list(range(10, 14)), "dscp": None, "offset_s": s}
                                for n, s in (("heavy", 0.0), ("chatty", 0.3))}}
    procs = jobsmod.Jobs().launch(plan, tmp_path, 100.0, 10)

    def arg(p, flag):
        return p["argv"][p["argv"].index(flag) + 1]

    heavy = [p for p in procs if "job-heavy-" in p["out"]]
    chatty = [p for p in procs if "job-chatty-" in p["out"]]
    assert {arg(p, "--start-at") for p in heavy} == {"100.000"} and {arg(p, "--duration") for p in heavy} == {"10"}
    assert {arg(p, "--start-at") for p in chatty} == {"100.300"} and {arg(p, "--duration") for p in chatty} == {"9.7"}
    # its window begins at the run's start: 0.3 s of idle GPUs, then one 50 ms compute per 0.45 s
    rep = {"rank": 0, "ranks": 2, "start": 100.3, "until": 110.0, "iterations": [100.75], "computed": [100.35, 100.8]}
    f = jobsmod.job_figures([rep], 0.05, shift_s=0.3)
    assert f["window_s"] == pytest.approx(10.0) and f["gpu_util"] == pytest.approx(0.1 / 10, abs=1e-4)
    assert f["iteration_ms"]["median"] == pytest.approx(450.0)  # the iteration itself is not stretched


# --- Crux paired against each baseline --------------------------------------------------------------------
JOB = {"ranks": 2, "compute_ms": 100, "gpu_util": None, "iteration_ms": None, "exposed_ms": None, "intensity": None,
       "level": None, "dscp": None}


def _variant(policy: str, utils: list[float | None]) -> dict:
    return {"jobs": {"policy": policy, "per_job": {"a": JOB, "b": JOB}, "cluster_gpu_util": None},
            "runs": [{"workload": {"cluster_gpu_util": u} if u is not None else None} for u in utils]}


def test_crux_is_paired_by_hash_seed_against_every_other_policy_of_the_same_jobs():
    results = {"experiment": "x", "repetitions": 5, "variants": {
        "two-fifo": _variant("fifo", [0.25, 0.30, 0.20, 0.40, 0.25]),
        "two-crux": _variant("crux", [0.30, 0.45, 0.25, 0.40, 0.50]),
        "two-sincronia": _variant("sincronia", [0.30, 0.40, None, 0.50, 0.25]),
        "six-crux": {"jobs": {"policy": "crux", "per_job": {"j1": {}}}, "runs": [{"workload": {"cluster_gpu_util": 1}}]},
    }}
    p = jobsmod.paired(results)["paired"]
    assert set(p) == {"two-crux"}  # six-crux has no baseline of its jobs
    fifo = p["two-crux"]["two-fifo"]
    assert fifo["n"] == 5 and fifo["seeds"] == [1000, 1001, 1002, 1003, 1004]
    assert fifo["diff"] == [0.05, 0.15, 0.05, 0.0, 0.25]
    assert fifo["diff_mmm"] == {"n": 5, "min": 0.0, "median": 0.05, "max": 0.25}
    assert fifo["gain_pct"] == [20.0, 50.0, 25.0, 0.0, 100.0] and fifo["gain_pct_mmm"]["median"] == 25.0
    sin = p["two-crux"]["two-sincronia"]
    assert sin["policy"] == "sincronia" and sin["seeds"] == [1000, 1001, 1003, 1004]  # seed 1002 did not finish
    assert sin["diff"] == [0.0, 0.05, -0.1, 0.25] and sin["diff_mmm"]["min"] == -0.1
    table = jobsmod.Jobs().summary_table({**results, "variants": {k: v for k, v in results["variants"].items()
                                                                  if k.startswith("two")}})
    assert "two-crux - two-sincronia (sincronia), paired by hash seed over 4" in table
