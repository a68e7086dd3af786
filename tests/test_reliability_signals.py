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


# `up --timeout T` returns within T plus the rollback, also on a loaded machine. The rollback is the deploy
# step in flight (each runs to its end: a thread pool finishes its nodes) plus the teardown: on the default
# lab with both cores busy 0.93-1.11 s (results/up-timeout); ROLLBACK_S is that bound with wide margin.
ROLLBACK_S = 20.0


def _hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.mark.parametrize("timeout", [0.5, 2.0])
def test_up_returns_within_its_timeout_plus_the_rollback_under_load(tmp_path, timeout):
    """Two busy loops take both cores. 0.5 s lands in the deploy (the default lab's takes ~1.5 s idle),
    2 s in the deploy or the health wait: either way the command comes back in time (the clock here
    includes Python's start), rolls back and leaves nothing; or the lab made it, in time."""
    _need_lab_machine()
    name = f"tmo{int(timeout * 10)}"
    hpnlab("down", "--lab", name, check=False)
    spec = tmp_path / f"{name}.yml"
    spec.write_text(f"name: {name}\n")  # the default lab: 2 segments, 2 planes
    hogs = _hogs(2)
    try:
        began = time.monotonic()
        r = subprocess.run([*HPN, "up", str(spec), "--timeout", str(timeout)], cwd=ROOT, capture_output=True,
                           text=True, timeout=timeout + 120)
        took = time.monotonic() - began
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(f"up --timeout {timeout}: returned after {took:.2f} s, rc {r.returncode}")
    if r.returncode == 0:  # healthy within 4 s despite the load: nothing to bound, but it was in time
        hpnlab("down", "--lab", name)
        assert took <= timeout + ROLLBACK_S, (took, r.stderr[-1500:])
        return
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"not up within --timeout {timeout:g} s" in r.stderr or "not healthy after" in r.stderr, r.stderr[-2000:]
    assert took <= timeout + ROLLBACK_S, (took, r.stderr[-2000:])
    assert leftovers(name) == []
