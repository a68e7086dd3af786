"""How late a node program's own timers fired: the emulator's side of every figure it measures.

A probe sender due to send at t that sends at t + 20 ms, or an agent whose LACP/micro-BFD timer was due
at t and ran at t + 20 ms, was waiting for a CPU; a gap or a detection time measured meanwhile carries
that much of the machine in it. Each program keeps, per 100 ms of wall-clock time (the same clock in
every namespace), the worst lateness at or above ``THRESHOLD_S``; quiet bins cost nothing.
Pure and light: it runs inside every node.
"""

from __future__ import annotations

from collections import OrderedDict

BIN_S = 0.1
THRESHOLD_S = 0.001  # below this, select()/sleep() granularity, not the machine
KEEP = 3000  # bins kept (the most recent): 5 minutes of a machine late all the time


class LateBins:
    """Worst lateness per 100 ms bin of wall-clock time, for bins where it reached ``THRESHOLD_S``."""

    def __init__(self, keep: int = KEEP) -> None:
        self.bins: OrderedDict[int, float] = OrderedDict()
        self.keep = keep
        self.worst = 0.0
        self.samples = 0  # timer firings judged
        self.late = 0  # of which late by THRESHOLD_S or more

    def record(self, t_epoch: float, late_s: float) -> None:
        self.samples += 1
        if late_s < THRESHOLD_S:
            return
        self.late += 1
        self.worst = max(self.worst, late_s)
        k = int(t_epoch / BIN_S)
        if late_s > self.bins.get(k, 0.0):
            self.bins[k] = late_s
            self.bins.move_to_end(k)
        while len(self.bins) > self.keep:
            self.bins.popitem(last=False)

    def report(self) -> dict:
        """JSON: bins as [bin start (epoch s), worst ms], oldest first."""
        return {"bin_s": BIN_S, "threshold_ms": THRESHOLD_S * 1000, "worst_ms": round(self.worst * 1000, 2),
                "samples": self.samples, "late": self.late,
                "bins": [[round(k * BIN_S, 1), round(v * 1000, 2)] for k, v in sorted(self.bins.items())]}
