"""report.html: one self-contained, interactive page of an experiment's results, made from its results.json.

Everything the page shows is in the file: the data as JSON, the charts' library (uPlot, hpnlab.web's vendored
copy) and the page's own script and style inlined, so it opens from a file, offline, with nothing fetched.
Its parts: summary.txt's blocks (each figure's legend line, ``report.LEGEND``, on its name), per
variant the probes' delivery and the workload's rate over time for every repetition (faults shaded), the
convergence timeline of each fault with its critical path, a replay of the fabric (the variant's lab drawn
by ``hpnlab.generate.picture``, its links and nodes coloured as they were at an instant of a repetition, beside the
flows' delivery then), the lateness meter's verdicts and the provenance.

Series are re-binned to at most ``MAX_POINTS`` points (what a screen shows), so even the largest results
make a report of a few MB. Pure: ``render`` is a function of results.json (and, for the replay's picture,
of the experiment file it names); ``write`` puts it beside results.json.
"""

from __future__ import annotations

import json
import math
import re
import time
from html import escape
from importlib import resources
from pathlib import Path

from hpnlab import web
from hpnlab.errors import SpecError
from hpnlab.traffic import faults as faultkinds, workloads
from hpnlab.traffic.output import outputs, report, summarytext
from hpnlab.traffic.analysis import timeline

MAX_POINTS = 2000  # per series: bins of 10 ms (the receivers' own) up to 20 s, wider for longer runs
MIN_BIN_S = 0.01
TAIL_S = 0.1  # the senders stop in the last 100 ms, not the fabric (as plot.png)
WHAT_CHARS = 160  # an event's text in the page (a segment's FIB change lists 60 nexthops; results.json has it whole)
ROUTE_CHANGES = 2000  # per repetition, for the replay's route counts (a segment's FIB changes run to thousands)
NAME = outputs.REPORT

# The replay's states (the page's legend names them; tests read DOWN back from the page)
UP, DOWN, IMPAIRED, SHAPED = "up", "down", "impaired", "shaped"
COLOURS = {DOWN: "#d50000", IMPAIRED: "#ff9800", SHAPED: "#8e24aa"}
NODE_STATES = {"power-off": "off", "hang": "hung", "dataplane-dead": "dead"}
SHAPING = {"degrade"}
DOWNING = {"link-down", "link-flap", "peer-link-down", "power-off"}


def is_experiment(results: dict) -> bool:
    """Whether a results.json is an experiment's (hpnlab run), not a bench's."""
    return isinstance(results.get("variants"), dict) and "experiment" in results


# --- series ----------------------------------------------------------------------------------------------------
def bin_width(duration: float) -> float:
    """The delivery charts' bin: the receivers' 10 ms, or wider so a series has at most MAX_POINTS points."""
    steps = math.ceil((duration - TAIL_S) / MIN_BIN_S / MAX_POINTS - 1e-9)
    return round(MIN_BIN_S * max(1, steps), 3)


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def delivery(run: dict, duration: float, width: float) -> dict[str, list[float] | None]:
    """Per probe stream of one repetition: % of its sending rate delivered in each bin (None: no series kept)."""
    nbins = max(1, int(round((duration - TAIL_S) / width)))
    out: dict[str, list[float] | None] = {}
    for name, p in run.get("probes", {}).items():
        if p.get("series") is None or not p.get("requested_pps"):
            out[name] = None
            continue
        grid = report._grid(p["series"], width, nbins)
        out[name] = [round(100 * y / p["requested_pps"], 1) for y in grid]
    return out


def workload_series(run: dict) -> dict | None:
    """The workload's rate of one repetition: % of its pre-fault baseline where it has one, else its own unit."""
    wl = run.get("workload") or {}
    pts = wl.get("series") or []
    if not pts:
        return None
    base = (wl.get("baseline") or {}).get("baseline_rate") or (wl.get("baseline") or {}).get("baseline_gbps")
    kind = workloads.REGISTRY.get(wl.get("kind", ""))
    label = (kind.series_label if kind else "") or f"{wl.get('kind', 'workload')} rate"
    step = max(1, math.ceil(len(pts) / MAX_POINTS))
    pts = pts[::step]
    return {"label": label, "pct": bool(base), "x": [_r(t, 3) for t, _y in pts],
            "y": [_r(100 * y / base if base else y, 1) for _t, y in pts],
            "died": _r(wl["died"]["at"] - run["t0"], 3) if wl.get("died") else None}


# --- the fabric and its replay ---------------------------------------------------------------------------------
def variant_topology(results: dict, vname: str, source: Path | None):
    """The variant's topology, rebuilt from the experiment file results.json names (its path, else the shipped
    experiment of that name): (topology, None), or (None, why not)."""
    from hpnlab.model import topology
    from hpnlab.traffic.run import experiment

    cands = [Path(results.get("file") or "")]
    if source is not None and not cands[0].is_absolute():
        cands.append(source.parent / cands[0])
    cands += [experiment.find(results.get("experiment", "")), experiment.find(cands[0].name)]
    path = next((c for c in cands if str(c) not in ("", ".") and c.is_file()), None)
    if path is None:
        return None, f"the experiment file {results.get('file')} is not here, so its lab cannot be drawn"
    try:
        exp = experiment.load(path, [vname], duration=results.get("duration"))
        return topology.build(exp.plans[0].spec), None
    except (SpecError, OSError, ValueError, KeyError) as e:  # the file changed since the run, or a spec is gone
        return None, f"the lab cannot be rebuilt from {path.name}: {e}"


def _ends(topo) -> dict[str, str]:
    """node:iface -> the picture's link id, for both ends of every link."""
    from hpnlab.generate.picture import link_id

    out = {}
    for lk in topo.links:
        lid = link_id(lk)
        out[f"{lk.a.node}:{lk.a.iface}"] = out[f"{lk.b.node}:{lk.b.iface}"] = lid
    return out


def _planned(v: dict, f: dict) -> dict:
    """The experiment file's entry of a fault a repetition applied (its interfaces, flap period and count)."""
    for p in v.get("faults_planned") or []:
        if p.get("kind") == f["kind"] and p.get("node") == f.get("node") and p.get("at") == f.get("at"):
            return p
    return {}


def injected(v: dict, run: dict, topo, duration: float) -> list[tuple[float, str, str, str]]:
    """What each fault of one repetition did, as (s since t0, "link"|"node", id, state) changes: from its
    application to its repair (a flap's downs and ups from its period and count)."""
    ends = _ends(topo)
    out: list[tuple[float, str, str, str]] = []
    for f in run.get("faults", []):
        a = f["applied_s"]
        b = f["reverted_s"] if f.get("reverted_s") is not None else duration
        kind, node = f["kind"], f.get("node")
        p = _planned(v, f)
        ifaces = [i for i in (p.get("iface") or "").split(",") if i]
        if kind == "power-off":
            ifaces = [e.split(":", 1)[1] for e in ends if e.split(":", 1)[0] == node]
        if node and kind in NODE_STATES:
            out += [(a, "node", node, NODE_STATES[kind]), (b, "node", node, UP)]
        state = DOWN if kind in DOWNING else SHAPED if kind in SHAPING else IMPAIRED
        if kind in NODE_STATES and kind != "power-off":
            continue  # the node's links stay up: its state is the node's
        for ifc in ifaces:
            lid = ends.get(f"{node}:{ifc}")
            if lid is None:
                continue
            if kind == "link-flap" and p.get("period") and p.get("count"):
                per = float(p["period"])
                for k in range(int(p["count"])):
                    d = a + k * per
                    if d >= b:
                        break
                    out += [(d, "link", lid, DOWN), (min(b, d + per / 2), "link", lid, UP)]
            else:
                out += [(a, "link", lid, state), (b, "link", lid, UP)]
    return out


CARRIER = re.compile(r"^(\S+): carrier (up|down)")
MUX = re.compile(r"^(\S+): mux \S+ -> (\S+)")
HOST_ROUTE = re.compile(r"host route \S+ .*\b(added|withdrawn)$")


def observed(run: dict, topo) -> list[tuple[float, str, str, str]]:
    """What the nodes' agents saw on their links (the faults' timelines): carrier down/up at either end of a
    link, an LACP member leaving collecting-distributing, as (s since t0, "carrier"|"lacp", end, state)."""
    ends = _ends(topo)
    out = []
    for f in run.get("faults", []):
        tl = f.get("timeline") or {}
        base = tl.get("applied", run["t0"]) - run["t0"]
        for e in tl.get("events", []):
            t = base + e["t_ms"] / 1000
            m = CARRIER.match(e["what"])
            if m and f"{e['node']}:{m.group(1)}" in ends:
                out.append((t, "carrier", f"{e['node']}:{m.group(1)}", DOWN if m.group(2) == "down" else UP))
            m = MUX.match(e["what"])
            if m and f"{e['node']}:{m.group(1)}" in ends:
                out.append((t, "lacp", f"{e['node']}:{m.group(1)}",
                            UP if m.group(2) == "collecting_distributing" else IMPAIRED))
    return out


RANK = {UP: 0, SHAPED: 1, IMPAIRED: 2, DOWN: 3}


def link_changes(v: dict, run: dict, topo, duration: float) -> tuple[list[list], list[list]]:
    """One repetition's replay: every link's and node's state over time, the injected faults and what the
    agents observed resolved into one state each (the worst: down, then impaired, then shaped), as
    [t, id, state] changes in time order (links, nodes)."""
    ends = _ends(topo)
    per_link: dict[str, list[tuple[float, str, str, str]]] = {}
    nodes: list[list] = []
    for t, what, ident, state in sorted(injected(v, run, topo, duration)):
        if what == "node":
            nodes.append([round(t, 3), ident, state])
        else:
            per_link.setdefault(ident, []).append((t, "fault", ident, state))
    for t, what, end, state in observed(run, topo):
        per_link.setdefault(ends[end], []).append((t, what, end, state))
    links: list[list] = []
    for lid, changes in per_link.items():
        cur: dict[tuple[str, str], str] = {}
        shown = UP
        for t, what, key, state in sorted(changes, key=lambda c: c[0]):
            cur[(what, key)] = state
            now = max(cur.values(), key=lambda s: RANK[s])
            if now != shown:
                links.append([round(t, 3), lid, now])
                shown = now
    return sorted(links, key=lambda c: c[0]), nodes


def route_counts(run: dict) -> list[list]:
    """Per router over one repetition: how many prefixes it had withdrawn from its FIB (and not yet
    re-added) and how many FIB changes it had made, as [t, node, withdrawn, changes] (the first ROUTE_CHANGES)."""
    gone: dict[str, set[str]] = {}
    changes: dict[str, int] = {}
    out: list[list] = []
    for e in sorted(run.get("route_events", []), key=lambda e: e["t"])[:ROUTE_CHANGES]:
        s = gone.setdefault(e["node"], set())
        (s.add if e["event"] == "del" else s.discard)(e["prefix"])
        changes[e["node"]] = changes.get(e["node"], 0) + 1
        out.append([round(e["t"], 3), e["node"], len(s), changes[e["node"]]])
    return out


# --- the page's data ---------------------------------------------------------------------------------------------
def _fault_entry(v: dict, f: dict) -> dict:
    p = _planned(v, f)
    return {"label": f["fault"], "kind": f["kind"], "node": f.get("node"), "iface": p.get("iface"),
            "a": f["applied_s"], "b": f.get("reverted_s")}


def _timeline(f: dict) -> dict | None:
    tl = f.get("timeline")
    if not tl:
        return None
    sp = tl.get("split") or {}
    return {"fault": tl.get("fault", f["fault"]), "reverted_ms": tl.get("reverted_ms"),
            "events": [[e["t_ms"], e["node"], e["kind"], _what(e["what"])] for e in tl.get("events", [])],
            "events_total": tl.get("events_total", len(tl.get("events", []))),
            "split": {k: sp.get(k) for k in ("gap_ms", "began_ms", "gap_closed_ms", "detection_ms", "protocol_ms",
                                             "delivery_ms", "cpu_ms", "detected_by", "last_change", "why")},
            "path": [[e["t_ms"], e["node"], e["kind"], _what(e["what"])] for e in sp.get("path", [])]}


def _what(text: str) -> str:
    return text if len(text) <= WHAT_CHARS else text[:WHAT_CHARS - 1] + "…"


def _lateness(f: dict) -> dict | None:
    em = f.get("emulator")
    if not em:
        return None
    return {"late_ms": em.get("late_ms"), "bound_ms": em.get("bound_ms"), "flagged": em.get("flagged"),
            "figures": em.get("figures") or {}}


def variant_data(results: dict, vname: str, v: dict, source: Path | None) -> dict:
    dur = v.get("duration") or results["duration"]  # a variant may run its own window (results.json says so)
    width = bin_width(dur)
    runs = v.get("runs") or []
    topo, why = variant_topology(results, vname, source) if runs else (None, "no finished repetition")
    picture = None
    if topo is not None:
        from hpnlab.generate.picture import DETAIL_LIMIT, fabric_svg

        picture = fabric_svg(topo)
        if len(topo.links) > DETAIL_LIMIT:
            why = (f"{len(topo.links)} links: the picture is a summary, so the replay lists the events without "
                   f"colouring links")
    reps = []
    for k, run in enumerate(runs):
        links, nodes = link_changes(v, run, topo, dur) if topo is not None else ([], [])
        reps.append({"rep": k + 1,
                     "faults": [_fault_entry(v, f) for f in run.get("faults", [])],
                     "delivery": delivery(run, dur, width),
                     "workload": workload_series(run),
                     "timelines": [_timeline(f) for f in run.get("faults", [])],
                     "lateness": [_lateness(f) for f in run.get("faults", [])],
                     "emulator": run.get("emulator") or {},
                     "links": links, "nodes": nodes, "routes": route_counts(run)})
    return {"name": vname, "description": v.get("description", ""), "error": v.get("error"), "duration": dur,
            "workload": v.get("workload"), "lab": v.get("lab"), "bin_s": width,
            "streams": list((runs[0].get("probes") or {}) if runs else []),
            "requested_pps": {s: p.get("requested_pps") for s, p in ((runs[0].get("probes") or {}) if runs else {}).items()},
            "runs": reps, "picture": picture, "replay_note": why}


def summary(results: dict) -> dict:
    """summary.txt's blocks, one per variant and fault (its figures down, its streams across, each cell as
    summary.txt prints it) with each figure's legend line (``report.LEGEND``) and results.json key, and
    summary.txt's whole text; a workload with its own table (``own_report``): summary.txt's text only."""
    kind = _own(results)
    try:
        text = summarytext.summary(results)
    except (KeyError, TypeError, ValueError) as e:  # a result older than its kind's table
        text = f"(summary.txt cannot be made from this results.json: {e!r})"
    if kind is not None:
        return {"figures": [], "blocks": [], "text": text, "own": True}
    keys = dict(report.COLUMNS)
    figures = [c for c, _key in report.COLUMNS if c not in ("variant", "fault", "stream", "n")]
    blocks: list[dict] = []
    for vname, v in results["variants"].items():
        if v.get("error"):
            blocks.append({"variant": vname, "error": v["error"]})
        for f in v.get("faults", []):
            n = f.get("repetitions", results["repetitions"])
            cols = [("all", report._cells(f, f, n))] + [(s, report._cells(f, m, n)) for s, m in f["streams"].items()]
            blocks.append({"variant": vname, "fault": f["fault"], "n": n, "streams": [c for c, _ in cols],
                           "cells": {fig: [cells.get(fig, "") for _c, cells in cols] for fig in figures}})
        if not v.get("faults") and not v.get("error"):
            lost = sum(p["lost"] for r in v.get("runs", []) for p in r["probes"].values())
            blocks.append({"variant": vname, "fault": "(no fault)", "n": len(v.get("runs", [])),
                           "note": f"lost {lost} probe packets"})
    return {"figures": [{"name": fig, "key": keys[fig], "legend": report.LEGEND[fig]} for fig in figures],
            "blocks": blocks, "text": text, "own": False}


def _own(results: dict):
    """The workload kind that writes its own table and plot (``own_report``), or None."""
    kinds = {summarytext.workload_of(v) for v in results["variants"].values()}
    kind = workloads.REGISTRY.get(kinds.pop()) if len(kinds) == 1 else None
    return kind if kind is not None and kind.own_report else None


def _when(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else None


def provenance(results: dict) -> dict:
    pv = results.get("provenance") or {}
    return {"version": pv.get("version"), "commit": pv.get("commit"), "dirty": pv.get("dirty"),
            "dirty_paths": pv.get("dirty_paths"), "started": _when(results.get("started")),
            "finished": _when(results.get("finished")), "reanalysed": _when(results.get("reanalysed")),
            "machine": {k: pv.get(k) for k in ("kernel", "cores", "frr", "python", "kernel_tcp_default")},
            "runtime": results.get("runtime"), "file": results.get("file")}


def own_plot(source: Path | None) -> str | None:
    """plot.png beside results.json as a data: URI, for a workload that draws its own figures (``own_report``:
    its series are not probe deliveries over time); None where there is none."""
    import base64

    png = source.parent / "plot.png" if source is not None else None
    if png is None or not png.is_file():
        return None
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def page_data(results: dict, source: Path | None = None) -> dict:
    if not is_experiment(results):
        raise SpecError("report: this results.json is not an experiment's (no variants): hpnlab report makes a "
                        "page of an 'hpnlab run' folder")
    return {"experiment": results["experiment"], "description": results.get("description", ""),
            "repetitions": results.get("repetitions"), "duration": results["duration"],
            "partial": results.get("partial"), "provenance": provenance(results),
            "summary": summary(results), "own_plot": own_plot(source) if _own(results) is not None else None,
            "variants": [variant_data(results, n, v, source) for n, v in results["variants"].items()],
            "colours": COLOURS, "timeline_colours": {k: _mpl(c) for k, c in timeline.COLOURS.items()},
            "fault_kinds": faultkinds.kinds()}


MPL = {"tab:red": "#d62728", "tab:orange": "#ff7f0e", "tab:purple": "#9467bd", "tab:cyan": "#17becf",
       "tab:green": "#2ca02c", "tab:olive": "#bcbd22", "tab:brown": "#8c564b", "tab:blue": "#1f77b4"}


def _mpl(c: str) -> str:
    return MPL.get(c, c)


# --- the page -----------------------------------------------------------------------------------------------------
def _part(name: str) -> str:
    return resources.files("hpnlab.web").joinpath("report", name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    """Text that cannot end the <script> or <style> element it is inlined into."""
    return re.sub(r"</(script|style)", r"<\\/\1", text, flags=re.I)


def render(results: dict, source: Path | None = None) -> str:
    """The page, as text."""
    data = page_data(results, source)
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    parts = {"TITLE": escape(f"hpnlab {data['experiment']}"),
             "UPLOT_CSS": _script_safe(web.asset("uPlot.min.css")), "REPORT_CSS": _script_safe(_part("report.css")),
             "UPLOT_JS": _script_safe(web.asset("uPlot.iife.min.js")), "REPORT_JS": _script_safe(_part("report.js")),
             "DATA": blob}
    page = re.sub(r"@@(TITLE|UPLOT_CSS|REPORT_CSS|UPLOT_JS|REPORT_JS|DATA)@@", lambda m: parts[m.group(1)],
                  _part("report.html"))
    size = len(page.encode("utf-8"))
    return page.replace("@@SIZE@@", f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB")


def _experiment_file(path: Path) -> bool:
    """Whether ``path`` is an experiment's results.json (one that cannot be read counts as one: write() says why)."""
    try:
        return is_experiment(json.loads(path.read_text()))
    except OSError:
        return False
    except ValueError:
        return True


def write(out: Path, results: dict | None = None) -> Path:
    """DIR/report.html from DIR/results.json (or ``results``, the dict about to be written there); a folder
    whose results are a bench's, not a run's, gets hpnlab.traffic.output.benchpage's page."""
    out = Path(out)
    if results is None and out.is_dir() and not _experiment_file(out / "results.json"):
        from hpnlab.traffic.output import benchpage  # a bench's folder: its own plainer page

        return benchpage.write(out)
    if results is None:
        src = out / "results.json" if out.is_dir() else out
        try:
            results = json.loads(src.read_text())
        except OSError:
            raise SpecError(f"report: no results.json in '{out}'; give the folder of an 'hpnlab run'") from None
        except ValueError as e:
            raise SpecError(f"report: '{src}' is not JSON ({e}); give the folder of an 'hpnlab run'") from None
        out = src.parent
    page = render(results, out / "results.json")
    tmp = out / (NAME + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out / NAME)
    return out / NAME
