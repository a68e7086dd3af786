"""bench/rerun_results.py runs a named commit from a clean git worktree: a commit the repository lacks is
refused in one line (exit 2), and the code Python imports there is the commit's, clean, whatever the
working tree holds."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rerun_results_bench", ROOT / "bench" / "rerun_results.py")
rerun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rerun)


def _git_ok() -> bool:
    # the test VM's checkout is a copy of the files, without git installed: skip there, do not fail collection
    if shutil.which("git") is None:
        return False
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not _git_ok(), reason="git is not installed here, or this is not a git checkout: nothing to make a worktree of")


def test_a_commit_the_repository_lacks_is_refused_in_one_line(capsys):
    assert rerun.main(["--commit", "0" * 40, "link-failure"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--commit" in err and "0" * 40 in err
    assert rerun.main(["no-such-experiment"]) == 2
    with pytest.raises(rerun.Refused):
        rerun.resolve_commit("no-such-branch-anywhere")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert rerun.resolve_commit("HEAD") == head


def test_the_worktrees_code_is_what_runs_and_it_is_the_commits_clean(tmp_path):
    head = rerun.resolve_commit("HEAD")
    tree = rerun.add_worktree(head, tmp_path / "tree")
    try:
        shim = rerun.package_shim(tree, tmp_path / "shim")
        env = {**os.environ, "PYTHONPATH": str(shim)}
        code = ("import json, hpnlab.traffic.policies as pol, hpnlab.instrument.provenance as p;"
                "from hpnlab.traffic.run import experiment;"
                "print(json.dumps({'checkout': p.git_checkout(), 'dirty_paths': p.dirty_paths(),"
                "'traffic': str(__import__('pathlib').Path(pol.__file__).resolve()),"
                "'experiment': str(experiment.find('crux').resolve())}))")
        r = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["checkout"] == {"commit": head, "dirty": False} and got["dirty_paths"] == []
        assert got["traffic"].startswith(str(tree.resolve())) and got["experiment"].startswith(str(tree.resolve()))
        assert not any(p.name == "hpnlab" for p in tree.iterdir())  # nothing written into the worktree
    finally:
        rerun.remove_worktree(tree)
    assert not tree.exists()
    assert str(tree) not in subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                                           text=True).stdout


def test_a_result_not_made_from_the_commit_or_dirty_is_named(tmp_path):
    p = tmp_path / "results.json"
    p.write_text(json.dumps({"provenance": {"commit": "a" * 40, "dirty": False, "dirty_paths": []}}))
    assert rerun.check_made_from(p, "a" * 40) is None
    assert "not" in rerun.check_made_from(p, "b" * 40)
    p.write_text(json.dumps({"provenance": {"commit": "a" * 40, "dirty": True, "dirty_paths": ["lab/x.py"]}}))
    assert "dirty" in rerun.check_made_from(p, "a" * 40)


def test_a_benchs_results_written_in_the_worktree_are_copied_here(tmp_path):
    head = rerun.resolve_commit("HEAD")
    tree = rerun.add_worktree(head, tmp_path / "tree")
    try:
        (tree / "results" / "new-bench").mkdir(parents=True)
        (tree / "results" / "new-bench" / "x.json").write_text('{"provenance": {}}')
        root = tmp_path / "root"
        assert rerun.copy_results(tree, root) == ["results/new-bench/x.json"]
        assert (root / "results" / "new-bench" / "x.json").read_text() == '{"provenance": {}}'
        assert rerun.run_bench("no_such_bench.py", tree, {}, head, False).startswith("no bench script")
    finally:
        rerun.remove_worktree(tree)
