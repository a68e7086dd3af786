"""The ``hpnlab`` executable's first code. Until the command line is loaded (about 0.4 s of imports),
an interrupt has nothing to roll back, so it ends the process at once with 128+signal instead of a
KeyboardInterrupt traceback from the middle of an import; the CLI then installs the real handlers."""

from __future__ import annotations

import os
import signal


def _quit_early(signum, _frame) -> None:
    os._exit(128 + signum)


def main() -> int:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _quit_early)
    from hpnlab.cli import main as cli_main

    return cli_main()
