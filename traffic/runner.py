"""Runs an experiment as a client of ``hpnlab.Lab``: per variant ``Lab.up``, per repetition start the
route watchers, receivers, the workload and senders on a common start time (``lab.spawn``), play the
fault timeline through ``lab.apply_fault`` / ``lab.revert_fault`` (every fault reverted, also on Ctrl-C
or error), collect the reports and wait until the lab is healthy again; finally ``lab.down()``.

Everything runs in the lab's own namespaces through the runtime interface, so the same code drives every
runtime.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from hpnlab import runtime as runtimes
from hpnlab.model import dilation
from hpnlab.machine import kernel
from hpnlab.instrument import lateness, provenance
from hpnlab.api import Lab, Unhealthy
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.machine.proc import kill_pids
from hpnlab.machine.progress import Progress, as_progress
from hpnlab.machine.signals import shielded
from hpnlab.traffic import faults as faultmod
from hpnlab.traffic import workloads
from hpnlab.traffic.run import graywatch, nodebytes, routemon
from hpnlab.traffic.analysis import grayfigures, measure, reorder, slip, timeline
from hpnlab.traffic.output import htmlreport, outputs, report
from hpnlab.traffic.run.experiment import Experiment, Plan
from hpnlab.traffic.run.live import Publisher
from hpnlab.traffic.output.summarytext import own_kind, summary, workload_of  # noqa: F401  (runner.summary, as before)
from hpnlab.traffic.workloads import probe
from hpnlab.traffic.workloads.base import START_SLACK  # t0 is this long after the processes are launched


def launch_plan(plan: Plan, run_dir: Path, t0: float, duration: float) -> list[dict]:
    """Every process of one repetition as {node, argv, out, role} (pure: unit-tested without root)."""
    procs = []
    for i, pr in enumerate(plan.probes):
        rx_out, tx_out = str(run_dir / f"probe-{i}.rx.json"), str(run_dir / f"probe-{i}.tx.json")
        rx, tx = probe.argv(i, plan.host_ip(pr.src, pr.rail), plan.host_ip(pr.dst, pr.rail), pr.flows, pr.rate,
                            pr.size, duration, t0, rx_out, tx_out)
        procs.append({"role": "receiver", "probe": pr.name, "node": pr.dst, "out": rx_out, "argv": rx})
        procs.append({"role": "sender", "probe": pr.name, "node": pr.src, "out": tx_out, "argv": tx})
    procs += workloads.get(plan.workload.kind).launch(plan, run_dir, t0, duration)
    return procs


class Repetition:
    """One run of one variant on a running lab: processes, monitors and faults, all cleaned up."""

    def __init__(self, lab: Lab, plan: Plan, run_dir: Path, duration: float, progress: Progress, label: str,
                 watch: graywatch.Watch | None = None):
        self.lab, self.plan, self.dir, self.duration, self.progress, self.label = \
            lab, plan, run_dir, duration, progress, label
        self.watch = watch  # the variant's prober (and isolator): this repetition's share is prober.json
        self.procs: list[tuple[dict, subprocess.Popen]] = []
        self.monitors: list[tuple[str, subprocess.Popen]] = []  # the route watcher (and ip monitor on c9s)
        self.timeline: list[dict] = []
        self.counters: nodebytes.Reader | None = None  # the failed router's peers' bytes (nodebytes.json)

    def _spawn(self, spec: dict) -> None:
        out = Path(spec["out"]) if spec.get("stdout_report") else None  # else the program writes --out itself
        self.procs.append((spec, self.lab.spawn(spec["node"], spec["argv"], self.dir / "processes.log", out)))

    def run(self) -> dict:
        """The repetition, with the lateness meter on: CPU pressure sampled throughout (cpu.json), the
        agents' late timers and their events read at the end (timers.json, agent-events.json, for the
        timeline); the senders report their own."""
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            logs = self.lab.log_files()
            frr_from = slip.frr_offsets(logs)  # the slip guard counts FRR's warnings logged from here on
            with lateness.CpuSampler(tasks=self.lab.meter_tasks()) as cpu:
                rep = self._run()
            # the lab as the traffic left it: what the workload reads of it (per-flow paths, FIB weights)
            workloads.get(self.plan.workload.kind).after_repetition(self.lab, self.plan, self.dir)
            if self.lab.runtime.shares_kernel:  # else this machine's CPU is not the one the lab runs on
                cpu.save(self.dir / "cpu.json")
            timers, events, gaps = self.lab.agent_records()
            (self.dir / "timers.json").write_text(json.dumps(timers))
            (self.dir / "gaps.json").write_text(json.dumps(gaps))
            (self.dir / "frr-warnings.json").write_text(json.dumps(slip.frr_warnings(logs, frr_from)))
            # multipath spray modes: each ToR's keeper (its reaction to routes, dlb's period and rewrites)
            keepers = {n: st["spray"] for n in self.lab.routers if self.lab.role(n) == "tor"
                       for st in [self.lab.runtime.read_status(n)] if st and st.get("spray")}
            if keepers:
                (self.dir / "spray.json").write_text(json.dumps(keepers))
            (self.dir / "agent-events.json").write_text(json.dumps(events))
            return rep
        finally:
            self.cleanup()

    def _run(self) -> dict:
        self.monitors = routemon.watch(self.lab.runtime, self.lab.routers, self.dir)
        self.lab.spare({p.pid for _n, p in self.monitors})
        # every host's TCP counters before and after: the run's retransmissions and reordering (read before
        # t0 is set, so the reads never eat into the processes' start slack)
        tcp_before = reorder.read_hosts(self.lab.runtime, self.lab.hosts)
        if self.watch is not None:
            self.watch.begin()
        t0 = time.time() + START_SLACK + workloads.get(self.plan.workload.kind).lead(self.plan.workload)
        plan = launch_plan(self.plan, self.dir, t0, self.duration)
        live = Publisher(self.lab.runtime.state.dir, self.dir, self.plan.name, self.label, t0, self.duration,
                         [{"name": p.name, "pps": p.flows * p.rate} for p in self.plan.probes], plan, self.timeline)
        moments, nodes = nodebytes.plan_moments(self.plan.faults, self.plan.cfgs, t0, self.duration)
        if moments:
            self.counters = nodebytes.Reader(self.lab.runtime, moments, nodes).start()
        delayed = []
        for spec in plan:
            if spec.get("delay"):
                delayed.append(spec)
                continue
            self._spawn(spec)
            time.sleep(spec.get("settle", 0))
        pending = sorted(self.plan.faults, key=lambda f: f.at)
        active: list[faultmod.Fault] = []
        end = t0 + self.duration
        while True:
            now = time.time()
            for spec in list(delayed):
                if now >= t0:
                    self._spawn(spec)
                    delayed.remove(spec)
            while pending and now >= t0 + pending[0].at:
                f = pending.pop(0)
                self.timeline.append(self.lab.apply_fault(f))
                active.append(f)
            for f in list(active):
                if f.until is not None and now >= t0 + f.until:
                    self.lab.revert_fault(f)
                    active.remove(f)
                    if self.watch is not None:
                        self.watch.repaired(f)
            if now >= end or (not pending and not active and workloads.get(self.plan.workload.kind).done(self.procs)):
                break
            live.tick()  # the live view's line, once a second (hpnlab.traffic.run.live)
            note = ", ".join(f.label for f in active) or "no fault active"
            self.progress.bar(self.label, max(0.0, now - t0), self.duration, note)
            self._check_procs()
            time.sleep(0.005)
        if self.watch is not None:  # its isolations back in service, before the runner's own faults go
            self.watch.end(self.dir)
        self.lab.revert_faults()  # faults that last to the end of the run
        live.close()
        self.progress.end_bar()
        deadline = time.monotonic() + 20
        for spec, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeFailure(f"{spec['role']} on {spec['node']} did not finish; see {self.dir / 'processes.log'}")
        for spec, p in self.procs:
            if p.returncode != 0 and not spec.get("may_fail"):
                raise RuntimeFailure(f"{spec['role']} on {spec['node']} exited {p.returncode}; "
                                     f"see {self.dir / 'processes.log'}")
        time.sleep(0.3)  # let the route monitors print the repair
        (self.dir / "tcpstats.json").write_text(json.dumps(
            {"before": tcp_before, "after": reorder.read_hosts(self.lab.runtime, self.lab.hosts)}))
        if self.counters is not None:
            (self.dir / "nodebytes.json").write_text(json.dumps(self.counters.stop()))
        return {"t0": t0, "duration": self.duration, "timeline": self.timeline, "procs": plan}

    def _check_procs(self) -> None:
        for spec, p in self.procs:
            if p.poll() not in (None, 0) and not spec.get("may_fail"):
                raise RuntimeFailure(f"{spec['role']} on {spec['node']} exited {p.returncode} early; "
                                     f"see {self.dir / 'processes.log'}")

    def cleanup(self) -> None:
        with shielded("reverting the faults and stopping the traffic"):
            if self.watch is not None:  # a failed repetition's isolations back (after _run's end(): nothing left)
                self.watch.end(self.dir)
            self.lab.revert_faults()
            if self.counters is not None:
                self.counters.stop()
            self.progress.end_bar()
            ours = {p.pid: (lambda c: True) for _s, p in self.procs if p.poll() is None}
            ours.update({p.pid: (lambda c: True) for _n, p in self.monitors if p.poll() is None})
            if ours:
                kill_pids(ours, timeout=3)
            for _s, p in self.procs + self.monitors:
                p.poll()


def collect(rep: dict, plan: Plan, run_dir: Path) -> dict:
    """Read every report of one repetition and compute the per-fault figures."""
    streams: dict[str, list[measure.Flow]] = {}
    senders: dict[str, dict] = {}
    receivers: dict[str, dict] = {}
    for i, pr in enumerate(plan.probes):
        tx = json.loads((run_dir / f"probe-{i}.tx.json").read_text())
        rx = json.loads((run_dir / f"probe-{i}.rx.json").read_text())
        streams[pr.name] = measure.flows_of(pr.name, tx, rx)
        senders[pr.name], receivers[pr.name] = tx, rx
    prefixes = {c.subnet for c in plan.cfgs.values() if c.role == "tor"} | \
               {f"{nic.ip}/32" for c in plan.cfgs.values() if c.role == "host" for nic in c.nics}
    events = []
    for f in sorted(run_dir.glob("routes-*.log")):
        events += routemon.parse(f.read_text(), f.stem.removeprefix("routes-"), prefixes)
    workload = report.workload_of(plan, run_dir)
    agents, agent_events = (_json_or_empty(run_dir / f) for f in ("timers.json", "agent-events.json"))
    meter = lateness.meter_of(senders, agents, lateness.load_cpu(run_dir / "cpu.json"),
                              lateness.load_tasks(run_dir / "cpu.json"))
    res = report.repetition_result(rep, plan, streams, senders, receivers, events, workload, meter, agent_events,
                                   _json_or_empty(run_dir / "nodebytes.json"))
    tcp = reorder.of_run(_json_or_empty(run_dir / "tcpstats.json"))  # none in a run from before it was read
    keepers = _json_or_empty(run_dir / "spray.json")
    # gray faults' figures, and the prober's where the variant ran it (prober.json, hpnlab.traffic.run.graywatch)
    grayfigures.add_to_run(res, rep, _json_or_empty(run_dir / "prober.json"), workload,
                           plan.cfgs if plan is not None else {})
    gaps = _json_or_empty(run_dir / "gaps.json")  # none in a run from before the slip guard
    if gaps and plan is not None:
        res["slip"] = slip.of_run(gaps, _json_or_empty(run_dir / "frr-warnings.json"),
                                  (rep["t0"], rep["t0"] + rep["duration"]), plan.faults, plan.cfgs, plan.spec)
    return {**res, **({"tcp": tcp} if tcp else {}), **({"spray": keepers} if keepers else {})}


def _json_or_empty(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # a run from before the meter and the timeline
        return {}


def keep_logs(lab: Lab, dest: Path) -> None:
    """The lab's agent and FRR logs go with the raw results: the lab itself is gone after the run."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, src in lab.log_files().items():
        try:
            shutil.copyfile(src, dest / name)
        except OSError:
            pass


def run_experiment(exp: Experiment, out: Path, runtime: str, progress: Progress | Callable[[str], None],
                   up_timeout: float | None = None) -> dict:
    """Every variant in turn; a variant that fails is reported as such and the others still run.
    ``up_timeout``: seconds a variant's lab may take to come up healthy (default: the file's ``up_timeout``).
    ``progress``: a ``hpnlab.machine.progress.Progress`` (phase lines and, on a terminal, a bar) or any callable(str)."""
    progress = as_progress(progress)
    refuse_on_this_kernel(exp, runtime)
    out.mkdir(parents=True, exist_ok=True)
    doc = exp.doc
    up_timeout = doc.up_timeout if up_timeout is None else up_timeout
    results: dict = {"experiment": doc.name, "description": doc.description, "file": str(exp.path),
                     "runtime": runtime, "repetitions": doc.repetitions,
                     "duration": max((p.duration for p in exp.plans), default=doc.duration),  # the longest variant's
                     "started": time.time(), "provenance": provenance.collect(), "variants": {}}
    try:
        for vi, plan in enumerate(exp.plans):
            v = results["variants"][plan.name] = variant_record(plan)
            progress(f"variant {plan.name} ({vi + 1}/{len(exp.plans)}): bringing up lab '{plan.spec.name}'")
            run_variant(exp, plan, out / outputs.RAW / plan.name, runtime, progress, up_timeout, v)
    except KeyboardInterrupt as e:
        with shielded("writing the partial results"):
            dropped = drop_incomplete(out)
            results["partial"] = f"interrupted ({str(e) or 'SIGINT'}); only the repetitions that finished are in it"
            for plan in exp.plans:
                v = results["variants"].get(plan.name)
                if v is not None:
                    v["faults"] = fault_figures(v["runs"], plan)
                    slip_record(v, v["runs"])
                    grayfigures.aggregate_into(v)
                    v["congestion"] = congestion_record(plan, v["runs"])
            results["provenance"].update(provenance.summarise(results["variants"]))
            results["probe_rate"] = report.probe_rates([r for v in results["variants"].values() for r in v["runs"]])
            results["finished"] = time.time()
            write_results(results, out)
            progress(f"interrupted: {out / 'results.json'} holds the finished repetitions (marked partial)"
                     + (f"; removed the unfinished {', '.join(dropped)}" if dropped else ""))
        raise
    results["probe_rate"] = report.probe_rates([r for v in results["variants"].values() for r in v["runs"]])
    results["provenance"].update(provenance.summarise(results["variants"]))
    results["finished"] = time.time()
    return results


def refuse_on_this_kernel(exp: Experiment, runtime: str) -> None:
    """Before any lab: a variant this kernel cannot run (hpnlab.machine.kernel) refuses the whole run in one line;
    so does a workload's TCP congestion control the kernel neither has nor can load."""
    if not runtimes.get(runtime).shares_kernel:
        return
    have = kernel.probe_all()
    ccs = kernel.congestion_controls()
    for plan in exp.plans:
        refusal = kernel.assess(plan.spec, have).refusal
        if not refusal and workloads.get(plan.workload.kind).tcp:
            refusal = kernel.congestion_refusal(plan.workload.congestion, *ccs)
        if refusal:
            raise kernel.KernelError(f"variant '{plan.name}': {refusal}")


def drop_incomplete(out: Path) -> list[str]:
    """Remove repetitions that never finished (no run.json): they cannot be analysed or reused."""
    gone = []
    for d in sorted((out / outputs.RAW).glob("*/rep*")):
        if d.is_dir() and not (d / "run.json").exists():
            shutil.rmtree(d, ignore_errors=True)
            gone.append(str(d.relative_to(out)))
    return gone


def variant_record(plan: Plan) -> dict:
    """What results.json says of a variant before it runs."""
    return {"description": plan.description, "lab": plan.spec.name, "spec_overrides": plan.overrides,
            "workload": plan.workload.kind, "select": getattr(plan.workload, "select", None), "hash": plan.spec.hash.model_dump(),
            "access": plan.spec.access, "tier2": plan.spec.tier2,
            "mechanisms": plan.spec.mechanisms.model_dump(), "bfd": plan.spec.bfd.model_dump(),
            "duration": plan.duration, "time_dilation": plan.spec.time_dilation,
            # the timers in force beside the spec's, and what runs at 1:1 whatever the factor (hpnlab.model.dilation)
            "dilation": dilation.timers(plan.spec),
            "multipath": plan.spec.multipath.model_dump(), "links": plan.spec.links.model_dump(),
            "congestion": congestion_record(plan, []), "faults_planned": [f.to_dict() for f in plan.faults],
            "runs": []}


def fault_figures(runs: list[dict], plan: Plan) -> list[dict]:
    """Per fault over the repetitions (hpnlab.traffic.output.report.aggregate, read back by the variant's time
    dilation), each with its detector and which part of its split is a dilated timer's (hpnlab.model.dilation)."""
    faults = report.aggregate(runs, plan.spec.time_dilation) if runs else []
    return dilation.annotate(faults, plan.faults, plan.cfgs, plan.spec)


def slip_record(v: dict, runs: list[dict]) -> None:
    """The slip guard over the variant's repetitions (hpnlab.traffic.analysis.slip), where they have its record."""
    s = slip.aggregate(runs)
    if s:
        v["slip"] = s


def congestion_record(plan: Plan, runs: list[dict], requested: str | None = None) -> dict:
    """A variant's TCP: the congestion control its workload asked for (None: its workload sends no TCP)
    and the ones its sockets reported running, over the repetitions (``ran``)."""
    kind = workloads.get(plan.workload.kind)
    ran = {n for r in runs for n in ((r.get("workload") or {}).get("congestion") or "").split(",") if n}
    return {"requested": requested or (plan.workload.congestion if kind.tcp else None), "ran": sorted(ran)}


def run_variant(exp: Experiment, plan: Plan, raw: Path, runtime: str, progress: Progress, up_timeout: float,
                v: dict) -> None:
    """One variant: its lab up, its repetitions, its lab down; a failure is recorded in ``v["error"]``."""
    doc = exp.doc
    kind = workloads.get(plan.workload.kind)
    try:
        lab = Lab.up(plan.spec, runtime, timeout=up_timeout, progress=progress)
    except RuntimeFailure as e:  # rolled back by Lab.up
        v["error"] = str(e)
        progress(f"variant {plan.name} failed: {e}")
        lab = None
    if lab is not None:
        v.update({k: x for k, x in lab.info.items() if k != "runtime"})
        watch = None
        try:
            v.update(kind.prepare_variant(lab, plan, raw, progress))
            if plan.prober is not None:
                progress(f"variant {plan.name}: planning the prober's paths and starting it")
                watch = graywatch.Watch(lab, plan.prober, plan.isolation)
                v["prober"] = watch.start()
            for k in range(doc.repetitions):
                label = f"{plan.name} {k + 1}/{doc.repetitions}"
                if k:
                    try:
                        lab.wait_healthy(60, progress)
                    except Unhealthy as e:
                        raise RuntimeFailure(f"lab did not recover before repetition {k + 1}: {e}") from None
                run_dir = raw / f"rep{k + 1}"
                kind.prepare_repetition(plan, raw, run_dir, k)
                progress(f"{label}: running {plan.duration:g} s, faults: "
                         f"{', '.join(f'{f.label} @{f.at:g}s' for f in plan.faults) or 'none'}")
                rep = Repetition(lab, plan, run_dir, plan.duration, progress, label, watch).run()
                (run_dir / "run.json").write_text(json.dumps(rep))  # timeline, for re-analysis of raw/
                v["runs"].append(collect(rep, plan, run_dir))
        except RuntimeFailure as e:
            v["error"] = str(e)
            progress(f"variant {plan.name} failed: {e}")
        finally:
            with shielded("taking the lab down"):
                if watch is not None:
                    watch.stop()
                keep_logs(lab, raw / "logs")
                progress(f"variant {plan.name}: taking lab '{plan.spec.name}' down")
                lab.down(progress)
    v["faults"] = fault_figures(v["runs"], plan)
    slip_record(v, v["runs"])
    tcp = reorder.aggregate(v["runs"])
    if tcp:
        v["tcp"] = tcp
    probe_reorder = reorder.probes_aggregate(v["runs"])
    if probe_reorder:
        v["probe_reorder"] = probe_reorder
    v["congestion"] = congestion_record(plan, v["runs"])
    v.update(kind.aggregate(v["runs"]))
    grayfigures.aggregate_into(v)


def write_results(results: dict, out: Path) -> tuple[Path | None, str]:
    """results.json (atomically), plot.png (where matplotlib is installed), summary.txt, timeline.png and
    report.html in ``out`` (outputs.OUTPUTS); an experiment whose variants all run one workload kind gets that kind's
    comparisons across its variants (``across_variants``: the jobs kind's ``paired``)."""
    kind = own_kind(results)
    if kind is not None:
        results.update(kind.across_variants(results))
    tmp = out / (outputs.RESULTS + ".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(out / outputs.RESULTS)
    own = kind is not None and kind.own_report
    png = kind.plot(results, out / outputs.PLOT) if own else report.plot(results, out / outputs.PLOT)
    table = summary(results)
    (out / outputs.SUMMARY).write_text(table + "\n")
    if timeline.plot(results, out / outputs.TIMELINE) is None:  # nothing converged, or no matplotlib
        (out / outputs.TIMELINE).unlink(missing_ok=True)  # not an earlier run's picture beside these results
    htmlreport.write(out, results)  # report.html: the same results, interactive, for a browser
    return png, table


def tracked(path: Path) -> bool:
    """Whether git tracks the file (results shipped with hpnlab); False outside a git checkout."""
    try:
        r = subprocess.run(["git", "-C", str(path.parent), "ls-files", "--error-unmatch", path.name],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def no_plot_reason() -> str:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        # matplotlib and numpy are ~170 MB installed, three times the rest of hpnlab's dependencies: an extra
        return ("matplotlib is not installed; pip install 'hpnlab[plot]' (in a checkout: ./bootstrap install), "
                "then add --reanalyse to this command to draw this run's plots")
    return "no variant has a finished repetition to draw"


def check_raw(exp: Experiment, out: Path) -> None:
    """Refuse (one line, nothing written) unless every repetition results.json counts has its raw data:
    re-analysing without it would rewrite the results as empty. Shipped results carry no raw/ (it is
    large and git-ignored), so they cannot be re-analysed, only re-run."""
    old = json.loads((out / "results.json").read_text())
    for plan in exp.plans:
        v = old["variants"].get(plan.name)
        if not v or not v.get("runs"):
            continue
        raw = out / "raw" / plan.name
        for k in range(1, len(v["runs"]) + 1):
            if not (raw / f"rep{k}" / "run.json").exists():
                why = "no raw/ folder (shipped results carry none: re-run the experiment into a new folder)" \
                    if not (out / "raw").exists() else f"{raw / f'rep{k}' / 'run.json'} is missing"
                raise SpecError(f"--reanalyse: variant '{plan.name}' repetition {k}: {why}; nothing was written")
        for need in workloads.get(plan.workload.kind).raw_needed(raw):
            if not need.exists():
                raise SpecError(f"--reanalyse: variant '{plan.name}': {need} is missing; nothing was written")


def reanalyse(exp: Experiment, out: Path) -> dict:
    """Recompute results from DIR/raw (each repetition's reports and run.json) without running anything."""
    old = json.loads((out / "results.json").read_text())
    for plan in exp.plans:
        v = old["variants"].get(plan.name)
        if v is None:
            continue
        runs = []
        for k, run_dir in enumerate(sorted((out / "raw" / plan.name).glob("rep*"), key=lambda d: int(d.name[3:]))):
            if not (run_dir / "run.json").exists():
                raise RuntimeFailure(f"{run_dir}: no run.json (an unfinished repetition, or a run older than "
                                     f"hpnlab 0.1); remove that folder or run the experiment again")
            runs.append(collect(json.loads((run_dir / "run.json").read_text()), plan, run_dir))
        v["runs"] = runs
        v["faults"] = fault_figures(runs, plan)
        v["dilation"] = dilation.timers(plan.spec)
        slip_record(v, runs)
        tcp = reorder.aggregate(runs)
        if tcp:
            v["tcp"] = tcp
        probe_reorder = reorder.probes_aggregate(runs)
        if probe_reorder:
            v["probe_reorder"] = probe_reorder
        v.update(workloads.get(plan.workload.kind).reanalyse(v, out / "raw" / plan.name, plan, runs))
        grayfigures.aggregate_into(v)
        if isinstance(v.get("congestion"), dict):  # what the run asked for, even if the file changed since
            v["congestion"] = congestion_record(plan, runs, v["congestion"].get("requested"))  # (older: none)
    old["probe_rate"] = report.probe_rates([r for v in old["variants"].values() for r in v["runs"]])
    old["reanalysed"] = time.time()
    old["reanalysed_by"] = provenance.code()  # ``provenance`` stays the run's own
    return old
