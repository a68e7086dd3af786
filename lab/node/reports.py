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
