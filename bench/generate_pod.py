#!/usr/bin/env python3
"""Benchmark: generate the paper's full 15K-GPU Pod (issue target: < 10 s, < 1 GB RSS on 2 cores).

Runs `hpnlab generate` in a child process so its peak RSS is measured alone, three times.

    .venv/bin/python bench/generate_pod.py [--json results/generate-pod/generate-pod.json]

With --json the figures are also written to FILE with the provenance (the shipped one is named above).
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    spec = ROOT / "examples" / "hpn-pod-15k.yml"
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(3):
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "hpnlab.cli", "generate", str(spec), "--out", f"{d}/pod"],
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            runs.append(time.monotonic() - t0)
        files = sum(1 for _ in Path(d, "pod").rglob("*") if _.is_file())
        size = sum(p.stat().st_size for p in Path(d, "pod").rglob("*") if p.is_file())
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"full Pod (1920 hosts, 240 ToRs, 120 aggs, 45120 links): {files} files, {size / 1e6:.0f} MB")
    print(f"wall time per generate: min {min(runs):.2f} s, max {max(runs):.2f} s (target < 10 s)")
    print(f"peak RSS: {rss:.0f} MB (target < 1024 MB)")
    if a.json:
        from hpnlab.instrument import provenance

        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"provenance": provenance.collect(), "spec": "examples/hpn-pod-15k.yml",
                                      "runs": len(runs), "wall_s": [round(t, 2) for t in runs],
                                      "wall_s_min": round(min(runs), 2), "wall_s_max": round(max(runs), 2),
                                      "files": files, "size_mb": round(size / 1e6), "peak_rss_mb": round(rss)},
                                     indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
