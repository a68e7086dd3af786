"""`hpnlab up --timeout T` as a bound: how long after T the command returns, on the default lab and on the
paper's segment, idle and with both cores taken by busy loops, and that nothing is left behind.

    sudo .venv/bin/python bench/up_timeout.py [--runs 3] [--segment] [--out results/up-timeout/up-timeout.json]

Each case runs `hpnlab up SPEC --timeout T` as a whole command (Python's start included) and records when it
returned, its exit code, where the deadline fell (the deploy, "not up within", or the health wait, "not
healthy after") and whether `hpnlab down` afterwards still found anything. The overshoot (returned - T) is
the rollback: the deploy step in flight runs to its end (a thread pool finishes its nodes), then `down`.
--segment adds examples/segment-full.yml with its relaxed timers and with production ones (LACP fast, BFD
100 ms x 3, BGP 1/3: the case that returned after 651 s for a 400 s timeout before the deadline covered
the final verify), one run each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HPN = [sys.executable, "-m", "hpnlab.cli"]


def hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def one(spec: Path, lab: str, timeout: float, load: int) -> dict:
    subprocess.run([*HPN, "down", "--lab", lab], capture_output=True)
    busy = hogs(load)
    try:
        t0 = time.monotonic()
        r = subprocess.run([*HPN, "up", str(spec), "--timeout", str(timeout)], cwd=ROOT, capture_output=True,
                           text=True)
        took = time.monotonic() - t0
    finally:
        for h in busy:  # only the loops this script started, by PID
            h.kill()
            h.wait()
    phase = ("healthy" if r.returncode == 0 else "deploy" if "not up within" in r.stderr
             else "health wait" if "not healthy after" in r.stderr else "other")
    d = subprocess.run([*HPN, "down", "--lab", lab], capture_output=True, text=True)
    # a lab that came up healthy is left for down by design; one rolled back must leave nothing
    left = r.returncode != 0 and "not running" not in (d.stdout + d.stderr)
    row = {"spec": spec.name, "timeout_s": timeout, "busy_loops": load, "returned_s": round(took, 2),
           "overshoot_s": round(took - timeout, 2), "rc": r.returncode, "deadline_in": phase,
           "left_for_down": left, "traceback": "Traceback" in r.stderr}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def spec_file(tmp: Path, base: dict, name: str, **changes) -> Path:
    sp = {**base, "name": name, **changes}
    p = tmp / f"{name}.yml"
    p.write_text(yaml.safe_dump(sp))
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--segment", action="store_true", help="also the paper's segment (minutes)")
    ap.add_argument("--out", type=Path)
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    args = ap.parse_args()
    machineload.settle_or_exit(args.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    from hpnlab.instrument import provenance

    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        default = spec_file(tmp, {}, "uptmo")
        for load in (0, 2):
            for timeout in (0.5, 1.0, 2.0):
                rows += [one(default, "uptmo", timeout, load) for _ in range(args.runs)]
        if args.segment:
            seg = yaml.safe_load((ROOT / "examples" / "segment-full.yml").read_text())
            relaxed = spec_file(tmp, seg, "upseg")
            prod = spec_file(tmp, {k: v for k, v in seg.items() if k not in ("lacp", "bfd", "bgp")}, "upsegp",
                             lacp={"fast_rate": True}, bfd={"enabled": True},
                             bgp={"keepalive": 1, "hold": 3, "update_delay": 60})
            rows.append(one(relaxed, "upseg", 15.0, 0))
            rows.append(one(prod, "upsegp", 60.0, 0))
    out = {"provenance": provenance.collect(), **summarise(rows)}
    report(out)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def summarise(rows: list[dict]) -> dict:
    summary = {}
    for (spec, load), group in _groups(rows).items():
        over = [r["overshoot_s"] for r in group if r["rc"] != 0]
        if over:
            summary[f"{spec.removesuffix('.yml')}-busy{load}"] = {"runs": len(group), "failed_in_time": len(over),
                                         "overshoot_s": {"min": min(over), "median": statistics.median(over),
                                                         "max": max(over)}}
    return {"rows": rows, "summary": summary,
            "worst_overshoot_s": max((r["overshoot_s"] for r in rows if r["rc"] != 0), default=None),
            "left_for_down": sum(r["left_for_down"] for r in rows), "tracebacks": sum(r["traceback"] for r in rows)}


def report(out: dict) -> None:
    for k, v in out["summary"].items():
        o = v["overshoot_s"]
        print(f"{k:<24} {v['failed_in_time']}/{v['runs']} rolled back; returned after T + "
              f"{o['min']:.2f}/{o['median']:.2f}/{o['max']:.2f} s (min/median/max)")
    print(f"worst overshoot {out['worst_overshoot_s']} s; left for down after a rollback: {out['left_for_down']}; "
          f"tracebacks: {out['tracebacks']}")


def _groups(rows: list[dict]) -> dict:
    g: dict = {}
    for r in rows:
        g.setdefault((r["spec"], r["busy_loops"]), []).append(r)
    return g


if __name__ == "__main__":
    sys.exit(main())
