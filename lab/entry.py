"""The ``hpnlab`` executable's first code. Until the command line is loaded (about 0.4 s of imports),
an interrupt has nothing to roll back, so it ends the process at once with 128+signal instead of a
KeyboardInterrupt traceback from the middle of an import; the CLI then installs the real handlers."""

from __future__ import annotations

import os
import signal
import sys


def _quit_early(signum, _frame) -> None:
    os._exit(128 + signum)


def main() -> int:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _quit_early)
    if sys.argv[1:2] == ["down"]:
        # A lab too large for the machine can keep every core busy (the paper's full segment: load 250),
        # and then even Python's imports took 22 s, nice -10 or not. The command that removes it runs
        # first: lowest real-time priority, a few seconds of bounded work (as root; else unchanged).
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except (OSError, AttributeError):
            pass
    from hpnlab.cli import main as cli_main

    return cli_main()
