"""The lateness meter: how late the emulator itself was while a figure was measured, and the verdict
that goes beside the figure.

Four witnesses, all on the one wall clock every namespace shares:
- the probe senders: how late each send went out against its schedule (``late`` in a sender's report);
- the agents: how late their LACP, micro-BFD, stacking and hold-down timers fired (``timers_late`` in
  each agent's status file; hpnlab.node.lateness keeps both);
- FRR's daemons (bgpd, zebra, bfdd, staticd of every router) and the controller that applies faults: how long
  each waited for a CPU while runnable (/proc/<pid>/schedstat), sampled with the CPU pressure;
- the machine: CPU pressure (PSI, /proc/pressure/cpu "some" and "full", cumulative microseconds of
  wall-clock time during which at least one / every runnable task waited for a CPU) and steal time
  (/proc/stat), sampled by ``CpuSampler`` every 100 ms while a run lasts.

Verdict (``verdict``): a figure is flagged when the emulator's timers or probe senders were late, inside
the figure's own window, by more than ``FRACTION`` of the figure or ``FLOOR_MS``, whichever is larger
(FRR's daemons' and the controller's run-queue waits are reported beside it: ``window`` says why). Every figure has its own window and bound (``traffic/output/report.py`` judges the converged
gap, the routes' last change and the recovery after the repair each on its own). Timer lateness, not
PSI, decides: lateness is what moves a measured instant (a detection that fired 40 ms late shows up as
40 ms more gap), while PSI counts any task waiting, including ones off the critical path (a 2-core
machine running 40 FRR daemons shows "some" pressure in every busy second). PSI and steal are reported
beside it as context.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from hpnlab.node.lateness import BIN_S  # the senders' and agents' bins

FRACTION = 0.10  # of the figure: a 10 % error bar is what a reader would call "material"
FLOOR_MS = 5.0  # below this, one scheduling quantum on a busy machine; not a verdict on anything
PERIOD_S = 0.1

CONTROLLER = "controller"  # the task label of the process that applies faults (its main thread)
PSI = Path("/proc/pressure/cpu")
STAT = Path("/proc/stat")
SOFTNET = Path("/proc/net/softnet_stat")


def read_cpu() -> tuple[float, float | None, float | None, float | None, int | None]:
    """(epoch s, PSI some µs, PSI full µs, steal s summed over CPUs, packets the kernel dropped because a
    CPU's input backlog was full): cumulative counters; None if absent.

    The backlog drops are the emulator's too: a veth hands every packet to the receiving CPU's backlog
    (net.core.netdev_max_backlog, shared by every namespace), which the kernel drains in softirq; a CPU
    busy with daemons drains it late, and past the limit packets (probes, ARP, BFD, BGP) are dropped
    before any namespace sees them."""
    some = full = steal = drops = None
    try:
        for line in PSI.read_text().splitlines():
            kind, *fields = line.split()
            total = float(dict(f.split("=") for f in fields)["total"])
            if kind == "some":
                some = total
            elif kind == "full":
                full = total
    except (OSError, KeyError, ValueError):
        pass
    try:
        cpu = STAT.read_text().split("\n", 1)[0].split()
        steal = int(cpu[8]) / 100.0 if len(cpu) > 8 else None  # USER_HZ is 100 on Linux
    except (OSError, ValueError, IndexError):
        pass
    try:
        drops = sum(int(line.split()[1], 16) for line in SOFTNET.read_text().splitlines() if line.strip())
    except (OSError, ValueError, IndexError):
        pass
    return time.time(), some, full, steal, drops


def run_queue_wait_ns(pid: int, tid: int | None = None) -> int | None:
    """How long a task has waited for a CPU while runnable, in ns, cumulative (the second field of
    /proc/<pid>/schedstat, CONFIG_SCHED_INFO: on this kernel and Debian's and Ubuntu's); None if gone."""
    path = f"/proc/{pid}/task/{tid}/schedstat" if tid else f"/proc/{pid}/schedstat"
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


class CpuSampler:
    """Samples ``read_cpu`` every ``PERIOD_S`` on a thread (``with CpuSampler() as s``); ``samples`` after.
    With ``tasks`` (label -> pid: FRR's daemons, the controller's main thread) it also samples each task's
    run-queue wait (``task_samples``: [epoch s, [ns per label, None where gone]]). Its cost: two small /proc
    reads per 100 ms, one more per task (``bench/fidelity.py`` measures it)."""

    def __init__(self, period: float = PERIOD_S, tasks: dict[str, int] | None = None) -> None:
        self.period = period
        self.samples: list[tuple] = []
        self.tasks = dict(tasks or {})
        self.task_samples: list[list] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpnlab-cpu-sampler", daemon=True)

    def _sample(self) -> None:
        self.samples.append(read_cpu())
        if self.tasks:
            self.task_samples.append([time.time(), [run_queue_wait_ns(pid, pid if label == CONTROLLER else None)
                                                    for label, pid in self.tasks.items()]])

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.period):
                self._sample()
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def __enter__(self) -> "CpuSampler":
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"period_s": self.period,
                                    "fields": ["t", "psi_some_us", "psi_full_us", "steal_s", "backlog_drops"],
                                    "samples": self.samples,
                                    "tasks": {"labels": list(self.tasks), "samples": self.task_samples}}))


def load_cpu(path: Path) -> list[list]:
    try:
        return json.loads(path.read_text())["samples"]
    except (OSError, ValueError, KeyError):
        return []


def load_tasks(path: Path) -> dict:
    """The run-queue wait samples of cpu.json ({} in a file from before they were kept)."""
    try:
        return json.loads(path.read_text()).get("tasks") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def task_window(tasks: dict, a: float, b: float) -> dict:
    """Over [a, b]: the run-queue wait (ms) of the FRR daemon that waited longest and which, of all FRR
    daemons together, and of the controller (None where not sampled)."""
    labels, samples = tasks.get("labels") or [], tasks.get("samples") or []
    waits: dict[str, float] = {}
    for i, label in enumerate(labels):
        col = [[t, v[i]] for t, v in samples if i < len(v)]
        x, y = _at(col, a, 1), _at(col, b, 1)
        if x is not None and y is not None:
            waits[label] = (y - x) / 1e6
    frr = {k: v for k, v in waits.items() if k != CONTROLLER}
    worst = max(frr, key=frr.get) if frr else None
    return {"frr_wait_ms": round(frr[worst], 1) if worst else None,
            "frr_wait_daemon": worst if worst and frr[worst] > 0 else None,
            "frr_wait_total_ms": round(sum(frr.values()), 1) if frr else None,
            "controller_wait_ms": round(waits[CONTROLLER], 1) if CONTROLLER in waits else None}


def _at(samples: list, t: float, col: int) -> float | None:
    """A cumulative counter at time t, linearly between the samples around it (None outside them)."""
    pts = [(s[0], s[col]) for s in samples if len(s) > col and s[col] is not None]
    if not pts or t < pts[0][0] or t > pts[-1][0]:
        return None
    for (ta, a), (tb, b) in zip(pts, pts[1:]):
        if ta <= t <= tb:
            return a if tb == ta else a + (b - a) * (t - ta) / (tb - ta)
    return pts[-1][1]


def cpu_window(samples: list, a: float, b: float) -> dict:
    """Over [a, b]: ms of PSI some / full pressure and of steal, and packets dropped at a full input
    backlog (None where not sampled or not available; drops counted from the samples around [a, b])."""
    out = {}
    for name, col, scale in (("psi_some_ms", 1, 1e-3), ("psi_full_ms", 2, 1e-3), ("steal_ms", 3, 1e3)):
        x, y = _at(samples, a, col), _at(samples, b, col)
        out[name] = round((y - x) * scale, 1) if x is not None and y is not None else None
    pts = [(s[0], s[4]) for s in samples if len(s) > 4 and s[4] is not None]
    before = [v for t, v in pts if t <= a]
    after = [v for t, v in pts if t >= b]
    out["backlog_drops"] = after[0] - before[-1] if before and after else None
    return out


def worst_in(bins: list, a: float, b: float, bin_s: float = BIN_S) -> float:
    """Worst lateness (ms) of the bins overlapping [a, b]."""
    return max((ms for t, ms in bins if t + bin_s > a and t < b), default=0.0)


def window(meter: dict, a: float, b: float) -> dict:
    """Every witness over [a, b]: the senders' and the agents' worst lateness (and who), CPU pressure."""
    snd = {name: worst_in(r.get("bins", []), a, b) for name, r in meter.get("senders", {}).items()}
    agt = {node: worst_in(r.get("bins", []), a, b) for node, r in meter.get("agents", {}).items()}
    worst_agent = max(agt, key=agt.get) if agt else None
    out = {"sender_late_ms": round(max(snd.values(), default=0.0), 1),
           "timer_late_ms": round(agt[worst_agent], 1) if worst_agent else 0.0,
           "timer_late_node": worst_agent if worst_agent and agt[worst_agent] > 0 else None,
           "window_ms": round((b - a) * 1000, 1),
           **cpu_window(meter.get("cpu", []), a, b), **task_window(meter.get("tasks", {}), a, b)}
    # The FRR daemons' run-queue wait is beside the verdict, not in it: it is cumulative over the window, so
    # a daemon woken every 100 ms (bfdd) or busy with the whole fabric's updates collects tens of ms of
    # small waits in any busy second, most of them off the fault's path; in the first runs with it (the
    # default lab's link-failure, PSI 35-90 %) the worst daemon's wait exceeded the bound of nearly every
    # figure. bench/fidelity.py counts whether it tells a figure that moved from one that did not.
    out["late_ms"] = max(out["sender_late_ms"], out["timer_late_ms"])
    return out


def verdict(figure_ms: float | None, w: dict) -> dict:
    """The figure's error bar and flag: flagged when the timers' lateness in its window is material."""
    bound = max(FLOOR_MS, FRACTION * (figure_ms or 0.0))
    return {**w, "bound_ms": round(bound, 1), "flagged": w["late_ms"] > bound}


def meter_of(senders: dict[str, dict], agents: dict[str, dict], cpu: list, tasks: dict | None = None) -> dict:
    """The witnesses of one run: sender name -> its ``late``, agent node -> its ``timers_late``, CPU samples,
    the daemons' and the controller's run-queue wait samples."""
    return {"senders": {n: r.get("late", {}) for n, r in senders.items()}, "agents": agents, "cpu": cpu,
            "tasks": tasks or {}}


def run_summary(meter: dict, a: float, b: float) -> dict:
    """Over a whole run: the witnesses' worst lateness, in how many 100 ms bins any agent's timers were late,
    CPU pressure as a share of the run (%)."""
    w = window(meter, a, b)
    span = max(1e-9, (b - a) * 1000)
    late_bins = {t for r in meter.get("agents", {}).values() for t, _ms in r.get("bins", []) if a <= t < b}
    return {"sender_late_ms": w["sender_late_ms"], "timer_late_ms": w["timer_late_ms"],
            "timer_late_node": w["timer_late_node"], "late_bins": len(late_bins),
            "frr_wait_ms": w["frr_wait_ms"], "frr_wait_daemon": w["frr_wait_daemon"],
            "frr_wait_total_ms": w["frr_wait_total_ms"], "controller_wait_ms": w["controller_wait_ms"],
            "bins": int(round((b - a) / BIN_S)),
            **{k.replace("_ms", "_pct"): (round(100 * w[k] / span, 1) if w[k] is not None else None)
               for k in ("psi_some_ms", "psi_full_ms", "steal_ms")}, "backlog_drops": w["backlog_drops"]}
