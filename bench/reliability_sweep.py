"""The long reliability sweep: interrupt `hpnlab up`, `run` and `down` at random points with SIGKILL,
SIGTERM, SIGHUP, SIGINT or a double SIGINT, many times, and check after each that either the rollback
finished or one `hpnlab down` removes everything - while foreign objects named like a lab survive.

    sudo .venv/bin/python bench/reliability_sweep.py [--runs 40] [--seed 1]

Prints one line per run and a summary; exits 1 if anything was left after `down` or anything foreign
was touched. (tests/test_reliability_*.py hold the fast, fixed-point versions that CI runs.)
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpnlab.lifecycle.orchestrate import leftovers  # noqa: E402  (what carries a lab's name)

HPN = [str(Path(sys.executable).parent / "hpnlab")]  # the console script, as users run it
LAB = "swp"
SPEC = "name: swp\nsegments: 1\nhosts_per_segment: 2\nrails: 1\naggs_per_plane: 1\n"
SIGS = {"SIGKILL": [signal.SIGKILL], "SIGTERM": [signal.SIGTERM], "SIGHUP": [signal.SIGHUP],
        "SIGINT": [signal.SIGINT], "2xSIGINT": [signal.SIGINT, signal.SIGINT]}


def foreign_objects() -> dict:
    """Things named like another lab ('swpx'), and a root nftables table: none may ever change."""
    subprocess.run(["ip", "netns", "add", "swpx-agg0-0"], capture_output=True)
    d = Path("/var/run/frr/swpx-agg0-0")
    d.mkdir(parents=True, exist_ok=True)
    (d / "keep").write_text("foreign")
    subprocess.run(["nft", "add", "table", "inet", "swpforeign"], capture_output=True)
    return snapshot_foreign()


def snapshot_foreign() -> dict:
    ns = "swpx-agg0-0" in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    keep = Path("/var/run/frr/swpx-agg0-0/keep")
    nft = "swpforeign" in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return {"netns": ns, "frr": keep.exists() and keep.read_text() == "foreign", "nft": nft}


def remove_foreign() -> None:
    subprocess.run(["ip", "netns", "del", "swpx-agg0-0"], capture_output=True)
    Path("/var/run/frr/swpx-agg0-0/keep").unlink(missing_ok=True)
    Path("/var/run/frr/swpx-agg0-0").rmdir()
    subprocess.run(["nft", "delete", "table", "inet", "swpforeign"], capture_output=True)


def one(action: str, sig: str, delay: float, work: Path) -> dict:
    spec = work / "swp.yml"
    if action == "down":
        subprocess.run([*HPN, "up", str(spec)], capture_output=True)
        argv = [*HPN, "down", "--lab", LAB]
    elif action == "up":
        argv = [*HPN, "up", str(spec)]
    else:
        exp = work / "exp.yml"
        exp.write_text(json.dumps({"name": "swp", "spec": str(spec), "duration": 4, "lab_prefix": "swp",
                                   "probes": [{"name": "p", "src": "s0h0", "dst": "s0h1"}],
                                   "faults": [{"kind": "link-down", "node": "s0h0", "iface": "r0p0",
                                               "at": 1, "until": 2}]}))
        argv = [*HPN, "run", str(exp), "--out", str(work / f"out-{time.time_ns()}")]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    for s in SIGS[sig]:
        if p.poll() is None:
            p.send_signal(s)
            time.sleep(0.1)
    try:
        _, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    lab = "swp0" if action == "run" else LAB
    left = leftovers(lab)
    after = []
    if left:
        subprocess.run([*HPN, "down", "--lab", lab], capture_output=True)
        after = leftovers(lab)
    return {"action": action, "signal": sig, "delay": round(delay, 2), "rc": p.returncode,
            "traceback": "Traceback" in (err or ""), "left": len(left), "left_after_down": after}


def describe(r: dict) -> str:
    if not r["left"]:
        return "nothing left (rolled back, or down finished)"
    if r["action"] == "up" and r["rc"] == 0:
        return "up had finished before the signal (the lab is up, as asked); down removed it"
    if r["action"] == "down":
        return f"down stopped before it began ({r['left']} objects still up); the next down removed them"
    return f"{r['left']} objects left (nothing rolls back a SIGKILL); one down removed them"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    args = ap.parse_args()
    machineload.settle_or_exit(args.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="hpnlab-sweep."))
    (work / "swp.yml").write_text(SPEC)
    before = foreign_objects()
    rows = []
    try:
        for i in range(args.runs):
            action = rng.choice(["up", "up", "run", "down"])
            sig = rng.choice(list(SIGS))
            delay = rng.uniform(0.2, {"up": 4.0, "run": 12.0, "down": 1.0}[action])
            r = one(action, sig, delay, work)
            rows.append(r)
            print(f"{i + 1:3d} {action:<5}{sig:<9} at {r['delay']:5.2f} s: exit {r['rc']}, "
                  f"{describe(r)}"
                  + (f"; STILL LEFT {r['left_after_down']}" if r["left_after_down"] else "")
                  + ("; TRACEBACK" if r["traceback"] else ""), flush=True)
    finally:
        intact = snapshot_foreign() == before
        remove_foreign()
    bad = [r for r in rows if r["left_after_down"]]
    tb = [r for r in rows if r["traceback"]]
    done = [r for r in rows if r["action"] == "up" and r["rc"] == 0]
    print(f"summary: {len(rows)} interruptions; nothing left {sum(not r['left'] for r in rows)}, up finished "
          f"before the signal {len(done)}, cleaned by one down "
          f"{sum(bool(r['left']) and not r['left_after_down'] for r in rows if r not in done)}, "
          f"left after down {len(bad)}; tracebacks {len(tb)}; foreign objects intact: {intact}")
    return 0 if not bad and intact else 1


if __name__ == "__main__":
    sys.exit(main())
