#!/usr/bin/env python3
"""Re-run the shipped experiments into results/<name>/ (root) from a clean checkout of one commit, one after
the other, each with the file's own repetitions, and print how long each took.

The code that runs is a git worktree of ``--commit`` (default HEAD) made for the run and removed after it,
not this working tree: every results.json it writes records that commit and ``dirty: false`` by how it was
made, whatever is being edited here meanwhile. A commit the repository does not have is refused (one line,
exit 2). The worktree's code is what Python imports (a package folder of links to the worktree's lab/,
traffic/, templates/, examples/ and experiments/, first on PYTHONPATH, which the ranks and agents started
inside the labs inherit); the results go into this tree's results/.

    sudo .venv/bin/python bench/rerun_results.py                      # every failover experiment, at HEAD
    sudo .venv/bin/python bench/rerun_results.py link-failure tor-failure --commit 1a2b3c4
    sudo .venv/bin/python bench/rerun_results.py --list

Nothing else should run meanwhile: the figures are timings on a 2-core machine. Each ``hpnlab run`` waits
for a quiet machine and refuses a busy one (--busy-ok passes on to it). An experiment that fails, or whose
results.json does not record the commit and a clean tree, is reported and the others still run; the exit
code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (name, extra arguments): the order runs the quick ones first, the paper's segment last
EXPERIMENTS = [("link-failure", []), ("torch-link-failure", []), ("tor-failure", []), ("tor-hang-holddown", []), ("one-way-failure", []),
               ("link-flap", []), ("repair-delay", []), ("stacked-vs-nonstacked", []), ("ablations", []), ("fare", []),
               ("load-balance", []), ("agg-failure", []), ("link-failure-segment", []), ("tor-hang-segment", []), ("crux", []),
               ("ring-order", []), ("dlb", []), ("gray-failure", []), ("dlb-allreduce", [])]


class Refused(Exception):
    """Bad input: one line, exit 2."""


def resolve_commit(rev: str, repo: Path = ROOT) -> str:
    """The full hash of ``rev`` (a hash, branch or tag) in ``repo``; Refused when the repository has no such
    commit."""
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        raise Refused(f"--commit: '{rev}' is not a commit of {repo}; give a commit hash, branch or tag it has")
    return r.stdout.strip()


def add_worktree(commit: str, where: Path, repo: Path = ROOT) -> Path:
    """A detached git worktree of ``commit`` at ``where`` (its tracked files exactly the commit's)."""
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(where), commit],
                   check=True, capture_output=True, text=True)
    return where


def remove_worktree(where: Path, repo: Path = ROOT) -> None:
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(where)], capture_output=True)
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def package_shim(tree: Path, shim: Path) -> Path:
    """``shim``/hpnlab: the package as pyproject.toml's package-dir maps it (hpnlab = lab/, hpnlab.traffic =
    traffic/, ...), made of links into ``tree``; put ``shim`` first on PYTHONPATH to import ``tree``'s code.
    Nothing is written inside ``tree`` (an untracked file there would make its code not the commit's)."""
    dirs = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    pkg = shim / "hpnlab"
    pkg.mkdir(parents=True)
    for entry in (tree / dirs["hpnlab"]).iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, d in dirs.items():
        if name != "hpnlab":
            (pkg / name.split(".", 1)[1]).symlink_to(tree / d)
    return shim


def check_made_from(results: Path, commit: str) -> str | None:
    """Why ``results`` (a results.json) was not made from ``commit`` with clean code, or None when it was."""
    try:
        prov = json.loads(results.read_text()).get("provenance") or {}
    except (OSError, ValueError) as e:
        return f"no readable results.json ({e})"
    if prov.get("commit") != commit:
        return f"it records commit {prov.get('commit')}, not {commit}"
    if prov.get("dirty") is not False or prov.get("dirty_paths"):
        return f"it records dirty {prov.get('dirty')}, dirty_paths {prov.get('dirty_paths')}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="experiments to run (default: all)")
    ap.add_argument("--list", action="store_true", help="print the experiments and stop")
    ap.add_argument("--commit", default="HEAD", help="the commit to run (default HEAD); its clean worktree runs")
    ap.add_argument("--busy-ok", action="store_true", help="passed to hpnlab run: measure on a busy machine too")
    a = ap.parse_args(argv)
    known = dict(EXPERIMENTS)
    if a.list:
        print("\n".join(known))
        return 0
    bad = [n for n in a.names if n not in known]
    try:
        if bad:
            raise Refused(f"unknown experiment(s) {', '.join(bad)}; --list shows them")
        commit = resolve_commit(a.commit)
    except Refused as e:
        print(f"rerun_results: error: {e}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hpnlab-rerun-"))
    failed = []
    try:
        tree = add_worktree(commit, tmp / "tree")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(package_shim(tree, tmp / "shim")), *filter(None, [os.environ.get("PYTHONPATH")])])}
        print(f"== running commit {commit} from a clean worktree at {tree}", flush=True)
        for name in a.names or list(known):
            t = time.monotonic()
            out = ROOT / "results" / name
            print(f"== {name}", flush=True)
            r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", name, "--out", str(out), "--force",
                                *(["--busy-ok"] if a.busy_ok else []), *known[name]], cwd=tree, env=env)
            why = check_made_from(out / "results.json", commit) if r.returncode == 0 else None
            print(f"== {name}: exit {r.returncode} in {time.monotonic() - t:.0f} s" + (f"; {why}" if why else ""),
                  flush=True)
            if r.returncode != 0 or why:
                failed.append(name)
    finally:
        remove_worktree(tmp / "tree")
        shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
