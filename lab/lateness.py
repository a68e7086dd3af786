"""The lateness meter: how late the emulator itself was while a figure was measured, and the verdict
that goes beside the figure.

Three witnesses, all on the one wall clock every namespace shares:
- the probe senders: how late each send went out against its schedule (``late`` in a sender's report);
- the agents: how late their LACP, micro-BFD, stacking and hold-down timers fired (``timers_late`` in
  each agent's status file; hpnlab.node.lateness keeps both);
- the machine: CPU pressure (PSI, /proc/pressure/cpu "some" and "full", cumulative microseconds of
  wall-clock time during which at least one / every runnable task waited for a CPU) and steal time
  (/proc/stat), sampled by ``CpuSampler`` every 100 ms while a run lasts.

Verdict (``verdict``): a figure is flagged when the emulator's timers were late, inside the figure's own
window, by more than ``FRACTION`` of the figure or ``FLOOR_MS``, whichever is larger. Timer lateness, not
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


class CpuSampler:
    """Samples ``read_cpu`` every ``PERIOD_S`` on a thread (``with CpuSampler() as s``); ``samples`` after.
    Its cost: two small /proc reads per 100 ms (``bench/fidelity.py`` measures it)."""

    def __init__(self, period: float = PERIOD_S) -> None:
        self.period = period
        self.samples: list[tuple] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpnlab-cpu-sampler", daemon=True)

    def _loop(self) -> None:
        while True:
            self.samples.append(read_cpu())
            if self._stop.wait(self.period):
                self.samples.append(read_cpu())
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
                                    "samples": self.samples}))


def load_cpu(path: Path) -> list[list]:
    try:
        return json.loads(path.read_text())["samples"]
    except (OSError, ValueError, KeyError):
        return []


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
           **cpu_window(meter.get("cpu", []), a, b)}
    out["late_ms"] = max(out["sender_late_ms"], out["timer_late_ms"])
    return out


def verdict(figure_ms: float | None, w: dict) -> dict:
    """The figure's error bar and flag: flagged when the timers' lateness in its window is material."""
    bound = max(FLOOR_MS, FRACTION * (figure_ms or 0.0))
    return {**w, "bound_ms": round(bound, 1), "flagged": w["late_ms"] > bound}


def meter_of(senders: dict[str, dict], agents: dict[str, dict], cpu: list) -> dict:
    """The witnesses of one run: sender name -> its ``late``, agent node -> its ``timers_late``, CPU samples."""
    return {"senders": {n: r.get("late", {}) for n, r in senders.items()}, "agents": agents, "cpu": cpu}


def run_summary(meter: dict, a: float, b: float) -> dict:
    """Over a whole run: the witnesses' worst lateness, in how many 100 ms bins any agent's timers were late,
    CPU pressure as a share of the run (%)."""
    w = window(meter, a, b)
    span = max(1e-9, (b - a) * 1000)
    late_bins = {t for r in meter.get("agents", {}).values() for t, _ms in r.get("bins", []) if a <= t < b}
    return {"sender_late_ms": w["sender_late_ms"], "timer_late_ms": w["timer_late_ms"],
            "timer_late_node": w["timer_late_node"], "late_bins": len(late_bins),
            "bins": int(round((b - a) / BIN_S)),
            **{k.replace("_ms", "_pct"): (round(100 * w[k] / span, 1) if w[k] is not None else None)
               for k in ("psi_some_ms", "psi_full_ms", "steal_ms")}, "backlog_drops": w["backlog_drops"]}
