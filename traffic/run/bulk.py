"""Bulk elephant runs on a lab with link capacity: the processes of one repetition, and what they show.

Per repetition one set of elephant flows is chosen from the probed path map (traffic.balance.choose),
every host serves and sends (hpnlab.node.programs.elephant), and every router samples its ports' byte counters
and queue backlog (hpnlab.node.linkstats). The figures: the workload's completion time, the measured
byte ratio on the two ToR ports that face each NIC (Fig. 13) beside the ratio the map predicted for the
same flows, the queue on those ports (Fig. 14), and the utilisation spread of every ToR's uplinks.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hpnlab.traffic.run import balance
from hpnlab.traffic.workloads.base import congestion_of

PORT = 5300


def _ratio(values: list[float]) -> float | None:
    """max/min of one group of links' figures; inf when one is idle beside a busy one. None when the group
    carried nothing, or offers no choice: one link (a single-ToR NIC's ToR, as the path map predicts it)."""
    if len(values) < 2 or max(values) <= 0:
        return None
    lo, hi = min(values), max(values)
    return round(hi / lo, 3) if lo > 0 else math.inf


def _facing(cfgs: dict, host: str, tors: list[str]) -> list[tuple[str, str]]:
    """The ToR ports (node, iface) that face one NIC of ``host``: one on each ToR of a dual-ToR set, both on
    the one ToR of a single-ToR NIC (its bond's two members)."""
    return [(tor, i.name) for tor in tors for i in cfgs[tor].interfaces if i.peer == host]


def _ports(stats: dict, cfgs: dict, ends: list[tuple[str, str]]) -> dict[str, list]:
    """Per egress port (node, iface): bytes over the run, peak queue and rate (kbit/s, None: unshaped)."""
    got, peak, kbit = [], [], []
    for node, ifc in ends:
        s = stats.get(node, {}).get("ifaces", {}).get(ifc)
        got.append(s["bytes"][-1] - s["bytes"][0] if s and s["bytes"] else 0)
        peak.append(max(s["backlog"]) if s and s["backlog"] else 0)
        kbit.append((cfgs[node].iface(ifc).shape or {}).get("rate_kbit"))
    return {"bytes": got, "peak_backlog": peak, "kbit": kbit}


def result(plan, run_dir: Path) -> dict:
    """One repetition's figures from its reports."""
    cfgs = plan.cfgs
    flows = json.loads((run_dir / "flows.json").read_text())
    senders = [json.loads(p.read_text()) for p in sorted(run_dir.glob("elephant-tx-*.json"))]
    receivers = [json.loads(p.read_text()) for p in sorted(run_dir.glob("elephant-rx-*.json"))]
    stats = {p.stem.removeprefix("linkstats-"): json.loads(p.read_text()) for p in run_dir.glob("linkstats-*.json")}
    t0 = min((s["start"] for s in senders), default=0.0)
    done = [s["completion_s"] for s in senders]
    complete = all(s["complete"] for s in senders) and bool(senders)
    # the two ToR ports facing each NIC: bytes over the run, and the queue on them
    grp = balance.groups(cfgs, plan.workload.rail)
    predicted = balance.loads(flows)
    nics, queues = {}, {}
    for (tier, owner), lks in grp.items():
        if tier != "tor-down":
            continue
        ports = _ports(stats, cfgs, _facing(cfgs, owner, [tor for _t, tor, _h in lks]))
        pred = [predicted.get(("tor-down", tor, host), 0) for _t, tor, host in lks]
        nics[owner] = {"bytes": ports["bytes"], "flows_predicted": pred, "ratio": _ratio(ports["bytes"]),
                       "ratio_predicted": _ratio(pred), "peak_backlog": ports["peak_backlog"]}
        queues[owner] = max(ports["peak_backlog"])
    uplinks = {}
    for (tier, owner), lks in grp.items():
        if tier != "tor-up":
            continue
        ports = _ports(stats, cfgs, [(tor, agg) for _t, tor, agg in lks])  # a ToR names an uplink after its agg
        got = ports["bytes"]
        uplinks[owner] = {"links": [agg for _t, _tor, agg in lks], **ports,
                          "ratio": _ratio(got),
                          "idle": sum(1 for b in got if b < 10_000)}  # a few BGP/BFD packets are not load
    # into each ToR from its aggs (the far ToRs' choice of agg decides these)
    intos = {}
    for tor in sorted(n for n, c in cfgs.items() if c.role == "tor" and c.rail == plan.workload.rail):
        aggs = [i.peer for i in cfgs[tor].interfaces if i.kind == "uplink"]
        intos[tor] = {"links": aggs, **_ports(stats, cfgs, [(agg, tor) for agg in aggs])}
    ratios = [v["ratio"] for v in nics.values() if v["ratio"] is not None]
    finite = [r for r in ratios if not math.isinf(r)]
    # the NIC whose two ports differ most (Fig. 13's picture), its busiest queue breaking ties
    hot = max(nics, key=lambda k: (nics[k]["ratio"] or 0, max(nics[k]["peak_backlog"]))) if nics else None
    return {"kind": "elephant", "select": plan.workload.select, "flows": len(flows), "complete": complete,
            "completion_s": max(done) if complete else None, "t0": t0, "congestion": congestion_of(senders + receivers),
            "downlink_ratio_max": (math.inf if len(finite) < len(ratios) else max(finite)) if ratios else None,
            "downlink_ratio_median": sorted(ratios)[len(ratios) // 2] if ratios else None,
            "peak_backlog_max": max(queues.values(), default=0),
            "peak_backlog_median": sorted(queues.values())[len(queues) // 2] if queues else 0,
            "hot_nic": hot, "nics": nics, "uplinks": uplinks, "into_tors": intos,
            "predicted_matches": sum(1 for v in nics.values() if v["ratio_predicted"] is not None
                                     and v["ratio"] is not None and _same_side(v)),
            "port_series": _series(stats, cfgs, hot, plan.workload.rail, t0) if hot else {}}


def _same_side(v: dict) -> bool:
    """Did the port the map said carries more flows carry more bytes (or both even)?"""
    (b0, b1), (p0, p1) = v["bytes"], v["flows_predicted"]
    if p0 == p1:
        return True
    return (b0 > b1) == (p0 > p1)


def _series(stats: dict, cfgs: dict, nic_owner: str, rail: int, t0: float) -> dict:
    """The hot NIC's two ToR ports over time: Mbit/s and backlog (KB), for the Fig. 13/14 style plot."""
    out = {}
    for tor, ifc in _facing(cfgs, nic_owner, cfgs[nic_owner].nic(rail).tors):
        s = stats.get(tor, {})
        ts, by, bl = s.get("t", []), s.get("ifaces", {}).get(ifc, {}).get("bytes", []), \
            s.get("ifaces", {}).get(ifc, {}).get("backlog", [])
        rows = []
        for k in range(1, len(ts)):
            dt = ts[k] - ts[k - 1]
            if dt > 0:
                rows.append((round(ts[k] - t0, 3), round((by[k] - by[k - 1]) * 8 / dt / 1e6, 3), round(bl[k] / 1024, 1)))
        out[f"{tor}:{ifc}"] = rows
    return out


def summarise(values: list) -> dict:
    """n, min, median, p90 and max (an infinite ratio, an idle link beside a busy one, is None)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "min": None, "median": None, "p90": None, "max": None}
    s = sorted(vals)

    def fin(x):
        return None if isinstance(x, float) and math.isinf(x) else x

    return {"n": len(s), "min": fin(s[0]), "median": fin(s[len(s) // 2]),
            "p90": fin(s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)]), "max": fin(s[-1])}


def aggregate(runs: list[dict]) -> dict:
    """Across repetitions: completion time, measured downlink ratio and queues, map agreement."""
    w = [r["workload"] for r in runs if r.get("workload", {}).get("kind") == "elephant"]
    return {"repetitions": len(w), "completion_s": summarise([x["completion_s"] for x in w]),
            "downlink_ratio": summarise([v["ratio"] for x in w for v in x["nics"].values()]),
            "peak_backlog_kb": summarise([round(q / 1024, 1) for x in w for v in x["nics"].values()
                                          for q in [max(v["peak_backlog"])]]),
            "uplink_ratio": summarise([v["ratio"] for x in w for v in x["uplinks"].values()]),
            "idle_uplinks": sum(v["idle"] for x in w for v in x["uplinks"].values()),
            "map_agrees": f"{sum(x['predicted_matches'] for x in w)}/{sum(len(x['nics']) for x in w)}",
            "incomplete": sum(1 for x in w if not x["complete"]),
            "uneven_links": uneven_links(w)}


def uneven_links(w: list[dict]) -> dict:
    """Where equal-cost links differ in capacity (a degraded link): per such link, its share of the group's
    bytes against its share of the group's capacity (what FARE aims at) and of the links (what hash
    ECMP aims at), over the repetitions. Groups: a ToR's uplinks ("s0r0a>agg0-1") and the links into a
    ToR from its aggs ("agg0-1>s0r0a")."""
    acc: dict[str, dict] = {}
    for x in w:
        groups = [(f"{t}>{{}}", g) for t, g in x["uplinks"].items()] + \
                 [(f"{{}}>{t}", g) for t, g in x.get("into_tors", {}).items()]
        for fmt, g in groups:
            kbit = g.get("kbit") or []
            if not kbit or None in kbit or len(set(kbit)) < 2:
                continue
            total_b, total_k = sum(g["bytes"]), sum(kbit)
            for link, b, k, q in zip(g["links"], g["bytes"], kbit, g["peak_backlog"]):
                if k == max(kbit):
                    continue
                e = acc.setdefault(fmt.format(link), {"capacity_share": round(k / total_k, 4),
                                                      "equal_share": round(1 / len(kbit), 4), "bytes_share": [],
                                                      "peak_backlog_kb": []})
                e["bytes_share"].append(round(b / total_b, 4) if total_b else None)
                e["peak_backlog_kb"].append(round(q / 1024, 1))
    return {k: {**e, "bytes_share": summarise([v for v in e["bytes_share"] if v is not None]),
                "peak_backlog_kb": summarise(e["peak_backlog_kb"])} for k, e in sorted(acc.items())}


# --- output: table and picture -------------------------------------------------------------------------------
PAPER = [
    ("the two ToR ports facing one NIC, Clos tier 2", "3x load difference (Fig. 13a); queues 267 KB vs 3 KB (Fig. 14)"),
    ("the same ports, dual-plane", "even load (Fig. 13b); queue length -91.8 %, average 20 KB"),
    ("cross-segment performance, dual-plane vs Clos", "up to +71.6 %"),
    ("disjoint path selection (App. B)", "collective communication up to +34.7 %"),
]


def _s(st: dict | None, key: str = "median") -> str:
    if not st or st.get("n") == 0:
        return "-"
    v = st.get(key)
    return "inf" if v is None else f"{v:g}"


# summary.txt's column and figure names (the elephant workload's legend, at summary.txt's end)
LEGEND = {
    "variant": "the experiment file's variant",
    "downlink med/p90/max": "path map: ratio of the busiest to the idlest ToR downlink facing one NIC",
    "idle links med/max": "path map: the share of links no flow crossed (median and max over the flow sets)",
    "tor-up med/p90": "path map: ratio of the busiest to the idlest ToR uplink",
    "agg-down med/p90": "path map: ratio of the busiest to the idlest agg downlink (- : none mapped)",
    "completion s": "bulk runs: when the last flow finished (min/median/max over the runs)",
    "downlink ratio": "bulk runs: ratio of the bytes of the busiest to the idlest ToR downlink facing a NIC",
    "peak queue KB": "bulk runs: the deepest queue a ToR port facing a NIC reached",
    "map agrees": "NICs whose busier port the path map predicted, of all NICs over the runs",
    "multipath, select": "a block's title, VARIANT (multipath M, select S): the variant's mode and selection",
    "link": "a link below its group's full rate (from>to)",
    "capacity share": "its capacity over its group's (FARE's aim)",
    "equal share": "one over the group's links (hash ECMP's share)",
    "bytes share": "its share of the group's bytes, min/median/max over the runs",
    "peak queue": "its queue's peak in KB, min/median/max over the runs",
}


def summary_table(results: dict) -> str:
    """The path map's and the bulk runs' figures as two tables (a variant a row), the links below full
    rate a block per variant, the paper's figures; at most report.WIDTH wide."""
    from hpnlab.traffic.output import report

    pmap = [("variant", "downlink med/p90/max", "idle links med/max", "tor-up med/p90",
             "agg-down med/p90")]
    runs = [("variant", "completion s", "downlink ratio", "peak queue KB", "map agrees")]
    for name, v in results["variants"].items():
        b = v.get("balance")
        if not b:
            continue
        m = b[v["select"]] if "select" in v else b["hash"]
        k = v.get("bulk", {})
        d = m["downlink_ratio"]
        pmap.append((name, f"{_s(d)}/{_s(d, 'p90')}/{_s(d, 'max')}",
                     f"{_s(m['idle_link_fraction'])}/{_s(m['idle_link_fraction'], 'max')}",
                     f"{_s(m['tiers']['tor-up']['ratio'])}/{_s(m['tiers']['tor-up']['ratio'], 'p90')}",
                     f"{_s(m['tiers']['agg-down']['ratio'])}/{_s(m['tiers']['agg-down']['ratio'], 'p90')}"))
        runs.append((name, _mm(k.get("completion_s")), _mm(k.get("downlink_ratio")), _mm(k.get("peak_backlog_kb")),
                     k.get("map_agrees", "-")))
    out = [f"experiment {results['experiment']}: path-map figures over {_sets(results)} random flow sets "
           f"(ratios max/min; 'inf' = an idle link beside a busy one); bulk figures min/median/max over "
           f"{results['repetitions']} run(s)", "", "path map (the flow sets):"]
    out += report.table(pmap) + ["", "bulk runs (TCP, measured):"] + report.table(runs)
    uneven = [(name, link, e) for name, v in results["variants"].items()
              for link, e in (v.get("bulk", {}).get("uneven_links") or {}).items()]
    if uneven:
        rows = [("link", "capacity share", "equal share", "bytes share", "peak queue")]
        rows += [(link, f"{e['capacity_share']:g}", f"{e['equal_share']:g}", _mm(e["bytes_share"]),
                  _mm(e["peak_backlog_kb"])) for _name, link, e in uneven]
        lines = report.table(rows, fold=False)  # a line per link, under its variant's title
        out += ["", "links below their group's full rate: share of the group's bytes", "  " + lines[0]]
        at = 1
        for k, (name, _link, _e) in enumerate(uneven):
            if k == 0 or uneven[k - 1][0] != name:
                v = results["variants"][name]
                out.append(f"{name} (multipath {v.get('multipath', {}).get('mode', 'ecmp')}, "
                           f"select {v.get('select', '-')})")
            out.append("  " + lines[at])
            at += 1
        out += ["", "the FARE draft: a path's weight is min(capacity up, capacity down); traffic through a "
                    "degraded link in proportion to its capacity share, where hash ECMP keeps the equal share"]
    out += ["", "the paper (production, 200/400 Gbit/s):"] + [f"  {a}: {b}" for a, b in PAPER]
    return "\n".join(report.wrap(out))


def _sets(results: dict) -> str:
    n = {v["balance"]["hash"]["sets"] for v in results["variants"].values() if v.get("balance")}
    return ",".join(map(str, sorted(n))) or "0"


def _mm(st: dict | None) -> str:
    """min/median/max over the runs, so a slow run shows ("inf": an idle link beside a busy one)."""
    if not st or st.get("median") is None:
        return "-"
    mx = "inf" if st.get("max") is None else f"{st['max']:g}"
    if "min" not in st:  # results written before min was kept
        return f"{st['median']:g}/{mx}"
    mn = "inf" if st.get("min") is None else f"{st['min']:g}"
    return f"{mn}/{st['median']:g}/{mx}"


def _uneven_axis(ax, links: dict) -> None:
    """Each below-rate link: its share of its group's bytes (median, whisker to the max) against its
    capacity share (FARE's aim, green tick) and the equal share (hash ECMP's, grey tick)."""
    names = list(links)
    for x, name in enumerate(names):
        e = links[name]
        med, mx = e["bytes_share"].get("median"), e["bytes_share"].get("max")
        if med is not None:
            ax.bar(x, med, color="tab:blue", alpha=0.75, width=0.6)
            ax.plot([x, x], [med, mx], color="black", lw=1)
        ax.plot([x - 0.35, x + 0.35], [e["capacity_share"]] * 2, color="tab:green", lw=2.5)
        ax.plot([x - 0.35, x + 0.35], [e["equal_share"]] * 2, color="grey", lw=1.5, ls="--")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=6)
    ax.set_ylim(0, 0.45)
    ax.set_ylabel("share of the group's bytes", fontsize=7)
    ax.set_title("degraded links: bytes (bar) vs capacity share (green)\nand equal share (grey, dashed)",
                 fontsize=8)
    ax.tick_params(labelsize=6)


def plot(results: dict, path: Path) -> Path | None:
    """Per variant: the hot NIC's two ToR ports over time (Mbit/s, like Fig. 13, and queue KB, like
    Fig. 14) from the first bulk run, and the downlink-ratio distribution from the path map."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    vs = [(n, v) for n, v in results["variants"].items() if v.get("balance") and v.get("runs")]
    if not vs:
        return None
    uneven = any((v.get("bulk") or {}).get("uneven_links") for _n, v in vs)
    rows_n = 4 if uneven else 3
    fig, axes = plt.subplots(rows_n, len(vs), figsize=(4.2 * len(vs), 2.9 * rows_n), squeeze=False)
    for j, (name, v) in enumerate(vs):
        w = v["runs"][0]["workload"]
        for port, rows in (w.get("port_series") or {}).items():
            if rows:
                t, mbit, q = zip(*rows)
                axes[0][j].plot(t, mbit, label=port, lw=1)
                axes[1][j].plot(t, q, label=port, lw=1)
        axes[0][j].set_title(f"{name} (repetition 1 of {len(v['runs'])})\nhot NIC {w.get('hot_nic')}: ToR port "
                             f"egress", fontsize=8)
        axes[0][j].set_ylabel("Mbit/s")
        axes[1][j].set_title("queue (tbf backlog)", fontsize=8)
        axes[1][j].set_ylabel("KB")
        axes[1][j].set_xlabel("s")
        for a in (axes[0][j], axes[1][j]):
            if a.lines:
                a.legend(fontsize=6, loc="upper right")
            a.tick_params(labelsize=7)
        ax = axes[2][j]
        stats = {sel: [v["balance"][sel]["downlink_ratio"].get(k) for k in ("median", "p90", "max")]
                 for sel in ("hash", "disjoint")}
        finite = [x for vals in stats.values() for x in vals if x is not None]
        top = max(finite + [2.0]) * 1.3  # an infinite ratio (an idle link beside a busy one) reaches the top
        for sel, colour in (("hash", "tab:red"), ("disjoint", "tab:green")):
            vals = stats[sel]
            bars = ax.bar([f"{sel}\nmed", f"{sel}\np90", f"{sel}\nmax"], [top if x is None else x for x in vals],
                          color=colour, alpha=0.7)
            for bar, x in zip(bars, vals):
                if x is None:
                    bar.set_hatch("//")
                    bar.set_alpha(0.35)
                ax.text(bar.get_x() + bar.get_width() / 2, (top if x is None else x) + 0.03 * top,
                        "inf" if x is None else f"{x:g}", ha="center", fontsize=6)
        ax.set_ylim(0, top * 1.15)
        ax.set_ylabel("max/min downlink bytes", fontsize=7)
        ax.set_title("downlink ratio over flow sets (path map;\nhatched: inf, an idle link beside a busy one)",
                     fontsize=8)
        ax.tick_params(labelsize=6)
        if uneven:
            _uneven_axis(axes[3][j], (v.get("bulk") or {}).get("uneven_links") or {})
    fig.tight_layout()
    fig.savefig(path, dpi=110 if len(vs) <= 4 else 80)  # many variants: a wide figure, kept under ~1 MB
    plt.close(fig)
    return path
