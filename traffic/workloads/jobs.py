"""jobs: several training jobs at once, sharing the fabric, scheduled by a policy (Crux's, or none).

Each job is a collective over its own hosts (ranks) on its own rail and port: a ring all-reduce
(hpnlab.node.programs.allreduce) or an all-to-all (hpnlab.node.programs.alltoall), and each of its iterations begins with
``compute_ms`` of GPU work, emulated by waiting (--compute-ms); the rest of the iteration is its exposed
communication. Per job: iteration times, exposed communication, GPU utilisation (Crux's Definition 1: the compute done in the
measured window, from the job's first compute to the run's end, over the window: job_figures); for the cluster, the jobs' utilisations weighted by their ranks; and each job's GPU intensity as Crux defines it
(hpnlab.traffic.policies.arithmetic), from the path map the variant probes first and the links' capacities.

The policy (hpnlab.traffic.policies) decides each job's class (DSCP, queue) and each connection's source
port, so its path; the assignment is in every repetition's results. Policies that set classes need the
spec's switch QoS; ``fifo`` and ``crux-paths-only`` do not.

A job with ``rails`` runs as a rail-optimised host runs it: its collective on every listed rail at once,
each rail carrying size_kb / len(rails) over that rail's NICs, ports and source ports (the path map is
probed per rail, and the policy places each rail's connections on that rail's paths); its iteration k ends
when every rail's part of iteration k has ended, and iteration k+1 (its compute, then every rail's part)
begins only then. Each rail's part is its own rank process per host (the node programs of a single-rail
job, one ring or all-to-all per rail, as the ``allreduce`` workload's Multi-AllReduce runs its rings); a
rank's rail processes keep one compute phase by joining after every iteration (hpnlab.node.programs.jobrun.Join: each
writes how many iterations it has ended, and none begins the next compute until all have ended this one).
Why joined per-rail processes rather than one process per rank driving all its rails: the node programs
stay the ones every single-rail job runs (a job without ``rails`` runs exactly as before), and the join
keeps what one process would: a host computes once per iteration, then sends on all its rails, so its
iteration is the compute plus the slowest rail's part. Why not independent per-rail rings with the
figures taken as the max over rails (the ``allreduce`` workload's way, which has no compute to share): a
rail whose part ended first would start its next compute early, and the job's GPU utilisation would count
compute the host never did. The job's figures: iteration k's end is the last rail's end, its compute end
the last rail's compute end (the rails' compute ends differ by how soon each rail's process wakes to the join's message), its GPU
utilisation the host's compute in the measured window over the window (job_figures).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from hpnlab.errors import SpecError
from hpnlab.traffic.workloads.base import WorkloadKind, WorkloadParams, check_hosts, congestion_of, register

PORT_BASE = 17100  # job i listens on PORT_BASE + i
HASH_SEED_BASE = 1000  # repetition k's hash placement is seeded with this + k (prepare_repetition)
SPORT_BASE = 30000  # job i's source ports: SPORT_BASE + i * 256 + (0 .. pool-1)


class Job(BaseModel):
    """One training job of a ``jobs`` workload."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,24}$", description="the job's name in results.json")
    hosts: list[str] = Field(min_length=2, max_length=64, description="its ranks, one per host, in rank (ring) order")
    rail: int | None = Field(None, ge=0, description="the rail it uses (default: the workload's rail)")
    rails: list[int] | None = Field(None, min_length=1, max_length=8, description=(
        "several rails at once, instead of rail: its collective runs on every listed rail, each carrying "
        "size_kb / len(rails); an iteration ends when every rail's part of it has ended"))
    collective: Literal["allreduce", "alltoall"] = Field("allreduce", description=(
        "its collective: allreduce (a ring) or alltoall (every rank to every other, as a mixture-of-experts "
        "layer)"))
    size_kb: int = Field(1024, ge=1, le=1 << 20, description=(
        "each rank's buffer per iteration, KB: allreduce all-reduces it; alltoall sends size/ranks of it to "
        "every other rank"))
    compute_ms: float = Field(100.0, ge=0, le=60000, description=(
        "GPU work at the start of every iteration, ms (emulated by waiting)"))
    iterations: int | None = Field(None, ge=1, le=1_000_000, description=(
        "stop after this many iterations (default: run for the experiment's duration)"))
    connections: int = Field(2, ge=1, le=16, description=(
        "connections from each rank to the next (allreduce) or to every other rank (alltoall)"))
    k: float = Field(1.0, gt=0, le=1e6, description="Crux's correction factor: priority = k x intensity")

    @field_validator("rails")
    @classmethod
    def _rails(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if v is None:
            return v
        if info.data.get("rail") is not None:
            raise ValueError("give rail or rails, not both")
        if any(r < 0 for r in v):
            raise ValueError(f"a rail is a number from 0 (got {v})")
        if len(set(v)) != len(v):
            raise ValueError(f"a rail is listed twice ({v})")
        return v


class JobsParams(WorkloadParams):
    jobs: list[Job] = Field(min_length=1, max_length=8, description="the jobs (below)")
    policy: str = Field("fifo", description="the scheduling policy: fifo, crux, crux-priority-only, "
                        "crux-paths-only, reversed, or a published baseline: sincronia (bottleneck-ordered "
                        "priorities) or cassini (time shifts between the jobs' communication)")
    queues: int = Field(2, ge=1, le=8, description="K: the priority levels the policy compresses onto")
    pool: int = Field(16, ge=1, le=256, description="source ports probed per connection's host pair (path map)")

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        from hpnlab.traffic import policies

        if v not in policies.REGISTRY:
            raise ValueError(f"'{v}' is not a policy; choose one of {', '.join(policies.REGISTRY)}")
        return v


def rail_of(w, job: Job) -> int:
    return w.rail if job.rail is None else job.rail


def rails_of(w, job: Job) -> list[int]:
    """The rails the job runs on: its ``rails``, else its one rail."""
    return list(job.rails) if job.rails is not None else [rail_of(w, job)]


def row_rail(w, job: Job, row: dict) -> int:
    """A path-map row's rail (rows of a single-rail job carry none: the job's rail)."""
    return row.get("rail", rail_of(w, job))


def pairs_of(job: Job) -> list[tuple[str, str]]:
    """The connections' ends, rank by rank: a ring's (rank, next rank); an all-to-all's (rank, every other
    rank in rank order), the order its node program takes --sports in."""
    if job.collective == "alltoall":
        return [(h, p) for h in job.hosts for p in job.hosts if p != h]
    return [(h, job.hosts[(i + 1) % len(job.hosts)]) for i, h in enumerate(job.hosts)]


def size_per_rail(job: Job) -> int:
    """Each rank's buffer on one of its rails: size_kb / len(rails) (the whole buffer on one rail)."""
    return job.size_kb * 1024 // len(job.rails or [0])


def bytes_per_conn(job: Job) -> float:
    """What one connection carries per iteration: a ring rank's 2(n-1)/n of the buffer, or an all-to-all's
    1/n of it to one peer, split evenly over the connections (the buffer: its rail's share of it)."""
    import hpnlab.traffic.policies.arithmetic as crux

    if job.collective == "alltoall":
        return crux.alltoall_bytes_per_peer(size_per_rail(job), len(job.hosts)) / job.connections
    return crux.ring_bytes_per_rank(size_per_rail(job), len(job.hosts)) / job.connections


def local_rows(w, cfgs: dict, rows: list[dict]) -> list[dict]:
    """Path-map rows of pairs whose two hosts share their ToRs on the job's rail (an all-to-all's ranks in one
    segment, or such a ring): the first-hop ToR delivers to the other host's port itself, so the TTL 2 and 3
    probes reach the host, and no agg answers them. The ToR the probe's port led to is the path (agg None,
    the far ToR that ToR)."""
    job = {j.name: j for j in w.jobs}
    out = []
    for r in rows:
        if r["agg"] != "?" or r["tor"] == "?" or not r["port"] or r["job"] not in job:
            continue
        rail = row_rail(w, job[r["job"]], r)
        s, d = cfgs[r["src"]].nic(rail), cfgs[r["dst"]].nic(rail)
        if s and d and set(s.tors) == set(d.tors):
            out.append({**r, "agg": None, "dst_tor": r["tor"]})
    return out


def inputs(w, cfgs: dict, rows: list[dict], seed: int, spec=None):
    """A policy's inputs from the probed path map: candidates per connection, and the hash's pick (seeded,
    so every policy of a repetition meets the same hash placement). A job on several rails has its
    connections rail by rail (each rail's candidates that rail's probed rows), each carrying its rail's
    share, and the capacities are every used rail's: its t_j is over its most loaded link on any rail."""
    from hpnlab.traffic.run import balance
    import hpnlab.traffic.policies.arithmetic as crux
    from hpnlab.traffic.policies.base import Inputs, dscp_for_queue

    rng = random.Random(seed)
    job = {j.name: j for j in w.jobs}
    by = {}
    for r in balance.complete(rows) + local_rows(w, cfgs, rows):
        if r["job"] in job:
            by.setdefault((r["job"], row_rail(w, job[r["job"]], r), r["src"], r["dst"]), []).append(r)
    cap: dict = {}
    for rail in sorted({r for j in w.jobs for r in rails_of(w, j)}):
        cap.update(crux.capacities(cfgs, rail))
    cands, hashed, demands, bpc = {}, {}, [], {}
    for j in w.jobs:
        cands[j.name], hashed[j.name] = [], []
        for rail in rails_of(w, j):
            on = f" on rail {rail}" if j.rails is not None else ""
            for src, dst in pairs_of(j):
                c = sorted(by.get((j.name, rail, src, dst), []), key=lambda r: r["sport"])
                if len(c) < j.connections:
                    raise SpecError(f"job {j.name}: the path map has {len(c)} answered source ports from {src} to "
                                    f"{dst}{on}; need {j.connections}: probe a larger pool")
                cands[j.name] += [c] * j.connections
                hashed[j.name] += rng.sample(c, j.connections)
        demands.append(crux.Demand(j.name, j.compute_ms / 1000 * len(j.hosts), {}, j.k))
        bpc[j.name] = bytes_per_conn(j)
    qos = getattr(spec, "qos", None) if spec is not None else None
    dscps = [dscp_for_queue(qos, q) for q in range(w.queues)] if qos is not None else None
    return Inputs(demands, cap, cands, hashed, bpc, w.queues, rng, dscps,
                  {j.name: j.compute_ms / 1000 for j in w.jobs})


def _mmm(values: list[float]) -> dict | None:
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"n": len(v), "min": round(min(v), 4), "median": round(statistics.median(v), 4), "max": round(max(v), 4)}


def job_figures(reps: list[dict], compute_s: float, iterations: int | None = None, shift_s: float = 0.0) -> dict:
    """One job's figures from its ranks' reports: rank 0's iterations (a ring moves in lockstep, and an
    all-to-all rank's iteration ends only when every other rank's part has arrived) and the compute ends
    that began them.

    ``gpu_util`` is Crux's Definition 1, the GPU work done in a period T over T. T, the measured window,
    begins when the job's first compute began and ends at the run's end (the rank's ``until``: its start plus
    the duration), or at its last iteration's end when it ran the ``iterations`` it was asked for (it is done
    then; its GPUs are free). The work is every compute that ended in the window, plus the compute under way
    at the window's end counted as far as it got (it began when the last iteration ended). A job starved by
    the network so scores its compute over the whole run, not over the time until its last completed
    iteration. A report without ``until`` (written before the ranks recorded it) ends the window at its last
    recorded event, which is that older, flattering reading; ``window`` says which one was used. A job a
    policy started ``shift_s`` late (cassini's time shift) has its window begin that much earlier: at the
    run's start, its GPUs idle meanwhile."""
    r0 = min(reps, key=lambda r: r["rank"])
    ends, computed = r0["iterations"], r0.get("computed", [])
    n = min(len(ends), len(computed))
    base = {"ranks": r0["ranks"], "iterations": n, "compute_ms": round(compute_s * 1000, 3)}
    if not computed and (r0.get("start") is None or r0.get("until") is None):
        return {**base, "iterations": 0, "gpu_util": 0.0}  # nothing to measure a window by
    begin = (computed[0] - compute_s if computed else float(r0["start"])) - shift_s
    finished = iterations is not None and len(ends) >= iterations
    if finished:
        end, how = ends[iterations - 1], "to its last iteration's end (it ran its count)"
    elif r0.get("until") is not None:
        end, how = max([float(r0["until"]), *ends[-1:], *computed[-1:]]), "to the run's end"
    else:
        end, how = max([*ends[-1:], *computed[-1:]]), "to the last recorded event (no until)"
    done = sum(1 for c in computed if c <= end + 1e-9) * compute_s
    if not finished and len(computed) == len(ends):
        # the compute under way when the window closed, from the last iteration's end (or the start)
        done += min(compute_s, max(0.0, end - (ends[-1] if ends else begin + shift_s)))
    window = end - begin
    out = {**base, "gpu_util": round(min(1.0, done / window), 4) if window > 0 else 0.0,
           "window_s": round(window, 3), "window": how}
    if not n:
        return out
    begins = [begin + shift_s] + ends[: n - 1]
    iter_s = [e - b for b, e in zip(begins, ends[:n])]
    exposed = [e - c for c, e in zip(computed[:n], ends[:n])]
    return {**out,
            "iteration_ms": {k: round(v * 1000, 1) for k, v in (_mmm(iter_s) or {}).items() if k != "n"},
            "exposed_ms": {k: round(v * 1000, 1) for k, v in (_mmm(exposed) or {}).items() if k != "n"},
            "begin": begins[0], "ends": ends[:n]}


def _rank0(reps: list[dict]) -> dict:
    return min(reps, key=lambda r: r["rank"])


def across_rails(by_rail: dict[int, list[dict]]) -> dict:
    """A job on several rails as one rank-0 report, as its host sees it: iteration k ends when the last
    rail's part of it ends, and its compute ended when the last rail's ended (the rails' processes join
    between iterations, so these differ by how soon each wakes to the join's message); only iterations every rail completed count
    (a rail that reported nothing: none)."""
    r0s = [_rank0(v) if v else {"ranks": 0, "iterations": [], "computed": []} for v in by_rail.values()]
    ends = [max(ts) for ts in zip(*(r["iterations"] for r in r0s))]
    computed = [max(ts) for ts in zip(*(r.get("computed", []) for r in r0s))]
    untils = [r["until"] for r in r0s if r.get("until") is not None]
    return {"rank": 0, "ranks": max(r["ranks"] for r in r0s), "iterations": ends, "computed": computed,
            **({"until": max(untils)} if untils else {})}


def cluster_util(jobs: dict) -> float | None:
    """The jobs' GPU utilisations weighted by their ranks."""
    ranks = sum(j["ranks"] for j in jobs.values())
    return round(sum(j["gpu_util"] * j["ranks"] for j in jobs.values()) / ranks, 4) if ranks else None


@register
class Jobs(WorkloadKind):
    kind = "jobs"
    help = ("several jobs (ring all-reduce, all-to-all) with compute phases at once, scheduled by a policy (Crux, fifo, "
            "Sincronia, CASSINI)")
    doc = ("Each job names its hosts (ranks), rail, collective, message size, compute time per iteration and "
           "connections; the policy gives each job its class and each connection its path. Figures per job: "
           "iteration times, exposed communication, GPU utilisation, GPU intensity; for the cluster: "
           "utilisation weighted by ranks.")
    Params = JobsParams
    own_report = True

    def check(self, w, spec, cfgs, where):
        from hpnlab.traffic import policies

        names = [j.name for j in w.jobs]
        if len(set(names)) != len(names):
            raise SpecError(f"{where} workload.jobs: job names must be unique (got {', '.join(names)})")
        lab_rails = sorted({c.rail for c in cfgs.values() if c.role == "tor"})
        for i, j in enumerate(w.jobs):
            for r in j.rails or []:
                if r not in lab_rails:
                    raise SpecError(f"{where} workload.jobs.{i}.rails: rail {r} is not a rail of this lab "
                                    f"(rails {', '.join(map(str, lab_rails))})")
            for r in rails_of(w, j):  # every rank needs a NIC on every rail the job runs on
                check_hosts(f"{where} workload.jobs.{i}.hosts", list(j.hosts), cfgs, r)
            if len(set(j.hosts)) != len(j.hosts):
                raise SpecError(f"{where} workload.jobs.{i}.hosts: a host appears twice; one rank per host")
            if w.pool < j.connections:
                raise SpecError(f"{where} workload.pool: probe at least jobs.{i}.connections ({j.connections}) "
                                f"source ports per pair")
        pol = policies.get(w.policy)
        qos = getattr(spec, "qos", None)
        if pol.uses_queues and not getattr(qos, "queues", None):
            raise SpecError(f"{where} workload.policy: '{w.policy}' sets priorities, so the switches need queues; "
                            f"give the spec a qos with queues >= workload.queues ({w.queues})")
        if pol.uses_queues and qos.queues < w.queues:
            raise SpecError(f"{where} workload.queues: {w.queues} levels, but the spec's qos has {qos.queues} queues")
        if pol.uses_queues:
            from hpnlab.traffic.policies.base import dscp_for_queue

            for q in range(w.queues):
                if dscp_for_queue(qos, q) is None:
                    raise SpecError(f"{where} workload.queues: the spec's qos.dscp maps no DSCP to queue {q}; "
                                    f"map one per level, e.g. qos: {{dscp: {{cs7: 0, cs6: 1}}}}")

    def prepare_variant(self, lab, plan, raw, progress):
        """The path map of every job's connections (each rank to the next, the job's port), probed once."""
        from hpnlab.traffic.run import balance
        from hpnlab.traffic.run.nodetools import path_map

        w = plan.workload
        progress(f"{plan.name}: probing the jobs' path map ({w.pool} source ports per connection's host pair)")
        rows = []
        for i, j in enumerate(w.jobs):
            sports = list(range(SPORT_BASE + 256 * i, SPORT_BASE + 256 * i + w.pool))
            dsts: dict[str, list[str]] = {}
            for src, dst in pairs_of(j):
                dsts.setdefault(src, []).append(dst)
            for rail in rails_of(w, j):  # a job on several rails: each rail's paths, probed on it
                tag = {"rail": rail} if j.rails is not None else {}
                for src, ds in dsts.items():  # one probing run per source host (an all-to-all rank has n-1 peers)
                    for r in path_map(lab.runtime, lab.cfgs, src, ds, rail, sports, PORT_BASE + i, "tcp"):
                        rows.append({**r, "job": j.name, **tag})
        raw.mkdir(parents=True, exist_ok=True)
        (raw / "pathmap.json").write_text(json.dumps(rows))
        answered = len(balance.complete(rows)) + len(local_rows(w, lab.cfgs, rows))
        progress(f"{plan.name}: {answered}/{len(rows)} probes answered")
        return {"policy": w.policy, "queues": w.queues}

    def prepare_repetition(self, plan, raw, run_dir, k):
        """Repetition k's assignment: the hash placement seeded by k, then the policy."""
        from hpnlab.traffic import policies

        rows = json.loads((raw / "pathmap.json").read_text())
        w = plan.workload
        plan.assignment = policies.get(w.policy).assign(inputs(w, plan.cfgs, rows, HASH_SEED_BASE + k, plan.spec))
        for j in w.jobs:
            if j.rails is not None and j.name in plan.assignment["jobs"]:
                # its sports and paths are rail by rail, in this order (then rank by rank within a rail)
                plan.assignment["jobs"][j.name]["rails"] = list(j.rails)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "assignment.json").write_text(json.dumps(plan.assignment))

    def launch(self, plan, run_dir, t0, duration):
        w = plan.workload
        asg = plan.assignment["jobs"]
        procs = []
        for i, j in enumerate(w.jobs):
            a = asg[j.name]
            per_rank = j.connections * (len(j.hosts) - 1 if j.collective == "alltoall" else 1)
            # a policy's time shift (cassini) starts the job that much later; it still ends with the run
            shift = min(float(a.get("offset_s") or 0.0), max(0.0, duration - 1.0))
            # several rails: each rail's part its own rank process per host, on that rail's addresses (so the
            # job's one port serves every rail), its own slice of the sports and its own report file
            for ri, rail in enumerate(rails_of(w, j)):
                addrs = ",".join(plan.host_ip(h, rail) for h in j.hosts)
                for rank, h in enumerate(j.hosts):
                    first = (ri * len(j.hosts) + rank) * per_rank
                    sports = a["sports"][first:first + per_rank]
                    out = str(run_dir / (f"job-{j.name}-r{rail}-{rank}.json" if j.rails is not None
                                         else f"job-{j.name}-{rank}.json"))
                    # a rank's rail processes share one compute phase: each iteration begins when all have ended
                    join = (["--join", str(run_dir / f"join-{j.name}-{rank}"), "--join-part", str(ri),
                             "--join-parts", str(len(j.rails))] if j.rails is not None else [])
                    how = (["hpnlab.node.programs.alltoall"] if j.collective == "alltoall" else
                           ["hpnlab.node.programs.allreduce", "--select", "least-loaded" if j.connections > 1 else "one"])
                    procs.append({"role": "job", "node": h, "out": out,
                                  "argv": [sys.executable, "-m", how[0], "--rank", str(rank),
                                           "--addrs", addrs, "--port", str(PORT_BASE + i),
                                           "--size", str(size_per_rail(j)), "--conns", str(j.connections), *how[1:],
                                           "--compute-ms", f"{j.compute_ms:g}", "--sports", ",".join(map(str, sports)),
                                           "--duration", f"{duration - shift:g}", "--start-at", f"{t0 + shift:.3f}",
                                           "--congestion", w.congestion, "--out", out]
                                  + (["--dscp", str(a["dscp"])] if a["dscp"] is not None else [])
                                  + (["--iterations", str(j.iterations)] if j.iterations else []) + join})
        return procs

    def done(self, procs):
        """Every job ran its iterations (jobs without a count run for the duration)."""
        jobs = [p for spec, p in procs if spec["role"] == "job"]
        return bool(jobs) and all(p.poll() is not None for p in jobs)

    def result(self, plan, run_dir):
        w = plan.workload
        per = {}
        asg = getattr(plan, "assignment", None) or json.loads((run_dir / "assignment.json").read_text())
        shift = {n: float(a.get("offset_s") or 0.0) for n, a in asg["jobs"].items()}
        reports = []
        for j in w.jobs:
            if j.rails is not None:
                by_rail = {r: [json.loads(p.read_text()) for p in sorted(run_dir.glob(f"job-{j.name}-r{r}-*.json"))]
                           for r in j.rails}
                reps = [x for v in by_rail.values() for x in v]
                if not reps:
                    continue
                reports += reps
                per[j.name] = {"collective": j.collective,
                               **job_figures([across_rails(by_rail)], j.compute_ms / 1000, j.iterations,
                                            shift.get(j.name, 0.0)),
                               "rails": {str(r): len(_rank0(v)["iterations"]) if v else 0 for r, v in by_rail.items()}}
                continue
            reps = [json.loads(p.read_text()) for p in sorted(run_dir.glob(f"job-{j.name}-*.json"))]
            if not reps:
                continue
            reports += reps
            per[j.name] = {"collective": j.collective,
                           **job_figures(reps, j.compute_ms / 1000, j.iterations, shift.get(j.name, 0.0))}
        if not per:
            return None
        start = min(f["begin"] for f in per.values() if "begin" in f) if any("begin" in f for f in per.values()) else 0
        for f in per.values():  # times since the first job's first iteration began: the timeline plot's axis
            if "begin" in f:
                f["ends_s"] = [round(t - start, 3) for t in f.pop("ends")]
                f.pop("begin")
        for name, a in asg["jobs"].items():
            if name in per:
                per[name].update({k: a[k] for k in ("intensity", "priority", "level", "queue", "dscp")})
                if "offset_s" in a:
                    per[name]["offset_s"] = a["offset_s"]
        return {"kind": "jobs", "policy": w.policy, "jobs": per, "cluster_gpu_util": cluster_util(per),
                "assignment": asg, "congestion": congestion_of(reports)}

    def aggregate(self, runs):
        ws = [r["workload"] for r in runs if r.get("workload")]
        if not ws:
            return {}
        names = list(ws[0]["jobs"])
        jobs = {}
        for n in names:
            got = [w["jobs"][n] for w in ws if n in w["jobs"]]
            jobs[n] = {"collective": got[0].get("collective"), "ranks": got[0]["ranks"],
                       "compute_ms": next((g["compute_ms"] for g in got if "compute_ms" in g), None),
                       "gpu_util": _mmm([g["gpu_util"] for g in got]),
                       "iterations": _mmm([g["iterations"] for g in got]),
                       "iteration_ms": _mmm([g.get("iteration_ms", {}).get("median") for g in got]),
                       "exposed_ms": _mmm([g.get("exposed_ms", {}).get("median") for g in got]),
                       "intensity": _mmm([g.get("intensity") for g in got]),
                       "level": got[0].get("level"), "dscp": got[0].get("dscp")}
        return {"jobs": {"policy": ws[0]["policy"], "per_job": jobs,
                         "cluster_gpu_util": _mmm([w["cluster_gpu_util"] for w in ws])}}

    def across_variants(self, results):
        return paired(results)

    legend = {
        "VARIANT / policy P": "a block: the variant's figures, P the policy it scheduled its jobs by",
        "cluster": "a column: every job together, each weighted by its ranks",
        "JOB": "a column: one job of the variant (by its name in the experiment file)",
        "GPU util": "compute done in the window / the window (1: the GPUs never waited on the network)",
        "ranks": "the job's ranks (one per host)",
        "compute ms": "the job's compute per iteration, as the experiment file sets it",
        "iteration ms": "one iteration's time, compute and the communication it waited for (run's median)",
        "exposed comm ms": "the part of an iteration spent waiting for the network (run's median)",
        "intensity": "the job's GPU intensity: its compute per iteration over its network time",
        "level": "the priority level the policy gave the job (0 is served first; - : unmarked)",
        "dscp": "the DSCP code point its packets carried (- : unmarked)",
        "A - B (policy)": "crux variant A minus variant B, cluster GPU util per hash seed, and the gain in %",
    }
    legend_page = "docs/crux.md"
    FIGURES = ("GPU util", "ranks", "compute ms", "iteration ms", "exposed comm ms", "intensity", "level", "dscp")

    def summary_table(self, results):
        """A block per variant (the figures down, the cluster and each job across), then the paired
        differences; each figure is min/median/max over the repetitions."""
        from hpnlab.traffic.output import textlayout

        head = [f"experiment {results['experiment']}: GPU utilisation (compute done in the window / the window), "
                f"min/median/max over {results['repetitions']} repetition(s); cluster = weighted by ranks; a job's "
                f"iteration, exposed comm and intensity are each run's median"]
        out: list[str] = []
        for name, v in results["variants"].items():
            j = v.get("jobs")
            if not j:
                out += ["", f"{name} / policy -: {v.get('error', 'no runs')}"]
                continue
            cols = [("cluster", {"GPU util": _fmt(j["cluster_gpu_util"])})]
            for n in _job_names(results):
                f = j["per_job"].get(n)
                if f is None:
                    continue
                cols.append((n, {"GPU util": _fmt(f.get("gpu_util")), "ranks": str(f["ranks"]),
                                 "compute ms": _opt(f["compute_ms"]), "iteration ms": _fmt(f["iteration_ms"]),
                                 "exposed comm ms": _fmt(f["exposed_ms"]), "intensity": _fmt(f["intensity"]),
                                 "level": _opt(f["level"]), "dscp": _opt(f["dscp"])}))
            out += ["", f"{name} / policy {j['policy']}"] + textlayout.block(cols, list(self.FIGURES))
        pairs = [f"{cname} - {bname} ({p['policy']}), paired by hash seed over {p['n']}: cluster GPU util "
                 f"{_fmt(p['diff_mmm'])}, gain {_fmt(p['gain_pct_mmm'])} % (min/median/max)"
                 for cname, against in (results.get("paired") or paired(results).get("paired") or {}).items()
                 for bname, p in against.items()]
        if pairs:
            out += ["", "paired differences (A - B (policy)):"] + pairs
        return "\n".join(textlayout.wrap(head + out))

    def plot(self, results, path):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        vs = [(n, v) for n, v in results["variants"].items() if v.get("jobs")]
        if not vs:
            return None
        fig, axes = plt.subplots(1 + len(vs), 1, figsize=(12, 3 + 2.2 * len(vs)), squeeze=False)
        ax = axes[0][0]
        names = sorted({n for _v, x in vs for n in x["jobs"]["per_job"]}) + ["cluster"]
        width = 0.8 / len(vs)
        for i, (vname, v) in enumerate(vs):
            pj = v["jobs"]["per_job"]
            vals = [(pj[n]["gpu_util"] if n in pj else None) for n in names[:-1]] + [v["jobs"]["cluster_gpu_util"]]
            xs = [k + i * width for k in range(len(names))]
            med = [d["median"] if d else 0 for d in vals]
            err = [[(d["median"] - d["min"]) if d else 0 for d in vals], [(d["max"] - d["median"]) if d else 0 for d in vals]]
            ax.bar(xs, med, width, yerr=err, capsize=2, label=vname)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names)
        ax.set_ylabel("GPU utilisation")
        ax.set_title(f"{results['experiment']}: GPU utilisation per job and cluster (median, min-max bars)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not over them
        for i, (vname, v) in enumerate(vs):
            ax = axes[i + 1][0]
            run = next((r for r in v.get("runs", []) if r.get("workload")), None)
            if run is None:
                continue
            for n, f in sorted(run["workload"]["jobs"].items()):
                ends = f.get("ends_s") or []
                ax.plot(ends[1:], [1000 * (b - a) for a, b in zip(ends, ends[1:])], marker=".", lw=1, label=n)
            ax.set_ylabel("iteration ms")
            ax.set_title(f"{vname}: iteration times, repetition 1", fontsize=9)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes[-1][0].set_xlabel("s since the first job began")
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path

    def raw_needed(self, raw):
        return [raw / "pathmap.json"]


def paired(results: dict) -> dict:
    """Crux against every other policy, repetition by repetition. Repetition k of every variant meets the
    same hash placement (seed HASH_SEED_BASE + k), so the pairs are by hash seed. Variants compare when they
    run the same jobs (by name); for each crux variant and each other variant of its jobs: per seed, the
    cluster GPU utilisations' difference (crux minus the other) and relative gain (%), and their
    min/median/max. Seeds where either side has no finished repetition are left out (``n`` says how many
    pairs there are)."""
    def util(v: dict) -> list[float | None]:
        return [(r.get("workload") or {}).get("cluster_gpu_util") for r in v.get("runs", [])]

    groups: dict[tuple, list[tuple[str, str, dict]]] = {}
    for name, v in results.get("variants", {}).items():
        j = v.get("jobs")
        if j:
            groups.setdefault(tuple(sorted(j["per_job"])), []).append((name, j["policy"], v))
    out: dict = {}
    for members in groups.values():
        for cname, cpol, cv in members:
            if cpol != "crux":
                continue
            against = {}
            for bname, bpol, bv in members:
                if bpol == "crux":
                    continue
                pairs = [(k, a, b) for k, (a, b) in enumerate(zip(util(cv), util(bv))) if a is not None and b is not None]
                diff = [round(a - b, 4) for _k, a, b in pairs]
                gain = [round(100 * (a - b) / b, 1) if b > 0 else None for _k, a, b in pairs]
                against[bname] = {"policy": bpol, "seeds": [HASH_SEED_BASE + k for k, _a, _b in pairs],
                                  "diff": diff, "gain_pct": gain, "n": len(pairs),
                                  "diff_mmm": _mmm(diff), "gain_pct_mmm": _mmm(gain)}
            if against:
                out[cname] = against
    return {"paired": out} if out else {}


def _job_names(results: dict) -> list[str]:
    out: list[str] = []
    for v in results["variants"].values():
        for n in ((v.get("jobs") or {}).get("per_job") or {}):
            if n not in out:
                out.append(n)
    return out


def _opt(x) -> str:
    """A figure that may be unset (None: '-')."""
    return "-" if x is None else str(x)


def _fmt(d: dict | None) -> str:
    if not d:
        return "-"
    return f"{d['min']:g}/{d['median']:g}/{d['max']:g}"
