"""Whether the machine is quiet enough to measure on, before a benchmark or an experiment starts.

A figure taken beside other work (a second lab, a test suite, a compiler) measures that work as much as
hpnlab. ``settle`` reads the load averages (/proc/loadavg, 1/5/15 min) and the CPU pressure
(/proc/pressure/cpu, "some" avg10/avg60: the share of time runnable tasks waited for a CPU) before the
start; the machine is busy when

- the 1-min load average exceeds ``LOAD_PER_CORE`` x the usable cores, or
- the CPU pressure's "some" avg10 exceeds ``PSI_SOME_AVG10_PCT`` % (a kernel without PSI: the load alone).

Busy, it waits (at most ``max_wait_s``, printing progress) for the machine to become quiet; still busy, it
refuses with one line (``MachineBusy``, exit 2) unless told to go on anyway (``busy_ok``, the commands'
``--busy-ok``, or ``HPNLAB_BUSY_OK=1`` in the environment), and then the record says ``busy: true``.
The record (the readings at the start and when it went on, the wait, the verdict) goes into the result's
provenance as ``machine_load``; ``provenance.collect`` adds the last one settled in this process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from hpnlab.errors import HpnlabError

PROC = Path("/proc")
# busy above this 1-min load average per usable core. The average trails a burst by minutes (a 140-node lab
# taken down left it at 1.5 on 2 cores two minutes later, the CPU pressure long back under its bound): the
# pressure says whether work waits now, the load only that a machine is plainly oversubscribed
LOAD_PER_CORE = 1.0
PSI_SOME_AVG10_PCT = 5.0  # busy above this share of the last 10 s with a task waiting for a CPU
MAX_WAIT_S = 120.0
POLL_S = 5.0
ENV = "HPNLAB_BUSY_OK"

_last: dict | None = None  # the record of the last settle() in this process (provenance.collect reads it)


class MachineBusy(HpnlabError):
    """The machine stayed busy for the whole wait: nothing was measured."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read(proc: Path = PROC, cores: int | None = None) -> dict:
    """{loadavg: [1, 5, 15 min], psi_cpu_some: {avg10, avg60} (percent) or None, cores}. A file that cannot
    be read gives None for its part."""
    load = None
    try:
        f = (proc / "loadavg").read_text().split()
        load = [float(f[0]), float(f[1]), float(f[2])]
    except (OSError, ValueError, IndexError):
        pass
    psi = None
    try:
        for line in (proc / "pressure" / "cpu").read_text().splitlines():
            kind, *fields = line.split()
            if kind == "some":
                kv = dict(x.split("=", 1) for x in fields)
                psi = {"avg10": float(kv["avg10"]), "avg60": float(kv["avg60"])}
    except (OSError, ValueError, KeyError):
        psi = None
    return {"loadavg": load, "psi_cpu_some": psi, "cores": cores or usable_cores(), "at": round(time.time(), 3)}


def busy_reason(r: dict) -> str | None:
    """Why reading ``r`` is busy (one phrase), or None when it is quiet (or nothing could be read)."""
    why = []
    if r.get("loadavg") and r["loadavg"][0] > LOAD_PER_CORE * r["cores"]:
        why.append(f"load average {r['loadavg'][0]:g} over {LOAD_PER_CORE:g} x {r['cores']} cores")
    if r.get("psi_cpu_some") and r["psi_cpu_some"]["avg10"] > PSI_SOME_AVG10_PCT:
        why.append(f"CPU pressure {r['psi_cpu_some']['avg10']:g} % (some avg10) over {PSI_SOME_AVG10_PCT:g} %")
    return "; ".join(why) or None


def busy_ok_from_env(env: dict | None = None) -> bool:
    return (os.environ if env is None else env).get(ENV, "").strip().lower() in ("1", "yes", "true")


def settle(busy_ok: bool = False, max_wait_s: float = MAX_WAIT_S, progress: Callable[[str], None] = print,
           proc: Path = PROC, cores: int | None = None, sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic, poll_s: float = POLL_S) -> dict:
    """Wait (at most ``max_wait_s``) for a quiet machine; the record for the provenance. Still busy at the
    end: MachineBusy (one line). With ``busy_ok`` (or HPNLAB_BUSY_OK=1) it does not wait: the record says
    ``busy: true`` where the machine is busy."""
    global _last
    busy_ok = busy_ok or busy_ok_from_env()
    start = read(proc, cores)
    now, t0 = start, clock()
    why = busy_reason(now)
    while why and not busy_ok and clock() - t0 < max_wait_s:  # told to go on: no wait, the record says busy
        progress(f"machine busy ({why}): waiting for it to quieten, {clock() - t0:.0f}/{max_wait_s:g} s")
        sleep(min(poll_s, max(0.0, max_wait_s - (clock() - t0))))
        now = read(proc, cores)
        why = busy_reason(now)
    rec = {"at_start": start, "when_started": now, "waited_s": round(clock() - t0, 1), "busy": bool(why),
           "busy_reason": why, "busy_ok": busy_ok,
           "thresholds": {"load_per_core": LOAD_PER_CORE, "psi_some_avg10_pct": PSI_SOME_AVG10_PCT}}
    if why and not busy_ok:
        raise MachineBusy(f"the machine is busy ({why}) after {rec['waited_s']:g} s of waiting; run it on a quiet "
                          f"machine, or add --busy-ok (or set {ENV}=1) to measure anyway, recorded as busy")
    _last = rec
    return rec


def last() -> dict | None:
    """The record of this process's last settle(), or None when none ran."""
    return _last


def add_argument(parser) -> None:
    """--busy-ok on a bench's or command's parser."""
    parser.add_argument("--busy-ok", action="store_true",
                        help=f"measure at once even on a busy machine (without it: wait up to {MAX_WAIT_S:g} s for "
                             f"it to quieten, else refuse); the result records busy: true. Also {ENV}=1")


def settle_or_exit(busy_ok: bool) -> dict:
    """For bench scripts: settle(), and on MachineBusy its one line on stderr and exit 2. With ``busy_ok`` the
    environment says so too, so the ``hpnlab run`` a bench starts measures as well (and records it)."""
    import sys

    if busy_ok:
        os.environ[ENV] = "1"
    try:
        return settle(busy_ok, progress=lambda m: print(m, file=sys.stderr, flush=True))
    except MachineBusy as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
