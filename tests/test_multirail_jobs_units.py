"""A ``jobs`` workload job on several rails (``rails:``), without root: its validation (one line naming the
field, exit 2), Crux's intensity of a job whose buffer is split over two rails against the same job on
one, the policy's placement rail by rail, the ranks' command lines per rail and the job's figures taken
over its rails as its host sees an iteration."""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic import policies
import hpnlab.traffic.policies.arithmetic as crux
from hpnlab.traffic.run import experiment
from hpnlab.traffic.workloads import jobs as jobsmod

REPO = Path(__file__).resolve().parents[1]
LAB = ("{rails: 2, aggs_per_plane: 1, links: {access: {rate_mbit: 40}, uplink: {rate_mbit: 10}}, "
       "qos: {queues: 2, dscp: {cs5: 0, cs1: 1}, default_queue: 0}}")


def _write(tmp_path, workload: str, lab: str = LAB) -> Path:
    p = tmp_path / "x.yml"
    p.write_text(f"name: x\nspec: {REPO}/examples/load-balance.yml\nworkload: {workload}\n"
                 f"variants: [{{name: a, spec: {lab}}}]\n")
    return p


def _plan(tmp_path, jobs: str, policy: str = "crux"):
    return experiment.load(_write(tmp_path, f"{{kind: jobs, policy: {policy}, jobs: [{jobs}]}}")).plans[0]


BAD = [
    ("{name: a, hosts: [s0h0, s1h0], rail: 0, rails: [0, 1]}", "rail or rails, not both"),
    ("{name: a, hosts: [s0h0, s1h0], rails: [1, 1]}", "listed twice"),
    ("{name: a, hosts: [s0h0, s1h0], rails: [0, 2]}", "rail 2 is not a rail of this lab"),
    ("{name: a, hosts: [s0h0, s1h0], rails: []}", "at least 1"),
    ("{name: a, hosts: [s0h0, s1h0], rails: [-1]}", "from 0"),
    ("{name: a, hosts: [s0h0, s1h0], rails: 1}", "list"),
    ("{name: a, hosts: [s0h0, s1h0], rails: [0, x]}", "integer"),
]


@pytest.mark.parametrize("job,msg", BAD, ids=[j for j, _m in BAD])
def test_bad_rails_name_the_field_in_one_line(tmp_path, job, msg):
    with pytest.raises(SpecError) as e:
        experiment.load(_write(tmp_path, f"{{kind: jobs, jobs: [{job}]}}"))
    assert "workload.jobs.0.rails" in str(e.value) and msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_rail_the_lab_lacks_is_refused_and_through_the_cli_exits_2_in_one_line(tmp_path):
    one_rail = "{aggs_per_plane: 1}"
    p = _write(tmp_path, "{kind: jobs, jobs: [{name: a, hosts: [s0h0, s1h0], rails: [0, 1]}]}", one_rail)
    with pytest.raises(SpecError, match=r"workload\.jobs\.0\.rails: rail 1 is not a rail of this lab \(rails 0\)"):
        experiment.load(p)
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "workload.jobs.0.rails" in r.stderr and not (tmp_path / "o").exists()


def _rows(plan):
    """A synthetic path map, as prepare_variant writes it: per job, per rail it runs on, per connection's
    pair, 8 source ports alternating between the planes (a multi-rail job's rows carry their rail)."""
    out = []
    w = plan.workload
    for i, j in enumerate(w.jobs):
        for rail in jobsmod.rails_of(w, j):
            tag = {"rail": rail} if j.rails is not None else {}
            for src, dst in jobsmod.pairs_of(j):
                s, d = plan.cfgs[src].nic(rail), plan.cfgs[dst].nic(rail)
                for n in range(8):
                    p = n % 2
                    out.append({"job": j.name, "src": src, "dst": dst, "sport": jobsmod.SPORT_BASE + 256 * i + n,
                                "port": s.ports[p], "tor": s.tors[p], "agg": f"agg{p}-0", "dst_tor": d.tors[p], **tag})
    return out


JOB = "name: {name}, hosts: [s0h0, s1h0], compute_ms: 100, size_kb: 256, connections: 1{extra}"


def test_a_job_on_two_rails_has_half_the_bytes_per_link_so_twice_the_intensity(tmp_path):
    """One connection per pair, alone on the fabric: every link of its path carries one connection's bytes.
    On two rails each rail's connection carries half the buffer's ring traffic, so the most loaded link
    (a 10 Mbit/s ToR uplink, on either rail) needs half the time: the same GPU work, twice the intensity."""
    one = _plan(tmp_path, "{" + JOB.format(name="j", extra="") + "}")
    two = _plan(tmp_path, "{" + JOB.format(name="j", extra=", rails: [0, 1]") + "}")
    x1 = jobsmod.inputs(one.workload, one.cfgs, _rows(one), 1000, one.spec)
    x2 = jobsmod.inputs(two.workload, two.cfgs, _rows(two), 1000, two.spec)
    assert x2.bytes_per_conn["j"] == pytest.approx(x1.bytes_per_conn["j"] / 2)
    assert x2.demands[0].work_s == x1.demands[0].work_s  # the same GPU work per iteration
    # connections rail by rail: the two ring connections on rail 0, then the two on rail 1
    assert len(x1.candidates["j"]) == 2 and len(x2.candidates["j"]) == 4
    tors = lambda cs: {c[0]["tor"] for c in cs}  # noqa: E731
    r0, r1 = tors(x2.candidates["j"][:2]), tors(x2.candidates["j"][2:])
    assert r0 <= set(two.cfgs["s0h0"].nic(0).tors + two.cfgs["s1h0"].nic(0).tors)
    assert r1 <= set(two.cfgs["s0h0"].nic(1).tors + two.cfgs["s1h0"].nic(1).tors)
    assert not r0 & r1
    # every used rail's links are shaped
    assert {lk for lk in x2.capacity if lk[0] == "host-up" and lk[1] == "s0h0"} == \
        {("host-up", "s0h0", t) for r in (0, 1) for t in two.cfgs["s0h0"].nic(r).tors}
    a1 = policies.get("crux").assign(x1)["jobs"]["j"]
    a2 = policies.get("crux").assign(x2)["jobs"]["j"]
    assert a2["intensity"] == pytest.approx(2 * a1["intensity"], rel=1e-3), (a1, a2)
    # the model's own figure: t_j = 8 x bytes / 10 Mbit/s on an uplink; W_j = 0.1 s x 2 ranks
    ring = crux.ring_bytes_per_rank(256 * 1024 // 2, 2)
    assert a2["intensity"] == pytest.approx(0.2 / (8 * ring / 10e6), rel=1e-3)
    # the placement: rail 0's connections on rail 0's ToRs, rail 1's on rail 1's; one DSCP for the job
    assert len(a2["sports"]) == len(a2["paths"]) == 4
    for p in a2["paths"][:2]:
        assert p.split(">")[1] in two.cfgs["s0h0"].nic(0).tors + two.cfgs["s1h0"].nic(0).tors, p
    for p in a2["paths"][2:]:
        assert p.split(">")[1] in two.cfgs["s0h0"].nic(1).tors + two.cfgs["s1h0"].nic(1).tors, p


def test_the_assignment_names_the_rails_and_every_rail_gets_its_ranks_slice_and_size(tmp_path):
    plan = _plan(tmp_path, "{name: wide, hosts: [s0h0, s1h0], compute_ms: 100, size_kb: 256, rails: [1, 0]}, "
                 "{name: narrow, hosts: [s0h1, s1h1], compute_ms: 20, size_kb: 512, rail: 1}")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "pathmap.json").write_text(json.dumps(_rows(plan)))
    jobsmod.Jobs().prepare_repetition(plan, raw, tmp_path / "run", 0)
    asg = plan.assignment["jobs"]
    assert asg["wide"]["rails"] == [1, 0] and "rails" not in asg["narrow"]  # a single-rail job as before
    procs = jobsmod.Jobs().launch(plan, tmp_path / "run", 100.0, 10)
    wide = [p for p in procs if "job-wide-" in p["out"]]
    assert sorted(Path(p["out"]).name for p in wide) == [f"job-wide-r{r}-{k}.json" for r in (0, 1) for k in (0, 1)]
    arg = lambda p, k: p["argv"][p["argv"].index(k) + 1]  # noqa: E731
    for p in wide:
        rail = int(Path(p["out"]).name.split("-")[2][1:])
        rank = int(arg(p, "--rank"))
        ri = [1, 0].index(rail)
        assert arg(p, "--size") == str(256 * 1024 // 2)
        assert arg(p, "--addrs") == ",".join(plan.host_ip(h, rail) for h in ["s0h0", "s1h0"])
        first = (ri * 2 + rank) * 2
        assert arg(p, "--sports") == ",".join(map(str, asg["wide"]["sports"][first:first + 2]))
        assert arg(p, "--dscp") == str(asg["wide"]["dscp"])  # one class on all its rails
    narrow = [p for p in procs if "job-narrow-" in p["out"]]
    assert [Path(p["out"]).name for p in narrow] == ["job-narrow-0.json", "job-narrow-1.json"]
    assert arg(narrow[0], "--size") == str(512 * 1024)
    assert arg(narrow[0], "--addrs") == ",".join(plan.host_ip(h, 1) for h in ["s0h1", "s1h1"])


def test_a_multi_rail_jobs_iteration_ends_when_its_last_rail_ends(tmp_path):
    """Rail 0 ends its iterations at 1.2, 2.3, 3.4 s; rail 1 at 1.3, 2.2 s (one fewer): the job completed
    two iterations, ending 1.3 and 2.3; the compute ends are the later rail's too."""
    by_rail = {0: [{"rank": 0, "ranks": 2, "iterations": [1.2, 2.3, 3.4], "computed": [1.0, 2.0, 3.0]},
                   {"rank": 1, "ranks": 2, "iterations": [9, 9, 9], "computed": [9, 9, 9]}],
               1: [{"rank": 0, "ranks": 2, "iterations": [1.3, 2.2], "computed": [1.05, 1.9]}]}
    r = jobsmod.across_rails(by_rail)
    assert r["iterations"] == [1.3, 2.3] and r["computed"] == [1.05, 2.0] and r["ranks"] == 2
    f = jobsmod.job_figures([r], 1.0)
    # begins at the later compute end minus the compute (0.05); 2 x 1 s of compute over 2.25 s of wall time
    assert f["iterations"] == 2 and f["gpu_util"] == pytest.approx(2 / 2.25, abs=1e-4)
    assert jobsmod.job_figures([jobsmod.across_rails({0: by_rail[0], 1: []})], 1.0)["iterations"] == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("program", ["allreduce", "alltoall"])
def test_a_ranks_rails_share_one_compute_phase(tmp_path, program):
    """Two "rails" on loopback, each a job of two ranks, the second carrying 4000 times the bytes: rank r's
    two rail processes join (--join) after every iteration, so neither rail's next compute begins before
    both have ended the iteration (100 ms of compute after the later end), as on a host whose GPU computes
    once and then sends on every rail."""
    start = time.time() + 1.0
    rails = {0: (["127.0.0.1", "127.0.0.2"], 4096), 1: (["127.0.0.3", "127.0.0.4"], 16 << 20)}
    procs = []
    for part, (addrs, size) in rails.items():
        port = _free_port()
        for rank in (0, 1):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", f"hpnlab.node.programs.{program}", "--rank", str(rank), "--addrs", ",".join(addrs),
                 "--port", str(port), "--size", str(size), "--conns", "1", "--compute-ms", "100",
                 "--iterations", "5", "--duration", "30", "--start-at", f"{start:.3f}",
                 "--join", str(tmp_path / f"join-{rank}"), "--join-part", str(part), "--join-parts", "2",
                 "--out", str(tmp_path / f"r{part}-{rank}.json")]))
    for p in procs:
        assert p.wait(timeout=60) == 0
    rep = {(part, rank): json.loads((tmp_path / f"r{part}-{rank}.json").read_text()) for part in (0, 1) for rank in (0, 1)}
    for rank in (0, 1):
        ends = [rep[(part, rank)]["iterations"] for part in (0, 1)]
        assert [len(e) for e in ends] == [5, 5], ends
        for part in (0, 1):
            computed = rep[(part, rank)]["computed"]
            for k in range(4):  # iteration k+1's compute ended 100 ms (less timer slack) after both rails ended k
                assert computed[k + 1] >= max(ends[0][k], ends[1][k]) + 0.095, (rank, part, k, computed, ends)
    assert jobsmod.job_figures([jobsmod.across_rails({p: [rep[(p, 0)], rep[(p, 1)]] for p in (0, 1)})],
                               0.1)["iterations"] == 5


def test_join_reads_every_parts_count(tmp_path):
    from hpnlab.node.programs.jobrun import Join

    a, b = Join(str(tmp_path / "j"), 0, 2), Join(str(tmp_path / "j"), 1, 2)
    assert a.ready(0) and not a.ready(1)
    a.arrive(1)
    assert not a.ready(1) and not b.ready(1)
    b.arrive(1)
    assert a.ready(1) and b.ready(1) and not a.ready(2)
    with pytest.raises(SystemExit):
        Join(str(tmp_path / "j"), 2, 2)


def test_a_waiting_part_wakes_on_the_last_parts_message_not_a_timer(tmp_path):
    """The join is an event: a part waiting for the iteration selects on its socket, which stays silent
    until the other part ends the iteration, then is readable; the count comes in the message (the other
    part's file is gone here, and the wait still ends)."""
    import selectors

    from hpnlab.node.programs.jobrun import Join

    a, b = Join(str(tmp_path / "j"), 0, 2), Join(str(tmp_path / "j"), 1, 2)
    a.arrive(1)
    assert not a.ready(1)
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ)
    assert sel.select(timeout=0.05) == []  # nothing has happened: nothing wakes it
    b.arrive(1)
    (tmp_path / "j" / "1").unlink()
    assert [k.fileobj for k, _ in sel.select(timeout=5)] == [a]
    assert a.ready(1)


def test_a_part_started_late_reads_the_counts_sent_before_it_existed(tmp_path):
    from hpnlab.node.programs.jobrun import Join

    b = Join(str(tmp_path / "j"), 1, 2)
    b.arrive(3)  # part 0 has no socket yet: the message is lost, the file is not
    a = Join(str(tmp_path / "j"), 0, 2)
    a.arrive(3)
    assert a.ready(3) and not a.ready(4)
