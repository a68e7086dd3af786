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
    sudo .venv/bin/python bench/rerun_results.py --bench 'gray_prober.py --json results/gray-prober/gray.json'

``--bench 'SCRIPT ARGS'`` runs a bench script of the worktree instead (repeatable, in order, after the
experiments named): it writes into the worktree's results/, and every file it added or changed there is
copied into this tree's results/ afterwards (a JSON among them that does not record the commit and clean
code fails the run).

Nothing else should run meanwhile: the figures are timings on a 2-core machine. Each ``hpnlab run`` waits
for a quiet machine and refuses a busy one (--busy-ok passes on to it). An experiment that fails, or whose
results.json does not record the commit and a clean tree, is reported and the others still run; the exit
code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
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


def copy_results(tree: Path, root: Path = ROOT) -> list[str]:
    """Copy every file under ``tree``/results that git sees changed or added there into ``root``/results;
    the paths copied, relative to the repository."""
    r = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "-z", "--untracked-files=all", "--", "results"],
                       capture_output=True, text=True, check=True)
    out = []
    for e in r.stdout.split("\0"):
        rel = e[3:]
        if len(e) > 3 and (tree / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tree / rel, root / rel)
            out.append(rel)
    return sorted(out)


def run_bench(spec: str, tree: Path, env: dict, commit: str, busy_ok: bool) -> str | None:
    """One bench script of the worktree ('SCRIPT ARGS'), its results copied here; why it failed, or None."""
    argv = shlex.split(spec)
    script = tree / "bench" / argv[0]
    if not argv or not script.is_file():
        return f"no bench script '{argv[0] if argv else spec}' in bench/"
    r = subprocess.run([sys.executable, str(script), *argv[1:], *(["--busy-ok"] if busy_ok else [])],
                       cwd=tree, env=env)
    copied = copy_results(tree)
    print(f"== {argv[0]}: copied {', '.join(copied) or 'nothing'}", flush=True)
    if r.returncode != 0:
        return f"exit {r.returncode}"
    bad = [f"{rel}: {why}" for rel in copied if rel.endswith(".json")
           and (why := check_made_from(ROOT / rel, commit))]
    return "; ".join(bad) or (None if copied else "it wrote nothing under results/")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="experiments to run (default: all)")
    ap.add_argument("--list", action="store_true", help="print the experiments and stop")
    ap.add_argument("--commit", default="HEAD", help="the commit to run (default HEAD); its clean worktree runs")
    ap.add_argument("--busy-ok", action="store_true", help="passed to hpnlab run: measure on a busy machine too")
    ap.add_argument("--bench", action="append", default=[], metavar="'SCRIPT ARGS'",
                    help="a bench script of the worktree to run (repeatable); its results are copied here")
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
        for name in a.names or ([] if a.bench else list(known)):
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
        for spec in a.bench:
            t = time.monotonic()
            print(f"== {spec}", flush=True)
            why = run_bench(spec, tree, env, commit, a.busy_ok)
            print(f"== {spec}: {why or 'ok'} in {time.monotonic() - t:.0f} s", flush=True)
            if why:
                failed.append(spec)
    finally:
        remove_worktree(tmp / "tree")
        shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
