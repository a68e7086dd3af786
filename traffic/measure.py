"""Turn probe reports into outage figures per fault (pure functions, unit-tested without root).

A gap is measured on the sender's clock: the time between the last packet that got through before it
and the first one after it, minus one normal packet interval, so a single lost packet at 1 kpps is a
1 ms gap. A flow still silent when the fault is reverted was black-holed for the whole fault; flows
that came back before the repair give the convergence time (``converged_gap_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Gap:
    start: float  # seconds (epoch) of the last delivered packet before the gap, sender clock
    end: float  # of the first delivered packet after it (or the sender's end for a tail gap)
    missing: int
    interval: float

    @property
    def ms(self) -> float:
        return max(0.0, (self.end - self.start - self.interval) * 1000)

    def lost_sent_after(self, t: float) -> int:
        """Missing packets whose send time (evenly spread across the gap) is after t."""
        if self.missing <= 0:
            return 0
        step = (self.end - self.start) / (self.missing + 1)
        before = int((t - self.start) / step) if t > self.start else 0
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
        fl = Flow(stream, i, sent, r["received"], r["dups"], r["reordered"])
        for after, before, tx_from, tx_to, _rx_from, _rx_to in r["gaps"]:
            start = tx_from / 1e9 if after >= 0 else sender["start"] - interval
            fl.gaps.append(Gap(start, tx_to / 1e9, before - after - 1, interval))
        if r["max_seq"] < sent - 1:  # the tail never arrived (still broken at the end, or nothing at all)
            start = r["last_tx"] / 1e9 if r["max_seq"] >= 0 else sender["start"] - interval
            fl.gaps.append(Gap(start, sender["end"] + interval, sent - 1 - r["max_seq"], interval))
        out.append(fl)
    return out


def fault_metrics(flows: list[Flow], start: float, end: float | None, window_end: float) -> dict:
    """Figures for one fault active over [start, end) whose effects are judged until window_end."""
    affected, lost, longest, blackholed, converged = set(), 0, 0.0, set(), 0.0
    lost_after = 0
    first_loss = None
    for fl in flows:
        for g in fl.gaps:
            if g.end <= start - g.interval or g.start >= window_end:
                continue
            affected.add((fl.stream, fl.flow))
            lost += g.missing
            longest = max(longest, g.ms)
            first_loss = g.start if first_loss is None else min(first_loss, g.start)
            if end is not None:
                if g.start < end and g.end >= end - g.interval:  # silent from before the repair until it
                    blackholed.add((fl.stream, fl.flow))
                else:
                    converged = max(converged, g.ms)
                # sent from 1 s after the repair until the next fault: what follows is that fault's
                lost_after += g.lost_sent_after(end + 1.0) - g.lost_sent_after(max(end + 1.0, window_end))
    # Recovered: no flow is still silent when the window closes (later faults' gaps do not count).
    silent = any(g.start < window_end <= g.end + g.interval for fl in flows for g in fl.gaps)
    recovered = not silent and (end is None or lost_after == 0)
    # How long after the repair the last black-holed flow delivered again.
    after = [g.end - end for fl in flows for g in fl.gaps if end is not None and g.start < end <= g.end + g.interval]
    return {"longest_gap_ms": round(longest, 1), "lost_packets": lost, "flows_affected": len(affected),
            "flows": len(flows), "blackholed_flows": len(blackholed), "converged_gap_ms": round(converged, 1),
            "lost_after_repair_1s": lost_after if end is not None else None,
            "recovery_after_repair_ms": round(max(after) * 1000, 1) if after else (0.0 if end is not None else None),
            "resumed": not silent, "recovered": recovered,
            "first_loss_s": round(first_loss - start, 3) if first_loss is not None else None}


def totals(flows: list[Flow]) -> dict:
    return {"sent": sum(f.sent for f in flows), "received": sum(f.received for f in flows),
            "lost": sum(f.lost for f in flows), "dups": sum(f.dups for f in flows),
            "reordered": sum(f.reordered for f in flows)}


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
    """Median and max over repetitions (None values, e.g. not applicable, are left out)."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"median": None, "max": None}
    mid = len(v) // 2
    med = v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
    return {"median": round(med, 1) if isinstance(med, float) else med, "max": v[-1]}
