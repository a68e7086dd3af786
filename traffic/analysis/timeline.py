"""The convergence timeline of one fault: per router and host, when it saw the event, on the one wall
clock every namespace shares, and where the outage's milliseconds went.

Sources: the agents' own events (carrier, LACP partner and mux, micro-BFD, a ToR's neighbours and host routes, a host's
nexthops; each agent keeps its last minute of them in its status file), the routers' FIB changes (the
route monitors), and the probes' gaps. BGP UPDATEs are not in it: FRR logs them only with update
debugging on, which costs more than the fault it would explain; a router's FIB change is where an
UPDATE it received took effect.

The split (pure, ``split``): for the longest gap that closed before the repair (a flow that converged),
from when it began (the fault, or later: a later flap, LACP expiring; or the detection, where a node saw
the failure just before the last packet got through):
- detection: -> the first carrier / LACP / micro-BFD event anywhere;
- protocol: that -> the last FIB change a router made before the gap closed (host routes, BGP, zebra);
- delivery: that -> the first packet through (the probe's own interval, ARP);
- and, overlapping them, "waiting for CPU": the lateness meter's worst timer / sender lateness in the
  window, the part of the figure that may be the machine's.
"""

from __future__ import annotations

import re

from hpnlab.traffic.analysis import measure

KINDS = (("carrier", re.compile(r"carrier (up|down)|admin (up|down)")),
         ("micro-bfd", re.compile(r"micro-BFD")),
         ("lacp", re.compile(r"partner |mux ")),
         ("neighbour", re.compile(r"neighbour ")),
         ("host-route", re.compile(r"host route ")),
         ("nexthop", re.compile(r"nexthops ")),
         ("stack", re.compile(r"heartbeat|sync|shut")))
DETECTION = ("carrier", "micro-bfd", "lacp")
EARLY_MS = 100.0


def classify(msg: str) -> str | None:
    for kind, rx in KINDS:
        if rx.search(msg):
            return kind
    return None


def events(agent_events: dict[str, list], route_events: list[dict], origin: float, a: float,
           b: float) -> list[dict]:
    """Every classified agent event and every FIB change in [a, b], in time order, ms since ``origin``."""
    out = []
    for node, evs in agent_events.items():
        for t, msg in evs:
            kind = classify(msg)
            if kind and a <= t <= b:
                out.append({"t_ms": round((t - origin) * 1000, 1), "node": node, "kind": kind, "what": msg})
    for e in route_events:
        if a <= e["ts"] <= b:
            out.append({"t_ms": round((e["ts"] - origin) * 1000, 1), "node": e["node"], "kind": "fib",
                        "what": f"{e['event']} {e['prefix']} via {e.get('via') or '-'}"})
    return sorted(out, key=lambda e: (e["t_ms"], e["node"]))


def split(evs: list[dict], flows: list[measure.Flow], applied: float, reverted: float | None,
          late_ms: float, window_end: float = float("inf")) -> dict:
    """Detection / protocol / delivery of the longest gap that closed before the repair (ms), counted from
    when that gap began: the fault, or later for a gap a fault caused later (a link's third flap, LACP
    expiring 3 s into a one-way failure). The gap is the one the summary's ``converged ms`` reports: of
    the fault's own gaps (``measure.converged``), never another fault's."""
    closed = measure.converged(flows, applied, reverted, window_end)
    if not closed:
        return {"gap_ms": None, "why": "no flow converged before the repair (black-holed, or not hit)"}
    g = max(closed, key=lambda x: x.ms)
    began = max(0.0, (g.start - applied) * 1000)  # the last packet through before it (sender clock)
    close = (g.end - applied) * 1000
    # Its detection: where a node saw the failure up to EARLY_MS before the last packet got through (packets
    # already past the failing point still arrive: LACP expiring, then the queue draining), the gap starts
    # there; else the first sign after it. One after the gap closed is not this gap's.
    dets = [e for e in evs if e["kind"] in DETECTION and began - EARLY_MS <= e["t_ms"] <= close]
    det = dets[0] if dets else None
    det_at = det["t_ms"] if det else None
    if det and det_at < began:
        began = det_at
    # the last change between the detection and the gap's close (one before the detection is not its effect)
    fib = [e for e in evs if e["kind"] in ("fib", "host-route", "nexthop") and e["t_ms"] <= close
           and (det_at is None or e["t_ms"] >= det_at)]
    last = fib[-1] if fib else None
    last_at = last["t_ms"] if last else det_at
    out = {"gap_ms": round(g.ms, 1), "began_ms": round(began, 1), "gap_closed_ms": round(close - began, 1),
           "detection_ms": round(det_at - began, 1) if det else None,
           "detected_by": f"{det['node']}: {det['what']}" if det else None,
           "protocol_ms": round(last_at - det_at, 1) if det and last else None,
           "last_change": f"{last['node']}: {last['what']}" if last else None,
           "delivery_ms": round(close - last_at, 1) if det else None,
           "cpu_ms": late_ms}
    out["path"] = [e for e in (det, last) if e]
    return out


def build(fault: dict, window_end: float, agent_events: dict[str, list], route_events: list[dict],
          flows: list[measure.Flow], late_ms: float) -> dict:
    """One fault's timeline: events from just before it to the end of its window, and the split."""
    a = fault["applied"]
    evs = events(agent_events, route_events, a, a - 0.05, window_end)
    rev = fault.get("reverted") if fault.get("until") is not None else None
    return {"fault": fault["label"], "applied": a, "reverted_ms": round((rev - a) * 1000, 1) if rev else None,
            "events": evs, "split": split(evs, flows, a, rev, late_ms, window_end)}


COLOURS = {"carrier": "tab:red", "micro-bfd": "tab:orange", "lacp": "tab:purple", "neighbour": "tab:cyan",
           "host-route": "tab:green",
           "nexthop": "tab:olive", "stack": "tab:brown", "fib": "tab:blue"}


def plot(results: dict, path) -> object | None:
    """timeline.png: per variant, the first repetition's first fault with a converged gap: routers and hosts
    on one axis, ms since the fault on the other, each event a mark, the critical path (detection -> the
    last FIB change before the gap closed) drawn through them, the gap shaded."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = []
    for vname, v in results["variants"].items():
        for f in (v.get("runs") or [{}])[0].get("faults", []):
            tl = f.get("timeline")
            if tl and tl["split"].get("gap_ms") is not None and tl["events"]:
                panels.append((vname, tl))
                break
    if not panels:
        return None
    rows = max(len({e["node"] for e in tl["events"]}) for _v, tl in panels)  # one row per node with an event
    height = min(1.5 + (0.18 if rows > 20 else 0.28) * rows * len(panels), 18.0)
    fig, axes = plt.subplots(len(panels), 1, figsize=(12.5, height), squeeze=False)
    for ax, (vname, tl) in zip(axes[:, 0], panels):
        sp = tl["split"]
        b = sp.get("began_ms", 0.0)  # results written before it: the gap began at the fault
        lo, horizon = (-5.0 if b < 50 else b - 50), b + max(sp["gap_closed_ms"] * 1.3, 50.0)
        evs = [e for e in tl["events"] if lo <= e["t_ms"] <= horizon]
        nodes: list[str] = []
        for e in evs:
            if e["node"] not in nodes:
                nodes.append(e["node"])
        y = {n: i for i, n in enumerate(nodes)}
        ax.axvspan(b, b + sp["gap_closed_ms"], color="grey", alpha=0.12,
                   label=f"longest converged gap {sp['gap_ms']:g} ms")
        for kind, colour in COLOURS.items():
            pts = [(e["t_ms"], y[e["node"]]) for e in evs if e["kind"] == kind]
            if pts:
                ax.scatter(*zip(*pts), s=18, color=colour, label=kind, zorder=3)
        crit = [p for p in sp.get("path", []) if lo <= p["t_ms"] <= horizon]
        # results.json keeps a fault's first events only (events_total says how many there were): a long
        # flapping's critical path can lie past them, with no row to draw it on
        if len(crit) == 2 and all(p["node"] in y for p in crit):
            ax.plot([p["t_ms"] for p in crit], [y[p["node"]] for p in crit], color="black", lw=2, zorder=2,
                    label="critical path")
        ax.axvline(0, color="tab:red", lw=1)
        ax.set_yticks(range(len(nodes)))
        ax.set_yticklabels(nodes, fontsize=7 if len(nodes) <= 20 else 5)
        ax.set_xlim(lo, horizon)
        ax.set_title(f"{vname}: {tl['fault']}: " + (f"gap began {b:g} ms after the fault; " if b >= 1 else "")
                     + f"detection {sp['detection_ms']} ms, protocol {sp['protocol_ms']} ms, "
                     f"delivery {sp['delivery_ms']} ms; waiting for CPU <= {sp['cpu_ms']:g} ms", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    axes[-1, 0].set_xlabel("ms since the fault was applied (one wall clock for every namespace)")
    fig.suptitle(f"hpnlab experiment {results['experiment']}: convergence timeline (repetition 1)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # the panels' titles below the figure's
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
