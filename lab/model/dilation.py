"""What a lab's time dilation (spec ``time_dilation`` k) changes and what it cannot, as results record it.

``timers``: every timer k scales, the spec's value beside the one in force (at k = 1 the two are equal):
BFD, micro-BFD, BGP, LACP, the kernel's neighbour timers, the hosts' TCP minimum RTO. ``NOT_DILATED``:
what runs at 1:1 whatever k is. ``detector``: which mechanism finds a fault first (a timer's or carrier),
so each fault's split (detection / protocol / delivery, hpnlab.traffic.analysis.timeline) can say which part is a
dilated timer's and which is undilated work. Pure.
"""

from __future__ import annotations

from hpnlab.node.agents.lacp import FAST_PERIOD, LONG_TIMEOUT, SHORT_TIMEOUT, SLOW_PERIOD
from hpnlab.node.plan import NEIGH_TIMERS
from hpnlab.model.spec import TCP_RTO_MIN_MS, Spec

TCP_RTO_MAX_MS = 120000  # TCP_RTO_MAX, also the most net.ipv4.tcp_rto_max_ms (6.15+) takes: it cannot be dilated

# What a dilated lab runs at 1:1: the kernel's and the daemons' own work, and the links.
NOT_DILATED = [
    "carrier: a link's loss is seen by the kernel at once (link-down, power-off), whatever k is",
    "forwarding: the kernel forwards every packet at its own speed",
    "ECMP rehash: the kernel moves a flow to another next hop as soon as its route changes",
    "the daemons' work: bgpd's best path and updates, zebra's FIB writes, the agents' reactions (the split's "
    "protocol part)",
    "link rates (tc tbf) and queueing: a queue drains at the link's rate",
    f"TCP's maximum RTO: {TCP_RTO_MAX_MS} ms, the kernel's ceiling (tcp_rto_max_ms takes no more)",
    "the probes' interval and the agents' 1 s heartbeat",
]

CARRIER_KINDS = ("link-down", "link-flap", "power-off", "peer-link-down")
LINK_TIMER_KINDS = ("one-way", "lacp-drop", "dataplane-dead", "silent-loss", "hang")  # found by a timer


def timers(spec: Spec) -> dict:
    """{"time_dilation": k, "timers": {name: {"spec", "in_force", "unit"}}, "not_dilated": [...]}: each
    timer the lab runs, the spec's (or the kernel's default, for what the spec does not set) beside the one in
    force. A mechanism that is off is left out."""
    k = spec.time_dilation
    out: dict[str, dict] = {}

    def put(name: str, value: float, unit: str) -> None:
        out[name] = {"spec": value, "in_force": round(value * k, 3), "unit": unit}

    if spec.bfd.enabled:
        put("bfd.interval", spec.bfd.interval_ms, "ms")
        put("bfd.detection", spec.bfd.interval_ms * spec.bfd.multiplier, "ms")
    if spec.micro_bfd.enabled:
        put("micro_bfd.interval", spec.micro_bfd.interval_ms, "ms")
        put("micro_bfd.detection", spec.micro_bfd.interval_ms * spec.micro_bfd.multiplier, "ms")
    put("bgp.keepalive", spec.bgp.keepalive, "s")
    put("bgp.hold", spec.bgp.hold, "s")
    if spec.mechanisms.lacp:
        fast = spec.lacp.fast_rate
        put("lacp.period", FAST_PERIOD if fast else SLOW_PERIOD, "s")
        put("lacp.timeout", SHORT_TIMEOUT if fast else LONG_TIMEOUT, "s")
    for key, value in NEIGH_TIMERS.items():  # the kernel's defaults: a spec does not set them
        unit = "ms" if key.endswith("_ms") else "s"
        put(f"neigh.{key.removesuffix('_ms')}", value, unit)
    put("tcp.rto_min", spec.tcp_rto_min_ms or TCP_RTO_MIN_MS, "ms")
    out["tcp.rto_max"] = {"spec": TCP_RTO_MAX_MS, "in_force": TCP_RTO_MAX_MS, "unit": "ms"}
    if spec.holddown.enabled:
        put("holddown.max", spec.holddown.max_s, "s")
    return {"time_dilation": k, "timers": out, "not_dilated": NOT_DILATED}


def detector(kind: str, role: str | None, iface_kind: str | None, spec: Spec) -> str | None:
    """The mechanism that finds a fault of ``kind`` on a node of ``role`` (and, for a link fault, a link of
    ``iface_kind``): carrier, bfd, bgp-hold, lacp or micro-bfd; None for a fault no single one finds
    (a degraded link, corruption, an ARP flush, a session shut down by hand)."""
    if kind in CARRIER_KINDS:
        return "carrier"
    if kind not in LINK_TIMER_KINDS:
        return None
    access = role == "host" or (kind != "hang" and iface_kind == "access") or (kind == "hang" and role == "tor")
    if access:  # the host's side: LACP's timeout, or micro-BFD (which LACPDUs alone lost do not take down)
        return "micro-bfd" if spec.micro_bfd.enabled and kind != "lacp-drop" else \
            ("lacp" if spec.mechanisms.lacp else None)
    return "bfd" if spec.bfd.enabled else "bgp-hold"


def bound_ms(det: str | None, spec: Spec) -> float | None:
    """The detector's detection time in force (ms; None for carrier and for none): the bound a slipped
    timer is judged against."""
    d = spec.dilated()
    return {"bfd": float(d.bfd.interval_ms * d.bfd.multiplier) if d.bfd.enabled else None,
            "micro-bfd": float(d.micro_bfd.interval_ms * d.micro_bfd.multiplier) if d.micro_bfd.enabled else None,
            "bgp-hold": d.bgp.hold * 1000.0,
            "lacp": ((SHORT_TIMEOUT if spec.lacp.fast_rate else LONG_TIMEOUT) * 1000.0 * d.time_dilation
                     if spec.mechanisms.lacp else None),
            }.get(det or "")


def split_parts(det: str | None, spec: Spec) -> dict:
    """Which part of a fault's split (hpnlab.traffic.analysis.timeline) a dilated timer took: the detection when a
    timer found the fault (not carrier); the protocol (the daemons' work) and the delivery (the first packet
    through) are not dilated, save a neighbour entry that must be resolved again on the way."""
    timer = det not in (None, "carrier")
    return {"detector": det, "detection_bound_ms": bound_ms(det, spec),
            "dilated": {"detection_ms": timer, "protocol_ms": False, "delivery_ms": False},
            "note": (f"detection is {det}'s timer, x {spec.time_dilation}" if timer else
                     "detection is carrier: not dilated" if det == "carrier" else
                     "no single detector") + "; protocol (the daemons' work) and delivery are not dilated"}


def of_fault(fault, cfgs: dict, spec: Spec) -> dict:
    """``split_parts`` for one planned fault (hpnlab.traffic.faults.Fault) of a lab of ``cfgs``."""
    cfg = cfgs.get(fault.node)
    ifc = cfg.iface(fault.ifaces[0]) if cfg is not None and fault.ifaces else None
    return split_parts(detector(fault.kind, cfg.role if cfg is not None else None,
                                ifc.kind if ifc is not None else None, spec), spec)


def annotate(faults: list[dict], planned: list, cfgs: dict, spec: Spec) -> list[dict]:
    """Each aggregated fault (hpnlab.traffic.output.report.aggregate) gets ``dilation``: its detector, the detection
    time in force and which part of its split is dilated; matched to the planned fault by its label."""
    by_label = {f.label: f for f in planned}
    for e in faults:
        f = by_label.get(e["fault"])
        if f is not None:
            e["dilation"] = of_fault(f, cfgs, spec)
    return faults
