#!/usr/bin/env python3
"""Merge the results of one experiment run in parts (``hpnlab run EXP --variants A --out DIR_A``, then B, ...)
into one results folder: results.json with every part's variants, summary.txt, plot.png, timeline.png.

Why: the lab lock is shared, and a long experiment is run one variant (or a few) per acquisition; each part
is a complete run of its variants, with its own provenance, kept under ``parts`` (the part's folder, when
it started and finished, its commit and whether the tree was dirty, and the code that re-analysed it if
``--reanalyse`` did); the merged ``provenance`` names every part's commit (``commits``) and is dirty when
any part was. Nothing is recomputed from raw/:
each variant's figures are the part's own. Usage:

  .venv/bin/python bench/merge_results.py results/gray-failure /tmp/gf/bfd-uplink /tmp/gf/prober-uplink ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def merge(parts: list[dict], names: list[str]) -> dict:
    """One results dict from several runs' of the same experiment (pure)."""
    exps = {p["experiment"] for p in parts}
    if len(exps) != 1:
        raise SystemExit(f"merge_results: the parts are of different experiments ({', '.join(sorted(exps))})")
    out = {k: v for k, v in parts[0].items() if k not in ("variants", "partial")}
    out["variants"] = {}
    for p, name in zip(parts, names):
        if p.get("partial"):
            raise SystemExit(f"merge_results: {name} is a partial run ({p['partial']})")
        for v, rec in p["variants"].items():
            if v in out["variants"]:
                raise SystemExit(f"merge_results: variant {v} is in more than one part")
            out["variants"][v] = rec
    out["provenance"] = merged_provenance([p.get("provenance") or {} for p in parts])
    out["started"] = min(p["started"] for p in parts)
    out["finished"] = max(p["finished"] for p in parts)
    out["parts"] = [{"from": name, "variants": list(p["variants"]), "started": p["started"],
                     "finished": p["finished"], "commit": p.get("provenance", {}).get("commit"),
                     "dirty": p.get("provenance", {}).get("dirty"),
                     **({"reanalysed_by": p["reanalysed_by"]} if p.get("reanalysed") else {})}
                    for p, name in zip(parts, names)]
    return out


def merged_provenance(provs: list[dict]) -> dict:
    """The first part's provenance (its machine and software), with every part's code: ``commits`` (each
    part's, in order), ``parts_dirty``; ``commit`` the one they share or "several"; ``dirty`` true when any
    part's was, false when none was, else "unknown"; ``dirty_paths`` every part's, together ("unknown"
    when a part could not tell)."""
    out = dict(provs[0]) if provs else {}
    commits = [p.get("commit", "unknown") for p in provs]
    dirty = [p.get("dirty", "unknown") for p in provs]
    paths = [p.get("dirty_paths", "unknown") for p in provs]
    out["commits"], out["parts_dirty"] = commits, dirty
    out["commit"] = commits[0] if len(set(commits)) == 1 else "several"
    out["dirty"] = True if True in dirty else (False if all(d is False for d in dirty) else "unknown")
    out["dirty_paths"] = (sorted({x for p in paths for x in p}) if all(isinstance(p, list) for p in paths)
                          else "unknown")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the merged results folder (created)")
    ap.add_argument("parts", nargs="+", type=Path, help="the parts' results folders, in the order to list them")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hpnlab.instrument import provenance
    from hpnlab.traffic import runner
    from hpnlab.traffic.output import report

    parts = [json.loads((d / "results.json").read_text()) for d in a.parts]
    res = merge(parts, [str(d) for d in a.parts])
    res["probe_rate"] = report.probe_rates([r for v in res["variants"].values() for r in v["runs"]])
    res["provenance"].update(provenance.summarise(res["variants"]))
    a.out.mkdir(parents=True, exist_ok=True)
    _png, table = runner.write_results(res, a.out)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
