#!/usr/bin/env python3
"""Benchmark: the black-box prober's rules for choosing paths and naming links, compared on the default
lab's own path map by simulation (hpnlab.instrument.probesim).

The lab is brought up once, for its path map (every host NIC's and agg's candidate paths, the kernel's own
hash); then, root-free and without timing, each rule set chooses its paths from that map and judges 1 %
silent loss starting on every directed access and ToR-agg link in turn, --trials faults per link, a
judgement every 0.5 s from the fault's start, the same random draws for every rule set. Per rule set:
the paths it probes, the faults whose first confirmed link was another (wrong), the faults nothing
confirmed within --horizon-s, and the time to confirm the right link (min/median/p90/p99/max).

Rule sets: ``apart`` (two links sharing a path must differ in at least this many paths;
hpnlab.instrument.probeplan.close) and ``min_margin`` (the top suspect must explain the window this much
likelier than the runner-up, as a log likelihood ratio; hpnlab.instrument.tomography.named).

Needs root (the lab). Usage:
  sudo .venv/bin/python bench/prober_rules.py --json results/prober-rules/rules.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (label, apart, min_margin): before the rules (1, none), each rule alone, the defaults, more paths
RULES = [("apart 1, no margin", 1, None), ("apart 2, no margin", 2, None), ("apart 1, margin 4.6", 1, 4.6),
         ("apart 2, margin 4.6", 2, 4.6), ("apart 3, margin 4.6", 3, 4.6)]


def key(label: str) -> str:
    """'apart 2, margin 4.6' -> 'apart2-margin4p6': keys without dots or spaces (docs address them)."""
    return label.replace(", ", "-").replace(" ", "").replace(".", "p")


def one(job: tuple) -> tuple[str, dict]:
    label, apart, margin, cands, want, settings, trials, horizon = job
    from hpnlab.instrument import probeplan, probesim

    chosen, have = probeplan.choose(cands, int(settings["cover"]), want, apart=apart)
    rules = {**settings, "apart": apart, "min_margin": float("-inf") if margin is None else margin}
    t = time.time()
    res = probesim.sweep(chosen, want, trials, rules, seed=1, horizon_s=horizon)
    return key(label), {"label": label, "apart": apart, "min_margin": margin, "paths": len(chosen),
                        "close": len(probeplan.close(chosen, want, 2)), "short": probeplan.short(have),
                        **res, "sim_s": round(time.time() - t, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=300, help="faults per link and rule set (default 300)")
    ap.add_argument("--horizon-s", type=float, default=20.0, help="seconds after a fault's start it may take")
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hpnlab.api import Lab
    from hpnlab.instrument import probeplan, provenance
    from hpnlab.traffic.run.prober import DEFAULTS

    out: dict = {"provenance": provenance.collect(), "settings": {"trials": a.trials, "horizon_s": a.horizon_s,
                                                                 "loss": 0.01, "prober": DEFAULTS}}
    print("bringing up the default lab for its path map ...", flush=True)
    with Lab.up("default", name="prr") as lab:
        p = lab.prober()
        out["plan"] = p.plan()
        cands, want = p.candidates, probeplan.fabric_links(lab.cfgs)
    out["candidates"] = len(probeplan.complete(cands))
    out["links"] = len(want)
    jobs = [(label, apart, margin, cands, want, DEFAULTS, a.trials, a.horizon_s) for label, apart, margin in RULES]
    out["rules"] = {}
    with ProcessPoolExecutor(max_workers=2) as ex:
        for k, res in ex.map(one, jobs):
            out["rules"][k] = res
            print(f"{res['label']:<22} paths {res['paths']:>3}  wrong {res['wrong']:>4}/{res['faults']} "
                  f"({100 * res['wrong_share']:.2f} %)  unconfirmed {res['unconfirmed']:>3}  confirm s "
                  f"median {res['confirm_s']['median']} p99 {res['confirm_s']['p99']} max {res['confirm_s']['max']}",
                  flush=True)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1))
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
