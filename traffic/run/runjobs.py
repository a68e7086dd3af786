"""Several training jobs at once on a running lab, from Python: ``Lab.run_jobs`` (hpnlab.api) calls ``run``.

The jobs, the policy and their keys are the experiment file's ``jobs`` workload (hpnlab.traffic.workloads.jobs),
checked the same way and refused in the same one line naming the key; the run goes through that workload's
own hooks, the ones ``hpnlab run`` calls: the path map probed once, the policy's assignment, the ranks'
command lines, their reports read into per-job and cluster figures. What an experiment adds around them
(probes, a fault timeline, TCP counters, the lateness meter, repetitions) stays the runner's.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from hpnlab.machine import kernel
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.machine.proc import kill_pids
from hpnlab.machine.signals import shielded
from hpnlab.traffic import workloads
from hpnlab.traffic.workloads.base import CONGESTION_DEFAULT, START_SLACK

WHERE = "Lab.run_jobs"
MAX_DURATION_S = 3600.0
EXIT_GRACE_S = 20.0  # after the duration, the ranks' time to finish their iteration and write their reports


@dataclass
class JobFigures:
    """One job's figures, defined as results.json's ``runs.N.workload.jobs.NAME`` (docs/crux.md)."""

    name: str
    collective: str
    ranks: int
    iterations: int  # completed
    compute_ms: float  # per iteration
    gpu_util: float  # iterations x compute over the wall time from its first iteration's start to its last's end
    iteration_ms: dict[str, float] = field(default_factory=dict)  # {min, median, max}; {} when none completed
    exposed_ms: dict[str, float] = field(default_factory=dict)  # the iteration's time after its compute
    intensity: float | None = None  # Crux's I_j on its hash placement (None: its traffic met no shaped link)
    priority: float | None = None  # k_j x I_j
    level: int | None = None  # its priority level, 0 the highest (None: the policy sets no classes)
    queue: int | None = None
    dscp: int | None = None  # what its ranks marked at both ends (None: unmarked)
    sports: list[int] = field(default_factory=list)  # one source port per connection, rank by rank
    paths: list[str] = field(default_factory=list)  # each connection's probed path, host>tor>agg>tor>host
    ends_s: list[float] = field(default_factory=list)  # its iterations' ends, s since the first job began
    rails: dict[str, int] = field(default_factory=dict)  # a job on several rails: iterations per rail ({} on one)


@dataclass
class JobsResult:
    """What ``Lab.run_jobs`` measured: per job, the cluster's utilisation weighted by ranks, the assignment."""

    policy: str
    jobs: dict[str, JobFigures]
    cluster_gpu_util: float | None
    assignment: dict[str, Any]  # the policy's, as results.json's ``assignment`` (and ``compression`` where it cut)
    congestion: str | None  # the TCP congestion control the ranks' sockets ran
    report_dir: Path

    def to_dict(self) -> dict:
        return {"policy": self.policy, "jobs": {n: asdict(j) for n, j in self.jobs.items()},
                "cluster_gpu_util": self.cluster_gpu_util, "assignment": self.assignment,
                "congestion": self.congestion, "report_dir": str(self.report_dir)}


def lab_qos(cfgs: dict) -> SimpleNamespace | None:
    """The spec's qos as the switches' node.json have it (every switch with queues has the same), shaped as
    the policies read it (queues, dscp, default_queue); None on a lab without switch queues."""
    q = next((c.qos for c in cfgs.values() if c.role != "host" and getattr(c, "qos", None)), None)
    if not q:
        return None
    return SimpleNamespace(queues=q["queues"], dscp={int(k): v for k, v in q["dscp"].items()},
                           default_queue=q["default_queue"], scheduler=q.get("scheduler"))


def params(jobs: list, policy: str, queues: int, pool: int, rail: int, congestion: str):
    """The arguments as the ``jobs`` workload's parameters: the experiment file's one-line errors."""
    if not isinstance(jobs, (list, tuple)):
        raise SpecError(f"{WHERE}: experiment field 'workload.jobs': give a list of jobs (dicts or Job)")
    data = {"kind": "jobs", "policy": policy, "queues": queues, "pool": pool, "rail": rail,
            "congestion": congestion,
            "jobs": [j.model_dump() if hasattr(j, "model_dump") else j for j in jobs]}
    return workloads.get("jobs").parse(data, WHERE)


def check_duration(duration_s: Any) -> float:
    if isinstance(duration_s, bool) or not isinstance(duration_s, (int, float)) \
            or not 0 < duration_s <= MAX_DURATION_S:
        raise SpecError(f"{WHERE}: duration_s: give seconds in (0, {MAX_DURATION_S:g}] (got {duration_s!r})")
    return float(duration_s)


def figures(res: dict, run_dir: Path) -> JobsResult:
    """The workload's repetition report (``Jobs.result``) as typed figures (pure)."""
    asg = res["assignment"]["jobs"]
    per = {}
    for name, f in res["jobs"].items():
        a = asg.get(name, {})
        per[name] = JobFigures(name=name, collective=f.get("collective") or "allreduce", ranks=f["ranks"],
                               iterations=f["iterations"], compute_ms=f["compute_ms"], gpu_util=f["gpu_util"],
                               iteration_ms=dict(f.get("iteration_ms") or {}),
                               exposed_ms=dict(f.get("exposed_ms") or {}),
                               intensity=f.get("intensity"), priority=f.get("priority"), level=f.get("level"),
                               queue=f.get("queue"), dscp=f.get("dscp"), sports=list(a.get("sports", [])),
                               paths=list(a.get("paths", [])), ends_s=list(f.get("ends_s") or []),
                               rails=dict(f.get("rails") or {}))
    return JobsResult(policy=res["policy"], jobs=per, cluster_gpu_util=res["cluster_gpu_util"],
                      assignment=res["assignment"], congestion=res.get("congestion"), report_dir=run_dir)


def run(lab: Any, jobs: list, policy: str = "fifo", duration_s: float = 30.0, queues: int = 2, pool: int = 16,
        rail: int = 0, congestion: str = CONGESTION_DEFAULT, seed: int = 0,
        progress: Callable[[str], None] | None = None) -> JobsResult:
    """Run ``jobs`` at once on ``lab`` until each has done its ``iterations`` (jobs without a count: for
    ``duration_s``), scheduled by ``policy``; everything checked before anything runs. ``seed`` picks the
    switches' hash placement the policy starts from (the runner's repetition k uses 1000 + k). ``lab`` is
    an ``hpnlab.Lab`` (not imported here: the API imports this module)."""
    from hpnlab.traffic.run.experiment import Plan

    progress = progress or (lambda _m: None)
    duration = check_duration(duration_s)
    w = params(jobs, policy, queues, pool, rail, congestion)
    kind = workloads.get("jobs")
    spec = SimpleNamespace(qos=lab_qos(lab.cfgs))  # what the workload's checks and policies read of a spec
    kind.check(w, spec, lab.cfgs, f"{WHERE}:")  # its lines read "<where> workload.KEY: ..."
    if lab.runtime.shares_kernel:
        refusal = kernel.congestion_refusal(w.congestion, *kernel.congestion_controls())
        if refusal:
            raise SpecError(f"{WHERE}: {refusal}")
    lab._njobs += 1
    raw = lab.workdir / f"jobs-{lab._njobs}"
    run_dir = raw / "run"
    plan = Plan("jobs", "", spec, {}, lab.cfgs, [], w, [])
    kind.prepare_variant(lab, plan, raw, progress)
    kind.prepare_repetition(plan, raw, run_dir, seed)
    t0 = time.time() + START_SLACK
    specs = kind.launch(plan, run_dir, t0, duration)
    procs: list[tuple[dict, subprocess.Popen]] = []
    try:
        for s in specs:
            procs.append((s, lab.spawn(s["node"], s["argv"], run_dir / "processes.log")))
        progress(f"{len(w.jobs)} jobs, {len(procs)} ranks: running until their iterations are done or "
                 f"{duration:g} s")
        deadline = t0 + duration + EXIT_GRACE_S
        while True:
            # a failed rank ends the run at once; after the last exit too, which done() may see first
            finished = kind.done(procs)
            for s, p in procs:
                if p.poll() not in (None, 0):
                    raise RuntimeFailure(f"{WHERE}: rank on {s['node']} exited {p.returncode}; "
                                         f"see {run_dir / 'processes.log'}")
            if finished:
                break
            if time.time() > deadline:
                raise RuntimeFailure(f"{WHERE}: ranks still running {EXIT_GRACE_S:g} s after the duration; "
                                     f"see {run_dir / 'processes.log'}")
            time.sleep(0.05)
    finally:
        with shielded("stopping the jobs' ranks"):
            ours = {p.pid: (lambda c: True) for _s, p in procs if p.poll() is None}
            if ours:
                kill_pids(ours, timeout=3)
    res = kind.result(plan, run_dir)
    if res is None:
        raise RuntimeFailure(f"{WHERE}: no rank wrote a report; see {run_dir / 'processes.log'}")
    out = figures(res, run_dir)
    (run_dir / "result.json").write_text(json.dumps(out.to_dict(), indent=1))
    return out
