"""results.json, the printed summary table and the plot (training throughput and probe delivery over
time, faults shaded, variants side by side)."""

from __future__ import annotations

from pathlib import Path

from hpnlab import lateness
from hpnlab.traffic import faults as faultkinds, measure, timeline, workloads
from hpnlab.traffic.experiment import Plan

TIMELINE_EVENTS = 400  # per fault in results.json (a segment's FIB changes run to thousands)
SPLIT = ("detection_ms", "protocol_ms", "delivery_ms", "cpu_ms")
METRICS = ("longest_gap_ms", "lost_packets", "flows_affected", "blackholed_flows", "converged_gap_ms",
           "lost_after_repair_1s", "recovery_after_repair_ms")


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


# --- one repetition ------------------------------------------------------------------------------------------
def repetition_result(rep: dict, plan: Plan, streams: dict[str, list[measure.Flow]], senders: dict,
                      receivers: dict, events: list[dict], workload: dict | None, meter: dict | None = None,
                      agent_events: dict | None = None) -> dict:
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
        entry["workload"] = workload_window(workload, t0, first_fault, start, stop or window_end)
        entry["emulator"] = emulator_verdict(meter or {}, entry, start, window_end)
        tline = timeline.build(f, window_end, agent_events or {}, events, allflows, entry["emulator"]["late_ms"])
        entry["timeline"] = {**tline, "events": tline["events"][:TIMELINE_EVENTS],
                             "events_total": len(tline["events"])}
        faults.append(entry)
    probes = {}
    for name, v in streams.items():
        tx = senders[name]
        probes[name] = {**measure.totals(v), "src": tx["src"], "dst": tx["dst"], "flows": tx["flows"],
                        "requested_pps": tx["requested_pps"], "achieved_pps": tx["achieved_pps"],
                        "rate_error_pct": round(100 * (tx["achieved_pps"] - tx["requested_pps"]) / tx["requested_pps"], 2),
                        "max_lag_ms": tx["max_lag_ms"], "unsent": tx.get("unsent", 0),
                        "series": measure.series(receivers[name], tx["src"], t0)}
    return {"t0": t0, "faults": faults, "probes": probes,
            "emulator": lateness.run_summary(without_frozen(meter or {}, tl), t0, end_run),
            "workload": {**({k: v for k, v in workload.items() if k not in ("iterations", "intervals")} if workload else {}),
                         "series": rate_series(workload, t0),
                         "baseline": workload_window(workload, t0, first_fault, t0 + 0.5, first_fault)
                         if workload else {}},
            "route_events": [{**e, "t": round(e["ts"] - t0, 4)} for e in events]}


def emulator_verdict(meter: dict, entry: dict, start: float, window_end: float) -> dict:
    """The emulator's lateness beside a fault's headline figure (the longest gap), over the figure's own
    window: from the fault until the last gap or route change it caused had ended (at most the next fault)."""
    span = max(entry["longest_gap_ms"], entry["routes_last_ms"] or 0.0) / 1000
    b = min(window_end, start + span + lateness.PERIOD_S)
    return lateness.verdict(entry["longest_gap_ms"],
                            lateness.window(without_frozen(meter, [entry]), start - lateness.PERIOD_S, b))


def without_frozen(meter: dict, faults_: list[dict]) -> dict:
    """The meter less the agents of nodes a fault stops (hang): their timers' lateness is the fault's doing,
    not the machine's."""
    frozen = {f.get("node") for f in faults_
              if f["kind"] in faultkinds.REGISTRY and faultkinds.get(f["kind"]).freezes_node}
    if not frozen or not meter.get("agents"):
        return meter
    return {**meter, "agents": {n: r for n, r in meter["agents"].items() if n not in frozen}}


# --- across repetitions --------------------------------------------------------------------------------------
def aggregate(runs: list[dict]) -> list[dict]:
    """Per fault: median and max of every figure over the repetitions; recovered only if every run recovered."""
    out = []
    for k in range(max((len(r["faults"]) for r in runs), default=0)):
        rows = [r["faults"][k] for r in runs if len(r["faults"]) > k]
        e = {"fault": rows[0]["fault"], "kind": rows[0]["kind"], "at": rows[0]["at"], "until": rows[0]["until"],
             "repetitions": len(rows), "recovered": all(x["recovered"] for x in rows)}
        for m in METRICS + ("routes_first_ms", "routes_last_ms"):
            e[m] = measure.summarise([x[m] for x in rows])
        e["streams"] = {}
        for s in rows[0]["streams"]:
            e["streams"][s] = {m: measure.summarise([x["streams"][s][m] for x in rows]) for m in METRICS}
            e["streams"][s]["recovered"] = all(x["streams"][s]["recovered"] for x in rows)
        sp = [x["timeline"]["split"] for x in rows if x.get("timeline") and x["timeline"]["split"].get("gap_ms")]
        if sp:
            e["split"] = {m: measure.summarise([x.get(m) for x in sp]) for m in ("gap_ms", "began_ms", "gap_closed_ms") + SPLIT}
        em = [x.get("emulator") for x in rows if x.get("emulator")]
        if em:
            e["emulator"] = {m: measure.summarise([x.get(m) for x in em])
                             for m in ("late_ms", "sender_late_ms", "timer_late_ms", "psi_some_ms", "steal_ms")}
            e["emulator"]["flagged"] = sum(bool(x["flagged"]) for x in em)
            e["emulator"]["judged"] = len(em)
        if rows[0]["workload"]:
            e["workload"] = {m: measure.summarise([x["workload"].get(m) for x in rows])
                             for m in ("throughput_pct", "longest_halt_ms")}
        out.append(e)
    return out


def probe_rates(runs: list[dict]) -> dict:
    errs = [abs(p["rate_error_pct"]) for r in runs for p in r["probes"].values()]
    return {"max_rate_error_pct": max(errs, default=None),
            "unsent": sum(p.get("unsent", 0) for r in runs for p in r["probes"].values()),
            "requested_pps": sorted({p["requested_pps"] for r in runs for p in r["probes"].values()})}


# --- output --------------------------------------------------------------------------------------------------
def _mm(d: dict | None, unit: str = "") -> str:
    if not d or d.get("median") is None:
        return "-"
    return f"{d['median']:g}/{d['max']:g}{unit}"


# summary.txt's columns and the results.json key (of variants.<v>.faults[]) each shows; docs/results.md
# explains every one (tests/test_docs.py keeps the two in step).
COLUMNS = [("variant", None), ("fault", "fault"), ("stream", "streams"), ("longest gap ms", "longest_gap_ms"),
           ("lost", "lost_packets"), ("flows hit", "flows_affected"), ("black-holed", "blackholed_flows"),
           ("converged ms", "converged_gap_ms"), ("routes ms", "routes_last_ms"),
           ("lost >1s after", "lost_after_repair_1s"), ("recovered", "recovered"),
           ("workload %", "workload.throughput_pct"), ("emulator late ms", "emulator.late_ms"),
           ("flagged", "emulator.flagged")]


def summary_table(results: dict) -> str:
    lines = [f"experiment {results['experiment']}: {results['repetitions']} repetition(s) x "
             f"{results['duration']:g} s; figures are median/max over repetitions"]
    hdr = [c for c, _key in COLUMNS]
    rows: list[list[str]] = []
    errors: list[str] = []
    for vname, v in results["variants"].items():
        if v.get("error"):
            rows.append([vname, "FAILED", "(see below)"] + [""] * (len(hdr) - 3))
            errors.append(f"{vname}: {v['error']}")
        for f in v["faults"]:
            wl = _mm(f.get("workload", {}).get("throughput_pct"))
            em = f.get("emulator")
            rows.append([vname, f["fault"], "all", _mm(f["longest_gap_ms"]), _mm(f["lost_packets"]),
                         _mm(f["flows_affected"]), _mm(f["blackholed_flows"]), _mm(f["converged_gap_ms"]),
                         _mm(f["routes_last_ms"]), _mm(f["lost_after_repair_1s"]), "yes" if f["recovered"] else "NO", wl,
                         _mm(em["late_ms"]) if em else "-",
                         (f"{em['flagged']}/{em['judged']}" + (" FLAG" if em["flagged"] else "")) if em else "-"])
            for s, m in f["streams"].items():
                rows.append(["", "", s, _mm(m["longest_gap_ms"]), _mm(m["lost_packets"]), _mm(m["flows_affected"]),
                             _mm(m["blackholed_flows"]), _mm(m["converged_gap_ms"]), "",
                             _mm(m["lost_after_repair_1s"]), "yes" if m["recovered"] else "NO", "", "", ""])
        if not v["faults"]:
            rows.append([vname, "(no fault)", "all", "", str(sum(p["lost"] for r in v["runs"] for p in r["probes"].values())),
                         "", "", "", "", "", "", "", "", ""])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(hdr)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(hdr, widths)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines += [f"FAILED {e}" for e in errors]
    pr = results.get("probe_rate", {})
    if pr.get("max_rate_error_pct") is not None:
        lines.append(f"probe senders: worst deviation from the requested rate {pr['max_rate_error_pct']:g} %"
                     + (f"; {pr['unsent']} packets never sent (a sender more than 1 s behind its schedule at its "
                        f"window's end stops: the receivers had stopped listening)" if pr.get("unsent") else ""))
    lines += emulator_lines(results)
    lines += split_lines(results)
    return "\n".join(lines)


def split_lines(results: dict) -> list[str]:
    """Where each converged gap's milliseconds went (the timeline's split, median over repetitions)."""
    out = []
    for vname, v in results["variants"].items():
        for f in v.get("faults", []):
            sp = f.get("split")
            if not sp:
                continue
            med = {k: (sp[k]["median"] if sp.get(k) else None) for k in ("gap_ms", "began_ms", "gap_closed_ms") + SPLIT}
            out.append(f"timeline {vname} / {f['fault']}: longest converged gap {med['gap_ms']} ms, closed "
                       f"{med['gap_closed_ms']} ms after it began = detection {med['detection_ms']} + protocol "
                       f"{med['protocol_ms']} + delivery {med['delivery_ms']} ms; waiting for CPU at most "
                       f"{med['cpu_ms']} ms of it (medians)")
    return out


def emulator_lines(results: dict) -> list[str]:
    """The meter's run-wide figures and the rule, under the table."""
    runs = [r["emulator"] for v in results["variants"].values() for r in v.get("runs", []) if r.get("emulator")]
    if not runs:
        return []
    worst = max(runs, key=lambda e: max(e["sender_late_ms"], e["timer_late_ms"]))
    psi = [e["psi_some_pct"] for e in runs if e.get("psi_some_pct") is not None]
    steal = [e["steal_pct"] for e in runs if e.get("steal_pct") is not None]
    return [f"emulator: worst lateness in any run {max(worst['sender_late_ms'], worst['timer_late_ms']):g} ms "
            f"(senders {worst['sender_late_ms']:g}, agents' timers {worst['timer_late_ms']:g}"
            + (f" on {worst['timer_late_node']}" if worst.get("timer_late_node") else "") + ")"
            + (f"; CPU pressure (PSI some) {min(psi):g}-{max(psi):g} % of each run" if psi else "")
            + (f", steal {max(steal):g} %" if steal else "")
            + f"; a figure is flagged when its window's lateness exceeds {lateness.FRACTION:.0%} of it "
              f"or {lateness.FLOOR_MS:g} ms (docs/results.md)"]


def plot(results: dict, path: Path) -> Path | None:
    """One panel per variant: workload throughput (% of its baseline) and per-stream probe delivery
    (% of the sent rate) over time, from the first repetition; faults shaded."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    variants = [(n, v) for n, v in results["variants"].items() if v.get("runs")]
    if not variants:
        return None
    fig, axes = plt.subplots(len(variants), 1, figsize=(12.5, 2.7 * len(variants)), sharex=True, squeeze=False)
    for ax, (name, v) in zip(axes[:, 0], variants):
        run = v["runs"][0]
        wl = run["workload"]
        base = (wl.get("baseline") or {}).get("baseline_rate") or (wl.get("baseline") or {}).get("baseline_gbps")
        if wl.get("series") and base:
            xs, ys = zip(*wl["series"])
            label = workloads.get(wl["kind"]).series_label
            ax.plot(xs, [100 * y / base for y in ys], color="black", lw=1.8, label=f"{label} (% of baseline)")
        for sname, p in run["probes"].items():
            per_bin = p["requested_pps"]
            xs, ys = _rebin([pt for pt in p["series"] if pt[0] < results["duration"] - 0.1], BIN_S)
            if not xs:  # nothing delivered: a flat line at 0, never left out of the picture
                xs, ys = [0.0, results["duration"]], [0.0, 0.0]
                label = f"probe {sname}: nothing delivered"
            else:
                label = f"probe {sname} (% delivered)"
            ax.plot(xs, [100 * y / per_bin for y in ys], lw=1, alpha=0.8, label=label)
        for f in run["faults"]:
            a = f["applied_s"]
            b = f["reverted_s"] if f["reverted_s"] is not None else results["duration"]
            ax.axvspan(a, b, color="tab:red", alpha=0.12)
            ax.text(a, 103, f["fault"], fontsize=7, color="tab:red", va="bottom")
        ax.set_ylim(-5, 125)
        ax.set_xlim(0, results["duration"])
        ax.set_ylabel(f"% per {BIN_S * 1000:g} ms")
        reps = len(v["runs"])
        shown = f" (repetition 1 of {reps}; summary.txt has all {reps})" if reps > 1 else ""
        ax.set_title(f"{name}: {v.get('description', '')}"[:100] + shown, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # off the data
    axes[-1, 0].set_xlabel(f"seconds since traffic start (bins of {BIN_S * 1000:g} ms; shaded: fault active)")
    fig.suptitle(f"hpnlab experiment {results['experiment']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


BIN_S = 0.1  # the plot's bin width


def _rebin(series: list, width: float) -> tuple[list[float], list[float]]:
    bins: dict[int, float] = {}
    if not series:
        return [], []
    from hpnlab.node.probe import BIN_MS

    step = BIN_MS / 1000  # the receiver's bins: rate * step = packets
    for t, r in series:
        k = int(t / width)
        bins[k] = bins.get(k, 0.0) + r * step
    lo, hi = min(bins), max(bins)
    xs = [(k + 0.5) * width for k in range(lo, hi + 1)]
    return xs, [bins.get(k, 0.0) / width for k in range(lo, hi + 1)]
