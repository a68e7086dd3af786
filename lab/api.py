"""The Python API: a running lab as an object, for users' own tests and scripts.

    import hpnlab
    with hpnlab.Lab.up("examples/default.yml", name="t1", overrides={"tier2": "clos"}) as lab:
        lab.exec("s0r0a", "ip", "route")                       # CompletedProcess, never a shell
        lab.vtysh("agg0-0", "show bgp summary json")           # parsed JSON when the command ends in json
        with lab.probes(src="s1h0", dst="s0h0", rail=0, flows=32, rate=250) as p:
            with lab.fault("link-down", node="s0h0", iface="r0p0"):
                lab.wait_for(lambda: "10.0.0.2/32" not in lab.routes("agg0-0"), timeout=5)
        p.result.assert_disruption(max_gap_ms=300, allowed_disruptions=1)

Every call goes through hpnlab.lifecycle.orchestrate and the runtime interface, exactly as the CLI does, so
what a test sees is what ``hpnlab up`` / ``hpnlab fail`` / ``hpnlab run`` do.
"""

from __future__ import annotations

import contextlib
import copy
import os
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from hpnlab.instrument import lateness
from hpnlab.lifecycle import orchestrate, verify
from hpnlab.machine import nodesetup
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.model.models import NodeConfig
from hpnlab.machine.proc import kill_pids, run
from hpnlab.machine.progress import Progress, Report
from hpnlab.runtime.base import Runtime
from hpnlab.machine.signals import shielded
from hpnlab.model.spec import Spec, check_lab_name, load_spec_data, merge, parse_spec
from hpnlab.traffic import faults as faultmod
from hpnlab.traffic.analysis import measure

if TYPE_CHECKING:
    from hpnlab.traffic.run import runjobs


class Unhealthy(RuntimeFailure, AssertionError):
    """The lab did not pass every verify check by the deadline (an AssertionError for users' tests)."""


class EmulatorLate(AssertionError):
    """``assert_disruption(require_unflagged=True)``: the figure was measured while the emulator itself was
    late by a material part of it (hpnlab.instrument.lateness); the machine, not the fabric, failed the check.
    ``Lab.measure`` retries on it."""


@dataclass
class ProbeResult:
    """What sequence-numbered probes saw, with the same figures (and definitions) as results.json."""

    longest_gap_ms: float
    lost_packets: int
    flows_affected: int
    blackholed_flows: int
    recovered: bool
    converged_gap_ms: float
    sent: int
    received: int
    per_flow: list[dict] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    report_dir: Path | None = None
    lost_after_repair_1s: int = 0  # sent from 1 s after the repair on, and lost: the repair's own black hole
    lost_after_repair: int = 0  # lost in gaps that began after the repair: a second outage the repair caused
    after_repair_gap_ms: float = 0.0  # the longest of those gaps
    emulator: dict = field(default_factory=dict)  # the lateness meter's verdict on longest_gap_ms
    discarded: list[dict] = field(default_factory=list)  # Lab.measure: earlier attempts it threw away (flagged)

    @property
    def flagged(self) -> bool:
        """The emulator was late by a material part of the longest gap (``emulator`` says by how much)."""
        return bool(self.emulator.get("flagged"))

    def assert_disruption(self, max_gap_ms: float, allowed_disruptions: int = 1,
                          require_unflagged: bool = False) -> None:
        """Per flow, as sonic-mgmt's dual-ToR I/O tests count: at most ``allowed_disruptions`` gaps,
        none longer than ``max_gap_ms``, and every flow delivering again at the end. ``require_unflagged``:
        first, ``EmulatorLate`` if the run was flagged (the figure measured the machine: run it again,
        e.g. with ``Lab.measure``), so a CI job fails for the fabric, not for a noisy neighbour."""
        if require_unflagged and self.flagged:
            e = self.emulator
            raise EmulatorLate(f"the emulator was {e['late_ms']:g} ms late in the fault's window (senders "
                               f"{e['sender_late_ms']:g} ms, agents' timers {e['timer_late_ms']:g} ms"
                               + (f" on {e['timer_late_node']}" if e.get("timer_late_node") else "")
                               + f"), more than the {e['bound_ms']:g} ms this {self.longest_gap_ms:g} ms gap "
                               f"allows: this run measured the machine, not the fabric"
                               + (f" (reports: {self.report_dir})" if self.report_dir else ""))
        bad = []
        for f in self.per_flow:
            if len(f["gaps_ms"]) > allowed_disruptions or f["longest_gap_ms"] > max_gap_ms or not f["resumed"]:
                bad.append(f)
        if bad:
            worst = sorted(bad, key=lambda f: -f["longest_gap_ms"])[:4]
            detail = "; ".join(f"flow {f['flow']} (sport {f['sport']}): {len(f['gaps_ms'])} gap(s), longest "
                               f"{f['longest_gap_ms']:.0f} ms" + ("" if f["resumed"] else ", never resumed")
                               for f in worst)
            raise AssertionError(f"{len(bad)}/{len(self.per_flow)} flows disrupted beyond {allowed_disruptions} "
                                 f"gap(s) of <= {max_gap_ms:g} ms: {detail}"
                                 + (f" (reports: {self.report_dir})" if self.report_dir else ""))

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("longest_gap_ms", "lost_packets", "flows_affected", "blackholed_flows",
                                           "recovered", "converged_gap_ms", "sent", "received", "per_flow",
                                           "faults", "emulator", "discarded")}
        d["report_dir"] = str(self.report_dir) if self.report_dir else None
        return d


def probe_result(sender: dict, receiver: dict, fault_log: list[dict], report_dir: Path | None = None,
                 agents: dict | None = None, cpu: list | None = None, tasks: dict | None = None) -> ProbeResult:
    """Pure: join a sender's and a receiver's report, judged against the faults applied meanwhile; the
    lateness meter (the sender's own, the agents' ``timers_late``, CPU samples) judges the longest gap
    over the window from the first fault (else the run's start) until that gap could have ended."""
    flows = measure.flows_of("probe", sender, receiver)
    during = [f for f in fault_log if f["applied"] < sender["end"] and (f.get("reverted") or sender["end"])
              >= sender["start"]]
    start = min((f["applied"] for f in during), default=sender["start"])
    ends = [f.get("reverted") for f in during]
    end = max(ends) if during and all(e is not None for e in ends) else None
    m = measure.fault_metrics(flows, start, end, sender["end"] + 1.0 / sender["rate_per_flow"])
    blackholed = (m["blackholed_flows"] or 0) if during else 0  # None: a fault not yet repaired
    per_flow = []
    for fl in flows:
        gaps = [round(g.ms, 1) for g in fl.gaps if g.missing > 0]
        per_flow.append({"flow": fl.flow, "sport": sender["sport_base"] + fl.flow, "sent": fl.sent,
                         "received": fl.received, "lost": fl.lost, "gaps_ms": gaps,
                         "longest_gap_ms": max(gaps, default=0.0),
                         "resumed": not any(g.end >= sender["end"] for g in fl.gaps if g.missing > 0)})
    tot = measure.totals(flows)
    longest = max((f["longest_gap_ms"] for f in per_flow), default=0.0)
    meter = lateness.meter_of({"probe": sender}, agents or {}, cpu or [], tasks)
    last = max([g.end for fl in flows for g in fl.gaps if g.missing > 0], default=start)
    emulator = lateness.verdict(longest, lateness.window(meter, start - lateness.PERIOD_S,
                                                         max(last, start) + lateness.PERIOD_S))
    return ProbeResult(longest_gap_ms=longest,
                       lost_packets=tot["lost"], flows_affected=sum(1 for f in per_flow if f["gaps_ms"]),
                       blackholed_flows=blackholed, recovered=m["recovered"] and all(f["resumed"] for f in per_flow),
                       converged_gap_ms=m["converged_gap_ms"], sent=tot["sent"], received=tot["received"],
                       per_flow=per_flow, faults=[{k: f.get(k) for k in ("label", "applied", "reverted")}
                                                  for f in during], report_dir=report_dir,
                       lost_after_repair_1s=(m.get("lost_after_repair_1s") or 0) if end is not None else 0,
                       lost_after_repair=(m.get("lost_after_repair") or 0) if end is not None else 0,
                       after_repair_gap_ms=(m.get("after_repair_gap_ms") or 0.0) if end is not None else 0.0,
                       emulator=emulator)


class Probes:
    """Sequence-numbered UDP flows from one host to another while the ``with`` block runs; ``result``
    is computed when it ends (the sender stops first, then the receiver, so nothing in flight is lost)."""

    def __init__(self, lab: "Lab", src: str, dst: str, rail: int, flows: int, rate: float, size: int, index: int):
        self.lab, self.src, self.dst, self.rail, self.flows, self.rate, self.size = lab, src, dst, rail, flows, rate, size
        self.dir = lab.workdir / f"probes-{index}"
        self.index = index
        self.result: ProbeResult | None = None
        self._procs: list[subprocess.Popen] = []
        self._cpu = lateness.CpuSampler(tasks=lab.meter_tasks())

    def __enter__(self) -> "Probes":
        self.dir.mkdir(parents=True, exist_ok=True)
        src, dst = self.lab.host_ip(self.src, self.rail), self.lab.host_ip(self.dst, self.rail)
        start_at = time.time() + 0.5  # the receiver binds meanwhile
        from hpnlab.traffic.workloads import probe  # the one place a probe's command line is built

        rx, tx = probe.argv(self.index, src, dst, self.flows, self.rate, self.size, 86400, start_at,
                            str(self.dir / "rx.json"), str(self.dir / "tx.json"))
        for node, argv in ((self.dst, rx), (self.src, tx)):
            self._procs.append(self.lab.spawn(node, argv, self.dir / "probe.log"))
        self._cpu.start()
        while time.time() < start_at + 0.05:  # flows are running when the block starts
            time.sleep(0.02)
        self.lab._probe_runs.append(self.dir)
        return self

    def __exit__(self, *exc) -> None:
        self._cpu.stop()
        rx, tx = self._procs
        for p in (tx, rx):  # sender first; its report is written on SIGTERM
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_pids({p.pid: lambda c: True}, timeout=1)
            if p is tx:
                time.sleep(0.2)  # the last packets reach the receiver
        if exc[0] is not None:
            return
        try:
            sender = json.loads((self.dir / "tx.json").read_text())
            receiver = json.loads((self.dir / "rx.json").read_text())
        except (OSError, ValueError) as e:
            raise RuntimeFailure(f"probes {self.src} -> {self.dst}: no report ({e.__class__.__name__}); "
                                 f"see {self.dir / 'probe.log'}") from None
        cpu = self._cpu.samples if self.lab.runtime.shares_kernel else []  # else not the lab's machine
        tasks = {"labels": list(self._cpu.tasks), "samples": self._cpu.task_samples}
        self.result = probe_result(sender, receiver, self.lab._fault_log, self.dir, self.lab.timers_late(), cpu,
                                   tasks)
        (self.dir / "result.json").write_text(json.dumps(self.result.to_dict(), indent=1))


class Lab:
    """A running lab. ``Lab.up`` brings one up (verified) and ``down`` removes it; ``Lab.attach`` opens
    one brought up by the CLI. As a context manager, a lab made by ``up`` is removed on exit, also on error."""

    def __init__(self, rt: Runtime, cfgs: dict[str, NodeConfig], owned: bool):
        self.runtime, self.cfgs, self._owned = rt, cfgs, owned
        self._fault_log: list[dict] = []
        self._injector = faultmod.Injector(rt, cfgs)  # one per lab: state.json records all its faults
        self._records: dict[int, dict] = {}  # id(fault) -> its record, while active
        self._probe_runs: list[Path] = []
        self._nprobes = 0
        self._njobs = 0  # run_jobs: each run's reports in workdir/jobs-N
        self._down = False

    # --- life -------------------------------------------------------------------------------------------
    @classmethod
    def up(cls, spec: str | Path | dict | Spec = "default", runtime: str = "netns",
           name: str | None = None, overrides: dict | None = None, timeout: float = 90.0,
           progress: bool | Report = False) -> "Lab":
        """Bring a lab up and wait until every verify check passes; anything else rolls it back and
        raises (``Unhealthy`` names the failing check). ``progress=True`` prints the steps on stderr; a
        ``hpnlab.machine.progress.Progress`` or any ``callable(str)`` receives them."""
        sp = resolve_spec(spec, name, overrides)
        orchestrate.need_root("hpnlab.Lab.up")
        prog = progress if callable(progress) else Progress(quiet=not progress)
        rt, cfgs, checks = orchestrate.bring_up(sp, runtime, timeout, prog)
        if not verify.complete(checks):
            raise Unhealthy(f"lab '{sp.name}' not healthy after {timeout:g} s (rolled back): {_failing(checks)}")
        return cls(rt, cfgs, owned=True)

    @classmethod
    def attach(cls, name: str) -> "Lab":
        """A lab that is already running (e.g. ``hpnlab up``); ``down`` is then up to its owner."""
        orchestrate.need_root("hpnlab.Lab.attach")
        rt, cfgs = orchestrate.open_lab(name)
        return cls(rt, cfgs, owned=False)

    def down(self, progress: Report | None = None) -> None:
        """Remove the lab and everything it created (idempotent)."""
        if not self._down:
            self._down = True
            orchestrate.tear_down(self.name, progress)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        if self._owned:
            self.down()

    def __repr__(self) -> str:
        return f"<hpnlab.Lab {self.name!r} on {self.runtime.name}: {len(self.hosts)} hosts, {len(self.routers)} routers>"

    # --- what is in it ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.runtime.lab

    @property
    def nodes(self) -> list[str]:
        return list(self.cfgs)

    @property
    def hosts(self) -> list[str]:
        return [n for n, c in self.cfgs.items() if c.role == "host"]

    @property
    def routers(self) -> list[str]:
        return [n for n, c in self.cfgs.items() if c.role != "host"]

    def role(self, node: str) -> str:
        return self._cfg(node).role

    def host_ip(self, host: str, rail: int = 0) -> str:
        nic = self._cfg(host).nic(rail)
        if nic is None:
            raise SpecError(f"rail {rail}: not a rail of host '{host}'")
        return nic.ip

    @property
    def workdir(self) -> Path:
        """Where this lab keeps probe reports (inside the lab's state directory: removed with the lab)."""
        return self.runtime.state.dir / "api"

    @property
    def info(self) -> dict:
        """What the lab runs on: runtime, host driver, kernel release and what it runs without on it."""
        st = self.runtime.state.data
        return {"runtime": st.runtime, "host_driver": st.host_driver, "kernel": st.kernel,
                "kernel_notes": list(st.kernel_notes)}

    def log_files(self) -> dict[str, Path]:
        return self.runtime.log_files()

    def timers_late(self) -> dict[str, dict]:
        """node -> how late its agent's timers fired over the last 60 s (``timers_late`` of its status:
        100 ms bins where a LACP, micro-BFD, stacking or hold-down timer ran 1 ms or more after it was due)."""
        return self.agent_records()[0]

    def agent_records(self) -> tuple[dict[str, dict], dict[str, list], dict[str, dict]]:
        """From every agent's status, in one read: node -> its late timers, node -> its events of the last
        60 s as [epoch s, message] (carrier, LACP, micro-BFD, host routes, nexthops: the timeline's), node ->
        its long intervals between protocol packets (``packet_gaps``: the slip guard's, hpnlab.node.slip)."""
        driver = self.runtime.state.data.host_driver or "userspace"
        nodes = [n for n, c in self.cfgs.items() if nodesetup.agent_module(c.plain(), driver)]
        timers, events, gaps = {}, {}, {}
        # in parallel: on clabernetes each read is a remote exec
        for n, st in zip(nodes, verify.pmap(self.runtime.read_status, nodes)):
            if st and "timers_late" in st:
                timers[n] = st["timers_late"]
            if st and st.get("events"):
                events[n] = st["events"]
            if st and st.get("packet_gaps"):
                gaps[n] = st["packet_gaps"]
        return timers, events, gaps

    # --- doing things in it -----------------------------------------------------------------------------
    def exec(self, node: str, *argv: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
        """Run a command inside a node (no shell: each argument is one word)."""
        self._cfg(node)
        return run(self.runtime.exec_argv(node, [str(a) for a in argv]), timeout=timeout, check=check,
                   what=f"{node}: {argv[0] if argv else ''}")

    def vtysh(self, node: str, command: str, timeout: float = 20) -> Any:
        """One vtysh command on a router: parsed JSON when the command ends in 'json', else its text."""
        if self._cfg(node).role == "host":
            raise SpecError(f"node '{node}' is a host: it runs no FRR")
        r = run(self.runtime.vtysh_argv(node, [command]), timeout=timeout, what=f"{node}: vtysh")
        if command.rstrip().endswith("json"):
            try:
                return json.loads(r.stdout or "null")
            except ValueError:
                raise RuntimeFailure(f"{node}: vtysh '{command}' printed no JSON: {r.stdout[:200]!r}") from None
        return r.stdout

    def routes(self, node: str) -> set[str]:
        """The node's kernel IPv4 routes that forward (no linkdown), as prefixes ('10.0.0.2/32')."""
        self._cfg(node)
        return verify.kernel_routes(self.runtime, node)

    def verify(self) -> list[dict]:
        """Every health check once: [{"name", "ok", "detail"}]."""
        return verify.verify(self.runtime, self.cfgs, stop_at_failure=False)

    def healthy(self) -> bool:
        return verify.complete(verify.verify(self.runtime, self.cfgs))

    def wait_healthy(self, timeout: float = 60, progress: Report | None = None) -> None:
        """Poll verify until every check passes; ``Unhealthy`` (an AssertionError) after ``timeout`` s."""
        checks = orchestrate.wait_healthy(self.runtime, self.cfgs, timeout, progress or (lambda _m: None))
        if not verify.complete(checks):
            raise Unhealthy(f"lab '{self.name}' not healthy after {timeout:g} s: {_failing(checks)}")

    def spawn(self, node: str, argv: list[str], log: Path, out: Path | None = None) -> subprocess.Popen:
        """Start one program inside a node, in its own session (so it can be stopped alone); stderr goes
        to ``log``, stdout to ``out`` (else ``log``). On a remote channel (clabernetes) the node program's
        report comes on stdout: it is written to the file its ``--out`` names."""
        self._cfg(node)
        full, report = self.runtime.tool_argv(node, argv)
        out = out or report
        with open(log, "a") as lg, open(out or os.devnull, "w") as stdout:
            # the child holds its own copies; ours close here (no descriptor per process left open)
            return subprocess.Popen(full, stdout=stdout if out else lg, stderr=lg,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def measure(self, experiment: Callable[[], Any], attempts: int = 3, healthy_timeout: float = 60) -> Any:
        """Run ``experiment`` (a callable that returns a ``ProbeResult``, e.g. probes around a fault, or a
        tuple of them, e.g. both directions) until no figure it returns is flagged by the lateness meter, at
        most ``attempts`` times, the lab healthy again before each retry. Returns the last attempt's result
        (same shape): flagged if every attempt was; the attempts it discarded as flagged are in each result's
        ``discarded`` (as ``to_dict()``), so none is lost."""
        if attempts < 1:
            raise SpecError("measure: attempts must be at least 1")
        discarded: list[list[dict]] = []  # per attempt, one dict per result

        def parts(res: Any) -> tuple:
            return tuple(res) if isinstance(res, tuple) else (res,)

        for attempt in range(attempts):
            res = experiment()
            if attempt == attempts - 1 or not any(r.flagged for r in parts(res)):
                break
            discarded.append([r.to_dict() for r in parts(res)])
            self.wait_healthy(healthy_timeout)
        for i, r in enumerate(parts(res)):
            r.discarded = [d[i] for d in discarded]
        return res

    def wait_for(self, condition: Callable[[], Any], timeout: float = 10, interval: float = 0.05,
                 what: str | None = None) -> Any:
        """Poll until ``condition()`` is truthy (FRR topotests' run_and_expect) and return its value;
        AssertionError with the last value after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what or 'condition'} not met within {timeout:g} s (last value: {value!r})")
            time.sleep(interval)

    def probes(self, src: str, dst: str, rail: int = 0, flows: int = 16, rate: float = 250,
               size: int = 64) -> Probes:
        """Sequence-numbered UDP probes from host ``src`` to host ``dst`` for the ``with`` block."""
        for h in (src, dst):
            if self._cfg(h).role != "host":
                raise SpecError(f"probes: '{h}' is a {self.role(h)}; give hosts")
        if src == dst:
            raise SpecError("probes: src and dst are the same host")
        if not 1 <= flows <= 1024 or not 0 < rate <= 20000:
            raise SpecError("probes: flows must be 1..1024 and rate (packets/s per flow) 0..20000")
        self.host_ip(src, rail), self.host_ip(dst, rail)
        self._nprobes += 1
        return Probes(self, src, dst, rail, flows, rate, size, self._nprobes)

    def run_jobs(self, jobs: list, policy: str = "fifo", duration_s: float = 30.0, queues: int = 2,
                 pool: int = 16, rail: int = 0, congestion: str | None = None, seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> "runjobs.JobsResult":
        """Several training jobs at once, scheduled by ``policy`` (fifo, crux, crux-priority-only,
        crux-paths-only, reversed): each job a dict (or ``hpnlab.traffic.workloads.jobs.Job``) with the
        experiment file's job keys (name, hosts, collective, size_kb, compute_ms, iterations, connections, k,
        rail or rails). Probes the jobs' path map, assigns classes and paths, runs every rank until each job has done
        its ``iterations`` (else for ``duration_s``) and returns a ``hpnlab.traffic.run.runjobs.JobsResult``:
        per job (``.jobs[name]``) iterations, iteration and exposed-communication times, GPU utilisation,
        intensity, level, DSCP, ports and paths; ``cluster_gpu_util`` weighted by ranks. Bad input: the
        experiment file's one-line error naming the key (SpecError), before anything runs."""
        from hpnlab.traffic.run import runjobs
        from hpnlab.traffic.workloads.base import CONGESTION_DEFAULT

        return runjobs.run(self, jobs, policy, duration_s, queues, pool, rail, congestion or CONGESTION_DEFAULT,
                           seed, progress)

    @contextlib.contextmanager
    def fault(self, kind: str, node: str, iface: str | list[str] | None = None, **params) -> Iterator[dict]:
        """Apply one fault (any kind of ``hpnlab fail --list``) for the ``with`` block; it is reverted on
        exit, always. Yields its record: {"label", "applied", "reverted"} (epoch seconds)."""
        f = faultmod.parse({"kind": kind, "node": node, "iface": iface, **params}, "fault", self.cfgs)
        rec = self.apply_fault(f)
        try:
            yield rec
        finally:
            with shielded("reverting the fault"):
                self.revert_fault(f)

    def apply_fault(self, f: faultmod.Fault) -> dict:
        """Apply a parsed fault now and return its record ({"label", "kind", "applied", "applied_done",
        "reverted"}); ``revert_fault(f)`` ends it. Every fault applied is in the lab's state.json with its
        undo recipe until reverted, so ``hpnlab fail --clear`` or ``down`` undo it after a crash."""
        rec = {"label": f.label, "kind": f.kind, "node": f.node, "iface": f.iface, "at": f.at, "until": f.until,
               "applied": time.time(), "reverted": None}
        self._fault_log.append(rec)
        self._records[id(f)] = rec
        self._injector.apply(f)
        rec["applied_done"] = time.time()
        return rec

    def revert_fault(self, f: faultmod.Fault) -> None:
        rec = self._records.pop(id(f), None)
        if rec is not None and rec["reverted"] is None:
            rec["reverted"] = time.time()
        self._injector.revert(f)

    def revert_faults(self) -> None:
        """Revert every fault this object applied that is still active (idempotent)."""
        for f in list(reversed(self._injector.active)):
            self.revert_fault(f)

    def meter_tasks(self) -> dict[str, int]:
        """What the lateness meter samples the run-queue wait of: "<node>/<daemon>" -> PID of every FRR
        daemon of this lab, and "controller" -> this process (it applies the faults). {} where the lab does
        not run on this machine's kernel."""
        if not self.runtime.shares_kernel:
            return {}
        by_ns = {self.runtime.netns(n): n for n in self.cfgs}
        out = {}
        for pid, ns in sorted(self.runtime.frr_pids().items()):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            out[f"{by_ns.get(ns, ns)}/{comm}"] = pid
        out[lateness.CONTROLLER] = os.getpid()
        return out

    def spare(self, pids: set[int]) -> None:
        """Processes of our own (route watchers) that a fault freezing a node's processes leaves running."""
        self._injector.exclude |= set(pids)

    def faults(self) -> dict[str, str]:
        return dict(faultmod.KINDS)

    def impair(self, node: str, iface: str, **settings: str) -> dict:
        """Change one link end, e.g. ``lab.impair("s0r0a", "h0p0", rate="5mbit", loss="1")``; what is in
        force is returned. ``clear_impairments()`` (or ``down``) undoes it."""
        from hpnlab.traffic.run import impair

        return impair.apply(self.runtime, self.cfgs, node, iface,
                            impair.parse([f"{k}={v}" for k, v in settings.items()]))

    def prober(self, **settings) -> "Any":
        """The black-box prober (hpnlab.traffic.run.prober.Prober) for this lab, not yet started: ``with
        lab.prober(rate=50) as p:`` plans its paths, probes, and judges until the block ends; ``p.events``
        (suspected/confirmed links, timestamped), ``p.health()``, ``p.report()`` (rate, CPU)."""
        from hpnlab.traffic.run.prober import Prober

        return Prober(self.runtime, self.cfgs, self.workdir, **settings)

    def clear_impairments(self, node: str | None = None, iface: str | None = None) -> list[str]:
        from hpnlab.traffic.run import impair

        return impair.clear(self.runtime, self.cfgs, node, iface)

    def weights(self, tor: str) -> dict[str, dict]:
        """Per destination subnet of a ToR (the other sets of its rail): its kernel's nexthop weights, their
        shares, and the shares FARE prescribes for the capacities in force (multipath fare; on an ECMP lab
        with shaped uplinks: what FARE would give, beside the equal weights it has)."""
        from hpnlab.lifecycle import fare

        if self._cfg(tor).role != "tor":
            raise SpecError(f"weights: '{tor}' is a {self.role(tor)}; give a ToR")
        return fare.weights(self.runtime, self.cfgs, tor)

    def link_stats(self, node: str) -> dict[str, dict]:
        """Per interface of a node: bytes sent, drops and queue backlog (bytes) right now; a switch port with
        priority queues (spec qos) also has ``queues``: the same three per queue (0: served first)."""
        import json as _json

        from hpnlab.node.qos import queue_of_handle

        r = self.exec(node, "tc", "-s", "-j", "qdisc", "show", check=True)
        every = _json.loads(r.stdout or "[]")
        have = {q["dev"]: q for q in every if q.get("root")}
        out = {i: {k: have.get(i, {}).get(k, 0) for k in ("bytes", "drops", "backlog")}
               for i in self._cfg(node).iface_names}
        for q in every:
            k = queue_of_handle(int(q.get("handle", "0:").split(":")[0] or "0", 16))
            if q.get("kind") == "bfifo" and k is not None and q.get("dev") in out:
                out[q["dev"]].setdefault("queues", {})[k] = {x: q.get(x, 0) for x in ("bytes", "drops", "backlog")}
        return out

    def _cfg(self, node: str) -> NodeConfig:
        if node not in self.cfgs:
            raise SpecError(f"node '{node}' is not in lab '{self.name}'; nodes: {', '.join(sorted(self.cfgs))}")
        return self.cfgs[node]


def _failing(checks: list[dict]) -> str:
    bad = next((c for c in checks if not c["ok"]), {"name": "verify", "detail": "incomplete"})
    return f"{bad['name']}: {bad['detail']}"


def resolve_spec(spec: str | Path | dict | Spec, name: str | None = None, overrides: dict | None = None) -> Spec:
    """A Spec from a file path (or a shipped example's name), a dict or a Spec, with overrides merged in."""
    if isinstance(spec, Spec):
        data = spec.model_dump(mode="json")
        where = "spec"
    elif isinstance(spec, dict):
        data, where = copy.deepcopy(spec), "spec"
    else:
        data, where = load_spec_data(spec)
    if overrides:
        if not isinstance(overrides, dict):
            raise SpecError("overrides: give a mapping like {'tier2': 'clos'}")
        data = merge(data, overrides)
        where = f"{where} with overrides"
    if name is not None:
        data["name"] = check_lab_name(name, "name")
    return parse_spec(data, where)
