#!/usr/bin/env python3
"""Re-run the shipped experiments into results/<name>/ (root), one after the other, each with the file's
own repetitions, and print how long each took. Every results.json records its provenance (commit,
kernel, congestion control, cores), so the docs can say which run a figure comes from.

    sudo .venv/bin/python bench/rerun_results.py                      # every failover experiment
    sudo .venv/bin/python bench/rerun_results.py link-failure tor-failure
    sudo .venv/bin/python bench/rerun_results.py --list

Nothing else should run meanwhile: the figures are timings on a 2-core machine, and the lateness meter
flags what a busy neighbour moved. An experiment that fails is reported and the others still run; the
exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (name, extra arguments): the order runs the quick ones first, the paper's segment last
EXPERIMENTS = [("link-failure", []), ("torch-link-failure", []), ("tor-failure", []), ("tor-hang-holddown", []), ("one-way-failure", []),
               ("link-flap", []), ("repair-delay", []), ("stacked-vs-nonstacked", []), ("ablations", []), ("fare", []),
               ("load-balance", []), ("agg-failure", []), ("link-failure-segment", []), ("tor-hang-segment", []), ("crux", []),
               ("ring-order", []), ("dlb", []), ("gray-failure", []), ("dlb-allreduce", [])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="experiments to run (default: all)")
    ap.add_argument("--list", action="store_true", help="print the experiments and stop")
    a = ap.parse_args(argv)
    known = dict(EXPERIMENTS)
    if a.list:
        print("\n".join(known))
        return 0
    bad = [n for n in a.names if n not in known]
    if bad:
        print(f"rerun_results: unknown experiment(s) {', '.join(bad)}; --list shows them", file=sys.stderr)
        return 2
    failed = []
    for name in a.names or list(known):
        t = time.monotonic()
        print(f"== {name}", flush=True)
        r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", name, "--out", str(ROOT / "results" / name),
                            "--force", *known[name]], cwd=ROOT)
        print(f"== {name}: exit {r.returncode} in {time.monotonic() - t:.0f} s", flush=True)
        if r.returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
