"""results.json, the printed summary table and the plot (training throughput and probe delivery over
time, faults shaded, variants side by side)."""

from __future__ import annotations

import statistics
from pathlib import Path

from hpnlab.instrument import lateness
from hpnlab.traffic import faults as faultkinds, workloads
from hpnlab.traffic.analysis import measure, timeline
from hpnlab.traffic.run import nodebytes
from hpnlab.traffic.output import textlayout
from hpnlab.traffic.run.experiment import Plan
from hpnlab.traffic.output.textlayout import LEGEND_HEAD, WIDTH, table, wrap  # noqa: F401  (report.WIDTH, as before)
from hpnlab.traffic.output.textlayout import block as _block

TIMELINE_EVENTS = 400  # per fault in results.json (a segment's FIB changes run to thousands)
SPLIT = ("detection_ms", "protocol_ms", "delivery_ms", "cpu_ms")
METRICS = ("longest_gap_ms", "lost_packets", "flows_affected", "blackholed_flows", "silent_at_repair_flows",
           "converged_gap_ms", "after_repair_gap_ms", "lost_after_repair", "lost_after_repair_1s",
           "recovery_after_repair_ms")
WORKLOAD_METRICS = ("throughput_pct", "longest_halt_ms", "recovery_ms", "halt_after_repair_ms", "died_ms",
                    "died_after_repair_ms")
LOAD_METRICS = ("survivors", "node_before_Bps", "node_during_Bps", "survivor_before_Bps", "survivor_during_Bps",
                "survivor_ratio_pct", "even_ratio_pct", "survivor_share_before_pct", "survivor_share_during_pct",
                "survivor_during_min_Bps", "survivor_during_max_Bps")


# --- workload ------------------------------------------------------------------------------------------------
def workload_of(plan: Plan, run_dir: Path) -> dict | None:
    return workloads.get(plan.workload.kind).result(plan, run_dir)


def rate_series(w: dict | None, t0: float, bin_s: float = 0.25) -> list[tuple[float, float]]:
    """(seconds since t0, rate): iterations/s for all-reduce, Gbit/s for iperf3."""
    return workloads.get(w["kind"]).rate_series(w, t0, bin_s) if w and w.get("kind") in workloads.REGISTRY else []


def workload_window(w: dict | None, t0: float, base_end: float, start: float, end: float) -> dict:
    """Throughput during a fault as % of the pre-fault baseline (the workload kind's own analysis)."""
    if not w or w.get("kind") not in workloads.REGISTRY:
        return {}
    return workloads.get(w["kind"]).window(w, t0, base_end, start, end)


def workload_recovery(w: dict | None, t0: float, base_end: float, repair: float | None, window_end: float) -> dict:
    """After a repair: how long until the workload ran at 90 % of its baseline again (the paper's Fig. 18a
    is about this), and its longest halt after the repair."""
    if not w or repair is None or w.get("kind") not in workloads.REGISTRY:
        return {}
    return workloads.get(w["kind"]).recovery(w, t0, base_end, repair, window_end)


# --- one repetition ------------------------------------------------------------------------------------------
def repetition_result(rep: dict, plan: Plan, streams: dict[str, list[measure.Flow]], senders: dict,
                      receivers: dict, events: list[dict], workload: dict | None, meter: dict | None = None,
                      agent_events: dict | None = None, node_bytes: dict | None = None) -> dict:
    t0, end_run = rep["t0"], rep["t0"] + rep["duration"]
    tl = rep["timeline"]
    first_fault = min((f["applied"] for f in tl), default=end_run)
    faults = []
    for k, f in enumerate(tl):
        start = f["applied"]
        stop = f.get("reverted") if f.get("until") is not None else None
        nxt = [g["applied"] for g in tl[k + 1:] if g["applied"] > start]
        window_end = min(nxt) if nxt else end_run
        allflows = [fl for v in streams.values() for fl in v]
        entry = {"fault": f["label"], "kind": f["kind"], "node": f.get("node"), "at": f["at"], "until": f["until"],
                 "applied_s": round(start - t0, 3), "reverted_s": round(f["reverted"] - t0, 3) if f.get("reverted") else None,
                 **measure.fault_metrics(allflows, start, stop, window_end),
                 "streams": {name: measure.fault_metrics(v, start, stop, window_end) for name, v in streams.items()},
                 "route_monitor": {
                     "failure": measure.route_changes(events, start, stop or window_end),
                     "repair": measure.route_changes(events, stop, window_end) if stop else {}}}
        fail = entry["route_monitor"]["failure"]
        entry["routes_first_ms"] = min((v["first_ms"] for v in fail.values()), default=None)
        entry["routes_last_ms"] = max((v["last_ms"] for v in fail.values()), default=None)
        entry["workload"] = {**workload_window(workload, t0, first_fault, start, stop or window_end),
                             **workload_recovery(workload, t0, first_fault, stop, window_end)}
        # no plan: a repetition analysed without its lab (the analysis is a pure function of its inputs)
        peers = nodebytes.peers_of(plan.cfgs, f.get("node") or "") if plan is not None else []
        if node_bytes and peers:  # the failed router's load on its peers (nodebytes.json)
            ld = nodebytes.load(node_bytes.get("readings", []), nodebytes.fault_key(f["label"], f["at"]), f["node"], peers)
            if ld:
                entry["load"] = ld
        entry["emulator"] = emulator_verdict(meter or {}, entry, start, window_end, stop,
                                             measure.converged(allflows, start, stop, window_end))
        tline = timeline.build(f, window_end, agent_events or {}, events, allflows, entry["emulator"]["late_ms"])
        entry["timeline"] = {**tline, "events": tline["events"][:TIMELINE_EVENTS],
                             "events_total": len(tline["events"])}
        faults.append(entry)
    probes = {}
    for name, v in streams.items():
        tx = senders[name]
        probes[name] = {**measure.totals(v), "reorder": measure.reordering(v), "src": tx["src"], "dst": tx["dst"],
                        "flows": tx["flows"],
                        "requested_pps": tx["requested_pps"], "achieved_pps": tx["achieved_pps"],
                        "rate_error_pct": round(100 * (tx["achieved_pps"] - tx["requested_pps"]) / tx["requested_pps"], 2),
                        "max_lag_ms": tx["max_lag_ms"], "unsent": tx.get("unsent", 0),
                        "series": measure.series(receivers[name], tx["src"], t0)}
    return {"t0": t0, "faults": faults, "probes": probes,
            "lost_before_faults": measure.unattributed_loss([fl for v in streams.values() for fl in v],
                                                            first_fault if tl else None),
            "emulator": lateness.run_summary(without_frozen(meter or {}, tl), t0, end_run),
            "workload": {**({k: v for k, v in workload.items() if k not in ("iterations", "intervals")} if workload else {}),
                         "series": rate_series(workload, t0),
                         "baseline": workload_window(workload, t0, first_fault, t0 + 0.5, first_fault)
                         if workload else {}},
            "route_events": [{**e, "t": round(e["ts"] - t0, 4)} for e in events]}


# The figures the meter judges one by one, each over its own window and against its own bound.
JUDGED = ("longest_gap_ms", "converged_gap_ms", "routes_last_ms", "recovery_after_repair_ms")


def emulator_verdict(meter: dict, entry: dict, start: float, window_end: float, stop: float | None = None,
                     conv: list | None = None) -> dict:
    """The emulator's lateness beside each of a fault's figures, over the figure's own window, against the
    figure's own bound (``lateness.verdict``): the longest gap from the fault until the last gap or route
    change it caused had ended; the converged gap until the last converged gap closed; the routes' last
    change until it; the recovery from the repair until every flow delivered again. The record's top
    level is the longest gap's (as before); ``figures`` has each one, ``flagged`` is any of them."""
    meter = without_frozen(meter, [entry])
    p = lateness.PERIOD_S
    span = max(entry["longest_gap_ms"], entry["routes_last_ms"] or 0.0) / 1000
    windows = {"longest_gap_ms": (start - p, min(window_end, start + span + p))}
    if conv:
        windows["converged_gap_ms"] = (start - p, min(window_end, max(g.end for g in conv) + p))
    if entry.get("routes_last_ms") is not None:
        windows["routes_last_ms"] = (start - p, min(window_end, start + entry["routes_last_ms"] / 1000 + p))
    if stop is not None and entry.get("recovery_after_repair_ms"):
        windows["recovery_after_repair_ms"] = (stop - p, min(window_end, stop + entry["recovery_after_repair_ms"] / 1000 + p))
    verdicts = {name: lateness.verdict(entry.get(name), lateness.window(meter, a, max(a, b)))
                for name, (a, b) in windows.items()}
    figures = {name: {k: v[k] for k in ("late_ms", "bound_ms", "flagged")} for name, v in verdicts.items()}
    return {**verdicts["longest_gap_ms"], "flagged": any(f["flagged"] for f in figures.values()),
            "flagged_figures": [n for n in JUDGED if figures.get(n, {}).get("flagged")], "figures": figures}


def without_frozen(meter: dict, faults_: list[dict]) -> dict:
    """The meter less the agents of nodes a fault stops (hang): their timers' lateness is the fault's doing,
    not the machine's."""
    frozen = {f.get("node") for f in faults_
              if f["kind"] in faultkinds.REGISTRY and faultkinds.get(f["kind"]).freezes_node}
    if not frozen or not meter.get("agents"):
        return meter
    return {**meter, "agents": {n: r for n, r in meter["agents"].items() if n not in frozen}}


# --- across repetitions --------------------------------------------------------------------------------------
# The durations read back into the fabric's time when a variant ran its timers dilated (spec time_dilation)
TIMED = ("converged_gap_ms", "longest_gap_ms", "after_repair_gap_ms", "recovery_after_repair_ms",
         "routes_first_ms", "routes_last_ms")


def in_fabric_time(summary: dict, k: int) -> dict:
    """A duration's min/median/max divided by the time dilation k: exact for the share a protocol timer
    takes (detection), k times too small for the kernel's and the daemons' own work, which runs undilated."""
    return {key: (round(v / k, 2) if key != "n" and v is not None else v) for key, v in summary.items()}


def aggregate(runs: list[dict], dilation: int = 1) -> list[dict]:
    """Per fault: n, min, median and max of every figure over the repetitions; recovered only if every run
    recovered (``recovered_runs`` says how many did). With a time dilation k > 1 each fault also has
    ``fabric_time``: its durations divided by k (``in_fabric_time`` says what that reads true for)."""
    out = []
    for k in range(max((len(r["faults"]) for r in runs), default=0)):
        rows = [r["faults"][k] for r in runs if len(r["faults"]) > k]
        e = {"fault": rows[0]["fault"], "kind": rows[0]["kind"], "at": rows[0]["at"], "until": rows[0]["until"],
             "repetitions": len(rows), "recovered": all(x["recovered"] for x in rows),
             "recovered_runs": sum(bool(x["recovered"]) for x in rows)}
        for m in METRICS + ("routes_first_ms", "routes_last_ms"):
            e[m] = measure.summarise([x.get(m) for x in rows])
        e["streams"] = {}
        for s in rows[0]["streams"]:
            e["streams"][s] = {m: measure.summarise([x["streams"][s].get(m) for x in rows]) for m in METRICS}
            e["streams"][s]["recovered"] = all(x["streams"][s]["recovered"] for x in rows)
            e["streams"][s]["recovered_runs"] = sum(bool(x["streams"][s]["recovered"]) for x in rows)
        sp = [x["timeline"]["split"] for x in rows if x.get("timeline") and x["timeline"]["split"].get("gap_ms")]
        if sp:
            e["split"] = {m: measure.summarise([x.get(m) for x in sp]) for m in ("gap_ms", "began_ms", "gap_closed_ms") + SPLIT}
        em = [x.get("emulator") for x in rows if x.get("emulator")]
        if em:
            e["emulator"] = {m: measure.summarise([x.get(m) for x in em])
                             for m in ("late_ms", "sender_late_ms", "timer_late_ms", "frr_wait_ms",
                                       "controller_wait_ms", "psi_some_ms", "steal_ms")}
            e["emulator"]["flagged"] = sum(bool(x["flagged"]) for x in em)
            e["emulator"]["judged"] = len(em)
            e["emulator"]["flagged_figures"] = {n: sum(n in (x.get("flagged_figures") or []) for x in em)
                                                for n in JUDGED if any(n in (x.get("flagged_figures") or []) for x in em)}
        loads = [x["load"] for x in rows if x.get("load")]
        if loads:
            e["load"] = {"node": loads[0]["node"],
                         **{m: measure.summarise([x.get(m) for x in loads]) for m in LOAD_METRICS}}
        if rows[0]["workload"]:
            e["workload"] = {m: measure.summarise([x["workload"].get(m) for x in rows]) for m in WORKLOAD_METRICS}
            rec = [x["workload"]["recovered"] for x in rows if "recovered" in x["workload"]]
            if rec:
                e["workload"]["recovered_runs"], e["workload"]["judged"] = sum(rec), len(rec)
                e["workload"]["dead_runs"] = sum(bool(x["workload"].get("dead")) for x in rows)
        if dilation > 1:
            e["fabric_time"] = {"time_dilation": dilation, **{m: in_fabric_time(e[m], dilation) for m in TIMED}}
        out.append(e)
    return out


def probe_rates(runs: list[dict]) -> dict:
    errs = [abs(p["rate_error_pct"]) for r in runs for p in r["probes"].values()]
    return {"max_rate_error_pct": max(errs, default=None),
            "unsent": sum(p.get("unsent", 0) for r in runs for p in r["probes"].values()),
            "requested_pps": sorted({p["requested_pps"] for r in runs for p in r["probes"].values()})}


# --- output --------------------------------------------------------------------------------------------------
def _mm(d: dict | None, unit: str = "") -> str:
    """min/median/max over the repetitions (one figure where one repetition gave it), so a stalled or
    black-holed repetition shows however the others went."""
    if not d or d.get("median") is None:
        return "-"
    if d.get("n", 0) == 1 or "min" not in d:
        return f"{d['median']:g}{unit}"
    return f"{d['min']:g}/{d['median']:g}/{d['max']:g}{unit}"


def _runs(ok: int, n: int) -> str:
    return "yes" if ok == n else f"NO {n - ok}/{n}"


# summary.txt's columns and the results.json key (of variants.<v>.faults[]) each shows; docs/results.md
# explains every one (tests/test_docs.py keeps the two in step).
COLUMNS = [("variant", None), ("fault", "fault"), ("stream", "streams"), ("n", "repetitions"),
           ("converged ms", "converged_gap_ms"), ("black-holed", "blackholed_flows"),
           ("silent at repair", "silent_at_repair_flows"), ("longest gap ms", "longest_gap_ms"),
           ("lost", "lost_packets"), ("flows hit", "flows_affected"), ("routes ms", "routes_last_ms"),
           ("recovery ms", "recovery_after_repair_ms"), ("lost after repair", "lost_after_repair"),
           ("recovered", "recovered"), ("workload %", "workload.throughput_pct"),
           ("workload back ms", "workload.recovery_ms"), ("emulator late ms", "emulator.late_ms"),
           ("flagged", "emulator.flagged")]


def _fault_row(f: dict, m: dict, vname: str, stream: str, n: int) -> list[str]:
    """One row: the fault's figures over every stream (``m`` is ``f``) or one stream's."""
    top = m is f
    wl, em = (f.get("workload") or {}) if top else {}, f.get("emulator") if top else None
    ok = m.get("recovered_runs", n if m["recovered"] else 0)
    back = _mm(wl.get("recovery_ms"))
    dead = wl.get("dead_runs", 0)  # a dead job is not "not back yet": it has nothing left to come back
    if back != "-" and wl.get("judged") and wl.get("recovered_runs", 0) + dead < wl["judged"]:
        back += f" (not back in {wl['judged'] - wl['recovered_runs'] - dead})"
    if dead:
        back = f"DEAD {dead}/{wl['judged']}" + ("" if back == "-" else f", {back}")
    return [vname if top else "", f["fault"] if top else "", stream, str(n) if top else "",
            _mm(m["converged_gap_ms"]), _mm(m["blackholed_flows"]), _mm(m.get("silent_at_repair_flows")),
            _mm(m["longest_gap_ms"]), _mm(m["lost_packets"]), _mm(m["flows_affected"]),
            _mm(f["routes_last_ms"]) if top else "", _mm(m.get("recovery_after_repair_ms")),
            _mm(m.get("lost_after_repair")), _runs(ok, n), _mm(wl.get("throughput_pct")) if top else "",
            back if top else "", _mm(em["late_ms"]) if em else ("-" if top else ""),
            ((f"{em['flagged']}/{em['judged']}" + (" FLAG " + ",".join(SHORT[n] for n in em.get("flagged_figures", {}))
                                                    if em["flagged"] else "")).rstrip() if em else "-") if top else ""]


SHORT = {"longest_gap_ms": "gap", "converged_gap_ms": "converged", "routes_last_ms": "routes",
         "recovery_after_repair_ms": "recovery"}


# One line per column, at the end of summary.txt (docs/results.md says more about each).
LEGEND: dict[str, str] = {
    "variant": "the experiment file's variant (a block's title)",
    "fault": "the fault as the timeline applied it (a block's title)",
    "stream": "a column: all (every probe stream together) or one probe stream",
    "n": "how many repetitions the block's figures are over",
    "converged ms": "longest gap closed before the repair ('no gap closed': gaps lasted until it)",
    "black-holed": "flows silent from the fault's first effect until the repair",
    "silent at repair": "flows silent when the fault was repaired, however late they went silent",
    "longest gap ms": "the longest of the fault's gaps, whichever kind",
    "lost": "probe packets lost in the fault's gaps",
    "flows hit": "flows (source ports) with at least one gap of the fault's",
    "routes ms": "when the last router changed a route after the fault (the route monitors)",
    "recovery ms": "from the repair until every flow delivered again",
    "lost after repair": "the fault's packets sent after the repair and lost",
    "recovered": "yes, or NO k/n: in k of n a gap stayed open or late packets were lost",
    "workload %": "the workload's throughput during the fault, % of its baseline before the fault",
    "workload back ms": "from the repair until the workload ran at 90 % of its baseline (DEAD k/n: died)",
    "emulator late ms": "how late the emulator itself was in the fault's window (the lateness meter)",
    "flagged": "repetitions (of n) in which a figure's lateness mattered; FLAG names which",
}
FAULT_ONLY = ("routes ms", "workload %", "workload back ms", "emulator late ms", "flagged")  # the 'all' column only


def _one(d: dict | None, unit: str = "") -> str:
    """As _mm, but one figure where every repetition gave the same."""
    if d and d.get("median") is not None and d.get("min") == d.get("median") == d.get("max"):
        return f"{d['median']:g}{unit}"
    return _mm(d, unit)


def _converged(m: dict) -> str:
    """The converged gap; 'no gap closed' where every repetition had gaps and none closed before the repair
    (the stream was black-holed, or its gaps were open until the repair): 0 would read as 'no outage'."""
    c, g = m.get("converged_gap_ms"), m.get("longest_gap_ms")
    if c and g and c.get("max") == 0 and (g.get("min") or 0) > 0:
        return "no gap closed"
    return _one(c)


def _cells(f: dict, m: dict, n: int) -> dict[str, str]:
    """One column of a block: the fault's figures over every stream (``m`` is ``f``) or one stream's."""
    top = m is f
    ok = m.get("recovered_runs", n if m["recovered"] else 0)
    out = {"converged ms": _converged(m), "black-holed": _one(m["blackholed_flows"]),
           "silent at repair": _one(m.get("silent_at_repair_flows")), "longest gap ms": _one(m["longest_gap_ms"]),
           "lost": _one(m["lost_packets"]), "flows hit": _one(m["flows_affected"]),
           "recovery ms": _one(m.get("recovery_after_repair_ms")), "lost after repair": _one(m.get("lost_after_repair")),
           "recovered": _runs(ok, n)}
    if not top:
        return out
    wl, em = f.get("workload") or {}, f.get("emulator")
    back = _one(wl.get("recovery_ms"))
    dead = wl.get("dead_runs", 0)  # a dead job is not "not back yet": it has nothing left to come back
    if back != "-" and wl.get("judged") and wl.get("recovered_runs", 0) + dead < wl["judged"]:
        back += f" (not back in {wl['judged'] - wl['recovered_runs'] - dead})"
    if dead:
        back = f"DEAD {dead}/{wl['judged']}" + ("" if back == "-" else f", {back}")
    flagged = "-"
    if em:
        flagged = (f"{em['flagged']}/{em['judged']}" + (" FLAG " + ",".join(SHORT[k] for k in em.get("flagged_figures", {}))
                                                       if em["flagged"] else "")).rstrip()
    out.update({"routes ms": _one(f["routes_last_ms"]), "workload %": _one(wl.get("throughput_pct")),
                "workload back ms": back, "emulator late ms": _one(em["late_ms"]) if em else "-", "flagged": flagged})
    return out


def legend_lines(headers: list[str] | None = None, legend: dict[str, str] | None = None,
                 page: str = "docs/results.md") -> list[str]:
    """The one-line legend of every column or figure name (``legend``: the failover table's by default), for
    the end of summary.txt (laid out by hpnlab.traffic.output.textlayout)."""
    legend = LEGEND if legend is None else legend
    return textlayout.legend_lines(headers or list(legend), legend, page)


def summary_table(results: dict) -> str:
    durs = sorted({v["duration"] for v in results["variants"].values() if v.get("duration")})
    each = f"{durs[0]:g}-{durs[-1]:g} s (each variant's)" if len(durs) > 1 else f"{results['duration']:g} s"
    lines = [f"experiment {results['experiment']}: {results['repetitions']} repetition(s) x {each}",
             "each figure is min/median/max over the n repetitions, one figure where they agree (or n is 1)"]
    rows = [c for c, _key in COLUMNS if c not in ("variant", "fault", "stream", "n")]
    errors: list[str] = []
    for vname, v in results["variants"].items():
        if v.get("error"):
            lines += ["", f"{vname}: FAILED (see below)"]
            errors.append(f"{vname}: {v['error']}")
        for f in v["faults"]:
            n = f.get("repetitions", results["repetitions"])
            lines += ["", f"{vname} / {f['fault']} / n {n}"]
            cols = [("all", _cells(f, f, n))] + [(s, _cells(f, m, n)) for s, m in f["streams"].items()]
            lines += _block(cols, rows)
        if not v["faults"]:
            lost = sum(p["lost"] for r in v["runs"] for p in r["probes"].values())
            lines += ["", f"{vname} / (no fault) / n {len(v['runs'])}: lost {lost} probe packets"]
    lines += [""] + [f"FAILED {e}" for e in errors]
    before = [(vname, k + 1, r["lost_before_faults"]) for vname, v in results["variants"].items()
              for k, r in enumerate(v.get("runs", [])) if r.get("lost_before_faults")]
    if before:
        lines.append("lost before the first fault (no fault's): " + ", ".join(
            f"{vn} repetition {k}: {n} packets" for vn, k, n in before))
    pr = results.get("probe_rate", {})
    if pr.get("max_rate_error_pct") is not None:
        lines.append(f"probe senders: worst deviation from the requested rate {pr['max_rate_error_pct']:g} %"
                     + (f"; {pr['unsent']} packets never sent (a sender more than 1 s behind its schedule at its "
                        f"window's end stops: the receivers had stopped listening)" if pr.get("unsent") else ""))
    lines += death_lines(results)
    lines += emulator_lines(results)
    lines += dilation_lines(results)
    lines += split_lines(results)
    lines += load_lines(results)
    return "\n".join(wrap(lines))


def dilation_lines(results: dict) -> list[str]:
    """Per variant that ran its timers k times slower: each fault's durations read back in the fabric's time."""
    out = []
    for vname, v in results["variants"].items():
        for f in v.get("faults", []):
            ft = f.get("fabric_time")
            if not ft:
                continue
            k = ft["time_dilation"]
            out.append(f"{vname} {f['fault']}: every protocol timer x {k} (time_dilation); in the fabric's time "
                       f"(/ {k}) converged gap {_mm(ft['converged_gap_ms'], ' ms')}, routes last "
                       f"{_mm(ft['routes_last_ms'], ' ms')}: exact for a timer's share (detection), {k}x too "
                       f"small for the kernel's and the daemons' own work, which is not dilated"
                       + _dilated_parts(f.get("dilation")))
    return out


def _dilated_parts(d: dict | None) -> str:
    """'; detection by bfd (3000 ms in force): dilated; protocol, delivery: not' (hpnlab.model.dilation)."""
    if not d or not d.get("detector"):
        return ""
    bound = f" ({d['detection_bound_ms']:g} ms in force)" if d.get("detection_bound_ms") else ""
    dil = d["dilated"]
    return (f"; detection by {d['detector']}{bound}: {'dilated' if dil['detection_ms'] else 'not dilated'}; "
            f"protocol, delivery: not dilated")


def load_lines(results: dict) -> list[str]:
    """The failed router's load on its peers (nodebytes), per fault that has it: bytes/s per survivor in
    the second before the fault and the second before its repair, and their shares beside the even split."""
    out = []
    for vname, v in results["variants"].items():
        for f in v.get("faults", []):
            ld = f.get("load")
            if not ld:
                continue
            kb = {k: _mm({m: (round(x / 1000, 1) if isinstance(x, (int, float)) and m != "n" else x)
                          for m, x in ld[k].items()})
                  for k in ("node_before_Bps", "node_during_Bps", "survivor_before_Bps", "survivor_during_Bps")}
            out.append(f"load {vname} / {f['fault']}: {ld['node']} {kb['node_before_Bps']} -> {kb['node_during_Bps']} "
                       f"kB/s; per survivor ({_mm(ld['survivors'])}) {kb['survivor_before_Bps']} -> "
                       f"{kb['survivor_during_Bps']} kB/s = {_mm(ld['survivor_ratio_pct'])} % (even split "
                       f"{_mm(ld['even_ratio_pct'])} %); a survivor's share {_mm(ld['survivor_share_before_pct'])} -> "
                       f"{_mm(ld['survivor_share_during_pct'])} % (before -> during the fault, min/median/max)")
    return out


def death_lines(results: dict) -> list[str]:
    """One line per variant whose workload has a collective timeout: in how many repetitions the job died,
    which rank aborted first and when (s since traffic start, and ms after the fault it died in)."""
    out = []
    for vname, v in results["variants"].items():
        runs = [r for r in v.get("runs", []) if r.get("workload", {}).get("timeout_s") is not None]
        if not runs:
            continue
        said = []
        for k, r in enumerate(runs):
            d = r["workload"].get("died")
            if not d:
                said.append(f"{k + 1} ran to the end")
                continue
            inf = [f for f in r["faults"] if f.get("workload", {}).get("died_ms") is not None]
            rep = [f for f in r["faults"] if (f.get("workload", {}).get("died_after_repair_ms") is not None
                                              and f["workload"]["died_after_repair_ms"] >= 0)]
            said.append(f"{k + 1} died at {d['at'] - r['t0']:.2f} s (rank {d['rank']} blocked {d['blocked_s']:g} s"
                        + (f", {inf[0]['workload']['died_ms']:g} ms after {inf[0]['fault']}" if inf else
                           f", {rep[0]['workload']['died_after_repair_ms']:g} ms after the repair of {rep[0]['fault']}"
                           if rep else "") + ")")
        dead = sum(bool(r["workload"].get("died")) for r in runs)
        out.append(f"workload {vname}: collective timeout {runs[0]['workload']['timeout_s']:g} s, the job died in "
                   f"{dead} of {len(runs)} repetitions; repetition " + "; ".join(said))
    return out


def split_lines(results: dict) -> list[str]:
    """Where each converged gap's milliseconds went (the timeline's split, min/median/max over repetitions;
    the parts of one repetition add up, their medians need not)."""
    out = []
    for vname, v in results["variants"].items():
        for f in v.get("faults", []):
            sp = f.get("split")
            if not sp:
                continue
            mm = {k: _mm(sp.get(k)) for k in ("gap_ms", "began_ms", "gap_closed_ms") + SPLIT}
            n = (sp.get("gap_ms") or {}).get("n", 1)
            out.append(f"timeline {vname} / {f['fault']} ({n} of {f.get('repetitions', n)} repetitions converged): "
                       f"longest converged gap {mm['gap_ms']} ms, closed {mm['gap_closed_ms']} ms after it began = "
                       f"detection {mm['detection_ms']} + protocol {mm['protocol_ms']} + delivery "
                       f"{mm['delivery_ms']} ms; waiting for CPU at most {mm['cpu_ms']} ms of it (min/median/max)")
    return out


def emulator_lines(results: dict) -> list[str]:
    """The meter's run-wide figures and the rule, under the table."""
    runs = [r["emulator"] for v in results["variants"].values() for r in v.get("runs", []) if r.get("emulator")]
    if not runs:
        return []
    worst = max(runs, key=lambda e: max(e["sender_late_ms"], e["timer_late_ms"]))
    psi = [e["psi_some_pct"] for e in runs if e.get("psi_some_pct") is not None]
    steal = [e["steal_pct"] for e in runs if e.get("steal_pct") is not None]
    frr = [e for e in runs if e.get("frr_wait_ms") is not None]
    wfrr = max(frr, key=lambda e: e["frr_wait_ms"]) if frr else None
    ctl = [e["controller_wait_ms"] for e in runs if e.get("controller_wait_ms") is not None]
    return [f"emulator: worst lateness in any run {max(worst['sender_late_ms'], worst['timer_late_ms']):g} ms "
            f"(senders {worst['sender_late_ms']:g}, agents' timers {worst['timer_late_ms']:g}"
            + (f" on {worst['timer_late_node']}" if worst.get("timer_late_node") else "") + ")"
            + (f"; an FRR daemon's run-queue wait over a whole run up to {wfrr['frr_wait_ms']:g} ms "
               f"({wfrr['frr_wait_daemon']}), the controller's up to {max(ctl, default=0):g} ms" if wfrr else "")
            + (f"; CPU pressure (PSI some) {min(psi):g}-{max(psi):g} % of each run" if psi else "")
            + (f", steal {max(steal):g} %" if steal else ""),
            f"a figure is flagged when, in its own window, an agent's timer or a probe sender was late by more than "
            f"{lateness.FRACTION:.0%} of that figure or {lateness.FLOOR_MS:g} ms (docs/results.md; the daemons' "
            f"run-queue wait is beside it, in results.json); FLAG names the figures: gap, converged, routes, recovery"]


def plot(results: dict, path: Path) -> Path | None:
    """One panel per variant: the workload's throughput (% of its baseline) of every repetition, one line
    each, and each probe stream's delivery (% of its sending rate) as the median over the repetitions with
    their min-max band; faults shaded (as applied in repetition 1)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    variants = [(n, v) for n, v in results["variants"].items() if v.get("runs")]
    if not variants:
        return None
    dur = results["duration"]
    nbins = max(1, int(round((dur - 0.1) / BIN_S)))  # the last 100 ms: the senders stop, not the fabric
    xs = [(k + 0.5) * BIN_S for k in range(nbins)]
    fig, axes = plt.subplots(len(variants), 1, figsize=(12.5, 2.9 * len(variants)), sharex=True, squeeze=False)
    for ax, (name, v) in zip(axes[:, 0], variants):
        runs = v["runs"]
        shades = ["black", "dimgrey", "darkgrey", "saddlebrown", "olive", "teal"]
        for k, run in enumerate(runs):
            wl = run["workload"]
            base = (wl.get("baseline") or {}).get("baseline_rate") or (wl.get("baseline") or {}).get("baseline_gbps")
            if wl.get("series") and base:
                wx, wy = zip(*wl["series"])
                label = workloads.get(wl["kind"]).series_label
                ax.plot(wx, [100 * y / base for y in wy], color=shades[k % len(shades)], lw=1.6 if k == 0 else 1.1,
                        ls=("-", "--", ":", "-.")[k % 4], label=f"{label}, repetition {k + 1} (% of baseline)")
            if wl.get("died"):  # the collective timeout killed the job: a cross where it died, at 0 %
                ax.plot([wl["died"]["at"] - run["t0"]], [0], marker="X", ms=9, ls="none", color=shades[k % len(shades)],
                        label=f"repetition {k + 1}: job died (rank {wl['died']['rank']}, timeout "
                              f"{wl['timeout_s']:g} s)")
        with_series = [r for r in runs if any(p.get("series") is not None for p in r["probes"].values())]
        for sname in (runs[0]["probes"] if runs else {}):
            per_run = []
            for r in with_series:
                p = r["probes"].get(sname)
                if not p or p.get("series") is None:
                    continue
                grid = _grid([pt for pt in p["series"] if pt[0] < dur - 0.1], BIN_S, nbins)
                per_run.append([100 * y / p["requested_pps"] for y in grid])
            if not per_run:
                continue
            cols = list(zip(*per_run))
            med = [statistics.median(c) for c in cols]
            n = len(per_run)
            if all(y == 0 for y in med) and all(max(c) == 0 for c in cols):
                label = f"probe {sname}: nothing delivered"
            else:
                label = f"probe {sname} (% delivered, " + (f"median of {n}, band min-max)" if n > 1 else "1 run)")
            line, = ax.plot(xs, med, lw=1, alpha=0.9, label=label)
            if n > 1:
                ax.fill_between(xs, [min(c) for c in cols], [max(c) for c in cols], color=line.get_color(),
                                alpha=0.18, lw=0)
        for f in runs[0]["faults"]:
            a = f["applied_s"]
            b = f["reverted_s"] if f["reverted_s"] is not None else dur
            ax.axvspan(a, b, color="tab:red", alpha=0.12)
            ax.text(a, 103, f["fault"], fontsize=7, color="tab:red", va="bottom")
        ax.set_ylim(-5, 125)
        ax.set_xlim(0, dur)
        ax.set_ylabel(f"% per {BIN_S * 1000:g} ms")
        reps = len(runs)
        shown = (f" ({reps} repetitions, every one drawn)" if len(with_series) == reps else
                 f" ({reps} repetitions; probes of {len(with_series)} drawn, the others kept no series)")
        ax.set_title(f"{name}: {v.get('description', '')}"[:100] + (shown if reps > 1 else " (1 repetition)"),
                     fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # off the data
    axes[-1, 0].set_xlabel(f"seconds since traffic start (bins of {BIN_S * 1000:g} ms; shaded: fault active)")
    fig.suptitle(f"hpnlab experiment {results['experiment']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


BIN_S = 0.1  # the plot's bin width


def _grid(series: list, width: float, nbins: int) -> list[float]:
    """A receiver's (t, packets/s) bins summed into ``nbins`` bins of ``width`` from 0 (packets/s each; 0
    where nothing arrived)."""
    from hpnlab.node.programs.probe import BIN_MS

    step = BIN_MS / 1000  # the receiver's bins: rate * step = packets
    out = [0.0] * nbins
    for t, r in series:
        k = int(t / width + 1e-6)  # a bin's own start time, not the one before it, despite float rounding
        if 0 <= k < nbins:
            out[k] += r * step / width
    return out
