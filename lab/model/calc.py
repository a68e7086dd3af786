"""Sizing from switch parameters: reproduces the HPN paper's Table 2 (scale) and Table 1 (path search).

Model (stated so it can be argued with): a ToR's down capacity serves GPUs; a GPU takes ``nic_gbps``
(both NIC ports) from one ToR (single-ToR) or half of it from each ToR of a set (dual-ToR). An agg
gives each access unit (a ToR, or a dual-ToR set) ``uplink_gbps`` per ToR of that unit that is wired
to it; its down capacity is chip x o/(o+1) for agg-core oversubscription o:1. Dual-plane wires only
one ToR of each set to a given agg, so an agg serves twice the sets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hpnlab.model.spec import Spec


@dataclass(frozen=True)
class Switch:
    chip_tbps: float = 51.2
    tor_down_ports: int = 128
    tor_down_gbps: int = 200
    tor_up_ports: int = 60
    tor_up_gbps: int = 400
    nic_gbps: int = 400  # 2 x 200G ports per NIC


@dataclass(frozen=True)
class Design:
    dual_tor: bool
    rails: int
    dual_plane: bool
    oversubscription: float  # agg-core, o:1
    uplink_gbps: int  # capacity one ToR gets from one agg


def tier1_gpus(sw: Switch, d: Design) -> int:
    """GPUs in one segment (one layer of ToRs)."""
    down = sw.tor_down_ports * sw.tor_down_gbps
    per_tor = down // sw.nic_gbps  # single ToR: a GPU's whole NIC on one ToR
    per_unit = per_tor * 2 if d.dual_tor else per_tor  # a set: each ToR carries half of each NIC
    return per_unit * d.rails


def tier2_gpus(sw: Switch, d: Design) -> int:
    """GPUs in one Pod (ToR + agg layers)."""
    agg_down = sw.chip_tbps * 1000 * d.oversubscription / (d.oversubscription + 1)
    tors_per_unit_per_agg = 1 if (not d.dual_tor or d.dual_plane) else 2
    units = int(agg_down // (d.uplink_gbps * tors_per_unit_per_agg))
    per_unit = tier1_gpus(sw, Design(d.dual_tor, 1, d.dual_plane, d.oversubscription, d.uplink_gbps))
    return units * per_unit


def table2(sw: Switch = Switch()) -> list[dict]:
    """Each row adds one mechanism, as in the paper; the base Clos ToR uses 32 x 800G uplinks."""
    rows = [
        ("51.2Tbps Clos", Design(False, 1, False, 1.0, 800)),
        ("Dual-ToR", Design(True, 1, False, 1.0, 400)),
        ("Rail-optimized", Design(True, 8, False, 1.0, 400)),
        ("Dual-plane", Design(True, 8, True, 1.0, 400)),
        ("Oversubscription of 15:1", Design(True, 8, True, 15.0, 400)),
    ]
    out = []
    prev1 = prev2 = None
    for name, d in rows:
        t1, t2 = tier1_gpus(sw, d), tier2_gpus(sw, d)
        out.append({"mechanism": name, "tier1_gpus": t1, "tier2_gpus": t2,
                    "tier1_factor": round(t1 / prev1, 3) if prev1 else None,
                    "tier2_factor": round(t2 / prev2, 3) if prev2 else None})
        prev1, prev2 = t1, t2
    return out


def hpn_pod(sw: Switch = Switch()) -> dict:
    d = Design(True, 8, True, 15.0, sw.tor_up_gbps)
    seg, pod = tier1_gpus(sw, d), tier2_gpus(sw, d)
    segments = pod // seg
    tors = segments * d.rails * 2
    return {"gpus_per_segment": seg, "gpus_per_pod": pod, "segments": segments, "hosts": pod // 8,
            "tors": tors, "aggs_per_plane": sw.tor_up_ports, "aggs": 2 * sw.tor_up_ports,
            "access_links": pod * 2, "tor_agg_links": tors * sw.tor_up_ports,
            "tor_oversubscription": round(sw.tor_down_ports * sw.tor_down_gbps / (sw.tor_up_ports * sw.tor_up_gbps), 3)}


# Table 1: switches that take part in load balancing, and the size of the path search.
TABLE1 = [
    {"architecture": "Pod in HPN", "gpus": 15360, "tiers": 2, "switches": "ToR", "factors": [60]},
    {"architecture": "SuperPod", "gpus": 16384, "tiers": 3, "switches": "ToR+Aggregation+Core",
     "factors": [32, 32, 4]},
    {"architecture": "Jupiter", "gpus": 26000, "tiers": 3, "switches": "ToR+Aggregation", "factors": [8, 256]},
    {"architecture": "Fat tree (k=48)", "gpus": 27648, "tiers": 3, "switches": "ToR+Aggregation",
     "factors": [48, 48]},
]


def path_search(spec: Spec) -> dict:
    """Table 1's measure for a spec: how many uplink choices a host must search to find disjoint paths.

    Dual-plane: a flow's path inside the Pod is fixed once it leaves the ToR, so only ToR uplinks count.
    Clos: downstream paths converge on either ToR of a set from every agg, so ToR and agg choices multiply.
    """
    if spec.tier2 == "dual-plane":
        factors = [spec.aggs_per_plane]
    else:
        factors = [spec.aggs_per_plane, spec.tors_per_set]
    if spec.tier3:
        factors.append(spec.tier3.cores_per_plane)
    size = 1
    for f in factors:
        size *= f
    return {"factors": factors, "complexity": size}


def table1() -> list[dict]:
    rows = []
    for r in TABLE1:
        size = 1
        for f in r["factors"]:
            size *= f
        rows.append({**r, "complexity": size, "notation": "O(" + "x".join(map(str, r["factors"])) + f")=O({size})"})
    return rows


def report(sw: Switch = Switch()) -> dict:
    return {"switch": asdict(sw), "table2": table2(sw), "hpn_pod": hpn_pod(sw), "table1": table1()}
