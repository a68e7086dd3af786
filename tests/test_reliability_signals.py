"""Interruptions: SIGTERM, SIGHUP, SIGINT and a second SIGINT during the rollback, at points of `up`,
`run` and `down`. Afterwards either the rollback finished or one `down` removes everything; nothing
outside the lab is touched. (bench/reliability_sweep.py repeats this at random points, many times.)"""

from __future__ import annotations

import json
import sys
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lib.labs import HPN, _need_lab_machine, hpnlab, leftovers

pytestmark = pytest.mark.root
SMALL = "segments: 1\nhosts_per_segment: 2\nrails: 1\naggs_per_plane: 1\n"


def _spec(tmp_path, name: str) -> Path:
    p = tmp_path / f"{name}.yml"
    p.write_text(f"name: {name}\n{SMALL}")
    return p


def _interrupt_up(spec: Path, at: str, signals: list[int]) -> subprocess.CompletedProcess:
    """Start `hpnlab up`, send the first signal when a progress line contains ``at``, the others as soon
    as the rollback has started."""
    p = subprocess.Popen([*HPN, "up", str(spec)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    sent = 0
    for line in p.stderr:
        lines.append(line)
        if sent == 0 and at in line:
            p.send_signal(signals[0])
            sent = 1
        elif sent and "rolling back" in line and sent < len(signals):
            for s in signals[1:]:
                p.send_signal(s)
            sent = len(signals)
    out, _ = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(lines))


@pytest.mark.parametrize("sig,at", [(signal.SIGTERM, "starting bgpd"), (signal.SIGHUP, "creating"),
                                    (signal.SIGINT, "waiting for LACP")])
def test_a_signal_during_up_rolls_back(tmp_path, sig, at):
    _need_lab_machine()
    name = f"sg{int(sig)}"
    hpnlab("down", "--lab", name, check=False)
    r = _interrupt_up(_spec(tmp_path, name), at, [sig])
    assert r.returncode == 128 + sig, r.stderr[-2000:]
    assert "rolling back" in r.stderr and "Traceback" not in r.stderr
    assert leftovers(name) == []


def test_more_signals_during_the_rollback_do_not_stop_it(tmp_path):
    _need_lab_machine()
    name = "sgdbl"
    hpnlab("down", "--lab", name, check=False)
    r = _interrupt_up(_spec(tmp_path, name), "waiting for LACP", [signal.SIGINT, signal.SIGINT, signal.SIGTERM,
                                                                  signal.SIGINT])
    assert r.returncode == 130, r.stderr[-2000:]
    assert "please wait" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert leftovers(name) == []


def test_sigterm_during_run_reverts_writes_partial_results_and_removes_the_lab(tmp_path):
    _need_lab_machine()
    out = tmp_path / "out"
    p = subprocess.Popen([*HPN, "run", "link-failure", "--variants", "dual-tor-clos", "-n", "2", "--out", str(out)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "2/2: running" in line:  # the first repetition finished; stop the second one midway
            time.sleep(3.0)
            p.send_signal(signal.SIGTERM)
            break
    _, err = p.communicate(timeout=120)
    err = "".join(seen) + err
    assert p.returncode == 143, err[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert "partial" in res and len(res["variants"]["dual-tor-clos"]["runs"]) == 1, err[-1500:]
    assert not (out / "raw" / "dual-tor-clos" / "rep2").exists() and "removed the unfinished" in err
    assert leftovers("xp2") == []
    # what is left can be re-analysed (rebuilt to the same figures from raw/), and reused as --out
    r = hpnlab("run", "link-failure", "--variants", "dual-tor-clos", "--out", str(out), "--reanalyse")
    assert r.returncode == 0
    again = json.loads((out / "results.json").read_text())
    assert again["variants"]["dual-tor-clos"]["faults"] == res["variants"]["dual-tor-clos"]["faults"]


def test_sigkill_during_up_then_one_down_cleans_everything(tmp_path):
    _need_lab_machine()
    name = "sgkill"
    hpnlab("down", "--lab", name, check=False)
    p = subprocess.Popen([*HPN, "up", str(_spec(tmp_path, name))], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "starting" in line and "agents" in line:
            p.kill()
            break
    p.wait(timeout=30)
    assert leftovers(name) != []  # killed: nothing could roll back
    hpnlab("down", "--lab", name)
    assert leftovers(name) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_command_loads_exits_quietly(tmp_path, sig):
    """Before the command line has loaded nothing exists to roll back: exit 128+signal, no traceback."""
    exe = Path(sys.executable).parent / "hpnlab"  # the console script users run
    p = subprocess.Popen([str(exe), "up", str(_spec(tmp_path, "sgearly"))], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.15)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig and "Traceback" not in err, err[-1500:]
    assert leftovers("sgearly") == []
