"""On a running lab: nothing outside it is touched, and every failure is a row or a line, not a crash."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from hpnlab.machine.proc import pid_alive
from tests.lib.labs import hpnlab, leftovers

pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name="rel",
                                                   overrides={"segments": 1, "rails": 1, "aggs_per_plane": 1})]


def _digest(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None


def test_write_file_inside_a_router_stays_in_the_lab(hpnlab_lab):
    etc = {p: _digest(p) for p in Path("/etc/frr").glob("*")}
    r = hpnlab("exec", "s0r0a", "--lab", hpnlab_lab.name, "--", "vtysh", "-c", "write file")
    assert f"/run/hpnlab/{hpnlab_lab.name}/config/s0r0a/frr.conf" in r.stdout + r.stderr
    assert {p: _digest(p) for p in Path("/etc/frr").glob("*")} == etc  # the machine's FRR config untouched
    r = hpnlab("exec", "s0r0a", "--lab", hpnlab_lab.name, "--", "vtysh", "-c", "show running-config")
    assert "hostname s0r0a" in r.stdout


def test_verify_reports_a_hung_router_as_a_failed_row(hpnlab_lab):
    with hpnlab_lab.fault("hang", node="agg0-0"):
        t0 = time.monotonic()
        r = hpnlab("verify", "--lab", hpnlab_lab.name, "--json", check=False, timeout=120)
        took = time.monotonic() - t0
    rows = {c["name"]: c for c in json.loads(r.stdout)}
    assert r.returncode == 1 and rows["bgp agg0-0"]["ok"] is False and "not answering" in rows["bgp agg0-0"]["detail"]
    assert "Traceback" not in r.stderr and took < 60
    hpnlab_lab.wait_healthy(60)


def test_capture_never_overwrites_an_existing_file(hpnlab_lab, tmp_path):
    out = tmp_path / "x.pcap"
    out.write_text("mine")
    r = hpnlab("capture", "s0r0a", "h0p0", "--out", str(out), "--duration", "0.5", "--lab", hpnlab_lab.name,
               check=False)
    assert r.returncode == 2 and "--force" in r.stderr and out.read_text() == "mine"


def test_a_foreign_frr_directory_is_never_adopted(hpnlab_lab, tmp_path):
    foreign = Path("/var/run/frr/relx-agg0-0")
    foreign.mkdir(parents=True)
    (foreign / "keep").write_text("not hpnlab's")
    try:
        spec = tmp_path / "relx.yml"
        spec.write_text("name: relx\nsegments: 1\nrails: 1\naggs_per_plane: 1\n")
        r = hpnlab("up", str(spec), check=False)
        assert r.returncode == 1 and "already exists and is not this lab's" in r.stderr, r.stderr
        assert (foreign / "keep").read_text() == "not hpnlab's"
        assert leftovers("relx") == [f"frr dir {foreign}"]
    finally:
        (foreign / "keep").unlink()
        foreign.rmdir()


def test_killed_daemons_leave_no_crash_directories(hpnlab_lab, tmp_path):
    """A lab killed with SIGKILL: `down` removes FRR's /var/tmp/frr/<daemon>.<pid> of its daemons too."""
    spec = tmp_path / "relk.yml"
    spec.write_text("name: relk\nsegments: 1\nrails: 1\naggs_per_plane: 1\n")
    started = time.time() - 1
    hpnlab("up", str(spec))
    pids = [int(p.read_text()) for p in Path("/var/run/frr").glob("relk-*/*.pid")]
    for pid in pids:
        subprocess.run(["kill", "-9", str(pid)])
    hpnlab("down", "--lab", "relk")
    # only this lab's: a directory from an earlier daemon that had the same PID is older
    assert [p for pid in pids for p in Path("/var/tmp/frr").glob(f"*.{pid}") if p.stat().st_mtime >= started] == []
    assert leftovers("relk") == []


def test_down_finds_a_daemon_no_namespace_or_pid_file_leads_to(hpnlab_lab, tmp_path):
    """What a teardown racing a forking daemon left (seen in the sweep: a daemon forked after the rollback
    had listed the namespace): found by its pathspace name, never another lab's daemon."""
    spec = tmp_path / "relo.yml"
    spec.write_text("name: relo\nsegments: 1\nrails: 1\naggs_per_plane: 1\n")
    hpnlab("up", str(spec))
    pidfile = Path("/var/run/frr/relo-s0r0a/bgpd.pid")
    pid = int(pidfile.read_text())
    pidfile.unlink()
    subprocess.run(["ip", "netns", "del", "relo-s0r0a"], check=True)  # the daemon lives on, unnamed
    other = int(Path(f"/var/run/frr/{hpnlab_lab.name}-s0r0a/bgpd.pid").read_text())
    hpnlab("down", "--lab", "relo")
    assert not pid_alive(pid) and leftovers("relo") == []  # (a zombie until PID 1 reaps it is gone)
    assert pid_alive(other)  # the module's lab keeps its own
