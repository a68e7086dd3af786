"""What every traffic tool inside a node shares: stop cleanly on SIGTERM/SIGINT (and still write the
report), start on a common wall-clock time, and write its one JSON report atomically."""

from __future__ import annotations

import json
import os
import signal
import time


class StopFlag:
    """SIGTERM/SIGINT end a run early but still write the report."""

    def __init__(self) -> None:
        self.flag = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_a) -> None:
        self.flag = True


def wait_until(t_epoch: float) -> None:
    """Sleep until a wall-clock time (the same clock in every namespace of one machine)."""
    while (d := t_epoch - time.time()) > 0:
        time.sleep(min(d, 0.2))


def write_json(report: dict, out: str) -> None:
    """Atomically to ``out``; ``-``: on standard output (a node reached over a remote exec channel, whose
    files the controller cannot read, hands its report back this way)."""
    if out == "-":
        import sys

        json.dump(report, sys.stdout)
        sys.stdout.flush()
        return
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, out)


class Live:
    """A tool's running count for the live view (``hpnlab watch``): ``<out>.live``, rewritten atomically at
    most once a second while the count changes; the experiment runner reads it once a second. Nothing
    where the report goes to standard output (a remote node: its files are not the controller's)."""

    PERIOD_S = 1.0

    def __init__(self, out: str):
        self.path = None if out == "-" else out + ".live"
        self.last = -1
        self.next_at = 0.0

    def tick(self, count: int) -> None:
        if self.path is None or count == self.last:
            return
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at, self.last = now + self.PERIOD_S, count
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"t": time.time(), "count": count}, f)
            os.replace(tmp, self.path)
        except OSError:  # the run's folder went away: the run is over, the report says what matters
            self.path = None
