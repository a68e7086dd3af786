"""vm/run.py's reading of a step's junit XML, root-free: the counts and, for each failed test, its name and
pytest's report (a failed VM step's log keeps only its tail, where -rP's passed output comes last)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.conftest import ROOT


def _run_module():
    spec = importlib.util.spec_from_file_location("vm_run", ROOT / "vm" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_junit_counts_names_each_failed_test_with_its_report(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok():\n    print('passed output')\n"
        "def test_bad():\n    assert 1 + 1 == 3, 'arithmetic moved'\n"
        "def test_skip():\n    pytest.skip('not here')\n")
    xml = tmp_path / "r.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rP", f"--junitxml={xml}",
                    str(tmp_path / "test_x.py")], capture_output=True, cwd=tmp_path, timeout=120)
    c = _run_module().junit_counts(xml)
    assert (c["tests"], c["passed"], c["failures"], c["skipped"]) == (3, 1, 1, 1), c
    [f] = c["failed"]
    assert f["test"].endswith("::test_bad") and "arithmetic moved" in f["message"], f
    assert "assert 1 + 1 == 3" in f["detail"], f


def test_junit_counts_of_a_missing_or_broken_file_is_none(tmp_path):
    mod = _run_module()
    assert mod.junit_counts(tmp_path / "absent.xml") is None
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite")
    assert mod.junit_counts(tmp_path / "cut.xml") is None


def test_the_source_tar_carries_the_commit_it_was_made_from(tmp_path):
    """The VM's copy has no .git; the tar holds the commit so the VM's results' provenance can name it."""
    import json
    import tarfile

    mod = _run_module()
    n = mod.source_tar(tmp_path / "src.tar")
    with tarfile.open(tmp_path / "src.tar") as tar:
        names = tar.getnames()
        stamp = json.loads(tar.extractfile(".hpnlab-source.json").read())
    assert n >= 50 and "pyproject.toml" in names and not any(x.startswith(".git/") for x in names)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert stamp["commit"] == head.stdout.strip() and isinstance(stamp["dirty"], bool), stamp


def test_under_tcg_every_step_gets_slower_bfd_and_the_results_line_says_so(tmp_path):
    """Under TCG the guest's steps get HPNLAB_SPEC_OVERRIDES (vm/guest.sh sources the run folder's env file),
    which the spec loader honours; under KVM the specs run as written; the results line names it."""
    import json
    import os

    from hpnlab.model.spec import load_spec

    run = _run_module()
    assert run.spec_overrides("kvm") == {}
    over = run.spec_overrides("tcg")
    env = {**os.environ, "HPNLAB_SPEC_OVERRIDES": json.dumps(over)}
    r = subprocess.run([sys.executable, "-c", "from hpnlab.model.spec import load_spec; print(load_spec().bfd.interval_ms)"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.strip() == str(over["bfd"]["interval_ms"]) != str(load_spec().bfd.interval_ms), r.stderr
    res = {"kernel": "6.1.0-50-amd64", "accel": "tcg", "spec_overrides": over, "outcome": "done", "ok": True,
           "seconds": 1.0, "steps": [{"step": "up", "rc": 0, "seconds": 1.0}]}
    assert '[tcg; {"bfd": {"interval_ms": 1000}}] OK' in run.line(res)
    # guest.sh exports what env holds to every step
    (tmp_path / "env").write_text("HPNLAB_SPEC_OVERRIDES='{\"bfd\": {\"interval_ms\": 1000}}'\n")
    r = subprocess.run(["bash", "-c", f'R={tmp_path}; set -a; . "$R/env"; set +a; python3 -c '
                        '"import os; print(os.environ[\'HPNLAB_SPEC_OVERRIDES\'])"'], capture_output=True, text=True)
    assert json.loads(r.stdout) == over
    assert 'set -a; . "$R/env"; set +a' in (ROOT / "vm" / "guest.sh").read_text()
