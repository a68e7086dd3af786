#!/usr/bin/env python3
"""Fit time dilation's error model to a results folder of experiments/time-dilation.yml (hpnlab.traffic.
dilationfit): per detector, each k's reading in the fabric's time beside 1:1, and R = T + W / k fitted with its
residual. Writes fit.json beside results.json and prints the table. Usage:

  .venv/bin/python bench/time_dilation_fit.py results/time-dilation
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hpnlab.traffic.analysis import dilationfit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="a results folder holding results.json")
    args = ap.parse_args(argv)
    try:
        results = json.loads((args.dir / "results.json").read_text())
    except (OSError, ValueError) as e:
        print(f"time_dilation_fit: {args.dir / 'results.json'}: {e}", file=sys.stderr)
        return 2
    analysis = dilationfit.analyse(results)
    from hpnlab.instrument import provenance

    # the fitting code's commit, and the run's it was fitted from (every JSON under results/ says what made it)
    analysis["provenance"] = {**provenance.code(), "dirty_paths": provenance.dirty_paths(),
                              "fitted_from": {k: (results.get("provenance") or {}).get(k) for k in ("commit", "dirty")}}
    (args.dir / "fit.json").write_text(json.dumps(analysis, indent=1) + "\n")
    for figure in dilationfit.FIGURES:
        print("\n".join(dilationfit.table(analysis, figure)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
