"""Users' own tests: examples/tests/ copied to a folder outside the checkout and run with plain pytest
(the plugin comes from the installed package's entry point). They pass and leave nothing behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpnlab.generate import frr
from hpnlab.machine.proc import is_node_process, processes
from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine

pytestmark = pytest.mark.root


def _snapshot() -> dict[str, set[str]]:
    ns = {ln.split()[0] for ln in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
          .stdout.splitlines() if ln.strip()}
    state = {p.name for p in Path("/run/hpnlab").iterdir()} if Path("/run/hpnlab").exists() else set()
    frr_dirs = {p.name for p in frr.RUN.glob("*-*")}
    procs = {str(pid) for pid, argv in processes().items() if frr.is_daemon(argv) or is_node_process(argv)}
    nft = set(subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout.splitlines())
    return {"netns": ns, "state": state, "frr": frr_dirs, "procs": procs, "nft": nft}


def test_example_user_tests_pass_from_outside_the_checkout(tmp_path):
    _need_lab_machine()
    work = tmp_path / "mytests"
    work.mkdir()
    for f in (ROOT / "examples" / "tests").glob("test_*.py"):
        shutil.copy(f, work)
    before = _snapshot()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(work)],
                       cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    after = _snapshot()
    assert {k: sorted(after[k] - before[k]) for k in after} == {k: [] for k in after}
    assert not (work / "hpnlab-artifacts").exists()  # nothing failed, so no evidence folder


def test_a_failing_user_test_leaves_its_evidence(tmp_path):
    """On failure the plugin keeps the lab's logs and the test's probe reports in a folder named after it."""
    _need_lab_machine()
    (tmp_path / "test_fails.py").write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.hpnlab(spec='default', overrides={'segments': 1, 'rails': 1})\n"
        "def test_expects_too_much(hpnlab_lab):\n"
        "    with hpnlab_lab.probes(src='s0h0', dst='s0h1', flows=4, rate=100) as p:\n"
        "        pass\n"
        "    assert p.result.sent == 0\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hpnlab-pcap", "."],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout[-3000:]
    [dest] = list((tmp_path / "hpnlab-artifacts").iterdir())
    assert "test_expects_too_much" in dest.name
    names = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert any(n.startswith("logs/") and n.endswith(".agent.log") for n in names), names
    assert any(n.startswith("logs/") and ".bgpd." in n for n in names), names
    assert {"probes-1/tx.json", "probes-1/rx.json"} <= names, names
    assert any(n.startswith("pcap/s0h0-") for n in names), names
