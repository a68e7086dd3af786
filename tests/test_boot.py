"""A node's boot (hpnlab.node.agents.boot) against containerlab's order of making a link end: created in the root
namespace under a random name, moved into the node, renamed, given its MAC, set up (containerlab v0.79.0
links/link_veth.go, links/link.go SetNameMACAndUpInterface). Boot must not start on an interface before
containerlab's last step: enslaving a port to a bond before containerlab's "set up" fails."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.lib.labs import _need_lab_machine

NS = "hpnbootrace-n1"
STEP = 0.6  # seconds between containerlab's steps: the window a boot that looks only for the name falls into


def ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


@pytest.mark.root
def test_boot_waits_until_containerlab_has_set_each_interface_up(tmp_path):
    _need_lab_machine()
    cfg = {"name": "n1", "interfaces": [{"name": "h0p0", "mac": "02:00:00:be:00:01"}]}
    waiter = ("import json, sys, time\nfrom pathlib import Path\nfrom hpnlab.node.agents.boot import Boot\n"
              "b = Boot(json.loads(sys.argv[1]), run=Path(sys.argv[2]))\nb.wait_interfaces()\n"
              "print(time.time(), Path('/sys/class/net/h0p0/address').read_text().strip())\n")
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    ip("netns", "add", NS)
    try:
        p = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", waiter, json.dumps(cfg), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        ip("link", "add", "clab-br0a", "mtu", "9500", "type", "veth", "peer", "name", "clab-br0b", "mtu", "9500")
        ip("link", "set", "clab-br0a", "netns", NS)
        time.sleep(STEP)
        ip("-n", NS, "link", "set", "clab-br0a", "name", "h0p0")
        time.sleep(STEP)
        ip("-n", NS, "link", "set", "h0p0", "address", cfg["interfaces"][0]["mac"])
        time.sleep(STEP)
        t_up = time.time()
        ip("-n", NS, "link", "set", "h0p0", "up")
        out, _ = p.communicate(timeout=30)
        t_done, mac = out.split()
        assert float(t_done) >= t_up, f"boot went on {t_up - float(t_done):.2f} s before containerlab set the link up"
        assert mac == cfg["interfaces"][0]["mac"]
        report = json.loads((tmp_path / "boot.json").read_text())
        assert report["steps"][-1]["step"] == "1 interfaces present and up"
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        subprocess.run(["ip", "link", "del", "clab-br0b"], capture_output=True)


@pytest.mark.root
def test_a_sysctl_the_kernel_lacks_is_left_out_and_reported_not_fatal(tmp_path):
    """What a container on Debian 12's 6.1 meets (no net.ipv4.fib_multipath_hash_seed): boot sets every
    other sysctl, records what it left out in boot.json, and goes on. A key no kernel has stands in for
    the seed here, in a throw-away network namespace."""
    _need_lab_machine()
    missing = "net.ipv4.hpnlab_test_no_such_key"
    cfg = {"name": "n1", "role": "agg", "interfaces": [],
           "sysctls": {"net.ipv4.ip_forward": 1, missing: 7}}
    code = ("import json, sys\nfrom pathlib import Path\nfrom hpnlab.node import plan\nfrom hpnlab.node.agents.boot import Boot\n"
            f"plan.OPTIONAL_SYSCTLS = {{**plan.OPTIONAL_SYSCTLS, {missing!r}: 'test'}}\n"
            "b = Boot(json.loads(sys.argv[1]), run=Path(sys.argv[2]))\nb.sysctls()\n"
            "print(open('/proc/sys/net/ipv4/ip_forward').read().strip())\n")
    r = subprocess.run(["unshare", "-n", sys.executable, "-c", code, json.dumps(cfg), str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-1500:]
    assert r.stdout.strip() == "1"  # the others were set
    report = json.loads((tmp_path / "boot.json").read_text())
    assert report["kernel_lacks"] == [missing] and "lacks" in report["steps"][-1]["step"]


@pytest.mark.root
def test_a_container_caps_gso_on_the_links_containerlab_made(tmp_path):
    """containerlab makes the veths (the kernel's GSO default, 64 KB per packet); the node's boot caps each
    at one segment with the rest of its ip -batch plan (hpnlab.node.plan.offload_lines), so impairments in
    a containerlab lab act on MTU frames as in a lab of namespaces."""
    _need_lab_machine()
    cfg = {"name": "n1", "role": "agg", "router_id": "10.255.0.9", "sysctls": {}, "fabric_ifaces": ["s0r0a"],
           "interfaces": [{"name": "s0r0a", "mac": "02:00:00:be:00:02"}]}
    code = ("import json, sys\nfrom pathlib import Path\nfrom hpnlab.node.agents.boot import Boot\n"
            "b = Boot(json.loads(sys.argv[1]), run=Path(sys.argv[2]))\nb.set_macs()\nb.configure('userspace')\n")
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    ip("netns", "add", NS)
    try:
        ip("link", "add", "clab-br0a", "mtu", "9500", "type", "veth", "peer", "name", "clab-br0b", "mtu", "9500")
        ip("link", "set", "clab-br0a", "netns", NS)
        ip("-n", NS, "link", "set", "clab-br0a", "name", "s0r0a")
        before = json.loads(subprocess.run(["ip", "-n", NS, "-d", "-j", "link", "show", "s0r0a"], check=True,
                                           capture_output=True, text=True).stdout)[0]
        assert before["gso_max_segs"] > 1
        r = subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", code, json.dumps(cfg), str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-1500:]
        after = json.loads(subprocess.run(["ip", "-n", NS, "-d", "-j", "link", "show", "s0r0a"], check=True,
                                          capture_output=True, text=True).stdout)[0]
        assert after["gso_max_segs"] == 1 and after["mtu"] == 1500 and "UP" in after["flags"]
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        subprocess.run(["ip", "link", "del", "clab-br0b"], capture_output=True)
