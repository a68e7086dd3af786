"""Which uplink each of a repetition's connections took, and the ToRs' FARE weights in the FIB, read on the
lab right after the repetition's traffic ended (the lab as it ran: nothing has been torn down yet).

Per-flow multipath (hash ECMP and FARE) puts a connection on one path for its life, by the switches' hash
of its 5-tuple; a share of bytes on a degraded uplink is then a count of connections on it, and which
connections those were decides the share. This module re-probes each connection's 5-tuple
(hpnlab.traffic.run.nodetools.path_map: TTL-limited probes through the kernel's own hash, the host's bond
included) and records the path beside the one the variant's path map predicted (where there was one), and
per ToR the kernel's nexthop weights and FARE's prescribed shares (hpnlab.lifecycle.fare.weights). With
``fare-adaptive`` the weights move every interval: the reading is the one at the end of the run.

Written to the repetition's ``pathcheck.json`` and carried into results.json as the run's
``workload.pathcheck``: {when, connections: [{src, dst, sport, dport, port, tor, agg, dst_tor,
predicted_agg?}], on_uplink: {"tor>agg": connections}, weights: {tor: {subnet: {kernel, kernel_share,
fare_share, frr_share}}}, error?}.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

PER_FLOW_MODES = ("ecmp", "fare", "fare-adaptive")  # where a connection keeps one path (spraying modes do not)
FILE = "pathcheck.json"


def wanted(plan) -> bool:
    """Per-flow multipath: the connections' paths mean something."""
    return plan.spec.multipath.mode in PER_FLOW_MODES


def probe(rt, cfgs: dict, conns: list[dict], rail: int) -> list[dict]:
    """Each connection {src, dst, sport, dport[, predicted_agg]} with the path its 5-tuple takes now."""
    from hpnlab.traffic.run.nodetools import path_map

    out = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for c in conns:
        groups.setdefault((c["src"], c["dport"]), []).append(c)
    for (src, dport), cs in sorted(groups.items()):
        dsts = sorted({c["dst"] for c in cs})
        sports = sorted({c["sport"] for c in cs})
        rows = {(r["dst"], r["sport"]): r for r in path_map(rt, cfgs, src, dsts, rail, sports, dport, "tcp")}
        for c in cs:
            r = rows.get((c["dst"], c["sport"]), {})
            out.append({**c, **{k: r.get(k) for k in ("port", "tor", "agg", "dst_tor")}})
    return out


def on_uplink(rows: list[dict]) -> dict[str, int]:
    """Connections per ToR uplink ("tor>agg") they left by."""
    out: dict[str, int] = {}
    for r in rows:
        if r.get("tor") and r.get("agg") and r["agg"] != "?":
            k = f"{r['tor']}>{r['agg']}"
            out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def fib_weights(rt, cfgs: dict, rail: int) -> dict:
    """Every ToR of the rail: its kernel's nexthop weights and FARE's shares per destination subnet ({}
    where the lab runs no FARE)."""
    from hpnlab.lifecycle import fare

    if not fare.enabled(cfgs):
        return {}
    rates = fare.agg_rates(rt, cfgs)
    return {n: fare.weights(rt, cfgs, n, rates) for n, c in sorted(cfgs.items())
            if c.role == "tor" and c.rail == rail}


def record(lab, plan, run_dir: Path, conns: list[dict]) -> dict:
    """Probe each connection ({src, dst, sport, dport, rail, ...}) and read the weights of every ToR of the
    rails they use; write ``pathcheck.json``. A failure is recorded (``error``), never raised: the
    repetition's own figures stand without it."""
    out: dict = {"when": "after the run's traffic ended", "at": round(time.time(), 3)}
    try:
        rails = sorted({c["rail"] for c in conns})
        out["weights"] = {}
        rows = []
        for rail in rails:
            out["weights"].update(fib_weights(lab.runtime, plan.cfgs, rail))
            rows += probe(lab.runtime, plan.cfgs, [c for c in conns if c["rail"] == rail], rail)
        out["connections"], out["on_uplink"] = rows, on_uplink(rows)
    except Exception as e:  # noqa: BLE001 - a diagnostic must not fail the repetition
        out["error"] = f"{type(e).__name__}: {e}"
    (run_dir / FILE).write_text(json.dumps(out))
    return out


def read(run_dir: Path) -> dict | None:
    p = run_dir / FILE
    try:
        return json.loads(p.read_text()) if p.exists() else None
    except ValueError:
        return None


def aggregate(runs: list[dict]) -> dict:
    """Over a variant's repetitions: connections per uplink, run by run (a link no connection took in a run
    counts 0 there), and how many connections left by another agg than the path map predicted (where it
    predicted one). {} when no repetition was checked."""
    checks = [(r.get("workload") or {}).get("pathcheck") for r in runs]
    checks = [c for c in checks if isinstance(c, dict) and "connections" in c]
    if not checks:
        return {}
    links = sorted({k for c in checks for k in c.get("on_uplink", {})})
    return {"pathcheck": {
        "on_uplink": {k: [c.get("on_uplink", {}).get(k, 0) for c in checks] for k in links},
        "moved_from_map": [sum(1 for x in c["connections"] if x.get("predicted_agg") and x.get("agg")
                               and x["agg"] != x["predicted_agg"]) for c in checks],
        "errors": [c["error"] for c in checks if c.get("error")]}}
