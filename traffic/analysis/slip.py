"""The slip guard: did a run's protocol timers slip past a detection time, without any fault?

Two witnesses per repetition:
- the longest interval between a stream's packets (hpnlab.node.slip: a port's received LACPDUs, a BFD
  session's packets each way as its ToR sees them on the wire, a micro-BFD session's), the maximum over the
  run, not a percentile, judged against the detection time in force (BFD's and micro-BFD's interval x
  multiplier, LACP's timeout: dilated). Streams a planned fault touches (its node's, its link's, and those to
  a node it stops or powers off) are the fault's silence and are left out;
- FRR's own warnings that a daemon ran late, counted from its logs, less those of a node a fault stops
  (its timers pop late when it resumes) (FRR 8.4's lib/thread.c: "Thread
  Starvation: ... was scheduled to pop greater than 4s ago", a timer that fired over 4 s late; "STARVATION:
  task ... ran for" and "CPU HOG: task ... ran for", a task past the 5 s wall-time or CPU-time threshold).

A run is flagged when a stream's longest interval reached its detection time (that silence alone makes a
detector declare its peer down), or when FRR logged a timer 4 s late while the lab's smallest FRR detection
time in force (BFD's, else BGP's hold) is 4 s or less: the same kind of verdict as the lateness meter's on
a late sender (hpnlab.instrument.lateness). Pure, apart from ``frr_offsets``/``frr_warnings``, which read the logs.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from hpnlab.model import dilation
from hpnlab.traffic import faults as faultkinds
from hpnlab.traffic.analysis import measure

# FRR 8.4's warnings of a daemon running late (lib/thread.c), matched after the log line's timestamp
FRR_LATE = re.compile(r"(Thread Starvation: .*|STARVATION: .*|CPU HOG: .*)")
FRR_TIMER_LATE_S = 4.0  # "Thread Starvation": a timer popped more than this late
FRR_STAMP = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?) ")
DAEMONS = ("bgpd", "bfdd", "zebra", "staticd")
KINDS = ("bfd", "micro-bfd", "lacp")
STOPPING = ("hang", "power-off")  # faults that silence every stream of their node and to it


def frr_logs(files: dict[str, Path]) -> dict[str, Path]:
    """The FRR daemons' logs among a lab's (``<node>.<daemon>.log``)."""
    return {n: p for n, p in files.items() if n.removesuffix(".log").rsplit(".", 1)[-1] in DAEMONS}


def frr_offsets(files: dict[str, Path]) -> dict[str, int]:
    """Each FRR log's size now: a run counts only what its daemons log after it."""
    out = {}
    for name, p in frr_logs(files).items():
        try:
            out[name] = p.stat().st_size
        except OSError:
            out[name] = 0
    return out


def frr_warnings(files: dict[str, Path], offsets: dict[str, int]) -> dict[str, list]:
    """log name -> [[epoch s or None, warning]] logged since ``offsets``."""
    out: dict[str, list] = {}
    for name, p in frr_logs(files).items():
        try:
            with open(p, "rb") as f:
                f.seek(offsets.get(name, 0))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        hits = [[_stamp(line), m.group(1)] for line in text.splitlines() for m in [FRR_LATE.search(line)] if m]
        if hits:
            out[name] = hits
    return out


def _stamp(line: str) -> float | None:
    m = FRR_STAMP.match(line)
    if not m:
        return None
    whole, _, frac = m.group(1).partition(".")
    try:  # FRR stamps its log in the machine's local time
        return time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + (float(f"0.{frac}") if frac else 0.0)
    except ValueError:
        return None


def touched(faults: list, cfgs: dict) -> set[tuple[str, str | None]]:
    """(node, iface) ends whose streams a planned fault silences; (node, None): every stream of the node."""
    out: set[tuple[str, str | None]] = set()
    for f in faults:
        cfg = cfgs.get(f.node)
        if f.kind in STOPPING or not f.ifaces:
            out.add((f.node, None))
            for i in cfg.interfaces if cfg is not None else []:
                out.add((i.peer, i.peer_iface))
            continue
        for ifc in f.ifaces:
            out.add((f.node, ifc))
            i = cfg.iface(ifc) if cfg is not None else None
            if i is not None:
                out.add((i.peer, i.peer_iface))
    return out


def bounds_ms(spec) -> dict[str, float | None]:
    """Each stream kind's detection time in force (ms), None where that detector is off."""
    return {kind: dilation.bound_ms(kind, spec) for kind in KINDS}


def _kind(stream: str) -> tuple[str, str]:
    kind, rest = stream.split(" ", 1)
    return kind, rest.split(" ", 1)[0]


def of_run(gaps: dict[str, dict], warnings: dict[str, list], window: tuple[float, float], faults: list,
           cfgs: dict, spec) -> dict:
    """One repetition's verdict. ``gaps``: node -> its agent's ``packet_gaps``; ``window``: the run's
    (start, end) in epoch s; ``faults``: the planned faults (hpnlab.traffic.faults.Fault)."""
    start, end = window
    skip = touched(faults, cfgs)
    bounds = bounds_ms(spec)
    out: dict = {}
    for kind in KINDS:
        watched, longest, where = 0, None, None
        for node, rec in gaps.items():
            for stream in rec.get("threshold_ms", {}):
                k, ifc = _kind(stream)
                if k != kind or (node, None) in skip or (node, ifc) in skip:
                    continue
                watched += 1
            for t, ms, stream in rec.get("long", []) + rec.get("open", []):
                k, ifc = _kind(stream)
                if k != kind or (node, None) in skip or (node, ifc) in skip:
                    continue
                if t < start or t - ms / 1000 > end:  # the interval lies outside the run
                    continue
                if longest is None or ms > longest:
                    longest, where = ms, f"{node} {stream}"
        if watched:
            threshold = min((v for rec in gaps.values() for s, v in rec.get("threshold_ms", {}).items()
                             if _kind(s)[0] == kind), default=None)
            bound = bounds[kind]
            out[kind] = {"streams": watched, "longest_ms": longest, "stream": where, "bound_ms": bound,
                         # none at or above the threshold: every interval was shorter than it
                         "below_ms": threshold if longest is None else None,
                         "slipped": bool(bound is not None and longest is not None and longest >= bound)}
    # a node a fault stops (hang): its daemons' timers pop late when it resumes, the fault's doing
    frozen = {f.node for f in faults if f.kind in faultkinds.REGISTRY and faultkinds.get(f.kind).freezes_node}
    late = [[name, t, w] for name, hits in warnings.items() if name.rsplit(".", 2)[0] not in frozen
            for t, w in hits if t is None or start <= t <= end]
    timers_late = sum(1 for _n, _t, w in late if w.startswith("Thread Starvation"))
    frr_bound = bounds["bfd"] if bounds["bfd"] is not None else spec.dilated().bgp.hold * 1000.0
    out["frr"] = {"warnings": len(late), "timers_4s_late": timers_late, "first": late[:5],
                  "slipped": timers_late > 0 and frr_bound <= FRR_TIMER_LATE_S * 1000}
    flagged_by = [k for k in (*KINDS, "frr") if out.get(k, {}).get("slipped")]
    return {**out, "flagged": bool(flagged_by), "flagged_by": flagged_by}


def aggregate(runs: list[dict]) -> dict | None:
    """Over a variant's repetitions: per stream kind the longest interval's min/median/max and its bound,
    FRR's warnings, and how many runs were flagged (None: no run has the guard's record)."""
    recs = [r["slip"] for r in runs if r.get("slip")]
    if not recs:
        return None
    out: dict = {"judged": len(recs), "flagged": sum(bool(x["flagged"]) for x in recs),
                 "flagged_by": {k: sum(k in x["flagged_by"] for x in recs) for k in (*KINDS, "frr")
                                if any(k in x["flagged_by"] for x in recs)}}
    for kind in KINDS:
        rows = [x[kind] for x in recs if kind in x]
        if rows:
            out[kind] = {"longest_ms": measure.summarise([x["longest_ms"] for x in rows]),
                         "bound_ms": rows[0]["bound_ms"], "slipped_runs": sum(bool(x["slipped"]) for x in rows)}
    out["frr_warnings"] = measure.summarise([x["frr"]["warnings"] for x in recs])
    return out


def summary_lines(results: dict) -> list[str]:
    """One line per variant with the guard's record."""
    out = []
    for vname, v in results["variants"].items():
        s = v.get("slip")
        if not s:
            continue
        parts = []
        for kind in KINDS:
            k = s.get(kind)
            if k:
                mx = k["longest_ms"].get("max")
                bound = "no detection" if k["bound_ms"] is None else f"{k['bound_ms']:g} ms detection"
                parts.append(f"{kind} longest {'-' if mx is None else f'{mx:g}'} ms of {bound}")
        fw = s["frr_warnings"].get("max")
        parts.append(f"FRR's late-thread warnings up to {fw:g} a run" if fw else "no FRR late-thread warning")
        flag = f"flagged {s['flagged']}/{s['judged']}" + (
            " (" + ", ".join(f"{k} {n}" for k, n in s["flagged_by"].items()) + ")" if s["flagged"] else "")
        out.append(f"slip guard {vname}: " + "; ".join(parts) + f" (the worst run); {flag}")
    return out
