"""Per-fault figures of gray failures (pure): when the black-box prober suspected and confirmed a link, and
which, when the isolator took it out, whether the control plane (BFD, micro-BFD, LACP, BGP) reacted at
all, and the training rate before, during, after the isolation and after the repair. Defined in
docs/results.md (gray figures); ``tests/test_gray_figures.py`` checks them against synthetic traces.

A repetition's inputs: its fault timeline (run.json), its already computed per-fault entries (their
timeline events and workload window), the prober's record of the repetition (``prober.json``, written by
hpnlab.traffic.run.graywatch; absent where the variant runs no prober) and the workload's iterations.

Windows are the outage analysis's own (docs/results.md, definition 2): a fault's window runs from its
application to the next fault's application or the run's end. An event of the prober's belongs to the
fault in whose window it falls, whatever link it names: the prober judges a window of the past (5 s, once
1 s old), so a suspicion just after a repair is still that fault's.
"""

from __future__ import annotations

from hpnlab.traffic.output import report

GRAY = ("silent-loss", "bursty-loss", "corrupt", "silent-corrupt")
# what counts as the control plane noticing (hpnlab.traffic.analysis.timeline kinds): a micro-BFD or LACP state
# change on an agent, or any router's FIB change (BFD on a BGP session takes the session and its routes down)
CONTROL = ("micro-bfd", "lacp", "fib")
# an isolation's own events (the port's LACP detaching, the ToR's routes) come before the isolator's log
# entry, which is written once the link-down or BGP shutdown has returned: up to this long on a loaded
# 2-core machine (17-30 ms measured, the controller waiting for CPU for seconds per run); a log entry with
# ``begun`` (when the action began) is cut there instead
APPLY_S = 1.0
TIMES = ("detect_s", "localise_s", "isolate_s", "control_plane_s")
RATES = ("baseline_rate", "during_pct", "isolated_pct", "after_pct")
OVERHEAD = ("paths", "probes_per_s", "probe_bytes_per_s", "node_cpu_s_per_s", "judge_cpu_s_per_s")


def fault_link(cfgs: dict, node: str | None, iface: str | None) -> str | None:
    """The directed link a gray fault on node:iface hits ('s0r0a>agg0-0'); None without one peer."""
    if node not in cfgs or not iface or "," in iface:
        return None
    ifc = cfgs[node].iface(iface)
    return f"{node}>{ifc.peer}" if ifc is not None and ifc.peer in cfgs else None


def _windows(tl: list[dict], end_run: float) -> list[tuple[float, float]]:
    out = []
    for k, f in enumerate(tl):
        nxt = [g["applied"] for g in tl[k + 1:] if g["applied"] > f["applied"]]
        out.append((f["applied"], min(nxt) if nxt else end_run))
    return out


def _after(t0: float, xs: list[dict], key: str = "t") -> float | None:
    return round(xs[0][key] - t0, 2) if xs else None


def fault_figures(f: dict, start: float, end: float, truth: str | None, events: list[dict],
                  log: list[dict] | None, timeline_events: list[dict], prober: bool) -> dict:
    """One fault's figures (seconds from its application). ``events``: the prober's (t, event, link);
    ``log``: the isolator's (t, action, link) or None without isolation; ``timeline_events``: the fault's
    timeline (t_ms from its application, kind)."""
    mine = [e for e in events if start <= e["t"] < end]
    conf = [e for e in mine if e["event"] == "confirmed"]
    iso = [x for x in (log or []) if start <= x["t"] < end and x["action"].startswith("isolated")]
    refused = [x for x in (log or []) if start <= x["t"] < end and x["action"] == "refused"]
    repair = f.get("reverted") if f.get("until") is not None else None
    # the control plane's own reaction: before the repair and before an isolation (whose link-down or
    # BGP shutdown changes LACP and routes itself)
    began = iso[0].get("begun", iso[0]["t"] - APPLY_S) if iso else None
    cut = min([x for x in (repair, began) if x is not None], default=end)
    ctl = [e for e in timeline_events if e.get("kind") in CONTROL and 0 <= e["t_ms"] / 1000 < cut - start]
    out = {"link": truth, "control_plane_s": round(ctl[0]["t_ms"] / 1000, 2) if ctl else None,
           "control_plane_events": len(ctl)}
    if not prober:
        return out
    return {**out, "detect_s": _after(start, mine), "localise_s": _after(start, conf),
            "localised_link": conf[0]["link"] if conf else None,
            "right_link": (conf[0]["link"] == truth) if conf and truth else None,
            "named": sorted({e["link"] for e in mine}),
            "wrong_confirmed": len({e["link"] for e in conf if e["link"] != truth}),
            **({"isolate_s": _after(start, iso), "isolated_link": iso[0]["link"] if iso else None,
                "isolations": len(iso), "refused": len(refused)} if log is not None else {})}


def add_to_run(res: dict, rep: dict, gray: dict, workload: dict | None, cfgs: dict) -> None:
    """Adds ``gray`` to each of a repetition's fault entries (where the fault is gray or the prober ran) and,
    with the prober, ``prober`` to the repetition: its overhead and its false positives (confirmations
    of a link other than the one at fault in its window, or outside every fault's window)."""
    tl, t0 = rep["timeline"], rep["t0"]
    prober = bool(gray)
    if not prober and not any(f["kind"] in GRAY for f in tl):
        return
    events, log = gray.get("events") or [], gray.get("isolation")
    wins = _windows(tl, t0 + rep["duration"])
    first = min((f["applied"] for f in tl), default=t0 + rep["duration"])
    false_pos = 0
    for f, entry, (start, end) in zip(tl, res["faults"], wins):
        truth = fault_link(cfgs, f.get("node"), f.get("iface")) if f["kind"] in GRAY else None
        g = fault_figures(f, start, end, truth, events, log, (entry.get("timeline") or {}).get("events") or [],
                          prober)
        wl = entry.get("workload") or {}
        repair = f.get("reverted") if f.get("until") is not None else None
        g["baseline_rate"] = wl.get("baseline_rate")
        g["during_pct"] = wl.get("throughput_pct")
        iso_t = start + g["isolate_s"] if g.get("isolate_s") is not None else None
        if workload and iso_t is not None and iso_t < (repair or end):
            g["isolated_pct"] = report.workload_window(workload, t0, first, iso_t, repair or end).get("throughput_pct")
        if workload and repair is not None and repair < end:
            g["after_pct"] = report.workload_window(workload, t0, first, repair, end).get("throughput_pct")
        entry["gray"] = g
        false_pos += g.get("wrong_confirmed", 0)
    if prober:
        outside = [e for e in events if e["event"] == "confirmed"
                   and not any(a <= e["t"] < b for a, b in wins)]
        res["prober"] = {**(gray.get("report") or {}), "false_positives": false_pos + len(outside),
                         "confirmed_outside_faults": len(outside)}


def summarise(values: list, places: int = 2) -> dict:
    """n, min, median and max (None left out), the median kept to ``places`` decimals: the outage
    analysis's rounds it to one, too coarse for a CPU share of 0.007 s/s."""
    xs = sorted(x for x in values if x is not None)
    if not xs:
        return {"n": 0, "min": None, "median": None, "max": None}
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {"n": len(xs), "min": xs[0], "median": round(med, places), "max": xs[-1]}


def aggregate_into(v: dict) -> None:
    """A variant's ``faults[k].gray`` over its repetitions (n/min/median/max of each time and rate; counts of
    the repetitions that detected, confirmed the right link, isolated) and ``prober`` overhead."""
    runs = v.get("runs") or []
    for k, agg in enumerate(v.get("faults") or []):
        rows = [r["faults"][k]["gray"] for r in runs if len(r["faults"]) > k and "gray" in r["faults"][k]]
        if not rows:
            continue
        g: dict = {"link": rows[0]["link"], "runs": len(rows)}
        for m in TIMES + RATES:
            g[m] = summarise([x.get(m) for x in rows], 2 if m in TIMES else 1)
        g["control_plane_runs"] = sum(x.get("control_plane_s") is not None for x in rows)
        if "detect_s" in rows[0]:
            g["detected_runs"] = sum(x["detect_s"] is not None for x in rows)
            g["localised_runs"] = sum(x["localise_s"] is not None for x in rows)
            g["right_link_runs"] = sum(bool(x["right_link"]) for x in rows)
            g["wrong_confirmed"] = sum(x["wrong_confirmed"] for x in rows)
            g["named"] = sorted({lk for x in rows for lk in x["named"]})
        if "isolate_s" in rows[0]:
            g["isolated_runs"] = sum(x["isolate_s"] is not None for x in rows)
            g["isolated_links"] = sorted({x["isolated_link"] for x in rows if x["isolated_link"]})
            g["refused"] = sum(x["refused"] for x in rows)
        agg["gray"] = g
    reps = [r["prober"] for r in runs if r.get("prober")]
    if reps:
        v["prober_runs"] = {**{m: summarise([x.get(m) for x in reps], 4) for m in OVERHEAD},
                            "false_positives": sum(x["false_positives"] for x in reps),
                            "confirmed_outside_faults": sum(x["confirmed_outside_faults"] for x in reps)}


def _mm(d: dict | None, unit: str = "") -> str:
    if not d or d.get("median") is None:
        return "-"
    if d["n"] == 1 or d["min"] == d["max"]:
        return f"{d['min']}{unit}"
    return f"{d['min']}/{d['median']}/{d['max']}{unit}"


def summary_lines(results: dict) -> list[str]:
    """summary.txt's lines under the table: per variant and gray fault, the prober's times (min/median/max
    over the repetitions that had one, and in how many) and the training rate; then its overhead."""
    out = []
    for name, v in results.get("variants", {}).items():
        for f in v.get("faults") or []:
            g = f.get("gray")
            if not g:
                continue
            n = g["runs"]
            parts = [f"control plane reacted {g['control_plane_runs']}/{n}"]
            if "detected_runs" in g:
                parts += [f"suspected {g['detected_runs']}/{n} ({_mm(g['detect_s'], ' s')})",
                          f"confirmed {g['localised_runs']}/{n} ({_mm(g['localise_s'], ' s')}), "
                          f"right link {g['right_link_runs']}/{n}, other links confirmed {g['wrong_confirmed']}"]
            if "isolated_runs" in g:
                parts.append(f"isolated {g['isolated_runs']}/{n} ({_mm(g['isolate_s'], ' s')}), refused {g['refused']}")
            parts.append(f"training {_mm(g['baseline_rate'], ' it/s')} before, {_mm(g['during_pct'], ' %')} during"
                         + (f", {_mm(g['isolated_pct'], ' %')} isolated" if g["isolated_pct"]["n"] else "")
                         + f", {_mm(g['after_pct'], ' %')} after the repair")
            out.append(f"gray {name} / {f['fault']}: " + "; ".join(parts))
        p = v.get("prober_runs")
        if p:
            out.append(f"prober {name}: {_mm(p['paths'])} paths, {_mm(p['probes_per_s'])} probes/s, node programs "
                       f"{_mm(p['node_cpu_s_per_s'])} CPU s/s, judge {_mm(p['judge_cpu_s_per_s'])}; false positives "
                       f"{p['false_positives']} ({p['confirmed_outside_faults']} outside every fault's window)")
    return out
