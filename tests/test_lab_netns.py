"""The lab on network namespaces, for real: FRR, agents, and each HPN mechanism observed on the wire
from outside the agents (tcpdump captures decoded by scapy, scapy-crafted ARP, kernel FIBs)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.lib.labs import (HPN, VMAC, _need_lab_machine, hpnlab, leftovers, nsexec, owned_lab,  # noqa: F401
                             poll, routes)

# The default lab comes from hpnlab's own pytest plugin (the hpnlab_lab fixture), named as the CLI names it.
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name="hpn")]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    _need_lab_machine()
    assert all(c["ok"] for c in hpnlab_lab.verify())
    yield hpnlab_lab.name
    hpnlab_lab.down()
    assert leftovers(hpnlab_lab.name) == []


def capture(lab, node, iface, bpf, count, timeout=6) -> list:
    from scapy.utils import rdpcap

    pcap = Path(f"/tmp/hpnlab-test-{lab}-{node}-{iface}.pcap")
    try:
        nsexec(lab, node, "timeout", str(timeout), "tcpdump", "-i", iface, "-c", str(count), "-w", str(pcap),
               "-U", bpf, timeout=timeout + 5)
        return list(rdpcap(str(pcap))) if pcap.exists() else []
    finally:
        pcap.unlink(missing_ok=True)


# --- mechanisms on the wire ---------------------------------------------------------------------------
def test_lacpdus_carry_virtual_mac_equal_keys_offset_ports(lab):
    from scapy.contrib.lacp import LACP

    got = {}
    for iface in ("r0p0", "r0p1"):
        pkts = capture(lab, "s0h1", iface, "ether proto 0x8809 and not ether src 02:00:00:00:00:02", 2)
        tor_pdus = [p[LACP] for p in pkts if LACP in p]
        assert tor_pdus, f"no LACPDU from the ToR on {iface}"
        got[iface] = tor_pdus[-1]
    a, b = got["r0p0"], got["r0p1"]
    assert a.actor_system == b.actor_system == VMAC
    assert a.actor_key == b.actor_key
    # s0h1 is host index 1 -> physical port p = 2 on both ToRs; offsets 300 (a) and 600 (b)
    assert (a.actor_port_number, b.actor_port_number) == (302, 602)
    assert a.actor_state & 0x38 == 0x38 and b.actor_state & 0x38 == 0x38  # sync, collecting, distributing


ARP_PROBE = """
import sys
from scapy.all import ARP, Ether, srp, conf
conf.verb = 0
iface, src_mac, src_ip, dst_ip = sys.argv[1:5]
ans, _ = srp(Ether(src=src_mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=src_mac, psrc=src_ip, pdst=dst_ip),
             iface=iface, timeout=2, retry=1)
print(" ".join(r[ARP].hwsrc for _, r in ans))
"""


def test_arp_proxy_answers_with_virtual_mac_and_nothing_floods(lab):
    # Watch the other host's ports while s0h0 asks for s0h1's address.
    watchers = [subprocess.Popen(["ip", "netns", "exec", f"{lab}-s0h1", "timeout", "4", "tcpdump", "-n", "-l",
                                  "-i", i, "arp and arp[14:4] = 0x0a000002"],  # ARP whose sender is 10.0.0.2
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for i in ("r0p0", "r0p1")]
    time.sleep(0.5)
    mac = "02:00:00:00:00:00"  # s0h0 rail 0 NIC
    r = nsexec(lab, "s0h0", sys.executable, "-c", ARP_PROBE, "r0p0", mac, "10.0.0.2", "10.0.0.3", timeout=20)
    assert r.stdout.split() and set(r.stdout.split()) == {VMAC}, r.stdout + r.stderr
    seen = "".join(w.communicate(timeout=10)[0] for w in watchers)
    assert "10.0.0.3" not in seen, f"host s0h1 saw s0h0's ARP request:\n{seen}"


def test_host_route_follows_arp_and_link(lab):
    """Neighbour flushed -> /32 gone from plane 0; host ARPs -> back; link down -> gone; up -> back."""
    host_ip = "10.0.0.3/32"  # s0h1 rail 0, port 0 on s0r0a (plane 0)
    assert host_ip.split("/")[0] in routes(lab, "agg0-0")
    # The host re-announces itself every second: with its ARP let in, the ToR relearned it as soon as
    # 50 ms after the flush and the withdrawal was over before a poll could see it. Held off here.
    subprocess.run(["ip", "netns", "exec", f"{lab}-s0r0a", "nft", "-f", "-"], check=True, text=True, input=(
        "table netdev hpntest_arp {\n chain in { type filter hook ingress device h1p0 priority 0; policy accept;\n"
        "  ether type arp drop\n }\n}\n"))
    try:
        nsexec(lab, "s0r0a", "ip", "neigh", "flush", "dev", "h1p0", check=True)
        assert poll(lambda: "10.0.0.3" not in routes(lab, "agg0-0")), "/32 not withdrawn after neighbour flush"
        assert "10.0.0.3" in routes(lab, "agg1-0"), "plane 1 keeps it via s0r0b"
    finally:
        nsexec(lab, "s0r0a", "nft", "delete", "table", "netdev", "hpntest_arp", check=True)
    nsexec(lab, "s0h1", sys.executable, "-c", ARP_PROBE, "r0p0", "02:00:00:00:00:02", "10.0.0.3", "10.0.0.1")
    assert poll(lambda: "10.0.0.3" in routes(lab, "agg0-0")), "/32 not advertised after the host ARPed"
    nsexec(lab, "s0h1", "ip", "link", "set", "r0p0", "down", check=True)
    try:
        assert poll(lambda: "10.0.0.3" not in routes(lab, "agg0-0"), timeout=3), "/32 not withdrawn on link down"
        assert "10.0.0.0/24" in routes(lab, "agg0-0"), "the set's subnet stays"
        host_routes = nsexec(lab, "s0h1", "ip", "route", "show", "10.0.2.0/24").stdout
        assert "r0p0" not in host_routes and "r0p1" in host_routes, host_routes
    finally:
        nsexec(lab, "s0h1", "ip", "link", "set", "r0p0", "up", check=True)
    assert poll(lambda: "10.0.0.3" in routes(lab, "agg0-0"), timeout=8), "/32 not back after link up"


def test_status_and_exec(lab):
    r = hpnlab("status", "--json", "--lab", lab)
    st = json.loads(r.stdout)
    assert st["healthy"] and len(st["nodes"]) == 16
    s1h0 = next(n for n in st["nodes"] if n["node"] == "s1h0")
    assert [(a["rail"], a["ip"]) for a in s1h0["nics"]] == [(0, "10.0.2.2"), (1, "10.0.3.2")]
    assert [s["subnet"] for s in st["subnets"]] == ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]
    for n in st["nodes"]:  # the address status shows is the one the host's port holds
        for a in n.get("nics", []):
            assert f" {a['ip']}/" in nsexec(lab, n["node"], "ip", "-br", "addr").stdout, (n["node"], a)
    table = hpnlab("status", "--lab", lab).stdout
    assert "r0 10.0.2.2, r1 10.0.3.2" in table and "segment 1 rail 0: 10.0.2.0/24 gateway 10.0.2.1" in table
    r = hpnlab("exec", "--lab", lab, "s0r0a", "--", "vtysh", "-c", "show bgp summary json")
    via_vtysh = json.loads(r.stdout)["ipv4Unicast"]
    assert via_vtysh["peerCount"] == 2
    # verify asks bgpd over its vty socket (hpnlab.machine.vty), not through a vtysh process: the same answer
    from hpnlab.lifecycle.orchestrate import open_lab

    rt, _cfgs = open_lab(lab)
    direct = rt.daemon_json("s0r0a", "bgpd", "show bgp summary json")["ipv4Unicast"]
    assert {p: v["state"] for p, v in direct["peers"].items()} == \
        {p: v["state"] for p, v in via_vtysh["peers"].items()} == {"agg0-0": "Established", "agg0-1": "Established"}
    r = hpnlab("exec", "--lab", lab, "nosuch", "--", "true", check=False)
    assert r.returncode == 2 and "nosuch" in r.stderr


def test_fail_watch_shows_the_outage_with_times_and_the_lab_back(lab):
    r = hpnlab("fail", "link-down", "s0h0", "r0p0", "--for", "3", "--watch", "--lab", lab, timeout=90)
    clock = r"\d\d:\d\d:\d\d\.\d{3}"
    assert re.search(rf"applied: link-down s0h0:r0p0 at {clock}", r.stderr), r.stderr
    assert re.search(rf"reverted: link-down s0h0:r0p0 at {clock}, 3\.\d\d s after applied", r.stderr), r.stderr
    lines = r.stdout.splitlines()
    polls = [ln for ln in lines if re.match(rf"{clock} \+ *\d+\.\d s  ", ln)]
    assert len(polls) >= 3, r.stdout
    # s0h0's port to s0r0a went down: that ToR lost the host's LACP member and its /32, and got them back
    assert any("s0r0a" in ln and "-> 1/2 ports C/D" in ln for ln in polls), r.stdout
    assert any("host routes s0r0a 2 -> 1" in ln for ln in polls), r.stdout
    assert lines[-1].startswith("back to the state before the fault"), r.stdout


def test_the_aggs_opened_every_tor_session_and_the_tors_advertise_again(lab):
    """The start order of hpnlab.runtime.base.Runtime.open_fabric, as it left the lab: each ToR session was
    opened by its agg (the ToR's end is port 179), none was reset on the way up, and no ToR still holds
    back its Router Advertisements."""
    from hpnlab.machine.nodesetup import RA_HOLD_TABLE
    from hpnlab.lifecycle.orchestrate import open_lab

    rt, cfgs = open_lab(lab)
    tors = [n for n, c in cfgs.items() if c.role == "tor"]
    for tor in tors:
        peers = {p: v for p, v in rt.daemon_json(tor, "bgpd", "show bgp neighbors json").items() if isinstance(v, dict)}
        assert peers and all(v["bgpState"] == "Established" for v in peers.values()), tor
        assert {p: v["portLocal"] for p, v in peers.items()} == {p: 179 for p in peers}, tor
        assert {p: v["connectionsEstablished"] for p, v in peers.items()} == {p: 1 for p in peers}, tor
        tables = nsexec(lab, tor, "nft", "list", "tables").stdout
        assert RA_HOLD_TABLE not in tables, tor


def test_every_prefix_a_tor_sends_its_agg_keeps(lab):
    """A ToR announces to its aggs only what it originates (templates/frr/tor.conf.j2 says why): whatever it
    sent an agg, the agg accepted; without the filter a ToR also sends every route it learnt from one agg to
    the others, which they drop for their own AS in its path."""
    from hpnlab.lifecycle.orchestrate import open_lab

    rt, cfgs = open_lab(lab)

    def sessions(node: str) -> dict[str, dict]:  # peer's hostname -> its row of the summary
        peers = (rt.daemon_json(node, "bgpd", "show bgp ipv4 unicast summary json") or {}).get("peers", {})
        return {v["hostname"]: v for v in peers.values()}

    aggs = {n: sessions(n) for n, c in cfgs.items() if c.role == "agg"}
    for tor in [n for n, c in cfgs.items() if c.role == "tor"]:
        sent = {agg: row["pfxSnt"] for agg, row in sessions(tor).items()}
        assert sent and all(n > 0 for n in sent.values()), (tor, sent)
        kept = {agg: aggs[agg][tor]["pfxRcd"] for agg in sent}
        assert kept == sent, tor


def test_hosts_run_the_kernels_tcp_buffers_not_the_root_namespaces(lab):
    """A new namespace copies the root's tcp_rmem/tcp_wmem (another tool may have raised them); each host sets
    the kernel's defaults itself, and verify reads them back: a host changed behind the lab's back is named."""
    from hpnlab.model import netdefaults

    for node in ("s0h0", "s1h1"):
        for key, want in netdefaults.HOST_TCP_BUFFERS.items():
            have = nsexec(lab, node, "sysctl", "-n", key, check=True).stdout
            assert netdefaults.normalise(have) == want, (node, key, have)
    key = "net.ipv4.tcp_wmem"
    nsexec(lab, "s1h1", "sysctl", "-w", f"{key}=10240 87380 16777216", check=True)
    try:
        r = hpnlab("verify", "--json", check=False)
        bad = {c["name"]: c["detail"] for c in json.loads(r.stdout) if not c["ok"]}
        assert r.returncode == 1 and list(bad) == ["config s1h1"], bad
        assert key in bad["config s1h1"] and "10240 87380 16777216" in bad["config s1h1"]
    finally:
        nsexec(lab, "s1h1", "sysctl", "-w", f"{key}={netdefaults.HOST_TCP_BUFFERS[key]}", check=True)
    assert all(c["ok"] for c in json.loads(hpnlab("verify", "--json").stdout))


def test_up_refuses_running_lab(lab):
    r = hpnlab("up", check=False)
    assert r.returncode == 1 and "already running" in r.stderr and "Traceback" not in r.stderr


def test_dead_agent_is_reported(lab):
    state = json.loads(Path(f"/run/hpnlab/{lab}/state.json").read_text())
    pid = state["agents"]["s1h1"]
    os.kill(pid, signal.SIGKILL)

    def reported():  # a dying process passes through D state; its heartbeat goes stale within 3 s anyway
        r = hpnlab("verify", "--json", check=False)
        bad = [c for c in json.loads(r.stdout) if not c["ok"]]
        return r.returncode == 1 and any(c["name"] == "agent s1h1" for c in bad)

    assert poll(reported, timeout=10, interval=0.5)
    assert hpnlab("status", check=False).returncode == 1
    # a router with one daemon gone is unhealthy too (counts, not "any daemon alive")
    os.kill(int(Path(f"/var/run/frr/{lab}-agg0-1/bfdd.pid").read_text()), signal.SIGTERM)
    node = lambda: next(n for n in json.loads(hpnlab("status", "--json", check=False).stdout)["nodes"]
                        if n["node"] == "agg0-1")
    assert poll(lambda: node()["frr"] == "2/3 daemons", timeout=5, interval=0.2)
    assert node()["ok"] is False


# --- lifecycle ------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["single-tor.yml", "clos.yml"])
def test_baselines_up_verify_down_beside_default(lab, spec):
    """Each baseline comes up and verifies while the default lab runs: two labs side by side."""
    name = {"single-tor.yml": "single", "clos.yml": "clos"}[spec]
    hpnlab("down", "--lab", name, check=False)
    try:
        res = json.loads(hpnlab("up", str(EXAMPLES / spec), "--json").stdout)
        assert res["ok"]
        checks = json.loads(hpnlab("verify", "--lab", name, "--json").stdout)
        assert all(c["ok"] for c in checks) and any(c["name"].startswith("reach") for c in checks)
    finally:
        hpnlab("down", "--lab", name)
    assert leftovers(name) == []
    assert leftovers(lab) == [] or Path(f"/run/hpnlab/{lab}").exists()  # the default lab is untouched


def test_foreign_namespace_is_never_touched():
    _need_lab_machine()
    subprocess.run(["ip", "netns", "add", "hpnx-agg0-0"], check=True)
    try:
        spec = Path("/tmp/hpnlab-test-hpnx.yml")
        spec.write_text((EXAMPLES / "default.yml").read_text().replace("name: hpn", "name: hpnx"))
        r = hpnlab("up", str(spec), check=False)
        assert r.returncode == 1 and "already exists" in r.stderr
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "hpnx-agg0-0" in ns and "hpnx-s0h0" not in ns
        assert not Path("/run/hpnlab/hpnx").exists()
    finally:
        subprocess.run(["ip", "netns", "del", "hpnx-agg0-0"])


def test_ctrl_c_during_up_rolls_back():
    _need_lab_machine()
    spec = Path("/tmp/hpnlab-test-intr.yml")
    spec.write_text((EXAMPLES / "default.yml").read_text().replace("name: hpn", "name: intr"))
    p = subprocess.Popen([*HPN, "up", str(spec)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    for line in p.stderr:
        if "starting" in line and "agents" in line:
            p.send_signal(signal.SIGINT)
            break
    p.communicate(timeout=60)
    assert p.returncode == 130
    assert leftovers("intr") == []


def test_twenty_up_down_cycles_leave_nothing():
    _need_lab_machine()
    spec = Path("/tmp/hpnlab-test-cyc.yml")
    spec.write_text("name: cyc\nsegments: 1\nhosts_per_segment: 2\nrails: 1\naggs_per_plane: 1\n")
    for i in range(20):
        r = hpnlab("up", str(spec), "--json", check=False)
        assert r.returncode == 0, f"cycle {i}: {r.stderr[-2000:]}"
        # FRR's crash-log directories (killed daemons never remove theirs): named by the PID each daemon
        # started under, which the lab records; down removes those this lab's daemons made, and leaves one
        # a dead process of the same PID left before (FRR does not reuse it)
        state = json.loads(Path("/run/hpnlab/cyc/state.json").read_text())
        crashlogs = [Path("/var/tmp/frr") / f"{k.split('/')[1]}.{pid}" for k, pid in state["frr_launch_pids"].items()]
        assert len(crashlogs) == len(state["frr_pids"]) > 0 and all(d.is_dir() for d in crashlogs), crashlogs
        ours = [d for d in crashlogs if d.stat().st_ctime >= state["started"] - 1]
        assert ours, crashlogs
        hpnlab("down", "--lab", "cyc")
        assert leftovers("cyc") == [], f"cycle {i}"
        assert not any(d.exists() for d in ours), f"cycle {i}: {[d for d in ours if d.exists()]}"
        assert all(d.exists() for d in crashlogs if d not in ours), f"cycle {i}: another's crash log removed"
    assert hpnlab("down", "--lab", "cyc").returncode == 0  # idempotent


def test_damaged_state_is_one_line_and_down_still_removes_the_lab(lab):
    """state.json truncated: status/verify say so in one line; down removes the lab by its names and pid
    files, and leaves the module's running lab alone."""
    _need_lab_machine()
    spec = Path("/tmp/hpnlab-test-dmg.yml")
    spec.write_text("name: dmg\nsegments: 1\nhosts_per_segment: 2\nrails: 1\naggs_per_plane: 1\n")
    hpnlab("down", "--lab", "dmg", check=False)
    hpnlab("up", str(spec), "--json")
    Path("/run/hpnlab/dmg/state.json").write_text('{"lab": "dmg", "netns": [')
    for cmd in ("status", "verify"):
        r = hpnlab(cmd, "--lab", "dmg", check=False)
        lines = [x for x in r.stderr.splitlines() if x.startswith("hpnlab: error:")]
        assert r.returncode == 1 and len(lines) == 1 and "is not valid JSON" in lines[0], r.stderr
        assert "hpnlab down --lab dmg" in lines[0] and "Traceback" not in r.stderr
    r = hpnlab("down", "--lab", "dmg")
    assert "removing what carries the lab's name" in r.stderr
    assert leftovers("dmg") == []
    assert leftovers(lab) == [] or Path(f"/run/hpnlab/{lab}/state.json").exists()
    assert json.loads(hpnlab("status", "--lab", lab, "--json", check=False).stdout)["running"] is True
    r = hpnlab("down", "--lab", "../..", check=False)
    assert r.returncode == 2 and "lowercase letters and digits" in r.stderr


def test_one_reach_prober_per_host_answers_for_every_peer(lab):
    """verify's reachability: one process per host checks all its peers at once (hpnlab.node.programs.reach);
    an address of the lab's subnet that no host holds is reported unreachable, not assumed."""
    r = nsexec(lab, "s0h0", sys.executable, "-m", "hpnlab.node.programs.reach", "--pairs",
               "10.0.0.2:10.0.2.2,10.0.0.2:10.0.0.3,10.0.0.2:10.0.0.250", check=True)
    assert json.loads(r.stdout) == {"10.0.0.2>10.0.2.2": True, "10.0.0.2>10.0.0.3": True,
                                    "10.0.0.2>10.0.0.250": False}
