"""Concurrent jobs without root: the experiment file's jobs (fuzzed specs fail in one line, exit 2), the
policies' assignments on a synthetic path map, per-job figures, all-to-all jobs (their pairs, bytes and
intensity), and the all-reduce's and the all-to-all's compute phases on loopback."""

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic import policies
import hpnlab.traffic.policies.arithmetic as crux
from hpnlab.traffic.run import experiment
from hpnlab.traffic.workloads import jobs as jobsmod

REPO = Path(__file__).resolve().parents[1]
LAB = "{aggs_per_plane: 1, links: {access: {rate_mbit: 40}, uplink: {rate_mbit: 10}}}"
HEAVY = "{name: heavy, hosts: [s0h0, s1h0], compute_ms: 400, size_kb: 128}"
CHATTY = "{name: chatty, hosts: [s0h1, s1h1], compute_ms: 50, size_kb: 1024}"


def _write(tmp_path, workload: str) -> Path:
    p = tmp_path / "x.yml"
    p.write_text(f"name: x\nspec: {REPO}/examples/load-balance.yml\nworkload: {workload}\n"
                 f"variants: [{{name: a, spec: {LAB}}}]\n")
    return p


def _plan(tmp_path, policy="fifo", extra=""):
    w = f"{{kind: jobs, policy: {policy}, jobs: [{HEAVY}, {CHATTY}]{extra}}}"
    return experiment.load(_write(tmp_path, w)).plans[0]


BAD_JOBS = [
    ("{kind: jobs}", "workload.jobs"),
    ("{kind: jobs, jobs: []}", "workload.jobs"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0]}]}", "workload.jobs.0.hosts"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, nope]}]}", "workload.jobs.0.hosts"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s0h0]}]}", "workload.jobs.0.hosts"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], compute_ms: -1}]}", "workload.jobs.0.compute_ms"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], size_kb: 0}]}", "workload.jobs.0.size_kb"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], collective: ring}]}", "workload.jobs.0.collective"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], colour: red}]}", "workload.jobs.0.colour"),
    ("{kind: jobs, jobs: [{name: 'a b', hosts: [s0h0, s1h0]}]}", "workload.jobs.0.name"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0]}, {name: a, hosts: [s0h1, s1h1]}]}", "workload.jobs"),
    ("{kind: jobs, policy: lottery, jobs: [{name: a, hosts: [s0h0, s1h0]}]}", "workload.policy"),
    ("{kind: jobs, queues: 9, jobs: [{name: a, hosts: [s0h0, s1h0]}]}", "workload.queues"),
    ("{kind: jobs, pool: 1, jobs: [{name: a, hosts: [s0h0, s1h0], connections: 2}]}", "workload.pool"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], rail: 3}]}", "rail"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], k: 0}]}", "workload.jobs.0.k"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], iterations: 0}]}", "workload.jobs.0.iterations"),
    ("{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0]}], dscp: 8}", "workload.dscp"),
]


@pytest.mark.parametrize("workload,field", BAD_JOBS, ids=[w for w, _f in BAD_JOBS])
def test_bad_job_specs_name_the_field_in_one_line(tmp_path, workload, field):
    with pytest.raises(SpecError) as e:
        experiment.load(_write(tmp_path, workload))
    assert field in str(e.value) and "\n" not in str(e.value)


def test_fuzzed_job_specs_exit_2_with_one_line(tmp_path):
    """Random mutations of a good jobs workload: each loads, or fails with one line naming a workload key;
    through the CLI, one line on stderr and exit 2, no traceback and no lab."""
    rng = random.Random(38)
    keys = ["name", "hosts", "rail", "collective", "size_kb", "compute_ms", "iterations", "connections", "k", "bogus"]
    values = ["-1", "0", "1e9", "nan", "''", "[]", "[s0h0]", "{a: 1}", "x y", "null", "true", "3.5", "[s0h0, s9h9]"]
    cli_checked = 0
    for i in range(40):
        job = {"name": "a", "hosts": "[s0h0, s1h0]"}
        job[rng.choice(keys)] = rng.choice(values)
        text = "{kind: jobs, jobs: [{" + ", ".join(f"{k}: {v}" for k, v in job.items()) + "}]}"
        p = _write(tmp_path, text)
        try:
            experiment.load(p)
        except SpecError as e:
            assert "\n" not in str(e) and "workload" in str(e), str(e)
            if cli_checked < 3:  # the CLI's exit code and one line, for a few of them (each is a process)
                r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(p), "--out", str(tmp_path / "o")],
                                   capture_output=True, text=True, cwd=REPO, timeout=60)
                assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
                assert not (tmp_path / "o").exists()
                cli_checked += 1
    assert cli_checked == 3


def test_priority_policies_refuse_a_lab_without_switch_queues(tmp_path):
    for policy in ("crux", "crux-priority-only", "reversed"):
        with pytest.raises(SpecError) as e:
            _plan(tmp_path, policy)
        assert "workload.policy" in str(e.value) and "qos" in str(e.value)
    for policy in ("fifo", "crux-paths-only"):
        assert _plan(tmp_path, policy).workload.policy == policy


@pytest.mark.parametrize("qos,msg", [
    ("{queues: 1}", "workload.queues: 2 levels, but the spec's qos has 1 queues"),
    ("{queues: 2, default_queue: 0, dscp: {cs5: 0}}", "maps no DSCP to queue 1"),
])
def test_priority_policies_need_a_dscp_for_every_level(tmp_path, qos, msg):
    p = tmp_path / "x.yml"
    p.write_text(f"name: x\nspec: {REPO}/examples/load-balance.yml\n"
                 f"workload: {{kind: jobs, policy: crux, jobs: [{HEAVY}, {CHATTY}]}}\n"
                 f"variants: [{{name: a, spec: {{aggs_per_plane: 1, links: {{uplink: {{rate_mbit: 10}}}}, qos: {qos}}}}}]\n")
    with pytest.raises(SpecError) as e:
        experiment.load(p)
    assert msg in str(e.value) and "\n" not in str(e.value)
    p.write_text(p.read_text().replace(f"qos: {qos}", "qos: {queues: 2, dscp: {cs5: 0}}"))
    plan = experiment.load(p).plans[0]
    x = jobsmod.inputs(plan.workload, plan.cfgs, _rows(plan), 1000, plan.spec)
    assert x.dscps == [40, 0]  # queue 1 is the default: its jobs go unmarked


def _rows(plan):
    """A synthetic path map: every connection's pair, 8 source ports alternating between the planes."""
    out = []
    for i, j in enumerate(plan.workload.jobs):
        for src, dst in jobsmod.pairs_of(j):
            s, d = plan.cfgs[src].nic(0), plan.cfgs[dst].nic(0)
            for n in range(8):
                p = n % 2
                out.append({"job": j.name, "src": src, "dst": dst, "sport": jobsmod.SPORT_BASE + 256 * i + n,
                            "port": s.ports[p], "tor": s.tors[p], "agg": f"agg{p}-0", "dst_tor": d.tors[p]})
    return out


def test_intensity_on_the_hash_placement_and_every_policy_assigns_every_connection(tmp_path):
    plan = _plan(tmp_path)
    rows = _rows(plan)
    x = jobsmod.inputs(plan.workload, plan.cfgs, rows, 1000)
    # a lab's qos as the policies read it: queue 0 first, cs5 -> 0, cs1 -> 1 (the default queue)
    spec = SimpleNamespace(qos=SimpleNamespace(queues=2, default_queue=None, dscp={40: 0, 8: 1}))
    for name in policies.names():
        a = policies.get(name).assign(jobsmod.inputs(plan.workload, plan.cfgs, rows, 1000, spec))
        for j in plan.workload.jobs:
            got = a["jobs"][j.name]
            assert len(got["sports"]) == len(j.hosts) * j.connections
            assert got["intensity"] > 0
        heavy, chatty = a["jobs"]["heavy"], a["jobs"]["chatty"]
        # heavy: 0.8 GPU-s over 128 KB at 10 Mbit/s (both its connections on one uplink: at most 0.105 s);
        # chatty: 0.1 GPU-s over 1 MB: far less intensive
        assert heavy["intensity"] > 10 * chatty["intensity"]
        if policies.get(name).uses_queues:
            assert heavy["level"] != chatty["level"] and {heavy["level"], chatty["level"]} == {0, 1}
            hi = "heavy" if name != "reversed" else "chatty"
            lo = "chatty" if hi == "heavy" else "heavy"
            assert a["jobs"][hi]["level"] == 0 and a["jobs"][hi]["dscp"] == 40 and a["jobs"][hi]["queue"] == 0
            assert a["jobs"][lo]["dscp"] == 8 and a["jobs"][lo]["queue"] == 1
        else:
            assert heavy["level"] is None and heavy["dscp"] is None
        if name in ("fifo", "crux-priority-only", "reversed"):
            assert heavy["sports"] == [r["sport"] for r in x.hashed["heavy"]]
    # crux's placement spreads the most intensive job's connections over both planes in each direction
    a = policies.get("crux-paths-only").assign(x)
    assert {p.split(">")[2] for p in a["jobs"]["heavy"]["paths"][:2]} == {"agg0-0", "agg1-0"}


def test_a_levels_dscp_is_one_the_labs_map_sends_to_its_queue():
    from hpnlab.traffic.policies.base import dscp_for_queue

    qos = SimpleNamespace(queues=3, default_queue=None, dscp={46: 0, 34: 0, 26: 1})
    assert [dscp_for_queue(qos, q) for q in range(3)] == [34, 26, 0]  # queue 2: the default, unmarked
    qos = SimpleNamespace(queues=3, default_queue=1, dscp={46: 0})
    assert [dscp_for_queue(qos, q) for q in range(3)] == [46, 0, None]


def test_launch_passes_compute_ports_and_only_an_assigned_dscp(tmp_path):
    plan = _plan(tmp_path)
    plan.assignment = policies.get("fifo").assign(jobsmod.inputs(plan.workload, plan.cfgs, _rows(plan), 1000))
    procs = jobsmod.Jobs().launch(plan, tmp_path, 100.0, 10)
    assert len(procs) == 4 and all(p["role"] == "job" for p in procs)
    argv = procs[0]["argv"]
    assert argv[argv.index("--compute-ms") + 1] == "400" and "--dscp" not in argv
    assert argv[argv.index("--sports") + 1] == ",".join(map(str, plan.assignment["jobs"]["heavy"]["sports"][:2]))
    assert argv[argv.index("--port") + 1] == str(jobsmod.PORT_BASE)
    assert procs[2]["argv"][procs[2]["argv"].index("--port") + 1] == str(jobsmod.PORT_BASE + 1)
    plan.assignment["jobs"]["heavy"]["dscp"] = 8
    argv = jobsmod.Jobs().launch(plan, tmp_path, 100.0, 10)[0]["argv"]
    assert argv[argv.index("--dscp") + 1] == "8"


def test_job_figures_utilisation_and_exposed_communication():
    # 3 iterations of 100 ms compute + 50 ms communication each
    computed = [10.1, 10.25, 10.4]
    ends = [10.15, 10.3, 10.45]
    f = jobsmod.job_figures([{"rank": 0, "ranks": 2, "iterations": ends, "computed": computed}], 0.1)
    assert f["iterations"] == 3 and f["gpu_util"] == pytest.approx(0.3 / 0.45, abs=1e-3)
    assert f["exposed_ms"]["median"] == pytest.approx(50, abs=0.2)
    assert f["iteration_ms"]["median"] == pytest.approx(150, abs=0.2)
    assert jobsmod.cluster_util({"a": {"gpu_util": 0.5, "ranks": 2}, "b": {"gpu_util": 0.8, "ranks": 6}}) == \
        pytest.approx(0.725)
    idle = jobsmod.job_figures([{"rank": 0, "ranks": 2, "iterations": [], "computed": []}], 0.1)
    assert idle["gpu_util"] == 0 and idle["compute_ms"] == 100


def test_the_summary_and_plot_take_a_repetition_in_which_a_job_completed_nothing(tmp_path):
    """A starved job (no iteration in one repetition) is a figure of 0, not a crash of the report."""
    runs = []
    for its in ([10.15, 10.3], []):
        f = jobsmod.job_figures([{"rank": 0, "ranks": 2, "iterations": its, "computed": [x - 0.05 for x in its]}], 0.1)
        f.pop("begin", None)
        f["ends_s"] = [round(t - 10, 3) for t in f.pop("ends", [])]
        runs.append({"workload": {"kind": "jobs", "policy": "fifo", "jobs": {"a": f},
                                  "cluster_gpu_util": jobsmod.cluster_util({"a": f})}})
    kind = jobsmod.Jobs()
    v = {"runs": runs, **kind.aggregate(runs)}
    assert v["jobs"]["per_job"]["a"]["gpu_util"]["min"] == 0 and v["jobs"]["per_job"]["a"]["compute_ms"] == 100
    results = {"experiment": "x", "repetitions": 2, "variants": {"v": v}}
    table = kind.summary_table(results)
    lines = table.splitlines()
    assert "v / policy fifo" in lines and lines[lines.index("v / policy fifo") + 1].split() == ["cluster", "a"]
    assert any(ln.split() == ["ranks", "2"] for ln in lines) and any(ln.split() == ["compute", "ms", "100.0"]
                                                                      for ln in lines)
    assert max(map(len, lines)) <= 100
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib is not installed: the plot is not drawn")
    assert kind.plot(results, tmp_path / "p.png").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ring_with_a_compute_phase_waits_it_out_each_iteration_and_stops_at_its_count(tmp_path):
    """Two ranks on loopback, 100 ms of compute per iteration and tiny messages: the compute is most of every
    iteration, each iteration's compute end precedes its end, and --iterations stops the ring."""
    port, start = _free_port(), time.time() + 1.0
    procs = []
    for rank in (0, 1):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "hpnlab.node.programs.allreduce", "--rank", str(rank), "--addrs", "127.0.0.1,127.0.0.2",
             "--port", str(port), "--size", "4096", "--conns", "2", "--compute-ms", "100", "--iterations", "8",
             "--duration", "20", "--start-at", f"{start:.3f}", "--out", str(tmp_path / f"r{rank}.json")]))
    for p in procs:
        assert p.wait(timeout=40) == 0
    reps = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1)]
    for r in reps:
        assert len(r["iterations"]) == 8 and len(r["computed"]) == 8
        assert all(c <= e for c, e in zip(r["computed"], r["iterations"]))
        assert r["computed"][0] >= start + 0.095  # the first iteration computes before it sends
    f = jobsmod.job_figures(reps, 0.1, iterations=8)
    # 8 x 100 ms of compute; a busy 2-core machine stretches the wall time, hence the margin
    assert f["iteration_ms"]["min"] >= 99 and 0.5 < f["gpu_util"] <= 1.0


def _listening(port: int) -> bool:
    """Whether a socket listens on ``port`` (/proc/net/tcp: local address hex, state 0A is LISTEN)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(r.split()[1].endswith(f":{port:04X}") and r.split()[3] == "0A" for r in rows)


@pytest.mark.parametrize("module", ["allreduce", "alltoall"])
def test_a_rank_stopped_while_its_peers_are_missing_reports_at_once(tmp_path, module):
    """Rank 0 of two, whose peer never starts, is stopped while it connects: it ends with a report (no
    iteration) well before its connect deadline (jobrun.CONNECT_S, 15 s), which the runner, killing 3 s
    after its SIGTERM, would never see. Before, connect looked at the deadline only."""
    from hpnlab.node.programs.jobrun import CONNECT_S

    port = _free_port()
    out = tmp_path / "r0.json"
    p = subprocess.Popen([sys.executable, "-m", f"hpnlab.node.programs.{module}", "--rank", "0", "--addrs",
                          "127.0.0.1,127.0.0.2", "--port", str(port), "--size", "4096", "--conns", "1",
                          "--duration", "30", "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not _listening(port):  # listening: its signal handlers are in, and it is connecting
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else ""
            time.sleep(0.02)
        t0 = time.monotonic()
        p.terminate()
        rc = p.wait(timeout=CONNECT_S + 10)
        took = time.monotonic() - t0
        print(f"{module}: exited {rc} {took:.2f} s after its stop")
        assert rc == 0 and took < CONNECT_S / 3, (rc, took, p.stderr.read())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert json.loads(out.read_text())["iterations"] == []


# --- all-to-all jobs ---------------------------------------------------------------------------------------
A2A = ("{name: moe, collective: alltoall, hosts: [s0h0, s0h1, s1h0, s1h1], compute_ms: 100, size_kb: 1024, "
       "connections: 1}")
RING = "{name: ring, hosts: [s0h0, s0h1, s1h0, s1h1], compute_ms: 100, size_kb: 1024, connections: 1}"


def _a2a_plan(tmp_path, jobs=A2A):
    return experiment.load(_write(tmp_path, f"{{kind: jobs, jobs: [{jobs}]}}")).plans[0]


def _plane0_rows(plan):
    """A path map in which every pair crossing the aggs takes plane 0 whatever its source port, and a pair
    on one ToR set answers as the probe sees it: the first-hop ToR, then no agg (the host itself answers)."""
    out = []
    for i, j in enumerate(plan.workload.jobs):
        for src, dst in jobsmod.pairs_of(j):
            s, d = plan.cfgs[src].nic(0), plan.cfgs[dst].nic(0)
            local = set(s.tors) == set(d.tors)
            for n in range(2):
                out.append({"job": j.name, "src": src, "dst": dst, "sport": jobsmod.SPORT_BASE + 256 * i + n,
                            "port": s.ports[0], "tor": s.tors[0], "agg": "?" if local else "agg0-0",
                            "dst_tor": "?" if local else d.tors[0]})
    return out


def test_an_alltoall_job_connects_every_rank_to_every_other_and_sends_a_part_to_each(tmp_path):
    j = _a2a_plan(tmp_path).workload.jobs[0]
    assert j.collective == "alltoall"
    pairs = jobsmod.pairs_of(j)
    assert len(pairs) == 12 and len(set(pairs)) == 12 and all(a != b for a, b in pairs)
    assert pairs[:3] == [("s0h0", "s0h1"), ("s0h0", "s1h0"), ("s0h0", "s1h1")]  # rank by rank, peers in rank order
    assert jobsmod.bytes_per_conn(j) == 256 * 1024  # 1/4 of 1 MB to each peer, on one connection
    assert crux.alltoall_bytes_per_peer(1000, 4) == 250 and crux.alltoall_bytes_per_peer(1000, 1) == 0
    # a job without `collective` is a ring, as every job was before all-to-all came
    ring = _a2a_plan(tmp_path, RING).workload.jobs[0]
    assert ring.collective == "allreduce" and len(jobsmod.pairs_of(ring)) == 4


def test_alltoall_intensity_is_its_iterations_traffic_on_the_most_loaded_link(tmp_path):
    """4 ranks over 2 segments, 1 MB buffers, every cross-segment pair on plane 0: segment 0's plane-0 uplink
    carries the 4 parts segment 0 sends to segment 1, 4 x 256 KB = 8 Mbit, 0.839 s at 10 Mbit/s; the work is
    4 ranks x 100 ms = 0.4 GPU-s, so I = 0.4 / 0.839. A ring of the same hosts sends 2(n-1)/n of its buffer,
    1.5 MB, across that uplink on its one crossing pair: 1.258 s, I = 0.318."""
    plan = _a2a_plan(tmp_path, f"{A2A}, {RING}")
    x = jobsmod.inputs(plan.workload, plan.cfgs, _plane0_rows(plan), 1000)
    up = ("tor-up", plan.cfgs["s0h0"].nic(0).tors[0], "agg0-0")
    moe = crux.flow_link_bytes(x.hashed["moe"], x.bytes_per_conn["moe"])
    assert moe[up] == 4 * 256 * 1024
    # the local pairs load their access links only: the ToR turns them round
    local = [r for r in x.hashed["moe"] if r["dst"] == "s0h1" and r["src"] == "s0h0"]
    assert len(local) == 1 and crux.links_of(local[0]) == [("host-up", "s0h0", up[1]), ("tor-down", up[1], "s0h1")]
    inten, _prio = policies.base.Policy.intensities(x)
    assert inten["moe"] == pytest.approx(0.4 / (8 * 4 * 256 * 1024 / 10e6), rel=1e-6)
    assert inten["ring"] == pytest.approx(0.4 / (8 * 1.5 * 1024 * 1024 / 10e6), rel=1e-6)
    # the assignment names a local pair's path without an agg
    a = policies.get("crux-paths-only").assign(x)
    assert a["jobs"]["moe"]["paths"][0] == f"s0h0>{up[1]}>s0h1" and len(a["jobs"]["moe"]["sports"]) == 12


def test_an_alltoall_job_runs_the_alltoall_program_with_its_ports_per_peer(tmp_path):
    plan = _a2a_plan(tmp_path)
    plan.assignment = policies.get("fifo").assign(jobsmod.inputs(plan.workload, plan.cfgs, _plane0_rows(plan), 1000))
    procs = jobsmod.Jobs().launch(plan, tmp_path, 100.0, 10)
    assert len(procs) == 4
    sports = plan.assignment["jobs"]["moe"]["sports"]
    for rank, p in enumerate(procs):
        argv = p["argv"]
        assert argv[argv.index("-m") + 1] == "hpnlab.node.programs.alltoall" and "--select" not in argv
        assert argv[argv.index("--sports") + 1] == ",".join(map(str, sports[3 * rank:3 * rank + 3]))
        assert argv[argv.index("--compute-ms") + 1] == "100" and argv[argv.index("--rank") + 1] == str(rank)


def test_an_alltoall_with_a_compute_phase_completes_every_iteration_only_once_every_peer_sent(tmp_path):
    """Three ranks on loopback, 2 connections to each peer, every rank binding the same two source ports
    for both of its peers (as a path map's pool gives them), 100 ms of compute per iteration and 5
    iterations: each rank receives every peer's parts in full, each iteration ends after every peer's compute
    for it ended (they send only then), and --iterations stops the job."""
    port, start = _free_port(), time.time() + 1.0
    addrs = "127.0.0.1,127.0.0.2,127.0.0.3"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "hpnlab.node.programs.alltoall", "--rank", str(rank), "--addrs", addrs, "--port", str(port),
         "--size", str(3 * 40000), "--conns", "2", "--compute-ms", "100", "--iterations", "5", "--duration", "20",
         "--sports", "31001,31002,31001,31002", "--start-at", f"{start:.3f}",
         "--out", str(tmp_path / f"r{rank}.json")])
        for rank in range(3)]
    for p in procs:
        assert p.wait(timeout=40) == 0
    reps = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(3)]
    for r in reps:
        assert len(r["iterations"]) == 5 and len(r["computed"]) == 5
        assert r["bytes_received"] == 5 * 2 * 40000  # 5 iterations x 2 peers x a third of 120000 bytes
        assert r["sports"] == [31001, 31002, 31001, 31002]
        for k, end in enumerate(r["iterations"]):
            assert all(peer["computed"][k] <= end for peer in reps), k
    f = jobsmod.job_figures(reps, 0.1, iterations=5)
    assert f["iterations"] == 5 and f["iteration_ms"]["min"] >= 99 and 0.5 < f["gpu_util"] <= 1.0


# --- fuzzed job specs (hypothesis) -------------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

JOB_KEYS = ["name", "hosts", "rail", "collective", "size_kb", "compute_ms", "iterations", "connections", "k"]
ANY = st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), st.floats(allow_nan=True, allow_infinity=True),
                st.text(alphabet="abcs0h1-_. x", max_size=8),
                st.lists(st.sampled_from(["s0h0", "s1h0", "s0h1", "s1h1", "s9h9", "s0r0a", ""]), max_size=4),
                st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2))
GOOD = {"name": st.sampled_from(["a", "moe", "j.1"]),
        "hosts": st.sampled_from([["s0h0", "s1h0"], ["s0h0", "s0h1", "s1h0", "s1h1"]]),
        "collective": st.sampled_from(["allreduce", "alltoall"]), "size_kb": st.integers(1, 4096),
        "compute_ms": st.floats(0, 1000), "connections": st.integers(1, 4)}
JOB = st.fixed_dictionaries({k: st.one_of(GOOD[k], GOOD[k], ANY) for k in ("name", "hosts")},
                            optional={**{k: st.one_of(GOOD[k], ANY) if k in GOOD else ANY
                                         for k in JOB_KEYS if k not in ("name", "hosts")}, "bogus": ANY})
WORKLOAD = st.fixed_dictionaries({"kind": st.just("jobs"), "jobs": st.lists(JOB, min_size=1, max_size=3)},
                                 optional={"policy": st.one_of(st.sampled_from(["fifo", "crux-paths-only"]), ANY),
                                           "queues": st.one_of(st.integers(1, 8), ANY),
                                           "pool": st.one_of(st.integers(1, 32), ANY)})
CLI_CHECKS = {"left": 4}  # the CLI's exit code for the first few refused specs (each is a process)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(WORKLOAD)
def test_fuzzed_job_specs_load_or_fail_in_one_line_naming_the_field_and_exit_2(tmp_path, workload):
    """Whatever a user writes in a jobs workload: it loads, or fails with one SpecError line that names the
    workload key at fault (a job's own key by its path, workload.jobs.N.KEY); through the CLI that is exit 2,
    one line on stderr, no traceback and no output folder."""
    import yaml

    p = tmp_path / "fz.yml"
    p.write_text(yaml.safe_dump({"name": "fz", "spec": f"{REPO}/examples/load-balance.yml", "workload": workload,
                                 "variants": [{"name": "a", "spec": {"aggs_per_plane": 1}}]}))
    try:
        plan = experiment.load(p).plans[0]
    except SpecError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 500, msg
        keys = [f"workload.jobs.{i}.{k}" for i, j in enumerate(workload["jobs"]) for k in j]
        keys += [f"workload.{k}" for k in workload] + ["workload.jobs"]
        assert any(k in msg for k in keys), msg
        if CLI_CHECKS["left"] > 0:
            CLI_CHECKS["left"] -= 1
            out = tmp_path / "o"
            r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(p), "--out", str(out)],
                               capture_output=True, text=True, cwd=REPO, timeout=60)
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
            assert msg in lines[0] and not out.exists(), (msg, lines[0])
    else:
        assert [j.name for j in plan.workload.jobs] == [j["name"] for j in workload["jobs"]]


def test_the_traffic_programs_take_their_common_options_from_one_place():
    """allreduce, alltoall and elephant's send/serve parse --duration/--start-at/--congestion/--dscp/--out
    as hpnlab.node.programs.jobrun defines them (one definition: a change reaches every program), the two job
    programs also --compute-ms/--sports/--iterations."""
    import argparse

    from hpnlab.node.programs import jobrun

    common = argparse.ArgumentParser()
    jobrun.add_common_args(common)
    job = argparse.ArgumentParser()
    jobrun.add_job_args(job, "ports")
    want = {a.dest: (a.default, a.type, a.required) for a in common._actions if a.dest != "help"}
    want_job = {a.dest: (a.default, a.type) for a in job._actions if a.dest != "help"}
    progs = {"allreduce": [], "alltoall": [], "elephant": ["send", "serve"]}
    for prog, subs in progs.items():
        for sub in subs or [None]:
            r = subprocess.run([sys.executable, "-m", f"hpnlab.node.programs.{prog}", *([sub] if sub else []), "--help"],
                               capture_output=True, text=True, cwd=REPO, timeout=60)
            assert r.returncode == 0, r.stderr
            for opt in ("--duration", "--start-at", "--congestion", "--dscp", "--out"):
                assert opt in r.stdout, (prog, sub, opt)
            if prog != "elephant":
                assert all(o in r.stdout for o in ("--compute-ms", "--sports", "--iterations")), prog
    assert want["duration"][2] and want["out"][2] and want["dscp"][0] is None and want_job["iterations"][0] is None
    assert jobrun.sports_of(argparse.Namespace(sports="30000,30001")) == [30000, 30001]


def test_gpu_util_is_the_compute_done_in_the_window_over_the_window():
    """Crux's Definition 1. The starved case: a job with 0.4 s of compute finished 1 iteration at 2.78 s of a
    12 s run (its second compute ended, then the network starved it): over the run it did at most two
    computes, 0.8 / 12 = 0.067, not 0.4 / 2.78 = 0.144 (the time until its last completed iteration)."""
    starved = {"rank": 0, "ranks": 4, "start": 100.0, "until": 112.0, "iterations": [102.78],
               "computed": [100.4, 103.18]}
    f = jobsmod.job_figures([starved], 0.4)
    assert f["gpu_util"] == pytest.approx(0.8 / 12, abs=1e-3) and f["gpu_util"] <= 0.067
    assert f["iterations"] == 1 and f["window_s"] == pytest.approx(12.0)
    # the compute under way when the run ended counts as far as it got: iterations ended at 101, 111.8, the
    # third compute began at 111.8 and had run 0.2 s of its 0.4 s at 112
    busy = {"rank": 0, "ranks": 2, "start": 100.0, "until": 112.0, "iterations": [101.0, 111.8],
            "computed": [100.4, 101.4]}
    assert jobsmod.job_figures([busy], 0.4)["gpu_util"] == pytest.approx((0.8 + 0.2) / 12, abs=1e-3)
    # a job that ran the iterations it was asked for is done at its last iteration's end
    done = {"rank": 0, "ranks": 2, "start": 100.0, "until": 112.0, "iterations": [101.0, 102.0],
            "computed": [100.4, 101.4]}
    f = jobsmod.job_figures([done], 0.4, iterations=2)
    assert f["gpu_util"] == pytest.approx(0.8 / 2.0, abs=1e-3) and f["window"].startswith("to its last")
    # nothing ended: the first compute, cut by the run's end, still counts as far as it got
    cut = {"rank": 0, "ranks": 2, "start": 100.0, "until": 100.3, "iterations": [], "computed": []}
    assert jobsmod.job_figures([cut], 0.4)["gpu_util"] == pytest.approx(1.0)


def test_a_multi_rail_jobs_window_ends_at_its_last_rails_until():
    by_rail = {0: [{"rank": 0, "ranks": 2, "iterations": [1.2], "computed": [1.0, 2.0], "until": 10.0}],
               1: [{"rank": 0, "ranks": 2, "iterations": [1.3], "computed": [1.05, 1.9], "until": 10.5}]}
    r = jobsmod.across_rails(by_rail)
    assert r["until"] == 10.5
    assert jobsmod.job_figures([r], 1.0)["gpu_util"] == pytest.approx(2 / 10.45, abs=1e-3)
