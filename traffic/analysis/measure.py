"""Turn probe reports into outage figures per fault (pure functions, unit-tested without root).

Definitions (docs/results.md, "How a fault's figures are defined", says the same in words):

- A **gap** is measured on the sender's clock: from the last packet of a flow that got through before it to
  the first one after it, less one sending interval, so a single lost packet at 1 kpps is a 1 ms gap. Its
  lost packets are taken as sent evenly across it; its **first lost packet** was sent one step after the
  last delivered one.
- Every gap belongs to exactly one fault: the one during whose **window** its first lost packet was sent.
  Fault k's window runs from its application to the next fault's (or the end of the run), both moved
  ``IN_FLIGHT_S`` earlier: a packet sent that shortly before a fault may still be on the wire when it strikes.
  Loss that began before the first fault's window belongs to no fault.
- Of one fault's gaps, with the fault repaired at ``end``:
  - **converged**: the gap closed before the repair (the fabric routed around the fault);
  - **black-holed flow**: a gap that began with the fault's first effect (its earliest first lost packet,
    within one sending interval plus ``EFFECT_GRACE_S``, 100 ms) and was still open at the repair;
  - **silent at the repair**: any gap still open at the repair, however late it began;
  - **after the repair**: a gap that began after the repair (a second outage the repair caused);
  - **recovery after the repair**: from the repair until the last of the fault's gaps closed (every flow
    delivers again); the fault **recovered** when every one of its gaps closed within its window and
    none of its packets sent more than 1 s after the repair were lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

IN_FLIGHT_S = 0.05  # a packet sent this shortly before a fault is counted as the fault's (on the wire when it struck)
# Flows whose loss began this long (plus one interval) after the fault's first effect went silent with the
# fault: a fault on several interfaces or nodes takes tens of ms to apply (single-ToR's two ports: 14 ms apart)
EFFECT_GRACE_S = 0.1


@dataclass
class Gap:
    start: float  # seconds (epoch) of the last delivered packet before the gap, sender clock
    end: float  # of the first delivered packet after it (or the sender's end for a tail gap)
    missing: int
    interval: float

    @property
    def ms(self) -> float:
        return max(0.0, (self.end - self.start - self.interval) * 1000)

    @property
    def step(self) -> float:
        """Time between the lost packets' send times (evenly spread across the gap)."""
        return (self.end - self.start) / (self.missing + 1)

    @property
    def first_lost(self) -> float:
        """When the first packet lost in this gap was sent (sender clock)."""
        return self.start + self.step

    def open_at(self, t: float) -> bool:
        """The flow was silent at t: the gap began before it and its first delivery after is not earlier
        than one interval before it (a packet due at t itself would have closed it)."""
        return self.first_lost <= t and self.end >= t - self.interval

    def lost_sent_after(self, t: float) -> int:
        """Missing packets whose send time (evenly spread across the gap) is after t."""
        if self.missing <= 0:
            return 0
        before = int((t - self.start) / self.step) if t > self.start else 0
        return max(0, min(self.missing, self.missing - before))


@dataclass
class Flow:
    stream: str
    flow: int
    sent: int
    received: int
    dups: int
    reordered: int
    gaps: list[Gap] = field(default_factory=list)
    # reorder distance -> late packets (None: a receiver's report from before hpnlab recorded them)
    distances: dict[int, int] | None = None

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received)


def flows_of(stream: str, sender: dict, receiver: dict) -> list[Flow]:
    """Join one sender's report with what the receiver saw of it."""
    interval = 1.0 / sender["rate_per_flow"]
    rx = {f["flow"]: f for f in receiver.get("flows", []) if f["src"] == sender["src"]}
    out = []
    for i, sent in enumerate(sender["sent"]):
        r = rx.get(i, {"received": 0, "max_seq": -1, "dups": 0, "reordered": 0, "last_tx": 0, "gaps": []})
        fl = Flow(stream, i, sent, r["received"], r["dups"], r["reordered"],
                  distances={d: n for d, n in r["reorder_distances"]} if "reorder_distances" in r else None)
        for g in r["gaps"]:
            after, before, tx_from, tx_to = g[:4]
            if len(g) > 6 and g[6] == 0:  # every packet of it arrived, late (the receiver's count): reordering
                continue
            start = tx_from / 1e9 if after >= 0 else sender["start"] - interval
            fl.gaps.append(Gap(start, tx_to / 1e9, before - after - 1, interval))
        if r["max_seq"] < sent - 1:  # the tail never arrived (still broken at the end, or nothing at all)
            start = r["last_tx"] / 1e9 if r["max_seq"] >= 0 else sender["start"] - interval
            fl.gaps.append(Gap(start, sender["end"] + interval, sent - 1 - r["max_seq"], interval))
        out.append(fl)
    return out


def belongs(g: Gap, start: float, window_end: float) -> bool:
    """The gap is the fault's whose window [start, window_end) its first lost packet was sent in."""
    return g.missing > 0 and start - IN_FLIGHT_S <= g.first_lost < window_end - IN_FLIGHT_S


def gaps_of(flows: list[Flow], start: float, window_end: float) -> list[tuple[Flow, Gap]]:
    """The fault's own gaps, each with its flow."""
    return [(fl, g) for fl in flows for g in fl.gaps if belongs(g, start, window_end)]


def converged(flows: list[Flow], start: float, end: float | None, window_end: float) -> list[Gap]:
    """The fault's gaps that closed before its repair (or, for a fault never repaired, before its window
    ended): the ones the fabric routed around."""
    until = end if end is not None else window_end
    return [g for _fl, g in gaps_of(flows, start, window_end) if g.first_lost < until and g.end < until - g.interval]


def fault_metrics(flows: list[Flow], start: float, end: float | None, window_end: float) -> dict:
    """Figures for one fault applied at ``start``, repaired at ``end`` (None: never), whose window ends at
    ``window_end`` (the next fault, or the end of the run); only the gaps that belong to it count."""
    own = gaps_of(flows, start, window_end)
    effect = min((g.first_lost for _fl, g in own), default=None)
    affected = {(fl.stream, fl.flow) for fl, _g in own}
    conv = converged(flows, start, end, window_end)
    blackholed, silent_at_repair, after = set(), set(), []
    lost_after = lost_after_1s = 0
    for fl, g in own:
        if end is None:
            continue
        if g.open_at(end):
            silent_at_repair.add((fl.stream, fl.flow))
            if g.first_lost <= effect + g.interval + EFFECT_GRACE_S:
                blackholed.add((fl.stream, fl.flow))
        elif g.first_lost > end:
            after.append(g)
        lost_after += g.lost_sent_after(end)
        lost_after_1s += g.lost_sent_after(end + 1.0)
    still_open = [g for _fl, g in own if g.end >= window_end]  # a tail gap, or one running into the next window
    resumed = not still_open
    # How long after the repair the last of the fault's gaps closed (0: none was open at or after it).
    closing = [g.end - end for _fl, g in own if end is not None and g.end >= end - g.interval]
    return {"longest_gap_ms": round(max((g.ms for _fl, g in own), default=0.0), 1),
            "lost_packets": sum(g.missing for _fl, g in own), "flows_affected": len(affected), "flows": len(flows),
            "blackholed_flows": len(blackholed) if end is not None else None,
            "silent_at_repair_flows": len(silent_at_repair) if end is not None else None,
            "converged_gap_ms": round(max((g.ms for g in conv), default=0.0), 1),
            "after_repair_gap_ms": round(max((g.ms for g in after), default=0.0), 1) if end is not None else None,
            "lost_after_repair": lost_after if end is not None else None,
            "lost_after_repair_1s": lost_after_1s if end is not None else None,
            "recovery_after_repair_ms": (round(max(0.0, max(closing, default=0.0)) * 1000, 1)
                                         if end is not None else None),
            "resumed": resumed, "recovered": resumed and (end is None or lost_after_1s == 0),
            "first_loss_s": round(effect - start, 3) if effect is not None else None}


def unattributed_loss(flows: list[Flow], first_fault: float | None) -> int:
    """Packets lost in gaps that began before the first fault's window (the fabric was not quiet)."""
    if first_fault is None:
        return sum(g.missing for fl in flows for g in fl.gaps)
    return sum(g.missing for fl in flows for g in fl.gaps if g.missing > 0 and g.first_lost < first_fault - IN_FLIGHT_S)


def totals(flows: list[Flow]) -> dict:
    return {"sent": sum(f.sent for f in flows), "received": sum(f.received for f in flows),
            "lost": sum(f.lost for f in flows), "dups": sum(f.dups for f in flows),
            "reordered": sum(f.reordered for f in flows)}


def reordering(flows: list[Flow]) -> dict:
    """One stream's reordering as its receiver saw it: the share of the packets received that arrived after a
    later packet of their flow (``out_of_order_pct``), and the reorder distance of those late packets, in
    packets: how many sequence numbers below their flow's highest so far they arrived (max, median, p99;
    0 and None when nothing arrived late; None for all three when the reports kept no distances)."""
    received, late = sum(f.received for f in flows), sum(f.reordered for f in flows)
    out = {"out_of_order_pct": round(100 * late / received, 3) if received else None,
           "distance_max": None, "distance_median": None, "distance_p99": None}
    if any(f.distances is None for f in flows if f.reordered):
        return out
    hist: dict[int, int] = {}
    for f in flows:
        for d, n in (f.distances or {}).items():
            hist[d] = hist.get(d, 0) + n
    if not hist:
        return {**out, "distance_max": 0}
    return {**out, "distance_max": max(hist), "distance_median": _rank(hist, 0.5), "distance_p99": _rank(hist, 0.99)}


def _rank(hist: dict[int, int], q: float) -> int:
    """The q-quantile of a histogram {value: count} (nearest rank: the smallest value with at least q of the
    counts at or below it)."""
    need, seen = q * sum(hist.values()), 0
    for d in sorted(hist):
        seen += hist[d]
        if seen >= need:
            return d
    return max(hist)


def route_changes(events: list[dict], start: float, window_end: float) -> dict:
    """The routers' own timestamps (route monitor), relative to the fault: first and last change per node."""
    per: dict[str, list[float]] = {}
    for e in events:
        if start - 0.05 <= e["ts"] < window_end:
            per.setdefault(e["node"], []).append(e["ts"] - start)
    return {n: {"first_ms": round(min(v) * 1000, 1), "last_ms": round(max(v) * 1000, 1), "changes": len(v)}
            for n, v in sorted(per.items())}


def series(receiver: dict, src: str, t0: float) -> list[tuple[float, float]]:
    """(seconds since t0, packets/s) per bin for one source at one receiver."""
    bw = receiver["bin_ms"] / 1000
    return [(round(k * bw - t0, 3), n / bw) for k, n in receiver["bins"].get(src, [])]


def summarise(values: list[float | int | None]) -> dict:
    """n, min, median and max over repetitions (None values, e.g. not applicable, are left out; ``n`` counts
    the ones left in)."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"n": 0, "min": None, "median": None, "max": None}
    mid = len(v) // 2
    med = v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
    return {"n": len(v), "min": v[0], "median": round(med, 1) if isinstance(med, float) else med, "max": v[-1]}
