"""The one progress display of hpnlab: lines on stderr stamped with the elapsed time (stdout stays clean
for --json), and, on a terminal, one bar redrawn in place for a step that runs a known time (an
experiment's repetition). ``up``, ``down``, ``run``, the Python API and the plugin all print through it;
anything that takes a ``progress`` argument also accepts a plain ``callable(str)``.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

Report = Callable[[str], None]


class Progress:
    def __init__(self, quiet: bool = False):
        self.t0 = time.monotonic()
        self.quiet = quiet
        self.tty = sys.stderr.isatty() and not quiet
        self._bar = ""  # the bar line on screen, if any
        self.said: set[str] = set()  # lines printed once per Progress (hpnlab.lifecycle.orchestrate.say_once)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, msg: str) -> None:
        if self.quiet:
            return
        if self._bar:
            sys.stderr.write("\r\033[K")
            self._bar = ""
        print(f"[{self.elapsed:6.1f}s] {msg}", file=sys.stderr, flush=True)

    phase = __call__

    def bar(self, label: str, done: float, total: float, note: str = "") -> None:
        """Redraw the bar (terminals only: a log gets the phase lines, not hundreds of redraws)."""
        if not self.tty:
            return
        n = int(30 * min(1.0, done / total)) if total else 30
        line = f"{label} [{'#' * n}{'.' * (30 - n)}] {done:5.1f}/{total:g} s {note}"
        if line != self._bar:
            sys.stderr.write("\r\033[K" + line[:150])
            sys.stderr.flush()
            self._bar = line

    def end_bar(self) -> None:
        if self._bar:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._bar = ""


def as_progress(progress: Progress | Report | None) -> Progress:
    """A Progress for code that draws bars; a plain callable keeps receiving the phase lines."""
    if isinstance(progress, Progress):
        return progress
    if progress is None:
        return Progress(quiet=True)
    return _Forward(progress)


class _Forward(Progress):
    """Phase lines go to a caller's function; no bar."""

    def __init__(self, report: Report):
        super().__init__(quiet=True)
        self._report = report

    def __call__(self, msg: str) -> None:
        self._report(msg)

    phase = __call__
