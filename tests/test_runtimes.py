"""One integration suite, every runtime: the same lab, verify, vtysh, faults, probes and a failover
experiment through ``hpnlab`` on

* ``netns``  - network namespaces (the default; runs wherever the rest of the suite runs);
* ``clab``   - real containerlab + Docker (skips here with the reason; .github/workflows/clab.yml runs it);
* ``docker`` - real Docker containers built from docker/ on a debootstrapped base, with tests/clabsim.py
  standing in for the containerlab CLI, so everything after ``containerlab deploy`` is the real clab
  runtime: FRR and agents inside containers, verify through /run/netns/clab-<lab>-<node>, docker exec.

HPNLAB_TEST_RUNTIME=netns,clab,docker (default: all three) picks which halves run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hpnlab.instrument import lateness
from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, leftovers, poll

pytestmark = pytest.mark.root
RUNTIMES = [r for r in os.environ.get("HPNLAB_TEST_RUNTIME", "netns,clab,docker").split(",") if r]
LAB_NAMES = {"netns": "rtn", "clab": "rtc", "docker": "rtd"}


def _skip(why: str):
    print(f"SKIP: {why}", file=sys.stderr)
    pytest.skip(why)


def _docker_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="session")
def docker_engine():
    """A Docker engine: the running one, or one this session starts (and stops, by PID) itself."""
    if _docker_ok():
        yield "running"
        return
    dockerd = shutil.which("dockerd")
    if not shutil.which("docker") or not dockerd:
        _skip("no Docker engine: docker/dockerd not installed (./bootstrap test installs Debian's docker.io)")
    log = open("/tmp/hpnlab-test-dockerd.log", "w")
    # No bridge and no iptables: the containers here need no Docker network (links are veths), and
    # this engine must leave nothing behind in the machine's root namespace when it stops.
    p = subprocess.Popen([dockerd, "--bridge=none", "--iptables=false"], stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    ok = poll(lambda: p.poll() is None and _docker_ok(), 60, 0.5)
    if not ok:
        p.terminate()
        p.wait(timeout=30)
        tail = Path("/tmp/hpnlab-test-dockerd.log").read_text().strip().splitlines()[-1:]
        _skip(f"the Docker engine did not start here: {tail}")
    yield "started"
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    log.close()


def _build_images(base: str | None) -> None:
    argv = [sys.executable, "-m", "hpnlab.cli", "images", "build"] + (["--base", base] if base else [])
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if r.returncode != 0:
        raise AssertionError(f"hpnlab images build failed:\n{r.stderr[-2000:]}")


def _env_for(runtime: str, docker_engine_fixture, sim_dir: Path) -> dict:
    env = dict(os.environ)
    if runtime == "clab":
        if not shutil.which("containerlab"):
            _skip("containerlab is not installed (it cannot be on these machines); .github/workflows/clab.yml "
                  "runs this half, and the docker half runs the same tests on real containers here")
        docker_engine_fixture()
        _build_images(None)
    elif runtime == "docker":
        docker_engine_fixture()
        from hpnlab.runtime import containers as images

        if not images.image_exists(images.BASE_TAG):
            r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "images", "base"], capture_output=True,
                               text=True, cwd=ROOT, timeout=1200)
            if r.returncode != 0:
                _skip(f"no base image and debootstrap failed: {r.stderr.strip().splitlines()[-1:]}")
        _build_images(images.BASE_TAG)
        sim = sim_dir / "containerlab"  # the stand-in, on PATH for this half only
        sim.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'clabsim.py'} \"$@\"\n")
        sim.chmod(0o755)
        env["PATH"] = f"{sim_dir}:{env['PATH']}"
    return env


def clab_leftovers(lab: str) -> list[str]:
    out = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    out += [f"netns {n}" for n in ns if n.startswith(f"clab-{lab}-")]
    if _docker_ok():
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=containerlab={lab}"], capture_output=True,
                             text=True).stdout.split()
        out += [f"container {i}" for i in ids]
    if Path(f"/run/hpnlab/{lab}").exists():
        out.append(f"state /run/hpnlab/{lab}")
    return out


class Lab:
    def __init__(self, runtime: str, name: str, env: dict):
        self.runtime, self.name, self.env = runtime, name, env

    def hpnlab(self, *args, timeout=240, check=True) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "hpnlab.cli", *args], capture_output=True, text=True, cwd=ROOT,
                           env=self.env, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"[{self.runtime}] hpnlab {' '.join(args)} -> {r.returncode}\n"
                                 f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return r

    def leftovers(self, name: str | None = None) -> list[str]:
        name = name or self.name
        return leftovers(name) if self.runtime == "netns" else clab_leftovers(name)


@pytest.fixture(scope="module", params=RUNTIMES)
def rtlab(request, tmp_path_factory):
    runtime = request.param
    _need_lab_machine()
    env = _env_for(runtime, lambda: request.getfixturevalue("docker_engine"), tmp_path_factory.mktemp("clabsim"))
    name = LAB_NAMES[runtime]
    spec = tmp_path_factory.mktemp("spec") / f"{name}.yml"
    spec.write_text((ROOT / "examples" / "default.yml").read_text().replace("name: hpn", f"name: {name}"))
    lab = Lab(runtime, name, env)
    lab.hpnlab("down", "--lab", name, check=False)
    t0 = time.monotonic()
    r = lab.hpnlab("up", str(spec), "--runtime", runtime if runtime != "docker" else "clab", "--json")
    res = json.loads(r.stdout)
    assert res["ok"] is True
    print(f"[{runtime}] lab up and verified in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    yield lab
    lab.hpnlab("down", "--lab", name)
    assert lab.leftovers() == []


def test_status_is_healthy_with_the_runtime_view(rtlab):
    st = json.loads(rtlab.hpnlab("status", "--lab", rtlab.name, "--json").stdout)
    assert st["healthy"] is True and st["runtime"] == ("netns" if rtlab.runtime == "netns" else "clab")
    if rtlab.runtime != "netns":  # containerlab inspect's view, parsed from its JSON
        assert {n["container"] for n in st["nodes"]} == {"running"}
    routers = [n for n in st["nodes"] if n["role"] != "host"]
    assert routers and all(n["frr"] == "3/3 daemons" for n in routers)


def test_vtysh_and_exec_reach_the_node(rtlab):
    s = json.loads(rtlab.hpnlab("exec", "--lab", rtlab.name, "s0r0a", "--", "vtysh", "-c",
                                "show bgp summary json").stdout)
    peers = s["ipv4Unicast"]["peers"]
    assert len(peers) == 2 and {p["state"] for p in peers.values()} == {"Established"}
    addrs = json.loads(rtlab.hpnlab("exec", "--lab", rtlab.name, "s0h0", "--", "ip", "-j", "-4", "addr").stdout)
    assert "10.0.0.2" in {a["local"] for i in addrs for a in i.get("addr_info", [])}


def test_probe_paths_use_both_tors(rtlab):
    r = rtlab.hpnlab("probe", "paths", "s0h0", "s1h0", "--flows", "24", "--json", "--lab", rtlab.name, timeout=90)
    rows = json.loads(r.stdout)["paths"]
    assert {x["tor"] for x in rows} == {"s0r0a", "s0r0b"}, rows


def test_fault_applies_reverts_and_the_lab_heals(rtlab):
    r = rtlab.hpnlab("fail", "link-down", "s1h0", "r0p1", "--for", "1", "--lab", rtlab.name)
    assert "applied: link-down s1h0:r0p1" in r.stderr and "reverted: link-down s1h0:r0p1" in r.stderr
    healed = poll(lambda: rtlab.hpnlab("verify", "--lab", rtlab.name, check=False).returncode == 0, 60, 1.0)
    assert healed


def test_a_shaped_link_carries_full_size_tcp_segments(rtlab):
    """Every runtime's links are MTU 1500. containerlab makes veths at 9500 unless a link says mtu: (the
    stand-in does too), and tbf's bucket holds two 1514-byte frames: on 9500-byte links every full-size
    TCP segment through a shaped link was dropped and a bulk transfer stalled."""
    lab = rtlab.name
    mtu = rtlab.hpnlab("exec", "--lab", lab, "s0h0", "--", "cat", "/sys/class/net/r0p0/mtu").stdout.strip()
    assert mtu == "1500"
    for port in ("r0p0", "r0p1"):
        rtlab.hpnlab("impair", "--lab", lab, "s0h0", port, "rate=50mbit")
    try:
        rtlab.hpnlab("exec", "--lab", lab, "s1h0", "--", "iperf3", "-s", "-1", "-D", "-p", "5299")
        r = rtlab.hpnlab("exec", "--lab", lab, "s0h0", "--", "iperf3", "-c", "10.0.2.2", "-B", "10.0.0.2", "-p",
                         "5299", "-t", "2", "-J", "--connect-timeout", "3000", timeout=60)
        got = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        rtlab.hpnlab("impair", "--lab", lab, "--clear", "s0h0")
    print(f"[{rtlab.runtime}] TCP through a 50 Mbit/s shaped port: {got:.1f} Mbit/s", file=sys.stderr)
    assert 20 < got <= 55, got


def _upstream_within_bound(up: dict, pps: float) -> bool:
    return up["longest_gap_ms"] < 20 and up["lost_packets"] <= pps * 0.020


def _late_explains(up: dict, emulator: dict) -> bool:
    """The meter's lateness in the fault's window is material to the upstream gap (its own verdict: more than
    max(5 ms, 10 %) of the gap): a failed bound may then be the machine's, not the host agent's."""
    return lateness.verdict(up["longest_gap_ms"], emulator)["flagged"]


def test_an_upstream_miss_is_run_again_only_when_the_machine_was_late():
    up = {"longest_gap_ms": 22.9, "lost_packets": 93}
    assert not _upstream_within_bound(up, 8000)
    assert _late_explains(up, {"late_ms": 40.0})
    assert not _late_explains(up, {"late_ms": 3.0})  # under the 5 ms floor: the miss is the code's


def test_failover_experiment_runs_unchanged(rtlab, tmp_path):
    rt = "clab" if rtlab.runtime == "docker" else rtlab.runtime
    spec = yaml.safe_load((ROOT / "experiments" / "link-failure.yml").read_text())
    pps = next(p["flows"] * p["rate"] for p in spec["probes"] if p["name"] == "upstream")
    # Why attempts: a fresh-clone CI run of the docker half measured a 22.9 ms upstream gap (93 packets) on a
    # machine whose steal and PSI the lateness meter sees. An attempt that misses the bound is run again (at
    # most 3 in all) only when the meter says the emulator was materially late in that fault's window; a miss
    # in a window it calls quiet fails at once.
    for attempt in range(1, 4):
        out = tmp_path / f"attempt{attempt}"
        rtlab.hpnlab("run", "experiments/link-failure.yml", "--variants", "dual-tor-clos", "-n", "1", "--runtime",
                     rt, "--out", str(out), timeout=600)
        res = json.loads((out / "results.json").read_text())
        run = res["variants"]["dual-tor-clos"]["runs"][0]["faults"][0]
        streams, em = run["streams"], run["emulator"]
        up = streams["upstream"]
        print(f"[{rtlab.runtime}] attempt {attempt}: downstream longest gap {streams['downstream']['longest_gap_ms']}"
              f" ms, upstream gap {up['longest_gap_ms']} ms, lost {up['lost_packets']}; emulator late "
              f"{em['late_ms']} ms (steal {em.get('steal_ms')} ms, PSI {em.get('psi_some_ms')} ms)", file=sys.stderr)
        if _upstream_within_bound(up, pps) or not _late_explains(up, em):
            break
    # The host moves upstream traffic at once: what is lost is what it sent to the dead port before its
    # agent saw the carrier fall, never a convergence-sized gap like downstream's. The bound is on the gap;
    # the loss follows from it and the probes' rate (32 flows x 250 packets/s: 160 packets in 20 ms). Seen:
    # 1 packet in a 3.6 ms gap; in a CI run whose CPU was under pressure 90 % of the time, 8 packets (one
    # on each of 8 flows) in a 4.2 ms gap, which an earlier bound of 2 packets failed.
    assert _upstream_within_bound(up, pps), (up, em)
    assert 0 < streams["downstream"]["longest_gap_ms"] < 1000  # BGP withdrawal, bounded
    assert all(s["recovered"] for s in streams.values())
    for i in range(4):  # the experiment's labs are gone
        assert rtlab.leftovers(f"xp{i}") == []


def test_containerlab_deploy_alone_gives_a_lab_attach_finds_healthy(rtlab, tmp_path):
    """The generated topology is a complete lab: 'containerlab deploy -t' and nothing else (each node
    configures itself), then 'hpnlab attach' only records it and verifies it."""
    if rtlab.runtime == "netns":
        _skip("a containerlab topology needs a container runtime (this is the netns half)")
    spec = tmp_path / "rta.yml"
    spec.write_text((ROOT / "examples" / "default.yml").read_text().replace("name: hpn", "name: rta"))
    out = tmp_path / "out"
    rtlab.hpnlab("generate", str(spec), "--out", str(out))
    topo = out / "rta.clab.yml"
    deploy = subprocess.run(["containerlab", "deploy", "-t", str(topo)], capture_output=True, text=True,
                            env=rtlab.env, timeout=600)
    try:
        assert deploy.returncode == 0, deploy.stderr[-2000:]
        res = json.loads(rtlab.hpnlab("attach", str(topo), "--json", timeout=300).stdout)
        assert res["ok"] is True and res["lab"] == "rta"
        boot = json.loads((out / "s0r0a" / "run" / "boot.json").read_text())
        assert boot["done"] and [s["step"] for s in boot["steps"]][-1] == "agent hpnlab.node.agents.tor"
        assert rtlab.hpnlab("verify", "--lab", "rta").returncode == 0
        again = rtlab.hpnlab("attach", str(topo), check=False)
        assert again.returncode == 1 and "already known" in again.stderr
    finally:
        rtlab.hpnlab("down", "--lab", "rta", check=False)
        subprocess.run(["containerlab", "destroy", "-t", str(topo)], capture_output=True, env=rtlab.env, timeout=300)
    assert clab_leftovers("rta") == [] and topo.exists()  # the user's files stay


def test_fare_weights_reach_every_tors_kernel(rtlab, tmp_path):
    """FARE through the whole path of this runtime: the rendered route-maps, the agg's agent started by
    the runtime (the node's own boot, in a container), FRR's link-bandwidth community and the kernel's
    nexthop weights. One uplink runs at half rate, so verify (whose config check holds every ToR's
    weights to FARE's) passes only if the weights are 2:1 where that link is on the path."""
    name = {"netns": "rtfn", "clab": "rtfc", "docker": "rtfd"}[rtlab.runtime]
    spec = tmp_path / f"{name}.yml"
    spec.write_text((ROOT / "examples" / "default.yml").read_text().replace("name: hpn", f"name: {name}")
                    + "links: {uplink: {rate_mbit: 20}, per_link: [{node: s0r0a, iface: agg0-1, rate_mbit: 10}]}\n"
                    + "multipath: {mode: fare}\n")
    rt = "clab" if rtlab.runtime == "docker" else rtlab.runtime
    rtlab.hpnlab("down", "--lab", name, check=False)
    try:
        res = json.loads(rtlab.hpnlab("up", str(spec), "--runtime", rt, "--json").stdout)
        assert res["ok"] is True
        fare_ok = [c for c in res["checks"] if c["name"] == "config s0r0a"]
        assert fare_ok and "FARE weights as prescribed" in fare_ok[0]["detail"], fare_ok
        st = json.loads(rtlab.hpnlab("status", "--lab", name, "--json").stdout)
        agg = {n["node"]: n for n in st["nodes"]}["agg0-1"]
        assert agg["ok"] and agg["fare"].startswith("10-20 Mbit/s"), agg
    finally:
        rtlab.hpnlab("down", "--lab", name, check=False)
    assert rtlab.leftovers(name) == []
